/* stage_ask.c - a generate stage's slots, asked for (its `ask:` block).
 *
 *   - name: extract
 *     kind: generate
 *     json: true                      # or a json_schema whose `required` lists the slots
 *     ask:
 *       account: { zh: "请问您的账号是多少？", en: "What is your account number?" }
 *
 * The stage's JSON object holds the call's slots. After the extraction, the
 * first required slot left empty (absent, null, or blank text) is asked
 * for: the stage's output becomes the question in the caller's language
 * and the run waits on the caller. The caller's next turn is the answer:
 * it fills that slot (trimmed) and the next empty one is asked, or the
 * stage ends with its JSON complete. Which slots are required: the
 * json_schema's `required` list when the stage has a schema (each needs a
 * question here), else every slot named here.
 *
 * The caller's language is read from the call's first input: Chinese
 * characters ask in `zh`, else `en`; a slot without that language asks in
 * the first one it lists.
 */
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

#define ASK_MAX_SLOTS 16
#define ASK_MAX_LANGS 8

typedef struct {
    char *slot;
    char *lang[ASK_MAX_LANGS], *text[ASK_MAX_LANGS];
    size_t n_lang;
    bool required;
} ask_slot;

typedef struct {
    ask_slot slots[ASK_MAX_SLOTS];
    size_t n;
} ask_conf;

void rt_ask_free(sb_stage *s) {
    ask_conf *a = s->own;
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) {
        sb_free(a->slots[i].slot);
        for (size_t k = 0; k < a->slots[i].n_lang; k++) {
            sb_free(a->slots[i].lang[k]);
            sb_free(a->slots[i].text[k]);
        }
    }
    sb_free(a);
    s->own = NULL;
}

/* ------------------------------------------------------------ loading */

static bool valid_lang(const char *l) {
    size_t n = strlen(l);
    if (n < 2 || n > 8) return false;
    for (; *l; l++)
        if (!((*l >= 'a' && *l <= 'z') || (*l >= 'A' && *l <= 'Z') || *l == '-')) return false;
    return true;
}

static int load_slot(vctx *c, const sb_config_pair *pr, ask_slot *as) {
    const sb_config_node *v = pr->value;
    if (v->kind != SB_CFG_MAP || !v->n_pairs || v->n_pairs > ASK_MAX_LANGS)
        return FAIL(c, v, "%s.ask.%s: expected a mapping of 1-%d languages to questions, e.g. {zh: \"...\", en: \"...\"}",
                    c->path, pr->key->value, ASK_MAX_LANGS);
    if (!(as->slot = sb_strdup(pr->key->value))) return SB_ENOMEM;
    for (size_t k = 0; k < v->n_pairs; k++) {
        const sb_config_node *lk = v->pairs[k].key, *q = v->pairs[k].value;
        if (!valid_lang(lk->value))
            return FAIL(c, lk, "%s.ask.%s: '%s' is not a language tag (zh, en, zh-HK...)", c->path, as->slot,
                        lk->value);
        if (q->kind != SB_CFG_SCALAR || !q->len)
            return FAIL(c, q, "%s.ask.%s.%s: expected the question as text", c->path, as->slot, lk->value);
        if (!(as->lang[k] = sb_strdup(lk->value)) || !(as->text[k] = sb_strdup(q->value))) return SB_ENOMEM;
        as->n_lang++;
    }
    return 0;
}

/* Which slots must be filled: the schema's `required`, else all asked. */
static int mark_required(vctx *c, const sb_config_node *n, sb_stage *s, ask_conf *a) {
    if (!s->json_schema) {
        for (size_t i = 0; i < a->n; i++) a->slots[i].required = true;
        return 0;
    }
    sb_json_doc *d;
    if (sb_json_parse(s->json_schema, strlen(s->json_schema), &d, NULL)) return 0;     /* checked at load */
    const sb_json *req = sb_json_get(sb_json_root(d), "required");
    int rc = 0;
    for (size_t k = 0; !rc && k < sb_json_len(req); k++) {
        const char *name = sb_json_str(sb_json_at(req, k));
        size_t i = 0;
        while (i < a->n && strcmp(a->slots[i].slot, name)) i++;
        if (i == a->n)
            rc = FAIL(c, n, "%s.ask: the json_schema requires '%s', which has no question here", c->path, name);
        else
            a->slots[i].required = true;
    }
    sb_json_doc_free(d);
    return rc;
}

int rt_ask_load(vctx *c, const sb_config_node *n, sb_stage *s) {
    if (!s->json) return FAIL(c, n, "%s.ask: needs json: true or a json_schema (the slots are its JSON's keys)", c->path);
    if (n->kind != SB_CFG_MAP || !n->n_pairs || n->n_pairs > ASK_MAX_SLOTS)
        return FAIL(c, n, "%s.ask: expected a mapping of 1-%d slots to their questions", c->path, ASK_MAX_SLOTS);
    ask_conf *a = sb_calloc(1, sizeof *a);
    if (!(s->own = a)) return SB_ENOMEM;
    for (size_t i = 0; i < n->n_pairs; i++) {
        int rc = load_slot(c, &n->pairs[i], &a->slots[a->n++]);
        if (rc) return rc;
    }
    return mark_required(c, n, s, a);
}

/* ------------------------------------------------------------ running */

/* Chinese characters (the CJK block, three UTF-8 bytes from E4 to E9)
 * anywhere in the call's first words. */
static bool looks_chinese(const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++)
        if (*p >= 0xE4 && *p <= 0xE9) return true;
    return false;
}

static const char *question_for(const ask_slot *as, const char *input) {
    const char *want = looks_chinese(input) ? "zh" : "en";
    for (size_t k = 0; k < as->n_lang; k++)
        if (!strncmp(as->lang[k], want, 2)) return as->text[k];
    return as->text[0];
}

static bool empty(const sb_json *v) {
    if (!v || sb_json_type_of(v) == SB_JSON_NULL) return true;
    if (sb_json_type_of(v) != SB_JSON_STRING) return false;
    const char *t = sb_json_str(v);
    return t[strspn(t, " \t\r\n")] == '\0';
}

/* The first required slot the stage's JSON leaves empty, or NULL. */
static const ask_slot *missing(const ask_conf *a, const sb_json *obj) {
    for (size_t i = 0; i < a->n; i++)
        if (a->slots[i].required && empty(sb_json_get(obj, a->slots[i].slot))) return &a->slots[i];
    return NULL;
}

rt_stage_outcome rt_ask_next(rt_run *run, const sb_stage *s) {
    const ask_conf *a = s->own;
    stage_res *sr = &run->res[run->cur];
    run->slots_stage = (int)run->cur;
    if (!sr->json) {                /* nothing extracted: every slot is empty */
        if (sb_json_parse("{}", 2, &sr->doc, NULL)) return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", "");
        sr->json = sb_json_root(sr->doc);
    }
    const ask_slot *as = missing(a, sr->json);
    if (!as) {
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_value(&w, sr->json);
        sb_free(sr->output);
        sr->output = w.oom ? NULL : sb_strdup(w.p);
        sb_jw_free(&w);
        return rt_stage_end(run, ST_OK, NULL);
    }
    sb_jw aw;
    sb_jw_init(&aw);
    sb_jw_obj(&aw);
    sb_jw_key(&aw, "kind"); sb_jw_str(&aw, "slot");
    sb_jw_key(&aw, "slot"); sb_jw_str(&aw, as->slot);
    sb_jw_obj_end(&aw);
    rt_run_set_awaiting(run, aw.oom ? NULL : aw.p);
    sb_jw_free(&aw);
    sb_free(sr->output);
    sr->output = sb_strdup(question_for(as, run->input));
    return RT_STAGE_WAIT_CALLER;
}

/* The slot asked (the first empty one, as when it was asked) takes the
 * caller's words; a blank answer leaves it empty, so it is asked again. */
rt_stage_outcome rt_ask_answered(rt_run *run, const sb_stage *s) {
    const ask_conf *a = s->own;
    stage_res *sr = &run->res[run->cur];
    const ask_slot *as = sr->json ? missing(a, sr->json) : &a->slots[0];
    if (!as) return rt_ask_next(run, s);
    char *answer = rt_trimmed(rt_run_turn(run), strlen(rt_run_turn(run)));
    if (!answer) return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", "");
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    for (size_t i = 0; sr->json && i < sb_json_len(sr->json); i++) {
        const char *k = sb_json_key_at(sr->json, i);
        if (!strcmp(k, as->slot)) continue;
        sb_jw_key(&w, k);
        sb_jw_value(&w, sb_json_val_at(sr->json, i));
    }
    sb_jw_key(&w, as->slot);
    if (*answer) sb_jw_str(&w, answer); else sb_jw_null(&w);
    sb_jw_obj_end(&w);
    sb_free(answer);
    sb_json_doc *d = NULL;
    int rc = w.oom || sb_json_parse(w.p, w.len, &d, NULL);
    sb_jw_free(&w);
    if (rc) return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", "");
    sb_json_doc_free(sr->doc);
    sr->doc = d;
    sr->json = sb_json_root(d);
    return rt_ask_next(run, s);
}
