/* kb_eval.c - `switchboard kb eval`: recall@1/3/5, MRR and latency of each
 * search mode over labelled questions, per language (a question with any
 * CJK character counts as Chinese). */
#include "kb/kb_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_DEPTH 10           /* MRR counts ranks up to 10 (MRR@10) */
#define MAX_QUESTIONS 100000

typedef struct { char *query, *expected; int zh; } question;

typedef struct {
    int n, r1, r3, r5;
    double rr;
    double *ms;
} tally;

static int load_tsv(const char *path, question **out, size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "kb eval: %s: %s\n", path, strerror(errno)); return SB_EXIT_FAIL; }
    char *line = NULL;
    size_t cap = 0, qcap = 0, lineno = 0;
    ssize_t got;
    int rc = 0;
    *out = NULL;
    *n = 0;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (!got || line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        if (!tab || tab == line || !tab[1] || strchr(tab + 1, '\t')) {
            fprintf(stderr, "kb eval: %s:%zu: expected QUERY<TAB>EXPECTED_SOURCE\n", path, lineno);
            rc = SB_EXIT_CONFIG;
            break;
        }
        *tab = '\0';
        if (*n == qcap) {
            qcap = qcap ? qcap * 2 : 128;
            question *v = qcap <= MAX_QUESTIONS ? sb_realloc(*out, qcap * sizeof *v) : NULL;
            if (!v) { rc = SB_EXIT_FAIL; fprintf(stderr, "kb eval: %s: too many lines\n", path); break; }
            *out = v;
        }
        question *q = &(*out)[(*n)++];
        q->query = sb_strdup(line);
        q->expected = sb_strdup(tab + 1);
        q->zh = 0;
        for (size_t i = 0; line[i];) {
            size_t used;
            q->zh |= kb_is_cjk(kb_cp_at(line, strlen(line), i, &used));
            i += used;
        }
        if (!q->query || !q->expected) rc = SB_EXIT_FAIL;
    }
    free(line);
    fclose(f);
    if (!rc && !*n) { fprintf(stderr, "kb eval: %s: no questions\n", path); rc = SB_EXIT_CONFIG; }
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static void report(const char *mode, const char *lang, tally *t) {
    if (!t->n) return;
    double d = t->n;
    double p50 = pct(t->ms, t->n, 0.5), p95 = pct(t->ms, t->n, 0.95);
    printf("%-8s %-4s %4d  %5.3f  %5.3f  %5.3f  %5.3f  %7.1f  %7.1f\n", mode, lang, t->n, t->r1 / d, t->r3 / d,
           t->r5 / d, t->rr / d, p50, p95);
}

#define MODE_RERANK (SB_KB_HYBRID + 1)  /* hybrid, its top rerank_n reordered by the reranker */
#define MODE_FUSED  (SB_KB_HYBRID + 2)  /* the same judgements, fused with hybrid's ranks */

static const char *eval_mode_name(int mode) {
    return mode == MODE_RERANK ? "hyb+rr" : mode == MODE_FUSED ? "hyb+rrf" : sb_kb_mode_name((sb_kb_mode)mode);
}

static int rank_of(const sb_kb_hit *h, size_t n, const char *expected) {
    for (size_t j = 0; j < n; j++)
        if (!strcmp(h[j].source, expected)) return (int)j + 1;
    return 0;
}

/* One question in one mode: the expected source's rank (0: not in the top
 * EVAL_DEPTH) and the time it took, rerank included. MODE_RERANK also
 * gives MODE_FUSED's rank in *fused (same judgements, other order). */
static int eval_one(sb_kb *kb, const question *q, int mode, const kb_eval_opts *eo, int *rank, int *fused,
                    double *ms) {
    sb_kb_search_opts o = { .mode = mode == MODE_RERANK ? SB_KB_HYBRID : (sb_kb_mode)mode, .top_k = EVAL_DEPTH };
    sb_kb_hit *h;
    size_t nh, nr = 0;
    char err[SB_ERR_LEN];
    double t0 = sb_now_s();
    int rc = sb_kb_search(kb, q->query, strlen(q->query), &o, &h, &nh, err);
    if (!rc && mode == MODE_RERANK)
        rc = sb_kb_rerank(eo->reranker, eo->rerank_prompt, q->query, strlen(q->query), h,
                          nr = SB_MIN(nh, (size_t)eo->rerank_n), err);
    if (rc) {
        fprintf(stderr, "kb eval: %s\n", err);
        return SB_EXIT_FAIL;
    }
    if (nr) {
        sb_kb_hit *c = sb_malloc(nr * sizeof *c);   /* shallow: only reordered */
        if (!c) {
            sb_kb_hits_free(h, nh);
            return SB_EXIT_FAIL;
        }
        memcpy(c, h, nr * sizeof *c);
        sb_kb_rerank_fuse(c, nr);
        int fr = rank_of(c, nr, q->expected);
        *fused = fr ? fr : rank_of(h, nh, q->expected);  /* below the judged ones nothing moves */
        sb_free(c);
        sb_kb_rerank_sort(h, nr);
    }
    *ms = (sb_now_s() - t0) * 1000;
    *rank = rank_of(h, nh, q->expected);
    if (eo->misses && (!*rank || *rank > 5))
        printf("  miss %-6s %s  (want %s, got %s)\n", eval_mode_name(mode), q->query, q->expected,
               nh ? h[0].source : "nothing");
    sb_kb_hits_free(h, nh);
    return 0;
}

static void count(tally *t, const question *q, int rank, double ms) {
    tally *ts[2] = { &t[0], &t[q->zh ? 1 : 2] };
    for (int k = 0; k < 2; k++) {
        tally *x = ts[k];
        x->ms[x->n++] = ms;
        x->r1 += rank == 1;
        x->r3 += rank && rank <= 3;
        x->r5 += rank && rank <= 5;
        x->rr += rank ? 1.0 / rank : 0;
    }
}

/* A mode over every question; MODE_RERANK reports MODE_FUSED too. */
static int eval_mode(sb_kb *kb, const question *qs, size_t n, int mode, const kb_eval_opts *eo) {
    tally t[2][3] = { 0 };                  /* [mode, fused] x [all, zh, en] */
    int rc = 0, modes = mode == MODE_RERANK ? 2 : 1;
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 3; k++)
            if (!(t[m][k].ms = sb_calloc(n, sizeof(double)))) rc = SB_EXIT_FAIL;
    for (size_t i = 0; !rc && i < n; i++) {
        int rank = 0, fused = 0;
        double ms;
        if ((rc = eval_one(kb, &qs[i], mode, eo, &rank, &fused, &ms))) break;
        count(t[0], &qs[i], rank, ms);
        if (modes == 2) count(t[1], &qs[i], fused, ms);
    }
    for (int m = 0; !rc && m < modes; m++) {
        const char *name = eval_mode_name(m ? MODE_FUSED : mode);
        report(name, "all", &t[m][0]);
        report(name, "zh", &t[m][1]);
        report(name, "en", &t[m][2]);
        fflush(stdout);
    }
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 3; k++) sb_free(t[m][k].ms);
    return rc;
}

int kb_eval_run(sb_kb *kb, const char *tsv, const kb_eval_opts *eo) {
    question *qs = NULL;
    size_t n = 0;
    int rc = load_tsv(tsv, &qs, &n);
    int n_zh = 0;
    for (size_t i = 0; !rc && i < n; i++) n_zh += qs[i].zh;
    if (!rc) {
        printf("kb eval: %zu questions (%d zh, %zu en) from %s\n", n, n_zh, n - (size_t)n_zh, tsv);
        printf("%-8s %-4s %4s  %5s  %5s  %5s  %5s  %7s  %7s\n", "mode", "lang", "n", "R@1", "R@3", "R@5", "MRR",
               "p50 ms", "p95 ms");
    }
    for (int mode = SB_KB_BM25; !rc && mode <= SB_KB_HYBRID; mode++) rc = eval_mode(kb, qs, n, mode, eo);
    if (!rc && eo->reranker) rc = eval_mode(kb, qs, n, MODE_RERANK, eo);
    else if (!rc) printf("hyb+rr: not measured (give --rerank-model GGUF)\n");
    for (size_t i = 0; i < n; i++) {
        sb_free(qs[i].query);
        sb_free(qs[i].expected);
    }
    sb_free(qs);
    return rc;
}
