/* http_reply.c - the replies every HTTP door writes through: JSON, other
 * bodies, the OpenAI error shape, SSE, the request's JSON body, and the
 * failure writer that is the error half of every door's reply sink. After
 * a final reply the request (rt_req) is freed.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "router/router_internal.h"

void rt_req_json(rt_req *q, int status, const char *json, size_t len, const char *x_cache) {
    if (q->gone) return;
    if (x_cache) evhttp_add_header(evhttp_request_get_output_headers(q->req), "X-Cache", x_cache);
    rt_req_reply(q, status, "application/json", json, len);
}

void rt_req_reply(rt_req *q, int status, const char *type, const char *body, size_t len) {
    if (q->gone) return;
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
    evhttp_add_header(h, "Content-Type", type);
    if (q->call_id[0]) evhttp_add_header(h, "X-Call-Id", q->call_id);
    const char *json = body;
    struct evbuffer *b = evbuffer_new();
    if (b) evbuffer_add(b, json, len);
    q->status = status;
    rt_req_detach(q);
    evhttp_send_reply(q->req, status, NULL, b);
    if (b) evbuffer_free(b);
    q->req = NULL;
    rt_req_done(q);
}

void rt_error_json(sb_jw *w, const char *type, const char *code, const char *msg, bool param) {
    sb_jw_obj(w);
    sb_jw_key(w, "error");
    sb_jw_obj(w);
    sb_jw_key(w, "message"); sb_jw_str(w, msg);
    sb_jw_key(w, "type"); sb_jw_str(w, type);
    if (param) { sb_jw_key(w, "param"); sb_jw_null(w); }
    sb_jw_key(w, "code"); sb_jw_str(w, code);
    sb_jw_obj_end(w);
    sb_jw_obj_end(w);
}

void rt_req_error(rt_req *q, int status, const char *type, const char *code, const char *fmt, ...) {
    char msg[SB_ERR_LEN + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (q->streaming) {
        /* Headers are gone already: the error travels as one more event. */
        sb_jw w;
        sb_jw_init(&w);
        rt_error_json(&w, type, code, msg, false);
        if (!w.oom) rt_req_sse_send(q, w.p, w.len);
        sb_jw_free(&w);
        q->status = status;
        rt_req_sse_end(q);
        return;
    }
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    rt_error_json(w, type, code, msg, true);
    if (status >= 500) sb_warn("%d %s: %s", status, code, msg);
    if (w->oom) rt_req_json(q, 500, "{\"error\":{\"message\":\"out of memory\"}}", 37, NULL);
    else rt_req_json(q, status, w->p, w->len, NULL);
}

void rt_req_retry_after(rt_req *q, int seconds) {
    char v[16];
    snprintf(v, sizeof v, "%d", seconds);
    if (q->req) evhttp_add_header(evhttp_request_get_output_headers(q->req), "Retry-After", v);
}

void rt_req_sse_start(rt_req *q, const char *x_cache) {
    if (q->gone || q->streaming) return;
    struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    if (x_cache) evhttp_add_header(h, "X-Cache", x_cache);
    if (q->call_id[0]) evhttp_add_header(h, "X-Call-Id", q->call_id);
    q->streaming = true;
    q->status = 200;
    evhttp_send_reply_start(q->req, 200, "OK");
}

void rt_req_sse_send(rt_req *q, const char *data, size_t len) {
    if (q->gone || !q->streaming) return;
    struct evbuffer *b = evbuffer_new();
    if (!b) return;
    evbuffer_add(b, "data: ", 6);
    evbuffer_add(b, data, len);
    evbuffer_add(b, "\n\n", 2);
    evhttp_send_reply_chunk(q->req, b);
    evbuffer_free(b);
}

void rt_req_sse_end(rt_req *q) {
    if (q->gone) return;
    rt_req_sse_send(q, "[DONE]", 6);
    rt_req_detach(q);
    evhttp_send_reply_end(q->req);
    q->req = NULL;
    rt_req_done(q);
}

sb_json_doc *rt_req_body_json(rt_req *q) {
    struct evbuffer *in = evhttp_request_get_input_buffer(q->req);
    size_t n = evbuffer_get_length(in);
    const char *p = n ? (const char *)evbuffer_pullup(in, -1) : "";
    char err[SB_ERR_LEN];
    sb_json_doc *d;
    if (n == 0) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_json", "the request body is empty; expected a JSON object");
        return NULL;
    }
    int rc = sb_json_parse(p, n, &d, err);
    if (rc) {
        rt_req_error(q, rc == SB_ENOMEM ? 500 : 400, "invalid_request_error", "invalid_json", "%s", err);
        return NULL;
    }
    if (sb_json_type_of(sb_json_root(d)) != SB_JSON_OBJECT) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_type", "the request body must be a JSON object, got %s",
                     sb_json_type_name(sb_json_type_of(sb_json_root(d))));
        sb_json_doc_free(d);
        return NULL;
    }
    /* Names and text travel on as C strings (lookups, templates, argv,
     * cache keys): "m\u0000xyz" would be served as model "m". Refused
     * everywhere in the body, so no field is cut short silently. */
    char path[96];
    if (sb_json_find_nul(sb_json_root(d), path, sizeof path)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                     "'%s': contains a NUL character (\\u0000), which no name or text may hold", path);
        sb_json_doc_free(d);
        return NULL;
    }
    return d;
}

/* -------------------------------------------------------------- failures */

void rt_req_fail(void *req, const rt_failure *f) {
    rt_req *q = req;
    if (f->retry_after) rt_req_retry_after(q, f->retry_after);
    rt_req_error(q, f->status, f->type, f->code, "%s", f->message);
}

bool rt_req_model_failed(rt_req *q, const rt_reply *res) {
    q->job = NULL;
    q->on_gone = NULL;
    if (res->ok) return false;
    char msg[SB_ERR_LEN + 256];
    snprintf(msg, sizeof msg, "model '%s': %s", q->model, res->message ? res->message : "failed");
    rt_failure f = { .code = res->code ? res->code : "error", .message = msg };
    f.status = rt_worker_error_status(res->code, &f.type);
    f.retry_after = f.status == 503 ? 2 : 0;
    rt_req_fail(q, &f);
    return true;
}
