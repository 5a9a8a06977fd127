/*
 * membw - measure this machine's sustained memory READ bandwidth.
 *
 * Why: token generation is bound by how fast the weights stream from DRAM, so
 * this number is the ceiling our decode tokens/s is judged against
 * (tg_tps_max ~= bandwidth / bytes of weights read per token).
 *
 * It sums a large buffer (default 1 GiB, far beyond the last-level cache) with
 * AVX2 loads, split across T threads, and reports the best of N passes. Three
 * readers run: plain loads, loads with a software prefetch PF bytes ahead,
 * and plain loads over two halves of the thread's slice in turn. Hardware
 * stream prefetchers stop at 4 KiB page boundaries, and a model mapped from
 * the page cache sits on 4 KiB pages, so a decoder that prefetches can read
 * faster than the plain loop; and one thread keeps more lines in flight on
 * two streams than on one (the decode matmul reads its rows so): the limit
 * we judge decode against is the best of the three ("best").
 * Not part of the library; built by tools/membw.sh.
 *
 *   membw [-s MiB] [-r reps] [-t threads]   (threads: default "1,2")
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

struct slice {
    const float *base;
    size_t count;          /* floats; a multiple of 32 */
    pthread_barrier_t *start;
    int reader;            /* which reader: 0 plain, 1 prefetch, 2 two streams */
    double sum;            /* returned so the compiler cannot drop the loads */
    double t_start, t_end; /* per-thread clock: the pass is max(end) - min(start) */
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define PF_BYTES 4096

/* The readers' four accumulators, summed (the sum only keeps the loads alive). */
static double sum_lanes(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    double total = 0;
    for (int i = 0; i < 8; i++) total += lanes[i];
    return total;
}

/* Four independent accumulators hide the add latency so loads are the
 * limit. ahead > 0 also prefetches that many floats ahead (never past the
 * slice); always inlined with a constant, so the plain reader has no branch. */
static inline __attribute__((always_inline)) double sum_avx2(const float *p, size_t n, size_t ahead) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        if (ahead && i + ahead < n) {
            _mm_prefetch((const char *)(p + i + ahead), _MM_HINT_T0);
            _mm_prefetch((const char *)(p + i + ahead + 16), _MM_HINT_T0);
        }
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    return sum_lanes(a0, a1, a2, a3);
}

/* Plain loads over p[0, n/2) and p[n/2, n) in turn, 128 bytes each. */
static double sum_avx2_2streams(const float *p, size_t n) {
    const size_t h = n / 64 * 32;
    const float *q = p + h;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < h; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_add_ps(_mm256_load_ps(p + i), _mm256_load_ps(q + i)));
        a1 = _mm256_add_ps(a1, _mm256_add_ps(_mm256_load_ps(p + i + 8), _mm256_load_ps(q + i + 8)));
        a2 = _mm256_add_ps(a2, _mm256_add_ps(_mm256_load_ps(p + i + 16), _mm256_load_ps(q + i + 16)));
        a3 = _mm256_add_ps(a3, _mm256_add_ps(_mm256_load_ps(p + i + 24), _mm256_load_ps(q + i + 24)));
    }
    return sum_lanes(a0, a1, a2, a3);
}

static void *reader(void *arg) {
    struct slice *sl = arg;
    pthread_barrier_wait(sl->start);
    sl->t_start = now_seconds();
    sl->sum = sl->reader == 1   ? sum_avx2(sl->base, sl->count, PF_BYTES / sizeof(float))
              : sl->reader == 2 ? sum_avx2_2streams(sl->base, sl->count)
                                : sum_avx2(sl->base, sl->count, 0);
    sl->t_end = now_seconds();
    return NULL;
}

/* One timed pass over the whole buffer with `threads` threads. */
static double one_pass(const float *buf, size_t count, int threads, int which, double *checksum) {
    pthread_t tid[64];
    struct slice sl[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    size_t per = (count / (size_t)threads) & ~(size_t)63;
    for (int t = 0; t < threads; t++) {
        sl[t].base = buf + (size_t)t * per;
        sl[t].count = (t == threads - 1) ? ((count - (size_t)t * per) & ~(size_t)63) : per;
        sl[t].start = &start;
        sl[t].reader = which;
        pthread_create(&tid[t], NULL, reader, &sl[t]);
    }
    pthread_barrier_wait(&start);
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    double first = sl[0].t_start, last = sl[0].t_end;
    for (int t = 1; t < threads; t++) {
        if (sl[t].t_start < first) first = sl[t].t_start;
        if (sl[t].t_end > last) last = sl[t].t_end;
    }
    double elapsed = last - first;
    for (int t = 0; t < threads; t++) *checksum += sl[t].sum;
    return elapsed;
}

int main(int argc, char **argv) {
    size_t mib = 1024;
    int reps = 10;
    const char *thread_list = "1,2";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) mib = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) thread_list = argv[i + 1];
        else { fprintf(stderr, "usage: %s [-s MiB] [-r reps] [-t 1,2]\n", argv[0]); return 2; }
    }
    size_t bytes = mib << 20;
    float *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(buf, bytes, MADV_HUGEPAGE);   /* fewer TLB misses, like a mapped model */
    size_t count = bytes / sizeof(float);
    for (size_t i = 0; i < count; i++) buf[i] = (float)(i & 1023) * 1e-3f;  /* fault pages in */

    double checksum = 0;
    printf("membw: %zu MiB buffer, best of %d passes per reader, AVX2 loads\n", mib, reps);
    char list[64];
    snprintf(list, sizeof list, "%s", thread_list);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int threads = atoi(tok);
        if (threads < 1 || threads > 64) continue;
        /* Alternate the readers pass by pass, so drifting load hits all. */
        double best[3] = { 1e30, 1e30, 1e30 }, total[3] = { 0, 0, 0 };
        for (int r = 0; r < 3 * reps; r++) {
            const int which = r % 3;
            double s = one_pass(buf, count, threads, which, &checksum);
            total[which] += s;
            if (s < best[which]) best[which] = s;
        }
        const double gb = (double)bytes * 1e-9;
        double fastest = best[0];
        for (int k = 1; k < 3; k++) fastest = best[k] < fastest ? best[k] : fastest;
        printf("threads=%d  best %.2f GB/s  plain: best %.2f mean %.2f GB/s  prefetch %d B: best %.2f mean %.2f GB/s"
               "  2 streams: best %.2f mean %.2f GB/s  (GB = 1e9 bytes)\n", threads, gb / fastest,
               gb / best[0], gb * reps / total[0], PF_BYTES, gb / best[1], gb * reps / total[1],
               gb / best[2], gb * reps / total[2]);
    }
    fprintf(stderr, "checksum %g\n", checksum);
    munmap(buf, bytes);
    return 0;
}
