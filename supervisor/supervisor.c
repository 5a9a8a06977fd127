/* supervisor.c - `switchboard run`: start, watch, restart and reload the
 * runtime's processes (sb_supervisor.h, docs/operations.md).
 *
 * One libevent loop owns every signal (evsignal: the callbacks run on the
 * loop, not in signal context) and every timer; nothing here blocks. The
 * flow, nginx's master process without its shared memory:
 *
 *   spawn ──▶ starting ──(socket answers `health` with the child's pid)──▶ ready
 *     ▲          │                                                      │
 *     │          └────────────────── exit / signal ◀────────────────────┘
 *     │                                   │
 *     └─ waiting (backoff 100 ms .. 5 s) ◀┤  exit 2 or > 5 crashes in 60 s ──▶ failed
 *
 * SIGTERM/SIGINT stop the router first (so no new work reaches the workers),
 * then the workers; both drain up to runtime.drain_ms, then get SIGKILL.
 * SIGHUP reloads the file and restarts only the workers whose entry changed.
 * Children of an older generation (a changed or removed model) become
 * "retirees": they drain in the background and are never restarted.
 *
 * Every state change is one log line and rewrites DIR/state.json, which the
 * router (and operators) read to know which models are up.
 */
#include "supervisor/sb_supervisor.h"
#include "ipc/sb_ipc.h"
#include "supervisor/sup_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROBE_FIRST_MS   5      /* a fixture model loads in a few ms */
#define PROBE_EVERY_MS   20
#define PROBE_TIMEOUT_MS 1000   /* health never waits behind compute; 1 s is a hung loop */
#define OLD_SOCKET_MS    10     /* poll for an old generation to give up its socket */
#define STOP_MARGIN_MS   2000   /* beyond drain_ms: time to flush replies and exit */

/* The router command, when this binary has one (sb_supervisor_has_router). */
extern int sb_cmd_router(int argc, char **argv) __attribute__((weak));

bool sb_supervisor_has_router(void) { return sb_cmd_router != NULL; }

static const char *const state_names[] = {
    [ST_WAITING] = "waiting", [ST_STARTING] = "starting", [ST_READY] = "ready",
    [ST_FAILED] = "failed", [ST_STOPPING] = "stopping", [ST_STOPPED] = "stopped",
};

const char *sup_state_name(child_state st) { return state_names[st]; }

static double since_ms(uint64_t t0) { return (double)(sb_now_ns() - t0) / 1e6; }

static void set_state(child *c, child_state st) {
    c->state = st;
    c->since_unix_ms = sup_unix_ms();
    sup_write_state(c->s);
}

static void add_timer(child *c, int ms) {
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(c->timer, &tv);
}

/* -------------------------------------------------------------- spawning */

static void start_child(child *c);

static void drop_probe(child *c) {
    sb_ipc_aclient_free(c->probe);      /* a pending health call gets no callback */
    c->probe = NULL;
    c->probe_pending = false;
}

static void all_ready_check(sup *s) {
    if (s->announced_ready) return;
    int ready = 0, failed = 0;
    for (child *c = s->children; c; c = c->next) {
        if (c->state == ST_STARTING || c->state == ST_WAITING) return;
        ready += c->state == ST_READY;
        failed += c->state == ST_FAILED;
    }
    s->announced_ready = true;
    sb_info("runtime up in %.0f ms: %d ready, %d failed", since_ms(s->started_ns), ready, failed);
}

static void on_probe_done(void *arg, uint64_t id, const sb_ipc_result *res) {
    child *c = arg;
    c->probe_pending = false;
    if (c->state != ST_STARTING) return;
    int64_t pid = 0;
    /* The pid proves we reached this process, not an older one still draining. */
    if (res->ok && !sb_mp_get_int(res->result, "pid", SB_MP_REQUIRED, 1, INT32_MAX, &pid, NULL) &&
        pid == c->pid) {
        c->ready_ns = sb_now_ns();
        c->last_ready_ms = since_ms(c->spawned_ns);
        sb_info("%s ready in %.0f ms (pid %d)", c->label, c->last_ready_ms, (int)c->pid);
        drop_probe(c);      /* frees the client whose callback this is: allowed */
        set_state(c, ST_READY);
        all_ready_check(c->s);
        sup_ready_check(c->s);
        return;
    }
    add_timer(c, PROBE_EVERY_MS);
}

static void probe(child *c) {
    char err[SB_ERR_LEN];
    if (!c->probe && sb_ipc_aclient_new(c->s->base, c->sock, 0, &c->probe, err)) {
        sb_error("%s: cannot create the readiness probe: %s", c->label, err);
        add_timer(c, PROBE_EVERY_MS);
        return;
    }
    /* Fails at once while the socket does not exist yet: try again soon. */
    if (sb_ipc_aclient_call(c->probe, "health", NULL, PROBE_TIMEOUT_MS, NULL, on_probe_done, c, NULL, err))
        add_timer(c, PROBE_EVERY_MS);
    else
        c->probe_pending = true;
}

/* Has the retiree that held this child's socket gone, or let go of it? */
static bool old_generation_gone(child *c) {
    if (!c->wait_for_pid) return true;
    bool alive = false;
    for (retiree *r = c->s->retirees; r; r = r->next) alive |= r->pid == c->wait_for_pid;
    struct stat st;
    if (!alive || lstat(c->sock, &st) != 0) {
        c->wait_for_pid = 0;
        return true;
    }
    return false;
}

static void on_child_timer(evutil_socket_t fd, short what, void *arg) {
    child *c = arg;
    if (c->s->stopping) return;
    if (c->state == ST_STARTING) { probe(c); return; }
    if (c->state == ST_WAITING) {
        if (!old_generation_gone(c)) { add_timer(c, OLD_SOCKET_MS); return; }
        start_child(c);
    }
}

static void start_child(child *c) {
    char err[SB_ERR_LEN];
    pid_t pid;
    if (sup_spawn(c, &pid, err)) {
        /* fork itself failed (EAGAIN, ENOMEM): count it like a crash. */
        sb_error("%s: %s", c->label, err);
        int delay = sb_restart_on_crash(&c->policy, sb_now_s(), 0);
        if (delay < 0) {
            snprintf(c->reason, sizeof c->reason, "cannot start: %s", err);
            set_state(c, ST_FAILED);
            return;
        }
        set_state(c, ST_WAITING);
        add_timer(c, delay);
        return;
    }
    c->pid = pid;
    c->spawned_ns = sb_now_ns();
    c->starts++;
    if (c->starts == 1) sb_info("%s started, pid %d", c->label, (int)pid);
    else sb_info("%s restarted, pid %d (restart %d)", c->label, (int)pid, c->starts - 1);
    set_state(c, ST_STARTING);
    add_timer(c, PROBE_FIRST_MS);
}

/* ----------------------------------------------------------- stopping */

static void retire(sup *s, child *c, const char *why) {
    if (!c->pid) return;
    retiree *r = sb_calloc(1, sizeof *r);
    drop_probe(c);
    kill(c->pid, SIGTERM);
    sb_info("%s (pid %d): SIGTERM, %s; it drains in the background", c->label,
            (int)c->pid, why);
    if (!r) {
        /* Cannot track it: the reaper will log it as unknown. */
        c->pid = 0;
        return;
    }
    r->s = s;
    r->pid = c->pid;
    snprintf(r->name, sizeof r->name, "%s", c->name);
    r->kill_timer = evtimer_new(s->base, sup_on_retiree_kill, r);
    int ms = s->cfg->runtime.drain_ms + STOP_MARGIN_MS;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    if (r->kill_timer) evtimer_add(r->kill_timer, &tv);
    r->next = s->retirees;
    s->retirees = r;
    c->wait_for_pid = c->pid;
    c->pid = 0;
}

void sup_on_retiree_kill(evutil_socket_t fd, short what, void *arg) {
    retiree *r = arg;
    sb_warn("worker '%s' (old generation, pid %d) still running after the drain deadline: SIGKILL",
            r->name, (int)r->pid);
    kill(r->pid, SIGKILL);
}

static void free_retiree(retiree *r) {
    if (r->kill_timer) event_free(r->kill_timer);
    sb_free(r);
}

child *sup_router_child(sup *s) {
    for (child *c = s->children; c; c = c->next)
        if (c->kind == KIND_ROUTER) return c;
    return NULL;
}

static void arm_stop_timer(sup *s) {
    int ms = s->cfg->runtime.drain_ms + STOP_MARGIN_MS;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(s->stop_timer, &tv);
}

static void term_workers(sup *s) {
    s->stopping = STOP_WORKERS;
    int n = 0;
    for (child *c = s->children; c; c = c->next) {
        if (c->kind != KIND_WORKER || !c->pid) continue;
        kill(c->pid, SIGTERM);
        set_state(c, ST_STOPPING);
        n++;
    }
    if (n) sb_info("SIGTERM to %d worker(s); they drain for up to %d ms", n, s->cfg->runtime.drain_ms);
    arm_stop_timer(s);
}

/* Called whenever a child exits while stopping: move to the next phase, or
 * leave the loop when nothing is left. */
static void stop_progress(sup *s) {
    if (s->stopping == STOP_ROUTER) {
        child *r = sup_router_child(s);
        if (r && r->pid) return;
        event_del(s->stop_timer);
        term_workers(s);
    }
    for (child *c = s->children; c; c = c->next)
        if (c->pid) return;
    if (s->retirees) return;
    event_base_loopexit(s->base, NULL);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg) {
    sup *s = arg;
    int ms = s->cfg->runtime.drain_ms + STOP_MARGIN_MS;
    for (child *c = s->children; c; c = c->next) {
        if (!c->pid || (s->stopping == STOP_ROUTER && c->kind != KIND_ROUTER)) continue;
        sb_warn("%s (pid %d) still running %d ms after SIGTERM: SIGKILL", c->label,
                (int)c->pid, ms);
        kill(c->pid, SIGKILL);
    }
    if (s->stopping == STOP_WORKERS)
        for (retiree *r = s->retirees; r; r = r->next) kill(r->pid, SIGKILL);
}

static void begin_shutdown(sup *s, int sig) {
    if (s->stopping) {
        sb_warn("signal %d again: killing every child now", sig);
        for (child *c = s->children; c; c = c->next)
            if (c->pid) kill(c->pid, SIGKILL);
        for (retiree *r = s->retirees; r; r = r->next) kill(r->pid, SIGKILL);
        return;
    }
    sb_info("signal %d: shutting down (drain deadline %d ms)", sig, s->cfg->runtime.drain_ms);
    s->stopping = STOP_ROUTER;
    sup_ready_stop(s);
    for (child *c = s->children; c; c = c->next) {
        event_del(c->timer);
        drop_probe(c);
        if (!c->pid && c->state != ST_FAILED) set_state(c, ST_STOPPED);
    }
    child *r = sup_router_child(s);
    if (r && r->pid) {
        kill(r->pid, SIGTERM);
        set_state(r, ST_STOPPING);
        sb_info("SIGTERM to the router (pid %d); it drains for up to %d ms", (int)r->pid,
                s->cfg->runtime.drain_ms);
        arm_stop_timer(s);
    }
    stop_progress(s);
}

/* ------------------------------------------------------------ reaping */

static void on_child_exit(sup *s, child *c, int status) {
    char how[64];
    sup_describe_status(status, how, sizeof how);
    snprintf(c->last_exit, sizeof c->last_exit, "%s", how);
    pid_t pid = c->pid;
    c->pid = 0;
    drop_probe(c);
    event_del(c->timer);
    bool was_ready = c->state == ST_READY;
    double healthy_s = was_ready ? (double)(sb_now_ns() - c->ready_ns) / 1e9 : 0;
    if (s->stopping || c->state == ST_STOPPING) {
        sb_info("%s (pid %d) %s", c->label, (int)pid, how);
        set_state(c, ST_STOPPED);
        stop_progress(s);
        return;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == SB_EXIT_CONFIG) {
        snprintf(c->reason, sizeof c->reason, "exit status 2: the model or its options are bad");
        sb_error("%s (pid %d) %s: a config or model error, not restarting (see its log above)",
                 c->label, (int)pid, how);
        set_state(c, ST_FAILED);
        all_ready_check(s);
        return;
    }
    sb_warn("%s (pid %d) %s%s", c->label, (int)pid, how,
            was_ready ? "" : " before it was ready");
    int delay = sb_restart_on_crash(&c->policy, sb_now_s(), healthy_s);
    if (delay < 0) {
        snprintf(c->reason, sizeof c->reason, "crash loop: more than %d crashes in %d s (last: %s)",
                 SB_SUP_CRASH_LIMIT, SB_SUP_CRASH_WINDOW_S, how);
        sb_error("%s failed: %s; giving up (SIGHUP retries)", c->label, c->reason);
        set_state(c, ST_FAILED);
        all_ready_check(s);
        return;
    }
    c->restarts++;
    sb_info("%s restart in %d ms (crash %d in the last %d s)", c->label, delay,
            c->policy.n_crashes, SB_SUP_CRASH_WINDOW_S);
    set_state(c, ST_WAITING);
    add_timer(c, delay);
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg) {
    sup *s = arg;
    int status;
    pid_t pid;
    /* Signals coalesce: one SIGCHLD may stand for several exits. */
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        child *c = s->children;
        while (c && c->pid != pid) c = c->next;
        if (c) { on_child_exit(s, c, status); continue; }
        retiree **pp = &s->retirees;
        while (*pp && (*pp)->pid != pid) pp = &(*pp)->next;
        char how[64];
        sup_describe_status(status, how, sizeof how);
        if (!*pp) { sb_debug("pid %d (not ours any more) %s", (int)pid, how); continue; }
        retiree *r = *pp;
        *pp = r->next;
        sb_info("worker '%s' (old generation, pid %d) %s", r->name, (int)pid, how);
        free_retiree(r);
        if (s->stopping) stop_progress(s);
    }
}

/* ------------------------------------------------------------- reload */

static child *new_child(sup *s, child_kind kind, const char *name, const sb_config_model *m) {
    child *c = sb_calloc(1, sizeof *c);
    if (!c) return NULL;
    size_t dl = strlen(s->cfg->runtime.dir), nl = strlen(name);
    c->name = sb_strdup(name);
    c->sock = sb_malloc(dl + nl + 7);
    c->timer = evtimer_new(s->base, on_child_timer, c);
    if (!c->name || !c->sock || !c->timer) {
        if (c->timer) event_free(c->timer);
        sb_free(c->name);
        sb_free(c->sock);
        sb_free(c);
        return NULL;
    }
    snprintf(c->sock, dl + nl + 7, "%s/%s.sock", s->cfg->runtime.dir, name);
    if (kind == KIND_ROUTER) snprintf(c->label, sizeof c->label, "router");
    else snprintf(c->label, sizeof c->label, "worker '%s'", name);
    c->s = s;
    c->kind = kind;
    c->m = m;
    sb_restart_init(&c->policy);
    c->state = ST_WAITING;
    c->since_unix_ms = sup_unix_ms();
    c->next = s->children;
    s->children = c;
    return c;
}

static void free_child(child *c) {
    drop_probe(c);
    if (c->timer) event_free(c->timer);
    sb_free(c->name);
    sb_free(c->sock);
    sb_free(c);
}

/* Workers read these runtime settings from their command line. */
static bool worker_args_equal(const sb_config *a, const sb_config *b) {
    return a->runtime.drain_ms == b->runtime.drain_ms && sb_config_equal_runtime(a, b);
}

static void reload(sup *s) {
    char err[SB_ERR_LEN];
    sb_config *nc = NULL;
    sb_info("SIGHUP: reloading %s", s->config_path);
    if (sb_config_load(s->config_path, &nc, err) || sb_supervisor_validate(nc, err)) {
        sb_error("reload failed, keeping the running configuration: %s", err);
        sb_config_free(nc);
        return;
    }
    if (strcmp(nc->runtime.dir, s->cfg->runtime.dir)) {
        sb_error("reload refused, keeping the running configuration: runtime.dir changed (%s -> %s); "
                 "restart the supervisor to move the runtime directory", s->cfg->runtime.dir, nc->runtime.dir);
        sb_config_free(nc);
        return;
    }
    bool args_same = worker_args_equal(s->cfg, nc);
    sb_log_setup("supervisor", nc->runtime.log_level);
    int kept = 0, restarted = 0, added = 0, removed = 0, retried = 0;
    for (child **pp = &s->children; *pp;) {
        child *c = *pp;
        if (c->kind != KIND_WORKER) { pp = &c->next; continue; }
        const sb_config_model *nm = sb_config_find_model(nc, c->name);
        if (!nm || !nm->gguf) {
            retire(s, c, "removed from the config");
            event_del(c->timer);
            *pp = c->next;
            free_child(c);
            removed++;
            continue;
        }
        bool same = args_same && sb_config_equal_model(c->m, nm);
        c->m = nm;
        pp = &c->next;
        if (same && c->state != ST_FAILED) { kept++; continue; }
        /* Changed, or failed and worth another try: a fresh start. */
        if (same) retried++; else restarted++;
        event_del(c->timer);
        retire(s, c, same ? "retrying a failed model" : "its config entry changed");
        sb_restart_init(&c->policy);
        c->reason[0] = '\0';
        set_state(c, ST_WAITING);
        add_timer(c, 0);
    }
    for (size_t i = 0; i < nc->n_models; i++) {
        const sb_config_model *m = &nc->models[i];
        if (!m->gguf) continue;
        bool known = false;
        for (child *c = s->children; c; c = c->next) known |= c->kind == KIND_WORKER && !strcmp(c->name, m->name);
        if (known) continue;
        child *c = new_child(s, KIND_WORKER, m->name, m);
        if (!c) { sb_error("out of memory adding worker '%s'", m->name); continue; }
        added++;
        add_timer(c, 0);
    }
    sb_config_free(s->cfg);
    s->cfg = nc;
    child *r = sup_router_child(s);
    if (r && r->pid) kill(r->pid, SIGHUP);      /* it re-reads its pipelines itself */
    sb_info("reload done: %d unchanged, %d restarted, %d retried, %d added, %d removed%s", kept,
            restarted, retried, added, removed, r && r->pid ? "; SIGHUP sent to the router" : "");
    sup_write_state(s);
}

/* ------------------------------------------------------------ signals */

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    sup *s = arg;
    if (sig == SIGHUP) {
        if (s->stopping) sb_warn("SIGHUP while shutting down: ignored");
        else reload(s);
        return;
    }
    begin_shutdown(s, (int)sig);
}

/* ---------------------------------------------------------------- run */

/* One supervisor per runtime directory: a second one would fight over the
 * sockets. flock is released by the kernel however we die. */
static int take_lock(sup *s, char *err) {
    s->lock_fd = open(s->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) return sb_seterr(err, SB_EIO, "%s: %s", s->lock_path, strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB)) {
        char buf[32] = "";
        ssize_t n = pread(s->lock_fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        close(s->lock_fd);
        s->lock_fd = -1;
        return sb_seterr(err, SB_EBUSY, "runtime.dir %s is in use by another supervisor (pid %ld)",
                         s->cfg->runtime.dir, strtol(buf, NULL, 10));
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(s->lock_fd, 0) || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
        sb_warn("%s: cannot record our pid: %s", s->lock_path, strerror(errno));
    return 0;
}

/* Remove what we put in the directory; only sockets where sockets belong. */
static void cleanup_files(sup *s) {
    if (s->lock_fd < 0) return;     /* the directory is not ours (or not set up) */
    for (child *c = s->children; c; c = c->next) {
        struct stat st;
        if (lstat(c->sock, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(c->sock);
    }
    unlink(s->state_path);
    unlink(s->lock_path);
    close(s->lock_fd);
    s->lock_fd = -1;
}

static int setup(sup *s, char *err) {
    char *p = s->cfg->runtime.dir;
    size_t dl = strlen(p);
    if (!(s->state_path = sb_malloc(dl + 16)) || !(s->lock_path = sb_malloc(dl + 20)))
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    snprintf(s->state_path, dl + 16, "%s/state.json", p);
    snprintf(s->lock_path, dl + 20, "%s/supervisor.lock", p);
    int rc;
    if ((rc = sb_runtime_dir_prepare(p, err))) return rc;
    if ((rc = take_lock(s, err))) return rc;
    if (!(s->base = event_base_new())) return sb_seterr(err, SB_ENOMEM, "cannot create the event loop");
    s->sig_chld = evsignal_new(s->base, SIGCHLD, on_sigchld, s);
    s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s);
    s->sig_hup = evsignal_new(s->base, SIGHUP, on_signal, s);
    s->stop_timer = evtimer_new(s->base, on_stop_timer, s);
    if (!s->sig_chld || !s->sig_term || !s->sig_int || !s->sig_hup || !s->stop_timer ||
        event_add(s->sig_chld, NULL) || event_add(s->sig_term, NULL) || event_add(s->sig_int, NULL) ||
        event_add(s->sig_hup, NULL))
        return sb_seterr(err, SB_ENOMEM, "cannot register the signal handlers");
    /* Children are listed in reverse; start them in file order. */
    for (size_t i = s->cfg->n_models; i-- > 0;) {
        const sb_config_model *m = &s->cfg->models[i];
        if (m->gguf && !new_child(s, KIND_WORKER, m->name, m)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (sb_supervisor_has_router() && !s->opts.no_router) {
        child *r = new_child(s, KIND_ROUTER, "router", NULL);
        if (!r) return sb_seterr(err, SB_ENOMEM, "out of memory");
        /* Last in the list, so it starts after the workers it talks to. */
        s->children = r->next;
        child **pp = &s->children;
        while (*pp) pp = &(*pp)->next;
        *pp = r;
        r->next = NULL;
    }
    return 0;
}

int sb_supervisor_run(const sb_supervisor_opts *opts) {
    char err[SB_ERR_LEN];
    sup s = { .opts = *opts, .lock_fd = -1, .started_ns = sb_now_ns() };
    int code = SB_EXIT_FAIL;
    /* Absolute, so reloads and the router find the file whatever their cwd. */
    if (!(s.config_path = realpath(opts->config_path, NULL))) {
        fprintf(stderr, "run: %s: %s\n", opts->config_path, strerror(errno));
        return SB_EXIT_CONFIG;
    }
    if (sb_config_load(s.config_path, &s.cfg, err) || sb_supervisor_validate(s.cfg, err)) {
        fprintf(stderr, "%s\n", err);
        code = SB_EXIT_CONFIG;
        goto out;
    }
    sb_log_setup("supervisor", s.cfg->runtime.log_level);
    /* Everything is checked before anything starts: the pipelines too. */
    if (!opts->no_router && (code = sb_supervisor_check_router(s.config_path)) != SB_EXIT_OK) {
        fprintf(stderr, "run: the router rejects %s (see above)\n", s.config_path);
        goto out;
    }
    code = SB_EXIT_FAIL;
    int rc = setup(&s, err);
    if (rc) {
        sb_error("%s", err);
        code = rc == SB_EINVAL ? SB_EXIT_CONFIG : SB_EXIT_FAIL;
        goto out;
    }
    int n_workers = 0;
    for (child *c = s.children; c; c = c->next) n_workers += c->kind == KIND_WORKER;
    sb_info("supervising %d worker(s)%s in %s (config %s)", n_workers,
            sup_router_child(&s) ? " and the router"
            : sb_supervisor_has_router() ? " (router disabled by --no-router)"
                                         : " (no router command in this build)",
            s.cfg->runtime.dir, s.config_path);
    for (child *c = s.children; c; c = c->next) start_child(c);
    sup_write_state(&s);
    event_base_dispatch(s.base);
    sb_info("all children stopped; bye");
    code = SB_EXIT_OK;
out:
    sup_ready_stop(&s);
    cleanup_files(&s);
    while (s.children) {
        child *c = s.children;
        s.children = c->next;
        free_child(c);
    }
    while (s.retirees) {
        retiree *r = s.retirees;
        s.retirees = r->next;
        free_retiree(r);
    }
    if (s.sig_chld) event_free(s.sig_chld);
    if (s.sig_term) event_free(s.sig_term);
    if (s.sig_int) event_free(s.sig_int);
    if (s.sig_hup) event_free(s.sig_hup);
    if (s.stop_timer) event_free(s.stop_timer);
    if (s.base) event_base_free(s.base);
    sb_config_free(s.cfg);
    sb_free(s.state_path);
    sb_free(s.lock_path);
    free(s.config_path);        /* from realpath: libc malloc */
    return code;
}
