/* topic.c - a conversation's topic across turns: the slots that carry
 * over, a caller's answer that is a new request, and the turns a composer
 * sees ({{history}}).
 *
 * Slots carried. A session's next call (and a topic the call leaves)
 * brings its slots into the run (rt_run_carry_slots). Those that the
 * stages of the run's intent gather are kept (recomputed whenever an
 * intent stage decides): a stage that gathers slots starts from them, so
 * an account given for one billing question is not asked for the next,
 * and slots no stage of the new topic gathers are dropped from the call's
 * state.
 *
 * Every answer is routed. When a stage asked the caller something (a
 * slot, a confirmation) and the answer does not fit the question - no
 * value that passes the slot's checks, not a plain yes or no - the stage
 * answers RT_STAGE_REROUTE and the run routes the answer through the
 * intent stage before it (rt_topic_reroute). An intent other than the
 * call's and out_of_scope, at the conversation's `topic_switch` confidence
 * or above and not too close to call (the stage's clarify margin), is a
 * new topic: the answer becomes the run's input, the stages after the
 * intent stage run afresh for it, with the slots that still apply. Otherwise the call's
 * intent is put back and the stage that asked reads the answer itself
 * (a re-ask, a refusal...), with its counts as they were.
 */
#include <stdio.h>
#include <string.h>

#include "router/classify/sb_classify.h"
#include "router/run/stage_internal.h"

/* ------------------------------------------------------- carried slots */

static bool applies(const sb_stage *s, const char *intent) {
    if (!s->n_when) return true;
    if (!intent) return s->when_negate;
    bool in = false;
    for (size_t i = 0; i < s->n_when; i++) in |= !strcmp(s->when_intents[i], intent);
    return in != s->when_negate;
}

/* Whether a stage the intent runs gathers slot. */
static bool still_applies(const rt_run *run, const char *slot) {
    for (size_t i = 0; i < run->p->n_stages; i++) {
        const sb_stage *s = &run->p->stages[i];
        const rt_stage_kind *k = rt_stage_kind_of(s);
        if (k->gathers && applies(s, run->intent) && k->gathers(s, slot)) return true;
    }
    return false;
}

void rt_topic_keep_slots(rt_run *run) {
    if (!run->carried) return;
    const sb_json *o = sb_json_root(run->carried);
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    for (size_t i = 0; i < sb_json_len(o); i++)
        if (still_applies(run, sb_json_key_at(o, i))) {
            sb_jw_key(&w, sb_json_key_at(o, i));
            sb_jw_value(&w, sb_json_val_at(o, i));
        }
    sb_jw_obj_end(&w);
    sb_json_doc *d = NULL;
    if (!w.oom && !sb_json_parse(w.p, w.len, &d, NULL)) {
        sb_json_doc_free(run->kept);
        run->kept = d;
    }
    sb_jw_free(&w);
}

int rt_run_carry_slots(rt_run *run, const char *slots) {
    sb_json_doc *d;
    if (!slots || sb_json_parse(slots, strlen(slots), &d, NULL)) return 0;     /* ours: it parses */
    if (sb_json_type_of(sb_json_root(d)) != SB_JSON_OBJECT || !sb_json_len(sb_json_root(d))) {
        sb_json_doc_free(d);
        return 0;
    }
    sb_json_doc_free(run->carried);
    run->carried = d;
    rt_topic_keep_slots(run);
    return run->kept ? 0 : SB_ENOMEM;
}

const sb_json *rt_run_kept_slots(const rt_run *run) { return run->kept ? sb_json_root(run->kept) : NULL; }

/* ------------------------------------------------------------ history */

int rt_run_set_history(rt_run *run, const char *text) {
    char *copy = text && *text ? sb_strdup(text) : NULL;
    if (text && *text && !copy) return SB_ENOMEM;
    sb_free(run->history);
    run->history = copy;
    return 0;
}

/* --------------------------------------------------- routing an answer */

static int intent_before(const rt_run *run, size_t stage) {
    int at = -1;
    for (size_t i = 0; i < stage && i < run->p->n_stages; i++)
        if (rt_stage_kind_of(&run->p->stages[i])->traits & RT_KIND_SETS_INTENT) at = (int)i;
    return at;
}

bool rt_run_reroute(const rt_run *run) {
    return run->p->conv.topic_switch > 0 && !run->topic.done && run->turn && intent_before(run, run->cur) >= 0;
}

bool rt_run_rerouting(const rt_run *run) { return run->topic.on; }

static bool failed_oom(rt_run *run) {
    rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", "");
    return true;
}

bool rt_topic_reroute(rt_run *run) {
    int at = intent_before(run, run->cur);
    char *input = sb_strdup(run->turn), *turn = sb_strdup(run->turn);
    if (at < 0 || !input || !turn) {
        sb_free(input);
        sb_free(turn);
        return failed_oom(run);
    }
    run->topic.on = run->topic.done = true;
    run->topic.back = run->cur;
    run->topic.turn = turn;
    run->topic.input = run->input;
    run->input = input;
    run->topic.intent = run->intent;
    run->intent = NULL;
    run->topic.confidence = run->confidence;
    memcpy(run->topic.probs, run->probs, sizeof run->probs);
    run->topic.fell_back = run->fell_back;
    stage_res *sr = &run->res[at];
    run->topic.intent_output = sr->output;
    sr->output = NULL;
    sr->turn_read = true;           /* the answer is the words to route, not an answer to a clarifying question */
    sr->clarify.pending = false;
    run->cur = (size_t)at;
    return false;
}

/* The stages after the intent stage run afresh for the new topic; the
 * slots gathered so far are carried, and kept where they still apply. */
static void switch_topic(rt_run *run) {
    const sb_json *slots = rt_run_slots(run);
    sb_jw w;
    sb_jw_init(&w);
    if (slots) sb_jw_value(&w, slots);
    sb_json_doc *d = NULL;
    if (slots && !w.oom && !sb_json_parse(w.p, w.len, &d, NULL)) {
        sb_json_doc_free(run->carried);
        run->carried = d;
    }
    sb_jw_free(&w);
    for (size_t i = run->cur + 1; i < run->p->n_stages; i++) {
        stage_res *sr = &run->res[i];
        sb_free(sr->output);
        sb_free(sr->error);
        sb_free(sr->input);
        sb_json_doc_free(sr->doc);
        memset(sr, 0, sizeof *sr);
    }
    run->slots_stage = -1;
    run->handoff = NULL;
    run->last_ran = (int)run->cur;
    rt_run_set_awaiting(run, NULL);
    rt_topic_keep_slots(run);
    sb_free(run->topic.input);
    sb_free(run->topic.intent);
    sb_free(run->topic.intent_output);
    sb_free(run->topic.turn);
    run->topic.input = run->topic.intent = run->topic.intent_output = run->topic.turn = NULL;
    run->cur++;
}

/* The call stays on its topic: its intent as it was, and the stage that
 * asked reads the answer itself. */
static void stay(rt_run *run) {
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = run->topic.intent_output;
    sb_free(run->input);
    run->input = run->topic.input;
    sb_free(run->intent);
    run->intent = run->topic.intent;
    run->confidence = run->topic.confidence;
    memcpy(run->probs, run->topic.probs, sizeof run->probs);
    run->fell_back = run->topic.fell_back;
    sb_free(run->turn);
    run->turn = run->topic.turn;
    run->topic.input = run->topic.intent = run->topic.intent_output = run->topic.turn = NULL;
    run->cur = run->topic.back;
}

/* The out-of-scope label is no service to turn to: routed there, an answer
 * is one that misses the question ("the grey box by the door" for an
 * account, "no, never mind" after "what should I change?"), which the stage
 * that asked reads - a re-ask, a no - rather than a request to refuse. */
void rt_topic_routed(rt_run *run) {
    run->topic.on = false;
    bool other = run->intent && strcmp(run->intent, SB_CLS_OOS_NAME)
                 && (!run->topic.intent || strcmp(run->intent, run->topic.intent));
    if (other && !run->fell_back && run->confidence >= run->p->conv.topic_switch) switch_topic(run);
    else stay(run);
}

void rt_topic_free(rt_run *run) {
    sb_json_doc_free(run->carried);
    sb_json_doc_free(run->kept);
    sb_free(run->history);
    sb_free(run->topic.input);
    sb_free(run->topic.intent);
    sb_free(run->topic.intent_output);
    sb_free(run->topic.turn);
}
