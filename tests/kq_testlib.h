/* kq_testlib.h - the seeded random numbers the kernel tests quantize from
 * (xorshift64: the same data on every machine, so a failure reproduces). */
#ifndef KQ_TESTLIB_H
#define KQ_TESTLIB_H

#include <math.h>
#include <stdint.h>

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

#endif
