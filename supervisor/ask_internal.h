/* ask_internal.h - what cli_ask.c (options, the socket client) and
 * ask_http.c (the OpenAI-API client) share. Not part of the module's API. */
#ifndef SB_ASK_INTERNAL_H
#define SB_ASK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/sb_config.h"

typedef struct {
    const char *socket_path;    /* one of socket_path / url */
    const char *url;
    const char *pipeline;       /* NULL: plain generation */
    const char *model;          /* --url: the "model" field; NULL: omitted */
    const char *system;         /* system message, or NULL */
    const char *api_key;        /* --url: bearer token, or NULL */
    char *text;                 /* the user's text (owned) */
    bool raw;                   /* send text as "prompt", not as a chat message */
    bool stream;
    bool json;                  /* print the final result as JSON, nothing else */
    bool verbose;               /* timings and finish reason on stderr */
    int64_t max_tokens;         /* 0: the server's default */
    double temp;                /* < 0: the server's default */
    int64_t seed;               /* < 0: the server's default */
    int timeout_ms;             /* whole request; 0: none */
    int wait_ms;                /* socket: keep retrying connect this long */
} sb_ask_req;

/* POST {url}/v1/chat/completions (or /v1/completions with raw) and print
 * the answer like the socket path does. Returns an exit code: 0, 1 for an
 * error answer or a transport failure (message on stderr). */
int sb_ask_http(const sb_ask_req *req);
/* The reading half of sb_ask_http: the answer arriving on fd (the request
 * already sent; the caller closes fd), printed the same way, same exit
 * codes. Its own entry point so tests/fuzz/fuzz_ask.c can feed it bytes. */
int sb_ask_http_answer(const sb_ask_req *req, int fd);

/* One request to the gateway, its answer read whole, whatever the route:
 * the plain-HTTP client of `switchboard ask --url`, shared with
 * `switchboard test` (cli_test.c), which talks to the pipelines' and
 * sessions' routes. */
typedef struct {
    const char *url;            /* http://HOST[:PORT][/PATH] */
    const char *method;         /* "GET", "POST", "DELETE" */
    const char *path;           /* "/pipelines/hotline": under the API root ("/v1"), or with api false
                                   under the URL's own path ("/health") */
    bool api;
    const char *api_key;        /* bearer token, or NULL */
    const char *body;           /* JSON, or NULL */
    size_t body_len;
    int timeout_ms;             /* the whole exchange; 0: none */
} sb_http_call;
typedef struct {
    int status;
    char *body;                 /* NUL-terminated, sb_free */
    size_t len;
} sb_http_reply;
/* 0 with *out filled (any status), -1 when no answer came (a bad URL, the
 * connection refused or broken, a timeout: the reason on stderr). */
int sb_ask_http_call(const sb_http_call *c, sb_http_reply *out);

/* http://HOST:PORT of the config's runtime.http, a wildcard address
 * reached on the loopback (cli_test.c; the commands that talk to a
 * running router). cap: 128 is enough. */
void sb_runtime_url(const sb_config *cfg, char *url, size_t cap);

/* Print bytes as a JSON string: valid UTF-8 passes through, control
 * characters are escaped, invalid bytes become U+FFFD (JSON must be UTF-8;
 * fixture models emit arbitrary bytes). */
void sb_ask_json_string(FILE *f, const char *s, size_t n);

#endif
