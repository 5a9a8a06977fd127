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

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
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

/* Each section below declares its keys (sb_config.h, "typed keys": name,
 * type, bounds, where the value goes) next to the code that loads it, and
 * reads them with the one validator in config_keys.c; what a table cannot
 * say (a file's identity, a URL, one key against another) follows it. */

typedef struct {
    sb_config *cfg;
    char *err;
} ctx;

#define FAIL(c, node, ...) sb_config_node_error((c)->cfg, (node), (c)->err, __VA_ARGS__)
#define KEYS_END { NULL, SB_KEY_OTHER, 0, 0, 0, NULL }

/* The context for the section at path (a key path for messages). */
static sb_cfg_ctx at(const ctx *c, const char *path) { return (sb_cfg_ctx){ c->cfg, c->err, path, false }; }

/* A section's mapping, its keys known and its typed ones read into base. */
static int read_section(const ctx *c, const char *path, const sb_config_node *n, const sb_cfg_key *keys, void *base) {
    sb_cfg_ctx k = at(c, path);
    int rc = sb_cfg_want_map(&k, n);
    if (!rc) rc = sb_cfg_keys_check(&k, n, keys);
    return rc ? rc : sb_cfg_keys_read(&k, n, keys, base);
}

static bool valid_env_name(const char *s) {
    if (!*s || (*s >= '0' && *s <= '9')) return false;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

static const char *const log_levels[] = { "debug", "info", "warn", "error", NULL };
static const char *const bools[] = { "false", "true", NULL };   /* quoted or not: the config's own switches */

#define RT(f) offsetof(sb_config, runtime.f)
static const sb_cfg_key runtime_keys[] = {
    { "dir", SB_KEY_PATH, 0, 0, RT(dir), NULL },
    { "http", SB_KEY_STR, 1, 0, RT(http), NULL },
    { "api_key_env", SB_KEY_STR, 1, 0, RT(api_key_env), NULL },
    { "api_key_file", SB_KEY_PATH, 1, 0, RT(api_key_file), NULL },
    { "secret_key_file", SB_KEY_PATH, 1, 0, RT(secret_key_file), NULL },
    { "log_level", SB_KEY_ENUM, 0, 0, RT(log_level), log_levels },
    { "drain_ms", SB_KEY_INT, 0, 3600000, RT(drain_ms), NULL },
    KEYS_END
};

static int load_runtime(ctx *c, const sb_config_node *rt) {
    sb_config *cfg = c->cfg;
    int rc;
    if (!(cfg->runtime.dir = sb_cfg_resolve(cfg->base_dir, "run")) ||
        !(cfg->runtime.http = sb_strdup("127.0.0.1:8080")))
        return SB_ENOMEM;
    cfg->runtime.log_level = SB_LOG_INFO;
    cfg->runtime.drain_ms = 10000;
    if (rt) {
        if ((rc = read_section(c, "runtime", rt, runtime_keys, cfg))) return rc;
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

/* models.NAME: a local model (gguf) or a remote one (upstream); the keys
 * both kinds take are in each table, in the order the messages list them. */
#define M(f) offsetof(sb_config_model, f)
static const char *const kv_types[] = { "f16", "f32", NULL };
static_assert(sizeof(sb_kv_type) == sizeof(int), "kv_type is read as an enum's int");
static const sb_cfg_key local_keys[] = {
    { "gguf", SB_KEY_OTHER, 0, 0, 0, NULL },                /* a readable file, its identity kept */
    { "threads", SB_KEY_INT, 1, SB_CONFIG_MAX_THREADS, M(threads), NULL },
    { "ctx", SB_KEY_INT, SB_CONFIG_MIN_CTX, SB_CONFIG_MAX_CTX, M(ctx), NULL },
    { "kv_type", SB_KEY_ENUM, 0, 0, M(kv_type), kv_types },
    { "idle", SB_KEY_OTHER, 0, 0, 0, NULL },                /* keep | unload-after:SECONDS */
    { "parallel", SB_KEY_INT, 1, SB_CONFIG_MAX_PARALLEL, M(parallel), NULL },
    { "kv_mb", SB_KEY_INT, 1, SB_CONFIG_MAX_KV_MB, M(kv_mb), NULL },
    { "max_queue", SB_KEY_INT, 0, 65536, M(max_queue), NULL },
    { "max_tokens", SB_KEY_INT, 1, SB_CONFIG_MAX_CTX, M(max_tokens), NULL },
    { "deadline_ms", SB_KEY_INT, 100, 3600000, M(deadline_ms), NULL },
    { "lookup", SB_KEY_INT, 0, 16, M(lookup), NULL },
    { "draft", SB_KEY_STR, 1, 0, M(draft), NULL },
    KEYS_END
};
static const sb_cfg_key remote_keys[] = {
    { "upstream", SB_KEY_STR, 1, 0, M(upstream), NULL },
    { "model", SB_KEY_STR, 1, 0, M(upstream_model), NULL },
    { "api_key_env", SB_KEY_STR, 1, 0, M(api_key_env), NULL },
    { "timeout_ms", SB_KEY_INT, 1, 3600000, M(timeout_ms), NULL },
    { "parallel", SB_KEY_INT, 1, SB_CONFIG_MAX_PARALLEL, M(parallel), NULL },
    { "max_queue", SB_KEY_INT, 0, 65536, M(max_queue), NULL },
    { "max_tokens", SB_KEY_INT, 1, SB_CONFIG_MAX_CTX, M(max_tokens), NULL },
    { "deadline_ms", SB_KEY_INT, 100, 3600000, M(deadline_ms), NULL },
    KEYS_END
};

/* An `upstream:` model: a remote OpenAI-compatible endpoint. */
static int load_upstream(ctx *c, const sb_config_node *v, const char *what, sb_config_model *m) {
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
    struct stat st;
    sb_cfg_ctx k = at(c, what);
    int rc = sb_cfg_path(&k, sb_config_node_get(v, "gguf"), "gguf", true, &m->gguf, &st);
    if (rc) return rc;
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
    char what[SB_CONFIG_MAX_NAME + 16];
    snprintf(what, sizeof what, "models.%s", key->value);
    sb_cfg_ctx k = at(c, what);
    int rc;
    *m = (sb_config_model){ .line = key->line, .col = key->col, .threads = 1, .ctx = 2048,
                            .kv_type = SB_KV_F16, .timeout_ms = 30000, .max_queue = 8,
                            .max_tokens = 512, .deadline_ms = 120000 };
    if (!(m->name = sb_strdup(key->value))) return SB_ENOMEM;
    if (!sb_cfg_valid_name(key->value, SB_CONFIG_MAX_NAME))
        return FAIL(c, key, "models: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                    key->value, SB_CONFIG_MAX_NAME);
    if ((rc = sb_cfg_want_map(&k, v))) return rc;
    const sb_config_node *g = sb_config_node_get(v, "gguf"), *u = sb_config_node_get(v, "upstream");
    if (!g == !u)
        return FAIL(c, g ? u : v, "%s: expected exactly one of 'gguf' (a local model file) "
                    "or 'upstream' (a remote endpoint)", what);
    if ((rc = read_section(c, what, v, g ? local_keys : remote_keys, m))) return rc;
    return u ? load_upstream(c, v, what, m) : load_local(c, key, v, what, m);
}

static int load_models(ctx *c, const sb_config_node *ms) {
    if (!ms) return FAIL(c, c->cfg->root, "missing 'models': expected a mapping of model names");
    sb_cfg_ctx k = at(c, "models");
    int rc = sb_cfg_want_map(&k, ms);
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
        const sb_config_node *at_draft = sb_config_node_get(ms->pairs[i].value, "draft");
        if (m->draft && (!d || !d->gguf || d == m))
            return FAIL(c, at_draft, "models.%s.draft: '%s' is not another local (gguf) model of models:", m->name,
                        m->draft);
        if (m->draft && m->lookup)
            return FAIL(c, at_draft, "models.%s: 'lookup' and 'draft' are alternatives; set one", m->name);
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

#define CA(f) offsetof(sb_config, cache.f)
static const sb_cfg_key cache_keys[] = {
    { "path", SB_KEY_PATH, 0, 0, CA(path), NULL },
    { "max_mb", SB_KEY_INT, 1, 1 << 20, CA(max_mb), NULL },
    { "ttl_s", SB_KEY_INT, 0, 10 * 366 * 86400, CA(ttl_s), NULL },
    { "sync", SB_KEY_OTHER, 0, 0, 0, NULL },
    KEYS_END
};
static const sb_cfg_key sync_keys[] = {
    { "url", SB_KEY_STR, 1, 0, CA(sync.url), NULL },
    { "edge_id", SB_KEY_STR, 1, 0, CA(sync.edge_id), NULL },
    { "secret_file", SB_KEY_PATH, 1, 0, CA(sync.secret_file), NULL },
    { "ca_file", SB_KEY_PATH, 1, 0, CA(sync.ca_file), NULL },
    { "interval_s", SB_KEY_INT, 5, 86400, CA(sync.interval_s), NULL },
    KEYS_END
};

static int load_cache(ctx *c, const sb_config_node *cs) {
    sb_config *cfg = c->cfg;
    if (!cs) return 0;
    cfg->cache.enabled = true;
    cfg->cache.node = cs;
    cfg->cache.max_mb = 256;
    cfg->cache.ttl_s = 86400;
    if (!(cfg->cache.path = sb_cfg_resolve(cfg->runtime.dir, "cache.sqlite"))) return SB_ENOMEM;
    int rc = read_section(c, "cache", cs, cache_keys, cfg);
    if (rc) return rc;
    const sb_config_node *sy = sb_config_node_get(cs, "sync");
    if (!sy) return 0;
    cfg->cache.sync.interval_s = 300;
    if ((rc = read_section(c, "cache.sync", sy, sync_keys, cfg))) return rc;
    if (!cfg->cache.sync.url || !cfg->cache.sync.edge_id || !cfg->cache.sync.secret_file)
        return FAIL(c, sy, "cache.sync: expected 'url', 'edge_id' and 'secret_file'");
    return check_sync_url(c, sb_config_node_get(sy, "url"), cfg->cache.sync.url);
}

#define CO(f) offsetof(sb_config, console.f)
static const sb_cfg_key console_keys[] = {
    { "traces", SB_KEY_INT, 0, 100000, CO(traces), NULL },
    { "show_caller_text", SB_KEY_OTHER, 0, 0, 0, NULL },   /* false | true, into a bool */
    { "feedback_path", SB_KEY_PATH, 0, 0, CO(feedback_path), NULL },
    { "otel_file", SB_KEY_PATH, 0, 0, CO(otel_file), NULL },
    KEYS_END
};

static int load_console(ctx *c, const sb_config_node *cn) {
    sb_config *cfg = c->cfg;
    cfg->console.traces = 200;
    if (!(cfg->console.feedback_path = sb_cfg_resolve(cfg->runtime.dir, "feedback.sqlite"))) return SB_ENOMEM;
    if (!cn) return 0;
    sb_cfg_ctx k = at(c, "console");
    const sb_config_node *v;
    int rc, show = 0;
    if ((rc = read_section(c, "console", cn, console_keys, cfg)) ||
        ((v = sb_config_node_get(cn, "show_caller_text")) && (rc = sb_cfg_enum(&k, v, "show_caller_text", bools, &show))))
        return rc;
    cfg->console.show_caller_text = show;
    return 0;
}

/* knowledge.NAME: the model must be a local one of this config; whether its
 * GGUF is an encoder is checked by `kb` when it opens it (the loader does
 * not read model files). */
#define KB(f) offsetof(sb_config_kb, f)
static const sb_cfg_key kb_keys[] = {
    { "path", SB_KEY_PATH, 0, 0, KB(path), NULL },
    { "embed_model", SB_KEY_STR, 1, 0, KB(embed_model), NULL },
    { "chunk_tokens", SB_KEY_INT, 64, 510, KB(chunk_tokens), NULL },
    { "overlap", SB_KEY_INT, 0, 128, KB(overlap), NULL },
    { "pull", SB_KEY_OTHER, 0, 0, 0, NULL },               /* false | true, into a bool */
    KEYS_END
};

static int load_kb(ctx *c, const sb_config_node *key, const sb_config_node *v, sb_config_kb *k) {
    char what[SB_CONFIG_MAX_NAME + 16];
    snprintf(what, sizeof what, "knowledge.%s", key->value);
    sb_cfg_ctx kc = at(c, what);
    *k = (sb_config_kb){ .line = key->line, .col = key->col, .chunk_tokens = 200, .overlap = 32 };
    if (!(k->name = sb_strdup(key->value))) return SB_ENOMEM;
    if (!sb_cfg_valid_name(key->value, SB_CONFIG_MAX_NAME))
        return FAIL(c, key, "knowledge: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                    key->value, SB_CONFIG_MAX_NAME);
    const sb_config_node *pv;
    int rc, pull = 0;
    if ((rc = read_section(c, what, v, kb_keys, k)) ||
        ((pv = sb_config_node_get(v, "pull")) && (rc = sb_cfg_enum(&kc, pv, "pull", bools, &pull))))
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
    sb_cfg_ctx k = at(c, "knowledge");
    int rc = sb_cfg_want_map(&k, ks);
    if (rc) return rc;
    if (ks->n_pairs && !(c->cfg->kbs = sb_calloc(ks->n_pairs, sizeof *c->cfg->kbs))) return SB_ENOMEM;
    for (size_t i = 0; i < ks->n_pairs; i++) {
        c->cfg->n_kbs = i + 1;                  /* so free sees partial entries */
        if ((rc = load_kb(c, ks->pairs[i].key, ks->pairs[i].value, &c->cfg->kbs[i]))) return rc;
    }
    return 0;
}

/* Only the shape here; the router validates stages against its engine
 * (router/run/pipeline.c, each stage kind with its own keys). */
static int load_pipelines(ctx *c, const sb_config_node *ps) {
    if (!ps) return 0;
    sb_cfg_ctx k = at(c, "pipelines");
    int rc = sb_cfg_want_map(&k, ps);
    if (rc) return rc;
    for (size_t i = 0; i < ps->n_pairs; i++) {
        const sb_config_node *n = ps->pairs[i].key, *v = ps->pairs[i].value;
        if (!sb_cfg_valid_name(n->value, SB_CONFIG_MAX_NAME))
            return FAIL(c, n, "pipelines: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                        n->value, SB_CONFIG_MAX_NAME);
        char what[SB_CONFIG_MAX_NAME + 16];
        snprintf(what, sizeof what, "pipelines.%s", n->value);
        sb_cfg_ctx pk = at(c, what);
        if ((rc = sb_cfg_want_map(&pk, v))) return rc;
    }
    c->cfg->pipelines = ps;
    return 0;
}

static const sb_cfg_key root_keys[] = {
    { "runtime", SB_KEY_OTHER, 0, 0, 0, NULL }, { "models", SB_KEY_OTHER, 0, 0, 0, NULL },
    { "cache", SB_KEY_OTHER, 0, 0, 0, NULL },   { "knowledge", SB_KEY_OTHER, 0, 0, 0, NULL },
    { "pipelines", SB_KEY_OTHER, 0, 0, 0, NULL }, { "console", SB_KEY_OTHER, 0, 0, 0, NULL },
    KEYS_END
};

static int load_schema(sb_config *cfg, char *err) {
    ctx c = { cfg, err };
    sb_cfg_ctx k = at(&c, "configuration");
    const sb_config_node *root = cfg->root;
    int rc;
    if (!root || sb_config_node_is_null(root))
        return sb_seterr(err, SB_EINVAL, "%s:1:1: empty configuration: expected a mapping with "
                         "'models'", cfg->path);
    if ((rc = sb_cfg_want_map(&k, root)) || (rc = sb_cfg_keys_check(&k, root, root_keys)) ||
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
    sb_free(cfg->runtime.secret_key_file);
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
