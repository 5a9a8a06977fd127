/* test_supervisor.c - the supervisor's rules without processes: restart
 * backoff and the crash-loop limit, the runtime directory's safety checks,
 * the reserved model name, and the JSON string escaping `ask --json` uses.
 * (The processes themselves: tests/it_runtime.sh and tests/test_runtime.c.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "supervisor/ask_internal.h"
#include "supervisor/sb_supervisor.h"

static char g_dir[64];

static int setup(void **state) {
    char tmpl[] = "/tmp/sb-sup-XXXXXX";
    if (!mkdtemp(tmpl)) return -1;
    snprintf(g_dir, sizeof g_dir, "%s", tmpl);
    return 0;
}

static int teardown(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd);
}

/* ------------------------------------------------------------- backoff */

static void test_backoff_doubles_then_gives_up(void **state) {
    sb_restart_policy p;
    sb_restart_init(&p);
    double t = 1000;
    static const int want[] = { 100, 200, 400, 800, 1600 };
    for (size_t i = 0; i < SB_ARRAY_LEN(want); i++) {
        assert_int_equal(sb_restart_on_crash(&p, t, 0), want[i]);
        t += want[i] / 1000.0 + 0.05;      /* restart delay + a short life */
    }
    /* The sixth crash within 60 s: more than 5, give up. */
    assert_int_equal(sb_restart_on_crash(&p, t, 0), -1);
    /* A reload retries with a fresh policy. */
    sb_restart_init(&p);
    assert_int_equal(sb_restart_on_crash(&p, t + 1, 0), 100);
}

static void test_backoff_caps_at_5s(void **state) {
    sb_restart_policy p;
    sb_restart_init(&p);
    /* One crash every 20 s never exceeds 3 in the window, so the delay keeps
     * doubling up to the cap without giving up. */
    int last = 0;
    for (int i = 0; i < 12; i++) {
        last = sb_restart_on_crash(&p, i * 20.0, 0);
        assert_true(last > 0);
        assert_true(last <= SB_SUP_BACKOFF_MAX_MS);
    }
    assert_int_equal(last, SB_SUP_BACKOFF_MAX_MS);
}

static void test_backoff_resets_after_60s_healthy(void **state) {
    sb_restart_policy p;
    sb_restart_init(&p);
    assert_int_equal(sb_restart_on_crash(&p, 0, 0), 100);
    assert_int_equal(sb_restart_on_crash(&p, 1, 0.5), 200);
    assert_int_equal(sb_restart_on_crash(&p, 2, 0.5), 400);
    /* Up for 59 s: not yet healthy long enough. */
    assert_int_equal(sb_restart_on_crash(&p, 62, 59), 800);
    /* Up for 60 s: start over at 100 ms. */
    assert_int_equal(sb_restart_on_crash(&p, 200, 60), 100);
}

static void test_crash_window_slides(void **state) {
    sb_restart_policy p;
    sb_restart_init(&p);
    /* 5 crashes at t=0..4, then the 6th at t=61: the first two left the window. */
    for (int i = 0; i < 5; i++) assert_true(sb_restart_on_crash(&p, i, 0) > 0);
    assert_true(sb_restart_on_crash(&p, 61, 0) > 0);
    assert_int_equal(p.n_crashes, 4);       /* t=2, 3, 4 and 61 */
    /* Two more quick ones make 6 in the window. */
    assert_true(sb_restart_on_crash(&p, 61.2, 0) > 0);
    assert_int_equal(sb_restart_on_crash(&p, 61.4, 0), -1);
}

/* --------------------------------------------------- runtime directory */

static void test_rundir_created_0700(void **state) {
    char dir[128], err[SB_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/a/b/run", g_dir);
    umask(022);
    assert_int_equal(sb_runtime_dir_prepare(dir, err), 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    /* An existing safe directory is accepted as is. */
    assert_int_equal(sb_runtime_dir_prepare(dir, err), 0);
    assert_int_equal(sb_runtime_dir_check(dir, err), 0);
}

static void test_rundir_refuses_unsafe(void **state) {
    char dir[128], err[SB_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/open", g_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    chmod(dir, 0750);
    assert_int_equal(sb_runtime_dir_prepare(dir, err), SB_EINVAL);
    assert_non_null(strstr(err, "mode 0750"));
    assert_int_equal(sb_runtime_dir_check(dir, err), SB_EINVAL);
    /* Not a directory. */
    snprintf(dir, sizeof dir, "%s/file", g_dir);
    FILE *f = fopen(dir, "w");
    fclose(f);
    assert_int_equal(sb_runtime_dir_prepare(dir, err), SB_EINVAL);
    assert_non_null(strstr(err, "not a directory"));
    /* A symlink to a good directory: refused (the link could be swapped). */
    char good[128], link[128];
    snprintf(good, sizeof good, "%s/good", g_dir);
    snprintf(link, sizeof link, "%s/link", g_dir);
    assert_int_equal(mkdir(good, 0700), 0);
    assert_int_equal(symlink(good, link), 0);
    assert_int_equal(sb_runtime_dir_prepare(link, err), SB_EINVAL);
    assert_non_null(strstr(err, "symlink"));
    /* Owned by someone else. */
    if (geteuid() == 0) {
        snprintf(dir, sizeof dir, "%s/theirs", g_dir);
        assert_int_equal(mkdir(dir, 0700), 0);
        assert_int_equal(chown(dir, 65534, 65534), 0);
        assert_int_equal(sb_runtime_dir_prepare(dir, err), SB_EINVAL);
        assert_non_null(strstr(err, "owned by uid 65534"));
    }
    /* A missing one is fine for --check. */
    snprintf(dir, sizeof dir, "%s/missing", g_dir);
    assert_int_equal(sb_runtime_dir_check(dir, err), 0);
}

/* ------------------------------------------------------ config checks */

static void test_reserved_model_name(void **state) {
    char gguf[128], err[SB_ERR_LEN], yaml[512];
    snprintf(gguf, sizeof gguf, "%s/m.gguf", g_dir);
    FILE *f = fopen(gguf, "w");
    fputs("GGUF", f);
    fclose(f);
    snprintf(yaml, sizeof yaml, "models:\n  tool: { gguf: %s }\n  router: { gguf: %s }\n", gguf, gguf);
    sb_config *cfg = NULL;
    char path[128];
    snprintf(path, sizeof path, "%s/c.yaml", g_dir);
    assert_int_equal(sb_config_parse(yaml, strlen(yaml), path, &cfg, err), 0);
    assert_int_equal(sb_supervisor_validate(cfg, err), SB_EINVAL);
    char want[320];
    snprintf(want, sizeof want, "%s:3:3: models.router: the name 'router' is reserved", path);
    assert_non_null(strstr(err, want));
    sb_config_free(cfg);
    assert_true(sb_supervisor_reserved_name("router"));
    assert_false(sb_supervisor_reserved_name("routers"));
}

/* -------------------------------------------------- ask's JSON strings */

static void json_of(const char *s, size_t n, char *out, size_t cap) {
    FILE *f = fmemopen(out, cap, "w");
    sb_ask_json_string(f, s, n);
    fclose(f);
}

static void test_ask_json_string(void **state) {
    char out[256];
    json_of("a\"b\\c\n", 6, out, sizeof out);
    assert_string_equal(out, "\"a\\\"b\\\\c\\n\"");     /* common's writer: \n, not \u000a */
    json_of("\xe4\xbd\xa0\xe5\xa5\xbd", 6, out, sizeof out);          /* 你好 passes through */
    assert_string_equal(out, "\"\xe4\xbd\xa0\xe5\xa5\xbd\"");
    json_of("x\xff" "y\xe4\xbd", 5, out, sizeof out);                  /* invalid and truncated */
    assert_string_equal(out, "\"x\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbd\"");
    json_of("\xed\xa0\x80", 3, out, sizeof out);                        /* a UTF-16 surrogate */
    assert_string_equal(out, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    json_of("\xc0\xaf", 2, out, sizeof out);                            /* overlong '/' */
    assert_string_equal(out, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    json_of("a\0b", 3, out, sizeof out);
    assert_string_equal(out, "\"a\\u0000b\"");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_doubles_then_gives_up),
        cmocka_unit_test(test_backoff_caps_at_5s),
        cmocka_unit_test(test_backoff_resets_after_60s_healthy),
        cmocka_unit_test(test_crash_window_slides),
        cmocka_unit_test(test_rundir_created_0700),
        cmocka_unit_test(test_rundir_refuses_unsafe),
        cmocka_unit_test(test_reserved_model_name),
        cmocka_unit_test(test_ask_json_string),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
