/* keys.c - cache keys, model fingerprints and request signatures. */
#include "cache/cache_internal.h"
#include "worker/gguf/sb_gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Each field is preceded by its 8-byte little-endian length, so no choice of
 * field contents can make two different tuples hash alike ("a"+"bc" vs
 * "ab"+"c"). The domain tag lets a future key scheme coexist with this one. */
static void hash_field(sb_sha256_ctx *h, const char *s) {
    uint64_t n = s ? strlen(s) : 0;
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(n >> (8 * i));
    sb_sha256_update(h, len, 8);
    if (n) sb_sha256_update(h, s, n);
}

/* The tag names the key scheme: a v1 key and a v2 key of the same parts
 * differ, so an entry made under one folding is never found by the other. */
void sb_cache_key_v(int version, const char *ns, const char *fingerprint, const char *input,
                    const char *params, char key[SB_CACHE_KEY_HEX]) {
    static const char tag1[] = "switchboard-cache-key/v1", tag2[] = "switchboard-cache-key/v2";
    sb_sha256_ctx h;
    uint8_t d[SB_SHA256_LEN];
    sb_sha256_init(&h);
    if (version == 1) sb_sha256_update(&h, tag1, sizeof tag1);
    else sb_sha256_update(&h, tag2, sizeof tag2);
    hash_field(&h, ns);
    hash_field(&h, fingerprint);
    hash_field(&h, input);
    hash_field(&h, params);
    sb_sha256_final(&h, d);
    sb_hex_encode(d, sizeof d, key);
}

void sb_cache_key(const char *ns, const char *fingerprint, const char *input,
                  const char *params, char key[SB_CACHE_KEY_HEX]) {
    sb_cache_key_v(SB_CACHE_KEY_VERSION, ns, fingerprint, input, params, key);
}

int sb_cache_key_version(const char *key, const char *ns, const char *fingerprint,
                         const char *input, const char *params) {
    char want[SB_CACHE_KEY_HEX];
    for (int v = SB_CACHE_KEY_VERSION; v >= 1; v--) {
        sb_cache_key_v(v, ns, fingerprint, input, params, want);
        if (key && !strcmp(want, key)) return v;
    }
    return 0;
}

const char *sb_cache_fold_name(unsigned norm) {
    static const char *const names[4] = { "", "case", "width", "case,width" };
    return names[((norm & SB_NORM_CASEFOLD) ? 1 : 0) | ((norm & SB_NORM_NFKC) ? 2 : 0)];
}

/* params holds "fold=NAME" as a whole |-separated field. */
static int names_fold(const char *params, const char *name) {
    size_t n = strlen(name);
    for (const char *p = params; (p = strstr(p, "fold=")) != NULL; p += 5)
        if ((p == params || p[-1] == '|') && !strncmp(p + 5, name, n) && (!p[5 + n] || p[5 + n] == '|'))
            return 1;
    return 0;
}

int sb_cache_make_key_norm(const sb_cache *c, unsigned norm, const char *ns,
                           const char *fingerprint, const char *raw_input, const char *params,
                           sb_cache_query *q, char *err) {
    (void)c;
    q->key[0] = '\0';
    q->input = NULL;
    if (!ns || !fingerprint || !raw_input)
        return sb_seterr(err, SB_EINVAL, "cache key: namespace, fingerprint and input are required");
    if (!params) params = "";
    if ((norm & SB_NORM_FOLDS) && !names_fold(params, sb_cache_fold_name(norm)))
        return sb_seterr(err, SB_EINVAL, "cache key: params must contain \"fold=%s\"",
                         sb_cache_fold_name(norm));
    int rc = sb_cache_normalize(norm, raw_input, strlen(raw_input), &q->input, NULL);
    if (rc) return sb_seterr(err, rc, "cache key: normalising the input: %s", sb_strerror(rc));
    sb_cache_key(ns, fingerprint, q->input, params, q->key);
    return SB_OK;
}

int sb_cache_make_key(const sb_cache *c, const char *ns, const char *fingerprint,
                      const char *raw_input, const char *params, sb_cache_query *q, char *err) {
    return sb_cache_make_key_norm(c, SB_NORM_DEFAULT, ns, fingerprint, raw_input, params, q, err);
}

/* ------------------------------------------------------------ fingerprints */

enum { FP_WINDOW = 4096, FP_HEAD = 1 << 20, FP_SAMPLES = 64 };

static void hash_u64(sb_sha256_ctx *h, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    sb_sha256_update(h, b, 8);
}

static void hash_window(sb_sha256_ctx *h, const uint8_t *base, size_t size, size_t off) {
    if (off >= size) return;
    sb_sha256_update(h, base + off, SB_MIN((size_t)FP_WINDOW, size - off));
}

/* The GGUF header, metadata and tensor table name the architecture, the
 * tokenizer, every tensor's type and shape: hash all of it. Weights differ
 * between fine-tunes everywhere, so a few windows per tensor catch them. */
static int fp_gguf(sb_sha256_ctx *h, const char *path) {
    sb_gguf *g = NULL;
    if (sb_gguf_open(path, &g, NULL) != SB_OK) return -1;
    const uint8_t *base = sb_gguf_base(g);
    size_t size = sb_gguf_file_size(g), data = sb_gguf_data_offset(g);
    sb_sha256_update(h, "gguf", 4);
    sb_sha256_update(h, base, SB_MIN(data, size));
    for (size_t i = 0; i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        size_t start = (size_t)((const uint8_t *)t->data - base), n = t->nbytes;
        hash_window(h, base, start + n, start);
        if (n > 2 * FP_WINDOW) {
            hash_window(h, base, start + n, start + n / 2);
            hash_window(h, base, start + n, start + n - FP_WINDOW);
        }
    }
    sb_gguf_close(g);
    return 0;
}

static int read_at(int fd, void *buf, size_t n, off_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static int fp_generic(sb_sha256_ctx *h, int fd, uint64_t size, int full, char *err,
                      const char *path) {
    uint8_t *buf = sb_malloc(FP_HEAD);
    if (!buf) return sb_seterr(err, SB_ENOMEM, "%s: out of memory", path);
    int rc = SB_OK;
    sb_sha256_update(h, full ? "full" : "file", 4);
    if (full || size <= FP_HEAD + FP_SAMPLES * FP_WINDOW) {
        for (uint64_t off = 0; off < size && !rc; off += FP_HEAD) {
            size_t n = (size_t)SB_MIN((uint64_t)FP_HEAD, size - off);
            if (read_at(fd, buf, n, (off_t)off)) rc = SB_EIO;
            else sb_sha256_update(h, buf, n);
        }
    } else {
        if (read_at(fd, buf, FP_HEAD, 0)) rc = SB_EIO;
        else sb_sha256_update(h, buf, FP_HEAD);
        for (int i = 0; i < FP_SAMPLES && !rc; i++) {
            uint64_t off = FP_HEAD + (size - FP_HEAD - FP_WINDOW) / (FP_SAMPLES - 1) * (uint64_t)i;
            if (read_at(fd, buf, FP_WINDOW, (off_t)off)) rc = SB_EIO;
            else sb_sha256_update(h, buf, FP_WINDOW);
        }
    }
    sb_free(buf);
    if (rc) sb_seterr(err, rc, "%s: read failed: %s", path, strerror(errno));
    return rc;
}

int sb_cache_fingerprint_file(const char *path, unsigned flags, char out[SB_CACHE_KEY_HEX],
                              char *err) {
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sb_seterr(err, SB_EIO, "%s: not a regular file", path);
    }
    sb_sha256_ctx h;
    sb_sha256_init(&h);
    static const char tag[] = "switchboard-model-fingerprint/v1";
    sb_sha256_update(&h, tag, sizeof tag);
    hash_u64(&h, (uint64_t)st.st_size);
    int rc = SB_OK;
    if ((flags & SB_FP_FULL) || fp_gguf(&h, path) != 0) {
        /* fp_gguf may have fed part of a file before failing; start over. */
        sb_sha256_discard(&h);
        sb_sha256_init(&h);
        sb_sha256_update(&h, tag, sizeof tag);
        hash_u64(&h, (uint64_t)st.st_size);
        rc = fp_generic(&h, fd, (uint64_t)st.st_size, (flags & SB_FP_FULL) != 0, err, path);
    }
    close(fd);
    if (rc) {
        sb_sha256_discard(&h);
        return rc;
    }
    uint8_t d[SB_SHA256_LEN];
    sb_sha256_final(&h, d);
    sb_hex_encode(d, sizeof d, out);
    return SB_OK;
}

/* ------------------------------------------------------------ signatures */

void sb_cloud_file_mac(const char *secret, const char *name, const char *version, const char *sha256,
                       int64_t bytes, char out[SB_CACHE_KEY_HEX]) {
    char n[24];
    snprintf(n, sizeof n, "%lld", (long long)bytes);
    const void *parts[] = { "sb-file\n", name, "\n", version, "\n", sha256, "\n", n };
    size_t lens[8];
    for (int i = 0; i < 8; i++) lens[i] = strlen(parts[i]);
    uint8_t mac[SB_SHA256_LEN];
    sb_hmac_sha256_parts(secret, strlen(secret), 8, parts, lens, mac);
    sb_hex_encode(mac, sizeof mac, out);
}

void sbc_sign(const char *secret, const char *timestamp, const void *body, size_t len,
              char out[SB_CACHE_KEY_HEX]) {
    /* HMAC over timestamp "\n" body, without copying the body. */
    const void *parts[] = { timestamp, "\n", body };
    const size_t lens[] = { strlen(timestamp), 1, len };
    uint8_t mac[SB_SHA256_LEN];
    sb_hmac_sha256_parts(secret, strlen(secret), 3, parts, lens, mac);
    sb_hex_encode(mac, sizeof mac, out);
}
