/* test_sessions_pg.c - the sessions' PostgreSQL store (router/sessions_pg.c)
 * on a real PostgreSQL server (pg_testlib.h), through the same API as the
 * SQLite store: two connections stand for two routers of one site. A turn
 * taken by one is read and continued by the other; two turns of one
 * session at once keep the first and refuse the second (SB_EBUSY); owners,
 * expiry, retention, erasure and the hand-off outbox as in SQLite. Under a
 * privacy policy the values and the queued package are in the database
 * only sealed, come back to a box with the site's key, and not with
 * another; a delivered package's row stays, emptied, for the console.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/sessions_store.h"
#include "tests/pg_testlib.h"

static pg_cluster g_pg;
static char g_dsn[640];

static int group_setup(void **state) {
    if (pg_start(&g_pg) == 0 && pg_exec(&g_pg, "postgres", "CREATE DATABASE sessions") == 0)
        pg_dsn(&g_pg, "sessions", g_dsn, sizeof g_dsn);
    return 0;
}

static int group_teardown(void **state) {
    pg_stop(&g_pg);
    return 0;
}

#define NEED_PG() do { if (!g_dsn[0]) { skip(); return; } } while (0)

static rt_sessions *open_box(void) {
    char err[SB_ERR_LEN];
    rt_sessions *s = NULL;
    int rc = rt_sessions_open(g_dsn, &s, err);
    if (rc) fprintf(stderr, "open: %s\n", err);
    assert_int_equal(rc, 0);
    return s;
}

static void new_session(rt_session *ss, const char *owner) {
    memset(ss, 0, sizeof *ss);
    assert_int_equal(rt_session_new_id(ss->id), 0);
    snprintf(ss->owner, sizeof ss->owner, "%s", owner);
    ss->pipeline = sb_strdup("hotline");
    ss->slots = sb_strdup("{\"account\": null}");
    ss->stage = -1;
}

/* The turns of session id as "caller>reply|..." */
static void transcript(rt_sessions *s, const char *id, char *out, size_t n) {
    char err[SB_ERR_LEN];
    sb_jw w;
    sb_jw_init(&w);
    assert_int_equal(rt_session_transcript_json(s, id, &w, err), 0);
    sb_json_doc *d;
    assert_int_equal(sb_json_parse(w.p, w.len, &d, NULL), 0);
    const sb_json *t = sb_json_root(d);
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sb_json_len(t) && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%s%s>%s", i ? "|" : "",
                               sb_json_str(sb_json_get(sb_json_at(t, i), "caller")),
                               sb_json_str(sb_json_get(sb_json_at(t, i), "reply")));
    sb_json_doc_free(d);
    sb_jw_free(&w);
}

static void test_any_box_takes_the_next_turn(void **state) {
    NEED_PG();
    char err[SB_ERR_LEN], text[512];
    rt_sessions *a = open_box(), *b = open_box();
    rt_session ss, got;
    new_session(&ss, "app");
    ss.turns = 1;
    ss.intent = sb_strdup("billing");
    assert_int_equal(rt_session_commit(a, &ss, 600, "我的账号", "请问您的账号是多少？", 1000.0, err), 0);
    ss.turns = 2;
    assert_int_equal(rt_session_commit(a, &ss, 600, "4410032", "noted", 1001.0, err), 0);

    assert_int_equal(rt_session_load(b, ss.id, "app", 1002.0, &got, err), 0);     /* the other box */
    assert_int_equal(got.turns, 2);
    assert_string_equal(got.intent, "billing");
    assert_string_equal(got.pipeline, "hotline");
    assert_int_equal((int)got.created, 1000);
    assert_int_equal((int)got.expires, 1601);
    got.turns = 3;
    assert_int_equal(rt_session_commit(b, &got, 600, "thanks", "bye", 1003.0, err), 0);
    transcript(a, ss.id, text, sizeof text);
    assert_string_equal(text, "我的账号>请问您的账号是多少？|4410032>noted|thanks>bye");
    rt_session_clear(&got);
    assert_int_equal(rt_session_load(a, ss.id, "intruder", 1004.0, &got, err), SB_ENOTFOUND);
    rt_session_clear(&ss);
    rt_sessions_close(a);
    rt_sessions_close(b);
}

/* A caller's turn sent to two boxes at once (a retry through the
 * balancer): both read version v; the first commit wins, the second is
 * refused and nothing of it is kept - the answered turn stands. */
static void test_two_boxes_one_turn_loses_nothing(void **state) {
    NEED_PG();
    char err[SB_ERR_LEN], text[512];
    rt_sessions *a = open_box(), *b = open_box();
    rt_session ss, on_a, on_b;
    new_session(&ss, "app");
    ss.turns = 1;
    assert_int_equal(rt_session_commit(a, &ss, 600, "hello", "hi", 1000.0, err), 0);
    assert_int_equal(rt_session_load(a, ss.id, "app", 1001.0, &on_a, err), 0);
    assert_int_equal(rt_session_load(b, ss.id, "app", 1001.0, &on_b, err), 0);
    on_a.turns = on_b.turns = 2;
    assert_int_equal(rt_session_commit(a, &on_a, 600, "turn two", "answer from a", 1002.0, err), 0);
    assert_int_equal(rt_session_commit(b, &on_b, 600, "turn two", "answer from b", 1002.5, err), SB_EBUSY);
    assert_non_null(strstr(err, "another router"));
    on_b.failures = 1;              /* not even a row-only commit goes over a newer version */
    assert_int_equal(rt_session_commit(b, &on_b, 600, NULL, NULL, 1002.6, err), SB_EBUSY);
    transcript(b, ss.id, text, sizeof text);
    assert_string_equal(text, "hello>hi|turn two>answer from a");
    rt_session_clear(&on_b);
    assert_int_equal(rt_session_load(b, ss.id, "app", 1003.0, &on_b, err), 0);   /* read again: goes on */
    assert_int_equal(on_b.failures, 0);
    on_b.turns = 3;
    assert_int_equal(rt_session_commit(b, &on_b, 600, "three", "ok", 1003.0, err), 0);
    transcript(a, ss.id, text, sizeof text);
    assert_string_equal(text, "hello>hi|turn two>answer from a|three>ok");
    rt_session_clear(&ss);
    rt_session_clear(&on_a);
    rt_session_clear(&on_b);
    rt_sessions_close(a);
    rt_sessions_close(b);
}

static bool has_word(void *arg, const char *text, size_t len) { return memmem(text, len, arg, strlen(arg)) != NULL; }

static void test_expiry_retention_erasure(void **state) {
    NEED_PG();
    char err[SB_ERR_LEN];
    rt_sessions *s = open_box();
    assert_true(rt_sessions_sweep(s, 4999.0, err) >= 0);     /* the earlier tests' sessions */
    rt_session a, b, c, got;
    new_session(&a, "app");
    new_session(&b, "app");
    new_session(&c, "app");
    a.turns = b.turns = c.turns = 1;
    assert_int_equal(rt_session_commit(s, &a, 60, "a", "ra", 5000.0, err), 0);     /* expires 5060 */
    assert_int_equal(rt_session_commit(s, &b, 600, "my number is 13800138000", "ok", 5000.0, err), 0);
    assert_int_equal(rt_session_commit(s, &c, 600, "c", "rc", 5100.0, err), 0);
    assert_int_equal(rt_session_load(s, a.id, "app", 5061.0, &got, err), SB_ETIMEOUT);
    assert_int_equal(rt_sessions_sweep(s, 5061.0, err), 1);
    assert_int_equal(rt_session_load(s, a.id, "app", 5061.0, &got, err), SB_ENOTFOUND);
    assert_int_equal(rt_sessions_erase_matching(s, has_word, "13800138000", err), 1);
    assert_int_equal(rt_session_load(s, b.id, "app", 5061.0, &got, err), SB_ENOTFOUND);
    char q[200];
    snprintf(q, sizeof q, "SELECT count(*) FROM sb_session_turns WHERE caller LIKE '%%13800138000%%'");
    char *n = pg_dump(&g_pg, "sessions", q);
    assert_string_equal(n, "0\n");
    free(n);
    sb_bytes callers = { 0 };
    assert_int_equal(rt_session_erase(s, c.id, &callers, err), 1);
    assert_string_equal(callers.p, "c");
    sb_free(callers.p);
    assert_int_equal(rt_sessions_purge_before(s, 1e12, err), 0);
    rt_session_clear(&a);
    rt_session_clear(&b);
    rt_session_clear(&c);
    rt_sessions_close(s);
}

/* One box takes a due package; the other does not get it too while it is
 * being delivered. A failed try comes back at its next_at. */
static void test_handoff_outbox_shared(void **state) {
    NEED_PG();
    char err[SB_ERR_LEN];
    rt_sessions *a = open_box(), *b = open_box();
    rt_session ss;
    new_session(&ss, "app");
    ss.turns = 1;
    ss.done = true;
    ss.handoff_reason = "asked";
    ss.handoff_url = "https://desk.example/handoff";
    ss.handoff_confidence = 0.9;
    assert_int_equal(rt_session_commit(a, &ss, 600, "a person please", "connecting you", 2000.0, err), 0);
    assert_non_null(ss.handoff);
    assert_non_null(strstr(ss.handoff, "a person please"));    /* the package has this turn */
    rt_handoff_item items[4];
    assert_int_equal(rt_handoff_due(a, 2000.0, items, 4, err), 1);
    assert_string_equal(items[0].session, ss.id);
    assert_string_equal(items[0].url, "https://desk.example/handoff");
    rt_handoff_item other[4];
    assert_int_equal(rt_handoff_due(b, 2001.0, other, 4, err), 0);
    assert_int_equal(rt_handoff_retry(a, ss.id, 2010.0, "HTTP 503", err), 0);
    assert_int_equal(rt_handoff_due(b, 2011.0, other, 4, err), 1);
    assert_int_equal(other[0].attempts, 1);
    assert_int_equal(rt_handoff_delivered(b, ss.id, err), 0);
    assert_int_equal(rt_handoff_due(a, 3000.0, items + 1, 3, err), 0);
    rt_handoff_items_free(items, 1);
    rt_handoff_items_free(other, 1);
    rt_session_clear(&ss);
    rt_sessions_close(a);
    rt_sessions_close(b);
}

#define PHONE "13800138000"
#define PHONE_HEX "3133383030313338303030"      /* as bytea's text form would show it unsealed */
#define EMAIL "zhang.san@example.com"
static const uint8_t KEY[SB_SEAL_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                              17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };
static const uint8_t OTHER_KEY[SB_SEAL_KEY_LEN] = { 9 };

static rt_sessions *open_keyed(const uint8_t *key) {
    rt_sessions *s = open_box();
    if (key) rt_sessions_set_key(s, key);
    return s;
}

/* Rows of the three tables whose text (bytea as hex) holds needle. */
static int rows_holding(const char *needle) {
    char q[512];
    snprintf(q, sizeof q, "SELECT (SELECT count(*) FROM sb_sessions x WHERE strpos(x::text, '%s') > 0)"
                          " + (SELECT count(*) FROM sb_session_turns x WHERE strpos(x::text, '%s') > 0)"
                          " + (SELECT count(*) FROM sb_handoff_outbox x WHERE strpos(x::text, '%s') > 0)",
             needle, needle, needle);
    char *n = pg_dump(&g_pg, "sessions", q);
    int count = atoi(n);
    free(n);
    return count;
}

static void test_sealed_values_and_package(void **state) {
    NEED_PG();
    char err[SB_ERR_LEN];
    rt_sessions *a = open_keyed(KEY), *b = open_keyed(KEY), *wrong = open_keyed(OTHER_KEY), *none = open_keyed(NULL);
    sb_privacy *det;
    assert_int_equal(sb_privacy_new(SB_PII_ALL, &det, err), 0);
    sb_pii_table table = { 0 };
    char *said;
    size_t n;
    const char *words = "my number is 138 0013 8000, mail " EMAIL;
    assert_int_equal(sb_privacy_redact(det, words, strlen(words), SB_PII_PSEUDONYMIZE, &table, NULL, &said, &n), 0);
    sb_privacy_free(det);
    rt_session ss, got;
    new_session(&ss, "app");
    ss.turns = 1;
    ss.seal = &table;
    sb_free(ss.slots);
    ss.slots = sb_strdup("{\"phone\": \"\xE2\x9F\xA8PHONE_1\xE2\x9F\xA9\"}");
    assert_int_equal(rt_session_commit(a, &ss, 600, said, "noted", 6000.0, err), 0);
    ss.turns = 2;
    ss.done = true;
    ss.handoff_reason = "asked";
    ss.handoff_url = "https://desk.example/handoff";
    ss.handoff_confidence = 0.9;
    assert_int_equal(rt_session_commit(a, &ss, 600, "a person please", "connecting you", 6001.0, err), 0);
    assert_null(strstr(ss.handoff, PHONE));         /* the answer's copy: placeholders */
    /* No byte of a value in any table, as text or as hex. */
    assert_int_equal(rows_holding(PHONE), 0);
    assert_int_equal(rows_holding(PHONE_HEX), 0);
    assert_int_equal(rows_holding("zhang.san"), 0);
    assert_true(rows_holding("PHONE_1") > 0);

    /* The other box, with the site's key: the values come back. */
    assert_int_equal(rt_session_load(b, ss.id, "app", 6002.0, &got, err), 0);
    assert_int_equal(got.values.n, 2);
    char *reply;
    const char *model = "we call \xE2\x9F\xA8PHONE_1\xE2\x9F\xA9";
    assert_int_equal(sb_privacy_restore(&got.values, model, strlen(model), false, &reply, &n), 0);
    assert_string_equal(reply, "we call " PHONE);
    sb_free(reply);
    rt_session_clear(&got);
    /* Another key, or none: refused, saying why, never a value. */
    assert_int_equal(rt_session_load(wrong, ss.id, "app", 6002.0, &got, err), SB_EINVAL);
    assert_non_null(strstr(err, "do not open with runtime.secret_key_file"));
    assert_null(strstr(err, PHONE));
    assert_int_equal(rt_session_load(none, ss.id, "app", 6002.0, &got, err), SB_EINVAL);
    assert_non_null(strstr(err, "no runtime.secret_key_file"));

    /* The package: not opened under another key, opened with the real
     * values for delivery, then emptied and kept as delivered. */
    rt_handoff_item items[4];
    assert_int_equal(rt_handoff_due(wrong, 6002.0, items, 4, err), 1);
    assert_null(items[0].body);
    assert_non_null(strstr(items[0].error, "does not open"));
    rt_handoff_items_free(items, 1);
    assert_int_equal(rt_handoff_due(b, 6100.0, items, 4, err), 1);       /* after the first taker's minute */
    assert_non_null(strstr(items[0].body, "\"phone\":\"" PHONE "\""));
    assert_non_null(strstr(items[0].body, EMAIL));
    rt_handoff_items_free(items, 1);
    assert_int_equal(rt_handoff_delivered(b, ss.id, err), 0);
    assert_int_equal(rt_handoff_due(a, 7000.0, items, 4, err), 0);
    sb_jw w;
    sb_jw_init(&w);
    assert_int_equal(rt_handoff_list_json(a, 10, &w, err), 0);
    assert_non_null(strstr(w.p, "\"state\":\"delivered\""));
    assert_non_null(strstr(w.p, ss.id));
    sb_jw_free(&w);
    char q[160];
    snprintf(q, sizeof q, "SELECT body, sealed FROM sb_handoff_outbox WHERE session = '%s'", ss.id);
    char *row = pg_dump(&g_pg, "sessions", q);
    assert_string_equal(row, "|f\n");
    free(row);

    /* An erase by value finds the session by its sealed values only (the
     * words hold placeholders), with its package's row. */
    assert_int_equal(rt_sessions_erase_matching(b, has_word, PHONE, err), 1);
    assert_int_equal(rt_session_load(a, ss.id, "app", 6002.0, &got, err), SB_ENOTFOUND);
    snprintf(q, sizeof q, "SELECT count(*) FROM sb_handoff_outbox WHERE session = '%s'", ss.id);
    row = pg_dump(&g_pg, "sessions", q);
    assert_string_equal(row, "0\n");
    free(row);
    sb_free(said);
    sb_pii_table_free(&table);
    rt_session_clear(&ss);
    rt_sessions_close(a);
    rt_sessions_close(b);
    rt_sessions_close(wrong);
    rt_sessions_close(none);
}

static void test_store_names(void **state) {
    assert_true(rt_sessions_store_is_pg("postgresql://sb@db1/sb?sslmode=verify-full"));
    assert_true(rt_sessions_store_is_pg("postgres://db1/sb"));
    assert_true(rt_sessions_store_is_pg("host=db1 dbname=sb sslmode=require"));
    assert_false(rt_sessions_store_is_pg("/var/lib/sb/sessions.sqlite"));
    assert_false(rt_sessions_store_is_pg("/var/lib/a=b/sessions.sqlite"));
    assert_false(rt_sessions_store_is_pg("my sessions=1.sqlite"));
    char err[SB_ERR_LEN];
    rt_sessions *s = NULL;
    /* Nothing listens there: a clear error that names the server and not the password. */
    assert_int_equal(rt_sessions_open("postgresql://sb:s3cret@127.0.0.1:1/sb?connect_timeout=2", &s, err), SB_EIO);
    assert_null(s);
    assert_non_null(strstr(err, "postgres"));
    assert_null(strstr(err, "s3cret"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_box_takes_the_next_turn),
        cmocka_unit_test(test_two_boxes_one_turn_loses_nothing),
        cmocka_unit_test(test_expiry_retention_erasure),
        cmocka_unit_test(test_handoff_outbox_shared),
        cmocka_unit_test(test_sealed_values_and_package),
        cmocka_unit_test(test_store_names),
    };
    return cmocka_run_group_tests_name("sessions_pg", tests, group_setup, group_teardown);
}
