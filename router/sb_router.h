/* sb_router.h - the router: strict JSON, YAML pipelines, and the OpenAI-
 * compatible HTTP gateway in front of the workers (docs/router.md).
 *
 * Layers, bottom up:
 *   sb_json_*       a strict RFC 8259 parser and a streaming emitter (we add
 *                   no JSON library; every HTTP body goes through this)
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

#include "sb_common.h"
#include "sb_config.h"

/* ================================================================ JSON == */

/* Nesting of arrays/objects, for the parser and the emitter alike: a value
 * the parser accepts can be written back, and the emitter never writes
 * what the parser would refuse. An OpenAI request is 4-5 levels deep; 64
 * keeps the recursive parser's stack use trivial whatever the input. */
#define SB_JSON_MAX_DEPTH 64

typedef enum {
    SB_JSON_NULL, SB_JSON_BOOL, SB_JSON_NUMBER, SB_JSON_STRING, SB_JSON_ARRAY, SB_JSON_OBJECT,
} sb_json_type;

typedef struct sb_json sb_json;         /* one value inside a document */
typedef struct sb_json_doc sb_json_doc; /* owns every value and string */

/* Parse exactly one JSON value from text[0..len) (RFC 8259, strictly): no
 * comments, trailing commas, single quotes, leading zeros, NaN/Infinity,
 * unescaped control characters, invalid UTF-8, lone surrogates, duplicate
 * object keys or trailing bytes other than whitespace. 0, or SB_EFORMAT with
 * "at line L column C (byte N): what" in err, or SB_ENOMEM. */
int  sb_json_parse(const char *text, size_t len, sb_json_doc **out, char *err);
void sb_json_doc_free(sb_json_doc *d);                  /* NULL ok */
const sb_json *sb_json_root(const sb_json_doc *d);

/* Accessors accept NULL and wrong types (they return NULL / 0 / false). */
sb_json_type   sb_json_type_of(const sb_json *v);       /* NULL -> SB_JSON_NULL */
const char    *sb_json_type_name(sb_json_type t);       /* "string", "object", ... */
size_t         sb_json_len(const sb_json *v);           /* array items / object pairs / string bytes */
const sb_json *sb_json_at(const sb_json *arr, size_t i);
const char    *sb_json_key_at(const sb_json *obj, size_t i);
const sb_json *sb_json_val_at(const sb_json *obj, size_t i);
const sb_json *sb_json_get(const sb_json *obj, const char *key);   /* NULL when absent */
/* NUL-terminated (an embedded \u0000 is kept; use sb_json_len for the size). */
const char    *sb_json_str(const sb_json *v);
/* Containers nested in v: 0 for a scalar, 1 for [] or {"a": 1}. */
int            sb_json_depth(const sb_json *v);
/* true when a string or key in v holds a NUL byte (\u0000); path[0..n)
 * then names the first one: "model", "messages[0].content", "" for v. */
bool           sb_json_find_nul(const sb_json *v, char *path, size_t n);
double         sb_json_num(const sb_json *v);
bool           sb_json_bool(const sb_json *v);
/* The number is an integer in [lo, hi] (1e3 counts; 1.5 does not). */
bool           sb_json_is_int(const sb_json *v, int64_t lo, int64_t hi);

/* A growable output buffer with a sticky failure: write everything, check
 * `oom` once. Commas between members are inserted automatically. `oom` is
 * set when memory runs out or when a container would be nested deeper than
 * SB_JSON_MAX_DEPTH (then `too_deep` too): the output is then unusable. */
typedef struct {
    char  *p;           /* NUL-terminated while !oom */
    size_t len, cap;
    int    oom;
    int    too_deep;
    uint64_t comma;     /* bit d-1: the container at depth d already has a member */
    int    depth;
    int    after_key;
} sb_jw;

void sb_jw_init(sb_jw *w);
void sb_jw_free(sb_jw *w);
void sb_jw_reset(sb_jw *w);                             /* empty, keeps capacity */
void sb_jw_obj(sb_jw *w);                               /* { */
void sb_jw_obj_end(sb_jw *w);                           /* } */
void sb_jw_arr(sb_jw *w);
void sb_jw_arr_end(sb_jw *w);
void sb_jw_key(sb_jw *w, const char *key);
/* Strings are escaped; invalid UTF-8 bytes become U+FFFD so the output is
 * always valid JSON whatever a model produced. */
void sb_jw_str(sb_jw *w, const char *s);                /* NULL -> null */
void sb_jw_strn(sb_jw *w, const char *s, size_t n);
void sb_jw_int(sb_jw *w, int64_t v);
void sb_jw_num(sb_jw *w, double v);                     /* NaN/Inf -> null */
void sb_jw_bool(sb_jw *w, bool v);
void sb_jw_null(sb_jw *w);
void sb_jw_value(sb_jw *w, const sb_json *v);           /* re-encode a parsed value */
/* Raw text appended as is, outside the comma logic (SSE framing). */
void sb_jw_raw(sb_jw *w, const char *s, size_t n);

/* =========================================================== pipelines == */

#define SB_PIPE_MAX_STAGES  32
#define SB_PIPE_MAX_LABELS  64
#define SB_PIPE_MAX_STOPS   8
#define SB_PIPE_MAX_ARGS    32
#define SB_PIPE_MAX_ENV     32
/* Tool stage defaults: 8 processes is more than a 2-8 core edge box runs
 * usefully at once, and 64 waiting calls drain in seconds at tool speeds. */
#define SB_TOOL_CONCURRENT  8
#define SB_TOOL_QUEUE       64

typedef enum { SB_STAGE_INTENT, SB_STAGE_GENERATE, SB_STAGE_TOOL } sb_stage_kind;
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
    /* intent + generate */
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
    char *classifier;               /* encoder models: centroid|1nn|knn|logreg (sb_classify.h); NULL = centroid */
    char **out_of_scope;            /* encoder models: examples of calls no label takes (a reject class) */
    size_t n_out_of_scope;
    /* generate */
    sb_tmpl *prompt;
    sb_sampling sampling;
    char *stops[SB_PIPE_MAX_STOPS];
    size_t n_stops;
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
