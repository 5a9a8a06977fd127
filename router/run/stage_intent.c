/* stage_intent.c - kind: intent. Which label the caller's text is.
 *
 * Two methods (docs/pipelines.md): `score`, one call to a generative model
 * that scores every label after one shared prompt (optionally calibrated by
 * a content-free prior), and `embed`, the caller's vector against the
 * labels' examples; `hybrid` asks the generative model only when the
 * embedding is unsure. Either way the run gets run->intent and its
 * confidence, and the stage's output is the label.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/run/stage_internal.h"
#include "router/classify/sb_classify.h"

/* ------------------------------------------------------------ loading */

#define S(f) offsetof(sb_stage, f)
static const sb_cfg_key intent_keys[] = {
    RT_KEY("model"), RT_KEY("system"), RT_KEY("chat"), RT_KEY("labels"),
    { "min_confidence", SB_KEY_NUM, 0, 1, S(min_confidence), NULL },
    RT_KEY("fallback"), RT_KEY("utterance"),
    { "calibrate", SB_KEY_BOOL, 0, 0, S(calibrate), NULL },
    RT_KEY("method"), RT_KEY("score_model"),
    { "hybrid_margin", SB_KEY_NUM, 0, 2, S(hybrid_margin), NULL },
    RT_KEY("classifier"), { "lexical", SB_KEY_NUM, 0, 10, S(lexical), NULL }, RT_KEY("examples_file"), RT_KEY("out_of_scope"), RT_KEY("priority"),
    RT_KEY("clarify"),
    RT_KEYS_END
};

/* clarify: { margin, max, refusal_margin } (router/run/clarify.c). */
static const sb_cfg_key clarify_keys[] = {
    { "margin", SB_KEY_NUM, 0, 2, S(clarify_margin), NULL },
    { "refusal_margin", SB_KEY_NUM, 0, 10, S(clarify_refusal), NULL },
    { "max", SB_KEY_INT, 1, 5, S(clarify_max), NULL },
    RT_KEYS_END
};

static const sb_cfg_key label_keys[] = {
    { "description", SB_KEY_STR, 0, 0, offsetof(sb_label, description), NULL },
    RT_KEY("examples"), RT_KEY("display"),
    RT_KEYS_END
};

static int load_labels(vctx *c, const sb_config_node *n, sb_stage *s) {
    if (n->kind != SB_CFG_MAP || n->n_pairs < 2 || n->n_pairs > SB_PIPE_MAX_LABELS)
        return FAIL(c, n, "%s.labels: expected a mapping of 2-%d labels (name: {description, examples})", c->path,
                    SB_PIPE_MAX_LABELS);
    s->labels = sb_calloc(n->n_pairs, sizeof *s->labels);
    if (!s->labels) return SB_ENOMEM;
    for (size_t i = 0; i < n->n_pairs; i++) {
        const sb_config_node *k = n->pairs[i].key, *v = n->pairs[i].value;
        sb_label *l = &s->labels[s->n_labels++];
        if (!sb_cfg_valid_name(k->value, SB_CONFIG_MAX_NAME))
            return FAIL(c, k, "%s.labels: '%s' must be 1-%d characters of A-Z a-z 0-9 _ -", c->path, k->value,
                        SB_CONFIG_MAX_NAME);
        if (!(l->name = sb_strdup(k->value))) return SB_ENOMEM;
        if (v->kind != SB_CFG_MAP)
            return FAIL(c, v, "%s.labels.%s: expected a mapping with description and examples", c->path, k->value);
        char save[sizeof c->path];
        memcpy(save, c->path, sizeof save);
        snprintf(c->path + strlen(c->path), sizeof c->path - strlen(c->path), ".labels.%s", k->value);
        int rc = sb_cfg_keys_check(PL(c), v, label_keys);
        const sb_config_node *ex = sb_config_node_get(v, "examples");
        if (!rc) rc = sb_cfg_keys_read(PL(c), v, label_keys, l);
        if (!rc && ex) rc = sb_cfg_strs(PL(c), ex, "examples", 64, &l->examples, &l->n_examples);
        const sb_config_node *d = sb_config_node_get(v, "display");
        if (!rc && d) rc = rt_text_load(c, d, "display", &l->display);
        memcpy(c->path, save, sizeof save);
        if (rc) return rc;
    }
    return 0;
}

/* examples_file: "label<TAB>utterance" lines (blank lines and # comments
 * skipped; the label out_of_scope feeds the reject class), appended to
 * s->extra_*. A bad line is reported as FILE:LINE inside the config error. */
#define MAX_FILE_EXAMPLES 20000
static int push_extra(sb_stage *s, const char *text, size_t len, int label) {
    char **t = sb_realloc(s->extra_text, (s->n_extra + 1) * sizeof *t);
    if (t) s->extra_text = t;
    int *l = t ? sb_realloc(s->extra_label, (s->n_extra + 1) * sizeof *l) : NULL;
    if (l) s->extra_label = l;
    char *d = l ? sb_malloc(len + 1) : NULL;
    if (!d) return SB_ENOMEM;
    memcpy(d, text, len);
    d[len] = '\0';
    s->extra_text[s->n_extra] = d;
    s->extra_label[s->n_extra++] = label;
    return 0;
}

static int load_examples_file(vctx *c, const sb_config_node *n, sb_stage *s) {
    char path[1024];
    const char *f = s->examples_file;
    snprintf(path, sizeof path, "%s%s%s", f[0] == '/' ? "" : c->cfg->base_dir, f[0] == '/' ? "" : "/", f);
    FILE *fp = fopen(path, "r");
    if (!fp) return FAIL(c, n, "%s.examples_file: cannot read %s", c->path, path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = 0, lineno = 0;
    while (!rc && (got = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (!got || line[0] == '#') continue;
        const char *nul = memchr(line, '\0', (size_t)got);     /* it would end the example there, silently */
        if (nul) {
            rc = FAIL(c, n, "%s.examples_file: %s:%d: byte %d is NUL (\\0): not allowed in a line", c->path, path,
                      lineno, (int)(nul - line) + 1);
            break;
        }
        char *tab = strchr(line, '\t');
        if (tab) *tab = '\0';
        int label = tab ? rt_pl_label_index(s, line) : -1;
        bool oos = label < 0 && tab && !strcmp(line, SB_CLS_OOS_NAME);
        if (!tab || !tab[1] || (label < 0 && !oos))
            rc = FAIL(c, n, "%s.examples_file: %s:%d: expected 'label<TAB>utterance' with one of this stage's "
                      "labels or %s", c->path, path, lineno, SB_CLS_OOS_NAME);
        else if (s->n_extra >= MAX_FILE_EXAMPLES)
            rc = FAIL(c, n, "%s.examples_file: %s: more than %d examples", c->path, path, MAX_FILE_EXAMPLES);
        else
            rc = push_extra(s, tab + 1, strlen(tab + 1), oos ? SB_CLS_OOS : label);
    }
    free(line);
    fclose(fp);
    return rc;
}

/* method, score_model, hybrid_margin, classifier, examples_file,
 * out_of_scope: how the stage classifies (router/run/intent_embed.c). */
static int load_intent_method(vctx *c, const sb_config_node *n, sb_stage *s) {
    const sb_config_node *v;
    int rc = 0;
    if ((v = sb_config_node_get(n, "method"))) {
        static const char *const names[] = { "auto", "score", "embed", "hybrid" };
        s->method = -1;
        for (int i = 0; v->kind == SB_CFG_SCALAR && i < 4; i++)
            if (!strcmp(v->value, names[i])) s->method = i;
        if (s->method < 0) return FAIL(c, v, "%s.method: expected embed, score, hybrid or auto", c->path);
    }
    if ((v = sb_config_node_get(n, "score_model"))) {
        if (s->method != SB_INTENT_HYBRID) return FAIL(c, v, "%s.score_model: only with method: hybrid", c->path);
        if ((rc = sb_cfg_str(PL(c), v, "score_model", false, &s->score_model))) return rc;
        if (!sb_config_find_model(c->cfg, s->score_model))
            return FAIL(c, v, "%s.score_model: no model named '%s' under models:", c->path, s->score_model);
    } else if (s->method == SB_INTENT_HYBRID) {
        return FAIL(c, n, "%s: method: hybrid needs a generative 'score_model'", c->path);
    }
    const char *embed_only[] = { "classifier", "examples_file", "out_of_scope", "hybrid_margin", "lexical" };
    for (int i = 0; s->method == SB_INTENT_SCORE && i < 5; i++)
        if ((v = sb_config_node_get(n, embed_only[i])))
            return FAIL(c, v, "%s.%s: applies to method embed or hybrid, not score", c->path, embed_only[i]);
    if ((v = sb_config_node_get(n, "classifier"))) {
        s->classifier = v->kind == SB_CFG_SCALAR ? sb_cls_method_parse(v->value) : -1;
        if (s->classifier < 0) return FAIL(c, v, "%s.classifier: expected centroid, 1nn, knn or logreg", c->path);
    }
    if ((v = sb_config_node_get(n, "examples_file")) &&
        ((rc = sb_cfg_str(PL(c), v, "examples_file", false, &s->examples_file)) || (rc = load_examples_file(c, v, s))))
        return rc;
    if ((v = sb_config_node_get(n, "out_of_scope"))) {
        char **oos;
        size_t k;
        if ((rc = sb_cfg_strs(PL(c), v, "out_of_scope", 256, &oos, &k)) == 0)
            for (size_t i = 0; i < k && !rc; i++) rc = push_extra(s, oos[i], strlen(oos[i]), SB_CLS_OOS);
        for (size_t i = 0; oos && i < k; i++) sb_free(oos[i]);
        sb_free(oos);
        if (rc) return rc;
    }
    for (size_t i = 0; i < s->n_extra; i++)
        if (s->extra_label[i] == SB_CLS_OOS && !s->fallback)
            return FAIL(c, n, "%s: out-of-scope examples need a 'fallback' label for the calls they reject", c->path);
    return 0;
}

static int load_intent(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if (!(v = sb_config_node_get(n, "labels"))) return FAIL(c, n, "%s: missing 'labels'", c->path);
    if ((rc = load_labels(c, v, s))) return rc;
    s->classifier = -1;
    s->hybrid_margin = 0.02;
    if ((rc = sb_cfg_keys_read(PL(c), n, intent_keys, s))) return rc;
    if ((v = sb_config_node_get(n, "fallback"))) {
        if ((rc = sb_cfg_str(PL(c), v, "fallback", false, &s->fallback))) return rc;
        if (rt_pl_label_index(s, s->fallback) < 0)
            return FAIL(c, v, "%s.fallback: '%s' is not one of this stage's labels", c->path, s->fallback);
    } else if (s->min_confidence > 0) {
        return FAIL(c, n, "%s: min_confidence needs a 'fallback' label", c->path);
    }
    if ((rc = load_intent_method(c, n, s))) return rc;
    s->clarify_max = 2;
    s->clarify_refusal = -1;
    if ((v = sb_config_node_get(n, "clarify"))) {
        char save[sizeof c->path];
        memcpy(save, c->path, sizeof save);
        snprintf(c->path + strlen(c->path), sizeof c->path - strlen(c->path), ".clarify");
        rc = v->kind != SB_CFG_MAP ? FAIL(c, v, "%s: expected a mapping {margin, max}", c->path)
                                   : sb_cfg_keys_check(PL(c), v, clarify_keys);
        if (!rc) rc = sb_cfg_keys_read(PL(c), v, clarify_keys, s);
        if (!rc && !sb_config_node_get(v, "margin")) rc = FAIL(c, v, "%s: missing 'margin'", c->path);
        memcpy(c->path, save, sizeof save);
        if (rc) return rc;
    }
    return (v = sb_config_node_get(n, "utterance")) ? rt_pl_tmpl(c, v, "utterance", scope, &s->utterance)
                                                    : rt_tmpl_compile("{{input}}", scope, &s->utterance, NULL, 0);
}

static int intent_check(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope) {
    sb_stage *s = &p->stages[idx];
    int rc = rt_pl_model_keys(c, n, s, scope);
    return rc ? rc : load_intent(c, n, s, scope);
}

/* ------------------------------------------------------------ running */

static rt_stage_outcome set_intent(rt_run *run, const sb_stage *s, double conf, bool rejected);
static int start_score(rt_run *run, const sb_stage *s, char *err);
static rt_stage_outcome decide_scored(rt_run *run, const sb_stage *s);

/* A failed model call: the worker's status. */
static rt_stage_outcome call_failed(rt_run *run, const sb_stage *s, const rt_reply *res) {
    const char *type;
    int st = rt_worker_error_status(res->code, &type);
    return rt_stage_fail(run, st, type, "intent stage '%s': %s", s->name, res->message ? res->message : "failed");
}

static rt_stage_outcome on_scored(rt_run *run, const sb_stage *s, const rt_reply *res) {
    run->model_s += sb_now_s() - run->t_stage;
    if (!res->ok) return call_failed(run, s, res);
    if (res->score.n_probs != s->n_labels)
        return rt_stage_fail(run, 502, "server_error", "intent stage '%s': %s", s->name,
                             "the worker returned a wrong number of scores");
    const rt_prior *pr = s->calibrate ? rt_run_prior(run, s) : NULL;
    for (size_t i = 0; i < s->n_labels; i++) {
        double v = res->score.probs[i];
        if (pr) v /= pr->p[i] > 1e-9 ? pr->p[i] : 1e-9;
        run->probs[i] = v;
    }
    return decide_scored(run, s);
}

/* run->probs holds the labels' unnormalised scores: normalise them and
 * pick the intent (the fallback below min_confidence, or when the
 * embedding classifier's out-of-scope class won). conf < 0: the top
 * label's probability is the confidence. */
static rt_stage_outcome set_intent(rt_run *run, const sb_stage *s, double conf, bool rejected) {
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
    return rt_stage_end(run, ST_OK, NULL);
}


/* ------------------------------------------------------------ clarify */

static rt_stage_outcome oom(rt_run *run) { return rt_stage_fail(run, 500, "internal", "%s%s", "out of memory", ""); }

/* The call's intent is label, chosen by the caller (or the best guess
 * when it goes to a person). false: out of memory. */
static bool take_label(rt_run *run, const sb_stage *s, int label) {
    run->confidence = run->probs[label];
    run->fell_back = false;
    sb_free(run->intent);
    run->intent = sb_strdup(s->labels[label].name);
    run->intent_stage = (int)run->cur;
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = sb_strdup(s->labels[label].name);
    return run->intent && sr->output;
}

static rt_stage_outcome settle(rt_run *run, const sb_stage *s, int label) {
    return take_label(run, s, label) ? rt_stage_end(run, ST_OK, NULL) : oom(run);
}

/* Still unclear after clarify.max questions: a person takes the call,
 * with the best guess as its intent. */
static rt_stage_outcome unclear(rt_run *run, const sb_stage *s, int label) {
    if (!take_label(run, s, label)) return oom(run);
    stage_res *sr = &run->res[run->cur];
    sb_free(sr->output);
    sr->output = sb_strdup(rt_handoff_default(run->input));
    return sr->output ? rt_stage_hand_off(run, "unclear") : oom(run);
}

static void display_name(const sb_stage *s, int label, const char *input, char *out, size_t n) {
    const char *d = rt_text_for(&s->labels[label].display, input);
    snprintf(out, n, "%s", d ? d : s->labels[label].name);
    if (!d)
        for (char *p = out; *p; p++)
            if (*p == '_') *p = ' ';
}

/* Ask the question clarify.c's step chose (its options in the stage's
 * clarify state; none: an open question); the next turn answers. */
static rt_stage_outcome ask(rt_run *run, const sb_stage *s) {
    stage_res *sr = &run->res[run->cur];
    const int n = sr->clarify.n, *opts = sr->clarify.opt;
    sr->turn_read = false;
    bool zh = rt_looks_chinese(run->input);
    char a[128], b[128], q[512];
    if (n > 0) display_name(s, opts[0], run->input, a, sizeof a);
    if (n > 1) display_name(s, opts[1], run->input, b, sizeof b);
    if (n == 2) snprintf(q, sizeof q, zh ? "请问您是要咨询%s，还是%s？" : "Is your call about %s or %s?", a, b);
    else if (n == 1) snprintf(q, sizeof q, zh ? "请问您是要咨询%s吗？" : "Did you mean %s?", a);
    else snprintf(q, sizeof q, "%s", zh ? "抱歉，我没有听明白。请您再说一下要办理什么业务？"
                                         : "Sorry, I didn't catch that. Could you tell me again what your call is about?");
    sb_jw aw;
    sb_jw_init(&aw);
    sb_jw_obj(&aw);
    sb_jw_key(&aw, "kind"); sb_jw_str(&aw, "clarify");
    sb_jw_key(&aw, "options"); sb_jw_arr(&aw);
    for (int i = 0; i < n; i++) sb_jw_str(&aw, s->labels[opts[i]].name);
    sb_jw_arr_end(&aw);
    sb_jw_obj_end(&aw);
    rt_run_set_awaiting(run, aw.oom ? NULL : aw.p);
    sb_jw_free(&aw);
    sb_free(sr->output);
    sr->output = sb_strdup(q);
    return sr->output ? RT_STAGE_WAIT_CALLER : oom(run);
}

/* What a clarify step asks of the stage; NONE is the caller's to decide.
 * A caller's answer being routed for a new topic asks nothing: too close
 * to call is no new topic, and the stage that asked reads the answer. */
static rt_stage_outcome act(rt_run *run, const sb_stage *s, sb_clarify_step step, int label) {
    if (step == SB_CLARIFY_ASK && rt_run_rerouting(run)) {
        rt_stage_outcome o = set_intent(run, s, -1, false);
        run->fell_back = true;
        return o;
    }
    switch (step) {
    case SB_CLARIFY_ASK: return ask(run, s);
    case SB_CLARIFY_SETTLED: return label >= 0 ? settle(run, s, label) : set_intent(run, s, -1, true);
    default: return unclear(run, s, label);
    }
}

/* The score method's labels, normalised, ranked for clarify. */
static rt_stage_outcome decide_scored(rt_run *run, const sb_stage *s) {
    double sum = 0;
    for (size_t i = 0; i < s->n_labels; i++) sum += run->probs[i];
    int ranked[SB_PIPE_MAX_LABELS], n = 0;
    float score[SB_PIPE_MAX_LABELS];
    for (size_t i = 0; sum > 0 && i < s->n_labels; i++) {
        run->probs[i] /= sum;
        int k = n++;            /* insertion by probability, best first */
        for (; k > 0 && score[k - 1] < run->probs[i]; k--) ranked[k] = ranked[k - 1], score[k] = score[k - 1];
        ranked[k] = (int)i, score[k] = (float)run->probs[i];
    }
    int label;
    sb_clarify_step step = sb_clarify_routed(s, &run->res[run->cur].clarify, ranked, score, n, &label);
    return step == SB_CLARIFY_NONE ? set_intent(run, s, -1, false) : act(run, s, step, label);
}

/* The caller's turn after the stage asked. true: it settled the stage (*o);
 * false: it is a new request - or the answer to the open question, or a
 * turn after the router restarted, which kept no question - and is now the
 * call's words, routed as if the call had begun with them. */
static bool answered(rt_run *run, const sb_stage *s, rt_stage_outcome *o) {
    stage_res *sr = &run->res[run->cur];
    const char *turn = rt_run_turn(run);
    if (sr->turn_read) return false;
    sr->turn_read = true;
    size_t at;
    int label;
    sb_clarify_step step = sb_clarify_answered(s, &sr->clarify, turn, &label, &at);
    if (step != SB_CLARIFY_REROUTE) { *o = act(run, s, step, label); return true; }
    char *words = rt_trimmed(turn + at, strlen(turn + at));
    if (!words) { *o = oom(run); return true; }
    sb_free(run->input);
    run->input = words;
    return false;
}

/* Contextual calibration (Zhao et al., 2021): a small model prefers some
 * labels whatever the caller says (the last or shortest label, a familiar
 * word). Its probabilities for a content-free utterance ("N/A") measure that
 * bias once per config; every call's probabilities are divided by them and
 * renormalised. The prior call shares the stage's prompt prefix, so it costs
 * one utterance's worth of compute. */
static rt_stage_outcome on_prior(rt_run *run, const sb_stage *s, const rt_reply *res) {
    if (!res->ok || res->score.n_probs != s->n_labels) {
        const char *type = "server_error";
        int st = res->ok ? 502 : rt_worker_error_status(res->code, &type);
        return rt_stage_fail(run, st, type, "intent stage '%s' (calibration): %s", s->name,
                             res->message ? res->message : "bad scores");
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
    int rc = start_score(run, s, err);
    if (rc)
        return rt_stage_fail(run, rc == SB_EBUSY || rc == SB_EIO ? 503 : 500, "model_unavailable", "stage '%s': %s",
                             s->name, err);
    return RT_STAGE_WAIT_BACKEND;
}

/* The score method: one call scores every label. 0 or the refusal. */
static int start_score(rt_run *run, const sb_stage *s, char *err) {
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
    if (!rc) rc = rt_run_score(run, s, model, &r, err);
    sb_segs_free(pre);
    sb_segs_free(user);
    return rc;
}

/* The caller's text as the stage shows it to the encoder. */
static void render_utterance(rt_run *run, const sb_stage *s, sb_jw *u) {
    sb_tmpl_env env = rt_run_env(run);
    sb_jw_init(u);
    sb_tmpl_render(s->utterance, &env, u);
}

/* With `lexical:`, the words of the text the encoder embedded go beside its
 * vector (vec has room), as the stage's examples were trained on
 * (intent_embed.c). */
static int lexical_features(rt_run *run, const sb_stage *s, float *vec, uint32_t dim) {
    sb_jw u;
    render_utterance(run, s, &u);
    int rc = u.oom ? SB_ENOMEM : 0;
    if (!rc) sb_lex_append(vec, (int)dim, u.p ? u.p : "", u.len, SB_LEX_DEFAULT_FLAGS, vec);
    sb_jw_free(&u);
    return rc;
}

/* An embedding stage: the caller's vector against the stage's examples.
 * The result has the score method's shape: probabilities over the labels
 * (the out-of-scope class, when trained, is not a label: its winning sends
 * the call to the fallback, with its probability as the confidence). */
static rt_stage_outcome on_embedded(rt_run *run, const sb_stage *s, const rt_reply *res) {
    const sb_classifier *cls = NULL;
    char err[SB_ERR_LEN];
    if (!res->ok) return call_failed(run, s, res);
    float vec[SB_CLS_MAX_DIM];
    /* with `lexical:` the words take the vector's last SB_LEX_DIM places */
    uint32_t dim = rt_run_first_vector(res, vec, SB_CLS_MAX_DIM - (s->lexical > 0 ? SB_LEX_DIM : 0));
    sb_cls_result cr;
    if (dim && s->lexical > 0 && lexical_features(run, s, vec, dim)) return oom(run);
    if (rt_intent_classifier(run->ex, run->conf, s, &cls, err) != 0 || dim == 0 || sb_cls_classify(cls, vec, &cr))
        return rt_stage_fail(run, 502, "server_error", "intent stage '%s': %s", s->name,
                             "the encoder's vector does not fit the index");
    if (s->method == SB_INTENT_HYBRID && cr.n > 1 && cr.margin < s->hybrid_margin) {
        int rc = start_score(run, s, err);
        if (rc)
            return rt_stage_fail(run, rc == SB_EBUSY || rc == SB_EIO ? 503 : 500, "model_unavailable",
                                 "stage '%s': %s", s->name, err);
        return RT_STAGE_WAIT_BACKEND;
    }
    for (size_t i = 0; i < s->n_labels; i++) run->probs[i] = 0;
    for (int k = 0; k < cr.n; k++)
        if (cr.idx[k] < (int)s->n_labels) run->probs[cr.idx[k]] = cr.prob[k];
    run->model_s += sb_now_s() - run->t_stage;
    /* Ranked by the scores whose top-2 gap route eval reports and
     * hybrid_margin compares; the reject class is -1. */
    int ranked[SB_CLS_MAX_LABELS + 1];
    for (int k = 0; k < cr.n; k++) ranked[k] = cr.idx[k] < (int)s->n_labels ? cr.idx[k] : -1;
    int label;
    sb_clarify_step step = sb_clarify_routed(s, &run->res[run->cur].clarify, ranked, cr.score, cr.n, &label);
    return step == SB_CLARIFY_NONE ? set_intent(run, s, cr.confidence, cr.rejected) : act(run, s, step, label);
}

/* The embedding method: the caller's vector, once the stage's index of
 * examples is built (until then the stage polls: the build runs on the
 * encoder, started by the first call that needs it). 0, 1 (poll), or the
 * refusal. */
static int start_embed(rt_run *run, const sb_stage *s, char *err) {
    const sb_classifier *cls;
    int rc = rt_intent_classifier(run->ex, run->conf, s, &cls, err);
    if (rc) return rc;
    sb_jw u;
    render_utterance(run, s, &u);
    rt_run_keep_input(run, u.p, u.len);
    rc = u.oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : rt_run_embed(run, s, u.p ? u.p : "", u.len, err);
    sb_jw_free(&u);
    return rc;
}

#define INDEX_POLL_MS 20

static rt_stage_outcome intent_start(rt_run *run, const sb_stage *s) {
    char err[SB_ERR_LEN];
    rt_stage_outcome o;
    if (rt_run_turn(run) && answered(run, s, &o)) return o;
    int rc = rt_intent_embeds(run->ex, s) ? start_embed(run, s, err) : start_score(run, s, err);
    if (rc == 1) return rt_stage_poll(run, INDEX_POLL_MS);
    return rc ? rt_stage_refused(run, s, rc, 500, err) : RT_STAGE_WAIT_BACKEND;
}

/* Which call answered: the stage's vector, the calibration prior, or the
 * labels' scores. */
static rt_stage_outcome intent_reply(rt_run *run, const sb_stage *s, const rt_reply *r) {
    if (r->method == RT_CALL_EMBED) return on_embedded(run, s, r);
    return run->calibrating ? on_prior(run, s, r) : on_scored(run, s, r);
}

static void intent_probabilities(const rt_run *run, const sb_stage *s, sb_jw *w) {
    sb_jw_obj(w);
    for (size_t i = 0; i < s->n_labels; i++) {
        sb_jw_key(w, s->labels[i].name);
        sb_jw_num(w, run->probs[i]);
    }
    sb_jw_obj_end(w);
}

/* An intent stage is short (one prompt, a few labels) and every later stage
 * of its call waits on it: by default it goes ahead of generations that
 * arrived up to a second before it (docs/router.md, "Priority"). */
const rt_stage_kind rt_kind_intent = {
    .name = "intent",
    .keys = intent_keys,
    .default_priority = 1,
    .traits = RT_KIND_SETS_INTENT,
    .check = intent_check,
    .start = intent_start,
    .on_reply = intent_reply,
    .result_json = intent_probabilities,
};
