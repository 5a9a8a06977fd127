/* test_cache_input.c - what the cache reads from outside: the caller's text
 * (sb_cache_normalize) and the cloud's sync replies (common/json.c, read by cache/wire.c). Each
 * case is a finding of the fuzz targets tests/fuzz/fuzz_nfkc.c and
 * tests/fuzz/fuzz_sync.c, kept here so it stays fixed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cache/cache_internal.h"

static char *norm(unsigned flags, const char *s) {
    char *out = NULL;
    assert_int_equal(sb_cache_normalize(flags, s, strlen(s), &out, NULL), 0);
    return out;
}

/* Case folding after NFKC made "W" U+030A into "w" U+030A, which NFKC
 * composes to U+1E98: normalising the output again changed it, so a key
 * made from a stored (normalised) input did not find its own entry. */
static void test_normalize_is_idempotent_after_casefold(void **state) {
    static const char *const inputs[] = {
        "W\xcc\x8a",                /* W + ring above -> U+1E98 */
        "Y\xcc\x8a hello",          /* Y + ring above -> U+1E99 */
        "T\xcc\x88",                /* T + diaeresis -> U+1E97 */
        "J\xcc\x8c",                /* J + caron -> U+01F0 */
        "H\xcc\xb1",                /* H + macron below -> U+1E96 */
    };
    static const unsigned flag_sets[] = {
        SB_NORM_NFKC | SB_NORM_CASEFOLD | SB_NORM_COLLAPSE | SB_NORM_TRIM,
        SB_NORM_DEFAULT | SB_NORM_CASEFOLD,                 /* NFC, with case folding opted in */
    };
    for (size_t f = 0; f < sizeof flag_sets / sizeof flag_sets[0]; f++) {
        for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
            char *once = norm(flag_sets[f], inputs[i]), *twice = norm(flag_sets[f], once);
            assert_string_equal(once, twice);
            sb_free(once);
            sb_free(twice);
        }
        char *w = norm(flag_sets[f], "W\xcc\x8a");
        assert_string_equal(w, "\xe1\xba\x98");     /* U+1E98 */
        sb_free(w);
    }
}

/* A number the sync reader cannot hold was converted to int64_t anyway:
 * undefined behaviour (UBSan aborts the edge) for 1e300 in a reply. The
 * cache's own reader refused the whole body; common/json.c's reader keeps
 * such a number as a double, and sbc_json_int refuses the member. */
static void test_sync_reader_rejects_huge_numbers(void **state) {
    static const char *const bad[] = { "1e300", "-1e19", "9.3e18", "-9.3e18" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[64], err[SB_ERR_LEN];
        snprintf(text, sizeof text, "{\"cursor\":%s}", bad[i]);
        sb_json_doc *j = NULL;
        assert_int_equal(sb_json_parse(text, strlen(text), &j, err), 0);
        int64_t cursor = 7;
        assert_int_equal(sbc_json_int(sb_json_root(j), "cursor", &cursor), SB_EFORMAT);
        assert_true(cursor == 7);
        sb_json_doc_free(j);
    }
    sb_json_doc *j = NULL;
    assert_int_equal(sb_json_parse("[1.5e400]", 9, &j, NULL), SB_EFORMAT);
    assert_null(j);
    const char *ok = "{\"cursor\":1.7e12,\"n\":2.9}";
    assert_int_equal(sb_json_parse(ok, strlen(ok), &j, NULL), 0);
    int64_t cursor = 0, n = 0;
    assert_int_equal(sbc_json_int(sb_json_root(j), "cursor", &cursor), 0);
    assert_true(cursor == 1700000000000LL);
    assert_int_equal(sbc_json_int(sb_json_root(j), "n", &n), 0);     /* the integral part */
    assert_true(n == 2);
    assert_int_equal(sbc_json_int(sb_json_root(j), "none", &n), SB_ENOTFOUND);
    sb_json_doc_free(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize_is_idempotent_after_casefold),
        cmocka_unit_test(test_sync_reader_rejects_huge_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
