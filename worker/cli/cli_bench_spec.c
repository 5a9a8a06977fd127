/* cli_bench_spec.c - `switchboard bench --lookup N | --draft FILE`: decode
 * speed of one real prompt with and without speculative decoding, runs
 * interleaved (plain, speculative, plain, ...) so that a busy machine slows
 * both alike, greedy, with a check that both give the same text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/engine/sb_engine.h"
#include "worker/engine/sb_spec.h"

typedef struct {
    char *buf;
    size_t len, cap;
} text_buf;

static int collect(void *ud, const char *text, size_t len, int32_t token) {
    (void)token;
    text_buf *b = ud;
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *nb = sb_realloc(b->buf, cap);
        if (!nb) return 1;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, text, len);
    b->len += len;
    b->buf[b->len] = 0;
    return 0;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    text_buf b = { 0 };
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (collect(&b, chunk, n, -1)) break;
    fclose(f);
    return b.buf;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard bench -m MODEL.gguf (--lookup N | --draft FILE [--n-draft N]) --prompt-file F\n"
            "                         [-n 128] [-t T] [-r RUNS] [--spec-exact] [--spec-cost C] [--json]\n\n"
            "Greedy decode speed of the prompt in F (raw text, special tokens parsed: put\n"
            "the chat template in it) without and with speculative decoding, RUNS of\n"
            "each, interleaved, after one warm-up of each; medians, acceptance, and\n"
            "whether the two texts are identical. --spec-cost C: prompt lookup's policy\n"
            "assumes a check of n tokens costs 1 + C(n-1) plain steps instead of timing\n"
            "its passes (reproducible draft counts).\n");
}

/* One greedy generation of the prompt: plain (mode 0: no lookup, no
 * draft) or speculative (mode 1: as go says), its text into t. -1 on
 * failure (logged). */
static int run_mode(sb_engine *e, const int32_t *ids, size_t n_ids, const sb_gen_opts *go, int mode, text_buf *t,
                    sb_gen_result *res) {
    char err[SB_ERR_LEN];
    sb_gen_opts o = *go;
    if (!mode) { o.lookup = 0; o.draft = NULL; }
    t->len = 0;
    o.on_piece = collect;
    o.ud = t;
    /* Both modes from the same numbers: the whole prompt in one batch
     * (prefix reuse would redo its last token alone). */
    sb_engine_reset(e);
    if (sb_engine_generate(e, ids, (int)n_ids, &o, res, err)) { fprintf(stderr, "bench: %s\n", err); return -1; }
    return 0;
}

/* bench --lookup/--draft's command line. */
typedef struct {
    const char *model, *draft, *pfile;
    int n, threads, runs, json;
} spec_args;

/* argv into o and go. -1: go on; else the exit code. */
static int parse_args(int argc, char **argv, spec_args *o, sb_gen_opts *go) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x = 0;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { o->model = v; i++; }
        else if (!strcmp(a, "--draft") && v) { o->draft = v; i++; }
        else if (!strcmp(a, "--prompt-file") && v) { o->pfile = v; i++; }
        else if (!strcmp(a, "--spec-exact")) go->spec_exact = 1;
        else if (!strcmp(a, "--spec-cost") && v) {
            char *end;
            go->spec_cost = strtod(v, &end);
            if (*end || !(go->spec_cost > 0 && go->spec_cost < 10)) { fprintf(stderr, "bench: --spec-cost needs a number in (0, 10)\n"); return SB_EXIT_CONFIG; }
            i++;
        }
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--lookup")) { bad = sb_opt_int("bench", a, v, 1, SB_SPEC_MAX_DRAFT, &x); go->lookup = (int)x; i++; }
        else if (!strcmp(a, "--n-draft")) { bad = sb_opt_int("bench", a, v, 1, SB_SPEC_MAX_DRAFT, &x); go->n_draft = (int)x; i++; }
        else if (!strcmp(a, "-n")) { bad = sb_opt_int("bench", a, v, 1, 1 << 16, &x); o->n = (int)x; i++; }
        else if (!strcmp(a, "-t")) { bad = sb_opt_int("bench", a, v, 1, 256, &x); o->threads = (int)x; i++; }
        else if (!strcmp(a, "-r")) { bad = sb_opt_int("bench", a, v, 1, 1000, &x); o->runs = (int)x; i++; }
        else { fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a); usage(stderr); return SB_EXIT_CONFIG; }
        if (bad) return SB_EXIT_CONFIG;
    }
    if (!o->model || !o->pfile || (!go->lookup == !o->draft)) { usage(stderr); return SB_EXIT_CONFIG; }
    return -1;
}

int sb_cmd_bench_spec(int argc, char **argv) {
    spec_args o = { .n = 128, .threads = 2, .runs = 5 };
    sb_gen_opts go;
    sb_gen_opts_default(&go);
    go.sampling.temp = 0;
    int rc = parse_args(argc, argv, &o, &go);
    if (rc >= 0) return rc;
    const char *model = o.model, *draft = o.draft, *pfile = o.pfile;
    const int n = o.n, threads = o.threads, runs = o.runs, json = o.json;
    go.max_tokens = n;
    char err[SB_ERR_LEN];
    char *prompt = read_file(pfile);
    if (!prompt) { fprintf(stderr, "bench: cannot read %s\n", pfile); return SB_EXIT_FAIL; }
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads;
    sb_engine *e = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    text_buf txt[2] = { { 0 }, { 0 } };
    double *tps = sb_calloc(2 * (size_t)runs, sizeof *tps);
    int same = 1, drafted = 0, accepted = 0;
    rc = SB_EXIT_FAIL;
    if (!tps) goto out;
    if (sb_engine_open(model, &cp, &e, err) ||
        (draft && (sb_engine_open(draft, &cp, &go.draft, err) || sb_engine_check_draft(e, go.draft, err))) ||
        sb_engine_tokenize(e, prompt, strlen(prompt), 1, &ids, &n_ids, err)) {
        fprintf(stderr, "bench: %s\n", err);
        goto out;
    }
    if (draft && !go.n_draft) go.n_draft = 4;
    for (int r = -1; r < runs; r++) {       /* r = -1: warm-up */
        for (int mode = 0; mode < 2; mode++) {
            sb_gen_result res;
            if (run_mode(e, ids, n_ids, &go, mode, &txt[mode], &res)) goto out;
            if (r < 0) continue;
            tps[mode * runs + r] = res.t_gen > 0 ? res.n_gen / res.t_gen : 0;
            if (mode) { drafted += res.n_drafted; accepted += res.n_accepted; }
            if (!json)
                fprintf(stderr, "bench: run %d %s: %d tokens, %.2f t/s%s\n", r + 1, mode ? "spec " : "plain", res.n_gen,
                        tps[mode * runs + r], mode ? "" : "");
        }
        if (txt[0].len != txt[1].len || (txt[0].len && memcmp(txt[0].buf, txt[1].buf, txt[0].len))) same = 0;
    }
    sb_sort_doubles(tps, (size_t)runs);
    sb_sort_doubles(tps + runs, (size_t)runs);
    const double plain = tps[runs / 2], spec = tps[runs + runs / 2];
    if (json)
        printf("{\"model\":\"%s\",\"threads\":%d,\"lookup\":%d,\"draft\":\"%s\",\"n_draft\":%d,\"exact\":%d,\"runs\":%d,"
               "\"tg_tps\":%.3f,\"spec_tps\":%.3f,\"speedup\":%.3f,\"drafted\":%d,\"accepted\":%d,\"identical\":%s}\n",
               model, threads, go.lookup, draft ? draft : "", go.n_draft, go.spec_exact, runs, plain, spec,
               plain > 0 ? spec / plain : 0, drafted, accepted, same ? "true" : "false");
    else
        printf("tg: %.2f t/s   speculative: %.2f t/s   speedup %.2fx   accepted %d of %d drafted   text %s"
               "   (median of %d, %d threads)\n", plain, spec, plain > 0 ? spec / plain : 0, accepted, drafted,
               same ? "identical" : "DIFFERS", runs, threads);
    rc = SB_EXIT_OK;
out:
    sb_free(txt[0].buf);
    sb_free(txt[1].buf);
    sb_free(tps);
    sb_free(ids);
    sb_free(prompt);
    sb_engine_free(go.draft);
    sb_engine_free(e);
    return rc;
}
