/* kq_ceiling.c - the fastest a k-quant gemm can go through AVX-512 VNNI on
 * this core, from the work its format makes unavoidable, measured rather
 * than argued; and where the CPU and OS allow AMX, the same for the AMX
 * gemm's tile products (kq_kpack_amx.c). Not a test: numbers only.
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

/* AMX: the tile products of kq_kpack_amx.c's micro-kernel alone, operands
 * in L1: per super-block, zero four sums, then four steps of two token
 * tiles and two weight tiles loaded and multiplied pairwise (four
 * tdpbsud), then the four sums stored. Weights and activations are random
 * bytes (the tile unit is slower on them than on zeros). Counted: the
 * multiply-adds that reach a result - all of them for a one-plane type
 * (Q2_K, Q3_K: the weight tiles are two panels), half for a two-plane one
 * (Q4_K, Q5_K, Q6_K: the weight tiles are the lo and hi bytes of one
 * panel's weights). */
typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

__attribute__((target("amx-tile,amx-int8"), noinline)) static double amx_products(double seconds) {
    static _Alignas(64) int8_t a[2][4][1024], b[2][4][1024];
    static _Alignas(64) int32_t c[4][256];
    for (size_t i = 0; i < sizeof a; i++) ((int8_t *)a)[i] = (int8_t)(i * 2654435761u >> 13);
    for (size_t i = 0; i < sizeof b; i++) ((int8_t *)b)[i] = (int8_t)(i * 2246822519u >> 11);
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    long n = 0;
    const double t0 = now();
    double t;
    do {
        for (int r = 0; r < 256; r++) {
            _tile_zero(4);
            _tile_zero(5);
            _tile_zero(6);
            _tile_zero(7);
            for (int j = 0; j < 4; j++) {
                _tile_loadd(0, a[0][j], 64);
                _tile_loadd(1, a[1][j], 64);
                _tile_loadd(2, b[0][j], 64);
                _tile_loadd(3, b[1][j], 64);
                _tile_dpbsud(4, 0, 2);
                _tile_dpbsud(5, 0, 3);
                _tile_dpbsud(6, 1, 2);
                _tile_dpbsud(7, 1, 3);
            }
            _tile_stored(4, c[0], 64);
            _tile_stored(5, c[1], 64);
            _tile_stored(6, c[2], 64);
            _tile_stored(7, c[3], 64);
        }
        n += 256;
        __asm__ volatile("" : : "r"(c) : "memory");
    } while ((t = now() - t0) < seconds);
    _tile_release();
    return (double)n * 16 * 16 * 16 * 64 / t;       /* all four products' multiply-adds */
}

static void amx_section(void) {
    const double peak = sb_kq_peak_macs("amx", 2.0);
    if (peak <= 0) {
        printf("AMX: %s\n", peak == -1 ? "not on this CPU" : "the OS refused the tile state");
        return;
    }
    const double all = amx_products(2.0);
    printf("tdpbusd peak, one core: %.1f G multiply-adds/s\n", peak * 1e-9);
    printf("AMX gemm's tile products, one thread: one-plane types (Q2_K, Q3_K): %.1f G/s = %.0f %% of the peak; "
           "two-plane types (Q4_K, Q5_K, Q6_K): %.1f G/s = %.0f %%\n",
           all * 1e-9, 100 * all / peak, all * 0.5e-9, 50 * all / peak);
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
    amx_section();
    return 0;
}
