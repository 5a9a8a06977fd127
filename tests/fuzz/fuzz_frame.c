/* fuzz_frame.c - libFuzzer target for the ipc frame decoder (tools/fuzz.sh).
 *
 * The input is a byte stream as a peer could send it. It is decoded three
 * ways, and each path must end in a frame or a clean error, never a crash,
 * a leak or an unbounded allocation:
 *   1. sb_ipc_frame_parse over the whole buffer, frame after frame;
 *   2. sb_ipc_frame_take on an evbuffer fed in chunks whose sizes come from
 *      the input itself (the partial-read path of the server);
 *   3. sb_mp_decode of the raw bytes (no header), then every reader accessor,
 *      the envelope parser, and a re-encode that must decode again.
 */
#include <event2/buffer.h>
#include <stdint.h>
#include <string.h>

#include "ipc/sb_ipc.h"

#define FUZZ_MAX_FRAME (1u << 16)   /* above -max_len: length checks still matter */

/* Touch every value through the public accessors. */
static void walk(const sb_mp_obj *o, int depth) {
    if (depth > SB_MP_MAX_DEPTH + 1) __builtin_trap();      /* the validator allows 32 */
    uint64_t u; int64_t i; double f; bool b; const char *s; size_t n; const void *p;
    (void)sb_mp_as_u64(o, &u);
    (void)sb_mp_as_i64(o, &i);
    (void)sb_mp_as_f64(o, &f);
    (void)sb_mp_as_bool(o, &b);
    if (!sb_mp_as_str(o, &s, &n) && s[n] != '\0') __builtin_trap();   /* promised NUL */
    (void)sb_mp_as_bin(o, &p, &n);
    (void)sb_mp_type_name(sb_mp_type_of(o));
    uint32_t count = sb_mp_count(o);
    if (sb_mp_type_of(o) == SB_MP_ARRAY)
        for (uint32_t k = 0; k < count; k++) walk(sb_mp_array_at(o, k), depth + 1);
    if (sb_mp_type_of(o) == SB_MP_MAP) {
        for (uint32_t k = 0; k < count; k++) {
            walk(sb_mp_map_key_at(o, k), depth + 1);
            walk(sb_mp_map_val_at(o, k), depth + 1);
        }
        char err[SB_ERR_LEN];
        static const char *const keys[] = { "id", "method", "params", NULL };
        (void)sb_mp_check_keys(o, keys, err);
        (void)sb_mp_get_int(o, "max_tokens", SB_MP_OPTIONAL, 1, 4096, &i, err);
        (void)sb_mp_get_num(o, "temperature", SB_MP_REQUIRED, 0, 2, &f, err);
        (void)sb_mp_get_str(o, "prompt", SB_MP_OPTIONAL, &s, &n, err);
    }
}

static void check_doc(const sb_mp_doc *d) {
    walk(sb_mp_doc_root(d), 0);
    sb_ipc_msg m;
    char err[SB_ERR_LEN];
    if (!sb_ipc_msg_parse(d, &m, err)) {
        if (m.kind == SB_IPC_MSG_REQUEST && !m.method) __builtin_trap();
        if (m.kind == SB_IPC_MSG_RESPONSE && !m.ok && (!m.code || !m.message)) __builtin_trap();
    }
    /* Whatever decoded re-encodes to something that decodes. */
    sb_mp_writer *w;
    if (sb_mp_writer_new(&w)) return;
    sb_mp_copy(w, sb_mp_doc_root(d));
    size_t n;
    const void *p = sb_mp_writer_data(w, &n);
    sb_mp_doc *again = NULL;
    if (!sb_mp_writer_status(w) && sb_mp_decode(p, n, &again, err) == SB_EFORMAT) __builtin_trap();
    sb_mp_doc_free(again);
    sb_mp_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[SB_ERR_LEN];
    /* 1. contiguous stream */
    size_t off = 0;
    while (off < size) {
        size_t used;
        sb_mp_doc *d = NULL;
        int rc = sb_ipc_frame_parse(data + off, size - off, FUZZ_MAX_FRAME, &used, &d, err);
        if (rc == 1) { check_doc(d); sb_mp_doc_free(d); }
        if (rc == 0 || rc == SB_ERANGE || rc == SB_ENOMEM) break;
        if (used == 0 || used > size - off) __builtin_trap();
        off += used;            /* SB_EFORMAT: the bad frame's size is known */
    }
    /* 2. chunked evbuffer */
    struct evbuffer *eb = evbuffer_new();
    if (!eb) return 0;
    size_t pos = 0;
    unsigned chunk = size ? (data[0] % 7) + 1 : 1;
    while (pos < size) {
        size_t n = SB_MIN((size_t)chunk, size - pos);
        evbuffer_add(eb, data + pos, n);
        pos += n;
        chunk = (chunk * 5 + 3) % 61 + 1;
        int rc;
        sb_mp_doc *d;
        while ((rc = sb_ipc_frame_take(eb, FUZZ_MAX_FRAME, &d, err)) == 1) sb_mp_doc_free(d);
        if (rc < 0 && rc != SB_EFORMAT) break;      /* the server would hang up here */
    }
    evbuffer_free(eb);
    /* 3. bare msgpack */
    sb_mp_doc *d = NULL;
    if (sb_mp_decode(data, size, &d, err) == 0) { check_doc(d); sb_mp_doc_free(d); }
    return 0;
}
