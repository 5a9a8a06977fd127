/* tool.c - tool stages: an external command or an HTTP call, with a timeout.
 *
 * A command runs without a shell (argv from the stage's templates, so a
 * caller's text can never become shell syntax), gets the stage's input on
 * stdin and its stdout (up to TOOL_MAX_OUTPUT) is the stage's output; the
 * exit status decides success. Pipes are non-blocking and watched by the
 * loop; a child that outlives its timeout is killed. An HTTP tool POSTs the
 * input (or GETs) with evhttp's client and takes the body of a 2xx reply.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "router_internal.h"

#define TOOL_MAX_OUTPUT (1u << 20)  /* a lookup answer is a few KB; more is a runaway tool */

extern char **environ;

struct rt_tool {
    rt *r;
    rt_tool_done_fn done;
    void *arg;
    /* command */
    pid_t pid;
    int in_fd, out_fd;
    struct event *in_ev, *out_ev, *reap_ev, *timer;
    char *input;
    size_t input_len, input_off;
    bool out_eof, timed_out, finished;
    int status;
    /* http */
    struct evhttp_connection *conn;
    bool cancelled;
    /* both */
    char *out;
    size_t out_len;
    char err[SB_ERR_LEN];
};

static void tool_free(rt_tool *t) {
    if (t->in_ev) event_free(t->in_ev);
    if (t->out_ev) event_free(t->out_ev);
    if (t->reap_ev) event_free(t->reap_ev);
    if (t->timer) event_free(t->timer);
    if (t->in_fd >= 0) close(t->in_fd);
    if (t->out_fd >= 0) close(t->out_fd);
    sb_free(t->input);
    sb_free(t->out);
    sb_free(t);
}

static int append(rt_tool *t, const char *p, size_t n) {
    if (t->out_len + n > TOOL_MAX_OUTPUT) return -1;
    char *o = sb_realloc(t->out, t->out_len + n + 1);
    if (!o) return -1;
    memcpy(o + t->out_len, p, n);
    t->out = o;
    t->out_len += n;
    t->out[t->out_len] = '\0';
    return 0;
}

static void complete(rt_tool *t, int rc) {
    t->finished = true;
    t->done(t->arg, rc, t->out ? t->out : "", t->out_len, rc ? t->err : NULL);
    tool_free(t);
}

/* ------------------------------------------------------------ command */

static void try_reap(evutil_socket_t fd, short what, void *arg) {
    rt_tool *t = arg;
    int st;
    pid_t p = waitpid(t->pid, &st, WNOHANG);
    if (p == 0) {
        /* stdout closed but not exited yet: look again shortly. */
        struct timeval tv = { 0, 5000 };
        evtimer_add(t->reap_ev, &tv);
        return;
    }
    int rc = 0;
    if (t->timed_out) rc = SB_ETIMEOUT;
    else if (p < 0) { snprintf(t->err, sizeof t->err, "waitpid: %s", strerror(errno)); rc = SB_EIO; }
    else if (WIFSIGNALED(st)) { snprintf(t->err, sizeof t->err, "tool killed by signal %d", WTERMSIG(st)); rc = SB_EIO; }
    else if (WEXITSTATUS(st)) { snprintf(t->err, sizeof t->err, "tool exited with status %d", WEXITSTATUS(st)); rc = SB_EIO; }
    complete(t, rc);
}

static void on_out(evutil_socket_t fd, short what, void *arg) {
    rt_tool *t = arg;
    char buf[16384];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            if (append(t, buf, (size_t)n)) {
                snprintf(t->err, sizeof t->err, "tool output exceeds %u bytes", TOOL_MAX_OUTPUT);
                kill(t->pid, SIGKILL);
                break;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        break;
    }
    event_del(t->out_ev);
    t->out_eof = true;
    try_reap(-1, 0, t);
}

static void on_in(evutil_socket_t fd, short what, void *arg) {
    rt_tool *t = arg;
    while (t->input_off < t->input_len) {
        ssize_t n = write(fd, t->input + t->input_off, t->input_len - t->input_off);
        if (n > 0) { t->input_off += (size_t)n; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        break;              /* EPIPE: the tool does not read its stdin; fine */
    }
    event_del(t->in_ev);
    close(t->in_fd);
    t->in_fd = -1;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
    rt_tool *t = arg;
    if (t->conn) {          /* http: evhttp reports the timeout itself */
        return;
    }
    t->timed_out = true;
    snprintf(t->err, sizeof t->err, "tool did not finish within its timeout");
    kill(t->pid, SIGKILL);
}

static int start_command(rt_tool *t, char *const *argv, int timeout_ms, char *err) {
    int in[2] = { -1, -1 }, out[2] = { -1, -1 };
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) {
        int e = errno;
        for (int i = 0; i < 2; i++) { if (in[i] >= 0) close(in[i]); if (out[i] >= 0) close(out[i]); }
        return sb_seterr(err, SB_EIO, "pipe: %s", strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    /* The child must not inherit the router's blocked or ignored signals
     * (SIGPIPE is ignored here). */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int e = posix_spawnp(&t->pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in[0]);
    close(out[1]);
    if (e) {
        close(in[1]);
        close(out[0]);
        return sb_seterr(err, SB_EIO, "cannot run tool '%s': %s", argv[0], strerror(e));
    }
    t->in_fd = in[1];
    t->out_fd = out[0];
    fcntl(t->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(t->out_fd, F_SETFL, O_NONBLOCK);
    t->in_ev = event_new(t->r->base, t->in_fd, EV_WRITE | EV_PERSIST, on_in, t);
    t->out_ev = event_new(t->r->base, t->out_fd, EV_READ | EV_PERSIST, on_out, t);
    t->reap_ev = evtimer_new(t->r->base, try_reap, t);
    t->timer = evtimer_new(t->r->base, on_timeout, t);
    if (!t->in_ev || !t->out_ev || !t->reap_ev || !t->timer) {
        kill(t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    evtimer_add(t->timer, &tv);
    event_add(t->out_ev, NULL);
    event_add(t->in_ev, NULL);
    return 0;
}

/* --------------------------------------------------------------- http */

static void on_http(struct evhttp_request *req, void *arg) {
    rt_tool *t = arg;
    struct evhttp_connection *conn = t->conn;
    int rc = 0;
    if (!req || !evhttp_request_get_response_code(req)) {
        snprintf(t->err, sizeof t->err, "HTTP tool: no answer (connection failed or timed out)");
        rc = SB_EIO;
    } else {
        int code = evhttp_request_get_response_code(req);
        struct evbuffer *b = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(b);
        if (n > TOOL_MAX_OUTPUT || append(t, (const char *)evbuffer_pullup(b, -1), n)) {
            snprintf(t->err, sizeof t->err, "HTTP tool: reply too large");
            rc = SB_EIO;
        } else if (code < 200 || code > 299) {
            snprintf(t->err, sizeof t->err, "HTTP tool: status %d", code);
            rc = SB_EIO;
        }
    }
    if (t->cancelled) tool_free(t);
    else complete(t, rc);
    /* Freed after this callback returns; evhttp frees the request itself. */
    evhttp_connection_free_on_completion(conn);
}

static int start_http(rt_tool *t, const char *url, bool post, const char *input, size_t len, int timeout_ms,
                      char *err) {
    struct evhttp_uri *u = evhttp_uri_parse(url);
    if (!u || !evhttp_uri_get_host(u)) {
        if (u) evhttp_uri_free(u);
        return sb_seterr(err, SB_EINVAL, "bad tool url '%s'", url);
    }
    const char *host = evhttp_uri_get_host(u), *path = evhttp_uri_get_path(u), *query = evhttp_uri_get_query(u);
    int port = evhttp_uri_get_port(u);
    char target[1024];
    snprintf(target, sizeof target, "%s%s%s", path && *path ? path : "/", query ? "?" : "", query ? query : "");
    t->conn = evhttp_connection_base_new(t->r->base, NULL, host, (ev_uint16_t)(port > 0 ? port : 80));
    struct evhttp_request *req = t->conn ? evhttp_request_new(on_http, t) : NULL;
    if (!req) {
        evhttp_uri_free(u);
        if (t->conn) evhttp_connection_free(t->conn);
        t->conn = NULL;
        return sb_seterr(err, SB_ENOMEM, "cannot create the HTTP request");
    }
    evhttp_connection_set_timeout(t->conn, (timeout_ms + 999) / 1000);
    evhttp_connection_set_retries(t->conn, 0);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", host);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Connection", "close");
    if (post) evbuffer_add(evhttp_request_get_output_buffer(req), input, len);
    evhttp_uri_free(u);
    if (evhttp_make_request(t->conn, req, post ? EVHTTP_REQ_POST : EVHTTP_REQ_GET, target)) {
        evhttp_connection_free(t->conn);
        t->conn = NULL;
        return sb_seterr(err, SB_EIO, "cannot send the HTTP request to %s", url);
    }
    return 0;
}

/* ------------------------------------------------------------------ api */

int rt_tool_start(rt *r, char *const *argv, const char *url, bool post, const char *input, size_t input_len,
                  int timeout_ms, rt_tool_done_fn done, void *arg, rt_tool **out, char *err) {
    *out = NULL;
    rt_tool *t = sb_calloc(1, sizeof *t);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    t->r = r;
    t->done = done;
    t->arg = arg;
    t->in_fd = t->out_fd = -1;
    t->input = sb_malloc(input_len + 1);
    if (!t->input) { sb_free(t); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    memcpy(t->input, input, input_len);
    t->input_len = input_len;
    int rc = url ? start_http(t, url, post, input, input_len, timeout_ms, err) : start_command(t, argv, timeout_ms, err);
    if (rc) {
        tool_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void rt_tool_cancel(rt_tool *t) {
    if (!t || t->finished) return;
    if (t->conn) {
        /* evhttp will still call on_http (error or timeout); free there. */
        t->cancelled = true;
        return;
    }
    kill(t->pid, SIGKILL);
    waitpid(t->pid, NULL, 0);       /* a SIGKILLed child is gone within microseconds */
    tool_free(t);
}
