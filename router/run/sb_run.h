/* sb_run.h - pipeline execution (docs/ARCHITECTURE.md, "router/run"):
 *
 *   pipeline*.c  pipelines from the config's `pipelines:` node tree,
 *                validated with FILE:LINE:COL errors
 *   template.c   the template language their prompts use
 *   run.c        the executor: stage by stage on the loop, each through
 *                its kind (stage_internal.h), with four outcomes
 *   stage_*.c    the kinds, one file each (intent, generate, tool,
 *                retrieve), listed in stage_kinds.c
 *   tool.c       what tool stages run: a child process or an HTTP call, with limits
 *   retrieve.c   what retrieve stages run: a knowledge base search, a rerank
 *   intent_embed.c  intent stages that classify by sentence embeddings
 *
 * It calls the backends (router/backend/) and reports to whoever started
 * a run through the reply sink it was given (rt_sink, below) only: it
 * includes nothing of the front doors (the files in router/ itself) and
 * does not know which door a call came in by.
 * libevent types never appear here.
 */
#ifndef SB_ROUTER_RUN_H
#define SB_ROUTER_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sb_common.h"
#include "common/sb_config.h"
#include "common/sb_json.h"
#include "router/backend/sb_backend.h"
#include "privacy/sb_privacy.h"
#include "router/classify/sb_classify.h"

/* =========================================================== pipelines == */

#define SB_PIPE_MAX_STAGES  32
#define SB_PIPE_MAX_LABELS  64
#define SB_PIPE_MAX_STOPS   8
#define SB_PIPE_MAX_ARGS    32
#define SB_PIPE_MAX_ENV     32
#define SB_PIPE_MAX_TOP_K   20      /* passages of a retrieve stage: they go into a prompt */
#define SB_PIPE_MAX_PRIORITY 10     /* stage priority in [-10, 10]; each step is worth a second of waiting */
/* Tool stage defaults: 8 processes is more than a 2-8 core edge box runs
 * usefully at once, and 64 waiting calls drain in seconds at tool speeds. */
#define SB_TOOL_CONCURRENT  8
#define SB_TOOL_QUEUE       64

/* A stage's kind: its place in the table of kinds (router/run/stage_kinds.c,
 * one file per kind); these name the built-in ones, which the front doors
 * ask about (an intent stage's labels). */
typedef enum { SB_STAGE_INTENT, SB_STAGE_GENERATE, SB_STAGE_TOOL, SB_STAGE_RETRIEVE } sb_stage_kind;
/* How an intent stage decides: AUTO follows its model's kind (an encoder
 * embeds, a decoder scores); HYBRID embeds and asks score_model's label
 * likelihood only when the embedding's top-2 margin is small. */
enum { SB_INTENT_AUTO, SB_INTENT_SCORE, SB_INTENT_EMBED, SB_INTENT_HYBRID };
const char *sb_stage_kind_name(sb_stage_kind k);

/* A template: literal text with {{input}}, {{intent}}, {{confidence}}, {{config_dir}},
 * {{stages.NAME.output}} and {{stages.NAME.json.KEY}} holes, compiled at
 * load time so a typo is a config error, not an empty string at run time. */
typedef struct sb_tmpl sb_tmpl;

/* A text the config writes per language ({zh: "...", en: "..."}): a
 * question, a hand-off line, a label's display name. */
#define SB_MAX_LANGS 8
typedef struct {
    char *lang[SB_MAX_LANGS], *text[SB_MAX_LANGS];
    size_t n;
} sb_lang_text;

typedef struct {
    char *name;
    char *description;
    char **examples;
    size_t n_examples;
    sb_lang_text display;           /* what the caller hears when asked about it; none: its name */
} sb_label;

typedef struct {
    char *name;
    sb_stage_kind kind;
    int line, col;
    /* when: {intent: [...]} / {intent_not: [...]}; n_when == 0: always */
    char **when_intents;
    size_t n_when;
    bool when_negate;
    /* when: {found: STAGE} / {not_found: STAGE}: that retrieve stage's
     * verdict; -1: no condition. Both conditions must hold when both given. */
    int when_found;
    bool when_found_negate;
    /* intent + generate (+ retrieve: its base's model) */
    int priority;                   /* [-10, 10]: the model queue's order; default 1 for intent, else 0 */
    char *model;
    sb_tmpl *system;                /* may be NULL */
    bool chat;                      /* messages with the chat template (default) or a raw prompt */
    /* intent */
    sb_label *labels;
    size_t n_labels;
    double min_confidence;          /* [0, 1], default 0 */
    char *fallback;                 /* a label, or NULL */
    sb_tmpl *utterance;             /* how the caller's text is shown; default "{{input}}" */
    bool calibrate;                 /* divide by the labels' prior on a content-free input */
    /* intent by sentence embeddings (router/run/intent_embed.c, docs/router.md) */
    int method;                     /* SB_INTENT_* */
    char *score_model;              /* hybrid: the generative model asked on close calls */
    double hybrid_margin;           /* hybrid: asked when the top-2 score margin is below this */
    double clarify_margin;          /* clarify: the caller is asked when the top-2 margin is below this; 0: never */
    int clarify_max;                /* clarify: questions per call before it is handed off (default 2) */
    double clarify_refusal;         /* clarify: before a refusal, the best in-scope label is offered when
                                       within this of the out-of-scope class; < 0: clarify_margin */
    int classifier;                 /* sb_cls_method (sb_classify.h); -1: its default */
    double lexical;                 /* weight of the call's hashed words beside its embedding; 0: none */
    char *examples_file;            /* as written in the config */
    char **extra_text;              /* examples_file lines, then out_of_scope examples */
    int *extra_label;               /* their label index; -1: out of scope */
    size_t n_extra;
    /* generate */
    sb_tmpl *prompt;
    sb_sampling sampling;
    char *stops[SB_PIPE_MAX_STOPS];
    size_t n_stops;
    char *json_schema;              /* JSON Schema text: decoding is constrained to it (implies json) */
    bool json;                      /* extract and validate a JSON object */
    /* tool */
    sb_tmpl *argv[SB_PIPE_MAX_ARGS];    /* command; argv[0] is the program */
    size_t n_argv;
    sb_tmpl *stdin_tmpl;            /* NULL: the args_from stage's JSON, else (command) {{input}} */
    char *url;                      /* HTTP tool instead of a command */
    bool http_post;
    sb_tmpl *body;
    int args_from;                  /* index of the stage whose JSON feeds the tool; -1 none */
    int timeout_ms;
    char *env[SB_PIPE_MAX_ENV + 1]; /* command: "NAME=VALUE" on top of the allowlist; NULL-terminated */
    size_t n_env;
    int max_concurrent;             /* calls of this stage running at once (default SB_TOOL_CONCURRENT) */
    int max_queue;                  /* calls waiting beyond that; more get 503 (default SB_TOOL_QUEUE) */
    bool privacy_reveal;            /* command: `privacy: reveal`, the real values behind the call's placeholders */
    /* retrieve (router/run/retrieve.c): model is the base's embed_model */
    char *kb;                       /* a knowledge: entry */
    char *kb_adapter;               /* its adapter: the question is embedded through it (NULL: none) */
    sb_tmpl *query;                 /* default "{{input}}" */
    int kb_top_k;                   /* [1, SB_PIPE_MAX_TOP_K], default 3 */
    int kb_mode;                    /* sb_kb_mode: 0 bm25, 1 vector, 2 hybrid (default) */
    double min_score;               /* < 0: none; else the best passage's cosine (bm25: BM25 score),
                                       or with rerank its P(yes) in [0, 1] */
    char *rerank_model;             /* rerank: a generative model judging each passage; NULL: none */
    int rerank_top_n;               /* passages it judges (default 5; at least top_k) */
    char *rerank_prompt;            /* {{query}} and {{passage}}; NULL: SB_KB_RERANK_PROMPT */
    bool rerank_chat;               /* the prompt as a user message of the model's chat template */
    bool rerank_fuse;               /* order by RRF of the search's rank and P(yes)'s, not P(yes) alone */
    /* A kind's own settings, when it keeps them in a struct of its own
     * (stage_internal.h: a kind added after these keeps its block here, so
     * adding one does not touch this struct); its free hook frees them. */
    void *own;
} sb_stage;

typedef struct {
    char *name;
    char *description;
    int line, col;
    sb_stage *stages;
    size_t n_stages;
    int output;                     /* stage index whose output is the answer; -1: last that ran */
    int timeout_ms;                 /* whole pipeline, default 300000 */
    bool cache;                     /* store results in the response cache (default true) */
    unsigned cache_fold;            /* opt-in key folding, SB_NORM_CASEFOLD | SB_NORM_NFKC (sb_cache.h) */
    int privacy_mode;               /* SB_PRIVACY_*: what the door does with the caller's personal data */
    sb_privacy *privacy;            /* its detector (the `detect:` types); NULL when privacy_mode is OFF */
    uint8_t digest[32];             /* SHA-256 of the pipeline's source text: part of cache keys */
    struct {                        /* conversation: sessions across calls (router/sessions.c) */
        bool on;                    /* the block is present */
        int ttl_s;                  /* idle expiry, default 1800 */
        int max_turns;              /* then the call ends (done), default 50 */
        int max_bytes;              /* a session's stored bytes at most, default 262144 */
        char *handoff_url;          /* where hand-off packages are POSTed, or NULL */
        char *handoff_ca_file;      /* the CA certificates its TLS is verified against; NULL: the system's */
        char **handoff_intents;     /* labels that end the call with a hand-off (asked / rejected) */
        size_t n_handoff_intents;
        double topic_switch;        /* an answer routed to another intent this sure is a new topic; 0: never */
        int history_turns;          /* {{history}}: the last turns shown (default 4; 0: none) */
        int history_tokens;         /* ... trimmed, oldest first, to about this many tokens (default 256) */
    } conv;
} sb_pipeline;

/* A pipeline's `privacy: {mode}` (docs/PRIVACY.md, "In a pipeline"). */
enum { SB_PRIVACY_OFF, SB_PRIVACY_PSEUDONYMIZE, SB_PRIVACY_MASK, SB_PRIVACY_REJECT };

typedef struct {
    sb_pipeline *items;
    size_t n;
} sb_pipelines;

/* Validate cfg->pipelines (may be NULL: no pipelines) against the stage
 * schema and the config's models. 0 or SB_EINVAL with "FILE:LINE:COL: ..." in
 * err, SB_ENOMEM. *out is NULL on failure. */
int  sb_pipelines_load(const sb_config *cfg, sb_pipelines **out, char *err);
void sb_pipelines_free(sb_pipelines *p);                /* NULL ok */
const sb_pipeline *sb_pipelines_find(const sb_pipelines *p, const char *name);
int  sb_pipeline_stage_index(const sb_pipeline *p, const char *name);

/* An intent stage's `clarify:` (router/run/clarify.c): when its two best
 * classes are too close to tell, the caller is asked between them, and the
 * answer settles the call, asks again or is a new request. The pipeline's
 * intent stage runs on it, and `route eval --dialogue` plays whole calls
 * through the same steps without a runtime. */
typedef struct {
    int asked;                      /* questions asked so far in this call */
    int n, opt[2];                  /* the last question's options (label indices); n 0: an open question */
    bool pending;                   /* the caller's next turn answers it */
    uint64_t declined;              /* labels (bits) the caller said "neither" to */
} sb_clarify_state;

typedef enum {
    SB_CLARIFY_NONE,                /* nothing to ask: the classifier's verdict stands */
    SB_CLARIFY_ASK,                 /* ask st->n options st->opt (0: "what is your call about?") */
    SB_CLARIFY_SETTLED,             /* the caller picked *label, or left only it (-1: the reject class) */
    SB_CLARIFY_REROUTE,             /* a new request: route the answer from byte *at on */
    SB_CLARIFY_UNCLEAR,             /* it would take more than clarify.max questions: hand off at *label */
} sb_clarify_step;

/* After classifying: n classes ranked best first (label indices; -1 the
 * classifier's reject class) with their scores; the top-2 margin is
 * score[0] - score[1]. The reject class and a label named out_of_scope are
 * never offered: when one of the two, the other is asked about alone; when
 * both, NONE. When the call is close, the labels the caller already said
 * "neither" to are out of the running: if that leaves one class clear of
 * the next, the call is SETTLED there. */
sb_clarify_step sb_clarify_routed(const sb_stage *s, sb_clarify_state *st, const int *ranked, const float *score,
                                  int n, int *label);
/* The caller's turn while st is pending (when it is not, REROUTE at 0):
 * an option's name, an ordinal, a yes or no, "neither" (one open question,
 * within clarify.max), or a new request. */
sb_clarify_step sb_clarify_answered(const sb_stage *s, sb_clarify_state *st, const char *answer, int *label,
                                    size_t *at);
/* What the question calls label l in language lang ("zh", "en"; the first
 * listed when it has none in lang; NULL without display:). */
const char *sb_label_display(const sb_label *l, const char *lang);

/* What a template can see while a pipeline runs. */
typedef struct {
    const char *input;
    const char *config_dir;         /* {{config_dir}}: where the config file is */
    const char *intent;             /* NULL before an intent stage ran */
    double confidence;
    const sb_pipeline *pipe;
    const char *const *outputs;     /* per stage; NULL = not run */
    const sb_json *const *json;     /* per stage; NULL = none */
    const char *history;            /* {{history}}: a conversation's turns before this one; NULL = none */
} sb_tmpl_env;

/* Render into w (raw text, no JSON escaping): tool arguments, stdin, bodies. */
void sb_tmpl_render(const sb_tmpl *t, const sb_tmpl_env *env, sb_jw *w);
const char *sb_tmpl_source(const sb_tmpl *t);
/* Whether a hole of t that names stage's result would render nothing: its
 * output empty, no JSON, or the field absent, null or "". A text built
 * over a result (a tool's reply) then says less than it claims. */
bool sb_tmpl_lacks(const sb_tmpl *t, const sb_tmpl_env *env, int stage);

/* Render a prompt template: literal text special, every hole's value not. */
void sb_tmpl_render_segs(const sb_tmpl *t, const sb_tmpl_env *env, sb_segs *out);

/* The intent stage's fixed preamble (system text, labels with their
 * descriptions, few-shot examples) - the part every call shares, so the
 * worker's KV prefix reuse makes it free after the first call. Config text
 * is trusted; the system template's holes are not. */
void sb_intent_preamble(const sb_stage *s, const sb_tmpl_env *env, sb_segs *out);
/* The part of the intent prompt that changes per call: "Caller: " + the
 * stage's utterance (the caller's words, or "N/A" when content_free: the
 * calibration probe) + "\nIntent:", appended to out. Line breaks in its
 * untrusted text become spaces: the prompt is line-framed ("Caller:",
 * "Intent:", the examples), and a caller who could start a line could
 * write a fake "Intent: x" answer or a second "Caller:" turn after his own
 * (a prompt injection). An `utterance:` template's own line breaks are kept. */
void sb_intent_caller(const sb_stage *s, const sb_tmpl_env *env, bool content_free, sb_segs *out);

/* The first balanced {...} in text that parses as a JSON object, or NULL
 * (*doc then NULL too). Models like to wrap JSON in prose or ``` fences. */
const sb_json *sb_json_extract_object(const char *text, size_t len, sb_json_doc **doc);


/* ---------------------------------------------------------- the executor */

typedef struct rt_run rt_run;
typedef struct rt_tool rt_tool;
typedef struct rt_tool_gate rt_tool_gate;
typedef struct rt_conf rt_conf;

/* What runs need: the backends, the current config generation, the tool
 * stages' limits. The router owns one (rt.ex); all of it on the loop. */
typedef struct rt_exec {
    rt_backends be;
    rt_conf *conf;                  /* the current generation; runs hold their own reference */
    rt_tool_gate *tool_gates;       /* tool.c: per-stage limits, while calls run or wait */
} rt_exec;

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

struct rt_conf {
    sb_config *cfg;
    sb_pipelines *pipes;
    rt_prior *priors;               /* calibrate: true stages, once measured */
    rt_eindex *eindex;              /* intent_embed.c: embedding stages' example indexes */
    rt_kbh *kbs;                    /* retrieve.c: the knowledge bases retrieve stages opened */
    int refs;
};

void rt_conf_release(rt_conf *c);
rt_conf *rt_conf_acquire(rt_exec *ex);     /* the current generation (NULL before one), held */

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
void rt_retrieve_start(rt_exec *ex, rt_conf *c, const sb_stage *s, const char *query, size_t len, const float *qvec,
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

/* ------------------------------------------------------ the reply sink */

/* What a call answered: a run's result, a model's generation, or the
 * stored copy of either. Views, valid while the sink's finish runs. */
typedef struct {
    const char *text;               /* the answer */
    size_t len;
    const char *finish_reason;      /* stop, length */
    int prompt_tokens, completion_tokens;
    double model_s;                 /* seconds of model compute (the gateway's overhead leaves it out) */
    const rt_run *run;              /* the run it came from (stages, intent, trace); NULL: a model call or a stored answer */
    const char *result;             /* a pipeline call's whole result as JSON, rendered (rt_run_result_json) or as
                                       stored, when the caller has one; else NULL */
    size_t result_len;
    bool cached;                    /* from the response cache */
} rt_answer;

/* Why a call failed. */
typedef struct {
    int status;                     /* as HTTP: 503 busy or down, 504 timeout, 502 a bad worker answer, 500... */
    const char *type, *code;        /* the OpenAI error's type and code */
    const char *message;
    int retry_after;                /* seconds a caller refused for load should wait; 0: none */
    const rt_run *run;              /* the run that failed (its trace), or NULL */
} rt_failure;

/* Where a call's reply goes. Each front door implements one - the OpenAI
 * writer (JSON and SSE), the pipeline API's JSON, the socket's msgpack - and
 * execution writes through it without knowing the door. delta (NULL: the
 * caller does not stream) gets the answer's text as it is generated, then
 * exactly one of finish and error is called, from the loop.
 * ask (NULL: the door has no next turn, and a stage that asks fails the
 * run with 501) is called instead when a stage waits on the caller: a's
 * text is its question, and the run stays, suspended, until the door
 * gives it the caller's next turn (rt_run_resume) or drops it
 * (rt_run_cancel). */
typedef struct {
    void (*delta)(void *arg, const char *text, size_t len);
    void (*finish)(void *arg, const rt_answer *a);
    void (*error)(void *arg, const rt_failure *f);
    void *arg;
    void (*ask)(void *arg, const rt_answer *a);
} rt_sink;

/* ------------------------------------------------------------- runs */

/* A pipeline call resolved once, before anything runs: the config
 * generation it runs in (held), the pipeline, and the stage to stop after
 * (`until`, for evaluations and debugging; -1: run all). */
typedef struct {
    rt_conf *conf;
    const sb_pipeline *p;
    int until;
} rt_pipeline_ref;
/* 0; SB_ENOTFOUND: no such pipeline; SB_EINVAL: until (NULL: none) names no
 * stage of it; err says which. Release what rt_run_start_ref does not take. */
int  rt_pipeline_resolve(rt_exec *ex, const char *pipeline, const char *until, rt_pipeline_ref *out, char *err);
void rt_pipeline_ref_release(rt_pipeline_ref *ref);

/* Start a pipeline on input; its reply goes to *sink (copied): the tokens
 * of the stage that produces the answer as they come when sink->delta is
 * set, then its finish or its error, after which the run is freed (keep no
 * pointer to it). 0, or < 0 with err (nothing will be called).
 * rt_run_start_ref takes over ref's hold on the generation, whatever it
 * returns; rt_run_start resolves the name first (no until). */
int  rt_run_start_ref(rt_exec *ex, rt_pipeline_ref *ref, const char *input, const rt_sink *sink, rt_run **out,
                      char *err);
int  rt_run_start(rt_exec *ex, const char *pipeline, const char *input, const rt_sink *sink, rt_run **out, char *err);
void rt_run_cancel(rt_run *run);                    /* no callbacks; frees */
/* A suspended run (its sink's ask was called) goes on with the caller's
 * next turn: the stage that asked starts again with it. The pipeline's
 * timeout counts again from here. 0; SB_EINVAL: the run does not wait. */
int  rt_run_resume(rt_run *run, const char *turn, char *err);
/* The same, the reply now going to sink (the door of the next turn: the
 * one that got the question is gone). NULL: the sink it has. */
int  rt_run_resume_to(rt_run *run, const char *turn, const rt_sink *sink, char *err);
/* While it waits (its sink's ask ran): the stage that asked, and what it
 * awaits as JSON into w; -1 when the run does not wait. */
int  rt_run_waiting_stage(const rt_run *run);
void rt_run_awaiting_json(const rt_run *run, sb_jw *w);
/* A run that starts at the stage that asked (a session's saved `stage`),
 * whose suspended run is gone (the router restarted): input is the
 * caller's answer (rt_run_turn), intent the one the session kept and slots
 * its slots (JSON object text, the stage's JSON so far; either NULL:
 * none); the stages before it count as not run. stage -1 (or one the
 * pipeline no longer has): from the start, as rt_run_start_ref. */
int  rt_run_start_at(rt_exec *ex, rt_pipeline_ref *ref, int stage, const char *intent, const char *slots,
                     const char *input, const rt_sink *sink, rt_run **out, char *err);
/* The call's slots: the JSON object of the stage that gathers them (a
 * generate stage with `ask:`), else those carried in that still apply,
 * or NULL. */
const sb_json *rt_run_slots(const rt_run *run);
/* A conversation's next call (router/run/topic.c): slots (JSON object
 * text) the session gathered so far - the run keeps those that the stages
 * of its intent gather, and a stage that gathers slots starts from them -
 * and history, the turns before this one as {{history}} shows them. Set
 * right after the run starts or resumes, before the loop runs. 0 or
 * SB_ENOMEM. */
int rt_run_carry_slots(rt_run *run, const char *slots);
int rt_run_set_history(rt_run *run, const char *text);
/* The intent's confidence (0 without an intent). */
double rt_run_confidence(const rt_run *run);
/* Why the call goes to a person after this run: a stage's hand-off
 * ("refused", "retries_exhausted"), else
 * "asked" / "rejected" when the intent is one of the conversation's
 * handoff_intents (rejected: the intent stage fell back to it), else NULL. */
const char *rt_run_handoff_reason(const rt_run *run);
const sb_pipeline *rt_run_pipe(const rt_run *run);
/* Where a conversation stands after a turn, as the answer shows it: the
 * front door's sessions know it, a run does not. */
typedef struct {
    const char *session;            /* its id, or NULL: a call without one */
    const char *reply;              /* what is said (output and reply); NULL: the run's output */
    const char *slots;              /* JSON object text; NULL: {} */
    int turn;                       /* this turn's number, from 1 */
    const char *awaiting;           /* JSON text; NULL: null */
    const char *handoff;            /* JSON text; NULL: null */
    bool done;                      /* the call ends with this answer */
} rt_turn_view;
/* While the sink's finish or error runs: the result as the pipeline API
 * answers it (turn: NULL for a call without a session: turn 1 of none),
 * and the seconds its models computed. */
void rt_run_result_json(const rt_run *run, sb_jw *w);
void rt_run_result_turn_json(const rt_run *run, const rt_turn_view *turn, sb_jw *w);
/* Whether the intent stage fell back (min_confidence, or its label). */
bool rt_run_fell_back(const rt_run *run);
const char *rt_run_intent(const rt_run *run);
double rt_run_model_seconds(const rt_run *run);
/* For the call's trace: the result plus each stage's input and model, the
 * fallback flag and the time to the first streamed token. */
void rt_run_trace_json(const rt_run *run, sb_jw *w);
const char *rt_run_pipeline(const rt_run *run);
const char *rt_run_input(const rt_run *run);
/* The call's placeholders (a pipeline with `privacy: {mode: pseudonymize}`):
 * a tool stage with `privacy: reveal` is given the real values, and every
 * tool's answer is pseudonymized into t before any later stage sees it.
 * Set right after rt_run_start_ref, before the loop runs; t outlives the run. */
void rt_run_set_privacy(rt_run *run, sb_pii_table *t);
/* Whether the run's result depends on more than the placeholders of its
 * input - a tool was given real values, or answered with personal data of
 * its own - so that it must not be cached. */
bool rt_run_uncacheable(const rt_run *run);
double rt_run_t0(const rt_run *run);            /* sb_now_s() when the run started */
/* The cache identity of a resolved pipeline: fingerprint over its
 * definition and the files of every model it uses (out: 65 bytes). */
void rt_pipeline_fingerprint(rt_exec *ex, const rt_pipeline_ref *ref, char *out, bool *cacheable);

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
int  rt_tool_start(rt_exec *ex, const rt_tool_spec *spec, const char *input, size_t input_len, rt_tool_done_fn done,
                   void *arg, rt_tool **out, char *err);
/* Stop a call (client gone, run timed out): SIGKILLs the tool's process
 * group and reaps it, or takes it out of the queue; no callback. NULL ok. */
void rt_tool_cancel(rt_tool *t);

/* ------------------------------------------------- embedding intents */

/* intent_embed.c: intent stages that classify by sentence embeddings. A
 * model came up or changed kind: build the example indexes that wait for
 * it (asynchronously; runs that need one wait for it). */
void rt_intent_models_changed(rt_exec *ex);
/* Stage s classifies by embeddings now: method embed or hybrid, or auto
 * with an encoder model (as its worker's health says). */
bool rt_intent_embeds(rt_exec *ex, const sb_stage *s);
/* The trained classifier of stage s in generation c: 0 with *out; 1 while
 * its index is being built (a build is started if none runs: ask again
 * shortly); < 0 when the build failed (SB_EIO/SB_EBUSY: the model is down
 * or full; others: the encoder or the examples are wrong), with err. */
int  rt_intent_classifier(rt_exec *ex, rt_conf *c, const sb_stage *s, const sb_classifier **out, char *err);
void rt_intent_cancel_builds(rt_conf *c);   /* before the models are freed */
void rt_intent_free_all(rt_conf *c);        /* rt_conf_release */

/* ------------------------------------------------ its config section */

/* The configuration's `pipelines` section (pipeline_config.c; sb_config.h,
 * "sections"): only its shape when the config loads - names and mappings -
 * into cfg->pipelines; the stages are loaded against the router's engine
 * (pipeline.c). Loaded last: pipelines name the models and bases. */
extern const sb_cfg_section sb_pipelines_section;

#endif
