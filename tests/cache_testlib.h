/* cache_testlib.h - helpers shared by the cache tests: temp dirs, entries. */
#ifndef CACHE_TESTLIB_H
#define CACHE_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/sb_cache.h"

static inline char *tl_tmpdir(void) {
    char tmpl[] = "/tmp/sbcache-test.XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static inline void tl_rmdir(char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static inline char *tl_path(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* Store the answer `response` to `question` in namespace ns; returns put's code. */
static inline int tl_put(sb_cache *c, const char *ns, const char *question, const char *response,
                         int64_t ttl_s, char key_out[SB_CACHE_KEY_HEX]) {
    sb_cache_query q;
    assert_int_equal(sb_cache_make_key(c, ns, "fp-test", question, "temp=0", &q, NULL), 0);
    sb_cache_item it = { .key = q.key, .ns = ns, .fingerprint = "fp-test", .input = q.input,
                         .params = "temp=0", .response = response,
                         .response_len = strlen(response), .ttl_s = ttl_s };
    char err[SB_ERR_LEN] = "";
    int rc = sb_cache_put(c, &it, err);
    if (key_out) strcpy(key_out, q.key);
    sb_free(q.input);
    return rc;
}

/* Look a question up the way the router does; 0 on a hit with `want` bytes. */
static inline int tl_get(sb_cache *c, const char *ns, const char *question, const char *want) {
    sb_cache_query q;
    assert_int_equal(sb_cache_make_key(c, ns, "fp-test", question, "temp=0", &q, NULL), 0);
    sb_cache_entry e;
    int rc = sb_cache_get(c, q.key, &e, NULL);
    sb_free(q.input);
    if (rc == 0) {
        if (want) {
            assert_int_equal(e.response_len, strlen(want));
            assert_memory_equal(e.response, want, e.response_len);
        }
        sb_cache_entry_free(&e);
    }
    return rc;
}

#endif
