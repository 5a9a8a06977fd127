/* test_attn.c - the F16-cache attention and SwiGLU kernels (sb_kq_vec_table) at every
 * level this CPU runs, against their scalar twins and against a double
 * precision computation:
 *  1. qk_f16: scores and their max, for head sizes with and without SIMD
 *     tails and position counts around the 4-position blocks;
 *  2. softmax_exp: within 3 ulp-ish (4e-7 relative) of libm's exp, exactly
 *     0 far below the max, the sum is the sum of what was stored;
 *  3. pv_f16: the probabilities are rounded to F16 before the product;
 *  4. swiglu: silu(g)·u within 1e-6 relative of double precision;
 *  5. qk_f16_g / pv_f16_g (heads sharing a KV head): bit for bit the
 *     per-head kernels of the same level, for every group size the models
 *     have, head sizes with and without SIMD tails, and position counts
 *     around the 4-position blocks and the 16-lane vectors. With 1-3 this
 *     ties the grouped SIMD kernels to their scalar twin.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "worker/kernels/sb_kq.h"

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static float rng_normal(void) {
    double acc = 0;
    for (int i = 0; i < 4; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        acc += (double)(rng_state >> 11) / 9007199254740992.0 - 0.5;
    }
    return (float)(acc * 1.7320508);
}

static const int head_sizes[] = { 1, 7, 16, 40, 64, 80, 96, 128, 129 };
static const int position_counts[] = { 1, 3, 4, 5, 17, 64, 130 };
#define N_HS (sizeof head_sizes / sizeof head_sizes[0])
#define N_PC (sizeof position_counts / sizeof position_counts[0])

/* A cache of n_pos rows of `stride` F16 values (stride > hd: heads side by side). */
static sb_fp16 *make_cache(int n_pos, size_t stride, float scale) {
    sb_fp16 *k = malloc(sizeof(sb_fp16) * stride * (size_t)n_pos);
    assert_non_null(k);
    for (size_t i = 0; i < stride * (size_t)n_pos; i++) k[i] = sb_fp32_to_fp16(scale * rng_normal());
    return k;
}

static void test_qk(void **state) {
    (void)state;
    const sb_kq_vec *ref = sb_kq_vec_table(SB_KQ_REF);
    for (int level = 0; level <= sb_kq_best_level(); level++) {
        const sb_kq_vec *a = sb_kq_vec_table(level);
        for (size_t hi = 0; hi < N_HS; hi++)
            for (size_t pi = 0; pi < N_PC; pi++) {
                const int hd = head_sizes[hi], np = position_counts[pi];
                const size_t stride = (size_t)hd * 2 + 3;
                sb_fp16 *k = make_cache(np, stride, 1.0f);
                float *q = malloc(sizeof(float) * (size_t)hd), *s = malloc(sizeof(float) * (size_t)np);
                float *sr = malloc(sizeof(float) * (size_t)np);
                assert_true(q && s && sr);
                for (int i = 0; i < hd; i++) q[i] = sb_fp16_to_fp32(sb_fp32_to_fp16(rng_normal()));
                const float scale = 1.0f / sqrtf((float)hd);
                const float mx = a->qk_f16(hd, np, q, k + 1, stride, scale, s);
                const float mxr = ref->qk_f16(hd, np, q, k + 1, stride, scale, sr);
                float smax = -INFINITY;
                for (int p = 0; p < np; p++) {
                    double exact = 0, mag = 0;
                    for (int i = 0; i < hd; i++) {
                        const double t = (double)q[i] * sb_fp16_to_fp32(k[1 + (size_t)p * stride + i]);
                        exact += t;
                        mag += fabs(t);
                    }
                    const double tol = 1e-6 * mag * scale + 1e-30;
                    if (fabs(s[p] - exact * scale) > tol || fabs(sr[p] - exact * scale) > tol)
                        fail_msg("qk level %s hd %d np %d p %d: %.9g, ref %.9g, exact %.9g", sb_kq_level_name(level),
                                 hd, np, p, s[p], sr[p], exact * scale);
                    if (s[p] > smax) smax = s[p];
                }
                assert_true(mx == smax);
                assert_true(fabsf(mx - mxr) <= 1e-5f * (1.0f + fabsf(mxr)));
                free(k);
                free(q);
                free(s);
                free(sr);
            }
    }
}

static void test_softmax_exp(void **state) {
    (void)state;
    enum { N = 1000 };
    for (int level = 0; level <= sb_kq_best_level(); level++) {
        const sb_kq_vec *a = sb_kq_vec_table(level);
        for (int n = 1; n <= N; n += n < 40 ? 1 : 97) {
            float s[N], x[N];
            for (int i = 0; i < n; i++) x[i] = s[i] = 30.0f * rng_normal();
            x[n / 2] = s[n / 2] = -200.0f;          /* far below: exp is 0 */
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) mx = fmaxf(mx, s[i]);
            const double sum = a->softmax_exp(s, n, mx);
            double stored = 0;
            for (int i = 0; i < n; i++) {
                const double want = exp((double)(x[i] - mx));   /* the kernel subtracts in float */
                if (x[i] - mx < -87.3365448f) assert_true(s[i] == 0.0f);   /* under FLT_MIN: flushed */
                else if (fabs(s[i] - want) > 4e-7 * want + 1e-38)
                    fail_msg("exp level %s: exp(%.9g) = %.9g, want %.9g", sb_kq_level_name(level), x[i] - mx, s[i], want);
                stored += s[i];
            }
            assert_true(fabs(sum - stored) <= 1e-6 * stored);
        }
    }
}

static void test_pv(void **state) {
    (void)state;
    const sb_kq_vec *ref = sb_kq_vec_table(SB_KQ_REF);
    for (int level = 0; level <= sb_kq_best_level(); level++) {
        const sb_kq_vec *a = sb_kq_vec_table(level);
        for (size_t hi = 0; hi < N_HS; hi++)
            for (size_t pi = 0; pi < N_PC; pi++) {
                const int hd = head_sizes[hi], np = position_counts[pi];
                const size_t stride = (size_t)hd + 5;
                sb_fp16 *v = make_cache(np, stride, 1.0f);
                float *e = malloc(sizeof(float) * (size_t)np), *o = malloc(sizeof(float) * (size_t)hd);
                float *orf = malloc(sizeof(float) * (size_t)hd);
                assert_true(e && o && orf);
                double sum = 0;
                for (int p = 0; p < np; p++) sum += e[p] = expf(rng_normal());
                const float inv = (float)(1.0 / sum);
                for (int i = 0; i < hd; i++) o[i] = orf[i] = NAN;   /* outputs are written, not accumulated */
                a->pv_f16(hd, np, e, inv, v + 2, stride, o);
                ref->pv_f16(hd, np, e, inv, v + 2, stride, orf);
                for (int i = 0; i < hd; i++) {
                    double exact = 0, mag = 0;
                    for (int p = 0; p < np; p++) {
                        const double w = sb_fp16_to_fp32(sb_fp32_to_fp16(e[p] * inv));
                        const double t = w * sb_fp16_to_fp32(v[2 + (size_t)p * stride + i]);
                        exact += t;
                        mag += fabs(t);
                    }
                    const double tol = 1e-6 * mag + 1e-30;
                    if (fabs(o[i] - exact) > tol || fabs(orf[i] - exact) > tol)
                        fail_msg("pv level %s hd %d np %d i %d: %.9g, ref %.9g, exact %.9g", sb_kq_level_name(level), hd,
                                 np, i, o[i], orf[i], exact);
                }
                free(v);
                free(e);
                free(o);
                free(orf);
            }
    }
}

/* silu(g)·u against double precision, over the whole useful range and the
 * exp cut-off (|x| > 87: sigmoid is exactly 0 or 1); out aliasing u. */
static void test_swiglu(void **state) {
    (void)state;
    enum { N = 517 };
    for (int level = 0; level <= sb_kq_best_level(); level++) {
        const sb_kq_vec *a = sb_kq_vec_table(level);
        float g[N], u[N], o[N];
        for (int i = 0; i < N; i++) {
            g[i] = i < 8 ? (float)(i - 4) * 30.0f : 6.0f * rng_normal();
            u[i] = o[i] = rng_normal();
        }
        a->swiglu(N, g, o, o);
        for (int i = 0; i < N; i++) {
            const double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            if (fabs(o[i] - want) > 1e-6 * fabs(want) + 1e-30)
                fail_msg("swiglu level %s: silu(%.9g)*%.9g = %.9g, want %.9g", sb_kq_level_name(level), g[i], u[i], o[i], want);
        }
    }
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void test_grouped(void **state) {
    (void)state;
    static const int groups[] = { 1, 2, 3, 4, 5, 8 };
    static const int hds[] = { 7, 40, 64, 80, 96, 128, 129 };
    static const int nps[] = { 1, 3, 4, 5, 15, 16, 17, 33, 64, 130, 257 };
    for (int level = 0; level <= sb_kq_best_level(); level++) {
        const sb_kq_vec *a = sb_kq_vec_table(level);
        for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
            for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
                for (size_t pi = 0; pi < sizeof nps / sizeof nps[0]; pi++) {
                    const int ng = groups[gi], hd = hds[hi], np = nps[pi];
                    const size_t stride = (size_t)hd * 3 + 1, ss = (size_t)np + 7;   /* rows of other heads between */
                    sb_fp16 *k = make_cache(np, stride, 1.0f), *v = make_cache(np, stride, 1.0f);
                    float *q = malloc(sizeof(float) * (size_t)(ng * hd)), *s = malloc(sizeof(float) * ss * ng);
                    float *sr = malloc(sizeof(float) * ss * ng), *mx = malloc(sizeof(float) * ng);
                    float *inv = malloc(sizeof(float) * ng), *o = malloc(sizeof(float) * (size_t)(ng * hd));
                    float *orf = malloc(sizeof(float) * (size_t)(ng * hd));
                    assert_true(k && v && q && s && sr && mx && inv && o && orf);
                    for (int i = 0; i < ng * hd; i++) q[i] = sb_fp16_to_fp32(sb_fp32_to_fp16(rng_normal()));
                    for (size_t i = 0; i < ss * ng; i++) s[i] = sr[i] = -7.0f;   /* untouched past n_pos */
                    const float scale = 1.0f / sqrtf((float)hd);
                    a->qk_f16_g(hd, np, ng, q, k + 2, stride, scale, s, ss, mx);
                    for (int g = 0; g < ng; g++) {
                        const float m = a->qk_f16(hd, np, q + (size_t)g * hd, k + 2, stride, scale, sr + g * ss);
                        if (!same_bits(&m, &mx[g], 1))
                            fail_msg("qk_g level %s ng %d hd %d np %d head %d: max %.9g, per head %.9g",
                                     sb_kq_level_name(level), ng, hd, np, g, mx[g], m);
                    }
                    for (size_t i = 0; i < ss * ng; i++)
                        if (!same_bits(&s[i], &sr[i], 1))
                            fail_msg("qk_g level %s ng %d hd %d np %d head %d p %d: %.9g, per head %.9g",
                                     sb_kq_level_name(level), ng, hd, np, (int)(i / ss), (int)(i % ss), s[i], sr[i]);
                    /* P·V on probabilities of the scores' size range */
                    for (int g = 0; g < ng; g++) {
                        double sum = 0;
                        for (int p = 0; p < np; p++) sum += sr[g * ss + p] = expf(rng_normal());
                        inv[g] = (float)(1.0 / sum);
                        memcpy(s + g * ss, sr + g * ss, sizeof(float) * (size_t)np);
                    }
                    for (int i = 0; i < ng * hd; i++) o[i] = orf[i] = NAN;
                    for (int g = 0; g < ng; g++)
                        a->pv_f16(hd, np, sr + g * ss, inv[g], v + 1, stride, orf + (size_t)g * hd);
                    a->pv_f16_g(hd, np, ng, s, ss, inv, v + 1, stride, o);
                    for (int i = 0; i < ng * hd; i++)
                        if (!same_bits(&o[i], &orf[i], 1))
                            fail_msg("pv_g level %s ng %d hd %d np %d head %d i %d: %.9g, per head %.9g",
                                     sb_kq_level_name(level), ng, hd, np, i / hd, i % hd, o[i], orf[i]);
                    for (int g = 0; g < ng; g++)
                        for (int p = 0; p < np; p++) {
                            const float w = sb_fp16_to_fp32(sb_fp32_to_fp16(sr[g * ss + p] * inv[g]));
                            if (!same_bits(&w, &s[g * ss + p], 1))
                                fail_msg("pv_g level %s ng %d np %d: weight %d of head %d is %.9g, not f16(e·inv) %.9g",
                                         sb_kq_level_name(level), ng, np, p, g, s[g * ss + p], w);
                        }
                    free(k), free(v), free(q), free(s), free(sr), free(mx), free(inv), free(o), free(orf);
                }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qk),
        cmocka_unit_test(test_softmax_exp),
        cmocka_unit_test(test_pv),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_grouped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
