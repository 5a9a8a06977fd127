/* cli_inspect.c - `switchboard inspect FILE`: metadata and tensor table.
 *
 * Exit 0 when the file is valid, 1 when it is not (the message names the
 * field and byte offset), 2 on bad usage.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sb_cmd.h"
#include "sb_common.h"
#include "sb_gguf.h"
#include "sb_kq.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard inspect [--all] [--json-keys] FILE.gguf\n\n"
            "Validate a GGUF file and print its metadata and tensor table.\n\n"
            "  --all         print whole arrays and long strings (default: abbreviated)\n"
            "  --no-tensors  metadata only\n"
            "  -h, --help    this text\n\n"
            "Exit status: 0 valid, 1 invalid or unreadable file (the error names the\n"
            "field and byte offset), 2 usage error.\n");
}

/* Print s with control characters escaped, at most max bytes (0 = all). */
static void print_escaped(sb_str s, size_t max) {
    size_t n = (max && s.len > max) ? max : s.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 32 || c == 127) printf("\\x%02x", c);
        else putchar(c);
    }
    if (n < s.len) printf("…(%zu bytes)", s.len);
}

static void print_array(const sb_gguf_kv *kv, int all) {
    uint64_t show = all ? kv->arr_n : SB_MIN(kv->arr_n, (uint64_t)8);
    printf("[%s × %" PRIu64 "] [", sb_gguf_vtype_name(kv->arr_type), kv->arr_n);
    if (kv->arr_type == SB_GGUF_STRING) {
        sb_str *s = NULL;
        if (sb_gguf_arr_strings(kv, &s, NULL) == 0) {
            for (uint64_t i = 0; i < show; i++) {
                printf("%s\"", i ? ", " : "");
                print_escaped(s[i], all ? 0 : 40);
                putchar('"');
            }
            sb_free(s);
        }
    } else if (kv->arr_type == SB_GGUF_ARRAY) {
        printf("nested arrays");
        show = kv->arr_n;
    } else {
        for (uint64_t i = 0; i < show; i++) {
            if (kv->arr_type == SB_GGUF_F32 || kv->arr_type == SB_GGUF_F64)
                printf("%s%g", i ? ", " : "", sb_gguf_arr_float(kv, i));
            else
                printf("%s%" PRId64, i ? ", " : "", sb_gguf_arr_int(kv, i));
        }
    }
    if (show < kv->arr_n) printf(", …");
    putchar(']');
}

static void print_kv(const sb_gguf_kv *kv, int all) {
    printf("  %-40.*s ", (int)kv->key.len, kv->key.ptr);
    switch (kv->type) {
    case SB_GGUF_STRING:
        putchar('"');
        print_escaped(kv->v.s, all ? 0 : 120);
        putchar('"');
        break;
    case SB_GGUF_ARRAY: print_array(kv, all); break;
    case SB_GGUF_BOOL: printf("%s", kv->v.u ? "true" : "false"); break;
    case SB_GGUF_F32: case SB_GGUF_F64: printf("%g", kv->v.f); break;
    case SB_GGUF_I8: case SB_GGUF_I16: case SB_GGUF_I32: case SB_GGUF_I64:
        printf("%" PRId64, kv->v.i); break;
    default: printf("%" PRIu64, kv->v.u); break;
    }
    putchar('\n');
}

int sb_cmd_inspect(int argc, char **argv) {
    int all = 0, tensors = 1;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--no-tensors")) tensors = 0;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "inspect: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return SB_EXIT_CONFIG;
        } else if (!path) path = argv[i];
        else { fprintf(stderr, "inspect: more than one FILE given\n"); return SB_EXIT_CONFIG; }
    }
    if (!path) { usage(stderr); return SB_EXIT_CONFIG; }

    char err[SB_ERR_LEN];
    sb_gguf *g;
    if (sb_gguf_open(path, &g, err) != 0) {
        fprintf(stderr, "inspect: %s\n", err);
        return SB_EXIT_FAIL;
    }
    const sb_kq_traits *tt = sb_kq_table(SB_KQ_REF);
    printf("file:      %s\n", path);
    printf("version:   %u\n", sb_gguf_version(g));
    printf("size:      %zu bytes\n", sb_gguf_file_size(g));
    printf("alignment: %u, data at byte offset %zu\n", sb_gguf_alignment(g), sb_gguf_data_offset(g));
    printf("metadata:  %zu keys\n", sb_gguf_n_kv(g));
    for (size_t i = 0; i < sb_gguf_n_kv(g); i++) print_kv(sb_gguf_kv_at(g, i), all);

    /* Count parameters and bytes per type: what "Q4_K_M" actually contains. */
    uint64_t n_by_type[SB_TYPE_COUNT] = {0}, bytes_by_type[SB_TYPE_COUNT] = {0}, params = 0;
    printf("tensors:   %zu\n", sb_gguf_n_tensors(g));
    for (size_t i = 0; i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        params += (uint64_t)nel;
        n_by_type[t->type]++;
        bytes_by_type[t->type] += t->nbytes;
        if (!tensors) continue;
        char shape[96];
        int n = snprintf(shape, sizeof shape, "%" PRId64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, " x %" PRId64, t->ne[d]);
        printf("  %4zu %-36.*s %-6s [%s] offset %" PRIu64 " size %zu\n", i, (int)t->name.len, t->name.ptr,
               tt[t->type].name, shape, t->offset, t->nbytes);
    }
    printf("parameters: %" PRIu64 "\n", params);
    for (int ty = 0; ty < SB_TYPE_COUNT; ty++)
        if (n_by_type[ty])
            printf("  %-6s %4" PRIu64 " tensors %12" PRIu64 " bytes\n", tt[ty].name, n_by_type[ty], bytes_by_type[ty]);
    if (params) {
        uint64_t total = 0;
        for (int ty = 0; ty < SB_TYPE_COUNT; ty++) total += bytes_by_type[ty];
        printf("bits per weight: %.2f\n", 8.0 * (double)total / (double)params);
    }
    sb_gguf_close(g);
    return SB_EXIT_OK;
}
