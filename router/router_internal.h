/* router_internal.h - the front doors, shared between the files in router/ (not its sub-folders).
 *
 *   router.c    the command: config, signals, reload; DIR/router.sock
 *   http.c      evhttp front door: limits, 408/413/431 with JSON bodies,
 *               auth, routing, one log line per request
 *   openai.c    /v1/chat/completions, /v1/completions (JSON or SSE),
 *               /v1/models; the OpenAI reply sink
 *   embeddings.c  /v1/embeddings (encoder models)
 *   pipeapi.c   /v1/pipelines/NAME and its JSON reply sink
 *   pipecall.c  a pipeline call from either door: cache, run, trace
 *   reply.c     what the HTTP doors share: the failure writer, the end of
 *               a model call, the response cache
 *   metrics.c   Prometheus text; obs.h: histograms, traces, the console
 *
 * The doors call down into pipeline execution (router/run/sb_run.h) and
 * the backends (router/backend/sb_backend.h), never the other way: a call's
 * reply comes back through the door's rt_sink (sb_run.h), what else those
 * layers report through rt_hooks. No door calls another door's writer.
 * Names are extern (the module is several files), so they carry rt_.
 */
#ifndef SB_ROUTER_INTERNAL_H
#define SB_ROUTER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/sb_cache.h"
#include "common/sb_config.h"
#include "ipc/sb_ipc.h"
#include "router/run/sb_run.h"

struct event_base;
struct event;
struct evhttp;
struct evhttp_request;
struct evhttp_connection;

typedef struct rt rt;

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
    rt_exec ex;                     /* the runs' and the backends' state: ex.conf, ex.be (base, models) */
    struct evhttp *http;
    char *config_path;
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
    size_t lp_offset;               /* legacy completions logprobs: text_offset so far */
    int n_embed;                    /* embeddings.c: vectors expected */
    bool embed_b64;                 /* embeddings.c: encoding_format base64 */
    char *cache_key;                /* set on a cacheable miss */
    char *cache_input, *cache_ns, *cache_fp, *cache_params;
    rt_sink reply;                  /* the door's reply writer (arg: this request) */
    sb_jw out;                      /* scratch */
    void (*on_gone)(rt_req *q);     /* client vanished or deadline passed */
};

/* Reply helpers (http.c). After a final reply q is freed. */
rt_req *rt_req_new(rt *r, struct evhttp_request *req, int route);
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

/* The doors (openai.c, pipeapi.c, embeddings.c). */
void rt_handle_chat(rt_req *q, const sb_json *body, int kind);
void rt_handle_models(rt_req *q);
void rt_handle_pipeline(rt_req *q, const char *name, const sb_json *body);
void rt_handle_embeddings(rt_req *q, const sb_json *body);

/* pipecall.c: run pipeline name on input (until: stop after that stage, or
 * NULL) for q, answering through q->reply: from the response cache when
 * it holds the result, else from a run; the call is traced. */
void rt_pipeline_call(rt_req *q, const char *name, const char *input, const char *until);

/* reply.c. The error of every HTTP door's sink (req: the rt_req): the
 * OpenAI error body, with Retry-After when the failure has one. */
void rt_req_fail(void *req, const rt_failure *f);
/* A model call of request q (its job) has ended: detach it, and when it
 * failed answer q with the mapped status (503 with Retry-After). true: q
 * was answered with the error. */
bool rt_req_model_failed(rt_req *q, const sb_ipc_result *res);
/* The response cache. 1 = hit (*entry filled), 0 = miss (q keeps the key
 * for rt_cache_store), -1 = not cached (off, bypassed, no key).
 * norm: SB_NORM_* flags for the input (0: normalised by the caller). */
int  rt_cache_lookup(rt_req *q, const char *ns, const char *fp, const char *input, unsigned norm,
                     const char *params, sb_cache_entry *entry);
void rt_cache_store(rt_req *q, const char *response, size_t len);

/* cache_sync.c: periodic sync with the cloud tier of cfg->cache.sync: the
 * response cache (NULL: none) and the knowledge bases marked pull. */
typedef struct rt_sync rt_sync;
int  rt_sync_start(sb_cache *cache, const sb_config *cfg, rt_sync **out, char *err);
void rt_sync_stop(rt_sync *s);      /* NULL ok; waits for a sync in progress */

#endif
