/* spec.c - prompt-lookup drafts and the speculative acceptance rule (see
 * sb_spec.h). */
#include "worker/engine/sb_spec.h"

int sb_spec_lookup(const int32_t *ctx, int n_ctx, int max_draft, int32_t *draft) {
    if (max_draft <= 0) return 0;
    for (int ng = SB_SPEC_NGRAM_MAX; ng >= SB_SPEC_NGRAM_MIN; ng--) {
        if (n_ctx <= ng) continue;
        const int32_t *tail = ctx + n_ctx - ng;
        /* Most recent first: the latest copy of a phrase is the best guess
         * of how it continues now (a list being repeated, a number just
         * quoted). The match must leave at least one token to copy. */
        for (int s = n_ctx - ng - 1; s >= 0; s--) {
            int k = 0;
            while (k < ng && ctx[s + k] == tail[k]) k++;
            if (k < ng) continue;
            int n = 0;
            for (int j = s + ng; j < n_ctx && n < max_draft; j++) draft[n++] = ctx[j];
            return n;
        }
    }
    return 0;
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
