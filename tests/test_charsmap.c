/* test_charsmap.c - the precompiled-charsmap trie (worker/tokenizer/charsmap.c).
 *
 * The builder must produce a darts-clone double array in which every key
 * is found with its own replacement and every lookup returns the LONGEST
 * key that prefixes the text, the rule sentencepiece and llama.cpp apply.
 * Checked on hand-made cases (nested keys, multi-byte keys, empty
 * replacements) and against a brute-force search on random key sets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "worker/tokenizer/sb_charsmap.h"
#include "common/sb_common.h"

static void build(const sb_charsmap_rule *r, size_t n, sb_charsmap *cm) {
    uint8_t *blob;
    size_t len;
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_charsmap_build(r, n, &blob, &len, err), 0);
    assert_int_equal(sb_charsmap_load(blob, len, cm, err), 0);
    sb_free(blob);
}

static void expect(const sb_charsmap *cm, const char *text, size_t want_len, const char *want_repl) {
    const char *r = NULL;
    size_t rn = 0;
    size_t got = sb_charsmap_match(cm, text, strlen(text), &r, &rn);
    assert_int_equal(got, want_len);
    if (want_len) {
        assert_int_equal(rn, strlen(want_repl));
        assert_memory_equal(r, want_repl, rn);
    }
}

#define RULE(k, v) { k, sizeof(k) - 1, v, sizeof(v) - 1 }

static void test_charsmap_longest_match(void **state) {
    (void)state;
    const sb_charsmap_rule rules[] = {
        RULE("ab", "yz"), RULE("a", "x"), RULE("abc", ""), RULE("\xC3\xA9", "e"), RULE("\xEF\xAC\x81", "fi"),
        RULE("\t", " "), RULE("\xE3\x80\x80", " "), RULE("b", "B"),
    };
    sb_charsmap cm;
    build(rules, SB_ARRAY_LEN(rules), &cm);
    expect(&cm, "a", 1, "x");
    expect(&cm, "ax", 1, "x");
    expect(&cm, "ab", 2, "yz");
    expect(&cm, "abd", 2, "yz");
    expect(&cm, "abcd", 3, "");             /* an empty replacement is a match that deletes */
    expect(&cm, "\xC3\xA9t\xC3\xA9", 2, "e");
    expect(&cm, "\xEF\xAC\x81x", 3, "fi");
    expect(&cm, "\xEF\xAC", 0, "");          /* a key's prefix is not a key */
    expect(&cm, "\t", 1, " ");
    expect(&cm, "\xE3\x80\x80x", 3, " ");
    expect(&cm, "c", 0, "");
    expect(&cm, "", 0, "");
    sb_charsmap_free(&cm);
}

static void test_charsmap_rejects(void **state) {
    (void)state;
    char err[SB_ERR_LEN] = "";
    uint8_t *blob;
    size_t len;
    const sb_charsmap_rule dup[] = { RULE("a", "x"), RULE("a", "y") };
    assert_int_equal(sb_charsmap_build(dup, 2, &blob, &len, err), SB_EINVAL);
    assert_non_null(strstr(err, "duplicate"));
    sb_charsmap cm;
    const uint8_t bad[8] = { 0xFF, 0xFF, 0, 0 };   /* trie larger than the blob */
    assert_int_equal(sb_charsmap_load(bad, sizeof bad, &cm, err), SB_EFORMAT);
    assert_int_equal(sb_charsmap_load(bad, 0, &cm, err), 0);     /* empty: no rule matches */
    expect(&cm, "a", 0, "");
}

/* Random keys over a small alphabet (many shared prefixes), checked
 * against a linear search for the longest key prefixing each probe. */
static void test_charsmap_random_vs_brute_force(void **state) {
    (void)state;
    uint64_t s = 12345;
    enum { N = 3000, KEYLEN = 6 };
    static char keys[N][KEYLEN + 1], vals[N][8];
    sb_charsmap_rule *r = calloc(N, sizeof *r);
    size_t n = 0;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int len = 1 + (int)((s >> 33) % KEYLEN);
        for (int j = 0; j < len; j++) keys[n][j] = (char)("ab\xC3\xA9z"[(s >> (8 + 5 * j)) % 5]);
        keys[n][len] = 0;
        int seen = 0;
        for (size_t k = 0; k < n && !seen; k++) seen = !strcmp(keys[k], keys[n]);
        if (seen) continue;
        snprintf(vals[n], sizeof vals[n], "%d", i % 1000);
        r[n] = (sb_charsmap_rule){ keys[n], strlen(keys[n]), vals[n], strlen(vals[n]) };
        n++;
    }
    sb_charsmap cm;
    build(r, n, &cm);
    for (size_t i = 0; i < n; i++) expect(&cm, keys[i], strlen(keys[i]), vals[i]);
    for (int probe = 0; probe < 2000; probe++) {
        char text[16];
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        for (int j = 0; j < 10; j++) text[j] = (char)("ab\xC3\xA9zq"[(s >> (4 * j)) % 6]);
        text[10] = 0;
        size_t best = 0, bi = 0;
        for (size_t k = 0; k < n; k++)
            if (r[k].key_len > best && !strncmp(text, keys[k], r[k].key_len)) { best = r[k].key_len; bi = k; }
        expect(&cm, text, best, best ? vals[bi] : "");
    }
    sb_charsmap_free(&cm);
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_charsmap_longest_match),
        cmocka_unit_test(test_charsmap_rejects),
        cmocka_unit_test(test_charsmap_random_vs_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
