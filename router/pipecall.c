/* pipecall.c - a pipeline call over HTTP, whichever door it came in by
 * (POST /v1/pipelines/NAME, or the model pipeline:NAME on the OpenAI API):
 * its call id, its session (session_door.c), the response cache, the run
 * and its trace. The reply goes
 * through the door's sink (q->reply): no reply shape is written here.
 */
#include <stdio.h>
#include <string.h>

#include "router/obs.h"
#include "router/router_internal.h"

static void run_gone(rt_req *q) {
    rt_run_cancel(q->run);
    q->run = NULL;
}

/* The call's trace (obs.h), recorded before the reply frees q. */
static void trace(rt_req *q, const char *pipeline, const char *input, const rt_run *run, const sb_cache_entry *hit,
                  int status, const char *error) {
    rt_call_info ci = { .call_id = q->call_id, .pipeline = pipeline, .input = input, .run = run,
                        .cached = hit ? (const char *)hit->response : NULL, .cached_len = hit ? hit->response_len : 0,
                        .cache = hit ? "hit" : q->cache_key ? "miss" : "off", .source = "http", .status = status,
                        .error = error, .t0 = q->t0 };
    rt_trace_record(q->r, &ci);
}

/* ------------------------------------------------ the run's sink, in front of the door's */

static void call_delta(void *arg, const char *text, size_t len) {
    rt_req *q = arg;
    q->reply.delta(q->reply.arg, text, len);
}

/* A turn its session could not store. SB_EBUSY: another router took a
 * turn of this session meanwhile (a shared store) - the caller's race, as
 * two turns at once on one router are (session_busy). */
static void unstored(rt_req *q, int rc, const char *err) {
    if (rc == SB_EBUSY)
        rt_req_error(q, 409, "invalid_request_error", "session_busy", "the turn could not be stored: %s", err);
    else
        rt_req_error(q, 500, "server_error", "session_store", "the turn could not be stored: %s", err);
}

/* The whole result is stored, so either door can be answered from it
 * later; the door gets it with the answer. */
static void call_finish(void *arg, const rt_answer *a) {
    rt_req *q = arg;
    q->run = NULL;
    q->on_gone = NULL;
    q->t_model = a->model_s;
    char err[SB_ERR_LEN];
    rt_turn_view view, *turn = NULL;
    if (q->sess) {
        char *reply = sb_malloc(a->len + 1);
        if (reply) { memcpy(reply, a->text, a->len); reply[a->len] = '\0'; }
        int rc = reply ? rt_turn_commit(q, q->pipe, a->run, rt_run_input(a->run), reply, &view, err)
                       : sb_seterr(err, SB_ENOMEM, "out of memory");
        sb_free(reply);
        if (rc) {           /* unstored, so unsaid: the next turn must not miss it */
            trace(q, rt_run_pipeline(a->run), rt_run_input(a->run), a->run, NULL, 500, err);
            unstored(q, rc, err);
            return;
        }
        turn = &view;
    }
    trace(q, rt_run_pipeline(a->run), rt_run_input(a->run), a->run, NULL, 200, NULL);
    sb_jw w;
    sb_jw_init(&w);
    rt_run_result_turn_json(a->run, turn, &w);
    rt_answer out = *a;
    if (!w.oom) {
        if (!turn && !rt_run_uncacheable(a->run)) rt_cache_store(q, w.p, w.len);
        out.result = w.p;
        out.result_len = w.len;
    }
    q->reply.finish(q->reply.arg, &out);
    sb_jw_free(&w);
}

/* A stage asks the caller (only a session's turn has an ask): the turn is
 * stored with the question as its reply, the run kept for the next turn. */
static void call_ask(void *arg, const rt_answer *a) {
    rt_req *q = arg;
    rt_run *run = q->run;
    q->run = NULL;
    q->on_gone = NULL;
    q->t_model = a->model_s;
    char err[SB_ERR_LEN];
    rt_turn_view view;
    char *question = sb_malloc(a->len + 1);
    if (question) { memcpy(question, a->text, a->len); question[a->len] = '\0'; }
    int rc = question ? rt_turn_asked(q, q->pipe, a->run, rt_run_input(a->run), question, &view, err)
                      : sb_seterr(err, SB_ENOMEM, "out of memory");
    trace(q, rt_run_pipeline(a->run), rt_run_input(a->run), a->run, NULL, rc ? 500 : 200, rc ? err : NULL);
    if (rc) {
        rt_run_cancel(run);
        unstored(q, rc, err);
        sb_free(question);
        return;
    }
    sb_jw w;
    sb_jw_init(&w);
    rt_run_result_turn_json(a->run, &view, &w);
    rt_answer out = *a;
    out.text = question;
    out.finish_reason = "stop";
    if (!w.oom) { out.result = w.p; out.result_len = w.len; }
    /* The call's table is freed with this request; the next turn's
     * request attaches its own (resume). */
    rt_run_set_privacy(run, NULL);
    if (view.done) rt_run_cancel(run);
    else rt_waiting_put(q->r, q->sess, run, q->pipe->conv.ttl_s);
    q->reply.finish(q->reply.arg, &out);
    sb_jw_free(&w);
    sb_free(question);
}

static void call_error(void *arg, const rt_failure *f) {
    rt_req *q = arg;
    q->run = NULL;
    q->on_gone = NULL;
    if (q->sess) rt_turn_failed(q, q->pipe);
    q->t_model = rt_run_model_seconds(f->run);
    trace(q, rt_run_pipeline(f->run), rt_run_input(f->run), f->run, NULL, f->status, f->message);
    q->reply.error(q->reply.arg, f);
}

/* ---------------------------------------------------------------- cache */

/* The stored result as the door's answer: its output and usage. A result
 * that cannot be read is still the pipeline API's reply (its bytes), but
 * no answer for the OpenAI door: false, a miss. */
static bool stored_answer(rt_req *q, const sb_cache_entry *e, sb_json_doc **d, rt_answer *a) {
    *a = (rt_answer){ .text = "", .finish_reason = "stop", .cached = true, .result = (const char *)e->response,
                      .result_len = e->response_len };
    if (sb_json_parse((const char *)e->response, e->response_len, d, NULL)) {
        *d = NULL;
        return q->route == RT_ROUTE_PIPELINES;
    }
    const sb_json *o = sb_json_root(*d), *out = sb_json_get(o, "output"), *u = sb_json_get(o, "usage");
    a->prompt_tokens = (int)sb_json_num(sb_json_get(u, "prompt_tokens"));
    a->completion_tokens = (int)sb_json_num(sb_json_get(u, "completion_tokens"));
    if (sb_json_str(out)) a->text = sb_json_str(out);
    a->len = strlen(a->text);
    return true;
}

/* 1: answered from the cache. */
static int try_cache(rt_req *q, const rt_pipeline_ref *ref, const char *input, const char *until) {
    char fp[SB_CACHE_KEY_HEX], ns[128], params[160];
    bool cacheable;
    const char *name = ref->p->name;
    rt_pipeline_fingerprint(&q->r->ex, ref, fp, &cacheable);
    if (!cacheable) return 0;
    snprintf(ns, sizeof ns, "pipeline:%s", name);
    sb_cache_entry e;
    unsigned fold = ref->p->cache_fold;     /* opt-in key folding, as SB_NORM_* flags */
    /* The folding is named in the key, so answers stored under one setting
     * are never served under another. v2: the result gained reply, session,
     * state, awaiting, fallback, handoff and done; a v1 answer lacks them. */
    snprintf(params, sizeof params, "pipeline/v2|prompt=" RT_PROMPT_RULES "|until=%.60s%s%s", until ? until : "",
             fold ? "|fold=" : "", sb_cache_fold_name(fold));
    if (rt_cache_lookup(q, ns, fp, input, SB_NORM_DEFAULT | fold, params, &e) != 1) return 0;
    sb_json_doc *d;
    rt_answer a;
    bool hit = stored_answer(q, &e, &d, &a);
    if (hit) {
        trace(q, name, input, NULL, &e, 200, NULL);
        q->reply.finish(q->reply.arg, &a);
    }
    sb_json_doc_free(d);
    sb_cache_entry_free(&e);
    return hit;
}

/* ----------------------------------------------------------------- calls */

/* The call's id: the caller's X-Call-Id when valid, else a new one. */
static bool call_id(rt_req *q) {
    const char *h = rt_req_header(q, "X-Call-Id");
    if (h && !rt_call_id_valid(h)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_call_id",
                     "X-Call-Id: expected 1-%d characters of A-Z a-z 0-9 . _ : -, the first a letter or digit",
                     RT_CALL_ID_MAX);
        return false;
    }
    if (h) snprintf(q->call_id, sizeof q->call_id, "%s", h);
    else rt_call_id_new(q->r, q->call_id);
    return true;
}

/* The session's suspended run, if this router still has it, goes on with
 * this turn as the answer, replying to this request. true: it runs. */
static bool resume(rt_req *q, const char *input, const rt_sink *sink) {
    rt_run *run = rt_waiting_take(q->r, q->sess);
    char err[SB_ERR_LEN];
    if (!run) return false;
    /* The table the run had went with the request that started it. */
    rt_privacy_attach(q->privacy, run);
    if (rt_run_resume_to(run, input, sink, err)) {
        rt_run_cancel(run);
        return false;
    }
    q->run = run;
    q->pipe = rt_run_pipe(run);     /* the generation the run holds, maybe older than the current one */
    q->on_gone = run_gone;
    rt_req_set_deadline(q, q->pipe->timeout_ms + 5000);
    return true;
}

/* The pipeline, its config generation and `until` are resolved once, here,
 * before any work: an unknown pipeline or stage is the caller's 404 or 400
 * without a cache lookup or a run; the cache and the run then use what was
 * resolved. */
void rt_pipeline_call(rt_req *q, const char *name, const char *input, const char *until, const char *session) {
    if (!call_id(q)) return;
    char err[SB_ERR_LEN];
    rt_pipeline_ref ref;
    int rc = rt_pipeline_resolve(&q->r->ex, name, until, &ref, err);
    if (rc == SB_EINVAL) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'until': %s", err);
        return;
    }
    if (rc == SB_ENOTFOUND) {
        rt_req_error(q, 404, "invalid_request_error", q->route == RT_ROUTE_PIPELINES ? "pipeline_not_found" : "model_not_found",
                     "%s (GET /v1/pipelines lists them)", err);
        return;
    }
    if (rc) { rt_req_error(q, 500, "server_error", "internal", "%s", err); return; }
    /* The session first: its kept values seed the privacy door's table (a
     * value keeps its placeholder across turns). It stores nothing of this
     * turn's words; the door gives the session the redacted ones. */
    if (rt_turn_begin(q, ref.p, session, input)) { rt_pipeline_ref_release(&ref); return; }
    /* From here on nothing sees the caller's personal data (privacy_door.c). */
    if (!rt_privacy_door(q, ref.p, &input)) { rt_pipeline_ref_release(&ref); return; }
    /* A turn of a session depends on the session: never cached. */
    if (!q->sess && try_cache(q, &ref, input, until)) { rt_pipeline_ref_release(&ref); return; }
    /* A session's turn is not streamed: no byte of it may go out before
     * the turn is stored; a caller who asked for SSE gets it in one chunk. */
    rt_sink sink = { q->reply.delta && !q->sess ? call_delta : NULL, call_finish, call_error, q,
                     q->sess ? call_ask : NULL };
    if (q->sess && q->sess->stage >= 0 && resume(q, input, &sink)) {
        rt_pipeline_ref_release(&ref);
        return;
    }
    q->pipe = ref.p;            /* held by the run, which outlives every use of it here */
    int timeout_ms = ref.p->timeout_ms;
    /* A session that waits on an answer whose run is gone (a restart)
     * starts a run at the stage that asked. */
    rc = q->sess && q->sess->stage >= 0
             ? rt_run_start_at(&q->r->ex, &ref, q->sess->stage, q->sess->intent, q->sess->slots, input, &sink,
                               &q->run, err)
             : rt_run_start_ref(&q->r->ex, &ref, input, &sink, &q->run, err);
    if (!rc && (rc = rt_turn_context(q, q->pipe, q->run, q->sess && q->sess->stage < 0, err))) {
        rt_run_cancel(q->run);
        q->run = NULL;
    }
    if (rc) {
        rt_req_error(q, 500, "server_error", "internal", "%s", err);
        return;
    }
    rt_privacy_attach(q->privacy, q->run);
    q->on_gone = run_gone;
    rt_req_set_deadline(q, timeout_ms + 5000);
}
