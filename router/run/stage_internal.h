/* stage_internal.h - the stage-kind interface: what a kind of pipeline
 * stage is to the loader (pipeline_stage.c) and to the executor (run.c).
 *
 * A kind is one file (stage_intent.c, stage_generate.c, stage_tool.c,
 * stage_retrieve.c) that defines one rt_stage_kind, and one line in the
 * table (stage_kinds.c). Neither the loader nor the executor names a kind:
 *
 *   loading   pipeline_stage.c reads the keys every stage has (name, kind,
 *             when, priority), finds the kind by name in the table, refuses
 *             keys the kind does not declare, and hands the kind its block
 *             (check) to validate and load into the stage;
 *   running   run.c calls start, and on_reply when the model call the
 *             stage made answers; either returns one of the four outcomes
 *             below, and so does a kind's own completion (a tool process,
 *             a search) through rt_run_report. The run goes on, waits,
 *             suspends or fails on that alone.
 *
 * The shape follows what the stages need, not a wish list: `keys` and
 * `check` are the loader's half (the kind declares its keys with their
 * types and bounds, as every config section does; check reads them with
 * the one validator of common/, which reports FILE:LINE:COL), `start` / `on_reply` / `stop` the executor's, and two
 * hooks cover the only places a kind shows outside its stage: the run's
 * `probabilities` (an intent) and the pipeline's cache key (a retrieve
 * stage's knowledge-base version). The built-in kinds keep their settings
 * in sb_stage's fields (sb_run.h), which the front doors (route eval,
 * traces) and the tests read; a kind added later keeps its parsed block in
 * its own struct at sb_stage.own (check fills it, free frees it), so
 * adding a kind changes no shared struct. tests/test_stage_kind.c adds
 * one that way - `echo`, which also exercises waiting on the caller.
 *
 * Private to router/run/.
 */
#ifndef SB_STAGE_INTERNAL_H
#define SB_STAGE_INTERNAL_H

#include "router/run/pipeline_internal.h"
#include "router/run/run_internal.h"

/* What a stage's step came to. One convention for every kind. */
typedef enum {
    RT_STAGE_DONE,          /* its result is recorded (rt_stage_end): the run goes on to the next stage */
    RT_STAGE_WAIT_BACKEND,  /* a model call, a tool, a search is out (or it polls: rt_stage_poll); the stage
                               reports again through on_reply or rt_run_report */
    RT_STAGE_WAIT_CALLER,   /* the stage asks the caller (its output is the question): the run is suspended
                               with its state, and on the caller's next turn (rt_run_resume) start runs again
                               at this stage, with rt_run_turn the answer */
    RT_STAGE_FAILED,        /* the run fails: rt_stage_fail recorded the status and the reason */
    RT_STAGE_REROUTE,       /* the caller's answer is no answer to the question: the run routes it first
                               (only after rt_run_reroute said it may); a new topic goes on from the intent
                               stage, else start runs again at this stage with the same answer */
} rt_stage_outcome;

/* What the loader may ask of the stages before a stage. */
enum {
    RT_KIND_SETS_INTENT = 1,    /* sets the run's intent: {{intent}} and `when: {intent: ...}` may follow it */
    RT_KIND_FOUND = 2,          /* says found / not found: `when: {found: NAME}` may name it */
    RT_KIND_JSON = 4,           /* its output is JSON whenever it parses: `args_from` may name it */
};

typedef struct rt_stage_kind {
    const char *name;                   /* `kind:` in the config */
    /* Its keys besides name, kind and when (sb_config.h's typed keys: the
     * unknown-key check lists them; the kind's check reads the typed ones
     * into the stage with sb_cfg_keys_read, the others itself). */
    const sb_cfg_key *keys;
    int default_priority;               /* its model queue priority when the stage sets none */
    unsigned traits;                    /* RT_KIND_* */
    /* Validate the stage's mapping n and load it into p->stages[idx] (name,
     * kind, when and priority are loaded; unknown keys were refused). 0,
     * SB_EINVAL through FAIL (FILE:LINE:COL), SB_ENOMEM. */
    int (*check)(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope);
    /* Begin the stage - or begin it again: after a poll, or on the caller's
     * next turn. */
    rt_stage_outcome (*start)(rt_run *run, const sb_stage *s);
    /* The model call the stage made (rt_run_generate / _score / _embed)
     * answered. NULL for a kind that calls no model. */
    rt_stage_outcome (*on_reply)(rt_run *run, const sb_stage *s, const rt_reply *r);
    /* The run ends while the stage waits (timeout, cancel, failure): drop
     * what it holds besides the model call (run.c cancels that). NULL: nothing. */
    void (*stop)(rt_run *run);
    /* The value of the result's `probabilities` when this kind's stage set
     * the intent. NULL: null. */
    void (*result_json)(const rt_run *run, const sb_stage *s, sb_jw *w);
    /* Add what else the pipeline's cache key must cover to h; false: the
     * answer cannot be cached now. NULL: nothing. */
    bool (*cache_key)(rt_conf *c, const sb_stage *s, sb_sha256_ctx *h);
    /* Free s->own (what check put there), also after a check that failed
     * half way. NULL: the kind keeps nothing there. */
    void (*free)(sb_stage *s);
    /* Whether the stage gathers the call's slots (slot NULL), or gathers
     * that one: its JSON is the call's slots (rt_run_slots), which a
     * session keeps, and a new topic keeps the slots its stages gather.
     * NULL: it gathers none. */
    bool (*gathers)(const sb_stage *s, const char *slot);
} rt_stage_kind;

/* ------------------------------------------------------ the table */

/* The kind named name, or NULL; its index in the table is what sb_stage's
 * kind holds (SB_STAGE_* name the built-in ones). */
const rt_stage_kind *rt_stage_kind_find(const char *name, int *index);
const rt_stage_kind *rt_stage_kind_of(const sb_stage *s);
/* "intent, generate, tool or retrieve": the kinds, for messages. */
void rt_stage_kind_list(char *out, size_t n);
/* Add a kind after the built-in ones (a test's, or an extension's, before
 * any config is loaded). 0, or SB_EBUSY when the table is full,
 * SB_EINVAL when the name is taken. */
int rt_stage_kind_register(const rt_stage_kind *k);

extern const rt_stage_kind rt_kind_intent, rt_kind_generate, rt_kind_tool, rt_kind_retrieve;

/* stage_ask.c: a generate stage's `ask:` (its slots, their questions and
 * checks, kept at s->own). load: the block, after json/json_schema, and
 * the stage's `handoff` text (NULL: none). next: the
 * stage's JSON holds the slots; ask for the first required one that is
 * empty (WAIT_CALLER), or end the stage. answered: the caller's turn
 * fills the slots it gives (or asks again, or hands off), then next. */
int rt_ask_load(vctx *c, const sb_config_node *n, sb_stage *s, const sb_config_node *handoff);
rt_stage_outcome rt_ask_next(rt_run *run, const sb_stage *s);
rt_stage_outcome rt_ask_answered(rt_run *run, const sb_stage *s);
void rt_ask_free(sb_stage *s);
bool rt_ask_gathers(const sb_stage *s, const char *slot);
/* A later stage's answer as a correction of the call's slots: each number
 * in words that passes a slot's checks and differs from its value replaces
 * it ("不对，户号是 5520982"). How many slots changed, or -1 (out of memory). */
int rt_ask_correct(rt_run *run, const char *words);

/* stage_confirm.c: what a tool stage says to the caller - `confirm: true`
 * (readback, change, handoff) and `reply` - kept at s->own. load: from
 * the stage's mapping (nothing without either). gate: before the tool
 * acts - reads back what it will do and reads the answer; *go when the
 * caller said yes (the tool runs now), else the outcome (asking, a
 * hand-off, a reroute). end: the tool answered (err NULL) or failed; the
 * stage ends - with a reply, that is the turn's answer (a failure hands
 * the call off). replies: whether the stage has a reply. */
int rt_confirm_load(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope);
rt_stage_outcome rt_confirm_gate(rt_run *run, const sb_stage *s, bool *go);
rt_stage_outcome rt_tool_end(rt_run *run, const sb_stage *s, const char *err);
bool rt_tool_replies(const sb_stage *s);
void rt_confirm_free(sb_stage *s);

/* caller_words.c: what a caller's short answer means, in Chinese and
 * English, colloquial and as speech recognition writes it. yesno: from the
 * answer's first words ("嗯，不是" no, "yeah sure" yes, "是不是" / "not
 * sure" / "my name is not..." unknown). lead: the same, and *rest the byte
 * offset in answer where those words end ("不对，是 4410032": RT_NO, rest
 * at "是 4410032"). refuses: the answer declines to give something ("不方便
 * 说", "I'd rather not", "不知道", "skip"). */
typedef enum { RT_UNKNOWN, RT_YES, RT_NO } rt_yesno;
rt_yesno rt_caller_yesno(const char *answer);
rt_yesno rt_caller_lead(const char *answer, size_t *rest);
bool rt_caller_refuses(const char *answer);
/* Whether the answer could be a request of its own: it neither declines
 * nor is a plain yes or no ("嗯", "no thanks"), which answer the question
 * asked and are never routed as a new topic. */
bool rt_caller_may_ask(const char *answer);

/* clarify.c: the answer to "A or B?" (n 2) or "did you mean A?" (n 1).
 * PICKED: *picked is the option's index; NEITHER: none of them; NEW: a
 * new request, which starts at answer + *request (after a leading no). */
typedef enum { RT_CLARIFY_NEW, RT_CLARIFY_PICKED, RT_CLARIFY_NEITHER } rt_clarify_verdict;
typedef struct {
    const char *name;                   /* the label */
    const sb_lang_text *display;        /* its display names; may be NULL */
} rt_clarify_option;
rt_clarify_verdict rt_clarify_read(const char *answer, const rt_clarify_option *opts, int n, int *picked,
                                   size_t *request);
/* Whether anything but white space and punctuation is in text. */
bool rt_says_something(const char *text);

/* lang_text.c: texts per language (sb_lang_text). load: {language: text}
 * at v, named what in messages. for: the text in the language of input
 * (Chinese characters: zh, else en; missing: the first listed).
 * handoff_default: the hand-off line of a stage that writes none. */
bool rt_looks_chinese(const char *text);
int rt_text_load(vctx *c, const sb_config_node *v, const char *what, sb_lang_text *t);
const char *rt_text_for(const sb_lang_text *t, const char *input);
const char *rt_text_in(const sb_lang_text *t, const char *lang);     /* by tag: its first two letters */
void rt_text_free(sb_lang_text *t);
const char *rt_handoff_default(const char *input);

/* ------------------------------------------ what kinds use to load */

/* A template key (FILE:LINE:COL on a mistake). */
int rt_pl_tmpl(vctx *c, const sb_config_node *n, const char *key, const rt_tmpl_scope *scope, sb_tmpl **out);
/* A model stage's model (required), system and chat. */
int rt_pl_model_keys(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope);
/* Label name's index in an intent stage, or -1. */
int rt_pl_label_index(const sb_stage *s, const char *name);

/* -------------------------------------------- what kinds use to run */

/* Record the running stage's result: status ST_OK / ST_ERROR (error: why,
 * or NULL). Returns RT_STAGE_DONE. */
rt_stage_outcome rt_stage_end(rt_run *run, int status, const char *error);
/* Record why the run fails (fmt takes two strings). Returns RT_STAGE_FAILED. */
rt_stage_outcome rt_stage_fail(rt_run *run, int status, const char *type, const char *fmt, const char *a,
                               const char *b);
/* A model call refused when submitted (rc: SB_EBUSY full, SB_EIO down, or
 * other_status): the run fails with 503 or other_status. */
rt_stage_outcome rt_stage_refused(rt_run *run, const sb_stage *s, int rc, int other_status, const char *err);
/* Start the stage again in ms (something it needs is being built).
 * Returns RT_STAGE_WAIT_BACKEND. */
rt_stage_outcome rt_stage_poll(rt_run *run, int ms);
/* A stage's own asynchronous work (not a model call) came to o. */
void rt_run_report(rt_run *run, rt_stage_outcome o);
/* The call goes to a person (reason: "refused", "retries_exhausted"...):
 * the running stage's output is the reply, the stages after it do not
 * run, and the answer says so (handoff, done). Returns RT_STAGE_DONE. */
rt_stage_outcome rt_stage_hand_off(rt_run *run, const char *reason);
/* The running stage's text (taken; NULL: out of memory, the run fails) is
 * the turn's answer - kept apart from its output, which stays what it
 * computed - and the stages after it do not run; handoff: NULL, or why the
 * call goes to a person with it. Its status is ST_ERROR when it recorded
 * an error first. Returns RT_STAGE_DONE. */
rt_stage_outcome rt_stage_reply(rt_run *run, char *text, const char *handoff);
/* The caller's answer on this turn, after the stage asked (WAIT_CALLER);
 * NULL on the stage's first start. */
const char *rt_run_turn(const rt_run *run);
/* Whether the stage may answer RT_STAGE_REROUTE for this turn: the
 * conversation switches topics (topic_switch), an intent stage comes
 * before it, and this turn was not routed already. */
bool rt_run_reroute(const rt_run *run);
/* While the run routes a caller's answer (RT_STAGE_REROUTE): the intent
 * stage decides without asking (clarify), since an unclear intent keeps
 * the call on its topic. */
bool rt_run_rerouting(const rt_run *run);
/* The slots carried into this run (a session's, or those of the topic it
 * left) that the stages of its intent gather, or NULL: a stage that gathers
 * slots starts from them. */
const sb_json *rt_run_kept_slots(const rt_run *run);
/* What a stage that asks awaits, as the answer's `awaiting` shows it
 * (JSON text, copied: {"kind": "slot", "slot": NAME}, {"kind": "clarify",
 * "options": [...]}, {"kind": "confirm"}); set before returning
 * RT_STAGE_WAIT_CALLER. Unset: {"kind": "slot", "slot": STAGE}. */
void rt_run_set_awaiting(rt_run *run, const char *json);
/* Whether the running stage's text is the answer and the caller streams:
 * a generation then streams its tokens to the caller. */
bool rt_run_streams(const rt_run *run);
/* The stage's model calls: the reply comes to its kind's on_reply. 0, or
 * the refusal (SB_EBUSY leaves the Retry-After for the caller). */
int rt_run_generate(rt_run *run, const sb_stage *s, const rt_gen_req *g, char *err);
int rt_run_score(rt_run *run, const sb_stage *s, const char *model, rt_score_req *r, char *err);
int rt_run_embed(rt_run *run, const sb_stage *s, const char *text, size_t len, char *err);
/* text without leading and trailing white space, copied (NULL: out of memory). */
char *rt_trimmed(const char *text, size_t len);
/* Keep a stage's JSON only when the result can hold it (false: dropped). */
bool rt_json_fits(stage_res *sr);

#endif
