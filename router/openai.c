/* openai.c - POST /v1/chat/completions, POST /v1/completions, GET /v1/models
 * (and /v1/pipelines), GET /v1/tools.
 *
 * A request names a model from the config (served by its worker's
 * `generate`) or `pipeline:NAME`. Parameters are checked strictly by type.
 * Every OpenAI parameter is in the table below (docs/router.md has it as
 * prose): honoured, accepted only at its no-op value, or accepted and
 * ignored because it changes nothing in the answer (user, metadata...);
 * any other is a 400 unsupported_parameter naming it, so a client never
 * mistakes an ignored tools or logit_bias for an honoured one.
 * stream=true answers as Server-Sent Events in OpenAI's chunk format,
 * ending with `data: [DONE]`. Tool calls come as message.tool_calls with
 * finish_reason "tool_calls" (streamed: one delta per call, whole), and
 * logprobs in OpenAI's shape, chat's or the legacy completions' one.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "router/router_internal.h"

static void openai_id(rt *r, char *out, size_t n, const char *prefix) {
    snprintf(out, n, "%s-%llx%06llx", prefix, (unsigned long long)time(NULL), (unsigned long long)++r->next_id);
}

static void openai_begin(rt_req *q, int kind, const char *model) {
    q->kind = kind;
    snprintf(q->model, sizeof q->model, "%s", model);
    openai_id(q->r, q->id, sizeof q->id, kind == RT_KIND_CHAT ? "chatcmpl" : "cmpl");
}

static void head(rt_req *q, sb_jw *w, bool chunk) {
    sb_jw_obj(w);
    sb_jw_key(w, "id"); sb_jw_str(w, q->id);
    sb_jw_key(w, "object");
    sb_jw_str(w, q->kind == RT_KIND_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    sb_jw_key(w, "created"); sb_jw_int(w, (int64_t)time(NULL));
    sb_jw_key(w, "model"); sb_jw_str(w, q->model);
    sb_jw_key(w, "system_fingerprint"); sb_jw_str(w, "switchboard");
}

static void usage(sb_jw *w, int pt, int ct) {
    sb_jw_key(w, "usage");
    sb_jw_obj(w);
    sb_jw_key(w, "prompt_tokens"); sb_jw_int(w, pt);
    sb_jw_key(w, "completion_tokens"); sb_jw_int(w, ct);
    sb_jw_key(w, "total_tokens"); sb_jw_int(w, pt + ct);
    sb_jw_obj_end(w);
}

/* What a worker's result adds to an answer: its tool calls and logprobs as
 * the OpenAI JSON values (NULL / empty when none). */
typedef struct {
    sb_jw calls;                    /* message.tool_calls: [...] */
    sb_jw logprobs;                 /* choice.logprobs: {...} */
} extras;

/* A JSON value written whole elsewhere, as the value of the key just
 * written (sb_jw_raw stands outside the member logic, so the next key would
 * otherwise miss its comma). */
static void raw_value(sb_jw *w, const sb_jw *v) {
    sb_jw_raw(w, v->p, v->len);
    w->after_key = 0;
}

static void reply_json(rt_req *q, const char *text, size_t len, const char *finish, int pt, int ct, const char *x_cache,
                       const extras *x) {
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    head(q, w, false);
    sb_jw_key(w, "choices");
    sb_jw_arr(w);
    sb_jw_obj(w);
    sb_jw_key(w, "index"); sb_jw_int(w, 0);
    if (q->kind == RT_KIND_CHAT) {
        sb_jw_key(w, "message");
        sb_jw_obj(w);
        sb_jw_key(w, "role"); sb_jw_str(w, "assistant");
        sb_jw_key(w, "content");
        if (x && x->calls.len) {
            sb_jw_null(w);
            sb_jw_key(w, "tool_calls"); raw_value(w, &x->calls);
        } else {
            sb_jw_strn(w, text, len);
        }
        sb_jw_obj_end(w);
    } else {
        sb_jw_key(w, "text"); sb_jw_strn(w, text, len);
    }
    sb_jw_key(w, "logprobs");
    if (x && x->logprobs.len) raw_value(w, &x->logprobs);
    else sb_jw_null(w);
    sb_jw_key(w, "finish_reason"); sb_jw_str(w, finish);
    sb_jw_obj_end(w);
    sb_jw_arr_end(w);
    usage(w, pt, ct);
    sb_jw_obj_end(w);
    if (w->oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, w->p, w->len, x_cache);
}

/* One chunk; text NULL = the role-only opening chunk (chat) or the final
 * one carrying finish_reason; lps: its tokens' logprobs (or NULL), calls:
 * a delta of tool calls instead of text. */
static void chunk_x(rt_req *q, const char *text, size_t len, const char *finish, const sb_jw *lps, const sb_jw *calls) {
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    head(q, w, true);
    sb_jw_key(w, "choices");
    sb_jw_arr(w);
    sb_jw_obj(w);
    sb_jw_key(w, "index"); sb_jw_int(w, 0);
    if (q->kind == RT_KIND_CHAT) {
        sb_jw_key(w, "delta");
        sb_jw_obj(w);
        if (calls) {
            sb_jw_key(w, "tool_calls"); raw_value(w, calls);
        } else if (!text && !finish) {
            sb_jw_key(w, "role"); sb_jw_str(w, "assistant");
            sb_jw_key(w, "content"); sb_jw_str(w, "");
        } else if (text) {
            sb_jw_key(w, "content"); sb_jw_strn(w, text, len);
        }
        sb_jw_obj_end(w);
    } else {
        sb_jw_key(w, "text"); sb_jw_strn(w, text ? text : "", text ? len : 0);
    }
    sb_jw_key(w, "logprobs");
    if (lps && lps->len) raw_value(w, lps);
    else sb_jw_null(w);
    sb_jw_key(w, "finish_reason");
    if (finish) sb_jw_str(w, finish); else sb_jw_null(w);
    sb_jw_obj_end(w);
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    if (!w->oom) rt_req_sse_send(q, w->p, w->len);
}

static void chunk(rt_req *q, const char *text, size_t len, const char *finish) {
    chunk_x(q, text, len, finish, NULL, NULL);
}

static void sse_open(rt_req *q, const char *x_cache) {
    if (q->streaming) return;
    rt_req_sse_start(q, x_cache);
    if (q->kind == RT_KIND_CHAT) chunk(q, NULL, 0, NULL);
}

static void sse_finish(rt_req *q, const char *finish, int pt, int ct) {
    chunk(q, NULL, 0, finish);
    if (q->include_usage) {
        sb_jw *w = &q->out;
        sb_jw_reset(w);
        head(q, w, true);
        sb_jw_key(w, "choices"); sb_jw_arr(w); sb_jw_arr_end(w);
        usage(w, pt, ct);
        sb_jw_obj_end(w);
        if (!w->oom) rt_req_sse_send(q, w->p, w->len);
    }
    rt_req_sse_end(q);
}

/* --------------------------------------------------- the OpenAI sink */

/* The door's reply, for a model's generation and a pipeline:NAME run
 * alike, fresh or stored (sb_run.h, rt_sink). */
static void openai_delta(void *arg, const char *text, size_t len) {
    rt_req *q = arg;
    sse_open(q, "miss");
    if (len) chunk(q, text, len, NULL);
}

/* stream=true always ends in the SSE form, even with no token at all; an
 * answer none of which was streamed (a stored one, a tool stage's output)
 * comes as one delta. */
static void finish_x(rt_req *q, const rt_answer *a, const extras *x) {
    if (!q->want_stream) {
        reply_json(q, a->text, a->len, a->finish_reason, a->prompt_tokens, a->completion_tokens,
                   a->cached ? "hit" : q->cache_key ? "miss" : NULL, x);
        return;
    }
    bool streamed = q->streaming;
    sse_open(q, a->cached ? "hit" : "miss");
    if (x && x->calls.len) chunk_x(q, NULL, 0, NULL, &x->logprobs, &x->calls);   /* each call whole, with its index */
    else if (!streamed && a->len) chunk_x(q, a->text, a->len, NULL, x ? &x->logprobs : NULL, NULL);
    sse_finish(q, a->finish_reason, a->prompt_tokens, a->completion_tokens);
}

static void openai_finish(void *arg, const rt_answer *a) { finish_x(arg, a, NULL); }

/* Replay a stored answer (cache hit), streamed or whole. */
static void reply_stored(rt_req *q, const char *stored, size_t len) {
    sb_json_doc *d;
    if (sb_json_parse(stored, len, &d, NULL)) {
        rt_req_error(q, 500, "server_error", "cache_corrupt", "a cached answer could not be read");
        return;
    }
    const sb_json *o = sb_json_root(d);
    const sb_json *text = sb_json_get(o, "text");
    rt_answer a = { .text = sb_json_str(text) ? sb_json_str(text) : "", .len = sb_json_len(text),
                    .finish_reason = sb_json_str(sb_json_get(o, "finish_reason")),
                    .prompt_tokens = (int)sb_json_num(sb_json_get(o, "prompt_tokens")),
                    .completion_tokens = (int)sb_json_num(sb_json_get(o, "completion_tokens")), .cached = true };
    if (!a.finish_reason) a.finish_reason = "stop";
    openai_finish(q, &a);
    sb_json_doc_free(d);
}

/* ------------------------------------------------------ worker callbacks */

typedef struct {
    rt_req *q;
    bool stream;
    double t_submit;
} call_ctx;

static void call_gone(rt_req *q) {
    rt_job_cancel(q->job);
    q->job = NULL;
}

/* One token of logprobs as OpenAI writes it: token (its bytes as text, an
 * incomplete character replaced), logprob, bytes. */
static void lp_token(sb_jw *w, const rt_token_prob *t) {
    sb_jw_key(w, "token"); sb_jw_strn(w, t->bytes, t->len);
    sb_jw_key(w, "logprob"); sb_jw_num(w, t->logprob);
    sb_jw_key(w, "bytes");
    sb_jw_arr(w);
    for (size_t i = 0; i < t->len; i++) sb_jw_int(w, ((const unsigned char *)t->bytes)[i]);
    sb_jw_arr_end(w);
}

/* The legacy completions' top_logprobs entry: {token text: logprob}. */
static void lp_top_map(sb_jw *w, const rt_logprob *e) {
    sb_jw_obj(w);
    for (size_t k = 0; k < e->n_top; k++) {
        const rt_token_prob *t = &e->top[k];
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)SB_MIN(t->len, sizeof key - 1), t->bytes);
        sb_jw_key(w, key); sb_jw_num(w, t->logprob);
    }
    sb_jw_obj_end(w);
}

/* choice.logprobs from n entries: chat's {"content": [...], "refusal":
 * null}, or the legacy completions' {"tokens", "token_logprobs",
 * "top_logprobs", "text_offset"} (offsets from *offset, which advances). */
static void logprobs_json(const rt_req *q, const rt_logprob *lps, size_t n, sb_jw *w, size_t *offset) {
    sb_jw_obj(w);
    if (q->kind == RT_KIND_CHAT) {
        sb_jw_key(w, "content");
        sb_jw_arr(w);
        for (size_t i = 0; i < n; i++) {
            sb_jw_obj(w);
            lp_token(w, &lps[i].tok);
            sb_jw_key(w, "top_logprobs");
            sb_jw_arr(w);
            for (size_t k = 0; k < lps[i].n_top; k++) {
                sb_jw_obj(w);
                lp_token(w, &lps[i].top[k]);
                sb_jw_obj_end(w);
            }
            sb_jw_arr_end(w);
            sb_jw_obj_end(w);
        }
        sb_jw_arr_end(w);
        sb_jw_key(w, "refusal"); sb_jw_null(w);
        sb_jw_obj_end(w);
        return;
    }
    static const char *const keys[] = { "tokens", "token_logprobs", "top_logprobs", "text_offset" };
    for (int f = 0; f < 4; f++) {
        sb_jw_key(w, keys[f]);
        sb_jw_arr(w);
        for (size_t i = 0; i < n; i++) {
            const rt_token_prob *t = &lps[i].tok;
            if (f == 0) sb_jw_strn(w, t->bytes, t->len);
            else if (f == 1) sb_jw_num(w, t->logprob);
            else if (f == 2) lp_top_map(w, &lps[i]);
            else { sb_jw_int(w, (int64_t)*offset); *offset += t->len; }
        }
        sb_jw_arr_end(w);
    }
    sb_jw_obj_end(w);
}

/* A streamed token: its text, with its tokens' logprobs when asked for. */
static void on_token(void *arg, const rt_token *t) {
    rt_req *q = arg;
    if (!t->has_logprobs) { openai_delta(q, t->text, t->len); return; }
    sb_jw w;
    sb_jw_init(&w);
    logprobs_json(q, t->logprobs, t->n_logprobs, &w, &q->lp_offset);
    sse_open(q, "miss");
    /* Entries of a character not yet complete go out with empty text, as
     * OpenAI sends them, rather than being lost. */
    if (t->len || t->n_logprobs) chunk_x(q, t->text, t->len, NULL, &w, NULL);
    sb_jw_free(&w);
}

/* The model's tool calls as OpenAI's: ids made from the completion's (an upstream's own
 * when it gave them), each
 * {"id", "type": "function", "function": {"name", "arguments"}}, with
 * "index" in a stream's delta. */
static void calls_json(const rt_req *q, const rt_tool_call *calls, size_t n, bool index, sb_jw *w) {
    sb_jw_arr(w);
    for (size_t i = 0; i < n; i++) {
        char id[96];
        snprintf(id, sizeof id, "call_%s_%zu", strchr(q->id, '-') ? strchr(q->id, '-') + 1 : q->id, i);
        sb_jw_obj(w);
        if (index) { sb_jw_key(w, "index"); sb_jw_int(w, (int64_t)i); }
        sb_jw_key(w, "id");
        if (calls[i].id) sb_jw_strn(w, calls[i].id, calls[i].id_len);     /* an upstream's own */
        else sb_jw_str(w, id);
        sb_jw_key(w, "type"); sb_jw_str(w, "function");
        sb_jw_key(w, "function");
        sb_jw_obj(w);
        sb_jw_key(w, "name"); sb_jw_strn(w, calls[i].name, calls[i].name_len);
        sb_jw_key(w, "arguments"); sb_jw_strn(w, calls[i].arguments, calls[i].arguments_len);
        sb_jw_obj_end(w);
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
}

static void on_done(void *arg, const rt_reply *res) {
    rt_req *q = arg;
    if (rt_req_model_failed(q, res)) return;
    const rt_gen_result *g = &res->gen;
    const char *text = g->text, *finish = g->finish_reason ? g->finish_reason : "stop";
    size_t len = g->len;
    int64_t pt = g->prompt_tokens <= INT32_MAX ? g->prompt_tokens : 0;
    int64_t ct = g->completion_tokens <= INT32_MAX ? g->completion_tokens : 0;
    /* Worker compute time; queueing behind other requests is the model's
     * time too, but the gateway overhead we report excludes only compute. */
    q->t_model = (g->prompt_ms + g->gen_ms) / 1e3;
    if (!strcmp(finish, "timeout")) finish = "length";
    if (q->cache_key) {
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_obj(&w);
        sb_jw_key(&w, "text"); sb_jw_strn(&w, text, len);
        sb_jw_key(&w, "finish_reason"); sb_jw_str(&w, finish);
        sb_jw_key(&w, "prompt_tokens"); sb_jw_int(&w, pt);
        sb_jw_key(&w, "completion_tokens"); sb_jw_int(&w, ct);
        sb_jw_obj_end(&w);
        if (!w.oom) rt_cache_store(q, w.p, w.len);
        sb_jw_free(&w);
    }
    rt_answer a = { .text = text, .len = len, .finish_reason = finish, .prompt_tokens = (int)pt,
                    .completion_tokens = (int)ct, .model_s = q->t_model };
    extras x;
    sb_jw_init(&x.calls);
    sb_jw_init(&x.logprobs);
    if (g->n_calls) calls_json(q, g->calls, g->n_calls, q->want_stream, &x.calls);
    /* streamed: each token event carried its own */
    if (g->has_logprobs && !(q->want_stream && q->streaming))
        logprobs_json(q, g->logprobs, g->n_logprobs, &x.logprobs, &q->lp_offset);
    if (x.calls.oom || x.logprobs.oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else finish_x(q, &a, &x);
    sb_jw_free(&x.calls);
    sb_jw_free(&x.logprobs);
}

/* ------------------------------------------------------------ a request */

#define BAD(...) do { rt_req_error(q, 400, "invalid_request_error", "invalid_value", __VA_ARGS__); return -1; } while (0)

/* What shapes the reply rather than the generation: model, stream,
 * stream_options, n. 0, or -1 with the 400 sent. */
static int parse_reply_options(rt_req *q, const sb_json *body, int kind, const char **model, bool *stream) {
    const sb_json *jm = sb_json_get(body, "model");
    const sb_json *stream_v = sb_json_get(body, "stream");
    if (sb_json_type_of(jm) != SB_JSON_STRING) BAD("'model': expected a string naming a model or pipeline:NAME");
    if (stream_v && sb_json_type_of(stream_v) != SB_JSON_BOOL) BAD("'stream': expected a boolean");
    *stream = q->want_stream = sb_json_bool(stream_v);
    *model = sb_json_str(jm);
    openai_begin(q, kind, *model);
    const sb_json *so = sb_json_get(body, "stream_options");
    if (so && sb_json_type_of(so) != SB_JSON_NULL) {
        const sb_json *iu = sb_json_get(so, "include_usage");
        if (sb_json_type_of(so) != SB_JSON_OBJECT || (iu && sb_json_type_of(iu) != SB_JSON_BOOL))
            BAD("'stream_options': expected {\"include_usage\": boolean}");
        q->include_usage = sb_json_bool(iu);
    }
    const sb_json *n = sb_json_get(body, "n");
    if (n && sb_json_type_of(n) != SB_JSON_NULL && !sb_json_is_int(n, 1, 1)) {
        rt_req_error(q, 400, "invalid_request_error", "unsupported_parameter", "'n': only 1 is supported");
        return -1;
    }
    return 0;
}

/* How the door takes each body key. */
enum { P_CHAT = 1, P_TEXT = 2, P_BOTH = 3, P_IGNORED = 4, P_NOOP = 8 };
static const struct { const char *name; int how; } PARAMS[] = {
    { "model", P_BOTH }, { "messages", P_CHAT }, { "prompt", P_TEXT }, { "max_tokens", P_BOTH },
    { "max_completion_tokens", P_BOTH }, { "temperature", P_BOTH }, { "top_p", P_BOTH }, { "top_k", P_BOTH },
    { "min_p", P_BOTH }, { "repeat_penalty", P_BOTH }, { "seed", P_BOTH }, { "stop", P_BOTH },
    { "stream", P_BOTH }, { "stream_options", P_BOTH }, { "n", P_BOTH }, { "response_format", P_CHAT },
    { "tools", P_CHAT }, { "tool_choice", P_CHAT }, { "parallel_tool_calls", P_CHAT }, { "logprobs", P_BOTH },
    { "top_logprobs", P_CHAT },
    /* no-op values only: 0, or false, or 1 (best_of) */
    { "presence_penalty", P_BOTH | P_NOOP }, { "frequency_penalty", P_BOTH | P_NOOP }, { "echo", P_TEXT | P_NOOP },
    { "best_of", P_TEXT | P_NOOP },
    /* what clients send by habit, changing nothing in the answer */
    { "user", P_BOTH | P_IGNORED }, { "metadata", P_BOTH | P_IGNORED }, { "store", P_BOTH | P_IGNORED },
    { "service_tier", P_BOTH | P_IGNORED },
};

/* The first body key this door does not take: a 400 unsupported_parameter
 * naming it. 0, or -1 with the 400 sent. */
static int check_params(rt_req *q, const sb_json *body, int kind) {
    const int door = kind == RT_KIND_CHAT ? P_CHAT : P_TEXT;
    for (size_t i = 0; i < sb_json_len(body); i++) {
        const char *key = sb_json_key_at(body, i);
        const sb_json *v = sb_json_val_at(body, i);
        size_t k = 0;
        while (k < SB_ARRAY_LEN(PARAMS) && strcmp(PARAMS[k].name, key)) k++;
        if (k == SB_ARRAY_LEN(PARAMS) || !(PARAMS[k].how & door)) {
            rt_req_error(q, 400, "invalid_request_error", "unsupported_parameter",
                         "'%.64s': not supported by %s (docs/router.md lists what is)", key,
                         kind == RT_KIND_CHAT ? "/v1/chat/completions" : "/v1/completions");
            return -1;
        }
        bool noop = sb_json_type_of(v) == SB_JSON_NULL || (sb_json_type_of(v) == SB_JSON_NUMBER &&
                    sb_json_num(v) == (strcmp(key, "best_of") ? 0 : 1)) ||
                    (sb_json_type_of(v) == SB_JSON_BOOL && !sb_json_bool(v));
        if ((PARAMS[k].how & P_NOOP) && !noop) {
            rt_req_error(q, 400, "invalid_request_error", "unsupported_parameter",
                         "'%.64s': only %s (its no-op value) is supported", key,
                         !strcmp(key, "best_of") ? "1" : !strcmp(key, "echo") ? "false" : "0");
            return -1;
        }
    }
    return 0;
}

/* model = "pipeline:NAME": the last user message (or the prompt) is the
 * pipeline's input. */
static void chat_pipeline(rt_req *q, const rt_gen_req *g, const char *name) {
    const char *in = g->kind == RT_KIND_CHAT ? g->last_user : g->prompt.text.p ? g->prompt.text.p : "";
    if (g->kind == RT_KIND_CHAT && !in) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                     "'messages': a pipeline needs a user message with string content");
        return;
    }
    if (g->json_schema) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                     "'response_format': a pipeline's stages carry their own json_schema (docs/router.md)");
        return;
    }
    if (g->tools_len || g->logprobs) {
        rt_req_error(q, 400, "invalid_request_error", "unsupported_parameter", "'%s': not for a pipeline (a model's only)",
                     g->tools_len ? "tools" : "logprobs");
        return;
    }
    if (!*in) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "the pipeline needs a non-empty input");
        return;
    }
    /* This door has no body key for it: the session rides in a header,
     * and a new session's id comes back in the same one. */
    rt_pipeline_call(q, name, in, NULL, rt_req_header(q, "X-Session-Id"));
}

/* What the model itself allows. 0, or -1 with the 400 sent. */
static int check_model_limits(rt_req *q, const rt_model *m, const rt_gen_req *g) {
    if (g->sampling.max_tokens > m->max_tokens)
        BAD("'max_tokens': %d exceeds this model's limit of %d", g->sampling.max_tokens, m->max_tokens);
    if (g->json_schema && m->remote)
        BAD("'response_format': schema-constrained output needs a local model; '%.80s' is an upstream", m->name);
    return 0;
}

/* The cache: deterministic requests only (temperature 0). 1: answered from
 * it; 0: go on (q keeps the key when it is a miss). */
static int chat_from_cache(rt_req *q, const rt_model *m, const rt_gen_req *g) {
    if (g->sampling.temperature != 0 || !m->fingerprint[0]) return 0;
    char params[512], ns[128];
    unsigned norm;
    sb_jw input;
    sb_jw_init(&input);
    int hit = 0;
    if (!rt_gen_cache_key(g, q->r->cache != NULL, &input, &norm, params, sizeof params)) {
        snprintf(ns, sizeof ns, "model:%s", m->name);
        sb_cache_entry e;
        hit = rt_cache_lookup(q, ns, m->fingerprint, input.p ? input.p : "", norm, params, &e) == 1;
        if (hit) {
            reply_stored(q, (const char *)e.response, e.response_len);
            sb_cache_entry_free(&e);
        }
    }
    sb_jw_free(&input);
    return hit;
}

/* The model call: its backend (worker or upstream) encodes g. */
static void chat_submit(rt_req *q, rt_model *m, const rt_gen_req *g) {
    char err[SB_ERR_LEN];
    int rc = rt_model_submit_gen(m, g, m->deadline_ms, g->stream ? on_token : NULL, on_done, q, &q->job, err);
    if (rc) {
        if (rc == SB_EBUSY || rc == SB_EIO) rt_req_retry_after(q, rc == SB_EBUSY ? rt_model_retry_after(m) : 5);
        rt_req_error(q, rc == SB_EUNSUP ? 501 : rc == SB_ENOMEM ? 500 : 503,
                     rc == SB_EBUSY ? "server_busy" : "model_unavailable",
                     rc == SB_EBUSY ? "queue_full" : "model_unavailable", "%s", err);
        return;
    }
    q->on_gone = call_gone;
    rt_req_set_deadline(q, m->deadline_ms + 5000);
}

void rt_handle_chat(rt_req *q, const sb_json *body, int kind) {
    const char *model;
    char why[SB_ERR_LEN + 64];
    rt_gen_req g;
    rt_gen_init(&g);
    if (parse_reply_options(q, body, kind, &model, &g.stream) || check_params(q, body, kind)) goto out;
    q->reply = (rt_sink){ g.stream ? openai_delta : NULL, openai_finish, rt_req_fail, q, NULL };
    int rc = rt_gen_parse_openai(&g, body, kind, why, sizeof why);
    if (rc == SB_EINVAL) { rt_req_error(q, 400, "invalid_request_error", "invalid_value", "%s", why); goto out; }
    if (rc) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); goto out; }
    if (!strncmp(model, "pipeline:", 9)) {
        chat_pipeline(q, &g, model + 9);
        goto out;
    }
    rt_model *m = rt_model_find(&q->r->ex.be, model);
    if (!m) {
        rt_req_error(q, 404, "invalid_request_error", "model_not_found",
                     "the model '%.80s' does not exist (GET /v1/models lists them)", model);
        goto out;
    }
    if (!check_model_limits(q, m, &g) && !chat_from_cache(q, m, &g)) chat_submit(q, m, &g);
out:
    rt_gen_free(&g);
}

/* GET /v1/tools: each pipeline as an OpenAI function definition an agent
 * framework can hand its model; the framework runs a call as POST
 * /v1/pipelines/NAME with the call's arguments as the body. */
static void tools_list(rt_req *q, const rt_conf *c) {
    sb_jw *w = &q->out;
    sb_jw_obj(w);
    sb_jw_key(w, "object"); sb_jw_str(w, "list");
    sb_jw_key(w, "data");
    sb_jw_arr(w);
    for (size_t i = 0; c && c->pipes && i < c->pipes->n; i++) {
        const char *name = c->pipes->items[i].name, *desc = c->pipes->items[i].description;
        char text[1024];
        snprintf(text, sizeof text, "%s%sRuns the pipeline '%s' on the input and returns its answer as text "
                 "(POST /v1/pipelines/%s with these arguments; the JSON reply's 'output').", desc ? desc : "",
                 desc ? ". " : "", name, name);
        sb_jw_obj(w);
        sb_jw_key(w, "type"); sb_jw_str(w, "function");
        sb_jw_key(w, "function");
        sb_jw_obj(w);
        sb_jw_key(w, "name"); sb_jw_str(w, name);
        sb_jw_key(w, "description"); sb_jw_str(w, text);
        sb_jw_key(w, "parameters");
        sb_jw_obj(w);
        sb_jw_key(w, "type"); sb_jw_str(w, "object");
        sb_jw_key(w, "properties");
        sb_jw_obj(w);
        sb_jw_key(w, "input");
        sb_jw_obj(w);
        sb_jw_key(w, "type"); sb_jw_str(w, "string");
        sb_jw_key(w, "description"); sb_jw_str(w, "the caller's words, as the pipeline takes them");
        sb_jw_obj_end(w);
        sb_jw_obj_end(w);
        sb_jw_key(w, "required"); sb_jw_arr(w); sb_jw_str(w, "input"); sb_jw_arr_end(w);
        sb_jw_key(w, "additionalProperties"); sb_jw_bool(w, false);
        sb_jw_obj_end(w);
        sb_jw_obj_end(w);
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
}

void rt_handle_models(rt_req *q) {
    rt *r = q->r;
    sb_jw *w = &q->out;
    bool pipes_only = !strcmp(q->path, "/v1/pipelines");
    rt_conf *c = rt_conf_acquire(&r->ex);
    if (!strcmp(q->path, "/v1/tools")) {
        tools_list(q, c);
        rt_conf_release(c);
        rt_req_json(q, 200, w->p, w->len, NULL);
        return;
    }
    sb_jw_obj(w);
    sb_jw_key(w, "object"); sb_jw_str(w, "list");
    sb_jw_key(w, "data");
    sb_jw_arr(w);
    for (size_t i = 0; !pipes_only && i < r->ex.be.n_models; i++) {
        if (r->ex.be.models[i]->removed) continue;
        sb_jw_obj(w);
        sb_jw_key(w, "id"); sb_jw_str(w, r->ex.be.models[i]->name);
        sb_jw_key(w, "object"); sb_jw_str(w, "model");
        sb_jw_key(w, "created"); sb_jw_int(w, (int64_t)r->started_wall);
        sb_jw_key(w, "owned_by"); sb_jw_str(w, "switchboard");
        sb_jw_obj_end(w);
    }
    for (size_t i = 0; c && c->pipes && i < c->pipes->n; i++) {
        char id[96];
        snprintf(id, sizeof id, "pipeline:%s", c->pipes->items[i].name);
        sb_jw_obj(w);
        sb_jw_key(w, "id"); sb_jw_str(w, id);
        sb_jw_key(w, "object"); sb_jw_str(w, "model");
        sb_jw_key(w, "created"); sb_jw_int(w, (int64_t)r->started_wall);
        sb_jw_key(w, "owned_by"); sb_jw_str(w, "switchboard");
        if (c->pipes->items[i].description) { sb_jw_key(w, "description"); sb_jw_str(w, c->pipes->items[i].description); }
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    rt_conf_release(c);
    rt_req_json(q, 200, w->p, w->len, NULL);
}
