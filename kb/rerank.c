/* rerank.c - the label-likelihood rerank of retrieved passages: the prompt,
 * the score and the reorder, shared by the router's retrieve stage (which
 * asks a worker's `score` method) and `kb eval` (which runs the engine
 * in-process, below), so both judge a passage by the same numbers. */
#include "kb/kb_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/engine/sb_engine.h"

char *sb_kb_rerank_prompt(const char *tmpl, const char *query, size_t qlen, const sb_kb_hit *h, size_t *len) {
    if (!tmpl) tmpl = SB_KB_RERANK_PROMPT;
    const char *sec = h->section ? h->section : "", *txt = h->text ? h->text : "";
    size_t ls = strlen(sec), lt = strlen(txt), cap = strlen(tmpl) + 1, n = 0;
    /* Size first: each placeholder may occur any number of times. */
    for (const char *p = tmpl; (p = strstr(p, "{{")); p += 2) {
        if (!strncmp(p, "{{query}}", 9)) cap += qlen;
        else if (!strncmp(p, "{{passage}}", 11)) cap += ls + 1 + lt;
    }
    char *out = sb_malloc(cap);
    if (!out) return NULL;
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "{{query}}", 9)) {
            memcpy(out + n, query, qlen);
            n += qlen;
            p += 9;
        } else if (!strncmp(p, "{{passage}}", 11)) {
            if (ls) {                           /* the heading path says what the passage is about */
                memcpy(out + n, sec, ls);
                n += ls;
                out[n++] = '\n';
            }
            memcpy(out + n, txt, lt);
            n += lt;
            p += 11;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    if (len) *len = n;
    return out;
}

double sb_kb_rerank_prob(double lp_yes, double lp_no) {
    double m = lp_yes > lp_no ? lp_yes : lp_no;
    double y = exp(lp_yes - m), n = exp(lp_no - m);
    return y / (y + n);
}

/* Insertion sort: n is a handful of passages, and it is stable. */
void sb_kb_rerank_sort(sb_kb_hit *h, size_t n) {
    for (size_t i = 1; i < n; i++) {
        sb_kb_hit x = h[i];
        size_t j = i;
        while (j > 0 && h[j - 1].rerank < x.rerank) {
            h[j] = h[j - 1];
            j--;
        }
        h[j] = x;
    }
}

void sb_kb_rerank_fuse(sb_kb_hit *h, size_t n) {
    if (n < 2) return;
    double *f = sb_malloc(n * sizeof *f);
    sb_kb_hit *tmp = sb_malloc(n * sizeof *tmp);
    if (!f || !tmp) {                   /* out of memory: the plain rerank order is the next best */
        sb_free(f);
        sb_free(tmp);
        sb_kb_rerank_sort(h, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        size_t rr = 1;                  /* i's rank by the reranker; ties: the search's order */
        for (size_t j = 0; j < n; j++) rr += h[j].rerank > h[i].rerank || (h[j].rerank == h[i].rerank && j < i);
        f[i] = 1.0 / (SB_KB_RERANK_RRF_K + (double)(i + 1)) + 1.0 / (SB_KB_RERANK_RRF_K + (double)rr);
    }
    /* Stable selection by f: n is a handful. */
    for (size_t k = 0; k < n; k++) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (f[i] >= 0 && (best == n || f[i] > f[best])) best = i;
        tmp[k] = h[best];
        f[best] = -1;
    }
    memcpy(h, tmp, n * sizeof *h);
    sb_free(f);
    sb_free(tmp);
}

/* -------------------------------------------------- in-process reranker */

struct sb_kb_reranker {
    sb_engine *e;
    int chat;                   /* the prompt is a user message in the model's chat template */
    int32_t *cand[2];
    int cand_len[2];
};

int sb_kb_reranker_open(const char *gguf, int threads, int chat, sb_kb_reranker **out, char *err) {
    *out = NULL;
    sb_kb_reranker *r = sb_calloc(1, sizeof *r);
    if (!r) return sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads > 0 ? threads : 1;
    cp.n_ctx = 2048;                    /* a question and a chunk of a few hundred tokens */
    int rc = sb_engine_open(gguf, &cp, &r->e, err);
    r->chat = chat;
    const char *words[2] = { chat ? SB_KB_RERANK_YES + 1 : SB_KB_RERANK_YES, chat ? SB_KB_RERANK_NO + 1 : SB_KB_RERANK_NO };
    for (int i = 0; !rc && i < 2; i++) {
        size_t n = 0;
        /* A continuation, as the worker's score method tokenizes it: no BOS, no special tokens. */
        rc = sb_tokenize(sb_engine_vocab(r->e), words[i], strlen(words[i]), 0, 0, &r->cand[i], &n, err);
        r->cand_len[i] = (int)n;
    }
    if (rc) {
        sb_kb_reranker_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void sb_kb_reranker_close(sb_kb_reranker *r) {
    if (!r) return;
    sb_engine_free(r->e);
    sb_free(r->cand[0]);
    sb_free(r->cand[1]);
    sb_free(r);
}

int sb_kb_rerank(sb_kb_reranker *r, const char *tmpl, const char *query, size_t qlen, sb_kb_hit *h, size_t n,
                 char *err) {
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        size_t len;
        char *p = sb_kb_rerank_prompt(tmpl, query, qlen, &h[i], &len);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        double lp[2];
        /* The worker's `prompt` with special: false (or one untrusted user
         * message): the passage is agency text, never markup. */
        if (!p) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
        else if (!r->chat) rc = sb_engine_tokenize(r->e, p, len, 0, &ids, &n_ids, err);
        else {
            sb_chat_msg m = { .role = "user", .content = p };
            sb_prompt cp = { 0 };
            rc = sb_engine_chat_prompt(r->e, &m, 1, &cp, err);
            if (!rc) rc = sb_engine_tokenize_prompt(r->e, &cp, &ids, &n_ids, err);
            sb_prompt_free(&cp);
        }
        if (!rc)
            rc = sb_engine_score(r->e, ids, (int)n_ids, (const int32_t *const *)r->cand, r->cand_len, 2, lp, err);
        if (!rc) h[i].rerank = sb_kb_rerank_prob(lp[0], lp[1]);
        sb_free(ids);
        sb_free(p);
    }
    return rc;
}
