/* engine.c - generation and scoring on one model (see sb_engine.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/sb_engine.h"
#include "worker/gguf/sb_gguf.h"
#include "worker/engine/engine_impl.h"

void sb_gen_opts_default(sb_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = 256;
    sb_sampling_defaults(&o->sampling);
}

/* Bytes of one KV block: K and V of SB_KV_BLOCK positions in every layer. */
static size_t kv_block_bytes(const sb_hparams *hp, int kv_f32) {
    return (size_t)2 * (size_t)hp->n_layer * (size_t)hp->n_head_kv * (size_t)hp->head_dim * SB_KV_BLOCK *
           (kv_f32 ? 4 : 2);
}

int sb_engine_open_kv(const char *path, const sb_ctx_params *p, int kv_mb, sb_engine **out, char *err) {
    *out = NULL;
    sb_engine *e = sb_calloc(1, sizeof *e);
    if (!e) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc;
    if ((rc = sb_model_load(path, &e->model, err)) || (rc = sb_vocab_load(sb_model_gguf(e->model), &e->vocab, err)))
        goto fail;
    const sb_hparams *hp = sb_model_hparams(e->model);
    /* Sequence 0 serves sb_engine_generate/score; tasks, cached prefixes and
     * score forks get sequences of their own (sb_sched_ctx_seqs). */
    sb_ctx_params cp = *p;
    const int max_tasks = SB_MAX(1, p->n_seq);
    /* n_seq 0 (the default): one sequence, sb_engine_generate/score only,
     * no per-sequence buffers; tasks need n_seq >= 1. */
    cp.n_seq = p->n_seq > 0 ? sb_sched_ctx_seqs(max_tasks) : 1;
    const int n_ctx = p->n_ctx > 0 ? p->n_ctx : SB_MIN(hp->n_ctx_train, 4096);
    if (kv_mb > 0) {
        size_t blocks = (size_t)kv_mb * 1024 * 1024 / kv_block_bytes(hp, p->kv_f32);
        cp.kv_blocks = (int)SB_MIN(blocks, (size_t)1 << 24);
    } else if (cp.kv_blocks <= 0 && max_tasks > 1) {
        /* One whole context, plus 1024 positions for each further sequence:
         * any one sequence can still reach n_ctx, and N short requests
         * (a pipeline stage's few hundred tokens) fit without N contexts. */
        cp.kv_blocks = (n_ctx + SB_KV_BLOCK - 1) / SB_KV_BLOCK + (max_tasks - 1) * (SB_MIN(n_ctx, 1024) / SB_KV_BLOCK);
    }
    if ((rc = sb_ctx_new(e->model, &cp, &e->ctx, err))) goto fail;
    if (sb_vocab_n_tokens(e->vocab) > hp->n_vocab) {
        rc = sb_seterr(err, SB_EFORMAT, "%s: vocabulary has %d tokens but the output layer only %d", path,
                       sb_vocab_n_tokens(e->vocab), hp->n_vocab);
        goto fail;
    }
    e->n_batch = SB_MIN(p->n_batch > 0 ? p->n_batch : 512, sb_ctx_n_ctx(e->ctx));
    e->hist = sb_malloc((size_t)sb_ctx_n_ctx(e->ctx) * sizeof *e->hist);
    e->logits = sb_aligned_alloc((size_t)hp->n_vocab * sizeof(float));
    if (!e->hist || !e->logits) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); goto fail; }
    if ((rc = sb_sched_new(e, p->n_seq > 0 ? max_tasks : 0, err))) goto fail;
    sb_str tmpl;
    e->chat_kind = SB_CHAT_UNKNOWN;
    int has_tmpl = sb_gguf_get_str(sb_model_gguf(e->model), "tokenizer.chat_template", &tmpl) == 0;
    if (has_tmpl) e->chat_kind = sb_chat_detect(tmpl.ptr, tmpl.len);
    if (sb_chat_tmpl_init(&e->tmpl, has_tmpl ? tmpl.ptr : NULL, has_tmpl ? tmpl.len : 0)) {
        rc = sb_seterr(err, SB_ENOMEM, "out of memory");
        goto fail;
    }
    sb_gguf_release_header(sb_model_gguf(e->model));    /* the vocabulary and the template have their copies */
    *out = e;
    return 0;
fail:
    sb_engine_free(e);
    return rc;
}

int sb_engine_open(const char *path, const sb_ctx_params *p, sb_engine **out, char *err) {
    return sb_engine_open_kv(path, p, 0, out, err);
}

int sb_engine_kv_mb_min(const sb_engine *e, int kv_f32) {
    size_t b = kv_block_bytes(sb_model_hparams(e->model), kv_f32) * (size_t)((sb_ctx_n_ctx(e->ctx) + SB_KV_BLOCK - 1) / SB_KV_BLOCK);
    return (int)((b + (1u << 20) - 1) >> 20);
}

void sb_engine_free(sb_engine *e) {
    if (!e) return;
    sb_sched_free(e);
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        sb_gmatch_free(e->gram[i].m);
        sb_grammar_free(e->gram[i].g);
        sb_free(e->gram[i].schema);
    }
    sb_tok_trie_free(e->trie);
    sb_chat_tmpl_free(&e->tmpl);
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

int sb_engine_tools_format(const sb_engine *e) { return e->tmpl.tools; }

int sb_engine_chat_prompt_tools(const sb_engine *e, const sb_chat_msg *msgs, size_t n, const char *tools,
                                size_t tools_len, sb_prompt *out, char *err) {
    return sb_chat_apply_tools(&e->tmpl, msgs, n, tools, tools_len, 1, out, err);
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
int engine_prefill(sb_engine *e, const int32_t *prompt, int n, int *reused, char *err) {
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

/* A matcher for a schema at the start of a document, into c->gm: the
 * cached slot's own one when nobody else uses it (its masks are reused), a
 * fresh one sharing its mask cache when it is in use (several tasks with one
 * schema in a batch: with a cache of its own each would recompute every
 * mask, ~30 ms apiece on a 151k vocabulary, on the compute thread between
 * passes), or a grammar compiled for this generation alone when every slot
 * is busy. A slot with users is never evicted. */
static int core_matcher(gen_core *c, const char *schema, size_t len, int tools, char *err) {
    sb_engine *e = c->e;
    int rc;
    if (!e->trie && (rc = sb_tok_trie_new(e->vocab, sb_model_hparams(e->model)->n_vocab, &e->trie, err))) return rc;
    gram_slot *victim = NULL;
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        gram_slot *s = &e->gram[i];
        if (s->schema && s->tools == tools && s->len == len && !memcmp(s->schema, schema, len)) {
            s->used = ++e->gram_clock;
            if (!s->lent) {
                sb_gmatch_reset(s->m);
                c->gm = s->m;
                s->lent = 1;
            } else if ((rc = sb_gmatch_new_sharing(s->m, &c->gm, err))) {
                return rc;
            }
            s->users++;
            c->gslot = i;
            return 0;
        }
        if (!s->users && (!victim || s->used < victim->used)) victim = s;
    }
    sb_grammar *g = NULL;
    sb_gmatch *m = NULL;
    char *copy = victim ? sb_malloc(len + 1) : NULL;
    if (victim && !copy) return sb_seterr(err, SB_ENOMEM, "out of memory");
    if ((rc = tools ? sb_chat_tools_grammar(schema, len, &g, err) : sb_json_schema_compile(schema, len, &g, err)) ||
        (rc = sb_gmatch_new(g, e->trie, &m, err))) {
        sb_grammar_free(g);
        sb_free(copy);
        return rc;
    }
    c->gm = m;
    if (!victim) { c->own_g = g; return 0; }
    memcpy(copy, schema, len);
    sb_gmatch_free(victim->m);
    sb_grammar_free(victim->g);
    sb_free(victim->schema);
    *victim = (gram_slot){ copy, len, tools, g, m, ++e->gram_clock, 1, 1 };
    c->gslot = (int)(victim - e->gram);
    return 0;
}

int gen_core_init(gen_core *c, sb_engine *e, const sb_gen_opts *o, sb_gen_result *res, const int32_t *prompt,
                  int n_prompt, char *err) {
    memset(res, 0, sizeof *res);
    res->n_prompt = n_prompt;
    res->finish = "stop";
    *c = (gen_core){ .e = e, .o = o, .res = res, .gslot = -1 };
    const int n_vocab = sb_model_hparams(e->model)->n_vocab, n_ctx = sb_ctx_n_ctx(e->ctx);
    int rc;
    if ((rc = sb_sampler_new(&o->sampling, n_vocab, &c->smp, err)) ||
        (rc = sb_stop_new(o->stops, o->n_stops, &c->stop, err)) ||
        (o->json_schema && (rc = core_matcher(c, o->json_schema, o->json_schema_len, 0, err))) ||
        (!o->json_schema && o->tools_grammar && (rc = core_matcher(c, o->tools_grammar, o->tools_grammar_len, 1, err))))
        return rc;
    if (c->gm) sb_gmatch_stats(c->gm, &c->mc0, &c->mr0);
    /* Penalties look back over the prompt too, as llama.cpp's do. */
    int window = o->sampling.repeat_last_n > 0 ? o->sampling.repeat_last_n : 0;
    for (int i = SB_MAX(0, n_prompt - window); i < n_prompt; i++) sb_sampler_accept(c->smp, prompt[i]);
    c->max_tokens = o->max_tokens > 0 ? o->max_tokens : n_ctx;
    return 0;
}

void gen_core_free(gen_core *c) {
    if (c->gm) {
        sb_gmatch_stats(c->gm, &c->res->masks_computed, &c->res->masks_reused);
        c->res->masks_computed -= c->mc0;
        c->res->masks_reused -= c->mr0;
        if (c->gslot >= 0) {
            gram_slot *s = &c->e->gram[c->gslot];
            s->users--;
            if (c->gm == s->m) s->lent = 0;
            else sb_gmatch_free(c->gm);
        } else {
            sb_gmatch_free(c->gm);
        }
    }
    sb_grammar_free(c->own_g);
    sb_stop_free(c->stop);
    sb_sampler_free(c->smp);
    c->gm = NULL;
    c->own_g = NULL;
    c->stop = NULL;
    c->smp = NULL;
}

/* tok's log-probability and the top tokens from logits, over the tokens
 * mask allows (all when NULL): what on_logprob reports. */
static void core_logprobs(gen_core *c, const float *logits, const uint32_t *mask, int32_t tok) {
    const int n = sb_model_hparams(c->e->model)->n_vocab, k = c->o->top_logprobs;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if ((!mask || sb_mask_has(mask, i)) && logits[i] > mx) mx = logits[i];
    double sum = 0;
    c->n_top = 0;
    for (int i = 0; i < n; i++) {
        if (mask && !sb_mask_has(mask, i)) continue;
        sum += exp((double)logits[i] - mx);
        if (k <= 0 || (c->n_top == k && logits[i] <= c->top_lp[k - 1])) continue;
        int j = c->n_top < k ? c->n_top++ : k - 1;          /* insert, highest first */
        for (; j > 0 && c->top_lp[j - 1] < logits[i]; j--) {
            c->top_lp[j] = c->top_lp[j - 1];
            c->top_id[j] = c->top_id[j - 1];
        }
        c->top_lp[j] = logits[i];
        c->top_id[j] = i;
    }
    const float lse = mx + (float)log(sum);
    for (int j = 0; j < c->n_top; j++) c->top_lp[j] -= lse;
    c->lp_tok = tok;
    c->lp = logits[tok] - lse;
}

int gen_core_next(gen_core *c, const float *logits, int32_t *tok, char *err) {
    if (!c->gm) {
        *tok = sb_sampler_sample(c->smp, logits);
        if (c->o->on_logprob && *tok >= 0) core_logprobs(c, logits, NULL, *tok);
        return 0;
    }
    double t0 = sb_now_s();
    const uint32_t *mask = sb_gmatch_mask(c->gm);
    if (!mask) return sb_seterr(err, SB_ENOMEM, "out of memory for a grammar mask");
    *tok = sb_sampler_sample_masked(c->smp, logits, mask);
    if (*tok == -2) return sb_seterr(err, SB_ENOMEM, "out of memory");
    if (c->o->on_logprob && *tok >= 0) core_logprobs(c, logits, mask, *tok);
    /* -1: no token can continue (a vocabulary without the bytes the grammar
     * needs): the caller ends the generation. */
    if (*tok >= 0 && sb_gmatch_token(c->gm, *tok))
        return sb_seterr(err, SB_EINVAL, "grammar: token %d allowed by the mask but rejected", *tok);
    c->res->t_mask += sb_now_s() - t0;
    return 0;
}

int gen_core_emit(gen_core *c, int32_t tok) {
    const sb_gen_opts *o = c->o;
    sb_gen_result *res = c->res;
    if (res->n_gen >= c->max_tokens) { res->finish = "length"; return 1; }
    if (o->cancel && atomic_load(o->cancel)) { res->finish = "cancelled"; return 1; }
    if (o->deadline > 0 && sb_now_s() > o->deadline) { res->finish = "timeout"; return 1; }
    if (sb_vocab_is_eog(c->e->vocab, tok)) return 1;
    sb_sampler_accept(c->smp, tok);
    res->n_gen++;
    if (o->on_logprob && c->lp_tok == tok) o->on_logprob(o->ud, tok, c->lp, c->top_id, c->top_lp, c->n_top);
    char piece[256];
    const char *out;
    size_t out_len;
    int len = sb_token_to_piece(c->e->vocab, tok, piece, sizeof piece, 0);
    if (len < 0) len = 0;
    int matched = sb_stop_feed(c->stop, piece, (size_t)len, &out, &out_len);
    if (out_len && o->on_piece && o->on_piece(o->ud, out, out_len, tok)) { res->finish = "cancelled"; return 1; }
    return matched != 0;
}

int gen_core_take(gen_core *c, int32_t tok, int n_past, int n_ctx) {
    if (tok < 0 || gen_core_emit(c, tok)) return 1;
    /* A complete document that nothing can extend: EOS is the only token
     * left, so skip the pass that would produce it. */
    if (c->gm && !sb_gmatch_can_continue(c->gm)) return 1;
    if (n_past >= n_ctx) { c->res->finish = "length"; return 1; }
    return 0;
}

void gen_core_flush(gen_core *c) {
    /* Whatever the matcher still holds (a partial stop string that never
     * completed, a trailing incomplete UTF-8 sequence) belongs to the output. */
    const char *text;
    size_t len;
    if (sb_stop_which(c->stop) < 0 && sb_stop_flush(c->stop, &text, &len) == 0 && len && c->o->on_piece)
        c->o->on_piece(c->o->ud, text, len, -1);
}

void sb_engine_reset(sb_engine *e) {
    sb_ctx_truncate(e->ctx, 0);
    e->n_hist = 0;
}

int sb_engine_check_draft(const sb_engine *target, const sb_engine *draft, char *err) {
    const int32_t n = sb_vocab_n_tokens(target->vocab), nd = sb_vocab_n_tokens(draft->vocab);
    if (n != nd) return sb_seterr(err, SB_EINVAL, "draft model has %d tokens, the model %d: not the same vocabulary", nd, n);
    for (int32_t t = 0; t < n; t++) {
        const sb_str a = sb_vocab_text(target->vocab, t), b = sb_vocab_text(draft->vocab, t);
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len))
            return sb_seterr(err, SB_EINVAL, "draft model's token %d is '%.*s', the model's '%.*s': not the same vocabulary",
                             (int)t, (int)SB_MIN(b.len, 40), b.ptr, (int)SB_MIN(a.len, 40), a.ptr);
    }
    return 0;
}

/* A failed pass may have written part of the batch: trust nothing. */
static int eval_failed(sb_engine *e, int rc) {
    sb_ctx_truncate(e->ctx, 0);
    e->n_hist = 0;
    return rc;
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
    gen_core c;
    spec_state sp = { 0 };
    int rc;
    if ((rc = gen_core_init(&c, e, o, res, prompt, n_prompt, err)) || (rc = spec_init(&sp, &c, err))) goto out;
    double t0 = sb_now_s();
    if ((rc = engine_prefill(e, prompt, n_prompt, &res->n_reused, err))) goto out;
    double t1 = sb_now_s();
    res->t_prompt = t1 - t0;
    int32_t tok;
    if ((rc = gen_core_next(&c, e->logits, &tok, err))) goto out;
    /* gen_core_take ends on a token the grammar cannot give (< 0),
     * end-of-generation, length, cancel, stop, a finished document. */
    while (!gen_core_take(&c, tok, e->n_hist, n_ctx)) {
        int st = sp.max_draft > 0 ? spec_step(&sp, 0, e->hist, &e->n_hist, &tok, err) : 2;
        if (st < 0) { rc = eval_failed(e, st); goto out; }
        if (st == 1) break;
        if (st == 0) continue;
        if ((rc = sb_ctx_eval(e->ctx, &tok, 1, e->logits, 0, err))) { eval_failed(e, rc); goto out; }
        e->hist[e->n_hist++] = tok;
        if ((rc = gen_core_next(&c, e->logits, &tok, err))) goto out;
    }
    gen_core_flush(&c);
    res->t_gen = sb_now_s() - t1;
    rc = 0;
out:
    spec_free(&sp);
    gen_core_free(&c);
    return rc;
}

double engine_row_logprob(const float *row, int n_vocab, int32_t tok) {
    return (double)row[tok] - sb_logsumexp(row, n_vocab);
}

int engine_score_check(const sb_engine *e, int n_prompt, const int32_t *const *cands, const int *cand_lens,
                       int n_cands, int *longest, int *n_long, char *err) {
    const int n_ctx = sb_ctx_n_ctx(e->ctx), n_vocab = sb_model_hparams(e->model)->n_vocab;
    if (n_prompt <= 0) return sb_seterr(err, SB_EINVAL, "empty prompt");
    if (n_cands <= 0) return sb_seterr(err, SB_EINVAL, "no candidates");
    *longest = *n_long = 0;
    for (int c = 0; c < n_cands; c++) {
        if (cand_lens[c] <= 0) return sb_seterr(err, SB_EINVAL, "candidate %d is empty", c);
        for (int j = 0; j < cand_lens[c]; j++)
            if (cands[c][j] < 0 || cands[c][j] >= n_vocab)
                return sb_seterr(err, SB_EINVAL, "candidate %d: token %d outside the vocabulary", c, cands[c][j]);
        *longest = SB_MAX(*longest, cand_lens[c]);
        *n_long += cand_lens[c] > 1;
    }
    if (n_prompt + *longest > n_ctx)
        return sb_seterr(err, SB_ERANGE, "prompt (%d) + longest candidate (%d) exceed the context (%d)", n_prompt,
                         *longest, n_ctx);
    return 0;
}

int sb_engine_score(sb_engine *e, const int32_t *prompt, int n_prompt, const int32_t *const *cands,
                    const int *cand_lens, int n_cands, double *logprobs, char *err) {
    const int n_vocab = sb_model_hparams(e->model)->n_vocab;
    int longest, n_long;
    int rc = engine_score_check(e, n_prompt, cands, cand_lens, n_cands, &longest, &n_long, err);
    if (rc) return rc;
    rc = engine_prefill(e, prompt, n_prompt, NULL, err);
    if (rc) return rc;
    float *first = sb_aligned_alloc((size_t)n_vocab * sizeof(float));
    float *rows = longest > 1 ? sb_aligned_alloc((size_t)(longest - 1) * (size_t)n_vocab * sizeof(float)) : NULL;
    if (!first || (longest > 1 && !rows)) {
        sb_aligned_free(first);
        return sb_seterr(err, SB_ENOMEM, "out of memory for %d candidate rows", longest);
    }
    memcpy(first, e->logits, (size_t)n_vocab * sizeof(float));
    for (int c = 0; c < n_cands && rc == 0; c++) {
        double lp = engine_row_logprob(first, n_vocab, cands[c][0]);
        if (cand_lens[c] > 1) {
            sb_ctx_truncate(e->ctx, n_prompt);
            rc = sb_ctx_eval(e->ctx, cands[c], cand_lens[c] - 1, rows, 1, err);
            for (int j = 1; j < cand_lens[c] && rc == 0; j++)
                lp += engine_row_logprob(rows + (size_t)(j - 1) * n_vocab, n_vocab, cands[c][j]);
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
