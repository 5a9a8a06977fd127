/* stage_confirm.c - what a tool stage says to the caller: before it acts
 * (`confirm: true`: what it will do, and a yes), and after (`reply:`:
 * what it did, from its result).
 *
 *   - name: open_case
 *     kind: tool
 *     command: [...]
 *     args_from: extract
 *     confirm: true
 *     readback: { zh: "我将为户号 {{stages.extract.json.account}} 登记问题，可以吗？",
 *                 en: "I'll open a case for account {{stages.extract.json.account}}. Shall I go ahead?" }
 *     change: { zh: "请问哪里需要修改？", en: "What should I change?" }      # optional
 *     handoff: { zh: "正在为您转接人工服务。", en: "Putting you through." }   # optional
 *     reply: { zh: "已登记，案件号 {{stages.open_case.json.case}}。",        # optional
 *              en: "Your case number is {{stages.open_case.json.case}}." }
 *
 * The readback is a template per language, filled with the slots the
 * call has gathered (no model: the caller hears exactly what will be
 * done). The answer is read by caller_words.c: a yes runs the tool; a no
 * asks what to change; an answer that carries a number that passes a
 * slot's checks corrects that slot ("不对，户号是 5520982") and the
 * stage reads back again. A second no - or an answer to "what should I
 * change?" that changes nothing - hands the call off (reason
 * `not_confirmed`): a tool the caller did not agree to never runs.
 *
 * An answer that is neither a plain yes or no nor a correction may be a
 * new request: with the conversation's `topic_switch` the run routes it
 * first (rt_run_reroute), and comes back here only when it stays on topic.
 * The count of noes lives in the run, as a slot's re-asks do.
 *
 * Once the tool has acted, what the caller hears must be what it did: a
 * composer stage after it would write an answer to the call's first
 * words, not to the action (a small model invents a case, an amount).
 * So `reply` - a template per language over the tool's own result, named
 * by the stage's name - is the turn's answer, and the stages after it do
 * not run. A tool that fails - or answers without what the reply names
 * (a case number) - leaves nothing true to say: the call goes to a
 * person (reason `tool_failed`, the stage's `handoff` line).
 */
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

/* A template per language ({zh: "...", en: "..."}). */
typedef struct {
    sb_lang_text src;               /* the sources, per language */
    sb_tmpl *tmpl[SB_MAX_LANGS];    /* compiled, in src's order */
} lang_tmpl;

typedef struct {
    bool confirm;
    lang_tmpl readback;             /* with confirm */
    sb_lang_text change, handoff;   /* n 0: the built-in lines */
    lang_tmpl reply;                /* n 0: none - the stages after it answer */
} confirm_conf;

static void lang_tmpl_free(lang_tmpl *t) {
    for (size_t i = 0; i < t->src.n; i++) rt_tmpl_free(t->tmpl[i]);
    rt_text_free(&t->src);
}

void rt_confirm_free(sb_stage *s) {
    confirm_conf *k = s->own;
    if (!k) return;
    lang_tmpl_free(&k->readback);
    lang_tmpl_free(&k->reply);
    rt_text_free(&k->change);
    rt_text_free(&k->handoff);
    sb_free(k);
    s->own = NULL;
}

bool rt_tool_replies(const sb_stage *s) {
    const confirm_conf *k = s->kind == SB_STAGE_TOOL ? s->own : NULL;
    return k && k->reply.src.n;
}

/* ------------------------------------------------------------ loading */

static int lang_tmpl_load(vctx *c, const sb_config_node *v, const char *what, const rt_tmpl_scope *scope,
                          lang_tmpl *t) {
    int rc = rt_text_load(c, v, what, &t->src);
    for (size_t i = 0; !rc && i < t->src.n; i++) {
        char why[256];
        rc = rt_tmpl_compile(t->src.text[i], scope, &t->tmpl[i], why, sizeof why);
        if (rc == SB_EINVAL) rc = FAIL(c, v, "%s.%s.%s: %s", c->path, what, t->src.lang[i], why);
    }
    return rc;
}

/* The reply's templates name the stage's own result besides the stages
 * before it ({{stages.open_case.json.case}}). */
static int load_reply(vctx *c, const sb_config_node *v, const sb_stage *s, const rt_tmpl_scope *scope,
                      lang_tmpl *t) {
    const char *names[SB_PIPE_MAX_STAGES + 1];
    for (size_t i = 0; i < scope->n_before; i++) names[i] = scope->names[i];
    names[scope->n_before] = s->name;
    rt_tmpl_scope own = { names, scope->n_before + 1, scope->has_intent };
    return lang_tmpl_load(c, v, "reply", &own, t);
}

int rt_confirm_load(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *on = sb_config_node_get(n, "confirm"), *reply = sb_config_node_get(n, "reply"), *v;
    bool yes = false;
    if (on && (on->kind != SB_CFG_SCALAR || (strcmp(on->value, "true") && strcmp(on->value, "false"))))
        return FAIL(c, on, "%s.confirm: expected true or false", c->path);
    yes = on && !strcmp(on->value, "true");
    static const char *const needs[] = { "readback", "change" };
    for (size_t i = 0; !yes && i < SB_ARRAY_LEN(needs); i++)
        if ((v = sb_config_node_get(n, needs[i])))
            return FAIL(c, v, "%s.%s: only with confirm: true", c->path, needs[i]);
    if (!yes && !reply && (v = sb_config_node_get(n, "handoff")))
        return FAIL(c, v, "%s.handoff: only with confirm: true or a reply", c->path);
    if (!yes && !reply) return 0;
    if (yes && !(v = sb_config_node_get(n, "readback")))
        return FAIL(c, on, "%s: confirm: true needs readback: {language: what the stage will do, a template}", c->path);
    confirm_conf *k = sb_calloc(1, sizeof *k);
    if (!(s->own = k)) return SB_ENOMEM;
    k->confirm = yes;
    int rc = yes ? lang_tmpl_load(c, v, "readback", scope, &k->readback) : 0;
    if (!rc && reply) rc = load_reply(c, reply, s, scope, &k->reply);
    if (!rc && (v = sb_config_node_get(n, "change"))) rc = rt_text_load(c, v, "change", &k->change);
    if (!rc && (v = sb_config_node_get(n, "handoff"))) rc = rt_text_load(c, v, "handoff", &k->handoff);
    return rc;
}

/* ------------------------------------------------------------ running */

static rt_stage_outcome oom(rt_run *run) { return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", ""); }

static rt_stage_outcome say(rt_run *run, char *text, const char *awaiting) {
    stage_res *sr = &run->res[run->cur];
    if (!text) return oom(run);
    sb_free(sr->output);
    sr->output = text;
    rt_run_set_awaiting(run, awaiting);
    return RT_STAGE_WAIT_CALLER;
}

/* t's template in the caller's language. */
static const sb_tmpl *lang_tmpl_for(const rt_run *run, const lang_tmpl *t) {
    const char *src = rt_text_for(&t->src, run->input);
    size_t i = 0;
    while (i + 1 < t->src.n && t->src.text[i] != src) i++;
    return t->tmpl[i];
}

/* t in the caller's language, filled with the call's values; NULL: out of memory. */
static char *lang_tmpl_render(rt_run *run, const lang_tmpl *t) {
    sb_tmpl_env env = rt_run_env(run);
    sb_jw w;
    sb_jw_init(&w);
    sb_tmpl_render(lang_tmpl_for(run, t), &env, &w);
    char *text = w.oom ? NULL : rt_trimmed(w.p ? w.p : "", w.len);
    sb_jw_free(&w);
    return text;
}

/* What the stage will do, in the caller's language, with the call's values. */
static rt_stage_outcome read_back(rt_run *run, const sb_stage *s) {
    const confirm_conf *k = s->own;
    run->res[run->cur].confirm_change = false;
    return say(run, lang_tmpl_render(run, &k->readback), "{\"kind\": \"confirm\"}");
}

static rt_stage_outcome ask_change(rt_run *run, const sb_stage *s) {
    static const sb_lang_text line = { { "zh", "en" }, { "好的，请问哪里需要修改？", "All right. What should I change?" }, 2 };
    const confirm_conf *k = s->own;
    run->res[run->cur].confirm_change = true;
    return say(run, sb_strdup(rt_text_for(k->change.n ? &k->change : &line, run->input)),
               "{\"kind\": \"confirm\", \"step\": \"change\"}");
}

static const char *handoff_line(const rt_run *run, const confirm_conf *k) {
    return k->handoff.n ? rt_text_for(&k->handoff, run->input) : rt_handoff_default(run->input);
}

static rt_stage_outcome not_confirmed(rt_run *run, const sb_stage *s) {
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = sb_strdup(handoff_line(run, s->own));
    return sr->output ? rt_stage_hand_off(run, "not_confirmed") : oom(run);
}

rt_stage_outcome rt_confirm_gate(rt_run *run, const sb_stage *s, bool *go) {
    *go = false;
    const confirm_conf *k = s->own;
    if (!k || !k->confirm) { *go = true; return RT_STAGE_DONE; }
    const char *turn = rt_run_turn(run);
    if (!turn) return read_back(run, s);
    stage_res *sr = &run->res[run->cur];
    size_t rest = 0;
    rt_yesno yn = rt_caller_lead(turn, &rest);
    int changed = rt_ask_correct(run, turn);
    if (changed < 0) return oom(run);
    if (changed > 0) return read_back(run, s);         /* a slot corrected: hear it again */
    bool plain = !rt_says_something(turn + rest);     /* a yes or no and nothing else */
    if (yn == RT_YES && (plain || !sr->confirm_change)) {
        *go = true;
        sb_free(sr->output);            /* the question; the tool's answer is the output now */
        sr->output = NULL;
        rt_run_set_awaiting(run, NULL);
        return RT_STAGE_DONE;
    }
    /* Not a plain answer and nothing corrected: maybe a new request. */
    if ((yn == RT_UNKNOWN || !plain) && rt_caller_may_ask(turn) && rt_run_reroute(run)) return RT_STAGE_REROUTE;
    if (sr->confirm_change || ++sr->confirm_noes >= 2) return not_confirmed(run, s);
    return yn == RT_NO ? ask_change(run, s) : read_back(run, s);
}

rt_stage_outcome rt_tool_end(rt_run *run, const sb_stage *s, const char *err) {
    const confirm_conf *k = s->own;
    if (!k || !k->reply.src.n) return rt_stage_end(run, err ? ST_ERROR : ST_OK, err);
    /* An answer without what the reply names (no case number) is no
     * proof the tool did what the reply would say it did. */
    sb_tmpl_env env = rt_run_env(run);
    if (!err && sb_tmpl_lacks(lang_tmpl_for(run, &k->reply), &env, (int)run->cur))
        err = "its answer lacks what the stage's reply names";
    if (!err) return rt_stage_reply(run, lang_tmpl_render(run, &k->reply), NULL);
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->error);
    if (!(sr->error = sb_strdup(err))) return oom(run);
    return rt_stage_reply(run, sb_strdup(handoff_line(run, k)), "tool_failed");
}
