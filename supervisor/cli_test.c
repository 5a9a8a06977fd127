/* cli_test.c - `switchboard test`: scripted conversations against a
 * pipeline, over HTTP as a caller's app would talk to it, with a report
 * a CI can gate on (docs/TESTING.md, "Conversation scripts").
 *
 * The runtime is either one already running (--url) or one this command
 * starts from the config (`switchboard run -c CONFIG` as a child, waited
 * for until GET /health answers 200, stopped with SIGTERM at the end):
 * the same process a deployment runs, never an in-process imitation.
 */
#include "supervisor/convtest.h"
#include "supervisor/ask_internal.h"
#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_json.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_UNREACHABLE   3
#define DEFAULT_TIMEOUT_MS 120000
#define DEFAULT_START_S    120
#define HEALTH_EVERY_MS    50
#define STOP_GRACE_MS      10000    /* past the config's drain_ms, before SIGKILL */
#define MAX_CALLERS        256

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard test [-c CONFIG] [--url URL] [options] SCRIPT.yaml...\n\n"
            "Run the scripted conversations of each SCRIPT against a pipeline over HTTP:\n"
            "each turn's words are sent to POST /v1/pipelines/NAME in one session, and its\n"
            "answer is checked against the turn's expectations (intent, slots, awaiting,\n"
            "reply_contains, handoff, done, fallback). The format is in docs/TESTING.md.\n\n"
            "  -c, --config FILE   the runtime's config: its pipelines are what scripts may\n"
            "                      name (a script without one runs the config's only pipeline)\n"
            "  --url URL           test the runtime already listening at URL; without it, the\n"
            "                      command starts `switchboard run -c CONFIG`, waits for GET\n"
            "                      /health to answer 200 and stops it with SIGTERM at the end\n"
            "  --api-key-env VAR   send $VAR as the bearer token (default: the config's\n"
            "                      runtime.api_key_env, when that variable is set)\n"
            "  --min-success X     the share of conversations that must succeed, a fraction\n"
            "                      in [0, 1] (0.95); without it every one must\n"
            "  --json              print the report as one JSON object\n"
            "  --check             only read and check the scripts (against -c's pipelines\n"
            "                      when given); nothing runs\n"
            "  --timeout-ms N      per request (default %d)\n"
            "  --start-timeout-s N wait this long for a started runtime (default %d)\n"
            "  --callers N         run N conversations at once, as N callers would, each\n"
            "                      taking the next conversation when its own ends (default 1)\n"
            "  --repeat K          run the scripts' conversations K times over (default 1),\n"
            "                      to keep N callers busy for longer\n\n"
            "A conversation succeeds when every expectation of every turn is met; it stops\n"
            "at the first one that is not, which is reported with its turn and line.\n"
            "The report gives each turn's HTTP latency, p50 and p95, over all turns and over\n"
            "the turns no model generated for (a question, a confirmation or a refusal from\n"
            "the config's text: usage.completion_tokens 0), and the turns lost to HTTP errors.\n\n"
            "Exit status: 0 passed (at least --min-success of the conversations), 1 below\n"
            "the bar, 2 bad usage, config or script, 3 the runtime unreachable (or a\n"
            "started one did not come up).\n",
            DEFAULT_TIMEOUT_MS, DEFAULT_START_S);
}

typedef struct {
    const char *config_path;
    const char *url;
    const char *api_key_env;
    double min_success;         /* < 0: every conversation must succeed */
    bool json;
    bool check_only;
    int timeout_ms;
    int start_s;
    int callers, repeat;
    char **scripts;
    int n_scripts;
} options;

/* ------------------------------------------------------------ options */

static int parse_options(int argc, char **argv, options *o) {
    *o = (options){ .min_success = -1, .timeout_ms = DEFAULT_TIMEOUT_MS, .start_s = DEFAULT_START_S, .callers = 1,
                    .repeat = 1 };
    int64_t v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        if (!strcmp(a, "--")) { o->scripts = argv + i + 1; o->n_scripts = argc - i - 1; break; }
        if (a[0] != '-') { o->scripts = argv + i; o->n_scripts = argc - i; break; }
        if ((!strcmp(a, "-c") || !strcmp(a, "--config")) && val) o->config_path = val;
        else if (!strcmp(a, "--url") && val) o->url = val;
        else if (!strcmp(a, "--api-key-env") && val) o->api_key_env = val;
        else if (!strcmp(a, "--json")) { o->json = true; continue; }
        else if (!strcmp(a, "--check")) { o->check_only = true; continue; }
        else if (!strcmp(a, "--min-success") && val) {
            char *end;
            o->min_success = strtod(val, &end);
            if (*end || end == val || !(o->min_success >= 0 && o->min_success <= 1)) {
                fprintf(stderr, "test: --min-success expects a fraction in [0, 1] (0.95 for 95 %%), got '%s'\n", val);
                return -1;
            }
        } else if (!strcmp(a, "--timeout-ms")) {
            if (sb_opt_int("test", a, val, 1, 86400000, &v)) return -1;
            o->timeout_ms = (int)v;
        } else if (!strcmp(a, "--start-timeout-s")) {
            if (sb_opt_int("test", a, val, 1, 3600, &v)) return -1;
            o->start_s = (int)v;
        } else if (!strcmp(a, "--callers")) {
            if (sb_opt_int("test", a, val, 1, MAX_CALLERS, &v)) return -1;
            o->callers = (int)v;
        } else if (!strcmp(a, "--repeat")) {
            if (sb_opt_int("test", a, val, 1, 1000, &v)) return -1;
            o->repeat = (int)v;
        } else {
            fprintf(stderr, "test: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return -1;
        }
        i++;
    }
    if (!o->n_scripts) { fprintf(stderr, "test: no SCRIPT.yaml\n"); usage(stderr); return -1; }
    if (!o->config_path && !o->url && !o->check_only) {
        fprintf(stderr, "test: give -c CONFIG (to start the runtime, or to check the scripts against), --url, or both\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ the runtime */

typedef struct {
    pid_t pid;                  /* 0: not ours */
    char log[4096];             /* its stdout and stderr */
    int drain_ms;
} runtime;

/* GET /health's status, or -1 when nothing answers. Quiet: while a
 * runtime starts, "connection refused" is the expected answer, and the
 * callers say what a failure means. */
static int health_status(const char *url) {
    const sb_http_call call = { .url = url, .method = "GET", .path = "/health", .timeout_ms = 2000 };
    sb_http_reply r;
    int saved = dup(STDERR_FILENO);
    FILE *null = fopen("/dev/null", "w");
    if (null && saved >= 0) { fflush(stderr); dup2(fileno(null), STDERR_FILENO); }
    int status = sb_ask_http_call(&call, &r) ? -1 : r.status;
    if (null && saved >= 0) { fflush(stderr); dup2(saved, STDERR_FILENO); }
    if (null) fclose(null);
    if (saved >= 0) close(saved);
    if (status >= 0) sb_free(r.body);
    return status;
}

static void print_log_tail(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024], ring[20][1024];
    size_t n = 0;
    while (fgets(line, sizeof line, f)) snprintf(ring[n++ % 20], sizeof ring[0], "%s", line);
    fclose(f);
    for (size_t i = n > 20 ? n - 20 : 0; i < n; i++) fputs(ring[i % 20], stderr);
}

static int start_runtime(const options *o, const char *url, int drain_ms, runtime *rt) {
    /* Anything answering there: the started runtime could not bind the
     * address, and /health answering would be someone else's. */
    if (health_status(url) >= 0) {
        fprintf(stderr, "test: something already answers at %s: pass --url %s to test it, or free the port\n", url, url);
        return EXIT_UNREACHABLE;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(rt->log, sizeof rt->log, "%s/switchboard-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(rt->log);
    if (fd < 0) { fprintf(stderr, "test: %s: %s\n", rt->log, strerror(errno)); return SB_EXIT_FAIL; }
    rt->drain_ms = drain_ms;
    fflush(NULL);
    rt->pid = fork();
    if (rt->pid < 0) { fprintf(stderr, "test: fork: %s\n", strerror(errno)); close(fd); return SB_EXIT_FAIL; }
    if (rt->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);   /* the test killed: its runtime drains and exits too */
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        execl("/proc/self/exe", "switchboard", "run", "-c", o->config_path, (char *)NULL);
        fprintf(stderr, "test: exec switchboard run: %s\n", strerror(errno));
        _exit(127);
    }
    close(fd);
    uint64_t deadline = sb_now_ns() + (uint64_t)o->start_s * 1000000000ull;
    while (sb_now_ns() < deadline) {
        int status;
        if (waitpid(rt->pid, &status, WNOHANG) == rt->pid) {
            rt->pid = 0;
            fprintf(stderr, "test: `switchboard run -c %s` exited before it was ready; its log (%s) ends:\n",
                    o->config_path, rt->log);
            print_log_tail(rt->log);
            return EXIT_UNREACHABLE;
        }
        if (health_status(url) == 200) return 0;
        usleep(HEALTH_EVERY_MS * 1000);
    }
    fprintf(stderr, "test: the runtime did not answer GET %s/health with 200 within %d s; its log (%s) ends:\n",
            url, o->start_s, rt->log);
    print_log_tail(rt->log);
    return EXIT_UNREACHABLE;
}

/* SIGTERM, its drain, then SIGKILL. false when it did not exit cleanly. */
static bool stop_runtime(runtime *rt) {
    if (!rt->pid) return true;
    kill(rt->pid, SIGTERM);
    uint64_t deadline = sb_now_ns() + (uint64_t)(rt->drain_ms + STOP_GRACE_MS) * 1000000ull;
    int status = 0;
    pid_t r;
    while ((r = waitpid(rt->pid, &status, WNOHANG)) == 0 && sb_now_ns() < deadline) usleep(20000);
    if (r == 0) {
        fprintf(stderr, "test: the runtime did not stop within %d ms of SIGTERM: killed\n", rt->drain_ms + STOP_GRACE_MS);
        kill(rt->pid, SIGKILL);
        waitpid(rt->pid, &status, 0);
    }
    rt->pid = 0;
    return r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* ------------------------------------------------------------ the report */

#define MAX_LANGS 16

typedef struct {
    ct_script *scripts;
    ct_result **results;        /* per script, per run of a conversation (repeat x its conversations) */
    size_t n_scripts;
    int repeat, callers;
    size_t convs, passed, turns, max_turns, lost;
    double *latency;            /* every turn's, sorted */
    size_t n_latency;
    double *quiet;              /* the turns no model generated for, sorted */
    size_t n_quiet;
    double wall_s;
    struct { const char *tag; size_t convs, passed; } langs[MAX_LANGS];
    size_t n_langs;
} report;

static void count_language(report *r, const char *tag, bool passed) {
    const char *t = tag ? tag : "-";
    size_t i = 0;
    while (i < r->n_langs && strcmp(r->langs[i].tag, t)) i++;
    if (i == r->n_langs) {
        if (r->n_langs == MAX_LANGS) return;
        r->langs[r->n_langs++].tag = t;
    }
    r->langs[i].convs++;
    r->langs[i].passed += passed;
}

static void print_result(const ct_script *s, const ct_conv *c, const ct_result *res) {
    if (res->passed) {
        printf("PASS  %s: %s (%zu turn%s)\n", s->path, c->name, res->turns_run, res->turns_run == 1 ? "" : "s");
        return;
    }
    printf("FAIL  %s: %s: turn %d (%s:%d): %s\n", s->path, c->name, res->failed_turn, s->path, res->failed_line,
           res->failure);
}

static double success(const report *r) { return r->convs ? (double)r->passed / (double)r->convs : 0; }

static void print_summary(const report *r, double bar) {
    printf("\nconversations %zu, passed %zu: task success %.1f %%%s\n", r->convs, r->passed, 100 * success(r),
           bar >= 0 ? "" : " (every one must pass)");
    if (bar >= 0) printf("the bar (--min-success) %.1f %%: %s\n", 100 * bar, success(r) >= bar ? "met" : "NOT met");
    printf("turns per call: mean %.1f, max %zu\n", r->convs ? (double)r->turns / (double)r->convs : 0, r->max_turns);
    printf("latency per turn (HTTP): p50 %.1f ms, p95 %.1f ms over %zu turns\n",
           sb_percentile(r->latency, r->n_latency, 0.5), sb_percentile(r->latency, r->n_latency, 0.95), r->n_latency);
    printf("  turns no model generated for: p50 %.1f ms, p95 %.1f ms over %zu turns\n",
           sb_percentile(r->quiet, r->n_quiet, 0.5), sb_percentile(r->quiet, r->n_quiet, 0.95), r->n_quiet);
    printf("callers %d: %zu turns in %.1f s (%.2f turns/s), %zu conversation%s lost to HTTP errors\n", r->callers,
           r->n_latency, r->wall_s, r->wall_s > 0 ? (double)r->n_latency / r->wall_s : 0, r->lost, r->lost == 1 ? "" : "s");
    printf("by language:");
    for (size_t i = 0; i < r->n_langs; i++)
        printf("%s %s %zu/%zu", i ? "," : "", r->langs[i].tag, r->langs[i].passed, r->langs[i].convs);
    printf("\n");
}

static void json_conv(sb_jw *w, const ct_conv *c, const ct_result *res) {
    sb_jw_obj(w);
    sb_jw_key(w, "name"), sb_jw_str(w, c->name);
    sb_jw_key(w, "pipeline"), sb_jw_str(w, c->pipeline);
    sb_jw_key(w, "language"), sb_jw_str(w, c->language);
    sb_jw_key(w, "line"), sb_jw_int(w, c->line);
    sb_jw_key(w, "passed"), sb_jw_bool(w, res->passed);
    sb_jw_key(w, "turns"), sb_jw_int(w, (int64_t)res->turns_run);
    sb_jw_key(w, "latency_ms"), sb_jw_arr(w);
    for (size_t i = 0; i < res->turns_run; i++) sb_jw_fixed(w, res->latency_ms[i], 1);
    sb_jw_arr_end(w);
    sb_jw_key(w, "generated"), sb_jw_arr(w);       /* per turn: whether a model generated tokens for it */
    for (size_t i = 0; i < res->turns_run; i++) sb_jw_bool(w, res->generated[i]);
    sb_jw_arr_end(w);
    sb_jw_key(w, "failure");
    if (res->passed) sb_jw_null(w);
    else {
        sb_jw_obj(w);
        sb_jw_key(w, "turn"), sb_jw_int(w, res->failed_turn);
        sb_jw_key(w, "line"), sb_jw_int(w, res->failed_line);
        sb_jw_key(w, "message"), sb_jw_str(w, res->failure);
        sb_jw_obj_end(w);
    }
    sb_jw_obj_end(w);
}

static void print_json(const report *r, double bar, bool ok) {
    sb_jw w = { 0 };
    sb_jw_obj(&w);
    sb_jw_key(&w, "ok"), sb_jw_bool(&w, ok);
    sb_jw_key(&w, "conversations"), sb_jw_int(&w, (int64_t)r->convs);
    sb_jw_key(&w, "passed"), sb_jw_int(&w, (int64_t)r->passed);
    sb_jw_key(&w, "task_success"), sb_jw_fixed(&w, success(r), 4);
    sb_jw_key(&w, "min_success");
    if (bar >= 0) sb_jw_num(&w, bar);
    else sb_jw_null(&w);
    sb_jw_key(&w, "turns_per_call"), sb_jw_obj(&w);
    sb_jw_key(&w, "mean"), sb_jw_fixed(&w, r->convs ? (double)r->turns / (double)r->convs : 0, 2);
    sb_jw_key(&w, "max"), sb_jw_int(&w, (int64_t)r->max_turns);
    sb_jw_obj_end(&w);
    sb_jw_key(&w, "latency_ms"), sb_jw_obj(&w);
    sb_jw_key(&w, "turns"), sb_jw_int(&w, (int64_t)r->n_latency);
    sb_jw_key(&w, "p50"), sb_jw_fixed(&w, sb_percentile(r->latency, r->n_latency, 0.5), 1);
    sb_jw_key(&w, "p95"), sb_jw_fixed(&w, sb_percentile(r->latency, r->n_latency, 0.95), 1);
    sb_jw_key(&w, "not_generated"), sb_jw_obj(&w);
    sb_jw_key(&w, "turns"), sb_jw_int(&w, (int64_t)r->n_quiet);
    sb_jw_key(&w, "p50"), sb_jw_fixed(&w, sb_percentile(r->quiet, r->n_quiet, 0.5), 1);
    sb_jw_key(&w, "p95"), sb_jw_fixed(&w, sb_percentile(r->quiet, r->n_quiet, 0.95), 1);
    sb_jw_obj_end(&w);
    sb_jw_obj_end(&w);
    sb_jw_key(&w, "callers"), sb_jw_int(&w, r->callers);
    sb_jw_key(&w, "wall_s"), sb_jw_fixed(&w, r->wall_s, 2);
    sb_jw_key(&w, "lost"), sb_jw_int(&w, (int64_t)r->lost);
    sb_jw_key(&w, "by_language"), sb_jw_obj(&w);
    for (size_t i = 0; i < r->n_langs; i++) {
        sb_jw_key(&w, r->langs[i].tag), sb_jw_obj(&w);
        sb_jw_key(&w, "conversations"), sb_jw_int(&w, (int64_t)r->langs[i].convs);
        sb_jw_key(&w, "passed"), sb_jw_int(&w, (int64_t)r->langs[i].passed);
        sb_jw_obj_end(&w);
    }
    sb_jw_obj_end(&w);
    sb_jw_key(&w, "scripts"), sb_jw_arr(&w);
    for (size_t i = 0; i < r->n_scripts; i++) {
        const ct_script *s = &r->scripts[i];
        bool all = true;
        const size_t runs = s->n_convs * (size_t)r->repeat;
        for (size_t k = 0; k < runs; k++) all = all && r->results[i][k].passed;
        sb_jw_obj(&w);
        sb_jw_key(&w, "path"), sb_jw_str(&w, s->path);
        sb_jw_key(&w, "passed"), sb_jw_bool(&w, all);
        sb_jw_key(&w, "conversations"), sb_jw_arr(&w);
        for (size_t k = 0; k < runs; k++) json_conv(&w, &s->convs[k % s->n_convs], &r->results[i][k]);
        sb_jw_arr_end(&w);
        sb_jw_obj_end(&w);
    }
    sb_jw_arr_end(&w);
    sb_jw_obj_end(&w);
    if (w.oom) fputs("{\"ok\": false, \"error\": \"out of memory\"}\n", stdout);
    else printf("%s\n", w.p);
    sb_jw_free(&w);
}

/* ------------------------------------------------------------ running */

/* The callers: each takes the next conversation of the list (every
 * conversation of every script, `repeat` times) until none is left, or
 * until one finds the runtime gone (the rest would say nothing about the
 * pipelines). */
typedef struct {
    report *r;
    const ct_target *t;
    bool print;                 /* each result as it ends, the progress of a long run */
    pthread_mutex_t print_lock;
    size_t n_jobs;
    atomic_size_t next;
    atomic_bool gone;
} callers;

static void job_at(const report *r, size_t j, size_t *script, size_t *run) {
    size_t i = 0;
    for (;;) {
        const size_t runs = r->scripts[i].n_convs * (size_t)r->repeat;
        if (j < runs) break;
        j -= runs, i++;
    }
    *script = i, *run = j;
}

static void *caller_main(void *arg) {
    callers *c = arg;
    for (size_t j; !atomic_load(&c->gone) && (j = atomic_fetch_add(&c->next, 1)) < c->n_jobs;) {
        size_t i, k;
        job_at(c->r, j, &i, &k);
        const ct_script *s = &c->r->scripts[i];
        ct_result *res = &c->r->results[i][k];
        ct_run_conv(c->t, &s->convs[k % s->n_convs], res);
        if (res->unreachable) atomic_store(&c->gone, true);
        else if (c->print) {
            pthread_mutex_lock(&c->print_lock);
            print_result(s, &s->convs[k % s->n_convs], res);
            fflush(stdout);
            pthread_mutex_unlock(&c->print_lock);
        }
    }
    return NULL;
}

/* Whether a conversation ran: a caller that saw the runtime gone leaves the
 * rest untouched (latency NULL). */
static bool ran(const ct_result *res) { return res->latency_ms != NULL; }

static bool run_all(const options *o, const ct_target *t, report *r) {
    callers c = { .r = r, .t = t, .print = !o->json, .print_lock = PTHREAD_MUTEX_INITIALIZER };
    for (size_t i = 0; i < r->n_scripts; i++) c.n_jobs += r->scripts[i].n_convs * (size_t)r->repeat;
    atomic_init(&c.next, 0);
    atomic_init(&c.gone, false);
    pthread_t th[MAX_CALLERS];
    int n = 0;
    const double t0 = sb_now_s();
    if (o->callers == 1) caller_main(&c);
    else
        for (; n < o->callers; n++)
            if (pthread_create(&th[n], NULL, caller_main, &c)) break;
    if (o->callers > 1 && !n) caller_main(&c);      /* no thread to be had: one caller, still a run */
    for (int k = 0; k < n; k++) pthread_join(th[k], NULL);
    r->wall_s = sb_now_s() - t0;
    for (size_t i = 0; i < r->n_scripts; i++) {
        const ct_script *s = &r->scripts[i];
        for (size_t k = 0; k < s->n_convs * (size_t)r->repeat; k++) {
            const ct_result *res = &r->results[i][k];
            const ct_conv *cv = &s->convs[k % s->n_convs];
            if (!ran(res) || res->unreachable) continue;
            r->convs++;
            r->passed += res->passed;
            r->lost += res->http_error;
            r->turns += res->turns_run;
            r->max_turns = SB_MAX(r->max_turns, res->turns_run);
            count_language(r, cv->language, res->passed);
            for (size_t j = 0; j < res->turns_run; j++) {     /* room for every turn of every run */
                r->latency[r->n_latency++] = res->latency_ms[j];
                if (!res->generated[j]) r->quiet[r->n_quiet++] = res->latency_ms[j];
            }
        }
    }
    sb_sort_doubles(r->latency, r->n_latency);
    sb_sort_doubles(r->quiet, r->n_quiet);
    if (atomic_load(&c.gone)) {
        for (size_t i = 0; i < r->n_scripts; i++)
            for (size_t k = 0; k < r->scripts[i].n_convs * (size_t)r->repeat; k++) {
                const ct_result *res = &r->results[i][k];
                if (ran(res) && res->unreachable)
                    fprintf(stderr, "test: %s: %s: turn %d: %s\n", r->scripts[i].path,
                            r->scripts[i].convs[k % r->scripts[i].n_convs].name, res->failed_turn, res->failure);
            }
        return false;
    }
    return true;
}

static int load_scripts(const options *o, const sb_config *cfg, report *r) {
    char err[SB_ERR_LEN];
    int bad = 0;
    if (!(r->scripts = sb_calloc((size_t)o->n_scripts, sizeof *r->scripts)) ||
        !(r->results = sb_calloc((size_t)o->n_scripts, sizeof *r->results)))
        return SB_ENOMEM;
    size_t turns = 0;
    for (int i = 0; i < o->n_scripts; i++) {
        ct_script *s = &r->scripts[r->n_scripts];
        int rc = ct_script_load(o->scripts[i], cfg ? cfg->pipelines : NULL, s, err);
        if (rc == SB_ENOMEM) return rc;
        if (rc) { fprintf(stderr, "test: %s\n", err); bad++; continue; }     /* report every bad script */
        if (!(r->results[r->n_scripts] = sb_calloc(s->n_convs * (size_t)o->repeat, sizeof **r->results)))
            return SB_ENOMEM;
        r->n_scripts++;
        for (size_t k = 0; k < s->n_convs; k++) turns += s->convs[k].n_turns * (size_t)o->repeat;
    }
    if (bad) return SB_EINVAL;
    r->latency = sb_calloc(turns ? turns : 1, sizeof *r->latency);
    r->quiet = sb_calloc(turns ? turns : 1, sizeof *r->quiet);
    return r->latency && r->quiet ? 0 : SB_ENOMEM;
}

static void report_free(report *r) {
    for (size_t i = 0; i < r->n_scripts; i++) {
        for (size_t k = 0; r->results[i] && k < r->scripts[i].n_convs * (size_t)r->repeat; k++)
            sb_free(r->results[i][k].latency_ms), sb_free(r->results[i][k].generated);
        sb_free(r->results[i]);
        ct_script_free(&r->scripts[i]);
    }
    sb_free(r->scripts);
    sb_free(r->results);
    sb_free(r->latency);
    sb_free(r->quiet);
}

void sb_runtime_url(const sb_config *cfg, char *url, size_t cap) {
    const char *h = cfg->runtime.http_host;
    bool v6 = strchr(h, ':') != NULL;
    if (!strcmp(h, "0.0.0.0") || !*h) h = "127.0.0.1";
    else if (!strcmp(h, "::")) h = "::1";
    snprintf(url, cap, "http://%s%s%s:%d", v6 ? "[" : "", h, v6 ? "]" : "", cfg->runtime.http_port);
}

static const char *api_key(const options *o, const sb_config *cfg) {
    if (o->api_key_env) return getenv(o->api_key_env);
    return cfg && cfg->runtime.api_key_env ? getenv(cfg->runtime.api_key_env) : NULL;
}

static int run_tests(const options *o, const sb_config *cfg, report *r) {
    char url[600];
    if (o->url) snprintf(url, sizeof url, "%s", o->url);
    else sb_runtime_url(cfg, url, sizeof url);
    runtime rt = { 0 };
    if (!o->url) {
        int rc = start_runtime(o, url, cfg->runtime.drain_ms, &rt);
        if (rc) { stop_runtime(&rt); return rc; }
    } else if (health_status(url) != 200) {
        fprintf(stderr, "test: %s/health does not answer 200: is the runtime up?\n", url);
        return EXIT_UNREACHABLE;
    }
    const ct_target t = { .url = url, .api_key = api_key(o, cfg), .timeout_ms = o->timeout_ms };
    bool reached = run_all(o, &t, r);
    bool clean = stop_runtime(&rt);
    double bar = o->min_success;
    bool ok = reached && (bar >= 0 ? success(r) >= bar : r->passed == r->convs);
    if (o->json) print_json(r, bar, ok);
    else if (reached) print_summary(r, bar);
    if (rt.log[0]) {
        if (clean && ok) unlink(rt.log);
        else fprintf(stderr, "test: the runtime's log is %s%s\n", rt.log, clean ? "" : " (it did not stop cleanly)");
    }
    if (!reached) return EXIT_UNREACHABLE;
    return ok ? SB_EXIT_OK : SB_EXIT_FAIL;
}

static int print_checked(const report *r) {
    for (size_t i = 0; i < r->n_scripts; i++) {
        size_t turns = 0;
        for (size_t k = 0; k < r->scripts[i].n_convs; k++) turns += r->scripts[i].convs[k].n_turns;
        printf("ok    %s: %zu conversation%s, %zu turns\n", r->scripts[i].path, r->scripts[i].n_convs,
               r->scripts[i].n_convs == 1 ? "" : "s", turns);
    }
    return SB_EXIT_OK;
}

int sb_cmd_test(int argc, char **argv) {
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc > 0 ? SB_EXIT_OK : SB_EXIT_CONFIG;
    sb_config *cfg = NULL;
    char err[SB_ERR_LEN];
    if (o.config_path && (rc = sb_config_load(o.config_path, &cfg, err))) {
        fprintf(stderr, "test: %s\n", err);
        return SB_EXIT_CONFIG;
    }
    report r = { .repeat = o.repeat, .callers = o.callers };
    rc = load_scripts(&o, cfg, &r);
    if (rc == SB_ENOMEM) fprintf(stderr, "test: out of memory\n");
    int code = rc ? SB_EXIT_CONFIG : o.check_only ? print_checked(&r) : run_tests(&o, cfg, &r);
    fflush(stdout);
    report_free(&r);
    sb_config_free(cfg);
    return code;
}
