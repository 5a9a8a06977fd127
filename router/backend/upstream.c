/* upstream.c - models served by a remote OpenAI-compatible endpoint.
 *
 * A model entry with `upstream: http://HOST:PORT/v1` has no worker: its
 * `generate` calls become POST {upstream}/chat/completions (messages) or
 * {upstream}/completions (a raw prompt), with `Authorization: Bearer
 * $api_key_env` when the entry names one. This is how a site that outgrows
 * one box sends its composer stage to a vLLM or llama.cpp server cluster -
 * or to another switchboard.
 *
 * It is the other backend beside the worker's socket: it takes the typed
 * request (sb_backend.h), encodes it as OpenAI JSON itself, and reads the
 * answer's JSON straight into the typed reply (rt_reply). Its calls keep
 * sb_ipc_aclient's contract, so models.c keeps one FIFO,
 * one in-flight count and one cancel path for both kinds of model: a call
 * gets exactly one on_done, from the loop and never from inside
 * rt_upstream_call; stream=true calls get "token" events as the upstream's
 * SSE chunks arrive; cancelling promises no more callbacks. Results fill
 * what a worker's do (text, finish_reason, token counts, gen_ms), and
 * failures carry a message that names the URL:
 *
 *   disconnected    connection refused / reset before an answer (503)
 *   timeout         no complete answer within the entry's timeout_ms (504)
 *   upstream_error  an HTTP error status or an answer that is not OpenAI's
 *                   shape (502)
 *
 * Every live call is on its model's list, so the router can free them all
 * at exit, and the call's own timers die with it (no stray event_base_once
 * pointing at freed memory).
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/backend/backend_internal.h"
#include "common/sb_net.h"

#define UP_MAX_BODY   (8u << 20)    /* an answer is KBs; more is a broken upstream */
#define UP_MAX_URL    1024

struct rt_upcall {
    rt_upcall *next;
    rt_model *m;
    uint64_t id;
    char url[UP_MAX_URL];           /* the full endpoint, for messages */
    int timeout_ms;
    bool chat, stream;
    rt_token_fn on_token;
    rt_up_done_fn on_done;
    void *arg;
    struct evhttp_connection *conn; /* ours: freed with the call */
    struct evhttp_request *req;
    struct event *timer, *reap;
    struct evbuffer *body;          /* what has arrived of the answer */
    sb_jw text;                     /* streamed text so far */
    rt_up_calls *calls;             /* streamed tool-call fragments so far, or NULL */
    bool logprobs;                  /* the request asked for them */
    int n_chunks;
    char finish[24];
    int http_error;                 /* evhttp's error kind, or 0 */
    bool done;                      /* on_done delivered or suppressed */
    double t0;
};

/* ---------------------------------------------------------------- life */

static void unlink_call(rt_upcall *c) {
    for (rt_upcall **p = &c->m->upcalls; *p; p = &(*p)->next)
        if (*p == c) { *p = c->next; return; }
}

static void call_free(rt_upcall *c) {
    unlink_call(c);
    /* evhttp_connection_free drops the pending request without calling
     * back into us. */
    if (c->conn) evhttp_connection_free(c->conn);
    if (c->timer) event_free(c->timer);
    if (c->reap) event_free(c->reap);
    if (c->body) evbuffer_free(c->body);
    sb_jw_free(&c->text);
    if (c->calls) rt_up_calls_free(c->calls);
    sb_free(c->calls);
    sb_free(c);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg) { call_free(arg); }

/* Free from the loop, never inside an evhttp callback of the call's own
 * connection (freeing it there would pull the request from under evhttp). */
static void schedule_free(rt_upcall *c) {
    struct timeval now = { 0, 0 };
    evtimer_add(c->reap, &now);
}

static void deliver_error(rt_upcall *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void deliver_error(rt_upcall *c, const char *code, const char *fmt, ...) {
    if (c->done) return;
    c->done = true;
    char msg[SB_ERR_LEN + UP_MAX_URL];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt_reply res = { .method = RT_CALL_GENERATE, .ok = false, .code = code, .message = msg, .gen.text = "" };
    c->on_done(c->arg, &res);
}

/* g: the answer's text, finish_reason, counts, calls and logprobs. */
static void deliver_ok(rt_upcall *c, rt_gen_result g) {
    if (c->done) return;
    c->done = true;
    rt_reply res = { .method = RT_CALL_GENERATE, .ok = true, .gen = g };
    if (!g.finish_reason || !*g.finish_reason) res.gen.finish_reason = "stop";
    res.gen.has_logprobs = c->logprobs;
    res.gen.gen_ms = (sb_now_s() - c->t0) * 1e3;
    c->on_done(c->arg, &res);
}

/* The end of a stream: its text, its calls put together. */
static void deliver_stream(rt_upcall *c) {
    rt_tool_call calls[RT_UP_MAX_CALLS];
    size_t n = c->calls ? c->calls->n : 0;
    if (n) rt_up_calls_view(c->calls, calls);
    deliver_ok(c, (rt_gen_result){ .text = c->text.p ? c->text.p : "", .len = c->text.len, .finish_reason = c->finish,
                                   .completion_tokens = c->n_chunks, .calls = n ? calls : NULL, .n_calls = n });
}

/* ----------------------------------------------------------- answers */

/* The upstream's own error message, when its body is OpenAI's error shape. */
static void upstream_message(const char *body, size_t len, char *out, size_t n) {
    sb_json_doc *d;
    out[0] = '\0';
    if (sb_json_parse(body, len, &d, NULL) == 0) {
        const char *m = sb_json_str(sb_json_get(sb_json_get(sb_json_root(d), "error"), "message"));
        if (m) snprintf(out, n, ": %s", m);
        sb_json_doc_free(d);
    }
    if (!out[0] && len) snprintf(out, n, ": %.*s", (int)(len > 200 ? 200 : len), body);
}

static void finish_whole(rt_upcall *c, const char *body, size_t len) {
    sb_json_doc *d;
    char why[SB_ERR_LEN];
    if (sb_json_parse(body, len, &d, why)) {
        deliver_error(c, "upstream_error", "upstream %s answered with invalid JSON (%s)", c->url, why);
        return;
    }
    const sb_json *root = sb_json_root(d), *ch = sb_json_at(sb_json_get(root, "choices"), 0);
    const sb_json *text = c->chat ? sb_json_get(sb_json_get(ch, "message"), "content") : sb_json_get(ch, "text");
    const sb_json *usage = sb_json_get(root, "usage");
    const sb_json *tc = c->chat ? sb_json_get(sb_json_get(ch, "message"), "tool_calls") : NULL;
    rt_tool_call *calls = NULL;
    rt_logprob *lps = NULL;
    size_t n_calls = 0, n_lps = 0;
    void *lp_store = NULL;
    int rc;
    /* A message that calls tools may have null content. */
    if (sb_json_type_of(text) != SB_JSON_STRING && !(sb_json_len(tc) && sb_json_type_of(text) == SB_JSON_NULL)) {
        deliver_error(c, "upstream_error", "upstream %s: the answer has no choices[0].%s", c->url,
                      c->chat ? "message.content" : "text");
    } else if ((rc = rt_up_tool_calls(tc, &calls, &n_calls, why, sizeof why)) ||
               (rc = rt_up_logprobs(c->logprobs ? sb_json_get(ch, "logprobs") : NULL, c->chat, &lps, &n_lps,
                                    &lp_store, why, sizeof why))) {
        deliver_error(c, rc == SB_ENOMEM ? SB_IPC_INTERNAL : "upstream_error", "upstream %s: choices[0]: %s", c->url,
                      rc == SB_ENOMEM ? "out of memory" : why);
    } else {
        const char *s = sb_json_str(text);
        deliver_ok(c, (rt_gen_result){ .text = s ? s : "", .len = sb_json_len(text),
                                       .finish_reason = sb_json_str(sb_json_get(ch, "finish_reason")),
                                       .prompt_tokens = (int64_t)sb_json_num(sb_json_get(usage, "prompt_tokens")),
                                       .completion_tokens = (int64_t)sb_json_num(sb_json_get(usage, "completion_tokens")),
                                       .calls = calls, .n_calls = n_calls, .logprobs = lps, .n_logprobs = n_lps });
    }
    sb_free(calls);
    sb_free(lp_store);
    sb_json_doc_free(d);
}

/* A chunk's delta.tool_calls fragments, added to the call's. 0, or an
 * error delivered. */
static int stream_calls(rt_upcall *c, const sb_json *ch) {
    const sb_json *tc = c->chat ? sb_json_get(sb_json_get(ch, "delta"), "tool_calls") : NULL;
    if (sb_json_type_of(tc) != SB_JSON_ARRAY) return 0;
    char why[SB_ERR_LEN];
    int rc = !c->calls && !(c->calls = sb_calloc(1, sizeof *c->calls)) ? SB_ENOMEM : 0;
    if (!rc) rc = rt_up_calls_add(c->calls, tc, why, sizeof why);
    if (rc) deliver_error(c, rc == SB_ENOMEM ? SB_IPC_INTERNAL : "upstream_error", "upstream %s: a chunk's tool_calls: %s",
                          c->url, rc == SB_ENOMEM ? "out of memory" : why);
    return rc;
}

/* One SSE event's data. 1 = [DONE] (or an error delivered). */
static int sse_data(rt_upcall *c, const char *data, size_t len) {
    if (len == 6 && !memcmp(data, "[DONE]", 6)) return 1;
    sb_json_doc *d;
    if (sb_json_parse(data, len, &d, NULL)) return 0;     /* keep-alive comments and the like */
    const sb_json *root = sb_json_root(d), *ch = sb_json_at(sb_json_get(root, "choices"), 0);
    const sb_json *err = sb_json_get(root, "error");
    if (err) {
        const char *m = sb_json_str(sb_json_get(err, "message"));
        deliver_error(c, "upstream_error", "upstream %s failed mid-stream: %s", c->url, m ? m : "error event");
        sb_json_doc_free(d);
        return 1;
    }
    const sb_json *t = c->chat ? sb_json_get(sb_json_get(ch, "delta"), "content") : sb_json_get(ch, "text");
    const char *fin = sb_json_str(sb_json_get(ch, "finish_reason"));
    if (fin) snprintf(c->finish, sizeof c->finish, "%s", fin);
    int rc = stream_calls(c, ch);
    rt_token tok = { .text = "", .has_logprobs = c->logprobs };
    void *lp_store = NULL;
    char why[SB_ERR_LEN];
    /* Entries the caller did not ask for are not passed on. */
    if (!rc && c->logprobs && (rc = rt_up_logprobs(sb_json_get(ch, "logprobs"), c->chat, (rt_logprob **)&tok.logprobs,
                                    &tok.n_logprobs, &lp_store, why, sizeof why)))
        deliver_error(c, rc == SB_ENOMEM ? SB_IPC_INTERNAL : "upstream_error", "upstream %s: a chunk's logprobs: %s",
                      c->url, rc == SB_ENOMEM ? "out of memory" : why);
    bool has_text = sb_json_type_of(t) == SB_JSON_STRING && sb_json_len(t);
    if (!rc && has_text) {
        sb_jw_raw(&c->text, sb_json_str(t), sb_json_len(t));
        c->n_chunks++;
        tok.text = sb_json_str(t);
        tok.len = sb_json_len(t);
    }
    /* A chunk of entries without text (half a character) is passed on too. */
    if (!rc && (has_text || tok.n_logprobs) && c->on_token && !c->done) c->on_token(c->arg, &tok);
    sb_free(lp_store);
    sb_json_doc_free(d);
    return rc ? 1 : 0;
}

/* Complete lines of the SSE stream that arrived so far. */
static void sse_drain(rt_upcall *c) {
    char *line;
    size_t n;
    while (!c->done && (line = evbuffer_readln(c->body, &n, EVBUFFER_EOL_CRLF))) {
        if (n > 5 && !strncmp(line, "data:", 5)) {
            const char *p = line + 5;
            size_t k = n - 5;
            if (k && *p == ' ') { p++; k--; }
            if (sse_data(c, p, k) == 1 && !c->done) deliver_stream(c);
        }
        free(line);             /* evbuffer_readln allocates with libevent's malloc */
    }
}

/* Bytes of a streamed answer as they arrive (code: the HTTP status). */
static void take_chunk(rt_upcall *c, struct evbuffer *in, int code) {
    if (c->done) { evbuffer_drain(in, evbuffer_get_length(in)); return; }
    if (evbuffer_get_length(c->body) + evbuffer_get_length(in) > UP_MAX_BODY) {
        evbuffer_drain(in, evbuffer_get_length(in));
        deliver_error(c, "upstream_error", "upstream %s: answer larger than %u bytes", c->url, UP_MAX_BODY);
        return;
    }
    evbuffer_add_buffer(c->body, in);
    if (code == 200) sse_drain(c);
}

static void on_chunk(struct evhttp_request *req, void *arg) {
    take_chunk(arg, evhttp_request_get_input_buffer(req), evhttp_request_get_response_code(req));
}

static void on_error(enum evhttp_request_error e, void *arg) {
    rt_upcall *c = arg;
    c->http_error = (int)e + 1;
}

static void finish_answer(rt_upcall *c, int code);

static void on_response(struct evhttp_request *req, void *arg) {
    rt_upcall *c = arg;
    c->req = NULL;
    evtimer_del(c->timer);
    int code = req ? evhttp_request_get_response_code(req) : 0;
    if (req && !c->stream) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        evbuffer_add_buffer(c->body, in);
    }
    finish_answer(c, code);
    /* The connection is freed from the loop, after evhttp has finished
     * with this request. (evhttp_connection_free_on_completion() set here
     * would be too late: evhttp decides whether to free before it calls
     * back, so the connection would leak.) */
    schedule_free(c);
}

/* The whole answer is in c->body (code 0: none came). */
static void finish_answer(rt_upcall *c, int code) {
    size_t len = evbuffer_get_length(c->body);
    const char *body = len ? (const char *)evbuffer_pullup(c->body, -1) : "";
    if (!code) {
        deliver_error(c, SB_IPC_DISCONNECTED, "upstream %s: no answer (%s)", c->url,
                      c->http_error == EVREQ_HTTP_DATA_TOO_LONG + 1 ? "answer too large"
                                                                   : "connection refused, reset or closed");
    } else if (code != 200) {
        char m[300];
        upstream_message(body, len, m, sizeof m);
        deliver_error(c, code == 400 ? SB_IPC_INVALID_REQUEST : "upstream_error", "upstream %s answered HTTP %d%s",
                      c->url, code, m);
    } else if (c->stream) {
        /* A last line without its newline, then the end of the stream. */
        evbuffer_add(c->body, "\n", 1);
        sse_drain(c);
        if (!c->done) deliver_stream(c);
    } else {
        finish_whole(c, body, len);
    }
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
    rt_upcall *c = arg;
    deliver_error(c, SB_IPC_TIMEOUT, "upstream %s did not answer within %d ms (timeout_ms)", c->url, c->timeout_ms);
    call_free(c);               /* from the loop: dropping the connection is safe here */
}

/* ----------------------------------------------------------- request */

/* A prompt's pieces as one JSON string. The OpenAI API has no way to say
 * which parts are trusted: the upstream tokenizes the whole with its own
 * rules (see "Upstream models" in docs/config.md). */
static void put_text(sb_jw *w, const sb_segs *t) {
    sb_jw_strn(w, t->text.p ? t->text.p : "", t->text.len);
}

/* A chat message; an assistant's tool_calls and a tool message's
 * tool_call_id back in OpenAI's shape (the typed request keeps them as the
 * worker's JSON, sb_backend.h). -1: that JSON is not readable. */
static int put_message(sb_jw *w, const rt_gen_msg *m) {
    const char *calls = m->tool.p ? m->tool.p + m->tool_id_len : "";
    size_t calls_len = m->tool.len - m->tool_id_len;
    sb_json_doc *d = NULL;
    if (calls_len && sb_json_parse(calls, calls_len, &d, NULL)) return -1;
    const sb_json *arr = d ? sb_json_root(d) : NULL;
    sb_jw_obj(w);
    sb_jw_key(w, "role"); sb_jw_str(w, m->role);
    sb_jw_key(w, "content");
    if (!m->content.text.len && sb_json_len(arr)) sb_jw_null(w);     /* a call without words */
    else put_text(w, &m->content);
    if (m->tool_id_len) { sb_jw_key(w, "tool_call_id"); sb_jw_strn(w, m->tool.p, m->tool_id_len); }
    if (sb_json_len(arr)) {
        sb_jw_key(w, "tool_calls");
        sb_jw_arr(w);
        for (size_t i = 0; i < sb_json_len(arr); i++) {
            const sb_json *c = sb_json_at(arr, i);
            sb_jw_obj(w);
            sb_jw_key(w, "id"); sb_jw_value(w, sb_json_get(c, "id"));
            sb_jw_key(w, "type"); sb_jw_str(w, "function");
            sb_jw_key(w, "function");
            sb_jw_obj(w);
            sb_jw_key(w, "name"); sb_jw_value(w, sb_json_get(c, "name"));
            sb_jw_key(w, "arguments"); sb_jw_value(w, sb_json_get(c, "arguments"));
            sb_jw_obj_end(w);
            sb_jw_obj_end(w);
        }
        sb_jw_arr_end(w);
    }
    sb_jw_obj_end(w);
    sb_json_doc_free(d);
    return 0;
}

/* tools, tool_choice, parallel_tool_calls, logprobs, top_logprobs as the
 * caller gave them: the upstream enforces tool_choice and answers for what
 * it cannot do. */
static void put_tools(sb_jw *w, const rt_gen_req *g) {
    static const char *const choices[] = { "none", "auto", "required" };
    if (g->tools_len) {
        sb_jw_key(w, "tools");
        sb_jw_raw(w, g->tools_own.p, g->tools_len);     /* the caller's array, re-encoded when parsed */
        w->after_key = 0;
    }
    if (g->tool_name_len) {
        sb_jw_key(w, "tool_choice");
        sb_jw_obj(w);
        sb_jw_key(w, "type"); sb_jw_str(w, "function");
        sb_jw_key(w, "function");
        sb_jw_obj(w);
        sb_jw_key(w, "name"); sb_jw_strn(w, g->tools_own.p + g->tools_len, g->tool_name_len);
        sb_jw_obj_end(w);
        sb_jw_obj_end(w);
    } else if (g->tool_choice != RT_TOOLS_UNSET) {
        sb_jw_key(w, "tool_choice"); sb_jw_str(w, choices[g->tool_choice]);
    }
    if (g->parallel_tool_calls >= 0) { sb_jw_key(w, "parallel_tool_calls"); sb_jw_bool(w, g->parallel_tool_calls); }
    if (!g->logprobs) return;
    if (g->kind == RT_KIND_CHAT) {
        sb_jw_key(w, "logprobs"); sb_jw_bool(w, true);
        if (g->top_logprobs) { sb_jw_key(w, "top_logprobs"); sb_jw_int(w, g->top_logprobs); }
    } else {
        sb_jw_key(w, "logprobs"); sb_jw_int(w, g->top_logprobs);
    }
}

/* The OpenAI request body for g, encoded from the struct. Only parameters
 * the caller set are sent, so strict servers see nothing they do not know
 * unless a stage asked for it. json_schema is not sent (an OpenAI request
 * with one is refused for an upstream model: docs/config.md). */
static int build_body(rt_upcall *c, const rt_gen_req *g, const char *model, sb_jw *w, char *err) {
    const sb_sampling *sp = &g->sampling;
    c->stream = g->stream;
    c->chat = g->kind == RT_KIND_CHAT;
    c->logprobs = g->logprobs;
    sb_jw_obj(w);
    sb_jw_key(w, "model"); sb_jw_str(w, model);
    if (c->chat) {
        sb_jw_key(w, "messages");
        sb_jw_arr(w);
        for (size_t i = 0; i < g->n_msgs; i++)
            if (put_message(w, &g->msgs[i])) return sb_seterr(err, SB_EINVAL, "messages[%zu]: tool_calls unreadable", i);
        sb_jw_arr_end(w);
    } else {
        sb_jw_key(w, "prompt"); put_text(w, &g->prompt);
    }
    if (sp->max_tokens > 0) { sb_jw_key(w, "max_tokens"); sb_jw_int(w, sp->max_tokens); }
    if (sp->temperature >= 0) { sb_jw_key(w, "temperature"); sb_jw_num(w, sp->temperature); }
    if (sp->top_p >= 0) { sb_jw_key(w, "top_p"); sb_jw_num(w, sp->top_p); }
    if (sp->top_k >= 0) { sb_jw_key(w, "top_k"); sb_jw_int(w, sp->top_k); }
    if (sp->min_p >= 0) { sb_jw_key(w, "min_p"); sb_jw_num(w, sp->min_p); }
    if (sp->repeat_penalty >= 0) { sb_jw_key(w, "repeat_penalty"); sb_jw_num(w, sp->repeat_penalty); }
    if (g->has_seed) { sb_jw_key(w, "seed"); sb_jw_int(w, sp->seed); }
    if (g->n_stops) {
        sb_jw_key(w, "stop");
        sb_jw_arr(w);
        for (size_t i = 0; i < g->n_stops; i++) sb_jw_strn(w, g->stops[i], g->stop_lens[i]);
        sb_jw_arr_end(w);
    }
    put_tools(w, g);
    sb_jw_key(w, "stream"); sb_jw_bool(w, g->stream);
    sb_jw_obj_end(w);
    return w->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
}

static int start_request(rt_upcall *c, const sb_config_model *cm, const sb_jw *body, char *err) {
    sb_net_url u;
    if (sb_net_url_parse(cm->upstream, &u, NULL))
        return sb_seterr(err, SB_EINVAL, "upstream '%s' is not a valid URL", cm->upstream);
    if (u.https)
        return sb_seterr(err, SB_EUNSUP, "upstream %s: https is not supported by this build; "
                         "put a TLS-terminating proxy on this host and point upstream at it over http",
                         cm->upstream);
    size_t bl = strlen(u.path);
    while (bl && u.path[bl - 1] == '/') bl--;   /* ".../v1/" and ".../v1" are the same */
    /* The config loader caps a URL well below these sizes; truncation
     * would only shorten a message. */
    char path[UP_MAX_URL / 2], hosthdr[300];
    if (bl > sizeof path - 32) bl = sizeof path - 32;
    snprintf(path, sizeof path, "%.*s/%s", (int)bl, u.path, c->chat ? "chat/completions" : "completions");
    const char *lb = u.ipv6 ? "[" : "", *rb = u.ipv6 ? "]" : "";
    if (u.port_given) snprintf(hosthdr, sizeof hosthdr, "%s%.255s%s:%d", lb, u.host, rb, u.port);
    else snprintf(hosthdr, sizeof hosthdr, "%s%.255s%s", lb, u.host, rb);
    snprintf(c->url, sizeof c->url, "http://%s%s", hosthdr, path);

    const char *key = NULL;
    if (cm->api_key_env && !(key = getenv(cm->api_key_env))) {
        return sb_seterr(err, SB_EINVAL, "upstream model '%s': api_key_env %s is not set in the router's environment",
                         cm->name, cm->api_key_env);
    }
    c->conn = evhttp_connection_base_new(c->m->be->base, NULL, u.host, (ev_uint16_t)u.port);
    c->req = c->conn ? evhttp_request_new(on_response, c) : NULL;
    if (!c->req) return sb_seterr(err, SB_ENOMEM, "cannot create the HTTP request to %s", c->url);
    evhttp_connection_set_retries(c->conn, 0);
    evhttp_connection_set_max_body_size(c->conn, UP_MAX_BODY);
    /* Our own timer bounds the whole call; evhttp's idle timeout only
     * catches what slips past it. */
    struct timeval idle = { c->timeout_ms / 1000 + 5, 0 };
    evhttp_connection_set_timeout_tv(c->conn, &idle);
    evhttp_request_set_error_cb(c->req, on_error);
    if (c->stream) evhttp_request_set_chunked_cb(c->req, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
    evhttp_add_header(h, "Host", hosthdr);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Accept", c->stream ? "text/event-stream" : "application/json");
    evhttp_add_header(h, "User-Agent", "switchboard-router");
    if (key) {
        char auth[600];
        snprintf(auth, sizeof auth, "Bearer %s", key);
        evhttp_add_header(h, "Authorization", auth);
    }
    evbuffer_add(evhttp_request_get_output_buffer(c->req), body->p, body->len);
    struct evhttp_request *req = c->req;
    if (evhttp_make_request(c->conn, req, EVHTTP_REQ_POST, path)) {
        c->req = NULL;          /* dropped with the connection */
        return sb_seterr(err, SB_EIO, "cannot send the request to %s", c->url);
    }
    struct timeval tv = { c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000 };
    evtimer_add(c->timer, &tv);
    return 0;
}

int rt_upstream_call(rt_model *m, int method, const rt_gen_req *g, int timeout_ms, rt_token_fn on_token,
                     rt_up_done_fn on_done, void *arg, uint64_t *id_out, char *err) {
    const sb_config_model *cm = m->be->cfg ? sb_config_find_model(m->be->cfg, m->name) : NULL;
    if (!cm || !cm->upstream) return sb_seterr(err, SB_ENOTFOUND, "model '%s' has no upstream in the config", m->name);
    if (method != RT_CALL_GENERATE || !g)
        return sb_seterr(err, SB_EUNSUP, "'%s' needs a local model: upstream %s only generates (intent stages score "
                         "labels, which the OpenAI API cannot)", method == RT_CALL_SCORE ? "score" : "embed",
                         cm->upstream);
    rt_upcall *c = sb_calloc(1, sizeof *c);
    sb_jw body;
    sb_jw_init(&body);
    int rc = c ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!rc) {
        sb_jw_init(&c->text);
        c->m = m;
        c->id = ++m->be->next_id;
        c->on_token = on_token;
        c->on_done = on_done;
        c->arg = arg;
        c->t0 = sb_now_s();
        c->timeout_ms = timeout_ms > 0 && timeout_ms < cm->timeout_ms ? timeout_ms : cm->timeout_ms;
        c->timer = evtimer_new(m->be->base, on_timeout, c);
        c->reap = evtimer_new(m->be->base, reap_cb, c);
        c->body = evbuffer_new();
        if (!c->timer || !c->reap || !c->body) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (!rc) rc = build_body(c, g, cm->upstream_model, &body, err);
    if (!rc) rc = start_request(c, cm, &body, err);
    sb_jw_free(&body);
    if (rc) {
        if (c) { c->next = NULL; c->m = m; call_free(c); }
        return rc;
    }
    c->next = m->upcalls;
    m->upcalls = c;
    *id_out = c->id;
    return 0;
}

int rt_upstream_cancel(rt_model *m, uint64_t id) {
    for (rt_upcall *c = m->upcalls; c; c = c->next) {
        if (c->id != id || c->done) continue;
        c->done = true;         /* no callback from here on */
        evtimer_del(c->timer);
        /* Possibly inside an evhttp callback of this very connection (a
         * token event that made the client go away): free from the loop. */
        schedule_free(c);
        return 0;
    }
    return SB_ENOTFOUND;
}

void rt_upstream_free_all(rt_model *m) {
    while (m->upcalls) call_free(m->upcalls);
}

/* An answer handed over by the caller instead of evhttp (the fuzz target):
 * the same parsing, callbacks and one on_done, with no connection. */
void rt_upstream_feed(bool chat, bool stream, int code, const char *body, size_t len, size_t chunk,
                      rt_token_fn on_token, rt_up_done_fn on_done, void *arg) {
    rt_upcall c = { .id = 1, .chat = chat, .stream = stream, .on_token = on_token, .on_done = on_done,
                    .arg = arg, .t0 = sb_now_s() };
    snprintf(c.url, sizeof c.url, "http://upstream.test/v1");
    sb_jw_init(&c.text);
    struct evbuffer *in = evbuffer_new();
    c.body = evbuffer_new();
    if (!in || !c.body) {
        deliver_error(&c, SB_IPC_INTERNAL, "out of memory");
    } else {
        for (size_t off = 0; off < len;) {
            size_t n = chunk && chunk < len - off ? chunk : len - off;
            evbuffer_add(in, body + off, n);
            off += n;
            if (stream) take_chunk(&c, in, code);
        }
        evbuffer_add_buffer(c.body, in);
        finish_answer(&c, code);
    }
    if (in) evbuffer_free(in);
    if (c.body) evbuffer_free(c.body);
    sb_jw_free(&c.text);
    if (c.calls) rt_up_calls_free(c.calls);
    sb_free(c.calls);
}
