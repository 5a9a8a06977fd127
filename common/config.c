/* config.c - YAML config: libyaml events -> node tree -> validated sb_config.
 *
 * Two passes. The first (config_yaml.c) turns libyaml's event stream into our
 * own node tree with 1-based positions, rejecting what we never want to
 * interpret (aliases, tags, duplicate keys, non-scalar keys, several
 * documents). The second, here, walks the tree against the schema and fills
 * plain structs. Every
 * error names the file, line and column of the offending node and the dotted
 * key path, so a config can be fixed without reading this file.
 */
#include "common/sb_config.h"
#include "common/sb_net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <event2/http.h>


int sb_config_node_error(const sb_config *cfg, const sb_config_node *at, char *err,
                         const char *fmt, ...) {
    char msg[SB_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sb_seterr(err, SB_EINVAL, "%s:%d:%d: %s", cfg->path, at ? at->line : 1,
                     at ? at->col : 1, msg);
}

/* ============================================================== schema */

typedef struct {
    sb_config *cfg;
    char *err;
} ctx;

#define FAIL(c, node, ...) sb_config_node_error((c)->cfg, (node), (c)->err, __VA_ARGS__)

static const char *kind_name(const sb_config_node *n) {
    if (sb_config_node_is_null(n)) return "null";
    return n->kind == SB_CFG_MAP ? "a mapping" : n->kind == SB_CFG_SEQ ? "a list" : "a string";
}

static int want_map(ctx *c, const sb_config_node *n, const char *what) {
    if (n->kind == SB_CFG_MAP) return 0;
    return FAIL(c, n, "%s: expected a mapping, got %s", what, kind_name(n));
}

/* Reject keys not in `allowed` (NULL-terminated), at the key's position. */
static int check_keys(ctx *c, const sb_config_node *map, const char *what,
                      const char *const *allowed) {
    for (size_t i = 0; i < map->n_pairs; i++) {
        const sb_config_node *k = map->pairs[i].key;
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, k->value);
        if (ok) continue;
        char list[160] = "";
        for (const char *const *a = allowed; *a; a++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                     a == allowed ? "" : ", ", *a);
        return FAIL(c, k, "%s: unknown key '%s' (expected one of: %s)", what, k->value, list);
    }
    return 0;
}

static int get_int(ctx *c, const sb_config_node *map, const char *what, const char *key,
                   long lo, long hi, int *out) {
    const sb_config_node *v = sb_config_node_get(map, key);
    if (!v) return 0;
    const char *s = v->kind == SB_CFG_SCALAR ? v->value : "";
    char *end = NULL;
    errno = 0;
    long x = v->kind == SB_CFG_SCALAR && !v->quoted && *s ? strtol(s, &end, 10) : 0;
    bool is_int = end && *end == '\0' && errno == 0;
    if (!is_int || x < lo || x > hi) {
        if (v->kind != SB_CFG_SCALAR || v->quoted || sb_config_node_is_null(v))
            return FAIL(c, v, "%s.%s: expected an integer in [%ld, %ld], got %s%s%s", what, key,
                        lo, hi, v->quoted ? "the string \"" : kind_name(v),
                        v->quoted ? v->value : "", v->quoted ? "\"" : "");
        return FAIL(c, v, "%s.%s: expected an integer in [%ld, %ld], got '%s'", what, key,
                    lo, hi, v->value);
    }
    *out = (int)x;
    return 0;
}

/* A non-null scalar, copied. */
static int get_str(ctx *c, const sb_config_node *map, const char *what, const char *key,
                   char **out) {
    const sb_config_node *v = sb_config_node_get(map, key);
    if (!v) return 0;
    if (v->kind != SB_CFG_SCALAR || sb_config_node_is_null(v) || v->len == 0)
        return FAIL(c, v, "%s.%s: expected a non-empty string, got %s", what, key, kind_name(v));
    if (strlen(v->value) != v->len)
        return FAIL(c, v, "%s.%s: string contains a NUL byte", what, key);
    char *s = sb_strdup(v->value);
    if (!s) return SB_ENOMEM;
    sb_free(*out);
    *out = s;
    return 0;
}

static int get_enum(ctx *c, const sb_config_node *map, const char *what, const char *key,
                    const char *const *names, int *out) {
    const sb_config_node *v = sb_config_node_get(map, key);
    if (!v) return 0;
    if (v->kind == SB_CFG_SCALAR)
        for (int i = 0; names[i]; i++)
            if (!strcmp(names[i], v->value)) { *out = i; return 0; }
    char list[128] = "";
    for (int i = 0; names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "", names[i]);
    return FAIL(c, v, "%s.%s: expected %s, got %s%s%s", what, key, list,
                v->kind == SB_CFG_SCALAR ? "'" : kind_name(v),
                v->kind == SB_CFG_SCALAR ? v->value : "", v->kind == SB_CFG_SCALAR ? "'" : "");
}

/* Relative paths are relative to the config file, never to the cwd. */
static char *resolve(const char *base, const char *p) {
    if (p[0] == '/') return sb_strdup(p);
    while (p[0] == '.' && p[1] == '/') p += 2;
    size_t n = strlen(base) + 1 + strlen(p) + 1;
    char *s = sb_malloc(n);
    if (s) snprintf(s, n, "%s%s%s", base, *p ? "/" : "", p);
    return s;
}

static int get_path(ctx *c, const sb_config_node *map, const char *what, const char *key,
                    bool must_read, char **out, struct stat *st) {
    char *raw = NULL;
    int rc = get_str(c, map, what, key, &raw);
    if (rc || !raw) return rc;
    char *abs = resolve(c->cfg->base_dir, raw);
    sb_free(raw);
    if (!abs) return SB_ENOMEM;
    if (must_read) {
        const sb_config_node *v = sb_config_node_get(map, key);
        int fd = open(abs, O_RDONLY | O_CLOEXEC);
        struct stat sbuf;
        if (!st) st = &sbuf;
        int e = fd < 0 ? errno : fstat(fd, st) ? errno : 0;
        if (fd >= 0) close(fd);
        if (!e && !S_ISREG(st->st_mode)) e = EISDIR;
        if (e) {
            rc = FAIL(c, v, "%s.%s: cannot read '%s': %s", what, key, abs,
                      e == EISDIR ? "not a regular file" : strerror(e));
            sb_free(abs);
            return rc;
        }
    }
    sb_free(*out);
    *out = abs;
    return 0;
}

static bool valid_name(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max) return false;
    for (; *s; s++)
        if (!(*s == '_' || *s == '-' || (*s >= '0' && *s <= '9') ||
              (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

static bool valid_env_name(const char *s) {
    if (!*s || (*s >= '0' && *s <= '9')) return false;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

static int load_runtime(ctx *c, const sb_config_node *rt) {
    static const char *const keys[] = { "dir", "http", "api_key_env", "api_key_file",
                                        "log_level", "drain_ms", NULL };
    static const char *const levels[] = { "debug", "info", "warn", "error", NULL };
    sb_config *cfg = c->cfg;
    int rc;
    if (!(cfg->runtime.dir = resolve(cfg->base_dir, "run")) ||
        !(cfg->runtime.http = sb_strdup("127.0.0.1:8080")))
        return SB_ENOMEM;
    cfg->runtime.log_level = SB_LOG_INFO;
    cfg->runtime.drain_ms = 10000;
    if (rt) {
        if ((rc = want_map(c, rt, "runtime")) || (rc = check_keys(c, rt, "runtime", keys)) ||
            (rc = get_path(c, rt, "runtime", "dir", false, &cfg->runtime.dir, NULL)) ||
            (rc = get_str(c, rt, "runtime", "http", &cfg->runtime.http)) ||
            (rc = get_str(c, rt, "runtime", "api_key_env", &cfg->runtime.api_key_env)) ||
            (rc = get_path(c, rt, "runtime", "api_key_file", true, &cfg->runtime.api_key_file, NULL)) ||
            (rc = get_enum(c, rt, "runtime", "log_level", levels, &cfg->runtime.log_level)) ||
            (rc = get_int(c, rt, "runtime", "drain_ms", 0, 3600000, &cfg->runtime.drain_ms)))
            return rc;
        if (cfg->runtime.api_key_env && cfg->runtime.api_key_file)
            return FAIL(c, sb_config_node_get(rt, "api_key_file"),
                        "runtime: give api_key_env or api_key_file, not both");
        if (cfg->runtime.api_key_env && !valid_env_name(cfg->runtime.api_key_env))
            return FAIL(c, sb_config_node_get(rt, "api_key_env"),
                        "runtime.api_key_env: expected an environment variable name, got '%s'",
                        cfg->runtime.api_key_env);
    }
    char host[SB_NET_HOST_MAX];
    int port;
    if (sb_net_host_port(cfg->runtime.http, 1, host, sizeof host, &port, NULL))
        return FAIL(c, sb_config_node_get(rt, "http"),
                    "runtime.http: expected HOST:PORT with a port in [1, 65535], got '%s'",
                    cfg->runtime.http);
    cfg->runtime.http_port = port;
    return (cfg->runtime.http_host = sb_strdup(host)) ? 0 : SB_ENOMEM;
}

/* An `upstream:` model: a remote OpenAI-compatible endpoint. */
static int load_upstream(ctx *c, const sb_config_node *v, const char *what, sb_config_model *m) {
    int rc;
    if ((rc = get_str(c, v, what, "upstream", &m->upstream)) ||
        (rc = get_str(c, v, what, "model", &m->upstream_model)) ||
        (rc = get_str(c, v, what, "api_key_env", &m->api_key_env)) ||
        (rc = get_int(c, v, what, "timeout_ms", 1, 3600000, &m->timeout_ms)))
        return rc;
    if (sb_net_url_parse(m->upstream, &(sb_net_url){ 0 }, NULL))
        return FAIL(c, sb_config_node_get(v, "upstream"),
                    "%s.upstream: expected http(s)://HOST[:PORT][/PATH], got '%s'", what, m->upstream);
    if (m->api_key_env && !valid_env_name(m->api_key_env))
        return FAIL(c, sb_config_node_get(v, "api_key_env"),
                    "%s.api_key_env: expected an environment variable name, got '%s'",
                    what, m->api_key_env);
    if (!m->upstream_model && !(m->upstream_model = sb_strdup(m->name))) return SB_ENOMEM;
    return 0;
}

/* idle: keep | unload-after:SECONDS -> m->idle_unload_s (0: keep). */
static int load_idle(ctx *c, const sb_config_node *idle, const char *what, sb_config_model *m) {
    const char *s = idle->kind == SB_CFG_SCALAR ? idle->value : "";
    char *end = NULL;
    long secs = 0;
    if (!strncmp(s, "unload-after:", 13) && s[13] >= '0' && s[13] <= '9') {
        errno = 0;
        secs = strtol(s + 13, &end, 10);
        if (errno || *end || secs < 1 || secs > INT_MAX) end = NULL;
    }
    if (strcmp(s, "keep") && !end)
        return FAIL(c, idle, "%s.idle: expected 'keep' or 'unload-after:SECONDS' "
                    "(SECONDS >= 1), got '%s'", what, s);
    m->idle_unload_s = (int)secs;
    return 0;
}

/* A `gguf:` model: a local file its worker loads. */
static int load_local(ctx *c, const sb_config_node *key, const sb_config_node *v, const char *what,
                      sb_config_model *m) {
    static const char *const kv_types[] = { "f16", "f32", NULL };
    struct stat st;
    int kv = SB_KV_F16, rc;
    if ((rc = get_path(c, v, what, "gguf", true, &m->gguf, &st)) ||
        (rc = get_int(c, v, what, "threads", 1, SB_CONFIG_MAX_THREADS, &m->threads)) ||
        (rc = get_int(c, v, what, "ctx", SB_CONFIG_MIN_CTX, SB_CONFIG_MAX_CTX, &m->ctx)) ||
        (rc = get_int(c, v, what, "kv_mb", 1, SB_CONFIG_MAX_KV_MB, &m->kv_mb)) ||
        (rc = get_int(c, v, what, "lookup", 0, 16, &m->lookup)) ||
        (rc = get_str(c, v, what, "draft", &m->draft)) ||
        (rc = get_enum(c, v, what, "kv_type", kv_types, &kv)))
        return rc;
    m->kv_type = (sb_kv_type)kv;
    m->gguf_dev = st.st_dev;
    m->gguf_ino = st.st_ino;
    m->gguf_size = (uint64_t)st.st_size;
    m->gguf_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    const sb_config_node *idle = sb_config_node_get(v, "idle");
    if (idle && (rc = load_idle(c, idle, what, m))) return rc;
    if (m->max_tokens > m->ctx && sb_config_node_get(v, "max_tokens"))
        return FAIL(c, sb_config_node_get(v, "max_tokens"),
                    "%s.max_tokens: %d exceeds the context size (ctx: %d)", what, m->max_tokens, m->ctx);
    if (m->max_tokens > m->ctx) m->max_tokens = m->ctx;
    /* The worker listens on DIR/NAME.sock; catch a path the kernel would
     * refuse now, not when the supervisor starts the worker. */
    struct sockaddr_un sa;
    size_t sock_len = strlen(c->cfg->runtime.dir) + 1 + strlen(m->name) + 5;
    if (sock_len >= sizeof sa.sun_path)
        return FAIL(c, key, "%s: socket path '%s/%s.sock' is %zu bytes; Unix sockets allow %zu "
                    "(use a shorter runtime.dir)", what, c->cfg->runtime.dir, m->name,
                    sock_len, sizeof sa.sun_path - 1);
    return 0;
}

static int load_model(ctx *c, const sb_config_node *key, const sb_config_node *v,
                      sb_config_model *m) {
    static const char *const local_keys[] = { "gguf", "threads", "ctx", "kv_type", "idle", "parallel",
                                              "kv_mb", "max_queue", "max_tokens", "deadline_ms", "lookup",
                                              "draft", NULL };
    static const char *const remote_keys[] = { "upstream", "model", "api_key_env", "timeout_ms", "parallel",
                                               "max_queue", "max_tokens", "deadline_ms", NULL };
    char what[SB_CONFIG_MAX_NAME + 16];
    snprintf(what, sizeof what, "models.%s", key->value);
    int rc;
    *m = (sb_config_model){ .line = key->line, .col = key->col, .threads = 1, .ctx = 2048,
                            .kv_type = SB_KV_F16, .timeout_ms = 30000, .max_queue = 8,
                            .max_tokens = 512, .deadline_ms = 120000 };
    if (!(m->name = sb_strdup(key->value))) return SB_ENOMEM;
    if (!valid_name(key->value, SB_CONFIG_MAX_NAME))
        return FAIL(c, key, "models: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                    key->value, SB_CONFIG_MAX_NAME);
    if ((rc = want_map(c, v, what))) return rc;
    const sb_config_node *g = sb_config_node_get(v, "gguf"), *u = sb_config_node_get(v, "upstream");
    if (!g == !u)
        return FAIL(c, g ? u : v, "%s: expected exactly one of 'gguf' (a local model file) "
                    "or 'upstream' (a remote endpoint)", what);
    if ((rc = check_keys(c, v, what, g ? local_keys : remote_keys)) ||
        (rc = get_int(c, v, what, "parallel", 1, SB_CONFIG_MAX_PARALLEL, &m->parallel)) ||
        (rc = get_int(c, v, what, "max_queue", 0, 65536, &m->max_queue)) ||
        (rc = get_int(c, v, what, "max_tokens", 1, SB_CONFIG_MAX_CTX, &m->max_tokens)) ||
        (rc = get_int(c, v, what, "deadline_ms", 100, 3600000, &m->deadline_ms)))
        return rc;
    return u ? load_upstream(c, v, what, m) : load_local(c, key, v, what, m);
}

static int load_models(ctx *c, const sb_config_node *ms) {
    if (!ms) return FAIL(c, c->cfg->root, "missing 'models': expected a mapping of model names");
    int rc = want_map(c, ms, "models");
    if (rc) return rc;
    if (ms->n_pairs == 0) return FAIL(c, ms, "models: expected at least one model");
    if (!(c->cfg->models = sb_calloc(ms->n_pairs, sizeof *c->cfg->models))) return SB_ENOMEM;
    for (size_t i = 0; i < ms->n_pairs; i++) {
        c->cfg->n_models = i + 1;               /* so free sees partial entries */
        if ((rc = load_model(c, ms->pairs[i].key, ms->pairs[i].value, &c->cfg->models[i])))
            return rc;
    }
    /* draft: another local model; its vocabulary is checked by the worker. */
    for (size_t i = 0; i < c->cfg->n_models; i++) {
        const sb_config_model *m = &c->cfg->models[i], *d = m->draft ? sb_config_find_model(c->cfg, m->draft) : NULL;
        const sb_config_node *at = sb_config_node_get(ms->pairs[i].value, "draft");
        if (m->draft && (!d || !d->gguf || d == m))
            return FAIL(c, at, "models.%s.draft: '%s' is not another local (gguf) model of models:", m->name, m->draft);
        if (m->draft && m->lookup)
            return FAIL(c, at, "models.%s: 'lookup' and 'draft' are alternatives; set one", m->name);
    }
    return 0;
}

/* The sync carries callers' text between machines, so it goes over https;
 * plain http is kept for a cloud on this machine (tests, a local TLS
 * terminator in front of `switchboard cloud`). */
static int check_sync_url(ctx *c, const sb_config_node *at, const char *url) {
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(url, 0);
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL, *host = u ? evhttp_uri_get_host(u) : NULL;
    int rc = 0;
    if (!scheme || !host || !*host || (strcmp(scheme, "https") && strcmp(scheme, "http")))
        rc = FAIL(c, at, "cache.sync.url: expected https://HOST[:PORT][/PREFIX], got '%s'", url);
    else if (!strcmp(scheme, "http") && strcmp(host, "localhost") && strncmp(host, "127.", 4) &&
             strcmp(host, "::1") && strcmp(host, "[::1]"))
        rc = FAIL(c, at, "cache.sync.url: '%s' would send callers' text unencrypted; use https:// "
                         "(http:// is accepted for a loopback host only)", url);
    if (u) evhttp_uri_free(u);
    return rc;
}

static int load_cache(ctx *c, const sb_config_node *cs) {
    static const char *const keys[] = { "path", "max_mb", "ttl_s", "sync", NULL };
    static const char *const sync_keys[] = { "url", "edge_id", "secret_file", "ca_file", "interval_s", NULL };
    sb_config *cfg = c->cfg;
    if (!cs) return 0;
    int rc;
    if ((rc = want_map(c, cs, "cache")) || (rc = check_keys(c, cs, "cache", keys))) return rc;
    cfg->cache.enabled = true;
    cfg->cache.node = cs;
    cfg->cache.max_mb = 256;
    cfg->cache.ttl_s = 86400;
    if (!(cfg->cache.path = resolve(cfg->runtime.dir, "cache.sqlite"))) return SB_ENOMEM;
    if ((rc = get_path(c, cs, "cache", "path", false, &cfg->cache.path, NULL)) ||
        (rc = get_int(c, cs, "cache", "max_mb", 1, 1 << 20, &cfg->cache.max_mb)) ||
        (rc = get_int(c, cs, "cache", "ttl_s", 0, 10 * 366 * 86400, &cfg->cache.ttl_s)))
        return rc;
    const sb_config_node *sy = sb_config_node_get(cs, "sync");
    if (!sy) return 0;
    if ((rc = want_map(c, sy, "cache.sync")) || (rc = check_keys(c, sy, "cache.sync", sync_keys))) return rc;
    cfg->cache.sync.interval_s = 300;
    if ((rc = get_str(c, sy, "cache.sync", "url", &cfg->cache.sync.url)) ||
        (rc = get_str(c, sy, "cache.sync", "edge_id", &cfg->cache.sync.edge_id)) ||
        (rc = get_path(c, sy, "cache.sync", "secret_file", true, &cfg->cache.sync.secret_file, NULL)) ||
        (rc = get_path(c, sy, "cache.sync", "ca_file", true, &cfg->cache.sync.ca_file, NULL)) ||
        (rc = get_int(c, sy, "cache.sync", "interval_s", 5, 86400, &cfg->cache.sync.interval_s)))
        return rc;
    if (!cfg->cache.sync.url || !cfg->cache.sync.edge_id || !cfg->cache.sync.secret_file)
        return FAIL(c, sy, "cache.sync: expected 'url', 'edge_id' and 'secret_file'");
    return check_sync_url(c, sb_config_node_get(sy, "url"), cfg->cache.sync.url);
}

static int load_console(ctx *c, const sb_config_node *cn) {
    static const char *const keys[] = { "traces", "show_caller_text", "feedback_path", "otel_file", NULL };
    static const char *const bools[] = { "false", "true", NULL };
    sb_config *cfg = c->cfg;
    cfg->console.traces = 200;
    if (!(cfg->console.feedback_path = resolve(cfg->runtime.dir, "feedback.sqlite"))) return SB_ENOMEM;
    if (!cn) return 0;
    int rc, show = 0;
    if ((rc = want_map(c, cn, "console")) || (rc = check_keys(c, cn, "console", keys)) ||
        (rc = get_int(c, cn, "console", "traces", 0, 100000, &cfg->console.traces)) ||
        (rc = get_enum(c, cn, "console", "show_caller_text", bools, &show)) ||
        (rc = get_path(c, cn, "console", "feedback_path", false, &cfg->console.feedback_path, NULL)) ||
        (rc = get_path(c, cn, "console", "otel_file", false, &cfg->console.otel_file, NULL)))
        return rc;
    cfg->console.show_caller_text = show;
    return 0;
}

/* knowledge.NAME: the model must be a local one of this config; whether its
 * GGUF is an encoder is checked by `kb` when it opens it (the loader does
 * not read model files). */
static int load_kb(ctx *c, const sb_config_node *key, const sb_config_node *v, sb_config_kb *k) {
    static const char *const keys[] = { "path", "embed_model", "chunk_tokens", "overlap", "pull", NULL };
    static const char *const bools[] = { "false", "true", NULL };
    char what[SB_CONFIG_MAX_NAME + 16];
    snprintf(what, sizeof what, "knowledge.%s", key->value);
    *k = (sb_config_kb){ .line = key->line, .col = key->col, .chunk_tokens = 200, .overlap = 32 };
    if (!(k->name = sb_strdup(key->value))) return SB_ENOMEM;
    if (!valid_name(key->value, SB_CONFIG_MAX_NAME))
        return FAIL(c, key, "knowledge: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                    key->value, SB_CONFIG_MAX_NAME);
    int rc, pull = 0;
    if ((rc = want_map(c, v, what)) || (rc = check_keys(c, v, what, keys)) ||
        (rc = get_enum(c, v, what, "pull", bools, &pull)) ||
        (rc = get_path(c, v, what, "path", false, &k->path, NULL)) ||
        (rc = get_str(c, v, what, "embed_model", &k->embed_model)) ||
        (rc = get_int(c, v, what, "chunk_tokens", 64, 510, &k->chunk_tokens)) ||
        (rc = get_int(c, v, what, "overlap", 0, 128, &k->overlap)))
        return rc;
    if (!k->path || !k->embed_model)
        return FAIL(c, v, "%s: expected 'path' (the SQLite file) and 'embed_model' (an encoder of models:)", what);
    const sb_config_model *m = sb_config_find_model(c->cfg, k->embed_model);
    if (!m || !m->gguf)
        return FAIL(c, sb_config_node_get(v, "embed_model"), "%s.embed_model: '%s' is not a local (gguf) model "
                    "of models:", what, k->embed_model);
    if (k->overlap >= k->chunk_tokens)
        return FAIL(c, sb_config_node_get(v, "overlap"), "%s.overlap: %d must be less than chunk_tokens (%d)",
                    what, k->overlap, k->chunk_tokens);
    /* pulled from the cloud of cache.sync (loaded before this section) */
    if ((k->pull = pull) && !c->cfg->cache.sync.url)
        return FAIL(c, sb_config_node_get(v, "pull"), "%s.pull: needs cache.sync (the cloud to pull from)", what);
    return 0;
}

static int load_knowledge(ctx *c, const sb_config_node *ks) {
    if (!ks) return 0;
    int rc = want_map(c, ks, "knowledge");
    if (rc) return rc;
    if (ks->n_pairs && !(c->cfg->kbs = sb_calloc(ks->n_pairs, sizeof *c->cfg->kbs))) return SB_ENOMEM;
    for (size_t i = 0; i < ks->n_pairs; i++) {
        c->cfg->n_kbs = i + 1;                  /* so free sees partial entries */
        if ((rc = load_kb(c, ks->pairs[i].key, ks->pairs[i].value, &c->cfg->kbs[i]))) return rc;
    }
    return 0;
}

/* Only the shape here; the router validates stages against its engine. */
static int load_pipelines(ctx *c, const sb_config_node *ps) {
    if (!ps) return 0;
    int rc = want_map(c, ps, "pipelines");
    if (rc) return rc;
    for (size_t i = 0; i < ps->n_pairs; i++) {
        const sb_config_node *k = ps->pairs[i].key, *v = ps->pairs[i].value;
        if (!valid_name(k->value, SB_CONFIG_MAX_NAME))
            return FAIL(c, k, "pipelines: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                        k->value, SB_CONFIG_MAX_NAME);
        char what[SB_CONFIG_MAX_NAME + 16];
        snprintf(what, sizeof what, "pipelines.%s", k->value);
        if ((rc = want_map(c, v, what))) return rc;
    }
    c->cfg->pipelines = ps;
    return 0;
}

static int load_schema(sb_config *cfg, char *err) {
    static const char *const keys[] = { "runtime", "models", "cache", "knowledge", "pipelines", "console", NULL };
    ctx c = { cfg, err };
    const sb_config_node *root = cfg->root;
    int rc;
    if (!root || sb_config_node_is_null(root))
        return sb_seterr(err, SB_EINVAL, "%s:1:1: empty configuration: expected a mapping with "
                         "'models'", cfg->path);
    if ((rc = want_map(&c, root, "configuration")) || (rc = check_keys(&c, root, "configuration", keys)) ||
        (rc = load_runtime(&c, sb_config_node_get(root, "runtime"))) ||
        (rc = load_models(&c, sb_config_node_get(root, "models"))) ||
        (rc = load_cache(&c, sb_config_node_get(root, "cache"))) ||
        (rc = load_knowledge(&c, sb_config_node_get(root, "knowledge"))) ||
        (rc = load_console(&c, sb_config_node_get(root, "console"))) ||
        (rc = load_pipelines(&c, sb_config_node_get(root, "pipelines"))))
        return rc;
    return 0;
}

/* ============================================================ entry points */

static char *absolute_dir_of(const char *path) {
    char *copy = sb_strdup(path);
    if (!copy) return NULL;
    char *slash = strrchr(copy, '/');
    const char *dir = ".";
    if (slash == copy) dir = "/";
    else if (slash) { *slash = '\0'; dir = copy; }
    char *abs = realpath(dir, NULL);            /* malloc'd by libc */
    char *out = abs ? sb_strdup(abs) : sb_strdup(dir);
    free(abs);
    sb_free(copy);
    return out;
}

int sb_config_parse(const char *text, size_t len, const char *path, sb_config **out, char *err) {
    *out = NULL;
    if (len > SB_CONFIG_MAX_BYTES)
        return sb_seterr(err, SB_EINVAL, "%s: larger than %u bytes", path, SB_CONFIG_MAX_BYTES);
    sb_config *cfg = sb_calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->path = sb_strdup(path)) || !(cfg->base_dir = absolute_dir_of(path))) {
        sb_config_free(cfg);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    int rc = sb_config_tree_parse(text, len, path, &cfg->root, err);
    if (!rc) rc = load_schema(cfg, err);
    if (rc == SB_ENOMEM) sb_seterr(err, rc, "%s: out of memory", path);
    if (rc) { sb_config_free(cfg); return rc; }
    *out = cfg;
    return 0;
}

int sb_config_load(const char *path, sb_config **out, char *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > (off_t)SB_CONFIG_MAX_BYTES) {
        close(fd);
        return sb_seterr(err, SB_EIO, "%s: not a regular file of at most %u bytes",
                         path, SB_CONFIG_MAX_BYTES);
    }
    size_t size = (size_t)st.st_size;
    char *text = sb_malloc(size + 1);
    if (!text) { close(fd); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, text + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (got != size) {
        sb_free(text);
        return sb_seterr(err, SB_EIO, "%s: short read", path);
    }
    int rc = sb_config_parse(text, size, path, out, err);
    sb_free(text);
    return rc;
}

void sb_config_free(sb_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->n_models; i++) {
        sb_config_model *m = &cfg->models[i];
        sb_free(m->name);
        sb_free(m->gguf);
        sb_free(m->draft);
        sb_free(m->upstream);
        sb_free(m->upstream_model);
        sb_free(m->api_key_env);
    }
    sb_free(cfg->models);
    for (size_t i = 0; i < cfg->n_kbs; i++) {
        sb_free(cfg->kbs[i].name);
        sb_free(cfg->kbs[i].path);
        sb_free(cfg->kbs[i].embed_model);
    }
    sb_free(cfg->kbs);
    sb_free(cfg->runtime.dir);
    sb_free(cfg->runtime.http);
    sb_free(cfg->runtime.http_host);
    sb_free(cfg->runtime.api_key_env);
    sb_free(cfg->runtime.api_key_file);
    sb_free(cfg->cache.path);
    sb_free(cfg->cache.sync.url);
    sb_free(cfg->cache.sync.edge_id);
    sb_free(cfg->cache.sync.secret_file);
    sb_free(cfg->cache.sync.ca_file);
    sb_free(cfg->console.feedback_path);
    sb_free(cfg->console.otel_file);
    sb_config_tree_free(cfg->root);
    sb_free(cfg->path);
    sb_free(cfg->base_dir);
    sb_free(cfg);
}

const sb_config_model *sb_config_find_model(const sb_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_models; i++)
        if (!strcmp(cfg->models[i].name, name)) return &cfg->models[i];
    return NULL;
}

const sb_config_kb *sb_config_find_kb(const sb_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_kbs; i++)
        if (!strcmp(cfg->kbs[i].name, name)) return &cfg->kbs[i];
    return NULL;
}

static bool str_eq(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

bool sb_config_equal_model(const sb_config_model *a, const sb_config_model *b) {
    return str_eq(a->name, b->name) && str_eq(a->gguf, b->gguf) &&
           a->threads == b->threads && a->ctx == b->ctx && a->kv_type == b->kv_type &&
           a->idle_unload_s == b->idle_unload_s && a->parallel == b->parallel && a->kv_mb == b->kv_mb &&
           a->lookup == b->lookup && str_eq(a->draft, b->draft) &&
           str_eq(a->upstream, b->upstream) &&
           str_eq(a->upstream_model, b->upstream_model) && str_eq(a->api_key_env, b->api_key_env) &&
           a->timeout_ms == b->timeout_ms && a->max_queue == b->max_queue &&
           a->max_tokens == b->max_tokens && a->deadline_ms == b->deadline_ms &&
           a->gguf_dev == b->gguf_dev && a->gguf_ino == b->gguf_ino &&
           a->gguf_size == b->gguf_size && a->gguf_mtime_ns == b->gguf_mtime_ns;
}

bool sb_config_equal_runtime(const sb_config *a, const sb_config *b) {
    return str_eq(a->runtime.dir, b->runtime.dir) && a->runtime.log_level == b->runtime.log_level;
}
