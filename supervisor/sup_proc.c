/* sup_proc.c - the supervisor's contact with the OS: fork+exec of a child
 * with a clean slate, exit statuses in words, and DIR/state.json.
 */
#include "supervisor/sup_internal.h"
#include "common/sb_json.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 80

int64_t sup_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sup_describe_status(int status, char *out, size_t cap) {
    if (WIFEXITED(status)) {
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *name = sigdescr_np(sig);
        snprintf(out, cap, "killed by signal %d (%s)%s", sig, name ? name : "?",
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(out, cap, "changed state (status 0x%x)", (unsigned)status);
    }
}

/* ------------------------------------------------------------- spawn */

/* Storage for one command line: argv points into buf. */
typedef struct {
    char *argv[MAX_ARGS + 1];
    int argc;
    char buf[8192];
    size_t used;
    bool overflow;
} cmdline;

static void arg(cmdline *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(cmdline *cl, const char *fmt, ...) {
    if (cl->argc >= MAX_ARGS || cl->used >= sizeof cl->buf) { cl->overflow = true; return; }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cl->buf + cl->used, sizeof cl->buf - cl->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cl->buf - cl->used) { cl->overflow = true; return; }
    cl->argv[cl->argc++] = cl->buf + cl->used;
    cl->argv[cl->argc] = NULL;
    cl->used += (size_t)n + 1;
}

static void build_cmdline(const child *c, cmdline *cl) {
    const sb_config *cfg = c->s->cfg;
    arg(cl, "switchboard");
    if (c->kind == KIND_ROUTER) {
        /* The router reads the same file itself (pipelines, cache, http). */
        arg(cl, "router");
        arg(cl, "-c");
        arg(cl, "%s", c->s->config_path);
        return;
    }
    const sb_config_model *m = c->m;
    arg(cl, "worker");
    arg(cl, "--name");       arg(cl, "%s", m->name);
    arg(cl, "--model");      arg(cl, "%s", m->gguf);
    arg(cl, "--socket");     arg(cl, "%s", c->sock);
    arg(cl, "--threads");    arg(cl, "%d", m->threads);
    arg(cl, "--ctx");        arg(cl, "%d", m->ctx);
    arg(cl, "--kv");         arg(cl, "%s", m->kv_type == SB_KV_F32 ? "f32" : "f16");
    arg(cl, "--max-queue");  arg(cl, "%d", m->max_queue);
    arg(cl, "--max-tokens"); arg(cl, "%d", m->max_tokens);
    arg(cl, "--drain-ms");   arg(cl, "%d", cfg->runtime.drain_ms);
    arg(cl, "--deadline-ms"); arg(cl, "%d", m->deadline_ms);
    /* Only when set: unset, the worker picks (and a worker built before
     * batching, which knows neither flag, still starts). */
    if (m->parallel) { arg(cl, "--parallel"); arg(cl, "%d", m->parallel); }
    if (m->kv_mb) { arg(cl, "--kv-mb"); arg(cl, "%d", m->kv_mb); }
    if (m->lookup) { arg(cl, "--lookup"); arg(cl, "%d", m->lookup); }
    const sb_config_model *d = m->draft ? sb_config_find_model(cfg, m->draft) : NULL;
    if (d && d->gguf) { arg(cl, "--draft"); arg(cl, "%s", d->gguf); }
    if (m->adapter) { arg(cl, "--adapter"); arg(cl, "%s", m->adapter); }
    for (size_t k = 0; k < m->n_adapters; k++) {
        arg(cl, "--named-adapter");
        arg(cl, "%s=%s", m->adapter_names[k], m->adapter_paths[k]);
    }
}

/* In the child, between fork and exec: only async-signal-safe calls. Every
 * signal is blocked on entry (see sup_spawn), so none of the supervisor's
 * handlers can run here. */
static __attribute__((noreturn)) void exec_child(char **argv, int errfd, pid_t parent) {
    setpgid(0, 0);      /* a terminal's Ctrl-C reaches the supervisor only: it orders the stop */
    prctl(PR_SET_PDEATHSIG, SIGTERM);   /* supervisor killed -9: children drain and exit */
    if (getppid() != parent) _exit(127);        /* it died before prctl took effect */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &dfl, NULL);   /* KILL/STOP: EINVAL, fine */
    int nul = open("/dev/null", O_RDONLY);
    if (nul > 0) { dup2(nul, STDIN_FILENO); close(nul); }
    /* Everything is CLOEXEC already; this is the belt to those braces, and
     * keeps fds a library opened without the flag out of the worker. */
    if (errfd > 3) close_range(3, (unsigned)errfd - 1, 0);
    close_range((unsigned)errfd + 1, ~0u, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv("/proc/self/exe", argv);
    int e = errno;
    ssize_t w = write(errfd, &e, sizeof e);
    (void)w;
    _exit(127);
}

int sup_spawn(child *c, pid_t *pid_out, char *err) {
    cmdline *cl = sb_calloc(1, sizeof *cl);
    if (!cl) return sb_seterr(err, SB_ENOMEM, "out of memory");
    build_cmdline(c, cl);
    if (cl->overflow) {
        sb_free(cl);
        return sb_seterr(err, SB_EINVAL, "command line too long");
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC)) {
        sb_free(cl);
        return sb_seterr(err, SB_EIO, "pipe: %s", strerror(errno));
    }
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) exec_child(cl->argv, pfd[1], parent);
    int fork_errno = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        sb_free(cl);
        return sb_seterr(err, SB_EIO, "fork: %s", strerror(fork_errno));
    }
    setpgid(pid, pid);  /* also here, so it holds before either side runs on */
    /* The pipe closes on a successful exec (CLOEXEC) or carries its errno:
     * this read waits only for the child's exec, not for its start-up. */
    int e = 0;
    ssize_t r;
    while ((r = read(pfd[0], &e, sizeof e)) < 0 && errno == EINTR) {}
    close(pfd[0]);
    if (r == (ssize_t)sizeof e)
        sb_error("%s: cannot exec /proc/self/exe: %s (it exits 127)", c->label, strerror(e));
    char line[1024];
    size_t n = 0;
    for (int i = 0; i < cl->argc && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i ? " " : "", cl->argv[i]);
    sb_debug("exec: %s", line);     /* filtered unless log_level: debug */
    sb_free(cl);
    *pid_out = pid;
    return 0;
}

int sb_supervisor_check_router(const char *config_path) {
    if (!sb_supervisor_has_router()) return SB_EXIT_OK;
    char *argv[] = { "switchboard", "router", "-c", (char *)config_path, "--check", NULL };
    pid_t pid = fork();
    if (pid < 0) {
        sb_error("cannot check the router's config: fork: %s", strerror(errno));
        return SB_EXIT_FAIL;
    }
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul > 0) { dup2(nul, STDOUT_FILENO); close(nul); }  /* its "ok" line; errors stay on stderr */
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return SB_EXIT_FAIL;
    if (WIFEXITED(status)) return WEXITSTATUS(status) == SB_EXIT_OK ? SB_EXIT_OK :
                                  WEXITSTATUS(status) == SB_EXIT_CONFIG ? SB_EXIT_CONFIG : SB_EXIT_FAIL;
    return SB_EXIT_FAIL;
}

/* ------------------------------------------------------------ state file */

/* Through common's JSON writer: a path or name with bytes that are not
 * UTF-8 (a config under such a directory) still makes valid JSON. */
static void json_str(FILE *f, const char *s) {
    sb_jw w = { 0 };
    sb_jw_str(&w, s);
    fputs(w.oom ? "null" : w.p, f);
    sb_jw_free(&w);
}

static void write_child(FILE *f, const child *c) {
    fputs("{\"state\": ", f);
    json_str(f, sup_state_name(c->state));
    fprintf(f, ", \"pid\": %d, \"socket\": ", (int)c->pid);
    json_str(f, c->sock);
    if (c->kind == KIND_WORKER) {
        fputs(", \"gguf\": ", f);
        json_str(f, c->m ? c->m->gguf : NULL);
    }
    fprintf(f, ", \"since_unix_ms\": %lld, \"starts\": %d, \"restarts\": %d, \"ready_ms\": %.1f",
            (long long)c->since_unix_ms, c->starts, c->restarts, c->last_ready_ms);
    fputs(", \"last_exit\": ", f);
    json_str(f, c->last_exit[0] ? c->last_exit : NULL);
    fputs(", \"reason\": ", f);
    json_str(f, c->state == ST_FAILED && c->reason[0] ? c->reason : NULL);
    fputc('}', f);
}

void sup_write_state(sup *s) {
    if (!s->state_path || s->lock_fd < 0) return;      /* not set up: not ours to write */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->state_path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        sb_warn("%s: %s", tmp, strerror(errno));
        return;
    }
    fprintf(f, "{\"supervisor_pid\": %d, \"updated_unix_ms\": %lld, \"stopping\": %s, \"config\": ",
            (int)getpid(), (long long)sup_unix_ms(), s->stopping ? "true" : "false");
    json_str(f, s->config_path);
    fputs(",\n \"models\": {", f);
    int n = 0;
    /* Config order (the child list holds workers in that order). */
    for (const child *c = s->children; c; c = c->next) {
        if (c->kind != KIND_WORKER) continue;
        fprintf(f, "%s\n  ", n++ ? "," : "");
        json_str(f, c->name);
        fputs(": ", f);
        write_child(f, c);
    }
    for (size_t i = 0; i < s->cfg->n_models; i++) {
        const sb_config_model *m = &s->cfg->models[i];
        if (m->gguf) continue;
        fprintf(f, "%s\n  ", n++ ? "," : "");
        json_str(f, m->name);
        fputs(": {\"state\": \"remote\", \"upstream\": ", f);
        json_str(f, m->upstream);
        fputc('}', f);
    }
    fputs("},\n \"router\": ", f);
    const child *r = s->children;
    while (r && r->kind != KIND_ROUTER) r = r->next;
    if (r) write_child(f, r);
    else fputs("null", f);
    fputs("}\n", f);
    bool bad = ferror(f) != 0;
    if (fclose(f) || bad || rename(tmp, s->state_path)) {
        sb_warn("cannot write %s: %s", s->state_path, strerror(errno));
        unlink(tmp);
    }
}
