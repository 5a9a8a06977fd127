/* pipeline_stage.c - one pipeline stage's keys: its kind, model, prompts,
 * labels and examples, `when:`, sampling, tool command or URL, retrieval.
 * Every mistake is reported as FILE:LINE:COL with the key path and what was
 * expected (docs/router.md documents the schema).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/run/pipeline_internal.h"
#include "router/classify/sb_classify.h"
#include "worker/engine/sb_grammar.h"
#include "kb/sb_kb.h"

/* ------------------------------------------------------------ templates */

static int tmpl(vctx *c, const sb_config_node *n, const char *key, const rt_tmpl_scope *scope, sb_tmpl **out) {
    if (!n || n->kind != SB_CFG_SCALAR || sb_config_node_is_null(n))
        return FAIL(c, n, "%s.%s: expected a template string, got %s", c->path, key, n ? rt_pl_what(n) : "nothing");
    char why[SB_ERR_LEN];
    int rc = rt_tmpl_compile(n->value, scope, out, why, sizeof why);
    if (rc == SB_EINVAL) return FAIL(c, n, "%s.%s: %s", c->path, key, why);
    return rc;
}

/* --------------------------------------------------------------- stages */

static int load_labels(vctx *c, const sb_config_node *n, sb_stage *s) {
    if (n->kind != SB_CFG_MAP || n->n_pairs < 2 || n->n_pairs > SB_PIPE_MAX_LABELS)
        return FAIL(c, n, "%s.labels: expected a mapping of 2-%d labels (name: {description, examples})", c->path,
                    SB_PIPE_MAX_LABELS);
    s->labels = sb_calloc(n->n_pairs, sizeof *s->labels);
    if (!s->labels) return SB_ENOMEM;
    for (size_t i = 0; i < n->n_pairs; i++) {
        const sb_config_node *k = n->pairs[i].key, *v = n->pairs[i].value;
        sb_label *l = &s->labels[s->n_labels++];
        if (!rt_pl_valid_name(k->value))
            return FAIL(c, k, "%s.labels: '%s' must be 1-%d characters of A-Z a-z 0-9 _ -", c->path, k->value,
                        SB_CONFIG_MAX_NAME);
        if (!(l->name = sb_strdup(k->value))) return SB_ENOMEM;
        if (v->kind != SB_CFG_MAP)
            return FAIL(c, v, "%s.labels.%s: expected a mapping with description and examples", c->path, k->value);
        char save[sizeof c->path];
        memcpy(save, c->path, sizeof save);
        snprintf(c->path + strlen(c->path), sizeof c->path - strlen(c->path), ".labels.%s", k->value);
        static const char *const keys[] = { "description", "examples", NULL };
        int rc = rt_pl_check_keys(c, v, keys);
        const sb_config_node *d = sb_config_node_get(v, "description"), *ex = sb_config_node_get(v, "examples");
        if (!rc && d) rc = rt_pl_get_str(c, d, "description", &l->description);
        if (!rc && ex) rc = rt_pl_get_strs(c, ex, "examples", 64, &l->examples, &l->n_examples);
        memcpy(c->path, save, sizeof save);
        if (rc) return rc;
    }
    return 0;
}

static int label_index(const sb_stage *s, const char *name) {
    for (size_t i = 0; i < s->n_labels; i++)
        if (!strcmp(s->labels[i].name, name)) return (int)i;
    return -1;
}

/* examples_file: "label<TAB>utterance" lines (blank lines and # comments
 * skipped; the label out_of_scope feeds the reject class), appended to
 * s->extra_*. A bad line is reported as FILE:LINE inside the config error. */
#define MAX_FILE_EXAMPLES 20000
static int push_extra(sb_stage *s, const char *text, size_t len, int label) {
    char **t = sb_realloc(s->extra_text, (s->n_extra + 1) * sizeof *t);
    if (t) s->extra_text = t;
    int *l = t ? sb_realloc(s->extra_label, (s->n_extra + 1) * sizeof *l) : NULL;
    if (l) s->extra_label = l;
    char *d = l ? sb_malloc(len + 1) : NULL;
    if (!d) return SB_ENOMEM;
    memcpy(d, text, len);
    d[len] = '\0';
    s->extra_text[s->n_extra] = d;
    s->extra_label[s->n_extra++] = label;
    return 0;
}

static int load_examples_file(vctx *c, const sb_config_node *n, sb_stage *s) {
    char path[1024];
    const char *f = s->examples_file;
    snprintf(path, sizeof path, "%s%s%s", f[0] == '/' ? "" : c->cfg->base_dir, f[0] == '/' ? "" : "/", f);
    FILE *fp = fopen(path, "r");
    if (!fp) return FAIL(c, n, "%s.examples_file: cannot read %s", c->path, path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = 0, lineno = 0;
    while (!rc && (got = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (!got || line[0] == '#') continue;
        const char *nul = memchr(line, '\0', (size_t)got);     /* it would end the example there, silently */
        if (nul) {
            rc = FAIL(c, n, "%s.examples_file: %s:%d: byte %d is NUL (\\0): not allowed in a line", c->path, path,
                      lineno, (int)(nul - line) + 1);
            break;
        }
        char *tab = strchr(line, '\t');
        if (tab) *tab = '\0';
        int label = tab ? label_index(s, line) : -1;
        bool oos = label < 0 && tab && !strcmp(line, SB_CLS_OOS_NAME);
        if (!tab || !tab[1] || (label < 0 && !oos))
            rc = FAIL(c, n, "%s.examples_file: %s:%d: expected 'label<TAB>utterance' with one of this stage's "
                      "labels or %s", c->path, path, lineno, SB_CLS_OOS_NAME);
        else if (s->n_extra >= MAX_FILE_EXAMPLES)
            rc = FAIL(c, n, "%s.examples_file: %s: more than %d examples", c->path, path, MAX_FILE_EXAMPLES);
        else
            rc = push_extra(s, tab + 1, strlen(tab + 1), oos ? SB_CLS_OOS : label);
    }
    free(line);
    fclose(fp);
    return rc;
}

/* method, score_model, hybrid_margin, classifier, examples_file,
 * out_of_scope: how the stage classifies (router/run/intent_embed.c). */
static int load_intent_method(vctx *c, const sb_config_node *n, sb_stage *s) {
    const sb_config_node *v;
    int rc = 0;
    s->classifier = -1;
    s->hybrid_margin = 0.02;
    if ((v = sb_config_node_get(n, "method"))) {
        static const char *const names[] = { "auto", "score", "embed", "hybrid" };
        s->method = -1;
        for (int i = 0; v->kind == SB_CFG_SCALAR && i < 4; i++)
            if (!strcmp(v->value, names[i])) s->method = i;
        if (s->method < 0) return FAIL(c, v, "%s.method: expected embed, score, hybrid or auto", c->path);
    }
    if ((v = sb_config_node_get(n, "score_model"))) {
        if (s->method != SB_INTENT_HYBRID) return FAIL(c, v, "%s.score_model: only with method: hybrid", c->path);
        if ((rc = rt_pl_get_str(c, v, "score_model", &s->score_model))) return rc;
        if (!sb_config_find_model(c->cfg, s->score_model))
            return FAIL(c, v, "%s.score_model: no model named '%s' under models:", c->path, s->score_model);
    } else if (s->method == SB_INTENT_HYBRID) {
        return FAIL(c, n, "%s: method: hybrid needs a generative 'score_model'", c->path);
    }
    if ((v = sb_config_node_get(n, "hybrid_margin")) && (rc = rt_pl_get_num(c, v, "hybrid_margin", 0, 2, &s->hybrid_margin)))
        return rc;
    const char *embed_only[] = { "classifier", "examples_file", "out_of_scope", "hybrid_margin" };
    for (int i = 0; s->method == SB_INTENT_SCORE && i < 4; i++)
        if ((v = sb_config_node_get(n, embed_only[i])))
            return FAIL(c, v, "%s.%s: applies to method embed or hybrid, not score", c->path, embed_only[i]);
    if ((v = sb_config_node_get(n, "classifier"))) {
        s->classifier = v->kind == SB_CFG_SCALAR ? sb_cls_method_parse(v->value) : -1;
        if (s->classifier < 0) return FAIL(c, v, "%s.classifier: expected centroid, 1nn, knn or logreg", c->path);
    }
    if ((v = sb_config_node_get(n, "examples_file")) &&
        ((rc = rt_pl_get_str(c, v, "examples_file", &s->examples_file)) || (rc = load_examples_file(c, v, s))))
        return rc;
    if ((v = sb_config_node_get(n, "out_of_scope"))) {
        char **oos;
        size_t k;
        if ((rc = rt_pl_get_strs(c, v, "out_of_scope", 256, &oos, &k)) == 0)
            for (size_t i = 0; i < k && !rc; i++) rc = push_extra(s, oos[i], strlen(oos[i]), SB_CLS_OOS);
        for (size_t i = 0; oos && i < k; i++) sb_free(oos[i]);
        sb_free(oos);
        if (rc) return rc;
    }
    for (size_t i = 0; i < s->n_extra; i++)
        if (s->extra_label[i] == SB_CLS_OOS && !s->fallback)
            return FAIL(c, n, "%s: out-of-scope examples need a 'fallback' label for the calls they reject", c->path);
    return 0;
}

/* when: {found: STAGE} / {not_found: STAGE}: an earlier retrieve stage. */
static int load_when_found(vctx *c, const sb_config_node *k, const sb_config_node *v, sb_pipeline *p, size_t idx,
                           sb_stage *s) {
    s->when_found_negate = !strcmp(k->value, "not_found");
    for (size_t j = 0; v->kind == SB_CFG_SCALAR && j < idx; j++)
        if (p->stages[j].kind == SB_STAGE_RETRIEVE && !strcmp(p->stages[j].name, v->value)) s->when_found = (int)j;
    if (s->when_found < 0)
        return FAIL(c, v, "%s.when.%s: expected the name of an earlier retrieve stage", c->path, k->value);
    return 0;
}

static int load_when(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, sb_stage *s) {
    static const char *const keys[] = { "intent", "intent_not", "found", "not_found", NULL };
    if (n->kind != SB_CFG_MAP || n->n_pairs < 1 || n->n_pairs > 2)
        return FAIL(c, n, "%s.when: expected {intent: [labels]} or {intent_not: [labels]}, and/or {found: STAGE} "
                    "or {not_found: STAGE}", c->path);
    int rc = rt_pl_check_keys(c, n, keys);
    if (rc) return rc;
    const sb_config_node *in = NULL;
    for (size_t i = 0; i < n->n_pairs; i++) {
        const sb_config_node *k = n->pairs[i].key;
        bool found_key = !strcmp(k->value, "found") || !strcmp(k->value, "not_found");
        if (found_key ? s->when_found >= 0 : in != NULL)
            return FAIL(c, k, "%s.when: '%s' with another condition of its kind", c->path, k->value);
        if (found_key && (rc = load_when_found(c, k, n->pairs[i].value, p, idx, s))) return rc;
        if (!found_key) in = n->pairs[i].key;
    }
    if (!in) return 0;
    const sb_config_node *iv = sb_config_node_get(n, in->value);
    s->when_negate = !strcmp(in->value, "intent_not");
    if ((rc = rt_pl_get_strs(c, iv, "when.intent", SB_PIPE_MAX_LABELS, &s->when_intents, &s->n_when)))
        return rc;
    /* Each label must be one an earlier intent stage can produce. */
    for (size_t k = 0; k < s->n_when; k++) {
        bool found = false, any_intent = false;
        for (size_t j = 0; j < idx; j++) {
            if (p->stages[j].kind != SB_STAGE_INTENT) continue;
            any_intent = true;
            found |= label_index(&p->stages[j], s->when_intents[k]) >= 0;
        }
        if (!any_intent) return FAIL(c, n, "%s.when: no intent stage runs before this one", c->path);
        if (!found)
            return FAIL(c, iv, "%s.when: '%s' is not a label of an earlier intent stage", c->path,
                        s->when_intents[k]);
    }
    return 0;
}

/* rerank: {model, top_n, prompt, chat, fuse} - a generative model of the config judges
 * each of the top_n passages (retrieve.c); min_score is then its P(yes). */
static int load_rerank(vctx *c, const sb_config_node *n, sb_stage *s) {
    static const char *const keys[] = { "model", "top_n", "prompt", "chat", "fuse", NULL };
    const sb_config_node *v;
    int rc;
    if (n->kind != SB_CFG_MAP) return FAIL(c, n, "%s.rerank: expected a mapping {model, top_n, prompt, chat, fuse}", c->path);
    if ((rc = rt_pl_check_keys(c, n, keys))) return rc;
    if (!(v = sb_config_node_get(n, "model"))) return FAIL(c, n, "%s.rerank: missing 'model'", c->path);
    if ((rc = rt_pl_get_str(c, v, "rerank.model", &s->rerank_model))) return rc;
    if (!sb_config_find_model(c->cfg, s->rerank_model))
        return FAIL(c, v, "%s.rerank.model: no model named '%s' under models:", c->path, s->rerank_model);
    long long k = SB_MAX(5, s->kb_top_k);
    if ((v = sb_config_node_get(n, "top_n")) && (rc = rt_pl_get_int(c, v, "rerank.top_n", 1, SB_PIPE_MAX_TOP_K, &k)))
        return rc;
    if (k < s->kb_top_k) return FAIL(c, v, "%s.rerank.top_n: must be at least top_k (%d)", c->path, s->kb_top_k);
    if ((v = sb_config_node_get(n, "chat")) && (rc = rt_pl_get_bool(c, v, "rerank.chat", &s->rerank_chat))) return rc;
    if ((v = sb_config_node_get(n, "fuse")) && (rc = rt_pl_get_bool(c, v, "rerank.fuse", &s->rerank_fuse))) return rc;
    s->rerank_top_n = (int)k;
    if ((v = sb_config_node_get(n, "prompt"))) {
        if ((rc = rt_pl_get_str(c, v, "rerank.prompt", &s->rerank_prompt))) return rc;
        if (!strstr(s->rerank_prompt, "{{passage}}"))
            return FAIL(c, v, "%s.rerank.prompt: must contain {{passage}} (and usually {{query}})", c->path);
    }
    return 0;
}

/* kind: retrieve - kb, query, top_k, mode, min_score. The stage embeds
 * with the base's embed_model, so that is its model (and the pipeline's
 * cache fingerprint covers it). */
static int load_retrieve(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v = sb_config_node_get(n, "kb");
    int rc;
    if (!v) return FAIL(c, n, "%s: missing 'kb' (a knowledge base of knowledge:)", c->path);
    if ((rc = rt_pl_get_str(c, v, "kb", &s->kb))) return rc;
    const sb_config_kb *kb = sb_config_find_kb(c->cfg, s->kb);
    if (!kb) return FAIL(c, v, "%s.kb: no knowledge base named '%s' under knowledge:", c->path, s->kb);
    if (!(s->model = sb_strdup(kb->embed_model))) return SB_ENOMEM;
    long long k = 3;
    if ((v = sb_config_node_get(n, "top_k")) && (rc = rt_pl_get_int(c, v, "top_k", 1, SB_PIPE_MAX_TOP_K, &k))) return rc;
    s->kb_top_k = (int)k;
    s->kb_mode = SB_KB_HYBRID;
    if ((v = sb_config_node_get(n, "mode"))) {
        s->kb_mode = v->kind == SB_CFG_SCALAR ? sb_kb_mode_parse(v->value) : -1;
        if (s->kb_mode < 0) return FAIL(c, v, "%s.mode: expected bm25, vector or hybrid", c->path);
    }
    s->min_score = -1;
    if ((v = sb_config_node_get(n, "min_score")) && (rc = rt_pl_get_num(c, v, "min_score", 0, 1e9, &s->min_score))) return rc;
    if ((v = sb_config_node_get(n, "rerank")) && (rc = load_rerank(c, v, s))) return rc;
    return (v = sb_config_node_get(n, "query")) ? tmpl(c, v, "query", scope, &s->query)
                                                 : rt_tmpl_compile("{{input}}", scope, &s->query, NULL, 0);
}

static int load_sampling(vctx *c, const sb_config_node *n, sb_stage *s, const sb_config *cfg) {
    sb_sampling *sp = &s->sampling;
    /* Pipelines are deterministic unless asked otherwise: the same call gets
     * the same answer, and answers can be cached. */
    *sp = (sb_sampling){ .temperature = 0, .top_p = -1, .min_p = -1, .repeat_penalty = -1, .top_k = -1,
                         .max_tokens = -1, .seed = -1 };
    const sb_config_node *v;
    long long iv;
    int rc = 0;
    if (!rc && (v = sb_config_node_get(n, "temperature"))) rc = rt_pl_get_num(c, v, "temperature", 0, 2, &sp->temperature);
    if (!rc && (v = sb_config_node_get(n, "top_p"))) rc = rt_pl_get_num(c, v, "top_p", 0, 1, &sp->top_p);
    if (!rc && (v = sb_config_node_get(n, "min_p"))) rc = rt_pl_get_num(c, v, "min_p", 0, 1, &sp->min_p);
    if (!rc && (v = sb_config_node_get(n, "repeat_penalty"))) rc = rt_pl_get_num(c, v, "repeat_penalty", 0.01, 100, &sp->repeat_penalty);
    if (!rc && (v = sb_config_node_get(n, "top_k")) && !(rc = rt_pl_get_int(c, v, "top_k", 0, 1 << 20, &iv))) sp->top_k = (int)iv;
    if (!rc && (v = sb_config_node_get(n, "seed")) && !(rc = rt_pl_get_int(c, v, "seed", 0, INT64_MAX, &iv))) sp->seed = iv;
    const sb_config_model *m = sb_config_find_model(cfg, s->model);
    if (!rc && (v = sb_config_node_get(n, "max_tokens")) &&
        !(rc = rt_pl_get_int(c, v, "max_tokens", 1, m ? m->max_tokens : 1 << 20, &iv)))
        sp->max_tokens = (int)iv;
    return rc;
}

/* env: {NAME: value}: what a command tool gets on top of the allowlist
 * (tool.c); the router's own environment (its API key...) never reaches it. */
static int load_env(vctx *c, const sb_config_node *n, sb_stage *s) {
    if (n->kind != SB_CFG_MAP || n->n_pairs > SB_PIPE_MAX_ENV)
        return FAIL(c, n, "%s.env: expected a mapping of at most %d NAME: value pairs", c->path, SB_PIPE_MAX_ENV);
    for (size_t i = 0; i < n->n_pairs; i++) {
        const sb_config_node *k = n->pairs[i].key, *v = n->pairs[i].value;
        bool ok = k->len && !(k->value[0] >= '0' && k->value[0] <= '9') && strlen(k->value) == k->len;
        for (const char *q = k->value; ok && *q; q++)
            ok = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_';
        if (!ok) return FAIL(c, k, "%s.env: '%s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", c->path, k->value);
        if (v->kind != SB_CFG_SCALAR || sb_config_node_is_null(v) || strlen(v->value) != v->len)
            return FAIL(c, v, "%s.env.%s: expected a string without NUL characters", c->path, k->value);
        size_t len = k->len + 1 + v->len + 1;
        if (!(s->env[s->n_env] = sb_malloc(len))) return SB_ENOMEM;
        snprintf(s->env[s->n_env++], len, "%s=%s", k->value, v->value);
    }
    return 0;
}

static int load_tool_limits(vctx *c, const sb_config_node *n, sb_stage *s) {
    long long mc = SB_TOOL_CONCURRENT, mq = SB_TOOL_QUEUE;
    const sb_config_node *v;
    int rc = 0;
    if ((v = sb_config_node_get(n, "max_concurrent"))) rc = rt_pl_get_int(c, v, "max_concurrent", 1, 1024, &mc);
    if (!rc && (v = sb_config_node_get(n, "max_queue"))) rc = rt_pl_get_int(c, v, "max_queue", 0, 100000, &mq);
    s->max_concurrent = (int)mc;
    s->max_queue = (int)mq;
    return rc;
}

/* json_schema: inline JSON text (a YAML block scalar starting with '{'), or
 * a file path relative to the config. Compiled here so an unsupported
 * keyword is a config error at its line; the text goes to the worker with
 * every call and into the pipeline's digest (a file's content included). */
static int load_json_schema(vctx *c, const sb_config_node *v, sb_stage *s) {
    if (v->kind != SB_CFG_SCALAR) return FAIL(c, v, "%s.json_schema: expected JSON text or a file path", c->path);
    const sb_config_model *m = sb_config_find_model(c->cfg, s->model);
    if (m && m->upstream)
        return FAIL(c, v, "%s.json_schema: constrained decoding needs a local model; '%s' is an upstream", c->path, s->model);
    char path[1024], err[SB_ERR_LEN];
    const char *arg = v->value;
    if (arg[strspn(arg, " \t\r\n")] != '{' && arg[0] != '/') {
        snprintf(path, sizeof path, "%s/%s", c->cfg->base_dir, arg);
        arg = path;
    }
    size_t len;
    if (sb_json_schema_load(arg, &s->json_schema, &len, err)) return FAIL(c, v, "%s.json_schema: %s", c->path, err);
    sb_grammar *g = NULL;
    if (sb_json_schema_compile(s->json_schema, len, &g, err)) return FAIL(c, v, "%s.json_schema: %s", c->path, err);
    sb_grammar_free(g);
    s->json = true;
    return 0;
}

/* name and kind of stage idx; c->path gets "(NAME)"; unknown keys refused. */
static int load_stage_head(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx) {
    sb_stage *s = &p->stages[idx];
    s->line = n->line;
    s->col = n->col;
    s->args_from = -1;
    s->when_found = -1;
    s->chat = true;
    if (n->kind != SB_CFG_MAP) return FAIL(c, n, "%s: expected a mapping, got %s", c->path, rt_pl_what(n));
    const sb_config_node *nm = sb_config_node_get(n, "name"), *kd = sb_config_node_get(n, "kind");
    if (!nm) return FAIL(c, n, "%s: missing 'name'", c->path);
    if (!kd) return FAIL(c, n, "%s: missing 'kind' (intent, generate, tool or retrieve)", c->path);
    int rc = rt_pl_get_str(c, nm, "name", &s->name);
    if (rc) return rc;
    if (!rt_pl_valid_name(s->name)) return FAIL(c, nm, "%s.name: must be 1-%d characters of A-Z a-z 0-9 _ -", c->path, SB_CONFIG_MAX_NAME);
    for (size_t j = 0; j < idx; j++)
        if (!strcmp(p->stages[j].name, s->name)) return FAIL(c, nm, "%s.name: '%s' is used by an earlier stage", c->path, s->name);
    const char *k = kd->kind == SB_CFG_SCALAR ? kd->value : "";
    if (!strcmp(k, "intent")) s->kind = SB_STAGE_INTENT;
    else if (!strcmp(k, "generate")) s->kind = SB_STAGE_GENERATE;
    else if (!strcmp(k, "tool")) s->kind = SB_STAGE_TOOL;
    else if (!strcmp(k, "retrieve")) s->kind = SB_STAGE_RETRIEVE;
    else return FAIL(c, kd, "%s.kind: expected intent, generate, tool or retrieve, got '%s'", c->path, k);
    snprintf(c->path + strlen(c->path), sizeof c->path - strlen(c->path), "(%s)", s->name);
    static const char *const intent_keys[] = { "name", "kind", "when", "model", "system", "chat", "labels",
                                               "min_confidence", "fallback", "utterance", "calibrate", "method",
                                               "score_model", "hybrid_margin", "classifier", "examples_file",
                                               "out_of_scope", "priority", NULL };
    static const char *const gen_keys[] = { "name", "kind", "when", "model", "system", "chat", "prompt", "temperature",
                                            "top_p", "top_k", "min_p", "repeat_penalty", "seed", "max_tokens", "stop",
                                            "json", "json_schema", "priority", NULL };
    static const char *const tool_keys[] = { "name", "kind", "when", "command", "stdin", "url", "method", "body",
                                             "args_from", "timeout_ms", "env", "max_concurrent", "max_queue", NULL };
    static const char *const retrieve_keys[] = { "name", "kind", "when", "kb", "query", "top_k", "min_score", "mode",
                                                 "rerank", "priority", NULL };
    static const char *const *const keys_of[] = { intent_keys, gen_keys, tool_keys, retrieve_keys };
    return rt_pl_check_keys(c, n, keys_of[s->kind]);
}

/* A model stage's model, system and chat. */
static int load_model_keys(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if (!(v = sb_config_node_get(n, "model"))) return FAIL(c, n, "%s: missing 'model'", c->path);
    if ((rc = rt_pl_get_str(c, v, "model", &s->model))) return rc;
    if (!sb_config_find_model(c->cfg, s->model))
        return FAIL(c, v, "%s.model: no model named '%s' under models:", c->path, s->model);
    if ((v = sb_config_node_get(n, "system")) && (rc = tmpl(c, v, "system", scope, &s->system))) return rc;
    if ((v = sb_config_node_get(n, "chat")) && (rc = rt_pl_get_bool(c, v, "chat", &s->chat))) return rc;
    return 0;
}

static int load_intent(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if (!(v = sb_config_node_get(n, "labels"))) return FAIL(c, n, "%s: missing 'labels'", c->path);
    if ((rc = load_labels(c, v, s))) return rc;
    if ((v = sb_config_node_get(n, "calibrate")) && (rc = rt_pl_get_bool(c, v, "calibrate", &s->calibrate))) return rc;
    if ((v = sb_config_node_get(n, "min_confidence")) && (rc = rt_pl_get_num(c, v, "min_confidence", 0, 1, &s->min_confidence)))
        return rc;
    if ((v = sb_config_node_get(n, "fallback"))) {
        if ((rc = rt_pl_get_str(c, v, "fallback", &s->fallback))) return rc;
        if (label_index(s, s->fallback) < 0)
            return FAIL(c, v, "%s.fallback: '%s' is not one of this stage's labels", c->path, s->fallback);
    } else if (s->min_confidence > 0) {
        return FAIL(c, n, "%s: min_confidence needs a 'fallback' label", c->path);
    }
    if ((rc = load_intent_method(c, n, s))) return rc;
    return (v = sb_config_node_get(n, "utterance")) ? tmpl(c, v, "utterance", scope, &s->utterance)
                                                    : rt_tmpl_compile("{{input}}", scope, &s->utterance, NULL, 0);
}

static int load_generate(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if (!(v = sb_config_node_get(n, "prompt"))) return FAIL(c, n, "%s: missing 'prompt'", c->path);
    if ((rc = tmpl(c, v, "prompt", scope, &s->prompt))) return rc;
    if ((rc = load_sampling(c, n, s, c->cfg))) return rc;
    if ((v = sb_config_node_get(n, "stop"))) {
        char **stops;
        if ((rc = rt_pl_get_strs(c, v, "stop", SB_PIPE_MAX_STOPS, &stops, &s->n_stops))) {
            for (size_t i = 0; stops && stops[i] && i < SB_PIPE_MAX_STOPS; i++) sb_free(stops[i]);
            sb_free(stops);
            return rc;
        }
        memcpy(s->stops, stops, s->n_stops * sizeof *stops);
        sb_free(stops);
    }
    if ((v = sb_config_node_get(n, "json")) && (rc = rt_pl_get_bool(c, v, "json", &s->json))) return rc;
    if ((v = sb_config_node_get(n, "json_schema")) && (rc = load_json_schema(c, v, s))) return rc;
    return 0;
}

/* args_from: an earlier stage that produces JSON. */
static int load_args_from(vctx *c, const sb_config_node *v, sb_pipeline *p, size_t idx, sb_stage *s) {
    if (v->kind != SB_CFG_SCALAR) return FAIL(c, v, "%s.args_from: expected a stage name", c->path);
    for (size_t j = 0; j < idx; j++)
        if (!strcmp(p->stages[j].name, v->value)) s->args_from = (int)j;
    if (s->args_from < 0) return FAIL(c, v, "%s.args_from: no earlier stage named '%s'", c->path, v->value);
    if (!p->stages[s->args_from].json && p->stages[s->args_from].kind != SB_STAGE_TOOL)
        return FAIL(c, v, "%s.args_from: stage '%s' does not produce JSON (set json: true on it)", c->path, v->value);
    return 0;
}

/* A command tool: argv templates (no shell) and its environment. */
static int load_command(vctx *c, const sb_config_node *n, const sb_config_node *cmd, sb_stage *s,
                        const rt_tmpl_scope *scope) {
    int rc;
    size_t k = cmd->kind == SB_CFG_SEQ ? cmd->n_items : 0;
    if (!k || k > SB_PIPE_MAX_ARGS)
        return FAIL(c, cmd, "%s.command: expected a list of 1-%d strings (program and arguments; no shell)", c->path,
                    SB_PIPE_MAX_ARGS);
    for (size_t i = 0; i < k; i++) {
        if ((rc = tmpl(c, cmd->items[i], "command", scope, &s->argv[i]))) return rc;
        s->n_argv++;
    }
    const sb_config_node *v = sb_config_node_get(n, "env");
    return v ? load_env(c, v, s) : 0;
}

/* An HTTP tool: url, method, body. */
static int load_http_tool(vctx *c, const sb_config_node *n, const sb_config_node *url, sb_stage *s,
                          const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if ((v = sb_config_node_get(n, "env"))) return FAIL(c, v, "%s.env: only a command tool has an environment", c->path);
    if ((rc = rt_pl_get_str(c, url, "url", &s->url))) return rc;
    if (strncmp(s->url, "http://", 7)) return FAIL(c, url, "%s.url: only http:// URLs are supported", c->path);
    if ((v = sb_config_node_get(n, "method"))) {
        if (v->kind != SB_CFG_SCALAR || (strcmp(v->value, "GET") && strcmp(v->value, "POST")))
            return FAIL(c, v, "%s.method: expected GET or POST", c->path);
        s->http_post = !strcmp(v->value, "POST");
    } else {
        s->http_post = true;
    }
    if ((v = sb_config_node_get(n, "body")) && (rc = tmpl(c, v, "body", scope, &s->body))) return rc;
    return 0;
}

static int load_tool(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope) {
    sb_stage *s = &p->stages[idx];
    const sb_config_node *cmd = sb_config_node_get(n, "command"), *url = sb_config_node_get(n, "url"), *v;
    int rc;
    if (!cmd == !url) return FAIL(c, n, "%s: a tool stage needs exactly one of 'command' or 'url'", c->path);
    if ((v = sb_config_node_get(n, "args_from")) && (rc = load_args_from(c, v, p, idx, s))) return rc;
    long long t = 10000;
    if ((v = sb_config_node_get(n, "timeout_ms")) && (rc = rt_pl_get_int(c, v, "timeout_ms", 1, 3600000, &t))) return rc;
    s->timeout_ms = (int)t;
    if ((rc = load_tool_limits(c, n, s))) return rc;
    if ((v = sb_config_node_get(n, "stdin")) && (rc = tmpl(c, v, "stdin", scope, &s->stdin_tmpl))) return rc;
    return cmd ? load_command(c, n, cmd, s, scope) : load_http_tool(c, n, url, s, scope);
}

int rt_pl_load_stage(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx) {
    sb_stage *s = &p->stages[idx];
    int rc = load_stage_head(c, n, p, idx);
    if (rc) return rc;
    /* What its templates may name: the stages before it, and the intent's
     * outcome when there is an intent stage among them. */
    const char *names[SB_PIPE_MAX_STAGES];
    bool has_intent = false;
    for (size_t j = 0; j < idx; j++) {
        names[j] = p->stages[j].name;
        has_intent |= p->stages[j].kind == SB_STAGE_INTENT;
    }
    rt_tmpl_scope scope = { names, idx, has_intent };
    const sb_config_node *v;
    if ((v = sb_config_node_get(n, "when")) && (rc = load_when(c, v, p, idx, s))) return rc;
    /* An intent stage is short (one prompt, a few labels) and every later
     * stage of its call waits on it: by default it goes ahead of generations
     * that arrived up to a second before it (docs/router.md, "Priority"). */
    long long prio = s->kind == SB_STAGE_INTENT ? 1 : 0;
    if ((v = sb_config_node_get(n, "priority")) &&
        (rc = rt_pl_get_int(c, v, "priority", -SB_PIPE_MAX_PRIORITY, SB_PIPE_MAX_PRIORITY, &prio)))
        return rc;
    s->priority = (int)prio;
    switch (s->kind) {
    case SB_STAGE_RETRIEVE: return load_retrieve(c, n, s, &scope);
    case SB_STAGE_TOOL: return load_tool(c, n, p, idx, &scope);
    case SB_STAGE_INTENT: return (rc = load_model_keys(c, n, s, &scope)) ? rc : load_intent(c, n, s, &scope);
    default: return (rc = load_model_keys(c, n, s, &scope)) ? rc : load_generate(c, n, s, &scope);
    }
}
