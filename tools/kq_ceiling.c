/* kq_ceiling.c - the fastest a k-quant gemm can go through AVX-512 VNNI on
 * this core, from the work its format makes unavoidable, measured rather
 * than argued. Not a test: numbers only.
 *
 *   make BUILD=build && cc -O2 -std=c11 -D_GNU_SOURCE -I. [-DCOLS=4] \
 *       -o build/kq_ceiling tools/kq_ceiling.c build/libswitchboard.a -lm -ldl -pthread
 *   build/kq_ceiling [threads]
 *
 * COLS (default 8, the gemm's micro-kernel) is the tokens side by side.
 *
 * A k-quant super-block is 256 weights in sub-blocks of 32 (Q4_K, Q5_K) or
 * 16 (Q3_K, Q6_K), each with its own scale. However the quants are
 * unpacked (once per panel, so free here), each 16-row × one-token product
 * of a sub-block needs: its vpdpbusd (32/4 = 8, or 4), then its scale
 * applied - one convert of the int32 sums to float and one FMA with the
 * 16 rows' scales; and per super-block the mins or offsets against the
 * activation's block sums (8 vpdpwssd). This loop does exactly that, with
 * the weights and activations in L1 and eight tokens' chains side by side
 * (the packed gemm's shape), and counts only the vpdpbusd's multiply-adds:
 * the rate a kernel of this design reaches with nothing else to do, next
 * to the bare vpdpbusd peak (sb_kq_peak_macs).
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/kernels/sb_kq.h"

#ifndef COLS
#define COLS 8
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef int32_t __attribute__((may_alias, aligned(1))) i32_any;
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __m512i dpbusd_bcast(__m512i t, __m512i q, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(t) : "v"(q), "m"(*(const i32_any *)p));
    return t;
}

/* n super-blocks of 16 rows against COLS tokens: sub-blocks of SUB
 * weights (32 or 16), each scaled in float; then the 8 vpdpwssd per token
 * of Q4_K/Q5_K's mins or Q3_K/Q6_K's offsets. The sums stay in registers,
 * as in the gemm's micro-kernel. */
#define SUPERBLOCKS(name, SUB)                                                                       \
    __attribute__((target("avx512f,avx512bw,avx512vnni"), noinline))                                 \
    static void name(const int8_t *q, const int8_t *y, const float *sc, const int32_t *mn, long n,   \
                     float *out) {                                                                   \
        __m512 f[COLS];                                                                              \
        _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) f[c] = _mm512_setzero_ps();           \
        for (long i = 0; i < n; i++) {                                                               \
            _Pragma("GCC unroll 1") for (int s = 0; s < 256 / SUB; s++) {                            \
                __m512i t[COLS];                                                                     \
                _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) t[c] = _mm512_setzero_si512(); \
                _Pragma("GCC unroll 8") for (int g = s * SUB / 4; g < (s + 1) * SUB / 4; g++) {      \
                    const __m512i qv = _mm512_load_si512(q + 64 * g);                                \
                    _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++)                           \
                        t[c] = dpbusd_bcast(t[c], qv, y + 256 * c + 4 * g);                          \
                }                                                                                    \
                const __m512 scv = _mm512_load_ps(sc + 16 * s);                                      \
                _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++)                               \
                    f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[c]), scv, f[c]);                     \
            }                                                                                        \
            _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) {                                 \
                __m512i ms = _mm512_setzero_si512();                                                 \
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)                                  \
                    ms = _mm512_dpwssd_epi32(ms, _mm512_load_si512(mn + 16 * k),                     \
                                             _mm512_set1_epi32(((const int32_t *)(y + 256 * c))[k])); \
                f[c] = _mm512_add_ps(f[c], _mm512_cvtepi32_ps(ms));                                  \
            }                                                                                        \
        }                                                                                            \
        _Pragma("GCC unroll 8") for (int c = 0; c < COLS; c++) _mm512_storeu_ps(out + 16 * c, f[c]); \
    }
SUPERBLOCKS(superblocks32, 32)
SUPERBLOCKS(superblocks16, 16)

typedef struct { int sub; double seconds, rate; } job;

static void *run(void *arg) {
    job *j = arg;
    static __thread _Alignas(64) int8_t q[64 * 64], y[256 * COLS];
    static __thread _Alignas(64) float sc[16 * 16], out[16 * COLS];
    static __thread _Alignas(64) int32_t mn[16 * 8];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (int8_t)(i * 7 & 31);
    for (size_t i = 0; i < sizeof y; i++) y[i] = (int8_t)(i * 13 - 64);
    for (int i = 0; i < 256; i++) sc[i] = (float)(i & 63);
    for (int i = 0; i < 128; i++) mn[i] = i;
    long n = 0;
    const double t0 = now();
    double t;
    do {
        if (j->sub == 32) superblocks32(q, y, sc, mn, 1024, out);
        else superblocks16(q, y, sc, mn, 1024, out);
        n += 1024;
        __asm__ volatile("" : : "r"(out) : "memory");
    } while ((t = now() - t0) < j->seconds);
    j->rate = (double)n * 256 * 16 * COLS / t;      /* the vpdpbusd's multiply-adds only */
    return NULL;
}

static double ceiling(int sub, int threads) {
    pthread_t tid[64];
    job jobs[64];
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){ sub, 2.0, 0 };
        pthread_create(&tid[i], NULL, run, &jobs[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL), sum += jobs[i].rate;
    return sum;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1 || threads > 64) return 2;
    const double peak = sb_kq_peak_macs("avx512_vnni", 2.0);
    if (peak <= 0) { fprintf(stderr, "kq_ceiling: no AVX-512 VNNI here\n"); return 1; }
    printf("vpdpbusd zmm peak, one core: %.1f G multiply-adds/s\n", peak * 1e-9);
    const double c32 = ceiling(32, threads), c16 = ceiling(16, threads);
    printf("%d thread(s): sub-blocks of 32 (Q4_K, Q5_K): %.1f G/s = %.0f %% of %d x the peak\n",
           threads, c32 * 1e-9, 100 * c32 / (peak * threads), threads);
    printf("%d thread(s): sub-blocks of 16 (Q3_K, Q6_K): %.1f G/s = %.0f %% of %d x the peak\n",
           threads, c16 * 1e-9, 100 * c16 / (peak * threads), threads);
    return 0;
}
