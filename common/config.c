/* config.c - YAML config: libyaml events -> node tree -> validated sb_config.
 *
 * Two passes. The first (config_yaml.c) turns libyaml's event stream into our
 * own node tree with 1-based positions, rejecting what we never want to
 * interpret (aliases, tags, duplicate keys, non-scalar keys, several
 * documents). The second, here, runs the sections the modules declare
 * (sb_config.h, "sections") over the tree; they fill plain structs. Every
 * error names the file, line and column of the offending node and the dotted
 * key path, so a config can be fixed without reading the code.
 */
#include "common/sb_config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ============================================================= sections */

/* Every section is declared by the module that owns it (sb_config.h,
 * "sections") and listed at the top of the build; here they are only run:
 * the top-level keys checked against their names, then each one's
 * defaults, typed keys and own checks, in the list's order. */

/* The node at a section's key path ("cache.sync"), or NULL. */
static const sb_config_node *section_node(const sb_config_node *root, const char *name) {
    const sb_config_node *n = root;
    char key[SB_CONFIG_MAX_NAME + 1];
    for (const char *p = name; n && *p;) {
        size_t len = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)len, p);
        n = sb_config_node_get(n, key);
        p += len + (p[len] == '.');
    }
    return n;
}

static int load_section(sb_config *cfg, const sb_cfg_section *s, char *err) {
    const sb_config_node *n = section_node(cfg->root, s->name);
    sb_cfg_ctx c = { cfg, err, s->name, false };
    int rc = s->init ? s->init(cfg, n) : 0;
    if (!rc && n && s->keys) rc = sb_cfg_read_map(&c, n, s->keys, cfg);
    if (!rc && s->load) rc = s->load(&c, cfg, n);
    return rc;
}

/* The top-level keys: the names of the sections not nested in another. */
static int check_top_keys(const sb_cfg_ctx *c, const sb_config_node *root) {
    sb_cfg_key keys[32];
    size_t n = 0;
    for (const sb_cfg_section *const *s = sb_config_sections; *s; s++) {
        assert(n + 1 < SB_ARRAY_LEN(keys));
        if (!strchr((*s)->name, '.')) keys[n++] = (sb_cfg_key){ (*s)->name, SB_KEY_OTHER, 0, 0, 0, NULL };
    }
    keys[n] = (sb_cfg_key)SB_CFG_KEYS_END;
    return sb_cfg_keys_check(c, root, keys);
}

static int load_schema(sb_config *cfg, char *err) {
    sb_cfg_ctx c = { cfg, err, "configuration", false };
    const sb_config_node *root = cfg->root;
    int rc;
    if (!root || sb_config_node_is_null(root))
        return sb_seterr(err, SB_EINVAL, "%s:1:1: empty configuration: expected a mapping with "
                         "'models'", cfg->path);
    if ((rc = sb_cfg_want_map(&c, root)) || (rc = check_top_keys(&c, root))) return rc;
    for (int last = 0; last < 2; last++)
        for (const sb_cfg_section *const *s = sb_config_sections; *s; s++)
            if ((*s)->last == last && (rc = load_section(cfg, *s, err))) return rc;
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
        sb_free(m->adapter);
        for (size_t k = 0; k < m->n_adapters; k++) {
            sb_free(m->adapter_names[k]);
            sb_free(m->adapter_paths[k]);
        }
        sb_free(m->adapter_names);
        sb_free(m->adapter_paths);
        sb_free(m->upstream);
        sb_free(m->upstream_model);
        sb_free(m->api_key_env);
    }
    sb_free(cfg->models);
    for (size_t i = 0; i < cfg->n_kbs; i++) {
        sb_free(cfg->kbs[i].name);
        sb_free(cfg->kbs[i].path);
        sb_free(cfg->kbs[i].embed_model);
        sb_free(cfg->kbs[i].adapter);
    }
    sb_free(cfg->kbs);
    sb_free(cfg->runtime.dir);
    sb_free(cfg->runtime.http);
    sb_free(cfg->runtime.http_host);
    sb_free(cfg->runtime.api_key_env);
    sb_free(cfg->runtime.api_key_file);
    sb_free(cfg->runtime.api_keys_file);
    sb_free(cfg->sessions.store);
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

static bool same_adapters(const sb_config_model *a, const sb_config_model *b) {
    if (a->n_adapters != b->n_adapters || a->adapters_id != b->adapters_id) return false;
    for (size_t k = 0; k < a->n_adapters; k++)
        if (!str_eq(a->adapter_names[k], b->adapter_names[k]) || !str_eq(a->adapter_paths[k], b->adapter_paths[k]))
            return false;
    return true;
}

bool sb_config_equal_model(const sb_config_model *a, const sb_config_model *b) {
    return str_eq(a->name, b->name) && str_eq(a->gguf, b->gguf) &&
           a->threads == b->threads && a->ctx == b->ctx && a->kv_type == b->kv_type &&
           a->idle_unload_s == b->idle_unload_s && a->parallel == b->parallel && a->kv_mb == b->kv_mb &&
           a->lookup == b->lookup && str_eq(a->draft, b->draft) && str_eq(a->adapter, b->adapter) &&
           a->adapter_size == b->adapter_size && a->adapter_mtime_ns == b->adapter_mtime_ns &&
           same_adapters(a, b) &&
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
