/* gen_req.h - one generation request, whichever door it came in by.
 *
 * An OpenAI chat or completion body (rt_gen_parse_openai) and a pipeline's
 * generate stage (rt_gen_from_stage) become the same typed struct, checked
 * once. What follows reads only the struct: the backends, which encode it
 * themselves (rt_gen_encode: the worker's `generate` params; upstream.c:
 * an OpenAI body), and the response cache's key (rt_gen_cache_key), so a
 * field added here is in the key or says there why it is not (a
 * static_assert in gen_req.c fails until it does). Private to router/.
 */
#ifndef SB_ROUTER_GEN_REQ_H
#define SB_ROUTER_GEN_REQ_H

#include "router/router_internal.h"

#define RT_GEN_MAX_MSGS  256        /* an OpenAI request's messages */
#define RT_GEN_MAX_STOPS 16         /* an OpenAI request's stop strings (a stage has SB_PIPE_MAX_STOPS) */

typedef struct {
    const char *role;               /* system, user, assistant, tool ("developer" arrives as system) */
    sb_segs content;                /* plain text, or a stage's template pieces (special) */
} rt_gen_msg;

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
};

void rt_gen_init(rt_gen_req *g);
void rt_gen_free(rt_gen_req *g);

/* The generation part of an OpenAI body for kind (RT_KIND_*): messages or
 * prompt, sampling, stop, response_format. 0; SB_EINVAL with the client's
 * 400 message in why; SB_ENOMEM. g may hold views into body: keep it. */
int rt_gen_parse_openai(rt_gen_req *g, const sb_json *body, int kind, char *why, size_t why_len);

/* Pipeline stage s with its rendered system text (may be empty) and
 * prompt, both taken over (the caller no longer frees them). */
int rt_gen_from_stage(rt_gen_req *g, const sb_stage *s, sb_segs *sys, sb_segs *prompt, bool stream);

/* A deep copy of src that owns all its text (src may hold views into a
 * request body or the config), for a call that waits in a model's queue.
 * last_user is not kept (it is read before the call). 0 or SB_ENOMEM (dst
 * is then freed). dst is initialised here. */
int rt_gen_copy(rt_gen_req *dst, const rt_gen_req *src);

/* A prompt as the worker's `segments`, and one chat message: a plain
 * string unless part of it is the operator's text (docs/ipc.md). */
void rt_gen_put_segs(sb_mp_writer *p, const sb_segs *s);
void rt_gen_put_message(sb_mp_writer *p, const char *role, const sb_segs *content);

/* The worker's `generate` params (docs/ipc.md) into p: only what was given,
 * so the worker's defaults apply to the rest; `priority` too unless 0 (a
 * worker that batches takes it, docs/router.md). p's status on failure. */
int rt_gen_encode(const rt_gen_req *g, int priority, sb_mp_writer *p);

/* What the response cache keys g on, besides the namespace and the model's
 * fingerprint: *input (the canonical messages, or the prompt as sent) with
 * the normalisation *norm still to apply to it, and params (every other
 * field that can change a deterministic answer). normalise: whether to
 * normalise the messages' text here (the cache is on). 0, or -1 when g
 * cannot be cached (params do not fit, out of memory). input is the
 * caller's, initialised. */
int rt_gen_cache_key(const rt_gen_req *g, bool normalise, sb_jw *input, unsigned *norm, char *params,
                     size_t params_len);

#endif
