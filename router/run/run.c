/* run.c - executing a pipeline: one stage at a time, all on the loop.
 *
 * A run walks its stages in order. A stage whose `when:` does not match the
 * intent is skipped; an intent stage (run_intent.c) scores every label with the worker's
 * `score` (one shared prompt, one call); a generate stage calls `generate`;
 * a tool stage runs a child process or an HTTP request (tool.c). Each step
 * starts asynchronous work and returns; its callback records the result and
 * schedules the next step, so a hundred runs interleave on one thread.
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

#include "router/run/run_internal.h"
#include "kb/sb_kb.h"

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

int rt_run_score(rt_run *run, const sb_stage *s, const char *model, rt_score_req *r, rt_done_fn on_done, char *err) {
    rt_model *m = stage_model(run, model, err);
    if (!m) return SB_EIO;
    r->priority = s->priority;
    return submitted(run, m, rt_model_submit_score(m, r, m->deadline_ms, on_done, run, &run->job, err));
}

int rt_run_embed(rt_run *run, const sb_stage *s, const char *text, size_t len, rt_done_fn on_done, char *err) {
    rt_model *m = stage_model(run, s->model, err);
    if (!m) return SB_EIO;
    rt_embed_req r = { .kind = "query", .texts = &text, .lens = &len, .n = 1, .priority = s->priority };
    return submitted(run, m, rt_model_submit_embed(m, &r, m->deadline_ms, on_done, run, &run->job, err));
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
                          run->json };
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
static bool json_fits(stage_res *sr) {
    if (!sr->json || sb_json_depth(sr->json) <= SB_JSON_MAX_DEPTH - RESULT_JSON_DEPTH) return true;
    sb_json_doc_free(sr->doc);
    sr->doc = NULL;
    sr->json = NULL;
    return false;
}

static const char *run_output(const rt_run *run) {
    int i = run->p->output >= 0 ? run->p->output : run->last_ran;
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

void rt_run_fail(rt_run *run, int status, const char *type, const char *fmt, const char *a, const char *b) {
    run->fail_status = status;
    run->fail_type = type;
    snprintf(run->fail_msg, sizeof run->fail_msg, fmt, a, b);
    finish(run);
}

void rt_run_stage_done(rt_run *run, int status, const char *error) {
    stage_res *sr = &run->res[run->cur];
    sr->status = status;
    sr->ms = (sb_now_s() - run->t_stage) * 1e3;
    if (error) sr->error = sb_strdup(error);
    if (status == ST_OK || status == ST_ERROR) run->last_ran = (int)run->cur;
    rt_observe(&run->ex->be, RT_H_STAGE, run->p->name, run->p->stages[run->cur].name, sr->ms / 1e3);
    run->cur++;
    schedule(run);
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

/* ----------------------------------------------------------- generate */

static void on_gen_token(void *arg, const char *t, size_t n) {
    rt_run *run = arg;
    if (!run->t_first) {
        run->t_first = sb_now_s();
        rt_observe(&run->ex->be, RT_H_TTFT_PIPELINE, run->p->name, NULL, run->t_first - run->t0);
    }
    if (run->sink.delta) run->sink.delta(run->sink.arg, t, n);
}

static char *trimmed(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
    char *o = sb_malloc(n + 1);
    if (o) { memcpy(o, s, n); o[n] = '\0'; }
    return o;
}

static void on_generated(void *arg, const rt_reply *res) {
    rt_run *run = arg;
    run->job = NULL;
    const sb_stage *s = &run->p->stages[run->cur];
    stage_res *sr = &run->res[run->cur];
    if (!res->ok) {
        const char *type;
        int st = rt_worker_error_status(res->code, &type);
        rt_run_fail(run, st, type, "stage '%s': %s", s->name, res->message ? res->message : "failed");
        return;
    }
    const char *text = res->gen.text;
    size_t len = res->gen.len;
    int64_t pt = res->gen.prompt_tokens <= INT32_MAX ? res->gen.prompt_tokens : 0;
    int64_t ct = res->gen.completion_tokens <= INT32_MAX ? res->gen.completion_tokens : 0;
    run->model_s += (res->gen.prompt_ms + res->gen.gen_ms) / 1e3;
    sr->prompt_tokens = (int)pt;
    sr->completion_tokens = (int)ct;
    sr->output = trimmed(text, len);
    if (s->json) {
        sr->json = sb_json_extract_object(text, len, &sr->doc);
        if (!sr->json) { rt_run_stage_done(run, ST_ERROR, "the model's output holds no valid JSON object"); return; }
        if (!json_fits(sr)) { rt_run_stage_done(run, ST_ERROR, "the model's JSON object is nested too deeply"); return; }
    }
    rt_run_stage_done(run, ST_OK, NULL);
}

/* What a generate stage asks of its model, besides the prompt. */
static void gen_from_stage(rt_gen_req *g, const sb_stage *s, bool stream) {
    g->stream = stream;
    g->priority = s->priority;
    g->sampling = s->sampling;
    g->has_seed = s->sampling.seed >= 0;
    for (size_t i = 0; i < s->n_stops && i < RT_GEN_MAX_STOPS; i++) {
        g->stops[i] = s->stops[i];
        g->stop_lens[i] = strlen(s->stops[i]);
        g->n_stops++;
    }
    g->json_schema = s->json_schema;
    g->json_schema_len = s->json_schema ? strlen(s->json_schema) : 0;
}

static int start_generate(rt_run *run, const sb_stage *s, bool stream, char *err) {
    sb_tmpl_env env = rt_run_env(run);
    sb_segs sys, prompt;
    sb_segs_init(&sys);
    sb_segs_init(&prompt);
    if (s->system) sb_tmpl_render_segs(s->system, &env, &sys);
    sb_tmpl_render_segs(s->prompt, &env, &prompt);
    rt_run_keep_input(run, prompt.text.p, prompt.text.len);
    rt_gen_req g;
    rt_gen_init(&g);
    gen_from_stage(&g, s, stream);
    int rc = rt_gen_set_prompt(&g, s->chat, s->system != NULL, &sys, &prompt);
    rt_model *m = rc ? NULL : stage_model(run, s->model, err);
    if (rc) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    else if (!m) rc = SB_EIO;
    else rc = submitted(run, m, rt_model_submit_gen(m, &g, m->deadline_ms, stream ? on_gen_token : NULL, on_generated,
                                                    run, &run->job, err));
    rt_gen_free(&g);
    return rc;
}

/* --------------------------------------------------------------- tool */

static void on_tool_done(void *arg, int rc, const char *out, size_t len, const char *err) {
    rt_run *run = arg;
    run->tool = NULL;
    stage_res *sr = &run->res[run->cur];
    sr->output = trimmed(out ? out : "", out ? len : 0);
    if (sr->output && sr->output[0] == '{') {
        sb_json_doc *d;
        if (sb_json_parse(sr->output, strlen(sr->output), &d, NULL) == 0) {
            if (sb_json_type_of(sb_json_root(d)) == SB_JSON_OBJECT) { sr->doc = d; sr->json = sb_json_root(d); }
            else sb_json_doc_free(d);
            json_fits(sr);          /* too deep: the stage keeps its text only */
        }
    }
    rt_run_stage_done(run, rc ? ST_ERROR : ST_OK, rc ? err : NULL);
}

static int start_tool(rt_run *run, const sb_stage *s, char *err) {
    sb_tmpl_env env = rt_run_env(run);
    sb_jw in, args[SB_PIPE_MAX_ARGS];
    char *argv[SB_PIPE_MAX_ARGS + 1] = {0};
    sb_jw_init(&in);
    const sb_tmpl *src = s->url ? s->body : s->stdin_tmpl;
    if (src) sb_tmpl_render(src, &env, &in);
    else if (s->args_from >= 0 && run->res[s->args_from].json) sb_jw_value(&in, run->res[s->args_from].json);
    else if (!s->url && s->args_from < 0) sb_jw_raw(&in, run->input, strlen(run->input));  /* the default stdin */
    int oom = in.oom;
    rt_run_keep_input(run, in.p, in.len);
    for (size_t i = 0; i < s->n_argv; i++) {
        sb_jw_init(&args[i]);
        sb_tmpl_render(s->argv[i], &env, &args[i]);
        sb_jw_raw(&args[i], "", 0);
        oom |= args[i].oom;
        argv[i] = args[i].p;
    }
    char gate[2 * SB_CONFIG_MAX_NAME + 8];
    snprintf(gate, sizeof gate, "%s/%s", run->p->name, s->name);
    rt_tool_spec spec = { s->url ? NULL : argv, s->env, s->url, s->http_post, gate, s->max_concurrent,
                          s->max_queue, s->timeout_ms };
    int rc = oom ? sb_seterr(err, SB_ENOMEM, "out of memory")
                 : rt_tool_start(run->ex, &spec, in.p ? in.p : "", in.len, on_tool_done, run, &run->tool, err);
    for (size_t i = 0; i < s->n_argv; i++) sb_jw_free(&args[i]);
    sb_jw_free(&in);
    return rc;
}

/* ------------------------------------------------------------ retrieve */

/* The retrieve stage's search (and rerank) is over: render its passages
 * and finish the stage. A missing base or a failed search is the stage's
 * error, as for a tool: the pipeline goes on with found false and can hand
 * the call off. */
static void on_retrieved(void *arg, int rc, const char *err) {
    rt_run *run = arg;
    stage_res *sr = &run->res[run->cur];
    char e[SB_ERR_LEN] = "";
    sb_jw text, json;
    sb_jw_init(&text);
    sb_jw_init(&json);
    if (!rc && !(rc = rt_retrieve_render(&run->p->stages[run->cur], run->rr, &text, &json, &sr->found, e))) {
        sr->output = trimmed(text.p ? text.p : "", text.len);
        if (sb_json_parse(json.p, json.len, &sr->doc, NULL) == 0) sr->json = sb_json_root(sr->doc);
        json_fits(sr);
    } else if (rc && err) {
        snprintf(e, sizeof e, "%s", err);
    }
    sb_jw_free(&text);
    sb_jw_free(&json);
    rt_retrieve_free(run->rr);
    run->rr = NULL;
    rt_run_stage_done(run, rc ? ST_ERROR : ST_OK, rc ? e : NULL);
}

/* Search with the query vector (NULL in bm25 mode). */
static void retrieve_with(rt_run *run, const sb_stage *s, const float *qvec, int dim) {
    sb_tmpl_env env = rt_run_env(run);
    sb_jw q;
    sb_jw_init(&q);
    sb_tmpl_render(s->query, &env, &q);
    if (q.oom) on_retrieved(run, SB_ENOMEM, "out of memory");
    else rt_retrieve_start(run->ex, run->conf, s, q.p ? q.p : "", q.len, qvec, dim, &run->job, on_retrieved, run,
                           &run->rr);
    sb_jw_free(&q);
}

static void on_query_embedded(void *arg, const rt_reply *res) {
    rt_run *run = arg;
    run->job = NULL;
    const sb_stage *s = &run->p->stages[run->cur];
    float vec[4096];
    uint32_t dim = rt_run_first_vector(res, vec, 4096);
    run->model_s += sb_now_s() - run->t_stage;
    if (!dim) {
        rt_run_stage_done(run, ST_ERROR, res->ok ? "the encoder returned no vector"
                                          : res->message ? res->message : "the encoder failed");
        return;
    }
    retrieve_with(run, s, vec, (int)dim);
}

static int start_retrieve(rt_run *run, const sb_stage *s, char *err) {
    if (s->kb_mode == SB_KB_BM25) { retrieve_with(run, s, NULL, 0); return 0; }
    sb_tmpl_env env = rt_run_env(run);
    sb_jw q;
    sb_jw_init(&q);
    sb_tmpl_render(s->query, &env, &q);
    rt_run_keep_input(run, q.p, q.len);
    int rc = q.oom ? sb_seterr(err, SB_ENOMEM, "out of memory")
                   : rt_run_embed(run, s, q.p ? q.p : "", q.len, on_query_embedded, err);
    sb_jw_free(&q);
    return rc;
}

/* --------------------------------------------------------------- steps */

static void step(rt_run *run) {
    if (run->done) return;
    while (run->cur < run->p->n_stages && (run->until < 0 || run->cur <= (size_t)run->until)) {
        const sb_stage *s = &run->p->stages[run->cur];
        if (!run->index_wait) run->t_stage = sb_now_s();
        run->index_wait = false;
        if (!when_matches(run, s)) {
            run->res[run->cur].status = ST_SKIPPED;
            run->cur++;
            continue;
        }
        run->res[run->cur].t_start = run->t_stage;
        char err[SB_ERR_LEN];
        int rc;
        if (s->kind == SB_STAGE_RETRIEVE) {
            if ((rc = start_retrieve(run, s, err))) rt_run_stage_done(run, ST_ERROR, err);
            return;
        }
        if (s->kind == SB_STAGE_TOOL) {
            rc = start_tool(run, s, err);
            /* A full tool queue is load, not a broken tool: the caller
             * gets 503 + Retry-After, as for a model's full queue. */
            if (rc == SB_EBUSY) rt_run_fail(run, 503, "server_busy", "stage '%s': %s", s->name, err);
            else if (rc) rt_run_stage_done(run, ST_ERROR, err);
            return;
        }
        if (s->kind == SB_STAGE_INTENT && rt_intent_embeds(run->ex, s)) rc = rt_run_start_intent_embed(run, s, err);
        else if (s->kind == SB_STAGE_INTENT) rc = rt_run_start_intent(run, s, err);
        else rc = start_generate(run, s, run->sink.delta && is_answer_stage(run, run->cur), err);
        if (rc == 1) {              /* its examples are being embedded: look again soon */
            struct timeval soon = { 0, 20000 };
            run->index_wait = true;
            evtimer_add(run->kick, &soon);
            return;
        }
        if (rc) {
            int st = rc == SB_EBUSY || rc == SB_EIO ? 503 : rc == SB_EUNSUP && s->kind != SB_STAGE_INTENT ? 501 : 500;
            rt_run_fail(run, st, rc == SB_EBUSY ? "server_busy" : "model_unavailable", "stage '%s': %s", s->name, err);
        }
        return;
    }
    finish(run);
}

static void on_run_timeout(evutil_socket_t fd, short what, void *arg) {
    rt_run *run = arg;
    rt_job_cancel(run->job);
    run->job = NULL;
    rt_tool_cancel(run->tool);
    run->tool = NULL;
    char ms[32];
    snprintf(ms, sizeof ms, "%d", run->p->timeout_ms);
    rt_run_fail(run, 504, "timeout", "pipeline did not finish within its timeout_ms (%s ms)%s", ms, "");
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
    sb_jw_init(&run->text);
    run->input = sb_strdup(input);
    run->res = sb_calloc(p->n_stages, sizeof *run->res);
    run->outputs = sb_calloc(p->n_stages, sizeof *run->outputs);
    run->json = sb_calloc(p->n_stages, sizeof *run->json);
    run->timer = evtimer_new(ex->be.base, on_run_timeout, run);
    run->kick = evtimer_new(ex->be.base, step_cb, run);
    if (!run->input || !run->res || !run->outputs || !run->json || !run->timer || !run->kick) {
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
    for (size_t i = 0; run->res && i < run->p->n_stages; i++) {
        sb_free(run->res[i].output);
        sb_free(run->res[i].error);
        sb_free(run->res[i].input);
        sb_json_doc_free(run->res[i].doc);
    }
    sb_free(run->res);
    sb_free(run->outputs);
    sb_free(run->json);
    sb_free(run->input);
    sb_free(run->intent);
    sb_jw_free(&run->text);
    rt_retrieve_free(run->rr);
    if (run->timer) event_free(run->timer);
    if (run->kick) event_free(run->kick);
    rt_conf_release(run->conf);
    sb_free(run);
}

void rt_run_cancel(rt_run *run) {
    if (!run) return;
    rt_job_cancel(run->job);
    rt_tool_cancel(run->tool);
    run->job = NULL;
    run->tool = NULL;
    run_free(run);
}

double rt_run_model_seconds(const rt_run *run) { return run->model_s; }
const char *rt_run_pipeline(const rt_run *run) { return run->p->name; }
const char *rt_run_input(const rt_run *run) { return run->input; }
double rt_run_t0(const rt_run *run) { return run->t0; }

/* trace: also each stage's input and model, whether the intent fell back
 * and the time to the first streamed token (GET /v1/calls/ID). */
static void result_json(const rt_run *run, sb_jw *w, bool trace) {
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
    if (run->intent_stage >= 0) {
        const sb_stage *s = &p->stages[run->intent_stage];
        sb_jw_obj(w);
        for (size_t i = 0; i < s->n_labels; i++) {
            sb_jw_key(w, s->labels[i].name);
            sb_jw_num(w, run->probs[i]);
        }
        sb_jw_obj_end(w);
    } else {
        sb_jw_null(w);
    }
    sb_jw_key(w, "stages");
    sb_jw_arr(w);
    for (size_t i = 0; i < p->n_stages; i++) {
        const stage_res *sr = &run->res[i];
        sb_jw_obj(w);
        sb_jw_key(w, "name"); sb_jw_str(w, p->stages[i].name);
        sb_jw_key(w, "kind"); sb_jw_str(w, sb_stage_kind_name(p->stages[i].kind));
        sb_jw_key(w, "status"); sb_jw_str(w, status[sr->status]);
        sb_jw_key(w, "output"); sb_jw_str(w, sr->output);
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
    sb_jw_key(w, "output"); sb_jw_str(w, run_output(run));
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

void rt_run_result_json(const rt_run *run, sb_jw *w) { result_json(run, w, false); }
void rt_run_trace_json(const rt_run *run, sb_jw *w) { result_json(run, w, true); }

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
        /* An answer made from a knowledge base is only as fresh as the
         * base: its content version is part of the key, so `kb add` or a
         * pulled snapshot makes the old answers unreachable. A base that
         * cannot be read makes the call uncacheable. */
        char ver[65], err[SB_ERR_LEN];
        if (s->kind == SB_STAGE_RETRIEVE && rt_retrieve_version(c, s, ver, err)) ok = false;
        else if (s->kind == SB_STAGE_RETRIEVE) sb_sha256_update(&h, ver, sizeof ver);
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
