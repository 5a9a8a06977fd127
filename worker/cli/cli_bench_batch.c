/* cli_bench_batch.c - `switchboard bench --parallel 1,2,4,8`: B sequences at
 * once through sb_ctx_eval_parts, as llama.cpp's llama-batched-bench
 * measures them (same columns, so tests/bench can put the two side by
 * side): every sequence prefills P tokens (as many whole prompts per pass
 * as the batch holds), then all decode N tokens together, one token per
 * sequence per pass, each with its logits.
 *
 *   S_PP = B·P / T_PP,  S_TG = B·N / T_TG (aggregate decode),  S = B·(P+N) / T,
 *   ms/tok = T_TG / N (what one sequence waits per token).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/kernels/sb_kq.h"
#include "worker/engine/sb_model.h"

#define MAX_B 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard bench -m MODEL.gguf --parallel 1,2,4,8 [-p 64] [-n 32] [-t T] [-r RUNS]\n"
            "                         [-b BATCH] [--json]\n\n"
            "Batched throughput: for each B, B sequences prefill P tokens each, then\n"
            "decode N tokens each together (one forward pass per step), in a KV pool of\n"
            "exactly the blocks they need. Columns as llama-batched-bench prints them.\n\n"
            "  --parallel L  sequence counts (also -npl), each 1..%d\n"
            "  -p P          prompt tokens per sequence (also -npp; default 64)\n"
            "  -n N          decode tokens per sequence (also -ntg; default 32)\n"
            "  -t T          threads (default 2)\n"
            "  -r RUNS       repetitions per B, times are medians (default 1)\n"
            "  -b BATCH      tokens per forward pass in the prefill (default 512)\n"
            "  --json        one JSON object per B\n", MAX_B);
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_B || (*end && *end != ',')) return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n > 0 && !(s && *s) ? n : -1;
}

static int opt_int(const char *opt, const char *v, int lo, int hi, int *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "bench: %s needs a number in %d..%d\n", opt, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

typedef struct {
    const sb_model *m;
    int threads, pp, tg, n_batch;
    const int32_t *toks;        /* pp + tg fixed ids: the ids do not change the cost */
    float *logits;              /* [MAX_B][n_vocab] */
} bench_cfg;

/* One run at B sequences: prefill and decode times in seconds. */
static int run_once(const bench_cfg *b, int B, double *t_pp, double *t_tg, char *err) {
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = b->threads;
    cp.n_ctx = b->pp + b->tg;
    cp.n_batch = SB_MAX(b->n_batch, B);
    cp.n_seq = B;
    cp.kv_blocks = B * ((cp.n_ctx + SB_KV_BLOCK - 1) / SB_KV_BLOCK);
    sb_ctx *c;
    int rc = sb_ctx_new(b->m, &cp, &c, err);
    if (rc) return rc;
    const size_t nv = (size_t)sb_model_hparams(b->m)->n_vocab;
    int seq[MAX_B] = { 0 }, done[MAX_B] = { 0 };
    for (int i = 1; i < B && !rc; i++) rc = sb_ctx_seq_new(c, &seq[i], err);
    sb_seq_part parts[MAX_B];
    double t0 = sb_now_s();
    for (int next = 0; !rc && next < B;) {     /* prefill: whole prompts (or chunks) filling each pass */
        int n = 0, used = 0;
        for (int i = next; i < B && used < cp.n_batch && n < 32; i++) {
            const int k = SB_MIN(b->pp - done[i], cp.n_batch - used);
            const int last = done[i] + k == b->pp;
            parts[n++] = (sb_seq_part){ seq[i], b->toks + done[i], k, last ? b->logits + (size_t)i * nv : NULL, 0 };
            used += k;
        }
        rc = sb_ctx_eval_parts(c, parts, n, err);
        for (int k = 0; k < n; k++) done[next + k] += parts[k].n;
        while (next < B && done[next] == b->pp) next++;
    }
    *t_pp = sb_now_s() - t0;
    t0 = sb_now_s();
    for (int s = 0; !rc && s < b->tg; s++) {
        for (int i = 0; i < B; i++) parts[i] = (sb_seq_part){ seq[i], b->toks + b->pp + s, 1, b->logits + (size_t)i * nv, 0 };
        rc = sb_ctx_eval_parts(c, parts, B, err);
    }
    *t_tg = sb_now_s() - t0;
    sb_ctx_free(c);
    return rc;
}

int sb_cmd_bench_batch(int argc, char **argv) {
    const char *model = NULL;
    int list[16], n_list = 0, runs = 1, json = 0;
    bench_cfg b = { .threads = 2, .pp = 64, .tg = 32, .n_batch = 512 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { model = v; i++; }
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-npl")) { bad = (n_list = parse_list(v, list, 16)) < 0; i++; }
        else if (!strcmp(a, "-p") || !strcmp(a, "-npp")) { bad = opt_int(a, v, 1, 1 << 16, &b.pp); i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "-ntg")) { bad = opt_int(a, v, 1, 1 << 16, &b.tg); i++; }
        else if (!strcmp(a, "-t")) { bad = opt_int(a, v, 1, 256, &b.threads); i++; }
        else if (!strcmp(a, "-r")) { bad = opt_int(a, v, 1, 1000, &runs); i++; }
        else if (!strcmp(a, "-b")) { bad = opt_int(a, v, 1, 1 << 16, &b.n_batch); i++; }
        else if (!strcmp(a, "--json")) json = 1;
        else { fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a); bad = 1; }
        if (bad) { usage(stderr); return SB_EXIT_CONFIG; }
    }
    if (!model || n_list <= 0) { usage(stderr); return SB_EXIT_CONFIG; }
    char err[SB_ERR_LEN];
    sb_model *m;
    if (sb_model_load(model, &m, err)) { fprintf(stderr, "bench: %s\n", err); return SB_EXIT_FAIL; }
    b.m = m;
    const int nv = sb_model_hparams(m)->n_vocab;
    int32_t *toks = sb_malloc((size_t)(b.pp + b.tg) * sizeof *toks);
    b.logits = sb_malloc((size_t)MAX_B * (size_t)nv * sizeof(float));
    double *tp = sb_calloc((size_t)runs, sizeof(double)), *tt = sb_calloc((size_t)runs, sizeof(double));
    int rc = SB_EXIT_FAIL;
    if (!toks || !b.logits || !tp || !tt) { fprintf(stderr, "bench: out of memory\n"); goto out; }
    uint32_t s = 12345;
    for (int i = 0; i < b.pp + b.tg; i++) { s = s * 1664525u + 1013904223u; toks[i] = (int32_t)(s % (uint32_t)nv); }
    b.toks = toks;
    char desc[256];
    sb_model_describe(m, desc, sizeof desc);
    if (run_once(&b, 1, &tp[0], &tt[0], err)) { fprintf(stderr, "bench: %s\n", err); goto out; }   /* warm-up */
    if (!json) {
        printf("%s, %d threads, kernels %s, batch %d, median of %d\n\n", desc, b.threads,
               sb_kq_level_name(sb_kq_best_level()), b.n_batch, runs);
        printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s | ms/tok/seq |\n");
        printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|------------|\n");
    }
    for (int k = 0; k < n_list; k++) {
        const int B = list[k];
        for (int r = 0; r < runs; r++)
            if (run_once(&b, B, &tp[r], &tt[r], err)) { fprintf(stderr, "bench: B=%d: %s\n", B, err); goto out; }
        sb_sort_doubles(tp, (size_t)runs);
        sb_sort_doubles(tt, (size_t)runs);
        const double t_pp = tp[runs / 2], t_tg = tt[runs / 2], t = t_pp + t_tg;
        const int n_kv = B * (b.pp + b.tg);
        if (json)
            printf("{\"pp\":%d,\"tg\":%d,\"pl\":%d,\"n_kv\":%d,\"t_pp\":%.6f,\"speed_pp\":%.3f,\"t_tg\":%.6f,"
                   "\"speed_tg\":%.3f,\"t\":%.6f,\"speed\":%.3f,\"ms_per_tok\":%.3f,\"threads\":%d}\n",
                   b.pp, b.tg, B, n_kv, t_pp, B * b.pp / t_pp, t_tg, B * b.tg / t_tg, t, n_kv / t,
                   1e3 * t_tg / b.tg, b.threads);
        else
            printf("| %5d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f | %10.2f |\n", b.pp, b.tg,
                   B, n_kv, t_pp, B * b.pp / t_pp, t_tg, B * b.tg / t_tg, t, n_kv / t, 1e3 * t_tg / b.tg);
        fflush(stdout);
    }
    rc = SB_EXIT_OK;
out:
    sb_free(toks);
    sb_free(b.logits);
    sb_free(tp);
    sb_free(tt);
    sb_model_free(m);
    return rc;
}
