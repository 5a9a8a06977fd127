/* test_classify.c - the intent classifier over sentence vectors (router/classify/classify.c).
 *
 * Synthetic vectors: each label is a random unit prototype, its examples
 * and test calls are the prototype plus Gaussian noise, renormalised. Exact
 * cases check each method's definition on hand-made vectors (renormalised
 * mean, nearest example, similarity-weighted vote); random cases check
 * accuracy, that the fitted temperature gives calibrated probabilities
 * (expected calibration error on fresh samples), the reject class, errors,
 * determinism and allocation failures.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "router/classify/sb_classify.h"
#include "common/sb_common.h"

#define DIM 32
static const char *const NAMES[] = {"a", "b", "c", "d", "e", "f"};

/* xorshift64* + Box-Muller: reproducible across libcs (rand() is not). */
static double urand(uint64_t *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}
static double grand(uint64_t *s) {
    double u = urand(s) + 1e-12, v = urand(s);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}
static void normalise(float *v, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)v[i] * v[i];
    for (int i = 0; i < n; i++) v[i] = (float)(v[i] / sqrt(ss));
}
static void sample(uint64_t *s, const float *proto, double noise, float *out) {
    for (int i = 0; i < DIM; i++) out[i] = proto[i] + (float)(noise * grand(s));
    normalise(out, DIM);
}
static void protos(uint64_t *s, int n, float *p) {
    for (int k = 0; k < n; k++) sample(s, (float[DIM]){0}, 1.0, p + k * DIM);
}

static sb_classifier *make(sb_cls_method m, int n_labels, float desc_weight) {
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    o.method = m;
    o.desc_weight = desc_weight;
    o.center = 0;                             /* exact cases compare raw cosines */
    sb_classifier *c = NULL;
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_cls_new(DIM, n_labels, NAMES, &o, &c, err), 0);
    return c;
}

static void add(sb_classifier *c, int label, const float *v) {
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_cls_add_example(c, label, v, err), 0);
}

static void train(sb_classifier *c) {
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_cls_train(c, err), 0);
}

static void unit(float *v, int i) {
    memset(v, 0, DIM * sizeof *v);
    v[i] = 1;
}

/* Centroid = renormalised mean: two orthogonal examples of "a", the query
 * on their bisector scores exactly 1; "b" sits nearer each single example
 * than the bisector does, yet loses to the mean. */
static void test_centroid_is_renormalised_mean(void **st) {
    (void)st;
    sb_classifier *c = make(SB_CLS_CENTROID, 2, 0);
    float e0[DIM], e1[DIM], q[DIM] = {0}, bq[DIM] = {0};
    unit(e0, 0), unit(e1, 1);
    add(c, 0, e0), add(c, 0, e1);
    bq[0] = 0.9f, bq[2] = 0.435889894f;      /* unit, cos 0.9 with e0 */
    add(c, 1, bq);
    train(c);
    q[0] = q[1] = (float)M_SQRT1_2;
    sb_cls_result r;
    assert_int_equal(sb_cls_classify(c, q, &r), 0);
    assert_int_equal(r.top, 0);
    assert_float_equal(r.score[0], 1.0, 1e-5);
    assert_float_equal(r.score[1], 0.9 * M_SQRT1_2, 1e-5);
    assert_float_equal(r.margin, r.score[0] - r.score[1], 1e-6);
    /* 1-NN on the same data picks b: its example is closer than e0 (0.707) */
    sb_classifier *n = make(SB_CLS_1NN, 2, 0);
    add(n, 0, e0), add(n, 0, e1), add(n, 1, bq);
    train(n);
    float q2[DIM] = {0};
    q2[0] = 0.8f, q2[1] = 0.55f, q2[2] = 0.2f;   /* e0 0.807, b 0.814, mean of a 0.963 */
    normalise(q2, DIM);
    assert_int_equal(sb_cls_classify(n, q2, &r), 0);
    assert_int_equal(r.top, 1);
    assert_int_equal(sb_cls_classify(c, q2, &r), 0);
    assert_int_equal(r.top, 0);               /* the mean of a is still closer */
    sb_cls_free(c);
    sb_cls_free(n);
}

/* kNN, k = 3: score_c = sum of the similarities of c's neighbours / k. */
static void test_knn_weighted_vote(void **st) {
    (void)st;
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    o.method = SB_CLS_KNN, o.k = 3, o.desc_weight = 0, o.calibrate = 0, o.center = 0;
    sb_classifier *c = NULL;
    assert_int_equal(sb_cls_new(DIM, 2, NAMES, &o, &c, NULL), 0);
    float v[DIM];
    /* a: one example at cos 0.9; b: two at cos 0.6 and 0.5, one at 0.1 (out of the k) */
    float sims[4] = {0.9f, 0.6f, 0.5f, 0.1f};
    int labels[4] = {0, 1, 1, 1};
    for (int i = 0; i < 4; i++) {
        memset(v, 0, sizeof v);
        v[0] = sims[i], v[i + 1] = sqrtf(1 - sims[i] * sims[i]);
        add(c, labels[i], v);
    }
    train(c);
    float q[DIM];
    unit(q, 0);
    sb_cls_result r;
    assert_int_equal(sb_cls_classify(c, q, &r), 0);
    assert_int_equal(r.top, 1);               /* 1.1 / 3 beats 0.9 / 3 */
    assert_float_equal(r.score[0], 1.1 / 3, 1e-5);
    assert_float_equal(r.score[1], 0.9 / 3, 1e-5);
    /* uncalibrated: p = softmax(score / 0.05) */
    double e = exp((1.1 / 3 - 0.9 / 3) / 0.05);
    assert_float_equal(r.prob[0], e / (1 + e), 1e-4);
    sb_cls_free(c);
}

/* Centring: every score is the cosine of (call - mean) with (example - mean),
 * the mean taken over the training points. */
static void test_centring(void **st) {
    (void)st;
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    o.method = SB_CLS_1NN, o.desc_weight = 0, o.center = 1;
    sb_classifier *c = NULL;
    assert_int_equal(sb_cls_new(DIM, 3, NAMES, &o, &c, NULL), 0);
    float e[3][DIM], m[DIM] = {0}, q[DIM] = {0};
    for (int k = 0; k < 3; k++) {
        unit(e[k], k), add(c, k, e[k]);
        for (int d = 0; d < DIM; d++) m[d] += e[k][d] / 3;
    }
    train(c);
    q[0] = 0.7f, q[2] = 0.714f, q[3] = 0.1f;
    normalise(q, DIM);
    sb_cls_result r;
    assert_int_equal(sb_cls_classify(c, q, &r), 0);
    for (int j = 0; j < r.n; j++) {
        double num = 0, nq = 0, ne = 0;
        for (int d = 0; d < DIM; d++) {
            double a = q[d] - m[d], b = e[r.idx[j]][d] - m[d];
            num += a * b, nq += a * a, ne += b * b;
        }
        assert_float_equal(r.score[j], num / sqrt(nq * ne), 1e-5);
    }
    sb_cls_free(c);
}

/* A description alone trains its label; with desc_weight 0 it is ignored
 * and the label without examples is an error. */
static void test_description(void **st) {
    (void)st;
    float v[DIM];
    char err[SB_ERR_LEN] = "";
    for (int m = SB_CLS_CENTROID; m <= SB_CLS_LOGREG; m++) {
        sb_classifier *c = make((sb_cls_method)m, 2, 1.0f);
        unit(v, 0), add(c, 0, v);
        unit(v, 1), add(c, 0, v);
        unit(v, 5);
        assert_int_equal(sb_cls_set_description(c, 1, v, err), 0);
        train(c);
        sb_cls_result r;
        v[4] = 0.3f, normalise(v, DIM);
        assert_int_equal(sb_cls_classify(c, v, &r), 0);
        assert_string_equal(sb_cls_label_name(c, r.top), "b");
        sb_cls_free(c);
    }
    sb_classifier *c = make(SB_CLS_CENTROID, 2, 0);
    unit(v, 0), add(c, 0, v);
    unit(v, 5);
    assert_int_equal(sb_cls_set_description(c, 1, v, err), 0);
    assert_int_equal(sb_cls_train(c, err), SB_EINVAL);
    assert_non_null(strstr(err, "'b' has no example"));
    sb_cls_free(c);
}

/* Accuracy on fresh noisy samples: 6 labels, 5 examples each. */
static double accuracy(sb_cls_method m, uint64_t seed, double noise, int per_label, double *ece, float *temp) {
    uint64_t s = seed;
    float P[6 * DIM], v[DIM];
    protos(&s, 6, P);
    sb_classifier *c = make(m, 6, 0);
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < per_label; i++) sample(&s, P + k * DIM, noise, v), add(c, k, v);
    train(c);
    enum { N = 1200 };
    static float conf[N];
    static int ok[N];
    int right = 0;
    for (int i = 0; i < N; i++) {
        int k = i % 6;
        sample(&s, P + k * DIM, noise, v);
        sb_cls_result r;
        assert_int_equal(sb_cls_classify(c, v, &r), 0);
        float psum = 0;
        for (int j = 0; j < r.n; j++) psum += r.prob[j];
        assert_float_equal(psum, 1.0, 1e-4);
        assert_true(r.margin >= 0);
        ok[i] = r.top == k;
        conf[i] = r.confidence;
        right += ok[i];
    }
    if (ece) *ece = sb_cls_ece(conf, ok, N, 10);
    if (temp) *temp = sb_cls_temperature(c);
    sb_cls_free(c);
    return (double)right / N;
}

static void test_methods_accuracy(void **st) {
    (void)st;
    for (int m = SB_CLS_CENTROID; m <= SB_CLS_LOGREG; m++) {
        double acc = accuracy((sb_cls_method)m, 42 + (uint64_t)m, 0.12, 5, NULL, NULL);
        printf("  %-8s easy accuracy %.3f\n", sb_cls_method_name((sb_cls_method)m), acc);
        assert_true(acc > 0.97);
    }
}

/* Calibration: on a hard setting (accuracy well below 1), the fitted T
 * makes confidence track accuracy; a far-off fixed T does not. */
static void test_calibration(void **st) {
    (void)st;
    for (int m = SB_CLS_CENTROID; m <= SB_CLS_LOGREG; m++) {
        double ece;
        float t;
        double acc = accuracy((sb_cls_method)m, 7 + (uint64_t)m, 0.35, 20, &ece, &t);
        printf("  %-8s hard accuracy %.3f ECE %.3f T %.4f\n", sb_cls_method_name((sb_cls_method)m), acc, ece, t);
        assert_true(acc > 0.4 && acc < 0.99);
        assert_true(ece < 0.08);
    }
    /* uncalibrated: the default T is far too sharp for logits / too flat... either way, measurably off */
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    o.desc_weight = 0, o.calibrate = 0, o.fixed_t = 1.0f;      /* a flat softmax over cosines */
    uint64_t s = 7;
    float P[6 * DIM], v[DIM];
    protos(&s, 6, P);
    sb_classifier *c = NULL;
    assert_int_equal(sb_cls_new(DIM, 6, NAMES, &o, &c, NULL), 0);
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < 20; i++) sample(&s, P + k * DIM, 0.35, v), add(c, k, v);
    train(c);
    float conf[600];
    int ok[600];
    for (int i = 0; i < 600; i++) {
        sample(&s, P + (i % 6) * DIM, 0.35, v);
        sb_cls_result r;
        sb_cls_classify(c, v, &r);
        conf[i] = r.confidence, ok[i] = r.top == i % 6;
    }
    assert_true(sb_cls_ece(conf, ok, 600, 10) > 0.3);
    sb_cls_free(c);
}

/* Out-of-scope examples train a reject class; in-scope calls still route. */
static void test_reject_class(void **st) {
    (void)st;
    for (int m = SB_CLS_CENTROID; m <= SB_CLS_LOGREG; m++) {
        uint64_t s = 99;
        float P[4 * DIM], v[DIM];
        protos(&s, 4, P);                      /* 3 labels + an out-of-scope region */
        sb_classifier *c = make((sb_cls_method)m, 3, 0);
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 5; i++) sample(&s, P + k * DIM, 0.12, v), add(c, k == 3 ? SB_CLS_OOS : k, v);
        train(c);
        assert_int_equal(sb_cls_n_classes(c), 4);
        assert_int_equal(sb_cls_n_examples(c, SB_CLS_OOS), 5);
        assert_string_equal(sb_cls_label_name(c, 3), SB_CLS_OOS_NAME);
        int rej = 0, right = 0;
        for (int i = 0; i < 200; i++) {
            int k = i % 4;
            sample(&s, P + k * DIM, 0.12, v);
            sb_cls_result r;
            assert_int_equal(sb_cls_classify(c, v, &r), 0);
            if (k == 3) rej += r.rejected;
            else right += r.top == k && !r.rejected;
        }
        assert_true(rej >= 48);
        assert_true(right >= 147);
        sb_cls_free(c);
    }
}

static void test_errors(void **st) {
    (void)st;
    char err[SB_ERR_LEN] = "";
    sb_classifier *c = NULL;
    assert_int_equal(sb_cls_new(0, 2, NAMES, NULL, &c, err), SB_EINVAL);
    assert_int_equal(sb_cls_new(DIM, SB_CLS_MAX_LABELS + 1, NULL, NULL, &c, err), SB_EINVAL);
    assert_null(c);
    c = make(SB_CLS_CENTROID, 2, 0);
    float v[DIM];
    unit(v, 0);
    assert_int_equal(sb_cls_add_example(c, 2, v, err), SB_EINVAL);
    assert_int_equal(sb_cls_add_example(c, -2, v, err), SB_EINVAL);
    v[3] = NAN;
    assert_int_equal(sb_cls_add_example(c, 0, v, err), SB_EINVAL);
    unit(v, 0);
    sb_cls_result r;
    assert_int_equal(sb_cls_classify(c, v, &r), SB_EINVAL);   /* not trained */
    add(c, 0, v);
    add(c, 1, v);
    train(c);
    add(c, 1, v);                                             /* needs training again */
    assert_int_equal(sb_cls_classify(c, v, &r), SB_EINVAL);
    assert_int_equal(sb_cls_method_parse("knn"), SB_CLS_KNN);
    assert_int_equal(sb_cls_method_parse("svm"), -1);
    sb_cls_free(c);
}

/* Logreg from zero with full-batch steps: two trainings agree bit for bit. */
static void test_logreg_deterministic(void **st) {
    (void)st;
    float conf[2][50];
    for (int run = 0; run < 2; run++) {
        uint64_t s = 5;
        float P[3 * DIM], v[DIM];
        protos(&s, 3, P);
        sb_classifier *c = make(SB_CLS_LOGREG, 3, 0);
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 4; i++) sample(&s, P + k * DIM, 0.3, v), add(c, k, v);
        train(c);
        for (int i = 0; i < 50; i++) {
            sample(&s, P + (i % 3) * DIM, 0.3, v);
            sb_cls_result r;
            sb_cls_classify(c, v, &r);
            conf[run][i] = r.prob[0] * (float)(r.top + 1);
        }
        sb_cls_free(c);
    }
    assert_memory_equal(conf[0], conf[1], sizeof conf[0]);
}

static void test_ece(void **st) {
    (void)st;
    /* bin [0.9,1]: conf 0.95 and 1.0, one right -> |0.5 - 0.975| * 2/4; bin [0.5,0.6): 0.5, 0.5 both right -> 0.5 * 2/4 */
    float conf[4] = {0.95f, 1.0f, 0.5f, 0.5f};
    int ok[4] = {1, 0, 1, 1};
    assert_float_equal(sb_cls_ece(conf, ok, 4, 10), 0.475 * 0.5 + 0.5 * 0.5, 1e-6);
    assert_float_equal(sb_cls_ece(conf, ok, 0, 10), 0, 0);
}

/* Every allocation of new + add + train may fail: a clean error, no leak
 * (ASan), and success once enough allocations succeed. */
static void test_alloc_failures(void **st) {
    (void)st;
    float v[DIM];
    for (int m = SB_CLS_CENTROID; m <= SB_CLS_LOGREG; m++) {
        for (long after = 0;; after++) {
            sb_cls_opts o;
            sb_cls_opts_default(&o);
            o.method = (sb_cls_method)m;
            sb_classifier *c = NULL;
            int rc;
            sb_malloc_fail_after(after);
            rc = sb_cls_new(DIM, 2, NAMES, &o, &c, NULL);
            for (int i = 0; rc == 0 && i < 6; i++) unit(v, i), rc = sb_cls_add_example(c, i % 2, v, NULL);
            if (rc == 0) unit(v, 9), rc = sb_cls_set_description(c, 1, v, NULL);
            if (rc == 0) rc = sb_cls_train(c, NULL);
            sb_malloc_fail_after(-1);
            sb_cls_free(c);
            if (rc == 0) break;
            assert_int_equal(rc, SB_ENOMEM);
            assert_true(after < 100);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_centroid_is_renormalised_mean),
        cmocka_unit_test(test_knn_weighted_vote),
        cmocka_unit_test(test_centring),
        cmocka_unit_test(test_description),
        cmocka_unit_test(test_methods_accuracy),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_reject_class),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_logreg_deterministic),
        cmocka_unit_test(test_ece),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
