/* seal.c - AES-256-GCM sealing of small secrets at rest (sb_cache.h), on
 * libcrypto, with the key from runtime.secret_key_file.
 *
 * A sealed box is nonce (12 bytes) | ciphertext | tag (16 bytes). The nonce
 * is 96 random bits from the CSPRNG for every box: with one key shared by
 * the boxes of a site and no counter they could agree on, random nonces
 * are what GCM allows (NIST SP 800-38D 8.2.2), safe for far more boxes than
 * a site will seal (2^32 under one key). The associated data binds a box to
 * where it belongs (a session id, a field name): a box moved elsewhere no
 * longer opens.
 */
#include "cache/sb_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NONCE_LEN 12
#define TAG_LEN 16

static int gcm(bool enc, const uint8_t key[SB_SEAL_KEY_LEN], const uint8_t *nonce, const void *aad, size_t aad_len,
               const uint8_t *in, size_t len, uint8_t *out, uint8_t *tag) {
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c) return SB_ENOMEM;
    int n, ok = EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) == 1 &&
                EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
                EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc) == 1 &&
                (!aad_len || EVP_CipherUpdate(c, NULL, &n, aad, (int)aad_len) == 1);
    /* Whole blocks of at most 1 GB at a time: EVP lengths are ints. */
    for (size_t off = 0; ok && off < len;) {
        int step = len - off > (1u << 30) ? 1 << 30 : (int)(len - off);
        ok = EVP_CipherUpdate(c, out + off, &n, in + off, step) == 1;
        off += (size_t)step;
    }
    if (ok && !enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1;
    if (ok) ok = EVP_CipherFinal_ex(c, out + len, &n) == 1;     /* decrypting: the tag is checked here */
    if (ok && enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1;
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : SB_EINVAL;
}

int sb_seal(const uint8_t key[SB_SEAL_KEY_LEN], const void *aad, size_t aad_len, const void *plain, size_t len,
            uint8_t *out) {
    if (aad_len > INT32_MAX) return SB_EINVAL;
    if (RAND_bytes(out, NONCE_LEN) != 1) return SB_EIO;
    int rc = gcm(true, key, out, aad, aad_len, plain, len, out + NONCE_LEN, out + NONCE_LEN + len);
    if (rc) memset(out, 0, len + SB_SEAL_OVERHEAD);
    return rc;
}

int sb_unseal(const uint8_t key[SB_SEAL_KEY_LEN], const void *aad, size_t aad_len, const uint8_t *box, size_t len,
              uint8_t *out) {
    if (len < SB_SEAL_OVERHEAD || aad_len > INT32_MAX) return SB_EINVAL;
    size_t n = len - SB_SEAL_OVERHEAD;
    uint8_t tag[TAG_LEN];
    memcpy(tag, box + NONCE_LEN + n, TAG_LEN);
    int rc = gcm(false, key, box, aad, aad_len, box + NONCE_LEN, n, out, tag);
    if (rc) memset(out, 0, n);      /* nothing of a box that did not open is handed out */
    return rc;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int sb_seal_key_load(const char *path, uint8_t key[SB_SEAL_KEY_LEN], char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sb_seterr(err, SB_EIO, "secret_key_file %s: %s", path, strerror(errno));
    struct stat st;
    uint8_t buf[SB_SEAL_KEY_LEN * 2 + 3];
    ssize_t n = -1;
    int rc = 0;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) rc = sb_seterr(err, SB_EINVAL, "secret_key_file %s: not a regular file", path);
    else if (st.st_uid != geteuid() || (st.st_mode & 077))
        rc = sb_seterr(err, SB_EINVAL, "secret_key_file %s has mode %04o (uid %u): want 0600 and ours (chmod 600 %s)",
                       path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, path);
    else if ((n = read(fd, buf, sizeof buf)) < 0) rc = sb_seterr(err, SB_EIO, "secret_key_file %s: %s", path, strerror(errno));
    close(fd);
    if (rc) return rc;
    size_t len = (size_t)n;
    if (len && buf[len - 1] == '\n') len--;
    if (len && buf[len - 1] == '\r') len--;
    bool hex = len == SB_SEAL_KEY_LEN * 2;
    for (size_t i = 0; hex && i < len; i++) hex = hexval(buf[i]) >= 0;
    if (hex) {
        for (size_t i = 0; i < SB_SEAL_KEY_LEN; i++) key[i] = (uint8_t)(hexval(buf[2 * i]) << 4 | hexval(buf[2 * i + 1]));
    } else if ((size_t)n == SB_SEAL_KEY_LEN) {
        memcpy(key, buf, SB_SEAL_KEY_LEN);      /* 32 raw bytes (a trailing 0x0a is key, not a newline) */
    } else {
        rc = sb_seterr(err, SB_EINVAL, "secret_key_file %s: expected 32 bytes or 64 hex digits (openssl rand -hex 32), "
                       "got %zd bytes", path, n);
    }
    memset(buf, 0, sizeof buf);
    return rc;
}
