/* kq_ref.c - scalar reference kernels: float types and the 32-element
 * "legacy" quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
 *
 * Built without SIMD flags and without FP contraction (-std=c11), so every
 * float operation happens as written. That matters twice: the quantizers
 * must reproduce llama.cpp's quantize_row_*_ref bytes exactly (the same
 * arithmetic in the same order), and the SIMD kernels are checked against
 * these functions.
 *
 * Dot products accumulate integers inside a block, then scale once per
 * block in float, as ggml does; the float-type dots accumulate in double,
 * like ggml's scalar path.
 */
#include <math.h>

#include "worker/kernels/kq_internal.h"

/* ==== F32 / F16 / BF16 ================================================== */

void sb_kq_deq_f32_ref(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
void sb_kq_quant_f32_ref(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void sb_kq_deq_f16_ref(const void *src, float *dst, int64_t n) {
    const sb_fp16 *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = sb_fp16_to_fp32(h[i]);
}
void sb_kq_quant_f16_ref(const float *src, void *dst, int64_t n) {
    sb_fp16 *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = sb_fp32_to_fp16(src[i]);
}

void sb_kq_deq_bf16_ref(const void *src, float *dst, int64_t n) {
    const sb_bf16 *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = sb_bf16_to_fp32(h[i]);
}
void sb_kq_quant_bf16_ref(const float *src, void *dst, int64_t n) {
    sb_bf16 *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = sb_fp32_to_bf16(src[i]);
}

void sb_kq_dot_f32_f32_ref(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

void sb_kq_dot_f16_f16_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_fp16 *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(sb_fp16_to_fp32(x[i]) * sb_fp16_to_fp32(y[i]));
    *s = (float)sum;
}

void sb_kq_dot_bf16_bf16_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_bf16 *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(sb_bf16_to_fp32(x[i]) * sb_bf16_to_fp32(y[i]));
    *s = (float)sum;
}

/* ==== legacy quants: 32 elements per block ============================== */
/* Element j of a block sits in the low nibble of qs[j] for j < 16 and in the
 * high nibble of qs[j-16] otherwise; Q5's fifth bits are bit j of qh. */

/* The value with the largest magnitude (its sign kept); first one wins. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = 3.40282347e+38f, hi = -3.40282347e+38f;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Q4_0: x = d·(q - 8), d = max/-8 so the extreme value maps to q = 0. */
void sb_kq_quant_q4_0_ref(const float *src, void *dst, int64_t n) {
    sb_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        const float d = signed_absmax(x, 32) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = sb_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void sb_kq_deq_q4_0_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = sb_fp16_to_fp32(x[i].d);
        float *y = dst + i * 32;
        for (int j = 0; j < 16; j++) {
            y[j] = ((x[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: x = d·q + m with m the block minimum. */
void sb_kq_quant_q4_1_ref(const float *src, void *dst, int64_t n) {
    sb_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = sb_fp32_to_fp16(d);
        y[i].m = sb_fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[j] - mn) * id + 0.5f), q1 = (int)((x[j + 16] - mn) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void sb_kq_deq_q4_1_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q4_1 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = sb_fp16_to_fp32(x[i].d), m = sb_fp16_to_fp32(x[i].m);
        float *y = dst + i * 32;
        for (int j = 0; j < 16; j++) {
            y[j] = (x[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0: x = d·(q - 16), q in 0..31, d = max/-16. */
void sb_kq_quant_q5_0_ref(const float *src, void *dst, int64_t n) {
    sb_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        const float d = signed_absmax(x, 32) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = sb_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 16.5f), q1 = (int)(x[j + 16] * id + 16.5f);
            q0 = q0 > 31 ? 31 : q0;
            q1 = q1 > 31 ? 31 : q1;
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void sb_kq_deq_q5_0_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q5_0 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = sb_fp16_to_fp32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        float *y = dst + i * 32;
        for (int j = 0; j < 16; j++) {
            const int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (q0 - 16) * d;
            y[j + 16] = (q1 - 16) * d;
        }
    }
}

/* Q5_1: x = d·q + m, q in 0..31. ggml does not clamp here (q <= 31 holds
 * by construction), and neither do we, to keep the same bytes. */
void sb_kq_quant_q5_1_ref(const float *src, void *dst, int64_t n) {
    sb_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = sb_fp32_to_fp16(d);
        y[i].m = sb_fp32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const uint8_t q0 = (uint8_t)((x[j] - mn) * id + 0.5f);
            const uint8_t q1 = (uint8_t)((x[j + 16] - mn) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void sb_kq_deq_q5_1_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q5_1 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = sb_fp16_to_fp32(x[i].d), m = sb_fp16_to_fp32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        float *y = dst + i * 32;
        for (int j = 0; j < 16; j++) {
            const int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = q0 * d + m;
            y[j + 16] = q1 * d + m;
        }
    }
}

/* Q8_0 reference (model files): d = amax/127, q = roundf(x/d). */
void sb_kq_quant_q8_0_ref(const float *src, void *dst, int64_t n) {
    sb_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = sb_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void sb_kq_deq_q8_0_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = sb_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = x[i].qs[j] * d;
    }
}

/* Q8_1 reference: Q8_0 plus s = d·Σq, which lets Q4_1/Q5_1 dots add the
 * min term without touching the quants. */
void sb_kq_quant_q8_1_ref(const float *src, void *dst, int64_t n) {
    sb_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = sb_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = sb_fp32_to_fp16(sum * d);
    }
}

void sb_kq_deq_q8_1_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q8_1 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = sb_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = x[i].qs[j] * d;
    }
}

/* Activation quantizers: what llama.cpp's AVX2 quantize_row_q8_0/q8_1 do
 * (id = 127/amax, round half to even), in scalar form. */
static float block_quant_act(const float *x, int8_t *q, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        int v = kq_nearest_int(x[j] * id);
        v = v > 127 ? 127 : v < -128 ? -128 : v;  /* the SIMD pack saturates */
        q[j] = (int8_t)v;
        s += v;
    }
    *sum = s;
    return amax / 127.f;
}

void sb_kq_act_q8_0_ref(const float *src, void *dst, int64_t n) {
    sb_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum;
        y[i].d = sb_fp32_to_fp16(block_quant_act(src + i * 32, y[i].qs, &sum));
    }
}

void sb_kq_act_q8_1_ref(const float *src, void *dst, int64_t n) {
    sb_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum;
        const float d = block_quant_act(src + i * 32, y[i].qs, &sum);
        y[i].d = sb_fp32_to_fp16(d);
        y[i].s = sb_fp32_to_fp16(d * (float)sum);
    }
}

/* ==== legacy dot products ================================================= */

void sb_kq_dot_q4_0_q8_0_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q4_0 *x = vx;
    const sb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sum += (sb_fp16_to_fp32(x[i].d) * sb_fp16_to_fp32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

void sb_kq_dot_q4_1_q8_1_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q4_1 *x = vx;
    const sb_block_q8_1 *y = vy;
    float sum = 0.0f, mins = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (x[i].qs[j] & 0xF) * y[i].qs[j];
            isum += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sum += (sb_fp16_to_fp32(x[i].d) * sb_fp16_to_fp32(y[i].d)) * (float)isum;
        mins += sb_fp16_to_fp32(x[i].m) * sb_fp16_to_fp32(y[i].s);
    }
    *s = sum + mins;
}

void sb_kq_dot_q5_0_q8_0_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q5_0 *x = vx;
    const sb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = ((x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4)) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += (sb_fp16_to_fp32(x[i].d) * sb_fp16_to_fp32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

void sb_kq_dot_q5_1_q8_1_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q5_1 *x = vx;
    const sb_block_q8_1 *y = vy;
    float sum = 0.0f, mins = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += (sb_fp16_to_fp32(x[i].d) * sb_fp16_to_fp32(y[i].d)) * (float)isum;
        mins += sb_fp16_to_fp32(x[i].m) * sb_fp16_to_fp32(y[i].s);
    }
    *s = sum + mins;
}

void sb_kq_dot_q8_0_q8_0_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q8_0 *x = vx;
    const sb_block_q8_0 *y = vy;
    float sum = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += x[i].qs[j] * y[i].qs[j];
        sum += (sb_fp16_to_fp32(x[i].d) * sb_fp16_to_fp32(y[i].d)) * (float)isum;
    }
    *s = sum;
}
