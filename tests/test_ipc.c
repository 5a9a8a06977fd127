/* test_ipc.c - the wire protocol over real Unix sockets.
 *
 * A real server runs in a forked child process (ipc_testlib.h), and the
 * tests attack it through raw sockets and the blocking client. After every
 * kind of garbage a valid request must succeed on a new connection, and the
 * group teardown checks that the server process never died.
 */
#include "tests/ipc_testlib.h"

/* ================================================================ cases */

static void test_roundtrip(void **state) { assert_serving(); }

static int count_events(void *arg, const char *event, const sb_mp_obj *data) {
    int *n = arg;
    int64_t tok = -1;
    const char *text;
    assert_string_equal(event, "token");
    assert_int_equal(sb_mp_get_int(data, "token", SB_MP_REQUIRED, 0, INT32_MAX, &tok, NULL), 0);
    assert_int_equal(sb_mp_get_str(data, "text", SB_MP_REQUIRED, &text, NULL, NULL), 0);
    assert_int_equal(tok, *n);          /* in order, none lost */
    char want[32];
    snprintf(want, sizeof want, "t%d", *n);
    assert_string_equal(text, want);
    (*n)++;
    return 0;
}

static void test_streaming_events(void **state) {
    sb_ipc_client *c;
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, NULL), 0);
    for (int round = 0; round < 3; round++) {       /* the connection is reusable */
        sb_mp_writer *w;
        sb_mp_writer_new(&w);
        sb_mp_map(w, 1);
        sb_mp_kv_i64(w, "n", 200);
        int n = 0;
        sb_ipc_result res;
        char err[SB_ERR_LEN];
        assert_int_equal(sb_ipc_call(c, "stream", w, 5000, count_events, &n, &res, err), 0);
        assert_true(res.ok);
        assert_int_equal(n, 200);
        int64_t count = 0;
        assert_int_equal(sb_mp_get_int(res.result, "count", SB_MP_REQUIRED, 0, 1000, &count, NULL), 0);
        assert_int_equal(count, 200);
        sb_ipc_result_free(&res);
        sb_mp_writer_free(w);
    }
    sb_ipc_client_close(c);
}

/* A reply many read chunks long (3 MiB against the client's 64 KiB reads)
 * arrives whole and byte for byte, and the connection stays usable. */
static void test_large_reply(void **state) {
    enum { N = 3u << 20 };
    char *big = malloc(N);
    assert_non_null(big);
    for (size_t i = 0; i < N; i++) big[i] = (char)('a' + (i * 7 + i / 4099) % 26);
    sb_ipc_client *c;
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, NULL), 0);
    for (int round = 0; round < 2; round++) {
        sb_mp_writer *w;
        sb_mp_writer_new(&w);
        sb_mp_map(w, 1);
        sb_mp_str(w, "s");
        sb_mp_strn(w, big, N);
        sb_ipc_result res;
        char err[SB_ERR_LEN];
        assert_int_equal(sb_ipc_call(c, "echo", w, 10000, NULL, NULL, &res, err), 0);
        assert_true(res.ok);
        const char *s;
        size_t n = 0;
        assert_int_equal(sb_mp_get_str(res.result, "s", SB_MP_REQUIRED, &s, &n, err), 0);
        assert_int_equal(n, N);
        assert_memory_equal(s, big, N);
        sb_ipc_result_free(&res);
        sb_mp_writer_free(w);
    }
    sb_ipc_client_close(c);
    free(big);
}

static void test_many_frames_one_write(void **state) {
    enum { N = 50 };        /* under the server's in-flight limit of 64 */
    sb_mp_writer *w, *all;
    sb_mp_writer_new(&w);
    sb_mp_writer_new(&all);
    for (int i = 1; i <= N; i++) {
        assert_int_equal(sb_ipc_encode_request(w, SB_IPC_MAX_FRAME_DEFAULT, (uint64_t)i, "echo", NULL), 0);
        size_t n;
        const void *p = sb_mp_writer_data(w, &n);
        sb_mp_raw(all, p, n);
    }
    int fd = raw_connect(g_path);
    size_t n;
    const void *p = sb_mp_writer_data(all, &n);
    raw_write(fd, p, n);
    for (int i = 1; i <= N; i++) {
        sb_mp_doc *doc = raw_read_frame(fd, 2000);
        assert_non_null(doc);
        sb_ipc_msg m;
        assert_int_equal(sb_ipc_msg_parse(doc, &m, NULL), 0);
        assert_true(m.ok);
        assert_int_equal(m.id, (uint64_t)i);         /* answered in order */
        sb_mp_doc_free(doc);
    }
    close(fd);
    sb_mp_writer_free(w);
    sb_mp_writer_free(all);
    assert_serving();
}

static void test_frame_split_byte_by_byte(void **state) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_writer *params;
    sb_mp_writer_new(&params);
    sb_mp_map(params, 1);
    sb_mp_kv_str(params, "text", "split across many writes");
    assert_int_equal(sb_ipc_encode_request(w, SB_IPC_MAX_FRAME_DEFAULT, 7, "echo", params), 0);
    size_t n;
    const unsigned char *p = sb_mp_writer_data(w, &n);
    int fd = raw_connect(g_path);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &one, sizeof one);
    for (size_t i = 0; i < n; i++) {
        raw_write(fd, p + i, 1);
        sleep_ms(1);                    /* give the server a read per byte */
    }
    sb_mp_doc *doc = raw_read_frame(fd, 2000);
    sb_ipc_msg m;
    assert_int_equal(sb_ipc_msg_parse(doc, &m, NULL), 0);
    assert_true(m.ok);
    assert_int_equal(m.id, 7);
    const char *s;
    assert_int_equal(sb_mp_get_str(m.result, "text", SB_MP_REQUIRED, &s, NULL, NULL), 0);
    assert_string_equal(s, "split across many writes");
    sb_mp_doc_free(doc);
    close(fd);
    sb_mp_writer_free(w);
    sb_mp_writer_free(params);
}

static void test_random_garbage(void **state) {
    srand(12345);
    for (int round = 0; round < 20; round++) {
        unsigned char junk[4096];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
        if (round % 2) {                /* a plausible length, junk body */
            junk[0] = 0; junk[1] = 0; junk[2] = 4000 >> 8; junk[3] = 4000 & 0xff;
        }
        int fd = raw_connect(g_path);
        send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        /* Drain whatever comes back until the server hangs up or goes quiet
         * (junk may also look like the start of a frame still to come). */
        for (;;) {
            struct pollfd p = { fd, POLLIN, 0 };
            if (poll(&p, 1, 300) != 1) break;
            char b[512];
            if (recv(fd, b, sizeof b, 0) <= 0) break;
        }
        close(fd);
        assert_serving();
    }
}

static void test_2gib_length_prefix(void **state) {
    int fd = raw_connect(g_path);
    raw_write(fd, "\x80\x00\x00\x00", 4);
    expect_error(fd, 0, SB_IPC_FRAME_TOO_LARGE);
    expect_eof(fd, 2000);
    close(fd);
    fd = raw_connect(g_path);
    raw_write(fd, "\xff\xff\xff\xff" "abc", 7);
    expect_error(fd, 0, SB_IPC_FRAME_TOO_LARGE);
    expect_eof(fd, 2000);
    close(fd);
    assert_serving();
}

static void test_undecodable_msgpack(void **state) {
    int fd = raw_connect(g_path);
    SEND_LIT(fd, "\xc1");                    /* a byte msgpack never uses */
    expect_error(fd, 0, SB_IPC_BAD_FRAME);
    expect_eof(fd, 2000);
    close(fd);
    fd = raw_connect(g_path);
    SEND_LIT(fd, "\xdd\xff\xff\xff\xff");    /* array claiming 4G elements */
    expect_error(fd, 0, SB_IPC_BAD_FRAME);
    expect_eof(fd, 2000);
    close(fd);
    fd = raw_connect(g_path);
    send_payload(fd, "", 0);                        /* empty payload */
    expect_error(fd, 0, SB_IPC_BAD_FRAME);
    close(fd);
    assert_serving();
}

static void test_wrong_shape(void **state) {
    int fd = raw_connect(g_path);
    /* array instead of map: [1, "echo", {}] */
    SEND_LIT(fd, "\x93\x01\xa4" "echo" "\x80");
    expect_error(fd, 0, SB_IPC_INVALID_REQUEST);
    /* id as a string: {"id": "1", "method": "echo"} */
    SEND_LIT(fd, "\x82\xa2id\xa1" "1" "\xa6method\xa4" "echo");
    expect_error(fd, 0, SB_IPC_INVALID_REQUEST);
    /* missing method: {"id": 5, "params": {}} - the id is echoed */
    SEND_LIT(fd, "\x82\xa2id\x05\xa6params\x80");
    expect_error(fd, 5, SB_IPC_INVALID_REQUEST);
    /* params not a map */
    SEND_LIT(fd, "\x83\xa2id\x06\xa6method\xa4" "echo\xa6params\x91\x01");
    expect_error(fd, 6, SB_IPC_INVALID_REQUEST);
    /* method is not a string / unknown key / negative id / duplicate id key */
    SEND_LIT(fd, "\x82\xa2id\x07\xa6method\x2a");
    expect_error(fd, 7, SB_IPC_INVALID_REQUEST);
    SEND_LIT(fd, "\x83\xa2id\x08\xa6method\xa4" "echo\xa5param\x80");
    expect_error(fd, 8, SB_IPC_INVALID_REQUEST);
    SEND_LIT(fd, "\x82\xa2id\xff\xa6method\xa4" "echo");
    expect_error(fd, 0, SB_IPC_INVALID_REQUEST);
    SEND_LIT(fd, "\x83\xa2id\x09\xa2id\x0a\xa6method\xa4" "echo");
    expect_error(fd, 9, SB_IPC_INVALID_REQUEST);
    /* a response sent to a server */
    SEND_LIT(fd, "\x82\xa2id\x0b\xa2ok\xc3");
    expect_error(fd, 11, SB_IPC_INVALID_REQUEST);
    /* unknown method */
    send_request(fd, 12, "no_such_method");
    expect_error(fd, 12, SB_IPC_UNKNOWN_METHOD);
    /* Shape errors keep the stream in sync: the same connection still works. */
    send_request(fd, 13, "echo");
    sb_mp_doc *doc = raw_read_frame(fd, 2000);
    sb_ipc_msg m;
    assert_int_equal(sb_ipc_msg_parse(doc, &m, NULL), 0);
    assert_true(m.ok);
    assert_int_equal(m.id, 13);
    sb_mp_doc_free(doc);
    close(fd);
    assert_serving();
}

static void test_half_frame_then_close(void **state) {
    int64_t before = stat_of("connections");
    for (int i = 0; i < 10; i++) {
        int fd = raw_connect(g_path);
        raw_write(fd, "\x00\x00\x00\x64\x83\xa2id", 8);     /* claims 100 bytes, sends 4 */
        close(fd);
    }
    int fd = raw_connect(g_path);
    raw_write(fd, "\x00\x00", 2);                           /* half a header */
    close(fd);
    wait_stat("connections", before, true);                 /* all reaped */
    assert_serving();
}

static void test_disconnect_cancels(void **state) {
    int64_t before = stat_of("cancelled");
    int64_t cb_before = stat_of("cancel_callbacks");
    int fd = raw_connect(g_path);
    sb_mp_writer *p, *w;
    sb_mp_writer_new(&p);
    sb_mp_writer_new(&w);
    sb_mp_map(p, 1);
    sb_mp_kv_i64(p, "ms", 30000);
    assert_int_equal(sb_ipc_encode_request(w, SB_IPC_MAX_FRAME_DEFAULT, 1, "slow", p), 0);
    size_t n;
    const void *f = sb_mp_writer_data(w, &n);
    raw_write(fd, f, n);
    wait_stat("inflight", 1, false);
    close(fd);                                      /* the client goes away */
    wait_stat("cancelled", before + 1, false);      /* the job saw it and stopped */
    assert_true(stat_of("cancel_callbacks") >= cb_before + 1);
    wait_stat("inflight", 0, true);
    sb_mp_writer_free(p);
    sb_mp_writer_free(w);
}

static int cancel_after_5(void *arg, const char *event, const sb_mp_obj *data) {
    return ++*(int *)arg >= 5;
}

static void test_cancel_method(void **state) {
    sb_ipc_client *c;
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, NULL), 0);
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 2);
    sb_mp_kv_i64(w, "n", 100000);
    sb_mp_kv_i64(w, "ms", 1);
    int n = 0;
    sb_ipc_result res;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_ipc_call(c, "stream", w, 5000, cancel_after_5, &n, &res, err), 0);
    assert_false(res.ok);
    assert_string_equal(res.code, SB_IPC_CANCELLED);
    assert_true(n >= 5 && n < 1000);
    sb_ipc_result_free(&res);
    /* the connection is still good */
    assert_int_equal(sb_ipc_call(c, "echo", NULL, 2000, NULL, NULL, &res, err), 0);
    assert_true(res.ok);
    sb_ipc_result_free(&res);
    sb_ipc_client_close(c);
    sb_mp_writer_free(w);
}

static void test_call_timeout(void **state) {
    sb_ipc_client *c;
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, NULL), 0);
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 1);
    sb_mp_kv_i64(w, "ms", 10000);
    sb_ipc_result res;
    char err[SB_ERR_LEN];
    uint64_t t0 = sb_now_ns();
    assert_int_equal(sb_ipc_call(c, "slow", w, 150, NULL, NULL, &res, err), SB_ETIMEOUT);
    uint64_t ms = (sb_now_ns() - t0) / 1000000;
    /* Timing is the subject: not before the 150 ms timeout (10 ms of clock
     * slack), and long before the server's 10 s answer; 1 s leaves a
     * sanitized build on a loaded box room. */
    assert_true(ms >= 140 && ms < 1000);
    /* The late cancelled answer is skipped; the next call gets its own. */
    assert_int_equal(sb_ipc_call(c, "echo", NULL, 2000, NULL, NULL, &res, err), 0);
    assert_true(res.ok);
    sb_ipc_result_free(&res);
    sb_ipc_client_close(c);
    sb_mp_writer_free(w);
    wait_stat("inflight", 0, true);
}

static void test_duplicate_id_and_busy(void **state) {
    int fd = raw_connect(g_path);
    sb_mp_writer *p, *w;
    sb_mp_writer_new(&p);
    sb_mp_writer_new(&w);
    sb_mp_map(p, 1);
    sb_mp_kv_i64(p, "ms", 30000);
    for (uint64_t id = 1; id <= 64; id++) {         /* the test server allows 64 */
        sb_ipc_encode_request(w, SB_IPC_MAX_FRAME_DEFAULT, id, "slow", p);
        size_t n;
        const void *f = sb_mp_writer_data(w, &n);
        raw_write(fd, f, n);
    }
    send_request(fd, 3, "echo");                    /* id 3 is still running */
    expect_error(fd, 3, SB_IPC_INVALID_REQUEST);
    send_request(fd, 65, "echo");
    expect_error(fd, 65, SB_IPC_BUSY);
    close(fd);
    wait_stat("inflight", 0, true);
    sb_mp_writer_free(p);
    sb_mp_writer_free(w);
}

/* A client that asks again as soon as it has its answer must find the
 * server's one slot free (sb_ipc_reply_on_final): the worker's compute
 * thread used to free it only after the reply went out, and the router's
 * next call could be told 'busy'. */
static void test_slot_free_when_answered(void **state) {
    sb_ipc_client *c;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_ipc_client_connect(g_path, 2000, &c, err), 0);
    for (int i = 0; i < 20; i++) {
        sb_ipc_result res;
        if (sb_ipc_call(c, "slot", NULL, 2000, NULL, NULL, &res, err)) fail_msg("call %d: %s", i, err);
        if (!res.ok) fail_msg("call %d: %s: %s", i, res.code ? res.code : "?", res.message ? res.message : "");
        sb_ipc_result_free(&res);
    }
    sb_ipc_client_close(c);
}

static void test_bad_handler_result(void **state) {
    sb_ipc_client *c;
    assert_int_equal(sb_ipc_client_connect(g_path, 1000, &c, NULL), 0);
    sb_ipc_result res;
    assert_int_equal(sb_ipc_call(c, "badresult", NULL, 2000, NULL, NULL, &res, NULL), 0);
    assert_false(res.ok);
    assert_string_equal(res.code, SB_IPC_INTERNAL);
    sb_ipc_result_free(&res);
    sb_ipc_client_close(c);
}

/* A client that never reads must not make the server buffer without bound:
 * past max_output (1 MiB here) the connection is closed and the job cancelled. */
static void test_output_bound(void **state) {
    int64_t before = stat_of("cancelled");
    int fd = raw_connect(g_path);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sb_mp_writer *p, *w;
    sb_mp_writer_new(&p);
    sb_mp_writer_new(&w);
    sb_mp_map(p, 2);
    sb_mp_kv_i64(p, "n", 100000);
    sb_mp_kv_i64(p, "size", 65536);
    sb_ipc_encode_request(w, SB_IPC_MAX_FRAME_DEFAULT, 1, "flood", p);
    size_t n;
    const void *f = sb_mp_writer_data(w, &n);
    raw_write(fd, f, n);
    wait_stat("cancelled", before + 1, false);
    close(fd);
    wait_stat("inflight", 0, true);
    sb_mp_writer_free(p);
    sb_mp_writer_free(w);
    assert_serving();
}

static void test_other_uid_rejected(void **state) {
    if (geteuid() != 0) { skip(); return; }
    /* Open the filesystem permissions so only SO_PEERCRED stands in the way. */
    chmod(g_dir, 0755);
    chmod(g_path, 0666);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534)) _exit(10);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, g_path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) _exit(11);
        static const char req[] = "\x00\x00\x00\x14\x83\xa2id\x01\xa6method\xa4" "echo\xa6params\x80";
        send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 2000) != 1) _exit(12);
        char b;
        _exit(recv(fd, &b, 1, 0) <= 0 ? 0 : 13);    /* closed, never answered */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    chmod(g_path, 0600);
    chmod(g_dir, 0700);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_serving();
}

static void test_socket_file_rules(void **state) {
    struct event_base *base = sb_ipc_base_new();
    sb_ipc_server_opts o = { .path = g_path };
    sb_ipc_server *s = NULL;
    char err[SB_ERR_LEN];
    struct stat st;
    assert_int_equal(stat(g_path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(sb_ipc_server_new(base, &o, &s, err), SB_EBUSY);   /* live server */
    assert_non_null(strstr(err, "another server"));
    assert_int_equal(stat(g_path, &st), 0);                             /* left alone */
    char path[160];
    snprintf(path, sizeof path, "%s/file", g_dir);
    FILE *f = fopen(path, "w");
    fclose(f);
    o.path = path;
    assert_int_equal(sb_ipc_server_new(base, &o, &s, err), SB_EINVAL);  /* not a socket */
    assert_int_equal(stat(path, &st), 0);
    unlink(path);
    /* A stale socket (bound, never unlinked) is replaced. */
    snprintf(path, sizeof path, "%s/stale.sock", g_dir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
    assert_int_equal(sb_ipc_server_new(base, &o, &s, err), 0);
    sb_ipc_server_free(s);
    assert_int_not_equal(stat(path, &st), 0);                           /* removed */
    o.path = "/tmp/this/path/is/long/enough/to/overflow/sun_path/of/a/unix/socket/address/"
             "which/is/one/hundred/and/eight/bytes.sock";
    assert_int_equal(sb_ipc_server_new(base, &o, &s, err), SB_EINVAL);
    event_base_free(base);
}

/* A reply finished on another thread after its server is gone. */
typedef struct { sb_ipc_reply *held; } holder;
static void m_hold(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) {
    ((holder *)ud)->held = r;
}
static void stop_loop(evutil_socket_t fd, short w, void *arg) { event_base_loopbreak(arg); }
static void *late_reply(void *arg) {
    sb_mp_writer *w;
    sb_mp_writer_new(&w);
    sb_mp_map(w, 0);
    int rc_event = sb_ipc_reply_event(arg, "token", w);
    int rc_final = sb_ipc_reply_ok(arg, w);     /* always required: it frees the reply */
    sb_mp_writer_free(w);
    return (void *)(intptr_t)(rc_event == SB_ECANCEL && rc_final == SB_ECANCEL ? 0 : -1);
}

static void test_reply_outlives_server(void **state) {
    char path[160];
    snprintf(path, sizeof path, "%s/own.sock", g_dir);
    struct event_base *base = sb_ipc_base_new();
    holder h = { 0 };
    sb_ipc_method m = { "hold", m_hold };
    sb_ipc_server_opts o = { .path = path, .methods = &m, .n_methods = 1, .ud = &h };
    sb_ipc_server *s;
    assert_int_equal(sb_ipc_server_new(base, &o, &s, NULL), 0);
    int fd = raw_connect(path);
    send_request(fd, 1, "hold");
    struct event *t = evtimer_new(base, stop_loop, base);
    for (int i = 0; i < 100 && !h.held; i++) {
        struct timeval tv = { 0, 10000 };
        evtimer_add(t, &tv);
        event_base_dispatch(base);
    }
    assert_non_null(h.held);
    assert_int_equal(sb_ipc_server_inflight(s), 1);
    assert_false(sb_ipc_reply_cancelled(h.held));
    sb_ipc_server_free(s);          /* closes the connection, cancels the request */
    assert_true(sb_ipc_reply_cancelled(h.held));
    pthread_t th;
    void *rc;
    pthread_create(&th, NULL, late_reply, h.held);
    pthread_join(th, &rc);
    assert_int_equal((intptr_t)rc, 0);
    event_free(t);
    event_base_free(base);          /* libevent closes freed bufferevents here */
    expect_eof(fd, 1000);
    close(fd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_streaming_events),
        cmocka_unit_test(test_large_reply),
        cmocka_unit_test(test_many_frames_one_write),
        cmocka_unit_test(test_frame_split_byte_by_byte),
        cmocka_unit_test(test_random_garbage),
        cmocka_unit_test(test_2gib_length_prefix),
        cmocka_unit_test(test_undecodable_msgpack),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_half_frame_then_close),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_cancel_method),
        cmocka_unit_test(test_call_timeout),
        cmocka_unit_test(test_slot_free_when_answered),
        cmocka_unit_test(test_duplicate_id_and_busy),
        cmocka_unit_test(test_bad_handler_result),
        cmocka_unit_test(test_output_bound),
        cmocka_unit_test(test_other_uid_rejected),
        cmocka_unit_test(test_socket_file_rules),
        cmocka_unit_test(test_reply_outlives_server),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
