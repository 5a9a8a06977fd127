/* gguf.c - memory-mapped GGUF reader (see sb_gguf.h).
 *
 * Layout (GGUF v2/v3, little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv × { string key | u32 type | value }
 *   n_tensors × { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to general.alignment | tensor data (each tensor aligned)
 * A string is u64 length + bytes. An array is u32 elem type + u64 n + elems.
 *
 * Everything is read through one cursor whose need() check is the only place
 * that decides whether bytes exist, so a truncated or lying file can only
 * produce an error, never a read past the mapping.
 */
#include "worker/gguf/sb_gguf.h"
#include "worker/kernels/sb_kq.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct sb_gguf {
    char            *path;
    const uint8_t   *base;
    size_t           size;
    int              mapped;        /* 1: munmap at close */
    int              fd;            /* the mapped file, for sb_gguf_read_at; -1: a caller's buffer */
    uint32_t         version;
    uint32_t         alignment;
    size_t           data_offset;
    size_t           n_kv;
    sb_gguf_kv      *kv;
    size_t           n_tensors;
    sb_gguf_tensor  *tensors;
};

typedef struct {
    const uint8_t *base;
    size_t len, pos;
    const char *label;
    char *err;
} cursor;

static const size_t vtype_size[SB_GGUF_VTYPE_COUNT] = {
    [SB_GGUF_U8] = 1, [SB_GGUF_I8] = 1, [SB_GGUF_U16] = 2, [SB_GGUF_I16] = 2,
    [SB_GGUF_U32] = 4, [SB_GGUF_I32] = 4, [SB_GGUF_F32] = 4, [SB_GGUF_BOOL] = 1,
    [SB_GGUF_U64] = 8, [SB_GGUF_I64] = 8, [SB_GGUF_F64] = 8,
    /* STRING and ARRAY are variable-sized */
};

const char *sb_gguf_vtype_name(uint32_t t) {
    static const char *const names[SB_GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
        "u64", "i64", "f64",
    };
    return t < SB_GGUF_VTYPE_COUNT ? names[t] : "invalid";
}

int sb_str_eq(sb_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static int need(cursor *c, size_t n, const char *what) {
    if (c->len - c->pos < n)
        return sb_seterr(c->err, SB_EFORMAT,
                         "%s: %s at byte offset %zu: needs %zu bytes, file ends at %zu (truncated?)",
                         c->label, what, c->pos, n, c->len);
    return 0;
}

/* The file is little-endian; so is every host we build for (x86-64, arm64
 * Linux), which the static assert below pins down. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF reader assumes a little-endian host");

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    int rc = need(c, 4, what);
    if (rc) return rc;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    int rc = need(c, 8, what);
    if (rc) return rc;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, sb_str *s, const char *what) {
    size_t at = c->pos;
    uint64_t n;
    int rc = rd_u64(c, &n, what);
    if (rc) return rc;
    if (n > SB_GGUF_MAX_STRING)
        return sb_seterr(c->err, SB_EFORMAT, "%s: %s at byte offset %zu: string length %llu exceeds limit %u",
                         c->label, what, at, (unsigned long long)n, SB_GGUF_MAX_STRING);
    if ((rc = need(c, (size_t)n, what))) return rc;
    s->ptr = (const char *)c->base + c->pos;
    s->len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

/* Skip (and validate) one value of type t; used for array elements. */
static int skip_value(cursor *c, uint32_t t, int depth, const char *what);

static int skip_array(cursor *c, int depth, const char *what, uint32_t *elem_type, uint64_t *count) {
    size_t at = c->pos;
    uint32_t et;
    uint64_t n;
    int rc;
    if (depth > SB_GGUF_MAX_DEPTH)
        return sb_seterr(c->err, SB_EFORMAT, "%s: %s at byte offset %zu: arrays nested deeper than %d",
                         c->label, what, at, SB_GGUF_MAX_DEPTH);
    if ((rc = rd_u32(c, &et, what)) || (rc = rd_u64(c, &n, what))) return rc;
    if (et >= SB_GGUF_VTYPE_COUNT)
        return sb_seterr(c->err, SB_EFORMAT, "%s: %s at byte offset %zu: invalid array element type %u",
                         c->label, what, at, et);
    if (n > SB_GGUF_MAX_ARRAY)
        return sb_seterr(c->err, SB_EFORMAT, "%s: %s at byte offset %zu: array of %llu elements exceeds limit %u",
                         c->label, what, at, (unsigned long long)n, SB_GGUF_MAX_ARRAY);
    if (elem_type) *elem_type = et;
    if (count) *count = n;
    if (vtype_size[et]) {
        /* n ≤ 2^28 and size ≤ 8, so the product cannot overflow. */
        size_t bytes = (size_t)n * vtype_size[et];
        if ((rc = need(c, bytes, what))) return rc;
        if (et == SB_GGUF_BOOL)
            for (size_t i = 0; i < bytes; i++)
                if (c->base[c->pos + i] > 1)
                    return sb_seterr(c->err, SB_EFORMAT, "%s: %s at byte offset %zu: bool must be 0 or 1, got %u",
                                     c->label, what, c->pos + i, c->base[c->pos + i]);
        c->pos += bytes;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if ((rc = skip_value(c, et, depth + 1, what))) return rc;
    return 0;
}

static int skip_value(cursor *c, uint32_t t, int depth, const char *what) {
    if (t == SB_GGUF_STRING) {
        sb_str s;
        return rd_str(c, &s, what);
    }
    if (t == SB_GGUF_ARRAY) return skip_array(c, depth, what, NULL, NULL);
    int rc = need(c, vtype_size[t], what);
    if (rc) return rc;
    c->pos += vtype_size[t];
    return 0;
}

static int read_kv(cursor *c, sb_gguf_kv *kv) {
    char what[SB_GGUF_MAX_NAME + 32];
    int rc;
    kv->offset = c->pos;
    if ((rc = rd_str(c, &kv->key, "metadata key"))) return rc;
    if (kv->key.len == 0)
        return sb_seterr(c->err, SB_EFORMAT, "%s: metadata key at byte offset %llu: empty key",
                         c->label, (unsigned long long)kv->offset);
    snprintf(what, sizeof what, "value of '%.*s'", (int)SB_MIN(kv->key.len, (size_t)SB_GGUF_MAX_NAME),
             kv->key.ptr);
    size_t at = c->pos;
    if ((rc = rd_u32(c, &kv->type, what))) return rc;
    if (kv->type >= SB_GGUF_VTYPE_COUNT)
        return sb_seterr(c->err, SB_EFORMAT, "%s: type of '%.*s' at byte offset %zu: invalid value type %u",
                         c->label, (int)SB_MIN(kv->key.len, (size_t)64), kv->key.ptr, at, kv->type);
    const uint8_t *p = c->base + c->pos;
    switch (kv->type) {
    case SB_GGUF_STRING:
        return rd_str(c, &kv->v.s, what);
    case SB_GGUF_ARRAY:
        if ((rc = skip_array(c, 0, what, &kv->arr_type, &kv->arr_n))) return rc;
        kv->arr_data = p + 12;      /* after u32 type + u64 count */
        return 0;
    default:
        if ((rc = need(c, vtype_size[kv->type], what))) return rc;
        c->pos += vtype_size[kv->type];
        break;
    }
    switch (kv->type) {
    case SB_GGUF_U8:   kv->v.u = p[0]; break;
    case SB_GGUF_BOOL:
        if (p[0] > 1)
            return sb_seterr(c->err, SB_EFORMAT, "%s: %s at byte offset %zu: bool must be 0 or 1, got %u",
                             c->label, what, at + 4, p[0]);
        kv->v.u = p[0]; break;
    case SB_GGUF_I8:   kv->v.i = (int8_t)p[0]; break;
    case SB_GGUF_U16:  { uint16_t x; memcpy(&x, p, 2); kv->v.u = x; break; }
    case SB_GGUF_I16:  { int16_t x; memcpy(&x, p, 2); kv->v.i = x; break; }
    case SB_GGUF_U32:  { uint32_t x; memcpy(&x, p, 4); kv->v.u = x; break; }
    case SB_GGUF_I32:  { int32_t x; memcpy(&x, p, 4); kv->v.i = x; break; }
    case SB_GGUF_U64:  { uint64_t x; memcpy(&x, p, 8); kv->v.u = x; break; }
    case SB_GGUF_I64:  { int64_t x; memcpy(&x, p, 8); kv->v.i = x; break; }
    case SB_GGUF_F32:  { float x; memcpy(&x, p, 4); kv->v.f = x; break; }
    case SB_GGUF_F64:  { double x; memcpy(&x, p, 8); kv->v.f = x; break; }
    }
    return 0;
}

static int is_signed_vtype(uint32_t t) {
    return t == SB_GGUF_I8 || t == SB_GGUF_I16 || t == SB_GGUF_I32 || t == SB_GGUF_I64;
}
static int is_int_vtype(uint32_t t) {
    return t <= SB_GGUF_I32 ? t != SB_GGUF_F32 : (t == SB_GGUF_U64 || t == SB_GGUF_I64);
}

static int read_tensor_info(cursor *c, sb_gguf_tensor *t, size_t idx) {
    size_t at = c->pos;
    int rc;
    char what[96];
    t->info_offset = at;
    snprintf(what, sizeof what, "tensor %zu info", idx);
    if ((rc = rd_str(c, &t->name, what))) return rc;
    if (t->name.len == 0 || t->name.len >= SB_GGUF_MAX_NAME)
        return sb_seterr(c->err, SB_EFORMAT, "%s: tensor %zu name at byte offset %zu: length %zu not in [1, %d)",
                         c->label, idx, at, t->name.len, SB_GGUF_MAX_NAME);
    snprintf(what, sizeof what, "tensor '%.*s'", (int)t->name.len, t->name.ptr);
    at = c->pos;
    if ((rc = rd_u32(c, &t->n_dims, what))) return rc;
    if (t->n_dims == 0 || t->n_dims > SB_GGUF_MAX_DIMS)
        return sb_seterr(c->err, SB_EFORMAT, "%s: n_dims of %s at byte offset %zu: %u not in [1, %d]",
                         c->label, what, at, t->n_dims, SB_GGUF_MAX_DIMS);
    int64_t nel = 1;
    for (uint32_t d = 0; d < SB_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        at = c->pos;
        if ((rc = rd_u64(c, &ne, what))) return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX || (uint64_t)nel > (uint64_t)INT64_MAX / ne)
            return sb_seterr(c->err, SB_EFORMAT, "%s: ne[%u] of %s at byte offset %zu: %llu is zero or overflows",
                             c->label, d, what, at, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        nel *= (int64_t)ne;
    }
    at = c->pos;
    if ((rc = rd_u32(c, &t->type, what))) return rc;
    const sb_kq_traits *tt = t->type < SB_TYPE_COUNT ? &sb_kq_table(SB_KQ_REF)[t->type] : NULL;
    if (!tt || tt->blck_size == 0)
        return sb_seterr(c->err, SB_EUNSUP, "%s: type of %s at byte offset %zu: unsupported tensor type id %u%s%s",
                         c->label, what, at, t->type, tt && tt->name ? " " : "", tt && tt->name ? tt->name : "");
    if (t->ne[0] % tt->blck_size != 0)
        return sb_seterr(c->err, SB_EFORMAT, "%s: %s: row length %lld is not a multiple of %s's block size %d",
                         c->label, what, (long long)t->ne[0], tt->name, tt->blck_size);
    size_t nbytes;
    if (sb_mul_size((size_t)(nel / tt->blck_size), tt->type_size, &nbytes))
        return sb_seterr(c->err, SB_EFORMAT, "%s: %s: byte size overflows", c->label, what);
    t->nbytes = nbytes;
    at = c->pos;
    if ((rc = rd_u64(c, &t->offset, what))) return rc;
    return 0;
}

static int by_offset(const void *a, const void *b) {
    const sb_gguf_tensor *x = *(const sb_gguf_tensor *const *)a, *y = *(const sb_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Two tensors sharing bytes means a mis-assembled or hostile file: writing
 * one (quantize, tests) would corrupt the other, and no writer makes it. */
static int check_overlap(const sb_gguf *g, char *err) {
    if (g->n_tensors < 2) return 0;
    const sb_gguf_tensor **order = sb_malloc(g->n_tensors * sizeof *order);
    if (!order) return sb_seterr(err, SB_ENOMEM, "%s: out of memory", g->path);
    for (size_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, by_offset);
    int rc = 0;
    for (size_t i = 1; i < g->n_tensors && !rc; i++) {
        const sb_gguf_tensor *a = order[i - 1], *b = order[i];
        if (b->offset < a->offset + a->nbytes)     /* both in the file: no overflow */
            rc = sb_seterr(err, SB_EFORMAT,
                           "%s: tensor '%.*s' (info at byte offset %llu): data [%llu, +%zu) overlaps tensor '%.*s' [%llu, +%zu)",
                           g->path, (int)b->name.len, b->name.ptr, (unsigned long long)b->info_offset,
                           (unsigned long long)b->offset, b->nbytes, (int)a->name.len, a->name.ptr,
                           (unsigned long long)a->offset, a->nbytes);
    }
    sb_free(order);
    return rc;
}

/* Magic, version and the two counts (bounded). */
static int read_header(sb_gguf *g, cursor *c, uint64_t *nt_out, uint64_t *nkv_out) {
    char *err = c->err;
    int rc;
    uint32_t magic;
    if ((rc = need(c, 4, "magic"))) return rc;
    memcpy(&magic, g->base, 4);
    if (memcmp(g->base, "GGUF", 4) != 0) {
        char shown[5];
        for (int i = 0; i < 4; i++) shown[i] = (g->base[i] >= 32 && g->base[i] < 127) ? (char)g->base[i] : '?';
        shown[4] = 0;
        return sb_seterr(err, SB_EFORMAT, "%s: magic at byte offset 0: expected \"GGUF\", found \"%s\" (0x%08x): not a GGUF file",
                         g->path, shown, magic);
    }
    c->pos = 4;
    if ((rc = rd_u32(c, &g->version, "version"))) return rc;
    if (g->version == 1)
        return sb_seterr(err, SB_EUNSUP, "%s: version at byte offset 4: GGUF v1 is not supported (re-convert the model)", g->path);
    if ((g->version & 0xFFFF) == 0)
        return sb_seterr(err, SB_EFORMAT, "%s: version at byte offset 4: 0x%08x looks byte-swapped (big-endian file?)",
                         g->path, g->version);
    if (g->version < 2 || g->version > 3)
        return sb_seterr(err, SB_EUNSUP, "%s: version at byte offset 4: %u not supported (2 or 3)", g->path, g->version);
    uint64_t nt, nkv;
    if ((rc = rd_u64(c, &nt, "n_tensors")) || (rc = rd_u64(c, &nkv, "n_kv"))) return rc;
    if (nt > SB_GGUF_MAX_TENSORS)
        return sb_seterr(err, SB_EFORMAT, "%s: n_tensors at byte offset 8: %llu exceeds limit %u",
                         g->path, (unsigned long long)nt, SB_GGUF_MAX_TENSORS);
    if (nkv > SB_GGUF_MAX_KV)
        return sb_seterr(err, SB_EFORMAT, "%s: n_kv at byte offset 16: %llu exceeds limit %u",
                         g->path, (unsigned long long)nkv, SB_GGUF_MAX_KV);
    *nt_out = nt;
    *nkv_out = nkv;
    return 0;
}

/* The metadata: unique keys; general.alignment sets g->alignment. */
static int read_kvs(sb_gguf *g, cursor *c, uint64_t nkv) {
    char *err = c->err;
    int rc;
    for (size_t i = 0; i < nkv; i++) {
        sb_gguf_kv *kv = &g->kv[i];
        if ((rc = read_kv(c, kv))) return rc;
        g->n_kv = i + 1;
        for (size_t j = 0; j < i; j++)
            if (g->kv[j].key.len == kv->key.len && !memcmp(g->kv[j].key.ptr, kv->key.ptr, kv->key.len))
                return sb_seterr(err, SB_EFORMAT, "%s: metadata key at byte offset %llu: duplicate key '%.*s'",
                                 g->path, (unsigned long long)kv->offset, (int)SB_MIN(kv->key.len, (size_t)64), kv->key.ptr);
        if (sb_str_eq(kv->key, "general.alignment")) {
            if (kv->type != SB_GGUF_U32 || kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)))
                return sb_seterr(err, SB_EFORMAT, "%s: general.alignment at byte offset %llu: must be a u32 power of two",
                                 g->path, (unsigned long long)kv->offset);
            g->alignment = (uint32_t)kv->v.u;
        }
    }
    return 0;
}

/* The tensor infos: unique names. */
static int read_tensor_infos(sb_gguf *g, cursor *c, uint64_t nt) {
    char *err = c->err;
    int rc;
    for (size_t i = 0; i < nt; i++) {
        if ((rc = read_tensor_info(c, &g->tensors[i], i))) return rc;
        g->n_tensors = i + 1;
        /* Duplicate names: O(n²) over at most a few thousand tensors, once per load. */
        for (size_t j = 0; j < i; j++)
            if (g->tensors[j].name.len == g->tensors[i].name.len &&
                !memcmp(g->tensors[j].name.ptr, g->tensors[i].name.ptr, g->tensors[i].name.len))
                return sb_seterr(err, SB_EFORMAT, "%s: tensor %zu: duplicate name '%.*s'", g->path, i,
                                 (int)g->tensors[i].name.len, g->tensors[i].name.ptr);
    }
    return 0;
}

/* Each tensor's data pointer, from data (the aligned start of the data
 * section), after checking it lies inside the file. */
static int place_tensors(sb_gguf *g, size_t data, char *err) {
    /* Each tensor must lie inside the file; llama.cpp also insists offsets are
     * the running aligned sum, but files written by other tools may leave
     * gaps, so we require alignment, bounds and no overlap, not adjacency. */
    for (size_t i = 0; i < g->n_tensors; i++) {
        sb_gguf_tensor *t = &g->tensors[i];
        size_t start, end;
        if (t->offset % g->alignment)
            return sb_seterr(err, SB_EFORMAT,
                             "%s: tensor '%.*s' (info at byte offset %llu): data offset %llu is not a multiple of the alignment %u",
                             g->path, (int)t->name.len, t->name.ptr, (unsigned long long)t->info_offset,
                             (unsigned long long)t->offset, g->alignment);
        if (t->offset > SIZE_MAX || sb_add_size(data, (size_t)t->offset, &start) ||
            sb_add_size(start, t->nbytes, &end) || end > g->size)
            return sb_seterr(err, SB_EFORMAT,
                             "%s: tensor '%.*s' (info at byte offset %llu): data [%llu, +%zu) at file offset %zu runs past the end of the file (%zu bytes; truncated?)",
                             g->path, (int)t->name.len, t->name.ptr, (unsigned long long)t->info_offset,
                             (unsigned long long)t->offset, t->nbytes,
                             data + (size_t)SB_MIN(t->offset, (uint64_t)SIZE_MAX - data), g->size);
        t->data = g->base + start;
    }
    return 0;
}

static int parse(sb_gguf *g, char *err) {
    cursor c = { g->base, g->size, 0, g->path, err };
    int rc;
    uint64_t nt = 0, nkv = 0;
    if ((rc = read_header(g, &c, &nt, &nkv))) return rc;
    g->kv = sb_calloc((size_t)nkv, sizeof *g->kv);
    g->tensors = sb_calloc((size_t)nt, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return sb_seterr(err, SB_ENOMEM, "%s: out of memory for %llu keys / %llu tensors",
                                                g->path, (unsigned long long)nkv, (unsigned long long)nt);
    g->alignment = SB_GGUF_DEFAULT_ALIGNMENT;
    if ((rc = read_kvs(g, &c, nkv)) || (rc = read_tensor_infos(g, &c, nt))) return rc;
    size_t data = c.pos;
    size_t pad = (g->alignment - data % g->alignment) % g->alignment;
    if (sb_add_size(data, pad, &data) || (nt > 0 && data > g->size))
        return sb_seterr(err, SB_EFORMAT, "%s: tensor data would start at byte offset %zu, past the end of the file (%zu bytes)",
                         g->path, c.pos + pad, g->size);
    g->data_offset = data;
    if ((rc = place_tensors(g, data, err))) return rc;
    return check_overlap(g, err);
}

static int open_common(sb_gguf *g, sb_gguf **out, char *err) {
    int rc = parse(g, err);
    if (rc) {
        sb_gguf_close(g);
        *out = NULL;
        return rc;
    }
    *out = g;
    return 0;
}

int sb_gguf_open_mem(const void *buf, size_t len, const char *label, sb_gguf **out, char *err) {
    *out = NULL;
    sb_gguf *g = sb_calloc(1, sizeof *g);
    if (!g || !(g->path = sb_strdup(label ? label : "<memory>"))) {
        sb_free(g);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    g->base = buf;
    g->size = len;
    g->fd = -1;
    return open_common(g, out, err);
}

int sb_gguf_open(const char *path, sb_gguf **out, char *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return sb_seterr(err, SB_EIO, "%s: not a regular file%s%s", path, e ? ": " : "", e ? strerror(e) : "");
    }
    if (st.st_size < 24) {
        close(fd);
        return sb_seterr(err, SB_EFORMAT, "%s: file is %lld bytes, smaller than a GGUF header (24 bytes)",
                         path, (long long)st.st_size);
    }
    /* MAP_SHARED read-only: every worker on the same file shares the page
     * cache's copy; nothing is ever written through it. */
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    if (p == MAP_FAILED) {
        close(fd);
        return sb_seterr(err, SB_EIO, "%s: mmap failed: %s", path, strerror(e));
    }
    /* 2 MiB pages for the weights where the page cache can give them
     * (sb_gguf.h, sb_gguf_huge_bytes). Measured here (ext4, Linux 6.18,
     * THP "madvise"): TinyLlama-shape read back after its pages were
     * dropped came 13 % 2 MiB-mapped without this advice, 86-94 % with it.
     * Only a hint: its failure changes nothing. */
    (void)madvise(p, (size_t)st.st_size, MADV_HUGEPAGE);
    sb_gguf *g = sb_calloc(1, sizeof *g);
    if (!g || !(g->path = sb_strdup(path))) {
        sb_free(g);
        munmap(p, (size_t)st.st_size);
        close(fd);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    g->base = p;
    g->size = (size_t)st.st_size;
    g->mapped = 1;
    g->fd = fd;
    return open_common(g, out, err);
}

const void *sb_gguf_read_at(const sb_gguf *g, const void *at, size_t n, void *dst) {
    const uint8_t *a = at;
    if (g->fd < 0 || a < g->base || n > g->size || (size_t)(a - g->base) > g->size - n) return at;
    for (size_t done = 0; done < n;) {
        const ssize_t r = pread(g->fd, (uint8_t *)dst + done, n - done, (off_t)(a - g->base + done));
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return at;      /* the mapping holds the same bytes */
        }
        done += (size_t)r;
    }
    return dst;
}

void sb_gguf_release_header(const sb_gguf *g) {
    const long page = sysconf(_SC_PAGESIZE);
    if (!g->mapped || page <= 0) return;
    const size_t n = g->data_offset / (size_t)page * (size_t)page;
    if (n) (void)madvise((void *)g->base, n, MADV_DONTNEED);
}

void sb_gguf_close(sb_gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)g->base, g->size);
    if (g->mapped && g->fd >= 0) close(g->fd);
    sb_free(g->kv);
    sb_free(g->tensors);
    sb_free(g->path);
    sb_free(g);
}

size_t sb_gguf_huge_bytes(const sb_gguf *g) {
    if (!g->mapped) return 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    size_t kb = 0;
    int in = 0;
    const uintptr_t lo = (uintptr_t)g->base, hi = lo + g->size;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        /* A mapping's header is "start-end perms ..."; its fields follow. */
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = a < hi && b > lo;
        else if (in && !strncmp(line, "FilePmdMapped:", 14))
            kb += strtoul(line + 14, NULL, 10);
    }
    fclose(f);
    return kb * 1024;
}

uint32_t    sb_gguf_version(const sb_gguf *g) { return g->version; }
size_t      sb_gguf_file_size(const sb_gguf *g) { return g->size; }
size_t      sb_gguf_data_offset(const sb_gguf *g) { return g->data_offset; }
uint32_t    sb_gguf_alignment(const sb_gguf *g) { return g->alignment; }
const char *sb_gguf_path(const sb_gguf *g) { return g->path; }
const void *sb_gguf_base(const sb_gguf *g) { return g->base; }
size_t      sb_gguf_n_kv(const sb_gguf *g) { return g->n_kv; }
size_t      sb_gguf_n_tensors(const sb_gguf *g) { return g->n_tensors; }

const sb_gguf_kv *sb_gguf_kv_at(const sb_gguf *g, size_t i) { return i < g->n_kv ? &g->kv[i] : NULL; }
const sb_gguf_tensor *sb_gguf_tensor_at(const sb_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sb_gguf_kv *sb_gguf_find(const sb_gguf *g, const char *key) {
    for (size_t i = 0; i < g->n_kv; i++)
        if (sb_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const sb_gguf_tensor *sb_gguf_find_tensor(const sb_gguf *g, const char *name) {
    for (size_t i = 0; i < g->n_tensors; i++)
        if (sb_str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

int sb_gguf_get_i64(const sb_gguf *g, const char *key, int64_t *out) {
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    if (!kv) return SB_ENOTFOUND;
    if (kv->type == SB_GGUF_BOOL || !is_int_vtype(kv->type)) return SB_EFORMAT;
    if (is_signed_vtype(kv->type)) { *out = kv->v.i; return 0; }
    if (kv->v.u > (uint64_t)INT64_MAX) return SB_ERANGE;
    *out = (int64_t)kv->v.u;
    return 0;
}

int sb_gguf_get_u64(const sb_gguf *g, const char *key, uint64_t *out) {
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    if (!kv) return SB_ENOTFOUND;
    if (kv->type == SB_GGUF_BOOL || !is_int_vtype(kv->type)) return SB_EFORMAT;
    if (is_signed_vtype(kv->type)) {
        if (kv->v.i < 0) return SB_ERANGE;
        *out = (uint64_t)kv->v.i;
        return 0;
    }
    *out = kv->v.u;
    return 0;
}

int sb_gguf_get_u32(const sb_gguf *g, const char *key, uint32_t *out) {
    uint64_t v;
    int rc = sb_gguf_get_u64(g, key, &v);
    if (rc) return rc;
    if (v > UINT32_MAX) return SB_ERANGE;
    *out = (uint32_t)v;
    return 0;
}

int sb_gguf_get_f32(const sb_gguf *g, const char *key, float *out) {
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    if (!kv) return SB_ENOTFOUND;
    if (kv->type == SB_GGUF_F32 || kv->type == SB_GGUF_F64) { *out = (float)kv->v.f; return 0; }
    int64_t i;
    int rc = sb_gguf_get_i64(g, key, &i);
    if (rc) return rc;
    *out = (float)i;
    return 0;
}

int sb_gguf_get_bool(const sb_gguf *g, const char *key, int *out) {
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    if (!kv) return SB_ENOTFOUND;
    if (kv->type != SB_GGUF_BOOL) return SB_EFORMAT;
    *out = kv->v.u != 0;
    return 0;
}

int sb_gguf_get_str(const sb_gguf *g, const char *key, sb_str *out) {
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    if (!kv) return SB_ENOTFOUND;
    if (kv->type != SB_GGUF_STRING) return SB_EFORMAT;
    *out = kv->v.s;
    return 0;
}

int64_t sb_gguf_arr_int(const sb_gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * vtype_size[kv->arr_type < SB_GGUF_VTYPE_COUNT ? kv->arr_type : 0];
    switch (kv->arr_type) {
    case SB_GGUF_U8: case SB_GGUF_BOOL: return p[0];
    case SB_GGUF_I8: return (int8_t)p[0];
    case SB_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); return x; }
    case SB_GGUF_I16: { int16_t x; memcpy(&x, p, 2); return x; }
    case SB_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case SB_GGUF_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case SB_GGUF_U64: { uint64_t x; memcpy(&x, p, 8); return (int64_t)x; }
    case SB_GGUF_I64: { int64_t x; memcpy(&x, p, 8); return x; }
    case SB_GGUF_F32: { float x; memcpy(&x, p, 4); return (int64_t)x; }
    case SB_GGUF_F64: { double x; memcpy(&x, p, 8); return (int64_t)x; }
    default: return 0;
    }
}

double sb_gguf_arr_float(const sb_gguf_kv *kv, uint64_t i) {
    if (kv->arr_type == SB_GGUF_F32) { float x; memcpy(&x, kv->arr_data + 4 * i, 4); return x; }
    if (kv->arr_type == SB_GGUF_F64) { double x; memcpy(&x, kv->arr_data + 8 * i, 8); return x; }
    return (double)sb_gguf_arr_int(kv, i);
}

int sb_gguf_arr_strings(const sb_gguf_kv *kv, sb_str **out, char *err) {
    *out = NULL;
    if (kv->type != SB_GGUF_ARRAY || kv->arr_type != SB_GGUF_STRING)
        return sb_seterr(err, SB_EFORMAT, "'%.*s' is not an array of strings", (int)kv->key.len, kv->key.ptr);
    sb_str *s = sb_malloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof *s);
    if (!s) return sb_seterr(err, SB_ENOMEM, "out of memory for %llu strings", (unsigned long long)kv->arr_n);
    /* Already validated at open, so lengths are known to be in bounds. */
    const uint8_t *p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        uint64_t n;
        memcpy(&n, p, 8);
        s[i].ptr = (const char *)p + 8;
        s[i].len = (size_t)n;
        p += 8 + n;
    }
    *out = s;
    return 0;
}
