/* bwprobe.c - memory read bandwidth probe (see sb_bwprobe.h).
 *
 * The readers are tools/membw.c's: sum the bytes with four independent
 * vector accumulators (loads are the limit), one reader plain, one with a
 * software prefetch 4 KiB ahead (hardware stream prefetchers stop at 4 KiB
 * pages), one reading its share as two interleaved streams (the decode
 * matmul reads a task's rows that way, and once it did, its decode read
 * faster than a one-stream probe: a limit must not be slower than what it
 * limits); the window's figure is the best one, the conservative choice for
 * a limit. Written with GCC vector types so the library stays baseline
 * x86-64; loads, not arithmetic, bound it at any vector width.
 */
#include <sys/mman.h>

#include "worker/cli/sb_bwprobe.h"
#include "common/sb_common.h"
#include "worker/engine/sb_pool.h"

#define CHUNK_BYTES (256ul << 20)   /* per reader pass, all threads together */
#define PF_BYTES 4096

typedef float v8f __attribute__((vector_size(32)));

struct sb_bwprobe {
    sb_pool *pool;
    uint8_t *buf;
    size_t bytes, next;         /* next chunk's offset */
    double sink;
};

typedef struct {
    const uint8_t *base;
    size_t per;                 /* bytes per task (a multiple of 256) */
    int reader;                 /* READ_* */
    double sums[256];
} pass_job;

/* The readers' four accumulators, summed (the sum only keeps the loads alive). */
static double sum_lanes(const v8f a[4]) {
    const v8f s = (a[0] + a[1]) + (a[2] + a[3]);
    double t = 0;
    for (int k = 0; k < 8; k++) t += s[k];
    return t;
}

static inline __attribute__((always_inline)) double sum_bytes(const uint8_t *p, size_t n, int pf) {
    v8f a0 = { 0 }, a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        if (pf && i + PF_BYTES < n) {
            __builtin_prefetch(p + i + PF_BYTES);
            __builtin_prefetch(p + i + PF_BYTES + 64);
        }
        a0 += *(const v8f *)(p + i);
        a1 += *(const v8f *)(p + i + 32);
        a2 += *(const v8f *)(p + i + 64);
        a3 += *(const v8f *)(p + i + 96);
    }
    return sum_lanes((const v8f[4]){ a0, a1, a2, a3 });
}

/* The same sum over two halves of p taken 128 bytes at a time in turn. */
static double sum_bytes_2streams(const uint8_t *p, size_t n) {
    const size_t h = n / 256 * 128;
    const uint8_t *q = p + h;
    v8f a0 = { 0 }, a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < h; i += 128) {
        a0 += *(const v8f *)(p + i) + *(const v8f *)(q + i);
        a1 += *(const v8f *)(p + i + 32) + *(const v8f *)(q + i + 32);
        a2 += *(const v8f *)(p + i + 64) + *(const v8f *)(q + i + 64);
        a3 += *(const v8f *)(p + i + 96) + *(const v8f *)(q + i + 96);
    }
    return sum_lanes((const v8f[4]){ a0, a1, a2, a3 });
}

enum { READ_PLAIN, READ_PREFETCH, READ_2STREAMS };

static void pass_task(void *arg, int task, int thread) {
    pass_job *j = arg;
    const uint8_t *p = j->base + (size_t)task * j->per;
    j->sums[task & 255] = j->reader == READ_PREFETCH ? sum_bytes(p, j->per, 1)
                          : j->reader == READ_2STREAMS ? sum_bytes_2streams(p, j->per)
                                                         : sum_bytes(p, j->per, 0);
}

int sb_bwprobe_new(int threads, size_t buf_bytes, sb_bwprobe **out) {
    *out = NULL;
    sb_bwprobe *p = sb_calloc(1, sizeof *p);
    if (!p) return SB_ENOMEM;
    p->bytes = buf_bytes / CHUNK_BYTES * CHUNK_BYTES;
    if (p->bytes < 4 * CHUNK_BYTES) p->bytes = 4 * CHUNK_BYTES;
    void *m = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || sb_pool_new(threads > 0 ? threads : 1, &p->pool) != 0) {
        if (m != MAP_FAILED) munmap(m, p->bytes);
        sb_free(p);
        return SB_ENOMEM;
    }
    p->buf = m;
    madvise(p->buf, p->bytes, MADV_HUGEPAGE);   /* like membw: fewer TLB misses */
    for (size_t i = 0; i < p->bytes; i += 4096) p->buf[i] = (uint8_t)i;   /* fault every page in */
    *out = p;
    return 0;
}

void sb_bwprobe_free(sb_bwprobe *p) {
    if (!p) return;
    sb_pool_free(p->pool);
    munmap(p->buf, p->bytes);
    sb_free(p);
}

/* One pass over the next chunk by nt readers; seconds. */
static double pass(sb_bwprobe *p, int reader, int nt) {
    pass_job j = { p->buf + p->next, CHUNK_BYTES / (size_t)nt / 256 * 256, reader, { 0 } };
    p->next = (p->next + CHUNK_BYTES) % p->bytes;
    const double t0 = sb_now_s();
    sb_pool_run(p->pool, pass_task, &j, nt);
    const double dt = sb_now_s() - t0;
    for (int t = 0; t < nt && t < 256; t++) p->sink += j.sums[t];
    return dt / ((double)j.per * nt) * CHUNK_BYTES;     /* as if the whole chunk */
}

double sb_bwprobe_window_n(sb_bwprobe *p, int readers) {
    const int nt = SB_MAX(1, SB_MIN(readers, sb_pool_size(p->pool)));
    const double plain = pass(p, READ_PLAIN, nt), pf = pass(p, READ_PREFETCH, nt), two = pass(p, READ_2STREAMS, nt);
    return (double)CHUNK_BYTES * 1e-9 / SB_MIN(SB_MIN(plain, pf), two);
}

double sb_bwprobe_window(sb_bwprobe *p) { return sb_bwprobe_window_n(p, sb_pool_size(p->pool)); }
