/* kq_bench.c - throughput of every vec_dot at every kernel level, and of
 * llama.cpp's own vec_dot on the same bytes when its CPU backend library is
 * around (dlopen, optional). Not a test: numbers only.
 *
 *   make BUILD=build && cc -O2 -std=c11 -D_GNU_SOURCE -I. \
 *       -o build/kq_bench tools/kq_bench.c build/libswitchboard.a -lm -ldl -pthread
 *   build/kq_bench [path/to/libggml-cpu.so]
 *   build/kq_bench dotn [rounds]     (only the small-batch decode table)
 *   build/kq_bench prompt [rows tokens]   (only the k-quant prompt gemms)
 *
 * Each measurement dots one activation row with 64 weight rows of 4096
 * elements (a few hundred KB: L2-resident, so this is kernel speed, not
 * DRAM speed); best of 150 interleaved 2 ms windows. GB/s counts weight bytes.
 * Then the tiled kernels (gemm) of the best level on 64 rows × 64 tokens
 * against vec_dot per pair, in multiply-adds per second. `dotn`: vec_dotn
 * (one weight row, up to 16 decode tokens) against vec_dot per token.
 * `prompt`: the k-quant gemms on a prompt's shape (256 rows, the built-in
 * gemm block, × 512 tokens × 4096), the AVX-512 packed kernel against the
 * AMX one where the CPU and OS allow it, calls alternating, best of 8.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/kernels/kq_internal.h"
#include "worker/kernels/sb_kq.h"

#define N 4096
#define ROWS 64

typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
typedef struct {          /* ggml-cpu.h: struct ggml_type_traits_cpu */
    void *from_float;
    ggml_vec_dot_fn vec_dot;
    int vec_dot_type;
    int64_t nrows;
} ggml_traits_cpu;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float frand(void) { return (float)rand() / RAND_MAX * 2.0f - 1.0f; }

static volatile float sink;

/* Seconds per pass over ROWS rows, one ~2 ms window. The caller keeps
 * the best of many windows, interleaving the variants, so that a busy
 * machine (other jobs on our 2 cores) hurts every variant alike. */
static double window_ours(sb_vec_dot_fn dot, const uint8_t *w, size_t rs, const void *y) {
    int passes = 0;
    const double t0 = now();
    double t;
    do {
        float s, acc = 0;
        for (int r = 0; r < ROWS; r++) { dot(N, &s, w + r * rs, y); acc += s; }
        sink = acc;
        passes++;
    } while ((t = now() - t0) < 0.002);
    return t / passes;
}

static double window_ggml(ggml_vec_dot_fn dot, const uint8_t *w, size_t rs, const void *y) {
    int passes = 0;
    const double t0 = now();
    double t;
    do {
        float s, acc = 0;
        for (int r = 0; r < ROWS; r++) { dot(N, &s, 0, w + r * rs, 0, y, 0, 1); acc += s; }
        sink = acc;
        passes++;
    } while ((t = now() - t0) < 0.002);
    return t / passes;
}

#define WINDOWS 150
#define TOKS 64     /* gemm section: a prompt-sized batch of activation rows */

/* Seconds per ROWS × TOKS tile: the type's gemm, or (gemm NULL) vec_dot per pair. */
static double window_gemm(const sb_kq_traits *t, const uint8_t *w, size_t rs, const uint8_t *y, size_t ys, float *out) {
    int passes = 0;
    const double t0 = now();
    double el;
    do {
        if (t->gemm) t->gemm(N, ROWS, TOKS, w, rs, y, ys, out, ROWS);
        else
            for (int c = 0; c < TOKS; c++)
                for (int r = 0; r < ROWS; r++) t->vec_dot(N, &out[c * ROWS + r], w + r * rs, y + c * ys);
        sink = out[0];
        passes++;
    } while ((el = now() - t0) < 0.01);
    return el / passes;
}

/* gemm against vec_dot per pair at the best level, in multiply-adds/s. */
static void bench_gemm(const float *xf, const float *yf) {
    const int best = sb_kq_best_level();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    printf("\ngemm at %s, %d rows x %d tokens x %d, G multiply-adds/s (one thread)\n", sb_kq_level_name(best), ROWS, TOKS, N);
    printf("%-6s %9s %9s %7s\n", "type", "vec_dot", "gemm", "ratio");
    float *out = malloc(sizeof(float) * ROWS * TOKS);
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        const sb_kq_traits *t = &sb_kq_table(best)[type];
        if (!t->blck_size || !t->gemm) continue;
        const size_t rs = sb_kq_row_size(t, N), ys = sb_kq_row_size(&ref[t->vec_dot_type], N);
        uint8_t *w = malloc(rs * ROWS), *y = malloc(ys * TOKS);
        for (int r = 0; r < ROWS; r++) t->from_float_ref(xf + (size_t)r * N, w + r * rs, N);
        for (int c = 0; c < TOKS; c++) ref[t->vec_dot_type].from_float(c % 2 ? xf + (size_t)c * N : yf, y + c * ys, N);
        sb_kq_traits pairs = *t;
        pairs.gemm = NULL;
        double tp = 1e9, tg = 1e9;
        for (int rep = 0; rep < WINDOWS / 3; rep++) {
            const double a = window_gemm(&pairs, w, rs, y, ys, out), b = window_gemm(t, w, rs, y, ys, out);
            if (a < tp) tp = a;
            if (b < tg) tg = b;
        }
        const double macs = (double)ROWS * TOKS * N;
        printf("%-6s %9.2f %9.2f %6.2fx\n", t->name, macs / tp / 1e9, macs / tg / 1e9, tp / tg);
        free(w);
        free(y);
    }
    free(out);
}

/* Seconds for one matrix-vector product of `rows` rows: per row through
 * vec_dot (x8 == NULL) or per 8-row group through gemv8. */
static double gemv_pass(const sb_kq_traits *t, const uint8_t *w, const uint8_t *x8, size_t rs, int rows, const void *y, float *out) {
    const double t0 = now();
    if (x8)
        for (int g = 0; g < rows / 8; g++) t->gemv8(N, out + 8 * g, x8 + (size_t)g * 8 * rs, y);
    else
        for (int r = 0; r < rows; r++) t->vec_dot(N, &out[r], w + (size_t)r * rs, y);
    sink = out[rows - 1];
    return now() - t0;
}

/* The decode kernels: vec_dot per row against gemv8 on the x8 layout, on
 * 64 rows (L2) and on a matrix far larger than the last-level cache
 * (what decode really reads), one thread, GB/s of weight bytes. */
static void bench_gemv8(const float *xf, const float *yf) {
    const int best = sb_kq_best_level();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    enum { BIG = 49152 };       /* × 4096 elements: 150–200 MB */
    printf("\ngemv8 at %s (8 interleaved rows) vs vec_dot per row, GB/s of weight bytes, one thread\n", sb_kq_level_name(best));
    printf("%-6s %9s %9s %7s %12s %12s %7s\n", "type", "vec_dot", "gemv8", "ratio", "vec_dot DRAM", "gemv8 DRAM", "ratio");
    float *out = malloc(sizeof(float) * BIG);
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        const sb_kq_traits *t = &sb_kq_table(best)[type];
        if (!t->blck_size || !t->gemv8) continue;
        const size_t rs = sb_kq_row_size(t, N), ys = sb_kq_row_size(&ref[SB_TYPE_Q8_K], N);
        uint8_t *w = malloc(rs * BIG), *x8 = malloc(rs * BIG), *y = malloc(ys);
        for (int r = 0; r < ROWS; r++) t->from_float_ref(xf + (size_t)r * N, w + r * rs, N);
        for (int r = ROWS; r < BIG; r++) memcpy(w + (size_t)r * rs, w + (size_t)(r % ROWS) * rs, rs);
        for (int g = 0; g < BIG / 8; g++) sb_kq_x8_pack(type, N, w + (size_t)g * 8 * rs, rs, x8 + (size_t)g * 8 * rs);
        ref[SB_TYPE_Q8_K].from_float(yf, y, N);
        double tl[2] = { 1e9, 1e9 }, td[2] = { 1e9, 1e9 };
        for (int rep = 0; rep < WINDOWS; rep++)
            for (int k = 0; k < 2; k++) {
                double el = 0;
                int passes = 0;
                do { el += gemv_pass(t, w, k ? x8 : NULL, rs, ROWS, y, out); passes++; } while (el < 0.002);
                if (el / passes < tl[k]) tl[k] = el / passes;
            }
        for (int rep = 0; rep < 7; rep++)
            for (int k = 0; k < 2; k++) {
                const double el = gemv_pass(t, w, k ? x8 : NULL, rs, BIG, y, out);
                if (el < td[k]) td[k] = el;
            }
        printf("%-6s %9.2f %9.2f %6.2fx %12.2f %12.2f %6.2fx\n", t->name, rs * ROWS / tl[0] / 1e9, rs * ROWS / tl[1] / 1e9,
               tl[0] / tl[1], rs * BIG / td[0] / 1e9, rs * BIG / td[1] / 1e9, td[0] / td[1]);
        free(w);
        free(x8);
        free(y);
    }
    free(out);
}

/* Seconds for one matrix of `rows` rows against nt tokens: vec_dot per
 * (row, token), rows outer so the row is in L1 for its later tokens (the
 * stronger baseline), or (dotn) vec_dotn per row. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Thread CPU seconds (not wall time: on a box shared with other jobs a
 * pass of several ms is often preempted; CPU time leaves that out, though
 * not the cache a neighbour evicted). */
static double dotn_pass(const sb_kq_traits *t, int dotn, int n, const uint8_t *w, size_t rs, int rows, int nt,
                        const uint8_t *y, size_t ys, float *out) {
    const double t0 = cpu_now();
    const int q8_0 = t->vec_dot_type == SB_TYPE_Q8_0;
    if (dotn && t->vec_dotn_il && nt >= (q8_0 ? SB_KQ_P8_MIN_TOK : SB_KQ_IL_MIN_TOK)) {   /* as matmul.c runs it: interleaved once, then all rows */
        static uint8_t il[SB_KQ_IL_BLOCK_BYTES * 64] __attribute__((aligned(64)));
        if (q8_0) sb_kq_q8_0_prepare(n, nt, y, ys, il);
        else sb_kq_q8_K_interleave(n / 256, nt, y, ys, il);
        t->vec_dotn_il(n, rows, nt, out, (size_t)rows, w, rs, il);
        sink = out[rows - 1];
        return cpu_now() - t0;
    }
    for (int r = 0; r < rows; r++) {
        const uint8_t *wr = w + (size_t)r * rs;
        if (dotn) t->vec_dotn(n, nt, out + r, (size_t)rows, wr, y, ys);
        else
            for (int k = 0; k < nt; k++) t->vec_dot(n, out + (size_t)k * rows + r, wr, y + (size_t)k * ys);
    }
    sink = out[rows - 1];
    return cpu_now() - t0;
}

/* Small-batch decode (`kq_bench dotn`): per token, nt decode tokens against
 * model-shaped matrices (Phi-3-mini 3072 x 8192, Llama-3-8B 4096 x 14336,
 * Qwen2.5-0.5B 896 x 4864 and, Q8_0 only, its 896 x 151936 output matrix,
 * which streams from DRAM),
 * vec_dot x nt against vec_dotn, one thread, best of `rounds` interleaved. */
static void bench_dotn(int rounds) {
    static const int types[] = { SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K, SB_TYPE_Q5_0, SB_TYPE_Q8_0 };
    static const struct { const char *name; int n, rows; } shapes[] = {
        { "phi3", 3072, 8192 }, { "llama8b", 4096, 14336 }, { "qwen0.5b", 896, 4864 }, { "qwen-out", 896, 151936 } };
    static const int nts[] = { 1, 2, 4, 8, 16 };
    enum { NNT = sizeof nts / sizeof nts[0] };
    const int best = sb_kq_best_level();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    printf("vec_dotn at %s: CPU us per token per matrix, vec_dot x nt (rows outer) / vec_dotn, one thread, best of %d\n",
           sb_kq_level_name(best), rounds);
    printf("%-5s %-8s %9s", "type", "shape", "MB");
    for (int k = 0; k < NNT; k++) printf("   nt=%-2d dot/dotn  ratio", nts[k]);
    printf("\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const sb_kq_traits *t = &sb_kq_table(best)[types[ti]];
            const int n = shapes[si].n, rows = shapes[si].rows;
            if (!t->vec_dotn || n % t->blck_size || (rows > 100000 && types[ti] != SB_TYPE_Q8_0)) continue;
            const int vt = t->vec_dot_type;
            const size_t rs = sb_kq_row_size(t, n), ys = sb_kq_row_size(&ref[vt], n);
            uint8_t *w = malloc(rs * rows), *y = malloc(ys * 16);
            float *f = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * rows * 16);
            for (int r = 0; r < ROWS; r++) {
                for (int i = 0; i < n; i++) f[i] = frand();
                t->from_float_ref(f, w + (size_t)r * rs, n);
            }
            for (int r = ROWS; r < rows; r++) memcpy(w + (size_t)r * rs, w + (size_t)(r % ROWS) * rs, rs);
            for (int k = 0; k < 16; k++) {
                for (int i = 0; i < n; i++) f[i] = frand();
                ref[vt].from_float(f, y + (size_t)k * ys, n);
            }
            double tb[NNT][2];
            for (int k = 0; k < NNT; k++) tb[k][0] = tb[k][1] = 1e9;
            for (int rep = 0; rep < rounds; rep++)
                for (int k = 0; k < NNT; k++)
                    for (int v = 0; v < 2; v++) {
                        const double el = dotn_pass(t, v, n, w, rs, rows, nts[k], y, ys, out) / nts[k];
                        if (el < tb[k][v]) tb[k][v] = el;
                    }
            printf("%-5s %-8s %9.1f", t->name, shapes[si].name, rs * rows / 1e6);
            for (int k = 0; k < NNT; k++)
                printf("   %6.0f/%-6.0f %5.2fx", tb[k][0] * 1e6, tb[k][1] * 1e6, tb[k][0] / tb[k][1]);
            printf("\n");
            free(w);
            free(y);
            free(f);
            free(out);
        }
}

typedef const ggml_traits_cpu *(*ggml_traits_fn)(int);

/* llama.cpp's CPU type traits from its shared library, or NULL (then every
 * comparison with it is left out). */
static ggml_traits_fn load_ggml(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "(no llama.cpp comparison: %s)\n", dlerror());
        return NULL;
    }
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    ggml_traits_fn traits = (ggml_traits_fn)dlsym(h, "ggml_get_type_traits_cpu");
    if (init) init();
    return traits;
}

/* Our activation quantizers against llama.cpp's on the same floats. */
static void compare_activations(ggml_traits_fn ggml_traits, const float *xf) {
    static const int act[] = { SB_TYPE_Q8_0, SB_TYPE_Q8_1, SB_TYPE_Q8_K, SB_TYPE_F16 };
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    for (size_t k = 0; k < sizeof act / sizeof act[0]; k++) {
        const ggml_traits_cpu *g = ggml_traits(act[k]);
        if (!g || !g->from_float) continue;
        const size_t bytes = sb_kq_row_size(&ref[act[k]], N * ROWS);
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        sb_kq_table(sb_kq_best_level())[act[k]].from_float(xf, a, N * ROWS);
        ((void (*)(const float *, void *, int64_t))g->from_float)(xf, b, N * ROWS);
        printf("activation %-5s vs llama.cpp's from_float: %s\n", ref[act[k]].name,
               memcmp(a, b, bytes) ? "DIFFERENT bytes" : "identical bytes");
        free(a);
        free(b);
    }
}

/* One type's row of the vec_dot table: GB/s at every level we have, and
 * llama.cpp's when it has the same kernel (g, may be NULL). */
static void bench_vec_dot_type(int type, const ggml_traits_cpu *g, const float *xf, const float *yf) {
    const int best = sb_kq_best_level();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF), *t = &ref[type];
    const size_t rs = sb_kq_row_size(t, N);
    uint8_t *w = malloc(rs * ROWS);
    void *y = malloc(sb_kq_row_size(&ref[t->vec_dot_type], N));
    for (int r = 0; r < ROWS; r++) t->from_float_ref(xf + (size_t)r * N, w + r * rs, N);
    ref[t->vec_dot_type].from_float(yf, y, N);
    printf("%-6s %8zu", t->name, rs);
    if (g && (!g->vec_dot || g->vec_dot_type != t->vec_dot_type)) g = NULL;
    double bestt[SB_KQ_LEVELS + 1];
    for (int l = 0; l <= SB_KQ_LEVELS; l++) bestt[l] = 1e9;
    for (int rep = 0; rep < WINDOWS; rep++) {
        for (int l = 0; l <= best; l++) {
            const double s = window_ours(sb_kq_table(l)[type].vec_dot, w, rs, y);
            if (s < bestt[l]) bestt[l] = s;
        }
        if (g) {
            const double s = window_ggml(g->vec_dot, w, rs, y);
            if (s < bestt[SB_KQ_LEVELS]) bestt[SB_KQ_LEVELS] = s;
        }
    }
    double top = 0;
    for (int l = 0; l <= best; l++) {
        const double gbs = rs * ROWS / bestt[l] / 1e9;
        if (gbs > top) top = gbs;
        printf(" %9.2f", gbs);
    }
    if (g) {
        float a, b;
        sb_kq_table(best)[type].vec_dot(N, &a, w, y);
        g->vec_dot(N, &b, 0, w, 0, y, 0, 1);
        const double gbs = rs * ROWS / bestt[SB_KQ_LEVELS] / 1e9;
        printf(" %9.2f %7.2fx  (same input, result rel. diff %.1e)", gbs, top / gbs, fabs(a - b) / (fabs(b) + 1e-30));
    }
    printf("\n");
    free(w);
    free(y);
}

/* The AVX-512 k-quant gemms against their AMX twins on a prompt's shape. */
static void bench_prompt(int rows, int toks) {
    static const struct { int type; sb_gemm_fn avx512, amx; } k[] = {
        { SB_TYPE_Q2_K, sb_kq_gemm_q2_K_q8_K_avx512, sb_kq_gemm_q2_K_q8_K_amx },
        { SB_TYPE_Q3_K, sb_kq_gemm_q3_K_q8_K_avx512, sb_kq_gemm_q3_K_q8_K_amx },
        { SB_TYPE_Q4_K, sb_kq_gemm_q4_K_q8_K_avx512, sb_kq_gemm_q4_K_q8_K_amx },
        { SB_TYPE_Q5_K, sb_kq_gemm_q5_K_q8_K_avx512, sb_kq_gemm_q5_K_q8_K_amx },
        { SB_TYPE_Q6_K, sb_kq_gemm_q6_K_q8_K_avx512, sb_kq_gemm_q6_K_q8_K_amx },
    };
    if (sb_kq_best_level() < SB_KQ_AVX512) {
        printf("prompt: no AVX-512 here\n");
        return;
    }
    const int amx = sb_kq_amx_usable();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    printf("k-quant gemm, %d rows x %d tokens x %d, G multiply-adds/s (one thread, best of 8)%s\n", rows, toks, N,
           amx ? "" : "; AMX: not usable here");
    printf("%-6s %9s %9s %7s\n", "type", "avx512", "amx", "ratio");
    float *f = malloc(sizeof(float) * N), *out = malloc(sizeof(float) * (size_t)rows * toks);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const sb_kq_traits *t = &ref[k[i].type];
        const size_t rs = sb_kq_row_size(t, N), ys = sb_kq_row_size(&ref[SB_TYPE_Q8_K], N);
        uint8_t *w = malloc(rs * rows), *y = malloc(ys * toks);
        for (int r = 0; r < rows; r++) {
            for (int e = 0; e < N; e++) f[e] = frand();
            t->from_float_ref(f, w + (size_t)r * rs, N);
        }
        for (int c = 0; c < toks; c++) {
            for (int e = 0; e < N; e++) f[e] = frand();
            ref[SB_TYPE_Q8_K].from_float(f, y + (size_t)c * ys, N);
        }
        double best[2] = { 1e9, 1e9 };
        for (int rep = 0; rep < 8; rep++)
            for (int v = 0; v < 1 + amx; v++) {
                const double t0 = now();
                (v ? k[i].amx : k[i].avx512)(N, rows, toks, w, rs, y, ys, out, (size_t)rows);
                const double d = now() - t0;
                if (d < best[v]) best[v] = d;
            }
        const double macs = (double)rows * toks * N;
        if (amx) printf("%-6s %9.1f %9.1f %6.2fx\n", t->name, macs / best[0] * 1e-9, macs / best[1] * 1e-9, best[0] / best[1]);
        else printf("%-6s %9.1f %9s\n", t->name, macs / best[0] * 1e-9, "-");
        sink = out[0];
        free(w);
        free(y);
    }
    free(f);
    free(out);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "prompt") == 0) {
        bench_prompt(argc > 2 ? atoi(argv[2]) : 256, argc > 3 ? atoi(argv[3]) : 512);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "dotn") == 0) {
        bench_dotn(argc > 2 ? atoi(argv[2]) : 7);
        return 0;
    }
    ggml_traits_fn ggml_traits = load_ggml(argc > 1 ? argv[1] : "build/llamacpp/build-0.3.36/bin/libggml-cpu.so");
    const int best = sb_kq_best_level();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    float *xf = malloc(sizeof(float) * N * ROWS), *yf = malloc(sizeof(float) * N);
    for (int i = 0; i < N * ROWS; i++) xf[i] = frand();
    for (int i = 0; i < N; i++) yf[i] = frand();
    if (ggml_traits) compare_activations(ggml_traits, xf);
    printf("vec_dot, %d x %d-element rows, GB/s of weight bytes (higher is better)\n", ROWS, N);
    printf("%-6s %8s", "type", "bytes");
    for (int l = 0; l <= best; l++) printf(" %9s", sb_kq_level_name(l));
    if (ggml_traits) printf(" %9s %8s", "llama.cpp", "ours/ll");
    printf("\n");
    for (int type = 0; type < SB_TYPE_COUNT; type++)
        if (ref[type].blck_size && ref[type].vec_dot)
            bench_vec_dot_type(type, ggml_traits ? ggml_traits(type) : NULL, xf, yf);
    bench_gemv8(xf, yf);
    bench_gemm(xf, yf);
    return 0;
}
