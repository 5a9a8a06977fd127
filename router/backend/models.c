/* models.c - one dispatcher per worker socket.
 *
 * Every HTTP request and pipeline stage that needs a model goes through
 * rt_model_submit_*(), with a typed request. The router keeps its own queue per model and hands the
 * worker at most rt_model_capacity() calls at a time: the number of
 * sequences the worker says it runs at once (`parallel` in its health), so
 * each call joins the worker's running batch at its next step, and a deeper
 * queue there would only make the order the worker's and turn a burst of
 * clients into `busy` errors. Here the burst waits its turn (up to the
 * model's max_queue), by priority and then first come first served, and the
 * queue depth is visible in /metrics.
 *
 * A health probe every second per worker tells up from down (so requests
 * to a dead worker get 503 at once, not after a connect timeout), a pid
 * that changed means the supervisor restarted it, and a batching worker's
 * capacity and KV pool figures come with it.
 */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "router/backend/backend_internal.h"

struct rt_job {
    rt_job *next;
    rt_model *m;
    int method;                     /* RT_CALL_* */
    /* The typed request, the job's own copy: the backend the dispatch picks
     * encodes it once, priority included (one of the three is set). */
    rt_gen_req *gen;
    rt_score_req *score;
    rt_embed_req *embed;
    int timeout_ms;
    rt_token_fn on_token;
    rt_done_fn on_done;
    void *arg;
    uint64_t call_id;
    bool sent, cancelled;
    bool got_token;                 /* a streamed token came: its time to first token is counted */
    double t_submit, t_sent;        /* for the queue-wait, call and TTFT histograms (rt_hooks.observe) */
    int priority;
    double key;                     /* queue order: t_submit - priority * RT_PRIORITY_STEP_S */
    bool remote;                    /* sent through upstream.c (a reload may flip m->remote) */
};

static void dispatch(rt_model *m);

void rt_observe(const rt_backends *be, int f, const char *a, const char *b, double seconds) {
    if (be->hooks.observe) be->hooks.observe(be->hooks.arg, f, a, b, seconds);
}

static void models_changed(const rt_backends *be) {
    if (be->hooks.models_changed) be->hooks.models_changed(be->hooks.arg);
}

static void dispatch_cb(evutil_socket_t fd, short what, void *arg) { dispatch(arg); }

static const char *const method_names[] = { "generate", "score", "embed" };

static void job_free(rt_job *j) {
    if (j->gen) rt_gen_free(j->gen);
    sb_free(j->gen);
    rt_score_free(j->score);
    rt_embed_free(j->embed);
    sb_free(j);
}

int rt_worker_error_status(const char *code, const char **type) {
    static const struct { const char *code; int status; const char *type; } map[] = {
        { SB_IPC_BUSY, 503, "server_busy" },
        { SB_IPC_DISCONNECTED, 503, "model_unavailable" },
        { SB_IPC_INVALID_REQUEST, 400, "invalid_request_error" },
        { SB_IPC_INPUT_TOO_LONG, 400, "input_too_long" },         /* an encoder's token caps */
        { SB_IPC_TIMEOUT, 504, "timeout" },
        { SB_IPC_CANCELLED, 499, "cancelled" },
        { "upstream_error", 502, "upstream_error" },      /* upstream.c */
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(map); i++)
        if (code && !strcmp(code, map[i].code)) {
            if (type) *type = map[i].type;
            return map[i].status;
        }
    if (type) *type = "server_error";
    return 500;
}

/* Account a finished generate for /metrics (tokens/s per model). */
static void account(rt_model *m, const rt_reply *res) {
    if (!res->ok) {
        m->errors++;
        if (res->code && !strcmp(res->code, SB_IPC_BUSY)) m->busy++;
        /* An upstream has no health probe to bring it back: each call tries. */
        if (res->code && !strcmp(res->code, SB_IPC_DISCONNECTED) && !m->remote) m->up = false;
        return;
    }
    if (res->method != RT_CALL_GENERATE) return;
    int64_t pt = res->gen.prompt_tokens, ct = res->gen.completion_tokens, rt_ = res->gen.reused_tokens;
    double pms = res->gen.prompt_ms, gms = res->gen.gen_ms;
    m->prompt_tokens += (uint64_t)pt;
    m->completion_tokens += (uint64_t)ct;
    m->reused_tokens += (uint64_t)rt_;
    m->prompt_s += pms / 1e3;
    m->gen_s += gms / 1e3;
    if (ct > 0 && gms > 0) m->last_tps = (double)ct / (gms / 1e3);
}

/* The model histograms (rt_hooks.observe). A generate that did not stream has its
 * time to first token from the worker's prompt time. */
static void observe_call(rt_job *j, const rt_reply *res) {
    if (!res->ok) return;
    rt_backends *be = j->m->be;
    rt_observe(be, RT_H_MODEL, j->m->name, method_names[j->method], sb_now_s() - j->t_sent);
    double pms = res->gen.prompt_ms;
    if (!j->got_token && j->method == RT_CALL_GENERATE && pms > 0)
        rt_observe(be, RT_H_TTFT_MODEL, j->m->name, NULL, j->t_sent - j->t_submit + pms / 1e3);
}

/* A streamed token, from either backend. */
static void on_call_token(void *arg, const rt_token *t) {
    rt_job *j = arg;
    if (!j->got_token) {
        j->got_token = true;
        rt_observe(j->m->be, RT_H_TTFT_MODEL, j->m->name, NULL, sb_now_s() - j->t_submit);
    }
    if (!j->cancelled && j->on_token) j->on_token(j->arg, t);
}

/* A worker's event: a "token" carries the next text and, when asked for,
 * its logprobs (docs/ipc.md). */
static void on_worker_event(void *arg, uint64_t id, const char *event, const sb_mp_obj *data) {
    rt_token t;
    void *store;
    if (strcmp(event, "token")) return;
    int rc = rt_token_from_worker(data, &t, &store);
    if (rc == SB_EINVAL) return;
    if (rc == SB_ENOMEM) sb_error("model '%s': out of memory reading a token's logprobs", ((rt_job *)arg)->m->name);
    on_call_token(arg, &t);
    sb_free(store);
}

/* Either backend's answer, typed. */
static void on_call_done(void *arg, const rt_reply *res) {
    rt_job *j = arg;
    rt_model *m = j->m;
    m->n_inflight--;
    if (res->ok) {
        /* A moving average over the last ~5 calls: Retry-After follows the
         * load without jumping on one long answer. */
        double dt = sb_now_s() - j->t_sent;
        m->service_s = m->service_s > 0 ? 0.8 * m->service_s + 0.2 * dt : dt;
    }
    account(m, res);
    observe_call(j, res);
    if (!j->cancelled) j->on_done(j->arg, res);
    job_free(j);
    dispatch(m);
}

static void on_worker_done(void *arg, uint64_t id, const sb_ipc_result *res) {
    rt_job *j = arg;
    rt_reply r;
    void *store[2];
    rt_reply_from_worker(j->method, res, &r, store);
    on_call_done(j, &r);
    sb_free(store[0]);
    sb_free(store[1]);
}

static void fail_job_now(rt_job *j, const char *code, const char *msg) {
    rt_reply res = { .method = j->method, .ok = false, .code = code, .message = msg, .gen.text = "" };
    if (!j->cancelled) j->on_done(j->arg, &res);
    job_free(j);
}

int rt_model_capacity(const rt_model *m) {
    if (m->remote) return m->cfg_parallel > 0 ? m->cfg_parallel : RT_UPSTREAM_INFLIGHT;
    if (m->parallel > 0) return (int)m->parallel;
    return m->cfg_parallel > 0 ? m->cfg_parallel : RT_WORKER_INFLIGHT;
}

int rt_model_retry_after(const rt_model *m) {
    if (m->service_s <= 0) return 1;
    /* By then the worker has taken everything queued behind its slots now:
     * a retry finds room. What is queued behind the slots is counted from
     * both counters: a burst admitted in one loop pass is all in n_waiting
     * until the deferred dispatch moves up to capacity of it in flight, and
     * counting those as queued would double the answer on a busy box. */
    int cap = rt_model_capacity(m), behind = m->n_waiting + m->n_inflight - cap;
    double s = ((behind > 0 ? behind : 0) + 1) * m->service_s / cap;
    return s >= RT_RETRY_AFTER_MAX_S ? RT_RETRY_AFTER_MAX_S : s < 1 ? 1 : (int)s + (s > (int)s);
}

/* The local-worker backend: the typed request is encoded here, once, with
 * its priority when the worker takes one. */
static int worker_call(rt_model *m, rt_job *j, bool send_prio, char *err) {
    sb_mp_writer *p = NULL;
    int prio = send_prio ? j->priority : 0;
    int rc = sb_mp_writer_new(&p) ? SB_ENOMEM
             : j->method == RT_CALL_GENERATE ? rt_gen_encode(j->gen, prio, p)
             : j->method == RT_CALL_SCORE ? rt_score_encode_prio(j->score, prio, p)
             : rt_embed_encode(j->embed, p);
    if (!rc) rc = sb_ipc_aclient_call(m->ac, method_names[j->method], p, j->timeout_ms,
                                      j->method == RT_CALL_GENERATE ? on_worker_event : NULL, on_worker_done, j,
                                      &j->call_id, err);
    else rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_mp_writer_free(p);
    return rc;
}

/* Hand waiting jobs to the worker while it has room. */
static void dispatch(rt_model *m) {
    while (m->head && m->n_inflight < rt_model_capacity(m)) {
        rt_job *j = m->head;
        m->head = j->next;
        if (!m->head) m->tail = NULL;
        m->n_waiting--;
        char err[SB_ERR_LEN];
        j->remote = m->remote;
        bool send_prio = !j->remote && j->priority && m->parallel > 0 && j->method != RT_CALL_EMBED;
        int rc = j->remote ? rt_upstream_call(m, j->method, j->gen, j->timeout_ms, on_call_token, on_call_done,
                                              j, &j->call_id, err)
                           : worker_call(m, j, send_prio, err);
        if (rc) {
            if (!m->remote && rc != SB_ENOMEM) m->up = false;   /* out of memory is ours, not the worker's */
            char msg[SB_ERR_LEN + 64];
            snprintf(msg, sizeof msg, "model '%s' is not available: %s", m->name, err);
            fail_job_now(j, SB_IPC_DISCONNECTED, msg);
            continue;
        }
        j->sent = true;
        j->t_sent = sb_now_s();
        rt_observe(m->be, RT_H_QUEUE, m->name, NULL, j->t_sent - j->t_submit);
        m->n_inflight++;
        m->requests++;
        sb_debug("model '%s': %s call %llu sent, priority %d%s, %d of %d in flight, %d waiting", m->name,
                 method_names[j->method],
                 (unsigned long long)j->call_id, j->priority, send_prio ? " (passed on)" : "", m->n_inflight,
                 rt_model_capacity(m), m->n_waiting);
    }
}

/* Into the queue by key; equal keys keep their arrival order. The common
 * case (same priority, later arrival) appends at once. */
static void enqueue(rt_model *m, rt_job *j) {
    if (!m->tail || m->tail->key <= j->key) {
        if (m->tail) m->tail->next = j; else m->head = j;
        m->tail = j;
        return;
    }
    rt_job **at = &m->head;
    while ((*at)->key <= j->key) at = &(*at)->next;
    j->next = *at;
    *at = j;
}

/* Whether m takes one more call now: 0, or the refusal. */
static int admit(const rt_model *m, char *err) {
    int rc = 0;
    if (m->removed)
        rc = sb_seterr(err, SB_ENOTFOUND, "model '%s' was removed from the configuration", m->name);
    else if (m->failed && !m->up)
        rc = sb_seterr(err, SB_EIO, "model '%s' failed and the supervisor gave up on it (see its log)", m->name);
    else if (!m->up && m->n_inflight == 0)
        rc = sb_seterr(err, SB_EIO, "model '%s' is down (its worker does not answer on %s)", m->name, m->sock);
    /* Admissions count the moment they are made: a job joins n_waiting
     * here and moves to n_inflight only in the deferred dispatch, so a
     * burst that arrives in one loop pass must be bounded by the sum. */
    else if (m->n_waiting + m->n_inflight >= m->max_waiting + rt_model_capacity(m))
        rc = sb_seterr(err, SB_EBUSY, "model '%s' is full (%d in flight, %d waiting, max_queue %d); retry later",
                       m->name, m->n_inflight, m->n_waiting, m->max_waiting);
    return rc;
}

/* Into m's queue, dispatched from the loop. */
static void queue_job(rt_model *m, rt_job *j, rt_job **out) {
    j->key = j->t_submit - j->priority * RT_PRIORITY_STEP_S;
    enqueue(m, j);
    m->n_waiting++;
    *out = j;
    /* Dispatch from the loop, never inside submit: on_done must not run
     * before the caller has stored the job handle. */
    if (m->n_inflight < rt_model_capacity(m)) {
        struct timeval now = { 0, 0 };
        event_base_once(m->be->base, -1, EV_TIMEOUT, dispatch_cb, m, &now);
    }
}

/* A call of method with the job's own copy of its typed request: into m's
 * queue (encoded when dispatched). The copy is taken over, freed here on a
 * refusal. */
static int submit(rt_model *m, int method, rt_gen_req *gen, rt_score_req *score, rt_embed_req *embed, int priority,
                  int timeout_ms, rt_token_fn on_token, rt_done_fn on_done, void *arg, rt_job **out, char *err) {
    *out = NULL;
    rt_job *j = sb_calloc(1, sizeof *j);
    if (j) *j = (rt_job){ .m = m, .method = method, .gen = gen, .score = score, .embed = embed,
                          .timeout_ms = timeout_ms, .on_token = on_token, .on_done = on_done, .arg = arg,
                          .t_submit = sb_now_s(), .priority = priority };
    int rc = admit(m, err);
    if (!rc && (!j || !(gen || score || embed))) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    if (rc) {
        if (j) job_free(j);
        else { if (gen) rt_gen_free(gen); sb_free(gen); rt_score_free(score); rt_embed_free(embed); }
        return rc;
    }
    queue_job(m, j, out);
    return 0;
}

int rt_model_submit_score(rt_model *m, const rt_score_req *r, int timeout_ms, rt_done_fn on_done, void *arg,
                          rt_job **out, char *err) {
    return submit(m, RT_CALL_SCORE, NULL, rt_score_copy(r), NULL, r->priority, timeout_ms, NULL, on_done, arg, out,
                  err);
}

int rt_model_submit_embed(rt_model *m, const rt_embed_req *r, int timeout_ms, rt_done_fn on_done, void *arg,
                          rt_job **out, char *err) {
    return submit(m, RT_CALL_EMBED, NULL, NULL, rt_embed_copy(r), r->priority, timeout_ms, NULL, on_done, arg, out,
                  err);
}

int rt_model_submit_gen(rt_model *m, const rt_gen_req *g, int timeout_ms, rt_token_fn on_token, rt_done_fn on_done,
                        void *arg, rt_job **out, char *err) {
    rt_gen_req *copy = sb_malloc(sizeof *copy);
    if (copy && rt_gen_copy(copy, g)) { sb_free(copy); copy = NULL; }     /* rt_gen_copy freed what it had */
    return submit(m, RT_CALL_GENERATE, copy, NULL, NULL, g->priority, timeout_ms, on_token, on_done, arg, out, err);
}

/* Take an unsent job out of its model's FIFO. */
static void unqueue(rt_job *j) {
    rt_model *m = j->m;
    rt_job *prev = NULL;
    for (rt_job *k = m->head; k && k != j; k = k->next) prev = k;
    if (prev) prev->next = j->next; else m->head = j->next;
    if (m->tail == j) m->tail = prev;
    m->n_waiting--;
}

void rt_job_cancel(rt_job *j) {
    if (!j || j->cancelled) return;
    j->cancelled = true;
    rt_model *m = j->m;
    /* A job still in the FIFO leaves it now: its caller is gone, and its
     * place must not count against max_queue until dispatch reaches it. */
    if (!j->sent) {
        unqueue(j);
        job_free(j);
        return;
    }
    /* One at the worker: sb_ipc_aclient_cancel tells the worker to stop and
     * promises no more callbacks, so its slot is given back here (the worker
     * stops within a token; the next job simply queues behind that). The
     * next dispatch runs from the loop, not inside whoever is cancelling. */
    if (j->remote) rt_upstream_cancel(m, j->call_id);
    else sb_ipc_aclient_cancel(m->ac, j->call_id);
    m->n_inflight--;
    job_free(j);
    struct timeval now = { 0, 0 };
    event_base_once(m->be->base, -1, EV_TIMEOUT, dispatch_cb, m, &now);
}

rt_model *rt_model_find(const rt_backends *be, const char *name) {
    for (size_t i = 0; i < be->n_models; i++)
        if (!be->models[i]->removed && !strcmp(be->models[i]->name, name)) return be->models[i];
    return NULL;
}

/* ------------------------------------------------------------- health */

/* A batching worker's figures from its health reply; -1 where absent. */
static void read_batch_health(rt_model *m, const sb_mp_obj *h) {
    static const char *const keys[] = { "parallel", "running", "kv_blocks_total", "kv_blocks_free",
                                        "prefix_hits", "prefix_misses", "prefix_tokens_reused",
                                        "spec_drafted", "spec_accepted" };
    int64_t *const at[] = { &m->parallel, &m->running, &m->kv_blocks_total, &m->kv_blocks_free,
                            &m->prefix_hits, &m->prefix_misses, &m->prefix_tokens_reused,
                            &m->spec_drafted, &m->spec_accepted };
    for (size_t i = 0; i < SB_ARRAY_LEN(keys); i++) {
        int64_t v = -1;
        if (h && sb_mp_get_int(h, keys[i], SB_MP_OPTIONAL, 0, INT64_MAX, &v, NULL)) v = -1;
        *at[i] = v;
    }
    if (m->parallel == 0) m->parallel = -1;     /* never a capacity of 0 */
    if (m->parallel > SB_CONFIG_MAX_PARALLEL) m->parallel = SB_CONFIG_MAX_PARALLEL;
}

static void on_health(void *arg, uint64_t id, const sb_ipc_result *res) {
    rt_model *m = arg;
    m->probing = false;
    int64_t pid = 0;
    const char *kind = NULL;
    if (res->ok && sb_mp_get_int(res->result, "pid", SB_MP_OPTIONAL, 0, INT64_MAX, &pid, NULL) == 0) {
        if (!m->up) sb_info("model '%s': worker up (pid %lld)", m->name, (long long)pid);
        /* A worker says what it serves; an older one without "kind" is a decoder. */
        sb_mp_get_str(res->result, "kind", SB_MP_OPTIONAL, &kind, NULL, NULL);
        bool was = m->kind_known && m->encoder, came_up = !m->up || pid != m->pid;
        m->encoder = kind && !strcmp(kind, "encoder");
        m->kind_known = true;

        if (m->pid && pid != m->pid) m->restarts++;
        m->pid = pid;
        m->up = true;
        read_batch_health(m, res->result);
        if (came_up || was != m->encoder) models_changed(m->be);
    } else {
        if (m->up) sb_warn("model '%s': worker down (%s)", m->name, res->message ? res->message : "no answer");
        if (m->up) m->down_since = sb_now_s();
        m->up = false;
    }
    if (m->up) dispatch(m);
}

/* DIR/state.json, written by the supervisor on every state change, knows
 * what the router cannot see from the socket: how often a worker was
 * restarted and whether it was given up on (crash loop, bad model). */
static void read_supervisor_state(rt_backends *be) {
    if (!be->cfg) return;
    char path[600];
    snprintf(path, sizeof path, "%s/state.json", be->cfg->runtime.dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    sb_json_doc *d;
    if (n == sizeof buf || sb_json_parse(buf, n, &d, NULL)) return;
    const sb_json *models = sb_json_get(sb_json_root(d), "models");
    for (size_t i = 0; i < be->n_models; i++) {
        rt_model *m = be->models[i];
        const sb_json *e = sb_json_get(models, m->name);
        if (!e) continue;
        const char *state = sb_json_str(sb_json_get(e, "state"));
        const sb_json *rs = sb_json_get(e, "restarts");
        if (sb_json_is_int(rs, 0, INT32_MAX) && (uint64_t)sb_json_num(rs) > m->restarts)
            m->restarts = (uint64_t)sb_json_num(rs);
        m->failed = state && !strcmp(state, "failed");
    }
    sb_json_doc_free(d);
}

void rt_models_poll(rt_backends *be) {
    read_supervisor_state(be);
    for (size_t i = 0; i < be->n_models; i++) {
        rt_model *m = be->models[i];
        if (m->remote || m->removed || m->probing) continue;
        uint64_t id;
        /* A probe that cannot even connect fails synchronously: down. */
        if (sb_ipc_aclient_call(m->ac, "health", NULL, 2000, NULL, on_health, m, &id, NULL) == 0) m->probing = true;
        else {
            if (m->up) {
                sb_warn("model '%s': worker down (cannot connect to %s)", m->name, m->sock);
                m->down_since = sb_now_s();
            }
            m->up = false;
        }
    }
}

/* ------------------------------------------------------------- config */

static int socket_path(const sb_config *cfg, const char *name, char *out, size_t n) {
    return snprintf(out, n, "%s/%s.sock", cfg->runtime.dir, name) < (int)n ? 0 : -1;
}

void rt_models_sync(rt_backends *be, const sb_config *cfg) {
    be->cfg = cfg;
    for (size_t i = 0; i < be->n_models; i++) be->models[i]->removed = true;
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sb_config_model *cm = &cfg->models[i];
        char path[512];
        if (socket_path(cfg, cm->name, path, sizeof path)) continue;
        rt_model *m = NULL;
        for (size_t k = 0; k < be->n_models; k++)
            if (!strcmp(be->models[k]->name, cm->name)) m = be->models[k];
        if (m && strcmp(m->sock, path)) {
            /* Socket moved (runtime.dir changed): reconnect there. */
            sb_ipc_aclient *ac;
            if (sb_ipc_aclient_new(be->base, path, 0, &ac, NULL) == 0) {
                sb_free(m->sock);
                m->sock = sb_strdup(path);
                /* The old client's calls get no callbacks once freed; only
                 * swap when nothing is in flight there. */
                if (m->n_inflight == 0) { sb_ipc_aclient_free(m->ac); m->ac = ac; }
                else sb_ipc_aclient_free(ac);
            }
        }
        if (!m) {
            rt_model **nm = sb_realloc(be->models, (be->n_models + 1) * sizeof *nm);
            if (!nm) continue;
            be->models = nm;
            m = sb_calloc(1, sizeof *m);
            if (!m) continue;
            m->be = be;
            m->up = true;           /* until a probe or a call says otherwise */
            read_batch_health(m, NULL);
            m->name = sb_strdup(cm->name);
            m->sock = sb_strdup(path);
            if (!m->name || !m->sock || sb_ipc_aclient_new(be->base, path, 0, &m->ac, NULL)) {
                sb_free(m->name);
                sb_free(m->sock);
                sb_free(m);
                continue;
            }
            be->models[be->n_models++] = m;
        }
        m->removed = false;
        m->remote = cm->upstream != NULL;
        sb_free(m->gguf);
        m->gguf = cm->gguf ? sb_strdup(cm->gguf) : NULL;
        m->max_waiting = cm->max_queue;
        m->cfg_parallel = cm->parallel;
        m->deadline_ms = cm->deadline_ms;
        m->max_tokens = cm->max_tokens;
        m->fingerprint[0] = '\0';
        /* Always: the intent stage's embedding cache is keyed by it too. */
        if (cm->gguf) {
            char err[SB_ERR_LEN];
            if (sb_cache_fingerprint_file(cm->gguf, 0, m->fingerprint, err)) {
                sb_warn("model '%s': no fingerprint, its answers will not be cached: %s", cm->name, err);
                m->fingerprint[0] = '\0';
            }
            /* An adapter changes every vector: the model with it is another
             * model to the caches (an intent stage's embeddings above all),
             * and a retrained adapter another still. Adapters are small:
             * every byte is hashed. */
            char afp[SB_CACHE_KEY_HEX];
            if (m->fingerprint[0] && cm->adapter) {
                if (sb_cache_fingerprint_file(cm->adapter, SB_FP_FULL, afp, err)) {
                    sb_warn("model '%s': no fingerprint for its adapter, its answers will not be cached: %s",
                            cm->name, err);
                    m->fingerprint[0] = '\0';
                } else {
                    char both[SB_CACHE_KEY_HEX];
                    sb_cache_key("model+adapter", m->fingerprint, afp, "", both);
                    memcpy(m->fingerprint, both, sizeof both);
                }
            }
        }
    }
}

void rt_models_free(rt_backends *be) {
    for (size_t i = 0; i < be->n_models; i++) {
        rt_model *m = be->models[i];
        sb_ipc_aclient_free(m->ac);
        rt_upstream_free_all(m);
        for (rt_job *j = m->head, *n; j; j = n) {
            n = j->next;
            job_free(j);
        }
        sb_free(m->name);
        sb_free(m->sock);
        sb_free(m->gguf);
        sb_free(m);
    }
    sb_free(be->models);
    be->models = NULL;
    be->n_models = 0;
}
