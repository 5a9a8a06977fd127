/* sync_internal.h - between the files of cache/sync/ (and the tests of
 * the transport); not an API. */
#ifndef SB_SYNC_INTERNAL_H
#define SB_SYNC_INTERNAL_H

#include "cache/sync/sb_sync.h"
#include "common/sb_json.h"

/* HTTP(S), blocking (http.c, libcurl). */
typedef struct {
    int    status;
    sb_jw body;
} sbc_http_reply;

/* POST/DELETE to URL + path (http:// or https://, the peer's certificate
 * verified against ca_file or, when NULL, the system store) with extra header
 * lines ("Name: v\r\n"). timeout_ms bounds the whole request. The whole
 * reply must arrive: a cut-off reply is SB_EIO, one over 256 MiB SB_ERANGE,
 * never a partial body. */
int sbc_http_request(const char *method, const char *url, const char *path,
                     const char *headers, const void *body, size_t body_len, int timeout_ms,
                     const char *ca_file, sbc_http_reply *reply, char *err);

#endif
