/* kq_peak.c - the int8 multiply-add peak of one core, per instruction
 * family (switchboard tune; docs/KERNELS.md, "Tuning").
 *
 * A prompt's matrix products are compute-bound, so their yardstick is how
 * many int8 multiply-adds per second the instruction the gemm uses can do
 * here. Each loop runs that instruction on independent accumulators (more
 * than latency × issue width, so throughput is the limit) from registers.
 *
 * The ISA is chosen per function (target attributes), so this file builds
 * at baseline x86-64 like the rest; a function runs only after CPUID (and,
 * for AMX, the OS) said its instructions exist.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "worker/kernels/kq_internal.h"

#define ACCS 12                 /* > 5-cycle latency × 2 ports */
#define INNER 64                /* instruction groups per timed check */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Call `round` (INNER groups of ACCS instructions on the accumulators in
 * `acc`) until `seconds` have passed; the best rate of 8 slices, in
 * multiply-adds per second. */
static double timed(double seconds, double macs_per_round, void (*round)(void *), void *acc) {
    double best = 0;
    for (int slice = 0; slice < 8; slice++) {
        const double t0 = now_s();
        double t = t0;
        long rounds = 0;
        while (t - t0 < seconds / 8) {
            for (int k = 0; k < 16; k++) round(acc);
            rounds += 16;
            t = now_s();
        }
        const double rate = (double)rounds * macs_per_round / (t - t0);
        if (rate > best) best = rate;
    }
    return best;
}

/* The accumulators as named locals, spelled out: a loop over an array of
 * them kept them in memory (GCC 12 did not unroll it), which timed the
 * store port instead of the multiply-adds. */
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define LOAD_ACC(i) r##i = acc[i];
#define STORE_ACC(i) acc[i] = r##i;

/* One round function per family: its ISA, vector type and step. */
#define ROUND_FN(name, isa, vec, STEP)                                       \
    __attribute__((target(isa))) static void name(void *state) {             \
        vec *acc = state, r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11;  \
        const vec a = acc[ACCS], b = acc[ACCS + 1];                          \
        (void)b;                                                             \
        REP12(LOAD_ACC)                                                      \
        for (int r = 0; r < INNER; r++) { REP12(STEP) }                      \
        REP12(STORE_ACC)                                                     \
    }

/* AVX2: the kernels' vpmaddubsw + vpmaddwd(1) + vpaddd, 32 products. The
 * signed operand is the accumulator itself (its bytes, whatever they are):
 * with constant operands the compiler hoisted the products out of the loop
 * and timed the adds. 12 chains of 11 cycles cover the 2 multiply ports. */
#define STEP_AVX2(i) r##i = _mm256_add_epi32(r##i, _mm256_madd_epi16(_mm256_maddubs_epi16(a, r##i), _mm256_set1_epi16(1)));
ROUND_FN(round_avx2, "avx2", __m256i, STEP_AVX2)
/* AVX-512 VNNI: vpdpbusd on zmm, 64 products (the AVX-512 gemm's). */
#define STEP_512(i) r##i = _mm512_dpbusd_epi32(r##i, a, b);
ROUND_FN(round_avx512_vnni, "avx512f,avx512bw,avx512vnni", __m512i, STEP_512)
/* AVX-VNNI: the VEX vpdpbusd on ymm, 32 products (no kernel uses it yet). */
#define STEP_VNNI(i) r##i = _mm256_dpbusd_avx_epi32(r##i, a, b);
ROUND_FN(round_avx_vnni, "avx2,avxvnni", __m256i, STEP_VNNI)

/* Accumulators plus the two operands, in plain memory so that no function
 * outside a target attribute touches a vector type. */
static double peak_vector(double seconds, int width, int macs, void (*round)(void *), int *sink) {
    _Alignas(64) int8_t state[(ACCS + 2) * 64];
    memset(state, 0, sizeof state);
    memset(state + (size_t)ACCS * width, 3, (size_t)width);
    memset(state + (size_t)(ACCS + 1) * width, 0xFE, (size_t)width);
    const double r = timed(seconds, (double)macs * ACCS * INNER, round, state);
    *sink += state[0];
    return r;
}

/* AMX: tdpbusd of a 16×64 by 64×16 tile pair, 16·16·64 products, into four
 * accumulator tiles in turn. The caller must have asked the OS for the
 * tile state (sb_kq_amx_request). */
typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

__attribute__((target("amx-tile,amx-int8"))) static double peak_amx(double seconds, int *sink) {
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    static int8_t a[16 * 64], b[16 * 64];
    static int32_t c[16 * 16];
    memset(a, 3, sizeof a);
    memset(b, 2, sizeof b);
    _tile_loadconfig(&cfg);
    _tile_zero(0);   /* tile numbers are immediates */
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    double rate = 0;
    for (int slice = 0; slice < 8; slice++) {
        const double t0 = now_s();
        double t = t0;
        long rounds = 0;
        while (t - t0 < seconds / 8) {
            for (int r = 0; r < INNER; r++) {
                _tile_dpbusd(0, 4, 5);
                _tile_dpbusd(1, 4, 5);
                _tile_dpbusd(2, 4, 5);
                _tile_dpbusd(3, 4, 5);
            }
            rounds++;
            t = now_s();
        }
        const double r = (double)rounds * INNER * 4 * 16 * 16 * 64 / (t - t0);
        if (r > rate) rate = r;
    }
    _tile_stored(0, c, 64);
    _tile_release();
    *sink += c[0];
    return rate;
}

int sb_kq_amx_request(void) {
    /* Linux keeps AMX's 8 KiB tile state off until a process asks for it
     * (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA = feature 18); a kernel or
     * hypervisor that refuses it makes every tile instruction fault. */
    return (int)syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 0 : -1;
}

static int cpu_has(const char *family) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    __builtin_cpu_init();
    if (!strcmp(family, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(family, "avx512_vnni"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    if (!strcmp(family, "avx_vnni")) {
        __get_cpuid_count(7, 1, &a, &b, &c, &d);
        return __builtin_cpu_supports("avx2") && ((a >> 4) & 1);
    }
    if (!strcmp(family, "amx")) {
        __get_cpuid_count(7, 0, &a, &b, &c, &d);
        return ((d >> 24) & 1) && ((d >> 25) & 1);
    }
    return 0;
}

int sb_kq_amx_usable(void) { return cpu_has("amx") && sb_kq_amx_request() == 0; }

double sb_kq_peak_macs(const char *family, double seconds) {
    if (!cpu_has(family)) return -1;
    int sink = 0;
    double r = -1;
    if (!strcmp(family, "avx2")) r = peak_vector(seconds, 32, 32, round_avx2, &sink);
    else if (!strcmp(family, "avx512_vnni")) r = peak_vector(seconds, 64, 64, round_avx512_vnni, &sink);
    else if (!strcmp(family, "avx_vnni")) r = peak_vector(seconds, 32, 32, round_avx_vnni, &sink);
    else if (!strcmp(family, "amx")) r = sb_kq_amx_request() == 0 ? peak_amx(seconds, &sink) : -2;
    __asm__ volatile("" : : "r"(sink));
    return r;
}

const char *sb_kq_gemm_family(int level) {
    if (level >= SB_KQ_AVX512)      /* the k-quant gemms: AMX's where the table took them */
        return sb_kq_table(level)[SB_TYPE_Q4_K].gemm == sb_kq_gemm_q4_K_q8_K_amx ? "amx" : "avx512_vnni";
    return level == SB_KQ_AVX2 ? "avx2" : "scalar";
}
