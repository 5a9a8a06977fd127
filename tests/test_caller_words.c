/* test_caller_words.c - yes, no, corrections and refusals as callers say
 * them (router/run/caller_words.c): a table of answers in Chinese and
 * English, colloquial and as speech recognition writes them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

static const struct { const char *answer; rt_yesno want; } YESNO[] = {
    /* Chinese yes */
    {"是的", RT_YES}, {"是", RT_YES}, {"是。", RT_YES}, {"对", RT_YES}, {"对对对", RT_YES}, {"对的", RT_YES},
    {"嗯", RT_YES}, {"嗯嗯", RT_YES}, {"好", RT_YES}, {"好的", RT_YES}, {"好的，谢谢", RT_YES}, {"可以", RT_YES},
    {"没错", RT_YES}, {"没问题", RT_YES}, {"行", RT_YES}, {"是啊", RT_YES}, {"对呀", RT_YES}, {"呃，对", RT_YES},
    {"嗯，是的", RT_YES}, {"确认", RT_YES}, {"好的好的", RT_YES}, {"是的是的，就是这个", RT_YES},
    {"不是，是的", RT_YES}, {"对的，我要查公积金", RT_YES}, {"喂，是的", RT_YES}, {"不错", RT_YES},
    /* Chinese no */
    {"不是", RT_NO}, {"不对", RT_NO}, {"不用了", RT_NO}, {"不要", RT_NO}, {"不用", RT_NO}, {"不", RT_NO},
    {"不不不", RT_NO}, {"嗯，不是", RT_NO}, {"不行", RT_NO}, {"没有", RT_NO}, {"错了", RT_NO},
    {"不对，是4410032", RT_NO}, {"好的，不用了", RT_NO}, {"算了吧", RT_NO}, {"不需要了", RT_NO},
    {"呃 不是的", RT_NO}, {"不可以", RT_NO},
    /* as speech recognition writes them */
    {"是滴", RT_YES}, {"对滴对滴", RT_YES}, {"好嘞", RT_YES}, {"嗯呢", RT_YES}, {"恩恩，是地", RT_YES}, {"行吧", RT_YES},
    {"不用啦", RT_NO}, {"不了不了", RT_NO}, {"不是滴", RT_NO}, {"嗯哼，不要啦", RT_NO},
    {"中不中", RT_UNKNOWN}, {"中国银行", RT_UNKNOWN},
    /* Chinese: unknown */
    {"是不是", RT_UNKNOWN}, {"是我的账号", RT_UNKNOWN}, {"对我来说很重要", RT_UNKNOWN}, {"不知道", RT_UNKNOWN},
    {"可以吗？", RT_UNKNOWN}, {"我想查社保", RT_UNKNOWN}, {"", RT_UNKNOWN}, {"。。。", RT_UNKNOWN},
    {"好不好", RT_UNKNOWN}, {"对，我要查公积金", RT_UNKNOWN}, {"不确定", RT_UNKNOWN},
    /* English yes */
    {"yes", RT_YES}, {"Yes.", RT_YES}, {"YES", RT_YES}, {"yeah", RT_YES}, {"yep", RT_YES}, {"yup", RT_YES},
    {"sure", RT_YES}, {"ok", RT_YES}, {"OK!", RT_YES}, {"okay", RT_YES}, {"that's right", RT_YES},
    {"That’s correct", RT_YES}, {"uh huh", RT_YES}, {"yeah sure", RT_YES}, {"um, yes please", RT_YES},
    {"of course", RT_YES}, {"yes I want my pension", RT_YES}, {"alright", RT_YES}, {"no problem", RT_YES},
    {"mhm", RT_YES}, {"correct", RT_YES},
    /* English no */
    {"no", RT_NO}, {"No.", RT_NO}, {"nope", RT_NO}, {"nah", RT_NO}, {"not really", RT_NO},
    {"no thanks", RT_NO}, {"no, it's 4410032", RT_NO}, {"I don't think so", RT_NO}, {"wrong", RT_NO},
    {"uh no", RT_NO}, {"no no no", RT_NO}, {"yes, no", RT_NO}, {"well, no", RT_NO},
    {"nope nope", RT_NO}, {"nay", RT_NO}, {"Na.", RT_NO}, {"yeah yeah", RT_YES}, {"yep, go ahead", RT_YES},
    /* English: unknown */
    {"not sure", RT_UNKNOWN}, {"I don't know", RT_UNKNOWN}, {"maybe", RT_UNKNOWN}, {"my name is not John", RT_UNKNOWN},
    {"is it?", RT_UNKNOWN}, {"yes?", RT_UNKNOWN}, {"nobody", RT_UNKNOWN}, {"okapi", RT_UNKNOWN}, {"yesterday", RT_UNKNOWN},
    {"what about my pension", RT_UNKNOWN},
};

static const char *const NAMES[] = {"unknown", "yes", "no"};

static void test_yesno_table(void **state) {
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < sizeof YESNO / sizeof *YESNO; i++) {
        rt_yesno got = rt_caller_yesno(YESNO[i].answer);
        if (got != YESNO[i].want) {
            fprintf(stderr, "\"%s\": %s, want %s\n", YESNO[i].answer, NAMES[got], NAMES[YESNO[i].want]);
            bad++;
        }
    }
    assert_true(sizeof YESNO / sizeof *YESNO >= 60);
    assert_int_equal(bad, 0);
}

/* The lead words of a correction end where the new value begins. */
static void test_lead_rest(void **state) {
    (void)state;
    static const struct { const char *answer; rt_yesno want; const char *rest; } CASES[] = {
        {"不对，是 4410032", RT_NO, "是 4410032"},
        {"no, it's 4410032", RT_NO, "4410032"},
        {"No it is 11010519491231002X", RT_NO, "11010519491231002X"},
        {"嗯，不是，4410032", RT_NO, "4410032"},
        {"4410032", RT_UNKNOWN, "4410032"},
        {"是的", RT_YES, ""},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        size_t rest = 99;
        assert_int_equal(rt_caller_lead(CASES[i].answer, &rest), CASES[i].want);
        assert_string_equal(CASES[i].answer + rest, CASES[i].rest);
    }
}

static void test_refusals(void **state) {
    (void)state;
    static const char *const YES[] = {"不方便说", "这个不方便透露", "不知道", "我不记得了", "跳过吧",
                                      "I'd rather not", "I don't know", "skip", "skip it", "no idea",
                                      "I’d rather not say", "I don't have one"};
    static const char *const NO[] = {"4410032", "幺三八零零幺三八零零零", "my account is 4410032", "passport",
                                     "skipper", "noneteen", "是的", "张三"};
    for (size_t i = 0; i < sizeof YES / sizeof *YES; i++)
        if (!rt_caller_refuses(YES[i])) fail_msg("\"%s\" is a refusal", YES[i]);
    for (size_t i = 0; i < sizeof NO / sizeof *NO; i++)
        if (rt_caller_refuses(NO[i])) fail_msg("\"%s\" is not a refusal", NO[i]);
}

/* Which answers may be a request of their own (routed as a new topic):
 * never a refusal, never a plain yes or no. */
static void test_may_ask(void **state) {
    (void)state;
    static const char *const ASKS[] = {"我想问一下公积金怎么提取", "Can I speak to a person?", "不对，我要问医保",
                                       "no, I want to ask about my pension", "转人工", "what about my tax"};
    static const char *const ANSWERS[] = {"嗯", "好的", "不是", "不用了，谢谢", "uh huh", "no thanks", "yeah sure",
                                          "不方便说", "I'd rather not say", "不知道", "skip it"};
    for (size_t i = 0; i < sizeof ASKS / sizeof *ASKS; i++)
        if (!rt_caller_may_ask(ASKS[i])) fail_msg("\"%s\" may be a request", ASKS[i]);
    for (size_t i = 0; i < sizeof ANSWERS / sizeof *ANSWERS; i++)
        if (rt_caller_may_ask(ANSWERS[i])) fail_msg("\"%s\" answers the question", ANSWERS[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yesno_table),
        cmocka_unit_test(test_lead_rest),
        cmocka_unit_test(test_may_ask),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
