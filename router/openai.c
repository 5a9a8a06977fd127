/* openai.c - POST /v1/chat/completions, POST /v1/completions, GET /v1/models.
 *
 * A request names a model from the config (served by its worker's
 * `generate`) or `pipeline:NAME`. Parameters are checked strictly by type;
 * unknown ones are ignored the way OpenAI-compatible servers usually do, so
 * clients that send extra fields (user, logit_bias...) keep working.
 * stream=true answers as Server-Sent Events in OpenAI's chunk format,
 * ending with `data: [DONE]`.
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

static void reply_json(rt_req *q, const char *text, size_t len, const char *finish, int pt, int ct, const char *x_cache) {
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
        sb_jw_key(w, "content"); sb_jw_strn(w, text, len);
        sb_jw_obj_end(w);
    } else {
        sb_jw_key(w, "text"); sb_jw_strn(w, text, len);
    }
    sb_jw_key(w, "logprobs"); sb_jw_null(w);
    sb_jw_key(w, "finish_reason"); sb_jw_str(w, finish);
    sb_jw_obj_end(w);
    sb_jw_arr_end(w);
    usage(w, pt, ct);
    sb_jw_obj_end(w);
    if (w->oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, w->p, w->len, x_cache);
}

/* One chunk; text NULL = the role-only opening chunk (chat) or the final
 * one carrying finish_reason. */
static void chunk(rt_req *q, const char *text, size_t len, const char *finish) {
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
        if (!text && !finish) {
            sb_jw_key(w, "role"); sb_jw_str(w, "assistant");
            sb_jw_key(w, "content"); sb_jw_str(w, "");
        } else if (text) {
            sb_jw_key(w, "content"); sb_jw_strn(w, text, len);
        }
        sb_jw_obj_end(w);
    } else {
        sb_jw_key(w, "text"); sb_jw_strn(w, text ? text : "", text ? len : 0);
    }
    sb_jw_key(w, "logprobs"); sb_jw_null(w);
    sb_jw_key(w, "finish_reason");
    if (finish) sb_jw_str(w, finish); else sb_jw_null(w);
    sb_jw_obj_end(w);
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    if (!w->oom) rt_req_sse_send(q, w->p, w->len);
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
static void openai_finish(void *arg, const rt_answer *a) {
    rt_req *q = arg;
    if (!q->want_stream) {
        reply_json(q, a->text, a->len, a->finish_reason, a->prompt_tokens, a->completion_tokens,
                   a->cached ? "hit" : q->cache_key ? "miss" : NULL);
        return;
    }
    bool streamed = q->streaming;
    sse_open(q, a->cached ? "hit" : "miss");
    if (!streamed && a->len) chunk(q, a->text, a->len, NULL);
    sse_finish(q, a->finish_reason, a->prompt_tokens, a->completion_tokens);
}

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

static void on_token(void *arg, const char *text, size_t len) { openai_delta(arg, text, len); }

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
    openai_finish(q, &a);
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
    if (n && sb_json_type_of(n) != SB_JSON_NULL && !sb_json_is_int(n, 1, 1)) BAD("'n': only 1 is supported");
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
    if (parse_reply_options(q, body, kind, &model, &g.stream)) goto out;
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

void rt_handle_models(rt_req *q) {
    rt *r = q->r;
    sb_jw *w = &q->out;
    bool pipes_only = !strcmp(q->path, "/v1/pipelines");
    rt_conf *c = rt_conf_acquire(&r->ex);
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
