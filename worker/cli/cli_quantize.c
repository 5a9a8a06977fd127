/* cli_quantize.c - `switchboard quantize IN.gguf OUT.gguf TYPE [options]`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/quantize/sb_quantize.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard quantize IN.gguf OUT.gguf TYPE [--threads N] [--imatrix FILE]\n"
            "                            [--pure] [--allow-requantize] [--quiet]\n\n"
            "Quantize an F32/F16/BF16 GGUF model with llama-quantize's per-tensor mixes.\n"
            "Without --imatrix the output is byte for byte what llama-quantize writes.\n"
            "OUT appears only when complete (written to OUT.tmp-XXXXXX, then renamed).\n\n"
            "  -t, --threads N      threads (default 2)\n"
            "  --imatrix FILE       importance matrix from llama-imatrix (GGUF or legacy .dat)\n"
            "  --pure               the TYPE's default type for every tensor (no mix)\n"
            "  --allow-requantize   accept a quantized input (it is dequantized first; worse\n"
            "                       than quantizing the original F16)\n"
            "  --quiet              no per-tensor progress\n\n"
            "TYPE:\n");
    for (size_t i = 0; sb_ftype_at(i); i++)
        fprintf(f, "  %-8s %s\n", sb_ftype_at(i)->name, sb_ftype_at(i)->summary);
}

int sb_cmd_quantize(int argc, char **argv) {
    const char *pos[3] = { 0 };
    int n_pos = 0;
    sb_quant_params p = { .n_threads = 2 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "--pure")) p.pure = 1;
        else if (!strcmp(a, "--allow-requantize")) p.allow_requantize = 1;
        else if (!strcmp(a, "--quiet")) p.quiet = 1;
        else if (!strcmp(a, "--imatrix") && i + 1 < argc) p.imatrix_path = argv[++i];
        else if ((!strcmp(a, "--threads") || !strcmp(a, "-t")) && i + 1 < argc) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || v < 1 || v > 256) {
                fprintf(stderr, "quantize: %s expects an integer in [1, 256]\n", a);
                return SB_EXIT_CONFIG;
            }
            p.n_threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "quantize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return SB_EXIT_CONFIG;
        } else if (n_pos < 3) pos[n_pos++] = a;
        else {
            fprintf(stderr, "quantize: unexpected argument '%s'\n", a);
            return SB_EXIT_CONFIG;
        }
    }
    if (n_pos != 3) { usage(stderr); return SB_EXIT_CONFIG; }
    const sb_ftype_info *ft = sb_ftype_by_name(pos[2]);
    if (!ft) {
        fprintf(stderr, "quantize: unknown TYPE '%s' (see --help)\n", pos[2]);
        return SB_EXIT_CONFIG;
    }
    if (!strcmp(pos[0], pos[1])) {
        fprintf(stderr, "quantize: IN and OUT are the same file\n");
        return SB_EXIT_CONFIG;
    }
    p.ftype = ft->ftype;
    char err[SB_ERR_LEN] = "";
    sb_quant_stats st;
    int rc = sb_quantize_file(pos[0], pos[1], &p, &st, err);
    if (rc) {
        fprintf(stderr, "quantize: %s\n", err[0] ? err : sb_strerror(rc));
        return rc == SB_EUNSUP || rc == SB_EINVAL ? SB_EXIT_CONFIG : SB_EXIT_FAIL;
    }
    const double mib = 1024.0 * 1024.0;
    fprintf(stderr,
            "quantize: %s -> %s (%s): %zu tensors, %zu converted, %zu fallbacks\n"
            "quantize: size %.2f MiB (%.2f bpw) -> %.2f MiB (%.2f bpw) in %.2f s (%.1f MB/s of input, %d threads)\n",
            pos[0], pos[1], ft->name, st.n_tensors, st.n_quantized, st.n_fallback, st.bytes_in / mib,
            st.n_elements ? st.bytes_in * 8.0 / st.n_elements : 0.0, st.bytes_out / mib,
            st.n_elements ? st.bytes_out * 8.0 / st.n_elements : 0.0, st.seconds,
            st.seconds > 0 ? st.bytes_in / 1e6 / st.seconds : 0.0, p.n_threads);
    return SB_EXIT_OK;
}
