/* kq_attn_ref.c - scalar twins of the attention and SwiGLU kernels (sb_kq_vec): one
 * query head against an F16 K and V cache. Built without SIMD flags. The
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

/* silu(g)·u with sigmoid(x) = 1/(1+e) for x >= 0 and e/(1+e) for x < 0,
 * e = exp(−|x|): the argument of exp is never positive. */
void sb_kq_swiglu_ref(int n, const float *g, const float *u, float *out) {
    for (int i = 0; i < n; i++) {
        const float x = g[i], e = exp_nonpositive(-fabsf(x));
        const float sig = (x >= 0 ? 1.0f : e) / (1.0f + e);
        out[i] = x * sig * u[i];
    }
}
