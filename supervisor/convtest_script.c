/* convtest_script.c - the script files of `switchboard test`, read with
 * the configuration's YAML reader and typed-key checks (common/sb_config.h)
 * so a mistake reads like a config error: "FILE:LINE:COL: key: why".
 * Everything is checked before any conversation runs: a script that
 * cannot mean anything fails at once, not halfway through a run.
 */
#include "supervisor/convtest.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SCRIPT_BYTES (4u << 20)
#define MAX_TURNS        1000       /* a conversation's; the sessions' own cap */
#define MAX_CONTAINS     32

#define FAIL SB_CFG_FAIL
#define K(name) { name, SB_KEY_OTHER, 0, 0, 0, NULL }

static const sb_cfg_key file_keys[] = { K("pipeline"), K("language"), K("conversations"), SB_CFG_KEYS_END };
static const sb_cfg_key conv_keys[] = { K("name"), K("pipeline"), K("language"), K("turns"), SB_CFG_KEYS_END };
static const sb_cfg_key turn_keys[] = {
    K("say"), K("hangup"), K("intent"), K("slots"), K("awaiting"), K("reply_contains"),
    K("handoff"), K("done"), K("fallback"), SB_CFG_KEYS_END
};
static const sb_cfg_key awaiting_keys[] = { K("kind"), K("slot"), K("options"), SB_CFG_KEYS_END };
static const char *const awaiting_kinds[] = { "slot", "clarify", "confirm", NULL };

static bool is_text(const sb_config_node *v) {
    return v && v->kind == SB_CFG_SCALAR && !sb_config_node_is_null(v) && v->len > 0;
}

/* A non-empty string at key of map (required or not): *out, or NULL. */
static int text_at(const sb_cfg_ctx *c, const sb_config_node *map, const char *key, bool required,
                   const char **out) {
    const sb_config_node *v = sb_config_node_get(map, key);
    *out = NULL;
    if (!v && !required) return 0;
    if (!v) return FAIL(c, map, "%s: '%s' is missing", c->path, key);
    if (!is_text(v)) return FAIL(c, v, "%s.%s: expected a non-empty string, got %s", c->path, key, sb_cfg_what(v));
    *out = v->value;
    return 0;
}

static int check_language(const sb_cfg_ctx *c, const sb_config_node *map, const char **out) {
    int rc = text_at(c, map, "language", false, out);
    if (rc || !*out) return rc;
    size_t n = strlen(*out);
    bool ok = n >= 2 && n <= 8;
    for (const char *p = *out; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '-';
    return ok ? 0 : FAIL(c, sb_config_node_get(map, "language"),
                         "%s.language: expected a tag of 2-8 letters or '-' (zh, en), got '%s'", c->path, *out);
}

static int check_awaiting(const sb_cfg_ctx *c, const sb_config_node *v) {
    if (sb_config_node_is_null(v)) return 0;
    char path[256];
    snprintf(path, sizeof path, "%s.awaiting", c->path);
    sb_cfg_ctx a = *c;
    a.path = path;
    if (v->kind != SB_CFG_MAP)
        return FAIL(c, v, "%s: expected null or a mapping {kind, slot | options}, got %s", path, sb_cfg_what(v));
    int kind, rc;
    const sb_config_node *k = sb_config_node_get(v, "kind");
    if ((rc = sb_cfg_keys_check(&a, v, awaiting_keys))) return rc;
    if (!k) return FAIL(c, v, "%s: 'kind' is missing (slot, clarify or confirm)", path);
    if ((rc = sb_cfg_enum(&a, k, "kind", awaiting_kinds, &kind))) return rc;
    const sb_config_node *slot = sb_config_node_get(v, "slot"), *opts = sb_config_node_get(v, "options");
    if (slot && kind != 0) return FAIL(c, slot, "%s.slot: only with kind: slot", path);
    if (opts && kind != 1) return FAIL(c, opts, "%s.options: only with kind: clarify", path);
    if (slot && !is_text(slot)) return FAIL(c, slot, "%s.slot: expected a slot's name, got %s", path, sb_cfg_what(slot));
    if (opts) {
        char **names;
        size_t n;
        rc = sb_cfg_strs(&a, opts, "options", 16, &names, &n);
        for (size_t i = 0; i < n; i++) sb_free(names[i]);
        sb_free(names);
    }
    return rc;
}

static int check_slots(const sb_cfg_ctx *c, const sb_config_node *v) {
    if (v->kind != SB_CFG_MAP || !v->n_pairs)
        return FAIL(c, v, "%s.slots: expected a mapping of slot: value, got %s", c->path, sb_cfg_what(v));
    for (size_t i = 0; i < v->n_pairs; i++)
        if (v->pairs[i].value->kind != SB_CFG_SCALAR)
            return FAIL(c, v->pairs[i].value, "%s.slots.%s: expected a value or null, got %s", c->path,
                        v->pairs[i].key->value, sb_cfg_what(v->pairs[i].value));
    return 0;
}

/* handoff: true / false, or the reason expected (a string). */
static int check_handoff(const sb_cfg_ctx *c, const sb_config_node *v) {
    if (is_text(v)) return 0;
    return FAIL(c, v, "%s.handoff: expected true, false or a reason (max_turns, ...), got %s", c->path,
                sb_cfg_what(v));
}

static int load_turn(const sb_cfg_ctx *c, const sb_config_node *n, bool last, ct_turn *t) {
    int rc;
    bool b;
    if ((rc = sb_cfg_want_map(c, n)) || (rc = sb_cfg_keys_check(c, n, turn_keys))) return rc;
    t->line = n->line;
    const sb_config_node *h = sb_config_node_get(n, "hangup");
    if (h && (rc = sb_cfg_bool(c, h, "hangup", &b))) return rc;
    t->hangup = h && b;
    if ((rc = text_at(c, n, "say", false, &t->say))) return rc;
    if (!t->say == !t->hangup)
        return FAIL(c, n, "%s: a turn is either 'say: WORDS' or 'hangup: true'", c->path);
    t->intent = sb_config_node_get(n, "intent");
    t->slots = sb_config_node_get(n, "slots");
    t->awaiting = sb_config_node_get(n, "awaiting");
    t->reply_contains = sb_config_node_get(n, "reply_contains");
    t->handoff = sb_config_node_get(n, "handoff");
    t->done = sb_config_node_get(n, "done");
    t->fallback = sb_config_node_get(n, "fallback");
    if (t->hangup) {
        if (n->n_pairs > 1) return FAIL(c, n, "%s: a hang-up turn has no expectations (only 'hangup: true')", c->path);
        if (!last) return FAIL(c, n, "%s: a hang-up ends the conversation: it must be the last turn", c->path);
        return 0;
    }
    if (t->intent && !sb_config_node_is_null(t->intent) && !is_text(t->intent))
        return FAIL(c, t->intent, "%s.intent: expected a label or null, got %s", c->path, sb_cfg_what(t->intent));
    if (t->slots && (rc = check_slots(c, t->slots))) return rc;
    if (t->awaiting && (rc = check_awaiting(c, t->awaiting))) return rc;
    if (t->reply_contains) {
        char **s;
        size_t k;
        rc = sb_cfg_strs(c, t->reply_contains, "reply_contains", MAX_CONTAINS, &s, &k);
        for (size_t i = 0; i < k; i++) sb_free(s[i]);
        sb_free(s);
        if (rc) return rc;
    }
    if (t->handoff && (rc = check_handoff(c, t->handoff))) return rc;
    if (t->done && (rc = sb_cfg_bool(c, t->done, "done", &b))) return rc;
    if (t->fallback && (rc = sb_cfg_bool(c, t->fallback, "fallback", &b))) return rc;
    return 0;
}

/* The pipeline a conversation runs: its own, the file's, or the config's
 * only one; it must be one of the config's (when there is a config). */
static int resolve_pipeline(const sb_cfg_ctx *c, const sb_config_node *conv, const char *file_default,
                            const sb_config_node *pipelines, const char **out) {
    int rc = text_at(c, conv, "pipeline", false, out);
    if (rc) return rc;
    const sb_config_node *at = sb_config_node_get(conv, "pipeline");
    if (!*out) *out = file_default;
    if (!*out && pipelines && pipelines->kind == SB_CFG_MAP && pipelines->n_pairs == 1)
        *out = pipelines->pairs[0].key->value;
    if (!*out)
        return FAIL(c, conv, "%s: no 'pipeline' (here or at the top of the file), and %s", c->path,
                    pipelines ? "the config has several: name one" : "no config (-c) to take its only one from");
    if (pipelines && !sb_config_node_get(pipelines, *out)) {
        char list[300] = "";
        for (size_t i = 0; pipelines->kind == SB_CFG_MAP && i < pipelines->n_pairs; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     pipelines->pairs[i].key->value);
        return FAIL(c, at ? at : conv, "%s.pipeline: '%s' is not a pipeline of the config (it has: %s)", c->path,
                    *out, list[0] ? list : "none");
    }
    return 0;
}

static int load_conv(const sb_cfg_ctx *fc, const sb_config_node *n, size_t idx, const char *pipe,
                     const char *lang, const sb_config_node *pipelines, ct_conv *cv) {
    char path[128];
    snprintf(path, sizeof path, "conversations[%zu]", idx);
    sb_cfg_ctx c = *fc;
    c.path = path;
    int rc;
    if ((rc = sb_cfg_want_map(&c, n)) || (rc = sb_cfg_keys_check(&c, n, conv_keys))) return rc;
    cv->line = n->line;
    if ((rc = text_at(&c, n, "name", true, &cv->name))) return rc;
    if ((rc = resolve_pipeline(&c, n, pipe, pipelines, &cv->pipeline))) return rc;
    if ((rc = check_language(&c, n, &cv->language))) return rc;
    if (!cv->language) cv->language = lang;
    const sb_config_node *turns = sb_config_node_get(n, "turns");
    if (!turns) return FAIL(&c, n, "%s: 'turns' is missing", path);
    if (turns->kind != SB_CFG_SEQ || !turns->n_items || turns->n_items > MAX_TURNS)
        return FAIL(&c, turns, "%s.turns: expected a list of 1-%d turns, got %s", path, MAX_TURNS,
                    sb_cfg_what(turns));
    if (!(cv->turns = sb_calloc(turns->n_items, sizeof *cv->turns))) return SB_ENOMEM;
    cv->n_turns = turns->n_items;
    for (size_t i = 0; i < turns->n_items; i++) {
        char tpath[160];
        snprintf(tpath, sizeof tpath, "%s.turns[%zu]", path, i);
        sb_cfg_ctx tc = c;
        tc.path = tpath;
        if ((rc = load_turn(&tc, turns->items[i], i + 1 == turns->n_items, &cv->turns[i]))) return rc;
    }
    return 0;
}

static int load_root(const sb_cfg_ctx *c, const sb_config_node *root, const sb_config_node *pipelines,
                     ct_script *s) {
    if (!root) return FAIL(c, NULL, "the script is empty (expected 'conversations:')");
    int rc;
    const char *pipe, *lang;
    if ((rc = sb_cfg_want_map(c, root)) || (rc = sb_cfg_keys_check(c, root, file_keys))) return rc;
    if ((rc = text_at(c, root, "pipeline", false, &pipe))) return rc;
    if ((rc = check_language(c, root, &lang))) return rc;
    const sb_config_node *convs = sb_config_node_get(root, "conversations");
    if (!convs) return FAIL(c, root, "'conversations' is missing (a list of {name, turns})");
    if (convs->kind != SB_CFG_SEQ || !convs->n_items)
        return FAIL(c, convs, "conversations: expected a list of {name, turns}, got %s", sb_cfg_what(convs));
    if (!(s->convs = sb_calloc(convs->n_items, sizeof *s->convs))) return SB_ENOMEM;
    s->n_convs = convs->n_items;
    for (size_t i = 0; i < convs->n_items; i++)
        if ((rc = load_conv(c, convs->items[i], i, pipe, lang, pipelines, &s->convs[i]))) return rc;
    return 0;
}

int ct_script_load(const char *path, const sb_config_node *pipelines, ct_script *out, char *err) {
    memset(out, 0, sizeof *out);
    out->path = path;
    char *text;
    size_t len;
    int rc = sb_read_file(path, MAX_SCRIPT_BYTES, &text, &len, err);
    if (rc) return rc;
    rc = sb_config_tree_parse(text, len, path, &out->root, err);
    sb_free(text);
    if (rc) return rc;
    /* The typed-key readers name the file through a config; a script has
     * only the path to lend it. */
    sb_config as_file = { .path = (char *)path };
    sb_cfg_ctx c = { .cfg = &as_file, .err = err, .path = "script" };
    rc = load_root(&c, out->root, pipelines, out);
    if (rc) ct_script_free(out);
    return rc;
}

void ct_script_free(ct_script *s) {
    for (size_t i = 0; i < s->n_convs; i++) sb_free(s->convs[i].turns);
    sb_free(s->convs);
    sb_config_tree_free(s->root);
    memset(s, 0, sizeof *s);
}
