/* net.c - "HOST:PORT" and http(s) URLs on evhttp_uri_parse (sb_net.h).
 *
 * libevent does the RFC 3986 grammar (IPv6 literals, ports that overflow,
 * spaces and control bytes); what is added here is what our callers need
 * beyond the grammar: the scheme spelled "http" or "https", no user info,
 * a "host:" with an empty port refused (libevent reads it as no port), and
 * the host limited to what getaddrinfo takes - not percent escapes or the
 * sub-delimiters RFC 3986 allows in a reg-name.
 */
#include "common/sb_net.h"

#include <event2/http.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"

static bool host_chars_ok(const char *h) {
    if (!*h) return false;
    for (; *h; h++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-", *h)) return false;
    return true;
}

/* The authority of "SCHEME://AUTHORITY..." ends with ':' (an empty port). */
static bool empty_port(const char *s) {
    const char *a = strstr(s, "//");
    if (!a) return false;
    a += 2;
    size_t n = strcspn(a, "/?#");
    return n && a[n - 1] == ':';
}

/* Host and port of a parsed URI into host/ipv6/port; 0 or SB_EINVAL. */
static int take_host(const struct evhttp_uri *u, const char *s, char *host, size_t cap, bool *ipv6,
                     char *err) {
    const char *h = evhttp_uri_get_host(u);
    size_t n = h ? strlen(h) : 0;
    if (evhttp_uri_get_userinfo(u)) return sb_seterr(err, SB_EINVAL, "'%s': user info is not supported", s);
    *ipv6 = n >= 2 && h[0] == '[';
    if (*ipv6) { h++; n -= 2; }         /* libevent has checked the literal */
    if (!n) return sb_seterr(err, SB_EINVAL, "'%s': no host", s);
    if (n >= cap) return sb_seterr(err, SB_EINVAL, "'%s': host longer than %zu bytes", s, cap - 1);
    memcpy(host, h, n);
    host[n] = '\0';
    if (!*ipv6 && !host_chars_ok(host))
        return sb_seterr(err, SB_EINVAL, "'%s': a host is letters, digits, '.', '-' or an [IPv6] address", s);
    if (empty_port(s)) return sb_seterr(err, SB_EINVAL, "'%s': empty port", s);
    return 0;
}

int sb_net_host_port(const char *s, int min_port, char *host, size_t hostcap, int *port, char *err) {
    char url[600];
    if (!s || strlen(s) > 512) return sb_seterr(err, SB_EINVAL, "expected HOST:PORT, got '%.64s'", s ? s : "");
    snprintf(url, sizeof url, "http://%s", s);
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(url, 0);
    if (!u) return sb_seterr(err, SB_EINVAL, "'%s': expected HOST:PORT or [IPV6]:PORT with a port up to 65535", s);
    bool ipv6;
    int rc = take_host(u, s, host, hostcap, &ipv6, err);
    int p = evhttp_uri_get_port(u);
    const char *path = evhttp_uri_get_path(u);
    if (!rc && ((path && *path) || evhttp_uri_get_query(u) || evhttp_uri_get_fragment(u)))
        rc = sb_seterr(err, SB_EINVAL, "'%s': expected HOST:PORT, nothing after the port", s);
    if (!rc && p < 0) rc = sb_seterr(err, SB_EINVAL, "'%s': expected HOST:PORT, no port given", s);
    if (!rc && p < min_port) rc = sb_seterr(err, SB_EINVAL, "'%s': port %d is below %d", s, p, min_port);
    evhttp_uri_free(u);
    if (!rc) *port = p;
    return rc;
}

int sb_net_url_parse(const char *s, sb_net_url *out, char *err) {
    memset(out, 0, sizeof *out);
    bool https = !strncmp(s, "https://", 8);
    if (!https && strncmp(s, "http://", 7))
        return sb_seterr(err, SB_EINVAL, "'%s': expected http://HOST[:PORT][/PATH] or https://...", s);
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(s, 0);
    if (!u) return sb_seterr(err, SB_EINVAL, "'%s': not a valid URL (RFC 3986; port up to 65535)", s);
    int rc = take_host(u, s, out->host, sizeof out->host, &out->ipv6, err);
    int p = evhttp_uri_get_port(u);
    const char *path = evhttp_uri_get_path(u);
    if (!rc && p == 0) rc = sb_seterr(err, SB_EINVAL, "'%s': port 0", s);
    if (!rc && path && strlen(path) >= sizeof out->path)
        rc = sb_seterr(err, SB_EINVAL, "'%s': path longer than %zu bytes", s, sizeof out->path - 1);
    if (!rc) {
        out->https = https;
        out->port_given = p > 0;
        out->port = p > 0 ? p : https ? 443 : 80;
        snprintf(out->path, sizeof out->path, "%s", path ? path : "");
    }
    evhttp_uri_free(u);
    return rc;
}
