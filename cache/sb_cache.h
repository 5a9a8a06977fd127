/* sb_cache.h - the response cache (SQLite) and its sync with the cloud tier.
 *
 * What the router does with it (docs/cache.md has the full story):
 *
 *   on start     sb_cache_fingerprint_file(model.gguf, 0, fp, err) per model
 *                sb_cache_open(cfg.cache.path, &opts, &cache, err)
 *                  (failure: log it and run with cache = NULL: every call
 *                   below accepts NULL and behaves as "disabled")
 *   on request   sb_cache_make_key(cache, ns, fp, input, params, &q, err)
 *                sb_cache_get(cache, q.key, &entry, err)
 *                  0            -> hit: send entry.response, X-Cache: hit
 *                  SB_ENOTFOUND -> miss: run the pipeline/model
 *                  other < 0    -> cache trouble: treat as a miss
 *   after reply  sb_cache_put(cache, &item, err) with the same key; an error
 *                only means "not stored"
 *   periodically sb_cache_sync(cache, &sync_opts, &result, err)  (cache/sync/sb_sync.h)
 *
 * Keys are SHA-256 over (key version, namespace, model fingerprint,
 * normalised input, params) with every field length-prefixed, so an entry made with one model
 * file is never found for another: its fingerprint is part of the key.
 *
 * A handle is one SQLite connection guarded by a mutex: threads may share it.
 * Many processes may open the same file (WAL mode). A forked child must not
 * use its parent's handle (open its own). Failures (disk full,
 * read-only file, corrupt file) come back as negative codes with a message,
 * are logged once per handle and kind, and never abort.
 */
#ifndef SB_CACHE_H
#define SB_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"
#include "common/sb_config.h"
#include "common/sb_json.h"
#include "privacy/sb_privacy.h"

/* ============================================================ hashing */

#define SB_SHA256_LEN   32
#define SB_CACHE_KEY_HEX 65     /* 64 lower-case hex digits + NUL */

/* libcrypto underneath (sha256.c). A context lives from init to final (or
 * discard, on an error path): init allocates, final and discard free. None
 * of these fail: libcrypto running out of memory is fatal (logged, abort). */
typedef struct {
    struct evp_md_ctx_st *md;   /* OpenSSL's EVP_MD_CTX, kept out of this header */
} sb_sha256_ctx;

void sb_sha256_init(sb_sha256_ctx *ctx);
void sb_sha256_update(sb_sha256_ctx *ctx, const void *data, size_t len);
void sb_sha256_final(sb_sha256_ctx *ctx, uint8_t out[SB_SHA256_LEN]);
void sb_sha256_discard(sb_sha256_ctx *ctx);
void sb_sha256(const void *data, size_t len, uint8_t out[SB_SHA256_LEN]);
void sb_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                    uint8_t out[SB_SHA256_LEN]);
/* HMAC over the concatenation of n parts, without copying them. */
void sb_hmac_sha256_parts(const void *key, size_t key_len, int n, const void *const *parts,
                          const size_t *lens, uint8_t out[SB_SHA256_LEN]);
/* AES-256-GCM sealing of small secrets at rest (seal.c): a box is
 * nonce (random, 12 bytes) | ciphertext | tag (16). aad (may be NULL with
 * aad_len 0) is authenticated, not stored: the same aad must open the box.
 * sb_seal writes len + SB_SEAL_OVERHEAD bytes to out: 0, SB_EIO (no
 * randomness), SB_ENOMEM. sb_unseal writes len - SB_SEAL_OVERHEAD bytes:
 * 0, or SB_EINVAL for a wrong key, a wrong aad, any changed byte or a box
 * too short (out is then zeroed), SB_ENOMEM. */
#define SB_SEAL_KEY_LEN 32
#define SB_SEAL_OVERHEAD 28
int sb_seal(const uint8_t key[SB_SEAL_KEY_LEN], const void *aad, size_t aad_len, const void *plain, size_t len,
            uint8_t *out);
int sb_unseal(const uint8_t key[SB_SEAL_KEY_LEN], const void *aad, size_t aad_len, const uint8_t *box, size_t len,
              uint8_t *out);
/* The key of runtime.secret_key_file: 64 hex digits (a newline after them
 * allowed) or exactly 32 raw bytes, in a regular file of ours with no
 * group/other permission. 0, SB_EIO (cannot read), SB_EINVAL (err says why). */
int sb_seal_key_load(const char *path, uint8_t key[SB_SEAL_KEY_LEN], char *err);
/* out must hold 2*len+1 bytes; lower-case, NUL-terminated. */
void sb_hex_encode(const void *data, size_t len, char *out);
/* Constant-time comparison (signatures, tokens): 1 if equal. */
int  sb_ct_equal(const void *a, const void *b, size_t len);

/* ================================================ erasure across the fleet
 *
 * An erase by value travels from the edge where it was asked, through the
 * cloud tier, to the other edges as a keyed hash, never as the value
 * (erasure.c; docs/PRIVACY.md, "Erasure"). */

#define SB_ERASE_VALUE_MIN 6    /* service numbers have 5 digits: shorter would erase half the stores */

/* The value's normalised form: the one identifier the detectors find
 * covering it, else its digits when it is a number written with spaces,
 * dashes, brackets or +, else the value as given. spans is scratch. */
void sb_erase_normalise(const sb_privacy *det, const char *v, sb_pii_spans *spans, char norm[SB_PII_VALUE_MAX]);
/* Can other stores find norm by its hash alone: it is a number, or one
 * identifier the detectors read as exactly itself? (A name is not.) */
bool sb_erase_value_portable(const sb_privacy *det, const char *norm, sb_pii_spans *spans);
/* The fleet's erase key, derived from the cloud's admin token: hex
 * HMAC-SHA256(token, "switchboard erase key v1"). */
void sb_erase_key(const char *admin_token, char out[SB_CACHE_KEY_HEX]);
/* The value's hash under that key: hex HMAC-SHA256(key_hex, "value\n" norm). */
void sb_erase_value_mac(const char *key_hex, const char *norm, char out[SB_CACHE_KEY_HEX]);

/* Finds texts that hold the value behind a hash: an identifier the
 * detectors find whose value hashes to it, or (digits > 0, the value being
 * a number of that many digits) a window of a run of ASCII digits that
 * does. One per thread; det is shared. */
typedef struct {
    const sb_privacy *det;
    sb_pii_spans spans;
    char key[SB_CACHE_KEY_HEX], mac[SB_CACHE_KEY_HEX];
    size_t digits;
} sb_erase_matcher;
/* SB_EINVAL when key or mac is not 64 lower-case hex digits, or digits is out of range. */
int  sb_erase_matcher_init(sb_erase_matcher *m, const sb_privacy *det, const char *key_hex, const char *mac_hex,
                           int64_t digits, char *err);
bool sb_erase_matches(sb_erase_matcher *m, const char *text, size_t len);
void sb_erase_matcher_free(sb_erase_matcher *m);

/* ====================================================== normalisation */

/* Applied in this order: NFC or NFKC, case-fold, collapse, trim. Invalid
 * UTF-8 bytes become U+FFFD first, so every input has exactly one normal form.
 * The default folds only what cannot change an answer; case and width are
 * opt-in per pipeline ("xk7q2b" and "XK7Q2B" may well have different answers). */
enum {
    SB_NORM_NFKC     = 1u << 0, /* fold width: NFKC, "１２３，？" -> "123,?" (implies NFC) */
    SB_NORM_CASEFOLD = 1u << 1, /* fold case: lower-case Latin-script letters only */
    SB_NORM_COLLAPSE = 1u << 2, /* a run of White_Space inside a line -> one U+0020; line
                                 * breaks and a line's indentation kept, line ends trimmed */
    SB_NORM_TRIM     = 1u << 3, /* drop leading and trailing White_Space */
    SB_NORM_NFC      = 1u << 4, /* Unicode NFC: "e" + U+0301 -> "é" (canonical equivalents) */
    SB_NORM_DEFAULT  = SB_NORM_NFC | SB_NORM_COLLAPSE | SB_NORM_TRIM,
    SB_NORM_FOLDS    = SB_NORM_NFKC | SB_NORM_CASEFOLD,     /* the opt-in ones */
};

/* *out is a new NUL-terminated string (sb_free it); *out_len may be NULL. */
int sb_cache_normalize(unsigned flags, const char *in, size_t len, char **out, size_t *out_len);
/* The Unicode version of the NFKC tables ("14.0.0"). */
const char *sb_cache_unicode_version(void);

/* ========================================================== keys */

/* The key scheme. 2: NFC + whitespace by default, folds named in params.
 * 1 (builds before it): NFKC + Latin case-fold always. A v1 key is still
 * accepted from a sync peer and passed on (older edges use it) but never
 * computed for a lookup: its folding is not this build's, so its answer
 * may belong to another question. docs/cache-sync.md, "Key versions". */
enum { SB_CACHE_KEY_VERSION = 2 };

/* Key from parts the caller already normalised. params is a canonical string
 * the caller builds from the parameters that change the output (sampling,
 * max tokens, stop strings, the pipeline's version...), same order each time. */
void sb_cache_key(const char *ns, const char *fingerprint, const char *input,
                  const char *params, char key[SB_CACHE_KEY_HEX]);
/* The same under key scheme `version` (1 or 2). */
void sb_cache_key_v(int version, const char *ns, const char *fingerprint, const char *input,
                    const char *params, char key[SB_CACHE_KEY_HEX]);
/* Which scheme made `key` from these parts: SB_CACHE_KEY_VERSION, 1, or 0
 * when neither does (the entry's key does not match its contents). */
int  sb_cache_key_version(const char *key, const char *ns, const char *fingerprint,
                          const char *input, const char *params);
/* "case", "width", "case,width" or "" for the fold flags in norm. */
const char *sb_cache_fold_name(unsigned norm);

/* Model file fingerprint, 64 hex digits. Default (flags 0): SHA-256 of the
 * file size, the whole GGUF header + metadata + tensor table, and three 4 KiB
 * samples (start, middle, end) of every tensor; for a non-GGUF file, the
 * first 1 MiB and 64 evenly spaced 4 KiB samples. Reads about 1 MB of a
 * multi-GB model. mtime and path are left out on purpose, so the same file on
 * every edge has the same fingerprint and cloud entries are shared.
 * SB_FP_FULL hashes every byte (exact; ~10 s for an 8B model). */
enum { SB_FP_FULL = 1u << 0 };
int sb_cache_fingerprint_file(const char *path, unsigned flags, char out[SB_CACHE_KEY_HEX],
                              char *err);

/* ========================================================== the cache */

typedef struct sb_cache sb_cache;

typedef struct {
    uint64_t max_bytes;      /* cap on stored request+response bytes; 0 = 256 MiB */
    uint64_t max_file_bytes; /* hard ceiling on the file (PRAGMA max_page_count); 0 = none */
    int64_t  default_ttl_s;  /* used when a put passes ttl_s < 0; 0 = never expires */
    int      busy_timeout_ms;/* wait for other writers; 0 = 2000 */
    int      read_only;      /* open without writing (hits not counted) */
    int      no_checkpointer;/* no background checkpoint thread (SQLite's inline one) */
} sb_cache_opts;

enum { SB_CACHE_ORIGIN_LOCAL = 0, SB_CACHE_ORIGIN_CLOUD = 1 };

typedef struct {
    char     key[SB_CACHE_KEY_HEX];
    char    *ns, *fingerprint, *input, *params;     /* NUL-terminated */
    uint8_t *response;                              /* response_len bytes (+ NUL) */
    size_t   response_len;
    int64_t  created_ms, last_hit_ms;               /* Unix time, milliseconds */
    int64_t  local_hits, global_hits;
    int64_t  ttl_s;                                 /* 0 = never expires */
    int      origin;                                /* SB_CACHE_ORIGIN_* */
    int      pinned;                                /* pushed by the cloud: evicted last */
    int64_t  dirty_hits;                            /* asks not yet sent to the cloud */
} sb_cache_entry;

void sb_cache_entry_free(sb_cache_entry *e);        /* frees the strings; e itself not */

/* Open (creating if needed) and migrate the schema. On failure *out is NULL.
 * SB_EFORMAT: not a database, corrupt, or a schema newer than this build. */
int  sb_cache_open(const char *path, const sb_cache_opts *opts, sb_cache **out, char *err);
void sb_cache_close(sb_cache *c);                   /* NULL ok */

/* What a lookup needs: the key and the normalised input (for the entry). */
typedef struct {
    char  key[SB_CACHE_KEY_HEX];
    char *input;                                    /* normalised; sb_free it */
} sb_cache_query;

/* Normalise raw_input with SB_NORM_DEFAULT and compute the key. c may be
 * NULL (keys stay computable when the cache is off). */
int sb_cache_make_key(const sb_cache *c, const char *ns, const char *fingerprint,
                      const char *raw_input, const char *params, sb_cache_query *q, char *err);
/* The same with the SB_NORM_* flags `norm` (0: raw_input is used as given,
 * e.g. when the caller normalised its parts itself). With a fold flag,
 * params must contain "fold=" sb_cache_fold_name(norm) (SB_EINVAL
 * otherwise), so that keys made with different folds never meet. */
int sb_cache_make_key_norm(const sb_cache *c, unsigned norm, const char *ns,
                           const char *fingerprint, const char *raw_input, const char *params,
                           sb_cache_query *q, char *err);

/* Lookup. 0 = hit (out filled; free with sb_cache_entry_free), and the hit is
 * counted (last_hit, local_hits, dirty_hits); SB_ENOTFOUND = miss (also for an
 * expired entry, or c == NULL); other negative = error, treat as a miss. */
int sb_cache_get(sb_cache *c, const char *key, sb_cache_entry *out, char *err);
/* The same without counting a hit (CLI, tests). */
int sb_cache_peek(sb_cache *c, const char *key, sb_cache_entry *out, char *err);

typedef struct {
    const char *key;                 /* from sb_cache_make_key */
    const char *ns, *fingerprint, *input, *params;
    const void *response;
    size_t      response_len;
    int64_t     ttl_s;               /* < 0: the cache's default */
    int         origin;              /* SB_CACHE_ORIGIN_LOCAL for the router */
} sb_cache_item;

/* Store (replacing an entry with the same key), then evict least-recently-
 * hit entries, unpinned first, until the cap holds. SB_EINVAL: the key is not
 * sb_cache_key(ns, fingerprint, input, params). SB_ERANGE: larger than
 * the cap; SB_EIO: disk full / read-only / I/O; SB_EFORMAT: corrupt. A NULL
 * cache is a no-op returning 0. The ask that produced the answer counts as
 * one for the cloud's fleet-wide count. */
int sb_cache_put(sb_cache *c, const sb_cache_item *item, char *err);

typedef struct {
    int64_t  entries, pinned, cloud_entries;
    int64_t  bytes, max_bytes;       /* stored request+response bytes, the cap */
    int64_t  file_bytes, free_bytes; /* database pages in use / on the freelist */
    int64_t  local_hits_total, dirty_entries;
    int64_t  sync_cursor, sync_pending;     /* cursor at the cloud; 1 = a sync awaits retry */
    int64_t  session_hits, session_misses, session_errors;  /* this handle only */
    int      schema_version, read_only;
} sb_cache_stats_t;

int sb_cache_stats(sb_cache *c, sb_cache_stats_t *out, char *err);

/* ========================================================== admin */

/* Select entries by namespace, fingerprint and/or a GLOB over the input; all
 * NULL = everything. */
typedef struct {
    const char *ns, *fingerprint, *input_glob;
    int64_t     limit;               /* list only; 0 = no limit */
} sb_cache_filter;

/* Calls fn for each entry, most recently hit first; fn returning non-zero stops. */
typedef int (*sb_cache_entry_fn)(void *arg, const sb_cache_entry *e);
int sb_cache_list(sb_cache *c, const sb_cache_filter *f, sb_cache_entry_fn fn, void *arg,
                  char *err);
/* Delete one key (SB_ENOTFOUND if absent) or every entry the filter selects. */
int sb_cache_purge_key(sb_cache *c, const char *key, char *err);
int sb_cache_purge(sb_cache *c, const sb_cache_filter *f, int64_t *n_deleted, char *err);
/* JSON lines, one entry per line (docs/cache.md); import replaces same keys,
 * keeps counts, and reports lines it could not use in *n_bad. */
int sb_cache_export(sb_cache *c, const sb_cache_filter *f, int fd, int64_t *n_out, char *err);
int sb_cache_import(sb_cache *c, int fd, int64_t *n_in, int64_t *n_bad, char *err);
/* Checkpoint the WAL and rebuild the file to give freed pages back. */
int sb_cache_vacuum(sb_cache *c, char *err);
/* PRAGMA integrity_check: 0 if "ok", SB_EFORMAT with the first problem. */
int sb_cache_check(sb_cache *c, char *err);

/* ========================================================== cloud sync */

typedef struct {
    const char *url;                 /* https:// (or http://) URL of `switchboard cloud` */
    const char *edge_id;
    const char *secret;              /* this edge's HMAC key */
    int64_t     upload_min_asks;     /* upload local entries asked at least this often; 0 = 1 */
    int         no_upload;           /* send hit counts only, never entry bodies */
    int         timeout_ms;          /* per request, start to end; 0 = 10000 */
    const char *ca_file;             /* PEM CA bundle that signs the cloud's certificate; NULL = system store */
    int64_t     page_limit;          /* entries per response page; 0 = 500 */
    /* Erasures in a reply (docs/PRIVACY.md, "Erasure"), for the stores
     * above the cache: called with the reply's "erasures" array and the
     * erase key before the reply is applied; non-zero fails the round, so
     * the cursor stays and the same erasures come again. NULL: the cache
     * applies them to its entries only. */
    int       (*on_erasures)(void *arg, const sb_json *erasures, const char *key_hex, char *err);
    void       *erasures_arg;
} sb_cache_sync_opts;

typedef struct {
    int64_t deltas_sent, entries_sent;       /* in this call (incl. a resent batch) */
    int64_t entries_received, deletions_received;
    int64_t erasures_received, erased_entries;  /* erasures in the replies; entries they deleted */
    int64_t cursor;                          /* after the call */
    int     resumed;                         /* a batch cut off earlier was resent */
    int     rounds;                          /* HTTP requests made */
} sb_cache_sync_result;

/* The configuration's `cache` section (cache_config.c; sb_config.h,
 * "sections"): the file, its size and entries' lifetime. */
extern const sb_cfg_section sb_cache_section;

#endif
