/* sb_spec.h - the pure parts of speculative decoding: prompt-lookup drafts
 * and the acceptance rule. The generation loop that uses them (one batched
 * verification pass, KV rollback) is in engine.c; docs/SPECULATIVE.md has
 * the design and the proof obligations the tests check.
 */
#ifndef SB_SPEC_H
#define SB_SPEC_H

#include <stdint.h>

#define SB_SPEC_MAX_DRAFT 16        /* tokens per verification pass: beyond this the odds of a whole run are nil */
#define SB_SPEC_NGRAM_MAX 3         /* longest n-gram matched by prompt lookup */
#define SB_SPEC_NGRAM_MIN 2         /* shortest: one token matches too often to be worth a pass */

/* Prompt lookup: find the most recent earlier occurrence of the last n
 * tokens of ctx[0..n_ctx) (n from SB_SPEC_NGRAM_MAX down to _MIN; the longest
 * n that matches wins) and copy up to max_draft of the tokens that followed
 * it into draft. Returns the number copied (0: no match). */
int sb_spec_lookup(const int32_t *ctx, int n_ctx, int max_draft, int32_t *draft);

/* The speculative sampling rule (Leviathan et al. 2023; Chen et al. 2023)
 * for one drafted token x. p: the target's distribution as a support
 * ids[0..n) with probabilities p[0..n); q: the draft's distribution over the
 * whole vocabulary (dense, indexed by token id), or NULL for a
 * deterministic draft (prompt lookup), i.e. a point mass at x.
 * Accept x with probability min(1, p(x)/q(x)) (u, uniform in [0,1), decides);
 * otherwise draw from the residual max(0, p − q), normalised (u2 decides).
 * The token emitted is thereby distributed exactly as p.
 * Returns 1 and *out = x if accepted, 0 and *out = the residual draw if not. */
int sb_spec_accept(const int32_t *ids, const float *p, int n, int32_t x, const float *q, double u, double u2,
                   int32_t *out);

/* Backoff for a draft that keeps missing: the window counts drafted and
 * accepted tokens (k, acc: this step's); once it holds SB_SPEC_BACKOFF_WINDOW
 * drafted tokens, a rate below SB_SPEC_BACKOFF_MIN_PCT halves the draft
 * length (below 2 it stops: 0), and the window starts again. Returns the
 * new draft length. A lookup draft that rarely matches costs a wider pass
 * each time; this bounds the loss to about one window per halving. */
#define SB_SPEC_BACKOFF_WINDOW  32
#define SB_SPEC_BACKOFF_MIN_PCT 30
int sb_spec_backoff(int max_draft, int *win_drafted, int *win_accepted, int k, int acc);

/* `switchboard bench --lookup N | --draft FILE` (worker/cli/cli_bench_spec.c). */
int sb_cmd_bench_spec(int argc, char **argv);

#endif
