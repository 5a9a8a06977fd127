/* cloud.c - `switchboard cloud -c FILE`: the cloud tier's HTTP sync service
 * (docs/cache-sync.md). libevent evhttp in front, PostgreSQL behind
 * (cloud_store.c). One process, one connection, one request at a time: a
 * sync is a few milliseconds of SQL, and more capacity is more replicas
 * behind a load balancer on the same database, which the store's locking
 * makes safe.
 *
 *   POST   /v1/sync            signed by an edge (X-Edge-Id, X-Timestamp, X-Signature)
 *   DELETE /v1/entries/{key}   Authorization: Bearer ADMIN_TOKEN
 *   POST   /v1/erase           Authorization: Bearer ADMIN_TOKEN: a caller's
 *                              data erased, sent on to every edge
 *   GET    /v1/kb/{name}/manifest, /v1/kb/{name}/snapshot
 *                              signed by an edge: a knowledge base published
 *                              into kb_dir (`switchboard kb publish`)
 *   GET    /v1/health
 */
#include "cache/cloud/cloud_internal.h"
#include "common/sb_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#define MAX_EDGES      4096
#define DEFAULT_LISTEN "127.0.0.1:8090"

typedef struct { char *id, *secret; } edge_secret;

typedef struct {
    char        *listen, *database, *admin_token;
    char        *kb_dir;            /* published knowledge bases; NULL: none served */
    int64_t      push_threshold;    /* fleet-wide asks before an entry is pushed */
    int64_t      max_body_mb;
    edge_secret *edges;
    size_t       n_edges;
} cloud_config;

typedef struct {
    cloud_config cfg;
    sbc_store   *store;
    struct event_base *base;
    int64_t      requests, rejected;
} cloud;

/* ------------------------------------------------------------ config */

/* A YAML subset: `key: value` at the top level, and the `edges:` map of
 * `edge-id: secret` one level in. Enough for this file, and no libyaml here
 * (the project's YAML loader is for the runtime config's schema). */
static char *unquote(char *v) {
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r')) v[--n] = '\0';
    if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) { v[n - 1] = '\0'; return v + 1; }
    char *hash = strstr(v, " #");          /* a trailing comment on a plain value */
    if (hash) { *hash = '\0'; return unquote(v); }
    return v;
}

static void free_config(cloud_config *c) {
    sb_free(c->listen); sb_free(c->database); sb_free(c->admin_token); sb_free(c->kb_dir);
    for (size_t i = 0; i < c->n_edges; i++) { sb_free(c->edges[i].id); sb_free(c->edges[i].secret); }
    sb_free(c->edges);
    memset(c, 0, sizeof *c);
}

static int set_str(char **dst, const char *v) {
    sb_free(*dst);
    return (*dst = sb_strdup(v)) ? SB_OK : SB_ENOMEM;
}

static int load_config(const char *path, cloud_config *c, char *err) {
    memset(c, 0, sizeof *c);
    c->push_threshold = 3;
    c->max_body_mb = 32;
    FILE *f = fopen(path, "r");
    if (!f) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, in_edges = 0, rc = SB_OK;
    if (!(c->edges = sb_calloc(MAX_EDGES, sizeof *c->edges))) rc = SB_ENOMEM;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        char *p = line;
        while (*p == ' ') p++;
        if (!*p || *p == '#') continue;
        int indented = p != line;
        char *colon = strchr(p, ':');
        if (!colon) { rc = sb_seterr(err, SB_EINVAL, "%s:%d: expected 'key: value'", path, lineno); break; }
        *colon = '\0';
        char *key = unquote(p), *val = unquote(colon + 1);
        if (indented) {
            if (!in_edges) { rc = sb_seterr(err, SB_EINVAL, "%s:%d: unexpected indentation", path, lineno); break; }
            if (!*val || c->n_edges == MAX_EDGES) { rc = sb_seterr(err, SB_EINVAL, "%s:%d: edge %s needs a secret", path, lineno, key); break; }
            for (size_t i = 0; i < c->n_edges; i++)
                if (!strcmp(c->edges[i].id, key)) { rc = sb_seterr(err, SB_EINVAL, "%s:%d: edge %s listed twice", path, lineno, key); break; }
            if (rc) break;
            edge_secret *e = &c->edges[c->n_edges++];
            if (!(e->id = sb_strdup(key)) || !(e->secret = sb_strdup(val))) rc = SB_ENOMEM;
            continue;
        }
        in_edges = 0;
        if (!strcmp(key, "edges") && !*val) in_edges = 1;
        else if (!strcmp(key, "listen")) rc = set_str(&c->listen, val);
        else if (!strcmp(key, "database")) rc = set_str(&c->database, val);
        else if (!strcmp(key, "admin_token")) rc = set_str(&c->admin_token, val);
        else if (!strcmp(key, "kb_dir")) rc = set_str(&c->kb_dir, val);
        else if (!strcmp(key, "push_threshold") || !strcmp(key, "max_body_mb")) {
            char *end;
            long long n = strtoll(val, &end, 10);
            long long min = key[0] == 'p' ? 0 : 1;     /* threshold 0: push every entry */
            if (*end || n < min || n > 1000000000) { rc = sb_seterr(err, SB_EINVAL, "%s:%d: %s must be an integer >= %lld", path, lineno, key, min); break; }
            *(key[0] == 'p' ? &c->push_threshold : &c->max_body_mb) = n;
        } else {
            rc = sb_seterr(err, SB_EINVAL, "%s:%d: unknown key '%s' (listen, database, "
                           "admin_token, push_threshold, max_body_mb, kb_dir, edges)", path, lineno, key);
        }
    }
    fclose(f);
    if (!rc && !c->listen) rc = set_str(&c->listen, DEFAULT_LISTEN);
    if (!rc && !c->database) rc = sb_seterr(err, SB_EINVAL, "%s: 'database' (a libpq connection string) is required", path);
    if (!rc && !c->n_edges) rc = sb_seterr(err, SB_EINVAL, "%s: 'edges' lists no edge", path);
    if (rc == SB_ENOMEM) sb_seterr(err, rc, "%s: out of memory", path);
    if (rc) free_config(c);
    return rc;
}

/* ------------------------------------------------------------ replies */

static void reply_json(struct evhttp_request *req, int code, const char *reason, const char *body,
                       size_t len) {
    struct evbuffer *out = evbuffer_new();
    if (out) evbuffer_add(out, body, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, code, reason, out);
    if (out) evbuffer_free(out);
}

static void reply_error(cloud *cl, struct evhttp_request *req, int code, const char *reason,
                        const char *msg) {
    sb_jw b = { 0 };
    sb_jw_rawf(&b, "{\"error\":");
    sb_jw_strn(&b, msg, strlen(msg));
    sb_jw_rawf(&b, "}");
    if (code == 401) cl->rejected++;
    sb_info("%d %s: %s", code, evhttp_request_get_uri(req), msg);
    reply_json(req, code, reason, b.p ? b.p : "{}", b.p ? b.len : 2);
    sb_jw_free(&b);
}

/* ------------------------------------------------------------ handlers */

static const char *find_secret(const cloud *cl, const char *edge_id) {
    for (size_t i = 0; i < cl->cfg.n_edges; i++)
        if (!strcmp(cl->cfg.edges[i].id, edge_id)) return cl->cfg.edges[i].secret;
    return NULL;
}

/* Checks in order of cost; every failure is the same 401 to the caller (the
 * reason is logged here), and nothing is written before all pass. */
static int authenticate(cloud *cl, struct evhttp_request *req, const char *body, size_t len,
                        const char **edge_out, char *why) {
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *edge = evhttp_find_header(h, "X-Edge-Id"), *ts = evhttp_find_header(h, "X-Timestamp"),
               *sig = evhttp_find_header(h, "X-Signature");
    if (!edge || !ts || !sig) return sb_seterr(why, SB_EINVAL, "missing X-Edge-Id, X-Timestamp or X-Signature");
    const char *secret = find_secret(cl, edge);
    if (!secret) return sb_seterr(why, SB_EINVAL, "unknown edge");
    char *end;
    long long t = strtoll(ts, &end, 10);
    long long now = (long long)time(NULL);
    if (*end || end == ts || t < now - SBC_MAX_SKEW_S || t > now + SBC_MAX_SKEW_S)
        return sb_seterr(why, SB_EINVAL, "timestamp missing or more than %d s off", SBC_MAX_SKEW_S);
    char want[SB_CACHE_KEY_HEX];
    sbc_sign(secret, ts, body, len, want);
    if (strlen(sig) != SB_CACHE_KEY_HEX - 1 || !sb_ct_equal(sig, want, SB_CACHE_KEY_HEX - 1))
        return sb_seterr(why, SB_EINVAL, "bad signature");
    int fresh = 0;
    if (sbc_store_remember_signature(cl->store, sig, t, &fresh, why)) return SB_EIO;
    if (!fresh) return sb_seterr(why, SB_EINVAL, "replayed request");
    *edge_out = edge;
    return SB_OK;
}

static void handle_sync(cloud *cl, struct evhttp_request *req) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    char why[SB_ERR_LEN] = "";
    const char *edge = NULL;
    int rc = authenticate(cl, req, body, len, &edge, why);
    if (rc == SB_EIO) { reply_error(cl, req, 503, "Service Unavailable", why); return; }
    if (rc) { reply_error(cl, req, 401, "Unauthorized", why); return; }
    sb_json_doc *j = NULL;
    const char *body_edge = NULL;
    if (sb_json_parse(body, len, &j, why)) { reply_error(cl, req, 400, "Bad Request", why); return; }
    if (sbc_json_str(sb_json_root(j), "edge_id", &body_edge) || strcmp(body_edge, edge)) {
        sb_json_doc_free(j);
        reply_error(cl, req, 401, "Unauthorized", "edge_id in the body is not the signing edge");
        return;
    }
    sb_jw out = { 0 };
    rc = sbc_store_sync(cl->store, edge, sb_json_root(j), cl->cfg.push_threshold, &out, why);
    sb_json_doc_free(j);
    if (rc == SB_EINVAL) reply_error(cl, req, 400, "Bad Request", why);
    else if (rc) reply_error(cl, req, 503, "Service Unavailable", why);
    else reply_json(req, 200, "OK", out.p, out.len);
    sb_jw_free(&out);
}

/* The operator's routes (purges, erasures) take the admin token. */
static bool admin_ok(cloud *cl, struct evhttp_request *req) {
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    const char *tok = cl->cfg.admin_token;
    if (!tok || !auth || strncmp(auth, "Bearer ", 7) || strlen(auth + 7) != strlen(tok) ||
        !sb_ct_equal(auth + 7, tok, strlen(tok))) {
        reply_error(cl, req, 401, "Unauthorized", tok ? "bad admin token" : "no admin_token configured");
        return false;
    }
    return true;
}

static void handle_delete(cloud *cl, struct evhttp_request *req, const char *key) {
    if (!admin_ok(cl, req)) return;
    int64_t version = 0;
    char why[SB_ERR_LEN] = "";
    int rc = sbc_store_delete(cl->store, key, &version, why);
    if (rc == SB_EINVAL) { reply_error(cl, req, 400, "Bad Request", why); return; }
    if (rc) { reply_error(cl, req, 503, "Service Unavailable", why); return; }
    char body[160];
    int n = snprintf(body, sizeof body, "{\"deleted\":\"%s\",\"version\":%lld}", key, (long long)version);
    sb_info("purged %s at version %lld", key, (long long)version);
    reply_json(req, 200, "OK", body, (size_t)n);
}

/* POST /v1/erase: an erase asked at an edge, carried to every edge in the
 * sync replies (docs/PRIVACY.md, "Erasure"). Logged as its kind and counts:
 * never the value's hash or the id. */
static int erasure_of(const sb_json *j, sbc_erasure *e, const char ***keys, char *why) {
    const sb_json *ks = sb_json_get(j, "cache_keys");
    memset(e, 0, sizeof *e);
    if (sbc_json_str(j, "kind", &e->kind) || (strcmp(e->kind, "value") && strcmp(e->kind, "session") &&
                                              strcmp(e->kind, "call")))
        return sb_seterr(why, SB_EINVAL, "erase: \"kind\" is value, session or call");
    if (!strcmp(e->kind, "value")) {
        if (sbc_json_str(j, "mac", &e->mac) || sbc_json_int(j, "digits", &e->digits) ||
            (e->digits && e->digits < SB_ERASE_VALUE_MIN))
            return sb_seterr(why, SB_EINVAL, "erase: a value needs \"mac\" (its keyed hash) and \"digits\" "
                             "(0, or its length >= %d when it is a number)", SB_ERASE_VALUE_MIN);
    } else if (sbc_json_str(j, "id", &e->id) || !e->id[0] || strlen(e->id) > 128) {
        return sb_seterr(why, SB_EINVAL, "erase: a %s needs \"id\" (1-128 characters)", e->kind);
    }
    if (ks && sb_json_type_of(ks) != SB_JSON_ARRAY) return sb_seterr(why, SB_EINVAL, "erase: cache_keys is an array");
    if (!(*keys = sb_calloc(sb_json_len(ks) + 1, sizeof **keys))) return sb_seterr(why, SB_ENOMEM, "out of memory");
    for (size_t i = 0; i < sb_json_len(ks); i++)
        if (!((*keys)[e->n_keys++] = sb_json_str(sb_json_at(ks, i))))
            return sb_seterr(why, SB_EINVAL, "erase: cache_keys[%zu] is not a string", i);
    e->keys = *keys;
    return SB_OK;
}

static void handle_erase(cloud *cl, struct evhttp_request *req) {
    if (!admin_ok(cl, req)) return;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    char why[SB_ERR_LEN] = "";
    sb_json_doc *j = NULL;
    const char **keys = NULL;
    sbc_erasure e;
    int64_t version = 0, n = 0;
    int rc = sb_json_parse(body, len, &j, why);
    if (!rc) rc = erasure_of(sb_json_root(j), &e, &keys, why);
    if (!rc) rc = sbc_store_erase(cl->store, &e, &version, &n, why);
    if (rc == SB_EINVAL || rc == SB_EFORMAT) {
        reply_error(cl, req, 400, "Bad Request", why);
    } else if (rc) {
        reply_error(cl, req, 503, "Service Unavailable", why);
    } else {
        char out[160];
        int w = snprintf(out, sizeof out, "{\"erasure\":%lld,\"cache_entries\":%lld}", (long long)version, (long long)n);
        sb_info("erase (%s) at version %lld: %lld cache entr(y/ies) purged; the edges take it at their next sync",
                e.kind, (long long)version, (long long)n);
        reply_json(req, 200, "OK", out, (size_t)w);
    }
    sb_free(keys);
    sb_json_doc_free(j);
}

/* ------------------------------------------------ published knowledge bases */

/* A published base's name: what `kb publish` accepts, and nothing that can
 * leave kb_dir. */
static int kb_name_ok(const char *s, size_t n) {
    if (!n || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* The manifest `kb publish` wrote (version, sha256, bytes), with the MAC
 * for the asking edge: the edge checks it with its own secret, then the
 * snapshot against the SHA-256 it names. */
static void kb_manifest(cloud *cl, struct evhttp_request *req, const char *edge, const char *dir, const char *name) {
    char path[4096], why[SB_ERR_LEN];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    char *text = NULL;
    size_t len = 0;
    sb_json_doc *j = NULL;
    const char *version, *sha;
    int64_t bytes, published = 0;
    if (sb_read_file(path, 1 << 16, &text, &len, why)) {
        reply_error(cl, req, 404, "Not Found", "no knowledge base published under that name");
    } else if (sb_json_parse(text, len, &j, why) || sbc_json_str(sb_json_root(j), "version", &version) ||
               sbc_json_str(sb_json_root(j), "sha256", &sha) || sbc_json_int(sb_json_root(j), "bytes", &bytes)) {
        reply_error(cl, req, 500, "Internal Server Error", "the published manifest is unreadable");
    } else {
        sbc_json_int(sb_json_root(j), "published_s", &published);
        char mac[SB_CACHE_KEY_HEX];
        sb_cloud_file_mac(find_secret(cl, edge), name, version, sha, bytes, mac);
        sb_jw b = { 0 };
        sb_jw_raw(&b, "{\"name\":", 8);
        sb_jw_str(&b, name);
        sb_jw_raw(&b, ",\"version\":", 11);
        sb_jw_str(&b, version);
        sb_jw_raw(&b, ",\"sha256\":", 10);
        sb_jw_str(&b, sha);
        sb_jw_rawf(&b, ",\"bytes\":%lld,\"published_s\":%lld,\"mac\":\"%s\"}", (long long)bytes,
                   (long long)published, mac);
        if (b.oom) reply_error(cl, req, 503, "Service Unavailable", "out of memory");
        else reply_json(req, 200, "OK", b.p, b.len);
        sb_jw_free(&b);
    }
    sb_json_doc_free(j);
    sb_free(text);
}

static void kb_snapshot(cloud *cl, struct evhttp_request *req, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.sqlite", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        if (fd >= 0) close(fd);
        reply_error(cl, req, 404, "Not Found", "no knowledge base published under that name");
        return;
    }
    struct evbuffer *out = evbuffer_new();
    /* evbuffer_add_file owns fd from here, also when it fails. */
    if (!out || evbuffer_add_file(out, fd, 0, st.st_size)) {
        if (!out) close(fd);
        if (out) evbuffer_free(out);
        reply_error(cl, req, 503, "Service Unavailable", "cannot read the snapshot");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/octet-stream");
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

/* GET /v1/kb/NAME/{manifest,snapshot}?nonce=N, signed over that whole URI
 * (the nonce makes each request's signature new, so the replay check does
 * not refuse a second pull within the same second). */
static void handle_kb(cloud *cl, struct evhttp_request *req, const char *uri) {
    const char *rest = uri + 7, *slash = strchr(rest, '/');
    size_t qn = strcspn(uri, "?");
    char why[SB_ERR_LEN] = "", name[65];
    const char *edge = NULL;
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
        reply_error(cl, req, 405, "Method Not Allowed", "GET /v1/kb/{name}/manifest or /snapshot");
        return;
    }
    if (!cl->cfg.kb_dir) { reply_error(cl, req, 404, "Not Found", "this cloud publishes no knowledge base"); return; }
    int rc = authenticate(cl, req, uri, strlen(uri), &edge, why);
    if (rc == SB_EIO) { reply_error(cl, req, 503, "Service Unavailable", why); return; }
    if (rc) { reply_error(cl, req, 401, "Unauthorized", why); return; }
    if (!slash || !kb_name_ok(rest, (size_t)(slash - rest))) {
        reply_error(cl, req, 400, "Bad Request", "bad knowledge base name");
        return;
    }
    snprintf(name, sizeof name, "%.*s", (int)(slash - rest), rest);
    size_t what = qn - (size_t)(slash + 1 - uri);
    if (what == 8 && !strncmp(slash + 1, "manifest", 8)) kb_manifest(cl, req, edge, cl->cfg.kb_dir, name);
    else if (what == 8 && !strncmp(slash + 1, "snapshot", 8)) kb_snapshot(cl, req, cl->cfg.kb_dir, name);
    else reply_error(cl, req, 404, "Not Found", "unknown path");
}

static void on_request(struct evhttp_request *req, void *arg) {
    cloud *cl = arg;
    cl->requests++;
    const char *uri = evhttp_request_get_uri(req);
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!strcmp(uri, "/v1/sync")) {
        if (m == EVHTTP_REQ_POST) handle_sync(cl, req);
        else reply_error(cl, req, 405, "Method Not Allowed", "POST /v1/sync");
    } else if (!strncmp(uri, "/v1/entries/", 12)) {
        if (m == EVHTTP_REQ_DELETE) handle_delete(cl, req, uri + 12);
        else reply_error(cl, req, 405, "Method Not Allowed", "DELETE /v1/entries/{key}");
    } else if (!strcmp(uri, "/v1/erase")) {
        if (m == EVHTTP_REQ_POST) handle_erase(cl, req);
        else reply_error(cl, req, 405, "Method Not Allowed", "POST /v1/erase");
    } else if (!strncmp(uri, "/v1/kb/", 7)) {
        handle_kb(cl, req, uri);
    } else if (!strcmp(uri, "/v1/health")) {
        char body[128];
        int n = snprintf(body, sizeof body, "{\"ok\":true,\"requests\":%lld,\"rejected\":%lld}",
                         (long long)cl->requests, (long long)cl->rejected);
        reply_json(req, 200, "OK", body, (size_t)n);
    } else {
        reply_error(cl, req, 404, "Not Found", "unknown path");
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    cloud *cl = arg;
    sb_info("signal %d: stopping", (int)sig);
    event_base_loopexit(cl->base, NULL);
}

/* ------------------------------------------------------------ command */

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard cloud -c FILE [--listen HOST:PORT] [--database DSN] [--port-file F]\n\n"
        "The cloud tier of the response cache: edges sync hit counts and entries\n"
        "with it (POST /v1/sync), operators purge keys fleet-wide\n"
        "(DELETE /v1/entries/KEY) and carry erasures of callers' data to every\n"
        "edge (POST /v1/erase), and it serves the knowledge bases published into\n"
        "kb_dir (`switchboard kb publish`) to the same edges (GET /v1/kb/NAME/...).\n"
        "State lives in PostgreSQL. See docs/cache-sync.md and docs/KNOWLEDGE.md.\n\n"
        "  -c FILE         config: listen, database, admin_token, push_threshold,\n"
        "                  max_body_mb, kb_dir, edges: {EDGE_ID: SECRET, ...}\n"
        "  --listen A      override listen (port 0 picks a free port)\n"
        "  --database DSN  override the libpq connection string\n"
        "  --port-file F   write the bound port to F once listening (for scripts)\n");
}

static int serve(cloud *cl, const char *port_file) {
    int rc = SB_EXIT_FAIL, port = 0;
    char host[SB_NET_HOST_MAX], why[SB_ERR_LEN];
    struct evhttp *http = NULL;
    struct event *sigs[2] = { 0 };
    if (sb_net_host_port(cl->cfg.listen, 0, host, sizeof host, &port, why)) {    /* 0: any free port */
        fprintf(stderr, "cloud: bad listen address: %s\n", why);
        return SB_EXIT_CONFIG;
    }
    if (!(cl->base = event_base_new()) || !(http = evhttp_new(cl->base))) goto out;
    evhttp_set_max_body_size(http, (ev_ssize_t)(cl->cfg.max_body_mb << 20));
    evhttp_set_max_headers_size(http, 16384);
    evhttp_set_timeout(http, 30);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE);
    evhttp_set_gencb(http, on_request, cl);
    struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(http, host, (ev_uint16_t)port);
    if (!bound) {
        fprintf(stderr, "cloud: cannot listen on %s: %s\n", cl->cfg.listen, strerror(errno));
        rc = SB_EXIT_CONFIG;
        goto out;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, port_file)) {
            fprintf(stderr, "cloud: cannot write %s\n", port_file);
            goto out;
        }
    }
    sigs[0] = evsignal_new(cl->base, SIGTERM, on_signal, cl);
    sigs[1] = evsignal_new(cl->base, SIGINT, on_signal, cl);
    for (int i = 0; i < 2; i++) if (sigs[i]) event_add(sigs[i], NULL);
    signal(SIGPIPE, SIG_IGN);
    sb_info("listening on %s:%d (%zu edges, push threshold %lld)", host, port, cl->cfg.n_edges,
            (long long)cl->cfg.push_threshold);
    event_base_dispatch(cl->base);
    rc = SB_EXIT_OK;
out:
    for (int i = 0; i < 2; i++) if (sigs[i]) event_free(sigs[i]);
    if (http) evhttp_free(http);
    if (cl->base) event_base_free(cl->base);
    return rc;
}

int sb_cmd_cloud(int argc, char **argv) {
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' }, { "listen", required_argument, NULL, 'l' },
        { "database", required_argument, NULL, 'd' }, { "port-file", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    const char *config = NULL, *listen = NULL, *database = NULL, *port_file = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': config = optarg; break;
        case 'l': listen = optarg; break;
        case 'd': database = optarg; break;
        case 'p': port_file = optarg; break;
        case 'h': usage(stdout); return SB_EXIT_OK;
        default: usage(stderr); return SB_EXIT_CONFIG;
        }
    }
    if (!config || optind != argc) { usage(stderr); return SB_EXIT_CONFIG; }
    cloud cl = { 0 };
    char err[SB_ERR_LEN] = "";
    if (load_config(config, &cl.cfg, err) ||
        (listen && set_str(&cl.cfg.listen, listen)) || (database && set_str(&cl.cfg.database, database))) {
        fprintf(stderr, "cloud: %s\n", err[0] ? err : "out of memory");
        free_config(&cl.cfg);
        return SB_EXIT_CONFIG;
    }
    if (sbc_store_open(cl.cfg.database, &cl.store, err)) {
        fprintf(stderr, "cloud: %s\n", err);
        free_config(&cl.cfg);
        return SB_EXIT_FAIL;
    }
    const char **ids = sb_calloc(cl.cfg.n_edges, sizeof *ids);
    for (size_t i = 0; ids && i < cl.cfg.n_edges; i++) ids[i] = cl.cfg.edges[i].id;
    int rc = !ids || sbc_store_set_erasure(cl.store, cl.cfg.admin_token, ids, cl.cfg.n_edges) ? SB_EXIT_FAIL : SB_EXIT_OK;
    sb_free(ids);
    if (rc) fprintf(stderr, "cloud: out of memory\n");
    else rc = serve(&cl, port_file);
    sbc_store_close(cl.store);
    free_config(&cl.cfg);
    return rc;
}
