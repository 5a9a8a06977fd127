/* sb_cache_wire.h - what the cloud tier (cache/cloud/) and the edge's sync
 * client (cache/sync/) build on, both above the local cache: the wire format
 * of entries (JSON objects, base64 bodies), the request signatures, and the
 * local file's side of a sync (the outbox, docs/cache-sync.md).
 *
 * Names keep the module's sbc_ prefix: they are the cache's, shared with the
 * two layers above it and with no one else.
 */
#ifndef SB_CACHE_WIRE_H
#define SB_CACHE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "cache/sb_cache.h"
#include "common/sb_json.h"

int64_t sbc_now_ms(void);
/* 16 random bytes as 32 hex digits (sync ids, nonces); -1 if getrandom fails. */
int sbc_new_id(char out[33]);

/* ------------------------------------------------------ JSON writer */
/* Bodies and lines are written into common's sb_jw (sticky failure, NUL-
 * terminated), strings with sb_jw_strn (invalid UTF-8 becomes U+FFFD). */
void sbc_base64_encode(sb_jw *b, const void *data, size_t n);
/* Write an entry as one JSON object (no newline). */
void sbc_entry_json(sb_jw *b, const sb_cache_entry *e);

/* ------------------------------------------------------ JSON reader */
/* Export lines and sync bodies are parsed by the one strict reader
 * (sb_json.h); these read an object's members the way the wire format
 * needs. SB_ENOTFOUND if absent, SB_EFORMAT if of the wrong type. */
int sbc_json_str(const sb_json *obj, const char *key, const char **out);
/* A number's integral part (the wire format sends counts and times, all
 * integers); SB_EFORMAT also when it does not fit in an int64_t. */
int sbc_json_int(const sb_json *obj, const char *key, int64_t *out);
int sbc_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len);

/* Insert or replace from a parsed JSON object (import, sync); see cache_admin.c. */
/* SB_EUNSUP: a sound entry under an older key version (never looked up here);
 * SB_EFORMAT: malformed, or a key that does not match its contents. */
int sbc_entry_from_json(const sb_json *o, sb_cache_entry *e, char *err);
/* HMAC-SHA256(secret, timestamp "\n" body) as 64 hex digits. */
void sbc_sign(const char *secret, const char *timestamp, const void *body, size_t len,
              char out[SB_CACHE_KEY_HEX]);
#define SBC_MAX_SKEW_S 300


/* The MAC a manifest of a published file carries for one edge:
 * hex HMAC-SHA256(secret, "sb-file\n" NAME "\n" VERSION "\n" SHA256 "\n" BYTES).
 * The cloud computes it with the edge's secret; the edge recomputes and
 * compares (sb_ct_equal) before it trusts the SHA-256 it names. */
void sb_cloud_file_mac(const char *secret, const char *name, const char *version, const char *sha256,
                       int64_t bytes, char out[SB_CACHE_KEY_HEX]);

/* ============================================ the sync's state in the file
 *
 * A sync round, as the local file sees it (cache/outbox.c): take the batch
 * (the stored one, or a new one built and stored in one transaction), send
 * it (cache/sync/), then apply the reply. Each call takes the handle's lock
 * itself, never across the network. */

typedef struct {
    char    sync_id[33];
    sb_jw   body;                 /* the JSON object sent; sb_jw_free it */
    int     resumed, more_local;  /* resent from the outbox; more left to send */
    int64_t n_deltas, n_entries;
} sb_cache_batch;

/* Step 1. SB_EIO etc. on a database failure (nothing taken). */
int sb_cache_outbox_take(sb_cache *c, const sb_cache_sync_opts *o, sb_cache_batch *b, char *err);
/* Step 3: the reply's entries and deletions, the cursor, the end of the
 * batch, all or nothing. *more: the cloud has more for this edge. */
int sb_cache_outbox_apply(sb_cache *c, const sb_cache_batch *b, const sb_json *reply,
                          sb_cache_sync_result *res, int *more, char *err);
/* A batch the cloud refused as malformed (400): drop it, or it would block
 * every later sync. Failures are logged. */
void sb_cache_outbox_drop(sb_cache *c, const char *sync_id);

#endif
