/* test_ipc_codec.c - msgpack builder/reader, frames and envelopes, no sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ipc/sb_ipc.h"

static sb_mp_doc *decode_writer(sb_mp_writer *w) {
    size_t n;
    const void *p = sb_mp_writer_data(w, &n);
    sb_mp_doc *d = NULL;
    char err[SB_ERR_LEN] = "";
    int rc = sb_mp_decode(p, n, &d, err);
    if (rc) fail_msg("decode: %s", err);
    return d;
}

static void test_writer_reader_roundtrip(void **state) {
    sb_mp_writer *w;
    assert_int_equal(sb_mp_writer_new(&w), 0);
    sb_mp_map(w, 9);
    sb_mp_kv_u64(w, "big", UINT64_MAX);
    sb_mp_kv_i64(w, "neg", -42);
    sb_mp_kv_f64(w, "pi", 3.25);
    sb_mp_kv_bool(w, "yes", true);
    sb_mp_kv_str(w, "s", "hello");
    sb_mp_str(w, "nul"); sb_mp_strn(w, "a\0b", 3);
    sb_mp_str(w, "bin"); sb_mp_bin(w, "\x01\x02", 2);
    sb_mp_str(w, "arr"); sb_mp_array(w, 3); sb_mp_i64(w, 1); sb_mp_nil(w); sb_mp_str(w, "");
    sb_mp_str(w, "m"); sb_mp_map(w, 1); sb_mp_kv_str(w, "k", "v");
    assert_int_equal(sb_mp_writer_status(w), 0);
    sb_mp_doc *d = decode_writer(w);
    const sb_mp_obj *r = sb_mp_doc_root(d);
    assert_int_equal(sb_mp_type_of(r), SB_MP_MAP);
    assert_int_equal(sb_mp_count(r), 9);

    uint64_t u; int64_t i; double f; bool b; const char *s; size_t n;
    assert_int_equal(sb_mp_get_u64(r, "big", SB_MP_REQUIRED, &u, NULL), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(sb_mp_as_i64(sb_mp_map_get(r, "big"), &i), SB_EINVAL);  /* > INT64_MAX */
    assert_int_equal(sb_mp_get_int(r, "neg", SB_MP_REQUIRED, -100, 0, &i, NULL), 0);
    assert_int_equal(i, -42);
    assert_int_equal(sb_mp_as_u64(sb_mp_map_get(r, "neg"), &u), SB_EINVAL);
    assert_int_equal(sb_mp_get_num(r, "pi", SB_MP_REQUIRED, 0, 10, &f, NULL), 0);
    assert_true(f == 3.25);
    assert_int_equal(sb_mp_get_num(r, "neg", SB_MP_REQUIRED, -100, 0, &f, NULL), 0); /* int → double */
    assert_int_equal(sb_mp_get_bool(r, "yes", SB_MP_REQUIRED, &b, NULL), 0);
    assert_true(b);
    assert_int_equal(sb_mp_get_str(r, "s", SB_MP_REQUIRED, &s, &n, NULL), 0);
    assert_string_equal(s, "hello");            /* NUL-terminated in place */
    assert_int_equal(n, 5);
    assert_int_equal(sb_mp_get_str(r, "nul", SB_MP_REQUIRED, &s, &n, NULL), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(s, "a\0b", 4);
    const void *bp;
    assert_int_equal(sb_mp_as_bin(sb_mp_map_get(r, "bin"), &bp, &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(bp, "\x01\x02", 2);
    const sb_mp_obj *a;
    assert_int_equal(sb_mp_get_container(r, "arr", SB_MP_REQUIRED, SB_MP_ARRAY, &a, NULL), 0);
    assert_int_equal(sb_mp_count(a), 3);
    assert_int_equal(sb_mp_type_of(sb_mp_array_at(a, 1)), SB_MP_NIL);
    assert_int_equal(sb_mp_as_str(sb_mp_array_at(a, 2), &s, &n), 0);
    assert_string_equal(s, "");
    assert_null(sb_mp_array_at(a, 3));
    const sb_mp_obj *m;
    assert_int_equal(sb_mp_get_container(r, "m", SB_MP_REQUIRED, SB_MP_MAP, &m, NULL), 0);
    assert_string_equal(((void)sb_mp_get_str(m, "k", SB_MP_REQUIRED, &s, NULL, NULL), s), "v");

    /* Re-encoding a doc gives the same bytes. */
    sb_mp_writer *w2;
    sb_mp_writer_new(&w2);
    sb_mp_copy(w2, r);
    size_t n1, n2;
    const void *p1 = sb_mp_writer_data(w, &n1), *p2 = sb_mp_writer_data(w2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1);
    sb_mp_doc_free(d);
    /* Empty strings carry a NULL/stale pointer in msgpack-c: copying one must
     * not pass it to memcpy (UBSan caught this via fuzz_frame). */
    assert_int_equal(sb_mp_decode("\xa0", 1, &d, NULL), 0);
    sb_mp_writer_reset(w2);
    sb_mp_copy(w2, sb_mp_doc_root(d));
    p2 = sb_mp_writer_data(w2, &n2);
    assert_int_equal(n2, 1);
    assert_memory_equal(p2, "\xa0", 1);
    sb_mp_doc_free(d);
    sb_mp_writer_free(w2);
    sb_mp_writer_free(w);
}

static void test_typed_lookup_errors(void **state) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 4);
    sb_mp_kv_str(w, "n", "7");
    sb_mp_kv_i64(w, "big", 5000);
    sb_mp_kv_f64(w, "nan", NAN);
    sb_mp_str(w, "nil"); sb_mp_nil(w);
    sb_mp_doc *d = decode_writer(w);
    const sb_mp_obj *r = sb_mp_doc_root(d);
    char err[SB_ERR_LEN];
    int64_t i = 99;
    double f;
    const char *s;
    assert_int_equal(sb_mp_get_int(r, "n", SB_MP_REQUIRED, 0, 10, &i, err), SB_EINVAL);
    assert_string_equal(err, "'n': expected an integer, got string");
    assert_int_equal(sb_mp_get_int(r, "big", SB_MP_REQUIRED, 1, 4096, &i, err), SB_EINVAL);
    assert_string_equal(err, "'big': expected an integer in [1, 4096], got 5000");
    assert_int_equal(sb_mp_get_int(r, "missing", SB_MP_REQUIRED, 0, 1, &i, err), SB_EINVAL);
    assert_string_equal(err, "missing 'missing'");
    assert_int_equal(sb_mp_get_int(r, "missing", SB_MP_OPTIONAL, 0, 1, &i, err), 0);
    assert_int_equal(i, 99);                            /* default untouched */
    assert_int_equal(sb_mp_get_num(r, "nan", SB_MP_REQUIRED, -1, 1, &f, err), SB_EINVAL);
    assert_int_equal(sb_mp_get_str(r, "nil", SB_MP_OPTIONAL, &s, NULL, err), SB_EINVAL);
    assert_string_equal(err, "'nil': expected a string, got nil");
    static const char *const allowed[] = { "n", "big", "nan", NULL };
    assert_int_equal(sb_mp_check_keys(r, allowed, err), SB_EINVAL);
    assert_string_equal(err, "unknown key 'nil'");
    /* Everything tolerates NULL and non-maps. */
    assert_null(sb_mp_map_get(NULL, "x"));
    assert_null(sb_mp_map_get(sb_mp_map_get(r, "n"), "x"));
    assert_int_equal(sb_mp_count(NULL), 0);
    assert_int_equal(sb_mp_get_int(NULL, "x", SB_MP_REQUIRED, 0, 1, &i, NULL), SB_EINVAL);
    sb_mp_doc_free(d);

    sb_mp_writer_reset(w);                              /* duplicate keys */
    sb_mp_map(w, 2);
    sb_mp_kv_i64(w, "n", 1);
    sb_mp_kv_i64(w, "n", 2);
    d = decode_writer(w);
    assert_int_equal(sb_mp_check_keys(sb_mp_doc_root(d), allowed, err), SB_EINVAL);
    assert_string_equal(err, "duplicate key 'n'");
    sb_mp_doc_free(d);
    sb_mp_writer_free(w);
}

static void test_check_rejects_hostile_input(void **state) {
    char err[SB_ERR_LEN];
    static const struct { const char *bytes; size_t n; const char *why; } bad[] = {
        { "", 0, "truncated" },
        { "\xc1", 1, "invalid msgpack byte 0xc1" },
        { "\xdd\xff\xff\xff\xff", 5, "claims 4294967295 items" },
        { "\xdf\x7f\xff\xff\xff\x01", 6, "claims 4294967294 items" },
        { "\xdb\xff\xff\xff\xff" "ab", 7, "runs past the end" },
        { "\xc9\x00\x00\x00\x10\x01", 6, "runs past the end" },     /* ext32 */
        { "\x92\x01", 2, "claims 2 items in 1 bytes" },
        { "\x91\x01\x02", 3, "1 bytes after" },
        { "\xcf\x00\x00", 3, "runs past the end" },
        { "\xda\x00", 2, "truncated" },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        assert_int_equal(sb_mp_check(bad[i].bytes, bad[i].n, err), SB_EFORMAT);
        if (!strstr(err, bad[i].why)) fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i].why);
        sb_mp_doc *d = (sb_mp_doc *)1;
        assert_int_equal(sb_mp_decode(bad[i].bytes, bad[i].n, &d, NULL), SB_EFORMAT);
        assert_null(d);
    }
    /* Depth: 32 nested non-empty arrays decode; 33 are refused by us (msgpack-c
     * would fail on its fixed stack). */
    unsigned char deep[40];
    for (int depth = 31; depth <= 34; depth++) {
        memset(deep, 0x91, (size_t)depth);
        deep[depth] = 0x01;
        sb_mp_doc *d = NULL;
        int rc = sb_mp_decode(deep, (size_t)depth + 1, &d, err);
        if (depth <= 32) {
            assert_int_equal(rc, 0);
            const sb_mp_obj *o = sb_mp_doc_root(d);
            for (int k = 0; k < depth; k++) o = sb_mp_array_at(o, 0);
            uint64_t v;
            assert_int_equal(sb_mp_as_u64(o, &v), 0);
            assert_int_equal(v, 1);
            sb_mp_doc_free(d);
        } else {
            assert_int_equal(rc, SB_EFORMAT);
            assert_non_null(strstr(err, "nested deeper than 32"));
        }
    }
    /* Object count: SB_MP_MAX_OBJECTS nils plus their array exceed the cap. */
    size_t n = 5 + SB_MP_MAX_OBJECTS;
    unsigned char *big = sb_calloc(1, n);
    big[0] = 0xdd;
    big[1] = (unsigned char)(SB_MP_MAX_OBJECTS >> 24); big[2] = (unsigned char)(SB_MP_MAX_OBJECTS >> 16);
    big[3] = (unsigned char)(SB_MP_MAX_OBJECTS >> 8);  big[4] = (unsigned char)SB_MP_MAX_OBJECTS;
    memset(big + 5, 0xc0, SB_MP_MAX_OBJECTS);
    assert_int_equal(sb_mp_check(big, n, err), SB_EFORMAT);
    assert_non_null(strstr(err, "more than"));
    uint32_t fewer = SB_MP_MAX_OBJECTS - 1;              /* array + nils = the cap: fits */
    big[1] = (unsigned char)(fewer >> 24); big[2] = (unsigned char)(fewer >> 16);
    big[3] = (unsigned char)(fewer >> 8);  big[4] = (unsigned char)fewer;
    assert_int_equal(sb_mp_check(big, n - 1, err), 0);
    sb_free(big);
}

static void test_frame_parse_incremental(void **state) {
    sb_mp_writer *w, *all;
    sb_mp_writer_new(&w);
    sb_mp_writer_new(&all);
    for (uint64_t id = 1; id <= 3; id++) {
        assert_int_equal(sb_ipc_encode_request(w, 1 << 20, id, "health", NULL), 0);
        size_t n;
        const void *p = sb_mp_writer_data(w, &n);
        sb_mp_raw(all, p, n);
    }
    size_t total;
    const unsigned char *p = sb_mp_writer_data(all, &total);
    size_t one = total / 3;
    sb_mp_doc *d;
    size_t used;
    for (size_t k = 0; k < one; k++) {                  /* every proper prefix: need more */
        assert_int_equal(sb_ipc_frame_parse(p, k, 1 << 20, &used, &d, NULL), 0);
        assert_int_equal(used, 0);
    }
    size_t off = 0;
    for (uint64_t id = 1; id <= 3; id++) {              /* three frames back to back */
        assert_int_equal(sb_ipc_frame_parse(p + off, total - off, 1 << 20, &used, &d, NULL), 1);
        sb_ipc_msg m;
        assert_int_equal(sb_ipc_msg_parse(d, &m, NULL), 0);
        assert_int_equal(m.kind, SB_IPC_MSG_REQUEST);
        assert_int_equal(m.id, id);
        assert_string_equal(m.method, "health");
        assert_int_equal(sb_mp_count(m.params), 0);
        sb_mp_doc_free(d);
        off += used;
    }
    assert_int_equal(off, total);

    /* The same through an evbuffer fed one byte at a time. */
    struct evbuffer *eb = evbuffer_new();
    int frames = 0;
    for (size_t i = 0; i < total; i++) {
        evbuffer_add(eb, p + i, 1);
        int rc;
        while ((rc = sb_ipc_frame_take(eb, 1 << 20, &d, NULL)) == 1) { frames++; sb_mp_doc_free(d); }
        assert_int_equal(rc, 0);
    }
    assert_int_equal(frames, 3);
    assert_int_equal(evbuffer_get_length(eb), 0);

    /* The size cap is decided from the header alone. */
    char err[SB_ERR_LEN];
    evbuffer_add(eb, "\x80\x00\x00\x00", 4);            /* 2 GiB */
    assert_int_equal(sb_ipc_frame_take(eb, SB_IPC_MAX_FRAME_DEFAULT, &d, err), SB_ERANGE);
    assert_string_equal(err, "frame of 2147483648 bytes exceeds the 16777216-byte limit");
    evbuffer_free(eb);
    assert_int_equal(sb_ipc_frame_parse("\x00\x00\x00\x05", 4, 4, &used, &d, NULL), SB_ERANGE);
    assert_int_equal(sb_ipc_frame_parse("\x00\x00\x00\x01\xc0", 5, 1, &used, &d, NULL), 1);
    sb_mp_doc_free(d);
    assert_int_equal(sb_ipc_frame_parse("\x00\x00\x00\x01\xc1" "rest", 9, 16, &used, &d, NULL),
                     SB_EFORMAT);
    assert_int_equal(used, 5);                          /* the bad frame is skippable */
    sb_mp_writer_free(w);
    sb_mp_writer_free(all);
}

static int parse_bytes(const char *p, size_t n, sb_ipc_msg *m, sb_mp_doc **d, char *err) {
    assert_int_equal(sb_mp_decode(p, n, d, NULL), 0);
    return sb_ipc_msg_parse(*d, m, err);
}
#define PARSE(lit, m, d, err) parse_bytes(lit, sizeof lit - 1, m, d, err)

/* Malformed envelopes, each with the message a client would see. */
static void check_malformed_envelopes(void) {
    sb_ipc_msg m;
    sb_mp_doc *d;
    char err[SB_ERR_LEN];
    static const struct { const char *bytes; size_t n; const char *err; uint64_t id; } bad[] = {
#define B(lit) lit, sizeof lit - 1
        { B("\x93\x01\x02\x03"), "frame: expected a map, got array", 0 },
        { B("\x81\xa6method\xa4" "echo"), "missing 'id'", 0 },
        { B("\x82\xa2id\xa1" "1\xa6method\xa1x"), "'id': expected an unsigned integer, got string", 0 },
        { B("\x81\xa2id\x03"), "frame has none of 'method', 'event', 'ok'", 3 },
        { B("\x82\xa2id\x00\xa6method\xa1x"), "'id': must be >= 1 (0 is reserved)", 0 },
        { B("\x82\xa2id\x03\xa6method\xa0"), "'method': expected 1 to 64 bytes without NUL", 3 },
        { B("\x82\xa2id\x03\xa6method\xa3x\x00y"), "'method': expected 1 to 64 bytes without NUL", 3 },
        { B("\x83\xa2id\x03\xa6method\xa1x\xa6params\xc0"), "'params': expected a map, got nil", 3 },
        { B("\x83\xa2id\x03\xa6method\xa1x\x01\x02"), "map key 2 is a integer, not a string", 3 },
        { B("\x82\xa2id\x03\xa2ok\xc2"), "missing 'error' in a response with ok: false", 3 },
        { B("\x83\xa2id\x03\xa2ok\xc3\xa5" "error\x80"), "'error' in a response with ok: true", 3 },
        { B("\x82\xa2id\x03\xa2ok\x01"), "'ok': expected a boolean, got integer", 3 },
        { B("\x83\xa2id\x03\xa2ok\xc2\xa5" "error\x81\xa4" "code\xa1x"), "error.missing 'message'", 3 },
        { B("\x82\xa2id\x03\xa5" "event\x01"), "'event': expected a string, got integer", 3 },
#undef B
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        assert_int_equal(parse_bytes(bad[i].bytes, bad[i].n, &m, &d, err), SB_EINVAL);
        if (strcmp(err, bad[i].err)) fail_msg("case %zu: got '%s', want '%s'", i, err, bad[i].err);
        assert_int_equal(m.id, bad[i].id);
        sb_mp_doc_free(d);
    }
}

static void test_envelopes(void **state) {
    sb_mp_writer *w, *v;
    sb_mp_writer_new(&w);
    sb_mp_writer_new(&v);
    sb_ipc_msg m;
    sb_mp_doc *d;
    size_t used, n;
    const void *p;
    char err[SB_ERR_LEN];

    sb_mp_map(v, 2);
    sb_mp_kv_str(v, "text", "hi");
    sb_mp_kv_i64(v, "token", 42);
    assert_int_equal(sb_ipc_encode_event(w, 1 << 20, 9, "token", v), 0);
    p = sb_mp_writer_data(w, &n);
    assert_int_equal(sb_ipc_frame_parse(p, n, 1 << 20, &used, &d, NULL), 1);
    assert_int_equal(sb_ipc_msg_parse(d, &m, NULL), 0);
    assert_int_equal(m.kind, SB_IPC_MSG_EVENT);
    assert_string_equal(m.event, "token");
    assert_int_equal(sb_mp_count(m.data), 2);
    sb_mp_doc_free(d);

    assert_int_equal(sb_ipc_encode_ok(w, 1 << 20, 9, NULL), 0);
    p = sb_mp_writer_data(w, &n);
    assert_int_equal(sb_ipc_frame_parse(p, n, 1 << 20, &used, &d, NULL), 1);
    assert_int_equal(sb_ipc_msg_parse(d, &m, NULL), 0);
    assert_true(m.kind == SB_IPC_MSG_RESPONSE && m.ok);
    assert_int_equal(sb_mp_type_of(m.result), SB_MP_NIL);
    sb_mp_doc_free(d);

    assert_int_equal(sb_ipc_encode_error(w, 1 << 20, 0, SB_IPC_BUSY, "queue full"), 0);
    p = sb_mp_writer_data(w, &n);
    assert_int_equal(sb_ipc_frame_parse(p, n, 1 << 20, &used, &d, NULL), 1);
    assert_int_equal(sb_ipc_msg_parse(d, &m, NULL), 0);    /* id 0 is fine in a response */
    assert_false(m.ok);
    assert_string_equal(m.code, "busy");
    assert_string_equal(m.message, "queue full");
    sb_mp_doc_free(d);

    check_malformed_envelopes();
    assert_int_equal(PARSE("\x82\xa2id\x01\xa6method\xa6health", &m, &d, err), 0);
    assert_null(m.params);                              /* params may be omitted */
    sb_mp_doc_free(d);

    /* A writer that is not exactly one object never reaches the wire. */
    sb_mp_writer_reset(v);
    sb_mp_map(v, 2);
    sb_mp_kv_i64(v, "a", 1);
    assert_int_equal(sb_ipc_encode_ok(w, 1 << 20, 1, v), SB_EINVAL);
    sb_mp_nil(v);
    sb_mp_nil(v);
    sb_mp_nil(v);                                       /* now one pair too many */
    assert_int_equal(sb_ipc_encode_ok(w, 1 << 20, 1, v), SB_EINVAL);
    sb_mp_writer_reset(v);
    sb_mp_str(v, "0123456789");
    assert_int_equal(sb_ipc_encode_ok(w, 16, 1, v), SB_ERANGE);
    sb_mp_writer_free(w);
    sb_mp_writer_free(v);
}

/* SQLite's discipline: fail the 1st, 2nd, … allocation; each must end in
 * success or a clean SB_ENOMEM (ASan and the leak checker do the rest). */
static void test_allocation_failures(void **state) {
    bool done = false;
    for (long k = 0; !done && k < 100; k++) {
        sb_malloc_fail_after(k);
        sb_mp_writer *w = NULL;
        int rc = sb_mp_writer_new(&w);
        if (!rc) {
            char big[1000];
            memset(big, 'x', sizeof big);
            sb_mp_map(w, 2);
            sb_mp_str(w, "text");
            sb_mp_strn(w, big, sizeof big);
            sb_mp_kv_i64(w, "n", 5);
            rc = sb_mp_writer_status(w);
            if (!rc) {
                sb_mp_writer *f = NULL;
                rc = sb_mp_writer_new(&f);
                if (!rc) rc = sb_ipc_encode_event(f, 1 << 20, 1, "token", w);
                if (!rc) {
                    size_t n, used;
                    const void *p = sb_mp_writer_data(f, &n);
                    sb_mp_doc *d = NULL;
                    rc = sb_ipc_frame_parse(p, n, 1 << 20, &used, &d, NULL);
                    if (rc == 1) { rc = 0; sb_mp_doc_free(d); done = true; }
                }
                sb_mp_writer_free(f);
            }
            sb_mp_writer_free(w);
        }
        assert_true(rc == 0 || rc == SB_ENOMEM);
    }
    sb_malloc_fail_after(-1);
    assert_true(done);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_reader_roundtrip),
        cmocka_unit_test(test_typed_lookup_errors),
        cmocka_unit_test(test_check_rejects_hostile_input),
        cmocka_unit_test(test_frame_parse_incremental),
        cmocka_unit_test(test_envelopes),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
