/* ask_http.c - `switchboard ask --url`: a minimal OpenAI-API client.
 *
 * One HTTP/1.1 POST on a plain TCP socket (no TLS: the gateway listens on
 * the local network), the response read with Content-Length, chunked
 * encoding or until close, and a streamed answer parsed as Server-Sent
 * Events ("data: {json}" lines, "data: [DONE]" at the end). Each body or
 * event is read by common/json.c's strict reader, for the few fields we
 * print (choices[0].delta.content, choices[0].message.content,
 * error.message).
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/ask_internal.h"
#include "common/sb_common.h"
#include "common/sb_json.h"
#include "common/sb_net.h"

#define MAX_HEADER_BYTES  (64u << 10)
#define MAX_BODY_BYTES    (16u << 20)   /* a non-streamed answer, one SSE event's data, a streamed answer */
#define MAX_SSE_LINE      (MAX_BODY_BYTES + 64)
#define CONNECT_TIMEOUT_MS 10000

/* Buffers are common's sb_jw used raw (sticky failure, NUL-terminated). */
typedef sb_jw buf;

static void buf_consume(buf *b, size_t n) {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    if (b->p) b->p[b->len] = '\0';
}

/* ------------------------------------------------------------- HTTP */

typedef struct {
    const sb_ask_req *q;
    int fd;
    int64_t deadline_ms;        /* -1: none */
    buf in;                     /* raw bytes read, not yet parsed */
    int status;
    bool chunked, sse, have_length, eof;
    size_t length;              /* Content-Length */
    buf body;                   /* non-SSE body */
    buf line;                   /* SSE: current line */
    buf data;                   /* SSE: the event's data lines */
    buf text;                   /* the answer so far (for --json) */
    char finish[32];
    bool done;                  /* [DONE] seen */
    bool failed;                /* an error event or a bad chunk */
    char last;
} http;

static int64_t now_ms(void) { return (int64_t)(sb_now_ns() / 1000000); }

/* ------------------------------------------------------ JSON reading */

/* choices[0] of an answer, parsed by the one strict reader (sb_json.h). */
static const sb_json *first_choice(const sb_json *root) {
    return sb_json_at(sb_json_get(root, "choices"), 0);
}

/* The text of a choice: choices[0].<field>.content (chat) or
 * choices[0].text (completions); NULL when neither is a string. */
static const sb_json *choice_text(const sb_json *choice, const char *field) {
    const sb_json *t = sb_json_get(sb_json_get(choice, field), "content");
    if (sb_json_type_of(t) != SB_JSON_STRING) t = sb_json_get(choice, "text");
    return sb_json_type_of(t) == SB_JSON_STRING ? t : NULL;
}

static void choice_finish(http *h, const sb_json *choice) {
    const char *f = sb_json_str(sb_json_get(choice, "finish_reason"));
    if (f) snprintf(h->finish, sizeof h->finish, "%s", f);
}


static int wait_fd(http *h, short events) {
    int t = h->deadline_ms < 0 ? -1 : (int)SB_MAX(0, h->deadline_ms - now_ms());
    struct pollfd pfd = { h->fd, events, 0 };
    int r;
    while ((r = poll(&pfd, 1, t)) < 0 && errno == EINTR) {}
    return r;
}

/* host, port and the API root's path ("/v1" appended unless the URL has it). */
static int parse_url(const char *url, sb_net_url *u, char *port, size_t pcap, char *path, size_t cap) {
    char why[SB_ERR_LEN];
    if (sb_net_url_parse(url, u, why)) {
        fprintf(stderr, "ask: --url expects http://HOST[:PORT][/PATH]: %s\n", why);
        return -1;
    }
    if (u->https) {
        fprintf(stderr, "ask: %s: https is not supported (the gateway is plain HTTP on a local address)\n", url);
        return -1;
    }
    snprintf(port, pcap, "%d", u->port);
    /* A base ending in /v1 is the API root already (as OpenAI clients take it). */
    size_t bl = strlen(u->path);
    while (bl && u->path[bl - 1] == '/') bl--;
    bool has_v1 = bl >= 3 && !memcmp(u->path + bl - 3, "/v1", 3);
    snprintf(path, cap, "%.*s%s", (int)bl, u->path, has_v1 ? "" : "/v1");
    return 0;
}

static int connect_to(http *h, const char *host, const char *port) {
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) { fprintf(stderr, "ask: %s:%s: %s\n", host, port, gai_strerror(rc)); return -1; }
    int64_t saved = h->deadline_ms;
    int64_t cd = now_ms() + CONNECT_TIMEOUT_MS;
    h->deadline_ms = saved < 0 || cd < saved ? cd : saved;
    int e = 0;
    for (ai = res; ai; ai = ai->ai_next) {
        h->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (h->fd < 0) { e = errno; continue; }
        if (connect(h->fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS && wait_fd(h, POLLOUT) == 1) {
            socklen_t l = sizeof e;
            getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &e, &l);
            if (!e) break;
        } else {
            e = errno ? errno : ETIMEDOUT;
        }
        close(h->fd);
        h->fd = -1;
    }
    freeaddrinfo(res);
    h->deadline_ms = saved;
    if (h->fd < 0) { fprintf(stderr, "ask: connect %s:%s: %s\n", host, port, strerror(e ? e : ETIMEDOUT)); return -1; }
    return 0;
}

static int send_all(http *h, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(h->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN && wait_fd(h, POLLOUT) == 1) continue;
        fprintf(stderr, "ask: sending the request: %s\n", w < 0 && errno != EAGAIN ? strerror(errno) : "timed out");
        return -1;
    }
    return 0;
}

/* More bytes into h->in: 1, 0 at EOF, -1 on error or timeout. */
static int read_more(http *h) {
    char tmp[16384];
    for (;;) {
        ssize_t r = recv(h->fd, tmp, sizeof tmp, 0);
        if (r > 0) { sb_jw_raw(&h->in, tmp, (size_t)r); return h->in.oom ? -1 : 1; }
        if (r == 0) { h->eof = true; return 0; }
        if (errno == EINTR) continue;
        if (errno != EAGAIN) { fprintf(stderr, "ask: recv: %s\n", strerror(errno)); return -1; }
        int pr = wait_fd(h, POLLIN);
        if (pr == 0) { fprintf(stderr, "ask: timed out waiting for the server\n"); return -1; }
        if (pr < 0) { fprintf(stderr, "ask: poll: %s\n", strerror(errno)); return -1; }
    }
}

static void print_text(http *h, const char *s, size_t n) {
    if (!n) return;
    if (h->text.len + n > MAX_BODY_BYTES) {
        fprintf(stderr, "ask: answer longer than %u MiB; stopped reading\n", MAX_BODY_BYTES >> 20);
        h->failed = true;
        return;
    }
    sb_jw_raw(&h->text, s, n);
    if (h->q->json) return;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    h->last = s[n - 1];
}

/* The error message of an OpenAI-style error body, or the body itself. */
static void report_error(const char *body, size_t n, int status) {
    sb_json_doc *doc = NULL;
    const char *msg = NULL;
    if (!sb_json_parse(body, n, &doc, NULL)) {
        const sb_json *e = sb_json_get(sb_json_root(doc), "error");
        msg = sb_json_str(sb_json_get(e, "message"));
        if (!msg) msg = sb_json_str(e);
    }
    if (msg) fprintf(stderr, "ask: HTTP %d: %s\n", status, msg);
    else if (n) fprintf(stderr, "ask: HTTP %d: %.*s\n", status, (int)SB_MIN(n, 500), body);
    else fprintf(stderr, "ask: HTTP %d: (empty body)\n", status);
    sb_json_doc_free(doc);
}

/* One SSE event's data: a chat.completion.chunk, or [DONE]. An event that
 * is not JSON carries nothing we print. */
static void sse_event(http *h) {
    const char *d = h->data.p ? h->data.p : "";
    if (!strcmp(d, "[DONE]")) { h->done = true; return; }
    if (!h->data.len) return;
    sb_json_doc *doc = NULL;
    if (sb_json_parse(d, h->data.len, &doc, NULL)) return;
    const sb_json *root = sb_json_root(doc);
    if (sb_json_get(root, "error")) {
        report_error(d, h->data.len, h->status);
        h->failed = true;
    } else {
        const sb_json *choice = first_choice(root), *t = choice_text(choice, "delta");
        if (t) print_text(h, sb_json_str(t), sb_json_len(t));
        choice_finish(h, choice);
    }
    sb_json_doc_free(doc);
}

/* Body bytes, after transfer decoding. */
static void body_bytes(http *h, const char *p, size_t n) {
    if (!h->sse) {
        if (h->body.len + n > MAX_BODY_BYTES) { h->failed = true; return; }
        sb_jw_raw(&h->body, p, n);
        return;
    }
    for (size_t i = 0; i < n && !h->done && !h->failed; i++) {
        if (p[i] != '\n') {
            if (h->line.len >= MAX_SSE_LINE) {
                fprintf(stderr, "ask: SSE line longer than %u MiB from the server\n", MAX_SSE_LINE >> 20);
                h->failed = true;
                return;
            }
            sb_jw_raw(&h->line, p + i, 1);
            continue;
        }
        if (h->line.len && h->line.p[h->line.len - 1] == '\r') h->line.p[--h->line.len] = '\0';
        if (!h->line.len) {
            sse_event(h);
            h->data.len = 0;
            if (h->data.p) h->data.p[0] = '\0';
        } else if (!strncmp(h->line.p, "data:", 5)) {
            const char *v = h->line.p + 5;
            if (*v == ' ') v++;
            if (h->data.len + strlen(v) + 1 > MAX_BODY_BYTES) {
                fprintf(stderr, "ask: SSE event data longer than %u MiB from the server\n", MAX_BODY_BYTES >> 20);
                h->failed = true;
                return;
            }
            if (h->data.len) sb_jw_raw(&h->data, "\n", 1);
            sb_jw_raw(&h->data, v, strlen(v));
        }               /* event:, id:, retry: and ": comments" are ignored */
        h->line.len = 0;
        if (h->line.p) h->line.p[0] = '\0';
    }
}

static int read_headers(http *h) {
    char *end;
    while (!(end = h->in.p ? memmem(h->in.p, h->in.len, "\r\n\r\n", 4) : NULL)) {
        if (h->in.len > MAX_HEADER_BYTES) { fprintf(stderr, "ask: response headers too large\n"); return -1; }
        int r = read_more(h);
        if (r <= 0) { if (r == 0) fprintf(stderr, "ask: the server closed the connection before answering\n"); return -1; }
    }
    *end = '\0';
    if (sscanf(h->in.p, "HTTP/1.%*d %d", &h->status) != 1) {
        fprintf(stderr, "ask: not an HTTP response: %.40s\n", h->in.p);
        return -1;
    }
    for (char *l = strstr(h->in.p, "\r\n"); l; l = strstr(l, "\r\n")) {
        l += 2;
        if (!strncasecmp(l, "Content-Length:", 15)) {
            h->have_length = true;
            h->length = (size_t)strtoull(l + 15, NULL, 10);
        } else if (!strncasecmp(l, "Transfer-Encoding:", 18)) {
            /* this header's value only: l runs on into the later headers */
            const char *nl = strstr(l, "\r\n");
            const size_t n = nl ? (size_t)(nl - l) : strlen(l);
            char v[128];
            snprintf(v, sizeof v, "%.*s", (int)SB_MIN(n, sizeof v - 1), l);
            h->chunked = strcasestr(v, "chunked") != NULL;
        } else if (!strncasecmp(l, "Content-Type:", 13)) {
            char *nl = strstr(l, "\r\n");
            char c = nl ? *nl : 0;
            if (nl) *nl = '\0';
            h->sse = strcasestr(l, "text/event-stream") != NULL;
            if (nl) *nl = c;
        }
    }
    buf_consume(&h->in, (size_t)(end - h->in.p) + 4);
    return 0;
}

static int read_body(http *h) {
    if (!h->chunked) {
        size_t got = 0;
        for (;;) {
            size_t n = h->in.len;
            if (h->have_length && got + n > h->length) n = h->length - got;
            body_bytes(h, h->in.p, n);
            got += n;
            buf_consume(&h->in, h->in.len);
            if (h->done || h->failed || (h->have_length && got >= h->length)) return 0;
            int r = read_more(h);
            if (r < 0) return -1;
            if (r == 0) {
                if (h->have_length) { fprintf(stderr, "ask: the connection closed mid-body\n"); return -1; }
                return 0;
            }
        }
    }
    for (;;) {      /* chunked: SIZE-hex [;ext] CRLF data CRLF ... 0 CRLF CRLF */
        char *crlf;
        while (!(crlf = h->in.p ? memmem(h->in.p, h->in.len, "\r\n", 2) : NULL)) {
            if (h->in.len > 1024 || read_more(h) <= 0) { fprintf(stderr, "ask: bad or truncated chunked body\n"); return -1; }
        }
        char *endp;
        unsigned long long size = strtoull(h->in.p, &endp, 16);
        if (endp == h->in.p || size > MAX_BODY_BYTES) { fprintf(stderr, "ask: bad chunk size\n"); return -1; }
        size_t hdr = (size_t)(crlf - h->in.p) + 2;
        while (h->in.len < hdr + size + 2)
            if (read_more(h) <= 0) { fprintf(stderr, "ask: the connection closed mid-chunk\n"); return -1; }
        if (size == 0) return 0;    /* trailers, if any, are ignored */
        body_bytes(h, h->in.p + hdr, (size_t)size);
        buf_consume(&h->in, hdr + (size_t)size + 2);
        if (h->done || h->failed) return 0;
    }
}

static void build_body(const sb_ask_req *q, sb_jw *b) {
    sb_jw_obj(b);
    char pmodel[256];
    const char *model = q->model;
    if (q->pipeline) { snprintf(pmodel, sizeof pmodel, "pipeline:%s", q->pipeline); model = pmodel; }
    if (model) { sb_jw_key(b, "model"); sb_jw_str(b, model); }
    if (q->raw) {
        sb_jw_key(b, "prompt"); sb_jw_str(b, q->text);
    } else {
        sb_jw_key(b, "messages");
        sb_jw_arr(b);
        if (q->system) {
            sb_jw_obj(b);
            sb_jw_key(b, "role"); sb_jw_str(b, "system");
            sb_jw_key(b, "content"); sb_jw_str(b, q->system);
            sb_jw_obj_end(b);
        }
        sb_jw_obj(b);
        sb_jw_key(b, "role"); sb_jw_str(b, "user");
        sb_jw_key(b, "content"); sb_jw_str(b, q->text);
        sb_jw_obj_end(b);
        sb_jw_arr_end(b);
    }
    sb_jw_key(b, "stream"); sb_jw_bool(b, q->stream);
    if (q->max_tokens > 0) { sb_jw_key(b, "max_tokens"); sb_jw_int(b, q->max_tokens); }
    if (q->temp >= 0) { sb_jw_key(b, "temperature"); sb_jw_num(b, q->temp); }
    if (q->seed >= 0) { sb_jw_key(b, "seed"); sb_jw_int(b, q->seed); }
    sb_jw_obj_end(b);
}

/* The answer on h->fd (the request is sent): read, print, exit code. */
static int read_answer(http *h) {
    int code = SB_EXIT_FAIL;
    if (read_headers(h)) goto out;
    /* An error comes as JSON whatever we asked for; read it whole. */
    if (h->status >= 300) h->sse = false;
    if (read_body(h)) goto out;
    if (h->last && isatty(STDOUT_FILENO) && h->last != '\n') fputc('\n', stdout);
    if (h->status >= 300) { report_error(h->body.p ? h->body.p : "", h->body.len, h->status); goto out; }
    if (h->failed) { if (!h->sse) fprintf(stderr, "ask: response body too large\n"); goto out; }
    if (h->sse && !h->done) { fprintf(stderr, "ask: the stream ended without [DONE]\n"); goto out; }
    if (!h->sse) {
        const char *b = h->body.p ? h->body.p : "";
        sb_json_doc *doc = NULL;
        const sb_json *choice = NULL, *t = NULL;
        if (!sb_json_parse(b, h->body.len, &doc, NULL)) {
            choice = first_choice(sb_json_root(doc));
            t = choice_text(choice, "message");
        }
        if (!t) {
            fprintf(stderr, "ask: no choices[0].message.content in the answer: %.200s\n", b);
            sb_json_doc_free(doc);
            goto out;
        }
        if (h->q->json) {
            fwrite(b, 1, h->body.len, stdout);
            fputc('\n', stdout);
        } else {
            print_text(h, sb_json_str(t), sb_json_len(t));
            if (isatty(STDOUT_FILENO) && h->last != '\n') fputc('\n', stdout);
        }
        choice_finish(h, choice);
        sb_json_doc_free(doc);
    } else if (h->q->json) {
        printf("{\"ok\": true, \"text\": ");
        sb_ask_json_string(stdout, h->text.p ? h->text.p : "", h->text.len);
        printf(", \"finish_reason\": ");
        sb_ask_json_string(stdout, h->finish, strlen(h->finish));
        printf("}\n");
    }
    if (h->q->verbose) fprintf(stderr, "ask: HTTP %d, finish: %s\n", h->status, h->finish[0] ? h->finish : "?");
    code = SB_EXIT_OK;
out:
    sb_free(h->in.p);
    sb_free(h->body.p);
    sb_free(h->line.p);
    sb_free(h->data.p);
    sb_free(h->text.p);
    return code;
}

int sb_ask_http_answer(const sb_ask_req *q, int fd) {
    http h = { .q = q, .fd = fd, .deadline_ms = q->timeout_ms > 0 ? now_ms() + q->timeout_ms : -1 };
    return read_answer(&h);
}

int sb_ask_http_call(const sb_http_call *c, sb_http_reply *out) {
    memset(out, 0, sizeof *out);
    sb_net_url u;
    char port[16], path[1100];
    if (parse_url(c->url, &u, port, sizeof port, path, sizeof path)) return -1;
    if (!c->api) path[strlen(path) - 3] = '\0';    /* the base, without the "/v1" parse_url ends with */
    const sb_ask_req q = { .timeout_ms = c->timeout_ms };
    http h = { .q = &q, .fd = -1, .deadline_ms = c->timeout_ms > 0 ? now_ms() + c->timeout_ms : -1 };
    buf req = { 0 };
    sb_jw_rawf(&req, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUser-Agent: switchboard\r\n"
               "Accept: application/json\r\nConnection: close\r\n",
               c->method, path, c->path, u.ipv6 ? "[" : "", u.host, u.ipv6 ? "]" : "", port);
    if (c->api_key) sb_jw_rawf(&req, "Authorization: Bearer %s\r\n", c->api_key);
    if (c->body)
        sb_jw_rawf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n", c->body_len);
    sb_jw_raw(&req, "\r\n", 2);
    if (c->body) sb_jw_raw(&req, c->body, c->body_len);
    int rc = -1;
    if (req.oom) { fprintf(stderr, "ask: out of memory\n"); goto out; }
    if (connect_to(&h, u.host, port) || send_all(&h, req.p, req.len) || read_headers(&h)) goto out;
    h.sse = false;              /* read whatever comes as one body */
    if (read_body(&h)) goto out;
    if (h.failed) { fprintf(stderr, "ask: response body too large\n"); goto out; }
    out->status = h.status;
    out->body = h.body.p ? h.body.p : sb_strdup("");
    out->len = h.body.len;
    h.body.p = NULL;
    rc = out->body ? 0 : -1;
out:
    if (h.fd >= 0) close(h.fd);
    sb_free(h.in.p);
    sb_free(h.body.p);
    sb_free(req.p);
    return rc;
}

int sb_ask_http(const sb_ask_req *q) {
    sb_net_url u;
    char port[16], path[1100];
    if (parse_url(q->url, &u, port, sizeof port, path, sizeof path)) return SB_EXIT_CONFIG;
    const char *host = u.host;
    http h = { .q = q, .fd = -1, .deadline_ms = q->timeout_ms > 0 ? now_ms() + q->timeout_ms : -1 };
    buf body = { 0 }, req = { 0 };
    int code = SB_EXIT_FAIL;
    build_body(q, &body);
    char head[2048];
    snprintf(head, sizeof head,
             "POST %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUser-Agent: switchboard-ask\r\n"
             "Content-Type: application/json\r\nAccept: %s\r\nContent-Length: %zu\r\nConnection: close\r\n",
             path, q->raw ? "/completions" : "/chat/completions", u.ipv6 ? "[" : "", host,
             u.ipv6 ? "]" : "", port, q->stream ? "text/event-stream" : "application/json", body.len);
    sb_jw_raw(&req, head, strlen(head));
    if (q->api_key) sb_jw_rawf(&req, "Authorization: Bearer %s\r\n", q->api_key);
    sb_jw_raw(&req, "\r\n", 2);
    sb_jw_raw(&req, body.p, body.len);
    if (req.oom || body.oom) { fprintf(stderr, "ask: out of memory\n"); goto out; }
    if (!connect_to(&h, host, port) && !send_all(&h, req.p, req.len)) code = read_answer(&h);
out:
    fflush(stdout);
    if (h.fd >= 0) close(h.fd);
    sb_free(body.p);
    sb_free(req.p);
    return code;
}
