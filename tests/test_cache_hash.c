/* test_cache_hash.c - SHA-256 / HMAC-SHA256 test vectors, cache keys (both
 * key versions, what the default folds and what is opt-in), and the NFC and
 * NFKC normaliser against Python's unicodedata (every code point when
 * python3 is there, plus tests/data/nfkc_cases.tsv always).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/sb_cache.h"

static void hex_of(const uint8_t *d, char *out) { sb_hex_encode(d, SB_SHA256_LEN, out); }

static void check_sha(const void *msg, size_t n, const char *want) {
    uint8_t d[SB_SHA256_LEN];
    char hex[65];
    sb_sha256(msg, n, d);
    hex_of(d, hex);
    assert_string_equal(hex, want);
    /* The same through odd-sized updates: exercises the block buffer. */
    sb_sha256_ctx c;
    sb_sha256_init(&c);
    for (size_t i = 0; i < n;) {
        size_t step = SB_MIN(n - i, (size_t)(i % 7 + 1) * 9);
        sb_sha256_update(&c, (const uint8_t *)msg + i, step);
        i += step;
    }
    sb_sha256_final(&c, d);
    hex_of(d, hex);
    assert_string_equal(hex, want);
}

/* FIPS 180-4 examples (NIST CSRC "SHA256.pdf", SHA-2 additional vectors). */
static void test_sha256_vectors(void **state) {
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(m2, strlen(m2), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m3 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                     "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    check_sha(m3, strlen(m3), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    check_sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    /* Lengths around the 55/56/64-byte padding boundaries. */
    char z[64] = { 0 };
    check_sha(z, 55, "02779466cdec163811d078815c633f21901413081449002f24aa3e80f0b88ef7");
    check_sha(z, 56, "d4817aa5497628e7c77e6b606107042bbba3130888c5f47a375e6179be789fbb");
    check_sha(z, 64, "f5a5fd42d16a20302798ef6ed309979b43003d2320d9f0e8ea9831a92759fb4b");
}

static void check_hmac(const void *key, size_t klen, const void *msg, size_t mlen, const char *want) {
    uint8_t d[SB_SHA256_LEN];
    char hex[65];
    sb_hmac_sha256(key, klen, msg, mlen, d);
    hex_of(d, hex);
    assert_string_equal(hex, want);
}

/* RFC 4231 test cases 1-4, 6, 7 (case 5 is a truncated output). */
static void test_hmac_rfc4231(void **state) {
    uint8_t k[131];
    memset(k, 0x0b, 20);
    check_hmac(k, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    uint8_t d[50];
    memset(k, 0xaa, 20);
    memset(d, 0xdd, 50);
    check_hmac(k, 20, d, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++) k[i] = (uint8_t)(i + 1);
    memset(d, 0xcd, 50);
    check_hmac(k, 25, d, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(k, 0xaa, 131);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(k, 131, m6, strlen(m6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *m7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the HMAC "
                     "algorithm.";
    check_hmac(k, 131, m7, strlen(m7), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
    /* The same MAC over the message in pieces (how sync requests are signed),
     * including an empty piece. */
    const void *parts[] = { m7, "", m7 + 10, m7 + 100 };
    const size_t lens[] = { 10, 0, 90, strlen(m7) - 100 };
    uint8_t mac[SB_SHA256_LEN];
    char hex[65];
    sb_hmac_sha256_parts(k, 131, 4, parts, lens, mac);
    hex_of(mac, hex);
    assert_string_equal(hex, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
    check_hmac("", 0, "", 0, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
    assert_true(sb_ct_equal("abc", "abc", 3));
    assert_false(sb_ct_equal("abc", "abd", 3));
}

static void test_keys(void **state) {
    char a[SB_CACHE_KEY_HEX], b[SB_CACHE_KEY_HEX];
    sb_cache_key("hotline", "fp1", "hello", "t=0", a);
    assert_int_equal(strlen(a), 64);
    sb_cache_key("hotline", "fp1", "hello", "t=0", b);
    assert_string_equal(a, b);
    sb_cache_key("hotline", "fp2", "hello", "t=0", b);     /* another model file */
    assert_string_not_equal(a, b);
    /* Field boundaries matter: ("ab","c") is not ("a","bc"). */
    sb_cache_key("hotline", "fp1", "hellot", "=0", b);
    assert_string_not_equal(a, b);
    sb_cache_query q1, q2;
    assert_int_equal(sb_cache_make_key(NULL, "hotline", "fp1", "  １２３，？  ", "", &q1, NULL), 0);
    assert_int_equal(sb_cache_make_key(NULL, "hotline", "fp1", "１２３，？", "", &q2, NULL), 0);
    assert_string_equal(q1.input, "１２３，？");     /* trimmed, not width-folded */
    assert_string_equal(q1.key, q2.key);
    free(q1.input);
    free(q2.input);
}

/* Both schemes, pinned (SHA-256 of tag NUL, then each field as 8-byte LE
 * length + bytes; computed with Python's hashlib): v1 must stay what older
 * edges compute, or their entries could not be checked. */
static void test_key_versions(void **state) {
    static const char v1[] = "495edcd5ae9f22cba403198b12914ee664baf4437cefaa8cec159f0e904d51c9",
                      v2[] = "a75bf4bda5dd8d2289179fdba53a7021d74a1c04642d8f3b8edf47e48f5eba14";
    char k[SB_CACHE_KEY_HEX];
    sb_cache_key_v(1, "hotline", "fp1", "hello", "t=0", k);
    assert_string_equal(k, v1);
    sb_cache_key("hotline", "fp1", "hello", "t=0", k);
    assert_string_equal(k, v2);
    assert_int_equal(SB_CACHE_KEY_VERSION, 2);
    assert_int_equal(sb_cache_key_version(v1, "hotline", "fp1", "hello", "t=0"), 1);
    assert_int_equal(sb_cache_key_version(v2, "hotline", "fp1", "hello", "t=0"), 2);
    assert_int_equal(sb_cache_key_version(v2, "hotline", "fp1", "hello!", "t=0"), 0);
}

/* The key of one raw input under norm; params name the folding as the router does. */
static void key_of(unsigned fold, const char *raw, char key[SB_CACHE_KEY_HEX]) {
    char params[64];
    snprintf(params, sizeof params, "t=0%s%s", fold ? "|fold=" : "", sb_cache_fold_name(fold));
    sb_cache_query q;
    assert_int_equal(sb_cache_make_key_norm(NULL, SB_NORM_DEFAULT | fold, "model:tool", "fp1", raw, params, &q,
                                            NULL), 0);
    strcpy(key, q.key);
    free(q.input);
}

static void same_key(unsigned fold, const char *x, const char *y, int want_same) {
    char a[SB_CACHE_KEY_HEX], b[SB_CACHE_KEY_HEX];
    key_of(fold, x, a);
    key_of(fold, y, b);
    if (want_same != !strcmp(a, b))
        fail_msg("fold %u: [%s] and [%s] should %s", fold, x, y, want_same ? "share a key" : "differ");
}

/* "XK7Q2B" was once served the answer to "xk7q2b". By default the key
 * folds only what cannot change an answer; case and width are opt-in. */
static void test_key_folding(void **state) {
    sb_cache_query q1, q2;          /* the default API, as the router called it before */
    assert_int_equal(sb_cache_make_key(NULL, "model:tool", "fp1", "Echo back this token exactly: xk7q2b", "", &q1,
                                       NULL), 0);
    assert_int_equal(sb_cache_make_key(NULL, "model:tool", "fp1", "Echo back this token exactly: XK7Q2B", "", &q2,
                                       NULL), 0);
    assert_string_not_equal(q1.key, q2.key);
    free(q1.input);
    free(q2.input);
    same_key(0, "Echo back this token exactly: xk7q2b", "Echo back this token exactly: XK7Q2B", 0);
    same_key(SB_NORM_CASEFOLD, "Echo back this token exactly: xk7q2b", "Echo back this token exactly: XK7Q2B", 1);
    same_key(0, "ｘｋ７ｑ２ｂ", "xk7q2b", 0);                       /* full-width */
    same_key(SB_NORM_NFKC, "ｘｋ７ｑ２ｂ", "xk7q2b", 1);
    same_key(SB_NORM_NFKC, "ｘｋ７ｑ２ｂ", "XK7Q2B", 0);            /* width alone keeps case */
    same_key(SB_NORM_NFKC | SB_NORM_CASEFOLD, "ＸＫ７Ｑ２Ｂ", "xk7q2b", 1);
    same_key(0, "ﬁle", "file", 0);                                 /* a ligature is compatibility */
    /* NFC: canonically equivalent text is the same text. */
    same_key(0, "caf\u00e9", "cafe\u0301", 1);
    same_key(0, "\u212b", "\u00c5", 1);                            /* ANGSTROM SIGN = A with ring */
    same_key(0, "\u1100\u1161\u11a8", "\uac01", 1);                /* Hangul jamo = syllable */
    same_key(0, "q\u0307\u0323", "q\u0323\u0307", 1);              /* mark order */
    /* Whitespace: surrounding and repeated runs go; lines and indentation stay. */
    same_key(0, "  Echo \t back   this\u3000token \n", "Echo back this token", 1);
    same_key(0, "a  \nb", "a\nb", 1);                              /* line ends */
    same_key(0, "a\nb", "a b", 0);
    same_key(0, "a\n\nb", "a\nb", 0);
    same_key(0, "if a:\n    b()\n    c()", "if a:\n    b()\nc()", 0);
    same_key(0, "if a:\n    b()", "if a:\n  b()", 0);
    /* A folded key is never a default one, even for an input folding leaves alone. */
    char a[SB_CACHE_KEY_HEX], b[SB_CACHE_KEY_HEX];
    key_of(0, "xk7q2b", a);
    key_of(SB_NORM_CASEFOLD, "xk7q2b", b);
    assert_string_not_equal(a, b);
    key_of(SB_NORM_CASEFOLD | SB_NORM_NFKC, "xk7q2b", a);
    assert_string_not_equal(a, b);
    /* ...which is why params must say so. */
    char err[SB_ERR_LEN];
    assert_int_equal(sb_cache_make_key_norm(NULL, SB_NORM_DEFAULT | SB_NORM_CASEFOLD, "m", "fp1", "x", "t=0", &q1,
                                            err), SB_EINVAL);
    assert_int_equal(sb_cache_make_key_norm(NULL, SB_NORM_DEFAULT | SB_NORM_CASEFOLD, "m", "fp1", "x",
                                            "t=0|fold=case,width", &q1, err), SB_EINVAL);
    assert_null(q1.input);
}

static char *norm(unsigned flags, const char *s) {
    char *out = NULL;
    assert_int_equal(sb_cache_normalize(flags, s, strlen(s), &out, NULL), 0);
    return out;
}

static void test_normalize_flags(void **state) {
    char *o = norm(SB_NORM_DEFAULT, " \t Hello\u3000 WORLD\n ÀÉ Straße ");
    assert_string_equal(o, "Hello WORLD\n ÀÉ Straße");
    free(o);
    o = norm(SB_NORM_DEFAULT | SB_NORM_FOLDS, " \t Hello\u3000 WORLD\n ÀÉ Straße ");
    assert_string_equal(o, "hello world\n àé straße");
    free(o);
    o = norm(SB_NORM_COLLAPSE, "  a  b  ");
    assert_string_equal(o, "  a b");               /* indentation kept, line end trimmed */
    free(o);
    o = norm(SB_NORM_COLLAPSE, "a \t\r\n\t\tb \u2028 c\n \n");
    assert_string_equal(o, "a\r\n\t\tb\u2028 c\n\n");
    free(o);
    o = norm(SB_NORM_TRIM, "  a  b  ");
    assert_string_equal(o, "a  b");
    free(o);
    o = norm(SB_NORM_CASEFOLD, "ÄΣЖ ABC");          /* Latin only: Greek, Cyrillic stay */
    assert_string_equal(o, "äΣЖ abc");
    free(o);
    o = norm(0, "as is");
    assert_string_equal(o, "as is");
    free(o);
    o = norm(SB_NORM_NFC, "１２３ ﬁ e\u0301");     /* NFC leaves compatibility forms */
    assert_string_equal(o, "１２３ ﬁ \u00e9");
    free(o);
    o = norm(SB_NORM_NFC | SB_NORM_NFKC, "１２３ ﬁ e\u0301");
    assert_string_equal(o, "123 fi \u00e9");
    free(o);
    /* Invalid UTF-8: bad lead, truncated, overlong, surrogate -> one U+FFFD each byte. */
    o = norm(SB_NORM_NFKC, "a\xff" "b\xe4\xb8" "c\xc0\xaf" "d\xed\xa0\x80");
    assert_string_equal(o, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd"
                           "d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    free(o);
    o = norm(SB_NORM_DEFAULT, "");
    assert_string_equal(o, "");
    free(o);
    o = norm(SB_NORM_DEFAULT, " \n\t ");
    assert_string_equal(o, "");
    free(o);
}

static size_t utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); return 4;
}

/* "41 30a" -> UTF-8 */
static void hex_cps_to_utf8(const char *hex, char *out) {
    size_t n = 0;
    for (const char *p = hex; *p;) {
        char *end;
        unsigned long c = strtoul(p, &end, 16);
        if (end == p) break;
        n += utf8((uint32_t)c, out + n);
        p = end;
    }
    out[n] = '\0';
}

static void test_nfkc_cases(void **state) {
    FILE *f = fopen("tests/data/nfkc_cases.tsv", "r");
    assert_non_null(f);
    char line[4096], in[4096], want[4096];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t'), *tab2 = tab ? strchr(tab + 1, '\t') : NULL;
        assert_non_null(tab2);
        *tab = *tab2 = '\0';
        hex_cps_to_utf8(line, in);
        for (int form = 0; form < 2; form++) {      /* columns: NFKC, then NFC */
            hex_cps_to_utf8(form ? tab2 + 1 : tab + 1, want);
            char *got = norm(form ? SB_NORM_NFC : SB_NORM_NFKC, in);
            if (strcmp(got, want) && bad++ < 5)
                fprintf(stderr, "%s mismatch for [%s]: got [%s] want [%s]\n", form ? "NFC" : "NFKC", line, got, want);
            free(got);
        }
        n++;
    }
    fclose(f);
    assert_true(n > 1000);
    assert_int_equal(bad, 0);
    char *o = norm(SB_NORM_NFKC, "１２３，？");
    assert_string_equal(o, "123,?");
    free(o);
    o = norm(SB_NORM_NFC, "１２３，？");
    assert_string_equal(o, "１２３，？");
    free(o);
}

/* Every code point on its own, against Python (skipped without python3). */
static void every_code_point(const char *form, unsigned flag) {
    if (system("python3 -c 'import unicodedata' 2>/dev/null") != 0) {
        skip();
        return;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 -c \"\nimport unicodedata, sys\nw = sys.stdout.write\n"
             "print(unicodedata.unidata_version)\n"
             "for cp in range(0x110000):\n"
             "    if 0xD800 <= cp <= 0xDFFF: continue\n"
             "    c = chr(cp); n = unicodedata.normalize('%s', c)\n"
             "    if n != c: w('%%x ' %% cp + ' '.join('%%x' %% ord(x) for x in n) + '\\n')\n\"", form);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512], want[512], in[8];
    assert_non_null(fgets(line, sizeof line, p));
    line[strcspn(line, "\n")] = '\0';
    int same_version = !strcmp(line, sb_cache_unicode_version());
    uint32_t next_changed = 0;
    int have = 0, bad = 0, checked = 0;
    char *rest = NULL;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        while (!have || next_changed < cp) {
            if (!fgets(line, sizeof line, p)) { next_changed = 0x110000; have = 1; break; }
            next_changed = (uint32_t)strtoul(line, &rest, 16);
            have = 1;
        }
        in[utf8(cp, in)] = '\0';
        if (next_changed == cp) {
            rest[strcspn(rest, "\n")] = '\0';
            hex_cps_to_utf8(rest, want);
        } else {
            strcpy(want, in);
        }
        char *got = norm(flag, in);
        if (strcmp(got, want) && bad++ < 5) fprintf(stderr, "%s(U+%04X) differs from Python\n", form, cp);
        free(got);
        checked++;
    }
    pclose(p);
    if (!same_version) {
        fprintf(stderr, "python3's Unicode is not %s: %d differences not counted\n",
                sb_cache_unicode_version(), bad);
        skip();
    }
    assert_true(checked > 1000000);
    assert_int_equal(bad, 0);
}

static void test_nfkc_every_code_point(void **state) { every_code_point("NFKC", SB_NORM_NFKC); }
static void test_nfc_every_code_point(void **state) { every_code_point("NFC", SB_NORM_NFC); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_key_versions),
        cmocka_unit_test(test_key_folding),
        cmocka_unit_test(test_normalize_flags),
        cmocka_unit_test(test_nfkc_cases),
        cmocka_unit_test(test_nfkc_every_code_point),
        cmocka_unit_test(test_nfc_every_code_point),
    };
    return cmocka_run_group_tests_name("cache_hash", tests, NULL, NULL);
}
