/* kb_eval.c - `switchboard kb eval`: recall@1/3/5, MRR and latency of each
 * search mode, and of the reranked ones, over labelled questions, per
 * language (a question with any CJK character counts as Chinese). */
#include "kb/kb_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_json.h"

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
        if (memchr(line, '\0', (size_t)got)) {            /* it would end the query there, silently */
            fprintf(stderr, "kb eval: %s:%zu: a NUL (\\0) in the line\n", path, lineno);
            rc = SB_EXIT_CONFIG;
            break;
        }
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

static void report(const char *mode, const char *lang, tally *t) {
    if (!t->n) return;
    double d = t->n;
    sb_sort_doubles(t->ms, (size_t)t->n);
    double p50 = sb_percentile(t->ms, (size_t)t->n, 0.5), p95 = sb_percentile(t->ms, (size_t)t->n, 0.95);
    printf("%-8s %-4s %4d  %5.3f  %5.3f  %5.3f  %5.3f  %7.1f  %7.1f\n", mode, lang, t->n, t->r1 / d, t->r3 / d,
           t->r5 / d, t->rr / d, p50, p95);
}

/* The modes a reranker adds: each search's top rerank_n judged, ordered by
 * P(yes) alone (rr) or by RRF of the search's rank and P(yes)'s (rrf). */
enum { RR_HYB, RR_HYB_FUSED, RR_VEC, RR_VEC_FUSED, RR_MODES };
static const char *const rr_names[RR_MODES] = { "hyb+rr", "hyb+rrf", "vec+rr", "vec+rrf" };

static int rank_of(const sb_kb_hit *h, size_t n, const char *expected) {
    for (size_t j = 0; j < n; j++)
        if (!strcmp(h[j].source, expected)) return (int)j + 1;
    return 0;
}

/* The depth of every list: MRR@10, or deeper when more passages are judged
 * (a judged passage from below rank 10 can be moved into the top 10). */
static int eval_depth(const kb_eval_opts *eo) {
    return eo->rerank_n > EVAL_DEPTH ? eo->rerank_n : EVAL_DEPTH;
}

static void miss(const kb_eval_opts *eo, const char *mode, const question *q, int rank, const sb_kb_hit *h, size_t n) {
    if (eo->misses && (!rank || rank > 5))
        printf("  miss %-7s %s  (want %s, got %s)\n", mode, q->query, q->expected, n ? h[0].source : "nothing");
}

/* One JSON line per question and mode for offline analysis (tools/kb_rerank_sweep.py):
 * the list in the search's order, with each judged passage's P(yes) and judging time. */
static void dump(const kb_eval_opts *eo, const char *mode, const question *q, double search_ms, const sb_kb_hit *h,
                 size_t n, const double *judge_ms) {
    if (!eo->dump) return;
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "mode"); sb_jw_str(&w, mode);
    sb_jw_key(&w, "lang"); sb_jw_str(&w, q->zh ? "zh" : "en");
    sb_jw_key(&w, "query"); sb_jw_str(&w, q->query);
    sb_jw_key(&w, "expected"); sb_jw_str(&w, q->expected);
    sb_jw_key(&w, "search_ms"); sb_jw_num(&w, search_ms);
    sb_jw_key(&w, "hits");
    sb_jw_arr(&w);
    for (size_t i = 0; i < n; i++) {
        sb_jw_obj(&w);
        sb_jw_key(&w, "id"); sb_jw_int(&w, h[i].id);
        sb_jw_key(&w, "source"); sb_jw_str(&w, h[i].source);
        sb_jw_key(&w, "score"); sb_jw_num(&w, h[i].score);
        if (h[i].rerank >= 0) {
            sb_jw_key(&w, "p"); sb_jw_num(&w, h[i].rerank);
            sb_jw_key(&w, "judge_ms"); sb_jw_num(&w, judge_ms[i]);
        }
        sb_jw_obj_end(&w);
    }
    sb_jw_arr_end(&w);
    sb_jw_obj_end(&w);
    if (!w.oom) fprintf(eo->dump, "%s\n", w.p);
    sb_jw_free(&w);
}

/* One question in a search mode: the expected source's rank (0: not in the
 * list) and the search's time. */
static int eval_one(sb_kb *kb, const question *q, sb_kb_mode mode, const kb_eval_opts *eo, int *rank, double *ms) {
    sb_kb_search_opts o = { .mode = mode, .top_k = eval_depth(eo) };
    sb_kb_hit *h;
    size_t nh;
    char err[SB_ERR_LEN];
    double t0 = sb_now_s();
    if (sb_kb_search(kb, q->query, strlen(q->query), &o, &h, &nh, err)) {
        fprintf(stderr, "kb eval: %s\n", err);
        return SB_EXIT_FAIL;
    }
    *ms = (sb_now_s() - t0) * 1000;
    *rank = rank_of(h, nh, q->expected);
    miss(eo, sb_kb_mode_name(mode), q, *rank, h, nh);
    dump(eo, sb_kb_mode_name(mode), q, *ms, h, nh, NULL);
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
        x->rr += rank && rank <= EVAL_DEPTH ? 1.0 / rank : 0;  /* MRR@10 at any depth */
    }
}

static int tallies_alloc(tally (*t)[3], int modes, size_t n) {
    for (int m = 0; m < modes; m++)
        for (int k = 0; k < 3; k++)
            if (!(t[m][k].ms = sb_calloc(n, sizeof(double)))) return SB_EXIT_FAIL;
    return 0;
}

static void tallies_report(tally (*t)[3], int modes, const char *const *names) {
    for (int m = 0; m < modes; m++) {
        report(names[m], "all", &t[m][0]);
        report(names[m], "zh", &t[m][1]);
        report(names[m], "en", &t[m][2]);
    }
    fflush(stdout);
}

static void tallies_free(tally (*t)[3], int modes) {
    for (int m = 0; m < modes; m++)
        for (int k = 0; k < 3; k++) sb_free(t[m][k].ms);
}

/* A search mode over every question. */
static int eval_mode(sb_kb *kb, const question *qs, size_t n, sb_kb_mode mode, const kb_eval_opts *eo) {
    tally t[1][3] = { 0 };
    int rc = tallies_alloc(t, 1, n);
    for (size_t i = 0; !rc && i < n; i++) {
        int rank = 0;
        double ms;
        if (!(rc = eval_one(kb, &qs[i], mode, eo, &rank, &ms))) count(t[0], &qs[i], rank, ms);
    }
    const char *name = sb_kb_mode_name(mode);
    if (!rc) tallies_report(t, 1, &name);
    tallies_free(t, 1);
    return rc;
}

/* ------------------------------------------------------ modes with rerank */

typedef struct { int64_t id; double p, ms; } judgement;

/* Judge h[0..nr) one by one, each chunk once per question: a passage both
 * lists hold is read from memo. ms[i] is what judging h[i] took (memo: when
 * it was judged), so a list's cost is that of judging it alone. */
static int judge(const kb_eval_opts *eo, const question *q, sb_kb_hit *h, size_t nr, judgement *memo, size_t *n_memo,
                 double *ms, char *err) {
    for (size_t i = 0; i < nr; i++) {
        size_t j = 0;
        while (j < *n_memo && memo[j].id != h[i].id) j++;
        if (j == *n_memo) {
            double t0 = sb_now_s();
            int rc = sb_kb_rerank(eo->reranker, eo->rerank_prompt, q->query, strlen(q->query), &h[i], 1, err);
            if (rc) return rc;
            memo[(*n_memo)++] = (judgement){ h[i].id, h[i].rerank, (sb_now_s() - t0) * 1000 };
        }
        h[i].rerank = memo[j].p;
        ms[i] = memo[j].ms;
    }
    return 0;
}

/* The expected source's rank after reordering h's first nr judged hits by
 * P(yes) (fuse: by RRF with the search's rank); below them nothing moves. */
static int reranked_rank(const sb_kb_hit *h, size_t nh, size_t nr, int fuse, const char *expected) {
    sb_kb_hit *c = sb_malloc((nr ? nr : 1) * sizeof *c);    /* shallow: only reordered */
    if (!c) return -1;
    memcpy(c, h, nr * sizeof *c);
    if (fuse) sb_kb_rerank_fuse(c, nr);
    else sb_kb_rerank_sort(c, nr);
    int r = rank_of(c, nr, expected);
    sb_free(c);
    return r ? r : rank_of(h, nh, expected);
}

/* One question: hybrid's (and with rerank_vectors, vector's) top rerank_n
 * judged; rank[RR_*] and ms[RR_*] (search + that list's judgements). */
static int eval_rr_one(sb_kb *kb, const question *q, const kb_eval_opts *eo, judgement *memo, int *rank,
                       double *ms) {
    size_t n_memo = 0;
    int rc = 0, lists = eo->rerank_vectors ? 2 : 1;
    char err[SB_ERR_LEN];
    double *jms = sb_calloc((size_t)eval_depth(eo), sizeof *jms);
    if (!jms) return SB_EXIT_FAIL;
    for (int l = 0; !rc && l < lists; l++) {
        sb_kb_search_opts o = { .mode = l ? SB_KB_VECTOR : SB_KB_HYBRID, .top_k = eval_depth(eo) };
        sb_kb_hit *h;
        size_t nh;
        double t0 = sb_now_s();
        if ((rc = sb_kb_search(kb, q->query, strlen(q->query), &o, &h, &nh, err))) break;
        double search_ms = (sb_now_s() - t0) * 1000, total = search_ms;
        size_t nr = SB_MIN(nh, (size_t)eo->rerank_n);
        if (!(rc = judge(eo, q, h, nr, memo, &n_memo, jms, err))) {
            for (size_t i = 0; i < nr; i++) total += jms[i];
            for (int f = 0; f < 2; f++) {
                int m = (l ? RR_VEC : RR_HYB) + f;
                ms[m] = total;
                if ((rank[m] = reranked_rank(h, nh, nr, f, q->expected)) < 0) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
                else if (!f) miss(eo, rr_names[m], q, rank[m], h, nh);
            }
            dump(eo, l ? "vector+rr" : "hybrid+rr", q, search_ms, h, nh, jms);
        }
        sb_kb_hits_free(h, nh);
    }
    sb_free(jms);
    if (rc) fprintf(stderr, "kb eval: %s\n", err);
    return rc ? SB_EXIT_FAIL : 0;
}

static int eval_rerank(sb_kb *kb, const question *qs, size_t n, const kb_eval_opts *eo) {
    tally t[RR_MODES][3] = { 0 };
    int modes = eo->rerank_vectors ? RR_MODES : RR_VEC;
    judgement *memo = sb_malloc(2 * (size_t)eo->rerank_n * sizeof *memo);
    int rc = memo ? tallies_alloc(t, modes, n) : SB_EXIT_FAIL;
    for (size_t i = 0; !rc && i < n; i++) {
        int rank[RR_MODES] = { 0 };
        double ms[RR_MODES] = { 0 };
        if ((rc = eval_rr_one(kb, &qs[i], eo, memo, rank, ms))) break;
        for (int m = 0; m < modes; m++) count(t[m], &qs[i], rank[m], ms[m]);
    }
    if (!rc) tallies_report(t, modes, rr_names);
    tallies_free(t, RR_MODES);
    sb_free(memo);
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
    for (int mode = SB_KB_BM25; !rc && mode <= SB_KB_HYBRID; mode++) rc = eval_mode(kb, qs, n, (sb_kb_mode)mode, eo);
    if (!rc && eo->reranker) rc = eval_rerank(kb, qs, n, eo);
    else if (!rc) printf("hyb+rr: not measured (give --rerank-model GGUF)\n");
    for (size_t i = 0; i < n; i++) {
        sb_free(qs[i].query);
        sb_free(qs[i].expected);
    }
    sb_free(qs);
    return rc;
}
