/* pipeline.c - the `pipelines:` section: schema, validation, digests.
 *
 * The config loader keeps the section as a node tree with positions; here
 * it becomes sb_pipeline structs, and every mistake an operator can make is
 * reported as FILE:LINE:COL with the key path and what was expected: unknown
 * keys, wrong types, a stage naming a model the config does not have, a
 * `when:` naming an intent no earlier stage can produce, a template naming a
 * stage that has not run yet. docs/router.md documents the schema.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/run/stage_internal.h"
#include "router/classify/sb_classify.h"
#include "worker/engine/sb_grammar.h"
#include "kb/sb_kb.h"

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
    int rc = sb_cfg_strs(PL(c), n, "cache_fold", 2, &v, &k);
    for (size_t i = 0; !rc && i < k; i++) {
        if (!strcmp(v[i], "case")) p->cache_fold |= SB_NORM_CASEFOLD;
        else if (!strcmp(v[i], "width")) p->cache_fold |= SB_NORM_NFKC;
        else rc = FAIL(c, n, "%s.cache_fold: '%s' is not one of case, width", c->path, v[i]);
    }
    for (size_t i = 0; i < k; i++) sb_free(v[i]);
    sb_free(v);
    return rc;
}

/* conversation: the pipeline keeps a session per caller (router/sessions.c).
 * ttl_s: idle seconds before a session expires; max_turns: turns before the
 * call ends (done, handed to a person); max_bytes: what a session may store;
 * topic_switch: the confidence at which a caller's answer to a question is
 * a new topic instead (0: never); history_turns / history_tokens: what
 * {{history}} shows a composer of the turns before. */
#define CV(f) offsetof(sb_pipeline, conv.f)
static const sb_cfg_key conversation_keys[] = {
    { "ttl_s", SB_KEY_INT, 1, 7 * 86400, CV(ttl_s), NULL },
    { "max_turns", SB_KEY_INT, 1, 1000, CV(max_turns), NULL },
    { "max_bytes", SB_KEY_INT, 1024, 16 << 20, CV(max_bytes), NULL },
    RT_KEY("handoff_intents"),      /* labels of the pipeline's intent stages, checked after its stages */
    { "handoff_url", SB_KEY_STR, 1, 0, CV(handoff_url), NULL },
    { "topic_switch", SB_KEY_NUM, 0, 1, CV(topic_switch), NULL },
    { "history_turns", SB_KEY_INT, 0, 50, CV(history_turns), NULL },
    { "history_tokens", SB_KEY_INT, 16, 32768, CV(history_tokens), NULL },
    { "handoff_ca_file", SB_KEY_PATH, 1, 0, CV(handoff_ca_file), NULL },
    RT_KEYS_END
};

static int load_conversation(vctx *c, const sb_config_node *n, sb_pipeline *p) {
    char path[sizeof c->path + 16];
    snprintf(path, sizeof path, "%s.conversation", c->path);
    sb_cfg_ctx k = { c->cfg, c->err, path, true };
    p->conv.on = true;
    p->conv.ttl_s = 1800;
    p->conv.max_turns = 50;
    p->conv.max_bytes = 256 << 10;
    p->conv.history_turns = 4;
    p->conv.history_tokens = 256;
    int rc = sb_cfg_want_map(&k, n);
    if (!rc) rc = sb_cfg_keys_check(&k, n, conversation_keys);
    if (!rc) rc = sb_cfg_keys_read(&k, n, conversation_keys, p);
    const sb_config_node *v = rc ? NULL : sb_config_node_get(n, "handoff_intents");
    if (v) rc = sb_cfg_strs(&k, v, "handoff_intents", SB_PIPE_MAX_LABELS, &p->conv.handoff_intents,
                            &p->conv.n_handoff_intents);
    const char *url = p->conv.handoff_url;
    if (!rc && url && strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        rc = FAIL(c, sb_config_node_get(n, "handoff_url"), "%s.handoff_url: expected an http:// or https:// URL, got '%s'",
                  path, url);
    return rc;
}

/* Each of conversation.handoff_intents is a label of one of the stages. */
static int check_handoff_intents(vctx *c, const sb_config_node *n, const sb_pipeline *p) {
    for (size_t i = 0; i < p->conv.n_handoff_intents; i++) {
        const char *name = p->conv.handoff_intents[i];
        bool found = false;
        for (size_t k = 0; k < p->n_stages && !found; k++)
            found = p->stages[k].kind == SB_STAGE_INTENT && rt_pl_label_index(&p->stages[k], name) >= 0;
        if (!found)
            return FAIL(c, sb_config_node_get(sb_config_node_get(n, "conversation"), "handoff_intents"),
                        "%s.conversation.handoff_intents: '%s' is not a label of the pipeline's intent stages",
                        c->path, name);
    }
    return 0;
}

/* privacy: {detect: [types], mode: pseudonymize | mask | reject} - what the
 * door does with the personal data in the caller's words (docs/PRIVACY.md).
 * The detector is built here, once a config generation, and shared by its calls. */
static const char *const privacy_modes[] = { "off", "pseudonymize", "mask", "reject", NULL };
typedef struct { int mode; } privacy_block;
static const sb_cfg_key privacy_keys[] = {
    { "mode", SB_KEY_ENUM, 0, 0, offsetof(privacy_block, mode), privacy_modes },
    { "detect", SB_KEY_OTHER, 0, 0, 0, NULL },
    { "patterns", SB_KEY_OTHER, 0, 0, 0, NULL },
    { NULL, SB_KEY_OTHER, 0, 0, 0, NULL }
};

/* privacy.patterns: [{name, regex, on: text | digits, checksum: none |
 * luhn | mod11-2}] - the operator's own identifiers, added to the
 * detector (docs/PRIVACY.md, "Operator patterns"). */
#define PRIVACY_MAX_PATTERNS 32
typedef struct { char *name, *regex; int on, checksum; } pattern_conf;
static const char *const pattern_ons[] = { "text", "digits", NULL };    /* by SB_PII_ON_* */
static const sb_cfg_key pattern_keys[] = {
    { "name", SB_KEY_STR, 1, 0, offsetof(pattern_conf, name), NULL },
    { "regex", SB_KEY_STR, 1, 0, offsetof(pattern_conf, regex), NULL },
    { "on", SB_KEY_ENUM, 0, 0, offsetof(pattern_conf, on), pattern_ons },
    { "checksum", SB_KEY_ENUM, 0, 0, offsetof(pattern_conf, checksum), sb_pii_check_names },
    { NULL, SB_KEY_OTHER, 0, 0, 0, NULL }
};

static int load_pattern(vctx *c, const char *at, const sb_config_node *n, sb_privacy *det) {
    sb_cfg_ctx pc = { c->cfg, c->err, at, true };
    pattern_conf pt = { 0 };
    char err[SB_ERR_LEN];
    int rc = sb_cfg_read_map(&pc, n, pattern_keys, &pt);
    if (!rc && (!pt.name || !pt.regex))
        rc = FAIL(c, n, "%s: a pattern needs 'name' and 'regex' (and may say 'on' and 'checksum')", at);
    if (!rc && sb_privacy_add_pattern(det, pt.name, pt.regex, pt.on, err))
        rc = FAIL(c, sb_config_node_get(n, strstr(err, "regex '") ? "regex" : "name"), "%s: %s", at, err);
    if (!rc) rc = sb_privacy_pattern_check(det, pt.name, (sb_pii_check)pt.checksum, err) ? FAIL(c, n, "%s: %s", at, err) : 0;
    sb_free(pt.name);
    sb_free(pt.regex);
    return rc;
}

static int load_patterns(vctx *c, const char *path, const sb_config_node *n, sb_privacy *det) {
    if (n->kind != SB_CFG_SEQ || n->n_items == 0 || n->n_items > PRIVACY_MAX_PATTERNS)
        return FAIL(c, n, "%s.patterns: expected a list of 1-%d patterns ({name, regex, on, checksum}), got %s", path,
                    PRIVACY_MAX_PATTERNS, sb_cfg_what(n));
    int rc = 0;
    for (size_t i = 0; !rc && i < n->n_items; i++) {
        char at[sizeof c->path + 48];
        snprintf(at, sizeof at, "%s.patterns[%zu]", path, i);
        rc = load_pattern(c, at, n->items[i], det);
    }
    return rc;
}

static int load_privacy(vctx *c, const sb_config_node *n, sb_pipeline *p) {
    char path[sizeof c->path + 16];
    snprintf(path, sizeof path, "%s.privacy", c->path);
    sb_cfg_ctx pc = { c->cfg, c->err, path, true };
    privacy_block b = { SB_PRIVACY_PSEUDONYMIZE };
    int rc = sb_cfg_want_map(&pc, n);
    if (!rc) rc = sb_cfg_keys_check(&pc, n, privacy_keys);
    if (!rc) rc = sb_cfg_keys_read(&pc, n, privacy_keys, &b);
    if (rc) return rc;
    unsigned types = SB_PII_ALL;
    const sb_config_node *d = sb_config_node_get(n, "detect");
    if (d) {
        char **v = NULL;
        size_t k = 0;
        rc = sb_cfg_strs(&pc, d, "detect", SB_PII_N_BUILTIN, &v, &k);
        types = 0;
        for (size_t i = 0; !rc && i < k; i++) {
            int t = sb_pii_type_parse(v[i]);
            if (t < 0 || t >= SB_PII_N_BUILTIN)
                rc = FAIL(c, d, "%s.detect: '%s' is not one of ID, PHONE, TEL, CARD, EMAIL, PASSPORT, PLATE", path, v[i]);
            else types |= 1u << t;
        }
        for (size_t i = 0; i < k; i++) sb_free(v[i]);
        sb_free(v);
        if (rc) return rc;
    }
    p->privacy_mode = b.mode;
    char err[SB_ERR_LEN];
    sb_privacy *det;
    if ((rc = sb_privacy_new(types, &det, err))) return FAIL(c, n, "%s: %s", path, err);
    /* Checked even with mode off: turning the policy on must not be what
     * reveals a broken pattern. */
    const sb_config_node *pats = sb_config_node_get(n, "patterns");
    if (pats && (rc = load_patterns(c, path, pats, det))) {
        sb_privacy_free(det);
        return rc;
    }
    if (b.mode == SB_PRIVACY_OFF) sb_privacy_free(det);
    else p->privacy = det;
    return 0;
}

/* A conversation under a privacy policy: its session keeps the values
 * behind the placeholders across turns, sealed with the site's key, and
 * its hand-off package carries them to a person, so only over TLS. */
static int check_private_conversation(vctx *c, const sb_config_node *n, const sb_pipeline *p) {
    if (p->privacy_mode == SB_PRIVACY_PSEUDONYMIZE && !c->cfg->runtime.secret_key_file)
        return FAIL(c, sb_config_node_get(n, "privacy"),
                    "%s: privacy (pseudonymize) with a conversation keeps the caller's values between turns, sealed "
                    "with runtime.secret_key_file; set it (openssl rand -hex 32 > FILE; chmod 600 FILE)", c->path);
    const char *url = p->conv.handoff_url;
    if (url && strncmp(url, "https://", 8))
        return FAIL(c, sb_config_node_get(sb_config_node_get(n, "conversation"), "handoff_url"),
                    "%s.conversation.handoff_url: must be https:// when the pipeline has a privacy policy (the "
                    "hand-off package carries the caller's real values), got '%s'", c->path, url);
    return 0;
}

/* A pipeline's own keys; its stages' are their kinds' (stage_*.c). */
#define P(f) offsetof(sb_pipeline, f)
static const sb_cfg_key pipeline_keys[] = {
    { "description", SB_KEY_STR, 0, 0, P(description), NULL },
    { "stages", SB_KEY_OTHER, 0, 0, 0, NULL },
    { "output", SB_KEY_OTHER, 0, 0, 0, NULL },             /* a stage's name, once the stages are loaded */
    { "timeout_ms", SB_KEY_INT, 100, 3600000, P(timeout_ms), NULL },
    { "cache", SB_KEY_BOOL, 0, 0, P(cache), NULL },
    { "cache_fold", SB_KEY_OTHER, 0, 0, 0, NULL },
    { "conversation", SB_KEY_OTHER, 0, 0, 0, NULL },
    { "privacy", SB_KEY_OTHER, 0, 0, 0, NULL },
    RT_KEYS_END
};

static int load_pipeline(vctx *c, const sb_config_node *key, const sb_config_node *n, sb_pipeline *p) {
    p->line = key->line;
    p->col = key->col;
    p->output = -1;
    p->timeout_ms = 300000;
    p->cache = true;
    snprintf(c->path, sizeof c->path, "pipelines.%s", key->value);
    if (!(p->name = sb_strdup(key->value))) return SB_ENOMEM;
    int rc = sb_cfg_keys_check(PL(c), n, pipeline_keys);
    if (!rc) rc = sb_cfg_keys_read(PL(c), n, pipeline_keys, p);
    if (rc) return rc;
    const sb_config_node *v;
    if ((v = sb_config_node_get(n, "cache_fold")) && (rc = load_cache_fold(c, v, p))) return rc;
    if ((v = sb_config_node_get(n, "conversation")) && (rc = load_conversation(c, v, p))) return rc;
    if ((v = sb_config_node_get(n, "privacy")) && (rc = load_privacy(c, v, p))) return rc;
    if (p->conv.on && p->privacy_mode != SB_PRIVACY_OFF && (rc = check_private_conversation(c, n, p))) return rc;
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
        /* A stage with a reply answers the turns it runs in itself. */
        for (size_t i = 0; i < p->n_stages; i++)
            if ((int)i != p->output && rt_tool_replies(&p->stages[i]))
                return FAIL(c, v, "%s.output: stage '%s' answers with its reply where it runs; leave output out",
                            c->path, p->stages[i].name);
    }
    if ((rc = check_handoff_intents(c, n, p))) return rc;
    sb_sha256_ctx h;
    sb_sha256_init(&h);
    digest_node(&h, n);
    /* An examples_file changes the routes without changing the YAML. */
    for (size_t i = 0; i < p->n_stages; i++)
        for (size_t k = 0; k < p->stages[i].n_extra; k++) {
            sb_sha256_update(&h, &p->stages[i].extra_label[k], sizeof(int));
            sb_sha256_update(&h, p->stages[i].extra_text[k], strlen(p->stages[i].extra_text[k]) + 1);
        }
    /* ... and so does the adapter a searched base's questions go through
     * (knowledge.NAME.adapter, outside the pipeline's YAML). */
    for (size_t i = 0; i < p->n_stages; i++)
        if (p->stages[i].kb_adapter) sb_sha256_update(&h, p->stages[i].kb_adapter, strlen(p->stages[i].kb_adapter) + 1);
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
        rt_text_free(&s->labels[i].display);
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
    sb_free(s->kb_adapter);
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
        for (size_t k = 0; p->conv.handoff_intents && k < p->conv.n_handoff_intents; k++)
            sb_free(p->conv.handoff_intents[k]);
        sb_free(p->conv.handoff_intents);
        sb_free(p->conv.handoff_url);
        sb_free(p->conv.handoff_ca_file);
        sb_free(p->name);
        sb_free(p->description);
        sb_privacy_free(p->privacy);
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
