/* cloud_internal.h - between cloud.c (HTTP, auth) and cloud_store.c
 * (PostgreSQL); only cloud_store.c sees libpq. Not an API. */
#ifndef SB_CLOUD_INTERNAL_H
#define SB_CLOUD_INTERNAL_H

#include "cache/sb_cache_wire.h"

typedef struct sbc_store sbc_store;

/* Connect and create or migrate the schema (under an advisory lock, so
 * several cloud replicas may start together). */
int  sbc_store_open(const char *dsn, sbc_store **out, char *err);
void sbc_store_close(sbc_store *s);

/* Record a request signature; *fresh = 0 if it was seen before (a replay).
 * Signatures older than twice the allowed skew are forgotten. */
int  sbc_store_remember_signature(sbc_store *s, const char *sig, int64_t ts, int *fresh,
                                  char *err);

/* Apply one sync request (already authenticated for edge_id) in one
 * transaction and write the reply object into reply. SB_EINVAL: the request
 * is malformed (400); SB_EIO: the database failed (503), nothing applied. */
int  sbc_store_sync(sbc_store *s, const char *edge_id, const sb_json *req, int64_t threshold,
                    sb_jw *reply, char *err);

/* The admin token (NULL: none) the erase key is derived from, and the
 * edges the config lists (an erasure is kept until each has taken it). */
int  sbc_store_set_erasure(sbc_store *s, const char *admin_token, const char *const *edge_ids, size_t n_edges);

/* An erase from an edge (docs/PRIVACY.md, "Erasure"): kind "value" (mac
 * and digits: the value's keyed hash), "session" or "call" (id), with the
 * cache keys the edge erased. */
typedef struct {
    const char *kind, *id, *mac;    /* id or mac NULL */
    int64_t digits;
    const char *const *keys;
    size_t n_keys;
} sbc_erasure;

/* In one transaction: the keys and every stored entry holding the value
 * made tombstones, and the erasure recorded for the edges' next syncs.
 * *version: the erasure's; *n_entries: entries erased. SB_EINVAL: bad
 * request (or no admin token); SB_EIO: the database failed, nothing done. */
int  sbc_store_erase(sbc_store *s, const sbc_erasure *e, int64_t *version, int64_t *n_entries, char *err);

/* Tombstone a key: every edge deletes it on its next sync. */
int  sbc_store_delete(sbc_store *s, const char *key, int64_t *version, char *err);

#endif
