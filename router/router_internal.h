/* router_internal.h - the front doors, shared between the files in router/ (not its sub-folders).
 *
 *   router.c    the command: config, signals, reload; DIR/router.sock
 *   http.c      evhttp front door: the route table (path, methods, API
 *               key, handler) and the checks before a door
 *   http_conn.c a connection's guard (400 framing, 408/413/431 with JSON
 *               bodies, a caller who hangs up) and the request object,
 *               one log line per request
 *   http_reply.c  the reply helpers: JSON, errors, SSE, the JSON body,
 *               the failure writer, the end of a model call
 *   openai.c    /v1/chat/completions, /v1/completions (JSON or SSE),
 *               /v1/models; the OpenAI reply sink
 *   embeddings.c  /v1/embeddings (encoder models)
 *   pipeapi.c   /v1/pipelines/NAME and its JSON reply sink
 *   pipecall.c  a pipeline call from either door: cache, run, trace
 *   session_door.c  a call as a turn of a conversation; /v1/sessions/ID
 *   sessions_store.c  the sessions' store API over its table (sessions_store.h);
 *               sealing values and hand-off packages for every store
 *   sessions.c  the sessions' SQLite store; sessions_pg.c  the PostgreSQL one
 *   apikeys.c   the named API keys and their roles
 *   cache_door.c  the response cache as the doors use it
 *   metrics.c   /health, /metrics (Prometheus text); obs.h: histograms,
 *               traces, the console
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

/* ------------------------------------------------------------ API keys */

/* apikeys.c: the named keys of runtime.api_keys_file and the single key of
 * runtime.api_key_env / api_key_file ("default", every role). Roles are a
 * set: none implies another. */
enum { RT_ROLE_CLIENT = 1, RT_ROLE_CONSOLE = 2, RT_ROLE_ADMIN = 4 };
#define RT_KEY_NAME_MAX 64
typedef struct {
    char name[RT_KEY_NAME_MAX + 1];
    char *key;
    size_t len;
    unsigned roles;                 /* RT_ROLE_* */
} rt_key;
typedef struct rt_keys rt_keys;
/* 0 with *out (NULL: no key configured, no auth); else err names the file
 * and line, or the setting. */
int  rt_keys_load(const sb_config *cfg, rt_keys **out, char *err);
void rt_keys_free(rt_keys *k);                  /* NULL ok */

/* `switchboard route train` (cli_route_train.c): argv[0] is "train". */
int  sb_route_train(int argc, char **argv);

/* route train --paraphrases (cli_route_para.c): other callers' words for
 * each training example, written by sb_kb.h's writer or read from a file
 * of LABEL<TAB>EXAMPLE<TAB>PARAPHRASE rows. An example's label is the
 * stage's index, n_labels for out_of_scope. */
typedef struct { int label; const char *text; } rt_example;
typedef struct { size_t example; char *text; } rt_para;     /* example: an index into the examples */
typedef struct { rt_para *p; size_t n, cap, skipped; } rt_paras;   /* skipped: rows of untrained examples */
int  rt_paras_generate(const char *gguf, int threads, uint64_t seed, int n, const sb_stage *st,
                       const rt_example *ex, size_t n_ex, rt_paras *P, char *err);
/* SB_EINVAL naming the file and line for a malformed row or an unknown label. */
int  rt_paras_read(const char *path, const sb_stage *st, const rt_example *ex, size_t n_ex, rt_paras *P,
                   char *err);
int  rt_paras_save(const char *path, const sb_stage *st, const rt_example *ex, const rt_paras *P, char *err);
void rt_paras_free(rt_paras *P);
size_t rt_keys_count(const rt_keys *k);
/* The key whose secret is secret[0, len), compared in constant time; NULL. */
const rt_key *rt_keys_match(const rt_keys *k, const char *secret, size_t len);
const char *rt_role_name(unsigned role);        /* one RT_ROLE_* */

/* ------------------------------------------------------------ sessions */

/* sessions_store.c: conversations' state in the store sessions.store
 * names: one SQLite file (sessions.c), or a PostgreSQL database the routers
 * of a site share (sessions_pg.c). */
#define RT_SESSION_ID_LEN 32        /* 128 random bits, lower-case hex */
typedef struct rt_sessions rt_sessions;
typedef struct {
    char id[RT_SESSION_ID_LEN + 1];
    char owner[RT_KEY_NAME_MAX + 1];    /* the API key name that created it ("" without auth) */
    char *pipeline;
    char *intent;                   /* NULL: none yet */
    char *slots;                    /* JSON object text */
    char *awaiting;                 /* JSON text, or NULL: nothing awaited */
    int stage;                      /* the stage that asked, or -1 */
    int turns, failures;
    long long bytes;                /* the callers' and replies' text stored */
    double created, updated, expires;
    /* The row's version as this router read it (0: not stored yet). A
     * shared store (PostgreSQL) commits a turn only over that version, so
     * a turn another router committed meanwhile is never overwritten. */
    long long version;
    bool done;                      /* the call ended (max_turns, max_bytes, a hand-off) */
    /* Set before a commit that hands the call off: the commit builds the
     * package into handoff (and, with a url, queues it for delivery in the
     * same transaction). */
    const char *handoff_reason;     /* NULL: no hand-off */
    const char *handoff_url;        /* conversation.handoff_url, or NULL */
    const char *handoff_ca_file;    /* conversation.handoff_ca_file, or NULL: the system's CAs */
    double handoff_confidence;      /* < 0: none */
    char *handoff;                  /* the package (JSON text) after such a commit; or NULL */
    char *said;                     /* this turn's words (rt_turn_begin), not stored here; or NULL */
    /* privacy: pseudonymize - the caller's values behind the placeholders of
     * the transcript and slots. Stored only sealed (runtime.secret_key_file,
     * the session id as associated data); values holds them unsealed after
     * a load, and a commit seals *seal (the call's table, privacy_door.c),
     * else values when it has any. */
    sb_pii_table values;
    const sb_pii_table *seal;
} rt_session;
int  rt_sessions_open(const char *path, rt_sessions **out, char *err);
void rt_sessions_close(rt_sessions *s);             /* NULL ok */
/* The key that seals the sessions' values and hand-off packages at rest
 * (runtime.secret_key_file). Without one, a session that keeps values can
 * neither be stored nor read: the config requires the file for them. */
void rt_sessions_set_key(rt_sessions *s, const uint8_t key[SB_SEAL_KEY_LEN]);
int  rt_session_new_id(char out[RT_SESSION_ID_LEN + 1]);   /* 0 or SB_EIO (no randomness) */
bool rt_session_id_valid(const char *id);
/* 0 with *out; SB_ENOTFOUND: none, or another owner's (owner NULL: any
 * owner - an admin key's read); SB_ETIMEOUT: idle
 * past its ttl (until the sweep removes it); SB_EIO; SB_EINVAL: its sealed
 * values do not open with this store's key (err says so). */
int  rt_session_load(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, char *err);
void rt_session_clear(rt_session *ss);
/* Store ss (the state after its turns-th turn) and that turn, in one
 * durable transaction; expires = now + ttl_s. caller NULL: the row only
 * (a failure counted, a call ended). */
int  rt_session_commit(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply,
                       double now, char *err);
/* The hand-off outbox (docs/router.md, "Handing off"): the packages due at
 * now, at most max (the count, or < 0); a delivered one is emptied (its
 * row kept for the console until its session goes), a failed one tried
 * again at next_at. */
typedef struct {
    char session[RT_SESSION_ID_LEN + 1];    /* the idempotency key */
    char *url, *body;               /* body NULL: a sealed package that did not open (why in error) */
    char *ca_file;                  /* the receiver's TLS is verified against it; NULL: the system's */
    int attempts;
    const char *error;
    /* As the store read body (sessions_store.h): its length, and whether it
     * is a sealed box, which rt_handoff_due opens. */
    size_t body_len;
    bool sealed;
} rt_handoff_item;
int  rt_handoff_due(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err);
void rt_handoff_items_free(rt_handoff_item *items, int n);
int  rt_handoff_delivered(rt_sessions *s, const char *id, char *err);     /* the row kept, its package emptied */
/* The console's list: the latest max hand-offs and their delivery state,
 * never a package (sessions_store.c says the fields). */
int  rt_handoff_list_json(rt_sessions *s, int max, sb_jw *w, char *err);
int  rt_handoff_retry(rt_sessions *s, const char *id, double next_at, const char *why, char *err);
int  rt_session_delete(rt_sessions *s, const char *id, char *err);
/* Purge the sessions expired at now: how many, or < 0. */
int  rt_sessions_sweep(rt_sessions *s, double now, char *err);
/* Purge the sessions last updated at or before `before` (retention): how
 * many, or < 0. A purge that deleted any leaves no trace of them in the
 * file or its WAL (secure_delete and a truncating checkpoint). */
int  rt_sessions_purge_before(rt_sessions *s, double before, char *err);
int  rt_sessions_checkpoint(rt_sessions *s, char *err);
/* Erasure (erase.c): does this text hold what is being erased? */
typedef bool (*rt_text_match_fn)(void *arg, const char *text, size_t len);
/* Delete every session whose state or any turn (the caller's words, the
 * reply) matches, leaving no trace in the file or its WAL: how many, or < 0. */
int  rt_sessions_erase_matching(rt_sessions *s, rt_text_match_fn match, void *arg, char *err);
/* Delete session id the same way, whoever owns it: 1, 0 (no such session)
 * or < 0. The caller's words of its turns are appended to callers first,
 * each NUL-terminated (what its calls' traces and cache entries hold). */
int  rt_session_erase(rt_sessions *s, const char *id, sb_bytes *callers, char *err);
/* audit.c: one line appended to RUNTIME_DIR/audit.jsonl (0600) for a read
 * of callers' words: when, the key's name, the method and the path (which
 * names the object). 0, or -1 when it could not be written (logged): the
 * read is then refused, an unaudited read being what the log is for. */
int  rt_audit(rt_req *q);
/* erase.c: POST /v1/privacy/erase (admin). */
void rt_handle_privacy_erase(rt_req *q, const sb_json *body);
/* An erase asked at another edge, from the cloud's sync reply: kind
 * "value" (mac and digits under key_hex, sb_erase_matcher), "session" or
 * "call" (id). On the loop thread; 0, or < 0 with err (to be retried). */
typedef struct { const char *kind, *id, *mac; int64_t digits; } rt_erasure;
int  rt_erase_remote(rt *r, const rt_erasure *e, const char *key_hex, char *err);
/* {"intent", "slots", "turn"}; and GET /v1/sessions/ID's whole answer. */
void rt_session_state_json(const rt_session *ss, sb_jw *w);
int  rt_session_json(rt_sessions *s, const rt_session *ss, sb_jw *w, char *err);
/* The turns of session id, [{"turn", "at", "caller", "reply"}...]. */
int  rt_session_transcript_json(rt_sessions *s, const char *id, sb_jw *w, char *err);
/* One turn of a session in flight at a time: false when one is. */
bool rt_session_claim(rt_sessions *s, const char *id);
void rt_session_release(rt_sessions *s, const char *id);   /* s NULL ok */

/* handoff_out.c: delivers the hand-off outbox of the session store at
 * path to each package's url, on its own thread and SQLite connection:
 * POSTed with its session id as Idempotency-Key, removed on a 2xx, retried
 * with exponential backoff otherwise - at least once, across restarts.
 * kick: a package was queued (NULL ok). */
typedef struct rt_handoff_out rt_handoff_out;
int  rt_handoff_out_start(const char *path, const uint8_t *key, rt_handoff_out **out, char *err);  /* key NULL: none */
void rt_handoff_out_kick(rt_handoff_out *h);
void rt_handoff_out_stop(rt_handoff_out *h);    /* NULL ok */

struct rt {
    rt_exec ex;                     /* the runs' and the backends' state: ex.conf, ex.be (base, models) */
    struct evhttp *http;
    char *config_path;
    sb_cache *cache;
    struct rt_sync *sync;       /* periodic cloud sync, or NULL */
    struct rt_obs *obs;             /* obs.h: histograms, call traces, the console */
    rt_keys *keys;                  /* NULL: no auth */
    rt_sessions *sessions;          /* NULL: the store did not open (conversations get 503) */
    rt_handoff_out *handoff_out;    /* delivers the store's hand-off packages, or NULL */
    struct rt_waiting *waiting;     /* session_door.c: suspended runs, by session, until the next turn */
    struct event *session_timer;    /* the sweep of expired sessions */
    struct event *retention_timer;  /* retention.c: the hourly purge of runtime.retention */
    int body_timeout_ms;            /* 408 after this long inside one request's bytes */
    size_t max_body, max_headers;
    rt_metrics metrics;
    rt_guard **guards;              /* one per HTTP connection */
    size_t n_guards, cap_guards;
    rt_req *reqs;                   /* requests in flight (shutdown cancels them) */
    struct sb_ipc_server *sock_server;
    struct event *health_timer, *sweep_timer;
    bool stopping;
    uint64_t next_id;
    double started;
    long long started_wall;         /* Unix time, for "created" */
};

/* http.c */
int  rt_http_start(rt *r, const char *host, int port, char *err);
void rt_http_stop(rt *r);
/* http_conn.c: the connection guards. bev_new is evhttp's bevcb (arg: rt).
 * begin: a request of the connection reached the router; false when the
 * guard already answered it. drop_all: at stop, after evhttp_free. */
void rt_http_sweep(rt *r);                              /* 408s, freed connections */
struct bufferevent *rt_conn_bev_new(struct event_base *base, void *arg);
bool rt_conn_begin(rt *r, struct evhttp_request *req);
void rt_conn_drop_all(rt *r);

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
    char key_name[RT_KEY_NAME_MAX + 1];  /* the API key's name; "" without auth */
    unsigned key_roles;             /* its RT_ROLE_*; every role without auth */
    const char *method;
    int kind;                       /* openai.c: chat or completion */
    bool include_usage;
    size_t lp_offset;               /* legacy completions logprobs: text_offset so far */
    int n_embed;                    /* embeddings.c: vectors expected */
    bool embed_b64;                 /* embeddings.c: encoding_format base64 */
    char *cache_key;                /* set on a cacheable miss */
    char *cache_input, *cache_ns, *cache_fp, *cache_params;
    rt_sink reply;                  /* the door's reply writer (arg: this request) */
    rt_session *sess;               /* a conversation's turn (session_door.c), or NULL */
    const sb_pipeline *pipe;        /* its pipeline, while its run holds the config */
    bool sess_claimed;
    struct rt_privacy_call *privacy;    /* privacy_door.c: the call's placeholders, or NULL */
    sb_jw out;                      /* scratch */
    void (*on_gone)(rt_req *q);     /* client vanished or deadline passed */
};

/* The request object (http_conn.c). detach: before the final send (the
 * connection's callbacks must not reach a freed q); done: count, log and
 * free it. */
rt_req *rt_req_new(rt *r, struct evhttp_request *req, int route);
void rt_req_detach(rt_req *q);
void rt_req_done(rt_req *q);
/* Reply helpers (http_reply.c). After a final reply q is freed. */
/* The OpenAI error object {"error": {message, type, param?, code}}. */
void rt_error_json(sb_jw *w, const char *type, const char *code, const char *msg, bool param);
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
void rt_req_set_header(rt_req *q, const char *name, const char *value);     /* on the reply */
/* Read and parse the body; replies 400 and returns NULL on failure. */
sb_json_doc *rt_req_body_json(rt_req *q);

/* The doors (openai.c, pipeapi.c, embeddings.c, metrics.c). */
void rt_handle_health(rt_req *q);
void rt_handle_metrics(rt_req *q);
void rt_handle_chat(rt_req *q, const sb_json *body, int kind);
void rt_handle_models(rt_req *q);
void rt_handle_pipeline(rt_req *q, const char *name, const sb_json *body);
void rt_handle_embeddings(rt_req *q, const sb_json *body);

/* pipecall.c: run pipeline name on input (until: stop after that stage, or
 * NULL) for q, answering through q->reply: from the response cache when
 * it holds the result, else from a run; the call is traced. */
void rt_pipeline_call(rt_req *q, const char *name, const char *input, const char *until, const char *session);

/* session_door.c: a pipeline call as a turn of a conversation. begin: 0 to
 * run (q->sess set when the pipeline keeps sessions), 1 when q was
 * answered (an error, or a call that ended). commit: the turn is stored
 * before its reply, view says where the call stands. end: release q's
 * session (rt_req_done). The transcript records the words begin was given:
 * a resumed run's input (commit's and asked's `input`) is the call's first
 * turn, not this one. */
int  rt_turn_begin(rt_req *q, const sb_pipeline *p, const char *session, const char *input);
int  rt_turn_commit(rt_req *q, const sb_pipeline *p, const rt_run *run, const char *input, const char *reply,
                    rt_turn_view *view, char *err);
void rt_turn_failed(rt_req *q, const sb_pipeline *p);
/* The run asked the caller (its sink's ask): the turn is stored with the
 * question as its reply and what is awaited, and the suspended run kept
 * for the session's next turn (rt_waiting_take). As commit otherwise. */
int  rt_turn_asked(rt_req *q, const sb_pipeline *p, const rt_run *run, const char *input, const char *question,
                   rt_turn_view *view, char *err);
/* What the session gives a run it starts (router/run/topic.c): the last
 * turns before it as {{history}} (conversation.history_turns, trimmed to
 * history_tokens; a resumed run keeps those it began with, so the answers
 * to its own questions are not shown twice beside {{input}}), and - fresh:
 * a run from the start - the slots gathered so far. 0, or an error in err
 * (the turn is not run). */
int  rt_turn_context(rt_req *q, const sb_pipeline *p, rt_run *run, bool fresh, char *err);
void rt_waiting_put(rt *r, const rt_session *ss, rt_run *run, double ttl_s);
/* NULL: none (gone with a restart), or its session took a turn on another
 * router since (the run is stale: dropped). */
rt_run *rt_waiting_take(rt *r, const rt_session *ss);
void rt_turn_end(rt_req *q);
void rt_handle_session(rt_req *q, const char *id, bool del);        /* GET / DELETE /v1/sessions/ID */
void rt_sessions_start(rt *r, const sb_config *cfg);
/* retention.c: runtime.retention's purge, now (`now`: Unix seconds) with
 * the config in use; rt_retention_start runs it and then every hour. */
void rt_retention_purge(rt *r, double now);
void rt_retention_start(rt *r);
void rt_retention_stop(rt *r);
void rt_sessions_stop(rt *r);

/* privacy_door.c: a pipeline's `privacy:` policy on the caller's input,
 * applied once where the call is resolved (docs/PRIVACY.md). */
typedef struct rt_privacy_call rt_privacy_call;
/* p's policy on input: 0 and *out the call's state (NULL: the pipeline has
 * no policy); SB_EINVAL: refused (mode reject: err names the types found,
 * never the values); SB_ENOMEM. kept (NULL ok): a session's table, taken
 * over (left empty) as the call's starting table under pseudonymize. */
int  rt_privacy_enter(const sb_pipeline *p, const char *input, sb_pii_table *kept, rt_privacy_call **out, char *err);
const char *rt_privacy_input(const rt_privacy_call *pc);   /* what the call runs on */
/* The sink a door answers through, replaced by one that restores the
 * values into the reply (pseudonymize; else unchanged). pc must outlive it. */
void rt_privacy_wrap(rt_privacy_call *pc, rt_sink *sink);
void rt_privacy_attach(rt_privacy_call *pc, rt_run *run);  /* the run's tools reveal from pc (NULL ok) */
void rt_privacy_free(rt_privacy_call *pc);                 /* NULL ok */
/* The HTTP doors' step: q->privacy set, *input replaced and q->reply wrapped;
 * false: q was answered (400 personal_data, or 500). */
bool rt_privacy_door(rt_req *q, const sb_pipeline *p, const char **input);

/* http_reply.c. The error of every HTTP door's sink (req: the rt_req): the
 * OpenAI error body, with Retry-After when the failure has one. */
void rt_req_fail(void *req, const rt_failure *f);
/* A model call of request q (its job) has ended: detach it, and when it
 * failed answer q with the mapped status (503 with Retry-After). true: q
 * was answered with the error. */
bool rt_req_model_failed(rt_req *q, const rt_reply *res);
/* The response cache (cache_door.c). 1 = hit (*entry filled), 0 = miss (q keeps the key
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
/* On the loop thread (each second): the erasures a sync received, applied
 * to this router's stores while the sync waits (s NULL ok). */
void rt_sync_erasures(rt_sync *s, rt *r);

/* cli_route_dialog.c: `route eval --dialogue` - each call of a labelled set
 * played with a simulated caller through the intent stage's clarify steps
 * (sb_clarify_*), what cli_route.c prints after it trained and classified. */
#define RT_DIALOG_MAX_LANGS 16
typedef struct {
    int expected;                   /* label index; n_labels: out of scope */
    const char *lang;               /* the caller's language tag (zh, en) */
    int lang_idx;                   /* < RT_DIALOG_MAX_LANGS */
    const char *text;
} rt_dialog_call;
/* Classify text, call k's words or what it said later; 0 or an SB_E*. */
typedef int (*rt_dialog_route_fn)(void *ctx, size_t k, const char *text, sb_cls_result *r, char *err);
typedef struct {
    const char *config, *pipeline, *encoder, *method;  /* named in the report */
    const sb_stage *st;             /* played with its clarify.margin and clarify.max */
    double min_conf;
    int json, verbose, sweep;       /* sweep: the same calls at a range of margins (1) or of refusal margins (2) too */
    const char *const *langs;       /* by lang_idx */
    int n_langs;
    const rt_dialog_call *calls;
    size_t n, single_right;         /* single_right: right by the first verdict alone */
    rt_dialog_route_fn route;
    void *ctx;
} rt_dialog_opts;
/* Print the report; the dialogue accuracy, or -1 (err says why), and in
 * *asked the share of calls asked at least once. */
double rt_dialog_eval(const rt_dialog_opts *o, double *asked, char *err);
int rt_dialog_label(const sb_stage *s, const char *name);     /* its index, or -1 */

#endif
