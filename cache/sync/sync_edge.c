/* sync_edge.c - the edge side of the cloud sync (docs/cache-sync.md).
 *
 * One round:
 *   1. The local cache takes the batch (sb_cache_outbox_take, cache/outbox.c):
 *      the stored one, or a new one stored before it leaves.
 *   2. POST it, signed. A failure leaves the outbox as it is: the next call
 *      sends the same bytes with the same sync_id, and the cloud applies a
 *      sync_id at most once.
 *   3. The reply's erasures go to the caller's stores (on_erasures), then
 *      the local cache applies the reply and ends the batch in one
 *      transaction (sb_cache_outbox_apply).
 * Rounds repeat while the cloud says there is more or deltas remain. No
 * lock is held across the network: requests keep flowing.
 */
#include "cache/sync/sync_internal.h"
#include "cache/sb_cache_wire.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_ROUNDS             1000     /* a runaway loop is a bug; stop and say so */

/* Every attempt gets a fresh nonce in the body, so its signature is new: an
 * honest retry of a stored batch within the same second is never taken for
 * a replay, while the sync_id still makes the retry a no-op at the cloud. */
/* The headers that authenticate a request: body is what the signature
 * covers (the POST body, or for a GET its path with the nonce). */
static int sign_headers(const char *edge_id, const char *secret, const void *body, size_t len, char *headers,
                        size_t cap, char *err) {
    char ts[24], sig[SB_CACHE_KEY_HEX];
    if (strpbrk(edge_id, "\r\n")) return sb_seterr(err, SB_EINVAL, "sync: bad edge id");
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    sbc_sign(secret, ts, body, len, sig);
    snprintf(headers, cap, "X-Edge-Id: %s\r\nX-Timestamp: %s\r\nX-Signature: %s\r\n", edge_id, ts, sig);
    return SB_OK;
}

static int send_batch(const sb_cache_sync_opts *o, const sb_cache_batch *b, sbc_http_reply *reply, char *err) {
    char headers[512], nonce[33];
    if (strpbrk(o->edge_id, "\r\n")) return sb_seterr(err, SB_EINVAL, "sync: bad edge id");
    if (sbc_new_id(nonce)) return sb_seterr(err, SB_EIO, "getrandom failed");
    sb_jw body = { 0 };
    sb_jw_rawf(&body, "{\"nonce\":\"%s\",", nonce);
    sb_jw_raw(&body, b->body.p + 1, b->body.len - 1);     /* the stored object minus '{' */
    if (body.oom) { sb_jw_free(&body); return sb_seterr(err, SB_ENOMEM, "sync: out of memory"); }
    int rc = sign_headers(o->edge_id, o->secret, body.p, body.len, headers, sizeof headers, err);
    if (!rc)
        rc = sbc_http_request("POST", o->url, "/v1/sync", headers, body.p, body.len,
                              o->timeout_ms > 0 ? o->timeout_ms : 10000, o->ca_file, reply, err);
    sb_jw_free(&body);
    return rc;
}

int sb_cache_sync(sb_cache *c, const sb_cache_sync_opts *o, sb_cache_sync_result *res, char *err) {
    sb_cache_sync_result dummy;
    if (!res) res = &dummy;
    memset(res, 0, sizeof *res);
    if (!c) return sb_seterr(err, SB_EINVAL, "sync: cache disabled");
    if (!o || !o->url || !o->edge_id || !*o->edge_id || !o->secret || !*o->secret)
        return sb_seterr(err, SB_EINVAL, "sync: url, edge id and secret are required");
    for (int round = 0; round < MAX_ROUNDS; round++) {
        sb_cache_batch b;
        int rc = sb_cache_outbox_take(c, o, &b, err);
        if (rc) { sb_jw_free(&b.body); return rc; }
        res->rounds++;
        res->resumed |= b.resumed;
        sbc_http_reply reply;
        rc = send_batch(o, &b, &reply, err);        /* no lock: requests keep flowing */
        if (!rc && reply.status != 200) {
            int code = reply.status == 401 || reply.status == 400 ? SB_EINVAL : SB_EIO;
            rc = sb_seterr(err, code, "sync: %s answered %d: %.160s", o->url, reply.status,
                           reply.body.p ? reply.body.p : "");
            /* 400: this batch can never be accepted; resending it forever would
             * block every later sync. Drop it (its deltas are lost, logged).
             * 401 and 5xx keep it: a fixed secret or a recovered cloud takes it. */
            if (reply.status == 400) {
                sb_error("sync: dropping batch %s rejected as malformed: %s", b.sync_id, err);
                sb_cache_outbox_drop(c, b.sync_id);
            }
        }
        sb_json_doc *j = NULL;
        if (!rc && (rc = sb_json_parse(reply.body.p, reply.body.len, &j, err)) == SB_OK &&
            sb_json_type_of(sb_json_root(j)) != SB_JSON_OBJECT)
            rc = sb_seterr(err, SB_EFORMAT, "sync: reply is not a JSON object");
        int more = 0;
        const sb_json *erasures = rc ? NULL : sb_json_get(sb_json_root(j), "erasures");
        if (!rc && o->on_erasures && sb_json_type_of(erasures) == SB_JSON_ARRAY && sb_json_len(erasures))
            rc = o->on_erasures(o->erasures_arg, erasures, sb_json_str(sb_json_get(sb_json_root(j), "erase_key")), err);
        if (!rc) rc = sb_cache_outbox_apply(c, &b, sb_json_root(j), res, &more, err);
        if (!rc) { res->deltas_sent += b.n_deltas; res->entries_sent += b.n_entries; }
        sb_json_doc_free(j);
        sb_jw_free(&reply.body);
        int more_local = b.more_local || b.resumed;
        sb_jw_free(&b.body);
        if (rc) return rc;
        if (!more && !more_local) return SB_OK;
    }
    return sb_seterr(err, SB_EIO, "sync: still more after %d rounds", MAX_ROUNDS);
}

int sb_cloud_get(const sb_cloud_peer *p, const char *path, char **body, size_t *len, char *err) {
    *body = NULL;
    *len = 0;
    if (!p || !p->url || !p->edge_id || !*p->edge_id || !p->secret || !*p->secret)
        return sb_seterr(err, SB_EINVAL, "cloud: url, edge id and secret are required");
    char nonce[33], headers[512];
    if (sbc_new_id(nonce)) return sb_seterr(err, SB_EIO, "getrandom failed");
    sb_jw full = { 0 };
    sb_jw_rawf(&full, "%s?nonce=%s", path, nonce);
    if (full.oom) return sb_seterr(err, SB_ENOMEM, "cloud: out of memory");
    sbc_http_reply reply = { 0 };
    int rc = sign_headers(p->edge_id, p->secret, full.p, full.len, headers, sizeof headers, err);
    if (!rc)
        rc = sbc_http_request("GET", p->url, full.p, headers, NULL, 0, p->timeout_ms > 0 ? p->timeout_ms : 60000,
                              p->ca_file, &reply, err);
    sb_jw_free(&full);
    if (!rc && reply.status != 200)
        rc = sb_seterr(err, reply.status == 401 || reply.status == 404 || reply.status == 400 ? SB_EINVAL : SB_EIO,
                       "cloud: GET %s%s answered %d: %.160s", p->url, path, reply.status,
                       reply.body.p ? reply.body.p : "");
    if (!rc) sb_jw_raw(&reply.body, "", 1);             /* NUL-terminated for the caller */
    if (!rc && reply.body.oom) rc = sb_seterr(err, SB_ENOMEM, "cloud: out of memory");
    if (rc) {
        sb_jw_free(&reply.body);
        return rc;
    }
    *body = reply.body.p;
    *len = reply.body.len - 1;
    return SB_OK;
}
