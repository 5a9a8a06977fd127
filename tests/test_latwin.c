/* test_latwin.c - the console's latency percentiles, kept sorted as calls
 * enter and leave the trace ring (router/latwin.c).
 *
 * The figures must be those of sorting the ring's values afresh (nearest
 * rank), whatever the order calls came and went in: checked against a
 * brute-force sort over a sliding window of random latencies, with ties.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/sb_common.h"
#include "router/obs.h"

static uint64_t lcg = 0x9E3779B97F4A7C15ull;
static double rnd_ms(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    /* Few distinct values, so ties (equal latencies) are common. */
    return (double)((lcg >> 33) % 97) * 2.5;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile of v (sorted here), as the JSON prints it. */
static double brute(double *v, size_t n, double q) {
    qsort(v, n, sizeof *v, cmp_d);
    size_t rank = (size_t)(q * (double)n + 0.999999);
    return v[(rank ? rank : 1) - 1];
}

/* The one percentile every report prints (common/) is the same nearest rank:
 * the console, `route eval`, `kb eval` and the benches all agree. */
static void test_percentile_is_nearest_rank(void **state) {
    (void)state;
    double v[5] = { 5, 1, 3, 2, 4 };
    sb_sort_doubles(v, 5);
    for (int i = 0; i < 5; i++) assert_true(v[i] == i + 1);
    assert_true(sb_percentile(v, 5, 0.20) == 1);
    assert_true(sb_percentile(v, 5, 0.50) == 3);
    assert_true(sb_percentile(v, 5, 0.95) == 5);
    assert_true(sb_percentile(v, 0, 0.50) == 0);
    for (size_t n = 1; n < 60; n++) {
        double a[60], b[60];
        for (size_t i = 0; i < n; i++) a[i] = b[i] = rnd_ms();
        sb_sort_doubles(a, n);
        assert_true(sb_percentile(a, n, 0.95) == brute(b, n, 0.95));
        assert_true(sb_percentile(a, n, 0.50) == brute(b, n, 0.50));
    }
}

static const sb_json *key_of(const sb_json *root, const char *stage_key) {
    return sb_json_get(sb_json_get(root, "stages"), stage_key);
}

static void check_against(rt_latwin *lw, const double *win, size_t n, const char *stage_key) {
    sb_jw w;
    sb_jw_init(&w);
    rt_latwin_json(lw, &w);
    assert_false(w.oom);
    sb_json_doc *d = NULL;
    assert_int_equal(sb_json_parse(w.p, w.len, &d, NULL), 0);
    const sb_json *k = key_of(sb_json_root(d), stage_key);
    if (!n) {
        assert_null(k);                 /* a stage no call in the ring ran is not shown */
    } else {
        assert_non_null(k);
        assert_int_equal((int64_t)sb_json_num(sb_json_get(k, "n")), (int64_t)n);
        double *copy = malloc(n * sizeof *copy);
        assert_non_null(copy);
        memcpy(copy, win, n * sizeof *copy);
        assert_true(sb_json_num(sb_json_get(k, "p50")) == brute(copy, n, 0.50));
        assert_true(sb_json_num(sb_json_get(k, "p95")) == brute(copy, n, 0.95));
        assert_true(sb_json_num(sb_json_get(k, "p99")) == brute(copy, n, 0.99));
        free(copy);
    }
    sb_json_doc_free(d);
    sb_jw_free(&w);
}

/* A ring of 50 over 600 calls of two stages: after every call the window's
 * figures are the brute-force ones. */
static void test_latwin_sliding_window(void **state) {
    (void)state;
    enum { CAP = 50, CALLS = 600 };
    double a[CALLS], b[CALLS];
    rt_latwin lw = {0};
    for (int i = 0; i < CALLS; i++) {
        a[i] = rnd_ms();
        b[i] = rnd_ms();
        assert_int_equal(rt_latwin_add(&lw, "p", "route", a[i]), 0);
        assert_int_equal(rt_latwin_add(&lw, "p", "answer", b[i]), 0);
        if (i >= CAP) {                 /* the oldest call leaves the ring */
            rt_latwin_remove(&lw, "p", "route", a[i - CAP]);
            rt_latwin_remove(&lw, "p", "answer", b[i - CAP]);
        }
        int lo = i >= CAP ? i - CAP + 1 : 0;
        if (i % 7 == 0 || i == CALLS - 1) {
            check_against(&lw, a + lo, (size_t)(i - lo + 1), "p/route");
            check_against(&lw, b + lo, (size_t)(i - lo + 1), "p/answer");
        }
    }
    /* Every call leaves: the stages disappear from the view. */
    for (int i = CALLS - CAP; i < CALLS; i++) {
        rt_latwin_remove(&lw, "p", "route", a[i]);
        rt_latwin_remove(&lw, "p", "answer", b[i]);
    }
    check_against(&lw, a, 0, "p/route");
    rt_latwin_clear(&lw);
}

/* End to end and TTFT are their own keys; removing a value never added (its
 * add failed for memory) changes nothing. */
static void test_latwin_special_keys_and_unknown_removal(void **state) {
    (void)state;
    rt_latwin lw = {0};
    assert_int_equal(rt_latwin_add(&lw, "", RT_LAT_END_TO_END, 120), 0);
    assert_int_equal(rt_latwin_add(&lw, "", RT_LAT_END_TO_END, 80), 0);
    assert_int_equal(rt_latwin_add(&lw, "", RT_LAT_TTFT, 30), 0);
    rt_latwin_remove(&lw, "", RT_LAT_END_TO_END, 99);      /* not there */
    rt_latwin_remove(&lw, "q", "nope", 1);
    sb_jw w;
    sb_jw_init(&w);
    rt_latwin_json(&lw, &w);
    sb_json_doc *d = NULL;
    assert_int_equal(sb_json_parse(w.p, w.len, &d, NULL), 0);
    const sb_json *e = sb_json_get(sb_json_root(d), "end_to_end");
    assert_int_equal((int64_t)sb_json_num(sb_json_get(e, "n")), 2);
    assert_true(sb_json_num(sb_json_get(e, "p50")) == 80);
    assert_true(sb_json_num(sb_json_get(e, "p99")) == 120);
    assert_true(sb_json_num(sb_json_get(sb_json_get(sb_json_root(d), "ttft"), "p95")) == 30);
    assert_int_equal(sb_json_len(sb_json_get(sb_json_root(d), "stages")), 0);
    sb_json_doc_free(d);
    sb_jw_reset(&w);
    rt_latwin_clear(&lw);
    rt_latwin_json(&lw, &w);            /* empty: nulls, not a crash */
    assert_int_equal(sb_json_parse(w.p, w.len, &d, NULL), 0);
    assert_int_equal(sb_json_type_of(sb_json_get(sb_json_get(sb_json_root(d), "end_to_end"), "p50")), SB_JSON_NULL);
    sb_json_doc_free(d);
    sb_jw_free(&w);
}

static void test_latwin_out_of_memory(void **state) {
    (void)state;
    rt_latwin lw = {0};
    sb_malloc_fail_after(0);
    assert_int_equal(rt_latwin_add(&lw, "p", "s", 1), SB_ENOMEM);
    sb_malloc_fail_after(-1);
    rt_latwin_remove(&lw, "p", "s", 1);
    assert_int_equal(rt_latwin_add(&lw, "p", "s", 1), 0);
    rt_latwin_clear(&lw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_is_nearest_rank),
        cmocka_unit_test(test_latwin_sliding_window),
        cmocka_unit_test(test_latwin_special_keys_and_unknown_removal),
        cmocka_unit_test(test_latwin_out_of_memory),
    };
    return cmocka_run_group_tests_name("latwin", tests, NULL, NULL);
}
