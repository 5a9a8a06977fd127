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

/* The fixed-length lookup the runtime used before sb_spec_draft (kept as
 * the baseline tools/spec_sim.c replays): the most recent earlier
 * occurrence of the last n tokens of ctx[0..n_ctx) (n from
 * SB_SPEC_NGRAM_MAX down to _MIN; the longest n that matches wins), and up
 * to max_draft of the tokens that followed it copied into draft. Returns
 * the number copied (0: no match). */
int sb_spec_lookup(const int32_t *ctx, int n_ctx, int max_draft, int32_t *draft);

/* The longest suffix of ctx[0..n_ctx) (up to max_ngram tokens) that also
 * occurs earlier with a token after it, most recent occurrence first:
 * returns its length (0: not even the last token occurs earlier) and in
 * *at the index of the token that followed it. */
int sb_spec_find(const int32_t *ctx, int n_ctx, int max_ngram, int *at);

/* Drafting policy for prompt lookup (docs/SPECULATIVE.md, "Drafts"). Per
 * generation it learns (1) how far drafts get accepted, by the length m of
 * the matched suffix, and (2) what a check of n tokens costs against a
 * one-token step, from the times of the passes it ran; each step it
 * drafts the k that maximises (1 + expected accepted) / cost(k + 1), or
 * nothing when no k beats a plain step. */
#define SB_SPEC_MATCH_MAX 8         /* longest suffix matched: m in 1..8 */
#define SB_SPEC_BUCKETS 4           /* statistics for m = 1, 2, 3 and 4+ */
#define SB_SPEC_COST_SLOPE 0.2     /* per token, for a size not measured yet (measured: 0.5B 0.35-0.5, 1.5B 0.2-0.6) */
typedef struct {
    int max_draft;                              /* the user's N */
    double fixed_slope;                         /* > 0: cost(n) = 1 + fixed_slope (n - 1), nothing timed */
    /* by match length m (4+ together): [m][0] steps drafted and steps
     * whose first token was accepted; [m][1] later tokens reached (the
     * first accepted) and accepted: a continuation rate for every depth */
    int tried[SB_SPEC_BUCKETS + 1][2];
    int hit[SB_SPEC_BUCKETS + 1][2];
    /* pass times by tokens checked (index 1: a plain one-token step), sums
     * and counts, in seconds */
    double t_sum[SB_SPEC_MAX_DRAFT + 2];
    int t_n[SB_SPEC_MAX_DRAFT + 2];
} sb_spec_policy;

void sb_spec_policy_init(sb_spec_policy *p, int max_draft);
/* cost of one pass over n tokens (1..SB_SPEC_MAX_DRAFT+1) in one-token steps */
double sb_spec_cost(const sb_spec_policy *p, int n);
/* expected tokens accepted from a k-token draft after a match of length m */
double sb_spec_expect(const sb_spec_policy *p, int m, int k);
/* the draft length for match length m, at most max (0: a plain step pays more) */
int  sb_spec_choose(const sb_spec_policy *p, int m, int max);
/* Look up, choose and copy: at most max tokens after ctx[0..n_ctx) into
 * draft; returns the count (0: take a plain step), the match length in *m. */
int  sb_spec_draft(const sb_spec_policy *p, const int32_t *ctx, int n_ctx, int max, int32_t *draft, int *m);
/* A step after a match of length m drafted k and had acc accepted. */
void sb_spec_update(sb_spec_policy *p, int m, int k, int acc);
/* A pass over n tokens took sec seconds (n = 1: a plain step). */
void sb_spec_time(sb_spec_policy *p, int n, double sec);

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

/* Backoff for a draft model that keeps missing: the window counts drafted and
 * accepted tokens (k, acc: this step's); once it holds SB_SPEC_BACKOFF_WINDOW
 * drafted tokens, a rate below SB_SPEC_BACKOFF_MIN_PCT halves the draft
 * length (below 2 it stops: 0), and the window starts again. Returns the
 * new draft length. A draft that rarely matches costs a wider pass each
 * time; this bounds the loss to about one window per halving. (Prompt
 * lookup backs off through sb_spec_draft's statistics instead.) */
#define SB_SPEC_BACKOFF_WINDOW  32
#define SB_SPEC_BACKOFF_MIN_PCT 30
int sb_spec_backoff(int max_draft, int *win_drafted, int *win_accepted, int k, int acc);

/* `switchboard bench --lookup N | --draft FILE` (worker/cli/cli_bench_spec.c). */
int sb_cmd_bench_spec(int argc, char **argv);

#endif
