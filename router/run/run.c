/* run.c - executing a pipeline: one stage at a time, all on the loop.
 *
 * A run walks its stages in order. A stage whose `when:` does not match is
 * skipped; any other is started through its kind (stage_internal.h: the
 * intent, generate, tool and retrieve stages are each a kind in its own
 * file), and whatever it does - a model call, a tool, a search - it comes
 * back with one of four outcomes: done (the next stage is scheduled),
 * waiting on a backend (its reply goes to the kind's on_reply), waiting on
 * the caller (the run is suspended until rt_run_resume), failed (the run
 * answers with the error). Each step starts asynchronous work and returns,
 * so a hundred runs interleave on one thread. Nothing here names a kind.
 *
 * Failures: a model stage whose worker fails fails the run (the caller gets
 * the worker's status: 503 busy/down, 504 timeout...). A tool that fails, or
 * a json: true stage whose output holds no JSON object, is recorded as an
 * error on that stage and the run goes on: the composer can still answer
 * ("I cannot look that up right now") from what it has.
 */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

/* Call traces are kept (the router's hook): runs keep each stage's input. */
static bool rt_tracing(const rt_exec *ex) {
    return ex->be.hooks.tracing && ex->be.hooks.tracing(ex->be.hooks.arg);
}

static void step(rt_run *run);

/* Stage s's model m for a call: NULL with err when it is not configured. */
static rt_model *stage_model(rt_run *run, const char *model, char *err) {
    rt_model *m = rt_model_find(&run->ex->be, model);
    if (!m) sb_seterr(err, SB_EIO, "model '%s' is not configured in this router", model);
    return m;
}

static int submitted(rt_run *run, rt_model *m, int rc) {
    if (rc == SB_EBUSY) run->retry_after = rt_model_retry_after(m);
    return rc;
}

static void advance(rt_run *run, rt_stage_outcome o);

/* A model call of the running stage answered: its kind reads the reply. */
static void on_model_reply(void *arg, const rt_reply *r) {
    rt_run *run = arg;
    run->job = NULL;
    const sb_stage *s = &run->p->stages[run->cur];
    advance(run, rt_stage_kind_of(s)->on_reply(run, s, r));
}

/* The answer stage's tokens as they come, to the caller. */
static void on_model_token(void *arg, const rt_token *tok) {
    rt_run *run = arg;
    if (!run->t_first) {
        run->t_first = sb_now_s();
        rt_observe(&run->ex->be, RT_H_TTFT_PIPELINE, run->p->name, NULL, run->t_first - run->t0);
    }
    if (run->sink.delta) run->sink.delta(run->sink.arg, tok->text, tok->len);
}

int rt_run_generate(rt_run *run, const sb_stage *s, const rt_gen_req *g, char *err) {
    rt_model *m = stage_model(run, s->model, err);
    if (!m) return SB_EIO;
    return submitted(run, m, rt_model_submit_gen(m, g, m->deadline_ms, g->stream ? on_model_token : NULL,
                                                 on_model_reply, run, &run->job, err));
}

int rt_run_score(rt_run *run, const sb_stage *s, const char *model, rt_score_req *r, char *err) {
    rt_model *m = stage_model(run, model, err);
    if (!m) return SB_EIO;
    r->priority = s->priority;
    return submitted(run, m, rt_model_submit_score(m, r, m->deadline_ms, on_model_reply, run, &run->job, err));
}

int rt_run_embed(rt_run *run, const sb_stage *s, const char *text, size_t len, char *err) {
    rt_model *m = stage_model(run, s->model, err);
    if (!m) return SB_EIO;
    /* a retrieve stage's base may name an adapter for its questions (kb adapt's) */
    rt_embed_req r = { .kind = "query", .texts = &text, .lens = &len, .n = 1, .priority = s->priority,
                       .adapter = s->kb_adapter };
    return submitted(run, m, rt_model_submit_embed(m, &r, m->deadline_ms, on_model_reply, run, &run->job, err));
}

static void step_cb(evutil_socket_t fd, short what, void *arg) { step(arg); }

/* Steps run from the loop, never inside the callback that finished the
 * previous stage; the kick event is the run's own, so freeing the run
 * removes any step still scheduled. */
static void schedule(rt_run *run) {
    struct timeval now = { 0, 0 };
    evtimer_add(run->kick, &now);
}

rt_prior *rt_run_prior(rt_run *run, const sb_stage *s) {
    for (rt_prior *pr = run->conf->priors; pr; pr = pr->next)
        if (pr->stage == s) return pr;
    return NULL;
}

sb_tmpl_env rt_run_env(rt_run *run) {
    for (size_t i = 0; i < run->p->n_stages; i++) {
        run->outputs[i] = run->res[i].output;
        run->json[i] = run->res[i].json;
    }
    return (sb_tmpl_env){ run->input, run->conf->cfg->base_dir, run->intent, run->confidence, run->p, run->outputs,
                          run->json, run->history };
}

static bool when_matches(const rt_run *run, const sb_stage *s) {
    if (s->when_found >= 0 && run->res[s->when_found].found == s->when_found_negate) return false;
    if (!s->n_when) return true;
    if (!run->intent) return s->when_negate;
    bool in = false;
    for (size_t i = 0; i < s->n_when; i++) in |= !strcmp(s->when_intents[i], run->intent);
    return in != s->when_negate;
}

/* The stage whose text is the answer: the configured one, or the last that
 * runs. Decided before a generate stage starts, so its tokens can stream. */
static bool is_answer_stage(const rt_run *run, size_t i) {
    if (run->p->output >= 0) return (size_t)run->p->output == i;
    for (size_t k = i + 1; k < run->p->n_stages; k++)
        if (when_matches(run, &run->p->stages[k])) return false;
    return true;
}

/* The result puts a stage's `json` three levels down ({"stages": [{"json"),
 * and the JSON writer stops at the parser's depth: a deeper object is not
 * kept as json (false; sr->json and sr->doc cleared), so the reply stays
 * whole. */
#define RESULT_JSON_DEPTH 3
bool rt_json_fits(stage_res *sr) {
    if (!sr->json || sb_json_depth(sr->json) <= SB_JSON_MAX_DEPTH - RESULT_JSON_DEPTH) return true;
    sb_json_doc_free(sr->doc);
    sr->doc = NULL;
    sr->json = NULL;
    return false;
}

static const char *run_output(const rt_run *run) {
    if (run->last_ran >= 0 && run->res[run->last_ran].reply) return run->res[run->last_ran].reply;
    int i = run->p->output >= 0 && !run->handoff ? run->p->output : run->last_ran;
    return i >= 0 && run->res[i].output ? run->res[i].output : "";
}

static void run_usage(const rt_run *run, int *pt, int *ct) {
    *pt = *ct = 0;
    for (size_t i = 0; i < run->p->n_stages; i++) {
        *pt += run->res[i].prompt_tokens;
        *ct += run->res[i].completion_tokens;
    }
}

static void run_free(rt_run *run);

/* The run's one reply, through its sink; then it is freed. A 503 (a full
 * queue, a model down) tells the caller when to come back: the full
 * queue's drain time, else 2 s. */
static void finish(rt_run *run) {
    if (run->done) return;
    run->done = true;
    if (run->timer) evtimer_del(run->timer);
    if (run->fail_status) {
        int ra = run->fail_status != 503 ? 0 : run->retry_after ? run->retry_after : 2;
        rt_failure f = { run->fail_status, run->fail_type, run->fail_type, run->fail_msg, ra, run };
        run->sink.error(run->sink.arg, &f);
    } else {
        rt_observe(&run->ex->be, RT_H_PIPELINE, run->p->name, NULL, sb_now_s() - run->t0);
        const char *out = run_output(run);
        rt_answer a = { .text = out, .len = strlen(out), .finish_reason = "stop", .model_s = run->model_s, .run = run };
        run_usage(run, &a.prompt_tokens, &a.completion_tokens);
        run->sink.finish(run->sink.arg, &a);
    }
    run_free(run);
}

rt_stage_outcome rt_stage_fail(rt_run *run, int status, const char *type, const char *fmt, const char *a,
                               const char *b) {
    run->fail_status = status;
    run->fail_type = type;
    snprintf(run->fail_msg, sizeof run->fail_msg, fmt, a, b);
    return RT_STAGE_FAILED;
}

rt_stage_outcome rt_stage_refused(rt_run *run, const sb_stage *s, int rc, int other_status, const char *err) {
    int st = rc == SB_EBUSY || rc == SB_EIO ? 503 : other_status;
    return rt_stage_fail(run, st, rc == SB_EBUSY ? "server_busy" : "model_unavailable", "stage '%s': %s", s->name, err);
}

rt_stage_outcome rt_stage_end(rt_run *run, int status, const char *error) {
    stage_res *sr = &run->res[run->cur];
    sr->status = status;
    sr->ms = (sb_now_s() - run->t_stage) * 1e3;
    if (error) sr->error = sb_strdup(error);
    if (status == ST_OK || status == ST_ERROR) run->last_ran = (int)run->cur;
    rt_observe(&run->ex->be, RT_H_STAGE, run->p->name, run->p->stages[run->cur].name, sr->ms / 1e3);
    sb_free(run->turn);         /* the next stage that asks starts without an answer */
    run->turn = NULL;
    return RT_STAGE_DONE;
}

rt_stage_outcome rt_stage_hand_off(rt_run *run, const char *reason) {
    run->handoff = reason;
    run->until = (int)run->cur;     /* the stages after it would answer a call a person now takes */
    return rt_stage_end(run, ST_OK, NULL);
}

rt_stage_outcome rt_stage_reply(rt_run *run, char *text, const char *handoff) {
    stage_res *sr = &run->res[run->cur];
    if (!text) return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", "");
    sb_free(sr->reply);
    sr->reply = text;
    run->handoff = handoff;
    run->until = (int)run->cur;     /* the stages after it would answer something else */
    return rt_stage_end(run, sr->error ? ST_ERROR : ST_OK, NULL);
}

rt_stage_outcome rt_stage_poll(rt_run *run, int ms) {
    struct timeval soon = { ms / 1000, (ms % 1000) * 1000 };
    run->polling = true;
    evtimer_add(run->kick, &soon);
    return RT_STAGE_WAIT_BACKEND;
}

char *rt_trimmed(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
    char *o = sb_malloc(n + 1);
    if (o) { memcpy(o, s, n); o[n] = '\0'; }
    return o;
}

/* What the running stage was given (its prompt, utterance or stdin), for
 * the call's trace; not kept when traces are off. Capped: a trace shows
 * what went in, it is not an archive. */
#define RT_TRACE_INPUT_MAX 16384
void rt_run_keep_input(rt_run *run, const char *p, size_t n) {
    stage_res *sr = &run->res[run->cur];
    if (!rt_tracing(run->ex) || sr->input) return;
    if (n > RT_TRACE_INPUT_MAX) n = RT_TRACE_INPUT_MAX;
    if ((sr->input = sb_malloc(n + 1))) {
        if (n) memcpy(sr->input, p, n);
        sr->input[n] = '\0';
    }
}

/* An `embed` result's first vector into out[0..max): its dimension, 0 if
 * there is none or it is longer. */
uint32_t rt_run_first_vector(const rt_reply *res, float *out, uint32_t max) {
    uint32_t dim = res->ok && res->embed.n ? res->embed.dim : 0;
    if (dim > max) return 0;
    if (dim) memcpy(out, res->embed.vecs, dim * sizeof *out);
    return dim;
}

/* --------------------------------------------------------------- steps */

static const rt_stage_kind *running_kind(const rt_run *run) {
    return run->cur < run->p->n_stages ? rt_stage_kind_of(&run->p->stages[run->cur]) : NULL;
}

static void suspend(rt_run *run);

static bool sets_intent(const rt_run *run) {
    return run->cur < run->p->n_stages && (rt_stage_kind_of(&run->p->stages[run->cur])->traits & RT_KIND_SETS_INTENT);
}

/* Where every stage's step ends: one convention for every kind. */
static void advance(rt_run *run, rt_stage_outcome o) {
    switch (o) {
    case RT_STAGE_DONE:
        if (sets_intent(run) && run->topic.on) {
            rt_topic_routed(run);       /* sets cur: the new topic's next stage, or back to the question */
        } else {
            if (sets_intent(run)) rt_topic_keep_slots(run);
            run->cur++;
        }
        schedule(run);
        break;
    case RT_STAGE_REROUTE:
        if (rt_topic_reroute(run)) finish(run);
        else schedule(run);
        break;
    case RT_STAGE_WAIT_BACKEND:
        break;
    case RT_STAGE_WAIT_CALLER:
        suspend(run);
        break;
    case RT_STAGE_FAILED:
        finish(run);
        break;
    }
}

void rt_run_report(rt_run *run, rt_stage_outcome o) { advance(run, o); }

static void step(rt_run *run) {
    if (run->done || run->suspended) return;
    while (run->cur < run->p->n_stages && (run->until < 0 || run->cur <= (size_t)run->until)) {
        const sb_stage *s = &run->p->stages[run->cur];
        if (!run->polling) run->t_stage = sb_now_s();
        run->polling = false;
        if (!when_matches(run, s)) {
            run->res[run->cur].status = ST_SKIPPED;
            run->cur++;
            continue;
        }
        run->res[run->cur].t_start = run->t_stage;
        advance(run, rt_stage_kind_of(s)->start(run, s));
        return;
    }
    finish(run);
}

/* The stage asks the caller: its output is the question. The run keeps its
 * state and its hold on the config, and its clock stops: the caller may
 * take minutes to answer. A door that cannot carry a next turn gets an
 * error instead. */
static void suspend(rt_run *run) {
    const sb_stage *s = &run->p->stages[run->cur];
    if (!run->sink.ask) {
        rt_stage_fail(run, 501, "unsupported", "stage '%s': %s", s->name,
                      "it waits on the caller's next turn, which this door cannot carry");
        finish(run);
        return;
    }
    run->suspended = true;
    evtimer_del(run->timer);
    const char *q = run->res[run->cur].output ? run->res[run->cur].output : "";
    rt_answer a = { .text = q, .len = strlen(q), .finish_reason = "ask", .model_s = run->model_s, .run = run };
    run_usage(run, &a.prompt_tokens, &a.completion_tokens);
    run->sink.ask(run->sink.arg, &a);
}

int rt_run_resume(rt_run *run, const char *turn, char *err) { return rt_run_resume_to(run, turn, NULL, err); }

int rt_run_resume_to(rt_run *run, const char *turn, const rt_sink *sink, char *err) {
    if (!run->suspended) return sb_seterr(err, SB_EINVAL, "the run does not wait on the caller");
    if (sink) run->sink = *sink;
    rt_run_set_awaiting(run, NULL);     /* the stage says again if it asks again */
    run->topic.done = false;               /* a new answer: it may be routed */
    char *t = sb_strdup(turn);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_free(run->turn);
    run->turn = t;
    run->suspended = false;
    struct timeval tv = { run->p->timeout_ms / 1000, (run->p->timeout_ms % 1000) * 1000 };
    evtimer_add(run->timer, &tv);
    schedule(run);
    return 0;
}

const char *rt_run_turn(const rt_run *run) { return run->turn; }

void rt_run_set_awaiting(rt_run *run, const char *json) {
    char *copy = json ? sb_strdup(json) : NULL;
    sb_free(run->awaiting);
    run->awaiting = copy;
}

int rt_run_waiting_stage(const rt_run *run) { return run->suspended ? (int)run->cur : -1; }

double rt_run_confidence(const rt_run *run) { return run->confidence; }

const char *rt_run_handoff_reason(const rt_run *run) {
    if (run->handoff) return run->handoff;
    for (size_t i = 0; run->intent && i < run->p->conv.n_handoff_intents; i++)
        if (!strcmp(run->intent, run->p->conv.handoff_intents[i])) return run->fell_back ? "rejected" : "asked";
    return NULL;
}

const sb_json *rt_run_slots(const rt_run *run) {
    if (run->slots_stage >= 0) return run->res[run->slots_stage].json;
    return run->kept ? sb_json_root(run->kept) : NULL;
}

/* What the kind said it awaits, else the stage's name as the slot: a
 * caller must always be able to tell that it was asked something. */
void rt_run_awaiting_json(const rt_run *run, sb_jw *w) {
    if (run->awaiting) {
        sb_json_doc *d;
        if (!sb_json_parse(run->awaiting, strlen(run->awaiting), &d, NULL)) {
            sb_jw_value(w, sb_json_root(d));
            sb_json_doc_free(d);
            return;
        }
    }
    sb_jw_obj(w);
    sb_jw_key(w, "kind"); sb_jw_str(w, "slot");
    sb_jw_key(w, "slot"); sb_jw_str(w, run->p->stages[run->cur].name);
    sb_jw_obj_end(w);
}

bool rt_run_streams(const rt_run *run) { return run->sink.delta && is_answer_stage(run, run->cur); }

/* Whatever the running stage holds, when the run ends under it. */
static void stop_stage(rt_run *run) {
    rt_job_cancel(run->job);
    run->job = NULL;
    const rt_stage_kind *k = running_kind(run);
    if (k && k->stop) k->stop(run);
}

static void on_run_timeout(evutil_socket_t fd, short what, void *arg) {
    rt_run *run = arg;
    stop_stage(run);
    char ms[32];
    snprintf(ms, sizeof ms, "%d", run->p->timeout_ms);
    rt_stage_fail(run, 504, "timeout", "pipeline did not finish within its timeout_ms (%s ms)%s", ms, "");
    finish(run);
}

/* ------------------------------------------------------- generations */

void rt_conf_release(rt_conf *c) {
    if (!c || --c->refs > 0) return;
    for (rt_prior *p = c->priors, *n; p; p = n) {
        n = p->next;
        sb_free(p);
    }
    rt_intent_free_all(c);
    rt_retrieve_free_all(c);
    sb_pipelines_free(c->pipes);
    sb_config_free(c->cfg);
    sb_free(c);
}

rt_conf *rt_conf_acquire(rt_exec *ex) {
    if (ex->conf) ex->conf->refs++;
    return ex->conf;
}

/* --------------------------------------------------------------- runs */

int rt_pipeline_resolve(rt_exec *ex, const char *name, const char *until, rt_pipeline_ref *out, char *err) {
    rt_conf *c = rt_conf_acquire(ex);
    const sb_pipeline *p = c ? sb_pipelines_find(c->pipes, name) : NULL;
    int at = p && until ? sb_pipeline_stage_index(p, until) : -1;
    *out = (rt_pipeline_ref){ c, p, at };
    if (p && (!until || at >= 0)) return 0;
    rt_pipeline_ref_release(out);
    if (!p) return sb_seterr(err, SB_ENOTFOUND, "no pipeline named '%s'", name);
    return sb_seterr(err, SB_EINVAL, "pipeline '%s' has no stage '%.60s'", name, until);
}

void rt_pipeline_ref_release(rt_pipeline_ref *ref) {
    rt_conf_release(ref->conf);
    *ref = (rt_pipeline_ref){ NULL, NULL, -1 };
}

int rt_run_start(rt_exec *ex, const char *name, const char *input, const rt_sink *sink, rt_run **out, char *err) {
    rt_pipeline_ref ref;
    *out = NULL;
    int rc = rt_pipeline_resolve(ex, name, NULL, &ref, err);
    return rc ? rc : rt_run_start_ref(ex, &ref, input, sink, out, err);
}

int rt_run_start_ref(rt_exec *ex, rt_pipeline_ref *ref, const char *input, const rt_sink *sink, rt_run **out,
                     char *err) {
    return rt_run_start_at(ex, ref, -1, NULL, NULL, input, sink, out, err);
}

/* The slots a session kept, as the JSON of the stage that gathers them:
 * the stage that asked, or the last before it that gathers slots (a
 * confirmation reads back what an earlier stage gathered); with none,
 * they are carried (rt_run_carry_slots). */
static int restore_slots(rt_run *run, size_t stage, const char *slots) {
    int at = -1;
    for (size_t i = 0; i <= stage; i++) {
        const sb_stage *s = &run->p->stages[i];
        if (rt_stage_kind_of(s)->gathers && rt_stage_kind_of(s)->gathers(s, NULL)) at = (int)i;
    }
    if (at < 0) return slots ? rt_run_carry_slots(run, slots) : 0;
    stage_res *sr = &run->res[at];
    if (slots && !sb_json_parse(slots, strlen(slots), &sr->doc, NULL)) {
        sr->json = sb_json_root(sr->doc);
        if (sb_json_type_of(sr->json) != SB_JSON_OBJECT) {
            sb_json_doc_free(sr->doc);
            sr->doc = NULL;
            sr->json = NULL;
        }
    }
    if (sr->json) run->slots_stage = at;
    return 0;
}

int rt_run_start_at(rt_exec *ex, rt_pipeline_ref *ref, int stage, const char *intent, const char *slots,
                    const char *input, const rt_sink *sink, rt_run **out, char *err) {
    *out = NULL;
    rt_conf *c = ref->conf;
    const sb_pipeline *p = ref->p;
    int until = ref->until;
    *ref = (rt_pipeline_ref){ NULL, NULL, -1 };     /* the run holds the generation now */
    rt_run *run = sb_calloc(1, sizeof *run);
    if (!run) { rt_conf_release(c); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    run->ex = ex;
    run->conf = c;
    run->p = p;
    run->sink = *sink;
    run->intent_stage = -1;
    run->last_ran = -1;
    run->until = until;
    run->t0 = sb_now_s();
    run->input = sb_strdup(input);
    run->res = sb_calloc(p->n_stages, sizeof *run->res);
    run->outputs = sb_calloc(p->n_stages, sizeof *run->outputs);
    run->json = sb_calloc(p->n_stages, sizeof *run->json);
    run->timer = evtimer_new(ex->be.base, on_run_timeout, run);
    run->kick = evtimer_new(ex->be.base, step_cb, run);
    /* At a stage that asked, in a run that is gone: its turn is the answer,
     * the intent the one the session kept; the stages before it did not
     * run here. */
    bool at = stage >= 0 && (size_t)stage < p->n_stages;
    run->slots_stage = -1;
    if (at && run->res) {
        run->cur = (size_t)stage;
        run->turn = sb_strdup(input);
        if (intent) run->intent = sb_strdup(intent);
        if (restore_slots(run, run->cur, slots)) run->cur = p->n_stages;  /* out of memory: caught below */
    }
    if (!run->input || !run->res || !run->outputs || !run->json || !run->timer || !run->kick ||
        (at && (!run->turn || (intent && !run->intent) || run->cur == p->n_stages))) {
        run_free(run);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    struct timeval tv = { p->timeout_ms / 1000, (p->timeout_ms % 1000) * 1000 };
    evtimer_add(run->timer, &tv);
    schedule(run);
    *out = run;
    return 0;
}

static void run_free(rt_run *run) {
    if (!run) return;
    stop_stage(run);
    for (size_t i = 0; run->res && i < run->p->n_stages; i++) {
        sb_free(run->res[i].output);
        sb_free(run->res[i].reply);
        sb_free(run->res[i].error);
        sb_free(run->res[i].input);
        sb_json_doc_free(run->res[i].doc);
    }
    sb_free(run->res);
    sb_free(run->outputs);
    sb_free(run->json);
    sb_free(run->input);
    sb_free(run->intent);
    sb_free(run->turn);
    sb_free(run->awaiting);
    rt_topic_free(run);
    if (run->timer) event_free(run->timer);
    if (run->kick) event_free(run->kick);
    rt_conf_release(run->conf);
    sb_free(run);
}

void rt_run_cancel(rt_run *run) { run_free(run); }     /* which stops the running stage */

double rt_run_model_seconds(const rt_run *run) { return run->model_s; }
const char *rt_run_pipeline(const rt_run *run) { return run->p->name; }
const sb_pipeline *rt_run_pipe(const rt_run *run) { return run->p; }
const char *rt_run_input(const rt_run *run) { return run->input; }
void rt_run_set_privacy(rt_run *run, sb_pii_table *t) { run->pii = t; }
bool rt_run_uncacheable(const rt_run *run) { return run->uncacheable; }
double rt_run_t0(const rt_run *run) { return run->t0; }

/* A stored JSON text as a value (ours, so it parses; if not: null). */
static void json_text(sb_jw *w, const char *text) {
    sb_json_doc *d;
    if (!text || sb_json_parse(text, strlen(text), &d, NULL)) { sb_jw_null(w); return; }
    sb_jw_value(w, sb_json_root(d));
    sb_json_doc_free(d);
}

/* Where the call stands: beside `output`, which `reply` equals. */
static void turn_json(const rt_run *run, const rt_turn_view *t, sb_jw *w) {
    sb_jw_key(w, "reply"); sb_jw_str(w, t && t->reply ? t->reply : run_output(run));
    sb_jw_key(w, "session"); sb_jw_str(w, t ? t->session : NULL);
    sb_jw_key(w, "state");
    sb_jw_obj(w);
    sb_jw_key(w, "intent"); sb_jw_str(w, run->intent);
    sb_jw_key(w, "slots");
    if (rt_run_slots(run)) sb_jw_value(w, rt_run_slots(run));
    else if (t && t->slots) json_text(w, t->slots);
    else { sb_jw_obj(w); sb_jw_obj_end(w); }
    sb_jw_key(w, "turn"); sb_jw_int(w, t ? t->turn : 1);
    sb_jw_obj_end(w);
    sb_jw_key(w, "awaiting"); json_text(w, t ? t->awaiting : NULL);
    sb_jw_key(w, "fallback"); sb_jw_bool(w, run->fell_back);
    sb_jw_key(w, "handoff"); json_text(w, t ? t->handoff : NULL);
    sb_jw_key(w, "done"); sb_jw_bool(w, t && t->done);
}

/* trace: also each stage's input and model, whether the intent fell back
 * and the time to the first streamed token (GET /v1/calls/ID). */
static void result_json(const rt_run *run, const rt_turn_view *turn, sb_jw *w, bool trace) {
    static const char *const status[] = { "not_run", "ok", "skipped", "error" };
    const sb_pipeline *p = run->p;
    sb_jw_obj(w);
    if (trace) {
        sb_jw_key(w, "fallback"); sb_jw_bool(w, run->fell_back);
        sb_jw_key(w, "ttft_ms");
        if (run->t_first) sb_jw_num(w, (double)(int64_t)((run->t_first - run->t0) * 1e4) / 10); else sb_jw_null(w);
    }
    sb_jw_key(w, "pipeline"); sb_jw_str(w, p->name);
    sb_jw_key(w, "intent"); sb_jw_str(w, run->intent);
    sb_jw_key(w, "confidence");
    if (run->intent) sb_jw_num(w, run->confidence); else sb_jw_null(w);
    sb_jw_key(w, "probabilities");
    const sb_stage *is = run->intent_stage >= 0 ? &p->stages[run->intent_stage] : NULL;
    if (is && rt_stage_kind_of(is)->result_json) rt_stage_kind_of(is)->result_json(run, is, w);
    else sb_jw_null(w);
    sb_jw_key(w, "stages");
    sb_jw_arr(w);
    for (size_t i = 0; i < p->n_stages; i++) {
        const stage_res *sr = &run->res[i];
        sb_jw_obj(w);
        sb_jw_key(w, "name"); sb_jw_str(w, p->stages[i].name);
        sb_jw_key(w, "kind"); sb_jw_str(w, rt_stage_kind_of(&p->stages[i])->name);
        sb_jw_key(w, "status"); sb_jw_str(w, status[sr->status]);
        sb_jw_key(w, "output"); sb_jw_str(w, sr->output);
        if (sr->reply) { sb_jw_key(w, "reply"); sb_jw_str(w, sr->reply); }
        if (sr->json) { sb_jw_key(w, "json"); sb_jw_value(w, sr->json); }
        if (sr->error) { sb_jw_key(w, "error"); sb_jw_str(w, sr->error); }
        sb_jw_key(w, "ms"); sb_jw_num(w, (double)(int64_t)(sr->ms * 10) / 10);
        if (trace) {
            sb_jw_key(w, "model"); sb_jw_str(w, p->stages[i].model);
            sb_jw_key(w, "input"); sb_jw_str(w, sr->input);
            /* When it started, from the run's start (µs): the waterfall of
             * OTel spans; a stage running when the run failed has one too. */
            sb_jw_key(w, "start_ms");
            if (sr->t_start > 0) sb_jw_num(w, (double)(int64_t)((sr->t_start - run->t0) * 1e6) / 1e3); else sb_jw_null(w);
            sb_jw_key(w, "usage");
            sb_jw_obj(w);
            sb_jw_key(w, "prompt_tokens"); sb_jw_int(w, sr->prompt_tokens);
            sb_jw_key(w, "completion_tokens"); sb_jw_int(w, sr->completion_tokens);
            sb_jw_obj_end(w);
        }
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    sb_jw_key(w, "output"); sb_jw_str(w, turn && turn->reply ? turn->reply : run_output(run));
    if (!trace) turn_json(run, turn, w);
    int pt, ct;
    run_usage(run, &pt, &ct);
    sb_jw_key(w, "usage");
    sb_jw_obj(w);
    sb_jw_key(w, "prompt_tokens"); sb_jw_int(w, pt);
    sb_jw_key(w, "completion_tokens"); sb_jw_int(w, ct);
    sb_jw_obj_end(w);
    sb_jw_key(w, "ms"); sb_jw_num(w, (double)(int64_t)((sb_now_s() - run->t0) * 1e4) / 10);
    sb_jw_obj_end(w);
}

void rt_run_result_json(const rt_run *run, sb_jw *w) { result_json(run, NULL, w, false); }
void rt_run_result_turn_json(const rt_run *run, const rt_turn_view *turn, sb_jw *w) {
    result_json(run, turn, w, false);
}
void rt_run_trace_json(const rt_run *run, sb_jw *w) { result_json(run, NULL, w, true); }
bool rt_run_fell_back(const rt_run *run) { return run->fell_back; }
const char *rt_run_intent(const rt_run *run) { return run->intent; }

void rt_pipeline_fingerprint(rt_exec *ex, const rt_pipeline_ref *ref, char *out, bool *cacheable) {
    rt_conf *c = ref->conf;
    const sb_pipeline *p = ref->p;
    sb_sha256_ctx h;
    sb_sha256_init(&h);
    sb_sha256_update(&h, p->digest, sizeof p->digest);
    bool ok = p->cache;
    for (size_t i = 0; i < p->n_stages; i++) {
        const sb_stage *s = &p->stages[i];
        const char *names[3] = { s->model, s->score_model, s->rerank_model };
        const rt_stage_kind *kind = rt_stage_kind_of(s);
        if (kind->cache_key && !kind->cache_key(c, s, &h)) ok = false;
        for (int k = 0; k < 3; k++) {
            if (!names[k]) continue;
            rt_model *m = rt_model_find(&ex->be, names[k]);
            if (!m || !m->fingerprint[0]) { ok = false; continue; }
            sb_sha256_update(&h, m->fingerprint, strlen(m->fingerprint));
        }
    }
    uint8_t d[SB_SHA256_LEN];
    sb_sha256_final(&h, d);
    sb_hex_encode(d, sizeof d, out);
    *cacheable = ok;
}
