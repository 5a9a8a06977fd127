/* http.c - the blocking HTTP(S) client of the edge side of the sync
 * (sb_cache_sync and the CLI), on libcurl.
 *
 * libcurl rather than our own socket code because the sync carries callers'
 * text between machines: it needs TLS with certificate verification, which
 * we will not write ourselves. What this file adds is the contract the sync
 * relies on:
 *   - one deadline for the whole request (connect, TLS, send, receive), so a
 *     slow peer cannot hold the sync thread longer than timeout_ms;
 *   - a bounded reply (MAX_REPLY), refused as soon as it grows past it;
 *   - a reply cut off mid-transfer is an error and never half-applied;
 *   - http and https only, no redirects, no proxies from the environment
 *     (the edge talks to the one cloud URL it was configured with).
 */
#include "cache/sync/sync_internal.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#define MAX_REPLY (256u << 20)      /* a sync page is a few MB at most */

typedef struct {
    sb_jw *body;
    int too_large;
} sink;

static size_t on_body(char *p, size_t size, size_t n, void *arg) {
    sink *s = arg;
    const size_t len = size * n;
    if (s->body->len + len > MAX_REPLY) {
        s->too_large = 1;
        return 0;                   /* makes libcurl stop with CURLE_WRITE_ERROR */
    }
    sb_jw_raw(s->body, p, len);
    return s->body->oom ? 0 : len;
}

/* One easy handle's options; 0 when every one was accepted. */
static CURLcode set_options(CURL *h, const char *method, const char *full_url, struct curl_slist *hdrs,
                            const void *body, size_t body_len, int timeout_ms, const char *ca_file,
                            sink *s, char *curl_err) {
    CURLcode c = CURLE_OK;
#define OPT(o, v) if (c == CURLE_OK) c = curl_easy_setopt(h, o, v)
    OPT(CURLOPT_URL, full_url);
    OPT(CURLOPT_PROTOCOLS_STR, "http,https");
    OPT(CURLOPT_FOLLOWLOCATION, 0L);
    OPT(CURLOPT_PROXY, "");                     /* ignore http_proxy & co */
    OPT(CURLOPT_NOSIGNAL, 1L);                  /* we run on a thread */
    OPT(CURLOPT_TIMEOUT_MS, (long)timeout_ms);  /* the whole request */
    OPT(CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    OPT(CURLOPT_SSL_VERIFYPEER, 1L);
    OPT(CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca_file && *ca_file) OPT(CURLOPT_CAINFO, ca_file);
    OPT(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MAX_REPLY);
    OPT(CURLOPT_CUSTOMREQUEST, method);
    OPT(CURLOPT_HTTPHEADER, hdrs);
    OPT(CURLOPT_POSTFIELDS, body_len ? body : "");
    OPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    OPT(CURLOPT_WRITEFUNCTION, on_body);
    OPT(CURLOPT_WRITEDATA, s);
    OPT(CURLOPT_ERRORBUFFER, curl_err);
#undef OPT
    return c;
}

/* "Name: v\r\nName2: v2\r\n" -> one list entry per line. */
static struct curl_slist *header_list(const char *headers, int *oom) {
    struct curl_slist *l = NULL, *t;
    const char *fixed[] = { "Content-Type: application/json", "Expect:", NULL };
    for (int i = 0; fixed[i]; i++) {
        if (!(t = curl_slist_append(l, fixed[i]))) goto fail;
        l = t;
    }
    for (const char *p = headers ? headers : ""; *p;) {
        size_t n = strcspn(p, "\r\n");
        if (n) {
            char line[1024];
            if (n >= sizeof line) goto fail;
            memcpy(line, p, n);
            line[n] = '\0';
            if (!(t = curl_slist_append(l, line))) goto fail;
            l = t;
        }
        p += n;
        p += strspn(p, "\r\n");
    }
    return l;
fail:
    curl_slist_free_all(l);
    *oom = 1;
    return NULL;
}

int sbc_http_request(const char *method, const char *url, const char *path, const char *headers,
                     const void *body, size_t body_len, int timeout_ms, const char *ca_file,
                     sbc_http_reply *reply, char *err) {
    memset(reply, 0, sizeof *reply);
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        return sb_seterr(err, SB_EINVAL, "url %s: only http:// and https:// are supported", url);
    sb_jw full = { 0 };
    size_t ul = strlen(url);
    while (ul && url[ul - 1] == '/') ul--;      /* "https://cloud/" + "/v1/sync" */
    sb_jw_raw(&full, url, ul);
    sb_jw_raw(&full, path, strlen(path));
    sb_jw_raw(&full, "", 1);
    int oom = full.oom;
    struct curl_slist *hdrs = oom ? NULL : header_list(headers, &oom);
    CURL *h = oom ? NULL : curl_easy_init();
    if (!h) {
        curl_slist_free_all(hdrs);
        sb_jw_free(&full);
        return sb_seterr(err, SB_ENOMEM, "%s %s%s: out of memory", method, url, path);
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    sink s = { .body = &reply->body };
    int rc = SB_OK;
    CURLcode c = set_options(h, method, full.p, hdrs, body, body_len, timeout_ms, ca_file, &s, curl_err);
    if (c == CURLE_OK) c = curl_easy_perform(h);
    if (c == CURLE_OK) {
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        reply->status = (int)status;
        if (!reply->body.p) sb_jw_raw(&reply->body, "", 0);
        if (reply->body.oom) rc = sb_seterr(err, SB_ENOMEM, "%s %s%s: reply: out of memory", method, url, path);
    } else if (s.too_large || c == CURLE_FILESIZE_EXCEEDED) {
        rc = sb_seterr(err, SB_ERANGE, "%s %s%s: reply too large (over %u MiB)", method, url, path,
                       MAX_REPLY >> 20);
    } else if (reply->body.oom) {
        rc = sb_seterr(err, SB_ENOMEM, "%s %s%s: reply: out of memory", method, url, path);
    } else {
        /* CURLE_OPERATION_TIMEDOUT, CURLE_PARTIAL_FILE (cut off),
         * CURLE_PEER_FAILED_VERIFICATION, CURLE_COULDNT_CONNECT, ... */
        rc = sb_seterr(err, SB_EIO, "%s %s%s: %s%s%s", method, url, path, curl_easy_strerror(c),
                       *curl_err ? ": " : "", curl_err);
    }
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    sb_jw_free(&full);
    if (rc) sb_jw_free(&reply->body);
    return rc;
}

int sb_http_post_json(const char *url, const char *headers, const char *body, size_t len, int timeout_ms,
                      const char *ca_file, int *status, char *err) {
    sbc_http_reply reply;       /* the header list always says application/json */
    int rc = sbc_http_request("POST", url, "", headers, body, len, timeout_ms, ca_file, &reply, err);
    *status = rc ? 0 : reply.status;
    sb_jw_free(&reply.body);
    return rc;
}
