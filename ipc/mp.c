/* mp.c - msgpack builder, validator and reader on msgpack-c (see sb_ipc.h).
 *
 * This is the only file that includes msgpack.h. msgpack-c trusts the counts
 * in its input: an array header claiming 2^32 elements makes it allocate
 * 2^32 * 24 bytes before reading one element. So every buffer is first walked
 * by sb_mp_check(), which needs no memory and proves that each container's
 * elements really are in the buffer; only then does msgpack-c decode it, and
 * its allocations are bounded by SB_MP_MAX_OBJECTS * sizeof(msgpack_object).
 */
#include "ipc/sb_ipc.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

/* ================================================================ writer */

struct sb_mp_writer {
    sb_bytes out;
    int    status;              /* sticky first error */
    msgpack_packer pk;
};

/* msgpack_packer's sink: returning non-zero makes the pack call fail. */
static int writer_sink(void *data, const char *p, size_t n) {
    sb_mp_writer *w = data;
    if (w->status) return -1;
    /* Empty bodies arrive with NULL or stale pointers (msgpack-c's empty
     * strings): never hand those to memcpy. Found by fuzz_frame. */
    if (n == 0) return 0;
    if (sb_bytes_put(&w->out, p, n)) { w->status = SB_ENOMEM; return -1; }
    return 0;
}

int sb_mp_writer_new(sb_mp_writer **out) {
    sb_mp_writer *w = sb_calloc(1, sizeof *w);
    if (!w) return SB_ENOMEM;
    msgpack_packer_init(&w->pk, w, writer_sink);
    *out = w;
    return 0;
}

void sb_mp_writer_free(sb_mp_writer *w) {
    if (!w) return;
    sb_free(w->out.p);
    sb_free(w);
}

void sb_mp_writer_reset(sb_mp_writer *w) { w->out.n = 0; w->status = 0; }
int sb_mp_writer_status(const sb_mp_writer *w) { return w->status; }

const void *sb_mp_writer_data(const sb_mp_writer *w, size_t *len) {
    *len = w->out.n;
    return w->out.p;
}

int sb_mp_writer_detach(sb_mp_writer *w, void **buf, size_t *len) {
    if (w->status) return w->status;
    if (!w->out.p && sb_bytes_reserve(&w->out, 1)) return SB_ENOMEM;   /* never hand out NULL */
    *buf = w->out.p;
    *len = w->out.n;
    w->out.p = NULL;
    w->out.n = w->out.cap = 0;
    return 0;
}

void sb_mp_map(sb_mp_writer *w, uint32_t n)   { msgpack_pack_map(&w->pk, n); }
void sb_mp_array(sb_mp_writer *w, uint32_t n) { msgpack_pack_array(&w->pk, n); }
void sb_mp_nil(sb_mp_writer *w)               { msgpack_pack_nil(&w->pk); }
void sb_mp_bool(sb_mp_writer *w, bool v) {
    if (v) msgpack_pack_true(&w->pk); else msgpack_pack_false(&w->pk);
}
void sb_mp_u64(sb_mp_writer *w, uint64_t v)   { msgpack_pack_uint64(&w->pk, v); }
void sb_mp_i64(sb_mp_writer *w, int64_t v)    { msgpack_pack_int64(&w->pk, v); }
void sb_mp_f64(sb_mp_writer *w, double v)     { msgpack_pack_double(&w->pk, v); }
void sb_mp_str(sb_mp_writer *w, const char *s) { sb_mp_strn(w, s ? s : "", s ? strlen(s) : 0); }

void sb_mp_strn(sb_mp_writer *w, const char *s, size_t n) {
    if (n > UINT32_MAX) { if (!w->status) w->status = SB_ERANGE; return; }
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, s, n);
}

void sb_mp_bin(sb_mp_writer *w, const void *p, size_t n) {
    if (n > UINT32_MAX) { if (!w->status) w->status = SB_ERANGE; return; }
    msgpack_pack_bin(&w->pk, n);
    msgpack_pack_bin_body(&w->pk, p, n);
}

void sb_mp_raw(sb_mp_writer *w, const void *p, size_t n) { writer_sink(w, p, n); }

void sb_mp_kv_str(sb_mp_writer *w, const char *k, const char *v)  { sb_mp_str(w, k); sb_mp_str(w, v); }
void sb_mp_kv_u64(sb_mp_writer *w, const char *k, uint64_t v)     { sb_mp_str(w, k); sb_mp_u64(w, v); }
void sb_mp_kv_i64(sb_mp_writer *w, const char *k, int64_t v)      { sb_mp_str(w, k); sb_mp_i64(w, v); }
void sb_mp_kv_f64(sb_mp_writer *w, const char *k, double v)       { sb_mp_str(w, k); sb_mp_f64(w, v); }
void sb_mp_kv_bool(sb_mp_writer *w, const char *k, bool v)        { sb_mp_str(w, k); sb_mp_bool(w, v); }

void sb_mp_frame_begin(sb_mp_writer *w) {
    static const char zero[SB_IPC_FRAME_HEADER];
    writer_sink(w, zero, sizeof zero);
}

int sb_mp_frame_end(sb_mp_writer *w, size_t max_frame) {
    if (w->status) return w->status;
    if (w->out.n < SB_IPC_FRAME_HEADER) return w->status = SB_EINVAL;
    size_t payload = w->out.n - SB_IPC_FRAME_HEADER;
    if (payload > max_frame || payload > UINT32_MAX) return w->status = SB_ERANGE;
    unsigned char *h = (unsigned char *)w->out.p;
    h[0] = (unsigned char)(payload >> 24);
    h[1] = (unsigned char)(payload >> 16);
    h[2] = (unsigned char)(payload >> 8);
    h[3] = (unsigned char)payload;
    return 0;
}

void sb_mp_copy(sb_mp_writer *w, const sb_mp_obj *o) {
    if (!o) { sb_mp_nil(w); return; }
    msgpack_pack_object(&w->pk, *(const msgpack_object *)(const void *)o);
}

/* ============================================================= validator */

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Decode one header at p[pos]: either a scalar whose body is *skip bytes, or
 * a container with *items children (a map's pairs count twice). */
static int header(const unsigned char *p, size_t n, size_t pos, size_t *hlen,
                  uint64_t *skip, uint64_t *items, int *container) {
    unsigned b = p[pos];
    *skip = 0; *items = 0; *container = 0; *hlen = 1;
    int width = 0;             /* bytes of a length/count field after b */
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return 0;
    if (b >= 0x80 && b <= 0x8f) { *container = 1; *items = 2u * (b & 0x0f); return 0; }
    if (b >= 0x90 && b <= 0x9f) { *container = 1; *items = b & 0x0f; return 0; }
    if (b >= 0xa0 && b <= 0xbf) { *skip = b & 0x1f; return 0; }
    switch (b) {
    case 0xc4: case 0xd9: width = 1; break;                     /* bin8, str8 */
    case 0xc5: case 0xda: width = 2; break;
    case 0xc6: case 0xdb: width = 4; break;
    case 0xc7: width = 1; *skip = 1; break;                     /* ext: + type */
    case 0xc8: width = 2; *skip = 1; break;
    case 0xc9: width = 4; *skip = 1; break;
    case 0xca: *skip = 4; return 0;
    case 0xcb: *skip = 8; return 0;
    case 0xcc: case 0xd0: *skip = 1; return 0;
    case 0xcd: case 0xd1: *skip = 2; return 0;
    case 0xce: case 0xd2: *skip = 4; return 0;
    case 0xcf: case 0xd3: *skip = 8; return 0;
    case 0xd4: *skip = 2; return 0;                             /* fixext: type + data */
    case 0xd5: *skip = 3; return 0;
    case 0xd6: *skip = 5; return 0;
    case 0xd7: *skip = 9; return 0;
    case 0xd8: *skip = 17; return 0;
    case 0xdc: width = 2; *container = 1; break;
    case 0xdd: width = 4; *container = 1; break;
    case 0xde: width = 2; *container = 2; break;
    case 0xdf: width = 4; *container = 2; break;
    default: return -1;                                         /* 0xc1: never used */
    }
    if ((size_t)width > n - pos - 1) return -2;
    uint64_t v = be(p + pos + 1, width);
    *hlen = 1 + (size_t)width;
    if (*container) { *items = *container == 2 ? 2 * v : v; *container = 1; }
    else *skip += v;
    return 0;
}

int sb_mp_check(const void *buf, size_t n, char *err) {
    const unsigned char *p = buf;
    uint64_t pending[SB_MP_MAX_DEPTH + 1];  /* children still due per level */
    int top = 0;
    size_t pos = 0, objects = 0;
    pending[0] = 1;
    while (top >= 0) {
        if (pending[top] == 0) { top--; continue; }
        pending[top]--;
        if (pos >= n)
            return sb_seterr(err, SB_EFORMAT, "msgpack truncated at byte %zu", pos);
        if (++objects > SB_MP_MAX_OBJECTS)
            return sb_seterr(err, SB_EFORMAT, "more than %u msgpack objects", SB_MP_MAX_OBJECTS);
        size_t hlen;
        uint64_t skip, items;
        int container;
        int rc = header(p, n, pos, &hlen, &skip, &items, &container);
        if (rc == -1)
            return sb_seterr(err, SB_EFORMAT, "invalid msgpack byte 0x%02x at byte %zu", p[pos], pos);
        if (rc < 0)
            return sb_seterr(err, SB_EFORMAT, "msgpack truncated at byte %zu", pos);
        pos += hlen;
        if (skip > n - pos)
            return sb_seterr(err, SB_EFORMAT, "msgpack value at byte %zu runs past the end", pos - hlen);
        pos += (size_t)skip;
        if (container && items > 0) {
            /* Each child takes at least one byte: a count larger than what is
             * left is a lie, and is caught here before anything trusts it. */
            if (items > n - pos)
                return sb_seterr(err, SB_EFORMAT,
                                 "msgpack container at byte %zu claims %llu items in %zu bytes",
                                 pos - hlen, (unsigned long long)items, n - pos);
            if (top == SB_MP_MAX_DEPTH)
                return sb_seterr(err, SB_EFORMAT, "msgpack nested deeper than %d", SB_MP_MAX_DEPTH);
            pending[++top] = items;
        }
    }
    if (pos != n)
        return sb_seterr(err, SB_EFORMAT, "%zu bytes after the msgpack object", n - pos);
    return 0;
}

/* ================================================================ reader */

struct sb_mp_doc {
    msgpack_unpacked up;
    size_t len;
    char bytes[];           /* len + 1: room for the last string's NUL */
};

/* Make every string a C string without copying. After msgpack-c has parsed
 * the buffer, the raw bytes matter only as string/bin/ext bodies, and the
 * byte after any body is either the header of a later object (already
 * parsed, never part of a body) or the spare byte at the end. So writing a
 * NUL there corrupts nothing. */
static void terminate_strings(sb_mp_doc *d, msgpack_object *o, int depth) {
    if (depth > SB_MP_MAX_DEPTH + 1) return;            /* cannot happen after check */
    switch (o->type) {
    case MSGPACK_OBJECT_STR: {
        /* msgpack-c leaves a stale pointer (to an earlier body) in empty
         * strings, so those get no NUL here; sb_mp_as_str returns "". */
        const char *s = o->via.str.ptr;
        if (o->via.str.size && s >= d->bytes && s + o->via.str.size <= d->bytes + d->len)
            ((char *)s)[o->via.str.size] = '\0';
        break;
    }
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < o->via.array.size; i++)
            terminate_strings(d, &o->via.array.ptr[i], depth + 1);
        break;
    case MSGPACK_OBJECT_MAP:
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            terminate_strings(d, &o->via.map.ptr[i].key, depth + 1);
            terminate_strings(d, &o->via.map.ptr[i].val, depth + 1);
        }
        break;
    default:
        break;
    }
}

int sb_mp_decode(const void *buf, size_t len, sb_mp_doc **out, char *err) {
    *out = NULL;
    int rc = sb_mp_check(buf, len, err);
    if (rc) return rc;
    size_t size;
    if (sb_add_size(sizeof(sb_mp_doc) + 1, len, &size))
        return sb_seterr(err, SB_ENOMEM, "msgpack frame of %zu bytes", len);
    sb_mp_doc *d = sb_malloc(size);
    if (!d) return sb_seterr(err, SB_ENOMEM, "out of memory for a %zu-byte frame", len);
    memcpy(d->bytes, buf, len);
    d->bytes[len] = '\0';
    d->len = len;
    msgpack_unpacked_init(&d->up);
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(&d->up, d->bytes, len, &off);
    if (r != MSGPACK_UNPACK_SUCCESS || off != len) {
        /* sb_mp_check accepted it, so this is msgpack-c running out of memory
         * or disagreeing with us; report it, never trust a partial parse. */
        msgpack_unpacked_destroy(&d->up);
        sb_free(d);
        return r == MSGPACK_UNPACK_NOMEM_ERROR
            ? sb_seterr(err, SB_ENOMEM, "msgpack-c out of memory decoding %zu bytes", len)
            : sb_seterr(err, SB_EFORMAT, "msgpack-c rejected the frame (%d)", (int)r);
    }
    terminate_strings(d, &d->up.data, 0);
    *out = d;
    return 0;
}

void sb_mp_doc_free(sb_mp_doc *d) {
    if (!d) return;
    msgpack_unpacked_destroy(&d->up);
    sb_free(d);
}

/* sb_mp_obj is msgpack_object under an opaque name: the objects live in the
 * doc's zone (or in the doc for the root), so the pointers are stable. */
#define OBJ(o) ((const msgpack_object *)(const void *)(o))
#define HANDLE(o) ((const sb_mp_obj *)(const void *)(o))

const sb_mp_obj *sb_mp_doc_root(const sb_mp_doc *d) { return d ? HANDLE(&d->up.data) : NULL; }

sb_mp_type sb_mp_type_of(const sb_mp_obj *h) {
    if (!h) return SB_MP_NIL;
    switch (OBJ(h)->type) {
    case MSGPACK_OBJECT_BOOLEAN:          return SB_MP_BOOL;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return SB_MP_UINT;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return SB_MP_INT;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:          return SB_MP_FLOAT;
    case MSGPACK_OBJECT_STR:              return SB_MP_STR;
    case MSGPACK_OBJECT_BIN:              return SB_MP_BIN;
    case MSGPACK_OBJECT_ARRAY:            return SB_MP_ARRAY;
    case MSGPACK_OBJECT_MAP:              return SB_MP_MAP;
    case MSGPACK_OBJECT_EXT:              return SB_MP_EXT;
    default:                              return SB_MP_NIL;
    }
}

const char *sb_mp_type_name(sb_mp_type t) {
    static const char *const names[] = {
        [SB_MP_NIL] = "nil", [SB_MP_BOOL] = "boolean", [SB_MP_UINT] = "integer",
        [SB_MP_INT] = "negative integer", [SB_MP_FLOAT] = "float", [SB_MP_STR] = "string",
        [SB_MP_BIN] = "binary", [SB_MP_ARRAY] = "array", [SB_MP_MAP] = "map", [SB_MP_EXT] = "ext",
    };
    return (unsigned)t < SB_ARRAY_LEN(names) ? names[t] : "?";
}

uint32_t sb_mp_count(const sb_mp_obj *h) {
    if (!h) return 0;
    const msgpack_object *o = OBJ(h);
    switch (o->type) {
    case MSGPACK_OBJECT_ARRAY: return o->via.array.size;
    case MSGPACK_OBJECT_MAP:   return o->via.map.size;
    case MSGPACK_OBJECT_STR:   return o->via.str.size;
    case MSGPACK_OBJECT_BIN:   return o->via.bin.size;
    default:                   return 0;
    }
}

const sb_mp_obj *sb_mp_array_at(const sb_mp_obj *h, uint32_t i) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_ARRAY || i >= OBJ(h)->via.array.size) return NULL;
    return HANDLE(&OBJ(h)->via.array.ptr[i]);
}

const sb_mp_obj *sb_mp_map_key_at(const sb_mp_obj *h, uint32_t i) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_MAP || i >= OBJ(h)->via.map.size) return NULL;
    return HANDLE(&OBJ(h)->via.map.ptr[i].key);
}

const sb_mp_obj *sb_mp_map_val_at(const sb_mp_obj *h, uint32_t i) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_MAP || i >= OBJ(h)->via.map.size) return NULL;
    return HANDLE(&OBJ(h)->via.map.ptr[i].val);
}

const sb_mp_obj *sb_mp_map_get(const sb_mp_obj *h, const char *key) {
    if (!h || !key || OBJ(h)->type != MSGPACK_OBJECT_MAP) return NULL;
    size_t klen = strlen(key);
    const msgpack_object_map *m = &OBJ(h)->via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            memcmp(k->via.str.ptr, key, klen) == 0)
            return HANDLE(&m->ptr[i].val);
    }
    return NULL;
}

int sb_mp_as_u64(const sb_mp_obj *h, uint64_t *out) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return SB_EINVAL;
    *out = OBJ(h)->via.u64;
    return 0;
}

int sb_mp_as_i64(const sb_mp_obj *h, int64_t *out) {
    if (!h) return SB_EINVAL;
    const msgpack_object *o = OBJ(h);
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) { *out = o->via.i64; return 0; }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return 0;
    }
    return SB_EINVAL;
}

int sb_mp_as_f64(const sb_mp_obj *h, double *out) {
    if (!h) return SB_EINVAL;
    const msgpack_object *o = OBJ(h);
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:          *out = o->via.f64; return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return 0;
    default:                              return SB_EINVAL;
    }
}

int sb_mp_as_bool(const sb_mp_obj *h, bool *out) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_BOOLEAN) return SB_EINVAL;
    *out = OBJ(h)->via.boolean;
    return 0;
}

int sb_mp_as_str(const sb_mp_obj *h, const char **s, size_t *len) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_STR) return SB_EINVAL;
    *s = OBJ(h)->via.str.size ? OBJ(h)->via.str.ptr : "";   /* see terminate_strings */
    if (len) *len = OBJ(h)->via.str.size;
    return 0;
}

int sb_mp_as_bin(const sb_mp_obj *h, const void **p, size_t *len) {
    if (!h || OBJ(h)->type != MSGPACK_OBJECT_BIN) return SB_EINVAL;
    *p = OBJ(h)->via.bin.size ? OBJ(h)->via.bin.ptr : "";
    *len = OBJ(h)->via.bin.size;
    return 0;
}

/* ---------------------------------------------------- typed map lookups */

/* Find key; 1 found, 0 optional-missing, SB_EINVAL required-missing. */
static int lookup(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  const sb_mp_obj **v, char *err) {
    *v = sb_mp_map_get(map, key);
    if (*v) return 1;
    if (need == SB_MP_OPTIONAL) return 0;
    return sb_seterr(err, SB_EINVAL, "missing '%s'", key);
}

static int wrong(const char *key, const char *expected, const sb_mp_obj *v, char *err) {
    return sb_seterr(err, SB_EINVAL, "'%s': expected %s, got %s", key, expected,
                     sb_mp_type_name(sb_mp_type_of(v)));
}

int sb_mp_get_u64(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  uint64_t *out, char *err) {
    const sb_mp_obj *v;
    int rc = lookup(map, key, need, &v, err);
    if (rc <= 0) return rc;
    if (sb_mp_as_u64(v, out)) return wrong(key, "an unsigned integer", v, err);
    return 0;
}

int sb_mp_get_int(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  int64_t lo, int64_t hi, int64_t *out, char *err) {
    const sb_mp_obj *v;
    int rc = lookup(map, key, need, &v, err);
    if (rc <= 0) return rc;
    int64_t x;
    if (sb_mp_as_i64(v, &x)) {
        if (sb_mp_type_of(v) == SB_MP_UINT)
            return sb_seterr(err, SB_EINVAL, "'%s': expected an integer in [%lld, %lld], got %llu",
                             key, (long long)lo, (long long)hi,
                             (unsigned long long)OBJ(v)->via.u64);
        return wrong(key, "an integer", v, err);
    }
    if (x < lo || x > hi)
        return sb_seterr(err, SB_EINVAL, "'%s': expected an integer in [%lld, %lld], got %lld",
                         key, (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return 0;
}

int sb_mp_get_num(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  double lo, double hi, double *out, char *err) {
    const sb_mp_obj *v;
    int rc = lookup(map, key, need, &v, err);
    if (rc <= 0) return rc;
    double x;
    if (sb_mp_as_f64(v, &x)) return wrong(key, "a number", v, err);
    if (isnan(x) || x < lo || x > hi)
        return sb_seterr(err, SB_EINVAL, "'%s': expected a number in [%g, %g], got %g",
                         key, lo, hi, x);
    *out = x;
    return 0;
}

int sb_mp_get_bool(const sb_mp_obj *map, const char *key, sb_mp_need need,
                   bool *out, char *err) {
    const sb_mp_obj *v;
    int rc = lookup(map, key, need, &v, err);
    if (rc <= 0) return rc;
    if (sb_mp_as_bool(v, out)) return wrong(key, "a boolean", v, err);
    return 0;
}

int sb_mp_get_str(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  const char **s, size_t *len, char *err) {
    const sb_mp_obj *v;
    int rc = lookup(map, key, need, &v, err);
    if (rc <= 0) return rc;
    if (sb_mp_as_str(v, s, len)) return wrong(key, "a string", v, err);
    return 0;
}

int sb_mp_get_container(const sb_mp_obj *map, const char *key, sb_mp_need need,
                        sb_mp_type type, const sb_mp_obj **out, char *err) {
    const sb_mp_obj *v;
    int rc = lookup(map, key, need, &v, err);
    if (rc <= 0) return rc;
    if (sb_mp_type_of(v) != type)
        return wrong(key, type == SB_MP_MAP ? "a map" : "an array", v, err);
    *out = v;
    return 0;
}

int sb_mp_check_keys(const sb_mp_obj *map, const char *const *allowed, char *err) {
    if (sb_mp_type_of(map) != SB_MP_MAP)
        return sb_seterr(err, SB_EINVAL, "expected a map, got %s",
                         sb_mp_type_name(sb_mp_type_of(map)));
    for (uint32_t i = 0; i < sb_mp_count(map); i++) {
        const char *k;
        size_t klen;
        if (sb_mp_as_str(sb_mp_map_key_at(map, i), &k, &klen))
            return sb_seterr(err, SB_EINVAL, "map key %u is a %s, not a string", i,
                             sb_mp_type_name(sb_mp_type_of(sb_mp_map_key_at(map, i))));
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = strlen(*a) == klen && memcmp(*a, k, klen) == 0;
        if (!known) return sb_seterr(err, SB_EINVAL, "unknown key '%.64s'", k);
        for (uint32_t j = 0; j < i; j++) {
            const char *k2;
            size_t k2len;
            if (!sb_mp_as_str(sb_mp_map_key_at(map, j), &k2, &k2len) && k2len == klen &&
                memcmp(k, k2, klen) == 0)
                return sb_seterr(err, SB_EINVAL, "duplicate key '%.64s'", k);
        }
    }
    return 0;
}
