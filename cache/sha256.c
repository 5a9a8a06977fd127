/* sha256.c - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), see sb_cache.h.
 *
 * Our own small implementation so the cache and the cloud tier need no
 * OpenSSL: cache keys, model fingerprints and request signatures are all this
 * one hash. Plain portable C; ~250 MB/s on one core, which is far more than
 * keys (a few hundred bytes) and sampled fingerprints (~1 MB) need.
 */
#include "sb_cache.h"

#include <string.h>

static const uint32_t k_round[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const uint8_t block[64]) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
               (uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                      k_round[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void sb_sha256_init(sb_sha256_ctx *ctx) {
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(ctx->h, iv, sizeof iv);
    ctx->nbytes = 0;
    ctx->nbuf = 0;
}

void sb_sha256_update(sb_sha256_ctx *ctx, const void *data, size_t len) {
    const uint8_t *p = data;
    ctx->nbytes += len;
    if (ctx->nbuf) {
        size_t take = SB_MIN(len, 64 - ctx->nbuf);
        memcpy(ctx->buf + ctx->nbuf, p, take);
        ctx->nbuf += take; p += take; len -= take;
        if (ctx->nbuf < 64) return;
        compress(ctx->h, ctx->buf);
        ctx->nbuf = 0;
    }
    for (; len >= 64; p += 64, len -= 64) compress(ctx->h, p);
    memcpy(ctx->buf, p, len);
    ctx->nbuf = len;
}

void sb_sha256_final(sb_sha256_ctx *ctx, uint8_t out[SB_SHA256_LEN]) {
    uint64_t bits = ctx->nbytes * 8;
    uint8_t pad[72] = { 0x80 };
    /* Pad to 56 mod 64, then the 64-bit big-endian bit length. */
    size_t npad = (ctx->nbuf < 56 ? 56 : 120) - ctx->nbuf;
    for (int i = 0; i < 8; i++) pad[npad + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    uint64_t keep = ctx->nbytes;
    sb_sha256_update(ctx, pad, npad + 8);
    ctx->nbytes = keep;
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(ctx->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(ctx->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(ctx->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)ctx->h[i];
    }
}

void sb_sha256(const void *data, size_t len, uint8_t out[SB_SHA256_LEN]) {
    sb_sha256_ctx ctx;
    sb_sha256_init(&ctx);
    sb_sha256_update(&ctx, data, len);
    sb_sha256_final(&ctx, out);
}

void sb_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                    uint8_t out[SB_SHA256_LEN]) {
    uint8_t k[64] = { 0 }, pad[64], inner[SB_SHA256_LEN];
    /* Keys longer than the block are hashed first (RFC 2104 section 2). */
    if (key_len > 64) sb_sha256(key, key_len, k);
    else if (key_len) memcpy(k, key, key_len);
    sb_sha256_ctx ctx;
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    sb_sha256_init(&ctx);
    sb_sha256_update(&ctx, pad, 64);
    sb_sha256_update(&ctx, msg, msg_len);
    sb_sha256_final(&ctx, inner);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    sb_sha256_init(&ctx);
    sb_sha256_update(&ctx, pad, 64);
    sb_sha256_update(&ctx, inner, sizeof inner);
    sb_sha256_final(&ctx, out);
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
    const volatile uint8_t *x = a, *y = b;
    uint8_t diff = 0;
    for (size_t i = 0; i < len; i++) diff |= x[i] ^ y[i];
    return diff == 0;
}
