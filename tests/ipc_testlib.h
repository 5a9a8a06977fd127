/* ipc_testlib.h - a real ipc server process and socket helpers, shared by
 * test_ipc.c and test_ipc_async.c (test code only: included, not linked).
 *
 * spawn_server() forks a child running its own event loop, with methods
 * that stream from compute threads, block until cancelled, flood, or report
 * counters ("stats"), so tests can observe cancellation from outside.
 */
#ifndef IPC_TESTLIB_H
#define IPC_TESTLIB_H
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/sb_ipc.h"

#define TESTLIB static __attribute__((unused))

/* ====================================================== the test server */

typedef struct {
    atomic_int cancelled;       /* slow requests that saw their cancel flag */
    atomic_int cancel_callbacks;
    atomic_int slot_busy;       /* "slot": one request at a time, like a worker */
    sb_ipc_server *srv;
} server_state;

typedef struct {
    sb_ipc_reply *reply;
    server_state *st;
    int64_t n, ms, size;
} job;

TESTLIB void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

TESTLIB void on_cancel(void *arg, sb_ipc_reply *r) {
    atomic_fetch_add(&((server_state *)arg)->cancel_callbacks, 1);
}

TESTLIB void m_echo(void *ud, sb_ipc_reply *r, const char *method, const sb_mp_obj *params) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_copy(w, params);
    sb_ipc_reply_ok(r, w);
    sb_mp_writer_free(w);
}

/* Streams n token events from a compute thread, then {"count": n}. */
TESTLIB void *stream_thread(void *arg) {
    job *j = arg;
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    int64_t sent = 0;
    for (; sent < j->n; sent++) {
        char text[32];
        snprintf(text, sizeof text, "t%lld", (long long)sent);
        sb_mp_writer_reset(w);
        sb_mp_map(w, 2);
        sb_mp_kv_str(w, "text", text);
        sb_mp_kv_i64(w, "token", sent);
        if (sb_ipc_reply_event(j->reply, "token", w) == SB_ECANCEL) break;
        if (j->ms) sleep_ms((int)j->ms);
    }
    if (sent < j->n) {
        atomic_fetch_add(&j->st->cancelled, 1);
        sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled after %lld tokens", (long long)sent);
    } else {
        sb_mp_writer_reset(w);
        sb_mp_map(w, 1);
        sb_mp_kv_i64(w, "count", sent);
        sb_ipc_reply_ok(j->reply, w);
    }
    sb_mp_writer_free(w);
    sb_free(j);
    return NULL;
}

/* Events of `size` bytes as fast as possible: for the output bound. */
TESTLIB void *flood_thread(void *arg) {
    job *j = arg;
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    char *blob = sb_calloc(1, (size_t)j->size);
    int64_t i = 0;
    for (; i < j->n; i++) {
        sb_mp_writer_reset(w);
        sb_mp_bin(w, blob, (size_t)j->size);
        if (sb_ipc_reply_event(j->reply, "blob", w) == SB_ECANCEL) break;
    }
    if (i < j->n) atomic_fetch_add(&j->st->cancelled, 1);
    sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "stopped");
    sb_free(blob);
    sb_mp_writer_free(w);
    sb_free(j);
    return NULL;
}

/* Waits up to ms, polling the cancel flag like a generation loop would. */
TESTLIB void *slow_thread(void *arg) {
    job *j = arg;
    int64_t t = 0;
    while (t < j->ms && !sb_ipc_reply_cancelled(j->reply)) { sleep_ms(5); t += 5; }
    if (sb_ipc_reply_cancelled(j->reply)) {
        atomic_fetch_add(&j->st->cancelled, 1);
        sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled");
    } else {
        sb_ipc_reply_ok(j->reply, NULL);
    }
    sb_free(j);
    return NULL;
}

TESTLIB void start_job(server_state *st, sb_ipc_reply *r, const sb_mp_obj *params,
                      void *(*fn)(void *)) {
    char err[SB_ERR_LEN];
    job *j = sb_calloc(1, sizeof *j);
    j->reply = r;
    j->st = st;
    j->size = 16;
    if (sb_mp_get_int(params, "n", SB_MP_OPTIONAL, 0, 1000000, &j->n, err) ||
        sb_mp_get_int(params, "ms", SB_MP_OPTIONAL, 0, 60000, &j->ms, err) ||
        sb_mp_get_int(params, "size", SB_MP_OPTIONAL, 1, 1 << 20, &j->size, err)) {
        sb_ipc_reply_error(r, SB_IPC_INVALID_REQUEST, "params.%s", err);
        sb_free(j);
        return;
    }
    sb_ipc_reply_on_cancel(r, on_cancel, st);
    pthread_t t;
    pthread_create(&t, NULL, fn, j);
    pthread_detach(t);
}

/* A worker's compute thread: answer, then tidy up for a while before it
 * marks its slot free again. The slot is freed by the final-response hook,
 * so a client that asks again the moment it has the answer finds it free. */
TESTLIB void slot_free(void *arg) { atomic_store(&((server_state *)arg)->slot_busy, 0); }
TESTLIB void *slot_thread(void *arg) {
    job *j = arg;
    server_state *st = j->st;
    sb_ipc_reply_on_final(j->reply, slot_free, st);
    sb_ipc_reply_ok(j->reply, NULL);
    sb_free(j);
    sleep_ms(20);
    slot_free(st);
    return NULL;
}
TESTLIB void m_slot(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) {
    server_state *st = ud;
    if (atomic_exchange(&st->slot_busy, 1)) {
        sb_ipc_reply_error(r, SB_IPC_BUSY, "slot taken");
        return;
    }
    start_job(st, r, p, slot_thread);
}

TESTLIB void m_stream(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) { start_job(ud, r, p, stream_thread); }
TESTLIB void m_slow(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p)   { start_job(ud, r, p, slow_thread); }
TESTLIB void m_flood(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p)  { start_job(ud, r, p, flood_thread); }

TESTLIB void m_stats(void *ud, sb_ipc_reply *r, const char *method, const sb_mp_obj *params) {
    server_state *st = ud;
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 4);
    sb_mp_kv_i64(w, "cancelled", atomic_load(&st->cancelled));
    sb_mp_kv_i64(w, "cancel_callbacks", atomic_load(&st->cancel_callbacks));
    sb_mp_kv_u64(w, "connections", sb_ipc_server_connections(st->srv));
    sb_mp_kv_u64(w, "inflight", sb_ipc_server_inflight(st->srv) - 1);  /* not this one */
    sb_ipc_reply_ok(r, w);
    sb_mp_writer_free(w);
}

/* A map that claims two pairs but holds one: must not reach the wire. */
TESTLIB void m_badresult(void *ud, sb_ipc_reply *r, const char *method, const sb_mp_obj *params) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 2);
    sb_mp_kv_i64(w, "a", 1);
    sb_ipc_reply_ok(r, w);
    sb_mp_writer_free(w);
}

TESTLIB const sb_ipc_method methods[] = {
    { "echo", m_echo }, { "stream", m_stream }, { "slow", m_slow },
    { "flood", m_flood }, { "stats", m_stats }, { "badresult", m_badresult }, { "slot", m_slot },
};

TESTLIB void on_term(evutil_socket_t fd, short what, void *arg) { event_base_loopbreak(arg); }

TESTLIB pid_t spawn_server(const char *path) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    sb_log_setup("test-server", SB_LOG_ERROR);
    struct event_base *base = sb_ipc_base_new();
    server_state st = { 0 };
    sb_ipc_server_opts o = {
        .path = path, .methods = methods, .n_methods = SB_ARRAY_LEN(methods), .ud = &st,
        .max_output = 1u << 20, .max_inflight = 64,
    };
    char err[SB_ERR_LEN];
    if (sb_ipc_server_new(base, &o, &st.srv, err)) {
        fprintf(stderr, "test server: %s\n", err);
        _exit(3);
    }
    struct event *term = evsignal_new(base, SIGTERM, on_term, base);
    event_add(term, NULL);
    event_base_dispatch(base);
    event_free(term);
    sb_ipc_server_free(st.srv);
    event_base_free(base);
    exit(0);                    /* not _exit: let LeakSanitizer check the server */
}

/* ============================================================== fixture */

static char g_dir[64], g_path[128];
static pid_t g_pid;
static pid_t g_extra_pid;       /* a test's own server, reaped by teardown if it fails */

TESTLIB void stop_server(pid_t pid, bool expect_alive) {
    /* Kill first, assert after: a failing test must not leave an orphan. */
    int status = 0, term_status = 0;
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == 0) {
        kill(pid, SIGTERM);
        if (waitpid(pid, &term_status, 0) != pid) term_status = -1;
    }
    if (expect_alive && w != 0)
        fprintf(stderr, "server died: %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    if (expect_alive) {
        assert_int_equal(w, 0);
        assert_true(WIFEXITED(term_status) && WEXITSTATUS(term_status) == 0);
    }
}

TESTLIB int group_setup(void **state) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sb-ipc-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/w.sock", g_dir);
    g_pid = spawn_server(g_path);
    sb_ipc_client *c;
    char err[SB_ERR_LEN];
    if (sb_ipc_client_connect(g_path, 5000, &c, err)) { fprintf(stderr, "%s\n", err); return -1; }
    sb_ipc_client_close(c);
    return 0;
}

TESTLIB int group_teardown(void **state) {
    if (g_extra_pid > 0) { kill(g_extra_pid, SIGKILL); waitpid(g_extra_pid, NULL, 0); }
    stop_server(g_pid, true);
    struct stat st;
    int gone = stat(g_path, &st) != 0;  /* the server removes its socket */
    rmdir(g_dir);
    return gone ? 0 : -1;
}

/* ============================================================== helpers */

TESTLIB int raw_connect(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

TESTLIB void raw_write(int fd, const void *p, size_t n) {
    if (n == 0) return;         /* the peer may already have hung up */
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Read one frame (or EOF: returns NULL) within timeout_ms; fails on timeout. */
TESTLIB sb_mp_doc *raw_read_frame(int fd, int timeout_ms) {
    static char buf[1 << 16];
    size_t have = 0;
    for (;;) {
        size_t used;
        sb_mp_doc *doc;
        int rc = sb_ipc_frame_parse(buf, have, sizeof buf, &used, &doc, NULL);
        assert_true(rc >= 0);
        if (rc == 1) { assert_int_equal(used, have); return doc; }   /* one frame at a time */
        struct pollfd p = { fd, POLLIN, 0 };
        assert_int_equal(poll(&p, 1, timeout_ms), 1);
        ssize_t r = recv(fd, buf + have, 1, 0);     /* byte by byte: never over-read */
        if (r <= 0) { assert_int_equal(have, 0); return NULL; }
        have += (size_t)r;
    }
}

TESTLIB void expect_eof(int fd, int timeout_ms) {
    struct pollfd p = { fd, POLLIN, 0 };
    assert_int_equal(poll(&p, 1, timeout_ms), 1);
    char b;
    assert_int_equal(recv(fd, &b, 1, 0), 0);
}

/* The next frame must be an error response with this id and code. */
TESTLIB void expect_error(int fd, uint64_t id, const char *code) {
    sb_mp_doc *doc = raw_read_frame(fd, 2000);
    assert_non_null(doc);
    sb_ipc_msg m;
    assert_int_equal(sb_ipc_msg_parse(doc, &m, NULL), 0);
    assert_int_equal(m.kind, SB_IPC_MSG_RESPONSE);
    assert_false(m.ok);
    assert_int_equal(m.id, id);
    assert_string_equal(m.code, code);
    sb_mp_doc_free(doc);
}

TESTLIB void send_request(int fd, uint64_t id, const char *method) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    assert_int_equal(sb_ipc_encode_request(w, SB_IPC_MAX_FRAME_DEFAULT, id, method, NULL), 0);
    size_t n;
    const void *p = sb_mp_writer_data(w, &n);
    raw_write(fd, p, n);
    sb_mp_writer_free(w);
}

/* Send a raw msgpack payload with a correct length prefix. */
#define SEND_LIT(fd, lit) send_payload(fd, lit, sizeof lit - 1)
TESTLIB void send_payload(int fd, const void *p, size_t n) {
    unsigned char h[4] = { (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                           (unsigned char)(n >> 8), (unsigned char)n };
    raw_write(fd, h, 4);
    raw_write(fd, p, n);
}

TESTLIB int64_t stat_of(const char *key) {
    sb_ipc_client *c;
    sb_ipc_result res;
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, NULL), 0);
    assert_int_equal(sb_ipc_call(c, "stats", NULL, 2000, NULL, NULL, &res, NULL), 0);
    assert_true(res.ok);
    int64_t v = -1;
    assert_int_equal(sb_mp_get_int(res.result, key, SB_MP_REQUIRED, 0, INT64_MAX, &v, NULL), 0);
    sb_ipc_result_free(&res);
    sb_ipc_client_close(c);
    return v;
}

/* Wait until stat `key` reaches at least `want` (the server acts on its own time). */
TESTLIB void wait_stat(const char *key, int64_t want, bool at_most) {
    for (int i = 0; i < 200; i++) {
        int64_t v = stat_of(key);
        if (at_most ? v <= want : v >= want) return;
        sleep_ms(10);
    }
    fail_msg("stat %s never reached %lld", key, (long long)want);
}

/* A fresh connection and an echo round trip: the server is still serving. */
TESTLIB void assert_serving(void) {
    sb_ipc_client *c;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, err), 0);
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 1);
    sb_mp_kv_str(w, "hello", "world");
    sb_ipc_result res;
    assert_int_equal(sb_ipc_call(c, "echo", w, 2000, NULL, NULL, &res, err), 0);
    assert_true(res.ok);
    const char *s;
    assert_int_equal(sb_mp_get_str(res.result, "hello", SB_MP_REQUIRED, &s, NULL, NULL), 0);
    assert_string_equal(s, "world");
    sb_ipc_result_free(&res);
    sb_mp_writer_free(w);
    sb_ipc_client_close(c);
}


#endif
