/* sup_config.c - the configuration's `runtime` and `models` sections
 * (docs/config.md), declared here because the supervisor is what they
 * configure: the runtime directory, the HTTP door and drain it starts the
 * router with, and the local workers it starts (their argv is built from
 * a local model's keys, sup_proc.c). A remote model's keys are the
 * backend's, which calls it (router/backend/upstream_config.c). The core
 * in common/config.c runs these through supervisor/config_sections.c.
 */
#include "supervisor/sb_supervisor.h"
#include "common/sb_net.h"
#include "router/backend/sb_backend.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#define FAIL SB_CFG_FAIL

/* ------------------------------------------------------------ runtime */

static const char *const log_levels[] = { "debug", "info", "warn", "error", NULL };

#define RT(f) offsetof(sb_config, runtime.f)
static const sb_cfg_key runtime_keys[] = {
    { "dir", SB_KEY_PATH, 0, 0, RT(dir), NULL },
    { "http", SB_KEY_STR, 1, 0, RT(http), NULL },
    { "api_key_env", SB_KEY_STR, 1, 0, RT(api_key_env), NULL },
    { "api_key_file", SB_KEY_PATH, 1, 0, RT(api_key_file), NULL },
    { "api_keys_file", SB_KEY_PATH, 1, 0, RT(api_keys_file), NULL },
    { "secret_key_file", SB_KEY_PATH, 1, 0, RT(secret_key_file), NULL },
    { "log_level", SB_KEY_ENUM, 0, 0, RT(log_level), log_levels },
    { "drain_ms", SB_KEY_INT, 0, 3600000, RT(drain_ms), NULL },
    { "retention", SB_KEY_OTHER, 0, 0, 0, NULL },           /* its own section */
    SB_CFG_KEYS_END
};

static int runtime_defaults(sb_config *cfg, const sb_config_node *rt) {
    if (!(cfg->runtime.dir = sb_cfg_resolve(cfg->base_dir, "run")) ||
        !(cfg->runtime.http = sb_strdup("127.0.0.1:8080")))
        return SB_ENOMEM;
    cfg->runtime.log_level = SB_LOG_INFO;
    cfg->runtime.drain_ms = 10000;
    return 0;
}

static int load_runtime(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *rt) {
    if (rt) {
        if (cfg->runtime.api_key_env && cfg->runtime.api_key_file)
            return FAIL(c, sb_config_node_get(rt, "api_key_file"),
                        "runtime: give api_key_env or api_key_file, not both");
        if (cfg->runtime.api_key_env && !sb_cfg_valid_env_name(cfg->runtime.api_key_env))
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

const sb_cfg_section sb_runtime_section = {
    .name = "runtime", .keys = runtime_keys, .init = runtime_defaults, .load = load_runtime,
};

/* runtime.retention: how many days the router keeps what callers said
 * (router/retention.c purges it); 0, the default, keeps it. A century is
 * the bound: a larger number is a typo, not a policy. */
#define RET(f) offsetof(sb_config, runtime.retention.f)
static const sb_cfg_key retention_keys[] = {
    { "traces_days", SB_KEY_INT, 0, 36500, RET(traces_days), NULL },
    { "sessions_days", SB_KEY_INT, 0, 36500, RET(sessions_days), NULL },
    { "feedback_days", SB_KEY_INT, 0, 36500, RET(feedback_days), NULL },
    SB_CFG_KEYS_END
};

const sb_cfg_section sb_retention_section = { .name = "runtime.retention", .keys = retention_keys };

/* ------------------------------------------------------------- models */

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
    { "adapter", SB_KEY_OTHER, 0, 0, 0, NULL },             /* a readable file, its identity kept */
    { "adapters", SB_KEY_OTHER, 0, 0, 0, NULL },            /* NAME: a readable file, each */
    SB_CFG_KEYS_END
};

/* idle: keep | unload-after:SECONDS -> m->idle_unload_s (0: keep). */
static int load_idle(const sb_cfg_ctx *c, const sb_config_node *idle, sb_config_model *m) {
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
                    "(SECONDS >= 1), got '%s'", c->path, s);
    m->idle_unload_s = (int)secs;
    return 0;
}

#define MAX_ADAPTERS 16

/* adapters: {NAME: FILE}: each file readable; "none" is what a request
 * says for no adapter, so it names none. */
static int load_adapters(const sb_cfg_ctx *c, const sb_config_node *v, sb_config_model *m) {
    int rc = sb_cfg_want_map(c, v);
    if (rc) return rc;
    if (v->n_pairs > MAX_ADAPTERS) return FAIL(c, v, "%s.adapters: at most %d", c->path, MAX_ADAPTERS);
    if (!(m->adapter_names = sb_calloc(v->n_pairs + 1, sizeof *m->adapter_names)) ||
        !(m->adapter_paths = sb_calloc(v->n_pairs + 1, sizeof *m->adapter_paths)))
        return SB_ENOMEM;
    uint64_t id = 1469598103934665603ull;
    for (size_t i = 0; i < v->n_pairs; i++) {
        const char *name = v->pairs[i].key->value;
        if (!sb_cfg_valid_name(name, SB_CONFIG_MAX_NAME) || !strcmp(name, "none"))
            return FAIL(c, v->pairs[i].key, "%s.adapters: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ - "
                        "and not 'none'", c->path, name, SB_CONFIG_MAX_NAME);
        char key[SB_CONFIG_MAX_NAME + 16];
        snprintf(key, sizeof key, "adapters.%s", name);
        struct stat st;
        m->n_adapters = i + 1;                  /* so free sees partial entries */
        if (!(m->adapter_names[i] = sb_strdup(name))) return SB_ENOMEM;
        if ((rc = sb_cfg_path(c, v->pairs[i].value, key, true, &m->adapter_paths[i], &st))) return rc;
        const uint64_t parts[2] = { (uint64_t)st.st_size,
                                    (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec };
        for (int k = 0; k < 2; k++) id = (id ^ parts[k]) * 1099511628211ull;
    }
    m->adapters_id = id;
    return 0;
}

/* A `gguf:` model: a local file its worker loads. c->path: "models.NAME". */
static int load_local(const sb_cfg_ctx *c, const sb_config_node *key, const sb_config_node *v,
                      sb_config_model *m) {
    struct stat st;
    int rc = sb_cfg_read_map(c, v, local_keys, m);
    if (rc || (rc = sb_cfg_path(c, sb_config_node_get(v, "gguf"), "gguf", true, &m->gguf, &st))) return rc;
    m->gguf_dev = st.st_dev;
    m->gguf_ino = st.st_ino;
    m->gguf_size = (uint64_t)st.st_size;
    m->gguf_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    const sb_config_node *idle = sb_config_node_get(v, "idle"), *ad = sb_config_node_get(v, "adapter"),
                         *ads = sb_config_node_get(v, "adapters");
    if (ads && (rc = load_adapters(c, ads, m))) return rc;
    if (idle && (rc = load_idle(c, idle, m))) return rc;
    if (ad) {
        if ((rc = sb_cfg_path(c, ad, "adapter", true, &m->adapter, &st))) return rc;
        m->adapter_size = (uint64_t)st.st_size;
        m->adapter_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    if (m->max_tokens > m->ctx && sb_config_node_get(v, "max_tokens"))
        return FAIL(c, sb_config_node_get(v, "max_tokens"),
                    "%s.max_tokens: %d exceeds the context size (ctx: %d)", c->path, m->max_tokens, m->ctx);
    if (m->max_tokens > m->ctx) m->max_tokens = m->ctx;
    /* The worker listens on DIR/NAME.sock; catch a path the kernel would
     * refuse now, not when the supervisor starts the worker. */
    struct sockaddr_un sa;
    size_t sock_len = strlen(c->cfg->runtime.dir) + 1 + strlen(m->name) + 5;
    if (sock_len >= sizeof sa.sun_path)
        return FAIL(c, key, "%s: socket path '%s/%s.sock' is %zu bytes; Unix sockets allow %zu "
                    "(use a shorter runtime.dir)", c->path, c->cfg->runtime.dir, m->name,
                    sock_len, sizeof sa.sun_path - 1);
    return 0;
}

static int load_model(const sb_cfg_ctx *models, const sb_config_node *key, const sb_config_node *v,
                      sb_config_model *m) {
    char what[SB_CONFIG_MAX_NAME + 16];
    snprintf(what, sizeof what, "models.%s", key->value);
    sb_cfg_ctx k = { models->cfg, models->err, what, false };
    int rc;
    *m = (sb_config_model){ .line = key->line, .col = key->col, .threads = 1, .ctx = 2048,
                            .kv_type = SB_KV_F16, .timeout_ms = 30000, .max_queue = 8,
                            .max_tokens = 512, .deadline_ms = 120000 };
    if (!(m->name = sb_strdup(key->value))) return SB_ENOMEM;
    if (!sb_cfg_valid_name(key->value, SB_CONFIG_MAX_NAME))
        return FAIL(models, key, "models: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                    key->value, SB_CONFIG_MAX_NAME);
    if ((rc = sb_cfg_want_map(&k, v))) return rc;
    const sb_config_node *g = sb_config_node_get(v, "gguf"), *u = sb_config_node_get(v, "upstream");
    if (!g == !u)
        return FAIL(models, g ? u : v, "%s: expected exactly one of 'gguf' (a local model file) "
                    "or 'upstream' (a remote endpoint)", what);
    return u ? rt_upstream_model_load(&k, v, m) : load_local(&k, key, v, m);
}

static int load_models(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *ms) {
    if (!ms) return FAIL(c, cfg->root, "missing 'models': expected a mapping of model names");
    int rc = sb_cfg_want_map(c, ms);
    if (rc) return rc;
    if (ms->n_pairs == 0) return FAIL(c, ms, "models: expected at least one model");
    if (!(cfg->models = sb_calloc(ms->n_pairs, sizeof *cfg->models))) return SB_ENOMEM;
    for (size_t i = 0; i < ms->n_pairs; i++) {
        cfg->n_models = i + 1;                  /* so free sees partial entries */
        if ((rc = load_model(c, ms->pairs[i].key, ms->pairs[i].value, &cfg->models[i])))
            return rc;
    }
    /* draft: another local model; its vocabulary is checked by the worker. */
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sb_config_model *m = &cfg->models[i], *d = m->draft ? sb_config_find_model(cfg, m->draft) : NULL;
        const sb_config_node *at_draft = sb_config_node_get(ms->pairs[i].value, "draft");
        if (m->draft && (!d || !d->gguf || d == m))
            return FAIL(c, at_draft, "models.%s.draft: '%s' is not another local (gguf) model of models:", m->name,
                        m->draft);
        if (m->draft && m->lookup)
            return FAIL(c, at_draft, "models.%s: 'lookup' and 'draft' are alternatives; set one", m->name);
    }
    return 0;
}

const sb_cfg_section sb_models_section = { .name = "models", .load = load_models };
