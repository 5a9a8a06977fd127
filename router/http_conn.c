/* http_conn.c - one HTTP connection and one request on it: the guard
 * that answers what evhttp would answer badly, and the request object
 * (rt_req) from its arrival to its log line.
 *
 * evhttp enforces the body and header limits and the read timeout, but in
 * libevent 2.1 it answers an oversized body or an unreadable framing with
 * an HTML page and a slow client with a silent close. Clients of an
 * OpenAI-style API expect a JSON error body and a status, so each
 * connection gets a small guard: we create its bufferevent
 * (evhttp_set_bevcb), watch the bytes that arrive, and when a request's
 * headers announce an ambiguous body (400) or too large a body (413), grow
 * past the header limit (431) or a request stays unfinished for
 * body_timeout_ms (408), we write the JSON error ourselves and half-close
 * the socket; evhttp's own answer that follows then fails to write and it
 * frees the connection.
 *
 * Guard lifetime: we hold a reference on each bufferevent, so it outlives
 * evhttp's bufferevent_free(); the sweep notices the callbacks evhttp cleared
 * and drops our reference (which closes the socket).
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

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
    rt_error_json(&w, "invalid_request_error", code, msg, true);
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
    else if (status == 431) m->rejected_431++;
    rt_metrics_request(m, RT_ROUTE_OTHER, status, sb_now_s() - g->t_start);
    sb_info("- (request refused before its end) %d %.1f ms: %s", status, (sb_now_s() - g->t_start) * 1e3, msg);
}

/* What a complete header block says about the body, read as evhttp will
 * read it (a line starting with a space or tab continues the previous
 * header, joined by one space). Where the body ends must be unambiguous:
 * evhttp reads the first Content-Length (or chunked, ignoring it), and a
 * proxy in front that read another one would take our body's tail for a
 * new request (smuggling). Checked here, before evhttp parses the block,
 * because evhttp answers some of these itself, with an HTML page.
 * Identical repeated lengths are allowed (RFC 9112 6.3). */
typedef struct {
    long long content_length;   /* the first one; -1: none or not a number */
    const char *framing;        /* why the framing is ambiguous, or NULL */
} head_info;

enum { H_OTHER, H_LENGTH, H_CHUNKING };

typedef struct {
    int kind;                   /* H_* of the header being read */
    char value[64];             /* its value so far (longer ones are never valid) */
    size_t len;
    bool cut;                   /* it did not fit */
    int n_length, n_chunking;
    char length[64];            /* the first Content-Length */
} head_scan;

static void head_value_add(head_scan *s, const char *p, size_t n) {
    while (n && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r')) n--;
    if (s->len && n) {
        if (s->len + 1 < sizeof s->value) s->value[s->len++] = ' ';
        else s->cut = true;
    }
    size_t k = n < sizeof s->value - 1 - s->len ? n : sizeof s->value - 1 - s->len;
    memcpy(s->value + s->len, p, k);
    s->len += k;
    s->value[s->len] = '\0';
    if (k < n) s->cut = true;
}

/* The header just read is complete: judge it. */
static void head_end(head_scan *s, head_info *hi) {
    if (hi->framing || s->kind == H_OTHER) return;
    if (s->kind == H_CHUNKING) {
        if (s->n_chunking++ || s->cut || strcasecmp(s->value, "chunked"))
            hi->framing = "a Transfer-Encoding other than one 'chunked'";
    } else if (s->cut || !s->len || strspn(s->value, "0123456789") != s->len) {
        hi->framing = "a Content-Length that is not a plain number";
    } else if (s->n_length++ && strcmp(s->length, s->value)) {
        hi->framing = "two different Content-Length headers";
    } else if (s->n_length == 1) {
        memcpy(s->length, s->value, s->len + 1);
        hi->content_length = s->len <= 18 ? strtoll(s->value, NULL, 10) : LLONG_MAX;   /* beyond any limit */
    }
    if (!hi->framing && s->n_length && s->n_chunking) hi->framing = "both Content-Length and Transfer-Encoding";
}

/* h: the block without its final empty line; its first line is the request line. */
static void head_read(const char *h, size_t n, head_info *hi) {
    head_scan s = { .kind = H_OTHER };
    hi->content_length = -1;
    hi->framing = NULL;
    const char *p = memchr(h, '\n', n), *end = h + n;
    for (p = p ? p + 1 : end; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        if (*p == ' ' || *p == '\t') {
            if (s.kind != H_OTHER) head_value_add(&s, p, (size_t)(eol - p));
        } else {
            head_end(&s, hi);
            const char *colon = memchr(p, ':', (size_t)(eol - p));
            size_t kl = colon ? (size_t)(colon - p) : 0;
            s.kind = kl == 14 && !strncasecmp(p, "Content-Length", 14)      ? H_LENGTH
                     : kl == 17 && !strncasecmp(p, "Transfer-Encoding", 17) ? H_CHUNKING
                                                                            : H_OTHER;
            s.len = 0;
            s.cut = false;
            s.value[0] = '\0';
            if (s.kind != H_OTHER) head_value_add(&s, colon + 1, (size_t)(eol - colon - 1));
        }
        p = eol + 1;
    }
    head_end(&s, hi);
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
        head_info hi;
        head_read(g->hdr, (size_t)(endh - g->hdr) + 2, &hi);
        char msg[160];
        if (hi.framing) {
            /* Nothing after this request can be parsed: the connection closes. */
            snprintf(msg, sizeof msg, "the request has %s", hi.framing);
            guard_reject(g, 400, "Bad Request", "bad_framing", msg);
        } else if (hi.content_length > (long long)r->max_body) {
            snprintf(msg, sizeof msg, "request body of %lld bytes exceeds the limit of %zu bytes", hi.content_length,
                     r->max_body);
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

struct bufferevent *rt_conn_bev_new(struct event_base *base, void *arg) {
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

bool rt_conn_begin(rt *r, struct evhttp_request *req) {
    rt_guard *g = guard_of(r, req);
    if (!g) return true;                /* unguarded (out of memory at accept): served as is */
    g->state = G_HANDLING;
    evhttp_request_set_on_complete_cb(req, on_request_complete, g);
    if (g->rejected) return false;
    watch_start(g);
    return true;
}

void rt_conn_drop_all(rt *r) {
    for (size_t i = r->n_guards; i-- > 0;) guard_drop(r, i);
    sb_free(r->guards);
    r->guards = NULL;
    r->cap_guards = 0;
}

/* ------------------------------------------------------------ requests */

void rt_req_done(rt_req *q) {
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
    rt_turn_end(q);
    rt_privacy_free(q->privacy);
    sb_jw_free(&q->out);
    sb_free(q);
}

static void finish_gone(evutil_socket_t fd, short what, void *arg) {
    rt_req *q = arg;
    /* evhttp detached the request from its dead connection; it is ours. */
    if (q->req) evhttp_request_free(q->req);
    q->req = NULL;
    if (!q->status || q->status < 400) q->status = 499;
    rt_req_done(q);
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

void rt_req_set_header(rt_req *q, const char *name, const char *value) {
    if (q->req) evhttp_add_header(evhttp_request_get_output_headers(q->req), name, value);
}

/* Detach from the connection before the final send: once evhttp owns the
 * reply, our close callback must not fire on a freed request. */
void rt_req_detach(rt_req *q) {
    if (q->timer) evtimer_del(q->timer);
    watch_stop(guard_of(q->r, q->req));     /* a FIN now must not cut the reply short */
    evhttp_connection_set_closecb(evhttp_request_get_connection(q->req), NULL, NULL);
}
