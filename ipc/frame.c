/* frame.c - length-prefixed frames and the three message envelopes (sb_ipc.h).
 *
 * The only defence a stream protocol has against a hostile or broken peer is
 * to decide from the 4-byte header alone whether it will accept the frame,
 * before buffering or allocating anything for it. Everything after the
 * header is handed to sb_mp_decode, which validates before it allocates.
 */
#include "ipc/sb_ipc.h"

#include <event2/buffer.h>
#include <string.h>

static uint32_t read_be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int sb_ipc_frame_parse(const void *buf, size_t len, size_t max_frame,
                       size_t *consumed, sb_mp_doc **out, char *err) {
    *consumed = 0;
    *out = NULL;
    if (len < SB_IPC_FRAME_HEADER) return 0;
    uint32_t n = read_be32(buf);
    if (n > max_frame)
        return sb_seterr(err, SB_ERANGE, "frame of %u bytes exceeds the %zu-byte limit",
                         n, max_frame);
    if (len - SB_IPC_FRAME_HEADER < n) return 0;
    *consumed = SB_IPC_FRAME_HEADER + (size_t)n;
    int rc = sb_mp_decode((const char *)buf + SB_IPC_FRAME_HEADER, n, out, err);
    return rc ? rc : 1;
}

int sb_ipc_frame_take(struct evbuffer *in, size_t max_frame, sb_mp_doc **out, char *err) {
    *out = NULL;
    unsigned char h[SB_IPC_FRAME_HEADER];
    size_t have = evbuffer_get_length(in);
    if (have < SB_IPC_FRAME_HEADER) return 0;
    if (evbuffer_copyout(in, h, sizeof h) != (ev_ssize_t)sizeof h)
        return sb_seterr(err, SB_EIO, "cannot read the frame header");
    uint32_t n = read_be32(h);
    if (n > max_frame)
        return sb_seterr(err, SB_ERANGE, "frame of %u bytes exceeds the %zu-byte limit",
                         n, max_frame);
    size_t total = SB_IPC_FRAME_HEADER + (size_t)n;
    if (have < total) return 0;
    /* pullup makes the frame contiguous (a copy only if it spans chunks);
     * n <= max_frame, so this is bounded. */
    const unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)total);
    if (!p) return sb_seterr(err, SB_ENOMEM, "cannot buffer a %zu-byte frame", total);
    int rc = sb_mp_decode(p + SB_IPC_FRAME_HEADER, n, out, err);
    evbuffer_drain(in, total);
    return rc ? rc : 1;
}

/* ------------------------------------------------------------ envelopes */

/* A string field usable as a name: non-empty, short, no embedded NUL. */
static int name_field(const sb_mp_obj *v, const char *key, const char **out, char *err) {
    const char *s;
    size_t n;
    if (sb_mp_as_str(v, &s, &n))
        return sb_seterr(err, SB_EINVAL, "'%s': expected a string, got %s", key,
                         sb_mp_type_name(sb_mp_type_of(v)));
    if (n == 0 || n > SB_IPC_MAX_METHOD || strlen(s) != n)
        return sb_seterr(err, SB_EINVAL, "'%s': expected 1 to %d bytes without NUL",
                         key, SB_IPC_MAX_METHOD);
    *out = s;
    return 0;
}

static int parse_error_object(const sb_mp_obj *e, sb_ipc_msg *m, char *err) {
    static const char *const keys[] = { "code", "message", NULL };
    char sub[SB_ERR_LEN];
    if (sb_mp_type_of(e) != SB_MP_MAP)
        return sb_seterr(err, SB_EINVAL, "'error': expected a map, got %s",
                         sb_mp_type_name(sb_mp_type_of(e)));
    if (sb_mp_check_keys(e, keys, sub) ||
        name_field(sb_mp_map_get(e, "code"), "code", &m->code, sub) ||
        sb_mp_get_str(e, "message", SB_MP_REQUIRED, &m->message, NULL, sub))
        return sb_seterr(err, SB_EINVAL, "error.%s", sub);
    return 0;
}

int sb_ipc_msg_parse(const sb_mp_doc *doc, sb_ipc_msg *m, char *err) {
    static const char *const request_keys[]  = { "id", "method", "params", NULL };
    static const char *const event_keys[]    = { "id", "event", "data", NULL };
    static const char *const response_keys[] = { "id", "ok", "result", "error", NULL };
    memset(m, 0, sizeof *m);
    const sb_mp_obj *root = sb_mp_doc_root(doc);
    if (sb_mp_type_of(root) != SB_MP_MAP)
        return sb_seterr(err, SB_EINVAL, "frame: expected a map, got %s",
                         sb_mp_type_name(sb_mp_type_of(root)));
    /* Read the id first, so even a rejected message's error can echo it. */
    uint64_t id = 0;
    int rc = sb_mp_get_u64(root, "id", SB_MP_REQUIRED, &id, err);
    if (rc) return rc;
    m->id = id;
    /* id 0 only ever appears in responses to frames whose id was unreadable. */
    if (id == 0 && !sb_mp_map_get(root, "ok"))
        return sb_seterr(err, SB_EINVAL, "'id': must be >= 1 (0 is reserved)");

    const sb_mp_obj *v;
    if ((v = sb_mp_map_get(root, "method"))) {
        m->kind = SB_IPC_MSG_REQUEST;
        if ((rc = sb_mp_check_keys(root, request_keys, err))) return rc;
        if ((rc = name_field(v, "method", &m->method, err))) return rc;
        return sb_mp_get_container(root, "params", SB_MP_OPTIONAL, SB_MP_MAP, &m->params, err);
    }
    if ((v = sb_mp_map_get(root, "event"))) {
        m->kind = SB_IPC_MSG_EVENT;
        if ((rc = sb_mp_check_keys(root, event_keys, err))) return rc;
        if ((rc = name_field(v, "event", &m->event, err))) return rc;
        m->data = sb_mp_map_get(root, "data");
        return 0;
    }
    if (sb_mp_map_get(root, "ok")) {
        m->kind = SB_IPC_MSG_RESPONSE;
        if ((rc = sb_mp_check_keys(root, response_keys, err))) return rc;
        if ((rc = sb_mp_get_bool(root, "ok", SB_MP_REQUIRED, &m->ok, err))) return rc;
        const sb_mp_obj *e = sb_mp_map_get(root, "error");
        m->result = sb_mp_map_get(root, "result");
        if (m->ok) {
            if (e) return sb_seterr(err, SB_EINVAL, "'error' in a response with ok: true");
            return 0;
        }
        if (m->result) return sb_seterr(err, SB_EINVAL, "'result' in a response with ok: false");
        if (!e) return sb_seterr(err, SB_EINVAL, "missing 'error' in a response with ok: false");
        return parse_error_object(e, m, err);
    }
    return sb_seterr(err, SB_EINVAL, "frame has none of 'method', 'event', 'ok'");
}

/* ------------------------------------------------------------- encoding */

/* Append a caller-built value; it must be exactly one object, or the
 * receiving side would misparse everything after it. */
static int append_value(sb_mp_writer *w, const sb_mp_writer *v, bool empty_map) {
    if (!v) {
        if (empty_map) sb_mp_map(w, 0); else sb_mp_nil(w);
        return 0;
    }
    if (sb_mp_writer_status(v)) return sb_mp_writer_status(v);
    size_t n;
    const void *p = sb_mp_writer_data(v, &n);
    if (sb_mp_check(p, n, NULL)) return SB_EINVAL;
    sb_mp_raw(w, p, n);
    return 0;
}

int sb_ipc_encode_request(sb_mp_writer *w, size_t max_frame, uint64_t id,
                          const char *method, const sb_mp_writer *params) {
    sb_mp_writer_reset(w);
    sb_mp_frame_begin(w);
    sb_mp_map(w, 3);
    sb_mp_kv_u64(w, "id", id);
    sb_mp_kv_str(w, "method", method);
    sb_mp_str(w, "params");
    int rc = append_value(w, params, true);
    return rc ? rc : sb_mp_frame_end(w, max_frame);
}

int sb_ipc_encode_event(sb_mp_writer *w, size_t max_frame, uint64_t id,
                        const char *event, const sb_mp_writer *data) {
    sb_mp_writer_reset(w);
    sb_mp_frame_begin(w);
    sb_mp_map(w, 3);
    sb_mp_kv_u64(w, "id", id);
    sb_mp_kv_str(w, "event", event);
    sb_mp_str(w, "data");
    int rc = append_value(w, data, false);
    return rc ? rc : sb_mp_frame_end(w, max_frame);
}

int sb_ipc_encode_ok(sb_mp_writer *w, size_t max_frame, uint64_t id,
                     const sb_mp_writer *result) {
    sb_mp_writer_reset(w);
    sb_mp_frame_begin(w);
    sb_mp_map(w, 3);
    sb_mp_kv_u64(w, "id", id);
    sb_mp_kv_bool(w, "ok", true);
    sb_mp_str(w, "result");
    int rc = append_value(w, result, false);
    return rc ? rc : sb_mp_frame_end(w, max_frame);
}

int sb_ipc_encode_error(sb_mp_writer *w, size_t max_frame, uint64_t id,
                        const char *code, const char *message) {
    sb_mp_writer_reset(w);
    sb_mp_frame_begin(w);
    sb_mp_map(w, 3);
    sb_mp_kv_u64(w, "id", id);
    sb_mp_kv_bool(w, "ok", false);
    sb_mp_str(w, "error");
    sb_mp_map(w, 2);
    sb_mp_kv_str(w, "code", code);
    sb_mp_kv_str(w, "message", message ? message : "");
    return sb_mp_frame_end(w, max_frame);
}
