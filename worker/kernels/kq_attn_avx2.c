/* kq_attn_avx2.c - attention over the F16 KV cache, AVX2/FMA/F16C
 * (sb_kq_vec), and SwiGLU. 8 dims per FMA; dims past the last multiple of 8 are done
 * in scalar code. Scalar twins in kq_attn_ref.c.
 */
#include <math.h>

#include "worker/kernels/kq_x86.h"

static inline __m256 load_f16x8(const sb_fp16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

float sb_kq_attn_qk_f16_avx2(int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride, float scale,
                             float *s) {
    const int h8 = hd & ~7;
    float mx = -INFINITY;
    for (int p = 0; p < n_pos; p++) {
        const sb_fp16 *row = k + (size_t)p * stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int i = 0;
        for (; i + 16 <= h8; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(row + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load_f16x8(row + i + 8), a1);
        }
        if (i < h8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(row + i), a0);
        float d = kq_hsum_f32x8(_mm256_add_ps(a0, a1));
        for (i = h8; i < hd; i++) d += q[i] * kq_f16(row[i]);
        d *= scale;
        s[p] = d;
        if (d > mx) mx = d;
    }
    return mx;
}

static inline __m256 exp_nonpositive(__m256 x) {
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(KQ_EXP_MIN), _CMP_GE_OQ);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KQ_EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KQ_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KQ_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(KQ_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KQ_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KQ_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KQ_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KQ_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KQ_EXP_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    /* 2^n for -126 <= n <= 0 as exponent bits; live lanes have n >= -126 */
    const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(pow2)), live);
}

double sb_kq_attn_exp_avx2(float *s, int n, float max) {
    const __m256 mv = _mm256_set1_ps(max);
    double sum = 0.0;
    int p = 0;
    for (; p + 8 <= n; p += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + p), mv));
        _mm256_storeu_ps(s + p, e);
        sum += (double)kq_hsum_f32x8(e);
    }
    if (p < n) {
        float t[8];
        for (int i = 0; i < 8; i++) t[i] = p + i < n ? s[p + i] : -INFINITY;
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(t), mv));
        _mm256_storeu_ps(t, e);
        for (int i = 0; p + i < n; i++) {
            s[p + i] = t[i];
            sum += t[i];
        }
    }
    return sum;
}

void sb_kq_attn_pv_f16_avx2(int hd, int n_pos, const float *e, float inv, const sb_fp16 *v, size_t stride,
                            float *out) {
    const int h8 = hd & ~7;
    for (int c = 0; c < h8; c += 32) {
        const int k = h8 - c >= 32 ? 4 : (h8 - c) / 8;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int p = 0; p < n_pos; p++) {
            const __m256 w = _mm256_set1_ps(_cvtsh_ss(_cvtss_sh(e[p] * inv, _MM_FROUND_TO_NEAREST_INT)));
            const sb_fp16 *row = v + (size_t)p * stride + c;
            a0 = _mm256_fmadd_ps(w, load_f16x8(row), a0);
            if (k > 1) a1 = _mm256_fmadd_ps(w, load_f16x8(row + 8), a1);
            if (k > 2) a2 = _mm256_fmadd_ps(w, load_f16x8(row + 16), a2);
            if (k > 3) a3 = _mm256_fmadd_ps(w, load_f16x8(row + 24), a3);
        }
        _mm256_storeu_ps(out + c, a0);
        if (k > 1) _mm256_storeu_ps(out + c + 8, a1);
        if (k > 2) _mm256_storeu_ps(out + c + 16, a2);
        if (k > 3) _mm256_storeu_ps(out + c + 24, a3);
    }
    for (int i = h8; i < hd; i++) {
        float acc = 0.0f;
        for (int p = 0; p < n_pos; p++)
            acc += sb_fp16_to_fp32(sb_fp32_to_fp16(e[p] * inv)) * kq_f16(v[(size_t)p * stride + i]);
        out[i] = acc;
    }
}

/* ---- heads sharing a KV head (GQA) ------------------------------------------
 * Up to 4 heads at once (KQ_TILE); each widened K or V vector feeds all of
 * them. Per head, the operations are those of the two kernels above in the
 * same order (same lanes, same reduction, same scalar tails), so the numbers
 * are theirs bit for bit. G and NV are constants after inlining: the arrays
 * live in registers (4 heads × 2 vectors + 2 K vectors in q·K; at most 8
 * accumulators in P·V, of 16 ymm). */
#define KQ_TILE 4
#define AI static inline __attribute__((always_inline))

AI void qk_tile(const int G, int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride, float scale, float *s,
                size_t s_stride, float *mx) {
    const int h8 = hd & ~7;
    for (int p = 0; p < n_pos; p++) {
        const sb_fp16 *row = k + (size_t)p * stride;
        __m256 a[KQ_TILE][2];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) a[g][0] = a[g][1] = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= h8; i += 16) {
            const __m256 k0 = load_f16x8(row + i), k1 = load_f16x8(row + i + 8);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                const float *qg = q + (size_t)g * hd + i;
                a[g][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qg), k0, a[g][0]);
                a[g][1] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8), k1, a[g][1]);
            }
        }
        if (i < h8) {
            const __m256 k0 = load_f16x8(row + i);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) a[g][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * hd + i), k0, a[g][0]);
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            float d = kq_hsum_f32x8(_mm256_add_ps(a[g][0], a[g][1]));
            for (i = h8; i < hd; i++) d += qg[i] * kq_f16(row[i]);
            d *= scale;
            s[(size_t)g * s_stride + p] = d;
            if (d > mx[g]) mx[g] = d;
        }
    }
}

void sb_kq_attn_qk_f16_g_avx2(int hd, int n_pos, int ng, const float *q, const sb_fp16 *k, size_t stride, float scale,
                              float *s, size_t s_stride, float *mx) {
    for (int g = 0; g < ng; g++) mx[g] = -INFINITY;
    for (int g = 0; g < ng; g += KQ_TILE) {
        const float *qg = q + (size_t)g * hd;
        float *sg = s + (size_t)g * s_stride;
        switch (ng - g) {
        case 1: qk_tile(1, hd, n_pos, qg, k, stride, scale, sg, s_stride, mx + g); break;
        case 2: qk_tile(2, hd, n_pos, qg, k, stride, scale, sg, s_stride, mx + g); break;
        case 3: qk_tile(3, hd, n_pos, qg, k, stride, scale, sg, s_stride, mx + g); break;
        default: qk_tile(4, hd, n_pos, qg, k, stride, scale, sg, s_stride, mx + g); break;
        }
    }
}

/* P·V for G heads over dims [c0, c1) (a multiple of NV·8 long): G·NV
 * accumulators, NV = 4 for one or two heads (enough chains in flight), 2
 * for three or four (8 accumulators, the register file's half). */
AI void pv_tile(const int G, const int NV, int hd, int c0, int c1, int n_pos, const float *e, size_t e_stride,
                const sb_fp16 *v, size_t stride, float *out) {
    for (int c = c0; c < c1; c += NV * 8) {
        __m256 a[KQ_TILE][4];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int r = 0; r < NV; r++) a[g][r] = _mm256_setzero_ps();
        for (int p = 0; p < n_pos; p++) {
            const sb_fp16 *row = v + (size_t)p * stride + c;
            __m256 vv[4];
#pragma GCC unroll 4
            for (int r = 0; r < NV; r++) vv[r] = load_f16x8(row + 8 * r);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                const __m256 w = _mm256_broadcast_ss(e + (size_t)g * e_stride + p);
#pragma GCC unroll 4
                for (int r = 0; r < NV; r++) a[g][r] = _mm256_fmadd_ps(w, vv[r], a[g][r]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int r = 0; r < NV; r++) _mm256_storeu_ps(out + (size_t)g * hd + c + 8 * r, a[g][r]);
    }
}

AI void pv_heads(const int G, const int NV, int hd, int n_pos, const float *e, size_t e_stride, const sb_fp16 *v,
                 size_t stride, float *out) {
    const int h8 = hd & ~7, hw = h8 - h8 % (NV * 8);
    pv_tile(G, NV, hd, 0, hw, n_pos, e, e_stride, v, stride, out);
    pv_tile(G, 1, hd, hw, h8, n_pos, e, e_stride, v, stride, out);
    for (int g = 0; g < G; g++)
        for (int i = h8; i < hd; i++) {
            const float *eg = e + (size_t)g * e_stride;
            float acc = 0.0f;
            for (int p = 0; p < n_pos; p++) acc += eg[p] * kq_f16(v[(size_t)p * stride + i]);
            out[(size_t)g * hd + i] = acc;
        }
}

void sb_kq_attn_pv_f16_g_avx2(int hd, int n_pos, int ng, float *e, size_t e_stride, const float *inv,
                              const sb_fp16 *v, size_t stride, float *out) {
    /* the weights once: f16(e·inv), as pv_f16 computes them in its loop */
    for (int g = 0; g < ng; g++) {
        const __m256 iv = _mm256_set1_ps(inv[g]);
        float *eg = e + (size_t)g * e_stride;
        int p = 0;
        for (; p + 8 <= n_pos; p += 8)
            _mm256_storeu_ps(eg + p, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(eg + p), iv),
                                                                     _MM_FROUND_TO_NEAREST_INT)));
        for (; p < n_pos; p++) eg[p] = _cvtsh_ss(_cvtss_sh(eg[p] * inv[g], _MM_FROUND_TO_NEAREST_INT));
    }
    for (int g = 0; g < ng; g += KQ_TILE) {
        const float *eg = e + (size_t)g * e_stride;
        float *og = out + (size_t)g * hd;
        switch (ng - g) {
        case 1: pv_heads(1, 4, hd, n_pos, eg, e_stride, v, stride, og); break;
        case 2: pv_heads(2, 4, hd, n_pos, eg, e_stride, v, stride, og); break;
        case 3: pv_heads(3, 2, hd, n_pos, eg, e_stride, v, stride, og); break;
        default: pv_heads(4, 2, hd, n_pos, eg, e_stride, v, stride, og); break;
        }
    }
}

void sb_kq_swiglu_avx2(int n, const float *g, const float *u, float *out) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = exp_nonpositive(_mm256_or_ps(x, sign));     /* exp(−|x|) */
        const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
        const __m256 sig = _mm256_div_ps(_mm256_blendv_ps(one, e, neg), _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(x, sig), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        float xs[8] = { 0 }, us[8] = { 0 }, os[8];
        for (int k = 0; i + k < n; k++) { xs[k] = g[i + k]; us[k] = u[i + k]; }
        sb_kq_swiglu_avx2(8, xs, us, os);
        for (int k = 0; i + k < n; k++) out[i + k] = os[k];
    }
}
