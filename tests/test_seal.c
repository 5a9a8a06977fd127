/* test_seal.c - AES-256-GCM boxes (cache/seal.c) and the key file.
 *
 * A known-answer vector ties the box layout to AES-256-GCM itself; then
 * round trips at every length class, every way a box must not open (wrong
 * key, wrong aad, each byte changed, cut short), nonces that never repeat,
 * and the key file's forms and refusals.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/sb_cache.h"

static const uint8_t KEY[SB_SEAL_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                              17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };

static int hex(const char *h, uint8_t *out) {
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return (int)n;
}

/* The GCM spec's test case 16 (AES-256, 60-byte plaintext, 20-byte aad),
 * laid out as our box: nonce | ciphertext | tag. */
static void test_known_answer(void **state) {
    uint8_t key[32], box[12 + 60 + 16], aad[20], plain[60], out[60];
    hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", key);
    hex("cafebabefacedbaddecaf888", box);
    hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39", plain);
    hex("feedfacedeadbeeffeedfacedeadbeefabaddad2", aad);
    hex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662", box + 12);
    hex("76fc6ece0f4e1768cddf8853bb2d551b", box + 72);
    assert_int_equal(sb_unseal(key, aad, sizeof aad, box, sizeof box, out), 0);
    assert_memory_equal(out, plain, sizeof plain);
}

static void test_round_trip(void **state) {
    static const size_t lens[] = { 0, 1, 15, 16, 17, 64, 1000, 1 << 20 };
    const char *aad = "session:abc/field:PHONE_1";
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        size_t n = lens[k];
        uint8_t *plain = malloc(n + 1), *box = malloc(n + SB_SEAL_OVERHEAD), *out = malloc(n + 1);
        for (size_t i = 0; i < n; i++) plain[i] = (uint8_t)(i * 131 + k);
        assert_int_equal(sb_seal(KEY, aad, strlen(aad), plain, n, box), 0);
        if (n >= 16) assert_memory_not_equal(box + 12, plain, 16);     /* encrypted, not copied */
        assert_int_equal(sb_unseal(KEY, aad, strlen(aad), box, n + SB_SEAL_OVERHEAD, out), 0);
        if (n) assert_memory_equal(out, plain, n);
        free(plain);
        free(box);
        free(out);
    }
    uint8_t box[5 + SB_SEAL_OVERHEAD], out[5];
    assert_int_equal(sb_seal(KEY, NULL, 0, "13800", 5, box), 0);                /* no aad */
    assert_int_equal(sb_unseal(KEY, NULL, 0, box, sizeof box, out), 0);
    assert_memory_equal(out, "13800", 5);
}

/* Every way a box must not open; out is zeroed each time. */
static void test_refusals(void **state) {
    const char *v = "13812345678", *aad = "call:1";
    size_t n = strlen(v), len = n + SB_SEAL_OVERHEAD;
    uint8_t box[64], bad[64], out[32];
    uint8_t key2[SB_SEAL_KEY_LEN];
    memcpy(key2, KEY, sizeof key2);
    key2[31] ^= 1;
    assert_int_equal(sb_seal(KEY, aad, strlen(aad), v, n, box), 0);
    memset(out, 0x55, sizeof out);
    assert_int_equal(sb_unseal(key2, aad, strlen(aad), box, len, out), SB_EINVAL);
    for (size_t i = 0; i < n; i++) assert_int_equal(out[i], 0);
    assert_int_equal(sb_unseal(KEY, "call:2", 6, box, len, out), SB_EINVAL);     /* moved to another call */
    assert_int_equal(sb_unseal(KEY, NULL, 0, box, len, out), SB_EINVAL);
    for (size_t i = 0; i < len; i++)            /* nonce, ciphertext and tag: every byte, every bit position */
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(bad, box, len);
            bad[i] ^= (uint8_t)(1u << bit);
            assert_int_equal(sb_unseal(KEY, aad, strlen(aad), bad, len, out), SB_EINVAL);
        }
    for (size_t cut = 0; cut < len; cut++)      /* cut short, down to less than the overhead */
        assert_int_equal(sb_unseal(KEY, aad, strlen(aad), box, cut, out), SB_EINVAL);
    memcpy(bad, box, len);
    bad[len] = 0;                               /* one byte too many: the tag is read from the wrong place */
    assert_int_equal(sb_unseal(KEY, aad, strlen(aad), bad, len + 1, out), SB_EINVAL);
}

static int cmp_nonce(const void *a, const void *b) { return memcmp(a, b, 12); }

/* Sealing the same value twice gives different boxes: 20,000 nonces, no repeat. */
static void test_nonces_unique(void **state) {
    enum { N = 20000 };
    uint8_t (*nonces)[12] = malloc(N * 12), box[4 + SB_SEAL_OVERHEAD];
    for (int i = 0; i < N; i++) {
        assert_int_equal(sb_seal(KEY, NULL, 0, "same", 4, box), 0);
        memcpy(nonces[i], box, 12);
    }
    qsort(nonces, N, 12, cmp_nonce);
    for (int i = 1; i < N; i++) assert_true(memcmp(nonces[i - 1], nonces[i], 12) != 0);
    free(nonces);
}

static const char *write_file(const char *name, const void *data, size_t n, mode_t mode) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/sb-seal-test-%d-%s", (int)getpid(), name);
    unlink(path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static void test_key_file(void **state) {
    uint8_t key[SB_SEAL_KEY_LEN];
    char err[SB_ERR_LEN];
    const char *hexkey = "0102030405060708090a0b0c0d0e0f101112131415161718191A1B1C1D1E1F20\n";
    const char *p = write_file("hex", hexkey, strlen(hexkey), 0600);
    assert_int_equal(sb_seal_key_load(p, key, err), 0);
    assert_memory_equal(key, KEY, sizeof key);
    unlink(p);
    uint8_t raw[SB_SEAL_KEY_LEN];
    memcpy(raw, KEY, sizeof raw);
    raw[31] = '\n';                             /* a raw key may end in 0x0a */
    p = write_file("raw", raw, sizeof raw, 0400);
    assert_int_equal(sb_seal_key_load(p, key, err), 0);
    assert_memory_equal(key, raw, sizeof key);
    unlink(p);
    p = write_file("wide", hexkey, strlen(hexkey), 0644);
    assert_int_equal(sb_seal_key_load(p, key, err), SB_EINVAL);
    assert_non_null(strstr(err, "has mode 0644"));
    unlink(p);
    p = write_file("short", hexkey, 40, 0600);
    assert_int_equal(sb_seal_key_load(p, key, err), SB_EINVAL);
    assert_non_null(strstr(err, "expected 32 bytes or 64 hex digits"));
    unlink(p);
    p = write_file("nothex", "zz02030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20", 64, 0600);
    assert_int_equal(sb_seal_key_load(p, key, err), SB_EINVAL);
    unlink(p);
    assert_int_equal(sb_seal_key_load("/tmp/sb-seal-test-missing", key, err), SB_EIO);
    assert_int_equal(sb_seal_key_load("/tmp", key, err), SB_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answer),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_nonces_unique),
        cmocka_unit_test(test_key_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
