/* gguf_write.c - GGUF v3 writer and atomic output files (see sb_gguf_write.h).
 *
 * The layout written is the one gguf.c reads:
 *   "GGUF" | u32 3 | u64 n_tensors | u64 n_kv
 *   n_kv × { u64 len, key | u32 type | value }
 *   n_tensors × { u64 len, name | u32 n_dims | i64 ne[n_dims] | u32 type | u64 offset }
 *   zero padding to the alignment | tensor data, each tensor padded likewise
 *
 * Metadata values are kept as raw bytes (type tag + value): copying a key
 * from an input file is a memcpy of its bytes, so floats, NaNs, odd integer
 * widths and nested arrays come out exactly as they went in.
 */
#include "worker/gguf/sb_gguf_write.h"
#include "worker/kernels/sb_kq.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_VERSION_WRITTEN 3
#define MAX_ARRAY_DEPTH SB_GGUF_MAX_DEPTH

typedef struct {
    char    *key;
    size_t   key_len;
    uint8_t *blob;          /* u32 type tag followed by the value bytes */
    size_t   blob_len;
} kv_entry;

typedef struct {
    char     name[SB_GGUF_MAX_NAME];
    size_t   name_len;
    uint32_t n_dims;
    int64_t  ne[SB_GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t offset;
    size_t   nbytes;
} tensor_entry;

struct sb_gguf_writer {
    kv_entry     *kv;
    size_t        n_kv, cap_kv;
    tensor_entry *t;
    size_t        n_t, cap_t;
    uint32_t      alignment;
};

static uint64_t pad_to(uint64_t n, uint32_t align) { return (n + align - 1) / align * align; }

int sb_gguf_writer_new(sb_gguf_writer **out) {
    *out = sb_calloc(1, sizeof **out);
    if (!*out) return SB_ENOMEM;
    (*out)->alignment = SB_GGUF_DEFAULT_ALIGNMENT;
    return 0;
}

void sb_gguf_writer_free(sb_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        sb_free(w->kv[i].key);
        sb_free(w->kv[i].blob);
    }
    sb_free(w->kv);
    sb_free(w->t);
    sb_free(w);
}

size_t sb_gguf_writer_n_kv(const sb_gguf_writer *w) { return w->n_kv; }
uint32_t sb_gguf_writer_alignment(const sb_gguf_writer *w) { return w->alignment; }

static long find_key(const sb_gguf_writer *w, const char *key, size_t len) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == len && memcmp(w->kv[i].key, key, len) == 0) return (long)i;
    return -1;
}

static void remove_at(sb_gguf_writer *w, size_t i) {
    sb_free(w->kv[i].key);
    sb_free(w->kv[i].blob);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
}

void sb_gguf_writer_remove(sb_gguf_writer *w, const char *key) {
    long i = find_key(w, key, strlen(key));
    if (i >= 0) remove_at(w, (size_t)i);
}

/* Take ownership of blob; replaces an existing key (gguf_set_val_* order). */
static int put_kv(sb_gguf_writer *w, const char *key, size_t key_len, uint8_t *blob, size_t blob_len) {
    long old = find_key(w, key, key_len);
    if (old >= 0) remove_at(w, (size_t)old);
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        kv_entry *nk = sb_realloc(w->kv, cap * sizeof *nk);
        if (!nk) { sb_free(blob); return SB_ENOMEM; }
        w->kv = nk;
        w->cap_kv = cap;
    }
    char *k = sb_malloc(key_len + 1);
    if (!k) { sb_free(blob); return SB_ENOMEM; }
    memcpy(k, key, key_len);
    k[key_len] = 0;
    w->kv[w->n_kv++] = (kv_entry){ k, key_len, blob, blob_len };
    return 0;
}

static const size_t scalar_size[SB_GGUF_VTYPE_COUNT] = {
    [SB_GGUF_U8] = 1, [SB_GGUF_I8] = 1, [SB_GGUF_U16] = 2, [SB_GGUF_I16] = 2,
    [SB_GGUF_U32] = 4, [SB_GGUF_I32] = 4, [SB_GGUF_F32] = 4, [SB_GGUF_BOOL] = 1,
    [SB_GGUF_U64] = 8, [SB_GGUF_I64] = 8, [SB_GGUF_F64] = 8,
};

/* Size in bytes of one value of `type` starting at p (bounded by end). The
 * reader validated the file already; the bounds are checked again because
 * this walks raw bytes and must never trust them blindly. */
static int value_size(const uint8_t *p, const uint8_t *end, uint32_t type, int depth, size_t *out) {
    if (type >= SB_GGUF_VTYPE_COUNT) return SB_EFORMAT;
    if (type == SB_GGUF_STRING) {
        uint64_t len;
        if (end - p < 8) return SB_EFORMAT;
        memcpy(&len, p, 8);
        if (len > (uint64_t)(end - p - 8)) return SB_EFORMAT;
        *out = 8 + (size_t)len;
        return 0;
    }
    if (type != SB_GGUF_ARRAY) {
        if ((size_t)(end - p) < scalar_size[type]) return SB_EFORMAT;
        *out = scalar_size[type];
        return 0;
    }
    if (depth >= MAX_ARRAY_DEPTH || end - p < 12) return SB_EFORMAT;
    uint32_t et;
    uint64_t n;
    memcpy(&et, p, 4);
    memcpy(&n, p + 4, 8);
    if (et >= SB_GGUF_VTYPE_COUNT) return SB_EFORMAT;
    size_t total = 12;
    if (et != SB_GGUF_STRING && et != SB_GGUF_ARRAY) {
        size_t bytes;
        if (sb_mul_size((size_t)n, scalar_size[et], &bytes) ||
            bytes > (size_t)(end - p) - 12)
            return SB_EFORMAT;
        *out = 12 + bytes;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t sz;
        int rc = value_size(p + total, end, et, depth + 1, &sz);
        if (rc) return rc;
        total += sz;
    }
    *out = total;
    return 0;
}

int sb_gguf_writer_copy_kv(sb_gguf_writer *w, const sb_gguf *src, const sb_gguf_kv *kv, char *err) {
    const uint8_t *base = sb_gguf_base(src), *end = base + sb_gguf_file_size(src);
    /* key string at kv->offset: u64 length + bytes, then the u32 type tag */
    const uint8_t *tag = base + kv->offset + 8 + kv->key.len;
    size_t vsize;
    if (tag + 4 > end || value_size(tag + 4, end, kv->type, 0, &vsize))
        return sb_seterr(err, SB_EFORMAT, "%s: value of '%.*s' at byte offset %llu does not parse",
                         sb_gguf_path(src), (int)SB_MIN(kv->key.len, (size_t)64), kv->key.ptr,
                         (unsigned long long)kv->offset);
    uint8_t *blob = sb_malloc(4 + vsize);
    if (!blob) return sb_seterr(err, SB_ENOMEM, "out of memory copying metadata");
    memcpy(blob, tag, 4 + vsize);
    if (sb_str_eq(kv->key, "general.alignment") && kv->type == SB_GGUF_U32 && kv->v.u &&
        !(kv->v.u & (kv->v.u - 1)))
        w->alignment = (uint32_t)kv->v.u;
    int rc = put_kv(w, kv->key.ptr, kv->key.len, blob, 4 + vsize);
    return rc ? sb_seterr(err, rc, "out of memory copying metadata") : 0;
}

int sb_gguf_writer_set_u32(sb_gguf_writer *w, const char *key, uint32_t v) {
    uint8_t *blob = sb_malloc(8);
    if (!blob) return SB_ENOMEM;
    uint32_t t = SB_GGUF_U32;
    memcpy(blob, &t, 4);
    memcpy(blob + 4, &v, 4);
    if (!strcmp(key, "general.alignment") && v && !(v & (v - 1))) w->alignment = v;
    return put_kv(w, key, strlen(key), blob, 8);
}

/* The value bytes are the caller's serialization (arrays: u32 element type,
 * u64 count, elements); they are copied. */
int sb_gguf_writer_set_raw(sb_gguf_writer *w, const char *key, uint32_t type, const void *value, size_t n) {
    uint8_t *blob = sb_malloc(4 + n);
    if (!blob) return SB_ENOMEM;
    memcpy(blob, &type, 4);
    if (n) memcpy(blob + 4, value, n);
    return put_kv(w, key, strlen(key), blob, 4 + n);
}

int sb_gguf_writer_set_str(sb_gguf_writer *w, const char *key, const char *s) {
    uint64_t len = strlen(s);
    uint8_t *blob = sb_malloc(12 + (size_t)len);
    if (!blob) return SB_ENOMEM;
    uint32_t t = SB_GGUF_STRING;
    memcpy(blob, &t, 4);
    memcpy(blob + 4, &len, 8);
    memcpy(blob + 12, s, (size_t)len);
    return put_kv(w, key, strlen(key), blob, 12 + (size_t)len);
}

int sb_gguf_writer_add_tensor(sb_gguf_writer *w, const char *name, size_t name_len, uint32_t n_dims,
                              const int64_t *ne, uint32_t type, char *err) {
    const sb_kq_traits *tt = type < SB_TYPE_COUNT ? &sb_kq_table(SB_KQ_REF)[type] : NULL;
    if (!tt || !tt->blck_size)
        return sb_seterr(err, SB_EUNSUP, "tensor '%.*s': type %u cannot be written", (int)name_len, name, type);
    if (name_len >= SB_GGUF_MAX_NAME || n_dims < 1 || n_dims > SB_GGUF_MAX_DIMS)
        return sb_seterr(err, SB_EINVAL, "tensor '%.*s': bad name length or %u dims", (int)SB_MIN(name_len, (size_t)64),
                         name, n_dims);
    if (ne[0] <= 0 || ne[0] % tt->blck_size)
        return sb_seterr(err, SB_EINVAL, "tensor '%.*s': row of %lld is not a multiple of %s's block of %d",
                         (int)name_len, name, (long long)ne[0], tt->name, tt->blck_size);
    size_t nbytes = sb_kq_row_size(tt, ne[0]);
    for (uint32_t d = 1; d < n_dims; d++)
        if (ne[d] < 0 || sb_mul_size(nbytes, (size_t)ne[d], &nbytes))
            return sb_seterr(err, SB_ERANGE, "tensor '%.*s': size overflows", (int)name_len, name);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == name_len && !memcmp(w->t[i].name, name, name_len))
            return sb_seterr(err, SB_EINVAL, "duplicate tensor name '%.*s'", (int)name_len, name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        tensor_entry *nt = sb_realloc(w->t, cap * sizeof *nt);
        if (!nt) return sb_seterr(err, SB_ENOMEM, "out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    tensor_entry *e = &w->t[w->n_t];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, name_len);
    e->name_len = name_len;
    for (uint32_t d = 0; d < SB_GGUF_MAX_DIMS; d++) e->ne[d] = d < n_dims ? ne[d] : 1;
    /* Trailing dimensions of 1 are not written, as ggml_n_dims does: a
     * [256 x 1] tensor is stored as 1-D [256]. */
    e->n_dims = 1;
    for (uint32_t d = 1; d < SB_GGUF_MAX_DIMS; d++)
        if (e->ne[d] > 1) e->n_dims = d + 1;
    e->type = type;
    e->nbytes = nbytes;
    e->offset = w->n_t ? pad_to(w->t[w->n_t - 1].offset + w->t[w->n_t - 1].nbytes, w->alignment) : 0;
    w->n_t++;
    return 0;
}

size_t sb_gguf_writer_n_tensors(const sb_gguf_writer *w) { return w->n_t; }
uint64_t sb_gguf_writer_tensor_offset(const sb_gguf_writer *w, size_t i) { return w->t[i].offset; }
size_t sb_gguf_writer_tensor_nbytes(const sb_gguf_writer *w, size_t i) { return w->t[i].nbytes; }
uint64_t sb_gguf_writer_data_size(const sb_gguf_writer *w) {
    return w->n_t ? pad_to(w->t[w->n_t - 1].offset + w->t[w->n_t - 1].nbytes, w->alignment) : 0;
}

static uint8_t *put(uint8_t *p, const void *src, size_t n) {
    memcpy(p, src, n);
    return p + n;
}

int sb_gguf_writer_header(const sb_gguf_writer *w, uint8_t **out, size_t *len, char *err) {
    size_t n = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++) n += 8 + w->kv[i].key_len + w->kv[i].blob_len;
    for (size_t i = 0; i < w->n_t; i++) n += 8 + w->t[i].name_len + 4 + 8 * (size_t)w->t[i].n_dims + 4 + 8;
    size_t padded = (size_t)pad_to(n, w->alignment);
    uint8_t *buf = sb_calloc(1, padded);
    if (!buf) return sb_seterr(err, SB_ENOMEM, "out of memory for a %zu-byte GGUF header", padded);
    uint8_t *p = put(buf, "GGUF", 4);
    uint32_t version = GGUF_VERSION_WRITTEN;
    uint64_t nt = w->n_t, nkv = w->n_kv;
    p = put(p, &version, 4);
    p = put(p, &nt, 8);
    p = put(p, &nkv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t kl = w->kv[i].key_len;
        p = put(p, &kl, 8);
        p = put(p, w->kv[i].key, w->kv[i].key_len);
        p = put(p, w->kv[i].blob, w->kv[i].blob_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const tensor_entry *e = &w->t[i];
        uint64_t nl = e->name_len;
        p = put(p, &nl, 8);
        p = put(p, e->name, e->name_len);
        p = put(p, &e->n_dims, 4);
        p = put(p, e->ne, 8 * (size_t)e->n_dims);
        p = put(p, &e->type, 4);
        p = put(p, &e->offset, 8);
    }
    *out = buf;
    *len = padded;
    return 0;
}

/* ==== atomic output file =================================================== */

struct sb_outfile {
    int      fd;
    char    *path;          /* final name */
    char    *tmp;           /* where the bytes go until commit */
    uint64_t offset;
};

int sb_outfile_open(const char *path, sb_outfile **out, char *err) {
    *out = NULL;
    sb_outfile *f = sb_calloc(1, sizeof *f);
    size_t n = strlen(path);
    if (f) {
        f->path = sb_strdup(path);
        f->tmp = sb_malloc(n + sizeof ".tmp-XXXXXX");
    }
    if (!f || !f->path || !f->tmp) {
        if (f) { sb_free(f->path); sb_free(f->tmp); }
        sb_free(f);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    memcpy(f->tmp, path, n);
    memcpy(f->tmp + n, ".tmp-XXXXXX", sizeof ".tmp-XXXXXX");
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        sb_free(f->path); sb_free(f->tmp); sb_free(f);
        return sb_seterr(err, SB_EIO, "%s: cannot create a temporary file next to it: %s", path, strerror(e));
    }
    /* mkstemp makes 0600; a model file is as readable as any other output */
    (void)fchmod(f->fd, 0644);
    *out = f;
    return 0;
}

int sb_outfile_write(sb_outfile *f, const void *buf, size_t n, char *err) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = write(f->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            return sb_seterr(err, SB_EIO, "%s: write failed at byte offset %llu: %s", f->tmp,
                             (unsigned long long)f->offset, strerror(e));
        }
        p += k;
        n -= (size_t)k;
        f->offset += (uint64_t)k;
    }
    return 0;
}

int sb_outfile_write_zeros(sb_outfile *f, size_t n, char *err) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        int rc = sb_outfile_write(f, zeros, k, err);
        if (rc) return rc;
        n -= k;
    }
    return 0;
}

uint64_t sb_outfile_offset(const sb_outfile *f) { return f->offset; }

static void outfile_free(sb_outfile *f) {
    sb_free(f->path);
    sb_free(f->tmp);
    sb_free(f);
}

void sb_outfile_abort(sb_outfile *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp);
    outfile_free(f);
}

int sb_outfile_commit(sb_outfile *f, char *err) {
    int rc = 0;
    if (fsync(f->fd) != 0)
        rc = sb_seterr(err, SB_EIO, "%s: fsync: %s", f->tmp, strerror(errno));
    if (close(f->fd) != 0 && !rc)
        rc = sb_seterr(err, SB_EIO, "%s: close: %s", f->tmp, strerror(errno));
    f->fd = -1;
    if (!rc && rename(f->tmp, f->path) != 0)
        rc = sb_seterr(err, SB_EIO, "cannot rename %s to %s: %s", f->tmp, f->path, strerror(errno));
    if (rc) {
        unlink(f->tmp);
        outfile_free(f);
        return rc;
    }
    /* The rename is durable only once the directory entry is on disk. */
    char *dir_copy = sb_strdup(f->path);
    if (dir_copy) {
        int dfd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        sb_free(dir_copy);
    }
    outfile_free(f);
    return 0;
}
