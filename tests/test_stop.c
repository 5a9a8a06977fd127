/* test_stop.c - stop strings and UTF-8 holding for streamed output.
 *
 * What a client receives must be exactly the generated text up to the first
 * stop string, in valid UTF-8 chunks, however the text is cut into tokens.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "worker/engine/sb_sampler.h"

/* A deterministic test RNG for cutting text into pieces. */
static uint64_t lcg_state = 88172645463325252ull;
static double test_uniform(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * 0x1.0p-53;
}

typedef struct { char text[4096]; size_t n; int stopped; } collected;

static int feed(sb_stop_matcher *m, collected *c, const char *piece) {
    const char *e;
    size_t n;
    int rc = sb_stop_feed(m, piece, strlen(piece), &e, &n);
    assert_true(rc >= 0);
    assert_true(c->n + n < sizeof c->text);
    memcpy(c->text + c->n, e, n);
    c->n += n;
    c->text[c->n] = 0;
    if (rc == 1) c->stopped = 1;
    return (int)n;
}

static void flush(sb_stop_matcher *m, collected *c) {
    const char *e;
    size_t n;
    assert_int_equal(sb_stop_flush(m, &e, &n), 0);
    memcpy(c->text + c->n, e, n);
    c->n += n;
    c->text[c->n] = 0;
}

static sb_stop_matcher *matcher(const char *const *stops, size_t n) {
    sb_stop_matcher *m;
    char err[SB_ERR_LEN];
    if (sb_stop_new(stops, n, &m, err)) fail_msg("sb_stop_new: %s", err);
    return m;
}

static void test_stop_split_across_pieces(void **state) {
    (void)state;
    const char *stops[] = { "</answer>", "\n\nUser:" };
    sb_stop_matcher *m = matcher(stops, 2);
    collected c = { 0 };
    assert_int_equal(feed(m, &c, "Hello </an"), 6);         /* "</an" held */
    assert_string_equal(c.text, "Hello ");
    feed(m, &c, "sw");
    assert_string_equal(c.text, "Hello ");
    feed(m, &c, "er> and more");
    assert_true(c.stopped);
    assert_string_equal(c.text, "Hello ");
    assert_int_equal(sb_stop_which(m), 0);
    assert_int_equal(feed(m, &c, "ignored"), 0);            /* stays stopped */
    flush(m, &c);
    assert_string_equal(c.text, "Hello ");
    /* the second stop, one byte per piece */
    sb_stop_reset(m);
    c = (collected){ 0 };
    const char *s = "ok\n\nUser: next";
    for (const char *q = s; *q; q++) {
        char one[2] = { *q, 0 };
        feed(m, &c, one);
    }
    assert_true(c.stopped);
    assert_string_equal(c.text, "ok");
    assert_int_equal(sb_stop_which(m), 1);
    sb_stop_free(m);
}

static void test_stop_partial_then_mismatch(void **state) {
    (void)state;
    const char *stops[] = { "</answer>" };
    sb_stop_matcher *m = matcher(stops, 1);
    collected c = { 0 };
    feed(m, &c, "ab</ans");
    assert_string_equal(c.text, "ab");
    feed(m, &c, "x");                       /* not the stop: everything goes */
    assert_string_equal(c.text, "ab</ansx");
    feed(m, &c, "<");                       /* a new possible start is held */
    assert_string_equal(c.text, "ab</ansx");
    flush(m, &c);                           /* end of generation releases it */
    assert_string_equal(c.text, "ab</ansx<");
    assert_false(c.stopped);
    sb_stop_free(m);
    /* self-overlapping stop: "aab" inside "aaaab" */
    const char *s2[] = { "aab" };
    m = matcher(s2, 1);
    c = (collected){ 0 };
    feed(m, &c, "aa");
    assert_string_equal(c.text, "");
    feed(m, &c, "aab!");
    assert_true(c.stopped);
    assert_string_equal(c.text, "aa");
    sb_stop_free(m);
}

static void test_stop_at_start_and_earliest(void **state) {
    (void)state;
    const char *stops[] = { "B", "AB", "<|im_end|>" };
    sb_stop_matcher *m = matcher(stops, 3);
    collected c = { 0 };
    feed(m, &c, "<|im_end|>trailing");
    assert_true(c.stopped);
    assert_int_equal(c.n, 0);
    assert_int_equal(sb_stop_which(m), 2);
    sb_stop_reset(m);
    c = (collected){ 0 };
    feed(m, &c, "xAB");                     /* "AB" at 1 comes before "B" at 2 */
    assert_true(c.stopped);
    assert_string_equal(c.text, "x");
    assert_int_equal(sb_stop_which(m), 1);
    sb_stop_free(m);
    /* empty stop strings are refused */
    const char *bad[] = { "ok", "" };
    char err[SB_ERR_LEN];
    assert_int_equal(sb_stop_new(bad, 2, &m, err), SB_EINVAL);
    assert_null(m);
}

static void test_stop_utf8_holding(void **state) {
    (void)state;
    sb_stop_matcher *m = matcher(NULL, 0);
    collected c = { 0 };
    assert_int_equal(feed(m, &c, "caf\xC3"), 3);            /* é split: C3 | A9 */
    feed(m, &c, "\xA9!");
    assert_string_equal(c.text, "caf\xC3\xA9!");
    feed(m, &c, "\xF0\x9F");                                /* 😀 = F0 9F 98 80 */
    feed(m, &c, "\x98");
    assert_string_equal(c.text, "caf\xC3\xA9!");
    feed(m, &c, "\x80 ok");
    assert_string_equal(c.text, "caf\xC3\xA9!\xF0\x9F\x98\x80 ok");
    /* invalid bytes become U+FFFD, one per maximal invalid subsequence */
    c = (collected){ 0 };
    feed(m, &c, "a\xFF" "b\x80" "c\xE2\x82" "d\xED\xA0\x80" "e");
    assert_string_equal(c.text, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD" "d"
                        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "e");
    /* a sequence still unfinished at the end is replaced on flush */
    c = (collected){ 0 };
    feed(m, &c, "z\xE2\x82");
    assert_string_equal(c.text, "z");
    flush(m, &c);
    assert_string_equal(c.text, "z\xEF\xBF\xBD");
    sb_stop_free(m);
    /* a multi-byte stop split inside a codepoint */
    const char *stops[] = { "\xE3\x80\x82\xE3\x80\x82" };     /* "。。" */
    m = matcher(stops, 1);
    c = (collected){ 0 };
    feed(m, &c, "\xE5\xA5\xBD\xE3\x80");
    assert_string_equal(c.text, "\xE5\xA5\xBD");
    feed(m, &c, "\x82\xE3");
    feed(m, &c, "\x80\x82tail");
    assert_true(c.stopped);
    assert_string_equal(c.text, "\xE5\xA5\xBD");
    sb_stop_free(m);
}

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = (unsigned char)s[i];
        int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return 0;
        for (int j = 1; j < len; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* Random valid text cut into random pieces: the output is exactly the text
 * before the first stop, and every chunk is valid UTF-8 on its own. */
static void test_stop_random_pieces(void **state) {
    (void)state;
    const char *alphabet[] = { "a", "b", " ", "\n", "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "<", "|" };
    const char *stops[] = { "<|a", "b\n\n", "\xE4\xBD\xA0\xE4\xBD\xA0" };
    for (int trial = 0; trial < 2000; trial++) {
        char text[600];
        size_t n = 0;
        while (n < 500) {
            const char *sym = alphabet[(int)(test_uniform() * SB_ARRAY_LEN(alphabet))];
            memcpy(text + n, sym, strlen(sym));
            n += strlen(sym);
        }
        text[n] = 0;
        size_t cut = n;
        for (size_t s = 0; s < SB_ARRAY_LEN(stops); s++) {
            const char *hit = strstr(text, stops[s]);
            if (hit && (size_t)(hit - text) < cut) cut = (size_t)(hit - text);
        }
        sb_stop_matcher *m = matcher(stops, SB_ARRAY_LEN(stops));
        char got[600];
        size_t got_n = 0;
        int stopped = 0;
        for (size_t i = 0; i < n && !stopped;) {
            size_t len = 1 + (size_t)(test_uniform() * 6);
            if (len > n - i) len = n - i;
            const char *e;
            size_t el;
            int rc = sb_stop_feed(m, text + i, len, &e, &el);
            assert_true(rc == 0 || rc == 1);
            assert_true(valid_utf8(e, el));
            memcpy(got + got_n, e, el);
            got_n += el;
            stopped = rc;
            i += len;
        }
        if (!stopped) {
            const char *e;
            size_t el;
            assert_int_equal(sb_stop_flush(m, &e, &el), 0);
            memcpy(got + got_n, e, el);
            got_n += el;
        }
        assert_int_equal(stopped, cut < n);
        assert_int_equal(got_n, cut);
        assert_memory_equal(got, text, cut);
        sb_stop_free(m);
    }
}

static void test_stop_alloc_failures(void **state) {
    (void)state;
    const char *stops[] = { "one", "two" };
    for (long k = 0;; k++) {
        sb_stop_matcher *m;
        sb_malloc_fail_after(k);
        int rc = sb_stop_new(stops, 2, &m, NULL);
        sb_malloc_fail_after(-1);
        if (rc == 0) { sb_stop_free(m); break; }
        assert_int_equal(rc, SB_ENOMEM);
        assert_null(m);
    }
    /* a piece larger than the buffer grows it; a failed growth is reported */
    sb_stop_matcher *m = matcher(stops, 2);
    static char big[10000];
    memset(big, 'x', sizeof big - 1);
    const char *e;
    size_t el;
    sb_malloc_fail_after(0);
    assert_int_equal(sb_stop_feed(m, big, sizeof big - 1, &e, &el), SB_ENOMEM);
    sb_malloc_fail_after(-1);
    assert_int_equal(sb_stop_feed(m, big, sizeof big - 1, &e, &el), 0);
    assert_int_equal(el, sizeof big - 1);
    sb_stop_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_split_across_pieces),
        cmocka_unit_test(test_stop_partial_then_mismatch),
        cmocka_unit_test(test_stop_at_start_and_earliest),
        cmocka_unit_test(test_stop_utf8_holding),
        cmocka_unit_test(test_stop_random_pieces),
        cmocka_unit_test(test_stop_alloc_failures),
    };
    return cmocka_run_group_tests_name("stop", tests, NULL, NULL);
}
