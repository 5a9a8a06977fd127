/* test_clarify.c - how a caller's answer to a clarifying question is read
 * (router/run/clarify.c): a table of answers to "social insurance or
 * housing fund?" and to "did you mean housing fund?", in Chinese and
 * English, with the option they pick, "neither", or a new request and
 * where it starts.
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_whole_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
