/* sb_common.h - error codes, logging and small helpers shared by every module.
 *
 * Convention (see docs/DESIGN.md): functions return 0 on success or a negative
 * SB_E* code; results come back through out-parameters; a caller that wants a
 * readable reason passes a char err[SB_ERR_LEN] (NULL is allowed everywhere).
 */
#ifndef SB_COMMON_H
#define SB_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>

#define SB_ERR_LEN 256          /* room for "file: field at byte offset N: why" */

enum {
    SB_OK       =  0,
    SB_EINVAL   = -1,           /* bad argument or malformed input */
    SB_ENOMEM   = -2,
    SB_EIO      = -3,           /* open/read/write/mmap failed (errno kept) */
    SB_EFORMAT  = -4,           /* file or frame does not follow its format */
    SB_EUNSUP   = -5,           /* valid but not supported (type, arch…) */
    SB_ERANGE   = -6,           /* a value outside its allowed range */
    SB_ENOTFOUND= -7,
    SB_EBUSY    = -8,
    SB_ETIMEOUT = -9,
    SB_ECANCEL  = -10,
};

/* Process exit codes are a protocol between workers and the supervisor
 * (nginx does the same with exit 2): a worker that exits with
 * SB_EXIT_CONFIG failed on its configuration or model file and restarting it
 * cannot help, so the supervisor does not respawn it. */
enum {
    SB_EXIT_OK      = 0,
    SB_EXIT_FAIL    = 1,        /* runtime failure: bad input, I/O, … */
    SB_EXIT_CONFIG  = 2,        /* bad config, model or usage: do not respawn */
};

const char *sb_strerror(int code);

/* Fill err (if not NULL) printf-style. Always returns `code` so callers can
 * write `return sb_seterr(err, SB_EFORMAT, "...")`. */
int sb_seterr(char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logging to stderr, one line per call, prefixed with time, level and the
 * process role. Level and role are set once at start-up by main(). */
enum { SB_LOG_DEBUG, SB_LOG_INFO, SB_LOG_WARN, SB_LOG_ERROR };
void sb_log_setup(const char *role, int level);
void sb_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define sb_debug(...) sb_log(SB_LOG_DEBUG, __VA_ARGS__)
#define sb_info(...)  sb_log(SB_LOG_INFO, __VA_ARGS__)
#define sb_warn(...)  sb_log(SB_LOG_WARN, __VA_ARGS__)
#define sb_error(...) sb_log(SB_LOG_ERROR, __VA_ARGS__)

/* Allocation wrappers. Tests can make the Nth allocation fail to prove that
 * every constructor cleans up (SQLite's test_malloc discipline). */
void *sb_malloc(size_t n);
void *sb_calloc(size_t n, size_t size);
void *sb_realloc(void *p, size_t n);
char *sb_strdup(const char *s);
void  sb_free(void *p);
/* Aligned (64 B: one cache line, one AVX-512 register) zeroed allocation,
 * freed with sb_aligned_free only. From 256 KiB on it is fresh pages of
 * its own, resident only where written (a buffer sized for the biggest
 * batch costs what the batches at hand write). */
void *sb_aligned_alloc(size_t n);
void  sb_aligned_free(void *p);
/* n bytes of fresh zero pages, page-aligned, that take memory only where
 * written: for a buffer sized for its most use and mostly idle (a KV pool).
 * sb_aligned_alloc's memset would make every page resident at once. Freed
 * with sb_pages_free(p, n); NULL p is fine. */
void *sb_pages_alloc(size_t n);
void  sb_pages_free(void *p, size_t n);
/* Test hook: fail the allocation `after` calls from now (-1 disables). */
void  sb_malloc_fail_after(long after);

/* Monotonic clock in nanoseconds / seconds. */
uint64_t sb_now_ns(void);
double   sb_now_s(void);
/* The nearest-rank q-quantile (0 < q <= 1) of n values sorted ascending;
 * 0 for none. The one definition every report's p50/p95 uses. */
double   sb_percentile(const double *sorted, size_t n, double q);
/* Sort n doubles ascending, in place (what sb_percentile wants first). */
void     sb_sort_doubles(double *v, size_t n);
/* Read a whole file (at most max bytes) into *out, NUL-terminated, sb_free()
 * by the caller. SB_EIO (err names the path and errno) or SB_ERANGE (too big). */
int      sb_read_file(const char *path, size_t max, char **out, size_t *len, char *err);
/* The same for an open stream (stdin); name is for messages. */
int      sb_read_stream(FILE *f, const char *name, size_t max, char **out, size_t *len, char *err);

/* ---- growable buffers ---- */
/* The one growth policy: make *p (sb_realloc'ed) hold at least `need`
 * bytes, doubling *cap from 256. 0, or SB_ENOMEM (*p and *cap unchanged).
 * sb_bytes below and the JSON writer's sb_jw (sb_json.h: text, sticky
 * failure, NUL-terminated) are built on it. */
int sb_grow(char **p, size_t *cap, size_t need);
typedef struct { char *p; size_t n, cap; } sb_bytes;
/* Room for `extra` more bytes; 0 or SB_ENOMEM (b unchanged). */
int sb_bytes_reserve(sb_bytes *b, size_t extra);
/* Append n bytes; 0 or SB_ENOMEM (b unchanged). */
int sb_bytes_put(sb_bytes *b, const void *d, size_t n);

/* ---- command-line options ---- */
/* A whole decimal integer in [lo, hi] from option `opt` of command `cmd`
 * (s may be NULL). 0 and *out set, or -1 after printing
 * "CMD: OPT expects an integer in [LO, HI], got 'S'" to stderr. */
int sb_opt_int(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* The same for a decimal number (strtod) in [lo, hi]: "CMD: OPT expects a
 * number in [LO, HI], got 'S'". NaN is never in range. */
int sb_opt_num(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);

/* Overflow-checked size arithmetic: return 0 and set *out, or -1 on overflow. */
static inline int sb_add_size(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}
static inline int sb_mul_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

#define SB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SB_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
