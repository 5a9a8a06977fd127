/* engine.c - generation and scoring on one model (see sb_engine.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sb_common.h"
#include "sb_engine.h"
#include "sb_gguf.h"
#include "sb_grammar.h"

/* Compiled schemas kept per engine: a pipeline stage or a client repeats its
 * schema, and its masks are the expensive part to rebuild. */
#define GRAMMAR_CACHE 4

typedef struct {
    char       *schema;
    size_t      len;
    sb_grammar *g;
    sb_gmatch  *m;
    uint64_t    used;           /* LRU clock */
} gram_slot;

struct sb_engine {
    sb_model *model;
    sb_vocab *vocab;
    sb_ctx   *ctx;
    int       chat_kind;
    int32_t  *hist;             /* the tokens the KV cache holds, in order */
    int       n_hist;
    float    *logits;           /* one row: the last evaluated token's */
    sb_tok_trie *trie;          /* built on the first constrained request */
    gram_slot gram[GRAMMAR_CACHE];
    uint64_t  gram_clock;
};

void sb_gen_opts_default(sb_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = 256;
    sb_sampling_defaults(&o->sampling);
}

int sb_engine_open(const char *path, const sb_ctx_params *p, sb_engine **out, char *err) {
    *out = NULL;
    sb_engine *e = sb_calloc(1, sizeof *e);
    if (!e) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc;
    if ((rc = sb_model_load(path, &e->model, err)) ||
        (rc = sb_vocab_load(sb_model_gguf(e->model), &e->vocab, err)) ||
        (rc = sb_ctx_new(e->model, p, &e->ctx, err)))
        goto fail;
    const sb_hparams *hp = sb_model_hparams(e->model);
    if (sb_vocab_n_tokens(e->vocab) > hp->n_vocab) {
        rc = sb_seterr(err, SB_EFORMAT, "%s: vocabulary has %d tokens but the output layer only %d", path,
                       sb_vocab_n_tokens(e->vocab), hp->n_vocab);
        goto fail;
    }
    e->hist = sb_malloc((size_t)sb_ctx_n_ctx(e->ctx) * sizeof *e->hist);
    e->logits = sb_aligned_alloc((size_t)hp->n_vocab * sizeof(float));
    if (!e->hist || !e->logits) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); goto fail; }
    sb_str tmpl;
    e->chat_kind = SB_CHAT_UNKNOWN;
    if (sb_gguf_get_str(sb_model_gguf(e->model), "tokenizer.chat_template", &tmpl) == 0)
        e->chat_kind = sb_chat_detect(tmpl.ptr, tmpl.len);
    *out = e;
    return 0;
fail:
    sb_engine_free(e);
    return rc;
}

void sb_engine_free(sb_engine *e) {
    if (!e) return;
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        sb_gmatch_free(e->gram[i].m);
        sb_grammar_free(e->gram[i].g);
        sb_free(e->gram[i].schema);
    }
    sb_tok_trie_free(e->trie);
    sb_ctx_free(e->ctx);
    sb_vocab_free(e->vocab);
    sb_model_free(e->model);
    sb_free(e->hist);
    sb_aligned_free(e->logits);
    sb_free(e);
}

const sb_model *sb_engine_model(const sb_engine *e) { return e->model; }
const sb_vocab *sb_engine_vocab(const sb_engine *e) { return e->vocab; }
int sb_engine_n_ctx(const sb_engine *e) { return sb_ctx_n_ctx(e->ctx); }
int sb_engine_chat_kind(const sb_engine *e) { return e->chat_kind; }

int sb_engine_chat_prompt(const sb_engine *e, const sb_chat_msg *msgs, size_t n, sb_prompt *out, char *err) {
    /* A model without a known template still gets a usable prompt: chatml is
     * what most modern instruct models were trained on. */
    int kind = e->chat_kind != SB_CHAT_UNKNOWN ? e->chat_kind : SB_CHAT_CHATML;
    return sb_chat_apply_prompt(kind, msgs, n, 1, out, err);
}

int sb_engine_tokenize(const sb_engine *e, const char *text, size_t len, int special, int32_t **out, size_t *n,
                       char *err) {
    return sb_tokenize(e->vocab, text, len, 1, special, out, n, err);
}

int sb_engine_tokenize_prompt(const sb_engine *e, const sb_prompt *p, int32_t **out, size_t *n, char *err) {
    return sb_tokenize_prompt(e->vocab, p, 1, out, n, err);
}

/* Make the KV cache hold exactly prompt[0..n) and e->logits the last row,
 * evaluating only what is not already cached. */
static int prefill(sb_engine *e, const int32_t *prompt, int n, int *reused, char *err) {
    int keep = 0;
    while (keep < n && keep < e->n_hist && e->hist[keep] == prompt[keep]) keep++;
    /* The last prompt token is always evaluated: its logits are needed. */
    if (keep == n) keep = n - 1;
    sb_ctx_truncate(e->ctx, keep);
    e->n_hist = keep;
    int rc = sb_ctx_eval(e->ctx, prompt + keep, n - keep, e->logits, 0, err);
    if (rc) {
        /* A failed pass may have written part of the batch: trust nothing. */
        sb_ctx_truncate(e->ctx, 0);
        e->n_hist = 0;
        return rc;
    }
    memcpy(e->hist + keep, prompt + keep, (size_t)(n - keep) * sizeof *prompt);
    e->n_hist = n;
    if (reused) *reused = keep;
    return 0;
}

/* The matcher for a schema, from the cache or compiled now, reset to the
 * start of a document. */
static int engine_matcher(sb_engine *e, const char *schema, size_t len, sb_gmatch **out, char *err) {
    int rc;
    if (!e->trie && (rc = sb_tok_trie_new(e->vocab, sb_model_hparams(e->model)->n_vocab, &e->trie, err))) return rc;
    gram_slot *victim = &e->gram[0];
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        gram_slot *s = &e->gram[i];
        if (s->schema && s->len == len && !memcmp(s->schema, schema, len)) {
            s->used = ++e->gram_clock;
            sb_gmatch_reset(s->m);
            *out = s->m;
            return 0;
        }
        if (s->used < victim->used) victim = s;
    }
    gram_slot n = { sb_malloc(len + 1), len, NULL, NULL, ++e->gram_clock };
    if (!n.schema) return sb_seterr(err, SB_ENOMEM, "out of memory");
    memcpy(n.schema, schema, len);
    if ((rc = sb_json_schema_compile(schema, len, &n.g, err)) || (rc = sb_gmatch_new(n.g, e->trie, &n.m, err))) {
        sb_grammar_free(n.g);
        sb_free(n.schema);
        return rc;
    }
    sb_gmatch_free(victim->m);
    sb_grammar_free(victim->g);
    sb_free(victim->schema);
    *victim = n;
    *out = n.m;
    return 0;
}

/* The next token: sampled freely, or among those the grammar allows. */
static int next_token(sb_engine *e, sb_sampler *smp, sb_gmatch *gm, sb_gen_result *res, int32_t *tok, char *err) {
    if (!gm) { *tok = sb_sampler_sample(smp, e->logits); return 0; }
    double t0 = sb_now_s();
    const uint32_t *mask = sb_gmatch_mask(gm);
    if (!mask) return sb_seterr(err, SB_ENOMEM, "out of memory for a grammar mask");
    *tok = sb_sampler_sample_masked(smp, e->logits, mask);
    if (*tok == -2) return sb_seterr(err, SB_ENOMEM, "out of memory");
    /* -1: no token can continue (a vocabulary without the bytes the grammar
     * needs): the caller ends the generation. */
    if (*tok >= 0 && sb_gmatch_token(gm, *tok))
        return sb_seterr(err, SB_EINVAL, "grammar: token %d allowed by the mask but rejected", *tok);
    res->t_mask += sb_now_s() - t0;
    return 0;
}

int sb_engine_generate(sb_engine *e, const int32_t *prompt, int n_prompt, const sb_gen_opts *o, sb_gen_result *res,
                       char *err) {
    memset(res, 0, sizeof *res);
    res->n_prompt = n_prompt;
    res->finish = "stop";
    const int n_ctx = sb_ctx_n_ctx(e->ctx);
    if (n_prompt <= 0) return sb_seterr(err, SB_EINVAL, "empty prompt");
    if (n_prompt >= n_ctx)
        return sb_seterr(err, SB_ERANGE, "prompt of %d tokens does not fit the context of %d", n_prompt, n_ctx);
    sb_sampler *smp = NULL;
    sb_stop_matcher *stop = NULL;
    sb_gmatch *gm = NULL;
    uint64_t mc0 = 0, mr0 = 0;
    int rc;
    if ((rc = sb_sampler_new(&o->sampling, sb_model_hparams(e->model)->n_vocab, &smp, err)) ||
        (rc = sb_stop_new(o->stops, o->n_stops, &stop, err)) ||
        (o->json_schema && (rc = engine_matcher(e, o->json_schema, o->json_schema_len, &gm, err))))
        goto out;
    if (gm) sb_gmatch_stats(gm, &mc0, &mr0);
    double t0 = sb_now_s();
    if ((rc = prefill(e, prompt, n_prompt, &res->n_reused, err))) goto out;
    double t1 = sb_now_s();
    res->t_prompt = t1 - t0;
    /* Penalties look back over the prompt too, as llama.cpp's do. */
    int window = o->sampling.repeat_last_n > 0 ? o->sampling.repeat_last_n : 0;
    for (int i = SB_MAX(0, n_prompt - window); i < n_prompt; i++) sb_sampler_accept(smp, prompt[i]);
    const int max_tokens = o->max_tokens > 0 ? o->max_tokens : n_ctx;
    int stopped = 0;
    char piece[256];
    const char *emit;
    size_t emit_len;
    while (!stopped) {
        if (res->n_gen >= max_tokens) { res->finish = "length"; break; }
        if (o->cancel && atomic_load(o->cancel)) { res->finish = "cancelled"; break; }
        if (o->deadline > 0 && sb_now_s() > o->deadline) { res->finish = "timeout"; break; }
        int32_t tok;
        if ((rc = next_token(e, smp, gm, res, &tok, err))) goto out;
        if (tok < 0 || sb_vocab_is_eog(e->vocab, tok)) break;
        sb_sampler_accept(smp, tok);
        res->n_gen++;
        int len = sb_token_to_piece(e->vocab, tok, piece, sizeof piece, 0);
        if (len < 0) len = 0;
        int matched = sb_stop_feed(stop, piece, (size_t)len, &emit, &emit_len);
        if (emit_len && o->on_piece && o->on_piece(o->ud, emit, emit_len, tok)) { res->finish = "cancelled"; break; }
        if (matched) break;
        /* A complete document that nothing can extend: EOS is the only
         * token left, so skip the pass that would produce it. */
        if (gm && !sb_gmatch_can_continue(gm)) break;
        if (e->n_hist >= n_ctx) { res->finish = "length"; break; }
        if ((rc = sb_ctx_eval(e->ctx, &tok, 1, e->logits, 0, err))) {
            sb_ctx_truncate(e->ctx, 0);
            e->n_hist = 0;
            goto out;
        }
        e->hist[e->n_hist++] = tok;
    }
    /* Whatever the matcher still holds (a partial stop string that never
     * completed, a trailing incomplete UTF-8 sequence) belongs to the output. */
    if (sb_stop_which(stop) < 0 && sb_stop_flush(stop, &emit, &emit_len) == 0 && emit_len && o->on_piece)
        o->on_piece(o->ud, emit, emit_len, -1);
    res->t_gen = sb_now_s() - t1;
    rc = 0;
out:
    if (gm) {
        sb_gmatch_stats(gm, &res->masks_computed, &res->masks_reused);
        res->masks_computed -= mc0;
        res->masks_reused -= mr0;
    }
    sb_stop_free(stop);
    sb_sampler_free(smp);
    return rc;
}

static double row_logprob(const float *row, int n_vocab, int32_t tok) {
    return (double)row[tok] - sb_logsumexp(row, n_vocab);
}

int sb_engine_score(sb_engine *e, const int32_t *prompt, int n_prompt, const int32_t *const *cands,
                    const int *cand_lens, int n_cands, double *logprobs, char *err) {
    const int n_ctx = sb_ctx_n_ctx(e->ctx), n_vocab = sb_model_hparams(e->model)->n_vocab;
    if (n_prompt <= 0) return sb_seterr(err, SB_EINVAL, "empty prompt");
    int longest = 0;
    for (int c = 0; c < n_cands; c++) {
        if (cand_lens[c] <= 0) return sb_seterr(err, SB_EINVAL, "candidate %d is empty", c);
        for (int j = 0; j < cand_lens[c]; j++)
            if (cands[c][j] < 0 || cands[c][j] >= n_vocab)
                return sb_seterr(err, SB_EINVAL, "candidate %d: token %d outside the vocabulary", c, cands[c][j]);
        longest = SB_MAX(longest, cand_lens[c]);
    }
    if (n_prompt + longest > n_ctx)
        return sb_seterr(err, SB_ERANGE, "prompt (%d) + longest candidate (%d) exceed the context (%d)", n_prompt,
                         longest, n_ctx);
    int rc = prefill(e, prompt, n_prompt, NULL, err);
    if (rc) return rc;
    float *first = sb_aligned_alloc((size_t)n_vocab * sizeof(float));
    float *rows = longest > 1 ? sb_aligned_alloc((size_t)(longest - 1) * (size_t)n_vocab * sizeof(float)) : NULL;
    if (!first || (longest > 1 && !rows)) {
        sb_aligned_free(first);
        return sb_seterr(err, SB_ENOMEM, "out of memory for %d candidate rows", longest);
    }
    memcpy(first, e->logits, (size_t)n_vocab * sizeof(float));
    for (int c = 0; c < n_cands && rc == 0; c++) {
        double lp = row_logprob(first, n_vocab, cands[c][0]);
        if (cand_lens[c] > 1) {
            sb_ctx_truncate(e->ctx, n_prompt);
            rc = sb_ctx_eval(e->ctx, cands[c], cand_lens[c] - 1, rows, 1, err);
            for (int j = 1; j < cand_lens[c] && rc == 0; j++)
                lp += row_logprob(rows + (size_t)(j - 1) * n_vocab, n_vocab, cands[c][j]);
        }
        logprobs[c] = lp;
    }
    /* Leave the cache holding the prompt, so the next call with the same
     * prompt (or an extension of it) starts from there. */
    sb_ctx_truncate(e->ctx, n_prompt);
    e->n_hist = rc ? 0 : n_prompt;
    if (rc) sb_ctx_truncate(e->ctx, 0);
    else memcpy(e->logits, first, (size_t)n_vocab * sizeof(float));
    sb_aligned_free(first);
    sb_aligned_free(rows);
    return rc;
}
