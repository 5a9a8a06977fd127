/* obs.h - the operator's view, shared by the files of router/ only:
 *
 *   hist.c      latency histograms for /metrics (per stage, pipeline,
 *               model call, queue wait, time to first token)
 *   trace.c     call ids, the ring of recent call traces, GET /v1/calls/ID,
 *               operator feedback (POST /v1/calls/ID/feedback, TSV export)
 *   console.c   GET /console (the page), its live feed over SSE and the
 *               snapshot it shows (workers, cache, routing, latency); the
 *               models' status JSON, which /health shows too
 *   otel.c      finished calls as OTLP/JSON spans appended to a file
 *
 * All of it runs on the loop thread. rt.obs owns the state; a router
 * without it (out of memory at start) simply records nothing.
 */
#ifndef SB_ROUTER_OBS_H
#define SB_ROUTER_OBS_H

#include "router/router_internal.h"

/* ------------------------------------------------------------ histograms */

/* Families: RT_H_* (router/backend/sb_backend.h, where the backends and
 * runs report them through rt_hooks.observe). */
/* Observe `seconds` in family f under label values a (and b). No-op
 * without rt.obs; a family keeps at most RT_HIST_MAX_SERIES series. */
#define RT_HIST_MAX_SERIES 256
void rt_hist_observe(rt *r, int f, const char *a, const char *b, double seconds);
void rt_hist_render(rt *r, sb_jw *w);           /* appended by rt_metrics_render */
void rt_hist_free(struct rt_obs *o);

/* ---------------------------------------------------------------- state */

#define RT_HIST_BUCKETS 16
typedef struct {
    char a[SB_CONFIG_MAX_NAME + 1], b[SB_CONFIG_MAX_NAME + 1];
    uint64_t bucket[RT_HIST_BUCKETS + 1];       /* the last: above every bound */
    double sum;
    uint64_t n;
} rt_hseries;
typedef struct {
    rt_hseries *s;
    size_t n, cap;
    uint64_t dropped;                           /* observations of series beyond the cap */
} rt_hfam;

/* latwin.c: latency percentiles over the ring, one sorted array per key.
 * Keys are pipeline/stage; end to end and time to first token use the
 * empty pipeline and these names. */
#define RT_LAT_END_TO_END "end_to_end"
#define RT_LAT_TTFT "ttft"
typedef struct {
    char pipeline[SB_CONFIG_MAX_NAME + 1], stage[SB_CONFIG_MAX_NAME + 1];
    double *v;                                  /* ascending */
    size_t n, cap;
} rt_latkey;
typedef struct {
    rt_latkey *k;
    size_t n, cap;
} rt_latwin;
int  rt_latwin_add(rt_latwin *lw, const char *pipeline, const char *stage, double v);
void rt_latwin_remove(rt_latwin *lw, const char *pipeline, const char *stage, double v);
void rt_latwin_clear(rt_latwin *lw);
/* {"end_to_end": P, "ttft": P, "stages": {"pipeline/stage": P...}},
 * P = {"n", "p50", "p95", "p99"} (nearest rank). */
void rt_latwin_json(rt_latwin *lw, sb_jw *w);

typedef struct rt_trace rt_trace;
typedef struct sb_feedback sb_feedback;
/* Calls per intent, one slot per minute over the last hour. */
#define RT_ROUTING_SLOTS 60
#define RT_ROUTING_INTENTS 32
typedef struct {
    int64_t minute;                             /* Unix minute this slot counts; older = empty */
    uint32_t calls, fallback, other;            /* other: intents beyond the table */
    uint32_t n[RT_ROUTING_INTENTS];
} rt_rslot;

/* What the console's CPU counter is split by (console.c, docs/router.md). */
enum { RT_CONSOLE_FEED, RT_CONSOLE_SNAPSHOT, RT_CONSOLE_CONNECT, RT_CONSOLE_STATE, RT_CONSOLE_CACHE_STATS,
       RT_CONSOLE_PATHS };

typedef struct rt_obs {
    rt_hfam fam[RT_H_COUNT];
    /* trace.c: the ring, newest at (head - 1) mod cap */
    rt_trace **ring;
    size_t cap, head, count;
    bool show_text;
    char *feedback_path;
    sb_feedback *fb;                            /* opened at the first use */
    char intents[RT_ROUTING_INTENTS][SB_CONFIG_MAX_NAME + 1];
    rt_rslot slots[RT_ROUTING_SLOTS];
    uint64_t next_id;
    rt_latwin lat;                              /* the ring's latencies, sorted */
    uint64_t changes;                           /* calls recorded + feedback marks, since start */
    /* console.c: the SSE subscribers and their tick */
    rt_req **subs;
    size_t n_subs, cap_subs;
    struct event *tick;
    struct event *flush;                        /* sends the batch of calls */
    sb_jw batch;                                /* SSE events not sent yet */
    size_t unsent;                              /* the ring's newest calls the feed has not sent */
    double feed_at;                             /* when the last batch was written */
    /* The console's own CPU time on the loop thread, per path (console.c),
     * and the SSE bytes it handed to its subscribers' sockets. */
    double cpu_s[RT_CONSOLE_PATHS];
    uint64_t feed_bytes;
    sb_cache_stats_t cstats;                    /* the cache's figures, as of cstats_at */
    double cstats_at, cstats_every;             /* refreshed every cstats_every seconds */
    bool cstats_ok;
    /* The snapshot's slow parts, kept between snapshots (console.c). */
    uint64_t state_sig;                         /* fingerprint of the last snapshot sent */
    double state_at;                            /* when it was sent */
    sb_jw confusion;                            /* the feedback confusion, as JSON */
    bool confusion_ok;                          /* it holds the current marks */
    double confusion_at;                        /* when it was read */
    struct { int64_t pid; long kb; } *rss;      /* the workers' and router's RSS, by pid */
    size_t n_rss;
    double rss_at;                              /* when they were read */
    struct rt_otel *otel;                       /* otel.c; NULL until console.otel_file is set */
} rt_obs;
/* At start and after each reload: the console section (ring size, masking,
 * feedback file). 0 or < 0 with err (logged by the caller; the router
 * serves without what failed). */
int  rt_obs_configure(rt *r, const sb_config *cfg, char *err);
void rt_obs_free(rt *r);

/* ---------------------------------------------------------------- calls */

/* A caller's own X-Call-Id: 1-64 of [A-Za-z0-9._:-], the first a letter or digit. */
#define RT_CALL_ID_MAX 64
bool rt_call_id_valid(const char *s);
void rt_call_id_new(rt *r, char out[RT_CALL_ID_MAX + 1]);
bool rt_trace_on(rt *r);                        /* the ring holds at least one call */

/* One finished pipeline call, as the console and GET /v1/calls/ID see it. */
typedef struct {
    const char *call_id, *pipeline, *input;
    const rt_run *run;              /* NULL on a cache hit or when no run started */
    const char *cached;             /* a hit: the stored result JSON */
    size_t cached_len;
    const char *cache;              /* "hit", "miss" or "off" */
    const char *source;             /* "http" or "socket" */
    int status;                     /* HTTP status of the reply */
    const char *error;              /* the failure's message, or NULL */
    double t0;                      /* sb_now_s() when the call arrived */
} rt_call_info;
void rt_trace_record(rt *r, const rt_call_info *ci);
/* Retention (retention.c): drop the ring's traces recorded before `before`
 * (Unix seconds); delete the feedback marks made before it (the file is not
 * created for it). How many, or < 0 with err. */
int  rt_trace_purge_before(rt *r, double before);
int  rt_feedback_purge_before(rt *r, double before, char *err);
/* Erasure (erase.c): drop the traces of call_id (NULL: none) and those in
 * which match finds the value (match NULL: none), each one's input handed
 * to dropped (NULL ok) first; delete the feedback marks likewise. How many,
 * or < 0 with err. */
int  rt_trace_erase(rt *r, const char *call_id, rt_text_match_fn match, void *arg,
                    void (*dropped)(void *arg, const char *input), void *darg);
int  rt_feedback_erase(rt *r, const char *call_id, rt_text_match_fn match, void *arg, char *err);

/* The call routes (trace.c): GET /v1/calls/ID, POST /v1/calls/ID/feedback,
 * GET /v1/feedback.tsv. rest is the path after "/v1/calls/". */
void rt_handle_calls(rt_req *q, const char *rest, bool is_post);
void rt_handle_feedback_tsv(rt_req *q);

/* The console (console.c): GET /console, /console/app.js, /console/app.css,
 * GET /v1/console/events (SSE), GET /v1/console/state,
 * GET /v1/console/handoffs. */
bool rt_console_static(rt_req *q, const char *path);    /* true: answered */
void rt_handle_console_events(rt_req *q);
void rt_handle_console_state(rt_req *q);
void rt_handle_console_handoffs(rt_req *q);
/* trace.c -> console.c: a call was recorded in the ring (the feed sends
 * its summary with the next batch), or another event (JSON) happened. */
void rt_console_call(rt *r);
void rt_console_publish(rt *r, const char *event, size_t len);
/* The newest n calls of the ring (at most all), oldest first, as SSE
 * events ("data: SUMMARY\n\n"), appended to w. */
void rt_trace_feed(rt *r, sb_jw *w, size_t n);
void rt_console_render(rt *r, sb_jw *w);        /* its counters, for /metrics */
void rt_console_stop(rt *r);                    /* end every live feed (shutdown) */
/* The snapshot (console.c) over the trace ring (trace.c). */
void rt_trace_latency_json(rt *r, sb_jw *w);
void rt_trace_recent_json(rt *r, sb_jw *w, int max);
void rt_trace_routing_json(rt *r, sb_jw *w);

/* The models' status, one writer for two views (console.c): /health's
 * object by name of {status, pid, queued, in_flight, capacity, restarts}
 * (RT_MODELS_HEALTH) and the console's array of workers, each with its
 * state, kind, traffic and RSS (RT_MODELS_CONSOLE). Returns how many local
 * models there are and how many of them are up. */
enum { RT_MODELS_HEALTH, RT_MODELS_CONSOLE };
typedef struct { int local, up; } rt_models_up;
rt_models_up rt_models_json(rt *r, sb_jw *w, int view);

/* The OpenTelemetry export (otel.c). configure: at start and on each
 * reload, (re)opens path (rotation by rename); NULL turns it off. 0, or
 * < 0 with err when the file cannot be opened (the router serves, calls
 * are counted as not exported). export: one finished call, from trace,
 * its masked trace as the ring keeps it (without the closing brace);
 * never fails the call. render: the counters for /metrics. */
int  rt_otel_configure(rt_obs *o, const char *path, char *err);
/* Erasure: rewrite the export without the lines match() claims, in place
 * (the erased bytes overwritten, not left in freed blocks). How many, or
 * < 0 with err. */
int  rt_otel_erase(rt_obs *o, rt_text_match_fn match, void *arg, char *err);
bool rt_otel_on(const rt_obs *o);
void rt_otel_export(rt *r, const rt_call_info *ci, const char *trace, size_t len);
void rt_otel_render(rt *r, sb_jw *w);
void rt_otel_free(rt_obs *o);

#endif
