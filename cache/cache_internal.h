/* cache_internal.h - shared between the files of cache/ only; not an API.
 *
 * Names here are extern (the module is several files) so they carry the
 * sbc_ prefix to stay out of the rest of the library's way.
 */
#ifndef SB_CACHE_INTERNAL_H
#define SB_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "cache/sb_cache.h"
#include "cache/sb_cache_wire.h"
#include "common/sb_json.h"

/* ------------------------------------------- NFC / NFKC tables (pinned) */
extern const char     sb_nfkc_unicode_version[];
extern const uint32_t sb_nfkc_ccc[], sb_nfkc_ccc_n;
extern const uint64_t sb_nfkc_decomp[];
extern const uint32_t sb_nfkc_decomp_n, sb_nfkc_decomp_data[];
extern const uint64_t sb_nfc_decomp[];
extern const uint32_t sb_nfc_decomp_n;
extern const uint64_t sb_nfkc_comp[];
extern const uint32_t sb_nfkc_comp_n;
extern const uint64_t sb_latin_lower[];
extern const uint32_t sb_latin_lower_n;

/* ------------------------------------------------------ the handle */
struct sqlite3;
struct sqlite3_stmt;

/* Errors are logged once per kind per handle, so a full disk under load
 * gives one line, not one per request. */
enum { SBC_LOG_IO, SBC_LOG_FULL, SBC_LOG_READONLY, SBC_LOG_CORRUPT, SBC_LOG_OTHER, SBC_LOG_KINDS };

enum {
    SBC_ST_GET, SBC_ST_TOUCH, SBC_ST_DELETE, SBC_ST_PUT, SBC_ST_EVICT, SBC_ST_TOTAL,
    SBC_ST_COUNT
};

struct sb_cache {
    struct sqlite3      *db;
    struct sqlite3_stmt *st[SBC_ST_COUNT];  /* prepared once at open */
    pthread_mutex_t      lock;
    char                *path;
    sb_cache_opts        opts;
    int                  read_only;
    int                  schema_version;
    int                  logged[SBC_LOG_KINDS];
    int64_t              hits, misses, errors;
    int                  last_rc;           /* SQLite code behind the last failure */
    /* Checkpoints run on their own connection and thread, so the fsyncs of
     * moving the WAL into the database never land on a request. */
    struct sqlite3      *ckpt_db;
    pthread_t            ckpt_thread;
    pthread_mutex_t      ckpt_mu;
    pthread_cond_t       ckpt_cv;
    int                  ckpt_running, ckpt_stop;
};

/* sb_cache_open, stopping the migrations at schema_target (tests of the
 * migrations only; 0 = the latest). */
int sb_cache_open_at(const char *path, const sb_cache_opts *opts, int schema_target,
                     sb_cache **out, char *err);
/* Map a SQLite result code to an SB_E* code, fill err and log once. */
int sbc_fail(sb_cache *c, int rc, char *err, const char *what);
/* Run SQL without results; returns SB_OK or the mapped error. */
int sbc_exec(sb_cache *c, const char *sql, char *err);
/* Read one entry row in the column order of SBC_ENTRY_COLUMNS. */
int sbc_row_to_entry(struct sqlite3_stmt *st, sb_cache_entry *e);
#define SBC_ENTRY_COLUMNS "key, ns, fingerprint, input, params, response, created_ms, " \
    "last_hit_ms, local_hits, global_hits, ttl_s, origin, pinned, dirty_hits"
/* Evict until the cap holds (inside the caller's transaction). */
int sbc_evict(sb_cache *c, char *err);
/* Store e (caller holds the lock and usually a transaction): from_cloud = 0
 * replaces everything (import), 1 adds a pinned cloud entry or updates the
 * fleet-wide count of one we have. */
int sbc_upsert_entry(sb_cache *c, const sb_cache_entry *e, int from_cloud, char *err);

#endif
