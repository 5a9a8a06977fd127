/* bytes_testlib.h - does a file hold a string? For the tests that check a
 * purge or an erase left no copy of a caller's words in a SQLite file or
 * its WAL. Header-only: include it in one test program.
 */
#ifndef SB_BYTES_TESTLIB_H
#define SB_BYTES_TESTLIB_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Does the file at p (absent: no) hold the bytes of needle? */
static inline bool file_holds(const char *p, const char *needle) {
    FILE *fp = fopen(p, "rb");
    if (!fp) return false;
    size_t n = strlen(needle), have = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + have, 1, cap - have, fp)) > 0;) {
        have += got;
        if (have == cap) {
            char *more = realloc(buf, cap *= 2);
            if (!more) free(buf);
            buf = more;
        }
    }
    fclose(fp);
    if (!buf) abort();
    bool hit = false;
    for (size_t i = 0; !hit && n <= have && i <= have - n; i++) hit = !memcmp(buf + i, needle, n);
    free(buf);
    return hit;
}

/* A SQLite database: the file or its -wal. */
static inline bool db_holds(const char *path, const char *needle) {
    char wal[4096];
    snprintf(wal, sizeof wal, "%s-wal", path);
    return file_holds(path, needle) || file_holds(wal, needle);
}

#endif
