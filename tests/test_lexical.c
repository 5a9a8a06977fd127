/* test_lexical.c - hashed lexical features (router/classify/lexical.c) and
 * the classifier's lexical block (router/classify/classify.c).
 *
 * The featurizer is checked through what its vectors must satisfy: a CJK
 * run counts its characters and their bigrams (so "电费" and "电 费" share
 * the unigrams only), Latin words and word bigrams are case- and
 * width-folded, subword trigrams only when asked, output is unit length
 * and byte-identical run to run, and empty or invalid input gives a clear
 * count (0, all zeros) instead of a crash. The classifier cases give two
 * labels identical embeddings, so only their words can tell them apart,
 * and check that the weight scales the lexical block as documented.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "router/classify/sb_classify.h"
#include "common/sb_common.h"

#define LD SB_LEX_DIM
#define ED 8                     /* the synthetic "embedding" dimension */

static float lex_dot(const char *a, const char *b, unsigned flags) {
    static float va[LD], vb[LD];
    assert_true(sb_lex_features(a, strlen(a), flags, va, LD) > 0);
    assert_true(sb_lex_features(b, strlen(b), flags, vb, LD) > 0);
    float s = 0;
    for (int i = 0; i < LD; i++) s += va[i] * vb[i];
    return s;
}

static float norm2(const float *v, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    return s;
}

static void test_cjk_unigrams_and_bigrams(void **st) {
    (void)st;
    static float v[LD];
    assert_int_equal(sb_lex_features("电费", strlen("电费"), 0, v, LD), 3);         /* 电 费 电费 */
    assert_int_equal(sb_lex_features("电费单", strlen("电费单"), 0, v, LD), 5);     /* + 单, 费单 */
    /* punctuation ends a run: no bigram across it */
    assert_int_equal(sb_lex_features("电，费", strlen("电，费"), 0, v, LD), 2);
    /* 3 features against 2 shared ones: 2 / sqrt(3 * 2) */
    assert_float_equal(lex_dot("电费", "电 费", 0), 2.0 / sqrt(6.0), 1e-5);
    /* the same characters in another order share the unigrams, not the bigram */
    assert_float_equal(lex_dot("电费", "费电", 0), 2.0 / 3.0, 1e-5);
    assert_float_equal(lex_dot("医保", "公积金", 0), 0.0, 1e-5);
}

static void test_latin_words(void **st) {
    (void)st;
    static float v[LD];
    assert_int_equal(sb_lex_features("gas bill", 8, 0, v, LD), 3);                 /* gas, bill, "gas bill" */
    assert_float_equal(lex_dot("gas bill", "Gas BILL!", 0), 1.0, 1e-5);            /* case, punctuation */
    assert_float_equal(lex_dot("gas bill", "ＧＡＳ　ｂｉｌｌ", 0), 1.0, 1e-5);      /* full width, U+3000 */
    assert_float_equal(lex_dot("gas bill", "bill gas", 0), 2.0 / 3.0, 1e-5);       /* words, not the bigram */
    /* a Chinese word between two Latin ones breaks the word bigram */
    assert_int_equal(sb_lex_features("gas电bill", strlen("gas电bill"), 0, v, LD), 3);
    /* a word heard half right shares nothing as a word, most of its trigrams as subwords */
    assert_float_equal(lex_dot("electricity", "electricty", 0), 0.0, 1e-5);
    assert_true(lex_dot("electricity", "electricty", SB_LEX_SUBWORDS) > 0.5f);
    assert_int_equal(sb_lex_features("electricity", 11, SB_LEX_SUBWORDS, v, LD), 1 + 11);  /* "<electricity>" */
}

static void test_unit_and_deterministic(void **st) {
    (void)st;
    static float a[LD], b[LD];
    const char *t = "我的电费单上读数跟电表不一样 my electricity bill is wrong 4410023";
    int n = sb_lex_features(t, strlen(t), SB_LEX_SUBWORDS, a, LD);
    assert_true(n > 20);
    assert_float_equal(norm2(a, LD), 1.0, 1e-5);
    assert_int_equal(sb_lex_features(t, strlen(t), SB_LEX_SUBWORDS, b, LD), n);
    assert_memory_equal(a, b, sizeof a);
    /* repeated words count sublinearly: ten times "gas" is not ten times the weight */
    assert_true(lex_dot("gas gas gas gas gas gas gas gas gas gas bill", "bill", 0) > 0.1f);
}

static void test_empty_and_invalid(void **st) {
    (void)st;
    static float v[LD], w[LD];
    for (int i = 0; i < LD; i++) v[i] = 7;
    assert_int_equal(sb_lex_features("", 0, 0, v, LD), 0);
    assert_float_equal(norm2(v, LD), 0.0, 0);                                   /* zeros, not stale values */
    assert_int_equal(sb_lex_features(NULL, 0, 0, v, LD), 0);
    assert_int_equal(sb_lex_features("，。！ ?", strlen("，。！ ?"), 0, v, LD), 0);
    assert_int_equal(sb_lex_features("\xff\xfe\xc3", 3, 0, v, LD), 0);          /* no UTF-8 at all */
    assert_int_equal(sb_lex_features("\xe7\x94", 2, 0, v, LD), 0);              /* a cut character */
    assert_int_equal(sb_lex_features("x", 1, 0, v, 0), -1);
    /* a byte that is not UTF-8 separates words like a space */
    assert_int_equal(sb_lex_features("gas\xff" "bill", 8, 0, v, LD), 3);
    assert_int_equal(sb_lex_features("gas bill", 8, 0, w, LD), 3);
    assert_memory_equal(v, w, sizeof v);
    /* the length is what counts, not a NUL */
    assert_int_equal(sb_lex_features("gas\0bill", 8, 0, v, LD), 3);
}

/* Labels a and b: every training point and call has the SAME embedding,
 * so only the words can separate them. */
static sb_classifier *twins(sb_cls_method m, int center, float weight, int lex) {
    static const char *const names[] = {"utilities", "medical"};
    static const char *const ex[2][3] = {{"电费太高了", "电表读数不对", "gas bill is wrong"},
                                         {"医保怎么报销", "医保卡刷不了", "medical insurance card"}};
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    o.method = m;
    o.center = center;
    o.desc_weight = 0;
    if (lex) o.lex_dim = LD, o.lex_weight = weight;
    sb_classifier *c = NULL;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_cls_new(ED + o.lex_dim, 2, names, &o, &c, err), 0);
    float e[ED] = {0.6f, 0.8f}, v[ED + LD];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) {
            if (lex) sb_lex_append(e, ED, ex[k][i], strlen(ex[k][i]), 0, v);
            else memcpy(v, e, sizeof e);
            assert_int_equal(sb_cls_add_example(c, k, v, err), 0);
        }
    assert_int_equal(sb_cls_train(c, err), 0);
    return c;
}

static sb_cls_result verdict(const sb_classifier *c, const char *text, int lex) {
    float e[ED] = {0.6f, 0.8f}, v[ED + LD];
    if (lex) sb_lex_append(e, ED, text, strlen(text), 0, v);
    else memcpy(v, e, sizeof e);
    sb_cls_result r;
    assert_int_equal(sb_cls_classify(c, v, &r), 0);
    return r;
}

static int route(const sb_classifier *c, const char *text, int lex) { return verdict(c, text, lex).top; }

static void test_words_decide_between_twins(void **st) {
    (void)st;
    const sb_cls_method methods[] = {SB_CLS_LOGREG, SB_CLS_CENTROID, SB_CLS_1NN};
    for (int m = 0; m < 3; m++) {
        sb_classifier *c = twins(methods[m], 1, 0.5f, 1);
        assert_int_equal(route(c, "医保能报销吗", 1), 1);
        assert_int_equal(route(c, "电费贵得离谱", 1), 0);
        assert_int_equal(route(c, "my medical card", 1), 1);
        sb_cls_free(c);
        /* the embedding alone cannot: a tie (to rounding) */
        c = twins(methods[m], 1, 0, 0);
        assert_true(verdict(c, "医保能报销吗", 0).margin < 1e-4f);
        sb_cls_free(c);
    }
}

/* Without centring, 1-NN's score is the dot product of the blocks as given:
 * the embedding's cosine plus weight^2 times the words' cosine. */
static void test_weight_scales_the_block(void **st) {
    (void)st;
    const float w = 0.7f;
    sb_classifier *c = twins(SB_CLS_1NN, 0, w, 1);
    float e[ED] = {0.6f, 0.8f}, v[ED + LD], x[ED + LD];
    sb_lex_append(e, ED, "医保卡刷不了", strlen("医保卡刷不了"), 0, x);   /* b's example */
    const char *call = "医保卡丢了";
    sb_lex_append(e, ED, call, strlen(call), 0, v);
    float lex = 0;
    for (int i = ED; i < ED + LD; i++) lex += v[i] * x[i];
    sb_cls_result r;
    assert_int_equal(sb_cls_classify(c, v, &r), 0);
    assert_int_equal(r.top, 1);
    assert_float_equal(r.score[0], 1.0f + w * w * lex, 1e-5);
    sb_cls_free(c);
}

static void test_bad_lexical_options(void **st) {
    (void)st;
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    sb_classifier *c = NULL;
    char err[SB_ERR_LEN] = "";
    const char *names[] = {"a", "b"};
    o.lex_dim = 8, o.lex_weight = 1;
    assert_int_equal(sb_cls_new(8, 2, names, &o, &c, err), SB_EINVAL);   /* no room for an embedding */
    assert_non_null(strstr(err, "lexical"));
    o.lex_dim = 4, o.lex_weight = -1;
    assert_int_equal(sb_cls_new(8, 2, names, &o, &c, err), SB_EINVAL);
    o.lex_weight = NAN;
    assert_int_equal(sb_cls_new(8, 2, names, &o, &c, err), SB_EINVAL);
    assert_null(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cjk_unigrams_and_bigrams),
        cmocka_unit_test(test_latin_words),
        cmocka_unit_test(test_unit_and_deterministic),
        cmocka_unit_test(test_empty_and_invalid),
        cmocka_unit_test(test_words_decide_between_twins),
        cmocka_unit_test(test_weight_scales_the_block),
        cmocka_unit_test(test_bad_lexical_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
