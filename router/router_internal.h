/* router_internal.h - shared between the files of router/ only; not an API.
 *
 *   router.c    the command: config, signals, reload, DIR/router.sock
 *   models.c    one dispatcher per worker: a fair FIFO in front of its
 *               socket, health polling, restart detection
 *   http.c      evhttp front door: limits, 408/413/431 with JSON bodies,
 *               auth, routing, one log line per request
 *   openai.c    /v1/chat/completions, /v1/completions (SSE), /v1/models
 *   embeddings.c  /v1/embeddings (encoder models)
 *   pipeapi.c   /v1/pipelines/NAME, pipeline:NAME models, the cache
 *   run.c       the pipeline executor (intent -> generate -> tool ...)
 *   tool.c      tool stages: a child process or an HTTP call, with timeouts
 *   metrics.c   Prometheus text
 * Names are extern (the module is several files), so they carry rt_.
 */
#ifndef SB_ROUTER_INTERNAL_H
#define SB_ROUTER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/sb_cache.h"
#include "router/classify/sb_classify.h"
#include "common/sb_config.h"
#include "ipc/sb_ipc.h"
#include "router/sb_router.h"

struct event_base;
struct event;
struct evhttp;
struct evhttp_request;
struct evhttp_connection;

typedef struct rt rt;
typedef struct rt_model rt_model;
typedef struct rt_job rt_job;
typedef struct rt_gen_req rt_gen_req;         /* gen_req.h */
typedef struct rt_run rt_run;
typedef struct rt_tool rt_tool;
typedef struct rt_tool_gate rt_tool_gate;
typedef struct rt_upcall rt_upcall;

/* ------------------------------------------------------------ the config */

/* One generation of the configuration. Runs keep a reference to the one
 * they started with, so a SIGHUP never pulls a pipeline from under them. */
typedef struct rt_prior {
    struct rt_prior *next;
    const sb_stage *stage;
    double p[SB_PIPE_MAX_LABELS];
} rt_prior;

typedef struct rt_eindex rt_eindex;
typedef struct rt_kbh rt_kbh;

typedef struct {
    sb_config *cfg;
    sb_pipelines *pipes;
    rt_prior *priors;               /* calibrate: true stages, once measured */
    rt_eindex *eindex;              /* intent_embed.c: embedding stages' example indexes */
    rt_kbh *kbs;                    /* retrieve.c: the knowledge bases retrieve stages opened */
    int refs;
} rt_conf;

void rt_conf_release(rt_conf *c);
rt_conf *rt_conf_acquire(rt *r);

/* retrieve.c: search retrieve stage s's base for query (qvec: its dim-float
 * "query: " vector from the base's embed_model; NULL in bm25 mode); with
 * rerank, have its rerank model judge the top_n passages (one `score` call
 * at a time, each in *job while it runs) and reorder them. done is called
 * once - maybe before rt_retrieve_start returns - with 0 or SB_E* and err
 * (no base file, another embedder, SQLite, the rerank call), unless the
 * caller cancels *job first. *out (always set) holds the passages until
 * rt_retrieve_free. rt_retrieve_render writes the top_k as text (prompts)
 * and as {"found", "passages": [{source, section, score, text}]}; *found is
 * false below min_score (no passages). */
typedef struct rt_rr rt_rr;
typedef void (*rt_retrieve_fn)(void *arg, int rc, const char *err);
void rt_retrieve_start(rt *r, rt_conf *c, const sb_stage *s, const char *query, size_t len, const float *qvec,
                       int dim, rt_job **job, rt_retrieve_fn done, void *arg, rt_rr **out);
int  rt_retrieve_render(const sb_stage *s, rt_rr *rr, sb_jw *text, sb_jw *json, bool *found, char *err);
void rt_retrieve_free(rt_rr *rr);
/* The content version of retrieve stage s's base (sb_kb_version), for the
 * pipeline's cache key. */
int  rt_retrieve_version(rt_conf *c, const sb_stage *s, char out[65], char *err);
void rt_retrieve_free_all(rt_conf *c);

/* ------------------------------------------------------------ templates */

/* What a template may refer to: the stages before it, and whether an
 * intent stage ran before it. */
typedef struct {
    const char *const *names;
    size_t n_before;
    bool has_intent;
} rt_tmpl_scope;

/* 0, SB_EINVAL (why says what is wrong), SB_ENOMEM. */
int  rt_tmpl_compile(const char *src, const rt_tmpl_scope *scope, sb_tmpl **out, char *why, size_t wn);
void rt_tmpl_free(sb_tmpl *t);
bool rt_tmpl_uses_stage(const sb_tmpl *t, int stage);

/* --------------------------------------------------------------- models */

/* Requests handed to a worker at once when its health does not say how
 * many sequences it runs (a worker from before batching, an encoder): two
 * keeps its queue fed (the next job is there when one finishes) while the
 * router's own queue decides the order. A worker that reports `parallel`
 * gets exactly that many: each joins its running batch at the next step,
 * and everything beyond waits here, where priority orders it. */
#define RT_WORKER_INFLIGHT 2
/* An upstream is a server (or a cluster) that batches many requests; the
 * router's queue still orders what exceeds this. Its entry's `parallel`
 * (the server's slots, llama-server -np) overrides it. */
#define RT_UPSTREAM_INFLIGHT 16
/* A job of priority p queues as if it had arrived p seconds earlier: a
 * higher priority goes ahead of what arrived up to that long before it,
 * and nothing waits behind newer work for more than 2 * 10 s of priority. */
#define RT_PRIORITY_STEP_S 1.0
/* Retry-After on a full queue: the time the worker takes to drain the
 * queue, from the observed service time; 1 s before any call finished,
 * never more than RT_RETRY_AFTER_MAX_S. */
#define RT_RETRY_AFTER_MAX_S 60

typedef void (*rt_event_fn)(void *arg, const char *event, const sb_mp_obj *data);
typedef void (*rt_done_fn)(void *arg, const sb_ipc_result *res);

struct rt_model {
    char *name;
    char *sock;
    char *gguf;
    bool remote;                    /* upstream: served over HTTP by upstream.c */
    bool kind_known, encoder;       /* from the worker's health: an embedding model */
    rt_upcall *upcalls;             /* remote: calls in flight */
    bool removed;                   /* gone from the config after a reload */
    int max_waiting, deadline_ms, max_tokens;
    sb_ipc_aclient *ac;
    rt_job *head, *tail;
    int n_waiting, n_inflight;
    int cfg_parallel;               /* the config's parallel (0: unset): an upstream's cap; a worker's until it reports its own */
    double service_s;               /* moving average of a call's time at the worker (0: none yet) */
    /* health, polled */
    bool up, probing;
    bool failed;                    /* the supervisor gave up on it (state.json) */
    int64_t pid;
    uint64_t restarts;
    double down_since;
    /* The batching worker's health (docs/ipc.md); -1: not reported (a
     * worker from before batching, an encoder): /metrics leaves it out.
     * parallel > 0 also means the worker takes a `priority` param. */
    int64_t parallel, running, kv_blocks_total, kv_blocks_free;
    int64_t prefix_hits, prefix_misses, prefix_tokens_reused;
    int64_t spec_drafted, spec_accepted;    /* speculative tokens (docs/SPECULATIVE.md) */
    /* metrics */
    uint64_t requests, errors, busy;
    uint64_t prompt_tokens, completion_tokens, reused_tokens;
    double prompt_s, gen_s, last_tps;
    char fingerprint[SB_CACHE_KEY_HEX];
    rt *r;
};

/* Queue a call. params is taken over (freed by the dispatcher). priority
 * orders the router's queue (RT_PRIORITY_STEP_S) and goes to a worker that
 * takes it (generate, score). 0: on_done comes exactly once, later, from
 * the loop. SB_EBUSY: the router's queue for the model is full (answer 503
 * with rt_model_retry_after); SB_EIO: the worker is down. */
int  rt_model_submit(rt_model *m, const char *method, sb_mp_writer *params, int timeout_ms, int priority,
                     rt_event_fn on_event, rt_done_fn on_done, void *arg, rt_job **out, char *err);
/* The same for a generation (gen_req.h): the job keeps its own copy of g,
 * and the backend the dispatch picks encodes it - msgpack for a worker,
 * an OpenAI body for an upstream. Its priority is g->priority. */
int  rt_model_submit_gen(rt_model *m, const rt_gen_req *g, int timeout_ms, rt_event_fn on_event, rt_done_fn on_done,
                         void *arg, rt_job **out, char *err);
/* Calls handed to m's worker (or upstream) at once. */
int  rt_model_capacity(const rt_model *m);
/* Seconds a caller refused with a full queue should wait: [1, RT_RETRY_AFTER_MAX_S]. */
int  rt_model_retry_after(const rt_model *m);
/* No callbacks after this; the worker is told to stop. */
void rt_job_cancel(rt_job *j);
rt_model *rt_model_find(rt *r, const char *name);
/* upstream.c: a remote model's calls, with sb_ipc_aclient_call's contract
 * (on_done exactly once, from the loop; none after cancel). Only
 * `generate`, the request g (read during the call only); the OpenAI API
 * has nothing for `score`: any other method (g NULL) is refused. */
int  rt_upstream_call(rt_model *m, const char *method, const rt_gen_req *g, int timeout_ms,
                      sb_ipc_aevent_fn on_event, sb_ipc_adone_fn on_done, void *arg, uint64_t *id_out, char *err);
int  rt_upstream_cancel(rt_model *m, uint64_t id);     /* SB_ENOTFOUND when finished */
void rt_upstream_free_all(rt_model *m);                 /* no callbacks */
/* The answer parsing of a call without the network: status `code` (0: no
 * answer), the body in pieces of `chunk` bytes (0: one piece), exactly one
 * on_done. For tests/fuzz/fuzz_upstream.c. */
void rt_upstream_feed(bool chat, bool stream, int code, const char *body, size_t len, size_t chunk,
                      sb_ipc_aevent_fn on_event, sb_ipc_adone_fn on_done, void *arg);
void rt_models_sync(rt *r, const sb_config *cfg);       /* add / update / retire */
void rt_models_poll(rt *r);                             /* health probes */
void rt_models_free(rt *r);
/* The HTTP status and OpenAI error type for a worker's error code. */
int  rt_worker_error_status(const char *code, const char **type);

/* ------------------------------------------------------------ metrics */

enum { RT_ROUTE_CHAT, RT_ROUTE_COMPLETIONS, RT_ROUTE_MODELS, RT_ROUTE_PIPELINES, RT_ROUTE_HEALTH,
       RT_ROUTE_METRICS, RT_ROUTE_OTHER, RT_ROUTE_EMBEDDINGS, RT_ROUTE_CONSOLE, RT_ROUTE_COUNT };
#define RT_LAT_BUCKETS 14
#define RT_MAX_STATUS 16

typedef struct {
    struct { int code; uint64_t n; } status[RT_ROUTE_COUNT][RT_MAX_STATUS];
    uint64_t lat[RT_ROUTE_COUNT][RT_LAT_BUCKETS + 1];
    double lat_sum[RT_ROUTE_COUNT];
    uint64_t lat_count[RT_ROUTE_COUNT];
    uint64_t cache_hits, cache_misses, cache_bypass;
    uint64_t rejected_408, rejected_413, rejected_431;
    uint64_t in_flight;
    double overhead_sum;            /* gateway time outside the workers, seconds */
    uint64_t overhead_n;
} rt_metrics;

void rt_metrics_request(rt_metrics *m, int route, int status, double seconds);
void rt_metrics_render(rt *r, sb_jw *out);
const char *rt_route_name(int route);

/* ------------------------------------------------------------ the router */

typedef struct rt_guard rt_guard;
typedef struct rt_req rt_req;

struct rt {
    struct event_base *base;
    struct evhttp *http;
    rt_conf *conf;
    char *config_path;
    rt_model **models;
    size_t n_models;
    sb_cache *cache;
    struct rt_sync *sync;       /* periodic cloud sync, or NULL */
    struct rt_obs *obs;             /* obs.h: histograms, call traces, the console */
    char *api_key;                  /* NULL: no auth */
    int body_timeout_ms;            /* 408 after this long inside one request's bytes */
    size_t max_body, max_headers;
    rt_metrics metrics;
    rt_guard **guards;              /* one per HTTP connection */
    size_t n_guards, cap_guards;
    rt_req *reqs;                   /* requests in flight (shutdown cancels them) */
    rt_tool_gate *tool_gates;       /* tool.c: per-stage limits, while calls run or wait */
    sb_ipc_server *sock_server;
    struct event *health_timer, *sweep_timer;
    bool stopping;
    uint64_t next_id;
    double started;
    long long started_wall;         /* Unix time, for "created" */
};

/* http.c */
int  rt_http_start(rt *r, const char *host, int port, char *err);
void rt_http_stop(rt *r);
void rt_http_sweep(rt *r);                              /* 408s, freed connections */

/* One HTTP request being answered. */
struct rt_req {
    rt *r;
    struct evhttp_request *req;     /* NULL once the reply is finished */
    int route, status;
    double t0, t_model;             /* t_model: seconds spent in workers */
    bool gone;                      /* the client disconnected */
    bool streaming;                 /* reply started as SSE */
    bool want_stream;               /* the client asked for SSE */
    struct event *timer;            /* per-request deadline */
    rt_job *job;
    rt_run *run;
    rt_req *next, *prev;
    char id[40];                    /* chatcmpl-... */
    char call_id[65];               /* a pipeline call's X-Call-Id (obs.h), or "" */
    char model[96];
    char path[96];
    const char *method;
    int kind;                       /* openai.c: chat or completion */
    bool include_usage;
    int n_embed;                    /* embeddings.c: vectors expected */
    bool embed_b64;                 /* embeddings.c: encoding_format base64 */
    char *cache_key;                /* set on a cacheable miss */
    char *cache_input, *cache_ns, *cache_fp, *cache_params;
    sb_jw out;                      /* scratch */
    void (*on_gone)(rt_req *q);     /* client vanished or deadline passed */
};

/* Reply helpers (http.c). After a final reply q is freed. */
rt_req *rt_req_new(rt *r, struct evhttp_request *req, int route);
/* A model call of request q (its job) has ended: detach it, and when it
 * failed answer q with the mapped status (503 with Retry-After). true: q
 * was answered with the error. (openai.c) */
bool rt_req_model_failed(rt_req *q, const sb_ipc_result *res);
void rt_req_json(rt_req *q, int status, const char *json, size_t len, const char *x_cache);
void rt_req_reply(rt_req *q, int status, const char *content_type, const char *body, size_t len);
void rt_req_error(rt_req *q, int status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void rt_req_retry_after(rt_req *q, int seconds);
void rt_req_sse_start(rt_req *q, const char *x_cache);
void rt_req_sse_send(rt_req *q, const char *data, size_t len);  /* adds "data: " and "\n\n" */
void rt_req_sse_end(rt_req *q);                                 /* sends [DONE], frees q */
void rt_req_set_deadline(rt_req *q, int ms);
const char *rt_req_header(rt_req *q, const char *name);
/* Read and parse the body; replies 400 and returns NULL on failure. */
sb_json_doc *rt_req_body_json(rt_req *q);

/* openai.c / pipeapi.c */
void rt_handle_chat(rt_req *q, const sb_json *body, int kind);
void rt_handle_models(rt_req *q);
void rt_handle_pipeline(rt_req *q, const char *name, const sb_json *body);
void rt_handle_embeddings(rt_req *q, const sb_json *body);         /* embeddings.c */
/* model = "pipeline:NAME" on the completions endpoints. */
void rt_handle_pipeline_chat(rt_req *q, const char *name, const char *input, bool stream);
enum { RT_KIND_CHAT, RT_KIND_COMPLETION };
/* OpenAI-shaped replies for q->kind, q->id and q->model (openai.c). */
void rt_openai_reply(rt_req *q, const char *text, size_t len, const char *finish, int pt, int ct,
                     const char *x_cache);
void rt_openai_sse_delta(rt_req *q, const char *text, size_t len);
void rt_openai_sse_finish(rt_req *q, const char *finish, int pt, int ct);  /* ends q */
void rt_openai_begin(rt_req *q, int kind, const char *model);
/* Part of the cache params of every chat call and pipeline run. Bump it
 * when the router changes how a request becomes a prompt: the model and
 * pipeline fingerprints do not see that, and an answer computed under the
 * old rules must not be served - or synced to other edges - under the new.
 * 2: text from callers, messages and earlier stages is never parsed for
 * special tokens (docs/ipc.md, `segments`).
 * 3: nor for user-defined added tokens (Qwen's <tool_call>); an intent
 * stage folds line breaks in the caller's text (docs/router.md). */
#define RT_PROMPT_RULES "3"
/* Response cache (pipeapi.c). 1 = hit (*entry filled), 0 = miss (q keeps
 * the key for rt_cache_store), -1 = not cached (off, bypassed, no key).
 * norm: SB_NORM_* flags for the input (0: normalised by the caller). */
int  rt_cache_lookup(rt_req *q, const char *ns, const char *fp, const char *input, unsigned norm,
                     const char *params, sb_cache_entry *entry);
void rt_cache_store(rt_req *q, const char *response, size_t len);

/* ------------------------------------------------------------- runs */

typedef void (*rt_run_token_fn)(void *arg, const char *text, size_t len);
typedef void (*rt_run_done_fn)(void *arg, rt_run *run);

/* Start a pipeline on input. on_token (may be NULL) gets the tokens of the
 * stage that produces the answer, as they come; on_done exactly once, from
 * the loop. 0, or < 0 with err (nothing will be called). */
int  rt_run_start(rt *r, const char *pipeline, const char *input, rt_run_token_fn on_token,
                  rt_run_done_fn on_done, void *arg, rt_run **out, char *err);
void rt_run_cancel(rt_run *run);                    /* no callbacks; frees */
/* Stop after the named stage (evaluations, debugging). SB_ENOTFOUND. Call
 * right after rt_run_start, before the loop runs again. */
int  rt_run_until(rt_run *run, const char *stage);
void rt_run_free(rt_run *run);                      /* after on_done */
/* After on_done: 0 or the HTTP status of the failure (with type, message). */
int  rt_run_failed(const rt_run *run, const char **type, const char **message);
/* After a 503: the Retry-After of the full model queue that caused it, or 0. */
int  rt_run_retry_after(const rt_run *run);
void rt_run_result_json(const rt_run *run, sb_jw *w);
const char *rt_run_output(const rt_run *run);
void rt_run_usage(const rt_run *run, int *prompt_tokens, int *completion_tokens);
double rt_run_model_seconds(const rt_run *run);
/* The cache identity of a pipeline: fingerprint over its definition and the
 * files of every model it uses (out: 65 bytes). 0 or SB_ENOTFOUND. */
int  rt_pipeline_fingerprint(rt *r, const char *pipeline, char *out, bool *cacheable);

/* ------------------------------------------------------------- tools */

typedef void (*rt_tool_done_fn)(void *arg, int rc, const char *out, size_t len, const char *err);
/* One call of a tool stage; everything is copied by rt_tool_start. */
typedef struct {
    char *const *argv;          /* command, NULL-terminated; NULL for an HTTP tool */
    char *const *env;           /* command: "NAME=VALUE" added to the allowlist; NULL-terminated */
    const char *url;            /* HTTP tool, or NULL */
    bool post;
    const char *gate;           /* "pipeline/stage": the calls that share the limits below */
    int max_concurrent, max_queue;
    int timeout_ms;             /* counted from the start, not from entering the queue */
} rt_tool_spec;
/* 0: done comes exactly once, later, from the loop (rc 0 ok, SB_ETIMEOUT,
 * SB_EIO, SB_EINVAL: arguments too long). SB_EBUSY: the stage runs
 * max_concurrent calls and max_queue wait; nothing will be called. */
int  rt_tool_start(rt *r, const rt_tool_spec *spec, const char *input, size_t input_len, rt_tool_done_fn done,
                   void *arg, rt_tool **out, char *err);
/* Stop a call (client gone, run timed out): SIGKILLs the tool's process
 * group and reaps it, or takes it out of the queue; no callback. NULL ok. */
void rt_tool_cancel(rt_tool *t);

/* ------------------------------------------------- embedding intents */

/* intent_embed.c: intent stages that classify by sentence embeddings. A
 * model came up or changed kind: build the example indexes that wait for
 * it (asynchronously; runs that need one wait for it). */
void rt_intent_models_changed(rt *r);
/* Stage s classifies by embeddings now: method embed or hybrid, or auto
 * with an encoder model (as its worker's health says). */
bool rt_intent_embeds(rt *r, const sb_stage *s);
/* The trained classifier of stage s in generation c: 0 with *out; 1 while
 * its index is being built (a build is started if none runs: ask again
 * shortly); < 0 when the build failed (SB_EIO/SB_EBUSY: the model is down
 * or full; others: the encoder or the examples are wrong), with err. */
int  rt_intent_classifier(rt *r, rt_conf *c, const sb_stage *s, const sb_classifier **out, char *err);
void rt_intent_cancel_builds(rt_conf *c);   /* before the models are freed */
void rt_intent_free_all(rt_conf *c);        /* rt_conf_release */

/* cache_sync.c: periodic sync with the cloud tier of cfg->cache.sync: the
 * response cache (NULL: none) and the knowledge bases marked pull. */
typedef struct rt_sync rt_sync;
int  rt_sync_start(sb_cache *cache, const sb_config *cfg, rt_sync **out, char *err);
void rt_sync_stop(rt_sync *s);      /* NULL ok; waits for a sync in progress */

#endif
