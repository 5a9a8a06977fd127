/* http.c - the evhttp front door: the route table every door registers
 * in, and what every request passes before its door: framing, shutdown,
 * route, method, API key, JSON body.
 *
 * The connection guard and the request object are http_conn.c, the reply
 * helpers http_reply.c; a route's handler is its door's (openai.c,
 * pipeapi.c, embeddings.c, trace.c, console.c, metrics.c).
 */
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "router/obs.h"
#include "router/router_internal.h"

enum { M_GET = 1, M_POST = 2, M_DELETE = 4 };

/* What a route serves of callers' words (docs/router.md, "Callers' words").
 * Reading them needs the admin role and is written to the audit log. */
enum {
    SHOWS_NONE,
    SHOWS_WORDS,                    /* always: admin, audited */
    SHOWS_WORDS_IF_SHOWN,           /* traces: only with console.show_caller_text: true (else masked) */
    SHOWS_OWN_WORDS,                /* a session: its owner's key or admin (the handler checks), audited */
};

/* One route. A handler gets the path after a prefix route's prefix ("" for
 * an exact one) and, for a route with `body`, the request's JSON object. */
typedef struct {
    const char *path;
    bool prefix;                    /* path is a prefix (ends in '/') */
    int methods;                    /* M_* */
    unsigned role;                  /* RT_ROLE_* a key needs when keys are configured; 0: open */
    bool body;                      /* the body is parsed (a JSON object) first */
    int route;                      /* RT_ROUTE_*: the label in /metrics */
    int shows;                      /* SHOWS_*: does it serve callers' words (to the methods in shows_to)? */
    int shows_to;                   /* M_* */
    void (*handle)(rt_req *q, const char *rest, const sb_json *body);
} route_def;

/* ------------------------------------------------------------ handlers */

static void chat(rt_req *q, const char *rest, const sb_json *body) { rt_handle_chat(q, body, RT_KIND_CHAT); }
static void completion(rt_req *q, const char *rest, const sb_json *body) {
    rt_handle_chat(q, body, RT_KIND_COMPLETION);
}
static void embeddings(rt_req *q, const char *rest, const sb_json *body) { rt_handle_embeddings(q, body); }
static void models(rt_req *q, const char *rest, const sb_json *body) { rt_handle_models(q); }
static void pipeline(rt_req *q, const char *rest, const sb_json *body) { rt_handle_pipeline(q, rest, body); }
static void health(rt_req *q, const char *rest, const sb_json *body) { rt_handle_health(q); }
static void metrics(rt_req *q, const char *rest, const sb_json *body) { rt_handle_metrics(q); }
static void calls(rt_req *q, const char *rest, const sb_json *body) {
    rt_handle_calls(q, rest, !strcmp(q->method, "POST"));
}
static void session(rt_req *q, const char *rest, const sb_json *body) {
    rt_handle_session(q, rest, !strcmp(q->method, "DELETE"));
}
static void feedback_tsv(rt_req *q, const char *rest, const sb_json *body) { rt_handle_feedback_tsv(q); }
static void privacy_erase(rt_req *q, const char *rest, const sb_json *body) { rt_handle_privacy_erase(q, body); }
static void console_events(rt_req *q, const char *rest, const sb_json *body) { rt_handle_console_events(q); }
static void console_state(rt_req *q, const char *rest, const sb_json *body) { rt_handle_console_state(q); }
static void console_handoffs(rt_req *q, const char *rest, const sb_json *body) { rt_handle_console_handoffs(q); }
static void console_page(rt_req *q, const char *rest, const sb_json *body) {
    if (!rt_console_static(q, q->path))
        rt_req_error(q, 404, "invalid_request_error", "not_found", "no route for %s", q->path);
}

/* The console's page needs no key (it is code, no data); everything it
 * shows needs the console role, the APIs callers use the client role.
 * docs/router.md lists the same table. */
static const route_def routes[] = {
    { "/v1/chat/completions", false, M_POST, RT_ROLE_CLIENT, true, RT_ROUTE_CHAT, SHOWS_NONE, 0, chat },
    { "/v1/completions", false, M_POST, RT_ROLE_CLIENT, true, RT_ROUTE_COMPLETIONS, SHOWS_NONE, 0, completion },
    { "/v1/embeddings", false, M_POST, RT_ROLE_CLIENT, true, RT_ROUTE_EMBEDDINGS, SHOWS_NONE, 0, embeddings },
    { "/v1/models", false, M_GET, RT_ROLE_CLIENT, false, RT_ROUTE_MODELS, SHOWS_NONE, 0, models },
    { "/v1/pipelines", false, M_GET, RT_ROLE_CLIENT, false, RT_ROUTE_MODELS, SHOWS_NONE, 0, models },
    { "/v1/tools", false, M_GET, RT_ROLE_CLIENT, false, RT_ROUTE_MODELS, SHOWS_NONE, 0, models },
    { "/v1/pipelines/", true, M_POST, RT_ROLE_CLIENT, true, RT_ROUTE_PIPELINES, SHOWS_NONE, 0, pipeline },
    { "/v1/sessions/", true, M_GET | M_DELETE, RT_ROLE_CLIENT | RT_ROLE_ADMIN, false, RT_ROUTE_PIPELINES,
      SHOWS_OWN_WORDS, M_GET, session },
    { "/health", false, M_GET, 0, false, RT_ROUTE_HEALTH, SHOWS_NONE, 0, health },
    { "/metrics", false, M_GET, 0, false, RT_ROUTE_METRICS, SHOWS_NONE, 0, metrics },
    { "/v1/calls", false, M_GET, RT_ROLE_CONSOLE | RT_ROLE_ADMIN, false, RT_ROUTE_CONSOLE,
      SHOWS_WORDS_IF_SHOWN, M_GET, calls },
    { "/v1/calls/", true, M_GET | M_POST, RT_ROLE_CONSOLE | RT_ROLE_ADMIN, false, RT_ROUTE_CONSOLE,
      SHOWS_WORDS_IF_SHOWN, M_GET, calls },
    { "/v1/feedback.tsv", false, M_GET, RT_ROLE_CONSOLE | RT_ROLE_ADMIN, false, RT_ROUTE_CONSOLE,
      SHOWS_WORDS, M_GET, feedback_tsv },
    { "/v1/privacy/erase", false, M_POST, RT_ROLE_ADMIN, true, RT_ROUTE_OTHER, SHOWS_WORDS, M_POST, privacy_erase },
    { "/v1/console/events", false, M_GET, RT_ROLE_CONSOLE | RT_ROLE_ADMIN, false, RT_ROUTE_CONSOLE,
      SHOWS_WORDS_IF_SHOWN, M_GET, console_events },
    { "/v1/console/state", false, M_GET, RT_ROLE_CONSOLE | RT_ROLE_ADMIN, false, RT_ROUTE_CONSOLE,
      SHOWS_WORDS_IF_SHOWN, M_GET, console_state },
    { "/v1/console/handoffs", false, M_GET, RT_ROLE_CONSOLE | RT_ROLE_ADMIN, false, RT_ROUTE_CONSOLE, SHOWS_NONE, 0,
      console_handoffs },
    { "/console", false, M_GET, 0, false, RT_ROUTE_CONSOLE, SHOWS_NONE, 0, console_page },
    { "/console/", true, M_GET, 0, false, RT_ROUTE_CONSOLE, SHOWS_NONE, 0, console_page },
};

static const route_def *route_of(const char *path) {
    for (size_t i = 0; i < SB_ARRAY_LEN(routes); i++) {
        const route_def *d = &routes[i];
        if (d->prefix ? !strncmp(path, d->path, strlen(d->path)) : !strcmp(path, d->path)) return d;
    }
    return NULL;
}

/* ---------------------------------------------------------------- checks */

static void unauthorized(rt_req *q) {
    evhttp_add_header(evhttp_request_get_output_headers(q->req), "WWW-Authenticate", "Bearer");
    rt_req_error(q, 401, "invalid_request_error", "invalid_api_key",
                 "missing or wrong API key (send 'Authorization: Bearer KEY')");
}

/* true: the request may go on; else it was answered. With two
 * Authorization headers evhttp would hand us the first, and a proxy in
 * front may have checked the other: which key the caller meant is not
 * ours to guess. A valid key without the route's role is a 403, not a
 * 401: the caller is known, the key is just not for this. */
static bool check_key(rt_req *q, unsigned role) {
    rt *r = q->r;
    if (!r->keys) {
        q->key_roles = RT_ROLE_CLIENT | RT_ROLE_CONSOLE | RT_ROLE_ADMIN;   /* an open gateway */
        return true;
    }
    const char *h = NULL;
    int n = 0;
    for (const struct evkeyval *kv = evhttp_request_get_input_headers(q->req)->tqh_first; kv; kv = kv->next.tqe_next)
        if (!strcasecmp(kv->key, "Authorization") && !n++) h = kv->value;
    if (n > 1) {
        rt_req_error(q, 400, "invalid_request_error", "duplicate_header",
                     "the request has %d Authorization headers; send one", n);
        return false;
    }
    const rt_key *k = h && !strncasecmp(h, "Bearer ", 7) ? rt_keys_match(r->keys, h + 7, strlen(h + 7)) : NULL;
    if (!k) {
        unauthorized(q);
        return false;
    }
    snprintf(q->key_name, sizeof q->key_name, "%s", k->name);
    q->key_roles = k->roles;
    if (!(k->roles & role)) {
        unsigned first = role & -role;      /* a route open to several roles names them all */
        rt_req_error(q, 403, "permission_error", "insufficient_role", "API key '%s' does not have the %s%s%s role",
                     k->name, rt_role_name(first), role != first ? " or the " : "",
                     role != first ? rt_role_name(role & ~first) : "");
        return false;
    }
    return true;
}

/* A route that serves callers' words: admin only, and audited (the
 * session route lets its owner in too, and checks that itself). */
static bool check_words(rt_req *q, const route_def *d, int method) {
    if (!(d->shows_to & method)) return true;
    if (d->shows == SHOWS_WORDS_IF_SHOWN && !(q->r->obs && q->r->obs->show_text)) return true;
    if (d->shows != SHOWS_OWN_WORDS && !(q->key_roles & RT_ROLE_ADMIN)) {
        rt_req_error(q, 403, "permission_error", "insufficient_role",
                     "%s serves callers' words: API key '%s' does not have the admin role", q->path, q->key_name);
        return false;
    }
    if (rt_audit(q)) {
        rt_req_error(q, 500, "server_error", "audit_unavailable",
                     "the audit log cannot be written (see the log): callers' words are not served unaudited");
        return false;
    }
    return true;
}

static bool check_method(rt_req *q, const route_def *d, int method) {
    if (d->methods & method) return true;
    char allow[32] = "", takes[32] = "";
    static const char *const names[] = { "GET", "POST", "DELETE" };
    for (int i = 0; i < 3; i++)
        if (d->methods & (1 << i)) {
            snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s", *allow ? ", " : "", names[i]);
            snprintf(takes + strlen(takes), sizeof takes - strlen(takes), "%s%s", *takes ? " or " : "", names[i]);
        }
    evhttp_add_header(evhttp_request_get_output_headers(q->req), "Allow", allow);
    rt_req_error(q, 405, "invalid_request_error", "method_not_allowed", "%s takes %s", q->path, takes);
    return false;
}

/* ------------------------------------------------------------- dispatch */

static void on_request(struct evhttp_request *req, void *arg) {
    rt *r = arg;
    if (!rt_conn_begin(r, req)) {           /* our 4xx is out; evhttp's reply will fail */
        evhttp_send_reply(req, 400, "Bad Request", NULL);
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int method = cmd == EVHTTP_REQ_GET ? M_GET : cmd == EVHTTP_REQ_POST ? M_POST : cmd == EVHTTP_REQ_DELETE ? M_DELETE : 0;
    const route_def *d = route_of(path);
    rt_req *q = rt_req_new(r, req, d ? d->route : RT_ROUTE_OTHER);
    if (!q) { evhttp_send_error(req, 500, "out of memory"); return; }
    snprintf(q->path, sizeof q->path, "%s", path);
    q->method = method == M_GET ? "GET" : method == M_POST ? "POST" : method == M_DELETE ? "DELETE" : "OTHER";
    if (r->stopping) {
        rt_req_retry_after(q, 5);
        rt_req_error(q, 503, "server_busy", "shutting_down", "the router is shutting down");
        return;
    }
    if (!d) {
        rt_req_error(q, 404, "invalid_request_error", "not_found", "no route for %s", path);
        return;
    }
    if (!check_method(q, d, method) || (d->role && !check_key(q, d->role)) || !check_words(q, d, method)) return;
    const char *rest = d->prefix ? path + strlen(d->path) : "";
    if (!d->body) {
        d->handle(q, rest, NULL);
        return;
    }
    sb_json_doc *body = rt_req_body_json(q);
    if (!body) return;
    d->handle(q, rest, sb_json_root(body));
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
    evhttp_set_bevcb(r->http, rt_conn_bev_new, r);
    evhttp_set_gencb(r->http, on_request, r);
    errno = 0;
    struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(r->http, host, (ev_uint16_t)port);
    if (!bound)
        return sb_seterr(err, SB_EIO, "cannot listen on %s:%d: %s", host, port,
                         errno ? strerror(errno) : "not an address of this host");
    /* evhttp listens with a backlog of 128. A burst of more connections than
     * that, while the loop is slow to accept (a loaded box), overflows the
     * queue and the kernel resets some of them; the system's maximum
     * (net.core.somaxconn) lets them wait to be accepted and answered (503
     * when too many). listen() again only changes the backlog. */
    if (listen(evhttp_bound_socket_get_fd(bound), SOMAXCONN))
        sb_warn("HTTP listen backlog stays at 128: %s", strerror(errno));
    return 0;
}

void rt_http_stop(rt *r) {
    if (r->http) evhttp_free(r->http);
    r->http = NULL;
    rt_conn_drop_all(r);
}
