/* stream_bench.c - how fast the decode kernels stream weights from DRAM,
 * next to plain loads over the same bytes. Not a test: numbers only.
 *
 *   make && cc -O2 -std=c11 -D_GNU_SOURCE -mavx2 -I. \
 *       -o build/stream_bench tools/stream_bench.c build/libswitchboard.a -lm -pthread
 *   build/stream_bench [rounds]
 * (An A/B of a kernel build flag: build the library twice, e.g. `make
 * BUILD=build-nopf CFLAGS=-DKQ_AVX512_PREFETCH=0`, link this against each
 * and alternate the two; compare the dot/ld columns.)
 *
 * Decode reads every weight byte once per token, so its ceiling is how fast
 * a core can pull a stream in while doing the kernel's arithmetic. Four
 * readers run over the same cold bytes (a 2 GiB buffer, far past the L3;
 * its x8 copy for gemv8), with 1 and 2 threads:
 *   loads     AVX2 loads only: demand misses plus the hardware prefetchers,
 *             what tools/membw measures;
 *   loads+pf  the same with a prefetcht0 of every line 8 KiB ahead, the
 *             pattern the decode kernels use (kq_x86.h);
 *   vec_dot   the type's dot at the best kernel level, row after row, as
 *             one thread's share of a decode matmul;
 *   2 streams the same dots over the thread's rows as two interleaved
 *             runs (rows i and i + half in turn), as matmul.c reads a
 *             task with split.streams = 2 and dot_rows = 1;
 *   dot2      the same two runs through vec_dot2, rows i and i + half in
 *             one call, block by block (split.dot_rows = 2; "-" where the
 *             level has none);
 *   gemv8     the same rows in the x8 layout (SB_REPACK=1), 8 per call.
 * The readers take turns window by window (each thread 24 MB per window,
 * never the same bytes twice in a row), so a noisy neighbour on the host
 * hurts all of them alike; medians of the windows are printed.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/sb_common.h"
#include "worker/kernels/sb_kq.h"

#define N 4096                    /* elements per row */
#define BUF_BYTES (2ul << 30)
#define WIN_BYTES (24ul << 20)    /* per thread and window */
#define PF_AHEAD 8192

enum { R_LOADS, R_LOADS_PF, R_DOT, R_2RUNS, R_DOT2, R_GEMV8, R_COUNT };
static const char *const reader_name[R_COUNT] = { "loads", "loads+pf", "vec_dot", "2streams", "dot2", "gemv8" };

typedef struct {
    const sb_kq_traits *t;
    const uint8_t *w;             /* this window's bytes for this thread */
    const uint8_t *w8;            /* the same rows in the x8 layout */
    size_t rs, rows;
    const void *y;
    float *out;
    int reader;
    double sum;                   /* keeps the loads alive */
} slice;

typedef struct {
    slice *s;
    pthread_barrier_t *go, *done;
    int rounds_left;
} worker_arg;

/* Always inlined with a constant pf, so the plain reader has no prefetch. */
static inline __attribute__((always_inline)) double sum_loads(const uint8_t *p, size_t bytes, int pf) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (size_t i = 0; i + 64 <= bytes; i += 64) {
        if (pf) _mm_prefetch((const char *)p + i + PF_AHEAD, _MM_HINT_T0);
        a0 = _mm256_add_ps(a0, _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p + i))));
        a1 = _mm256_add_ps(a1, _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(p + i + 32))));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_add_ps(a0, a1));
    return lanes[0];
}

static void run_slice(slice *s) {
    switch (s->reader) {
    case R_LOADS: s->sum = sum_loads(s->w, s->rows * s->rs, 0); break;
    case R_LOADS_PF: s->sum = sum_loads(s->w, s->rows * s->rs, 1); break;
    case R_GEMV8:               /* levels without a gemv8 of the type: not measured */
        for (size_t r = 0; s->t->gemv8 && r + 8 <= s->rows; r += 8) s->t->gemv8(N, &s->out[r], s->w8 + r * s->rs, s->y);
        s->sum = s->out[0];
        break;
    case R_DOT2:                /* levels without a vec_dot2 of the type: not measured */
        for (size_t r = 0, h = s->rows / 2; s->t->vec_dot2 && r < h; r++)
            s->t->vec_dot2(N, &s->out[r], h, s->w + r * s->rs, h * s->rs, s->y);
        s->sum = s->out[s->rows - 1];
        break;
    case R_2RUNS:
        for (size_t r = 0, h = s->rows / 2; r < h; r++) {
            s->t->vec_dot(N, &s->out[r], s->w + r * s->rs, s->y);
            s->t->vec_dot(N, &s->out[h + r], s->w + (h + r) * s->rs, s->y);
        }
        s->sum = s->out[s->rows - 1];
        break;
    default:
        for (size_t r = 0; r < s->rows; r++) s->t->vec_dot(N, &s->out[r], s->w + r * s->rs, s->y);
        s->sum = s->out[s->rows - 1];
    }
}

/* Thread k > 0: one slice per window, in step with thread 0. */
static void *worker_main(void *arg) {
    worker_arg *a = arg;
    for (int i = 0; i < a->rounds_left; i++) {
        pthread_barrier_wait(a->go);
        run_slice(a->s);
        pthread_barrier_wait(a->done);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Medians (GB/s, all threads together) of each reader over `rounds`
 * windows per reader, with `threads` threads. */
static void measure(const sb_kq_traits *t, uint8_t *buf, const uint8_t *x8, size_t rs, const void *y, int threads, int rounds, double med[R_COUNT]) {
    const size_t rows = WIN_BYTES / rs / 8 * 8, win = rows * rs * (size_t)threads, n_win = BUF_BYTES / win;
    const int windows = rounds * R_COUNT;
    slice s[2];
    pthread_barrier_t go, done;
    pthread_barrier_init(&go, NULL, (unsigned)threads);
    pthread_barrier_init(&done, NULL, (unsigned)threads);
    pthread_t tid = 0;
    worker_arg wa = { &s[1], &go, &done, windows };
    for (int k = 0; k < threads; k++) s[k] = (slice){ t, NULL, NULL, rs, rows, y, malloc(sizeof(float) * rows), 0, 0 };
    double *gbs = malloc(sizeof(double) * (size_t)windows);
    if (threads > 1) pthread_create(&tid, NULL, worker_main, &wa);
    for (int i = 0; i < windows; i++) {
        const int reader = i % R_COUNT;
        const uint8_t *base = buf + (size_t)(i % n_win) * win;
        for (int k = 0; k < threads; k++) {
            s[k].reader = reader;
            s[k].w = base + (size_t)k * rows * rs;
            s[k].w8 = x8 + (s[k].w - buf);
        }
        const double t0 = sb_now_s();
        if (threads > 1) pthread_barrier_wait(&go);
        run_slice(&s[0]);
        if (threads > 1) pthread_barrier_wait(&done);
        gbs[(size_t)reader * rounds + i / R_COUNT] = (double)win / (sb_now_s() - t0) / 1e9;
    }
    if (threads > 1) pthread_join(tid, NULL);
    for (int r = 0; r < R_COUNT; r++) {
        qsort(gbs + (size_t)r * rounds, (size_t)rounds, sizeof(double), cmp_double);
        med[r] = gbs[(size_t)r * rounds + rounds / 2];
    }
    for (int k = 0; k < threads; k++) free(s[k].out);
    free(gbs);
    pthread_barrier_destroy(&go);
    pthread_barrier_destroy(&done);
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 31;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s [rounds]\n", argv[0]);
        return 2;
    }
    uint8_t *buf = mmap(NULL, 2 * BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(buf, 2 * BUF_BYTES, MADV_HUGEPAGE);
    uint8_t *x8 = buf + BUF_BYTES;
    const int best = sb_kq_best_level();
    const sb_kq_traits *ref = sb_kq_table(SB_KQ_REF);
    float *xf = malloc(sizeof(float) * N * 64), *yf = malloc(sizeof(float) * N);
    srand(1);
    for (int i = 0; i < N * 64; i++) xf[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < N; i++) yf[i] = (float)rand() / RAND_MAX * 2 - 1;
    printf("streaming from DRAM at %s: GB/s of weight bytes, all threads, median of %d windows of %lu MB per thread\n",
           sb_kq_level_name(best), rounds, WIN_BYTES >> 20);
    printf("%-6s %7s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "type", "threads", reader_name[0], reader_name[1],
           reader_name[2], reader_name[3], reader_name[4], reader_name[5], "dot/ld", "2str/ld", "dot2/ld", "gemv8/ld");
    static const int types[] = { SB_TYPE_Q2_K, SB_TYPE_Q3_K, SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const sb_kq_traits *t = &sb_kq_table(best)[types[k]];
        const size_t rs = sb_kq_row_size(t, N);
        /* 64 real rows repeated: valid scales, so the kernel does its usual work */
        for (int r = 0; r < 64; r++) ref[types[k]].from_float_ref(xf + (size_t)r * N, buf + r * rs, N);
        for (size_t off = 64 * rs; off + rs <= BUF_BYTES; off += rs) memcpy(buf + off, buf + (off / rs % 64) * rs, rs);
        for (size_t off = 0; t->gemv8 && off + 8 * rs <= BUF_BYTES; off += 8 * rs) sb_kq_x8_pack(types[k], N, buf + off, rs, x8 + off);
        uint8_t *y = malloc(sb_kq_row_size(&ref[SB_TYPE_Q8_K], N));
        ref[SB_TYPE_Q8_K].from_float(yf, y, N);
        for (int threads = 1; threads <= 2; threads++) {
            double med[R_COUNT];
            measure(t, buf, x8, rs, y, threads, rounds, med);
            printf("%-6s %7d %9.2f %9.2f %9.2f %9.2f", t->name, threads, med[R_LOADS], med[R_LOADS_PF], med[R_DOT],
                   med[R_2RUNS]);
            if (t->vec_dot2) printf(" %9.2f", med[R_DOT2]);
            else printf(" %9s", "-");
            if (t->gemv8) printf(" %9.2f", med[R_GEMV8]);
            else printf(" %9s", "-");
            printf(" %8.0f%% %8.0f%%", 100 * med[R_DOT] / med[R_LOADS], 100 * med[R_2RUNS] / med[R_LOADS]);
            if (t->vec_dot2) printf(" %8.0f%%", 100 * med[R_DOT2] / med[R_LOADS]);
            else printf(" %9s", "-");
            if (t->gemv8) printf(" %8.0f%%\n", 100 * med[R_GEMV8] / med[R_LOADS]);
            else printf(" %9s\n", "-");
            fflush(stdout);
        }
        free(y);
    }
    return 0;
}
