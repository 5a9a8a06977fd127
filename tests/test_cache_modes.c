/* test_cache_modes.c - the cache files hold callers' text: 0600.
 *
 * The database and its -wal/-shm files, stat'ed while a connection is open
 * (that is when -wal and -shm exist), under the usual umask 022: new files
 * are created owner-only, and files an older version left 0644 are narrowed
 * when the cache is opened again.
 */
#include "tests/cache_testlib.h"

static void expect_owner_only(const char *path) {
    static const char *const suffixes[] = { "", "-wal", "-shm" };
    for (size_t i = 0; i < 3; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
        struct stat st;
        if (stat(p, &st) != 0) fail_msg("%s: %s", p, strerror(errno));
        if ((st.st_mode & 07777) != 0600) fail_msg("%s: mode %04o, want 0600", p, (unsigned)(st.st_mode & 07777));
    }
}

static sb_cache *open_put(const char *path, const char *question) {
    sb_cache *c = NULL;
    char err[SB_ERR_LEN] = "";
    sb_cache_opts o = { .no_checkpointer = 1 };
    if (sb_cache_open(path, &o, &c, err)) fail_msg("open %s: %s", path, err);
    assert_int_equal(tl_put(c, "ns", question, "an answer", -1, NULL), 0);
    return c;
}

static void test_new_files_are_0600(void **state) {
    (void)state;
    mode_t old = umask(022);
    char *dir = tl_tmpdir(), *path = tl_path(dir, "cache.sqlite");
    sb_cache *c = open_put(path, "my account number is 12345");
    expect_owner_only(path);
    sb_cache_close(c);
    umask(old);
    free(path);
    tl_rmdir(dir);
}

/* A runtime of the old version made them 0644; the next open (a restart, or
 * `switchboard cache stats`) narrows all three, the open connection's too. */
static void test_existing_0644_files_are_narrowed(void **state) {
    (void)state;
    mode_t old = umask(022);
    char *dir = tl_tmpdir(), *path = tl_path(dir, "cache.sqlite");
    sb_cache *a = open_put(path, "first question");
    const char *suffixes[] = { "", "-wal", "-shm" };
    for (size_t i = 0; i < 3; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
        assert_int_equal(chmod(p, 0644), 0);
    }
    sb_cache *b = open_put(path, "second question");
    expect_owner_only(path);
    sb_cache_close(b);
    sb_cache_close(a);
    umask(old);
    free(path);
    tl_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_files_are_0600),
        cmocka_unit_test(test_existing_0644_files_are_narrowed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
