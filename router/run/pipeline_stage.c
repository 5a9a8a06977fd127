/* pipeline_stage.c - what every pipeline stage has: its name and kind,
 * `when:` and priority, and for a model stage its model, system and chat.
 * The kind is found by name in the table (stage_kinds.c), its own keys are
 * the only others allowed, and the kind loads them (its check). Every
 * mistake is reported as FILE:LINE:COL with the key path and what was
 * expected (docs/router.md documents the schema).
 */
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

/* ------------------------------------------------------------ templates */

int rt_pl_tmpl(vctx *c, const sb_config_node *n, const char *key, const rt_tmpl_scope *scope, sb_tmpl **out) {
    if (!n || n->kind != SB_CFG_SCALAR || sb_config_node_is_null(n))
        return FAIL(c, n, "%s.%s: expected a template string, got %s", c->path, key, n ? sb_cfg_what(n) : "nothing");
    char why[SB_ERR_LEN];
    int rc = rt_tmpl_compile(n->value, scope, out, why, sizeof why);
    if (rc == SB_EINVAL) return FAIL(c, n, "%s.%s: %s", c->path, key, why);
    return rc;
}

int rt_pl_label_index(const sb_stage *s, const char *name) {
    for (size_t i = 0; i < s->n_labels; i++)
        if (!strcmp(s->labels[i].name, name)) return (int)i;
    return -1;
}

/* ------------------------------------------------------------- when */

/* when: {found: STAGE} / {not_found: STAGE}: an earlier retrieve stage. */
static int load_when_found(vctx *c, const sb_config_node *k, const sb_config_node *v, sb_pipeline *p, size_t idx,
                           sb_stage *s) {
    s->when_found_negate = !strcmp(k->value, "not_found");
    for (size_t j = 0; v->kind == SB_CFG_SCALAR && j < idx; j++)
        if ((rt_stage_kind_of(&p->stages[j])->traits & RT_KIND_FOUND) && !strcmp(p->stages[j].name, v->value)) s->when_found = (int)j;
    if (s->when_found < 0)
        return FAIL(c, v, "%s.when.%s: expected the name of an earlier retrieve stage", c->path, k->value);
    return 0;
}

static const sb_cfg_key when_keys[] = {
    RT_KEY("intent"), RT_KEY("intent_not"), RT_KEY("found"), RT_KEY("not_found"), RT_KEYS_END
};

static int load_when(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, sb_stage *s) {
    if (n->kind != SB_CFG_MAP || n->n_pairs < 1 || n->n_pairs > 2)
        return FAIL(c, n, "%s.when: expected {intent: [labels]} or {intent_not: [labels]}, and/or {found: STAGE} "
                    "or {not_found: STAGE}", c->path);
    int rc = sb_cfg_keys_check(PL(c), n, when_keys);
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
    if ((rc = sb_cfg_strs(PL(c), iv, "when.intent", SB_PIPE_MAX_LABELS, &s->when_intents, &s->n_when)))
        return rc;
    /* Each label must be one an earlier intent stage can produce. */
    for (size_t k = 0; k < s->n_when; k++) {
        bool found = false, any_intent = false;
        for (size_t j = 0; j < idx; j++) {
            if (!(rt_stage_kind_of(&p->stages[j])->traits & RT_KIND_SETS_INTENT)) continue;
            any_intent = true;
            found |= rt_pl_label_index(&p->stages[j], s->when_intents[k]) >= 0;
        }
        if (!any_intent) return FAIL(c, n, "%s.when: no intent stage runs before this one", c->path);
        if (!found)
            return FAIL(c, iv, "%s.when: '%s' is not a label of an earlier intent stage", c->path,
                        s->when_intents[k]);
    }
    return 0;
}

/* --------------------------------------------------------------- stages */

/* name and kind of stage idx; c->path gets "(NAME)"; unknown keys refused. */
static int load_stage_head(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx) {
    sb_stage *s = &p->stages[idx];
    s->line = n->line;
    s->col = n->col;
    s->args_from = -1;
    s->when_found = -1;
    s->chat = true;
    if (n->kind != SB_CFG_MAP) return FAIL(c, n, "%s: expected a mapping, got %s", c->path, sb_cfg_what(n));
    const sb_config_node *nm = sb_config_node_get(n, "name"), *kd = sb_config_node_get(n, "kind");
    if (!nm) return FAIL(c, n, "%s: missing 'name'", c->path);
    char kinds[200];
    rt_stage_kind_list(kinds, sizeof kinds);
    if (!kd) return FAIL(c, n, "%s: missing 'kind' (%s)", c->path, kinds);
    int rc = sb_cfg_str(PL(c), nm, "name", false, &s->name);
    if (rc) return rc;
    if (!sb_cfg_valid_name(s->name, SB_CONFIG_MAX_NAME)) return FAIL(c, nm, "%s.name: must be 1-%d characters of A-Z a-z 0-9 _ -", c->path, SB_CONFIG_MAX_NAME);
    for (size_t j = 0; j < idx; j++)
        if (!strcmp(p->stages[j].name, s->name)) return FAIL(c, nm, "%s.name: '%s' is used by an earlier stage", c->path, s->name);
    const char *k = kd->kind == SB_CFG_SCALAR ? kd->value : "";
    int index;
    const rt_stage_kind *kind = rt_stage_kind_find(k, &index);
    if (!kind) return FAIL(c, kd, "%s.kind: expected %s, got '%s'", c->path, kinds, k);
    s->kind = (sb_stage_kind)index;
    snprintf(c->path + strlen(c->path), sizeof c->path - strlen(c->path), "(%s)", s->name);
    /* Every stage's keys, then the kind's own. */
    sb_cfg_key keys[64] = { RT_KEY("name"), RT_KEY("kind"), RT_KEY("when") };
    size_t nk = 3;
    for (const sb_cfg_key *key = kind->keys; key->name && nk < SB_ARRAY_LEN(keys) - 1; key++) keys[nk++] = *key;
    return sb_cfg_keys_check(PL(c), n, keys);
}

/* A model stage's model, system and chat. */
int rt_pl_model_keys(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if (!(v = sb_config_node_get(n, "model"))) return FAIL(c, n, "%s: missing 'model'", c->path);
    if ((rc = sb_cfg_str(PL(c), v, "model", false, &s->model))) return rc;
    if (!sb_config_find_model(c->cfg, s->model))
        return FAIL(c, v, "%s.model: no model named '%s' under models:", c->path, s->model);
    if ((v = sb_config_node_get(n, "system")) && (rc = rt_pl_tmpl(c, v, "system", scope, &s->system))) return rc;
    if ((v = sb_config_node_get(n, "chat")) && (rc = sb_cfg_bool(PL(c), v, "chat", &s->chat))) return rc;
    return 0;
}

int rt_pl_load_stage(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx) {
    sb_stage *s = &p->stages[idx];
    int rc = load_stage_head(c, n, p, idx);
    if (rc) return rc;
    const rt_stage_kind *kind = rt_stage_kind_of(s);
    /* What its templates may name: the stages before it, and the intent's
     * outcome when a stage that sets one is among them. */
    const char *names[SB_PIPE_MAX_STAGES];
    bool has_intent = false;
    for (size_t j = 0; j < idx; j++) {
        names[j] = p->stages[j].name;
        has_intent |= (rt_stage_kind_of(&p->stages[j])->traits & RT_KIND_SETS_INTENT) != 0;
    }
    rt_tmpl_scope scope = { names, idx, has_intent };
    const sb_config_node *v;
    if ((v = sb_config_node_get(n, "when")) && (rc = load_when(c, v, p, idx, s))) return rc;
    long long prio = kind->default_priority;
    if ((v = sb_config_node_get(n, "priority")) &&
        (rc = sb_cfg_int(PL(c), v, "priority", -SB_PIPE_MAX_PRIORITY, SB_PIPE_MAX_PRIORITY, &prio)))
        return rc;
    s->priority = (int)prio;
    return kind->check(c, n, p, idx, &scope);
}
