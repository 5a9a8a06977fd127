/* kq_attn_ref.c - scalar twins of the attention and SwiGLU kernels (sb_kq_vec): one
 * query head, or a group of heads sharing a KV head, against an F16 K and V cache. Built without SIMD flags. The
 * SIMD versions compute the same products; their sums differ only in order
 * and their exp by an ulp or so (FMA in the polynomial).
 */
#include <math.h>

#include "worker/kernels/kq_internal.h"

float sb_kq_attn_qk_f16_ref(int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride, float scale,
                            float *s) {
    float mx = -INFINITY;
    for (int p = 0; p < n_pos; p++) {
        const sb_fp16 *row = k + (size_t)p * stride;
        float d = 0.0f;
        for (int i = 0; i < hd; i++) d += q[i] * sb_fp16_to_fp32(row[i]);
        d *= scale;
        s[p] = d;
        if (d > mx) mx = d;
    }
    return mx;
}

/* The polynomial of KQ_EXP_* for one value (x <= 0). */
static float exp_nonpositive(float x) {
    if (x < KQ_EXP_MIN) return 0.0f;
    const float n = nearbyintf(x * KQ_EXP_LOG2E);
    const float r = (x - n * KQ_EXP_LN2_HI) - n * KQ_EXP_LN2_LO;
    float p = KQ_EXP_P0;
    p = p * r + KQ_EXP_P1;
    p = p * r + KQ_EXP_P2;
    p = p * r + KQ_EXP_P3;
    p = p * r + KQ_EXP_P4;
    p = p * r + KQ_EXP_P5;
    p = p * (r * r) + r + 1.0f;
    return ldexpf(p, (int)n);
}

double sb_kq_attn_exp_ref(float *s, int n, float max) {
    double sum = 0.0;
    for (int p = 0; p < n; p++) {
        const float e = exp_nonpositive(s[p] - max);
        s[p] = e;
        sum += e;
    }
    return sum;
}

void sb_kq_attn_pv_f16_ref(int hd, int n_pos, const float *e, float inv, const sb_fp16 *v, size_t stride,
                           float *out) {
    for (int i = 0; i < hd; i++) out[i] = 0.0f;
    for (int p = 0; p < n_pos; p++) {
        const float w = sb_fp16_to_fp32(sb_fp32_to_fp16(e[p] * inv));
        const sb_fp16 *row = v + (size_t)p * stride;
        for (int i = 0; i < hd; i++) out[i] += w * sb_fp16_to_fp32(row[i]);
    }
}

/* The grouped twins: each K/V row is widened once, a chunk of KQ_REF_CHUNK
 * dims at a time, and feeds every head of the group; each head's sum still
 * runs over i (q·K) or p (P·V) in the order of the per-head twins above. */
#define KQ_REF_CHUNK 64

void sb_kq_attn_qk_f16_g_ref(int hd, int n_pos, int ng, const float *q, const sb_fp16 *k, size_t stride, float scale,
                             float *s, size_t s_stride, float *mx) {
    enum { G = 8 };     /* heads whose running sums are kept at once */
    float kf[KQ_REF_CHUNK], d[G];
    for (int g = 0; g < ng; g++) mx[g] = -INFINITY;
    for (int g0 = 0; g0 < ng; g0 += G) {
        const int n = ng - g0 < G ? ng - g0 : G;
        for (int p = 0; p < n_pos; p++) {
            const sb_fp16 *row = k + (size_t)p * stride;
            for (int g = 0; g < n; g++) d[g] = 0.0f;
            for (int i0 = 0; i0 < hd; i0 += KQ_REF_CHUNK) {
                const int w = hd - i0 < KQ_REF_CHUNK ? hd - i0 : KQ_REF_CHUNK;
                for (int i = 0; i < w; i++) kf[i] = sb_fp16_to_fp32(row[i0 + i]);
                for (int g = 0; g < n; g++) {
                    const float *qg = q + (size_t)(g0 + g) * hd + i0;
                    for (int i = 0; i < w; i++) d[g] += qg[i] * kf[i];
                }
            }
            for (int g = 0; g < n; g++) {
                const float v = d[g] * scale;
                s[(size_t)(g0 + g) * s_stride + p] = v;
                if (v > mx[g0 + g]) mx[g0 + g] = v;
            }
        }
    }
}

void sb_kq_attn_pv_f16_g_ref(int hd, int n_pos, int ng, float *e, size_t e_stride, const float *inv, const sb_fp16 *v,
                             size_t stride, float *out) {
    float vf[KQ_REF_CHUNK];
    for (int g = 0; g < ng; g++) {
        float *eg = e + (size_t)g * e_stride;
        for (int p = 0; p < n_pos; p++) eg[p] = sb_fp16_to_fp32(sb_fp32_to_fp16(eg[p] * inv[g]));
    }
    for (int i = 0; i < ng * hd; i++) out[i] = 0.0f;
    for (int p = 0; p < n_pos; p++)
        for (int i0 = 0; i0 < hd; i0 += KQ_REF_CHUNK) {
            const int w = hd - i0 < KQ_REF_CHUNK ? hd - i0 : KQ_REF_CHUNK;
            for (int i = 0; i < w; i++) vf[i] = sb_fp16_to_fp32(v[(size_t)p * stride + i0 + i]);
            for (int g = 0; g < ng; g++) {
                const float wg = e[(size_t)g * e_stride + p];
                float *o = out + (size_t)g * hd + i0;
                for (int i = 0; i < w; i++) o[i] += wg * vf[i];
            }
        }
}

/* silu(g)·u with sigmoid(x) = 1/(1+e) for x >= 0 and e/(1+e) for x < 0,
 * e = exp(−|x|): the argument of exp is never positive. */
void sb_kq_swiglu_ref(int n, const float *g, const float *u, float *out) {
    for (int i = 0; i < n; i++) {
        const float x = g[i], e = exp_nonpositive(-fabsf(x));
        const float sig = (x >= 0 ? 1.0f : e) / (1.0f + e);
        out[i] = x * sig * u[i];
    }
}
