/* test_cache.c - the SQLite cache on real files: hits, misses, TTL, LRU
 * eviction with pinned entries, a full file, a read-only file, a corrupt
 * file, migrations, export/import, purge, and get/put latency.
 */
#include "tests/cache_testlib.h"
#include "cache/cache_internal.h"

#include <pwd.h>

static sb_cache *open_cache(const char *path, uint64_t max_bytes) {
    sb_cache_opts o = { .max_bytes = max_bytes };
    sb_cache *c = NULL;
    char err[SB_ERR_LEN] = "";
    int rc = sb_cache_open(path, &o, &c, err);
    if (rc) fprintf(stderr, "open: %s\n", err);
    assert_int_equal(rc, 0);
    return c;
}

static void test_hit_miss(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    sb_cache *c = open_cache(path, 0);
    assert_int_equal(tl_get(c, "hotline", "How do I withdraw my housing fund?", NULL), SB_ENOTFOUND);
    assert_int_equal(tl_put(c, "hotline", "How do I withdraw my housing fund?", "Bring your ID.", -1, NULL), 0);
    /* Normalisation makes these the same question: whitespace, NFC... */
    assert_int_equal(tl_get(c, "hotline", "  How do I withdraw   my housing fund? \n", "Bring your ID."), 0);
    assert_int_equal(tl_get(c, "hotline", "How do I withdraw my housing fund?", "Bring your ID."), 0);
    /* ...but not case or width by default (opt-in per pipeline: test_cache_hash.c). */
    assert_int_equal(tl_get(c, "hotline", "how do I withdraw my HOUSING fund?", NULL), SB_ENOTFOUND);
    assert_int_equal(tl_get(c, "hotline", "How do I withdraw my housing fund？", NULL), SB_ENOTFOUND);
    assert_int_equal(tl_get(c, "other", "How do I withdraw my housing fund?", NULL), SB_ENOTFOUND);
    /* Another model file: another fingerprint, never the same entry. */
    sb_cache_query q;
    assert_int_equal(sb_cache_make_key(c, "hotline", "fp-other", "How do I withdraw my housing fund?",
                                       "temp=0", &q, NULL), 0);
    sb_cache_entry e;
    assert_int_equal(sb_cache_get(c, q.key, &e, NULL), SB_ENOTFOUND);
    sb_free(q.input);
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.local_hits_total, 2);
    assert_int_equal(s.session_hits, 2);
    assert_int_equal(s.session_misses, 5);
    assert_int_equal(s.schema_version, 2);
    sb_cache_close(c);
    /* It survives a reopen, and the counts with it. */
    c = open_cache(path, 0);
    char key[SB_CACHE_KEY_HEX];
    sb_cache_query q2;
    sb_cache_make_key(c, "hotline", "fp-test", "How do I withdraw my housing fund?", "temp=0", &q2, NULL);
    strcpy(key, q2.key);
    sb_free(q2.input);
    assert_int_equal(sb_cache_peek(c, key, &e, NULL), 0);
    assert_int_equal(e.local_hits, 2);
    assert_int_equal(e.dirty_hits, 3);           /* the put counts as one ask */
    assert_string_equal(e.input, "How do I withdraw my housing fund?");
    sb_cache_entry_free(&e);
    sb_cache_close(c);
    /* A key that is not the hash of the entry's contents is refused. */
    sb_cache_item bad = { .key = key, .ns = "hotline", .fingerprint = "fp-test",
                          .input = "another question", .params = "temp=0", .response = "x",
                          .response_len = 1 };
    c = open_cache(path, 0);
    assert_int_equal(sb_cache_put(c, &bad, NULL), SB_EINVAL);
    sb_cache_close(c);
    /* A NULL cache is "disabled", never a crash. */
    assert_int_equal(sb_cache_get(NULL, key, &e, NULL), SB_ENOTFOUND);
    assert_int_equal(tl_put(NULL, "hotline", "x", "y", -1, NULL), 0);
    free(path);
    tl_rmdir(dir);
}

/* An import line with an old created_ms shows TTL expiry without sleeping. */
static void import_line(sb_cache *c, const char *dir, const char *question, int64_t age_s,
                        int64_t ttl_s, int pinned) {
    sb_cache_query q;
    sb_cache_make_key(c, "hotline", "fp-test", question, "temp=0", &q, NULL);
    char *p = tl_path(dir, "line.jsonl");
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"key\":\"%s\",\"namespace\":\"hotline\",\"fingerprint\":\"fp-test\","
               "\"input\":\"%s\",\"params\":\"temp=0\",\"response_b64\":\"b2s=\","
               "\"created_ms\":%lld,\"ttl_s\":%lld,\"pinned\":%s}\n",
            q.key, q.input, (long long)(sbc_now_ms() - age_s * 1000), (long long)ttl_s,
            pinned ? "true" : "false");
    fclose(f);
    int fd = open(p, O_RDONLY);
    int64_t n_in = 0, n_bad = 0;
    assert_int_equal(sb_cache_import(c, fd, &n_in, &n_bad, NULL), 0);
    assert_int_equal(n_in, 1);
    assert_int_equal(n_bad, 0);
    close(fd);
    free(p);
    sb_free(q.input);
}

static void test_ttl(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    sb_cache *c = open_cache(path, 0);
    import_line(c, dir, "old", 100, 50, 0);
    import_line(c, dir, "fresh", 10, 50, 0);
    import_line(c, dir, "forever", 100000, 0, 0);
    assert_int_equal(tl_get(c, "hotline", "old", NULL), SB_ENOTFOUND);
    assert_int_equal(tl_get(c, "hotline", "fresh", "ok"), 0);
    assert_int_equal(tl_get(c, "hotline", "forever", "ok"), 0);
    sb_cache_close(c);
    free(path);
    tl_rmdir(dir);
}

static void test_eviction(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    char big[1001];
    memset(big, 'x', 1000);
    big[1000] = '\0';
    sb_cache *c = open_cache(path, 20000);          /* room for ~18 entries */
    import_line(c, dir, "pinned-0", 0, 0, 1);        /* popular fleet-wide */
    import_line(c, dir, "pinned-1", 0, 0, 1);
    char q[32];
    for (int i = 0; i < 60; i++) {
        snprintf(q, sizeof q, "question %d", i);
        assert_int_equal(tl_put(c, "hotline", q, big, -1, NULL), 0);
        if (i >= 5) assert_int_equal(tl_get(c, "hotline", "question 5", big), 0);  /* keep it hot */
        usleep(1000);                               /* distinct last_hit_ms */
    }
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    assert_true(s.bytes <= 20000);
    assert_true(s.entries >= 10);
    assert_int_equal(tl_get(c, "hotline", "pinned-0", "ok"), 0);   /* pinned: evicted last */
    assert_int_equal(tl_get(c, "hotline", "pinned-1", "ok"), 0);
    assert_int_equal(tl_get(c, "hotline", "question 5", big), 0);  /* recently hit */
    assert_int_equal(tl_get(c, "hotline", "question 59", big), 0); /* newest */
    assert_int_equal(tl_get(c, "hotline", "question 0", NULL), SB_ENOTFOUND);  /* LRU, gone */
    assert_int_equal(tl_get(c, "hotline", "question 30", NULL), SB_ENOTFOUND);
    /* Larger than the whole cap: refused, nothing else harmed. */
    char *huge = malloc(30001);
    memset(huge, 'y', 30000);
    huge[30000] = '\0';
    assert_int_equal(tl_put(c, "hotline", "huge", huge, -1, NULL), SB_ERANGE);
    free(huge);
    assert_int_equal(sb_cache_check(c, NULL), 0);
    sb_cache_close(c);
    free(path);
    tl_rmdir(dir);
}

/* SQLITE_FULL: the file may not grow past max_file_bytes (PRAGMA
 * max_page_count) while the cap says there is room. */
static void test_disk_full(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    sb_cache_opts o = { .max_bytes = 1u << 30, .max_file_bytes = 96 * 1024 };
    sb_cache *c = NULL;
    assert_int_equal(sb_cache_open(path, &o, &c, NULL), 0);
    char blob[2001];
    memset(blob, 'z', 2000);
    blob[2000] = '\0';
    int stored = 0, rc = 0;
    char q[32], err[SB_ERR_LEN];
    for (int i = 0; i < 200; i++) {
        snprintf(q, sizeof q, "q%d", i);
        sb_cache_query k;
        sb_cache_make_key(c, "ns", "fp-test", q, "temp=0", &k, NULL);
        sb_cache_item it = { .key = k.key, .ns = "ns", .fingerprint = "fp-test", .input = k.input,
                             .params = "temp=0", .response = blob, .response_len = 2000, .ttl_s = 0 };
        rc = sb_cache_put(c, &it, err);
        sb_free(k.input);
        if (rc) break;
        stored++;
    }
    assert_int_equal(rc, SB_EIO);
    assert_non_null(strstr(err, "full"));
    assert_true(stored > 5);
    /* Still serving: earlier entries hit (counting may fail quietly). */
    assert_int_equal(tl_get(c, "ns", "q0", blob), 0);
    assert_int_equal(tl_put(c, "ns", "another", blob, -1, NULL), SB_EIO);
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    assert_int_equal(s.entries, stored);
    assert_true(s.session_errors >= 2);
    assert_int_equal(sb_cache_check(c, NULL), 0);
    sb_cache_close(c);
    free(path);
    tl_rmdir(dir);
}

/* A read-only file: the open succeeds in read-only mode, hits are served,
 * puts fail with a clear error. Run as an unprivileged user because root
 * may write any file. */
static void test_read_only(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    sb_cache *c = open_cache(path, 0);
    assert_int_equal(tl_put(c, "ns", "question", "answer", -1, NULL), 0);
    sb_cache_close(c);                              /* last close checkpoints the WAL */
    chmod(path, 0444);
    chmod(dir, 0555);
    pid_t pid = fork();
    if (pid == 0) {
        if (getuid() == 0) {
            struct passwd *pw = getpwnam("nobody");
            if (!pw || setgid(pw->pw_gid) || setuid(pw->pw_uid)) _exit(90);
        }
        sb_cache *r = NULL;
        char err[SB_ERR_LEN] = "";
        if (sb_cache_open(path, NULL, &r, err)) {
            fprintf(stderr, "read-only open: %s\n", err);
            _exit(91);
        }
        sb_cache_stats_t s;
        if (sb_cache_stats(r, &s, NULL) || !s.read_only) _exit(92);
        if (tl_get(r, "ns", "question", "answer") != 0) _exit(93);     /* still answers */
        if (tl_put(r, "ns", "new", "x", -1, NULL) != SB_EIO) _exit(94);
        if (tl_put(r, "ns", "new2", "x", -1, NULL) != SB_EIO) _exit(95);
        sb_cache_close(r);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    chmod(dir, 0755);
    chmod(path, 0644);
    free(path);
    tl_rmdir(dir);
}

static void test_corrupt(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    /* Not a database at all. */
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 1000; i++) fputs("this is not sqlite ", f);
    fclose(f);
    sb_cache *c = NULL;
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_cache_open(path, NULL, &c, err), SB_EFORMAT);
    assert_null(c);
    assert_non_null(strstr(err, "corrupt"));
    unlink(path);
    /* A real database with its b-tree pages overwritten. */
    c = open_cache(path, 0);
    char q[32], blob[3000];
    memset(blob, 'q', sizeof blob - 1);
    blob[sizeof blob - 1] = '\0';
    for (int i = 0; i < 40; i++) {
        snprintf(q, sizeof q, "q%d", i);
        assert_int_equal(tl_put(c, "ns", q, blob, -1, NULL), 0);
    }
    sb_cache_close(c);
    int fd = open(path, O_WRONLY);
    char junk[4096];
    memset(junk, 0xA5, sizeof junk);
    for (int page = 1; page < 30; page += 2) assert_int_equal(pwrite(fd, junk, sizeof junk, (off_t)page * 4096), 4096);
    close(fd);
    int rc = sb_cache_open(path, NULL, &c, err);
    if (rc == 0) {
        int bad = 0;
        for (int i = 0; i < 40; i++) {
            snprintf(q, sizeof q, "q%d", i);
            int g = tl_get(c, "ns", q, NULL);
            if (g != 0 && g != SB_ENOTFOUND) bad++;
            int p = tl_put(c, "ns", q, "new", -1, NULL);
            if (p) bad++;
        }
        assert_true(bad > 0);                       /* the damage was seen... */
        assert_int_equal(sb_cache_check(c, err), SB_EFORMAT);   /* ...and is reported */
        sb_cache_close(c);
    } else {
        assert_int_equal(rc, SB_EFORMAT);
    }
    free(path);
    tl_rmdir(dir);
}

static void test_migration(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    sb_cache *c = NULL;
    assert_int_equal(sb_cache_open_at(path, NULL, 1, &c, NULL), 0);
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    assert_int_equal(s.schema_version, 1);
    sb_cache_close(c);
    c = open_cache(path, 0);                        /* migrates 1 -> 2 */
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    assert_int_equal(s.schema_version, 2);
    assert_int_equal(tl_put(c, "ns", "q", "a", -1, NULL), 0);
    assert_int_equal(sbc_exec(c, "PRAGMA user_version = 99", NULL), 0);
    sb_cache_close(c);
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_cache_open(path, NULL, &c, err), SB_EFORMAT);   /* from the future */
    assert_non_null(strstr(err, "newer"));
    free(path);
    tl_rmdir(dir);
}

static int count_entry(void *arg, const sb_cache_entry *e) { (*(int *)arg)++; return 0; }

static void test_export_import_purge(void **state) {
    char *dir = tl_tmpdir(), *a = tl_path(dir, "a.sqlite"), *b = tl_path(dir, "b.sqlite");
    char *dump = tl_path(dir, "dump.jsonl");
    sb_cache *c = open_cache(a, 0);
    char q[32];
    for (int i = 0; i < 20; i++) {
        snprintf(q, sizeof q, "%s question %d", i % 2 ? "water" : "tax", i);
        assert_int_equal(tl_put(c, i % 4 ? "hotline" : "other", q, "answer \"quoted\"\n\x01\xff", -1, NULL), 0);
    }
    assert_int_equal(tl_get(c, "hotline", "water question 1", NULL), 0);
    int fd = open(dump, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int64_t n = 0;
    assert_int_equal(sb_cache_export(c, NULL, fd, &n, NULL), 0);
    close(fd);
    assert_int_equal(n, 20);
    /* A tampered line (answer attached to another question's key) and junk. */
    FILE *f = fopen(dump, "a");
    char key[SB_CACHE_KEY_HEX];
    sb_cache_key("hotline", "fp-test", "tax question 0", "temp=0", key);
    fprintf(f, "{\"key\":\"%s\",\"namespace\":\"hotline\",\"fingerprint\":\"fp-test\","
               "\"input\":\"evil\",\"params\":\"temp=0\",\"response_b64\":\"eA==\"}\n", key);
    fprintf(f, "not json\n{\"key\":1}\n");
    /* A sound line from an older build (key version 1): this build would
     * never look it up, so it is refused, not stored. */
    sb_cache_key_v(1, "hotline", "fp-test", "old question", "temp=0", key);
    fprintf(f, "{\"key\":\"%s\",\"namespace\":\"hotline\",\"fingerprint\":\"fp-test\","
               "\"input\":\"old question\",\"params\":\"temp=0\",\"response_b64\":\"eA==\"}\n", key);
    fclose(f);
    sb_cache *d = open_cache(b, 0);
    int64_t in = 0, bad = 0;
    fd = open(dump, O_RDONLY);
    assert_int_equal(sb_cache_import(d, fd, &in, &bad, NULL), 0);
    close(fd);
    assert_int_equal(in, 20);
    assert_int_equal(bad, 4);
    sb_cache_entry old;
    assert_int_equal(sb_cache_peek(d, key, &old, NULL), SB_ENOTFOUND);
    sb_cache_entry e;
    char k1[SB_CACHE_KEY_HEX];
    sb_cache_key("hotline", "fp-test", "water question 1", "temp=0", k1);
    assert_int_equal(sb_cache_peek(d, k1, &e, NULL), 0);
    assert_int_equal(e.local_hits, 1);
    assert_int_equal(e.response_len, strlen("answer \"quoted\"\n\x01\xff"));
    assert_memory_equal(e.response, "answer \"quoted\"\n\x01\xff", e.response_len);
    sb_cache_entry_free(&e);
    /* list / purge by namespace, glob, key, all */
    int cnt = 0;
    sb_cache_filter fl = { .ns = "other" };
    assert_int_equal(sb_cache_list(d, &fl, count_entry, &cnt, NULL), 0);
    assert_int_equal(cnt, 5);
    int64_t del = 0;
    sb_cache_filter water = { .input_glob = "water*" };
    assert_int_equal(sb_cache_purge(d, &water, &del, NULL), 0);
    assert_int_equal(del, 10);
    assert_int_equal(sb_cache_purge_key(d, k1, NULL), SB_ENOTFOUND);    /* was water */
    sb_cache_key("other", "fp-test", "tax question 0", "temp=0", k1);
    assert_int_equal(sb_cache_purge_key(d, k1, NULL), 0);
    assert_int_equal(sb_cache_purge(d, NULL, &del, NULL), 0);
    assert_int_equal(del, 9);
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(d, &s, NULL), 0);
    assert_int_equal(s.entries, 0);
    assert_int_equal(s.bytes, 0);                   /* the triggers kept the total */
    assert_int_equal(sb_cache_vacuum(d, NULL), 0);
    sb_cache_close(c);
    sb_cache_close(d);
    free(a); free(b); free(dump);
    tl_rmdir(dir);
}

static void test_fingerprint(void **state) {
    char fa[SB_CACHE_KEY_HEX], fb[SB_CACHE_KEY_HEX], fc[SB_CACHE_KEY_HEX], full[SB_CACHE_KEY_HEX];
    assert_int_equal(sb_cache_fingerprint_file("tests/data/tiny-llama-spm-Q4_0.gguf", 0, fa, NULL), 0);
    assert_int_equal(sb_cache_fingerprint_file("tests/data/tiny-llama-spm-Q8_0.gguf", 0, fb, NULL), 0);
    assert_string_not_equal(fa, fb);
    assert_int_equal(sb_cache_fingerprint_file("tests/data/tiny-llama-spm-Q4_0.gguf", SB_FP_FULL, full, NULL), 0);
    assert_string_not_equal(fa, full);
    /* A copy elsewhere (another edge) has the same fingerprint... */
    char *dir = tl_tmpdir(), *copy = tl_path(dir, "m.gguf"), cmd[512];
    snprintf(cmd, sizeof cmd, "cp tests/data/tiny-llama-spm-Q4_0.gguf '%s' && touch -d 2001-01-01 '%s'", copy, copy);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sb_cache_fingerprint_file(copy, 0, fc, NULL), 0);
    assert_string_equal(fa, fc);
    /* ...and one changed weight in the middle of a tensor does not. */
    int fd = open(copy, O_RDWR);
    off_t size = lseek(fd, 0, SEEK_END);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, size - 10), 1);
    b ^= 1;
    assert_int_equal(pwrite(fd, &b, 1, size - 10), 1);
    close(fd);
    assert_int_equal(sb_cache_fingerprint_file(copy, 0, fc, NULL), 0);
    assert_string_not_equal(fa, fc);
    char err[SB_ERR_LEN];
    assert_int_equal(sb_cache_fingerprint_file("/nonexistent.gguf", 0, fc, err), SB_EIO);
    free(copy);
    tl_rmdir(dir);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median over 10k operations, as the router sees them (key + lookup). */
static void test_latency(void **state) {
    enum { N = 10000 };
    char *dir = tl_tmpdir(), *path = tl_path(dir, "c.sqlite");
    sb_cache *c = open_cache(path, 0);
    uint64_t *t_put = malloc(N * sizeof *t_put), *t_get = malloc(N * sizeof *t_get);
    uint64_t *t_miss = malloc(N * sizeof *t_miss);
    char q[64], answer[600];
    memset(answer, 'a', sizeof answer - 1);
    answer[sizeof answer - 1] = '\0';
    for (int i = 0; i < N; i++) {
        snprintf(q, sizeof q, "我要查社保缴费记录 question number %d", i);
        uint64_t t0 = sb_now_ns();
        assert_int_equal(tl_put(c, "hotline", q, answer, -1, NULL), 0);
        t_put[i] = sb_now_ns() - t0;
    }
    for (int i = 0; i < N; i++) {
        snprintf(q, sizeof q, "我要查社保缴费记录 question number %d", (i * 7919) % N);
        uint64_t t0 = sb_now_ns();
        assert_int_equal(tl_get(c, "hotline", q, NULL), 0);
        t_get[i] = sb_now_ns() - t0;
        snprintf(q, sizeof q, "never asked %d", i);
        t0 = sb_now_ns();
        assert_int_equal(tl_get(c, "hotline", q, NULL), SB_ENOTFOUND);
        t_miss[i] = sb_now_ns() - t0;
    }
    qsort(t_put, N, sizeof *t_put, cmp_u64);
    qsort(t_get, N, sizeof *t_get, cmp_u64);
    qsort(t_miss, N, sizeof *t_miss, cmp_u64);
    fprintf(stderr, "# cache latency (10k ops, 600-byte answers): put median %.1f us (p99 %.1f), "
            "get-hit median %.1f us (p99 %.1f), get-miss median %.1f us\n",
            t_put[N / 2] / 1e3, t_put[N * 99 / 100] / 1e3, t_get[N / 2] / 1e3,
            t_get[N * 99 / 100] / 1e3, t_miss[N / 2] / 1e3);
    assert_true(t_get[N / 2] < 5000000);            /* sanity only: machines vary */
    free(t_put); free(t_get); free(t_miss);
    sb_cache_close(c);
    free(path);
    tl_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_miss),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_read_only),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_migration),
        cmocka_unit_test(test_export_import_purge),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_latency),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
