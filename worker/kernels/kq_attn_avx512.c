/* kq_attn_avx512.c - attention over the F16 KV cache and SwiGLU, AVX-512 (sb_kq_vec).
 * Scalar twins in kq_attn_ref.c.
 *
 * q·K: 16 dims per FMA (K widened by vcvtph2ps), four positions at a time so
 * that one shuffle tree reduces four scores. P·V: up to 64 output dims in
 * registers per pass over the positions. exp: the KQ_EXP_* polynomial with
 * vscalefps for the 2^n (which also takes care of underflow).
 */
#include <math.h>

#include "worker/kernels/kq_x86.h"

static inline __mmask16 tail_mask(int left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }

static inline __m512 load_f16(const sb_fp16 *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* [Σa, Σb, Σc, Σd] */
static inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                      _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

float sb_kq_attn_qk_f16_avx512(int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride, float scale,
                               float *s) {
    __m128 mx4 = _mm_set1_ps(-INFINITY);
    const __m128 sc4 = _mm_set1_ps(scale);
    int p = 0;
    for (; p + 4 <= n_pos; p += 4) {
        const sb_fp16 *k0 = k + (size_t)p * stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = tail_mask(hd - i);
            const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
            a0 = _mm512_fmadd_ps(qv, load_f16(k0 + i, m), a0);
            a1 = _mm512_fmadd_ps(qv, load_f16(k0 + stride + i, m), a1);
            a2 = _mm512_fmadd_ps(qv, load_f16(k0 + 2 * stride + i, m), a2);
            a3 = _mm512_fmadd_ps(qv, load_f16(k0 + 3 * stride + i, m), a3);
        }
        const __m128 d = _mm_mul_ps(reduce4(a0, a1, a2, a3), sc4);
        _mm_storeu_ps(s + p, d);
        mx4 = _mm_max_ps(mx4, d);
    }
    mx4 = _mm_max_ps(mx4, _mm_movehl_ps(mx4, mx4));
    float mx = _mm_cvtss_f32(_mm_max_ss(mx4, _mm_movehdup_ps(mx4)));
    for (; p < n_pos; p++) {
        const sb_fp16 *row = k + (size_t)p * stride;
        __m512 a = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = tail_mask(hd - i);
            a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load_f16(row + i, m), a);
        }
        const float d = _mm512_reduce_add_ps(a) * scale;
        s[p] = d;
        if (d > mx) mx = d;
    }
    return mx;
}

/* ---- heads sharing a KV head (GQA) ------------------------------------------
 * Up to 4 heads in registers at once (KQ_TILE): q·K holds 4 heads × 4
 * positions = 16 accumulators, P·V 4 heads × 64 dims; each widened K or V
 * vector feeds all the tile's heads. Per head, the operations are those of
 * the kernels above in the same order: the same lanes accumulate the same
 * products, the same reduction tree (reduce4 gives each input's sum on its
 * own, whichever four are passed), the same masked tails. G is a constant
 * after inlining, so the arrays below live in registers. */
#define KQ_TILE 4
#define AI static inline __attribute__((always_inline))

AI void qk_tile(const int G, int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride, float scale, float *s,
                size_t s_stride, float *mx) {
    const __m128 sc4 = _mm_set1_ps(scale);
    __m128 mx4[KQ_TILE];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) mx4[g] = _mm_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 4 <= n_pos; p += 4) {
        const sb_fp16 *k0 = k + (size_t)p * stride;
        __m512 a[KQ_TILE][4];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) a[g][r] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = tail_mask(hd - i);
            __m512 kv[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) kv[r] = load_f16(k0 + (size_t)r * stride + i, m);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                const __m512 qv = _mm512_maskz_loadu_ps(m, q + (size_t)g * hd + i);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) a[g][r] = _mm512_fmadd_ps(qv, kv[r], a[g][r]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const __m128 d = _mm_mul_ps(reduce4(a[g][0], a[g][1], a[g][2], a[g][3]), sc4);
            _mm_storeu_ps(s + (size_t)g * s_stride + p, d);
            mx4[g] = _mm_max_ps(mx4[g], d);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        const __m128 m2 = _mm_max_ps(mx4[g], _mm_movehl_ps(mx4[g], mx4[g]));
        mx[g] = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    }
    for (; p < n_pos; p++) {
        const sb_fp16 *row = k + (size_t)p * stride;
        __m512 a[KQ_TILE];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) a[g] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = tail_mask(hd - i);
            const __m512 kv = load_f16(row + i, m);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) a[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + (size_t)g * hd + i), kv, a[g]);
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const float d = _mm512_reduce_add_ps(a[g]) * scale;
            s[(size_t)g * s_stride + p] = d;
            if (d > mx[g]) mx[g] = d;
        }
    }
}

void sb_kq_attn_qk_f16_g_avx512(int hd, int n_pos, int ng, const float *q, const sb_fp16 *k, size_t stride,
                                float scale, float *s, size_t s_stride, float *mx) {
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

/* P·V for G heads, NV·16 dims at a time. One or two heads keep 8 vectors
 * (128 dims) in flight so that the FMA chains still hide their latency;
 * vectors past hd have an empty mask and are skipped. */
AI void pv_tile(const int G, const int NV, int hd, int n_pos, const float *e, size_t e_stride, const sb_fp16 *v,
                size_t stride, float *out) {
    for (int c = 0; c < hd; c += NV * 16) {
        __mmask16 m[8];
        __m512 a[KQ_TILE][8];
#pragma GCC unroll 8
        for (int r = 0; r < NV; r++) m[r] = hd - c > 16 * r ? tail_mask(hd - c - 16 * r) : 0;
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 8
            for (int r = 0; r < NV; r++) a[g][r] = _mm512_setzero_ps();
        for (int p = 0; p < n_pos; p++) {
            const sb_fp16 *row = v + (size_t)p * stride + c;
            __m512 w[KQ_TILE];
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) w[g] = _mm512_set1_ps(e[(size_t)g * e_stride + p]);
#pragma GCC unroll 8
            for (int r = 0; r < NV; r++)
                if (m[r]) {
                    const __m512 vv = load_f16(row + 16 * r, m[r]);
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++) a[g][r] = _mm512_fmadd_ps(w[g], vv, a[g][r]);
                }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 8
            for (int r = 0; r < NV; r++)
                if (m[r]) _mm512_mask_storeu_ps(out + (size_t)g * hd + c + 16 * r, m[r], a[g][r]);
    }
}

void sb_kq_attn_pv_f16_g_avx512(int hd, int n_pos, int ng, float *e, size_t e_stride, const float *inv,
                                const sb_fp16 *v, size_t stride, float *out) {
    /* the weights once: f16(e·inv), as pv_f16 computes them in its loop */
    for (int g = 0; g < ng; g++) {
        const __m512 iv = _mm512_set1_ps(inv[g]);
        float *eg = e + (size_t)g * e_stride;
        for (int p = 0; p < n_pos; p += 16) {
            const __mmask16 m = tail_mask(n_pos - p);
            const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, eg + p), iv);
            _mm512_mask_storeu_ps(eg + p, m,
                                  _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        }
    }
    for (int g = 0; g < ng; g += KQ_TILE) {
        const float *eg = e + (size_t)g * e_stride;
        float *og = out + (size_t)g * hd;
        switch (ng - g) {
        case 1: pv_tile(1, 8, hd, n_pos, eg, e_stride, v, stride, og); break;
        case 2: pv_tile(2, 8, hd, n_pos, eg, e_stride, v, stride, og); break;
        case 3: pv_tile(3, 4, hd, n_pos, eg, e_stride, v, stride, og); break;
        default: pv_tile(4, 4, hd, n_pos, eg, e_stride, v, stride, og); break;
        }
    }
}

/* exp(x) for x <= 0, 16 lanes (see KQ_EXP_* in kq_internal.h). */
static inline __m512 exp_nonpositive(__m512 x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(KQ_EXP_MIN), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KQ_EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KQ_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KQ_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(KQ_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KQ_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KQ_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KQ_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KQ_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KQ_EXP_P5));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, p, n);
}

double sb_kq_attn_exp_avx512(float *s, int n, float max) {
    const __m512 mv = _mm512_set1_ps(max);
    double sum = 0.0;
    for (int p = 0; p < n; p += 16) {
        const __mmask16 m = tail_mask(n - p);
        const __m512 x = _mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, s + p), mv);
        const __m512 e = exp_nonpositive(x);
        _mm512_mask_storeu_ps(s + p, m, e);
        sum += (double)_mm512_reduce_add_ps(e);
    }
    return sum;
}

void sb_kq_attn_pv_f16_avx512(int hd, int n_pos, const float *e, float inv, const sb_fp16 *v, size_t stride,
                              float *out) {
    const __m512 iv = _mm512_set1_ps(inv);
    for (int c = 0; c < hd; c += 64) {
        const __mmask16 m0 = tail_mask(hd - c), m1 = hd - c > 16 ? tail_mask(hd - c - 16) : 0;
        const __mmask16 m2 = hd - c > 32 ? tail_mask(hd - c - 32) : 0, m3 = hd - c > 48 ? tail_mask(hd - c - 48) : 0;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int p = 0; p < n_pos; p++) {
            /* the probability rounded to F16, as in the reference */
            const __m512 w = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(_mm512_set1_ps(e[p]), iv),
                                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            const sb_fp16 *row = v + (size_t)p * stride + c;
            a0 = _mm512_fmadd_ps(w, load_f16(row, m0), a0);
            if (m1) a1 = _mm512_fmadd_ps(w, load_f16(row + 16, m1), a1);
            if (m2) a2 = _mm512_fmadd_ps(w, load_f16(row + 32, m2), a2);
            if (m3) a3 = _mm512_fmadd_ps(w, load_f16(row + 48, m3), a3);
        }
        _mm512_mask_storeu_ps(out + c, m0, a0);
        if (m1) _mm512_mask_storeu_ps(out + c + 16, m1, a1);
        if (m2) _mm512_mask_storeu_ps(out + c + 32, m2, a2);
        if (m3) _mm512_mask_storeu_ps(out + c + 48, m3, a3);
    }
}

void sb_kq_swiglu_avx512(int n, const float *g, const float *u, float *out) {
    const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        const __m512 e = exp_nonpositive(_mm512_or_ps(x, sign));     /* exp(−|x|) */
        const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
        const __m512 sig = _mm512_div_ps(_mm512_mask_mov_ps(one, neg, e), _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sig), uv));
    }
}
