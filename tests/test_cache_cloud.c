/* test_cache_cloud.c - two edges and one cloud on loopback, with a real
 * PostgreSQL server (pg_testlib.h) behind the cloud.
 *
 *  - a question asked 3 times at edge A reaches edge B on B's next sync and
 *    is a hit there; one asked twice does not (threshold 3)
 *  - a purge at the cloud removes it from both edges after their syncs
 *  - forged, tampered, stale, replayed and mis-addressed requests get 401
 *    and change nothing
 *  - an edge from before key version 2 keeps syncing, and no edge gets
 *    entries under a key version it does not use
 *  - a sync cut off mid-transfer (request or reply) or killed with -9, then
 *    retried, leaves exactly the state of one clean sync (table dumps)
 */
#include "tests/cache_testlib.h"
#include "cache/sync/sync_internal.h"  /* sbc_http_request: the transport under test */
#include "cache/sb_cache_wire.h"
#include "tests/pg_testlib.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>

int sb_cmd_cloud(int argc, char **argv);

static pg_cluster g_pg;
static int g_db_seq;

typedef struct {
    pid_t pid;
    char  url[64], dir[256], db[32];
} cloud_proc;

static const char *const SECRET_A = "secret-of-edge-a", *const SECRET_B = "secret-of-edge-b";
static const char *const ADMIN = "admin-token-1";

static int group_setup(void **state) { pg_start(&g_pg); return 0; }
static int group_teardown(void **state) { pg_stop(&g_pg); return 0; }

#define NEED_PG() do { if (!g_pg.up) { skip(); return; } } while (0)

/* A fresh database and a cloud process on a free port. */
static void cloud_start(cloud_proc *cp, const char *dir) {
    memset(cp, 0, sizeof *cp);
    snprintf(cp->dir, sizeof cp->dir, "%s", dir);
    snprintf(cp->db, sizeof cp->db, "sbtest%d", ++g_db_seq);
    char sql[64];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", cp->db);
    assert_int_equal(pg_exec(&g_pg, "postgres", sql), 0);
    char *cfg = tl_path(dir, "cloud.yaml"), *pf = tl_path(dir, "cloud.port");
    FILE *f = fopen(cfg, "w");
    fprintf(f, "# test cloud\nlisten: 127.0.0.1:0\ndatabase: \"unused\"\nadmin_token: %s\n"
               "push_threshold: 3\nedges:\n  edge-a: \"%s\"\n  edge-b: %s  # comment\n",
            ADMIN, SECRET_A, SECRET_B);
    fclose(f);
    unlink(pf);
    char dsn[640];
    pg_dsn(&g_pg, cp->db, dsn, sizeof dsn);
    cp->pid = fork();
    assert_true(cp->pid >= 0);
    if (cp->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);       /* never outlive a failed test */
        char *argv[] = { "cloud", "-c", cfg, "--database", dsn, "--port-file", pf, NULL };
        sb_log_setup("cloud", SB_LOG_WARN);
        _exit(sb_cmd_cloud(7, argv));
    }
    int port = 0;
    for (int i = 0; i < 200 && !port; i++) {
        FILE *p = fopen(pf, "r");
        if (p) { if (fscanf(p, "%d", &port) != 1) port = 0; fclose(p); }
        if (!port) usleep(50000);
    }
    assert_true(port > 0);
    snprintf(cp->url, sizeof cp->url, "http://127.0.0.1:%d", port);
    free(cfg);
    free(pf);
}

static void cloud_stop(cloud_proc *cp) {
    kill(cp->pid, SIGTERM);
    int status = 0;
    assert_int_equal(waitpid(cp->pid, &status, 0), cp->pid);
    assert_true(WIFEXITED(status));                  /* it never crashed */
    assert_int_equal(WEXITSTATUS(status), 0);
}

static int do_sync(sb_cache *c, const char *url, const char *edge, const char *secret,
                   sb_cache_sync_result *r, char *err) {
    sb_cache_sync_opts o = { .url = url, .edge_id = edge, .secret = secret, .timeout_ms = 5000 };
    return sb_cache_sync(c, &o, r, err);
}

static void sync_ok(sb_cache *c, const char *url, const char *edge, const char *secret) {
    char err[SB_ERR_LEN] = "";
    sb_cache_sync_result r;
    int rc = do_sync(c, url, edge, secret, &r, err);
    if (rc) fprintf(stderr, "sync %s: %s\n", edge, err);
    assert_int_equal(rc, 0);
}

static sb_cache *edge_open(const char *dir, const char *name) {
    char *p = tl_path(dir, name);
    sb_cache *c = NULL;
    assert_int_equal(sb_cache_open(p, NULL, &c, NULL), 0);
    free(p);
    return c;
}

/* Ask n times the way the router does: miss -> put, then hits. */
static void ask(sb_cache *c, const char *q, const char *answer, int n) {
    for (int i = 0; i < n; i++)
        if (tl_get(c, "hotline", q, answer) == SB_ENOTFOUND)
            assert_int_equal(tl_put(c, "hotline", q, answer, -1, NULL), 0);
}

static void key_of(const char *q, char key[SB_CACHE_KEY_HEX]) {
    sb_cache_query k;
    sb_cache_make_key(NULL, "hotline", "fp-test", q, "temp=0", &k, NULL);
    strcpy(key, k.key);
    sb_free(k.input);
}

static int admin_purge(const char *url, const char *key, const char *token) {
    char headers[256], path[128];
    snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", token);
    snprintf(path, sizeof path, "/v1/entries/%s", key);
    sbc_http_reply r;
    assert_int_equal(sbc_http_request("DELETE", url, path, headers, NULL, 0, 5000, NULL, &r, NULL), 0);
    sb_jw_free(&r.body);
    return r.status;
}

/* ------------------------------------------------------------ fleet */

static void test_fleet_propagation_and_purge(void **state) {
    NEED_PG();
    char *dir = tl_tmpdir();
    cloud_proc cp;
    cloud_start(&cp, dir);
    sb_cache *a = edge_open(dir, "a.sqlite"), *b = edge_open(dir, "b.sqlite");
    const char *q = "我要查社保缴费记录", *ans = "请登录社保网站查询缴费记录。";
    ask(a, q, ans, 3);                                  /* 1 miss + 2 hits = 3 asks */
    ask(a, "my water bill is wrong", "Call the utility.", 2);   /* below the threshold */
    assert_int_equal(tl_get(b, "hotline", q, NULL), SB_ENOTFOUND);
    sync_ok(a, cp.url, "edge-a", SECRET_A);
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    assert_int_equal(tl_get(b, "hotline", q, ans), 0);  /* the fleet's answer, a hit at B */
    assert_int_equal(tl_get(b, "hotline", "my water bill is wrong", NULL), SB_ENOTFOUND);
    char key[SB_CACHE_KEY_HEX];
    key_of(q, key);
    sb_cache_entry e;
    assert_int_equal(sb_cache_peek(b, key, &e, NULL), 0);
    assert_int_equal(e.origin, SB_CACHE_ORIGIN_CLOUD);
    assert_int_equal(e.pinned, 1);
    assert_int_equal(e.global_hits, 3);
    sb_cache_entry_free(&e);
    /* B's hit travels back: the fleet-wide count goes to 4 and A learns it. */
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    sync_ok(a, cp.url, "edge-a", SECRET_A);
    assert_int_equal(sb_cache_peek(a, key, &e, NULL), 0);
    assert_int_equal(e.global_hits, 4);
    assert_int_equal(e.pinned, 1);
    sb_cache_entry_free(&e);
    /* Purge at the cloud: gone from both after their next syncs. */
    assert_int_equal(admin_purge(cp.url, key, "wrong-token"), 401);
    assert_int_equal(admin_purge(cp.url, key, ADMIN), 200);
    assert_int_equal(tl_get(a, "hotline", q, ans), 0);  /* not yet synced */
    sync_ok(a, cp.url, "edge-a", SECRET_A);
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    assert_int_equal(sb_cache_peek(a, key, &e, NULL), SB_ENOTFOUND);
    assert_int_equal(sb_cache_peek(b, key, &e, NULL), SB_ENOTFOUND);
    /* A's hit made before the purge arrived after it: counted nowhere. */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT deleted, global_hits FROM sb_entries WHERE key = '%s'", key);
    char *dump = pg_dump(&g_pg, cp.db, sql);
    assert_string_equal(dump, "t|0\n");
    free(dump);
    /* Asked again after the purge: a fresh answer propagates again. */
    ask(a, q, "新的答案", 3);
    sync_ok(a, cp.url, "edge-a", SECRET_A);
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    assert_int_equal(tl_get(b, "hotline", q, "新的答案"), 0);
    sb_cache_close(a);
    sb_cache_close(b);
    cloud_stop(&cp);
    tl_rmdir(dir);
}

/* ------------------------------------------------------------ auth */

/* The status; *reply (if asked for) gets the body, NUL-terminated. */
static int post_sync_reply(const char *url, const char *edge, const char *ts, const char *sig,
                           const char *body, char **reply) {
    char headers[512];
    snprintf(headers, sizeof headers, "X-Edge-Id: %s\r\nX-Timestamp: %s\r\nX-Signature: %s\r\n",
             edge, ts, sig);
    sbc_http_reply r;
    assert_int_equal(sbc_http_request("POST", url, "/v1/sync", headers, body, strlen(body), 5000, NULL, &r, NULL), 0);
    if (reply) *reply = strndup(r.body.p ? r.body.p : "", r.body.len);
    sb_jw_free(&r.body);
    return r.status;
}

static int post_sync(const char *url, const char *edge, const char *ts, const char *sig,
                     const char *body) {
    return post_sync_reply(url, edge, ts, sig, body, NULL);
}

static char *cloud_state(const cloud_proc *cp) {
    return pg_dump(&g_pg, cp->db,
                   "SELECT 'meta', version::text, '', '' FROM sb_meta UNION ALL"
                   " SELECT 'entry', key, global_hits::text, coalesce(encode(response, 'hex'), '-')"
                   " FROM sb_entries UNION ALL SELECT 'sync', edge_id, sync_id, '' FROM sb_syncs"
                   " ORDER BY 1, 2, 3");
}

static void test_auth_rejections(void **state) {
    NEED_PG();
    char *dir = tl_tmpdir();
    cloud_proc cp;
    cloud_start(&cp, dir);
    char key[SB_CACHE_KEY_HEX], body[512], ts[24], sig[SB_CACHE_KEY_HEX], old_ts[24];
    key_of("anything", key);
    snprintf(body, sizeof body, "{\"edge_id\":\"edge-a\",\"sync_id\":\"s1\",\"cursor\":0,"
             "\"hit_deltas\":[{\"key\":\"%s\",\"delta\":5}],\"new_entries\":[]}", key);
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    char *before = cloud_state(&cp);
    /* forged: signed with the wrong secret */
    sbc_sign("not-the-secret", ts, body, strlen(body), sig);
    assert_int_equal(post_sync(cp.url, "edge-a", ts, sig, body), 401);
    /* unknown edge */
    sbc_sign(SECRET_A, ts, body, strlen(body), sig);
    assert_int_equal(post_sync(cp.url, "edge-z", ts, sig, body), 401);
    /* tampered: a valid signature over another body */
    char tampered[512];
    snprintf(tampered, sizeof tampered, "%s", body);
    *strstr(tampered, "\"delta\":5") = '\0';
    strcat(tampered, "\"delta\":500}],\"new_entries\":[]}");
    assert_int_equal(post_sync(cp.url, "edge-a", ts, sig, tampered), 401);
    /* stale: correctly signed, 301 s old */
    snprintf(old_ts, sizeof old_ts, "%lld", (long long)time(NULL) - 301);
    char old_sig[SB_CACHE_KEY_HEX];
    sbc_sign(SECRET_A, old_ts, body, strlen(body), old_sig);
    assert_int_equal(post_sync(cp.url, "edge-a", old_ts, old_sig, body), 401);
    /* mis-addressed: edge B signs a body that claims to be edge A */
    char bsig[SB_CACHE_KEY_HEX];
    sbc_sign(SECRET_B, ts, body, strlen(body), bsig);
    assert_int_equal(post_sync(cp.url, "edge-b", ts, bsig, body), 401);
    assert_int_equal(post_sync(cp.url, "edge-a", ts, "", body), 401);
    char *after = cloud_state(&cp);
    assert_string_equal(before, after);                 /* nothing changed */
    free(after);
    /* The genuine request is accepted once... */
    assert_int_equal(post_sync(cp.url, "edge-a", ts, sig, body), 200);
    char *applied = cloud_state(&cp);
    assert_string_not_equal(before, applied);
    /* ...and its replay is refused and changes nothing. */
    assert_int_equal(post_sync(cp.url, "edge-a", ts, sig, body), 401);
    after = cloud_state(&cp);
    assert_string_equal(applied, after);
    /* A fresh signature over the same sync_id (an edge's retry) is a no-op. */
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL) + 1);
    sbc_sign(SECRET_A, ts, body, strlen(body), sig);
    assert_int_equal(post_sync(cp.url, "edge-a", ts, sig, body), 200);
    free(after);
    after = cloud_state(&cp);
    assert_string_equal(applied, after);
    /* Malformed but signed: 400, nothing applied. */
    const char *junk = "{\"edge_id\":\"edge-a\",\"cursor\":\"x\"}";
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL) + 2);
    sbc_sign(SECRET_A, ts, junk, strlen(junk), sig);
    assert_int_equal(post_sync(cp.url, "edge-a", ts, sig, junk), 400);
    free(after);
    after = cloud_state(&cp);
    assert_string_equal(applied, after);
    free(before); free(after); free(applied);
    cloud_stop(&cp);
    tl_rmdir(dir);
}

/* ------------------------------------------------------------ key versions */

/* A sync from an edge built before key version 2, byte for byte what it
 * sends: no "key_versions", entries keyed with the v1 scheme. */
static int old_edge_sync(const cloud_proc *cp, const char *sync_id, const char *entries,
                         const char *deltas, char **reply) {
    char body[2048], ts[24], sig[SB_CACHE_KEY_HEX];
    snprintf(body, sizeof body, "{\"nonce\":\"%s\",\"edge_id\":\"edge-b\",\"sync_id\":\"%s\",\"cursor\":0,"
             "\"limit\":500,\"hit_deltas\":[%s],\"new_entries\":[%s]}", sync_id, sync_id, deltas, entries);
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    sbc_sign(SECRET_B, ts, body, strlen(body), sig);
    return post_sync_reply(cp->url, "edge-b", ts, sig, body, reply);
}

/* Keys moved to version 2 (case and width no longer folded). An
 * older edge keeps syncing: its v1 entries are accepted and passed on to
 * other older edges, never to newer ones (which would serve them under
 * other rules), and it is never sent a v2 entry it would refuse. */
static void test_old_edge_sync(void **state) {
    NEED_PG();
    char *dir = tl_tmpdir();
    cloud_proc cp;
    cloud_start(&cp, dir);
    /* The old edge's answer to "Echo XK7Q2B", stored under its folded input. */
    char v1[SB_CACHE_KEY_HEX], v2[SB_CACHE_KEY_HEX], entry[1024], delta[128];
    sb_cache_key_v(1, "hotline", "fp-test", "echo xk7q2b", "temp=0", v1);
    snprintf(entry, sizeof entry, "{\"key\":\"%s\",\"namespace\":\"hotline\",\"fingerprint\":\"fp-test\","
             "\"input\":\"echo xk7q2b\",\"params\":\"temp=0\",\"response_b64\":\"eGs3cTJi\","
             "\"created_ms\":%lld,\"ttl_s\":0}", v1, (long long)sbc_now_ms());
    snprintf(delta, sizeof delta, "{\"key\":\"%s\",\"delta\":3}", v1);
    char *reply = NULL;
    assert_int_equal(old_edge_sync(&cp, "old-1", entry, delta, &reply), 200);
    assert_non_null(strstr(reply, "\"applied\":true"));
    assert_non_null(strstr(reply, v1));                 /* it gets its own entry back, as before */
    free(reply);
    /* A newer edge asks the same in capitals: its own answer, under v2. */
    sb_cache *a = edge_open(dir, "a.sqlite"), *b = edge_open(dir, "b.sqlite");
    ask(a, "Echo XK7Q2B", "XK7Q2B", 3);
    key_of("Echo XK7Q2B", v2);
    sync_ok(a, cp.url, "edge-a", SECRET_A);
    sb_cache_entry e;
    assert_int_equal(sb_cache_peek(a, v1, &e, NULL), SB_ENOTFOUND);     /* not sent to a new edge */
    assert_int_equal(tl_get(a, "hotline", "echo xk7q2b", NULL), SB_ENOTFOUND);
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    assert_int_equal(tl_get(b, "hotline", "Echo XK7Q2B", "XK7Q2B"), 0);
    assert_int_equal(sb_cache_peek(b, v1, &e, NULL), SB_ENOTFOUND);
    /* The cloud holds both; the old edge pulls only the one it can check. */
    char sql[320];
    snprintf(sql, sizeof sql, "SELECT key = '%s', global_hits FROM sb_entries WHERE response IS NOT NULL"
             " ORDER BY 1", v1);
    char *dump = pg_dump(&g_pg, cp.db, sql);
    assert_string_equal(dump, "f|3\nt|3\n");           /* B's hit is not reported yet */
    free(dump);
    assert_int_equal(old_edge_sync(&cp, "old-2", "", "", &reply), 200);
    assert_non_null(strstr(reply, v1));
    assert_null(strstr(reply, v2));
    free(reply);
    sb_cache_close(a);
    sb_cache_close(b);
    cloud_stop(&cp);
    tl_rmdir(dir);
}

/* ------------------------------------------------------------ interruptions */

enum { CLEAN, CUT_REQUEST, CUT_REPLY, KILL_EDGE_WAITING, KILL_EDGE_RANDOM };

/* A one-connection TCP proxy in a child process: forwards the request
 * (or half of it), reads the cloud's whole reply, then forwards half of it
 * (CUT_REPLY) or tells the parent and hangs (KILL_EDGE_WAITING). */
static pid_t proxy_start(const char *cloud_url, int mode, int *port_out, int *notify_fd) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(ls, 4), 0);
    socklen_t sl = sizeof sa;
    getsockname(ls, (struct sockaddr *)&sa, &sl);
    *port_out = ntohs(sa.sin_port);
    int nfd[2];
    assert_int_equal(pipe(nfd), 0);
    int cloud_port = atoi(strrchr(cloud_url, ':') + 1);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(nfd[0]);
        int c = accept(ls, NULL, NULL);
        char buf[1 << 16];
        sb_jw req = { 0 };
        size_t need = 0;
        for (;;) {              /* the whole request: headers + Content-Length bytes */
            ssize_t r = read(c, buf, sizeof buf);
            if (r <= 0) _exit(1);
            sb_jw_raw(&req, buf, (size_t)r);
            char *end = strstr(req.p, "\r\n\r\n");
            if (end) {
                char *cl = strcasestr(req.p, "Content-Length:");
                need = (size_t)(end + 4 - req.p) + (size_t)atol(cl + 15);
                if (req.len >= need) break;
            }
        }
        int u = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in ca = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cloud_port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (connect(u, (struct sockaddr *)&ca, sizeof ca)) _exit(2);
        if (mode == CUT_REQUEST) {
            if (write(u, req.p, need / 2) < 0) _exit(3);
            usleep(100000);
            _exit(0);           /* both connections drop with the request half sent */
        }
        if (write(u, req.p, req.len) != (ssize_t)req.len) _exit(3);
        /* The whole reply: headers + Content-Length bytes. Reading to EOF
         * would wait out the cloud's keep-alive timeout (tens of seconds of
         * an idle test). */
        sb_jw reply = { 0 };
        for (ssize_t r; (r = read(u, buf, sizeof buf)) > 0;) {
            sb_jw_raw(&reply, buf, (size_t)r);
            char *end = strstr(reply.p, "\r\n\r\n"), *cl = strcasestr(reply.p, "Content-Length:");
            if (end && cl && cl < end && reply.len >= (size_t)(end + 4 - reply.p) + (size_t)atol(cl + 15)) break;
        }
        if (mode == CUT_REPLY) {
            if (write(c, reply.p, reply.len / 2) < 0) _exit(4);
            _exit(0);
        }
        if (write(nfd[1], "x", 1) != 1) _exit(5);   /* the cloud has committed */
        for (;;) pause();
    }
    close(ls);
    close(nfd[1]);
    *notify_fd = nfd[0];
    return pid;
}

/* Everything an edge's state is made of, minus wall-clock times. */
typedef struct { char *s; size_t len; } strbuf;

static int dump_entry(void *arg, const sb_cache_entry *e) {
    sb_jw *b = arg;
    sb_jw_rawf(b, "%s|%s|%s|%.*s|%lld|%lld|%d|%d|%lld\n", e->key, e->ns, e->input,
                   (int)e->response_len, (const char *)e->response, (long long)e->local_hits,
                   (long long)e->global_hits, e->origin, e->pinned, (long long)e->dirty_hits);
    return 0;
}

static int cmp_lines(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *edge_state(sb_cache *c) {
    sb_jw b = { 0 };
    assert_int_equal(sb_cache_list(c, NULL, dump_entry, &b, NULL), 0);
    char *lines[256];
    int n = 0;
    for (char *p = b.p ? strtok(b.p, "\n") : NULL; p && n < 256; p = strtok(NULL, "\n")) lines[n++] = p;
    qsort(lines, (size_t)n, sizeof *lines, cmp_lines);
    sb_jw out = { 0 };
    for (int i = 0; i < n; i++) sb_jw_rawf(&out, "%s\n", lines[i]);
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    sb_jw_rawf(&out, "cursor %lld pending %lld\n", (long long)s.sync_cursor, (long long)s.sync_pending);
    sb_jw_free(&b);
    return out.p;
}

static char *cloud_entries(const cloud_proc *cp) {
    return pg_dump(&g_pg, cp->db,
                   "SELECT 'meta', version, 0, '', '', false FROM sb_meta UNION ALL"
                   " SELECT key, version, global_hits, coalesce(input, ''),"
                   " coalesce(encode(response, 'hex'), '-'), deleted FROM sb_entries ORDER BY 1");
}

/* One scenario from scratch; returns the three dumps joined. */
static char *run_scenario(int mode) {
    char *dir = tl_tmpdir();
    cloud_proc cp;
    cloud_start(&cp, dir);
    sb_cache *a = edge_open(dir, "a.sqlite"), *b = edge_open(dir, "b.sqlite");
    ask(b, "how do I renew my residence permit", "At the district office.", 3);
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    ask(a, "我要查社保缴费记录", "请登录社保网站。", 3);
    ask(a, "water bill", "Call the utility.", 1);
    ask(a, "how do I renew my residence permit", "At the district office.", 1);
    char err[SB_ERR_LEN] = "";
    sb_cache_sync_result r;
    int port = 0, notify = -1;
    char proxy_url[64];
    if (mode == CUT_REQUEST || mode == CUT_REPLY) {
        pid_t px = proxy_start(cp.url, mode, &port, &notify);
        snprintf(proxy_url, sizeof proxy_url, "http://127.0.0.1:%d", port);
        assert_int_equal(do_sync(a, proxy_url, "edge-a", SECRET_A, &r, err), SB_EIO);
        waitpid(px, NULL, 0);
        close(notify);
        sb_cache_stats_t s;
        sb_cache_stats(a, &s, NULL);
        assert_int_equal(s.sync_pending, 1);            /* the batch waits for its retry */
    } else if (mode == KILL_EDGE_WAITING) {
        pid_t px = proxy_start(cp.url, mode, &port, &notify);
        snprintf(proxy_url, sizeof proxy_url, "http://127.0.0.1:%d", port);
        pid_t child = fork();
        if (child == 0) {
            sb_cache *ca = edge_open(dir, "a.sqlite");
            _exit(do_sync(ca, proxy_url, "edge-a", SECRET_A, NULL, NULL) ? 1 : 0);
        }
        char x;
        assert_int_equal(read(notify, &x, 1), 1);       /* cloud committed, edge waiting */
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        kill(px, SIGKILL);
        waitpid(px, NULL, 0);
        close(notify);
    } else if (mode == KILL_EDGE_RANDOM) {
        for (int i = 0; i < 12; i++) {
            pid_t child = fork();
            if (child == 0) {
                sb_cache *ca = edge_open(dir, "a.sqlite");
                _exit(do_sync(ca, cp.url, "edge-a", SECRET_A, NULL, NULL) ? 1 : 0);
            }
            usleep((useconds_t)(rand() % 15000));
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
        }
    }
    sync_ok(a, cp.url, "edge-a", SECRET_A);              /* the retry (or the clean sync) */
    sync_ok(b, cp.url, "edge-b", SECRET_B);
    sb_jw all = { 0 };
    char *ea = edge_state(a), *eb = edge_state(b), *cl = cloud_entries(&cp);
    sb_jw_rawf(&all, "A:\n%sB:\n%sCLOUD:\n%s", ea, eb, cl);
    free(ea); free(eb); free(cl);
    assert_int_equal(sb_cache_check(a, NULL), 0);
    sb_cache_close(a);
    sb_cache_close(b);
    cloud_stop(&cp);
    tl_rmdir(dir);
    return all.p;
}

static void test_interrupted_sync_acts_once(void **state) {
    NEED_PG();
    srand((unsigned)time(NULL));
    char *clean = run_scenario(CLEAN);
    assert_non_null(strstr(clean, "请登录社保网站。"));
    static const char *const names[] = { "", "request cut", "reply cut", "edge killed waiting",
                                         "edge killed at random" };
    for (int mode = CUT_REQUEST; mode <= KILL_EDGE_RANDOM; mode++) {
        char *got = run_scenario(mode);
        if (strcmp(clean, got))
            fprintf(stderr, "%s: state differs\n--- clean\n%s--- got\n%s", names[mode], clean, got);
        assert_string_equal(clean, got);
        free(got);
    }
    free(clean);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_propagation_and_purge),
        cmocka_unit_test(test_auth_rejections),
        cmocka_unit_test(test_old_edge_sync),
        cmocka_unit_test(test_interrupted_sync_acts_once),
    };
    return cmocka_run_group_tests_name("cache_cloud", tests, group_setup, group_teardown);
}
