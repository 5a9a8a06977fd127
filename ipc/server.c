/* server.c - the libevent side of the wire protocol (see sb_ipc.h).
 *
 * Threading. Everything here runs on the loop thread except the sb_ipc_reply_*
 * functions (reply.c), which compute threads call. Those encode their frame on the
 * calling thread and push it onto the hub: a mutex-protected FIFO plus an
 * eventfd that wakes the loop, which then writes the frames out in order.
 * One queue for all replies keeps a request's events and final response in
 * the order they were produced, whichever thread produced them.
 *
 * Ownership. A reply belongs to its handler until the final response is
 * queued; the loop frees it when it dequeues that response. A disconnect
 * only detaches replies from their connection (reply->conn = NULL) and
 * cancels them; their late frames are dropped. The hub is reference-counted
 * by the server and by every live reply, so a reply that outlives the server
 * can still be finished safely.
 *
 * Closing. A connection is never freed from inside one of our own loops over
 * its data (the read loop, the hub drain): we mark it dead and let close_ev
 * do the work from a clean stack.
 */
#include "ipc/reply_internal.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_MAX_INFLIGHT    1024
#define DEFAULT_MAX_CONNECTIONS 256     /* a worker has one router plus a few CLIs */
#define CLOSE_FLUSH_SECONDS     1       /* how long a goodbye error may take to drain */
#define ACCEPT_RETRY_MS         100     /* pause after EMFILE instead of spinning */

struct conn {
    conn *prev, *next;
    sb_ipc_server *srv;
    struct bufferevent *bev;
    struct event *close_ev;
    sb_ipc_reply *inflight;
    size_t n_inflight;
    bool dead;                  /* close scheduled: read nothing, send nothing */
    bool flushing;              /* a goodbye error is draining */
};

struct sb_ipc_server {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *accept_retry_ev;
    char *path;
    dev_t dev;
    ino_t ino;
    sb_ipc_method *methods;
    size_t n_methods;
    void *ud;
    size_t max_frame, max_output, max_inflight, max_connections;
    uid_t uid;
    conn *conns;
    size_t n_conns, n_inflight;
    hub *hub;
    struct event *wake_ev;
    sb_mp_writer *scratch;      /* loop-thread encoder */
    sb_mp_doc *empty_params;    /* {} for requests without params */
};

static void conn_close(conn *c);

struct event_base *sb_ipc_base_new(void) {
    evthread_use_pthreads();    /* idempotent with the same callbacks */
    return event_base_new();
}

/* ======================================================= connection I/O */

static void conn_schedule_close(conn *c) {
    if (c->dead) return;
    c->dead = true;
    bufferevent_disable(c->bev, EV_READ);
    event_active(c->close_ev, 0, 0);
}

/* Takes ownership of frame. Loop thread. */
static void conn_send(conn *c, void *frame, size_t len) {
    if (c->dead || c->flushing) { sb_free(frame); return; }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    /* One frame always fits an empty buffer, so no limit can make a valid
     * response unsendable; a backlog on top of unread output is the case. */
    size_t queued = evbuffer_get_length(out);
    if (queued > 0 && queued + len > c->srv->max_output) {
        sb_warn("ipc: client not reading (%zu bytes queued); closing its connection",
                evbuffer_get_length(out));
        sb_free(frame);
        conn_schedule_close(c);
        return;
    }
    if (evbuffer_add(out, frame, len)) conn_schedule_close(c);
    sb_free(frame);
}

static void conn_send_error(conn *c, uint64_t id, const char *code, const char *msg) {
    sb_mp_writer *w = c->srv->scratch;
    void *frame;
    size_t len;
    if (sb_ipc_encode_error(w, c->srv->max_frame, id, code, msg) ||
        sb_mp_writer_detach(w, &frame, &len)) {
        conn_schedule_close(c);
        return;
    }
    conn_send(c, frame, len);
}

/* Answer a frame we cannot make sense of, then hang up: after a bad length
 * or undecodable bytes there is no telling where the next frame starts. */
static void conn_fail(conn *c, const char *code, const char *msg) {
    sb_warn("ipc: %s: %s; closing the connection", code, msg);
    conn_send_error(c, 0, code, msg);
    if (c->dead) return;
    c->flushing = true;
    bufferevent_disable(c->bev, EV_READ);
    struct timeval tv = { CLOSE_FLUSH_SECONDS, 0 };
    event_add(c->close_ev, &tv);    /* also fired early by conn_write */
}

static sb_ipc_reply *find_inflight(conn *c, uint64_t id) {
    for (sb_ipc_reply *r = c->inflight; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

static void reply_cancel(sb_ipc_reply *r, int why) {
    int expected = NOT_CANCELLED;
    if (!atomic_compare_exchange_strong(&r->cancelled, &expected, why) && why == DISCONNECTED)
        atomic_store(&r->cancelled, DISCONNECTED);
    if (!r->cancel_fn || r->cancel_called) return;
    r->cb_thread = pthread_self();      /* published by the CAS below */
    int open = GUARD_OPEN;
    /* Fails when the final response is already queued: too late to cancel. */
    if (!atomic_compare_exchange_strong(&r->guard, &open, GUARD_IN_CALLBACK)) return;
    r->cancel_called = true;
    r->cancel_fn(r->cancel_arg, r);
    /* Fails (harmlessly) when the callback itself sent the final response. */
    int in_cb = GUARD_IN_CALLBACK;
    atomic_compare_exchange_strong(&r->guard, &in_cb, GUARD_OPEN);
}

static void handle_cancel(conn *c, const sb_ipc_msg *m) {
    static const char *const keys[] = { "id", NULL };
    char err[SB_ERR_LEN];
    uint64_t target = 0;
    if ((m->params && sb_mp_check_keys(m->params, keys, err)) ||
        sb_mp_get_u64(m->params, "id", SB_MP_REQUIRED, &target, err)) {
        char msg[SB_ERR_LEN + 16];
        snprintf(msg, sizeof msg, "params.%s", err);
        conn_send_error(c, m->id, SB_IPC_INVALID_REQUEST, msg);
        return;
    }
    sb_ipc_reply *r = find_inflight(c, target);
    if (r) reply_cancel(r, CANCEL_REQUESTED);
    sb_mp_writer *w = c->srv->scratch;
    void *frame;
    size_t len;
    /* The result needs its own writer: the frame is built in the scratch one. */
    sb_mp_writer *res = NULL;
    if (sb_mp_writer_new(&res)) { conn_schedule_close(c); return; }
    sb_mp_map(res, 1);
    sb_mp_kv_bool(res, "cancelled", r != NULL);
    int rc = sb_ipc_encode_ok(w, c->srv->max_frame, m->id, res);
    sb_mp_writer_free(res);
    if (rc || sb_mp_writer_detach(w, &frame, &len)) { conn_schedule_close(c); return; }
    conn_send(c, frame, len);
}

static const sb_ipc_method *find_method(const sb_ipc_server *s, const char *name) {
    for (size_t i = 0; i < s->n_methods; i++)
        if (!strcmp(s->methods[i].name, name)) return &s->methods[i];
    return NULL;
}

/* Takes ownership of doc. */
static void dispatch(conn *c, sb_mp_doc *doc) {
    sb_ipc_server *s = c->srv;
    sb_ipc_msg m;
    char err[SB_ERR_LEN];
    if (sb_ipc_msg_parse(doc, &m, err)) {
        conn_send_error(c, m.id, SB_IPC_INVALID_REQUEST, err);
        goto done;
    }
    if (m.kind != SB_IPC_MSG_REQUEST) {
        conn_send_error(c, m.id, SB_IPC_INVALID_REQUEST, "expected a request (a map with 'method')");
        goto done;
    }
    if (find_inflight(c, m.id)) {
        snprintf(err, sizeof err, "id %llu is already in flight", (unsigned long long)m.id);
        conn_send_error(c, m.id, SB_IPC_INVALID_REQUEST, err);
        goto done;
    }
    if (!strcmp(m.method, "cancel")) {
        handle_cancel(c, &m);
        goto done;
    }
    const sb_ipc_method *method = find_method(s, m.method);
    if (!method) {
        snprintf(err, sizeof err, "unknown method '%s'", m.method);
        conn_send_error(c, m.id, SB_IPC_UNKNOWN_METHOD, err);
        goto done;
    }
    if (c->n_inflight >= s->max_inflight) {
        snprintf(err, sizeof err, "%zu requests already in flight on this connection",
                 c->n_inflight);
        conn_send_error(c, m.id, SB_IPC_BUSY, err);
        goto done;
    }
    sb_ipc_reply *r = sb_calloc(1, sizeof *r);
    if (!r) {
        conn_send_error(c, m.id, SB_IPC_INTERNAL, "out of memory");
        goto done;
    }
    r->conn = c;
    r->id = m.id;
    r->max_frame = s->max_frame;
    r->doc = doc;
    r->hub = s->hub;
    atomic_init(&r->cancelled, NOT_CANCELLED);
    atomic_init(&r->finished, false);
    atomic_init(&r->guard, GUARD_OPEN);
    pthread_mutex_lock(&s->hub->mu);
    s->hub->refs++;
    pthread_mutex_unlock(&s->hub->mu);
    r->next = c->inflight;
    if (c->inflight) c->inflight->prev = r;
    c->inflight = r;
    c->n_inflight++;
    s->n_inflight++;
    const sb_mp_obj *params = m.params ? m.params : sb_mp_doc_root(s->empty_params);
    method->fn(s->ud, r, m.method, params);
    return;                     /* the reply owns doc now */
done:
    sb_mp_doc_free(doc);
}

static void conn_read(struct bufferevent *bev, void *arg) {
    conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (!c->dead && !c->flushing) {
        sb_mp_doc *doc;
        char err[SB_ERR_LEN];
        int rc = sb_ipc_frame_take(in, c->srv->max_frame, &doc, err);
        if (rc == 0) break;
        if (rc == SB_ERANGE) { conn_fail(c, SB_IPC_FRAME_TOO_LARGE, err); break; }
        if (rc == SB_ENOMEM) { conn_fail(c, SB_IPC_INTERNAL, err); break; }
        if (rc < 0) { conn_fail(c, SB_IPC_BAD_FRAME, err); break; }
        dispatch(c, doc);
    }
}

static void conn_write(struct bufferevent *bev, void *arg) {
    conn *c = arg;
    if (c->flushing && !c->dead) conn_schedule_close(c);
}

static void conn_event(struct bufferevent *bev, short what, void *arg) {
    conn *c = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) conn_schedule_close(c);
}

static void conn_close_cb(evutil_socket_t fd, short what, void *arg) {
    conn_close(arg);
}

/* Detach and cancel every request of c, then free it. */
static void conn_close(conn *c) {
    sb_ipc_server *s = c->srv;
    sb_ipc_reply *list = c->inflight;
    c->inflight = NULL;
    for (sb_ipc_reply *r = list, *next; r; r = next) {
        next = r->next;
        r->prev = r->next = NULL;
        r->conn = NULL;
        reply_cancel(r, DISCONNECTED);
    }
    if (c->prev) c->prev->next = c->next; else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    bufferevent_free(c->bev);
    event_free(c->close_ev);
    sb_free(c);
}

/* ================================================================ accept */

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *sa, int salen, void *arg) {
    sb_ipc_server *s = arg;
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) || clen != sizeof cred) {
        sb_warn("ipc: SO_PEERCRED failed (%s); refusing the connection", strerror(errno));
        close(fd);
        return;
    }
    if (cred.uid != s->uid) {
        sb_warn("ipc: refusing a connection from uid %u pid %d (we serve uid %u only)",
                (unsigned)cred.uid, (int)cred.pid, (unsigned)s->uid);
        close(fd);
        return;
    }
    if (s->n_conns >= s->max_connections) {
        sb_warn("ipc: %zu connections open; refusing pid %d", s->n_conns, (int)cred.pid);
        close(fd);
        return;
    }
    conn *c = sb_calloc(1, sizeof *c);
    if (!c) { close(fd); return; }
    c->srv = s;
    c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->close_ev = c->bev ? event_new(s->base, -1, 0, conn_close_cb, c) : NULL;
    if (!c->bev || !c->close_ev) {
        if (c->bev) bufferevent_free(c->bev); else close(fd);
        sb_free(c);
        return;
    }
    bufferevent_setcb(c->bev, conn_read, conn_write, conn_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    sb_debug("ipc: connection from pid %d", (int)cred.pid);
}

static void accept_retry(evutil_socket_t fd, short what, void *arg) {
    sb_ipc_server *s = arg;
    if (s->listener) evconnlistener_enable(s->listener);
}

/* Out of fds: the listening socket stays readable, so without a pause the
 * loop would spin on accept() failing. */
static void on_accept_error(struct evconnlistener *l, void *arg) {
    sb_ipc_server *s = arg;
    int e = errno;
    sb_warn("ipc: accept failed: %s; pausing %d ms", strerror(e), ACCEPT_RETRY_MS);
    evconnlistener_disable(l);
    struct timeval tv = { 0, ACCEPT_RETRY_MS * 1000 };
    evtimer_add(s->accept_retry_ev, &tv);
}

/* ================================================================ drain */

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    sb_ipc_server *s = arg;
    uint64_t n;
    ssize_t rd = read(fd, &n, sizeof n);
    (void)rd;
    pthread_mutex_lock(&s->hub->mu);
    qitem *it = s->hub->head;
    s->hub->head = s->hub->tail = NULL;
    pthread_mutex_unlock(&s->hub->mu);
    while (it) {
        qitem *next = it->next;
        sb_ipc_reply *r = it->reply;
        if (r->conn && it->frame) conn_send(r->conn, it->frame, it->len);
        else {
            sb_free(it->frame);
            /* A final answer we failed to encode: hanging up is the only way
             * left to tell the client it will not come. */
            if (it->final && r->conn) conn_schedule_close(r->conn);
        }
        if (it->final) {
            conn *c = r->conn;
            if (c) {
                if (r->prev) r->prev->next = r->next; else c->inflight = r->next;
                if (r->next) r->next->prev = r->prev;
                c->n_inflight--;
            }
            s->n_inflight--;
            sb_ipc_reply_destroy(r);
        } else {
            sb_free(it);
        }
        it = next;
    }
}

/* ============================================================ lifecycle */

/* Bind a Unix socket at path with mode 0600, replacing a stale one only. */
static int listen_unix(const char *path, int *out_fd, struct stat *st_out, char *err) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path)
        return sb_seterr(err, SB_EINVAL, "%s: socket path longer than %zu bytes",
                         path, sizeof sa.sun_path - 1);
    strcpy(sa.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return sb_seterr(err, SB_EINVAL, "%s: exists and is not a socket", path);
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (probe < 0) return sb_seterr(err, SB_EIO, "socket: %s", strerror(errno));
        int rc = connect(probe, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        close(probe);
        if (rc == 0 || e == EAGAIN)
            return sb_seterr(err, SB_EBUSY, "%s: another server is listening", path);
        if (e != ECONNREFUSED)
            return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(e));
        if (unlink(path) && errno != ENOENT)
            return sb_seterr(err, SB_EIO, "%s: cannot remove stale socket: %s", path, strerror(errno));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return sb_seterr(err, SB_EIO, "socket: %s", strerror(errno));
    /* Linux takes a socket file's mode from the umask at bind(); fchmod on
     * the fd does not apply. umask is per process, but narrowing it briefly
     * can only make a concurrent file more private, never less. */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc) { close(fd); return sb_seterr(err, SB_EIO, "bind %s: %s", path, strerror(e)); }
    if (chmod(path, 0600) || listen(fd, 128) || stat(path, st_out)) {
        e = errno;
        close(fd);
        unlink(path);
        return sb_seterr(err, SB_EIO, "listen %s: %s", path, strerror(e));
    }
    *out_fd = fd;
    return 0;
}

int sb_ipc_server_new(struct event_base *base, const sb_ipc_server_opts *o,
                      sb_ipc_server **out, char *err) {
    *out = NULL;
    if (!base || !o || !o->path)
        return sb_seterr(err, SB_EINVAL, "sb_ipc_server_new: missing base or path");
    signal(SIGPIPE, SIG_IGN);
    int rc = SB_ENOMEM, fd = -1;
    sb_ipc_server *s = sb_calloc(1, sizeof *s);
    if (!s) return sb_seterr(err, SB_ENOMEM, "out of memory");
    s->base = base;
    s->ud = o->ud;
    s->uid = geteuid();
    s->max_frame = o->max_frame ? o->max_frame : SB_IPC_MAX_FRAME_DEFAULT;
    s->max_output = o->max_output ? o->max_output : s->max_frame + (1u << 20);
    s->max_inflight = o->max_inflight ? o->max_inflight : DEFAULT_MAX_INFLIGHT;
    s->max_connections = DEFAULT_MAX_CONNECTIONS;
    s->n_methods = o->n_methods;
    if (!(s->path = sb_strdup(o->path))) goto fail;
    if (o->n_methods && !(s->methods = sb_calloc(o->n_methods, sizeof *s->methods))) goto fail;
    if (o->n_methods) memcpy(s->methods, o->methods, o->n_methods * sizeof *s->methods);
    if (sb_mp_writer_new(&s->scratch)) goto fail;
    if (sb_mp_decode("\x80", 1, &s->empty_params, err)) goto fail;
    if (!(s->hub = sb_calloc(1, sizeof *s->hub))) goto fail;
    s->hub->efd = -1;
    if (pthread_mutex_init(&s->hub->mu, NULL)) { sb_free(s->hub); s->hub = NULL; goto fail; }
    s->hub->refs = 1;
    s->hub->server_alive = true;
    if ((s->hub->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = sb_seterr(err, SB_EIO, "eventfd: %s", strerror(errno));
        goto fail;
    }
    s->wake_ev = event_new(base, s->hub->efd, EV_READ | EV_PERSIST, on_wake, s);
    s->accept_retry_ev = evtimer_new(base, accept_retry, s);
    if (!s->wake_ev || !s->accept_retry_ev || event_add(s->wake_ev, NULL)) goto fail;
    struct stat st;
    if ((rc = listen_unix(s->path, &fd, &st, err))) goto fail;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->listener = evconnlistener_new(base, on_accept, s,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (!s->listener) {
        close(fd);
        unlink(s->path);
        rc = sb_seterr(err, SB_EIO, "%s: cannot listen", s->path);
        goto fail;
    }
    evconnlistener_set_error_cb(s->listener, on_accept_error);
    *out = s;
    return 0;
fail:
    if (rc == SB_ENOMEM) sb_seterr(err, SB_ENOMEM, "out of memory");
    s->ino = 0;                 /* we did not create the socket: never unlink it */
    sb_ipc_server_free(s);
    return rc;
}

/* Unlink the socket only if it is still the one we bound: a newer server may
 * already own the path. */
static void unlink_own_socket(sb_ipc_server *s) {
    struct stat st;
    if (s->ino && s->path && stat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
        unlink(s->path);
    s->ino = 0;
}

void sb_ipc_server_stop_listening(sb_ipc_server *s) {
    if (s->listener) evconnlistener_free(s->listener);
    s->listener = NULL;
    if (s->accept_retry_ev) event_del(s->accept_retry_ev);
    unlink_own_socket(s);
}

size_t sb_ipc_server_inflight(const sb_ipc_server *s) { return s->n_inflight; }
size_t sb_ipc_server_connections(const sb_ipc_server *s) { return s->n_conns; }

void sb_ipc_server_free(sb_ipc_server *s) {
    if (!s) return;
    sb_ipc_server_stop_listening(s);
    while (s->conns) conn_close(s->conns);
    if (s->hub) {
        pthread_mutex_lock(&s->hub->mu);
        s->hub->server_alive = false;
        qitem *it = s->hub->head;
        s->hub->head = s->hub->tail = NULL;
        pthread_mutex_unlock(&s->hub->mu);
        while (it) {
            qitem *next = it->next;
            sb_free(it->frame);
            if (it->final) sb_ipc_reply_destroy(it->reply); else sb_free(it);
            it = next;
        }
    }
    if (s->wake_ev) event_free(s->wake_ev);
    if (s->accept_retry_ev) event_free(s->accept_retry_ev);
    if (s->hub) sb_ipc_hub_unref(s->hub);
    sb_mp_writer_free(s->scratch);
    sb_mp_doc_free(s->empty_params);
    sb_free(s->methods);
    sb_free(s->path);
    sb_free(s);
}
