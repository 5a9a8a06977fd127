/* sb_net.h - the one parser of network addresses: "HOST:PORT" (listen
 * addresses) and http(s) URLs (upstreams, ask --url), both on libevent's
 * evhttp_uri_parse (RFC 3986) plus the checks every caller made by hand:
 * a lower-case http/https scheme, a host of letters, digits, '.' and '-'
 * (a DNS name or IPv4 address) or a bracketed IPv6 address, a decimal port
 * in range, no user info. common/net.c.
 */
#ifndef SB_NET_H
#define SB_NET_H

#include <stdbool.h>
#include <stddef.h>

#define SB_NET_HOST_MAX 256             /* a DNS name is at most 253 bytes */

typedef struct {
    bool https;                         /* else http */
    char host[SB_NET_HOST_MAX];         /* an IPv6 address without its brackets */
    bool ipv6;
    int  port;                          /* as given, or 80 / 443 */
    bool port_given;
    char path[1024];                    /* "" or from the first '/', without query
                                         * and fragment */
} sb_net_url;

/* "HOST:PORT" or "[IPV6]:PORT" with PORT in [min_port, 65535] (min_port 0
 * lets a server ask for any free port). host gets HOST without brackets.
 * 0, or SB_EINVAL with the reason in err (may be NULL). */
int sb_net_host_port(const char *s, int min_port, char *host, size_t hostcap, int *port, char *err);

/* http://HOST[:PORT][/PATH][?QUERY][#FRAGMENT], or https://; a given PORT
 * is in [1, 65535]; a path over 1023 bytes is refused. 0, or SB_EINVAL
 * with the reason in err (may be NULL). */
int sb_net_url_parse(const char *s, sb_net_url *u, char *err);

#endif
