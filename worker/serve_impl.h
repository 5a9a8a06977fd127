/* serve_impl.h - what serve.c (the socket side, one job at a time) and
 * serve_batch.c (the compute loop that runs many jobs at once) share; not an
 * API. A request is parsed into a gen_req / score_req once, run either by
 * sb_engine_generate/score or as an engine task, and answered by one
 * function either way, so both modes reply with the same fields. */
#ifndef SB_SERVE_IMPL_H
#define SB_SERVE_IMPL_H

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "worker/engine/sb_engine.h"
#include "ipc/sb_ipc.h"
#include "worker/serve_embed.h"

#define MAX_CANDIDATES 256
#define MAX_STOPS 16

enum { JOB_GENERATE, JOB_SCORE, JOB_EMBED };

typedef struct job job;
struct job {
    job *next;
    sb_ipc_reply *reply;
    const sb_mp_obj *params;
    int kind;                   /* JOB_* */
    int priority;               /* request 'priority': higher is admitted and prefilled first */
    atomic_int cancel;
    void *req;                  /* batched mode: the parsed gen_req / score_req, kept while it waits */
};

typedef struct {
    const char *name, *model_path, *socket_path;
    int max_queue, max_tokens_cap, drain_ms;
    int lookup;                 /* default prompt-lookup draft length (--lookup; docs/SPECULATIVE.md) */
    const char *draft_path;     /* --draft: a model of the same vocabulary drafting for this one */
    int n_draft;                /* its tokens per draft (--n-draft) */
    sb_engine *draft;           /* opened from draft_path, one sequence */
    int deadline_ms;            /* default for requests without deadline_ms; 0 = none */
    int parallel;               /* sequences run at once (--parallel); 1: one job at a time */
    int kv_mb;                  /* KV pool (--kv-mb); 0: the default for `parallel` */
    sb_engine *engine;          /* a decoder model, or */
    sb_encoder *encoder;        /* an encoder model (serve_embed.c) */
    const char *adapter_path;   /* --adapter: a LoRA adapter the encoder applies to every text */
    struct sb_lora *adapter;    /* loaded from adapter_path */
    const char *named_paths[SB_SERVE_MAX_ADAPTERS];     /* --named-adapter NAME=FILE: the FILEs */
    sb_serve_adapters named;    /* loaded; a request picks one by name */
    struct event_base *base;
    sb_ipc_server *server;
    pthread_t compute;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    job *current;               /* one-at-a-time mode: the job on the compute thread, under mu */
    int n_queued, running, stopping;
    sb_engine_stats stats;      /* the engine's figures after the last step, under mu (health reads them) */
    struct event *sig_term, *sig_int, *drain_timer;
} worker;

typedef struct {
    job *j;
    sb_mp_writer *wr;
} stream_ctx;

/* One generated token's log-probability and its position's top tokens. */
typedef struct {
    int32_t tok;
    float lp;
    int n_top;
    int32_t top[SB_MAX_TOP_LOGPROBS];
    float top_lp[SB_MAX_TOP_LOGPROBS];
} lp_entry;

/* Collects the whole text for the final response (streamed or not). */
typedef struct {
    stream_ctx s;
    int stream;
    char *buf;
    size_t len, cap;
    /* With a tool grammar: the byte a call opens with ('<', '{'), and what
     * the first byte said: 0 not yet, 1 text (streamed), 2 calls (held back
     * for the reply's tool_calls). 0 without tools. */
    char call_opener;
    int decided;
    /* logprobs: every emitted token's (the result), and how many the token
     * events have carried so far (a piece can hold several tokens' text) */
    const sb_vocab *vocab;
    lp_entry *lps;
    size_t n_lps, cap_lps, lps_sent;   /* cap_lps in bytes (sb_grow) */
    int lps_failed;             /* out of memory: the reply says so */
} gen_sink;

typedef struct {
    sb_gen_opts o;
    const char *stop_v[MAX_STOPS];
    int32_t *ids;
    size_t n_ids;
    gen_sink sink;
    sb_jw tools_spec;           /* the tool grammar's spec (o.tools_grammar points into it) */
    int tools_format;           /* SB_TOOLS_* for reading the calls back */
} gen_req;

typedef struct {
    int32_t *ids;
    size_t n_ids;
    uint32_t nc;
    int32_t *ctoks[MAX_CANDIDATES];
    int clen[MAX_CANDIDATES];
    double lp[MAX_CANDIDATES];
} score_req;

void sb_serve_reply_invalid(sb_ipc_reply *r, const char *err);
/* The prompt of a request as token ids, BOS added when add_bos and the
 * model asks for it: exactly one of `key` ("prompt", or "text" for
 * tokenize), "segments" or "messages" (docs/ipc.md). */
int  sb_serve_request_tokens(worker *w, const sb_mp_obj *params, const char *key, bool special, bool add_bos,
                             int32_t **ids, size_t *n_ids, char *err);
/* One request run to its reply on the engine alone (--parallel 1). */
void sb_serve_run_generate(worker *w, job *j, sb_mp_writer *wr);
void sb_serve_run_score(worker *w, job *j, sb_mp_writer *wr);

/* Parse j's params into g / s. 0, or nonzero after an error reply. wr is
 * the compute thread's scratch writer (streamed pieces use it). */
int  sb_serve_gen_prepare(worker *w, job *j, sb_mp_writer *wr, gen_req *g);
/* Answer j from a finished generation (rc, err: its failure). */
void sb_serve_gen_reply(job *j, gen_req *g, int rc, const sb_gen_result *res, const char *err, sb_mp_writer *wr);
void sb_serve_gen_free(gen_req *g);
int  sb_serve_score_prepare(worker *w, job *j, score_req *s);
void sb_serve_score_reply(job *j, const score_req *s, int rc, const char *err, sb_mp_writer *wr);
void sb_serve_score_free(score_req *s);

/* The compute thread when parallel > 1: admit queued jobs as engine tasks,
 * step, answer the finished ones (serve_batch.c). */
void *sb_serve_batch_main(void *arg);
/* w->stats from the engine, under w->mu (compute thread only). */
void sb_serve_publish_stats(worker *w);

#endif
