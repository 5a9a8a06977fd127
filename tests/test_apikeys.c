/* test_apikeys.c - the gateway's named API keys (router/apikeys.c) from
 * real files: lines, roles, the legacy single key, and the file's mode
 * and owner, each mistake named by file and line.
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

static char dir[64], path[128];

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/sb-test-apikeys-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/keys", dir);
    return 0;
}

static int teardown(void **state) {
    unlink(path);
    return rmdir(dir);
}

static void write_keys(const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

/* Load path as runtime.api_keys_file: rc, err. */
static int load(rt_keys **k, char *err) {
    sb_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.runtime.api_keys_file = path;
    return rt_keys_load(&cfg, k, err);
}

static void test_roles_and_match(void **state) {
    char err[SB_ERR_LEN];
    rt_keys *k;
    write_keys("# callers\n\napp   app-secret   client\n\tops\tops-secret\tconsole,admin  \n", 0600);
    assert_int_equal(load(&k, err), 0);
    assert_int_equal(rt_keys_count(k), 2);
    const rt_key *a = rt_keys_match(k, "app-secret", 10);
    assert_non_null(a);
    assert_string_equal(a->name, "app");
    assert_int_equal(a->roles, RT_ROLE_CLIENT);
    const rt_key *o = rt_keys_match(k, "ops-secret", 10);
    assert_non_null(o);
    assert_int_equal(o->roles, RT_ROLE_CONSOLE | RT_ROLE_ADMIN);
    assert_null(rt_keys_match(k, "app-secre", 9));           /* a prefix is not the key */
    assert_null(rt_keys_match(k, "app-secretX", 11));
    assert_null(rt_keys_match(k, "", 0));
    rt_keys_free(k);
}

static void expect_error(const char *text, mode_t mode, const char *what) {
    char err[SB_ERR_LEN] = "";
    rt_keys *k = (rt_keys *)1;
    write_keys(text, mode);
    assert_int_not_equal(load(&k, err), 0);
    assert_null(k);
    if (!strstr(err, what)) fail_msg("expected '%s', got: %s", what, err);
}

static void test_mistakes_are_named(void **state) {
    expect_error("app s1 client\nbad s2 client,root\n", 0600, ":2: key 'bad': unknown role 'root'");
    expect_error("app s1 client\napp s2 console\n", 0600, ":2: the name 'app' is given twice");
    expect_error("app s1 client\nops s1 console\n", 0600, ":2: key 'ops' has the same secret as 'app'");
    expect_error("app s1\n", 0600, ":1: expected 'NAME KEY ROLE[,ROLE...]', got 2 field(s)");
    expect_error("a/b s1 client\n", 0600, ":1: name 'a/b'");
    expect_error("# nothing\n", 0600, "no keys in it");
    expect_error("app s1 client\n", 0644, "mode 0644 lets other users read the keys");
    expect_error("app s1 client\n", 0640, "want 0600");
}

static void test_legacy_key_has_every_role(void **state) {
    char err[SB_ERR_LEN];
    sb_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.runtime.api_key_env = "SB_TEST_APIKEYS_LEGACY";
    setenv("SB_TEST_APIKEYS_LEGACY", "legacy-secret", 1);
    write_keys("app app-secret client\n", 0600);
    cfg.runtime.api_keys_file = path;
    rt_keys *k;
    assert_int_equal(rt_keys_load(&cfg, &k, err), 0);
    const rt_key *d = rt_keys_match(k, "legacy-secret", 13);
    assert_non_null(d);
    assert_string_equal(d->name, "default");
    assert_int_equal(d->roles, RT_ROLE_CLIENT | RT_ROLE_CONSOLE | RT_ROLE_ADMIN);
    assert_non_null(rt_keys_match(k, "app-secret", 10));
    rt_keys_free(k);
    cfg.runtime.api_keys_file = NULL;
    unsetenv("SB_TEST_APIKEYS_LEGACY");
    assert_int_equal(rt_keys_load(&cfg, &k, err), SB_EINVAL);     /* configured but unset: no "no auth" */
    assert_non_null(strstr(err, "SB_TEST_APIKEYS_LEGACY is not set"));
    cfg.runtime.api_key_env = NULL;
    assert_int_equal(rt_keys_load(&cfg, &k, err), 0);
    assert_null(k);                                                 /* nothing configured: no auth */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roles_and_match, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mistakes_are_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_legacy_key_has_every_role, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
