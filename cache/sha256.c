/* sha256.c - SHA-256, HMAC-SHA256 and the constant-time compare, on
 * OpenSSL's libcrypto (see sb_cache.h).
 *
 * Cache keys, model fingerprints and the sync's request signatures are all
 * this one hash. libcrypto rather than our own code: it is reviewed,
 * constant-time where it must be, and uses the CPU's SHA extensions; the
 * build already needs it (libpq, libcurl). The FIPS 180-4 and RFC 4231
 * vectors stay in tests/test_cache_hash.c.
 *
 * The streaming context is an EVP_MD_CTX, which OpenSSL 3 only hands out
 * on the heap. Its allocation failing (a few hundred bytes) is treated like
 * a failed malloc in Redis: logged and fatal, so that every key function
 * keeps its can't-fail contract.
 */
#include "cache/sb_cache.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

static void crypto_fatal(const char *what) {
    sb_error("libcrypto: %s failed (out of memory?)", what);
    abort();
}

void sb_sha256_init(sb_sha256_ctx *ctx) {
    ctx->md = EVP_MD_CTX_new();
    if (!ctx->md || EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) != 1) crypto_fatal("SHA-256 init");
}

void sb_sha256_update(sb_sha256_ctx *ctx, const void *data, size_t len) {
    if (len && EVP_DigestUpdate(ctx->md, data, len) != 1) crypto_fatal("SHA-256 update");
}

void sb_sha256_final(sb_sha256_ctx *ctx, uint8_t out[SB_SHA256_LEN]) {
    unsigned n = 0;
    if (EVP_DigestFinal_ex(ctx->md, out, &n) != 1 || n != SB_SHA256_LEN) crypto_fatal("SHA-256 final");
    EVP_MD_CTX_free(ctx->md);
    ctx->md = NULL;
}

void sb_sha256_discard(sb_sha256_ctx *ctx) {
    EVP_MD_CTX_free(ctx->md);
    ctx->md = NULL;
}

void sb_sha256(const void *data, size_t len, uint8_t out[SB_SHA256_LEN]) {
    unsigned n = 0;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != SB_SHA256_LEN) crypto_fatal("SHA-256");
}

void sb_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                    uint8_t out[SB_SHA256_LEN]) {
    const void *parts[1] = { msg };
    const size_t lens[1] = { msg_len };
    sb_hmac_sha256_parts(key, key_len, 1, parts, lens, out);
}

void sb_hmac_sha256_parts(const void *key, size_t key_len, int n, const void *const *parts, const size_t *lens,
                          uint8_t out[SB_SHA256_LEN]) {
    static const unsigned char empty = 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0), OSSL_PARAM_END };
    size_t got = 0;
    int ok = c && EVP_MAC_init(c, key_len ? key : &empty, key_len, params) == 1;
    for (int i = 0; ok && i < n; i++)
        ok = !lens[i] || EVP_MAC_update(c, parts[i], lens[i]) == 1;
    ok = ok && EVP_MAC_final(c, out, &got, SB_SHA256_LEN) == 1 && got == SB_SHA256_LEN;
    EVP_MAC_CTX_free(c);
    EVP_MAC_free(mac);
    if (!ok) crypto_fatal("HMAC-SHA256");
}

void sb_hex_encode(const void *data, size_t len, char *out) {
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * len] = '\0';
}

int sb_ct_equal(const void *a, const void *b, size_t len) {
    return CRYPTO_memcmp(a, b, len) == 0;
}
