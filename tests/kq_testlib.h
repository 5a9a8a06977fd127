/* kq_testlib.h - what the kernel tests quantize from: seeded random numbers
 * (xorshift64: the same data on every machine, so a failure reproduces) and
 * random weight matrices. Include after <cmocka.h>. */
#ifndef KQ_TESTLIB_H
#define KQ_TESTLIB_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "sb_kq.h"

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

#endif
