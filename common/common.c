/* common.c - errors, logging, allocation and clocks (see sb_common.h). */
#include "common/sb_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

const char *sb_strerror(int code) {
    static const char *const names[] = {
        [0] = "ok", [1] = "invalid argument", [2] = "out of memory",
        [3] = "I/O error", [4] = "bad format", [5] = "unsupported",
        [6] = "out of range", [7] = "not found", [8] = "busy",
        [9] = "timed out", [10] = "cancelled",
    };
    int i = -code;
    if (i < 0 || i >= (int)SB_ARRAY_LEN(names) || !names[i]) return "unknown error";
    return names[i];
}

int sb_seterr(char *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, SB_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Written once by main() before any thread or child exists; read-only after. */
static const char *log_role = "switchboard";
static int log_level = SB_LOG_INFO;

void sb_log_setup(const char *role, int level) {
    if (role) log_role = role;
    log_level = level;
}

void sb_log(int level, const char *fmt, ...) {
    static const char *const tags[] = { "debug", "info", "warn", "error" };
    if (level < log_level) return;
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_role, (int)getpid(), tags[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* One write() per line so lines of concurrent processes do not interleave. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

/* Test-only countdown; atomics because the thread pool may allocate. */
static _Atomic long malloc_countdown = -1;

static int malloc_should_fail(void) {
    long c = malloc_countdown;
    if (c < 0) return 0;
    if (c == 0) { malloc_countdown = -1; return 1; }
    malloc_countdown = c - 1;
    return 0;
}

void sb_malloc_fail_after(long after) { malloc_countdown = after; }

void *sb_malloc(size_t n) { return malloc_should_fail() ? NULL : malloc(n ? n : 1); }
void *sb_calloc(size_t n, size_t size) { return malloc_should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1); }
void *sb_realloc(void *p, size_t n) { return malloc_should_fail() ? NULL : realloc(p, n ? n : 1); }
void  sb_free(void *p) { free(p); }

char *sb_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = sb_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A big aligned buffer is most often sized for the most its user may need
 * and written only as far as a call goes (a batch's scratch rows, a logits
 * row per sequence that may run): its own fresh zero pages, resident where
 * written, where a memset would make every page resident at once. Each
 * buffer carries a 64-byte header, before the pointer handed out, saying
 * how it was made: the mapping's length, or 0 for the heap. */
#define ALIGNED_HDR 64
#define ALIGNED_LAZY_MIN ((size_t)256 * 1024)

void *sb_aligned_alloc(size_t n) {
    if (malloc_should_fail()) return NULL;
    if (n > SIZE_MAX - 2 * ALIGNED_HDR - 4096) return NULL;
    size_t total = ALIGNED_HDR + (n ? (n + 63) & ~(size_t)63 : 64);
    uint8_t *p;
    if (total >= ALIGNED_LAZY_MIN) {
        if ((p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED)
            return NULL;
    } else {
        void *q = NULL;
        if (posix_memalign(&q, 64, total) != 0) return NULL;
        p = q;
        memset(p, 0, total);
        total = 0;
    }
    memcpy(p, &total, sizeof total);
    return p + ALIGNED_HDR;
}

void sb_aligned_free(void *p) {
    if (!p) return;
    uint8_t *h = (uint8_t *)p - ALIGNED_HDR;
    size_t total;
    memcpy(&total, h, sizeof total);
    if (total) munmap(h, total);
    else free(h);
}

void *sb_pages_alloc(size_t n) {
    if (malloc_should_fail()) return NULL;
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
void sb_pages_free(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

uint64_t sb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
double sb_now_s(void) { return (double)sb_now_ns() * 1e-9; }

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void sb_sort_doubles(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof *v, cmp_double);
}

double sb_percentile(const double *sorted, size_t n, double q) {
    if (!n) return 0;
    size_t i = (size_t)(q * (double)n + 0.999999);
    return sorted[i ? (i > n ? n : i) - 1 : 0];
}

int sb_opt_int(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in [%lld, %lld], got '%s'\n", cmd, opt, (long long)lo,
                (long long)hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int sb_opt_num(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", cmd, opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int sb_grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        if (sb_mul_size(c, 2, &c)) { c = need; break; }
    char *np = sb_realloc(*p, c);
    if (!np) return SB_ENOMEM;
    *p = np;
    *cap = c;
    return 0;
}

int sb_bytes_reserve(sb_bytes *b, size_t extra) {
    size_t need;
    if (sb_add_size(b->n, extra, &need)) return SB_ENOMEM;
    return sb_grow(&b->p, &b->cap, need);
}

int sb_bytes_put(sb_bytes *b, const void *d, size_t n) {
    if (sb_bytes_reserve(b, n)) return SB_ENOMEM;
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}

int sb_read_stream(FILE *f, const char *name, size_t max, char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    sb_bytes b = { 0 };
    int rc = 0;
    for (size_t got = 1; !rc && got;) {
        if (sb_bytes_reserve(&b, 4096)) { rc = sb_seterr(err, SB_ENOMEM, "%s: out of memory", name); break; }
        got = fread(b.p + b.n, 1, b.cap - 1 - b.n, f);   /* one byte kept for the NUL */
        b.n += got;
        if (b.n > max) rc = sb_seterr(err, SB_ERANGE, "%s: larger than %zu bytes", name, max);
    }
    if (!rc && ferror(f)) rc = sb_seterr(err, SB_EIO, "%s: %s", name, strerror(errno));
    if (rc) { sb_free(b.p); return rc; }
    b.p[b.n] = 0;
    *out = b.p;
    *len = b.n;
    return 0;
}

int sb_read_file(const char *path, size_t max, char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    int rc = sb_read_stream(f, path, max, out, len, err);
    fclose(f);
    return rc;
}
