/* config_yaml.c - YAML text -> the config's node tree (the first pass).
 *
 * libyaml's event stream becomes our own node tree with 1-based positions,
 * rejecting what we never want to interpret (aliases, tags, duplicate keys,
 * non-scalar keys, several documents). The only file that sees libyaml.
 */
#include "common/sb_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#define MAX_NODES 100000        /* no real config comes close */

typedef struct {
    yaml_parser_t parser;
    const char *path;
    char *err;
    size_t n_nodes;
} reader;

void sb_config_tree_free(sb_config_node *n) {
    if (!n) return;
    sb_free(n->value);
    for (size_t i = 0; i < n->n_pairs; i++) {
        sb_config_tree_free(n->pairs[i].key);
        sb_config_tree_free(n->pairs[i].value);
    }
    sb_free(n->pairs);
    for (size_t i = 0; i < n->n_items; i++) sb_config_tree_free(n->items[i]);
    sb_free(n->items);
    sb_free(n);
}

static int at_mark(reader *r, yaml_mark_t m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int at_mark(reader *r, yaml_mark_t m, const char *fmt, ...) {
    char msg[SB_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sb_seterr(r->err, SB_EINVAL, "%s:%zu:%zu: %s", r->path, m.line + 1, m.column + 1, msg);
}

/* libyaml's own diagnosis, at its own position. */
static int yaml_failure(reader *r) {
    yaml_parser_t *p = &r->parser;
    if (p->error == YAML_MEMORY_ERROR) return sb_seterr(r->err, SB_ENOMEM, "%s: out of memory", r->path);
    yaml_mark_t m = p->problem_mark;
    if (p->context)
        return at_mark(r, m, "invalid YAML: %s %s", p->problem ? p->problem : "error", p->context);
    return at_mark(r, m, "invalid YAML: %s", p->problem ? p->problem : "error");
}

static int next_event(reader *r, yaml_event_t *ev) {
    return yaml_parser_parse(&r->parser, ev) ? 0 : yaml_failure(r);
}

static int grow(void **arr, size_t n, size_t elem) {
    if (n & (n - 1)) return 0;                  /* capacity doubles at powers of two */
    size_t cap = n ? n * 2 : 4, bytes;
    if (sb_mul_size(cap, elem, &bytes)) return SB_ENOMEM;
    void *p = sb_realloc(*arr, bytes);
    if (!p) return SB_ENOMEM;
    *arr = p;
    return 0;
}

static int parse_node(reader *r, yaml_event_t *ev, int depth, const char *key, sb_config_node **out);

/* key: the key n is the value of (NULL at the top), named in errors. */
static int parse_children(reader *r, sb_config_node *n, int depth, const char *key) {
    yaml_event_type_t end = n->kind == SB_CFG_MAP ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(r, &ev);
        if (rc) return rc;
        if (ev.type == end) { yaml_event_delete(&ev); return 0; }
        yaml_mark_t key_mark = ev.start_mark;
        sb_config_node *child = NULL;
        rc = parse_node(r, &ev, depth + 1, n->kind == SB_CFG_SEQ ? key : NULL, &child);     /* deletes ev */
        if (rc) return rc;
        if (n->kind == SB_CFG_SEQ) {
            if (grow((void **)&n->items, n->n_items, sizeof *n->items)) { sb_config_tree_free(child); return SB_ENOMEM; }
            n->items[n->n_items++] = child;
            continue;
        }
        if (child->kind != SB_CFG_SCALAR) {
            sb_config_tree_free(child);
            return at_mark(r, key_mark, "mapping keys must be plain strings");
        }
        for (size_t i = 0; i < n->n_pairs; i++) {
            if (!strcmp(n->pairs[i].key->value, child->value)) {
                int line = n->pairs[i].key->line;
                sb_config_tree_free(child);
                return at_mark(r, key_mark, "duplicate key '%s' (first at line %d)",
                               n->pairs[i].key->value, line);
            }
        }
        sb_config_node *value = NULL;
        if ((rc = next_event(r, &ev)) || (rc = parse_node(r, &ev, depth + 1, child->value, &value))) {
            sb_config_tree_free(child);
            return rc;
        }
        if (grow((void **)&n->pairs, n->n_pairs, sizeof *n->pairs)) {
            sb_config_tree_free(child);
            sb_config_tree_free(value);
            return SB_ENOMEM;
        }
        n->pairs[n->n_pairs++] = (sb_config_pair){ child, value };
    }
}

/* A scalar holding NUL ("tiny\0zzz", "\x00" in a double-quoted string):
 * every reader of the tree takes values as C strings, so it would silently
 * become "tiny" - a model name, a tool's argv cut short. Refused. */
static int nul_in_scalar(reader *r, yaml_mark_t m, const char *key, const yaml_event_t *ev) {
    const char *v = (const char *)ev->data.scalar.value;
    if (strlen(v) == ev->data.scalar.length) return 0;
    if (!key) return at_mark(r, m, "a key or value holds NUL (\\0) after \"%.40s\": not allowed in a config string", v);
    return at_mark(r, m, "'%s': the value holds NUL (\\0) after \"%.40s\": not allowed in a config string", key, v);
}

/* Build the node that starts with *ev (which this consumes). key: the
 * mapping key it is the value of, or the sequence's (NULL: none). */
static int parse_node(reader *r, yaml_event_t *ev, int depth, const char *key, sb_config_node **out) {
    *out = NULL;
    yaml_mark_t m = ev->start_mark;
    int rc = 0;
    const yaml_char_t *tag = NULL;
    if (ev->type == YAML_SCALAR_EVENT) tag = ev->data.scalar.tag;
    if (ev->type == YAML_MAPPING_START_EVENT) tag = ev->data.mapping_start.tag;
    if (ev->type == YAML_SEQUENCE_START_EVENT) tag = ev->data.sequence_start.tag;
    if (ev->type == YAML_ALIAS_EVENT) rc = at_mark(r, m, "aliases (*name) are not supported");
    else if (tag) rc = at_mark(r, m, "YAML tags (!tag) are not supported");
    else if (depth > SB_CONFIG_MAX_DEPTH) rc = at_mark(r, m, "nested deeper than %d", SB_CONFIG_MAX_DEPTH);
    else if (++r->n_nodes > MAX_NODES) rc = at_mark(r, m, "more than %d nodes", MAX_NODES);
    else if (ev->type != YAML_SCALAR_EVENT && ev->type != YAML_MAPPING_START_EVENT &&
             ev->type != YAML_SEQUENCE_START_EVENT)
        rc = at_mark(r, m, "unexpected YAML event %d", (int)ev->type);
    else if (ev->type == YAML_SCALAR_EVENT)
        rc = nul_in_scalar(r, m, key, ev);
    if (rc) { yaml_event_delete(ev); return rc; }

    sb_config_node *n = sb_calloc(1, sizeof *n);
    if (!n) { yaml_event_delete(ev); return SB_ENOMEM; }
    n->line = (int)m.line + 1;
    n->col = (int)m.column + 1;
    if (ev->type == YAML_SCALAR_EVENT) {
        n->kind = SB_CFG_SCALAR;
        n->len = ev->data.scalar.length;
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        n->value = sb_malloc(n->len + 1);
        if (n->value) {
            memcpy(n->value, ev->data.scalar.value, n->len);
            n->value[n->len] = '\0';
        }
        yaml_event_delete(ev);
        if (!n->value) { sb_free(n); return SB_ENOMEM; }
        *out = n;
        return 0;
    }
    n->kind = ev->type == YAML_MAPPING_START_EVENT ? SB_CFG_MAP : SB_CFG_SEQ;
    yaml_event_delete(ev);
    if ((rc = parse_children(r, n, depth, key))) { sb_config_tree_free(n); return rc; }
    *out = n;
    return 0;
}

/* The whole stream: exactly one document holding one node (or none). */
static int parse_tree(reader *r, sb_config_node **root) {
    *root = NULL;
    yaml_event_t ev;
    int rc;
    bool have_doc = false;
    for (;;) {
        if ((rc = next_event(r, &ev))) goto fail;
        yaml_event_type_t t = ev.type;
        yaml_mark_t m = ev.start_mark;
        if (t == YAML_STREAM_END_EVENT) { yaml_event_delete(&ev); return 0; }
        if (t == YAML_DOCUMENT_START_EVENT && have_doc) {
            yaml_event_delete(&ev);
            rc = at_mark(r, m, "only one YAML document is allowed");
            goto fail;
        }
        if (t == YAML_DOCUMENT_START_EVENT) have_doc = true;
        if (t == YAML_SCALAR_EVENT || t == YAML_MAPPING_START_EVENT ||
            t == YAML_SEQUENCE_START_EVENT || t == YAML_ALIAS_EVENT) {
            if ((rc = parse_node(r, &ev, 0, NULL, root))) goto fail;
            continue;
        }
        yaml_event_delete(&ev);
    }
fail:
    sb_config_tree_free(*root);
    *root = NULL;
    return rc;
}

int sb_config_tree_parse(const char *text, size_t len, const char *path, sb_config_node **root, char *err) {
    *root = NULL;
    reader r = { .path = path, .err = err };
    if (!yaml_parser_initialize(&r.parser)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    int rc = parse_tree(&r, root);
    yaml_parser_delete(&r.parser);
    return rc;
}

const sb_config_node *sb_config_node_get(const sb_config_node *map, const char *key) {
    if (!map || map->kind != SB_CFG_MAP) return NULL;
    for (size_t i = 0; i < map->n_pairs; i++)
        if (!strcmp(map->pairs[i].key->value, key)) return map->pairs[i].value;
    return NULL;
}

bool sb_config_node_is_null(const sb_config_node *n) {
    return n && n->kind == SB_CFG_SCALAR && !n->quoted &&
           (n->len == 0 || !strcmp(n->value, "~") || !strcmp(n->value, "null") ||
            !strcmp(n->value, "Null") || !strcmp(n->value, "NULL"));
}
