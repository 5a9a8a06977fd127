/* router.c - `switchboard router -c FILE`: the process behind runtime.http.
 *
 * One libevent loop does everything: the HTTP gateway (http.c), the worker
 * dispatchers (models.c), pipeline runs and tool children, the msgpack
 * socket DIR/router.sock for `switchboard ask`. Nothing blocks it: workers
 * are reached through sb_ipc_aclient, tools through non-blocking pipes.
 *
 * Signals (delivered through the loop, never in signal context):
 *   SIGHUP          re-read the config and the API keys; swap pipelines,
 *                   models and keys only when all of it validates, else
 *                   keep serving the old ones
 *   SIGTERM/SIGINT  stop taking requests (503), let in-flight ones finish
 *                   for runtime.drain_ms, then exit 0; a second one exits now
 */
#include <ctype.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "router/obs.h"
#include "router/router_internal.h"
#include "common/sb_cmd.h"
#include "common/sb_net.h"
#include "ipc/sb_ipc.h"

typedef struct {
    rt r;
    int drain_ms;
    struct event *sig_hup, *sig_term, *sig_int, *drain_timer;
} router;

static int load_conf(const char *path, rt_conf **out, char *err) {
    *out = NULL;
    sb_config *cfg;
    int rc = sb_config_load(path, &cfg, err);
    if (rc) return rc;
    sb_pipelines *p;
    if ((rc = sb_pipelines_load(cfg, &p, err))) {
        sb_config_free(cfg);
        return rc;
    }
    rt_conf *c = sb_calloc(1, sizeof *c);
    if (!c) {
        sb_pipelines_free(p);
        sb_config_free(cfg);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    c->cfg = cfg;
    c->pipes = p;
    c->refs = 1;
    *out = c;
    return 0;
}

/* ---------------------------------------------------------- router.sock */

typedef struct { sb_ipc_reply *reply; rt_run *run; rt *r; double t0; rt_privacy_call *privacy; } sock_call;

static void sock_call_free(sock_call *sc) {
    rt_privacy_free(sc->privacy);
    sb_free(sc);
}

/* The socket door's sink: the call is traced, then answered in msgpack -
 * {output, json: the result as the pipeline API's JSON}, or an error. */
static void sock_trace(sock_call *sc, const rt_run *run, int status, const char *error) {
    char id[RT_CALL_ID_MAX + 1];
    rt_call_id_new(sc->r, id);
    rt_call_info ci = { .call_id = id, .pipeline = rt_run_pipeline(run), .input = rt_run_input(run), .run = run,
                        .cache = "off", .source = "socket", .status = status, .error = error, .t0 = sc->t0 };
    rt_trace_record(sc->r, &ci);
}

static void sock_finish(void *arg, const rt_answer *a) {
    sock_call *sc = arg;
    sock_trace(sc, a->run, 200, NULL);
    sb_jw j;
    sb_jw_init(&j);
    if (a->result) sb_jw_raw(&j, a->result, a->result_len);     /* restored by privacy_door.c */
    else rt_run_result_json(a->run, &j);
    sb_mp_writer *w;
    if (j.oom || sb_mp_writer_new(&w)) sb_ipc_reply_error(sc->reply, SB_IPC_INTERNAL, "out of memory");
    else {
        sb_mp_map(w, 2);
        sb_mp_str(w, "output");
        sb_mp_strn(w, a->text, a->len);
        sb_mp_kv_str(w, "json", j.p);
        sb_ipc_reply_ok(sc->reply, w);
        sb_mp_writer_free(w);
    }
    sb_jw_free(&j);
    sock_call_free(sc);
}

static void sock_error(void *arg, const rt_failure *f) {
    sock_call *sc = arg;
    sock_trace(sc, f->run, f->status, f->message);
    sb_ipc_reply_error(sc->reply, SB_IPC_INTERNAL, "%s: %s", f->type, f->message);
    sock_call_free(sc);
}

static void sock_cancel(void *arg, sb_ipc_reply *r) {
    sock_call *sc = arg;
    rt_run_cancel(sc->run);
    sb_ipc_reply_error(sc->reply, SB_IPC_CANCELLED, "cancelled");
    sock_call_free(sc);
}

static void m_pipeline(void *ud, sb_ipc_reply *reply, const char *method, const sb_mp_obj *params) {
    rt *r = ud;
    char err[SB_ERR_LEN];
    const char *name, *input;
    size_t name_len, input_len;
    static const char *const allowed[] = { "name", "input", NULL };
    if (sb_mp_check_keys(params, allowed, err) || sb_mp_get_str(params, "name", SB_MP_REQUIRED, &name, &name_len, err) ||
        sb_mp_get_str(params, "input", SB_MP_REQUIRED, &input, &input_len, err)) {
        sb_ipc_reply_error(reply, SB_IPC_INVALID_REQUEST, "%s", err);
        return;
    }
    if (strlen(name) != name_len || strlen(input) != input_len) {   /* as over HTTP (http_reply.c) */
        sb_ipc_reply_error(reply, SB_IPC_INVALID_REQUEST, "'%s': contains a NUL character",
                           strlen(name) != name_len ? "name" : "input");
        return;
    }
    sock_call *sc = sb_calloc(1, sizeof *sc);
    if (!sc) { sb_ipc_reply_error(reply, SB_IPC_INTERNAL, "out of memory"); return; }
    sc->reply = reply;
    sc->r = r;
    sc->t0 = sb_now_s();
    rt_sink sink = { NULL, sock_finish, sock_error, sc, NULL };
    rt_pipeline_ref ref;
    int rc = rt_pipeline_resolve(&r->ex, name, NULL, &ref, err);
    /* The caller's personal data is replaced here, as pipecall.c does for HTTP. */
    if (!rc && (rc = rt_privacy_enter(ref.p, input, NULL, &sc->privacy, err))) rt_pipeline_ref_release(&ref);
    if (!rc && sc->privacy) {
        input = rt_privacy_input(sc->privacy);
        rt_privacy_wrap(sc->privacy, &sink);
    }
    if (rc || rt_run_start_ref(&r->ex, &ref, input, &sink, &sc->run, err)) {
        sock_call_free(sc);
        sb_ipc_reply_error(reply, rc == SB_ENOMEM ? SB_IPC_INTERNAL : SB_IPC_INVALID_REQUEST, "%s", err);
        return;
    }
    rt_privacy_attach(sc->privacy, sc->run);
    sb_ipc_reply_on_cancel(reply, sock_cancel, sc);
}

static void m_health(void *ud, sb_ipc_reply *reply, const char *method, const sb_mp_obj *params) {
    rt *r = ud;
    sb_mp_writer *w;
    if (sb_mp_writer_new(&w)) { sb_ipc_reply_error(reply, SB_IPC_INTERNAL, "out of memory"); return; }
    size_t up = 0, n = 0;
    for (size_t i = 0; i < r->ex.be.n_models; i++)
        if (!r->ex.be.models[i]->removed && !r->ex.be.models[i]->remote) { n++; up += r->ex.be.models[i]->up; }
    sb_mp_map(w, 5);
    sb_mp_kv_str(w, "status", r->stopping ? "draining" : up == n ? "ok" : "degraded");
    sb_mp_kv_str(w, "name", "router");
    sb_mp_kv_i64(w, "pid", getpid());
    sb_mp_kv_i64(w, "models_up", (int64_t)up);
    sb_mp_kv_i64(w, "in_flight", (int64_t)r->metrics.in_flight);
    sb_ipc_reply_ok(reply, w);
    sb_mp_writer_free(w);
    /* Not every worker seen up: look again now rather than at the next 1 s
     * probe. The supervisor asks this until "ok" to log its `ready` line,
     * which would otherwise come up to a second after the workers are. */
    if (up < n && !r->stopping) rt_models_poll(&r->ex.be);
}

/* ------------------------------------------------------------- signals */

static void reload(router *ro) {
    rt *r = &ro->r;
    char err[SB_ERR_LEN];
    rt_conf *c;
    if (load_conf(r->config_path, &c, err)) {
        sb_error("reload rejected, still serving the previous config: %s", err);
        return;
    }
    rt_keys *keys;
    if (rt_keys_load(c->cfg, &keys, err)) {
        sb_error("reload rejected, still serving the previous config: %s", err);
        rt_conf_release(c);
        return;
    }
    if (strcmp(c->cfg->runtime.http, r->ex.conf->cfg->runtime.http))
        sb_warn("runtime.http changed to %s: restart the router to listen there", c->cfg->runtime.http);
    const char *key_was = r->ex.conf->cfg->runtime.secret_key_file, *key_now = c->cfg->runtime.secret_key_file;
    if (r->sessions && (!key_was != !key_now || (key_was && strcmp(key_was, key_now))))
        sb_warn("runtime.secret_key_file changed: the open session store keeps the key it was opened with; "
                "restart the router to seal and open sessions' values with the new one");
    rt_keys_free(r->keys);
    r->keys = keys;
    if (rt_obs_configure(r, c->cfg, err)) sb_warn("console: %s", err);
    rt_conf_release(r->ex.conf);
    r->ex.conf = c;
    rt_models_sync(&r->ex.be, c->cfg);
    rt_intent_models_changed(&r->ex);        /* the new stages' indexes, for models already up */
    rt_sessions_start(r, c->cfg);           /* a pipeline with conversation: may be new */
    sb_info("reloaded %s: %zu model(s), %zu pipeline(s)", r->config_path, c->cfg->n_models, c->pipes ? c->pipes->n : 0);
}

static void drain_check(evutil_socket_t fd, short what, void *arg) {
    router *ro = arg;
    if (!ro->r.reqs) event_base_loopexit(ro->r.ex.be.base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    router *ro = arg;
    rt *r = &ro->r;
    if (sig == SIGHUP) { reload(ro); return; }
    if (r->stopping) {
        sb_warn("second signal: exiting without draining");
        event_base_loopexit(r->ex.be.base, NULL);
        return;
    }
    r->stopping = true;
    sb_info("signal %d: draining %zu request(s) for up to %d ms", (int)sig, (size_t)r->metrics.in_flight, ro->drain_ms);
    if (r->sock_server) sb_ipc_server_stop_listening(r->sock_server);
    struct timeval poll = { 0, 20000 }, deadline = { ro->drain_ms / 1000, (ro->drain_ms % 1000) * 1000 };
    ro->drain_timer = event_new(r->ex.be.base, -1, EV_PERSIST, drain_check, ro);
    event_add(ro->drain_timer, &poll);
    event_base_loopexit(r->ex.be.base, &deadline);
}

static void on_health_timer(evutil_socket_t fd, short what, void *arg) {
    rt_models_poll(arg);
    rt_sync_erasures(((rt *)arg)->sync, arg);
}
static void on_sweep_timer(evutil_socket_t fd, short what, void *arg) { rt_http_sweep(arg); }

/* ------------------------------------------------------------- command */

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard router -c FILE [options]\n\n"
            "The OpenAI-compatible HTTP gateway and pipeline engine (docs/router.md).\n"
            "Started by `switchboard run`; workers must listen on DIR/<model>.sock.\n\n"
            "  -c, --config FILE      the YAML config (runtime, models, pipelines, cache)\n"
            "  --listen HOST:PORT     override runtime.http\n"
            "  --body-timeout-ms N    408 when a request is not fully received in N ms (default 10000)\n"
            "  --max-body BYTES       413 above this request body size (default 1048576)\n"
            "  --max-headers BYTES    431 above this header size (default 16384)\n"
            "  --no-socket            do not serve DIR/router.sock\n"
            "  --check                validate the config and pipelines, then exit\n\n"
            "Environment: SB_ROUTER_BODY_TIMEOUT_MS sets --body-timeout-ms when the flag is absent.\n"
            "Signals: SIGHUP reloads the config (kept only if valid); SIGTERM drains.\n"
            "Exit status: 0 after a clean stop, 2 for a bad config or address.\n");
}

typedef struct {
    const char *config, *listen;
    int64_t body_ms, max_body, max_headers;
    bool no_socket, check;
} router_args;

/* argv into *a. -1 when the command ends here, with its exit code in *code. */
static int parse_args(int argc, char **argv, router_args *a, int *code) {
    enum { O_LISTEN = 256, O_BODY_MS, O_MAX_BODY, O_MAX_HEADERS, O_NO_SOCKET, O_CHECK };
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' }, { "listen", required_argument, NULL, O_LISTEN },
        { "body-timeout-ms", required_argument, NULL, O_BODY_MS },
        { "max-body", required_argument, NULL, O_MAX_BODY },
        { "max-headers", required_argument, NULL, O_MAX_HEADERS },
        { "no-socket", no_argument, NULL, O_NO_SOCKET }, { "check", no_argument, NULL, O_CHECK },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    *a = (router_args){ .body_ms = 10000, .max_body = 1 << 20, .max_headers = 16384 };
    *code = SB_EXIT_CONFIG;
    int ch, bad = 0;
    optind = 1;
    while (!bad && (ch = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': a->config = optarg; break;
        case O_LISTEN: a->listen = optarg; break;
        case O_BODY_MS: bad = sb_opt_int("router", "--body-timeout-ms", optarg, 100, 1 << 30, &a->body_ms); break;
        case O_MAX_BODY: bad = sb_opt_int("router", "--max-body", optarg, 100, 1 << 30, &a->max_body); break;
        case O_MAX_HEADERS: bad = sb_opt_int("router", "--max-headers", optarg, 100, 1 << 30, &a->max_headers); break;
        case O_NO_SOCKET: a->no_socket = true; break;
        case O_CHECK: a->check = true; break;
        case 'h': usage(stdout); *code = SB_EXIT_OK; return -1;
        default: usage(stderr); return -1;
        }
    }
    if (bad) return -1;
    if (!a->config || optind != argc) { usage(stderr); return -1; }
    /* The supervisor starts us with -c only; tests and operators can still
     * tune the limits through the environment it passes on. */
    const char *env_bt = getenv("SB_ROUTER_BODY_TIMEOUT_MS");
    if (env_bt && a->body_ms == 10000 && strtol(env_bt, NULL, 10) >= 100) a->body_ms = strtol(env_bt, NULL, 10);
    return 0;
}

/* The response cache and its sync thread; a cache that will not open is
 * logged and left off, the router serves without it. */
static void open_cache(rt *r, const sb_config *cfg) {
    char err[SB_ERR_LEN];
    if (cfg->cache.enabled) {
        sb_cache_opts co = { .max_bytes = (uint64_t)cfg->cache.max_mb << 20, .default_ttl_s = cfg->cache.ttl_s };
        if (sb_cache_open(cfg->cache.path, &co, &r->cache, err)) {
            sb_warn("response cache disabled: %s", err);
            r->cache = NULL;
        }
    }
    /* The sync thread carries cache entries and pulls knowledge bases. */
    size_t n_pull = 0;
    for (size_t i = 0; i < cfg->n_kbs; i++) n_pull += cfg->kbs[i].pull;
    if (!cfg->cache.sync.url || (!r->cache && !n_pull)) return;
    if (rt_sync_start(r->cache, cfg, &r->sync, err))
        sb_warn("cloud sync disabled: %s", err);
    else
        sb_info("cloud sync with %s every %d s as edge '%s' (%s, %zu knowledge base(s) pulled)",
                cfg->cache.sync.url, cfg->cache.sync.interval_s, cfg->cache.sync.edge_id,
                r->cache ? "response cache" : "no cache", n_pull);
}

/* What the backends and runs report up (rt_hooks): latencies, a model that
 * came up (embedding indexes wait for it), whether traces are kept. */
static void hook_observe(void *arg, int f, const char *a, const char *b, double seconds) {
    rt_hist_observe(arg, f, a, b, seconds);
}
static void hook_models_changed(void *arg) { rt_intent_models_changed(&((rt *)arg)->ex); }
static bool hook_tracing(void *arg) { return rt_trace_on(arg); }

/* The event loop's sources: HTTP, DIR/router.sock, signals, timers. */
static int start_serving(router *ro, const char *host, int port, bool no_socket, char *err) {
    rt *r = &ro->r;
    const sb_config *cfg = r->ex.conf->cfg;
    if (!(r->ex.be.base = sb_ipc_base_new())) return sb_seterr(err, SB_ENOMEM, "no event base");
    r->ex.be.hooks = (rt_hooks){ .arg = r, .observe = hook_observe, .models_changed = hook_models_changed,
                                 .tracing = hook_tracing };
    if (rt_obs_configure(r, cfg, err)) sb_warn("console: %s", err);
    rt_models_sync(&r->ex.be, cfg);
    if (rt_http_start(r, host, port, err)) return SB_EIO;
    static const sb_ipc_method methods[] = { { "health", m_health }, { "pipeline", m_pipeline } };
    char sock[512], why[SB_ERR_LEN];
    snprintf(sock, sizeof sock, "%s/router.sock", cfg->runtime.dir);
    sb_ipc_server_opts so = { .path = sock, .methods = methods, .n_methods = SB_ARRAY_LEN(methods), .ud = r };
    if (!no_socket && sb_ipc_server_new(r->ex.be.base, &so, &r->sock_server, why))
        return sb_seterr(err, SB_EIO, "cannot serve %s: %s", sock, why);
    ro->sig_hup = evsignal_new(r->ex.be.base, SIGHUP, on_signal, ro);
    ro->sig_term = evsignal_new(r->ex.be.base, SIGTERM, on_signal, ro);
    ro->sig_int = evsignal_new(r->ex.be.base, SIGINT, on_signal, ro);
    r->health_timer = event_new(r->ex.be.base, -1, EV_PERSIST, on_health_timer, r);
    r->sweep_timer = event_new(r->ex.be.base, -1, EV_PERSIST, on_sweep_timer, r);
    struct timeval one_s = { 1, 0 }, sweep = { 0, 200000 };
    event_add(ro->sig_hup, NULL);
    event_add(ro->sig_term, NULL);
    event_add(ro->sig_int, NULL);
    event_add(r->health_timer, &one_s);
    event_add(r->sweep_timer, &sweep);
    rt_models_poll(&r->ex.be);
    rt_sessions_start(r, cfg);
    rt_retention_start(r);
    return 0;
}

/* After the loop: answer what the drain deadline left in flight, so
 * evhttp_free finds no request of ours. */
static void finish_requests(rt *r) {
    if (r->reqs) sb_warn("drain deadline passed with requests in flight; cancelling them");
    for (int spins = 0; r->reqs && spins < 1000; spins++) {
        rt_req *q = r->reqs;
        if (q->gone) {                  /* its deferred finish is queued: run it */
            event_base_loop(r->ex.be.base, EVLOOP_NONBLOCK);
            continue;
        }
        if (q->on_gone) q->on_gone(q);
        q->on_gone = NULL;
        rt_req_retry_after(q, 5);
        rt_req_error(q, 503, "server_busy", "shutting_down", "the router is shutting down");
    }
}

static void close_router(router *ro) {
    rt *r = &ro->r;
    if (ro->drain_timer) event_free(ro->drain_timer);
    if (ro->sig_hup) event_free(ro->sig_hup);
    if (ro->sig_term) event_free(ro->sig_term);
    if (ro->sig_int) event_free(ro->sig_int);
    if (r->health_timer) event_free(r->health_timer);
    if (r->sweep_timer) event_free(r->sweep_timer);
    rt_retention_stop(r);
    if (r->sock_server) sb_ipc_server_free(r->sock_server);
    rt_obs_free(r);
    rt_http_stop(r);
    rt_sessions_stop(r);
    rt_intent_cancel_builds(r->ex.conf);   /* their jobs belong to the models */
    rt_models_free(&r->ex.be);
    if (r->ex.be.base) event_base_free(r->ex.be.base);
    rt_sync_stop(r->sync);
    sb_cache_close(r->cache);
    rt_conf_release(r->ex.conf);
    rt_keys_free(r->keys);
    sb_free(r->config_path);
}

int sb_cmd_router(int argc, char **argv) {
    router_args a;
    int code;
    if (parse_args(argc, argv, &a, &code)) return code;
    char err[SB_ERR_LEN];
    router ro;
    memset(&ro, 0, sizeof ro);
    rt *r = &ro.r;
    if (load_conf(a.config, &r->ex.conf, err)) {
        fprintf(stderr, "%s\n", err);
        return SB_EXIT_CONFIG;
    }
    const sb_config *cfg = r->ex.conf->cfg;
    if (a.check) {
        printf("%s: ok (%zu model(s), %zu pipeline(s))\n", a.config, cfg->n_models, r->ex.conf->pipes ? r->ex.conf->pipes->n : 0);
        rt_conf_release(r->ex.conf);
        return SB_EXIT_OK;
    }
    sb_log_setup("router", cfg->runtime.log_level);
    int rc = SB_EXIT_CONFIG;
    char host[SB_NET_HOST_MAX];
    int port;
    if (sb_net_host_port(a.listen ? a.listen : cfg->runtime.http, 0, host, sizeof host, &port, err)) {
        sb_error("bad listen address: %s", err);
        goto out;
    }
    if (rt_keys_load(cfg, &r->keys, err)) { sb_error("%s", err); goto out; }
    r->config_path = sb_strdup(a.config);
    r->body_timeout_ms = (int)a.body_ms;
    r->max_body = (size_t)a.max_body;
    r->max_headers = (size_t)a.max_headers;
    r->started = sb_now_s();
    r->started_wall = (long long)time(NULL);
    ro.drain_ms = cfg->runtime.drain_ms;
    signal(SIGPIPE, SIG_IGN);           /* a vanished client is a write error, not a death */
    open_cache(r, cfg);
    if (start_serving(&ro, host, port, a.no_socket, err)) { sb_error("%s", err); goto out; }
    sb_info("listening on http://%s:%d (%zu model(s), %zu pipeline(s), %zu API key(s)%s)", host, port,
            cfg->n_models, r->ex.conf->pipes ? r->ex.conf->pipes->n : 0, rt_keys_count(r->keys),
            r->cache ? ", cache on" : "");
    event_base_dispatch(r->ex.be.base);
    finish_requests(r);
    sb_info("stopped");
    rc = SB_EXIT_OK;
out:
    close_router(&ro);
    return rc;
}
