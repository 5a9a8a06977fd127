/* test_clarify.c - how a caller's answer to a clarifying question is read
 * (router/run/clarify.c): a table of answers to "social insurance or
 * housing fund?" and to "did you mean housing fund?", in Chinese and
 * English, with the option they pick, "neither", or a new request and
 * where it starts; and the steps the intent stage and `route eval
 * --dialogue` both run on.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

static const sb_lang_text SOCIAL = { { "zh", "en" }, { "社保", "social insurance" }, 2 };
static const sb_lang_text HOUSING = { { "zh", "en" }, { "公积金", "housing fund" }, 2 };
static const sb_lang_text TAX = { { "en" }, { "tax" }, 1 };

enum { NEW = RT_CLARIFY_NEW, PICK = RT_CLARIFY_PICKED, NEITHER = RT_CLARIFY_NEITHER };

typedef struct {
    const char *answer;
    int n_opts;             /* 2: social_insurance or housing_fund; 1: housing_fund alone */
    int want;
    int picked;             /* PICK: the option's index */
    const char *request;    /* NEW: the request's text, from where it starts */
} row;

static const row ROWS[] = {
    /* display names, in either language, and the labels' names */
    {"社保", 2, PICK, 0, NULL}, {"公积金", 2, PICK, 1, NULL}, {"是社保的问题", 2, PICK, 0, NULL},
    {"嗯，公积金吧", 2, PICK, 1, NULL}, {"social insurance", 2, PICK, 0, NULL},
    {"Housing Fund please", 2, PICK, 1, NULL}, {"the housing_fund one", 2, PICK, 1, NULL},
    {"I think social insurance", 2, PICK, 0, NULL}, {"公积金", 1, PICK, 0, NULL},
    /* ordinals */
    {"第一个", 2, PICK, 0, NULL}, {"第二个", 2, PICK, 1, NULL}, {"前者", 2, PICK, 0, NULL},
    {"后者吧", 2, PICK, 1, NULL}, {"the first one", 2, PICK, 0, NULL}, {"The second one.", 2, PICK, 1, NULL},
    {"the latter", 2, PICK, 1, NULL}, {"second", 1, NEW, 0, "second"}, {"the first", 1, PICK, 0, NULL},
    /* yes and no to a single option */
    {"是的", 1, PICK, 0, NULL}, {"对", 1, PICK, 0, NULL}, {"yeah", 1, PICK, 0, NULL},
    {"yes please", 1, PICK, 0, NULL}, {"嗯", 1, PICK, 0, NULL},
    {"不是", 1, NEITHER, 0, NULL}, {"no", 1, NEITHER, 0, NULL}, {"nope.", 1, NEITHER, 0, NULL},
    {"不是。", 1, NEITHER, 0, NULL},
    /* a no followed by what was meant: a new request from there */
    {"不是，我要问户口的事", 1, NEW, 0, "我要问户口的事"}, {"no, my water bill", 1, NEW, 0, "my water bill"},
    {"不对，是公积金", 2, PICK, 1, NULL}, {"no, social insurance", 2, PICK, 0, NULL},
    /* a yes to two options says nothing */
    {"是的", 2, NEW, 0, "是的"},
    /* neither */
    {"都不是", 2, NEITHER, 0, NULL}, {"两个都不是", 2, NEITHER, 0, NULL}, {"neither", 2, NEITHER, 0, NULL},
    {"none of them", 2, NEITHER, 0, NULL}, {"neither of those", 1, NEITHER, 0, NULL},
    /* both named, or none: a new request */
    {"社保和公积金都要问", 2, NEW, 0, "社保和公积金都要问"},
    {"我的电费单不对", 2, NEW, 0, "我的电费单不对"}, {"I want to move my hukou", 2, NEW, 0, "I want to move my hukou"},
    {"", 2, NEW, 0, ""},
};

static void test_answers(void **state) {
    (void)state;
    rt_clarify_option two[2] = { { "social_insurance", &SOCIAL }, { "housing_fund", &HOUSING } };
    rt_clarify_option one[1] = { { "housing_fund", &HOUSING } };
    int bad = 0;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        int picked;
        size_t at;
        rt_clarify_verdict v = rt_clarify_read(r->answer, r->n_opts == 2 ? two : one, r->n_opts, &picked, &at);
        bool ok = (int)v == r->want && (v != RT_CLARIFY_PICKED || picked == r->picked) &&
                  (v != RT_CLARIFY_NEW || !strcmp(r->answer + at, r->request));
        if (!ok) {
            printf("  '%s' (%d options): got %d picked %d request '%s'; want %d picked %d request '%s'\n",
                   r->answer, r->n_opts, v, picked, r->answer + at, r->want, r->picked,
                   r->request ? r->request : "");
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* An English display name is a whole word: "tax" is not named in "taxi". */
static void test_whole_words(void **state) {
    (void)state;
    rt_clarify_option o[1] = { { "tax_office", &TAX } };
    int picked;
    size_t at;
    assert_int_equal(rt_clarify_read("I need a taxi", o, 1, &picked, &at), RT_CLARIFY_NEW);
    assert_int_equal(rt_clarify_read("it's about tax.", o, 1, &picked, &at), RT_CLARIFY_PICKED);
    assert_int_equal(rt_clarify_read("tax office", o, 1, &picked, &at), RT_CLARIFY_PICKED);
    assert_int_equal(rt_clarify_read(NULL, o, 1, &picked, &at), RT_CLARIFY_NEW);
}

/* The steps (sb_clarify_routed / sb_clarify_answered) on a stage of three
 * labels and a reject class: ask when close, hand off past clarify.max,
 * and a "neither" remembered when the call is routed again. */
static sb_label LABELS[3] = { { .name = "social_insurance" }, { .name = "housing_fund" }, { .name = "tax_office" } };

static sb_stage stage(void) {
    LABELS[0].display = SOCIAL, LABELS[1].display = HOUSING, LABELS[2].display = TAX;
    return (sb_stage){ .name = "route", .labels = LABELS, .n_labels = 3, .clarify_margin = 0.2, .clarify_max = 2 };
}

static void test_steps(void **state) {
    (void)state;
    sb_stage s = stage();
    sb_clarify_state st = {0};
    int label;
    size_t at;
    const int close[4] = { 0, 1, 2, -1 };
    const float close_score[4] = { 0.40f, 0.35f, 0.15f, 0.10f };
    /* clear: nothing asked */
    const float clear_score[4] = { 0.80f, 0.10f, 0.06f, 0.04f };
    assert_int_equal(sb_clarify_routed(&s, &st, close, clear_score, 4, &label), SB_CLARIFY_NONE);
    assert_int_equal(label, 0);
    assert_int_equal(st.asked, 0);
    /* close: asked between the two, answered by name */
    assert_int_equal(sb_clarify_routed(&s, &st, close, close_score, 4, &label), SB_CLARIFY_ASK);
    assert_true(st.pending && st.n == 2 && st.opt[0] == 0 && st.opt[1] == 1 && st.asked == 1);
    assert_int_equal(sb_clarify_answered(&s, &st, "公积金", &label, &at), SB_CLARIFY_SETTLED);
    assert_int_equal(label, 1);
    /* "neither": the open question; the same words again leave tax_office
     * clear of the reject class (0.15 - 0.10 < 0.2: asked, but max is
     * reached: handed off at it) */
    st = (sb_clarify_state){0};
    sb_clarify_routed(&s, &st, close, close_score, 4, &label);
    assert_int_equal(sb_clarify_answered(&s, &st, "都不是", &label, &at), SB_CLARIFY_ASK);
    assert_true(st.pending && st.n == 0 && st.asked == 2 && st.declined == 3);
    assert_int_equal(sb_clarify_answered(&s, &st, "我想问的是别的", &label, &at), SB_CLARIFY_REROUTE);
    assert_int_equal(at, 0);
    assert_int_equal(sb_clarify_routed(&s, &st, close, close_score, 4, &label), SB_CLARIFY_UNCLEAR);
    assert_int_equal(label, 2);
    /* ...and with tax_office clear of the rest, the call settles there */
    const float apart[4] = { 0.40f, 0.35f, 0.20f, 0.0f };
    st = (sb_clarify_state){ .asked = 2, .declined = 3 };
    assert_int_equal(sb_clarify_routed(&s, &st, close, apart, 4, &label), SB_CLARIFY_SETTLED);
    assert_int_equal(label, 2);
    /* out of scope by a nose: the label alone is offered; a no, and the
     * same words again, end at the reject class (-1), not at a hand-off */
    const int oos[4] = { -1, 1, 0, 2 };
    const float oos_score[4] = { 0.50f, 0.45f, 0.03f, 0.02f };
    st = (sb_clarify_state){0};
    assert_int_equal(sb_clarify_routed(&s, &st, oos, oos_score, 4, &label), SB_CLARIFY_ASK);
    assert_true(st.n == 1 && st.opt[0] == 1);
    assert_int_equal(sb_clarify_answered(&s, &st, "不是", &label, &at), SB_CLARIFY_ASK);
    assert_int_equal(sb_clarify_answered(&s, &st, "帮我订机票", &label, &at), SB_CLARIFY_REROUTE);
    assert_int_equal(sb_clarify_routed(&s, &st, oos, oos_score, 4, &label), SB_CLARIFY_SETTLED);
    assert_int_equal(label, -1);
    /* confident new words stand even for a declined label */
    assert_int_equal(sb_clarify_routed(&s, &st, close, clear_score, 4, &label), SB_CLARIFY_NONE);
    /* not pending: a new request, whole */
    assert_int_equal(sb_clarify_answered(&s, &st, "公积金", &label, &at), SB_CLARIFY_REROUTE);
    /* a stage without clarify: never asks */
    s.clarify_margin = 0;
    st = (sb_clarify_state){0};
    assert_int_equal(sb_clarify_routed(&s, &st, close, close_score, 4, &label), SB_CLARIFY_NONE);
}

/* clarify.refusal_margin: before a refusal the best in-scope label is
 * offered from further off than between two desks, on the call's first
 * question only; a wider margin never applies to two in-scope labels. */
static void test_refusal_margin(void **state) {
    (void)state;
    sb_stage s = stage();
    sb_clarify_state st = {0};
    int label;
    size_t at;
    const int oos[4] = { -1, 1, 0, 2 };
    const float oos_score[4] = { 0.70f, 0.20f, 0.06f, 0.04f };      /* a gap of 0.5 */
    assert_int_equal(sb_clarify_routed(&s, &st, oos, oos_score, 4, &label), SB_CLARIFY_NONE);   /* refused */
    assert_int_equal(label, -1);
    s.clarify_refusal = 0.6;
    assert_int_equal(sb_clarify_routed(&s, &st, oos, oos_score, 4, &label), SB_CLARIFY_ASK);
    assert_true(st.n == 1 && st.opt[0] == 1 && st.asked == 1);
    assert_int_equal(sb_clarify_answered(&s, &st, "对", &label, &at), SB_CLARIFY_SETTLED);
    assert_int_equal(label, 1);
    /* declined: the open question, the same words, and the refusal - not
     * the next desk offered from as far */
    st = (sb_clarify_state){0};
    sb_clarify_routed(&s, &st, oos, oos_score, 4, &label);
    assert_int_equal(sb_clarify_answered(&s, &st, "都不是", &label, &at), SB_CLARIFY_ASK);
    assert_int_equal(sb_clarify_answered(&s, &st, "帮我订机票", &label, &at), SB_CLARIFY_REROUTE);
    const float next_close[4] = { 0.70f, 0.20f, 0.15f, 0.04f };
    assert_int_equal(sb_clarify_routed(&s, &st, oos, next_close, 4, &label), SB_CLARIFY_NONE);
    assert_int_equal(label, -1);
    /* two in-scope labels 0.5 apart: not asked, whatever refusal_margin says */
    const int desks[4] = { 0, 1, -1, 2 };
    st = (sb_clarify_state){0};
    assert_int_equal(sb_clarify_routed(&s, &st, desks, oos_score, 4, &label), SB_CLARIFY_NONE);
    assert_int_equal(label, 0);
    /* a stage that never clarifies does not start before refusals */
    s.clarify_margin = 0;
    assert_int_equal(sb_clarify_routed(&s, &st, oos, oos_score, 4, &label), SB_CLARIFY_NONE);
}

/* What the question calls a label, by language tag. */
static void test_display(void **state) {
    (void)state;
    sb_stage s = stage();
    assert_string_equal(sb_label_display(&s.labels[0], "zh"), "社保");
    assert_string_equal(sb_label_display(&s.labels[0], "en"), "social insurance");
    assert_string_equal(sb_label_display(&s.labels[2], "zh"), "tax");    /* none in zh: the first listed */
    sb_label bare = { .name = "x" };
    assert_null(sb_label_display(&bare, "en"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_whole_words),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_refusal_margin),
        cmocka_unit_test(test_display),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
