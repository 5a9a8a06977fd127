/* sb_ipc.h - the wire protocol between switchboard processes (docs/ipc.md).
 *
 * A frame is a 4-byte big-endian payload length followed by exactly one
 * msgpack map:
 *   request   {"id": u64, "method": str, "params": map}
 *   event     {"id": u64, "event": str, "data": any}
 *   response  {"id": u64, "ok": true,  "result": any}
 *             {"id": u64, "ok": false, "error": {"code": str, "message": str}}
 *
 * Layers, bottom up:
 *   sb_mp_writer / sb_mp_doc   msgpack builder and reader (the only place that
 *                              sees msgpack-c; nothing else includes msgpack.h)
 *   sb_ipc_frame_* / _msg_*    framing and the envelope of the three messages
 *   sb_ipc_server              libevent server on a Unix socket
 *   sb_ipc_client              blocking client (CLI, tests, supervisor probes)
 *   sb_ipc_aclient             non-blocking libevent client (the router)
 *
 * libevent types appear only as forward-declared pointers.
 */
#ifndef SB_IPC_H
#define SB_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"

struct event_base;
struct evbuffer;

/* ---------------------------------------------------------------- limits */

#define SB_IPC_FRAME_HEADER     4u
/* 16 MiB: a 1M-token prompt as an int array is ~5 MiB; anything larger is a
 * bug or an attack, and we refuse it before allocating. */
#define SB_IPC_MAX_FRAME_DEFAULT (16u << 20)
/* Nesting of non-empty containers. msgpack-c's parser has a fixed stack of 32
 * (MSGPACK_EMBED_STACK_SIZE); we reject deeper input ourselves, with a clear
 * message, before msgpack-c sees it. */
#define SB_MP_MAX_DEPTH         32
/* Objects per frame. msgpack-c allocates 24 bytes per object up front, so this
 * bounds the decoder's memory at ~96 MiB whatever the frame claims. */
#define SB_MP_MAX_OBJECTS       (1u << 22)
#define SB_IPC_MAX_METHOD       64      /* bytes in a method or event name */

/* ----------------------------------------------------------- error codes
 * The "code" string of an error response. docs/ipc.md is the reference. */
#define SB_IPC_INVALID_REQUEST  "invalid_request"  /* wrong shape, type or value */
#define SB_IPC_BAD_FRAME        "bad_frame"        /* not msgpack: connection closed */
#define SB_IPC_FRAME_TOO_LARGE  "frame_too_large"  /* connection closed */
#define SB_IPC_UNKNOWN_METHOD   "unknown_method"
#define SB_IPC_BUSY             "busy"             /* queue full: retry later */
#define SB_IPC_CANCELLED        "cancelled"
#define SB_IPC_TIMEOUT          "timeout"
#define SB_IPC_INTERNAL         "internal"
#define SB_IPC_INPUT_TOO_LONG   "input_too_long"   /* over a token cap: nothing was computed */
/* Never on the wire: produced by clients when the connection drops. */
#define SB_IPC_DISCONNECTED     "disconnected"

typedef struct sb_mp_doc sb_mp_doc;     /* one decoded object and its memory */
typedef struct sb_mp_obj sb_mp_obj;     /* a value inside a doc (opaque) */

/* ================================================= msgpack builder ===== */

/* A growable msgpack encoder. Errors are sticky: encode everything, then
 * check sb_mp_writer_status() once. */
typedef struct sb_mp_writer sb_mp_writer;

int  sb_mp_writer_new(sb_mp_writer **out);          /* 0 or SB_ENOMEM */
void sb_mp_writer_free(sb_mp_writer *w);            /* NULL ok */
void sb_mp_writer_reset(sb_mp_writer *w);           /* empty, keeps capacity */
/* 0, or the first error (SB_ENOMEM, SB_ERANGE for a frame over its limit). */
int  sb_mp_writer_status(const sb_mp_writer *w);
/* The bytes written so far; valid until the next write or reset. */
const void *sb_mp_writer_data(const sb_mp_writer *w, size_t *len);
/* Hand the buffer to the caller (free it with sb_free) and reset w. Returns
 * SB_ENOMEM if a write had failed (nothing is handed over then). */
int  sb_mp_writer_detach(sb_mp_writer *w, void **buf, size_t *len);

void sb_mp_map(sb_mp_writer *w, uint32_t n_pairs);  /* then 2*n values */
void sb_mp_array(sb_mp_writer *w, uint32_t n);
void sb_mp_nil(sb_mp_writer *w);
void sb_mp_bool(sb_mp_writer *w, bool v);
void sb_mp_u64(sb_mp_writer *w, uint64_t v);
void sb_mp_i64(sb_mp_writer *w, int64_t v);
void sb_mp_f64(sb_mp_writer *w, double v);
void sb_mp_str(sb_mp_writer *w, const char *s);     /* NUL-terminated */
void sb_mp_strn(sb_mp_writer *w, const char *s, size_t n);
void sb_mp_bin(sb_mp_writer *w, const void *p, size_t n);
/* Re-encode a value read from a doc (NULL: nil). */
void sb_mp_copy(sb_mp_writer *w, const sb_mp_obj *o);
/* Append already-encoded msgpack (whole objects) as is. */
void sb_mp_raw(sb_mp_writer *w, const void *p, size_t n);
/* Key/value pairs, for the common case inside sb_mp_map. */
void sb_mp_kv_str(sb_mp_writer *w, const char *key, const char *v);
void sb_mp_kv_u64(sb_mp_writer *w, const char *key, uint64_t v);
void sb_mp_kv_i64(sb_mp_writer *w, const char *key, int64_t v);
void sb_mp_kv_f64(sb_mp_writer *w, const char *key, double v);
void sb_mp_kv_bool(sb_mp_writer *w, const char *key, bool v);

/* Frame support: begin reserves the length prefix in an empty writer; end
 * fills it in (SB_ERANGE, sticky, if the payload exceeds max_frame). */
void sb_mp_frame_begin(sb_mp_writer *w);
int  sb_mp_frame_end(sb_mp_writer *w, size_t max_frame);

/* Check that p[0..n) is exactly one well-formed msgpack object within the
 * depth and object limits. Never allocates. 0 or SB_EFORMAT (+ err). */
int  sb_mp_check(const void *p, size_t n, char *err);

/* ================================================== msgpack reader ===== */

typedef enum {
    SB_MP_NIL, SB_MP_BOOL, SB_MP_UINT, SB_MP_INT /* negative */, SB_MP_FLOAT,
    SB_MP_STR, SB_MP_BIN, SB_MP_ARRAY, SB_MP_MAP, SB_MP_EXT,
} sb_mp_type;

/* Decode exactly one object from buf[0..len) (copied; buf may go away).
 * Validates with sb_mp_check first, so hostile lengths and counts cannot make
 * msgpack-c allocate. Every string in the doc is NUL-terminated (its length
 * still counts embedded NULs). 0, SB_EFORMAT or SB_ENOMEM (+ err). */
int  sb_mp_decode(const void *buf, size_t len, sb_mp_doc **out, char *err);
void sb_mp_doc_free(sb_mp_doc *d);                          /* NULL ok */
const sb_mp_obj *sb_mp_doc_root(const sb_mp_doc *d);

/* Accessors. All accept NULL and wrong types: they return SB_MP_NIL / 0 /
 * NULL / SB_EINVAL rather than crash. Pointers live as long as the doc. */
sb_mp_type  sb_mp_type_of(const sb_mp_obj *o);
const char *sb_mp_type_name(sb_mp_type t);          /* "string", "map", … */
/* Elements of an array, pairs of a map, bytes of a string/bin; else 0. */
uint32_t sb_mp_count(const sb_mp_obj *o);
const sb_mp_obj *sb_mp_array_at(const sb_mp_obj *o, uint32_t i);
const sb_mp_obj *sb_mp_map_key_at(const sb_mp_obj *o, uint32_t i);
const sb_mp_obj *sb_mp_map_val_at(const sb_mp_obj *o, uint32_t i);
/* The value of the first pair whose key is the string `key`, or NULL. */
const sb_mp_obj *sb_mp_map_get(const sb_mp_obj *map, const char *key);

/* Conversions: 0, or SB_EINVAL when the type does not fit (a negative number
 * for u64, a u64 above INT64_MAX for i64). Integers convert to double. */
int sb_mp_as_u64(const sb_mp_obj *o, uint64_t *out);
int sb_mp_as_i64(const sb_mp_obj *o, int64_t *out);
int sb_mp_as_f64(const sb_mp_obj *o, double *out);
int sb_mp_as_bool(const sb_mp_obj *o, bool *out);
int sb_mp_as_str(const sb_mp_obj *o, const char **s, size_t *len); /* len may be NULL */
int sb_mp_as_bin(const sb_mp_obj *o, const void **p, size_t *len);

/* Typed map lookups for request validation. A REQUIRED key that is missing,
 * or any key of the wrong type or out of range, returns SB_EINVAL and writes
 * "'key': expected …, got …" to err. An OPTIONAL missing key returns 0 and
 * leaves *out untouched, so callers preset defaults. nil counts as present
 * (and is the wrong type). */
typedef enum { SB_MP_REQUIRED, SB_MP_OPTIONAL } sb_mp_need;
int sb_mp_get_u64(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  uint64_t *out, char *err);
int sb_mp_get_int(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  int64_t lo, int64_t hi, int64_t *out, char *err);
int sb_mp_get_num(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  double lo, double hi, double *out, char *err);  /* NaN rejected */
int sb_mp_get_bool(const sb_mp_obj *map, const char *key, sb_mp_need need,
                   bool *out, char *err);
int sb_mp_get_str(const sb_mp_obj *map, const char *key, sb_mp_need need,
                  const char **s, size_t *len, char *err);
/* type must be SB_MP_ARRAY or SB_MP_MAP. */
int sb_mp_get_container(const sb_mp_obj *map, const char *key, sb_mp_need need,
                        sb_mp_type type, const sb_mp_obj **out, char *err);
/* SB_EINVAL naming the first key of `map` that is not a string or not in the
 * NULL-terminated `allowed` list. Strict params catch client typos. */
int sb_mp_check_keys(const sb_mp_obj *map, const char *const *allowed, char *err);

/* =========================================================== frames ==== */

/* Take one frame from the front of buf[0..len).
 *   1          a frame: *out holds it, *consumed its size with the header
 *   0          not enough bytes yet (*consumed = 0)
 *   SB_ERANGE  the length prefix exceeds max_frame (decided from the 4 bytes
 *              alone, nothing allocated); the stream cannot be resynchronised
 *   SB_EFORMAT the payload is not one msgpack object (*consumed = its size)
 *   SB_ENOMEM */
int sb_ipc_frame_parse(const void *buf, size_t len, size_t max_frame,
                       size_t *consumed, sb_mp_doc **out, char *err);
/* The same on an evbuffer, draining what it consumed (incremental: call it
 * in a loop until it returns <= 0). */
int sb_ipc_frame_take(struct evbuffer *in, size_t max_frame, sb_mp_doc **out, char *err);

typedef enum { SB_IPC_MSG_REQUEST = 1, SB_IPC_MSG_EVENT, SB_IPC_MSG_RESPONSE } sb_ipc_msg_kind;

/* A parsed envelope; strings and objects point into the doc. */
typedef struct {
    sb_ipc_msg_kind kind;
    uint64_t id;
    const char *method;         /* request */
    const sb_mp_obj *params;    /* request: a map, NULL when absent */
    const char *event;          /* event */
    const sb_mp_obj *data;      /* event: NULL when absent */
    bool ok;                    /* response */
    const sb_mp_obj *result;    /* ok response: NULL when absent */
    const char *code;           /* error response */
    const char *message;        /* error response */
} sb_ipc_msg;

/* Strict: the root must be a map with exactly the keys of one message kind,
 * each of its type. SB_EINVAL + err on anything else; out->id is still set
 * when a valid id was read, so the error reply can carry it. Request ids are
 * >= 1: id 0 marks replies to frames whose id could not be read. */
int sb_ipc_msg_parse(const sb_mp_doc *doc, sb_ipc_msg *out, char *err);

/* Encode one whole frame into w (reset first). A NULL params/data/result
 * writer encodes as {} / nil / nil. A writer that does not hold exactly one
 * msgpack object is SB_EINVAL (it would corrupt the stream). SB_ERANGE when
 * the frame exceeds max_frame. */
int sb_ipc_encode_request(sb_mp_writer *w, size_t max_frame, uint64_t id,
                          const char *method, const sb_mp_writer *params);
int sb_ipc_encode_event(sb_mp_writer *w, size_t max_frame, uint64_t id,
                        const char *event, const sb_mp_writer *data);
int sb_ipc_encode_ok(sb_mp_writer *w, size_t max_frame, uint64_t id,
                     const sb_mp_writer *result);
int sb_ipc_encode_error(sb_mp_writer *w, size_t max_frame, uint64_t id,
                        const char *code, const char *message);

/* ============================================================ server ==== */

typedef struct sb_ipc_server sb_ipc_server;
/* One request in flight. Owned by the handler from dispatch until it sends
 * the final response (sb_ipc_reply_ok / _error), which frees it. The final
 * response must always be sent, also after a cancel or disconnect (it is then
 * dropped): that is what releases the request. */
typedef struct sb_ipc_reply sb_ipc_reply;

/* Called on the loop thread. `params` (a map; {} when the request had none)
 * stays valid until the final response is sent, so a handler may keep it and
 * finish on another thread. */
typedef void (*sb_ipc_handler_fn)(void *ud, sb_ipc_reply *reply,
                                  const char *method, const sb_mp_obj *params);

typedef struct {
    const char *name;
    sb_ipc_handler_fn fn;
} sb_ipc_method;

typedef struct {
    const char *path;               /* Unix socket path (< 108 bytes) */
    const sb_ipc_method *methods;   /* others get unknown_method */
    size_t n_methods;
    void *ud;                       /* passed to every handler */
    size_t max_frame;               /* 0: SB_IPC_MAX_FRAME_DEFAULT */
    size_t max_output;              /* per connection; 0: max_frame + 1 MiB */
    size_t max_inflight;            /* per connection; 0: 1024 */
} sb_ipc_server_opts;

/* Use this (or call evthread_use_pthreads() first) to make a base that other
 * threads may also poke. The server itself does not need it: replies from
 * other threads reach the loop through an eventfd. */
struct event_base *sb_ipc_base_new(void);

/* Listen on opts->path: refuses a path that exists and is not a socket, or
 * whose socket still has a live server (SB_EBUSY); unlinks a stale one. The
 * socket file is created 0600 and only peers with our effective uid
 * (SO_PEERCRED) are served; others are closed at once. The built-in method
 * "cancel" {"id": N} cancels request N of the same connection. Also ignores
 * SIGPIPE process-wide: a write to a vanished client must be an error. */
int  sb_ipc_server_new(struct event_base *base, const sb_ipc_server_opts *opts,
                       sb_ipc_server **out, char *err);
/* Stop accepting and remove the socket file; existing connections go on
 * (graceful drain). */
void sb_ipc_server_stop_listening(sb_ipc_server *s);
size_t sb_ipc_server_inflight(const sb_ipc_server *s);  /* requests not yet answered */
size_t sb_ipc_server_connections(const sb_ipc_server *s);
/* Close every connection (their requests are cancelled), remove the socket.
 * Replies still held by handlers stay valid: their calls become no-ops that
 * only free them. Call on the loop thread; libevent closes the sockets the
 * next time the loop runs or when the base is freed. */
void sb_ipc_server_free(sb_ipc_server *s);

/* Reply functions: safe from any thread; they queue the frame for the loop.
 * Return 0, SB_ECANCEL when the request was cancelled or its client is gone
 * (the handler should stop working; the final response is still required),
 * SB_EINVAL for a writer that is not one object (an internal error is sent
 * instead for final responses), SB_ENOMEM. */
int  sb_ipc_reply_event(sb_ipc_reply *r, const char *event, const sb_mp_writer *data);
int  sb_ipc_reply_ok(sb_ipc_reply *r, const sb_mp_writer *result);     /* final */
int  sb_ipc_reply_error(sb_ipc_reply *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));                             /* final */
bool sb_ipc_reply_cancelled(const sb_ipc_reply *r);     /* any thread */
/* Called once, on the loop thread, when the client sends cancel for this id
 * or disconnects. Register it inside the handler (on the loop thread). It is
 * never called once the final response has been sent (and a final response
 * sent from another thread waits for a callback already running), so after
 * sb_ipc_reply_ok/_error returns the handler may free what `arg` points to. */
typedef void (*sb_ipc_cancel_fn)(void *arg, sb_ipc_reply *r);
void sb_ipc_reply_on_cancel(sb_ipc_reply *r, sb_ipc_cancel_fn fn, void *arg);
/* fn(arg) runs once, on the thread that sends the final response, just
 * before that response is queued: a server that counts its busy slots frees
 * the slot there, so a client that sends its next request the moment it
 * reads this response never finds the slot still taken. Set it from the
 * thread that will answer, before answering. */
typedef void (*sb_ipc_final_fn)(void *arg);
void sb_ipc_reply_on_final(sb_ipc_reply *r, sb_ipc_final_fn fn, void *arg);

/* ==================================================== blocking client == */

typedef struct sb_ipc_client sb_ipc_client;

/* The final response of a call. Pointers live until sb_ipc_result_free. */
typedef struct {
    uint64_t id;
    bool ok;
    const sb_mp_obj *result;    /* ok: NULL when the server sent none */
    const char *code;           /* !ok */
    const char *message;        /* !ok */
    sb_mp_doc *doc;             /* owns the memory */
} sb_ipc_result;
void sb_ipc_result_free(sb_ipc_result *res);

/* Connect, retrying while the socket is missing or refusing for up to
 * timeout_ms (0: try once) - so "wait for a worker to come up" is one call.
 * SB_EIO / SB_ETIMEOUT / SB_EINVAL (+ err). */
int  sb_ipc_client_connect(const char *path, int timeout_ms, sb_ipc_client **out, char *err);
void sb_ipc_client_close(sb_ipc_client *c);                 /* NULL ok */

/* Return 0 to go on, non-zero to cancel the call (a cancel is sent and the
 * call still waits for the final response). */
typedef int (*sb_ipc_event_fn)(void *arg, const char *event, const sb_mp_obj *data);

/* Send one request and wait for its final response; events for it go to
 * on_event (NULL: ignored). timeout_ms bounds the whole call (<= 0: none).
 *   0           *res holds the response (check res->ok)
 *   SB_ETIMEOUT a cancel was sent; the connection stays usable
 *   SB_EIO      the connection is closed or broken (later calls fail too)
 *   SB_EFORMAT  the server sent an undecodable frame (connection closed)
 * params: a writer holding one map, or NULL for {}. */
int  sb_ipc_call(sb_ipc_client *c, const char *method, const sb_mp_writer *params,
                 int timeout_ms, sb_ipc_event_fn on_event, void *arg,
                 sb_ipc_result *res, char *err);

/* =============================================== non-blocking client == */

typedef struct sb_ipc_aclient sb_ipc_aclient;

typedef void (*sb_ipc_aevent_fn)(void *arg, uint64_t id, const char *event,
                                 const sb_mp_obj *data);
/* The final outcome of a call, exactly once. res->doc is NULL and pointers
 * live only during the callback. Local failures look like error responses
 * with code SB_IPC_DISCONNECTED or SB_IPC_TIMEOUT. */
typedef void (*sb_ipc_adone_fn)(void *arg, uint64_t id, const sb_ipc_result *res);

/* No I/O yet: it connects on the first call, and again on the first call
 * after the connection was lost (so a restarted worker is picked up). */
int  sb_ipc_aclient_new(struct event_base *base, const char *path, size_t max_frame,
                        sb_ipc_aclient **out, char *err);
/* Drops the connection; outstanding calls get no callback. Safe inside a
 * callback of this client. */
void sb_ipc_aclient_free(sb_ipc_aclient *c);
/* Queue a request. 0 and *id_out: on_done will be called exactly once, from
 * the loop, never from inside this call. < 0 (SB_EIO when the socket cannot
 * be connected, SB_EINVAL, SB_ENOMEM): no callback will come.
 * timeout_ms <= 0: none. */
int  sb_ipc_aclient_call(sb_ipc_aclient *c, const char *method, const sb_mp_writer *params,
                         int timeout_ms, sb_ipc_aevent_fn on_event, sb_ipc_adone_fn on_done,
                         void *arg, uint64_t *id_out, char *err);
/* Forget call `id` (no more callbacks) and ask the server to stop it.
 * SB_ENOTFOUND if it already finished. */
int  sb_ipc_aclient_cancel(sb_ipc_aclient *c, uint64_t id);
size_t sb_ipc_aclient_pending(const sb_ipc_aclient *c);
bool sb_ipc_aclient_connected(const sb_ipc_aclient *c);

#endif
