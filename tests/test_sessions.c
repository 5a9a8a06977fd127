/* test_sessions.c - conversations' store (router/sessions.c) on a real
 * SQLite file: turns committed and read back after the store is closed
 * (what a restarted router sees), owners kept apart, expiry and the sweep,
 * ids, the file's mode, and one turn in flight per session.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "router/router_internal.h"
#include "tests/bytes_testlib.h"

static char dir[64], path[128];

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/sb-test-sessions-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sessions.sqlite", dir);
    return 0;
}

static int teardown(void **state) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static rt_sessions *open_store(void) {
    char err[SB_ERR_LEN];
    rt_sessions *s;
    assert_int_equal(rt_sessions_open(path, &s, err), 0);
    return s;
}

/* A new session of owner's, as session_door.c makes one. */
static void new_session(rt_session *ss, const char *owner) {
    memset(ss, 0, sizeof *ss);
    assert_int_equal(rt_session_new_id(ss->id), 0);
    snprintf(ss->owner, sizeof ss->owner, "%s", owner);
    ss->pipeline = sb_strdup("hotline");
    ss->slots = sb_strdup("{\"account\": null}");
    ss->stage = -1;
}

static void test_turns_survive_the_store(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store();
    rt_session ss;
    new_session(&ss, "app");
    ss.intent = sb_strdup("billing");
    for (int i = 1; i <= 3; i++) {
        char caller[32], reply[32];
        snprintf(caller, sizeof caller, "caller says %d", i);
        snprintf(reply, sizeof reply, "我们回答 %d", i);
        ss.turns = i;
        assert_int_equal(rt_session_commit(s, &ss, 600, caller, reply, 1000.0 + i, err), 0);
    }
    ss.awaiting = sb_strdup("{\"kind\": \"slot\", \"slot\": \"account\"}");
    ss.failures = 1;
    assert_int_equal(rt_session_commit(s, &ss, 600, NULL, NULL, 1004.0, err), 0);   /* the row only */
    char id[RT_SESSION_ID_LEN + 1];
    snprintf(id, sizeof id, "%s", ss.id);
    rt_session_clear(&ss);
    rt_sessions_close(s);           /* what a router killed after the commit leaves */

    s = open_store();
    rt_session back;
    assert_int_equal(rt_session_load(s, id, "app", 1100.0, &back, err), 0);
    assert_string_equal(back.pipeline, "hotline");
    assert_string_equal(back.intent, "billing");
    assert_int_equal(back.turns, 3);
    assert_int_equal(back.failures, 1);
    assert_int_equal((int)back.created, 1001);
    assert_int_equal((int)back.expires, 1604);
    assert_non_null(strstr(back.awaiting, "account"));
    sb_jw w;
    sb_jw_init(&w);
    assert_int_equal(rt_session_json(s, &back, &w, err), 0);
    sb_json_doc *d;
    assert_int_equal(sb_json_parse(w.p, w.len, &d, NULL), 0);
    const sb_json *t = sb_json_get(sb_json_root(d), "transcript");
    assert_int_equal(sb_json_len(t), 3);
    assert_string_equal(sb_json_str(sb_json_get(sb_json_at(t, 1), "caller")), "caller says 2");
    assert_string_equal(sb_json_str(sb_json_get(sb_json_at(t, 2), "reply")), "我们回答 3");
    assert_int_equal((int)sb_json_num(sb_json_get(sb_json_get(sb_json_root(d), "state"), "turn")), 3);
    assert_true(sb_json_type_of(sb_json_get(sb_json_get(sb_json_get(sb_json_root(d), "state"), "slots"), "account")) ==
                SB_JSON_NULL);
    sb_json_doc_free(d);
    sb_jw_free(&w);
    rt_session_clear(&back);
    rt_sessions_close(s);
}

static void test_another_owner_sees_nothing(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store();
    rt_session ss, other;
    new_session(&ss, "app");
    ss.turns = 1;
    assert_int_equal(rt_session_commit(s, &ss, 600, "hi", "hello", 1000.0, err), 0);
    assert_int_equal(rt_session_load(s, ss.id, "intruder", 1001.0, &other, err), SB_ENOTFOUND);
    assert_int_equal(rt_session_load(s, "0123456789abcdef0123456789abcdef", "app", 1001.0, &other, err), SB_ENOTFOUND);
    assert_int_equal(rt_session_delete(s, ss.id, err), 0);
    assert_int_equal(rt_session_load(s, ss.id, "app", 1001.0, &other, err), SB_ENOTFOUND);
    rt_session_clear(&ss);
    rt_sessions_close(s);
}

static void test_expiry_and_sweep(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store();
    rt_session a, b, got;
    new_session(&a, "app");
    new_session(&b, "app");
    a.turns = b.turns = 1;
    assert_int_equal(rt_session_commit(s, &a, 60, "a", "ra", 1000.0, err), 0);    /* expires 1060 */
    assert_int_equal(rt_session_commit(s, &b, 600, "b", "rb", 1000.0, err), 0);   /* expires 1600 */
    assert_int_equal(rt_session_load(s, a.id, "app", 1059.0, &got, err), 0);
    rt_session_clear(&got);
    assert_int_equal(rt_session_load(s, a.id, "app", 1061.0, &got, err), SB_ETIMEOUT);
    assert_int_equal(rt_sessions_sweep(s, 1061.0, err), 1);
    assert_int_equal(rt_session_load(s, a.id, "app", 1061.0, &got, err), SB_ENOTFOUND);
    assert_int_equal(rt_session_load(s, b.id, "app", 1061.0, &got, err), 0);
    rt_session_clear(&got);
    assert_int_equal(rt_sessions_sweep(s, 1061.0, err), 0);
    rt_session_clear(&a);
    rt_session_clear(&b);
    rt_sessions_close(s);
}

/* runtime.retention's sessions_days: a session not updated since `before`
 * goes with its transcript - from the file and its WAL, while the store is
 * open (a router that keeps running must not keep the words either). */
static void test_retention_purges_old_sessions(void **state) {
    char err[SB_ERR_LEN];
    rt_sessions *s = open_store();
    rt_session old, recent, got;
    new_session(&old, "app");
    new_session(&recent, "app");
    old.turns = recent.turns = 1;
    const double day = 86400.0, now = 100 * day;
    assert_int_equal(rt_session_commit(s, &old, 400 * 86400, "my number is 13800138000", "noted 13800138000",
                                       now - 31 * day, err), 0);
    assert_int_equal(rt_session_commit(s, &recent, 600, "a recent caller 13912345678", "ok", now - 60, err), 0);
    assert_true(db_holds(path, "13800138000"));
    assert_int_equal(rt_sessions_purge_before(s, now - 30 * day, err), 1);
    assert_false(db_holds(path, "13800138000"));
    assert_int_equal(rt_session_load(s, old.id, "app", now, &got, err), SB_ENOTFOUND);
    assert_int_equal(rt_session_load(s, recent.id, "app", now, &got, err), 0);
    rt_session_clear(&got);
    assert_true(db_holds(path, "13912345678"));
    assert_int_equal(rt_sessions_purge_before(s, now - 30 * day, err), 0);
    rt_session_clear(&old);
    rt_session_clear(&recent);
    rt_sessions_close(s);
    assert_false(db_holds(path, "13800138000"));
}

static void test_ids_and_file_mode(void **state) {
    char a[RT_SESSION_ID_LEN + 1], b[RT_SESSION_ID_LEN + 1];
    assert_int_equal(rt_session_new_id(a), 0);
    assert_int_equal(rt_session_new_id(b), 0);
    assert_int_equal(strlen(a), 32);
    assert_true(rt_session_id_valid(a));
    assert_string_not_equal(a, b);
    assert_false(rt_session_id_valid("0123456789ABCDEF0123456789abcdef"));
    assert_false(rt_session_id_valid("../../etc/passwd"));
    assert_false(rt_session_id_valid(""));
    mode_t old = umask(0);          /* a careless umask must not widen it */
    rt_sessions *s = open_store();
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    rt_sessions_close(s);
}

static void test_one_turn_at_a_time(void **state) {
    rt_sessions *s = open_store();
    char id[RT_SESSION_ID_LEN + 1];
    assert_int_equal(rt_session_new_id(id), 0);
    assert_true(rt_session_claim(s, id));
    assert_false(rt_session_claim(s, id));
    rt_session_release(s, id);
    assert_true(rt_session_claim(s, id));
    rt_session_release(s, id);
    rt_sessions_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_turns_survive_the_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_another_owner_sees_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expiry_and_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_purges_old_sessions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_and_file_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_turn_at_a_time, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
