/* speculate.c - speculative steps for one generation (docs/SPECULATIVE.md):
 * draft (prompt lookup or a draft model), verify [token, drafts] in one
 * pass on the generation's sequence, emit what the acceptance rule keeps,
 * roll the KV cache back past the rest. Used by sb_engine_generate
 * (sequence 0) and by a batched task that runs alone (batch.c), so both
 * decide the same tokens the same way.
 */
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/engine_impl.h"

/* Draft up to max tokens after hist + tok with the draft model into
 * s->draft[1..]: greedy at temp 0, else sampled, its distributions kept in
 * s->q for the acceptance rule. Returns the count, or < 0 on error. */
static int draft_model(spec_state *s, const int32_t *hist, int n_hist, int max, char *err) {
    const sb_gen_opts *o = s->c->o;
    sb_engine *d = o->draft;
    const int dv = sb_model_hparams(d->model)->n_vocab, d_ctx = sb_ctx_n_ctx(d->ctx);
    /* The draft's context may be smaller than the model's: past its end it
     * simply drafts nothing. */
    max = SB_MIN(max, d_ctx - n_hist - 1);
    if (max <= 0) return 0;
    int rc = engine_prefill(d, hist, n_hist + 1, NULL, err);   /* the draft model sees what the target will */
    if (rc) return rc > 0 ? -rc : rc;
    const int sampled = o->sampling.temp > 0;
    int n = 0;
    while (n < max) {
        int32_t x;
        if (sampled) {
            const int nq = sb_sampler_dist(s->dsmp, d->logits, s->ids, s->probs);
            float *q = s->q + (size_t)n * s->n_vocab;
            memset(q, 0, (size_t)s->n_vocab * sizeof *q);
            double u = sb_sampler_uniform(s->dsmp), run = 0.0;
            x = s->ids[nq - 1];
            for (int i = 0; i < nq; i++) {
                run += s->probs[i];
                if (run > u) { x = s->ids[i]; break; }
            }
            for (int i = 0; i < nq; i++)
                if (s->ids[i] < s->n_vocab) q[s->ids[i]] = s->probs[i];
        } else {
            x = sb_sampler_sample(s->dsmp, d->logits);
        }
        /* A token the target cannot take ends the draft: drafting less is
         * always allowed. */
        if (x < 0 || x >= s->n_vocab || x >= dv) break;
        s->draft[1 + n++] = x;
        if (n == max || d->n_hist >= d_ctx) break;
        if ((rc = sb_ctx_eval(d->ctx, &x, 1, d->logits, 0, err))) {
            sb_engine_reset(d);     /* a failed pass may have written part of the batch */
            return rc > 0 ? -rc : rc;
        }
        d->hist[d->n_hist++] = x;
    }
    return n;
}

/* Decide drafted token x from the target's row: 1 and *next = x if
 * accepted, 0 and *next = the token to emit instead. q_row: the draft's
 * distribution (NULL for a deterministic draft). */
static int decide(spec_state *s, const float *row, int32_t x, const float *q_row, int32_t *next) {
    sb_sampler *smp = s->c->smp;
    if (s->c->o->sampling.temp <= 0) {
        *next = sb_sampler_sample(smp, row);     /* the argmax, as plain decoding picks it */
        return *next == x;
    }
    const int n = sb_sampler_dist(smp, row, s->ids, s->probs);
    const double u = sb_sampler_uniform(smp), u2 = sb_sampler_uniform(smp);
    return sb_spec_accept(s->ids, s->probs, n, x, q_row, u, u2, next);
}

int spec_step(spec_state *s, int seq, int32_t *hist, int *n_hist, int32_t *tok, char *err) {
    gen_core *c = s->c;
    sb_engine *e = c->e;
    const sb_gen_opts *o = c->o;
    const double t_in = sb_now_s();
    /* The caller's plain step since we returned 2: the policy's unit of cost. */
    if (s->t_ret > 0) sb_spec_time(&s->pol, 1, t_in - s->t_ret);
    s->t_ret = 0;
    int max = SB_MIN(s->max_draft, sb_ctx_n_ctx(e->ctx) - *n_hist - 1);
    max = SB_MIN(max, c->max_tokens - c->res->n_gen);
    if (max <= 0) return 2;
    hist[*n_hist] = *tok;
    int m = 0;
    const int k = o->lookup > 0 ? sb_spec_draft(&s->pol, hist, *n_hist + 1, max, s->draft + 1, &m)
                                : draft_model(s, hist, *n_hist, max, err);
    if (k <= 0) {
        if (k == 0) s->t_ret = sb_now_s();
        return k < 0 ? k : 2;
    }
    s->draft[0] = *tok;
    const double t_v = sb_now_s();
    int rc = sb_ctx_seq_verify(e->ctx, seq, s->draft, k + 1, s->rows, o->spec_exact, err);
    if (rc) return rc > 0 ? -rc : rc;
    const double t_check = sb_now_s() - t_v;
    hist[(*n_hist)++] = *tok;
    int done = 0, i = 0;
    for (; i < k && !done; i++) {
        const float *q_row = o->lookup > 0 || o->sampling.temp <= 0 ? NULL : s->q + (size_t)i * s->n_vocab;
        if (!decide(s, s->rows + (size_t)i * s->n_vocab, s->draft[1 + i], q_row, tok)) break;
        hist[(*n_hist)++] = s->draft[1 + i];
        done = gen_core_emit(c, s->draft[1 + i]);
    }
    const int accepted = i;     /* a rejection breaks before i++ */
    c->res->n_drafted += k;
    c->res->n_accepted += accepted;
    e->spec_drafted += (uint64_t)k;
    e->spec_accepted += (uint64_t)accepted;
    if (o->lookup > 0) {
        /* the policy chooses each draft's length itself (sb_spec_draft) */
        sb_spec_update(&s->pol, m, k, accepted);
        sb_spec_time(&s->pol, k + 1, t_check);
    } else {
        s->max_draft = sb_spec_backoff(s->max_draft, &s->win_drafted, &s->win_accepted, k, accepted);
    }
    /* All accepted: the last row is a free token from the target. */
    if (i == k && !done) *tok = sb_sampler_sample(c->smp, s->rows + (size_t)k * s->n_vocab);
    sb_ctx_seq_truncate(e->ctx, seq, *n_hist);
    return done;
}

int spec_init(spec_state *s, gen_core *c, char *err) {
    const sb_gen_opts *o = c->o;
    *s = (spec_state){ .c = c, .n_vocab = sb_model_hparams(c->e->model)->n_vocab };
    /* A schema or tool grammar constrains every token, drafted ones
     * included, and decide() samples unmasked: no speculation under a
     * grammar (for now); nor with logprobs, which accepted drafts lack. */
    s->max_draft = o->json_schema || o->tools_grammar || o->on_logprob ? 0 : SB_MIN(o->lookup > 0 ? o->lookup : o->draft ? o->n_draft : 0, SB_SPEC_MAX_DRAFT);
    if (s->max_draft <= 0) return 0;
    sb_spec_policy_init(&s->pol, s->max_draft);
    s->pol.fixed_slope = o->spec_cost;
    const size_t nv = (size_t)s->n_vocab;
    /* ids/probs hold the target's and the draft's distributions in turn */
    const size_t nd = o->draft ? SB_MAX(nv, (size_t)sb_model_hparams(o->draft->model)->n_vocab) : nv;
    s->rows = sb_aligned_alloc((size_t)(s->max_draft + 1) * nv * sizeof(float));
    s->ids = sb_malloc(nd * sizeof *s->ids);
    s->probs = sb_malloc(nd * sizeof *s->probs);
    if (!s->rows || !s->ids || !s->probs) return sb_seterr(err, SB_ENOMEM, "out of memory for %d drafted rows", s->max_draft);
    if (o->lookup > 0 || !o->draft) return 0;
    sb_sampling_params dp = o->sampling;
    dp.repeat_last_n = 0;               /* any q is valid: keep the draft's simple */
    dp.seed = o->sampling.seed == SB_SEED_RANDOM ? SB_SEED_RANDOM : o->sampling.seed + 1;
    int rc = sb_sampler_new(&dp, sb_model_hparams(o->draft->model)->n_vocab, &s->dsmp, err);
    if (rc) return rc;
    if (o->sampling.temp > 0 && !(s->q = sb_malloc((size_t)s->max_draft * nv * sizeof *s->q)))
        return sb_seterr(err, SB_ENOMEM, "out of memory for %d draft distributions", s->max_draft);
    return 0;
}

void spec_free(spec_state *s) {
    sb_aligned_free(s->rows);
    sb_free(s->ids);
    sb_free(s->probs);
    sb_free(s->q);
    sb_sampler_free(s->dsmp);
    *s = (spec_state){ 0 };
}
