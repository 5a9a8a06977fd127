/* test_session_seal.c - a conversation's values under a privacy policy in
 * the session store (router/sessions_store.c over router/sessions.c) on a real SQLite file: the values
 * behind the placeholders are only in the file sealed (neither the
 * database nor its WAL holds a byte of them), they come back for the next
 * turn with the right key, and do not with another key, without a key, or
 * in another session's row; the hand-off package waits sealed and is
 * opened for delivery with the real values; an erase by value finds a
 * session by its sealed values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/router_internal.h"
#include "tests/bytes_testlib.h"

#define PHONE "13800138000"
#define EMAIL "zhang.san@example.com"

static char dir[64], path[128];
static const uint8_t KEY[SB_SEAL_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                              17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };
static const uint8_t OTHER_KEY[SB_SEAL_KEY_LEN] = { 9 };

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/sb-test-seal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sessions.sqlite", dir);
    return 0;
}

static int teardown(void **state) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static rt_sessions *open_store(const uint8_t *key) {
    char err[SB_ERR_LEN];
    rt_sessions *s;
    assert_int_equal(rt_sessions_open(path, &s, err), 0);
    if (key) rt_sessions_set_key(s, key);
    return s;
}

/* The caller's words redacted into table, as the privacy door does. */
static char *redacted(const char *said, sb_pii_table *table) {
    char err[SB_ERR_LEN], *out;
    size_t n;
    sb_privacy *det;
    assert_int_equal(sb_privacy_new(SB_PII_ALL, &det, err), 0);
    assert_int_equal(sb_privacy_redact(det, said, strlen(said), SB_PII_PSEUDONYMIZE, table, NULL, &out, &n), 0);
    sb_privacy_free(det);
    return out;
}

/* A session of one turn whose caller gave a mobile and an e-mail. */
static void commit_private_turn(rt_sessions *s, rt_session *ss, sb_pii_table *table) {
    char err[SB_ERR_LEN];
    memset(ss, 0, sizeof *ss);
    assert_int_equal(rt_session_new_id(ss->id), 0);
    snprintf(ss->owner, sizeof ss->owner, "app");
    ss->pipeline = sb_strdup("hotline");
    ss->slots = sb_strdup("{\"phone\": \"\xE2\x9F\xA8PHONE_1\xE2\x9F\xA9\"}");
    ss->stage = -1;
    ss->turns = 1;
    char *caller = redacted("my number is 138 0013 8000, mail " EMAIL, table);
    assert_null(strstr(caller, PHONE));
    ss->seal = table;
    assert_int_equal(rt_session_commit(s, ss, 600, caller, "noted \xE2\x9F\xA8PHONE_1\xE2\x9F\xA9", 1000.0, err), 0);
    sb_free(caller);
}

static void test_values_only_sealed_and_back(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store(KEY);
    rt_session ss;
    sb_pii_table table = { 0 };
    commit_private_turn(s, &ss, &table);
    /* The file and its WAL, the store still open (the WAL not checkpointed). */
    assert_false(db_holds(path, PHONE));
    assert_false(db_holds(path, "138 0013 8000"));
    assert_false(db_holds(path, "zhang.san"));
    assert_true(db_holds(path, "PHONE_1"));     /* the transcript: placeholders */
    char id[RT_SESSION_ID_LEN + 1];
    snprintf(id, sizeof id, "%s", ss.id);
    rt_session_clear(&ss);
    sb_pii_table_free(&table);
    rt_sessions_close(s);
    assert_false(db_holds(path, PHONE));

    /* The next turn, after a restart: the values are back. */
    s = open_store(KEY);
    rt_session back;
    assert_int_equal(rt_session_load(s, id, "app", 1001.0, &back, err), 0);
    assert_int_equal(back.values.n, 2);
    char *reply;
    size_t n;
    const char *model = "we call \xE2\x9F\xA8PHONE_1\xE2\x9F\xA9";
    assert_int_equal(sb_privacy_restore(&back.values, model, strlen(model), false, &reply, &n), 0);
    assert_string_equal(reply, "we call " PHONE);
    sb_free(reply);
    /* A commit without the call's table keeps the loaded values sealed. */
    back.turns = 2;
    assert_int_equal(rt_session_commit(s, &back, 600, "and then?", "done", 1002.0, err), 0);
    rt_session_clear(&back);
    rt_sessions_close(s);
    s = open_store(KEY);
    assert_int_equal(rt_session_load(s, id, "app", 1003.0, &back, err), 0);
    assert_int_equal(back.values.n, 2);
    assert_string_equal(back.values.v[1].value, EMAIL);
    rt_session_clear(&back);
    rt_sessions_close(s);
    assert_false(db_holds(path, PHONE));
}

static void test_wrong_key_no_key_moved_box(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store(KEY);
    rt_session a, b, got;
    sb_pii_table ta = { 0 }, tb = { 0 };
    commit_private_turn(s, &a, &ta);
    commit_private_turn(s, &b, &tb);
    rt_sessions_close(s);

    s = open_store(OTHER_KEY);
    assert_int_equal(rt_session_load(s, a.id, "app", 1001.0, &got, err), SB_EINVAL);
    assert_non_null(strstr(err, "do not open with runtime.secret_key_file"));
    assert_null(strstr(err, PHONE));
    rt_sessions_close(s);
    s = open_store(NULL);
    assert_int_equal(rt_session_load(s, a.id, "app", 1001.0, &got, err), SB_EINVAL);
    assert_non_null(strstr(err, "no runtime.secret_key_file"));
    rt_sessions_close(s);

    /* a's box copied into b's row: bound to a, it does not open in b. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE sessions SET values_box = (SELECT values_box FROM sessions WHERE id = '%s')"
                              " WHERE id = '%s'", a.id, b.id);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    s = open_store(KEY);
    assert_int_equal(rt_session_load(s, b.id, "app", 1001.0, &got, err), SB_EINVAL);
    assert_int_equal(rt_session_load(s, a.id, "app", 1001.0, &got, err), 0);
    rt_session_clear(&got);
    rt_sessions_close(s);
    rt_session_clear(&a);
    rt_session_clear(&b);
    sb_pii_table_free(&ta);
    sb_pii_table_free(&tb);
}

static void test_handoff_package_sealed_until_sent(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store(KEY);
    rt_session ss;
    sb_pii_table table = { 0 };
    commit_private_turn(s, &ss, &table);
    ss.turns = 2;
    ss.done = true;
    ss.handoff_reason = "asked";
    ss.handoff_url = "https://crm.example/handoff";
    ss.handoff_confidence = 0.9;
    assert_int_equal(rt_session_commit(s, &ss, 600, "a person please", "transferring", 1001.0, err), 0);
    assert_non_null(ss.handoff);
    assert_null(strstr(ss.handoff, PHONE));         /* the answer's copy: placeholders (the door restores it) */
    assert_false(db_holds(path, PHONE));
    assert_false(db_holds(path, "zhang.san"));

    rt_handoff_item items[4];
    rt_sessions *other = open_store(OTHER_KEY);     /* another key: not opened, not sent, said why */
    assert_int_equal(rt_handoff_due(other, 2000.0, items, 4, err), 1);
    assert_null(items[0].body);
    assert_non_null(strstr(items[0].error, "does not open"));
    rt_handoff_items_free(items, 1);
    rt_sessions_close(other);

    assert_int_equal(rt_handoff_due(s, 2000.0, items, 4, err), 1);
    assert_non_null(items[0].body);
    assert_non_null(strstr(items[0].body, "\"phone\":\"" PHONE "\""));       /* the real slot value */
    assert_non_null(strstr(items[0].body, EMAIL));                          /* and in the transcript */
    assert_string_equal(items[0].session, ss.id);
    rt_handoff_items_free(items, 1);
    sb_jw w;
    sb_jw_init(&w);
    assert_int_equal(rt_handoff_list_json(s, 10, &w, err), 0);
    assert_non_null(strstr(w.p, "\"state\":\"queued\""));
    assert_non_null(strstr(w.p, "\"reason\":\"asked\""));
    assert_null(strstr(w.p, PHONE));
    assert_int_equal(rt_handoff_delivered(s, ss.id, err), 0);
    assert_int_equal(rt_handoff_due(s, 3000.0, items, 4, err), 0);
    sb_jw_reset(&w);
    assert_int_equal(rt_handoff_list_json(s, 10, &w, err), 0);      /* the row is kept, marked delivered */
    assert_non_null(strstr(w.p, "\"state\":\"delivered\""));
    sb_jw_free(&w);
    rt_session_clear(&ss);
    sb_pii_table_free(&table);
    rt_sessions_close(s);
}

static bool holds_phone(void *arg, const char *text, size_t len) { return memmem(text, len, PHONE, strlen(PHONE)); }

static void test_erase_finds_sealed_values(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store(KEY);
    rt_session ss, plain, got;
    sb_pii_table table = { 0 };
    commit_private_turn(s, &ss, &table);
    ss.turns = 2;
    ss.handoff_reason = "asked";
    ss.handoff_url = "https://crm.example/handoff";
    assert_int_equal(rt_session_commit(s, &ss, 600, "a person", "ok", 1001.0, err), 0);
    memset(&plain, 0, sizeof plain);
    assert_int_equal(rt_session_new_id(plain.id), 0);
    plain.pipeline = sb_strdup("other");
    plain.slots = sb_strdup("{}");
    plain.turns = 1;
    assert_int_equal(rt_session_commit(s, &plain, 600, "nothing personal", "fine", 1000.0, err), 0);
    rt_sessions_close(s);

    s = open_store(OTHER_KEY);      /* cannot tell: the erase fails, and says why */
    assert_true(rt_sessions_erase_matching(s, holds_phone, NULL, err) < 0);
    assert_non_null(strstr(err, "do not open"));
    rt_sessions_close(s);

    s = open_store(KEY);
    assert_int_equal(rt_sessions_erase_matching(s, holds_phone, NULL, err), 1);
    assert_int_equal(rt_session_load(s, ss.id, "", 1002.0, &got, err), SB_ENOTFOUND);
    assert_int_equal(rt_session_load(s, plain.id, "", 1002.0, &got, err), 0);
    rt_session_clear(&got);
    rt_handoff_item items[2];
    assert_int_equal(rt_handoff_due(s, 5000.0, items, 2, err), 0);      /* its package is erased too */
    rt_sessions_close(s);
    rt_session_clear(&ss);
    rt_session_clear(&plain);
    sb_pii_table_free(&table);
}

static void test_table_text_round_trip(void **state) {
    char err[SB_ERR_LEN], *text;
    size_t n;
    sb_pii_table t = { 0 }, back = { 0 };
    char *r = redacted("call 13800138000 or 13912345678, mail " EMAIL, &t);
    sb_free(r);
    assert_int_equal(sb_pii_table_save(&t, &text, &n), 0);
    assert_int_equal(sb_pii_table_load(text, n, &back, err), 0);
    assert_int_equal(back.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(back.v[i].placeholder, t.v[i].placeholder);
        assert_string_equal(back.v[i].value, t.v[i].value);
        assert_string_equal(back.v[i].raw, t.v[i].raw);
    }
    assert_int_equal(sb_pii_table_load("[{\"name\": \"PHONE\"}]", 19, &back, err), SB_EINVAL);
    assert_int_equal(back.n, 0);
    assert_int_equal(sb_pii_table_load("{", 1, &back, err), SB_EINVAL);
    sb_free(text);
    sb_pii_table_free(&t);
    sb_pii_table_free(&back);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_values_only_sealed_and_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_key_no_key_moved_box, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handoff_package_sealed_until_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_erase_finds_sealed_values, setup, teardown),
        cmocka_unit_test(test_table_text_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
