/* sb_sync.h - the edge's side of the cloud sync (docs/cache-sync.md): one
 * sync of a local cache with `switchboard cloud`, and signed GETs of the
 * files the cloud publishes. Above the local cache (cache/sb_cache.h), which
 * keeps the sync's state in its file; the transport is libcurl (http.c).
 */
#ifndef SB_SYNC_H
#define SB_SYNC_H

#include <stddef.h>
#include "cache/sb_cache.h"

/* One sync with the cloud (docs/cache-sync.md). Safe to kill at any point and
 * to call again: the outgoing batch is stored (with its sync_id) before it is
 * sent and resent unchanged until the reply is applied; the reply is applied
 * and the cursor advanced in one transaction. SB_EIO: network or HTTP error;
 * SB_EINVAL: rejected (401/400) - the message says which. */
int sb_cache_sync(sb_cache *c, const sb_cache_sync_opts *o, sb_cache_sync_result *res, char *err);

/* ================================================ files the cloud publishes
 *
 * The cloud tier also serves files an operator published there (knowledge
 * base snapshots: `switchboard kb publish` / `kb pull`, docs/KNOWLEDGE.md),
 * to the same edges, with the same credentials and transport as the sync. */

typedef struct {
    const char *url, *edge_id, *secret;  /* as for sb_cache_sync */
    const char *ca_file;                 /* NULL = system store */
    int         timeout_ms;              /* the whole request; 0 = 60000 */
} sb_cloud_peer;

/* GET url + path, signed as a sync is (X-Edge-Id, X-Timestamp, X-Signature;
 * a fresh nonce in the query makes every request's signature new). 200 only:
 * any other status is SB_EINVAL (401, 404) or SB_EIO, with the cloud's
 * message. *body is sb_malloc'ed and NUL-terminated (*len excludes it). */
int  sb_cloud_get(const sb_cloud_peer *p, const char *path, char **body, size_t *len, char *err);

/* ================================================ one POST, as the sync sends
 *
 * The sync's transport for other deliveries that must leave this machine
 * with the same guarantees (TLS verified, one deadline, http(s) only, no
 * redirects, a whole reply or an error): a JSON body POSTed to url with
 * extra header lines ("Name: v\r\n"). 0 with *status the HTTP status
 * (any); SB_EIO (network), SB_EINVAL (not http/https), SB_ENOMEM. */
int  sb_http_post_json(const char *url, const char *headers, const char *body, size_t len, int timeout_ms,
                       const char *ca_file, int *status, char *err);

/* The configuration's `cache.sync` section (sync_config.c; sb_config.h,
 * "sections"): the cloud this edge syncs with and its credentials. */
extern const sb_cfg_section sb_sync_section;

#endif
