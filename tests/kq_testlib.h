/* kq_testlib.h - what the kernel tests quantize from: seeded random numbers
 * (xorshift64: the same data on every machine, so a failure reproduces) and
 * random weight matrices, random-byte blocks and rows at the quant extremes.
 * Include after <cmocka.h>. */
#ifndef KQ_TESTLIB_H
#define KQ_TESTLIB_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "worker/kernels/sb_kq.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline void rng_seed(uint64_t s) { rng_state = s ? s : 1; }
static inline uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static inline float rng_uniform(void) { return (float)(rng_u32() / 4294967296.0); }     /* [0, 1) */
static inline float rng_normal(void) {
    const float u = rng_uniform() + 1e-7f, v = rng_uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static inline const sb_kq_traits *ref_row(int type) { return &sb_kq_table(SB_KQ_REF)[type]; }

/* A matrix of `rows` rows of n elements of `type` (plus 64 bytes of slack
 * for kernels that read a vector past a row's end), quantized from random
 * normal floats with a per-row scale spread, as in models. */
static inline uint8_t *make_rows(int type, int rows, int n, size_t *row_bytes) {
    const sb_kq_traits *t = ref_row(type);
    *row_bytes = sb_kq_row_size(t, n);
    uint8_t *m = malloc(*row_bytes * (size_t)rows + 64);
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_true(m && f);
    for (int r = 0; r < rows; r++) {
        const float scale = 0.02f * (1.0f + (float)(rng_u32() % 8));
        for (int i = 0; i < n; i++) f[i] = scale * rng_normal();
        t->from_float(f, m + (size_t)r * *row_bytes, n);
    }
    free(f);
    return m;
}

/* Random bytes for a row of `type`, then make every scale a finite fp16 of
 * sane size (random bytes would give NaN/Inf scales, which no quantizer
 * writes). Offsets are those of the block structs in sb_kq.h. */
static inline void fill_random_blocks(int type, void *row, int n) {
    const sb_kq_traits *t = ref_row(type);
    const size_t bytes = sb_kq_row_size(t, n);
    uint8_t *p = row;
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_u32();
    if (type == SB_TYPE_F32) {
        for (int i = 0; i < n; i++) ((float *)row)[i] = rng_normal();
        return;
    }
    if (type == SB_TYPE_F16 || type == SB_TYPE_BF16) {
        for (int i = 0; i < n; i++)
            ((uint16_t *)row)[i] = type == SB_TYPE_F16 ? sb_fp32_to_fp16(rng_normal()) : sb_fp32_to_bf16(rng_normal());
        return;
    }
    static const struct { int type; int off[2]; } scale_fields[] = {
        { SB_TYPE_Q4_0, { 0, -1 } }, { SB_TYPE_Q4_1, { 0, 2 } }, { SB_TYPE_Q5_0, { 0, -1 } },
        { SB_TYPE_Q5_1, { 0, 2 } }, { SB_TYPE_Q8_0, { 0, -1 } }, { SB_TYPE_Q2_K, { 80, 82 } },
        { SB_TYPE_Q3_K, { 108, -1 } }, { SB_TYPE_Q4_K, { 0, 2 } }, { SB_TYPE_Q5_K, { 0, 2 } },
        { SB_TYPE_Q6_K, { 208, -1 } },
    };
    for (size_t k = 0; k < sizeof scale_fields / sizeof scale_fields[0]; k++) {
        if (scale_fields[k].type != type) continue;
        for (size_t b = 0; b < bytes / t->type_size; b++)
            for (int f = 0; f < 2; f++) {
                if (scale_fields[k].off[f] < 0) continue;
                const sb_fp16 h = sb_fp32_to_fp16(0.01f * rng_normal());
                memcpy(p + b * t->type_size + scale_fields[k].off[f], &h, 2);
            }
    }
}

/* Rows whose every quant has the largest magnitude its type allows (all
 * bits set; Q4_0 / Q5_0 / Q8_0 at their most negative) with d = dmin = 1,
 * and activations all at -127: the integer sums of a kernel that adds
 * 16-bit products in more groups than fit would wrap here, where random
 * weights stay far from the limits. */
static inline uint8_t *make_extreme_rows(int type, int rows, int n, size_t *row_bytes) {
    const sb_kq_traits *t = ref_row(type);
    *row_bytes = sb_kq_row_size(t, n);
    const size_t total = *row_bytes * (size_t)rows;
    uint8_t *m = malloc(total + 64);
    assert_non_null(m);
    if (!t->vec_dot) {      /* an activation type: quantize a constant */
        float *f = malloc(sizeof(float) * (size_t)n);
        assert_non_null(f);
        for (int i = 0; i < n; i++) f[i] = 1.0f;
        for (int r = 0; r < rows; r++) t->from_float(f, m + (size_t)r * *row_bytes, n);
        free(f);
        return m;
    }
    const int fill = type == SB_TYPE_Q8_0 ? 0x81 : type == SB_TYPE_Q4_0 || type == SB_TYPE_Q5_0 ? 0x00 : 0xFF;
    memset(m, fill, total);
    size_t d_at = 0, dmin_at = (size_t)-1;   /* where the fp16 scales sit in a block */
    switch (type) {
    case SB_TYPE_Q2_K: d_at = offsetof(sb_block_q2_K, d); dmin_at = offsetof(sb_block_q2_K, dmin); break;
    case SB_TYPE_Q3_K: d_at = offsetof(sb_block_q3_K, d); break;
    case SB_TYPE_Q4_K: d_at = offsetof(sb_block_q4_K, d); dmin_at = offsetof(sb_block_q4_K, dmin); break;
    case SB_TYPE_Q5_K: d_at = offsetof(sb_block_q5_K, d); dmin_at = offsetof(sb_block_q5_K, dmin); break;
    case SB_TYPE_Q6_K: d_at = offsetof(sb_block_q6_K, d); break;
    default: break;         /* Q4_0, Q5_0, Q8_0: d first */
    }
    const sb_fp16 one = 0x3C00;
    for (size_t b = 0; b < total; b += t->type_size) {
        memcpy(m + b + d_at, &one, sizeof one);
        if (dmin_at != (size_t)-1) memcpy(m + b + dmin_at, &one, sizeof one);
        if (type == SB_TYPE_Q5_0) memset(m + b + offsetof(sb_block_q5_0, qs), 0x00, 16);   /* qh 0: q = -16 */
    }
    return m;
}

/* Σ|x·y| of two rows after dequantizing them: the scale of the tolerance
 * for float sums taken in another order. */
static inline double abs_dot(int xt, const uint8_t *x, int yt, const uint8_t *y, int n) {
    float *fx = malloc(sizeof(float) * (size_t)n), *fy = malloc(sizeof(float) * (size_t)n);
    assert_true(fx && fy);
    ref_row(xt)->to_float(x, fx, n);
    ref_row(yt)->to_float(y, fy, n);
    double a = 0;
    for (int i = 0; i < n; i++) a += fabs((double)fx[i] * fy[i]);
    free(fx);
    free(fy);
    return a;
}

#endif
