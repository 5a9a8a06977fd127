/* config_keys.c - typed keys: the one validator of config values
 * (sb_config.h, "typed keys").
 *
 * Every section of the configuration - the config's own (config.c) and the
 * router's pipelines and stage kinds - reads its values here, so a number,
 * a string, a list, an unknown key is refused with the same words wherever
 * it is written: "FILE:LINE:COL: PATH.KEY: expected ..., got ...".
 */
#include "common/sb_config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL SB_CFG_FAIL

const char *const sb_cfg_false_true[] = { "false", "true", NULL };

const char *sb_cfg_what(const sb_config_node *n) {
    if (!n) return "nothing";
    if (sb_config_node_is_null(n)) return "null";
    return n->kind == SB_CFG_MAP ? "a mapping" : n->kind == SB_CFG_SEQ ? "a list" : "a string";
}

bool sb_cfg_valid_name(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max) return false;
    for (; *s; s++)
        if (!(*s == '_' || *s == '-' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

bool sb_cfg_valid_env_name(const char *s) {
    if (!*s || (*s >= '0' && *s <= '9')) return false;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

int sb_cfg_want_map(const sb_cfg_ctx *c, const sb_config_node *v) {
    if (v && v->kind == SB_CFG_MAP) return 0;
    return FAIL(c, v, "%s: expected a mapping, got %s", c->path, sb_cfg_what(v));
}

int sb_cfg_keys_check(const sb_cfg_ctx *c, const sb_config_node *map, const sb_cfg_key *keys) {
    for (size_t i = 0; i < map->n_pairs; i++) {
        const sb_config_node *k = map->pairs[i].key;
        bool ok = false;
        for (const sb_cfg_key *key = keys; key->name && !ok; key++) ok = !strcmp(key->name, k->value);
        if (ok) continue;
        char list[400] = "";
        for (const sb_cfg_key *key = keys; key->name; key++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", key == keys ? "" : ", ", key->name);
        return FAIL(c, k, "%s: unknown key '%s' (expected one of: %s)", c->path, k->value, list);
    }
    return 0;
}

/* "expected WHAT in [..], got ...": a plain scalar as 'TEXT'; a quoted one
 * as the string "TEXT" (it is not a number, whatever it reads like); any
 * other node as what it is. */
static int fail_value(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, const char *expected) {
    if (v && v->kind == SB_CFG_SCALAR && v->quoted && !c->quoted_as_text)
        return FAIL(c, v, "%s.%s: expected %s, got the string \"%s\"", c->path, key, expected, v->value);
    if (v && v->kind == SB_CFG_SCALAR && (v->quoted || !sb_config_node_is_null(v)))
        return FAIL(c, v, "%s.%s: expected %s, got '%s'", c->path, key, expected, v->value);
    return FAIL(c, v, "%s.%s: expected %s, got %s", c->path, key, expected, sb_cfg_what(v));
}

static bool plain_scalar(const sb_config_node *v) {
    return v && v->kind == SB_CFG_SCALAR && !v->quoted && v->len && !sb_config_node_is_null(v);
}

int sb_cfg_int(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, long long lo, long long hi,
               long long *out) {
    char *end = NULL;
    long long x = 0;
    bool ok = plain_scalar(v);
    if (ok) {
        errno = 0;
        x = strtoll(v->value, &end, 10);
        ok = !*end && errno == 0 && x >= lo && x <= hi;
    }
    if (!ok) {
        char expected[96];
        snprintf(expected, sizeof expected, "an integer in [%lld, %lld]", lo, hi);
        return fail_value(c, v, key, expected);
    }
    *out = x;
    return 0;
}

int sb_cfg_num(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, double lo, double hi, double *out) {
    char *end = NULL;
    double x = plain_scalar(v) ? strtod(v->value, &end) : NAN;
    if (isnan(x) || *end || x < lo || x > hi) {
        char expected[96];
        snprintf(expected, sizeof expected, "a number in [%g, %g]", lo, hi);
        return fail_value(c, v, key, expected);
    }
    *out = x;
    return 0;
}

int sb_cfg_bool(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, bool *out) {
    if (plain_scalar(v) && (!strcmp(v->value, "true") || !strcmp(v->value, "false"))) {
        *out = v->value[0] == 't';
        return 0;
    }
    return fail_value(c, v, key, "true or false");
}

int sb_cfg_str(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, bool nonempty, char **out) {
    if (!v || v->kind != SB_CFG_SCALAR || sb_config_node_is_null(v) || (nonempty && v->len == 0))
        return FAIL(c, v, "%s.%s: expected a %sstring, got %s", c->path, key, nonempty ? "non-empty " : "",
                    sb_cfg_what(v));
    char *s = sb_strdup(v->value);
    if (!s) return SB_ENOMEM;
    sb_free(*out);
    *out = s;
    return 0;
}

int sb_cfg_enum(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, const char *const *names, int *out) {
    if (v && v->kind == SB_CFG_SCALAR)
        for (int i = 0; names[i]; i++)
            if (!strcmp(names[i], v->value)) { *out = i; return 0; }
    char list[128] = "";
    for (int i = 0; names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "", names[i]);
    return FAIL(c, v, "%s.%s: expected %s, got %s%s%s", c->path, key, list,
                v && v->kind == SB_CFG_SCALAR ? "'" : sb_cfg_what(v),
                v && v->kind == SB_CFG_SCALAR ? v->value : "", v && v->kind == SB_CFG_SCALAR ? "'" : "");
}

int sb_cfg_strs(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, size_t max, char ***out,
                size_t *count) {
    *out = NULL;
    *count = 0;
    size_t k = v->kind == SB_CFG_SEQ ? v->n_items : 1;
    if (v->kind == SB_CFG_MAP || k > max || k == 0)
        return FAIL(c, v, "%s.%s: expected a string or a list of 1-%zu strings", c->path, key, max);
    char **s = sb_calloc(k, sizeof *s);
    if (!s) return SB_ENOMEM;
    *out = s;
    for (size_t i = 0; i < k; i++) {
        const sb_config_node *it = v->kind == SB_CFG_SEQ ? v->items[i] : v;
        if (it->kind != SB_CFG_SCALAR || sb_config_node_is_null(it) || !it->len)
            return FAIL(c, it, "%s.%s: expected non-empty strings, got %s", c->path, key, sb_cfg_what(it));
        if (!(s[i] = sb_strdup(it->value))) return SB_ENOMEM;
        (*count)++;
    }
    return 0;
}

char *sb_cfg_resolve(const char *base, const char *p) {
    if (p[0] == '/') return sb_strdup(p);
    while (p[0] == '.' && p[1] == '/') p += 2;
    size_t n = strlen(base) + 1 + strlen(p) + 1;
    char *s = sb_malloc(n);
    if (s) snprintf(s, n, "%s%s%s", base, *p ? "/" : "", p);
    return s;
}

/* Relative paths are relative to the config file, never to the cwd. */
int sb_cfg_path(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, bool must_read, char **out,
                struct stat *st) {
    char *raw = NULL;
    int rc = sb_cfg_str(c, v, key, true, &raw);
    if (rc) return rc;
    char *abs = sb_cfg_resolve(c->cfg->base_dir, raw);
    sb_free(raw);
    if (!abs) return SB_ENOMEM;
    if (must_read) {
        struct stat sbuf;
        if (!st) st = &sbuf;
        int fd = open(abs, O_RDONLY | O_CLOEXEC);
        int e = fd < 0 ? errno : fstat(fd, st) ? errno : 0;
        if (fd >= 0) close(fd);
        if (!e && !S_ISREG(st->st_mode)) e = EISDIR;
        if (e) {
            rc = FAIL(c, v, "%s.%s: cannot read '%s': %s", c->path, key, abs,
                      e == EISDIR ? "not a regular file" : strerror(e));
            sb_free(abs);
            return rc;
        }
    }
    sb_free(*out);
    *out = abs;
    return 0;
}

int sb_cfg_keys_read(const sb_cfg_ctx *c, const sb_config_node *map, const sb_cfg_key *keys, void *base) {
    char *at = base;
    for (const sb_cfg_key *k = keys; k->name; k++) {
        const sb_config_node *v = sb_config_node_get(map, k->name);
        if (!v || k->type == SB_KEY_OTHER) continue;
        long long i;
        int rc = 0;
        switch (k->type) {
        case SB_KEY_INT:
            if (!(rc = sb_cfg_int(c, v, k->name, (long long)k->lo, (long long)k->hi, &i))) *(int *)(at + k->offset) = (int)i;
            break;
        case SB_KEY_NUM: rc = sb_cfg_num(c, v, k->name, k->lo, k->hi, (double *)(at + k->offset)); break;
        case SB_KEY_BOOL: rc = sb_cfg_bool(c, v, k->name, (bool *)(at + k->offset)); break;
        case SB_KEY_STR: rc = sb_cfg_str(c, v, k->name, k->lo > 0, (char **)(at + k->offset)); break;
        case SB_KEY_ENUM: rc = sb_cfg_enum(c, v, k->name, k->names, (int *)(at + k->offset)); break;
        case SB_KEY_PATH: rc = sb_cfg_path(c, v, k->name, k->lo > 0, (char **)(at + k->offset), NULL); break;
        case SB_KEY_OTHER: break;
        }
        if (rc) return rc;
    }
    return 0;
}

int sb_cfg_read_map(const sb_cfg_ctx *c, const sb_config_node *map, const sb_cfg_key *keys, void *base) {
    int rc = sb_cfg_want_map(c, map);
    if (!rc) rc = sb_cfg_keys_check(c, map, keys);
    return rc ? rc : sb_cfg_keys_read(c, map, keys, base);
}
