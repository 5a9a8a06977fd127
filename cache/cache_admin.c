/* cache_admin.c - list, purge, export/import (JSON lines), vacuum, check:
 * the operator's side of the cache (`switchboard cache ...`). None of these
 * is on a request's path, so statements are prepared per call.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FILTER_WHERE " WHERE (?1 IS NULL OR ns = ?1) AND (?2 IS NULL OR fingerprint = ?2)" \
                     " AND (?3 IS NULL OR input GLOB ?3)"
#define IMPORT_BATCH 500            /* lines per transaction */
#define MAX_LINE     (64u << 20)    /* one exported entry; larger is not ours */

static int prepare(sb_cache *c, const char *sql, sqlite3_stmt **st, char *err) {
    int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? SB_OK : sbc_fail(c, rc, err, "preparing");
}

static void bind_filter(sqlite3_stmt *st, const sb_cache_filter *f) {
    if (!f) return;
    if (f->ns) sqlite3_bind_text(st, 1, f->ns, -1, SQLITE_STATIC);
    if (f->fingerprint) sqlite3_bind_text(st, 2, f->fingerprint, -1, SQLITE_STATIC);
    if (f->input_glob) sqlite3_bind_text(st, 3, f->input_glob, -1, SQLITE_STATIC);
}

int sb_cache_list(sb_cache *c, const sb_cache_filter *f, sb_cache_entry_fn fn, void *arg,
                  char *err) {
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    pthread_mutex_lock(&c->lock);
    sqlite3_stmt *st = NULL;
    int res = prepare(c, "SELECT " SBC_ENTRY_COLUMNS " FROM entries" FILTER_WHERE
                         " ORDER BY last_hit_ms DESC LIMIT ?4", &st, err);
    if (!res) {
        bind_filter(st, f);
        sqlite3_bind_int64(st, 4, f && f->limit > 0 ? f->limit : -1);
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            sb_cache_entry e;
            if ((res = sbc_row_to_entry(st, &e))) break;
            int stop = fn(arg, &e);
            sb_cache_entry_free(&e);
            if (stop) break;
        }
        if (!res && rc != SQLITE_ROW && rc != SQLITE_DONE) res = sbc_fail(c, rc, err, "list");
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->lock);
    return res;
}

int sb_cache_purge_key(sb_cache *c, const char *key, char *err) {
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    pthread_mutex_lock(&c->lock);
    sqlite3_stmt *st = c->st[SBC_ST_DELETE];
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st), res = SB_OK;
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) res = sbc_fail(c, rc, err, "purge");
    else if (sqlite3_changes(c->db) == 0) res = sb_seterr(err, SB_ENOTFOUND, "no entry %s", key);
    pthread_mutex_unlock(&c->lock);
    return res;
}

int sb_cache_purge(sb_cache *c, const sb_cache_filter *f, int64_t *n_deleted, char *err) {
    if (n_deleted) *n_deleted = 0;
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    pthread_mutex_lock(&c->lock);
    sqlite3_stmt *st = NULL;
    int res = prepare(c, "DELETE FROM entries" FILTER_WHERE, &st, err);
    if (!res) {
        bind_filter(st, f);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) res = sbc_fail(c, rc, err, "purge");
        else if (n_deleted) *n_deleted = sqlite3_changes64(c->db);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->lock);
    return res;
}

/* ------------------------------------------------------------ export */

static int write_all(int fd, const void *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct { int fd; int64_t n; int failed; sb_jw line; } export_ctx;

static int export_one(void *arg, const sb_cache_entry *e) {
    export_ctx *x = arg;
    sb_jw_reset(&x->line);
    sbc_entry_json(&x->line, e);
    sb_jw_raw(&x->line, "\n", 1);
    if (x->line.oom || write_all(x->fd, x->line.p, x->line.len)) { x->failed = 1; return 1; }
    x->n++;
    return 0;
}

int sb_cache_export(sb_cache *c, const sb_cache_filter *f, int fd, int64_t *n_out, char *err) {
    export_ctx x = { .fd = fd };
    sb_cache_filter all = { 0 };
    if (f) { all = *f; all.limit = 0; }
    int rc = sb_cache_list(c, &all, export_one, &x, err);
    sb_jw_free(&x.line);
    if (n_out) *n_out = x.n;
    if (!rc && x.failed) rc = sb_seterr(err, SB_EIO, "export: write failed: %s", strerror(errno));
    return rc;
}

/* ------------------------------------------------------------ import */

static int dup_str(const sb_json *o, const char *name, char **out) {
    const char *s;
    if (sbc_json_str(o, name, &s)) return SB_EFORMAT;
    return (*out = sb_strdup(s)) ? SB_OK : SB_ENOMEM;
}

int sbc_entry_from_json(const sb_json *o, sb_cache_entry *e, char *err) {
    memset(e, 0, sizeof *e);
    const char *key, *origin = NULL, *b64;
    int rc;
    if (sb_json_type_of(o) != SB_JSON_OBJECT) return sb_seterr(err, SB_EFORMAT, "entry: not an object");
    if (sbc_json_str(o, "key", &key) || strlen(key) != SB_CACHE_KEY_HEX - 1)
        return sb_seterr(err, SB_EFORMAT, "entry: \"key\" must be 64 hex digits");
    snprintf(e->key, sizeof e->key, "%s", key);
    if ((rc = dup_str(o, "namespace", &e->ns)) || (rc = dup_str(o, "fingerprint", &e->fingerprint)) ||
        (rc = dup_str(o, "input", &e->input)) || (rc = dup_str(o, "params", &e->params))) {
        sb_cache_entry_free(e);
        return sb_seterr(err, rc, "entry %.16s: namespace, fingerprint, input, params must be "
                         "strings", key);
    }
    if (sbc_json_str(o, "response_b64", &b64) ||
        sbc_base64_decode(b64, strlen(b64), &e->response, &e->response_len)) {
        sb_cache_entry_free(e);
        return sb_seterr(err, SB_EFORMAT, "entry %.16s: \"response_b64\" missing or not base64", key);
    }
    /* The key must be the hash of what the entry says it answers; otherwise a
     * crafted line (or a buggy peer) could attach an answer to another question. */
    int version = sb_cache_key_version(e->key, e->ns, e->fingerprint, e->input, e->params);
    if (version != SB_CACHE_KEY_VERSION) {
        sb_cache_entry_free(e);
        if (version)            /* sound, but this build never looks such a key up */
            return sb_seterr(err, SB_EUNSUP, "entry %.16s: key version %d (an older build's, which "
                             "folded case and width); this build uses version %d", key, version,
                             SB_CACHE_KEY_VERSION);
        return sb_seterr(err, SB_EFORMAT, "entry %.16s: key does not match its contents", key);
    }
    sbc_json_int(o, "created_ms", &e->created_ms);
    sbc_json_int(o, "last_hit_ms", &e->last_hit_ms);
    sbc_json_int(o, "local_hits", &e->local_hits);
    sbc_json_int(o, "global_hits", &e->global_hits);
    sbc_json_int(o, "ttl_s", &e->ttl_s);
    e->pinned = sb_json_bool(sb_json_get(o, "pinned"));
    sbc_json_str(o, "origin", &origin);
    e->origin = origin && !strcmp(origin, "cloud") ? SB_CACHE_ORIGIN_CLOUD : SB_CACHE_ORIGIN_LOCAL;
    if (!e->created_ms) e->created_ms = sbc_now_ms();
    if (!e->last_hit_ms) e->last_hit_ms = e->created_ms;
    return SB_OK;
}

int sbc_upsert_entry(sb_cache *c, const sb_cache_entry *e, int from_cloud, char *err) {
    /* From the cloud: a new entry arrives pinned with the fleet's count; an
     * entry we already have keeps its own answer and counters and learns the
     * fleet-wide count. From an import: the line replaces what we had, and a
     * local entry is offered to the cloud on the next sync (uploaded = origin). */
    static const char *const sql[2] = {
        "INSERT INTO entries(key, ns, fingerprint, input, params, response, created_ms,"
        " last_hit_ms, local_hits, global_hits, ttl_s, origin, pinned, bytes, dirty_hits, uploaded)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 0, ?12)"
        " ON CONFLICT(key) DO UPDATE SET ns = excluded.ns, fingerprint = excluded.fingerprint,"
        " input = excluded.input, params = excluded.params, response = excluded.response,"
        " created_ms = excluded.created_ms, last_hit_ms = excluded.last_hit_ms,"
        " local_hits = excluded.local_hits, global_hits = excluded.global_hits,"
        " ttl_s = excluded.ttl_s, origin = excluded.origin, pinned = excluded.pinned,"
        " bytes = excluded.bytes, uploaded = excluded.uploaded",
        "INSERT INTO entries(key, ns, fingerprint, input, params, response, created_ms,"
        " last_hit_ms, local_hits, global_hits, ttl_s, origin, pinned, bytes, dirty_hits, uploaded)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?10, ?11, 1, 1, ?14, 0, 1)"
        " ON CONFLICT(key) DO UPDATE SET global_hits = excluded.global_hits, pinned = 1",
    };
    sqlite3_stmt *st = NULL;
    int res = prepare(c, sql[from_cloud ? 1 : 0], &st, err);
    if (res) return res;
    int64_t bytes = (int64_t)(strlen(e->key) + strlen(e->ns) + strlen(e->fingerprint) +
                              strlen(e->input) + strlen(e->params) + e->response_len);
    sqlite3_bind_text(st, 1, e->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, e->ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, e->fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, e->input, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, e->params, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 6, e->response, e->response_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, e->created_ms);
    sqlite3_bind_int64(st, 8, from_cloud ? sbc_now_ms() : e->last_hit_ms);
    sqlite3_bind_int64(st, 9, e->local_hits);
    sqlite3_bind_int64(st, 10, e->global_hits);
    sqlite3_bind_int64(st, 11, e->ttl_s);
    sqlite3_bind_int(st, 12, e->origin);
    sqlite3_bind_int(st, 13, e->pinned);
    sqlite3_bind_int64(st, 14, bytes);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SB_OK : sbc_fail(c, rc, err, "storing an entry");
}

static int import_line(sb_cache *c, const char *line, size_t n, int64_t *n_in, int64_t *n_bad,
                       char *err) {
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
    if (!n) return SB_OK;
    sb_json_doc *j = NULL;
    sb_cache_entry e;
    char why[SB_ERR_LEN];
    if (sb_json_parse(line, n, &j, why) || sbc_entry_from_json(sb_json_root(j), &e, why)) {
        if (*n_bad < 3) sb_warn("import: skipping a line: %s", why);
        (*n_bad)++;
        sb_json_doc_free(j);
        return SB_OK;
    }
    sb_json_doc_free(j);
    int rc = sbc_upsert_entry(c, &e, 0, err);
    sb_cache_entry_free(&e);
    if (!rc) (*n_in)++;
    return rc;
}

int sb_cache_import(sb_cache *c, int fd, int64_t *n_in, int64_t *n_bad, char *err) {
    int64_t in = 0, bad = 0, in_batch = 0;
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    if (c->read_only) return sbc_fail(c, SQLITE_READONLY, err, "import");
    sb_jw pending = { 0 };
    char chunk[65536];
    int res = SB_OK, eof = 0;
    pthread_mutex_lock(&c->lock);
    res = sbc_exec(c, "BEGIN IMMEDIATE", err);
    while (!res && !eof) {
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { res = sb_seterr(err, SB_EIO, "import: read: %s", strerror(errno)); break; }
        if (r == 0) { eof = 1; sb_jw_raw(&pending, "\n", 1); }
        else sb_jw_raw(&pending, chunk, (size_t)r);
        if (pending.oom) { res = sb_seterr(err, SB_ENOMEM, "import: out of memory"); break; }
        size_t start = 0;
        for (char *nl; !res && (nl = memchr(pending.p + start, '\n', pending.len - start));) {
            size_t len = (size_t)(nl - (pending.p + start));
            res = import_line(c, pending.p + start, len, &in, &bad, err);
            start += len + 1;
            if (!res && ++in_batch >= IMPORT_BATCH) {
                in_batch = 0;
                if (!(res = sbc_evict(c, err)) && !(res = sbc_exec(c, "COMMIT", err)))
                    res = sbc_exec(c, "BEGIN IMMEDIATE", err);
            }
        }
        memmove(pending.p, pending.p + start, pending.len - start);
        pending.len -= start;
        if (pending.len > MAX_LINE) res = sb_seterr(err, SB_ERANGE, "import: line over %u bytes", MAX_LINE);
    }
    if (!res) res = sbc_evict(c, err);
    if (!res) res = sbc_exec(c, "COMMIT", err);
    if (res) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_unlock(&c->lock);
    sb_jw_free(&pending);
    if (n_in) *n_in = res ? 0 : in;
    if (n_bad) *n_bad = bad;
    return res;
}

/* ------------------------------------------------------------ maintenance */

int sb_cache_vacuum(sb_cache *c, char *err) {
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    if (c->read_only) return sbc_fail(c, SQLITE_READONLY, err, "vacuum");
    pthread_mutex_lock(&c->lock);
    int res = sbc_exec(c, "PRAGMA wal_checkpoint(TRUNCATE)", err);
    if (!res) res = sbc_exec(c, "VACUUM", err);
    if (!res) res = sbc_exec(c, "PRAGMA wal_checkpoint(TRUNCATE)", err);
    pthread_mutex_unlock(&c->lock);
    return res;
}

int sb_cache_check(sb_cache *c, char *err) {
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    pthread_mutex_lock(&c->lock);
    sqlite3_stmt *st = NULL;
    int res = prepare(c, "PRAGMA integrity_check", &st, err);
    if (!res) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const char *msg = (const char *)sqlite3_column_text(st, 0);
            if (!msg || strcmp(msg, "ok"))
                res = sb_seterr(err, SB_EFORMAT, "cache %s: integrity_check: %s", c->path,
                                msg ? msg : "?");
        } else {
            res = sbc_fail(c, rc, err, "integrity_check");
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->lock);
    return res;
}
