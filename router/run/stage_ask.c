/* stage_ask.c - a generate stage's slots, asked for (its `ask:` block).
 *
 *   - name: extract
 *     kind: generate
 *     json: true                      # or a json_schema whose `required` lists the slots
 *     ask:
 *       name: { zh: "请问您怎么称呼？", en: "What is your name?" }
 *       account:                      # the full form: a question and how to check the answer
 *         question: { zh: "请问您的账号是多少？", en: "What is your account number?" }
 *         reask: { zh: "账号是七位数字，请再说一遍。", en: "The account has seven digits. Again, please?" }
 *         pattern: "^[0-9]{7}$"       # POSIX extended, on the whole normalised value
 *         checksum: luhn              # or resident_id (ISO 7064 MOD 11-2, 18 characters)
 *         retries: 2                  # re-asked this many times, then the call is handed off
 *         optional: true              # a caller who declines goes on without it
 *     handoff: { zh: "正在为您转接人工服务，请稍候。", en: "..." }
 *
 * The stage's JSON object holds the call's slots. After the extraction, the
 * first required slot left empty (absent, null, or blank text) is asked
 * for: the stage's output becomes the question in the caller's language
 * and the run waits on the caller. Which slots are required: the
 * json_schema's `required` list when the stage has a schema (each needs a
 * question here), else every slot named here.
 *
 * The caller's next turn is the answer. Numbers in it are read as the
 * privacy detector reads them - spoken Chinese numerals, English digit
 * words, spaced groups ("幺三八 零零 一三" is 1380013) - and each number
 * is a value: the asked slot takes the first that passes its checks, and
 * any other empty slot with a pattern or checksum takes one that passes
 * its own, so "账号 4410032，身份证 110105...X" fills both. A slot without
 * checks takes the whole answer, unless a number of it went to another
 * slot ("my ID is ..." asked for a name is an ID). An answer that leads with a no ("不对，是
 * 4410032", "no, it's ...") corrects: its value replaces a filled slot whose
 * checks it passes. An answer that gives nothing valid is a refusal when it
 * declines ("不方便说", "I'd rather not", "skip"): an optional slot is then
 * left out, any other is handed to a person (reason `refused`); otherwise
 * the slot is asked again (its `reask`, else its question) up to `retries`
 * times, then handed off (reason `retries_exhausted`). A hand-off ends the
 * run with the stage's `handoff` text as the reply.
 *
 * The caller's language is read from the call's first input: Chinese
 * characters ask in `zh`, else `en`; a slot without that language asks in
 * the first one it lists. The count of re-asks lives in the run: after a
 * restart of the router the slot's count starts again.
 */
#include <regex.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_checksum.h"
#include "privacy/sb_privacy.h"
#include "router/run/stage_internal.h"

#define ASK_MAX_SLOTS 16
typedef sb_lang_text ask_text;

enum { CHECK_NONE, CHECK_RESIDENT_ID, CHECK_LUHN };

typedef struct {
    char *slot;
    ask_text question, reask;
    char *pattern;
    regex_t re;
    bool has_re;
    int checksum;               /* CHECK_* */
    int retries;
    bool optional;
    bool required;
} ask_slot;

typedef struct {
    ask_slot slots[ASK_MAX_SLOTS];
    size_t n;
    ask_text handoff;
    sb_privacy *numbers;        /* finds the numbers of an answer, however they were said */
} ask_conf;

void rt_ask_free(sb_stage *s) {
    ask_conf *a = s->own;
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) {
        ask_slot *as = &a->slots[i];
        sb_free(as->slot);
        rt_text_free(&as->question);
        rt_text_free(&as->reask);
        sb_free(as->pattern);
        if (as->has_re) regfree(&as->re);
    }
    rt_text_free(&a->handoff);
    sb_privacy_free(a->numbers);
    sb_free(a);
    s->own = NULL;
}

bool rt_ask_gathers(const sb_stage *s, const char *slot) {
    const ask_conf *a = s->own;
    for (size_t i = 0; a && slot && i < a->n; i++)
        if (!strcmp(a->slots[i].slot, slot)) return true;
    return a && !slot;
}

/* ------------------------------------------------------------ loading */

static const char *const CHECKSUMS[] = {"none", "resident_id", "luhn", NULL};
#define AS(f) offsetof(ask_slot, f)
/* A slot's full form (its mapping has `question`). */
static const sb_cfg_key slot_keys[] = {
    RT_KEY("question"),             /* {language: text} */
    RT_KEY("reask"),                /* {language: text}: after an answer that fails the checks */
    { "pattern", SB_KEY_STR, 1, 0, AS(pattern), NULL },
    { "checksum", SB_KEY_ENUM, 0, 0, AS(checksum), CHECKSUMS },
    { "retries", SB_KEY_INT, 0, 10, AS(retries), NULL },
    { "optional", SB_KEY_BOOL, 0, 0, AS(optional), NULL },
    RT_KEYS_END
};

static int load_checks(vctx *c, const sb_config_node *v, ask_slot *as, const char *path) {
    sb_cfg_ctx k = { c->cfg, c->err, path, true };
    int rc = sb_cfg_read_map(&k, v, slot_keys, as);
    const sb_config_node *n;
    char what[96];
    snprintf(what, sizeof what, "ask.%s.reask", as->slot);
    if (!rc && (n = sb_config_node_get(v, "reask"))) rc = rt_text_load(c, n, what, &as->reask);
    if (!rc && as->pattern) {
        int e = regcomp(&as->re, as->pattern, REG_EXTENDED | REG_NOSUB);
        if (e) {
            char why[128];
            regerror(e, &as->re, why, sizeof why);
            return FAIL(c, sb_config_node_get(v, "pattern"), "%s.pattern: not a POSIX extended regex: %s", path, why);
        }
        as->has_re = true;
    }
    return rc;
}

static int load_slot(vctx *c, const sb_config_pair *pr, ask_slot *as) {
    const sb_config_node *v = pr->value, *q;
    char what[96], path[sizeof c->path + 96];
    snprintf(what, sizeof what, "ask.%s", pr->key->value);
    snprintf(path, sizeof path, "%s.%s", c->path, what);
    if (!(as->slot = sb_strdup(pr->key->value))) return SB_ENOMEM;
    as->retries = 2;
    if (v->kind != SB_CFG_MAP || !(q = sb_config_node_get(v, "question"))) return rt_text_load(c, v, what, &as->question);
    snprintf(what, sizeof what, "ask.%s.question", pr->key->value);
    int rc = rt_text_load(c, q, what, &as->question);
    return rc ? rc : load_checks(c, v, as, path);
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

/* The numbers of an answer: every digit string of 5 or more digits the
 * privacy detector's number reader finds (an ID's closing X kept). */
static int numbers_detector(vctx *c, const sb_config_node *n, ask_conf *a) {
    char err[SB_ERR_LEN];
    if (sb_privacy_new(0, &a->numbers, err) ||
        sb_privacy_add_pattern(a->numbers, "NUMBER", "^[0-9]+X?$", SB_PII_ON_DIGITS, err))
        return FAIL(c, n, "%s.ask: %s", c->path, err);
    return 0;
}

int rt_ask_load(vctx *c, const sb_config_node *n, sb_stage *s, const sb_config_node *handoff) {
    if (!s->json) return FAIL(c, n, "%s.ask: needs json: true or a json_schema (the slots are its JSON's keys)", c->path);
    if (n->kind != SB_CFG_MAP || !n->n_pairs || n->n_pairs > ASK_MAX_SLOTS)
        return FAIL(c, n, "%s.ask: expected a mapping of 1-%d slots to their questions", c->path, ASK_MAX_SLOTS);
    ask_conf *a = sb_calloc(1, sizeof *a);
    if (!(s->own = a)) return SB_ENOMEM;
    for (size_t i = 0; i < n->n_pairs; i++) {
        int rc = load_slot(c, &n->pairs[i], &a->slots[a->n++]);
        if (rc) return rc;
    }
    int rc = handoff ? rt_text_load(c, handoff, "handoff", &a->handoff) : 0;
    if (!rc) rc = numbers_detector(c, n, a);
    return rc ? rc : mark_required(c, n, s, a);
}

/* ------------------------------------------------------------ running */

static bool empty(const sb_json *v) {
    if (!v || sb_json_type_of(v) == SB_JSON_NULL) return true;
    if (sb_json_type_of(v) != SB_JSON_STRING) return false;
    const char *t = sb_json_str(v);
    return t[strspn(t, " \t\r\n")] == '\0';
}

static bool checked(const ask_slot *as) { return as->has_re || as->checksum != CHECK_NONE; }

/* Whether value passes the slot's pattern and checksum. Under a privacy
 * policy the call's words hold placeholders (⟨ID_1⟩): one of the call's
 * table is checked as the value it stands for, and the slot keeps the
 * placeholder, so the session stores no value (privacy_door.c). */
static bool valid(const sb_pii_table *pii, const ask_slot *as, const char *value) {
    for (size_t i = 0; pii && i < pii->n; i++)
        if (!strcmp(pii->v[i].placeholder, value)) { value = pii->v[i].value; break; }
    size_t n = strlen(value);
    if (!n) return false;
    if (as->has_re && regexec(&as->re, value, 0, NULL, 0)) return false;
    if (as->checksum == CHECK_RESIDENT_ID) return n == 18 && sb_mod11_2_valid(value, n);
    if (as->checksum == CHECK_LUHN) return n >= 2 && sb_luhn_valid(value, n);
    return true;
}

/* The first required slot the stage's JSON leaves empty, or fills with a
 * string its checks refuse, and the caller did not decline; or NULL. A
 * small model writes what it half heard ("九百度" read as an account
 * "9aidu"): what the caller would be refused, the model is too. */
static const ask_slot *missing(const sb_pii_table *pii, const ask_conf *a, const sb_json *obj, unsigned declined) {
    for (size_t i = 0; i < a->n; i++) {
        const ask_slot *as = &a->slots[i];
        if (!as->required || (declined & 1u << i)) continue;
        const sb_json *v = sb_json_get(obj, as->slot);
        if (empty(v) || (checked(as) && sb_json_type_of(v) == SB_JSON_STRING && !valid(pii, as, sb_json_str(v))))
            return as;
    }
    return NULL;
}

static rt_stage_outcome hand_off(rt_run *run, const sb_stage *s, const char *reason) {
    const ask_conf *a = s->own;
    const char *reply = a->handoff.n ? rt_text_for(&a->handoff, run->input) : rt_handoff_default(run->input);
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = sb_strdup(reply);
    return rt_stage_hand_off(run, reason);
}

static rt_stage_outcome ask(rt_run *run, const sb_stage *s, const ask_slot *as, bool again) {
    sb_jw aw;
    sb_jw_init(&aw);
    sb_jw_obj(&aw);
    sb_jw_key(&aw, "kind"); sb_jw_str(&aw, "slot");
    sb_jw_key(&aw, "slot"); sb_jw_str(&aw, as->slot);
    sb_jw_obj_end(&aw);
    rt_run_set_awaiting(run, aw.oom ? NULL : aw.p);
    sb_jw_free(&aw);
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = sb_strdup(rt_text_for(again && as->reask.n ? &as->reask : &as->question, run->input));
    return RT_STAGE_WAIT_CALLER;
}

static rt_stage_outcome oom(rt_run *run) { return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", ""); }

static int rewrite(stage_res *sr, const ask_conf *a, const char *const *set);

/* The slots the call carried in (an earlier question's, a topic it left)
 * fill those the extraction left empty or wrote as a value their checks
 * refuse: a caller is not asked twice for what he said. 0 or SB_ENOMEM. */
static int take_kept(rt_run *run, const ask_conf *a, stage_res *sr) {
    const sb_json *kept = rt_run_kept_slots(run);
    const char *set[ASK_MAX_SLOTS] = {0};
    bool any = false;
    for (size_t i = 0; kept && i < a->n; i++) {
        const ask_slot *as = &a->slots[i];
        const sb_json *have = sb_json_get(sr->json, as->slot), *v = sb_json_get(kept, as->slot);
        bool have_ok = !empty(have) && !(checked(as) && sb_json_type_of(have) == SB_JSON_STRING &&
                                         !valid(run->pii, as, sb_json_str(have)));
        if (have_ok || empty(v) || sb_json_type_of(v) != SB_JSON_STRING || !valid(run->pii, as, sb_json_str(v))) continue;
        set[i] = sb_json_str(v);
        any = true;
    }
    return any ? rewrite(sr, a, set) : 0;
}

rt_stage_outcome rt_ask_next(rt_run *run, const sb_stage *s) {
    const ask_conf *a = s->own;
    stage_res *sr = &run->res[run->cur];
    bool first = run->slots_stage != (int)run->cur;
    run->slots_stage = (int)run->cur;
    if (!sr->json) {                /* nothing extracted: every slot is empty */
        if (sb_json_parse("{}", 2, &sr->doc, NULL)) return oom(run);
        sr->json = sb_json_root(sr->doc);
    }
    if (first && take_kept(run, a, sr)) return oom(run);
    const ask_slot *as = missing(run->pii, a, sr->json, sr->declined);
    if (!as) {
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_value(&w, sr->json);
        sb_free(sr->output);
        sr->output = w.oom ? NULL : sb_strdup(w.p);
        sb_jw_free(&w);
        return rt_stage_end(run, ST_OK, NULL);
    }
    return ask(run, s, as, false);
}

/* ------------------------------------------------------- the answer */

typedef struct {
    char values[8][SB_PII_VALUE_MAX];   /* the answer's numbers, as digits (more are not read), and placeholders */
    size_t at[8];                       /* where each is in the answer: they are kept in that order */
    size_t n;
    char *whole;                    /* the answer after a correction's lead, numbers as digits, trimmed */
    bool correction;
} answer;

/* What the caller said, read: its lead (a no makes it a correction), its
 * numbers, and the rest with each number written as its digits (never
 * longer than as said: a number's digits take at most its bytes). */
static void add_value(answer *an, const char *v, size_t at) {
    if (an->n == SB_ARRAY_LEN(an->values)) return;
    size_t k = an->n++;
    for (; k && an->at[k - 1] > at; k--) {
        memcpy(an->values[k], an->values[k - 1], sizeof an->values[k]);
        an->at[k] = an->at[k - 1];
    }
    snprintf(an->values[k], SB_PII_VALUE_MAX, "%s", v);
    an->at[k] = at;
}

/* The call's placeholders in t, as values (privacy: the numbers the
 * caller said are placeholders by now). */
static void add_placeholders(const sb_pii_table *pii, const char *t, answer *an) {
    for (size_t i = 0; pii && i < pii->n; i++)
        for (const char *p = t; (p = strstr(p, pii->v[i].placeholder)); p += strlen(pii->v[i].placeholder))
            add_value(an, pii->v[i].placeholder, (size_t)(p - t));
}

static int read_answer(const ask_conf *a, const sb_pii_table *pii, const char *turn, answer *an) {
    size_t rest = 0;
    an->correction = rt_caller_lead(turn, &rest) == RT_NO && turn[rest];
    if (!an->correction) rest = 0;
    const char *t = turn + rest;
    if (an->correction) {       /* "不对，是 ...", "no, it's ...": the 是 introduces the value */
        if (!strncmp(t, "是", 3)) t += 3;
        t += strspn(t, " ");
    }
    sb_pii_spans sp = {0};
    size_t len = strlen(t), w = 0, at = 0;
    char *whole = sb_malloc(len + 1);
    if (!whole || sb_privacy_detect(a->numbers, t, len, &sp)) {
        sb_free(whole);
        sb_pii_spans_free(&sp);
        return SB_ENOMEM;
    }
    for (size_t k = 0; k <= sp.n; k++) {
        size_t end = k < sp.n ? sp.v[k].start : len;
        memcpy(whole + w, t + at, end - at);
        w += end - at;
        if (k == sp.n) break;
        size_t vl = strlen(sp.v[k].value);
        memcpy(whole + w, sp.v[k].value, vl);
        w += vl;
        at = sp.v[k].end;
        add_value(an, sp.v[k].value, sp.v[k].start);
    }
    sb_pii_spans_free(&sp);
    add_placeholders(pii, t, an);
    an->whole = rt_trimmed(whole, w);
    sb_free(whole);
    return an->whole ? 0 : SB_ENOMEM;
}

/* Which slot value v (a number of the answer) goes to: the asked one if
 * it has checks v passes, else (for a correction) a filled slot with checks
 * it passes, else an empty one with checks; -1: none. A slot without checks
 * takes the whole answer instead (rt_ask_answered). */
static int slot_for(const sb_pii_table *pii, const ask_conf *a, const ask_slot *asked, const sb_json *obj, const char *v,
                    bool correction, const int *taken) {
    int asked_i = (int)(asked - a->slots);
    if (!taken[asked_i] && checked(asked) && valid(pii, asked, v)) return asked_i;
    for (int pass = correction ? 0 : 1; pass < 2; pass++)
        for (size_t i = 0; i < a->n; i++) {
            const ask_slot *o = &a->slots[i];
            bool is_empty = empty(sb_json_get(obj, o->slot));
            if (taken[i] || !checked(o) || is_empty != (pass == 1) || !valid(pii, o, v)) continue;
            return (int)i;
        }
    return -1;
}

/* The slots' JSON with the values set (NULL: unchanged). */
static int rewrite(stage_res *sr, const ask_conf *a, const char *const *set) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    for (size_t i = 0; i < sb_json_len(sr->json); i++) {
        const char *k = sb_json_key_at(sr->json, i);
        size_t j = 0;
        while (j < a->n && strcmp(a->slots[j].slot, k)) j++;
        if (j < a->n && set[j]) continue;
        sb_jw_key(&w, k);
        sb_jw_value(&w, sb_json_val_at(sr->json, i));
    }
    for (size_t j = 0; j < a->n; j++)
        if (set[j]) { sb_jw_key(&w, a->slots[j].slot); sb_jw_str(&w, set[j]); }
    sb_jw_obj_end(&w);
    sb_json_doc *d = NULL;
    int rc = w.oom || sb_json_parse(w.p, w.len, &d, NULL) ? SB_ENOMEM : 0;
    sb_jw_free(&w);
    if (rc) return rc;
    sb_json_doc_free(sr->doc);
    sr->doc = d;
    sr->json = sb_json_root(d);
    return 0;
}

/* The answer an to slot as: take its values, then go on. */
static rt_stage_outcome take(rt_run *run, const sb_stage *s, const ask_slot *as, const answer *an) {
    const ask_conf *a = s->own;
    stage_res *sr = &run->res[run->cur];
    const char *set[ASK_MAX_SLOTS] = {0};
    int taken[ASK_MAX_SLOTS] = {0};
    for (size_t k = 0; k < an->n; k++) {
        int i = slot_for(run->pii, a, as, sr->json, an->values[k], an->correction, taken);
        if (i >= 0) { set[i] = an->values[k]; taken[i] = 1; }
    }
    int asked_i = (int)(as - a->slots);
    bool any = false;
    for (size_t i = 0; i < a->n; i++) any |= taken[i];
    /* Nothing that fits a slot's checks (a slot without checks has none
     * to pass), no refusal and no plain yes or no: the answer may be a new
     * request (another topic, "转人工"); routed first, it comes back here
     * if it is not. */
    if (!any && !(checked(as) && valid(run->pii, as, an->whole)) && rt_caller_may_ask(rt_run_turn(run)) && rt_run_reroute(run))
        return RT_STAGE_REROUTE;
    /* The answer as said, when it gave no value to another slot: "my
     * account is 4410032", asked for a name, is not a name. */
    if (!any && an->whole[0] && !rt_caller_refuses(an->whole) && valid(run->pii, as, an->whole)) {
        set[asked_i] = an->whole;
        taken[asked_i] = 1;
        any = true;
    }
    if (any) {
        if (rewrite(sr, a, set)) return oom(run);
        if (taken[asked_i]) sr->retries_used = 0;
        return rt_ask_next(run, s);
    }
    if (rt_caller_refuses(rt_run_turn(run))) {
        if (!as->optional) return hand_off(run, s, "refused");
        sr->declined |= 1u << asked_i;
        sr->retries_used = 0;
        return rt_ask_next(run, s);
    }
    if (++sr->retries_used > as->retries) return hand_off(run, s, "retries_exhausted");
    return ask(run, s, as, true);
}

/* The caller answered the slot asked (the first empty one, as when it was
 * asked): take what the answer gives, then ask for what is still missing,
 * ask again, go on without a declined optional slot, or hand off. */
rt_stage_outcome rt_ask_answered(rt_run *run, const sb_stage *s) {
    const ask_conf *a = s->own;
    stage_res *sr = &run->res[run->cur];
    if (!sr->json) return rt_ask_next(run, s);
    const ask_slot *as = missing(run->pii, a, sr->json, sr->declined);
    if (!as) return rt_ask_next(run, s);
    answer an = {0};
    if (read_answer(a, run->pii, rt_run_turn(run), &an)) return oom(run);
    rt_stage_outcome o = take(run, s, as, &an);
    sb_free(an.whole);
    return o;
}

/* ------------------------------------------------- a later correction */

int rt_ask_correct(rt_run *run, const char *words) {
    if (run->slots_stage < 0) return 0;
    const sb_stage *s = &run->p->stages[run->slots_stage];
    const ask_conf *a = rt_stage_kind_of(s)->gathers ? s->own : NULL;
    stage_res *sr = &run->res[run->slots_stage];
    if (!a || !sr->json) return 0;
    answer an = {0};
    if (read_answer(a, run->pii, words, &an)) return -1;
    const char *set[ASK_MAX_SLOTS] = {0};
    int n = 0;
    for (size_t k = 0; k < an.n; k++)
        for (size_t i = 0; i < a->n; i++) {
            const ask_slot *as = &a->slots[i];
            const char *now = sb_json_str(sb_json_get(sr->json, as->slot));
            if (set[i] || !checked(as) || !valid(run->pii, as, an.values[k])) continue;
            if (!now || strcmp(now, an.values[k])) { set[i] = an.values[k]; n++; }
            break;
        }
    int rc = n && rewrite(sr, a, set) ? -1 : n;
    sb_free(an.whole);
    return rc;
}
