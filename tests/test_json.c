/* test_json.c - the router's strict JSON parser and emitter (common/json.c).
 *
 * Every HTTP body goes through this parser, so the rejections matter as much
 * as the acceptances: each case below is one thing a lenient parser lets
 * through. The emitter must produce JSON the parser accepts back, whatever
 * bytes a model generated.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/run/sb_run.h"

static sb_json_doc *parse_ok(const char *s) {
    sb_json_doc *d = NULL;
    char err[SB_ERR_LEN] = "";
    int rc = sb_json_parse(s, strlen(s), &d, err);
    if (rc) fail_msg("rejected %s: %s", s, err);
    return d;
}

static void test_accepts(void **state) {
    static const char *const ok[] = {
        "{}", "[]", "0", "-0", "1.5e10", "-1E-3", "true", "false", "null", "\"\"", " {\"a\" : [1, 2, {\"b\": null}] } ",
        "\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"", "\"中文 ok\"", "[[[[[[[[[[1]]]]]]]]]]",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(ok); i++) sb_json_doc_free(parse_ok(ok[i]));
}

static void test_rejects(void **state) {
    static const char *const bad[] = {
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{'a':1}", "{a:1}", "01", "1.", ".5", "+1", "1e", "NaN",
        "Infinity", "-", "tru", "nul", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00x\"",
        "\"a\nb\"", "\"\x01\"", "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "{\"a\":1}x", "1 2", "/*c*/1",
        "{\"a\":1,\"a\":2}", "[1 2]", "{\"a\" 1}", "1e400",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(bad); i++) {
        sb_json_doc *d = NULL;
        char err[SB_ERR_LEN] = "";
        int rc = sb_json_parse(bad[i], strlen(bad[i]), &d, err);
        if (rc != SB_EFORMAT) fail_msg("accepted %s", bad[i]);
        assert_null(d);
        assert_non_null(strstr(err, "invalid JSON at line"));
    }
}

static void test_error_position(void **state) {
    const char *s = "{\n  \"model\": \"x\",\n  \"stream\": tru\n}";
    sb_json_doc *d;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_json_parse(s, strlen(s), &d, err), SB_EFORMAT);
    assert_non_null(strstr(err, "line 3 column 13"));
}

static void test_depth_limit(void **state) {
    char deep[2 * SB_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i < SB_JSON_MAX_DEPTH + 1; i++) deep[n++] = '[';
    for (int i = 0; i < SB_JSON_MAX_DEPTH + 1; i++) deep[n++] = ']';
    sb_json_doc *d;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_json_parse(deep, n, &d, err), SB_EFORMAT);
    assert_non_null(strstr(err, "nested too deeply"));
    /* One level less is fine. */
    assert_int_equal(sb_json_parse(deep + 1, n - 2, &d, err), 0);
    sb_json_doc_free(d);
}

/* k nested arrays, each holding "x" before its child and 1, 2 innermost:
 * every level needs its commas. */
static void write_nested(sb_jw *w, int k) {
    for (int i = 0; i < k; i++) {
        sb_jw_arr(w);
        sb_jw_str(w, "x");
    }
    sb_jw_int(w, 1);
    sb_jw_int(w, 2);
    for (int i = 0; i < k; i++) sb_jw_arr_end(w);
}

/* The emitter writes exactly the depths the parser reads back, and
 * refuses (sticky, like out of memory) to go one deeper instead of
 * writing arrays without commas. */
static void test_emitter_depth(void **state) {
    for (int k = 1; k <= SB_JSON_MAX_DEPTH; k++) {
        sb_jw w;
        sb_jw_init(&w);
        write_nested(&w, k);
        assert_false(w.oom);
        sb_json_doc *d = NULL;
        char err[SB_ERR_LEN] = "";
        if (sb_json_parse(w.p, w.len, &d, err)) fail_msg("depth %d: the emitter wrote invalid JSON: %s", k, err);
        assert_int_equal(sb_json_depth(sb_json_root(d)), k);
        sb_jw w2;
        sb_jw_init(&w2);
        sb_jw_value(&w2, sb_json_root(d));          /* a parsed value of any depth writes back the same */
        assert_false(w2.oom);
        assert_string_equal(w.p, w2.p);
        sb_jw_free(&w2);
        sb_json_doc_free(d);
        sb_jw_free(&w);
    }
    sb_jw w;
    sb_jw_init(&w);
    write_nested(&w, SB_JSON_MAX_DEPTH + 1);
    assert_true(w.oom);
    assert_true(w.too_deep);
    sb_jw_reset(&w);                                /* reset clears the failure */
    assert_false(w.oom || w.too_deep);
    write_nested(&w, 2);
    assert_string_equal(w.p, "[\"x\",[\"x\",1,2]]");
    sb_jw_free(&w);
}

static void test_find_nul(void **state) {
    static const struct { const char *json, *path; } cases[] = {
        { "{\"model\": \"m\\u0000xyz\", \"messages\": []}", "model" },
        { "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", "messages[0].content" },
        { "{\"input\": \"\\u0000\"}", "input" },
        { "{\"stop\": [\"ok\", \"\\u0000\"]}", "stop[1]" },
        { "{\"o\": {\"k\\u0000z\": 1}}", "o.k" },
        { "\"\\u0000\"", "" },
        { "{\"model\": \"m\", \"n\": [1, {\"a\": \"\\u0001\"}]}", NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_json_doc *d = parse_ok(cases[i].json);
        char path[64] = "junk";
        bool found = sb_json_find_nul(sb_json_root(d), path, sizeof path);
        if (found != (cases[i].path != NULL)) fail_msg("%s: found %d", cases[i].json, found);
        if (found) assert_string_equal(path, cases[i].path);
        sb_json_doc_free(d);
    }
    assert_false(sb_json_find_nul(NULL, (char[4]){0}, 4));
}

static void test_accessors(void **state) {
    sb_json_doc *d = parse_ok("{\"s\":\"h\\u0000i\",\"n\":3,\"f\":2.5,\"b\":true,\"a\":[1,\"x\"],\"o\":{\"k\":null}}");
    const sb_json *r = sb_json_root(d);
    assert_int_equal(sb_json_type_of(r), SB_JSON_OBJECT);
    assert_int_equal(sb_json_len(r), 6);
    assert_int_equal(sb_json_len(sb_json_get(r, "s")), 3);     /* embedded NUL kept */
    assert_true(sb_json_is_int(sb_json_get(r, "n"), 0, 10));
    assert_false(sb_json_is_int(sb_json_get(r, "f"), 0, 10));
    assert_false(sb_json_is_int(sb_json_get(r, "n"), 4, 10));
    assert_true(sb_json_bool(sb_json_get(r, "b")));
    assert_string_equal(sb_json_str(sb_json_at(sb_json_get(r, "a"), 1)), "x");
    assert_null(sb_json_at(sb_json_get(r, "a"), 2));
    assert_int_equal(sb_json_type_of(sb_json_get(sb_json_get(r, "o"), "k")), SB_JSON_NULL);
    assert_null(sb_json_get(r, "missing"));
    assert_null(sb_json_str(sb_json_get(r, "n")));              /* wrong type: NULL, no crash */
    assert_null(sb_json_get(NULL, "x"));
    sb_json_doc_free(d);
}

static void test_emitter_round_trip(void **state) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "text");
    sb_jw_strn(&w, "a\"b\\c\n\x01\xff\xe4\xb8\xad", 11);    /* a lone 0xff becomes U+FFFD */
    sb_jw_key(&w, "list");
    sb_jw_arr(&w);
    sb_jw_int(&w, -7);
    sb_jw_num(&w, 0.25);
    sb_jw_num(&w, NAN);
    sb_jw_bool(&w, false);
    sb_jw_null(&w);
    sb_jw_obj(&w);
    sb_jw_obj_end(&w);
    sb_jw_arr_end(&w);
    sb_jw_obj_end(&w);
    assert_false(w.oom);
    assert_string_equal(w.p, "{\"text\":\"a\\\"b\\\\c\\n\\u0001\xef\xbf\xbd\xe4\xb8\xad\",\"list\":[-7,0.25,null,false,null,{}]}");
    sb_json_doc *d = parse_ok(w.p);
    sb_jw w2;
    sb_jw_init(&w2);
    sb_jw_value(&w2, sb_json_root(d));
    assert_string_equal(w.p, w2.p);
    sb_json_doc_free(d);
    sb_jw_free(&w);
    sb_jw_free(&w2);
}

/* parse -> sb_jw_value -> parse gives the same value, and the same bytes
 * when written again (what tests/fuzz/fuzz_json.c checks on every input;
 * the cases below are what it found). */
static void assert_round_trip(const char *in, size_t len, const char *want_out) {
    sb_json_doc *d = NULL, *d2 = NULL;
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_json_parse(in, len, &d, err), 0);
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_value(&w, sb_json_root(d));
    assert_false(w.oom);
    if (want_out) assert_string_equal(w.p, want_out);
    if (sb_json_parse(w.p, w.len, &d2, err)) fail_msg("writer output is not JSON: %s: %s", err, w.p);
    sb_jw w2;
    sb_jw_init(&w2);
    sb_jw_value(&w2, sb_json_root(d2));
    assert_int_equal(w2.len, w.len);
    assert_memory_equal(w2.p, w.p, w.len);
    sb_jw_free(&w2);
    sb_jw_free(&w);
    sb_json_doc_free(d2);
    sb_json_doc_free(d);
}

static void test_numbers_keep_their_value(void **state) {
    /* Was "%.9g": a seed of 123456789012345678 went out as 1.23456789e+17. */
    const char *in = "[123456789012345678,0.1,3.141592653589793,1.0000000000000002,-2.5e-300,1e300,4503599627370497]";
    assert_round_trip(in, strlen(in), NULL);
    sb_json_doc *d = parse_ok(in);
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_value(&w, sb_json_root(d));
    sb_json_doc *d2 = parse_ok(w.p);
    for (size_t i = 0; i < sb_json_len(sb_json_root(d)); i++)
        assert_true(sb_json_num(sb_json_at(sb_json_root(d), i)) == sb_json_num(sb_json_at(sb_json_root(d2), i)));
    sb_jw_reset(&w);
    sb_jw_num(&w, 0.7);                 /* still the short form when it reads back */
    assert_string_equal(w.p, "0.7");
    sb_jw_free(&w);
    sb_json_doc_free(d2);
    sb_json_doc_free(d);
}

static void test_key_with_nul_round_trips(void **state) {
    /* Was written with strlen: {"a\u0000b":1} came out as {"a":1}. */
    const char *in = "{\"a\\u0000b\":1,\"c\":2}";
    assert_round_trip(in, strlen(in), "{\"a\\u0000b\":1,\"c\":2}");
}

static void test_writer_depth_matches_parser(void **state) {
    /* The deepest document the parser accepts, with siblings at every level,
     * written back whole (test_emitter_depth: one level more is an error). */
    char deep[8 * SB_JSON_MAX_DEPTH];
    size_t n = 0;
    for (int i = 0; i < SB_JSON_MAX_DEPTH; i++) n += (size_t)sprintf(deep + n, "[0,");
    n += (size_t)sprintf(deep + n, "1,2");
    for (int i = 0; i < SB_JSON_MAX_DEPTH; i++) n += (size_t)sprintf(deep + n, ",3]");
    assert_round_trip(deep, n, deep);
}

static void test_extract_object(void **state) {
    sb_json_doc *d;
    const char *s = "Sure! Here it is:\n```json\n{\"topic\": \"pension {record}\", \"n\": [1]}\n```";
    const sb_json *o = sb_json_extract_object(s, strlen(s), &d);
    assert_non_null(o);
    assert_string_equal(sb_json_str(sb_json_get(o, "topic")), "pension {record}");
    sb_json_doc_free(d);
    const char *none = "no json {here: at all} sorry";
    assert_null(sb_json_extract_object(none, strlen(none), &d));
    assert_null(d);
}

static void test_allocation_failures(void **state) {
    const char *s = "{\"a\":[1,2,3,{\"b\":\"cccccccccccccccccccccccccccc\"}],\"d\":{\"e\":[true,false]}}";
    for (long n = 0; n < 64; n++) {
        sb_json_doc *d = NULL;
        sb_malloc_fail_after(n);
        int rc = sb_json_parse(s, strlen(s), &d, NULL);
        sb_malloc_fail_after(-1);
        if (rc == 0) { sb_json_doc_free(d); return; }
        assert_int_equal(rc, SB_ENOMEM);
        assert_null(d);
    }
    fail_msg("parse never succeeded");
}

/* sb_jw_fixed against printf's "%.*f" with the trailing zeros dropped,
 * over values of every magnitude and sign, and inside a container. */
static void test_writer_fixed(void **state) {
    (void)state;
    uint64_t x = 12345;
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        double v = ((double)(x >> 11) * 0x1.0p-53 - 0.3) * pow(10, (double)(i % 12) - 4);
        int dec = i % 7;
        char want[64];
        snprintf(want, sizeof want, "%.*f", dec, v);
        if (strchr(want, '.')) {
            char *e = want + strlen(want) - 1;
            while (*e == '0') *e-- = 0;
            if (*e == '.') *e = 0;
        }
        if (!strcmp(want, "-0")) strcpy(want, "0");
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_fixed(&w, v, dec);
        /* printf rounds the exact binary value, llround the scaled one: they may
         * differ by one unit in the last place, only at a tie. */
        if (strcmp(w.p, want)) {
            double got = strtod(w.p, NULL), ref = strtod(want, NULL);
            assert_true(fabs(got - ref) <= pow(10, -dec) * 1.000001);
        }
        sb_jw_free(&w);
    }
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_arr(&w);
    sb_jw_fixed(&w, 0.25, 2);
    sb_jw_fixed(&w, 0.05, 2);
    sb_jw_fixed(&w, -1.5, 1);
    sb_jw_fixed(&w, 3.0, 3);
    sb_jw_fixed(&w, 1234.56789, 1);
    sb_jw_fixed(&w, 1e300, 2);          /* beyond int64: the exact writer */
    sb_jw_fixed(&w, NAN, 2);
    sb_jw_arr_end(&w);
    assert_string_equal(w.p, "[0.25,0.05,-1.5,3,1234.6,1e+300,null]");
    sb_jw_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_error_position),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_accessors),
        cmocka_unit_test(test_emitter_round_trip),
        cmocka_unit_test(test_emitter_depth),
        cmocka_unit_test(test_find_nul),
        cmocka_unit_test(test_numbers_keep_their_value),
        cmocka_unit_test(test_key_with_nul_round_trips),
        cmocka_unit_test(test_writer_depth_matches_parser),
        cmocka_unit_test(test_extract_object),
        cmocka_unit_test(test_writer_fixed),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
