/* aclient.c - non-blocking libevent client, many calls in flight (sb_ipc.h).
 *
 * Built for the router: one aclient per worker socket, shared by every HTTP
 * request. It connects on demand (a Unix connect() completes or fails at
 * once), so after a worker restart the next call simply reconnects. Every
 * accepted call ends in exactly one on_done: the response, or a local
 * "disconnected"/"timeout" error.
 *
 * Callbacks may call back into the client, including sb_ipc_aclient_free;
 * `depth` counts our frames on the stack and a free requested inside one is
 * carried out when the outermost returns.
 */
#include "ipc/sb_ipc.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct acall {
    struct acall *prev, *next;
    sb_ipc_aclient *c;
    uint64_t id;
    sb_ipc_aevent_fn on_event;
    sb_ipc_adone_fn on_done;
    void *arg;
    struct event *timer;
    uint64_t gen;               /* connection generation it was sent on */
} acall;

struct sb_ipc_aclient {
    struct event_base *base;
    char *path;
    size_t max_frame;
    struct bufferevent *bev;        /* NULL while disconnected */
    acall *calls;
    size_t n_calls;
    uint64_t next_id;
    uint64_t gen;               /* bumped on every disconnect */
    sb_mp_writer *w;
    int depth;
    bool free_pending;
};

static void client_destroy(sb_ipc_aclient *c);

static void enter(sb_ipc_aclient *c) { c->depth++; }

/* Returns false when the client was freed: the caller must not touch it. */
static bool leave(sb_ipc_aclient *c) {
    if (--c->depth == 0 && c->free_pending) { client_destroy(c); return false; }
    return !c->free_pending;
}

static void call_unlink(sb_ipc_aclient *c, acall *k) {
    if (k->prev) k->prev->next = k->next; else c->calls = k->next;
    if (k->next) k->next->prev = k->prev;
    k->prev = k->next = NULL;
    c->n_calls--;
}

static void call_free(acall *k) {
    if (k->timer) event_free(k->timer);
    sb_free(k);
}

static acall *find_call(sb_ipc_aclient *c, uint64_t id) {
    for (acall *k = c->calls; k; k = k->next)
        if (k->id == id) return k;
    return NULL;
}

/* Unlink, free, then report: the callback sees a client without this call. */
static void call_finish(sb_ipc_aclient *c, acall *k, const sb_ipc_result *res) {
    call_unlink(c, k);
    sb_ipc_adone_fn done = k->on_done;
    void *arg = k->arg;
    uint64_t id = k->id;
    call_free(k);
    if (done && !c->free_pending) done(arg, id, res);
}

static void fail_call(sb_ipc_aclient *c, acall *k, const char *code, const char *msg) {
    sb_ipc_result res = { .id = k->id, .ok = false, .code = code, .message = msg };
    call_finish(c, k, &res);
}

/* Drop the connection and fail every call that was sent on it. Calls made
 * from inside those callbacks belong to the next connection (a newer gen)
 * and are left alone; a cancel from inside one still finds its call. */
static void drop_connection(sb_ipc_aclient *c, const char *code, const char *why) {
    if (c->bev) bufferevent_free(c->bev);
    c->bev = NULL;
    uint64_t dead_gen = c->gen++;
    for (;;) {
        acall *k = c->calls;
        while (k && k->gen != dead_gen) k = k->next;
        if (!k || c->free_pending) break;
        fail_call(c, k, code, why);
    }
}

static void send_frame(sb_ipc_aclient *c) {
    size_t n;
    const void *p = sb_mp_writer_data(c->w, &n);
    if (c->bev && bufferevent_write(c->bev, p, n))
        sb_warn("ipc: %s: cannot queue %zu bytes", c->path, n);
}

static void send_cancel(sb_ipc_aclient *c, uint64_t target) {
    if (!c->bev) return;
    sb_mp_writer *p;
    if (sb_mp_writer_new(&p)) return;
    sb_mp_map(p, 1);
    sb_mp_kv_u64(p, "id", target);
    if (!sb_ipc_encode_request(c->w, c->max_frame, ++c->next_id, "cancel", p)) send_frame(c);
    sb_mp_writer_free(p);
}

static void handle_frame(sb_ipc_aclient *c, sb_mp_doc *doc) {
    sb_ipc_msg m;
    char err[SB_ERR_LEN];
    if (sb_ipc_msg_parse(doc, &m, err)) {
        sb_warn("ipc: %s: bad message from the server: %s", c->path, err);
        drop_connection(c, SB_IPC_DISCONNECTED, err);
        return;
    }
    if (m.kind == SB_IPC_MSG_RESPONSE && m.id == 0) {
        /* The server could not read one of our frames and is hanging up;
         * nothing on this connection can be trusted any more. */
        char why[SB_ERR_LEN];
        snprintf(why, sizeof why, "%s: %s", m.code ? m.code : "?", m.message ? m.message : "");
        drop_connection(c, SB_IPC_DISCONNECTED, why);
        return;
    }
    acall *k = find_call(c, m.id);
    if (!k || m.kind == SB_IPC_MSG_REQUEST) return;   /* cancelled, timed out, or cancel's answer */
    if (m.kind == SB_IPC_MSG_EVENT) {
        if (k->on_event) k->on_event(k->arg, m.id, m.event, m.data);
        return;
    }
    sb_ipc_result res = { .id = m.id, .ok = m.ok, .result = m.result,
                          .code = m.code, .message = m.message };
    call_finish(c, k, &res);
}

static void on_read(struct bufferevent *bev, void *arg) {
    sb_ipc_aclient *c = arg;
    enter(c);
    struct evbuffer *in = bufferevent_get_input(bev);
    /* Stop as soon as a callback freed the client or dropped this bev. */
    while (!c->free_pending && c->bev == bev) {
        sb_mp_doc *doc;
        char err[SB_ERR_LEN];
        int rc = sb_ipc_frame_take(in, c->max_frame, &doc, err);
        if (rc == 0) break;
        if (rc < 0) {
            sb_warn("ipc: %s: %s", c->path, err);
            drop_connection(c, SB_IPC_DISCONNECTED, err);
            break;
        }
        handle_frame(c, doc);
        sb_mp_doc_free(doc);
    }
    leave(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    sb_ipc_aclient *c = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
    enter(c);
    char why[SB_ERR_LEN];
    snprintf(why, sizeof why, "%s: %s", c->path,
             what & BEV_EVENT_EOF ? "connection closed by the server" : strerror(errno));
    drop_connection(c, SB_IPC_DISCONNECTED, why);
    leave(c);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
    acall *k = arg;
    sb_ipc_aclient *c = k->c;
    enter(c);
    send_cancel(c, k->id);
    fail_call(c, k, SB_IPC_TIMEOUT, "no response before the deadline");
    leave(c);
}

static int connect_now(sb_ipc_aclient *c, char *err) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, c->path);       /* length checked in _new */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return sb_seterr(err, SB_EIO, "socket: %s", strerror(errno));
    /* A Unix-domain connect never goes "in progress": it works or fails now
     * (EAGAIN means the server's backlog is full). */
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        int e = errno;
        close(fd);
        return sb_seterr(err, SB_EIO, "connect %s: %s", c->path, strerror(e));
    }
    c->bev = bufferevent_socket_new(c->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        close(fd);
        return sb_seterr(err, SB_ENOMEM, "bufferevent for %s", c->path);
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    return 0;
}

int sb_ipc_aclient_new(struct event_base *base, const char *path, size_t max_frame,
                       sb_ipc_aclient **out, char *err) {
    *out = NULL;
    struct sockaddr_un sa;
    if (!base || !path || strlen(path) >= sizeof sa.sun_path)
        return sb_seterr(err, SB_EINVAL, "%s: socket path missing or too long",
                         path ? path : "(null)");
    signal(SIGPIPE, SIG_IGN);       /* see sb_ipc_server_new */
    sb_ipc_aclient *c = sb_calloc(1, sizeof *c);
    if (!c || !(c->path = sb_strdup(path)) || sb_mp_writer_new(&c->w)) {
        if (c) sb_free(c->path);
        sb_free(c);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    c->base = base;
    c->max_frame = max_frame ? max_frame : SB_IPC_MAX_FRAME_DEFAULT;
    *out = c;
    return 0;
}

static void client_destroy(sb_ipc_aclient *c) {
    if (c->bev) bufferevent_free(c->bev);
    while (c->calls) {
        acall *k = c->calls;
        call_unlink(c, k);
        call_free(k);
    }
    sb_mp_writer_free(c->w);
    sb_free(c->path);
    sb_free(c);
}

void sb_ipc_aclient_free(sb_ipc_aclient *c) {
    if (!c) return;
    if (c->depth > 0) { c->free_pending = true; return; }
    client_destroy(c);
}

int sb_ipc_aclient_call(sb_ipc_aclient *c, const char *method, const sb_mp_writer *params,
                        int timeout_ms, sb_ipc_aevent_fn on_event_fn, sb_ipc_adone_fn on_done,
                        void *arg, uint64_t *id_out, char *err) {
    if (c->free_pending) return sb_seterr(err, SB_EINVAL, "client is being freed");
    if (!method || !on_done) return sb_seterr(err, SB_EINVAL, "method and on_done are required");
    int rc;
    if (!c->bev && (rc = connect_now(c, err))) return rc;
    uint64_t id = ++c->next_id;
    if ((rc = sb_ipc_encode_request(c->w, c->max_frame, id, method, params)))
        return sb_seterr(err, rc, "cannot encode request '%s': %s", method, sb_strerror(rc));
    acall *k = sb_calloc(1, sizeof *k);
    if (!k) return sb_seterr(err, SB_ENOMEM, "out of memory");
    *k = (acall){ .c = c, .id = id, .on_event = on_event_fn, .on_done = on_done, .arg = arg,
                      .gen = c->gen };
    if (timeout_ms > 0) {
        struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
        if (!(k->timer = evtimer_new(c->base, on_timeout, k)) || evtimer_add(k->timer, &tv)) {
            call_free(k);
            return sb_seterr(err, SB_ENOMEM, "cannot arm the call timer");
        }
    }
    size_t n;
    const void *p = sb_mp_writer_data(c->w, &n);
    if (bufferevent_write(c->bev, p, n)) {
        call_free(k);
        return sb_seterr(err, SB_ENOMEM, "cannot queue the request");
    }
    k->next = c->calls;
    if (c->calls) c->calls->prev = k;
    c->calls = k;
    c->n_calls++;
    if (id_out) *id_out = id;
    return 0;
}

int sb_ipc_aclient_cancel(sb_ipc_aclient *c, uint64_t id) {
    acall *k = find_call(c, id);
    if (!k) return SB_ENOTFOUND;
    call_unlink(c, k);
    call_free(k);
    send_cancel(c, id);
    return 0;
}

size_t sb_ipc_aclient_pending(const sb_ipc_aclient *c) { return c->n_calls; }
bool sb_ipc_aclient_connected(const sb_ipc_aclient *c) { return c->bev != NULL; }
