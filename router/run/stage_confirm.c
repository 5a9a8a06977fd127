/* stage_confirm.c - a tool stage's `confirm: true`: before it acts, the
 * caller hears what it will do and says yes.
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
 */
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

typedef struct {
    sb_lang_text readback;          /* the templates' sources, per language */
    sb_tmpl *tmpl[SB_MAX_LANGS];    /* compiled, in readback's order */
    sb_lang_text change, handoff;   /* n 0: the built-in lines */
} confirm_conf;

void rt_confirm_free(sb_stage *s) {
    confirm_conf *k = s->own;
    if (!k) return;
    for (size_t i = 0; i < k->readback.n; i++) rt_tmpl_free(k->tmpl[i]);
    rt_text_free(&k->readback);
    rt_text_free(&k->change);
    rt_text_free(&k->handoff);
    sb_free(k);
    s->own = NULL;
}

/* ------------------------------------------------------------ loading */

int rt_confirm_load(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *on = sb_config_node_get(n, "confirm"), *v;
    bool yes = false;
    if (on && (on->kind != SB_CFG_SCALAR || (strcmp(on->value, "true") && strcmp(on->value, "false"))))
        return FAIL(c, on, "%s.confirm: expected true or false", c->path);
    yes = on && !strcmp(on->value, "true");
    static const char *const needs[] = { "readback", "change", "handoff" };
    for (size_t i = 0; !yes && i < SB_ARRAY_LEN(needs); i++)
        if ((v = sb_config_node_get(n, needs[i])))
            return FAIL(c, v, "%s.%s: only with confirm: true", c->path, needs[i]);
    if (!yes) return 0;
    if (!(v = sb_config_node_get(n, "readback")))
        return FAIL(c, on, "%s: confirm: true needs readback: {language: what the stage will do, a template}", c->path);
    confirm_conf *k = sb_calloc(1, sizeof *k);
    if (!(s->own = k)) return SB_ENOMEM;
    int rc = rt_text_load(c, v, "readback", &k->readback);
    for (size_t i = 0; !rc && i < k->readback.n; i++) {
        char why[256];
        rc = rt_tmpl_compile(k->readback.text[i], scope, &k->tmpl[i], why, sizeof why);
        if (rc == SB_EINVAL) rc = FAIL(c, v, "%s.readback.%s: %s", c->path, k->readback.lang[i], why);
    }
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

/* What the stage will do, in the caller's language, with the call's values. */
static rt_stage_outcome read_back(rt_run *run, const sb_stage *s) {
    const confirm_conf *k = s->own;
    const char *src = rt_text_for(&k->readback, run->input);
    size_t i = 0;
    while (i + 1 < k->readback.n && k->readback.text[i] != src) i++;
    sb_tmpl_env env = rt_run_env(run);
    sb_jw w;
    sb_jw_init(&w);
    sb_tmpl_render(k->tmpl[i], &env, &w);
    char *text = w.oom ? NULL : rt_trimmed(w.p ? w.p : "", w.len);
    sb_jw_free(&w);
    run->res[run->cur].confirm_change = false;
    return say(run, text, "{\"kind\": \"confirm\"}");
}

static rt_stage_outcome ask_change(rt_run *run, const sb_stage *s) {
    static const sb_lang_text line = { { "zh", "en" }, { "好的，请问哪里需要修改？", "All right. What should I change?" }, 2 };
    const confirm_conf *k = s->own;
    run->res[run->cur].confirm_change = true;
    return say(run, sb_strdup(rt_text_for(k->change.n ? &k->change : &line, run->input)),
               "{\"kind\": \"confirm\", \"step\": \"change\"}");
}

static rt_stage_outcome not_confirmed(rt_run *run, const sb_stage *s) {
    const confirm_conf *k = s->own;
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = sb_strdup(k->handoff.n ? rt_text_for(&k->handoff, run->input) : rt_handoff_default(run->input));
    return sr->output ? rt_stage_hand_off(run, "not_confirmed") : oom(run);
}

rt_stage_outcome rt_confirm_gate(rt_run *run, const sb_stage *s, bool *go) {
    *go = false;
    if (!s->own) { *go = true; return RT_STAGE_DONE; }
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
