/* spec.c - prompt-lookup drafts and the speculative acceptance rule (see
 * sb_spec.h). */
#include "worker/engine/sb_spec.h"

int sb_spec_find(const int32_t *ctx, int n_ctx, int max_ngram, int *at) {
    int best = 0;
    *at = -1;
    /* s: the last token of a candidate occurrence; it must leave at least
     * one token after it to copy, and the most recent of the longest wins
     * (the latest copy of a phrase is the best guess of how it goes on now:
     * a list being repeated, a number just quoted). */
    for (int s = n_ctx - 2; s >= 0 && best < max_ngram; s--) {
        int m = 0;
        while (m < max_ngram && m <= s && ctx[s - m] == ctx[n_ctx - 1 - m]) m++;
        if (m > best) { best = m; *at = s + 1; }
    }
    return best;
}

int sb_spec_lookup(const int32_t *ctx, int n_ctx, int max_draft, int32_t *draft) {
    if (max_draft <= 0) return 0;
    int at;
    if (sb_spec_find(ctx, n_ctx, SB_SPEC_NGRAM_MAX, &at) < SB_SPEC_NGRAM_MIN) return 0;
    int n = 0;
    for (int j = at; j < n_ctx && n < max_draft; j++) draft[n++] = ctx[j];
    return n;
}

int sb_spec_accept(const int32_t *ids, const float *p, int n, int32_t x, const float *q, double u, double u2,
                   int32_t *out) {
    double px = 0.0;
    for (int i = 0; i < n; i++)
        if (ids[i] == x) px = p[i];
    const double qx = q ? q[x] : 1.0;
    /* u < p/q, written without the division; q(x) = 0 cannot happen for a
     * token drawn from q, and is then rejected. */
    if (qx > 0.0 && u * qx < px) {
        *out = x;
        return 1;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        const double r = (double)p[i] - (q ? (double)q[ids[i]] : ids[i] == x);
        if (r > 0.0) sum += r;
    }
    /* p ≤ q everywhere means p = q, where rejection has probability 0; only
     * rounding gets here: fall back to p itself. */
    const int use_p = !(sum > 0.0);
    if (use_p) {
        sum = 0.0;
        for (int i = 0; i < n; i++) sum += p[i];
    }
    const double target = u2 * sum;
    double run = 0.0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        const double r = use_p ? (double)p[i] : (double)p[i] - (q ? (double)q[ids[i]] : ids[i] == x);
        if (r <= 0.0) continue;
        last = i;
        run += r;
        if (run > target) break;
    }
    *out = ids[last];
    return 0;
}

int sb_spec_backoff(int max_draft, int *win_drafted, int *win_accepted, int k, int acc) {
    *win_drafted += k;
    *win_accepted += acc;
    if (*win_drafted < SB_SPEC_BACKOFF_WINDOW) return max_draft;
    const int poor = *win_accepted * 100 < *win_drafted * SB_SPEC_BACKOFF_MIN_PCT;
    *win_drafted = *win_accepted = 0;
    if (!poor) return max_draft;
    return max_draft / 2 >= 2 ? max_draft / 2 : 0;
}

/* ---- the drafting policy ------------------------------------------------ */

void sb_spec_policy_init(sb_spec_policy *p, int max_draft) {
    *p = (sb_spec_policy){ .max_draft = max_draft < SB_SPEC_MAX_DRAFT ? max_draft : SB_SPEC_MAX_DRAFT };
}

void sb_spec_time(sb_spec_policy *p, int n, double sec) {
    if (n < 1 || n > SB_SPEC_MAX_DRAFT + 1 || !(sec > 0)) return;
    p->t_sum[n] += sec;
    p->t_n[n]++;
}

double sb_spec_cost(const sb_spec_policy *p, int n) {
    if (n <= 1) return 1.0;
    if (n > SB_SPEC_MAX_DRAFT + 1) n = SB_SPEC_MAX_DRAFT + 1;
    if (p->fixed_slope > 0) return 1.0 + p->fixed_slope * (n - 1);
    const double t1 = p->t_n[1] ? p->t_sum[1] / p->t_n[1] : 0.0;
    if (t1 > 0 && p->t_n[n]) return p->t_sum[n] / p->t_n[n] / t1;
    /* Not measured: the largest measured size below plus an optimistic
     * SB_SPEC_COST_SLOPE per token, so a size gets tried once drafts look
     * good, and measured then. Costs are not linear in n (a check has a
     * fixed part, the multi-token kernels work in groups of tokens):
     * extrapolating a slope from small sizes would rule long drafts out. */
    int j = n - 1;
    while (j > 1 && !(t1 > 0 && p->t_n[j])) j--;
    const double cj = j > 1 ? p->t_sum[j] / p->t_n[j] / t1 : 1.0;
    return cj + SB_SPEC_COST_SLOPE * (n - j);
}

double sb_spec_expect(const sb_spec_policy *p, int m, int k) {
    if (m < 1) return 0.0;
    if (m > SB_SPEC_BUCKETS) m = SB_SPEC_BUCKETS;
    /* Prior, two pseudo-steps (from the hotline1-3 replies of both Qwen
     * models; PERFORMANCE.md): one matched token predicts little (a word
     * that recurs), two often, three or more mostly (the reply is inside a
     * copy); once a copy goes right it tends to go on (a number, a name, a
     * list line). The continuation is one rate for every depth: a draft
     * cut short early would otherwise never learn that longer ones pay. */
    static const double first[SB_SPEC_BUCKETS + 1] = { 0, 0.1, 0.4, 0.6, 0.8 };
    const double w = 2.0, on = 0.85;
    const double p1 = (p->hit[m][0] + w * first[m]) / (p->tried[m][0] + w);
    const double r = (p->hit[m][1] + w * on) / (p->tried[m][1] + w);
    double e = 0.0, run = p1;
    for (int i = 0; i < k; i++, run *= r) e += run;
    return e;
}

int sb_spec_choose(const sb_spec_policy *p, int m, int max) {
    if (max > p->max_draft) max = p->max_draft;
    int best = 0;
    double best_rate = 1.0;     /* a plain step: one token per one-token cost */
    for (int k = 1; k <= max; k++) {
        const double rate = (1.0 + sb_spec_expect(p, m, k)) / sb_spec_cost(p, k + 1);
        if (rate > best_rate) { best_rate = rate; best = k; }
    }
    return best;
}

int sb_spec_draft(const sb_spec_policy *p, const int32_t *ctx, int n_ctx, int max, int32_t *draft, int *m) {
    int at;
    *m = sb_spec_find(ctx, n_ctx, SB_SPEC_MATCH_MAX, &at);
    if (*m < 1 || max <= 0) return 0;
    const int avail = n_ctx - at;   /* the source may end before max */
    const int k = sb_spec_choose(p, *m, max < avail ? max : avail);
    for (int j = 0; j < k; j++) draft[j] = ctx[at + j];
    return k;
}

void sb_spec_update(sb_spec_policy *p, int m, int k, int acc) {
    if (m < 1 || k < 1) return;
    if (m > SB_SPEC_BUCKETS) m = SB_SPEC_BUCKETS;
    p->tried[m][0]++;
    if (acc > 0) p->hit[m][0]++;
    /* tokens 2..k: acc - 1 went on, and one stopped unless all did */
    if (acc > 0) {
        p->hit[m][1] += acc - 1;
        p->tried[m][1] += acc < k ? acc : acc - 1;
    }
}
