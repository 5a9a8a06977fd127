/* test_ipc_async.c - the non-blocking libevent client against a real server
 * process: concurrent calls, streaming, timeouts, cancel, a server killed
 * with SIGKILL mid-stream and the reconnect after it comes back.
 */
#include "tests/ipc_testlib.h"

typedef struct {
    int events;
    int done;
    bool ok;
    char code[32];
    uint64_t order;             /* global completion order */
    int64_t count;
} call_state;

static uint64_t g_done_counter;
static struct event_base *g_base;

static void ev_cb(void *arg, uint64_t id, const char *event, const sb_mp_obj *data) {
    call_state *cs = arg;
    cs->events++;
}

static void done_cb(void *arg, uint64_t id, const sb_ipc_result *res) {
    call_state *cs = arg;
    cs->done++;
    cs->ok = res->ok;
    cs->order = ++g_done_counter;
    snprintf(cs->code, sizeof cs->code, "%s", res->ok ? "" : res->code);
    if (res->ok) sb_mp_get_int(res->result, "count", SB_MP_OPTIONAL, 0, INT64_MAX, &cs->count, NULL);
}

static void loop_timeout(evutil_socket_t fd, short what, void *arg) { *(bool *)arg = true; }

/* Run the loop until every state in cs[0..n) is done, or fail after ms. */
static void run_until_done(call_state *cs, int n, int ms) {
    bool timed_out = false;
    struct event *t = evtimer_new(g_base, loop_timeout, &timed_out);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(t, &tv);
    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++) all = all && cs[i].done;
        if (all || timed_out) break;
        event_base_loop(g_base, EVLOOP_ONCE);
    }
    event_free(t);
    if (timed_out) fail_msg("calls not done within %d ms", ms);
}

static void run_for(int ms) {
    bool timed_out = false;
    struct event *t = evtimer_new(g_base, loop_timeout, &timed_out);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(t, &tv);
    while (!timed_out) event_base_loop(g_base, EVLOOP_ONCE);
    event_free(t);
}

static sb_mp_writer *params2(const char *k1, int64_t v1, const char *k2, int64_t v2) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, k2 ? 2 : 1);
    sb_mp_kv_i64(w, k1, v1);
    if (k2) sb_mp_kv_i64(w, k2, v2);
    return w;
}

static int async_setup(void **state) {
    if (group_setup(state)) return -1;
    g_base = sb_ipc_base_new();
    return g_base ? 0 : -1;
}

static int async_teardown(void **state) {
    event_base_free(g_base);
    return group_teardown(state);
}

static void test_concurrent_calls(void **state) {
    sb_ipc_aclient *c;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_ipc_aclient_new(g_base, g_path, 0, &c, err), 0);
    assert_false(sb_ipc_aclient_connected(c));         /* lazy */
    call_state cs[3] = { 0 };
    sb_mp_writer *slow = params2("ms", 200, NULL, 0);
    sb_mp_writer *stream = params2("n", 50, "ms", 1);
    uint64_t ids[3];
    assert_int_equal(sb_ipc_aclient_call(c, "slow", slow, 5000, ev_cb, done_cb, &cs[0], &ids[0], err), 0);
    assert_int_equal(sb_ipc_aclient_call(c, "stream", stream, 5000, ev_cb, done_cb, &cs[1], &ids[1], err), 0);
    assert_int_equal(sb_ipc_aclient_call(c, "echo", NULL, 5000, ev_cb, done_cb, &cs[2], &ids[2], err), 0);
    assert_true(sb_ipc_aclient_connected(c));
    assert_int_equal(sb_ipc_aclient_pending(c), 3);
    assert_int_equal(cs[2].done, 0);                    /* never called from inside _call */
    run_until_done(cs, 3, 5000);
    for (int i = 0; i < 3; i++) { assert_int_equal(cs[i].done, 1); assert_true(cs[i].ok); }
    assert_int_equal(cs[1].events, 50);
    assert_int_equal(cs[1].count, 50);
    assert_true(cs[2].order < cs[1].order && cs[1].order < cs[0].order);   /* not serialised */
    assert_int_equal(sb_ipc_aclient_pending(c), 0);
    sb_mp_writer_free(slow);
    sb_mp_writer_free(stream);
    sb_ipc_aclient_free(c);
}

static void test_timeout_and_cancel(void **state) {
    int64_t before = stat_of("cancelled");
    sb_ipc_aclient *c;
    assert_int_equal(sb_ipc_aclient_new(g_base, g_path, 0, &c, NULL), 0);
    call_state cs[2] = { 0 };
    sb_mp_writer *slow = params2("ms", 20000, NULL, 0);
    uint64_t t0 = sb_now_ns();
    assert_int_equal(sb_ipc_aclient_call(c, "slow", slow, 100, NULL, done_cb, &cs[0], NULL, NULL), 0);
    run_until_done(cs, 1, 3000);
    uint64_t ms = (sb_now_ns() - t0) / 1000000;
    assert_false(cs[0].ok);
    assert_string_equal(cs[0].code, SB_IPC_TIMEOUT);
    /* Timing is the subject: not before the 100 ms timeout (10 ms of clock
     * slack), long before the server's 20 s answer; 1 s leaves a loaded
     * box room. */
    assert_true(ms >= 90 && ms < 1000);
    run_for(50);                                        /* let the loop send the cancel */
    wait_stat("cancelled", before + 1, false);         /* the server was told */

    /* Cancel: no more callbacks, and the server stops the job. */
    sb_mp_writer *stream = params2("n", 100000, "ms", 1);
    uint64_t id;
    assert_int_equal(sb_ipc_aclient_call(c, "stream", stream, 0, ev_cb, done_cb, &cs[1], &id, NULL), 0);
    while (cs[1].events < 3) event_base_loop(g_base, EVLOOP_ONCE);
    assert_int_equal(sb_ipc_aclient_cancel(c, id), 0);
    assert_int_equal(sb_ipc_aclient_cancel(c, id), SB_ENOTFOUND);
    int seen = cs[1].events;
    run_for(100);                                       /* frames still in flight are dropped */
    assert_int_equal(cs[1].events, seen);
    assert_int_equal(cs[1].done, 0);
    wait_stat("cancelled", before + 2, false);
    wait_stat("inflight", 0, true);
    sb_mp_writer_free(slow);
    sb_mp_writer_free(stream);
    sb_ipc_aclient_free(c);
}

/* The acceptance case of the runtime issue: kill -9 the worker during a
 * streaming request; the client gets an error promptly, and once a new
 * server is up on the same path the next call reconnects and succeeds. */
static void test_server_killed_then_restarted(void **state) {
    char path[160];
    snprintf(path, sizeof path, "%s/k.sock", g_dir);
    pid_t pid = g_extra_pid = spawn_server(path);
    sb_ipc_client *probe;
    assert_int_equal(sb_ipc_client_connect(path, 5000, &probe, NULL), 0);
    sb_ipc_client_close(probe);

    sb_ipc_aclient *c;
    assert_int_equal(sb_ipc_aclient_new(g_base, path, 0, &c, NULL), 0);
    call_state cs[3] = { 0 };
    sb_mp_writer *stream = params2("n", 100000, "ms", 1);
    assert_int_equal(sb_ipc_aclient_call(c, "stream", stream, 0, ev_cb, done_cb, &cs[0], NULL, NULL), 0);
    while (cs[0].events < 5) event_base_loop(g_base, EVLOOP_ONCE);
    kill(pid, SIGKILL);
    uint64_t t0 = sb_now_ns();
    run_until_done(cs, 1, 2000);
    /* Timing is the subject: the kill closes the socket, which the loop sees
     * at once (ms); the stream left alone would run 100 s. 500 ms leaves a
     * loaded box room. */
    assert_true((sb_now_ns() - t0) / 1000000 < 500);
    assert_false(cs[0].ok);
    assert_string_equal(cs[0].code, SB_IPC_DISCONNECTED);
    assert_false(sb_ipc_aclient_connected(c));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    g_extra_pid = 0;                                    /* reaped: never signal it again */

    /* Nobody listening (the socket file is stale): the call fails at once. */
    char err[SB_ERR_LEN];
    assert_int_equal(sb_ipc_aclient_call(c, "echo", NULL, 0, NULL, done_cb, &cs[1], NULL, err), SB_EIO);
    assert_int_equal(cs[1].done, 0);

    pid = g_extra_pid = spawn_server(path);             /* replaces the stale socket */
    assert_int_equal(sb_ipc_client_connect(path, 5000, &probe, NULL), 0);
    sb_ipc_client_close(probe);
    assert_int_equal(sb_ipc_aclient_call(c, "echo", NULL, 2000, NULL, done_cb, &cs[2], NULL, err), 0);
    run_until_done(&cs[2], 1, 2000);
    assert_true(cs[2].ok);
    sb_ipc_aclient_free(c);
    sb_mp_writer_free(stream);
    g_extra_pid = 0;
    stop_server(pid, true);
}

/* Freeing the client from inside its own callback must be safe. */
static void free_in_done(void *arg, uint64_t id, const sb_ipc_result *res) {
    sb_ipc_aclient **cp = arg;
    sb_ipc_aclient_free(*cp);
    *cp = NULL;
}

static void test_free_inside_callback(void **state) {
    sb_ipc_aclient *c;
    assert_int_equal(sb_ipc_aclient_new(g_base, g_path, 0, &c, NULL), 0);
    sb_ipc_aclient *keep = c;
    call_state other = { 0 };
    assert_int_equal(sb_ipc_aclient_call(c, "echo", NULL, 0, NULL, free_in_done, &c, NULL, NULL), 0);
    assert_int_equal(sb_ipc_aclient_call(keep, "echo", NULL, 0, NULL, done_cb, &other, NULL, NULL), 0);
    for (int i = 0; i < 100 && c; i++) event_base_loop(g_base, EVLOOP_ONCE);
    assert_null(c);
    run_for(50);
    assert_int_equal(other.done, 0);                    /* freed: no more callbacks */
    assert_serving();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_calls),
        cmocka_unit_test(test_timeout_and_cancel),
        cmocka_unit_test(test_server_killed_then_restarted),
        cmocka_unit_test(test_free_inside_callback),
    };
    return cmocka_run_group_tests(tests, async_setup, async_teardown);
}
