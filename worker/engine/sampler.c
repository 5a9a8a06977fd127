/* sampler.c - llama.cpp's default sampling chain without its per-token cost.
 *
 * llama.cpp copies all n_vocab logits into a candidate array and partially
 * sorts it for every token. We never touch more of the vocabulary than one
 * read pass: top-k keeps a k-sized min-heap whose root is the threshold a
 * logit must beat, and a SIMD scan skips 16 logits at a time while none does
 * (after the first few hundred tokens almost none does). Penalised tokens are
 * left out of that scan and offered to the heap afterwards with their
 * penalised logits, so the caller's logits are never copied or modified.
 *
 * Candidate order is "better first": higher logit, then lower id. Using one
 * total order everywhere makes greedy, top-k = 1 and every filter agree on
 * ties.
 */
#include "worker/engine/sb_sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct { int32_t id; float logit; } cand_t;

static inline int sb_mask_bit(const uint32_t *mask, int32_t t) { return t >= 0 && ((mask[t >> 5] >> (t & 31)) & 1); }

struct sb_sampler {
    sb_sampling_params par;
    int32_t  n_vocab;
    uint64_t seed;              /* the seed in use (drawn if SB_SEED_RANDOM) */
    uint64_t rng[4];            /* xoshiro256** state */
    cand_t  *cand;              /* n_vocab: candidates of the current step */

    /* Penalties (allocated only when they are on). */
    int      penalties_on;
    int32_t *hist;              /* ring buffer of the last repeat_last_n tokens */
    int      hist_len, hist_head;
    int32_t *count;             /* n_vocab: occurrences of each id in hist */
    cand_t  *pen;               /* distinct ids of hist with penalised logits */
    int      n_pen;
    float   *work;              /* n_vocab: penalised copy, top-k-off path only */
    float   *w;                 /* n_vocab: unnormalised probabilities */
    float   *masked;            /* n_vocab: logits with disallowed ones -inf (lazy) */
};

/* ---- PRNG: xoshiro256** (Blackman & Vigna), seeded through splitmix64 so
 * that nearby seeds give unrelated streams. ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(uint64_t s[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
}

/* A fresh seed that fits in 32 bits and is not SB_SEED_RANDOM itself, so it
 * can be printed and passed back as --seed to repeat a run. */
static uint64_t random_seed(void) {
    uint32_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
        v = (uint32_t)splitmix64(&x);
    }
    return v == SB_SEED_RANDOM ? 0 : v;
}

/* ---- Parameters ---- */

void sb_sampling_defaults(sb_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = SB_SEED_RANDOM;
}

static int check_params(const sb_sampling_params *p, int32_t n_vocab, char *err) {
    if (n_vocab < 1) return sb_seterr(err, SB_EINVAL, "sampler: n_vocab %d < 1", (int)n_vocab);
    const struct { const char *name; float v; } f[] = {
        { "temp", p->temp }, { "top_p", p->top_p }, { "min_p", p->min_p },
        { "repeat_penalty", p->repeat_penalty }, { "presence_penalty", p->presence_penalty },
        { "frequency_penalty", p->frequency_penalty },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(f); i++)
        if (isnan(f[i].v)) return sb_seterr(err, SB_EINVAL, "sampler: %s is NaN", f[i].name);
    if (!(p->repeat_penalty > 0.0f))
        return sb_seterr(err, SB_EINVAL, "sampler: repeat_penalty %g must be > 0",
                         (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return sb_seterr(err, SB_EINVAL, "sampler: repeat_last_n %d < 0 (resolve -1 to the "
                         "context size first)", p->repeat_last_n);
    return 0;
}

int sb_sampler_new(const sb_sampling_params *p, int32_t n_vocab, sb_sampler **out, char *err) {
    *out = NULL;
    int rc = check_params(p, n_vocab, err);
    if (rc) return rc;
    sb_sampler *s = sb_calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->par = *p;
    s->n_vocab = n_vocab;
    s->cand = sb_malloc((size_t)n_vocab * sizeof *s->cand);
    s->w = sb_malloc((size_t)n_vocab * sizeof *s->w);
    if (!s->cand || !s->w) goto nomem;
    s->penalties_on = p->repeat_last_n > 0 &&
        !(p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f);
    if (s->penalties_on) {
        s->hist = sb_malloc((size_t)p->repeat_last_n * sizeof *s->hist);
        s->pen = sb_malloc((size_t)p->repeat_last_n * sizeof *s->pen);
        s->count = sb_calloc((size_t)n_vocab, sizeof *s->count);
        s->work = sb_malloc((size_t)n_vocab * sizeof *s->work);
        if (!s->hist || !s->pen || !s->count || !s->work) goto nomem;
    }
    s->seed = p->seed == SB_SEED_RANDOM ? random_seed() : p->seed;
    rng_seed(s->rng, s->seed);
    *out = s;
    return 0;
nomem:
    sb_sampler_free(s);
    return sb_seterr(err, SB_ENOMEM, "sampler: out of memory for n_vocab %d", (int)n_vocab);
}

void sb_sampler_free(sb_sampler *s) {
    if (!s) return;
    sb_free(s->cand);
    sb_free(s->hist);
    sb_free(s->pen);
    sb_free(s->count);
    sb_free(s->work);
    sb_free(s->w);
    sb_free(s->masked);
    sb_free(s);
}

uint64_t sb_sampler_seed(const sb_sampler *s) { return s->seed; }
const sb_sampling_params *sb_sampler_params(const sb_sampler *s) { return &s->par; }

void sb_sampler_accept(sb_sampler *s, int32_t token) {
    if (!s->penalties_on || token < 0 || token >= s->n_vocab) return;
    const int cap = s->par.repeat_last_n;
    if (s->hist_len == cap) {               /* full: the oldest leaves the window */
        s->count[s->hist[s->hist_head]]--;
        s->hist[s->hist_head] = token;
        s->hist_head = (s->hist_head + 1) % cap;
    } else {
        s->hist[(s->hist_head + s->hist_len) % cap] = token;
        s->hist_len++;
    }
    s->count[token]++;
}

void sb_sampler_reset(sb_sampler *s) {
    if (s->penalties_on) {
        /* Undo the counts one by one: the window is small, the vocab is not. */
        for (int i = 0; i < s->hist_len; i++) s->count[s->hist[i]] = 0;
        s->hist_len = s->hist_head = 0;
    }
    rng_seed(s->rng, s->seed);
}

/* ---- Candidate order and the top-k heap ---- */

static inline int better(cand_t a, cand_t b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

static int cmp_better_first(const void *pa, const void *pb) {
    const cand_t *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Min-heap by `better`: h[0] is the worst kept candidate. */
static void heap_sift_down(cand_t *h, int n, int i) {
    cand_t x = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(h[c], h[c + 1])) c++;     /* the worse child */
        if (!better(x, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static void heap_sift_up(cand_t *h, int i) {
    cand_t x = h[i];
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!better(h[parent], x)) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

/* Offer c to a heap of capacity k holding *n candidates. */
static inline void heap_offer(cand_t *h, int *n, int k, cand_t c) {
    if (*n < k) {
        h[*n] = c;
        heap_sift_up(h, (*n)++);
    } else if (better(c, h[0])) {
        h[0] = c;
        heap_sift_down(h, k, 0);
    }
}

/* First index i >= start with x[i] > thr, or n. The SSE2 loop tests 16
 * logits per iteration; once a heap threshold settles it runs almost without
 * leaving the loop, which is what makes a 128k-vocab step cost microseconds. */
static int next_above(const float *x, int n, int i, float thr) {
#if defined(__SSE2__)
    const __m128 t = _mm_set1_ps(thr);
    for (; i + 16 <= n; i += 16) {
        __m128 a = _mm_cmpgt_ps(_mm_loadu_ps(x + i), t);
        __m128 b = _mm_cmpgt_ps(_mm_loadu_ps(x + i + 4), t);
        __m128 c = _mm_cmpgt_ps(_mm_loadu_ps(x + i + 8), t);
        __m128 d = _mm_cmpgt_ps(_mm_loadu_ps(x + i + 12), t);
        if (_mm_movemask_ps(_mm_or_ps(_mm_or_ps(a, b), _mm_or_ps(c, d)))) break;
    }
#endif
    for (; i < n; i++)
        if (x[i] > thr) return i;
    return n;
}

/* The k best candidates of x[0..n) into s->cand, sorted better-first; ids
 * with count[id] > 0 are skipped in the scan and offered afterwards from
 * pen[] (their penalised logits). NaN logits are never kept. Returns how many
 * were kept (k unless fewer than k logits are numbers). */
static int select_top_k(sb_sampler *s, const float *x, int n, int k,
                        const int32_t *count, const cand_t *pen, int n_pen) {
    cand_t *h = s->cand;
    int kept = 0, i = 0;
    /* Fill: every number is kept until the heap is full. */
    for (; i < n && kept < k; i++) {
        if (isnan(x[i]) || (count && count[i] > 0)) continue;
        h[kept] = (cand_t){ i, x[i] };
        heap_sift_up(h, kept++);
    }
    /* Scan: only logits above the worst kept one matter. Equal logits come
     * with higher ids, hence worse, so the strict test is exact. */
    if (kept == k) {
        float thr = h[0].logit;
        while ((i = next_above(x, n, i, thr)) < n) {
            if (!(count && count[i] > 0)) {
                h[0] = (cand_t){ i, x[i] };
                heap_sift_down(h, k, 0);
                thr = h[0].logit;
            }
            i++;
        }
    }
    for (int j = 0; j < n_pen; j++)
        if (!isnan(pen[j].logit)) heap_offer(h, &kept, k, pen[j]);
    qsort(h, (size_t)kept, sizeof *h, cmp_better_first);
    return kept;
}

/* ---- Chain stages ---- */

/* Penalised logits of the distinct tokens in the window, into s->pen. The
 * counts double as "already seen" marks (negated) while collecting. */
static void collect_penalties(sb_sampler *s, const float *logits) {
    const float rp = s->par.repeat_penalty;
    s->n_pen = 0;
    for (int j = 0; j < s->hist_len; j++) {
        int32_t t = s->hist[j];
        int32_t c = s->count[t];
        if (c <= 0) continue;
        float l = logits[t];
        l = l <= 0.0f ? l * rp : l / rp;
        l -= (float)c * s->par.frequency_penalty + s->par.presence_penalty;
        s->pen[s->n_pen++] = (cand_t){ t, l };
        s->count[t] = -c;
    }
    for (int j = 0; j < s->n_pen; j++) s->count[s->pen[j].id] = -s->count[s->pen[j].id];
}

static int32_t argmax(const float *x, int n, const int32_t *count, const cand_t *pen, int n_pen) {
    cand_t best = { -1, -INFINITY };
    int i = 0;
    while ((i = next_above(x, n, i, best.logit)) < n) {
        if (!(count && count[i] > 0)) best = (cand_t){ i, x[i] };
        i++;
    }
    for (int j = 0; j < n_pen; j++)
        if (best.id < 0 || better(pen[j], best)) best = pen[j];
    return best.id < 0 ? 0 : best.id;       /* all -inf/NaN: nothing to prefer */
}

/* Top-p over sorted cand[0..n) whose softmax denominator (relative to
 * max_logit) is sum: the smallest prefix whose mass reaches p, or -1 if even
 * all n do not (possible when cand is only the head of a larger set). */
static int top_p_cut(const cand_t *c, int n, float max_logit, double sum, float p) {
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - max_logit) / sum;
        if (cum >= p) return i + 1;
    }
    return -1;
}

/* Top-p with top-k off, over the whole vocabulary. Sorting 128k logits per
 * token is what llama.cpp does here; instead, a histogram of the probability
 * mass by distance below the best logit (1/16 of a logit per bucket) finds
 * the one bucket where the cumulative mass crosses p. Every token above it is
 * kept without being ordered, and only the tokens of that bucket are sorted
 * to find the exact cut. Leaves cand unsorted. */
#define TOP_P_BUCKETS 512
#define TOP_P_PER_LOGIT 16.0f       /* 512 / 16: 32 logits, a factor e^-32 */

static inline int top_p_bucket(float mx, float l) {
    float d = (mx - l) * TOP_P_PER_LOGIT;
    return d < (float)(TOP_P_BUCKETS - 1) ? (int)d : TOP_P_BUCKETS - 1;   /* -inf: last */
}

static int top_p_full(sb_sampler *s, const float *x, int n, float p) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) return 0;         /* nothing has any weight */
    double mass[TOP_P_BUCKETS] = { 0 };
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        float w = expf(x[i] - mx);
        s->w[i] = w;
        sum += w;
        mass[top_p_bucket(mx, x[i])] += w;
    }
    const double target = (double)p * sum;
    double cum = 0.0;
    int edge = TOP_P_BUCKETS - 1;
    for (int b = 0; b < TOP_P_BUCKETS; b++) {
        if (cum + mass[b] >= target) { edge = b; break; }
        cum += mass[b];
    }
    /* Kept tokens fill cand from the front, the edge bucket from the back. */
    int kept = 0, n_edge = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        int b = top_p_bucket(mx, x[i]);
        if (b < edge) s->cand[kept++] = (cand_t){ i, x[i] };
        else if (b == edge) s->cand[n - 1 - n_edge++] = (cand_t){ i, x[i] };
    }
    cand_t *tail = s->cand + n - n_edge;
    qsort(tail, (size_t)n_edge, sizeof *tail, cmp_better_first);
    for (int j = 0; j < n_edge; j++) {
        cum += s->w[tail[j].id];
        s->cand[kept++] = tail[j];          /* kept <= n - n_edge + j: no overlap */
        if (cum >= target) break;
    }
    return kept;
}

/* Min-p over cand[0..n) in any order: keep logit >= best + log(p), which
 * always includes the best. */
static int min_p_cand(cand_t *c, int n, float p) {
    float mx = c[0].logit;
    for (int i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    const float lim = mx + logf(p);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (c[i].logit >= lim) c[kept++] = c[i];
    return kept;
}

/* Min-p straight from the logits (top-k and top-p off): no sort at all. */
static int min_p_filter(sb_sampler *s, const float *x, int n, float p) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    const float lim = mx + logf(p);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (x[i] >= lim) s->cand[kept++] = (cand_t){ i, x[i] };
    return kept;
}

/* Temperature and the draw over cand[0..n). */
static int32_t draw(sb_sampler *s, int n, float temp) {
    const cand_t *c = s->cand;
    if (n <= 0) return 0;
    if (n == 1) return c[0].id;
    float mx = c[0].logit;
    for (int i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    if (mx == -INFINITY) return c[0].id;   /* nothing has any weight */
    const float inv_temp = 1.0f / temp;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        s->w[i] = expf((c[i].logit - mx) * inv_temp);
        sum += s->w[i];
    }
    const double target = rng_uniform(s->rng) * sum;
    double run = 0.0;
    for (int i = 0; i < n; i++) {
        run += s->w[i];
        if (run > target) return c[i].id;
    }
    return c[n - 1].id;     /* rounding left target at the very top */
}

/* The chain up to the draw: the kept candidates in s->cand (their count),
 * or 0 with the token in *pick when the chain has decided alone (greedy,
 * nothing with any weight). */
static int chain(sb_sampler *s, const float *logits, int32_t *pick) {
    const sb_sampling_params *p = &s->par;
    const int n = s->n_vocab;
    const int32_t *count = NULL;
    s->n_pen = 0;
    if (s->penalties_on) {
        collect_penalties(s, logits);
        count = s->count;
    }
    if (p->temp <= 0.0f) return *pick = argmax(logits, n, count, s->pen, s->n_pen), 0;

    const int k = p->top_k > 0 && p->top_k < n ? p->top_k : 0;
    int kept, min_p_done = 0;
    if (k) {
        kept = select_top_k(s, logits, n, k, count, s->pen, s->n_pen);
        if (p->top_p < 1.0f && kept > 0) {
            double sum = 0.0;
            for (int i = 0; i < kept; i++) sum += exp((double)s->cand[i].logit - s->cand[0].logit);
            int cut = top_p_cut(s->cand, kept, s->cand[0].logit, sum, p->top_p);
            if (cut > 0) kept = cut;
        }
    } else {
        const float *x = logits;
        if (s->n_pen) {     /* no heap to slip them into: penalise a copy */
            memcpy(s->work, logits, (size_t)n * sizeof *s->work);
            for (int j = 0; j < s->n_pen; j++) s->work[s->pen[j].id] = s->pen[j].logit;
            x = s->work;
        }
        if (p->top_p < 1.0f) {
            kept = top_p_full(s, x, n, p->top_p);
        } else if (p->min_p > 0.0f) {
            kept = min_p_filter(s, x, n, p->min_p);
            min_p_done = 1;
        } else {
            kept = 0;
            for (int i = 0; i < n; i++)
                if (!isnan(x[i])) s->cand[kept++] = (cand_t){ i, x[i] };
        }
    }
    if (kept == 0) return *pick = argmax(logits, n, count, s->pen, s->n_pen), 0;  /* all NaN / -inf */
    if (p->min_p > 0.0f && !min_p_done) kept = min_p_cand(s->cand, kept, p->min_p);
    return kept;
}

int32_t sb_sampler_sample(sb_sampler *s, const float *logits) {
    int32_t pick = 0;
    const int kept = chain(s, logits, &pick);
    return kept ? draw(s, kept, s->par.temp) : pick;
}

int sb_sampler_dist(sb_sampler *s, const float *logits, int32_t *ids, float *probs) {
    int32_t pick = 0;
    const int n = chain(s, logits, &pick);
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (s->cand[i].logit > mx) mx = s->cand[i].logit;
    if (n == 0 || mx == -INFINITY) {        /* draw's point masses */
        ids[0] = n ? s->cand[0].id : pick;
        probs[0] = 1.0f;
        return 1;
    }
    const float inv_temp = 1.0f / s->par.temp;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s->w[i] = expf((s->cand[i].logit - mx) * inv_temp);
    for (int i = 0; i < n; i++) {
        ids[i] = s->cand[i].id;
        probs[i] = (float)(s->w[i] / sum);
    }
    return n;
}

double sb_sampler_uniform(sb_sampler *s) { return rng_uniform(s->rng); }

double sb_logsumexp(const float *logits, int n) {
    if (n <= 0) return -INFINITY;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logits[i] > mx) mx = logits[i];
    if (mx == -INFINITY) return -INFINITY;
    if (isinf(mx)) return mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    return (double)mx + log(sum);
}

/* Masking by copy keeps every stage above untouched: a -inf logit is never
 * kept by top-k over a finite one, has zero weight in top-p, min-p and the
 * draw, and stays -inf under the penalties. What can still come out is a
 * -inf token when fewer finite ones exist than a stage keeps and rounding
 * lands on it, or argmax's "nothing to prefer" fallback: both are replaced
 * by the best allowed token. */
int32_t sb_sampler_sample_masked(sb_sampler *s, const float *logits, const uint32_t *mask) {
    const int n = s->n_vocab;
    if (!s->masked && !(s->masked = sb_malloc((size_t)n * sizeof *s->masked))) return -2;
    float *x = s->masked;
    int32_t best = -1;
    for (int w = 0; w < (n + 31) / 32; w++) {
        uint32_t bits = mask[w];
        const int base = w * 32, end = SB_MIN(base + 32, n);
        if (bits == 0) {
            for (int i = base; i < end; i++) x[i] = -INFINITY;
            continue;
        }
        for (int i = base; i < end; i++) {
            int on = (bits >> (i - base)) & 1;
            x[i] = on ? logits[i] : -INFINITY;
            if (on && (best < 0 || (!isnan(x[i]) && !(x[best] >= x[i])))) best = i;
        }
    }
    if (best < 0) return -1;
    int32_t tok = sb_sampler_sample(s, x);
    return sb_mask_bit(mask, tok) ? tok : best;
}
