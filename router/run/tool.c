/* tool.c - tool stages: an external command or an HTTP call, with a timeout.
 *
 * A command runs without a shell (argv from the stage's templates, so a
 * caller's text can never become shell syntax), gets the stage's input on
 * stdin and its stdout (up to TOOL_MAX_OUTPUT) is the stage's output; the
 * exit status decides success. Pipes are non-blocking and watched by the
 * loop. An HTTP tool POSTs the input (or GETs) with evhttp's client and
 * takes the body of a 2xx reply.
 *
 * Sandboxing (docs/operations.md): the child gets only an allowlisted
 * environment (PATH, LANG, LC_*, TZ, HOME) plus the stage's `env:`, never
 * the router's secrets; it leads its own process group, and that group is
 * SIGKILLed when the tool times out, is cancelled or exits, so grandchildren
 * end with it. Each stage is a gate: at most max_concurrent calls run, up to
 * max_queue wait (FIFO), and past that rt_tool_start says SB_EBUSY.
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

#include "router/run/sb_run.h"

#define TOOL_MAX_OUTPUT (1u << 20)  /* a lookup answer is a few KB; more is a runaway tool */
/* A command's arguments after substitution, all together. The kernel
 * refuses one argument over 128 KiB (MAX_ARG_STRLEN) and argv+envp over
 * ARG_MAX (a quarter of the stack limit, at least 128 KiB); staying under
 * 96 KiB leaves room for the environment whatever the limits, and turns
 * "Argument list too long" into an error that says where the text belongs. */
#define TOOL_MAX_ARGV (96u << 10)

extern char **environ;

/* The calls of one stage (key "pipeline/stage"): a semaphore with a FIFO.
 * Lives while a call of the stage runs or waits, so a reload that keeps the
 * stage keeps counting the calls already running. */
struct rt_tool_gate {
    struct rt_tool_gate *next;
    char *key;
    int running, waiting, max_running;
    bool pumping;
    rt_tool *head, *tail;
};

struct rt_tool {
    rt_exec *ex;
    rt_tool_done_fn done;
    void *arg;
    rt_tool_gate *gate;
    bool queued, running;           /* waiting in the gate's FIFO / holding a slot */
    rt_tool *qnext;
    /* what to start (copies, kept while queued) */
    char **argv, **env;             /* NULL-terminated */
    char *url;
    bool post;
    int timeout_ms;
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
    sb_jw out;                  /* stdout or the HTTP body, NUL-terminated */
    char err[SB_ERR_LEN];
};

static void gate_leave(rt_tool *t);

static void free_strv(char **v) {
    for (size_t i = 0; v && v[i]; i++) sb_free(v[i]);
    sb_free(v);
}

static void tool_free(rt_tool *t) {
    if (t->in_ev) event_free(t->in_ev);
    if (t->out_ev) event_free(t->out_ev);
    if (t->reap_ev) event_free(t->reap_ev);
    if (t->timer) event_free(t->timer);
    if (t->in_fd >= 0) close(t->in_fd);
    if (t->out_fd >= 0) close(t->out_fd);
    free_strv(t->argv);
    free_strv(t->env);
    sb_free(t->url);
    sb_free(t->input);
    sb_jw_free(&t->out);
    gate_leave(t);
    sb_free(t);
}

static int append(rt_tool *t, const char *p, size_t n) {
    if (t->out.len + n > TOOL_MAX_OUTPUT) return -1;
    sb_jw_raw(&t->out, p, n);
    return t->out.oom ? -1 : 0;
}

static void complete(rt_tool *t, int rc) {
    t->finished = true;
    t->done(t->arg, rc, t->out.p && !t->out.oom ? t->out.p : "", t->out.oom ? 0 : t->out.len, rc ? t->err : NULL);
    tool_free(t);
}

/* ------------------------------------------------------------ command */

/* The tool and whatever it started: the group the child leads. While the
 * leader is unreaped (a zombie at worst) its pid names only this group. */
static void kill_group(rt_tool *t) {
    if (t->pid > 0) kill(-t->pid, SIGKILL);
}

static void try_reap(evutil_socket_t fd, short what, void *arg) {
    rt_tool *t = arg;
    siginfo_t si = { 0 };
    /* WNOWAIT: see the exit but keep the zombie, so the group id cannot be
     * reused before the leftovers (a daemonised grandchild) are killed. */
    if (waitid(P_PID, (id_t)t->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0) {
        /* stdout closed but not exited yet: look again shortly. */
        struct timeval tv = { 0, 5000 };
        evtimer_add(t->reap_ev, &tv);
        return;
    }
    kill_group(t);
    int st;
    pid_t p = waitpid(t->pid, &st, 0);
    t->pid = 0;
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
                kill_group(t);
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
    kill_group(t);
}

static bool env_allowed(const char *kv) {
    static const char *const names[] = { "PATH=", "LANG=", "TZ=", "HOME=", "LC_" };
    for (size_t i = 0; i < SB_ARRAY_LEN(names); i++)
        if (!strncmp(kv, names[i], strlen(names[i]))) return true;
    return false;
}

/* The child's environment: the allowlisted part of ours, then the stage's
 * `env:` (which wins over an allowlisted variable of the same name). */
static char **tool_environ(char *const *extra) {
    size_t n = 0, k = 0;
    for (char **e = environ; e && *e; e++) n++;
    for (size_t i = 0; extra && extra[i]; i++) n++;
    char **v = sb_calloc(n + 1, sizeof *v);
    if (!v) return NULL;
    for (char **e = environ; e && *e; e++) {
        if (!env_allowed(*e)) continue;
        bool overridden = false;
        size_t nl = strcspn(*e, "=") + 1;
        for (size_t i = 0; extra && extra[i]; i++) overridden |= !strncmp(extra[i], *e, nl);
        if (!overridden) v[k++] = *e;
    }
    for (size_t i = 0; extra && extra[i]; i++) v[k++] = extra[i];
    return v;
}

static int start_command(rt_tool *t, char *const *argv, char *const *env, int timeout_ms, char *err) {
    size_t total = 0;
    for (size_t i = 0; argv[i]; i++) total += strlen(argv[i]) + 1;
    if (total > TOOL_MAX_ARGV)
        return sb_seterr(err, SB_EINVAL,
                         "the command's arguments come to %zu bytes after substitution (limit %u); pass large "
                         "text on stdin (the default stdin is {{input}})", total, TOOL_MAX_ARGV);
    char **envp = tool_environ(env);
    if (!envp) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int in[2] = { -1, -1 }, out[2] = { -1, -1 };
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) {
        int e = errno;
        for (int i = 0; i < 2; i++) { if (in[i] >= 0) close(in[i]); if (out[i] >= 0) close(out[i]); }
        sb_free(envp);
        return sb_seterr(err, SB_EIO, "pipe: %s", strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    /* The child must not inherit the router's blocked or ignored signals
     * (SIGPIPE is ignored here), and leads a group of its own. */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    int e = posix_spawnp(&t->pid, argv[0], &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    sb_free(envp);
    close(in[0]);
    close(out[1]);
    if (e) {
        t->pid = 0;
        close(in[1]);
        close(out[0]);
        return sb_seterr(err, SB_EIO, "cannot run tool '%s': %s", argv[0], strerror(e));
    }
    t->in_fd = in[1];
    t->out_fd = out[0];
    fcntl(t->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(t->out_fd, F_SETFL, O_NONBLOCK);
    t->in_ev = event_new(t->ex->be.base, t->in_fd, EV_WRITE | EV_PERSIST, on_in, t);
    t->out_ev = event_new(t->ex->be.base, t->out_fd, EV_READ | EV_PERSIST, on_out, t);
    t->reap_ev = evtimer_new(t->ex->be.base, try_reap, t);
    t->timer = evtimer_new(t->ex->be.base, on_timeout, t);
    if (!t->in_ev || !t->out_ev || !t->reap_ev || !t->timer) {
        kill_group(t);
        waitpid(t->pid, NULL, 0);
        t->pid = 0;
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
    t->conn = evhttp_connection_base_new(t->ex->be.base, NULL, host, (ev_uint16_t)(port > 0 ? port : 80));
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

/* ------------------------------------------------------------------ gates */

static int launch(rt_tool *t, char *err) {
    return t->url ? start_http(t, t->url, t->post, t->input, t->input_len, t->timeout_ms, err)
                  : start_command(t, t->argv, t->env, t->timeout_ms, err);
}

/* Start queued calls while slots are free. A call that cannot start is
 * completed with its error; the loop (not recursion) takes the next. */
static void gate_pump(rt_exec *ex, rt_tool_gate *g) {
    g->pumping = true;
    while (g->head && g->running < g->max_running) {
        rt_tool *t = g->head;
        g->head = t->qnext;
        if (!g->head) g->tail = NULL;
        g->waiting--;
        t->queued = false;
        t->running = true;
        g->running++;
        char err[SB_ERR_LEN];
        int rc = launch(t, err);
        if (rc) {
            snprintf(t->err, sizeof t->err, "%s", err);
            complete(t, rc);
        }
    }
    g->pumping = false;
    if (g->running || g->waiting) return;
    for (rt_tool_gate **pp = &ex->tool_gates; *pp; pp = &(*pp)->next)
        if (*pp == g) { *pp = g->next; break; }
    sb_free(g->key);
    sb_free(g);
}

/* t is going away: give back its slot or its place in the queue. */
static void gate_leave(rt_tool *t) {
    rt_tool_gate *g = t->gate;
    if (!g) return;
    t->gate = NULL;
    if (t->queued) {
        for (rt_tool **pp = &g->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->qnext)
            if (*pp == t) {
                *pp = t->qnext;
                if (g->tail == t) g->tail = prev;
                break;
            }
        g->waiting--;
    } else if (t->running) {
        g->running--;
    }
    if (!g->pumping) gate_pump(t->ex, g);
}

static rt_tool_gate *gate_get(rt_exec *ex, const char *key) {
    for (rt_tool_gate *g = ex->tool_gates; g; g = g->next)
        if (!strcmp(g->key, key)) return g;
    rt_tool_gate *g = sb_calloc(1, sizeof *g);
    if (!g || !(g->key = sb_strdup(key))) { sb_free(g); return NULL; }
    g->next = ex->tool_gates;
    ex->tool_gates = g;
    return g;
}

static char **copy_strv(char *const *v) {
    size_t n = 0;
    while (v && v[n]) n++;
    char **c = sb_calloc(n + 1, sizeof *c);
    for (size_t i = 0; c && i < n; i++)
        if (!(c[i] = sb_strdup(v[i]))) { free_strv(c); return NULL; }
    return c;
}

/* ------------------------------------------------------------------ api */

int rt_tool_start(rt_exec *ex, const rt_tool_spec *spec, const char *input, size_t input_len, rt_tool_done_fn done,
                  void *arg, rt_tool **out, char *err) {
    *out = NULL;
    rt_tool *t = sb_calloc(1, sizeof *t);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    t->ex = ex;
    t->done = done;
    t->arg = arg;
    t->in_fd = t->out_fd = -1;
    t->post = spec->post;
    t->timeout_ms = spec->timeout_ms;
    t->input = sb_malloc(input_len + 1);
    t->argv = spec->url ? NULL : copy_strv(spec->argv);
    t->env = spec->url ? NULL : copy_strv(spec->env);
    t->url = spec->url ? sb_strdup(spec->url) : NULL;
    if (!t->input || (spec->url ? !t->url : !t->argv || !t->env)) {
        tool_free(t);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    memcpy(t->input, input, input_len);
    t->input_len = input_len;
    rt_tool_gate *g = gate_get(ex, spec->gate);
    if (!g) { tool_free(t); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    g->max_running = spec->max_concurrent > 0 ? spec->max_concurrent : 1;   /* a reload may change it */
    t->gate = g;
    if (g->running < g->max_running && !g->head) {
        t->running = true;
        g->running++;
        int rc = launch(t, err);
        if (rc) { tool_free(t); return rc; }
    } else if (g->waiting < spec->max_queue) {
        t->queued = true;
        g->waiting++;
        if (g->tail) g->tail->qnext = t; else g->head = t;
        g->tail = t;
    } else {
        int running = g->running, waiting = g->waiting;
        tool_free(t);
        return sb_seterr(err, SB_EBUSY, "tool stage '%s' is at its limit (%d running, %d waiting)", spec->gate,
                         running, waiting);
    }
    *out = t;
    return 0;
}

/* Ends the call now, without its callback: a process and its whole group
 * are SIGKILLed and reaped; a queued call leaves the queue. */
void rt_tool_cancel(rt_tool *t) {
    if (!t || t->finished) return;
    if (t->conn) {
        /* evhttp will still call on_http (error or timeout); free there. */
        t->cancelled = true;
        return;
    }
    if (t->pid > 0) {
        kill_group(t);
        waitpid(t->pid, NULL, 0);   /* a SIGKILLed child is gone within microseconds */
        t->pid = 0;
    }
    tool_free(t);
}
