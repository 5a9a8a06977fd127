/* cli_bench.c - `switchboard bench`: pp/tg throughput like llama-bench, with
 * the bandwidth probe (--membw), the per-op profile (--profile) and the
 * huge-page report; --lookup/--draft and --parallel hand over to
 * cli_bench_spec.c and cli_bench_batch.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/kernels/sb_kq.h"
#include "worker/cli/sb_bwprobe.h"
#include "worker/engine/sb_model.h"
#include "worker/gguf/sb_gguf.h"
#include "worker/tokenizer/sb_vocab.h"
#include "worker/engine/sb_engine.h"
#include "worker/engine/sb_grammar.h"
#include "common/sb_json.h"       /* sb_jw for --prompts output */
#include "worker/engine/sb_spec.h"

/* ---- bench ------------------------------------------------------------------ */

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: switchboard bench -m MODEL.gguf [-p 512] [-n 128] [-t T] [-r RUNS] [--json]\n\n"
            "Prompt processing (pp: one batch of P tokens) and decode (tg: N tokens one\n"
            "at a time from an empty context) throughput, median of RUNS runs after one\n"
            "warm-up, like llama-bench's pp/tg tests.\n\n"
            "  -p P      prompt tokens (default 512; 0 skips)\n"
            "  -n N      decode tokens (default 128; 0 skips)\n"
            "  -t T      threads (default 2)\n"
            "  -r RUNS   repetitions (default 5)\n"
            "  --kv-f32  F32 KV cache\n"
            "  --membw   probe the memory read bandwidth between windows of 16 decode\n"
            "            tokens (outside the tg timing) and report tg as a fraction of it\n"
            "  --profile time per op kind per token (norms, matmuls, attention, barrier\n"
            "            waits...), summed over layers, for pp and tg; tg then also\n"
            "            takes the greedy argmax of each token's logits (sampling)\n"
            "  --fresh-pages  drop the file's cached pages first (POSIX_FADV_DONTNEED),\n"
            "            so they come back through the mapping, in 2 MiB folios where the\n"
            "            filesystem has them (a file just written or copied sits in 4 KiB\n"
            "            pages; decode then pays a TLB miss per 4 KiB)\n"
            "  --json    one JSON object with pp_tps and tg_tps (medians)\n\n"
            "The report says how much of the file the kernel maps with 2 MiB pages.\n\n"
            "With --lookup N or --draft FILE: speculative against plain decoding on a\n"
            "real prompt (bench --lookup 1 --help). With --parallel 1,2,4,8: several\n"
            "sequences decoding together (bench --parallel 1 --help).\n");
}

/* µs per token of every op kind in the measured runs, pp and tg side by side;
 * wall: the runs' wall time in seconds. */
static void print_profile(const sb_prof *pp, double pp_tok, double pp_wall, const sb_prof *tg, double tg_tok,
                          double tg_wall) {
    const sb_prof *pr[2] = { tg, pp };
    const double tok[2] = { tg_tok, pp_tok }, wall[2] = { tg_wall, pp_wall };
    double sum[2] = { 0, 0 };
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < SB_OP_COUNT; op++) sum[k] += (double)pr[k]->ns[op];
    printf("\nprofile (µs per token, summed over layers; %% of the profiled time)\n");
    printf("%-24s %12s %7s %12s %7s\n", "op", "tg µs/tok", "tg %", "pp µs/tok", "pp %");
    for (int op = 0; op < SB_OP_COUNT; op++) {
        printf("%-24s", sb_op_name(op));
        for (int k = 0; k < 2; k++) {
            const double us = tok[k] > 0 ? (double)pr[k]->ns[op] / 1e3 / tok[k] : 0;
            printf(" %12.1f %6.1f%%", us, sum[k] > 0 ? 100.0 * (double)pr[k]->ns[op] / sum[k] : 0.0);
        }
        printf("\n");
    }
    printf("%-24s", "profiled / wall");
    for (int k = 0; k < 2; k++)
        printf(" %12.1f %6.1f%%", tok[k] > 0 ? sum[k] / 1e3 / tok[k] : 0,
               wall[k] > 0 ? 100.0 * sum[k] / 1e9 / wall[k] : 0.0);
    printf("\n");
}

#define BW_WINDOW 16     /* decode tokens between two bandwidth probes */

/* Bytes of K and V one decode step at position pos reads (F16 or F32 cache). */
static double kv_bytes_at(const sb_hparams *hp, int pos, int kv_f32) {
    const int start = hp->n_swa > 0 ? SB_MAX(0, pos - hp->n_swa + 1) : 0;
    return 2.0 * hp->n_layer * (pos - start + 1) * (double)hp->n_head_kv * hp->head_dim * (kv_f32 ? 4 : 2);
}

/* Interleaved bandwidth windows of the measured tg runs. */
typedef struct {
    double *bw, *frac;          /* per window: probe GB/s, decode bytes/s over it */
    int n;
    double kv_bytes;            /* KV bytes read over all measured tokens */
    long n_tok;
} bw_windows;

/* median, min, max of v[0..n) (sorts v). */
static void spread(double *v, int n, double out[3]);

static void print_bw(const bw_windows *w, size_t weight_bytes, int json) {
    double b[3], f[3];
    spread(w->bw, w->n, b);
    spread(w->frac, w->n, f);
    const double kv = w->n_tok ? w->kv_bytes / (double)w->n_tok : 0;
    if (json)
        printf(",\"bw_windows\":%d,\"bw_gbs\":%.2f,\"bw_gbs_min\":%.2f,\"bw_gbs_max\":%.2f,"
               "\"kv_bytes_per_token\":%.0f,\"bytes_per_token\":%.0f,\"tg_bw_frac\":%.4f,"
               "\"tg_bw_frac_min\":%.4f,\"tg_bw_frac_max\":%.4f", w->n, b[0], b[1], b[2], kv,
               (double)weight_bytes + kv, f[0], f[1], f[2]);
    else
        printf("membw, interleaved (%d windows of %d tokens): median %.1f GB/s (%.1f-%.1f); bytes per token %.1f MB "
               "(weights %.1f + KV %.2f); tg at %.0f%% of the interleaved limit (median of windows; %.0f-%.0f%%)\n",
               w->n, BW_WINDOW, b[0], b[1], b[2], ((double)weight_bytes + kv) / 1e6, (double)weight_bytes / 1e6,
               kv / 1e6, 100 * f[0], 100 * f[1], 100 * f[2]);
}

/* The greedy choice (what the bench's --profile counts as sampling). */
static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static double median(double *v, int n) {
    sb_sort_doubles(v, (size_t)n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void spread(double *v, int n, double out[3]) {
    out[0] = n ? median(v, n) : 0;
    out[1] = n ? v[0] : 0;
    out[2] = n ? v[n - 1] : 0;
}

/* What --profile and --membw collect over the measured runs. */
typedef struct {
    int profile, kv_f32;
    const sb_model *m;
    sb_prof pp, tg;
    double pp_wall, tg_wall;    /* seconds of the measured runs (tg: without the probes) */
    sb_bwprobe *probe;          /* --membw, or NULL */
    bw_windows bw;
} bench_obs;

static int bench_pp(sb_ctx *c, const int32_t *toks, int pp, float *logits, double *pps, bench_obs *o) {
    char err[SB_ERR_LEN];
    sb_ctx_truncate(c, 0);
    if (o && o->profile) sb_ctx_set_profile(c, &o->pp);
    const double t0 = sb_now_s();
    const int rc = sb_ctx_eval(c, toks, pp, logits, 0, err);
    const double dt = sb_now_s() - t0;
    sb_ctx_set_profile(c, NULL);
    if (rc) { fprintf(stderr, "bench: %s\n", err); return -1; }
    *pps = pp / dt;
    if (o) o->pp_wall += dt;
    return 0;
}

/* After decode step i (position i): the window's bytes, and its fraction of
 * the probe taken before it when the window ends. */
static void bw_step(bench_obs *o, int i, int tg, double *w_bytes, double w_t0, double w_gbs) {
    const double kvb = kv_bytes_at(sb_model_hparams(o->m), i, o->kv_f32);
    *w_bytes += (double)sb_model_weight_bytes(o->m) + kvb;
    o->bw.kv_bytes += kvb;
    o->bw.n_tok++;
    if ((i + 1) % BW_WINDOW == 0 || i + 1 == tg) {
        o->bw.bw[o->bw.n] = w_gbs;
        o->bw.frac[o->bw.n++] = *w_bytes / (sb_now_s() - w_t0) / 1e9 / w_gbs;
    }
}

/* --profile's sampling: the greedy argmax of a token's logits, timed. */
static void time_argmax(bench_obs *o, const float *logits) {
    const uint64_t s0 = sb_now_ns();
    volatile int picked = argmax(logits, sb_model_hparams(o->m)->n_vocab);
    (void)picked;
    o->tg.ns[SB_OP_SAMPLE] += sb_now_ns() - s0;
}

static int bench_tg(sb_ctx *c, const int32_t *toks, int n_tok, int tg, float *logits, double *tgs, bench_obs *o) {
    char err[SB_ERR_LEN];
    sb_ctx_truncate(c, 0);
    sb_bwprobe *probe = o ? o->probe : NULL;
    if (o && o->profile) sb_ctx_set_profile(c, &o->tg);
    int32_t t = toks[0];
    double t0 = sb_now_s(), w_t0 = t0, w_gbs = 0, w_bytes = 0, probe_s = 0;
    for (int i = 0; i < tg; i++) {
        if (probe && i % BW_WINDOW == 0) {      /* a window starts: probe, outside the timing */
            const double p0 = sb_now_s();
            w_gbs = sb_bwprobe_window(probe);
            w_t0 = sb_now_s();
            probe_s += w_t0 - p0;
            w_bytes = 0;
        }
        if (sb_ctx_eval(c, &t, 1, logits, 0, err)) {
            sb_ctx_set_profile(c, NULL);
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
        if (probe) bw_step(o, i, tg, &w_bytes, w_t0, w_gbs);
        if (o && o->profile) time_argmax(o, logits);
        t = toks[(i + 1) % n_tok];
    }
    const double dt = sb_now_s() - t0 - probe_s;
    sb_ctx_set_profile(c, NULL);
    *tgs = tg / dt;
    if (o) o->tg_wall += dt;
    return 0;
}

/* One run: pp prompt tokens in one batch, then tg tokens one at a time,
 * each from an empty context; tokens/s of each (0 when skipped). o: what
 * the measured runs collect (NULL for the warm-up). -1 on failure (logged). */
static int bench_run(sb_ctx *c, const int32_t *toks, int n_tok, int pp, int tg, float *logits, double *pps,
                     double *tgs, bench_obs *o) {
    if (pp > 0 && bench_pp(c, toks, pp, logits, pps, o)) return -1;
    if (tg > 0 && bench_tg(c, toks, n_tok, tg, logits, tgs, o)) return -1;
    return 0;
}

/* With membw, a probe on `threads` threads over a 1 GiB buffer (twice the
 * L3 of the machines measured) and room for n_windows windows. */
static int bench_obs_init(bench_obs *o, const sb_model *m, int kv_f32, int membw, int threads, int n_windows) {
    o->m = m;
    o->kv_f32 = kv_f32;
    if (!membw) return 0;
    o->bw.bw = sb_calloc((size_t)n_windows, sizeof(double));
    o->bw.frac = sb_calloc((size_t)n_windows, sizeof(double));
    if (!o->bw.bw || !o->bw.frac) return SB_ENOMEM;
    return sb_bwprobe_new(threads, 1ul << 30, &o->probe);
}

/* --fresh-pages: the page cache lets go of the file's clean pages that no
 * process maps, so the run reads them back through its own mapping. */
static int drop_cached_pages(const char *path, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc ? sb_seterr(err, SB_EIO, "%s: posix_fadvise: %s", path, strerror(rc)) : 0;
}

/* The results line (or JSON object), then what --membw and --profile found. */
static void bench_report(const char *model, const sb_model *m, int threads, int pp, int tg, int runs, double pp_med,
                         double tg_med, int json, const bench_obs *o) {
    const sb_gguf *g = sb_model_gguf(m);
    const double huge = (double)sb_gguf_huge_bytes(g) / (double)sb_gguf_file_size(g);
    if (json) {
        /* tuned: a tuning profile's plan is in force (docs/KERNELS.md, "Tuning") */
        printf("{\"model\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"tuned\":%s,\"pp\":%d,\"tg\":%d,\"runs\":%d,"
               "\"pp_tps\":%.3f,\"tg_tps\":%.3f,\"weight_bytes\":%zu,\"huge_page_frac\":%.3f",
               model, threads, sb_kq_level_name(sb_kq_best_level()),
               sb_kq_engine_kernels(sb_kq_best_level())->tuned ? "true" : "false", pp, tg, runs, pp_med, tg_med,
               sb_model_weight_bytes(m), huge);
        if (o->probe) print_bw(&o->bw, sb_model_weight_bytes(m), 1);
        printf("}\n");
        return;
    }
    printf("pp%d: %.2f tokens/s   tg%d: %.2f tokens/s   (median of %d, %d threads)\n", pp, pp_med, tg, tg_med, runs,
           threads);
    printf("file mapped with 2 MiB pages: %.0f %%%s\n", 100 * huge,
           huge < 0.5 ? " (bench --fresh-pages re-reads it through the mapping)" : "");
    if (o->probe) print_bw(&o->bw, sb_model_weight_bytes(m), 0);
    if (o->profile) print_profile(&o->pp, (double)pp * runs, o->pp_wall, &o->tg, (double)tg * runs, o->tg_wall);
}

int sb_cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)      /* speculative decoding measures real text: worker/cli/cli_bench_spec.c */
        if (!strcmp(argv[i], "--lookup") || !strcmp(argv[i], "--draft")) return sb_cmd_bench_spec(argc, argv);
    for (int i = 1; i < argc; i++)      /* several sequences at once: worker/cli/cli_bench_batch.c */
        if (!strcmp(argv[i], "--parallel") || !strcmp(argv[i], "-npl")) return sb_cmd_bench_batch(argc, argv);
    const char *model = NULL;
    int pp = 512, tg = 128, threads = 2, runs = 5, json = 0, kv_f32 = 0, membw = 0, fresh = 0;
    bench_obs obs = { 0 };
    int64_t x;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bench_usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { model = v; i++; }
        else if (!strcmp(a, "-p")) { if (sb_opt_int("bench", a, v, 0, 1 << 16, &x)) return SB_EXIT_CONFIG; pp = (int)x; i++; }
        else if (!strcmp(a, "-n")) { if (sb_opt_int("bench", a, v, 0, 1 << 16, &x)) return SB_EXIT_CONFIG; tg = (int)x; i++; }
        else if (!strcmp(a, "-t")) { if (sb_opt_int("bench", a, v, 1, 256, &x)) return SB_EXIT_CONFIG; threads = (int)x; i++; }
        else if (!strcmp(a, "-r")) { if (sb_opt_int("bench", a, v, 1, 1000, &x)) return SB_EXIT_CONFIG; runs = (int)x; i++; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--kv-f32")) kv_f32 = 1;
        else if (!strcmp(a, "--profile")) obs.profile = 1;
        else if (!strcmp(a, "--membw")) membw = 1;
        else if (!strcmp(a, "--fresh-pages")) fresh = 1;
        else { fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a); bench_usage(stderr); return SB_EXIT_CONFIG; }
    }
    if (!model) { bench_usage(stderr); return SB_EXIT_CONFIG; }
    char err[SB_ERR_LEN];
    sb_model *m;
    if (fresh && drop_cached_pages(model, err)) { fprintf(stderr, "bench: %s\n", err); return SB_EXIT_FAIL; }
    if (sb_model_load(model, &m, err)) { fprintf(stderr, "bench: %s\n", err); return SB_EXIT_FAIL; }
    const sb_hparams *hp = sb_model_hparams(m);
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads;
    cp.n_ctx = SB_MAX(pp, tg) + 1;
    cp.n_batch = pp > 0 ? pp : 1;
    cp.kv_f32 = kv_f32;
    sb_ctx *c;
    if (sb_ctx_new(m, &cp, &c, err)) { fprintf(stderr, "bench: %s\n", err); sb_model_free(m); return SB_EXIT_FAIL; }
    int n_tok = SB_MAX(pp, 1);
    int32_t *toks = sb_malloc((size_t)n_tok * sizeof *toks);
    float *logits = sb_malloc((size_t)hp->n_vocab * sizeof(float));
    double *pp_t = sb_calloc((size_t)runs, sizeof(double)), *tg_t = sb_calloc((size_t)runs, sizeof(double));
    int rc = SB_EXIT_FAIL;
    if (!toks || !logits || !pp_t || !tg_t) { fprintf(stderr, "bench: out of memory\n"); goto out; }
    if (bench_obs_init(&obs, m, kv_f32, membw && tg > 0, threads, runs * ((tg + BW_WINDOW - 1) / BW_WINDOW))) {
        fprintf(stderr, "bench: out of memory for the bandwidth probe\n");
        goto out;
    }
    /* Token ids do not change the cost; a fixed LCG keeps runs comparable. */
    uint32_t s = 12345;
    for (int i = 0; i < n_tok; i++) { s = s * 1664525u + 1013904223u; toks[i] = (int32_t)(s % (uint32_t)hp->n_vocab); }
    char desc[256];
    sb_model_describe(m, desc, sizeof desc);
    if (!json) fprintf(stderr, "bench: %s\nbench: %d threads, kernels %s, pp %d, tg %d, %d runs\n", desc, threads,
                       sb_kq_level_name(sb_kq_best_level()), pp, tg, runs);
    for (int r = -1; r < runs; r++) {       /* r = -1: warm-up (page in the weights) */
        double pps = 0, tgs = 0;
        if (bench_run(c, toks, n_tok, pp, tg, logits, &pps, &tgs, r < 0 ? NULL : &obs)) goto out;
        if (r < 0) continue;
        pp_t[r] = pps;
        tg_t[r] = tgs;
        if (!json) fprintf(stderr, "bench: run %d: pp %.2f t/s, tg %.2f t/s\n", r + 1, pps, tgs);
    }
    double pp_med = pp > 0 ? median(pp_t, runs) : 0, tg_med = tg > 0 ? median(tg_t, runs) : 0;
    bench_report(model, m, threads, pp, tg, runs, pp_med, tg_med, json, &obs);
    rc = SB_EXIT_OK;
out:
    sb_free(toks);
    sb_free(logits);
    sb_free(pp_t);
    sb_free(tg_t);
    sb_free(obs.bw.bw);
    sb_free(obs.bw.frac);
    sb_bwprobe_free(obs.probe);
    sb_ctx_free(c);
    sb_model_free(m);
    return rc;
}
