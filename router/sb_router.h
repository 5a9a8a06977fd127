/* sb_router.h - the router: strict JSON, YAML pipelines, and the OpenAI-
 * compatible HTTP gateway in front of the workers (docs/router.md).
 *
 * Layers, bottom up (JSON, sb_json.h, is common's):
 *   sb_pipeline_*   pipelines from the config's `pipelines:` node tree,
 *                   validated with FILE:LINE:COL errors, and the template
 *                   language their prompts use
 *   sb_cmd_router   `switchboard router -c FILE` (common/sb_cmd.h): the
 *                   process that serves HTTP and DIR/router.sock
 *
 * libevent types never appear here.
 */
#ifndef SB_ROUTER_H
#define SB_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sb_common.h"
#include "common/sb_config.h"
#include "common/sb_json.h"

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

typedef struct {
    char *name;
    char *description;
    char **examples;
    size_t n_examples;
} sb_label;

typedef struct {
    double temperature, top_p, min_p, repeat_penalty;
    int    top_k, max_tokens;       /* < 0: the worker's default */
    int64_t seed;                   /* < 0: the worker's default */
} sb_sampling;

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
    int classifier;                 /* sb_cls_method (sb_classify.h); -1: its default */
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
    /* retrieve (router/run/retrieve.c): model is the base's embed_model */
    char *kb;                       /* a knowledge: entry */
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
    uint8_t digest[32];             /* SHA-256 of the pipeline's source text: part of cache keys */
} sb_pipeline;

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

/* What a template can see while a pipeline runs. */
typedef struct {
    const char *input;
    const char *config_dir;         /* {{config_dir}}: where the config file is */
    const char *intent;             /* NULL before an intent stage ran */
    double confidence;
    const sb_pipeline *pipe;
    const char *const *outputs;     /* per stage; NULL = not run */
    const sb_json *const *json;     /* per stage; NULL = none */
} sb_tmpl_env;

/* Render into w (raw text, no JSON escaping): tool arguments, stdin, bodies. */
void sb_tmpl_render(const sb_tmpl *t, const sb_tmpl_env *env, sb_jw *w);
const char *sb_tmpl_source(const sb_tmpl *t);

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
 * (issue 15). An `utterance:` template's own line breaks are kept. */
void sb_intent_caller(const sb_stage *s, const sb_tmpl_env *env, bool content_free, sb_segs *out);

/* The first balanced {...} in text that parses as a JSON object, or NULL
 * (*doc then NULL too). Models like to wrap JSON in prose or ``` fences. */
const sb_json *sb_json_extract_object(const char *text, size_t len, sb_json_doc **doc);

#endif
