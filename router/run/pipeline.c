/* pipeline.c - the `pipelines:` section: schema, validation, digests.
 *
 * The config loader keeps the section as a node tree with positions; here
 * it becomes sb_pipeline structs, and every mistake an operator can make is
 * reported as FILE:LINE:COL with the key path and what was expected: unknown
 * keys, wrong types, a stage naming a model the config does not have, a
 * `when:` naming an intent no earlier stage can produce, a template naming a
 * stage that has not run yet. docs/router.md documents the schema.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/run/stage_internal.h"
#include "router/classify/sb_classify.h"
#include "worker/engine/sb_grammar.h"
#include "kb/sb_kb.h"

/* ----------------------------------------------------------- node types */

const char *rt_pl_what(const sb_config_node *n) {
    if (sb_config_node_is_null(n)) return "null";
    return n->kind == SB_CFG_MAP ? "a mapping" : n->kind == SB_CFG_SEQ ? "a list" : "a scalar";
}

int rt_pl_get_str(vctx *c, const sb_config_node *n, const char *key, char **out) {
    if (!n || n->kind != SB_CFG_SCALAR || sb_config_node_is_null(n))
        return FAIL(c, n, "%s.%s: expected a string, got %s", c->path, key, n ? rt_pl_what(n) : "nothing");
    *out = sb_strdup(n->value);
    return *out ? 0 : SB_ENOMEM;
}

int rt_pl_get_num(vctx *c, const sb_config_node *n, const char *key, double lo, double hi, double *out) {
    char *end;
    double v = n && n->kind == SB_CFG_SCALAR && !n->quoted && n->len ? strtod(n->value, &end) : NAN;
    if (isnan(v) || *end || v < lo || v > hi)
        return FAIL(c, n, "%s.%s: expected a number in [%g, %g], got '%s'", c->path, key, lo, hi,
                    n && n->kind == SB_CFG_SCALAR ? n->value : rt_pl_what(n));
    *out = v;
    return 0;
}

int rt_pl_get_int(vctx *c, const sb_config_node *n, const char *key, long long lo, long long hi, long long *out) {
    char *end;
    long long v = 0;
    bool ok = n && n->kind == SB_CFG_SCALAR && !n->quoted && n->len;
    if (ok) { v = strtoll(n->value, &end, 10); ok = !*end && v >= lo && v <= hi; }
    if (!ok)
        return FAIL(c, n, "%s.%s: expected an integer in [%lld, %lld], got '%s'", c->path, key, lo, hi,
                    n && n->kind == SB_CFG_SCALAR ? n->value : rt_pl_what(n));
    *out = v;
    return 0;
}

int rt_pl_get_bool(vctx *c, const sb_config_node *n, const char *key, bool *out) {
    if (n && n->kind == SB_CFG_SCALAR && !n->quoted && (!strcmp(n->value, "true") || !strcmp(n->value, "false"))) {
        *out = n->value[0] == 't';
        return 0;
    }
    return FAIL(c, n, "%s.%s: expected true or false, got '%s'", c->path, key,
                n && n->kind == SB_CFG_SCALAR ? n->value : rt_pl_what(n));
}

/* A string or a list of strings (at most max), each 1+ bytes. */
int rt_pl_get_strs(vctx *c, const sb_config_node *n, const char *key, size_t max, char ***out, size_t *count) {
    *out = NULL;
    *count = 0;
    size_t k = n->kind == SB_CFG_SEQ ? n->n_items : 1;
    if (n->kind == SB_CFG_MAP || k > max || k == 0)
        return FAIL(c, n, "%s.%s: expected a string or a list of 1-%zu strings", c->path, key, max);
    char **v = sb_calloc(k, sizeof *v);
    if (!v) return SB_ENOMEM;
    *out = v;
    for (size_t i = 0; i < k; i++) {
        const sb_config_node *it = n->kind == SB_CFG_SEQ ? n->items[i] : n;
        if (it->kind != SB_CFG_SCALAR || sb_config_node_is_null(it) || !it->len)
            return FAIL(c, it, "%s.%s: expected non-empty strings, got %s", c->path, key, rt_pl_what(it));
        if (!(v[i] = sb_strdup(it->value))) return SB_ENOMEM;
        (*count)++;
    }
    return 0;
}

bool rt_pl_valid_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n > SB_CONFIG_MAX_NAME) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
            return false;
    return true;
}

int rt_pl_check_keys(vctx *c, const sb_config_node *map, const char *const *allowed) {
    for (size_t i = 0; i < map->n_pairs; i++) {
        const char *k = map->pairs[i].key->value;
        bool ok = false;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, k);
        if (!ok) {
            char list[400] = "";
            for (const char *const *a = allowed; *a; a++) {
                strncat(list, *a, sizeof list - strlen(list) - 3);
                if (a[1]) strcat(list, ", ");
            }
            return FAIL(c, map->pairs[i].key, "%s: unknown key '%s' (expected one of: %s)", c->path, k, list);
        }
    }
    return 0;
}

/* ------------------------------------------------------------ pipelines */

static void digest_node(sb_sha256_ctx *h, const sb_config_node *n) {
    char tag = n->kind == SB_CFG_SCALAR ? 's' : n->kind == SB_CFG_MAP ? 'm' : 'q';
    sb_sha256_update(h, &tag, 1);
    if (n->kind == SB_CFG_SCALAR) {
        uint64_t len = n->len;
        sb_sha256_update(h, &len, sizeof len);
        sb_sha256_update(h, n->value, n->len);
    } else if (n->kind == SB_CFG_MAP) {
        for (size_t i = 0; i < n->n_pairs; i++) {
            digest_node(h, n->pairs[i].key);
            digest_node(h, n->pairs[i].value);
        }
    } else {
        for (size_t i = 0; i < n->n_items; i++) digest_node(h, n->items[i]);
    }
    sb_sha256_update(h, "/", 1);
}

/* cache_fold: [case, width] - what the cache key may fold besides NFC and
 * whitespace. Off by default: "xk7q2b" and "XK7Q2B" can have different answers. */
static int load_cache_fold(vctx *c, const sb_config_node *n, sb_pipeline *p) {
    char **v = NULL;
    size_t k = 0;
    int rc = rt_pl_get_strs(c, n, "cache_fold", 2, &v, &k);
    for (size_t i = 0; !rc && i < k; i++) {
        if (!strcmp(v[i], "case")) p->cache_fold |= SB_NORM_CASEFOLD;
        else if (!strcmp(v[i], "width")) p->cache_fold |= SB_NORM_NFKC;
        else rc = FAIL(c, n, "%s.cache_fold: '%s' is not one of case, width", c->path, v[i]);
    }
    for (size_t i = 0; i < k; i++) sb_free(v[i]);
    sb_free(v);
    return rc;
}

static int load_pipeline(vctx *c, const sb_config_node *key, const sb_config_node *n, sb_pipeline *p) {
    p->line = key->line;
    p->col = key->col;
    p->output = -1;
    p->timeout_ms = 300000;
    p->cache = true;
    snprintf(c->path, sizeof c->path, "pipelines.%s", key->value);
    if (!(p->name = sb_strdup(key->value))) return SB_ENOMEM;
    static const char *const keys[] = { "description", "stages", "output", "timeout_ms", "cache", "cache_fold", NULL };
    int rc = rt_pl_check_keys(c, n, keys);
    if (rc) return rc;
    const sb_config_node *v;
    if ((v = sb_config_node_get(n, "description")) && (rc = rt_pl_get_str(c, v, "description", &p->description))) return rc;
    long long t;
    if ((v = sb_config_node_get(n, "timeout_ms")) && !(rc = rt_pl_get_int(c, v, "timeout_ms", 100, 3600000, &t)))
        p->timeout_ms = (int)t;
    if (rc) return rc;
    if ((v = sb_config_node_get(n, "cache")) && (rc = rt_pl_get_bool(c, v, "cache", &p->cache))) return rc;
    if ((v = sb_config_node_get(n, "cache_fold")) && (rc = load_cache_fold(c, v, p))) return rc;
    const sb_config_node *st = sb_config_node_get(n, "stages");
    if (!st) return FAIL(c, n, "%s: missing 'stages'", c->path);
    if (st->kind != SB_CFG_SEQ || st->n_items == 0 || st->n_items > SB_PIPE_MAX_STAGES)
        return FAIL(c, st, "%s.stages: expected a list of 1-%d stages", c->path, SB_PIPE_MAX_STAGES);
    p->stages = sb_calloc(st->n_items, sizeof *p->stages);
    if (!p->stages) return SB_ENOMEM;
    for (size_t i = 0; i < st->n_items; i++) {
        snprintf(c->path, sizeof c->path, "pipelines.%s.stages[%zu]", p->name, i);
        p->n_stages++;
        if ((rc = rt_pl_load_stage(c, st->items[i], p, i))) return rc;
    }
    snprintf(c->path, sizeof c->path, "pipelines.%s", p->name);
    if ((v = sb_config_node_get(n, "output"))) {
        p->output = v->kind == SB_CFG_SCALAR ? sb_pipeline_stage_index(p, v->value) : -1;
        if (p->output < 0) return FAIL(c, v, "%s.output: no stage named '%s'", c->path, v->kind == SB_CFG_SCALAR ? v->value : "?");
    }
    sb_sha256_ctx h;
    sb_sha256_init(&h);
    digest_node(&h, n);
    /* An examples_file changes the routes without changing the YAML. */
    for (size_t i = 0; i < p->n_stages; i++)
        for (size_t k = 0; k < p->stages[i].n_extra; k++) {
            sb_sha256_update(&h, &p->stages[i].extra_label[k], sizeof(int));
            sb_sha256_update(&h, p->stages[i].extra_text[k], strlen(p->stages[i].extra_text[k]) + 1);
        }
    /* ... and so does a json_schema file. */
    for (size_t i = 0; i < p->n_stages; i++)
        if (p->stages[i].json_schema) sb_sha256_update(&h, p->stages[i].json_schema, strlen(p->stages[i].json_schema) + 1);
    sb_sha256_final(&h, p->digest);
    return 0;
}

static void free_stage(sb_stage *s) {
    if (s->own && rt_stage_kind_of(s)->free) rt_stage_kind_of(s)->free(s);  /* only its kind's check sets own */
    sb_free(s->name);
    for (size_t i = 0; i < s->n_when; i++) sb_free(s->when_intents[i]);
    sb_free(s->when_intents);
    sb_free(s->model);
    rt_tmpl_free(s->system);
    for (size_t i = 0; i < s->n_labels; i++) {
        sb_free(s->labels[i].name);
        sb_free(s->labels[i].description);
        for (size_t k = 0; k < s->labels[i].n_examples; k++) sb_free(s->labels[i].examples[k]);
        sb_free(s->labels[i].examples);
    }
    sb_free(s->labels);
    sb_free(s->fallback);
    sb_free(s->json_schema);
    sb_free(s->score_model);
    sb_free(s->examples_file);
    for (size_t i = 0; i < s->n_extra; i++) sb_free(s->extra_text[i]);
    sb_free(s->extra_text);
    sb_free(s->extra_label);
    rt_tmpl_free(s->utterance);
    rt_tmpl_free(s->prompt);
    for (size_t i = 0; i < s->n_stops; i++) sb_free(s->stops[i]);
    for (size_t i = 0; i < s->n_argv; i++) rt_tmpl_free(s->argv[i]);
    rt_tmpl_free(s->stdin_tmpl);
    for (size_t i = 0; i < s->n_env; i++) sb_free(s->env[i]);
    sb_free(s->url);
    rt_tmpl_free(s->body);
    sb_free(s->kb);
    rt_tmpl_free(s->query);
    sb_free(s->rerank_model);
    sb_free(s->rerank_prompt);
}

void sb_pipelines_free(sb_pipelines *ps) {
    if (!ps) return;
    for (size_t i = 0; i < ps->n; i++) {
        sb_pipeline *p = &ps->items[i];
        for (size_t k = 0; k < p->n_stages; k++) free_stage(&p->stages[k]);
        sb_free(p->stages);
        sb_free(p->name);
        sb_free(p->description);
    }
    sb_free(ps->items);
    sb_free(ps);
}

int sb_pipelines_load(const sb_config *cfg, sb_pipelines **out, char *err) {
    *out = NULL;
    sb_pipelines *ps = sb_calloc(1, sizeof *ps);
    if (!ps) return sb_seterr(err, SB_ENOMEM, "out of memory");
    const sb_config_node *root = cfg->pipelines;
    int rc = 0;
    if (root && root->kind == SB_CFG_MAP && root->n_pairs) {
        ps->items = sb_calloc(root->n_pairs, sizeof *ps->items);
        if (!ps->items) rc = SB_ENOMEM;
        vctx c = { cfg, err, "" };
        for (size_t i = 0; !rc && i < root->n_pairs; i++) {
            ps->n++;
            const sb_config_node *v = root->pairs[i].value;
            if (v->kind != SB_CFG_MAP) rc = FAIL(&c, v, "pipelines.%s: expected a mapping", root->pairs[i].key->value);
            else rc = load_pipeline(&c, root->pairs[i].key, v, &ps->items[i]);
        }
    }
    if (rc) {
        if (rc == SB_ENOMEM) sb_seterr(err, SB_ENOMEM, "out of memory loading pipelines");
        sb_pipelines_free(ps);
        return rc;
    }
    *out = ps;
    return 0;
}

const sb_pipeline *sb_pipelines_find(const sb_pipelines *ps, const char *name) {
    for (size_t i = 0; ps && i < ps->n; i++)
        if (!strcmp(ps->items[i].name, name)) return &ps->items[i];
    return NULL;
}

int sb_pipeline_stage_index(const sb_pipeline *p, const char *name) {
    for (size_t i = 0; i < p->n_stages; i++)
        if (p->stages[i].name && !strcmp(p->stages[i].name, name)) return (int)i;
    return -1;
}
