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
#include "worker/engine/sb_grammar.h"

#define MAX_STOPS 16

void rt_openai_id(rt *r, char *out, size_t n, const char *prefix) {
    snprintf(out, n, "%s-%llx%06llx", prefix, (unsigned long long)time(NULL), (unsigned long long)++r->next_id);
}

void rt_openai_begin(rt_req *q, int kind, const char *model) {
    q->kind = kind;
    snprintf(q->model, sizeof q->model, "%s", model);
    rt_openai_id(q->r, q->id, sizeof q->id, kind == RT_KIND_CHAT ? "chatcmpl" : "cmpl");
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

void rt_openai_reply(rt_req *q, const char *text, size_t len, const char *finish, int pt, int ct, const char *x_cache) {
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

void rt_openai_sse_delta(rt_req *q, const char *text, size_t len) {
    sse_open(q, "miss");
    if (len) chunk(q, text, len, NULL);
}

void rt_openai_sse_finish(rt_req *q, const char *finish, int pt, int ct) {
    sse_open(q, "miss");
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

/* Replay a stored answer (cache hit), streamed or whole. */
static void reply_stored(rt_req *q, const char *stored, size_t len, bool stream) {
    sb_json_doc *d;
    if (sb_json_parse(stored, len, &d, NULL)) {
        rt_req_error(q, 500, "server_error", "cache_corrupt", "a cached answer could not be read");
        return;
    }
    const sb_json *o = sb_json_root(d);
    const sb_json *text = sb_json_get(o, "text");
    const char *finish = sb_json_str(sb_json_get(o, "finish_reason"));
    int pt = (int)sb_json_num(sb_json_get(o, "prompt_tokens")), ct = (int)sb_json_num(sb_json_get(o, "completion_tokens"));
    if (!finish) finish = "stop";
    if (stream) {
        sse_open(q, "hit");
        if (sb_json_len(text)) chunk(q, sb_json_str(text), sb_json_len(text), NULL);
        rt_openai_sse_finish(q, finish, pt, ct);
    } else {
        rt_openai_reply(q, sb_json_str(text) ? sb_json_str(text) : "", sb_json_len(text), finish, pt, ct, "hit");
    }
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

static void on_token(void *arg, const char *event, const sb_mp_obj *data) {
    rt_req *q = arg;
    const char *text;
    size_t len;
    if (strcmp(event, "token") || sb_mp_get_str(data, "text", SB_MP_REQUIRED, &text, &len, NULL)) return;
    rt_openai_sse_delta(q, text, len);
}

bool rt_req_model_failed(rt_req *q, const sb_ipc_result *res) {
    q->job = NULL;
    q->on_gone = NULL;
    if (res->ok) return false;
    const char *type;
    int status = rt_worker_error_status(res->code, &type);
    if (status == 503) rt_req_retry_after(q, 2);
    rt_req_error(q, status, type, res->code ? res->code : "error", "model '%s': %s", q->model,
                 res->message ? res->message : "failed");
    return true;
}

static void on_done(void *arg, const sb_ipc_result *res) {
    rt_req *q = arg;
    if (rt_req_model_failed(q, res)) return;
    const char *text = "", *finish = "stop";
    size_t len = 0;
    int64_t pt = 0, ct = 0;
    double pms = 0, gms = 0;
    sb_mp_get_str(res->result, "text", SB_MP_OPTIONAL, &text, &len, NULL);
    sb_mp_get_str(res->result, "finish_reason", SB_MP_OPTIONAL, &finish, NULL, NULL);
    sb_mp_get_int(res->result, "prompt_tokens", SB_MP_OPTIONAL, 0, INT32_MAX, &pt, NULL);
    sb_mp_get_int(res->result, "completion_tokens", SB_MP_OPTIONAL, 0, INT32_MAX, &ct, NULL);
    sb_mp_get_num(res->result, "prompt_ms", SB_MP_OPTIONAL, 0, 1e12, &pms, NULL);
    sb_mp_get_num(res->result, "gen_ms", SB_MP_OPTIONAL, 0, 1e12, &gms, NULL);
    /* Worker compute time; queueing behind other requests is the model's
     * time too, but the gateway overhead we report excludes only compute. */
    q->t_model = (pms + gms) / 1e3;
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
    /* stream=true always ends in the SSE form, even with no token at all. */
    if (q->want_stream) rt_openai_sse_finish(q, finish, (int)pt, (int)ct);
    else rt_openai_reply(q, text, len, finish, (int)pt, (int)ct, q->cache_key ? "miss" : NULL);
}

/* --------------------------------------------------------- validation */

#define BAD(...) do { rt_req_error(q, 400, "invalid_request_error", "invalid_value", __VA_ARGS__); goto out; } while (0)

/* The text of a message's content: a string, or an array of parts of which
 * the {type: text} ones count. */
static int content_text(const sb_json *c, sb_jw *w) {
    if (sb_json_type_of(c) == SB_JSON_STRING) { sb_jw_raw(w, sb_json_str(c), sb_json_len(c)); return 0; }
    if (sb_json_type_of(c) != SB_JSON_ARRAY) return -1;
    for (size_t i = 0; i < sb_json_len(c); i++) {
        const sb_json *p = sb_json_at(c, i);
        const char *t = sb_json_str(sb_json_get(p, "type"));
        const sb_json *tx = sb_json_get(p, "text");
        if (!t || strcmp(t, "text") || sb_json_type_of(tx) != SB_JSON_STRING) return -1;
        sb_jw_raw(w, sb_json_str(tx), sb_json_len(tx));
    }
    return 0;
}

/* A message's text in the cache's canonical input: normalised here, one
 * message at a time, because the JSON it goes into escapes line breaks and
 * the normaliser keeps a line's indentation (docs/cache.md). */
static void cache_text(sb_jw *w, const char *s, size_t n, bool normalise) {
    char *t = NULL;
    size_t tn = 0;
    if (normalise && !sb_cache_normalize(SB_NORM_DEFAULT, s ? s : "", n, &t, &tn)) sb_jw_strn(w, t, tn);
    else if (normalise) w->oom = true;
    else sb_jw_strn(w, s ? s : "", n);
    sb_free(t);
}

/* response_format -> the JSON Schema text the worker constrains decoding
 * with (docs/GRAMMAR.md), in *schema (empty: none). 0, or -1 with msg set.
 * json_object is the schema of any object. The schema is compiled here
 * too, so an unsupported keyword is the caller's 400, not a worker error. */
static int response_schema(const sb_json *rf, sb_jw *schema, char *msg, size_t n) {
    if (!rf || sb_json_type_of(rf) == SB_JSON_NULL) return 0;
    const char *type = sb_json_str(sb_json_get(rf, "type"));
    if (sb_json_type_of(rf) != SB_JSON_OBJECT || !type) {
        snprintf(msg, n, "'response_format': expected {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
        return -1;
    }
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        sb_jw_raw(schema, "{\"type\":\"object\"}", 17);
    } else if (!strcmp(type, "json_schema")) {
        const sb_json *s = sb_json_get(sb_json_get(rf, "json_schema"), "schema");
        if (sb_json_type_of(s) != SB_JSON_OBJECT && sb_json_type_of(s) != SB_JSON_BOOL) {
            snprintf(msg, n, "'response_format.json_schema.schema': expected a JSON Schema object");
            return -1;
        }
        sb_jw_value(schema, s);
    } else {
        snprintf(msg, n, "'response_format.type': '%.40s' is not one of text, json_object, json_schema", type);
        return -1;
    }
    sb_grammar *g = NULL;
    char err[SB_ERR_LEN];
    if (schema->oom) { snprintf(msg, n, "'response_format': schema too large or too deep"); return -1; }
    if (sb_json_schema_compile(schema->p, schema->len, &g, err)) {
        snprintf(msg, n, "'response_format.json_schema.schema': %s", err);
        return -1;
    }
    sb_grammar_free(g);
    return 0;
}

static bool num_in(const sb_json *v, double lo, double hi) {
    return sb_json_type_of(v) == SB_JSON_NUMBER && sb_json_num(v) >= lo && sb_json_num(v) <= hi;
}

void rt_handle_chat(rt_req *q, const sb_json *body, int kind) {
    rt *r = q->r;
    sb_mp_writer *p = NULL;
    sb_jw input, texts, schema;
    sb_jw_init(&input);
    sb_jw_init(&texts);
    sb_jw_init(&schema);
    char why[SB_ERR_LEN + 64];
    const sb_json *jm = sb_json_get(body, "model");
    const sb_json *stream_v = sb_json_get(body, "stream");
    if (sb_json_type_of(jm) != SB_JSON_STRING) BAD("'model': expected a string naming a model or pipeline:NAME");
    if (stream_v && sb_json_type_of(stream_v) != SB_JSON_BOOL) BAD("'stream': expected a boolean");
    bool stream = sb_json_bool(stream_v);
    q->want_stream = stream;
    const char *model = sb_json_str(jm);
    rt_openai_begin(q, kind, model);
    const sb_json *so = sb_json_get(body, "stream_options");
    if (so && sb_json_type_of(so) != SB_JSON_NULL) {
        const sb_json *iu = sb_json_get(so, "include_usage");
        if (sb_json_type_of(so) != SB_JSON_OBJECT || (iu && sb_json_type_of(iu) != SB_JSON_BOOL))
            BAD("'stream_options': expected {\"include_usage\": boolean}");
        q->include_usage = sb_json_bool(iu);
    }
    const sb_json *n = sb_json_get(body, "n");
    if (n && sb_json_type_of(n) != SB_JSON_NULL && !sb_json_is_int(n, 1, 1)) BAD("'n': only 1 is supported");

    /* The input: messages (chat) or prompt (completions). */
    const sb_json *msgs = sb_json_get(body, "messages"), *prompt = sb_json_get(body, "prompt");
    const char *last_user = NULL;
    if (kind == RT_KIND_CHAT) {
        if (sb_json_type_of(msgs) != SB_JSON_ARRAY || sb_json_len(msgs) == 0)
            BAD("'messages': expected a non-empty array of {role, content}");
        if (sb_json_len(msgs) > 256) BAD("'messages': at most 256 messages");
    } else {
        if (sb_json_type_of(prompt) == SB_JSON_ARRAY && sb_json_len(prompt) == 1) prompt = sb_json_at(prompt, 0);
        if (sb_json_type_of(prompt) != SB_JSON_STRING) BAD("'prompt': expected a string");
    }
    /* Sampling. */
    const sb_json *mt = sb_json_get(body, "max_completion_tokens");
    if (!mt || sb_json_type_of(mt) == SB_JSON_NULL) mt = sb_json_get(body, "max_tokens");
    const sb_json *temp = sb_json_get(body, "temperature"), *top_p = sb_json_get(body, "top_p"),
                  *top_k = sb_json_get(body, "top_k"), *min_p = sb_json_get(body, "min_p"),
                  *rp = sb_json_get(body, "repeat_penalty"), *seed = sb_json_get(body, "seed"),
                  *stop = sb_json_get(body, "stop");
#define NUL(v) ((v) && sb_json_type_of(v) == SB_JSON_NULL ? NULL : (v))
    mt = NUL(mt); temp = NUL(temp); top_p = NUL(top_p); top_k = NUL(top_k); min_p = NUL(min_p);
    rp = NUL(rp); seed = NUL(seed); stop = NUL(stop);
    if (mt && !sb_json_is_int(mt, 1, 1 << 20)) BAD("'max_tokens': expected a positive integer");
    if (temp && !num_in(temp, 0, 2)) BAD("'temperature': expected a number in [0, 2]");
    if (top_p && !num_in(top_p, 0, 1)) BAD("'top_p': expected a number in [0, 1]");
    if (min_p && !num_in(min_p, 0, 1)) BAD("'min_p': expected a number in [0, 1]");
    if (top_k && !sb_json_is_int(top_k, 0, 1 << 20)) BAD("'top_k': expected a non-negative integer");
    if (rp && !num_in(rp, 0.01, 100)) BAD("'repeat_penalty': expected a number in [0.01, 100]");
    if (seed && !sb_json_is_int(seed, INT64_MIN / 2, INT64_MAX / 2)) BAD("'seed': expected an integer");
    size_t n_stop = 0;
    const sb_json *stops[MAX_STOPS];
    if (stop) {
        if (sb_json_type_of(stop) == SB_JSON_STRING) stops[n_stop++] = stop;
        else if (sb_json_type_of(stop) == SB_JSON_ARRAY && sb_json_len(stop) <= MAX_STOPS) {
            for (size_t i = 0; i < sb_json_len(stop); i++) {
                if (sb_json_type_of(sb_json_at(stop, i)) != SB_JSON_STRING || !sb_json_len(sb_json_at(stop, i)))
                    BAD("'stop': expected non-empty strings");
                stops[n_stop++] = sb_json_at(stop, i);
            }
        } else BAD("'stop': expected a string or an array of at most %d strings", MAX_STOPS);
    }
    if (response_schema(sb_json_get(body, "response_format"), &schema, why, sizeof why)) BAD("%s", why);
    /* Messages: checked, and the canonical input for the cache. */
    sb_jw_arr(&input);
    for (size_t i = 0; kind == RT_KIND_CHAT && i < sb_json_len(msgs); i++) {
        const sb_json *m = sb_json_at(msgs, i);
        const char *role = sb_json_str(sb_json_get(m, "role"));
        sb_jw_reset(&texts);
        if (sb_json_type_of(m) != SB_JSON_OBJECT || !role || content_text(sb_json_get(m, "content"), &texts))
            BAD("'messages'[%zu]: expected {\"role\": string, \"content\": string or text parts}", i);
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "developer") &&
            strcmp(role, "tool"))
            BAD("'messages'[%zu].role: '%.40s' is not one of system, user, assistant, developer, tool", i, role);
        if (!strcmp(role, "user")) last_user = sb_json_str(sb_json_get(m, "content"));
        sb_jw_obj(&input);
        sb_jw_key(&input, "role"); sb_jw_str(&input, !strcmp(role, "developer") ? "system" : role);
        sb_jw_key(&input, "content"); cache_text(&input, texts.p, texts.len, r->cache && temp && sb_json_num(temp) == 0);
        sb_jw_obj_end(&input);
    }
    sb_jw_arr_end(&input);
    if (input.oom || texts.oom) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); goto out; }

    if (!strncmp(model, "pipeline:", 9)) {
        const char *in = kind == RT_KIND_CHAT ? last_user : sb_json_str(prompt);
        if (kind == RT_KIND_CHAT && !in) BAD("'messages': a pipeline needs a user message with string content");
        if (schema.len) BAD("'response_format': a pipeline's stages carry their own json_schema (docs/router.md)");
        rt_handle_pipeline_chat(q, model + 9, in, stream);
        goto out;
    }
    rt_model *m = rt_model_find(r, model);
    if (!m) {
        rt_req_error(q, 404, "invalid_request_error", "model_not_found",
                     "the model '%.80s' does not exist (GET /v1/models lists them)", model);
        goto out;
    }
    if (mt && sb_json_num(mt) > m->max_tokens)
        BAD("'max_tokens': %.0f exceeds this model's limit of %d", sb_json_num(mt), m->max_tokens);
    if (schema.len && m->remote)
        BAD("'response_format': schema-constrained output needs a local model; '%.80s' is an upstream", m->name);

    /* The cache: deterministic requests only (temperature 0). */
    char params[512];
    /* A completion's prompt is the client's own, parsed as it always was;
     * chat messages follow the prompt rules. */
    int pl = snprintf(params, sizeof params, "%s|max=%d|top_k=%d|rp=%g|stop=",
                      kind == RT_KIND_CHAT ? "chat|prompt=" RT_PROMPT_RULES : "text",
                      mt ? (int)sb_json_num(mt) : -1, top_k ? (int)sb_json_num(top_k) : -1, rp ? sb_json_num(rp) : -1);
    for (size_t i = 0; i < n_stop && pl > 0 && (size_t)pl < sizeof params; i++)
        pl += snprintf(params + pl, sizeof params - (size_t)pl, "%zu:%s,", sb_json_len(stops[i]), sb_json_str(stops[i]));
    if (schema.len && pl > 0 && (size_t)pl < sizeof params) {     /* another schema, another answer */
        uint8_t d[SB_SHA256_LEN];
        char hex[SB_CACHE_KEY_HEX];
        sb_sha256(schema.p, schema.len, d);
        sb_hex_encode(d, sizeof d, hex);
        pl += snprintf(params + pl, sizeof params - (size_t)pl, "|schema=%s", hex);
    }
    if (temp && sb_json_num(temp) == 0 && m->fingerprint[0] && (size_t)pl < sizeof params) {
        char ns[128];
        snprintf(ns, sizeof ns, "model:%s", m->name);
        sb_cache_entry e;
        /* A completion's prompt is used as sent: NFC only, as its trailing
         * whitespace decides the next token. */
        int hit = rt_cache_lookup(q, ns, m->fingerprint, kind == RT_KIND_CHAT ? input.p : sb_json_str(prompt),
                                  kind == RT_KIND_CHAT ? 0 : SB_NORM_NFC, params, &e);
        if (hit == 1) {
            reply_stored(q, (const char *)e.response, e.response_len, stream);
            sb_cache_entry_free(&e);
            goto out;
        }
    }

    /* The worker call. */
    if (sb_mp_writer_new(&p)) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); goto out; }
    uint32_t np = 2 + !!mt + !!temp + !!top_p + !!top_k + !!min_p + !!rp + !!seed + (n_stop > 0) + (schema.len > 0);
    sb_mp_map(p, np);
    sb_mp_kv_bool(p, "stream", stream);
    if (kind == RT_KIND_CHAT) {
        sb_mp_str(p, "messages");
        sb_mp_array(p, (uint32_t)sb_json_len(msgs));
        for (size_t i = 0; i < sb_json_len(msgs); i++) {
            const sb_json *mm = sb_json_at(msgs, i);
            const char *role = sb_json_str(sb_json_get(mm, "role"));
            sb_jw_reset(&texts);
            content_text(sb_json_get(mm, "content"), &texts);
            sb_mp_map(p, 2);
            sb_mp_kv_str(p, "role", !strcmp(role, "developer") ? "system" : role);
            sb_mp_str(p, "content");
            sb_mp_strn(p, texts.p ? texts.p : "", texts.len);
        }
    } else {
        sb_mp_str(p, "prompt");
        sb_mp_strn(p, sb_json_str(prompt), sb_json_len(prompt));
    }
    if (mt) sb_mp_kv_i64(p, "max_tokens", (int64_t)sb_json_num(mt));
    if (temp) sb_mp_kv_f64(p, "temperature", sb_json_num(temp));
    if (top_p) sb_mp_kv_f64(p, "top_p", sb_json_num(top_p));
    if (top_k) sb_mp_kv_i64(p, "top_k", (int64_t)sb_json_num(top_k));
    if (min_p) sb_mp_kv_f64(p, "min_p", sb_json_num(min_p));
    if (rp) sb_mp_kv_f64(p, "repeat_penalty", sb_json_num(rp));
    if (seed) sb_mp_kv_u64(p, "seed", (uint64_t)(int64_t)sb_json_num(seed));
    if (n_stop) {
        sb_mp_str(p, "stop");
        sb_mp_array(p, (uint32_t)n_stop);
        for (size_t i = 0; i < n_stop; i++) sb_mp_strn(p, sb_json_str(stops[i]), sb_json_len(stops[i]));
    }
    if (schema.len) {
        sb_mp_str(p, "json_schema");
        sb_mp_strn(p, schema.p, schema.len);
    }
    if (sb_mp_writer_status(p)) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); goto out; }
    char err[SB_ERR_LEN];
    int rc = rt_model_submit(m, "generate", p, m->deadline_ms, 0, stream ? on_token : NULL, on_done, q, &q->job, err);
    p = NULL;
    if (rc) {
        if (rc == SB_EBUSY || rc == SB_EIO) rt_req_retry_after(q, rc == SB_EBUSY ? rt_model_retry_after(m) : 5);
        rt_req_error(q, rc == SB_EUNSUP ? 501 : rc == SB_ENOMEM ? 500 : 503,
                     rc == SB_EBUSY ? "server_busy" : "model_unavailable",
                     rc == SB_EBUSY ? "queue_full" : "model_unavailable", "%s", err);
        goto out;
    }
    q->on_gone = call_gone;
    rt_req_set_deadline(q, m->deadline_ms + 5000);
out:
    sb_mp_writer_free(p);
    sb_jw_free(&input);
    sb_jw_free(&texts);
    sb_jw_free(&schema);
}

void rt_handle_models(rt_req *q) {
    rt *r = q->r;
    sb_jw *w = &q->out;
    bool pipes_only = !strcmp(q->path, "/v1/pipelines");
    rt_conf *c = rt_conf_acquire(r);
    sb_jw_obj(w);
    sb_jw_key(w, "object"); sb_jw_str(w, "list");
    sb_jw_key(w, "data");
    sb_jw_arr(w);
    for (size_t i = 0; !pipes_only && i < r->n_models; i++) {
        if (r->models[i]->removed) continue;
        sb_jw_obj(w);
        sb_jw_key(w, "id"); sb_jw_str(w, r->models[i]->name);
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
