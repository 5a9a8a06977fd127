/* run_intent.c - a pipeline's intent stage: which label the caller's text is.
 *
 * Two methods (docs/pipelines.md): `score`, one call to a generative model
 * that scores every label after one shared prompt (optionally calibrated by
 * a content-free prior), and `embed`, the caller's vector against the
 * labels' examples; `hybrid` asks the generative model only when the
 * embedding is unsure. Either way the run gets run->intent and its
 * confidence, and the stage's output is the label.
 */
#include <stdio.h>
#include <string.h>

#include "router/run/run_internal.h"

static void set_intent(rt_run *run, const sb_stage *s, double conf, bool rejected);

static void on_scored(void *arg, const rt_reply *res) {
    rt_run *run = arg;
    run->job = NULL;
    const sb_stage *s = &run->p->stages[run->cur];
    run->model_s += sb_now_s() - run->t_stage;
    if (!res->ok) {
        const char *type;
        int st = rt_worker_error_status(res->code, &type);
        rt_run_fail(run, st, type, "intent stage '%s': %s", s->name, res->message ? res->message : "failed");
        return;
    }
    if (res->score.n_probs != s->n_labels) {
        rt_run_fail(run, 502, "server_error", "intent stage '%s': %s", s->name, "the worker returned a wrong number of scores");
        return;
    }
    const rt_prior *pr = s->calibrate ? rt_run_prior(run, s) : NULL;
    for (size_t i = 0; i < s->n_labels; i++) {
        double v = res->score.probs[i];
        if (pr) v /= pr->p[i] > 1e-9 ? pr->p[i] : 1e-9;
        run->probs[i] = v;
    }
    set_intent(run, s, -1, false);
}

/* run->probs holds the labels' unnormalised scores: normalise them and
 * pick the intent (the fallback below min_confidence, or when the
 * embedding classifier's out-of-scope class won). conf < 0: the top
 * label's probability is the confidence. */
static void set_intent(rt_run *run, const sb_stage *s, double conf, bool rejected) {
    size_t best = 0;
    double sum = 0;
    for (size_t i = 0; i < s->n_labels; i++) sum += run->probs[i];
    for (size_t i = 0; i < s->n_labels; i++) {
        run->probs[i] = sum > 0 ? run->probs[i] / sum : 1.0 / (double)s->n_labels;
        if (run->probs[i] > run->probs[best]) best = i;
    }
    run->confidence = conf < 0 ? run->probs[best] : conf;
    const char *label = s->labels[best].name;
    run->fell_back = (rejected || run->confidence < s->min_confidence) && s->fallback;
    if (run->fell_back) label = s->fallback;
    sb_free(run->intent);
    run->intent = sb_strdup(label);
    run->intent_stage = (int)run->cur;
    run->res[run->cur].output = sb_strdup(label);
    rt_run_stage_done(run, ST_OK, NULL);
}


/* Contextual calibration (Zhao et al., 2021): a small model prefers some
 * labels whatever the caller says (the last or shortest label, a familiar
 * word). Its probabilities for a content-free utterance ("N/A") measure that
 * bias once per config; every call's probabilities are divided by them and
 * renormalised. The prior call shares the stage's prompt prefix, so it costs
 * one utterance's worth of compute. */
static void on_prior(void *arg, const rt_reply *res) {
    rt_run *run = arg;
    run->job = NULL;
    const sb_stage *s = &run->p->stages[run->cur];
    if (!res->ok || res->score.n_probs != s->n_labels) {
        const char *type;
        int st = res->ok ? 502 : rt_worker_error_status(res->code, &type);
        rt_run_fail(run, st, res->ok ? "server_error" : type, "intent stage '%s' (calibration): %s", s->name,
             res->message ? res->message : "bad scores");
        return;
    }
    rt_prior *pr = rt_run_prior(run, s);
    if (!pr && (pr = sb_calloc(1, sizeof *pr))) {
        pr->stage = s;
        for (size_t i = 0; i < s->n_labels; i++) pr->p[i] = res->score.probs[i];
        pr->next = run->conf->priors;
        run->conf->priors = pr;
    }
    char err[SB_ERR_LEN];
    run->calibrating = false;
    int rc = rt_run_start_intent(run, s, err);
    if (rc) rt_run_fail(run, rc == SB_EBUSY || rc == SB_EIO ? 503 : 500, "model_unavailable", "stage '%s': %s", s->name, err);
}

int rt_run_start_intent(rt_run *run, const sb_stage *s, char *err) {
    sb_tmpl_env env = rt_run_env(run);
    rt_gen_msg msgs[2] = { { .role = "system" }, { .role = "user" } };
    sb_segs *pre = &msgs[0].content, *user = &msgs[1].content;
    sb_segs_init(pre);
    sb_segs_init(user);
    sb_intent_preamble(s, &env, pre);
    run->calibrating = s->calibrate && !rt_run_prior(run, s);
    sb_intent_caller(s, &env, run->calibrating, user);
    rt_run_keep_input(run, user->text.p, user->text.len);
    /* Chat: the fixed preamble is the system message, so the worker's KV
     * prefix reuse covers it; the answer is the assistant's turn. Raw: one
     * prompt, each label a continuation after a space. */
    char cand[SB_PIPE_MAX_LABELS][SB_CONFIG_MAX_NAME + 2];
    const char *cands[SB_PIPE_MAX_LABELS];
    for (size_t i = 0; i < s->n_labels; i++) {
        snprintf(cand[i], sizeof cand[i], "%s%s", s->chat ? "" : " ", s->labels[i].name);
        cands[i] = cand[i];
    }
    rt_score_req r = { .kind = s->chat ? RT_KIND_CHAT : RT_KIND_COMPLETION, .msgs = msgs, .n_msgs = 2, .prompt = pre,
                       .candidates = cands, .n_candidates = s->n_labels };
    if (s->chat) {
        sb_segs_add(pre, "\nAnswer with the intent name only.", 34, true);
    } else {
        sb_segs_add(pre, "\n", 1, true);
        sb_segs_cat(pre, user);
    }
    int rc = pre->oom || user->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    /* hybrid: the embedding was unsure, the generative model decides. */
    const char *model = s->method == SB_INTENT_HYBRID ? s->score_model : s->model;
    if (!rc) rc = rt_run_score(run, s, model, &r, run->calibrating ? on_prior : on_scored, err);
    sb_segs_free(pre);
    sb_segs_free(user);
    return rc;
}

/* An embedding stage: the caller's vector against the stage's examples.
 * The result has the score method's shape: probabilities over the labels
 * (the out-of-scope class, when trained, is not a label: its winning sends
 * the call to the fallback, with its probability as the confidence). */
static void on_embedded(void *arg, const rt_reply *res) {
    rt_run *run = arg;
    run->job = NULL;
    const sb_stage *s = &run->p->stages[run->cur];
    const sb_classifier *cls = NULL;
    char err[SB_ERR_LEN];
    if (!res->ok) {
        const char *type;
        int st = rt_worker_error_status(res->code, &type);
        rt_run_fail(run, st, type, "intent stage '%s': %s", s->name, res->message ? res->message : "failed");
        return;
    }
    float vec[4096];
    uint32_t dim = rt_run_first_vector(res, vec, 4096);
    if (rt_intent_classifier(run->ex, run->conf, s, &cls, err) != 0 || dim == 0) {
        rt_run_fail(run, 502, "server_error", "intent stage '%s': %s", s->name, "the encoder's vector does not fit the index");
        return;
    }
    sb_cls_result cr;
    if (sb_cls_classify(cls, vec, &cr)) {
        rt_run_fail(run, 502, "server_error", "intent stage '%s': %s", s->name, "the encoder's vector does not fit the index");
        return;
    }
    if (s->method == SB_INTENT_HYBRID && cr.n > 1 && cr.margin < s->hybrid_margin) {
        int rc = rt_run_start_intent(run, s, err);
        if (rc) rt_run_fail(run, rc == SB_EBUSY || rc == SB_EIO ? 503 : 500, "model_unavailable", "stage '%s': %s", s->name, err);
        return;
    }
    for (size_t i = 0; i < s->n_labels; i++) run->probs[i] = 0;
    for (int k = 0; k < cr.n; k++)
        if (cr.idx[k] < (int)s->n_labels) run->probs[cr.idx[k]] = cr.prob[k];
    run->model_s += sb_now_s() - run->t_stage;
    set_intent(run, s, cr.confidence, cr.rejected);
}

/* 1: the stage's index is still being built (step polls again). */
int rt_run_start_intent_embed(rt_run *run, const sb_stage *s, char *err) {
    const sb_classifier *cls;
    int rc = rt_intent_classifier(run->ex, run->conf, s, &cls, err);
    if (rc) return rc;
    sb_tmpl_env env = rt_run_env(run);
    sb_jw u;
    sb_jw_init(&u);
    sb_tmpl_render(s->utterance, &env, &u);
    rt_run_keep_input(run, u.p, u.len);
    rc = u.oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : rt_run_embed(run, s, u.p ? u.p : "", u.len, on_embedded, err);
    sb_jw_free(&u);
    return rc;
}
