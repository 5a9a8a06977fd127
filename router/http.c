/* http.c - the evhttp front door: limits, errors, auth, routing, logging.
 *
 * evhttp enforces the body and header limits and the read timeout, but in
 * libevent 2.1 it answers an oversized body with an HTML page and a slow
 * client with a silent close. Clients of an OpenAI-style API expect a JSON
 * error body and a status, so each connection gets a small guard: we create
 * its bufferevent (evhttp_set_bevcb), watch the bytes that arrive, and when a
 * request's headers announce too large a body (413), grow past the header
 * limit (431) or a request stays unfinished for body_timeout_ms (408), we
 * write the JSON error ourselves and half-close the socket; evhttp's own
 * answer that follows then fails to write and it frees the connection.
 *
 * Guard lifetime: we hold a reference on each bufferevent, so it outlives
 * evhttp's bufferevent_free(); the sweep notices the callbacks evhttp cleared
 * and drops our reference (which closes the socket).
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "router/obs.h"
#include "router/router_internal.h"

enum { G_IDLE, G_READING, G_HANDLING };

struct rt_guard {
    rt *r;
    struct bufferevent *bev;
    struct evbuffer_cb_entry *cbe;
    int state;
    bool rejected, hdr_done;
    double t_start;
    char *hdr;                  /* the current request's header bytes so far */
    size_t hdr_len;
    struct event *watch;        /* while a request is answered: the client's FIN or RST */
};

/* ------------------------------------------------------------- guards */

static void guard_reject(rt_guard *g, int status, const char *reason, const char *code, const char *msg) {
    if (g->rejected) return;
    g->rejected = true;
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "error");
    sb_jw_obj(&w);
    sb_jw_key(&w, "message");
    sb_jw_str(&w, msg);
    sb_jw_key(&w, "type");
    sb_jw_str(&w, "invalid_request_error");
    sb_jw_key(&w, "param");
    sb_jw_null(&w);
    sb_jw_key(&w, "code");
    sb_jw_str(&w, code);
    sb_jw_obj_end(&w);
    sb_jw_obj_end(&w);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason, w.len);
    evutil_socket_t fd = bufferevent_getfd(g->bev);
    if (fd >= 0 && !w.oom) {
        /* A few hundred bytes into an idle socket's send buffer: never
         * blocks. Half-close so the client sees the end of the reply. */
        (void)!send(fd, head, (size_t)hl, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)!send(fd, w.p, w.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
    }
    sb_jw_free(&w);
    rt_metrics *m = &g->r->metrics;
    if (status == 408) m->rejected_408++;
    else if (status == 413) m->rejected_413++;
    else m->rejected_431++;
    rt_metrics_request(m, RT_ROUTE_OTHER, status, sb_now_s() - g->t_start);
    sb_info("- (request not finished) %d %.1f ms: %s", status, (sb_now_s() - g->t_start) * 1e3, msg);
}

/* The Content-Length of a complete header block, or -1. */
static long long header_content_length(const char *h, size_t n) {
    const char *p = h, *end = h + n;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        if ((size_t)(eol - p) > 15 && !strncasecmp(p, "content-length:", 15)) {
            char num[32];
            size_t k = 0;
            for (const char *q = p + 15; q < eol && k + 1 < sizeof num; q++)
                if (*q != ' ' && *q != '\t' && *q != '\r') num[k++] = *q;
            num[k] = '\0';
            char *e;
            long long v = strtoll(num, &e, 10);
            return *e || k == 0 ? -1 : v;
        }
        p = eol + 1;
    }
    return -1;
}

static void guard_scan(rt_guard *g, struct evbuffer *buf, size_t added) {
    rt *r = g->r;
    if (g->hdr_done || g->rejected) return;
    size_t cap = r->max_headers + 8;
    size_t len = evbuffer_get_length(buf);
    size_t take = added < len ? added : len;
    if (g->hdr_len + take > cap) take = cap - g->hdr_len;
    if (take) {
        struct evbuffer_ptr pos;
        evbuffer_ptr_set(buf, &pos, len - (added < len ? added : len), EVBUFFER_PTR_SET);
        if (evbuffer_copyout_from(buf, &pos, g->hdr + g->hdr_len, take) > 0) g->hdr_len += take;
    }
    const char *endh = memmem(g->hdr, g->hdr_len, "\r\n\r\n", 4);
    if (endh) {
        g->hdr_done = true;
        long long cl = header_content_length(g->hdr, (size_t)(endh - g->hdr) + 2);
        if (cl > (long long)r->max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "request body of %lld bytes exceeds the limit of %zu bytes", cl, r->max_body);
            guard_reject(g, 413, "Payload Too Large", "body_too_large", msg);
        }
    } else if (g->hdr_len >= r->max_headers) {
        char msg[160];
        snprintf(msg, sizeof msg, "request headers exceed the limit of %zu bytes", r->max_headers);
        guard_reject(g, 431, "Request Header Fields Too Large", "headers_too_large", msg);
    }
}

static void guard_start_request(rt_guard *g) {
    g->state = G_READING;
    g->t_start = sb_now_s();
    g->hdr_len = 0;
    g->hdr_done = false;
}

static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    rt_guard *g = arg;
    if (!info->n_added) return;
    if (g->state == G_IDLE) guard_start_request(g);
    if (g->state == G_READING) guard_scan(g, buf, info->n_added);
}

static struct bufferevent *make_bev(struct event_base *base, void *arg) {
    rt *r = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return NULL;
    if (r->n_guards == r->cap_guards) {
        size_t cap = r->cap_guards ? r->cap_guards * 2 : 64;
        rt_guard **ng = sb_realloc(r->guards, cap * sizeof *ng);
        if (!ng) return bev;            /* unguarded, still served */
        r->guards = ng;
        r->cap_guards = cap;
    }
    rt_guard *g = sb_calloc(1, sizeof *g);
    char *hdr = sb_malloc(r->max_headers + 8);
    if (!g || !hdr) {
        sb_free(g);
        sb_free(hdr);
        return bev;
    }
    g->r = r;
    g->bev = bev;
    g->hdr = hdr;
    g->cbe = evbuffer_add_cb(bufferevent_get_input(bev), on_input, g);
    bufferevent_incref(bev);
    r->guards[r->n_guards++] = g;
    return bev;
}

/* evhttp stops reading a connection once it has a request's body, so it
 * notices a client that hung up only when a write fails: for a streamed
 * reply at the next token, for a whole one after all the compute. While a
 * request is answered we watch the socket ourselves; EOF or an error is
 * handed to evhttp as if its bufferevent had seen it - the path a failed
 * write takes (close callback, job cancelled, 499). Bytes instead of EOF
 * are a pipelined request that evhttp reads after the reply: we stop
 * watching (level-triggered, they would wake us forever), so such a
 * client is noticed only by a failed write, as before. */
static void watch_stop(rt_guard *g) {
    if (g && g->watch) event_free(g->watch);
    if (g) g->watch = NULL;
}

static void on_watch(evutil_socket_t fd, short what, void *arg) {
    rt_guard *g = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        event_add(g->watch, NULL);
        return;
    }
    watch_stop(g);
    if (n <= 0) bufferevent_trigger_event(g->bev, BEV_EVENT_READING | BEV_EVENT_EOF, 0);
}

static void watch_start(rt_guard *g) {
    evutil_socket_t fd = bufferevent_getfd(g->bev);
    watch_stop(g);
    if (fd < 0) return;
    g->watch = event_new(bufferevent_get_base(g->bev), fd, EV_READ, on_watch, g);
    if (g->watch) event_add(g->watch, NULL);
}

static rt_guard *guard_of(rt *r, struct evhttp_request *req) {
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    for (size_t i = 0; bev && i < r->n_guards; i++)
        if (r->guards[i]->bev == bev) return r->guards[i];
    return NULL;
}

static void guard_drop(rt *r, size_t i) {
    rt_guard *g = r->guards[i];
    watch_stop(g);
    evbuffer_remove_cb_entry(bufferevent_get_input(g->bev), g->cbe);
    bufferevent_decref(g->bev);
    sb_free(g->hdr);
    sb_free(g);
    r->guards[i] = r->guards[--r->n_guards];
}

void rt_http_sweep(rt *r) {
    double now = sb_now_s();
    for (size_t i = 0; i < r->n_guards;) {
        rt_guard *g = r->guards[i];
        bufferevent_data_cb rd, wr;
        bufferevent_event_cb ev;
        void *arg;
        bufferevent_getcb(g->bev, &rd, &wr, &ev, &arg);
        if (!ev) { guard_drop(r, i); continue; }        /* evhttp freed it */
        if (g->state == G_READING && !g->rejected && (now - g->t_start) * 1e3 > r->body_timeout_ms) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request was not received completely within %d ms", r->body_timeout_ms);
            guard_reject(g, 408, "Request Timeout", "request_timeout", msg);
        }
        i++;
    }
}

static void on_request_complete(struct evhttp_request *req, void *arg) {
    rt_guard *g = arg;
    g->state = G_IDLE;
    watch_stop(g);
    /* A pipelined request may already be buffered: its clock starts now. */
    struct evbuffer *in = bufferevent_get_input(g->bev);
    size_t n = evbuffer_get_length(in);
    if (n) {
        guard_start_request(g);
        guard_scan(g, in, n);
    }
}

/* ------------------------------------------------------------ requests */

static void req_log_and_free(rt_req *q) {
    rt *r = q->r;
    double dt = sb_now_s() - q->t0;
    rt_metrics_request(&r->metrics, q->route, q->status, dt);
    if (q->status < 400 && q->t_model > 0 && q->t_model <= dt) {
        r->metrics.overhead_sum += dt - q->t_model;
        r->metrics.overhead_n++;
    }
    sb_info("%s %s %d %.1f ms%s", q->method ? q->method : "-", q->path, q->status, dt * 1e3,
            q->gone ? " (client gone)" : "");
    if (q->timer) event_free(q->timer);
    if (q->prev) q->prev->next = q->next; else r->reqs = q->next;
    if (q->next) q->next->prev = q->prev;
    if (q->route != RT_ROUTE_METRICS && q->route != RT_ROUTE_HEALTH && q->route != RT_ROUTE_CONSOLE)
        r->metrics.in_flight--;
    sb_free(q->cache_key);
    sb_free(q->cache_input);
    sb_free(q->cache_ns);
    sb_free(q->cache_fp);
    sb_free(q->cache_params);
    sb_jw_free(&q->out);
    sb_free(q);
}

static void finish_gone(evutil_socket_t fd, short what, void *arg) {
    rt_req *q = arg;
    /* evhttp detached the request from its dead connection; it is ours. */
    if (q->req) evhttp_request_free(q->req);
    q->req = NULL;
    if (!q->status || q->status < 400) q->status = 499;
    req_log_and_free(q);
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg) {
    rt_req *q = arg;
    if (q->gone) return;
    q->gone = true;
    if (q->on_gone) q->on_gone(q);
    struct timeval now = { 0, 0 };
    event_base_once(q->r->ex.be.base, -1, EV_TIMEOUT, finish_gone, q, &now);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg) {
    rt_req *q = arg;
    if (q->gone) return;
    if (q->on_gone) q->on_gone(q);
    q->on_gone = NULL;
    if (q->streaming) {
        static const char chunk[] = "{\"error\":{\"message\":\"request deadline passed\",\"type\":\"timeout\",\"code\":504}}";
        rt_req_sse_send(q, chunk, sizeof chunk - 1);
        rt_req_sse_end(q);
    } else {
        rt_req_error(q, 504, "timeout", "timeout", "the request did not finish within its deadline");
    }
}

rt_req *rt_req_new(rt *r, struct evhttp_request *req, int route) {
    rt_req *q = sb_calloc(1, sizeof *q);
    if (!q) return NULL;
    q->r = r;
    q->req = req;
    q->route = route;
    q->t0 = sb_now_s();
    sb_jw_init(&q->out);
    q->next = r->reqs;
    if (r->reqs) r->reqs->prev = q;
    r->reqs = q;
    /* Probes do not count: /metrics would otherwise always see itself; nor
     * does the console, whose live feed stays open. */
    if (route != RT_ROUTE_METRICS && route != RT_ROUTE_HEALTH && route != RT_ROUTE_CONSOLE) r->metrics.in_flight++;
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), on_conn_close, q);
    return q;
}

void rt_req_set_deadline(rt_req *q, int ms) {
    if (ms <= 0) return;
    if (!q->timer) q->timer = evtimer_new(q->r->ex.be.base, on_deadline, q);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    if (q->timer) evtimer_add(q->timer, &tv);
}

const char *rt_req_header(rt_req *q, const char *name) {
    return q->req ? evhttp_find_header(evhttp_request_get_input_headers(q->req), name) : NULL;
}

/* Detach from the connection before the final send: once evhttp owns the
 * reply, our close callback must not fire on a freed request. */
static void detach(rt_req *q) {
    if (q->timer) evtimer_del(q->timer);
    watch_stop(guard_of(q->r, q->req));     /* a FIN now must not cut the reply short */
    evhttp_connection_set_closecb(evhttp_request_get_connection(q->req), NULL, NULL);
}

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
    detach(q);
    evhttp_send_reply(q->req, status, NULL, b);
    if (b) evbuffer_free(b);
    q->req = NULL;
    req_log_and_free(q);
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
        sb_jw_obj(&w);
        sb_jw_key(&w, "error");
        sb_jw_obj(&w);
        sb_jw_key(&w, "message"); sb_jw_str(&w, msg);
        sb_jw_key(&w, "type"); sb_jw_str(&w, type);
        sb_jw_key(&w, "code"); sb_jw_str(&w, code);
        sb_jw_obj_end(&w);
        sb_jw_obj_end(&w);
        if (!w.oom) rt_req_sse_send(q, w.p, w.len);
        sb_jw_free(&w);
        q->status = status;
        rt_req_sse_end(q);
        return;
    }
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    sb_jw_obj(w);
    sb_jw_key(w, "error");
    sb_jw_obj(w);
    sb_jw_key(w, "message"); sb_jw_str(w, msg);
    sb_jw_key(w, "type"); sb_jw_str(w, type);
    sb_jw_key(w, "param"); sb_jw_null(w);
    sb_jw_key(w, "code"); sb_jw_str(w, code);
    sb_jw_obj_end(w);
    sb_jw_obj_end(w);
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
    detach(q);
    evhttp_send_reply_end(q->req);
    q->req = NULL;
    req_log_and_free(q);
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

/* ------------------------------------------------------------- routing */

/* Where the body ends must be unambiguous. evhttp reads the first
 * Content-Length (or chunked, ignoring it); a proxy in front that read the
 * other one would take our body's tail for a new request (smuggling).
 * NULL when clean; identical repeated lengths are allowed (RFC 9112 6.3). */
static const char *framing_problem(const struct evkeyvalq *h) {
    const char *cl = NULL, *te = NULL;
    for (const struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
        if (!strcasecmp(kv->key, "Content-Length")) {
            if (!kv->value[0] || strspn(kv->value, "0123456789") != strlen(kv->value))
                return "a Content-Length that is not a plain number";
            if (cl && strcmp(cl, kv->value)) return "two different Content-Length headers";
            cl = kv->value;
        } else if (!strcasecmp(kv->key, "Transfer-Encoding")) {
            if (te || strcasecmp(kv->value, "chunked")) return "a Transfer-Encoding other than one 'chunked'";
            te = kv->value;
        }
    }
    return cl && te ? "both Content-Length and Transfer-Encoding" : NULL;
}

static bool authorized(rt *r, struct evhttp_request *req) {
    if (!r->api_key) return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(r->api_key);
    return a == b && sb_ct_equal(h, r->api_key, a);
}

static void handle_health(rt_req *q) {
    rt *r = q->r;
    sb_jw *w = &q->out;
    int up = 0, local = 0;
    sb_jw_obj(w);
    sb_jw_key(w, "models");
    sb_jw_obj(w);
    for (size_t i = 0; i < r->ex.be.n_models; i++) {
        rt_model *m = r->ex.be.models[i];
        if (m->removed) continue;
        sb_jw_key(w, m->name);
        sb_jw_obj(w);
        sb_jw_key(w, "status");
        sb_jw_str(w, m->remote ? "remote" : m->up ? "up" : "down");
        if (!m->remote) {
            local++;
            up += m->up;
            sb_jw_key(w, "pid"); sb_jw_int(w, m->pid);
            sb_jw_key(w, "queued"); sb_jw_int(w, m->n_waiting);
            sb_jw_key(w, "in_flight"); sb_jw_int(w, m->n_inflight);
            sb_jw_key(w, "capacity"); sb_jw_int(w, rt_model_capacity(m));
            sb_jw_key(w, "restarts"); sb_jw_int(w, (int64_t)m->restarts);
        }
        sb_jw_obj_end(w);
    }
    sb_jw_obj_end(w);
    sb_jw_key(w, "status");
    sb_jw_str(w, up == local ? "ok" : up ? "degraded" : "down");
    sb_jw_key(w, "uptime_s");
    sb_jw_num(w, sb_now_s() - r->started);
    sb_jw_obj_end(w);
    rt_req_json(q, up == local ? 200 : 503, w->p, w->len, NULL);
}

static void handle_metrics(rt_req *q) {
    sb_jw *w = &q->out;
    rt_metrics_render(q->r, w);
    if (q->gone) return;
    evhttp_add_header(evhttp_request_get_output_headers(q->req), "Content-Type", "text/plain; version=0.0.4");
    struct evbuffer *b = evbuffer_new();
    if (b) evbuffer_add(b, w->p, w->len);
    q->status = 200;
    detach(q);
    evhttp_send_reply(q->req, 200, "OK", b);
    if (b) evbuffer_free(b);
    q->req = NULL;
    req_log_and_free(q);
}

static void unauthorized(rt_req *q) {
    evhttp_add_header(evhttp_request_get_output_headers(q->req), "WWW-Authenticate", "Bearer");
    rt_req_error(q, 401, "invalid_request_error", "invalid_api_key",
                 "missing or wrong API key (send 'Authorization: Bearer KEY')");
}

/* The console's routes (obs.h): the page itself needs no key (it is code,
 * no data); everything it shows does. */
static void console_route(rt_req *q, const char *path, bool is_get, bool is_post) {
    bool calls = !strncmp(path, "/v1/calls/", 10);
    if (is_get && rt_console_static(q, path)) return;
    if (!is_get && !(is_post && calls)) {
        evhttp_add_header(evhttp_request_get_output_headers(q->req), "Allow", "GET");
        rt_req_error(q, 405, "invalid_request_error", "method_not_allowed", "%s takes GET", path);
        return;
    }
    if (!authorized(q->r, q->req)) unauthorized(q);
    else if (calls) rt_handle_calls(q, path + 10, is_post);
    else if (!strcmp(path, "/v1/calls")) rt_handle_calls(q, "", false);
    else if (!strcmp(path, "/v1/feedback.tsv")) rt_handle_feedback_tsv(q);
    else if (!strcmp(path, "/v1/console/events")) rt_handle_console_events(q);
    else if (!strcmp(path, "/v1/console/state")) rt_handle_console_state(q);
    else rt_req_error(q, 404, "invalid_request_error", "not_found", "no route for %s", path);
}

static void on_request(struct evhttp_request *req, void *arg) {
    rt *r = arg;
    rt_guard *g = guard_of(r, req);
    if (g) {
        g->state = G_HANDLING;
        evhttp_request_set_on_complete_cb(req, on_request_complete, g);
        if (g->rejected) {          /* our 4xx is out; evhttp's reply will fail */
            evhttp_send_reply(req, 400, "Bad Request", NULL);
            return;
        }
        watch_start(g);
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    int route = RT_ROUTE_OTHER;
    const char *pipe_name = NULL;
    if (!strcmp(path, "/v1/chat/completions")) route = RT_ROUTE_CHAT;
    else if (!strcmp(path, "/v1/completions")) route = RT_ROUTE_COMPLETIONS;
    else if (!strcmp(path, "/v1/embeddings")) route = RT_ROUTE_EMBEDDINGS;
    else if (!strcmp(path, "/v1/models") || !strcmp(path, "/v1/pipelines") || !strcmp(path, "/v1/tools"))
        route = RT_ROUTE_MODELS;
    else if (!strncmp(path, "/v1/pipelines/", 14)) { route = RT_ROUTE_PIPELINES; pipe_name = path + 14; }
    else if (!strcmp(path, "/health")) route = RT_ROUTE_HEALTH;
    else if (!strcmp(path, "/metrics")) route = RT_ROUTE_METRICS;
    else if (!strcmp(path, "/console") || !strncmp(path, "/console/", 9) || !strncmp(path, "/v1/console/", 12) ||
             !strcmp(path, "/v1/calls") || !strncmp(path, "/v1/calls/", 10) || !strcmp(path, "/v1/feedback.tsv"))
        route = RT_ROUTE_CONSOLE;
    rt_req *q = rt_req_new(r, req, route);
    if (!q) { evhttp_send_error(req, 500, "out of memory"); return; }
    snprintf(q->path, sizeof q->path, "%s", path);
    q->method = method == EVHTTP_REQ_GET ? "GET" : method == EVHTTP_REQ_POST ? "POST" : "OTHER";
    const char *framing = framing_problem(evhttp_request_get_input_headers(req));
    if (framing) {
        /* Close after the reply: bytes after this request are not parsed. */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        rt_req_error(q, 400, "invalid_request_error", "bad_framing", "the request has %s", framing);
        return;
    }
    if (r->stopping) {
        rt_req_retry_after(q, 5);
        rt_req_error(q, 503, "server_busy", "shutting_down", "the router is shutting down");
        return;
    }
    bool is_get = method == EVHTTP_REQ_GET, is_post = method == EVHTTP_REQ_POST;
    if (route == RT_ROUTE_OTHER) {
        rt_req_error(q, 404, "invalid_request_error", "not_found", "no route for %s", path);
        return;
    }
    if (route == RT_ROUTE_CONSOLE) { console_route(q, path, is_get, is_post); return; }
    bool want_get = route == RT_ROUTE_MODELS || route == RT_ROUTE_HEALTH || route == RT_ROUTE_METRICS;
    if ((want_get && !is_get) || (!want_get && !is_post)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", want_get ? "GET" : "POST");
        rt_req_error(q, 405, "invalid_request_error", "method_not_allowed", "%s takes %s", path,
                     want_get ? "GET" : "POST");
        return;
    }
    if (route == RT_ROUTE_HEALTH) { handle_health(q); return; }
    if (route == RT_ROUTE_METRICS) { handle_metrics(q); return; }
    if (!authorized(r, req)) { unauthorized(q); return; }
    if (route == RT_ROUTE_MODELS) { rt_handle_models(q); return; }
    sb_json_doc *body = rt_req_body_json(q);
    if (!body) return;
    const sb_json *root = sb_json_root(body);
    if (route == RT_ROUTE_PIPELINES) rt_handle_pipeline(q, pipe_name, root);
    else if (route == RT_ROUTE_EMBEDDINGS) rt_handle_embeddings(q, root);
    else rt_handle_chat(q, root, route == RT_ROUTE_CHAT ? RT_KIND_CHAT : RT_KIND_COMPLETION);
    sb_json_doc_free(body);
}

int rt_http_start(rt *r, const char *host, int port, char *err) {
    r->http = evhttp_new(r->ex.be.base);
    if (!r->http) return sb_seterr(err, SB_ENOMEM, "cannot create the HTTP server");
    evhttp_set_max_body_size(r->http, (ev_ssize_t)r->max_body);
    evhttp_set_max_headers_size(r->http, (ev_ssize_t)r->max_headers);
    /* evhttp's own timeout closes idle keep-alive connections and clients
     * that stop reading; it must be longer than ours, so the 408 goes first. */
    evhttp_set_timeout(r->http, r->body_timeout_ms / 1000 + 30);
    evhttp_set_flags(r->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_allowed_methods(r->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_bevcb(r->http, make_bev, r);
    evhttp_set_gencb(r->http, on_request, r);
    errno = 0;
    if (!evhttp_bind_socket_with_handle(r->http, host, (ev_uint16_t)port))
        return sb_seterr(err, SB_EIO, "cannot listen on %s:%d: %s", host, port,
                         errno ? strerror(errno) : "not an address of this host");
    return 0;
}

void rt_http_stop(rt *r) {
    if (r->http) evhttp_free(r->http);
    r->http = NULL;
    for (size_t i = r->n_guards; i-- > 0;) guard_drop(r, i);
    sb_free(r->guards);
    r->guards = NULL;
    r->cap_guards = 0;
}
