/* client.c - blocking client: one call at a time, poll() with a deadline.
 *
 * For the CLI (`switchboard ask`), the supervisor's readiness probe and the
 * tests. It needs no event loop; the router uses the libevent client in
 * aclient.c instead. Frames that belong to an earlier call (a late answer to
 * a call that timed out, the answer to our own cancel) are skipped by id, so
 * a timeout does not poison the connection.
 */
#include "ipc/sb_ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK          (64u << 10)
#define CONNECT_RETRY_MS    10
#define CANCEL_WRITE_MS     100     /* best effort: do not hang on a stuck server */

struct sb_ipc_client {
    int fd;
    bool broken;
    uint64_t next_id;
    size_t max_frame;
    sb_bytes in;                /* unread bytes are in.p[off..in.n) */
    size_t off;
    sb_mp_writer *w;
};

static int64_t now_ms(void) { return (int64_t)(sb_now_ns() / 1000000); }

/* Milliseconds left before deadline (-1: no deadline), clamped for poll(). */
static int remaining(int64_t deadline) {
    if (deadline < 0) return -1;
    int64_t left = deadline - now_ms();
    return left <= 0 ? 0 : left > 1 << 30 ? 1 << 30 : (int)left;
}

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

int sb_ipc_client_connect(const char *path, int timeout_ms, sb_ipc_client **out, char *err) {
    *out = NULL;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!path || strlen(path) >= sizeof sa.sun_path)
        return sb_seterr(err, SB_EINVAL, "%s: socket path missing or too long", path ? path : "(null)");
    strcpy(sa.sun_path, path);
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int fd, e;
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return sb_seterr(err, SB_EIO, "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) break;
        e = errno;
        close(fd);
        /* Missing or refusing: the server may still be starting. */
        bool transient = e == ENOENT || e == ECONNREFUSED || e == EAGAIN || e == EINTR;
        if (!transient)
            return sb_seterr(err, SB_EIO, "connect %s: %s", path, strerror(e));
        if (now_ms() >= deadline)
            return sb_seterr(err, timeout_ms > 0 ? SB_ETIMEOUT : SB_EIO, "connect %s: %s%s",
                             path, strerror(e), timeout_ms > 0 ? " (gave up waiting)" : "");
        sleep_ms(CONNECT_RETRY_MS);
    }
    sb_ipc_client *c = sb_calloc(1, sizeof *c);
    if (!c || sb_bytes_reserve(&c->in, READ_CHUNK) || sb_mp_writer_new(&c->w)) {
        if (c) sb_free(c->in.p);
        sb_free(c);
        close(fd);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    c->fd = fd;
    c->max_frame = SB_IPC_MAX_FRAME_DEFAULT;
    *out = c;
    return 0;
}

void sb_ipc_client_close(sb_ipc_client *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    sb_mp_writer_free(c->w);
    sb_free(c->in.p);
    sb_free(c);
}

void sb_ipc_result_free(sb_ipc_result *res) {
    if (!res) return;
    sb_mp_doc_free(res->doc);
    memset(res, 0, sizeof *res);
}

static int write_all(sb_ipc_client *c, const char *p, size_t n, int64_t deadline, char *err) {
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = { c->fd, POLLOUT, 0 };
            int t = remaining(deadline);
            int pr = poll(&pfd, 1, t);
            if (pr < 0 && errno == EINTR) continue;
            if (pr == 0) return sb_seterr(err, SB_ETIMEOUT, "timed out sending the request");
            if (pr < 0) break;
            continue;
        }
        break;
    }
    if (n == 0) return 0;
    c->broken = true;
    return sb_seterr(err, SB_EIO, "send: %s", strerror(errno));
}

/* Next frame from the server, waiting until deadline. */
static int read_frame(sb_ipc_client *c, int64_t deadline, sb_mp_doc **doc, char *err) {
    for (;;) {
        size_t used;
        int rc = sb_ipc_frame_parse(c->in.p + c->off, c->in.n - c->off, c->max_frame, &used, doc, err);
        if (rc == 1) { c->off += used; return 0; }
        if (rc < 0) { c->broken = true; return rc == SB_ENOMEM ? rc : SB_EFORMAT; }
        if (c->off > 0) {               /* compact before growing */
            memmove(c->in.p, c->in.p + c->off, c->in.n - c->off);
            c->in.n -= c->off;
            c->off = 0;
        }
        /* sb_bytes doubles: a large frame is read in O(size) copies, not
         * one realloc per READ_CHUNK. */
        if (sb_bytes_reserve(&c->in, READ_CHUNK))
            return sb_seterr(err, SB_ENOMEM, "out of memory reading a frame");
        ssize_t r = recv(c->fd, c->in.p + c->in.n, c->in.cap - c->in.n, 0);
        if (r > 0) { c->in.n += (size_t)r; continue; }
        if (r == 0) {
            c->broken = true;
            return sb_seterr(err, SB_EIO, "connection closed by the server");
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN) {
            c->broken = true;
            return sb_seterr(err, SB_EIO, "recv: %s", strerror(errno));
        }
        struct pollfd pfd = { c->fd, POLLIN, 0 };
        int pr = poll(&pfd, 1, remaining(deadline));
        if (pr == 0) return sb_seterr(err, SB_ETIMEOUT, "timed out waiting for the response");
        if (pr < 0 && errno != EINTR) {
            c->broken = true;
            return sb_seterr(err, SB_EIO, "poll: %s", strerror(errno));
        }
    }
}

static int send_cancel(sb_ipc_client *c, uint64_t target) {
    sb_mp_writer *p;
    if (sb_mp_writer_new(&p)) return SB_ENOMEM;
    sb_mp_map(p, 1);
    sb_mp_kv_u64(p, "id", target);
    int rc = sb_ipc_encode_request(c->w, c->max_frame, ++c->next_id, "cancel", p);
    sb_mp_writer_free(p);
    if (rc) return rc;
    size_t n;
    const char *f = sb_mp_writer_data(c->w, &n);
    return write_all(c, f, n, now_ms() + CANCEL_WRITE_MS, NULL);
}

int sb_ipc_call(sb_ipc_client *c, const char *method, const sb_mp_writer *params,
                int timeout_ms, sb_ipc_event_fn on_event, void *arg,
                sb_ipc_result *res, char *err) {
    memset(res, 0, sizeof *res);
    if (c->broken) return sb_seterr(err, SB_EIO, "connection is closed");
    int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : -1;
    uint64_t id = ++c->next_id;
    int rc = sb_ipc_encode_request(c->w, c->max_frame, id, method, params);
    if (rc) return sb_seterr(err, rc, "cannot encode request '%s': %s", method, sb_strerror(rc));
    size_t n;
    const char *frame = sb_mp_writer_data(c->w, &n);
    if ((rc = write_all(c, frame, n, deadline, err))) return rc;
    bool cancel_sent = false;
    for (;;) {
        sb_mp_doc *doc;
        rc = read_frame(c, deadline, &doc, err);
        if (rc == SB_ETIMEOUT) {
            send_cancel(c, id);
            return rc;
        }
        if (rc) return rc;
        sb_ipc_msg m;
        char perr[SB_ERR_LEN];
        if (sb_ipc_msg_parse(doc, &m, perr)) {
            sb_mp_doc_free(doc);
            c->broken = true;
            return sb_seterr(err, SB_EFORMAT, "bad frame from the server: %s", perr);
        }
        /* id 0: the server could not read one of our frames and is hanging
         * up; that is this call's answer. */
        bool ours = m.id == id || (m.id == 0 && m.kind == SB_IPC_MSG_RESPONSE);
        if (!ours || m.kind == SB_IPC_MSG_REQUEST) { sb_mp_doc_free(doc); continue; }
        if (m.kind == SB_IPC_MSG_EVENT) {
            if (on_event && on_event(arg, m.event, m.data) && !cancel_sent) {
                cancel_sent = true;
                send_cancel(c, id);
            }
            sb_mp_doc_free(doc);
            continue;
        }
        if (m.id == 0) c->broken = true;
        res->id = m.id;
        res->ok = m.ok;
        res->result = m.result;
        res->code = m.code;
        res->message = m.message;
        res->doc = doc;
        return 0;
    }
}
