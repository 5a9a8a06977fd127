/* cli_route_dialog.c - `switchboard route eval --dialogue`: every call of
 * a labelled set played as a short conversation with a simulated caller,
 * through the intent stage's clarify steps (sb_clarify_routed and
 * sb_clarify_answered, router/run/clarify.c) - the code the pipeline runs,
 * not a model of it.
 *
 * The simulated caller knows its call's label and language. Asked between
 * options, it says the right option's display name in its language
 * ("社保", "social insurance"), or "neither" / "都不是" when the right label
 * is not offered (an out-of-scope call never is). Asked the open question
 * that follows a "neither", it repeats its first words. Each of its
 * answers is read by the pipeline's reader, so a display name the reader
 * would not recognise is a miss here as it would be on the line.
 *
 * A call ends at a label (the caller picked it, or the classifier's
 * verdict stood: the fallback below min_confidence, as in the pipeline),
 * at the refusal (the reject class won), or handed off (more questions
 * than clarify.max). It is right when it ends at its own label, or, out of
 * scope, at the refusal; a hand-off is wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/router_internal.h"

enum { END_LABEL, END_REFUSED, END_HANDED_OFF };

typedef struct {
    int how, label, asked;
    char path[320];             /* what happened, for the misses */
} ending;

typedef struct {
    size_t right, asked, by_how[3];
    size_t lang_n[RT_DIALOG_MAX_LANGS], lang_right[RT_DIALOG_MAX_LANGS];
} tally;

static void note(ending *e, const char *fmt, const char *a, const char *b) {
    size_t at = strlen(e->path);
    if (at + 1 < sizeof e->path) snprintf(e->path + at, sizeof e->path - at, fmt, a, b);
}

static const char *class_name(const rt_dialog_opts *o, int idx) {
    return idx >= 0 && idx < (int)o->st->n_labels ? o->st->labels[idx].name : "out_of_scope";
}

/* What the simulated caller says to a question offering st's options. */
static const char *answer_for(const sb_stage *s, const sb_clarify_state *st, const rt_dialog_call *c, char *buf,
                              size_t n) {
    bool zh = !strncmp(c->lang, "zh", 2);
    for (int i = 0; i < st->n; i++) {
        if (st->opt[i] != c->expected) continue;
        const char *d = sb_label_display(&s->labels[c->expected], c->lang);
        snprintf(buf, n, "%s", d ? d : s->labels[c->expected].name);
        if (!d)
            for (char *p = buf; *p; p++)
                if (*p == '_') *p = ' ';
        return buf;
    }
    return zh ? "都不是" : "neither";
}

/* The classifier's verdict stands: what the intent stage's set_intent
 * makes of it (the refusal, the fallback below min_confidence, the label). */
static void verdict(const rt_dialog_opts *o, const sb_cls_result *r, ending *e) {
    const sb_stage *s = o->st;
    int fb = s->fallback ? rt_dialog_label(s, s->fallback) : -1;
    if (r->rejected && fb >= 0) {
        e->how = END_REFUSED;
        note(e, "refused%s%s", "", "");
        return;
    }
    e->how = END_LABEL;
    e->label = r->top;
    if (r->confidence < o->min_conf && fb >= 0) {
        e->label = fb;
        note(e, "%s below min_confidence: fallback %s", class_name(o, r->top), s->fallback);
    } else {
        note(e, "%s%s", class_name(o, r->top), "");
    }
}

static int play(const rt_dialog_opts *o, size_t k, ending *e, char *err) {
    const sb_stage *s = o->st;
    const rt_dialog_call *c = &o->calls[k];
    sb_clarify_state cs = {0};
    const char *text = c->text;
    char buf[256];
    memset(e, 0, sizeof *e);
    /* every round asks at least once, and clarify.max bounds the asking */
    for (int round = 0; round <= s->clarify_max + 1; round++) {
        sb_cls_result r;
        int rc = o->route(o->ctx, k, text, &r, err);
        if (rc) return rc;
        int ranked[SB_CLS_MAX_LABELS + 1], label;
        for (int i = 0; i < r.n; i++) ranked[i] = r.idx[i] < (int)s->n_labels ? r.idx[i] : -1;
        size_t at = 0;
        sb_clarify_step step = sb_clarify_routed(s, &cs, ranked, r.score, r.n, &label);
        const char *said = NULL;
        while (step == SB_CLARIFY_ASK) {
            e->asked++;
            if (cs.n == 2) note(e, "asked %s or %s -> ", class_name(o, cs.opt[0]), class_name(o, cs.opt[1]));
            else if (cs.n == 1) note(e, "asked %s? -> ", class_name(o, cs.opt[0]), "");
            else note(e, "asked open -> %s%s", "", "");
            /* the open question's answer: the caller's first words again */
            said = cs.n ? answer_for(s, &cs, c, buf, sizeof buf) : c->text;
            note(e, "'%s' -> ", said, "");
            step = sb_clarify_answered(s, &cs, said, &label, &at);
        }
        switch (step) {
        case SB_CLARIFY_SETTLED:        /* picked, or the one left when the caller's "neither" is counted */
            e->how = label >= 0 ? END_LABEL : END_REFUSED, e->label = label;
            note(e, label >= 0 ? "%s%s" : "refused%s%s", label >= 0 ? class_name(o, label) : "", "");
            return 0;
        case SB_CLARIFY_UNCLEAR:
            e->how = END_HANDED_OFF, e->label = label;
            note(e, "handed off (unclear)%s%s", "", "");
            return 0;
        case SB_CLARIFY_REROUTE:
            text = said + at;
            note(e, "routed again: %s%s", "", "");
            break;
        default:
            verdict(o, &r, e);
            return 0;
        }
    }
    e->how = END_HANDED_OFF;
    note(e, "no end within clarify.max questions%s%s", "", "");
    return 0;
}

static bool right(const rt_dialog_opts *o, const rt_dialog_call *c, const ending *e) {
    if (e->how == END_REFUSED) return c->expected == (int)o->st->n_labels;
    return e->how == END_LABEL && e->label == c->expected;
}

/* Play every call; endings (n of them) may be NULL. */
static int play_all(const rt_dialog_opts *o, tally *t, ending *endings, char *err) {
    memset(t, 0, sizeof *t);
    for (size_t k = 0; k < o->n; k++) {
        ending e;
        int rc = play(o, k, &e, err);
        if (rc) return rc;
        bool ok = right(o, &o->calls[k], &e);
        t->right += ok, t->asked += e.asked > 0, t->by_how[e.how]++;
        t->lang_n[o->calls[k].lang_idx]++, t->lang_right[o->calls[k].lang_idx] += ok;
        if (endings) endings[k] = e;
    }
    return 0;
}

static double share(size_t a, size_t b) { return b ? (double)a / (double)b : 0; }

static const double SWEEP[] = {0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7};
#define N_SWEEP (sizeof SWEEP / sizeof SWEEP[0])
static const double SWEEP_REFUSAL[] = {0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.2, 1.5, 2, 2.5, 3};
#define N_SWEEP_REFUSAL (sizeof SWEEP_REFUSAL / sizeof SWEEP_REFUSAL[0])

/* The same calls at other clarify margins (or refusal margins, at the
 * stage's clarify margin), to choose one on a dev set. */
static int sweep(const rt_dialog_opts *o, sb_jw *w, char *err) {
    sb_stage s = *o->st;
    rt_dialog_opts at = *o;
    at.st = &s;
    const bool refusal = o->sweep == 2;
    const double *values = refusal ? SWEEP_REFUSAL : SWEEP;
    const size_t n = refusal ? N_SWEEP_REFUSAL : N_SWEEP;
    if (w) sb_jw_key(w, refusal ? "sweep_refusal" : "sweep"), sb_jw_arr(w);
    else printf("\n%s  dialogue accuracy  asked\n", refusal ? "refusal_margin" : "clarify.margin");
    for (size_t i = 0; i < n; i++) {
        tally t;
        if (refusal && values[i] < s.clarify_margin) continue;
        *(refusal ? &s.clarify_refusal : &s.clarify_margin) = values[i];
        int rc = play_all(&at, &t, NULL, err);
        if (rc) return rc;
        if (!w) {
            printf("  %.2f          %.4f (%zu/%zu)    %5.1f%% (%zu)\n", values[i], share(t.right, o->n), t.right, o->n,
                   100 * share(t.asked, o->n), t.asked);
            continue;
        }
        sb_jw_obj(w);
        sb_jw_key(w, "margin"), sb_jw_num(w, values[i]);
        sb_jw_key(w, "accuracy"), sb_jw_num(w, share(t.right, o->n));
        sb_jw_key(w, "asked"), sb_jw_num(w, share(t.asked, o->n));
        sb_jw_obj_end(w);
    }
    if (w) sb_jw_arr_end(w);
    return 0;
}

static const char *const HOW[] = {"at a label", "refused (out of scope)", "handed off (unclear)"};

static void print_text(const rt_dialog_opts *o, const tally *t, const ending *e) {
    const sb_stage *s = o->st;
    printf("route eval --dialogue: %s, pipeline %s, stage %s\n", o->config, o->pipeline, s->name);
    printf("encoder %s, method %s; clarify.margin %.2f, refusal_margin %.2f, clarify.max %d, min_confidence %.2f\n",
           o->encoder, o->method, s->clarify_margin, s->clarify_refusal > s->clarify_margin ? s->clarify_refusal
                                                                                            : s->clarify_margin,
           s->clarify_max, o->min_conf);
    printf("dialogue accuracy  %.4f  (%zu/%zu)\n", share(t->right, o->n), t->right, o->n);
    printf("single-shot        %.4f  (%zu/%zu)\n", share(o->single_right, o->n), o->single_right, o->n);
    printf("calls asked        %.4f  (%zu/%zu)\n", share(t->asked, o->n), t->asked, o->n);
    for (int i = 0; i < o->n_langs; i++)
        printf("  lang %-8s %.4f  (%zu/%zu)\n", o->langs[i], share(t->lang_right[i], t->lang_n[i]), t->lang_right[i],
               t->lang_n[i]);
    for (int h = 0; h < 3; h++) printf("  ended %-24s %zu\n", HOW[h], t->by_how[h]);
    printf("\n%s\n", o->verbose ? "calls:" : "misses:");
    for (size_t k = 0; k < o->n; k++) {
        bool ok = right(o, &o->calls[k], &e[k]);
        if (ok && !o->verbose) continue;
        printf("  %s %s: %s | %s\n", ok ? "ok  " : "MISS", class_name(o, o->calls[k].expected), e[k].path,
               o->calls[k].text);
    }
}

static void json_report(const rt_dialog_opts *o, const tally *t, const ending *e, sb_jw *w) {
    const sb_stage *s = o->st;
    sb_jw_key(w, "pipeline"), sb_jw_str(w, o->pipeline);
    sb_jw_key(w, "stage"), sb_jw_str(w, s->name);
    sb_jw_key(w, "encoder"), sb_jw_str(w, o->encoder);
    sb_jw_key(w, "method"), sb_jw_str(w, o->method);
    sb_jw_key(w, "clarify_margin"), sb_jw_num(w, s->clarify_margin);
    sb_jw_key(w, "clarify_max"), sb_jw_int(w, s->clarify_max);
    sb_jw_key(w, "refusal_margin"), sb_jw_num(w, s->clarify_refusal > s->clarify_margin ? s->clarify_refusal : s->clarify_margin);
    sb_jw_key(w, "min_confidence"), sb_jw_num(w, o->min_conf);
    sb_jw_key(w, "calls"), sb_jw_int(w, (int64_t)o->n);
    sb_jw_key(w, "right"), sb_jw_int(w, (int64_t)t->right);
    sb_jw_key(w, "accuracy"), sb_jw_num(w, share(t->right, o->n));
    sb_jw_key(w, "single_shot_accuracy"), sb_jw_num(w, share(o->single_right, o->n));
    sb_jw_key(w, "asked"), sb_jw_int(w, (int64_t)t->asked);
    sb_jw_key(w, "asked_share"), sb_jw_num(w, share(t->asked, o->n));
    sb_jw_key(w, "ended");
    sb_jw_obj(w);
    sb_jw_key(w, "label"), sb_jw_int(w, (int64_t)t->by_how[END_LABEL]);
    sb_jw_key(w, "refused"), sb_jw_int(w, (int64_t)t->by_how[END_REFUSED]);
    sb_jw_key(w, "handed_off"), sb_jw_int(w, (int64_t)t->by_how[END_HANDED_OFF]);
    sb_jw_obj_end(w);
    sb_jw_key(w, "by_lang");
    sb_jw_obj(w);
    for (int i = 0; i < o->n_langs; i++) {
        sb_jw_key(w, o->langs[i]);
        sb_jw_obj(w);
        sb_jw_key(w, "n"), sb_jw_int(w, (int64_t)t->lang_n[i]);
        sb_jw_key(w, "right"), sb_jw_int(w, (int64_t)t->lang_right[i]);
        sb_jw_obj_end(w);
    }
    sb_jw_obj_end(w);
    sb_jw_key(w, o->verbose ? "calls_played" : "misses");
    sb_jw_arr(w);
    for (size_t k = 0; k < o->n; k++) {
        bool ok = right(o, &o->calls[k], &e[k]);
        if (ok && !o->verbose) continue;
        sb_jw_obj(w);
        sb_jw_key(w, "expected"), sb_jw_str(w, class_name(o, o->calls[k].expected));
        sb_jw_key(w, "right"), sb_jw_bool(w, ok);
        sb_jw_key(w, "asked"), sb_jw_int(w, e[k].asked);
        sb_jw_key(w, "path"), sb_jw_str(w, e[k].path);
        sb_jw_key(w, "text"), sb_jw_str(w, o->calls[k].text);
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
}

double rt_dialog_eval(const rt_dialog_opts *o, double *asked, char *err) {
    ending *e = sb_calloc(o->n ? o->n : 1, sizeof *e);
    if (!e) return sb_seterr(err, SB_ENOMEM, "out of memory"), -1;
    tally t;
    double acc = -1;
    sb_jw w;
    sb_jw_init(&w);
    if (play_all(o, &t, e, err)) goto out;
    if (o->json) {
        sb_jw_obj(&w);
        json_report(o, &t, e, &w);
        if (o->sweep && sweep(o, &w, err)) goto out;
        sb_jw_obj_end(&w);
        if (w.oom) { sb_seterr(err, SB_ENOMEM, "out of memory"); goto out; }
        puts(w.p);
    } else {
        print_text(o, &t, e);
        if (o->sweep && sweep(o, NULL, err)) goto out;
    }
    acc = share(t.right, o->n);
    *asked = share(t.asked, o->n);
out:
    sb_jw_free(&w);
    sb_free(e);
    return acc;
}

int rt_dialog_label(const sb_stage *s, const char *name) {
    for (size_t i = 0; i < s->n_labels; i++)
        if (!strcmp(s->labels[i].name, name)) return (int)i;
    return -1;
}
