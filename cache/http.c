/* http.c - a small blocking HTTP/1.1 client for the edge side of the sync
 * (sb_cache_sync and the CLI). One request per connection (Connection:
 * close); the reply must carry Content-Length and arrive whole, so a reply
 * cut off mid-transfer is an error and never half-applied.
 */
#include "cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_REPLY (256u << 20)      /* a sync page is a few MB at most */

typedef struct { char host[256], port[8], prefix[256]; } url_parts;

static int parse_url(const char *url, url_parts *u, char *err) {
    memset(u, 0, sizeof *u);
    if (strncmp(url, "http://", 7))
        return sb_seterr(err, SB_EINVAL, "url %s: only http:// is supported", url);
    const char *p = url + 7, *host_end;
    if (*p == '[') {
        host_end = strchr(p, ']');
        if (!host_end) return sb_seterr(err, SB_EINVAL, "url %s: unterminated [", url);
        p++;
    } else {
        host_end = p + strcspn(p, ":/");
    }
    size_t hl = (size_t)(host_end - p);
    if (!hl || hl >= sizeof u->host) return sb_seterr(err, SB_EINVAL, "url %s: bad host", url);
    memcpy(u->host, p, hl);
    p = host_end + (*host_end == ']');
    snprintf(u->port, sizeof u->port, "80");
    if (*p == ':') {
        size_t pl = strcspn(p + 1, "/");
        if (!pl || pl >= sizeof u->port) return sb_seterr(err, SB_EINVAL, "url %s: bad port", url);
        memcpy(u->port, p + 1, pl);
        u->port[pl] = '\0';
        p += 1 + pl;
    }
    snprintf(u->prefix, sizeof u->prefix, "%s", p);
    size_t n = strlen(u->prefix);
    if (n && u->prefix[n - 1] == '/') u->prefix[n - 1] = '\0';
    return SB_OK;
}

static int connect_to(const url_parts *u, int timeout_ms, char *err) {
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    int g = getaddrinfo(u->host, u->port, &hints, &res);
    if (g) return sb_seterr(err, SB_EIO, "%s:%s: %s", u->host, u->port, gai_strerror(g));
    int fd = -1, saved = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS) {
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
                soerr == 0)
                break;
            saved = soerr ? soerr : ETIMEDOUT;
        } else {
            saved = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return sb_seterr(err, SB_EIO, "connect %s:%s: %s", u->host, u->port, strerror(saved));
    /* Back to blocking, with a deadline on every send and receive. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static int send_all(int fd, const void *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* Split "HTTP/1.1 200 OK\r\nh: v\r\n\r\nbody" and check it is complete. */
static int parse_reply(sbc_buf *raw, sbc_http_reply *reply, char *err) {
    char *hdr_end = raw->p ? strstr(raw->p, "\r\n\r\n") : NULL;
    if (!hdr_end || strncmp(raw->p, "HTTP/1.", 7) || raw->len < 12)
        return sb_seterr(err, SB_EIO, "reply cut off or not HTTP (%zu bytes)", raw->len);
    reply->status = atoi(raw->p + 9);
    long long content_length = -1;
    *hdr_end = '\0';
    for (char *line = strstr(raw->p, "\r\n"); line && line < hdr_end; line = strstr(line + 2, "\r\n")) {
        if (!strncasecmp(line + 2, "Content-Length:", 15)) content_length = atoll(line + 17);
    }
    size_t body_off = (size_t)(hdr_end + 4 - raw->p);
    size_t got = raw->len - body_off;
    if (content_length < 0) return sb_seterr(err, SB_EIO, "reply without Content-Length");
    if ((long long)got != content_length)
        return sb_seterr(err, SB_EIO, "reply cut off: %zu of %lld body bytes", got, content_length);
    sbc_buf_add(&reply->body, raw->p + body_off, got);
    if (reply->body.oom) return sb_seterr(err, SB_ENOMEM, "reply: out of memory");
    if (!reply->body.p) sbc_buf_add(&reply->body, "", 0);
    return SB_OK;
}

int sbc_http_request(const char *method, const char *url, const char *path, const char *headers,
                     const void *body, size_t body_len, int timeout_ms, sbc_http_reply *reply,
                     char *err) {
    memset(reply, 0, sizeof *reply);
    url_parts u;
    int rc = parse_url(url, &u, err);
    if (rc) return rc;
    int fd = connect_to(&u, timeout_ms, err);
    if (fd < 0) return fd;
    sbc_buf req = { 0 }, raw = { 0 };
    int ipv6 = strchr(u.host, ':') != NULL;
    sbc_buf_printf(&req, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                   method, u.prefix, path, ipv6 ? "[" : "", u.host, ipv6 ? "]" : "", u.port,
                   body_len, headers ? headers : "");
    if (req.oom) { rc = sb_seterr(err, SB_ENOMEM, "request: out of memory"); goto out; }
    if (send_all(fd, req.p, req.len) || (body_len && send_all(fd, body, body_len))) {
        rc = sb_seterr(err, SB_EIO, "%s %s%s: send: %s", method, url, path, strerror(errno));
        goto out;
    }
    char chunk[65536];
    for (;;) {
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = sb_seterr(err, SB_EIO, "%s %s%s: receive: %s", method, url, path,
                           errno == EAGAIN ? "timed out" : strerror(errno));
            goto out;
        }
        if (r == 0) break;
        sbc_buf_add(&raw, chunk, (size_t)r);
        if (raw.oom || raw.len > MAX_REPLY) {
            rc = sb_seterr(err, SB_ERANGE, "%s %s%s: reply too large", method, url, path);
            goto out;
        }
    }
    rc = parse_reply(&raw, reply, err);
out:
    close(fd);
    sbc_buf_free(&req);
    sbc_buf_free(&raw);
    if (rc) sbc_buf_free(&reply->body);
    return rc;
}
