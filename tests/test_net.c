/* test_net.c - common/net.c: "HOST:PORT" and http(s) URLs (sb_net.h), the
 * one parser behind runtime.http, router/cloud --listen, upstream URLs and
 * ask --url. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/sb_common.h"
#include "common/sb_net.h"

static void test_host_port(void **state) {
    char host[SB_NET_HOST_MAX], err[SB_ERR_LEN];
    int port = -1;
    assert_int_equal(sb_net_host_port("127.0.0.1:8080", 1, host, sizeof host, &port, err), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(sb_net_host_port("[::1]:9", 1, host, sizeof host, &port, err), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 9);
    assert_int_equal(sb_net_host_port("localhost:65535", 1, host, sizeof host, &port, err), 0);
    assert_int_equal(port, 65535);
    assert_int_equal(sb_net_host_port("h:0", 0, host, sizeof host, &port, err), 0);   /* any free port */
    assert_int_equal(port, 0);
    static const char *const bad[] = {
        "127.0.0.1",            /* missing port */
        "127.0.0.1:",           /* empty port */
        "h:0",                  /* below min_port 1 */
        "h:65536", "h:99999999", "h:-1", "h:+80", "h:8o",   /* bad ports */
        ":80", "[]:80",         /* no host */
        "[zz]:80", "[::1:80", "::1:80",                     /* bad IPv6 */
        "my_host:80", "h%41:80", "u@h:80", "h:80/x", "h:80?q", "h :80", "",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        if (sb_net_host_port(bad[i], 1, host, sizeof host, &port, err) != SB_EINVAL)
            fail_msg("accepted '%s'", bad[i]);
        assert_true(err[0]);
    }
    char small[4];
    assert_int_equal(sb_net_host_port("abcd:1", 1, small, sizeof small, &port, err), SB_EINVAL);
}

static void test_url(void **state) {
    sb_net_url u;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_net_url_parse("http://127.0.0.1:8080/v1", &u, err), 0);
    assert_false(u.https);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 8080);
    assert_true(u.port_given);
    assert_string_equal(u.path, "/v1");
    assert_int_equal(sb_net_url_parse("http://[::1]:8000/a/b/?x=1#f", &u, err), 0);
    assert_true(u.ipv6);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 8000);
    assert_string_equal(u.path, "/a/b/");
    assert_int_equal(sb_net_url_parse("http://example.com", &u, err), 0);       /* missing port: 80 */
    assert_int_equal(u.port, 80);
    assert_false(u.port_given);
    assert_string_equal(u.path, "");
    assert_int_equal(sb_net_url_parse("https://cloud.example.com/prefix", &u, err), 0);
    assert_true(u.https);
    assert_int_equal(u.port, 443);
    assert_string_equal(u.path, "/prefix");
    assert_int_equal(sb_net_url_parse("https://[2001:db8::1]:8443", &u, err), 0);
    assert_string_equal(u.host, "2001:db8::1");
    assert_int_equal(u.port, 8443);
    static const char *const bad[] = {
        "ftp://h/", "HTTP://h/", "h:80", "//h:80", "http://", "http:///v1",
        "http://h:", "http://h:0", "http://h:65536", "http://h:x/", "http://[::1/",
        "http://u:p@h/", "http://my_host/", "http://h/a b", "http://h/\x01",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        if (sb_net_url_parse(bad[i], &u, err) != SB_EINVAL) fail_msg("accepted '%s'", bad[i]);
        assert_true(err[0]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_port),
        cmocka_unit_test(test_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
