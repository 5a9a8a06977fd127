/* pipeapi.c - POST /v1/pipelines/NAME, `pipeline:NAME` models, the cache.
 *
 *   POST /v1/pipelines/hotline  {"input": "我要查社保缴费记录"}
 *   -> {"pipeline", "intent", "confidence", "probabilities": {label: p},
 *       "stages": [{name, kind, status, output, json?, error?, ms}],
 *       "output", "usage", "ms"}
 *
 * The response cache sits in front of both pipelines and plain models: the
 * key covers the namespace (model:NAME / pipeline:NAME), a fingerprint of
 * the model files (and the pipeline's definition), the normalised input and
 * the parameters that change the answer. `Cache-Control: no-cache` skips the
 * lookup (the fresh answer is still stored). Replies carry X-Cache.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "router/obs.h"
#include "router/router_internal.h"

/* ---------------------------------------------------------------- cache */

int rt_cache_lookup(rt_req *q, const char *ns, const char *fp, const char *input, unsigned norm,
                    const char *params, sb_cache_entry *entry) {
    rt *r = q->r;
    if (!r->cache || !fp || !fp[0] || !input) return -1;
    char err[SB_ERR_LEN];
    sb_cache_query cq;
    if (sb_cache_make_key_norm(r->cache, norm, ns, fp, input, params, &cq, err)) return -1;
    q->cache_key = sb_strdup(cq.key);
    q->cache_input = cq.input;
    q->cache_ns = sb_strdup(ns);
    q->cache_fp = sb_strdup(fp);
    q->cache_params = sb_strdup(params);
    if (!q->cache_key || !q->cache_ns || !q->cache_fp || !q->cache_params) {
        sb_free(q->cache_key);
        q->cache_key = NULL;
        return -1;
    }
    const char *cc = rt_req_header(q, "Cache-Control");
    if (cc && strcasestr(cc, "no-cache")) {
        r->metrics.cache_bypass++;
        return 0;
    }
    int rc = sb_cache_get(r->cache, cq.key, entry, err);
    if (rc == 0) {
        r->metrics.cache_hits++;
        return 1;
    }
    r->metrics.cache_misses++;
    return 0;
}

void rt_cache_store(rt_req *q, const char *response, size_t len) {
    if (!q->cache_key || !q->r->cache) return;
    sb_cache_item it = { .key = q->cache_key, .ns = q->cache_ns, .fingerprint = q->cache_fp, .input = q->cache_input,
                         .params = q->cache_params, .response = response, .response_len = len, .ttl_s = -1,
                         .origin = SB_CACHE_ORIGIN_LOCAL };
    char err[SB_ERR_LEN];
    sb_cache_put(q->r->cache, &it, err);     /* a failure only means "not stored"; the cache logs it once */
}

/* ------------------------------------------------------------ pipelines */

static void run_gone(rt_req *q) {
    rt_run_cancel(q->run);
    q->run = NULL;
}

static void reply_run_json(rt_req *q, rt_run *run) {
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    rt_run_result_json(run, w);
    if (w->oom) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); return; }
    rt_cache_store(q, w->p, w->len);
    rt_req_json(q, 200, w->p, w->len, q->cache_key ? "miss" : NULL);
}

/* The call's trace (obs.h), recorded before the reply frees q. */
static void trace(rt_req *q, const char *pipeline, const char *input, const rt_run *run, const sb_cache_entry *hit,
                  int status, const char *error) {
    rt_call_info ci = { .call_id = q->call_id, .pipeline = pipeline, .input = input, .run = run,
                        .cached = hit ? (const char *)hit->response : NULL, .cached_len = hit ? hit->response_len : 0,
                        .cache = hit ? "hit" : q->cache_key ? "miss" : "off", .source = "http", .status = status,
                        .error = error, .t0 = q->t0 };
    rt_trace_record(q->r, &ci);
}

static void on_run_done(void *arg, rt_run *run) {
    rt_req *q = arg;
    q->run = NULL;
    q->on_gone = NULL;
    q->t_model = rt_run_model_seconds(run);
    const char *type, *msg;
    int st = rt_run_failed(run, &type, &msg);
    trace(q, rt_run_pipeline(run), rt_run_input(run), run, NULL, st ? st : 200, st ? msg : NULL);
    if (st) {
        if (st == 503) rt_req_retry_after(q, rt_run_retry_after(run) ? rt_run_retry_after(run) : 2);
        rt_req_error(q, st, type, type, "%s", msg);
    } else if (q->route == RT_ROUTE_PIPELINES) {
        reply_run_json(q, run);
    } else {
        /* An OpenAI-shaped answer; the full result is cached so either
         * endpoint can be answered from it later. */
        sb_jw w;
        sb_jw_init(&w);
        rt_run_result_json(run, &w);
        if (!w.oom) rt_cache_store(q, w.p, w.len);
        sb_jw_free(&w);
        int pt, ct;
        rt_run_usage(run, &pt, &ct);
        const char *out = rt_run_output(run);
        if (q->want_stream) {
            if (!q->streaming && out[0]) rt_openai_sse_delta(q, out, strlen(out));
            rt_openai_sse_finish(q, "stop", pt, ct);
        } else {
            rt_openai_reply(q, out, strlen(out), "stop", pt, ct, q->cache_key ? "miss" : NULL);
        }
    }
    rt_run_free(run);
}

static void on_run_token(void *arg, const char *text, size_t len) {
    rt_req *q = arg;
    if (q->want_stream) rt_openai_sse_delta(q, text, len);
}

/* The pipeline's opt-in key folding (cache_fold), as SB_NORM_* flags. */
static unsigned pipeline_fold(rt *r, const char *name) {
    rt_conf *c = rt_conf_acquire(&r->ex);
    const sb_pipeline *p = c ? sb_pipelines_find(c->pipes, name) : NULL;
    unsigned fold = p ? p->cache_fold : 0;
    rt_conf_release(c);
    return fold;
}

/* 1: answered from the cache. */
static int try_cache(rt_req *q, const char *name, const char *input, const char *until) {
    char fp[SB_CACHE_KEY_HEX], ns[128], params[160];
    bool cacheable;
    if (rt_pipeline_fingerprint(&q->r->ex, name, fp, &cacheable) || !cacheable) return 0;
    snprintf(ns, sizeof ns, "pipeline:%s", name);
    sb_cache_entry e;
    unsigned fold = pipeline_fold(q->r, name);
    /* The folding is named in the key, so answers stored under one setting
     * are never served under another. */
    snprintf(params, sizeof params, "pipeline/v1|prompt=" RT_PROMPT_RULES "|until=%.60s%s%s", until ? until : "",
             fold ? "|fold=" : "", sb_cache_fold_name(fold));
    if (rt_cache_lookup(q, ns, fp, input, SB_NORM_DEFAULT | fold, params, &e) != 1) return 0;
    trace(q, name, input, NULL, &e, 200, NULL);
    if (q->route == RT_ROUTE_PIPELINES) {
        rt_req_json(q, 200, (const char *)e.response, e.response_len, "hit");
    } else {
        sb_json_doc *d;
        if (sb_json_parse((const char *)e.response, e.response_len, &d, NULL)) {
            sb_cache_entry_free(&e);
            return 0;
        }
        const sb_json *o = sb_json_root(d), *out = sb_json_get(o, "output"), *u = sb_json_get(o, "usage");
        int pt = (int)sb_json_num(sb_json_get(u, "prompt_tokens")), ct = (int)sb_json_num(sb_json_get(u, "completion_tokens"));
        const char *text = sb_json_str(out) ? sb_json_str(out) : "";
        if (q->want_stream) {
            rt_req_sse_start(q, "hit");
            rt_openai_sse_delta(q, text, strlen(text));
            rt_openai_sse_finish(q, "stop", pt, ct);
        } else {
            rt_openai_reply(q, text, strlen(text), "stop", pt, ct, "hit");
        }
        sb_json_doc_free(d);
    }
    sb_cache_entry_free(&e);
    return 1;
}

/* The call's id: the caller's X-Call-Id when valid, else a new one. */
static bool call_id(rt_req *q) {
    const char *h = rt_req_header(q, "X-Call-Id");
    if (h && !rt_call_id_valid(h)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_call_id",
                     "X-Call-Id: expected 1-%d characters of A-Z a-z 0-9 . _ : -", RT_CALL_ID_MAX);
        return false;
    }
    if (h) snprintf(q->call_id, sizeof q->call_id, "%s", h);
    else rt_call_id_new(q->r, q->call_id);
    return true;
}

static void start(rt_req *q, const char *name, const char *input, const char *until) {
    if (!call_id(q) || try_cache(q, name, input, until)) return;
    char err[SB_ERR_LEN];
    int rc = rt_run_start(&q->r->ex, name, input, q->want_stream ? on_run_token : NULL, on_run_done, q, &q->run, err);
    if (!rc && until && rt_run_until(q->run, until)) {
        rt_run_cancel(q->run);
        q->run = NULL;
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'until': pipeline '%s' has no stage '%.60s'",
                     name, until);
        return;
    }
    if (rc == SB_ENOTFOUND) {
        rt_req_error(q, 404, "invalid_request_error", q->route == RT_ROUTE_PIPELINES ? "pipeline_not_found" : "model_not_found",
                     "%s (GET /v1/pipelines lists them)", err);
        return;
    }
    if (rc) { rt_req_error(q, 500, "server_error", "internal", "%s", err); return; }
    q->on_gone = run_gone;
    rt_conf *c = rt_conf_acquire(&q->r->ex);
    const sb_pipeline *p = sb_pipelines_find(c->pipes, name);
    rt_req_set_deadline(q, (p ? p->timeout_ms : 300000) + 5000);
    rt_conf_release(c);
}

void rt_handle_pipeline(rt_req *q, const char *name, const sb_json *body) {
    snprintf(q->model, sizeof q->model, "pipeline:%s", name);
    const sb_json *in = sb_json_get(body, "input");
    if (sb_json_type_of(in) != SB_JSON_STRING) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'input': expected a string, got %s",
                     in ? sb_json_type_name(sb_json_type_of(in)) : "nothing");
        return;
    }
    if (!sb_json_len(in)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'input': must not be empty");
        return;
    }
    const sb_json *until = sb_json_get(body, "until");
    if (until && sb_json_type_of(until) != SB_JSON_STRING) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'until': expected a stage name");
        return;
    }
    for (size_t i = 0; i < sb_json_len(body); i++) {
        const char *k = sb_json_key_at(body, i);
        if (strcmp(k, "input") && strcmp(k, "until")) {
            rt_req_error(q, 400, "invalid_request_error", "unknown_parameter",
                         "unknown key '%.60s' (expected: input, until)", k);
            return;
        }
    }
    start(q, name, sb_json_str(in), sb_json_str(until));
}

void rt_handle_pipeline_chat(rt_req *q, const char *name, const char *input, bool stream) {
    q->want_stream = stream;
    if (!input || !*input) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "the pipeline needs a non-empty input");
        return;
    }
    start(q, name, input, NULL);
}
