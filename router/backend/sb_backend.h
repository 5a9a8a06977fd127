/* sb_backend.h - the router's backends: the models it calls, behind one
 * small interface (docs/ARCHITECTURE.md, "router/backend").
 *
 *   models.c    one dispatcher per model: a fair FIFO by priority in front
 *               of a local worker's socket (msgpack) or an upstream server,
 *               health polling, restart detection
 *   upstream.c  an OpenAI-compatible server: encodes the typed request as
 *               an OpenAI body, reads its JSON or SSE answer
 *   gen_req.c   the typed generation request: parsed once from an OpenAI
 *               body, encoded by the backend that takes it, keyed for the
 *               response cache by one function; the typed score and
 *               embed calls' worker params
 *
 * Callers above hand it typed requests only (rt_gen_req, rt_score_req,
 * rt_embed_req) and get typed replies only (rt_reply: rt_gen_result,
 * rt_score_result, rt_embed_result), decoded once here - from the worker's
 * msgpack, or straight from an upstream's JSON. No layer above this one
 * builds or reads msgpack: this header does not include ipc/ (the encoders
 * and the decoder are in backend_internal.h), and tools/check_layers.py
 * refuses ipc/ headers and sb_ipc_result above router/backend/.
 *
 * The lowest router layer: it includes nothing of router/run/ or the front
 * doors; what they want to know (latencies, a model that came up) they
 * learn through the hooks in rt_backends. Names carry rt_ (the router's).
 */
#ifndef SB_ROUTER_BACKEND_H
#define SB_ROUTER_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/sb_cache.h"
#include "common/sb_common.h"
#include "common/sb_config.h"
#include "common/sb_json.h"
struct event_base;
struct sb_ipc_aclient;

typedef struct rt_model rt_model;
typedef struct rt_job rt_job;
typedef struct rt_gen_req rt_gen_req;
typedef struct rt_upcall rt_upcall;
typedef struct rt_score_req rt_score_req;
typedef struct rt_embed_req rt_embed_req;

/* ------------------------------------------------------------ the set */

/* Latency families (the router's /metrics histograms); the label values
 * per family are fixed (router/hist.c's table). */
enum { RT_H_STAGE,              /* pipeline, stage */
       RT_H_PIPELINE,           /* pipeline: a successful run, end to end */
       RT_H_TTFT_PIPELINE,      /* pipeline: run start to the answer's first streamed token */
       RT_H_MODEL,              /* model, method: a call at the worker (or upstream) */
       RT_H_QUEUE,              /* model: time in the router's FIFO */
       RT_H_TTFT_MODEL,         /* model: submit to the first token of a generate */
       RT_H_COUNT };

/* What the layers above learn from the ones below, without being
 * included by them: set by the router at start; any may be NULL. */
typedef struct {
    void *arg;
    /* `seconds` in family f (RT_H_*) under label values a (and b) */
    void (*observe)(void *arg, int f, const char *a, const char *b, double seconds);
    /* a model came up or changed kind (router/run/ builds embedding indexes) */
    void (*models_changed)(void *arg);
    /* call traces are kept: runs keep what each stage was given */
    bool (*tracing)(void *arg);
} rt_hooks;

/* The models of the current config, and what their calls need. */
typedef struct rt_backends {
    struct event_base *base;
    rt_model **models;
    size_t n_models;
    const sb_config *cfg;           /* the config of the last rt_models_sync (state.json, upstream entries) */
    uint64_t next_id;               /* upstream call ids */
    rt_hooks hooks;
} rt_backends;

void rt_observe(const rt_backends *be, int f, const char *a, const char *b, double seconds);

/* ------------------------------------------------------ request pieces */

typedef struct {
    double temperature, top_p, min_p, repeat_penalty;
    int    top_k, max_tokens;       /* < 0: the worker's default */
    int64_t seed;                   /* < 0: the worker's default */
} sb_sampling;

/* A prompt for a worker, in pieces: text the operator wrote (the template's
 * literal text, labels; special = true: special-token spellings in it such
 * as "<|im_start|>" become control tokens) and text substituted into it
 * (special = false: the caller's words, earlier stages' and tools' outputs,
 * which the worker tokenizes as plain text whatever they contain). Sent as
 * the worker's `segments` (docs/ipc.md). Sticky out-of-memory like sb_jw. */
typedef struct { size_t off, len; bool special; } sb_seg;
typedef struct {
    sb_jw   text;           /* all pieces back to back */
    sb_seg *v;              /* adjacent pieces of one kind are merged */
    size_t  n, cap;
    int     oom;
} sb_segs;

void sb_segs_init(sb_segs *s);
void sb_segs_free(sb_segs *s);
void sb_segs_add(sb_segs *s, const char *p, size_t n, bool special);
void sb_segs_cat(sb_segs *dst, const sb_segs *src);
bool sb_segs_any_special(const sb_segs *s);

enum { RT_KIND_CHAT, RT_KIND_COMPLETION };

/* Part of the cache params of every chat call and pipeline run. Bump it
 * when the router changes how a request becomes a prompt: the model and
 * pipeline fingerprints do not see that, and an answer computed under the
 * old rules must not be served - or synced to other edges - under the new.
 * 2: text from callers, messages and earlier stages is never parsed for
 * special tokens (docs/ipc.md, `segments`).
 * 3: nor for user-defined added tokens (Qwen's <tool_call>); an intent
 * stage folds line breaks in the caller's text (docs/router.md). */
#define RT_PROMPT_RULES "3"
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

/* ------------------------------------------------------------ replies */

/* One token's log-probability (a generation asked for logprobs): its bytes
 * as the token's piece renders them (possibly part of a UTF-8 character),
 * and the log-softmax the sampler drew from (docs/ipc.md). */
typedef struct {
    const char *bytes;
    size_t len;
    double logprob;
} rt_token_prob;

/* A generated token's entry: the token, and the position's most likely
 * tokens (top_logprobs of them; none without). */
typedef struct {
    rt_token_prob tok;
    const rt_token_prob *top;
    size_t n_top;
} rt_logprob;

/* A tool call the model made: the function's name and its arguments, the
 * JSON text the model wrote; id: the call's id when the backend has one (an
 * upstream's, which its later tool messages name), NULL: the door makes one. */
typedef struct {
    const char *name, *arguments;
    size_t name_len, arguments_len;
    const char *id;
    size_t id_len;
} rt_tool_call;

/* What a call answered, decoded once by the backend that made it. Views,
 * valid while the callback runs. */
typedef struct {
    const char *text;               /* "" when the answer had none */
    size_t len;
    const char *finish_reason;      /* NULL: not said (callers take "stop") */
    int64_t prompt_tokens, completion_tokens, reused_tokens;
    double prompt_ms, gen_ms;       /* the worker's compute; an upstream's whole call is gen_ms */
    const rt_tool_call *calls;      /* finish_reason "tool_calls": the calls, in order */
    size_t n_calls;
    bool has_logprobs;              /* the request asked for logprobs: the entries below (maybe none) */
    const rt_logprob *logprobs;     /* each generated token's */
    size_t n_logprobs;
} rt_gen_result;

typedef struct {
    const double *probs;            /* the candidates' probabilities (softmax), n_probs of them */
    size_t n_probs;
    const double *logprobs;         /* their log-likelihoods */
    size_t n_logprobs;
} rt_score_result;

typedef struct {
    const float *vecs;              /* n vectors of dim floats, back to back (the worker's are float32) */
    size_t n;
    uint32_t dim;                   /* 0: no vectors, or not all numbers of one length */
    int64_t n_tokens;
    double embed_ms;
} rt_embed_result;

enum { RT_CALL_GENERATE, RT_CALL_SCORE, RT_CALL_EMBED };

typedef struct {
    int method;                     /* RT_CALL_*: which result below is filled */
    bool ok;
    const char *code;               /* a failure: the worker's error code (docs/ipc.md) or "upstream_error" */
    const char *message;
    rt_gen_result gen;
    rt_score_result score;
    rt_embed_result embed;
} rt_reply;

/* A streamed generation's next text and, when the request asked for
 * logprobs (has_logprobs), the entries of the tokens since the previous
 * event (the text may be empty while a character is incomplete). Views,
 * valid while the callback runs. */
typedef struct {
    const char *text;
    size_t len;
    bool has_logprobs;
    const rt_logprob *logprobs;
    size_t n_logprobs;
} rt_token;

typedef void (*rt_token_fn)(void *arg, const rt_token *t);
typedef void (*rt_done_fn)(void *arg, const rt_reply *r);

struct rt_model {
    char *name;
    char *sock;
    char *gguf;
    bool remote;                    /* upstream: served over HTTP by upstream.c */
    bool kind_known, encoder;       /* from the worker's health: an embedding model */
    rt_upcall *upcalls;             /* remote: calls in flight */
    bool removed;                   /* gone from the config after a reload */
    int max_waiting, deadline_ms, max_tokens;
    struct sb_ipc_aclient *ac;
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
    rt_backends *be;
};

/* Queue a call. 0: on_done comes exactly once, later, from the loop.
 * SB_EBUSY: the router's queue for the model is full (answer 503 with
 * rt_model_retry_after); SB_EIO: the worker is down. Each takes a typed
 * request (below) that the backend encodes; priority orders the router's
 * queue (RT_PRIORITY_STEP_S) and goes to a worker that takes it. */
/* A generation: the job keeps its own copy of g, and the backend the
 * dispatch picks encodes it - msgpack for a worker, an OpenAI body for an
 * upstream. Its priority is g->priority. */
int  rt_model_submit_gen(rt_model *m, const rt_gen_req *g, int timeout_ms, rt_token_fn on_token, rt_done_fn on_done,
                         void *arg, rt_job **out, char *err);
/* A worker's `score` and `embed`: the job keeps its own copy of r, encoded
 * at dispatch like a generation (an upstream has neither, and refuses them
 * then). */
int  rt_model_submit_score(rt_model *m, const rt_score_req *r, int timeout_ms, rt_done_fn on_done, void *arg,
                           rt_job **out, char *err);
int  rt_model_submit_embed(rt_model *m, const rt_embed_req *r, int timeout_ms, rt_done_fn on_done, void *arg,
                           rt_job **out, char *err);
/* Calls handed to m's worker (or upstream) at once. */
int  rt_model_capacity(const rt_model *m);
/* Seconds a caller refused with a full queue should wait: [1, RT_RETRY_AFTER_MAX_S]. */
int  rt_model_retry_after(const rt_model *m);
/* No callbacks after this; the worker is told to stop. */
void rt_job_cancel(rt_job *j);
rt_model *rt_model_find(const rt_backends *be, const char *name);
void rt_models_sync(rt_backends *be, const sb_config *cfg);     /* add / update / retire; keeps cfg */
void rt_models_poll(rt_backends *be);                           /* health probes */
void rt_models_free(rt_backends *be);
/* The HTTP status and OpenAI error type for a worker's error code. */
int  rt_worker_error_status(const char *code, const char **type);

/* ------------------------------------------------- the typed request */

/* One generation request, whichever door it came in by.
 *
 * An OpenAI chat or completion body (rt_gen_parse_openai) and a pipeline's
 * generate stage (rt_gen_from_stage) become the same typed struct, checked
 * once. What follows reads only the struct: the backends, which encode it
 * themselves (rt_gen_encode: the worker's `generate` params; upstream.c:
 * an OpenAI body), and the response cache's key (rt_gen_cache_key), so a
 * field added here is in the key or says there why it is not (a
 * static_assert in gen_req.c fails until it does).
 */

#define RT_GEN_MAX_MSGS  256        /* an OpenAI request's messages */
#define RT_GEN_MAX_STOPS 16         /* an OpenAI request's stop strings (a stage has SB_PIPE_MAX_STOPS) */

typedef struct {
    const char *role;               /* system, user, assistant, tool ("developer" arrives as system) */
    sb_segs content;                /* plain text, or a stage's template pieces (special) */
    /* OpenAI tool calling: an assistant message's tool_calls as the worker's
     * JSON [{"id", "name", "arguments"}] after a tool message's
     * tool_call_id (tool_id_len bytes) in one owned buffer; empty without */
    sb_jw tool;
    size_t tool_id_len;
} rt_gen_msg;

/* tool_choice: not given (auto when there are tools), or one of these */
enum { RT_TOOLS_UNSET = -1, RT_TOOLS_NONE, RT_TOOLS_AUTO, RT_TOOLS_REQUIRED };

struct rt_gen_req {
    int kind;                       /* RT_KIND_CHAT: msgs; RT_KIND_COMPLETION: prompt */
    bool stream;                    /* the worker streams token events */
    rt_gen_msg *msgs;
    size_t n_msgs;
    sb_segs prompt;                 /* completion: the prompt */
    bool prompt_segments;           /* sent as `segments` (a stage's raw prompt), not as `prompt` */
    const char *last_user;          /* chat: the last user message's string content, or NULL (what
                                       a pipeline:NAME model takes as its input); not sent */
    sb_sampling sampling;           /* temperature < 0, top_p/min_p/repeat_penalty/top_k < 0,
                                       max_tokens <= 0: the worker's default */
    bool has_seed;                  /* sampling.seed was given (an OpenAI seed may be negative) */
    const char *stops[RT_GEN_MAX_STOPS];    /* views into the body or the config */
    size_t stop_lens[RT_GEN_MAX_STOPS];
    size_t n_stops;
    const char *json_schema;        /* JSON Schema text decoding is held to; NULL: none */
    size_t json_schema_len;
    int priority;                   /* the model queue's order (docs/router.md, "Priority"); OpenAI: 0 */
    sb_jw own;                      /* storage: an OpenAI response_format's schema; a copy's text */
    /* OpenAI tool calling and logprobs (docs/router.md, "Tools"): tools_own
     * holds the tools array's JSON (tools_len bytes; 0: none) then the
     * function tool_choice names (tool_name_len bytes; 0: any). */
    sb_jw tools_own;
    size_t tools_len, tool_name_len;
    int tool_choice;                /* RT_TOOLS_* */
    int parallel_tool_calls;        /* -1 not given, else 0 / 1 */
    bool logprobs;
    int top_logprobs;               /* 0-20 */
};

void rt_gen_init(rt_gen_req *g);
void rt_gen_free(rt_gen_req *g);

/* The generation part of an OpenAI body for kind (RT_KIND_*): messages or
 * prompt (with tool calls and results), sampling, stop, response_format,
 * tools, tool_choice, parallel_tool_calls, logprobs. 0; SB_EINVAL with the client's
 * 400 message in why; SB_ENOMEM. g may hold views into body: keep it. */
int rt_gen_parse_openai(rt_gen_req *g, const sb_json *body, int kind, char *why, size_t why_len);

/* A pipeline stage's prompt (router/run/ fills the rest of g from the
 * stage): chat, a system message (when has_system) and a user message;
 * else one raw prompt of the system text and the prompt, sent as
 * segments. sys and prompt are taken over (the caller no longer frees
 * them). 0 or SB_ENOMEM. */
int rt_gen_set_prompt(rt_gen_req *g, bool chat, bool has_system, sb_segs *sys, sb_segs *prompt);

/* A deep copy of src that owns all its text (src may hold views into a
 * request body or the config), for a call that waits in a model's queue.
 * last_user is not kept (it is read before the call). 0 or SB_ENOMEM (dst
 * is then freed). dst is initialised here. */
int rt_gen_copy(rt_gen_req *dst, const rt_gen_req *src);

/* What the response cache keys g on, besides the namespace and the model's
 * fingerprint: *input (the canonical messages, or the prompt as sent) with
 * the normalisation *norm still to apply to it, and params (every other
 * field that can change a deterministic answer). normalise: whether to
 * normalise the messages' text here (the cache is on). 0, or -1 when g
 * cannot be cached (params do not fit, out of memory). input is the
 * caller's, initialised. */
int rt_gen_cache_key(const rt_gen_req *g, bool normalise, sb_jw *input, unsigned *norm, char *params,
                     size_t params_len);

/* ------------------------------------------- the score and embed calls */

/* A `score` call (docs/ipc.md): the likelihood of each candidate after one
 * prompt - chat messages, or a raw prompt sent as `segments` when part of
 * it is the operator's text and else as plain text never parsed for
 * special tokens. Views: the caller keeps them for the submit. */
struct rt_score_req {
    int kind;                       /* RT_KIND_CHAT: msgs; RT_KIND_COMPLETION: prompt */
    const rt_gen_msg *msgs;
    size_t n_msgs;
    const sb_segs *prompt;
    const char *const *candidates;
    size_t n_candidates;
    int priority;
};

/* An `embed` call (docs/ipc.md): vectors of texts for an encoder model. */
struct rt_embed_req {
    const char *kind;               /* query, passage or raw: e5's prefixes */
    const char *const *texts;
    const size_t *lens;             /* NULL: each text is a C string */
    size_t n;
    int priority;                   /* the router's queue only: a worker's embed takes none */
    const char *adapter;            /* NULL: the worker's own; "none" or one of its named adapters */
};

/* models.NAME with `upstream:` (upstream_config.c): a remote model's keys,
 * declared by the backend that calls it, read from its mapping v into m
 * and checked; c->path is "models.NAME". The models section
 * (supervisor/sup_config.c) hands each remote entry here. 0, SB_EINVAL,
 * SB_ENOMEM. */
int rt_upstream_model_load(const sb_cfg_ctx *c, const sb_config_node *v, sb_config_model *m);

#endif
