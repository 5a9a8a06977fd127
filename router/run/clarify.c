/* clarify.c - an intent stage's `clarify:`: when the top two labels are
 * too close to tell, the caller is asked between them instead of the
 * call being guessed, and the answer is read here.
 *
 *   clarify: { margin: 0.3, max: 2 }
 *   labels:
 *     social_insurance: { display: { zh: 社保, en: social insurance }, ... }
 *
 * The question names the labels' display names in the caller's language
 * ("请问您是要咨询社保，还是公积金？"). The out-of-scope class - the
 * classifier's reject class, or a label named out_of_scope - is never
 * offered: when it is one of the two, the in-scope one is offered alone
 * ("Did you mean housing fund?"), answered yes or no.
 *
 * The answer (rt_clarify_read) resolves it by a display name or label
 * name, an ordinal ("the second one", 第二个, 后者), a yes or no to a
 * single option, or "neither" (都不是), which gets one open question
 * ("what is your call about?"). Anything else is a new request and is
 * routed again as if the call had begun with it. Each question counts;
 * a call that would need more than `max` is handed off (reason `unclear`).
 * The labels the caller said "neither" to are remembered: routed again and
 * still close, the call is not offered them again, and when one class is
 * then clear of the rest it is taken - "did you mean the housing fund?",
 * "no", and the same words again end at the refusal when the reject class
 * was the other one, rather than at the same question and a hand-off.
 *
 * Before a refusal the stage may look further than between two desks
 * (clarify.refusal_margin): the best in-scope label is offered alone when
 * it is within that margin of the out-of-scope class.
 *
 * The steps (sb_clarify_routed, sb_clarify_answered) are the policy alone,
 * on a small state and no run: the intent stage acts on what they return
 * (asks, settles, routes again, hands off), and `route eval --dialogue`
 * plays a corpus of calls through the very same steps.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_utf8.h"
#include "router/classify/sb_classify.h"
#include "router/run/stage_internal.h"

/* ------------------------------------------------- reading the answer */

static bool ascii_word_char(unsigned char ch) { return ch < 0x80 && (isalnum(ch) || ch == '\''); }

/* needle in hay, ASCII letters compared without case; an ASCII word is
 * matched whole ("tax" is not in "taxi"). Where it starts, or -1. */
static long find_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (!n) return -1;
    for (const char *h = hay; *h; h++) {
        size_t k = 0;
        while (k < n && h[k] && tolower((unsigned char)h[k]) == tolower((unsigned char)needle[k])) k++;
        if (k < n) continue;
        bool starts = h == hay || !ascii_word_char((unsigned char)h[-1]) || !ascii_word_char((unsigned char)needle[0]);
        bool ends = !ascii_word_char((unsigned char)h[n]) || !ascii_word_char((unsigned char)needle[n - 1]);
        if (starts && ends) return h - hay;
    }
    return -1;
}

static bool has_any(const char *text, const char *const *words) {
    for (; *words; words++)
        if (find_ci(text, *words) >= 0) return true;
    return false;
}

/* Whether the answer names the option: a display name in any language,
 * or the label's name as written or with spaces for its underscores. */
static bool names(const char *text, const rt_clarify_option *o) {
    for (size_t k = 0; o->display && k < o->display->n; k++)
        if (find_ci(text, o->display->text[k]) >= 0) return true;
    char spaced[SB_CONFIG_MAX_NAME + 1];
    snprintf(spaced, sizeof spaced, "%s", o->name);
    for (char *p = spaced; *p; p++)
        if (*p == '_' || *p == '-') *p = ' ';
    return find_ci(text, o->name) >= 0 || find_ci(text, spaced) >= 0;
}

/* Whether anything but white space and punctuation (ASCII, and the
 * CJK and full-width forms: E3 80 xx, EF BC xx) is left. */
bool rt_says_something(const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        if (*p < 0x80) {
            if (isalnum(*p)) return true;
            p++;
            continue;
        }
        size_t len = sb_utf8_len(*p);
        if (!len) len = 1;
        if (!((p[0] == 0xE3 && p[1] == 0x80) || (p[0] == 0xEF && p[1] == 0xBC))) return true;
        for (size_t k = 0; k < len && *p; k++) p++;
    }
    return false;
}

static const char *const NEITHER[] = {
    "neither", "none of them", "none of those", "not either", "something else", "none",
    "都不是", "都不对", "都不", "两个都不", "都没有", "都不要", "其他的", "别的事", NULL,
};
static const char *const FIRST[] = {
    "first", "1st", "former", "number one", "number 1", "option one", "option 1",
    "第一个", "第一", "第1个", "前者", "前一个", "前面那个", "前面的", NULL,
};
static const char *const SECOND[] = {
    "second", "2nd", "latter", "number two", "number 2", "option two", "option 2", "last one",
    "第二个", "第二", "第2个", "后者", "后一个", "后面那个", "后面的", NULL,
};

rt_clarify_verdict rt_clarify_read(const char *answer, const rt_clarify_option *opts, int n, int *picked,
                                   size_t *request) {
    *picked = -1;
    *request = 0;
    if (!answer) return RT_CLARIFY_NEW;
    if (has_any(answer, NEITHER)) return RT_CLARIFY_NEITHER;
    size_t rest = 0;
    rt_yesno lead = rt_caller_lead(answer, &rest);
    /* After a no, only what follows it can name the option meant. */
    const char *said = lead == RT_NO ? answer + rest : answer;
    int named = -1, n_named = 0;
    for (int i = 0; i < n; i++)
        if (names(said, &opts[i])) { named = i; n_named++; }
    if (n_named == 1) { *picked = named; return RT_CLARIFY_PICKED; }
    if (!n_named) {
        if (has_any(said, SECOND) && n >= 2) { *picked = 1; return RT_CLARIFY_PICKED; }
        if (has_any(said, FIRST)) { *picked = 0; return RT_CLARIFY_PICKED; }
    }
    if (lead == RT_YES && n == 1) { *picked = 0; return RT_CLARIFY_PICKED; }
    if (lead == RT_NO) {
        if (!rt_says_something(answer + rest)) return RT_CLARIFY_NEITHER;
        *request = rest;
    }
    return RT_CLARIFY_NEW;
}

/* ------------------------------------------------------ the steps */

static bool out_of_scope(const sb_stage *s, int label) {
    return label < 0 || !strcmp(s->labels[label].name, SB_CLS_OOS_NAME);
}

/* Ask between opts[0..n) (n 0: an open question), or hand off when the
 * call has had its clarify.max questions: at the first option, or at the
 * last question's for an open one. */
static sb_clarify_step ask(const sb_stage *s, sb_clarify_state *st, const int *opts, int n, int *label) {
    if (st->asked >= s->clarify_max) {
        st->pending = false;
        *label = n ? opts[0] : st->opt[0];
        return SB_CLARIFY_UNCLEAR;
    }
    st->asked++;
    st->pending = true;
    st->n = n;
    for (int i = 0; i < n; i++) st->opt[i] = opts[i];
    return SB_CLARIFY_ASK;
}

static bool declined(const sb_clarify_state *st, int label) {
    return label >= 0 && label < 64 && (st->declined >> label & 1);
}

/* How close the runner-up must be for the caller to be asked. A refusal
 * is a dead end for a caller who did have a matter for the line, where a
 * wrong desk is put right a turn later, so before refusing the stage may
 * look further (clarify.refusal_margin): "did you mean to report a
 * problem?" costs a sentence, a wrong refusal costs the call. Only
 * before the call's first question: a caller who has said no once is not
 * offered one desk after another. */
static double margin_for(const sb_stage *s, const sb_clarify_state *st, int top) {
    bool wider = out_of_scope(s, top) && !st->asked && s->clarify_margin > 0 && s->clarify_refusal > s->clarify_margin;
    return wider ? s->clarify_refusal : s->clarify_margin;
}

sb_clarify_step sb_clarify_routed(const sb_stage *s, sb_clarify_state *st, const int *ranked, const float *score,
                                  int n, int *label) {
    *label = n ? ranked[0] : -1;
    if (n < 2 || !(score[0] - score[1] < margin_for(s, st, ranked[0]))) return SB_CLARIFY_NONE;
    /* Too close to tell. What the caller said was not the call does not
     * come back: the first two classes it did not decline. */
    int keep[2], at[2], k = 0;
    for (int i = 0; i < n && k < 2; i++)
        if (!declined(st, ranked[i])) at[k] = i, keep[k++] = ranked[i];
    if (!k) return ask(s, st, NULL, 0, label);
    if (at[0] != 0 || k < 2 || at[1] != 1) {
        if (k < 2 || !(score[at[0]] - score[at[1]] < margin_for(s, st, keep[0]))) {
            *label = keep[0];
            return SB_CLARIFY_SETTLED;
        }
    }
    int opts[2], m = 0;
    for (int j = 0; j < k; j++)
        if (!out_of_scope(s, keep[j])) opts[m++] = keep[j];
    return m ? ask(s, st, opts, m, label) : SB_CLARIFY_NONE;
}

sb_clarify_step sb_clarify_answered(const sb_stage *s, sb_clarify_state *st, const char *answer, int *label,
                                    size_t *at) {
    *label = -1;
    *at = 0;
    bool options = st->pending && st->n > 0;
    st->pending = false;
    if (!options) return SB_CLARIFY_REROUTE;
    rt_clarify_option opt[2];
    for (int i = 0; i < st->n; i++)
        opt[i] = (rt_clarify_option){ s->labels[st->opt[i]].name, &s->labels[st->opt[i]].display };
    int picked;
    switch (rt_clarify_read(answer, opt, st->n, &picked, at)) {
    case RT_CLARIFY_PICKED: *label = st->opt[picked]; return SB_CLARIFY_SETTLED;
    case RT_CLARIFY_NEITHER:
        for (int i = 0; i < st->n; i++)
            if (st->opt[i] < 64) st->declined |= (uint64_t)1 << st->opt[i];
        return ask(s, st, NULL, 0, label);
    default: return SB_CLARIFY_REROUTE;
    }
}

const char *sb_label_display(const sb_label *l, const char *lang) {
    return l->display.n ? rt_text_in(&l->display, lang) : NULL;
}
