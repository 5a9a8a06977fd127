/* cache.c - the SQLite response cache: open, schema migrations, get, put,
 * eviction, stats (see sb_cache.h; the admin calls are in cache_admin.c).
 *
 * Durability: WAL + synchronous=NORMAL. A committed put survives the process
 * being killed at any instant (the WAL is in the OS page cache); a power cut
 * may lose the last few commits but never corrupts the file. That is the
 * right trade for a cache: losing an entry costs one recomputation, an fsync
 * per request would cost milliseconds.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_BYTES  (256ull << 20)
#define DEFAULT_BUSY_MS    2000     /* a put waits this long for another writer */
#define EVICT_BATCH        256      /* rows looked at per DELETE while over the cap */
#define EVICT_TO_PERCENT   95
#define CKPT_INTERVAL_MS   250      /* background checkpoint period */
/* With the background thread, the inline checkpoint is only a backstop for a
 * stalled thread: 16384 pages = 64 MiB of WAL. */
#define BACKSTOP_CKPT_PAGES 16384

/* ------------------------------------------------------------ schema */

/* Each step takes the schema from version i to i+1 and runs in the same
 * transaction as the PRAGMA user_version bump, so a crash mid-migration
 * leaves the previous version intact. Append steps; never edit old ones. */
static const char *const migrations[] = {
    /* 1: entries, size accounting kept by triggers (so every process that
     * writes the file keeps the total right, in the same transaction). */
    "CREATE TABLE entries("
    "  id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,"
    "  ns TEXT NOT NULL, fingerprint TEXT NOT NULL, input TEXT NOT NULL, params TEXT NOT NULL,"
    "  response BLOB NOT NULL, created_ms INTEGER NOT NULL, last_hit_ms INTEGER NOT NULL,"
    "  local_hits INTEGER NOT NULL DEFAULT 0, global_hits INTEGER NOT NULL DEFAULT 0,"
    "  ttl_s INTEGER NOT NULL DEFAULT 0, origin INTEGER NOT NULL DEFAULT 0,"
    "  pinned INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL);"
    "CREATE INDEX entries_lru ON entries(pinned, last_hit_ms);"
    "CREATE TABLE meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT INTO meta VALUES('total_bytes', 0);"
    "CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN"
    "  UPDATE meta SET value = value + new.bytes WHERE name = 'total_bytes'; END;"
    "CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN"
    "  UPDATE meta SET value = value - old.bytes WHERE name = 'total_bytes'; END;"
    "CREATE TRIGGER entries_au AFTER UPDATE OF bytes ON entries BEGIN"
    "  UPDATE meta SET value = value - old.bytes + new.bytes WHERE name = 'total_bytes'; END;",
    /* 2: cloud sync bookkeeping: asks not yet reported, whether the body was
     * uploaded, the cursor, and the batch in flight (docs/cache-sync.md). */
    "ALTER TABLE entries ADD COLUMN dirty_hits INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE entries ADD COLUMN uploaded INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX entries_dirty ON entries(id) WHERE dirty_hits > 0 OR uploaded = 0;"
    "INSERT INTO meta VALUES('sync_cursor', 0);"
    "CREATE TABLE sync_outbox(sync_id TEXT PRIMARY KEY, body BLOB NOT NULL,"
    "  created_ms INTEGER NOT NULL);",
};
#define SCHEMA_VERSION ((int)SB_ARRAY_LEN(migrations))

static const char *const stmt_sql[SBC_ST_COUNT] = {
    [SBC_ST_GET] = "SELECT " SBC_ENTRY_COLUMNS " FROM entries WHERE key = ?1",
    [SBC_ST_TOUCH] = "UPDATE entries SET last_hit_ms = ?2, local_hits = local_hits + 1,"
                     " dirty_hits = dirty_hits + 1 WHERE key = ?1",
    [SBC_ST_DELETE] = "DELETE FROM entries WHERE key = ?1",
    [SBC_ST_PUT] =
        "INSERT INTO entries(key, ns, fingerprint, input, params, response, created_ms,"
        " last_hit_ms, ttl_s, origin, bytes, dirty_hits, uploaded)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, 1, 0)"
        " ON CONFLICT(key) DO UPDATE SET ns = excluded.ns, fingerprint = excluded.fingerprint,"
        " input = excluded.input, params = excluded.params, response = excluded.response,"
        " created_ms = excluded.created_ms, last_hit_ms = excluded.last_hit_ms,"
        " ttl_s = excluded.ttl_s, origin = excluded.origin, bytes = excluded.bytes,"
        " dirty_hits = entries.dirty_hits + 1, uploaded = 0",
    /* The oldest rows whose bytes, added up in eviction order, cover ?3 (the
     * excess): no more than needed, at most ?2 per statement. */
    [SBC_ST_EVICT] =
        "DELETE FROM entries WHERE id IN (SELECT id FROM (SELECT id,"
        " sum(bytes) OVER (ORDER BY pinned, last_hit_ms, id) - bytes AS before FROM"
        " (SELECT id, bytes, pinned, last_hit_ms FROM entries WHERE key != ?1"
        "  ORDER BY pinned, last_hit_ms LIMIT ?2)) WHERE before < ?3)",
    [SBC_ST_TOTAL] = "SELECT value FROM meta WHERE name = 'total_bytes'",
};

/* ------------------------------------------------------------ errors */

int64_t sbc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sbc_fail(sb_cache *c, int rc, char *err, const char *what) {
    int code = SB_EIO, kind = SBC_LOG_IO;
    const char *why = "I/O error";
    switch (rc & 0xff) {
    case SQLITE_FULL:     kind = SBC_LOG_FULL; why = "disk or size limit full"; break;
    case SQLITE_READONLY: kind = SBC_LOG_READONLY; why = "database is read-only"; break;
    case SQLITE_CORRUPT: case SQLITE_NOTADB:
        code = SB_EFORMAT; kind = SBC_LOG_CORRUPT; why = "database file is corrupt"; break;
    case SQLITE_BUSY: case SQLITE_LOCKED:
        code = SB_EBUSY; kind = SBC_LOG_OTHER; why = "database is locked"; break;
    case SQLITE_NOMEM:    code = SB_ENOMEM; kind = SBC_LOG_OTHER; why = "out of memory"; break;
    case SQLITE_CANTOPEN: why = "cannot open the file"; break;
    case SQLITE_IOERR: break;
    default: kind = SBC_LOG_OTHER; why = "SQLite error"; break;
    }
    const char *detail = c && c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
    char msg[SB_ERR_LEN];
    snprintf(msg, sizeof msg, "cache %s: %s: %s (%s)", c && c->path ? c->path : "?", what, why,
             detail);
    if (c) {
        c->last_rc = rc;
        c->errors++;
        if (!c->logged[kind]) {
            c->logged[kind] = 1;
            sb_warn("%s; further errors of this kind are not logged", msg);
        }
    }
    return sb_seterr(err, code, "%s", msg);
}

int sbc_exec(sb_cache *c, const char *sql, char *err) {
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? SB_OK : sbc_fail(c, rc, err, sql);
}

static int pragma_int(sb_cache *c, const char *sql, int64_t *out) {
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) { *out = sqlite3_column_int64(st, 0); rc = SQLITE_OK; }
    else if (rc == SQLITE_DONE) rc = SQLITE_OK;
    sqlite3_finalize(st);
    return rc;
}

/* ------------------------------------------------------------ open */

static int migrate(sb_cache *c, int target, char *err) {
    int64_t v = 0;
    int rc = pragma_int(c, "PRAGMA user_version", &v);
    if (rc != SQLITE_OK) return sbc_fail(c, rc, err, "reading the schema version");
    if (v > SCHEMA_VERSION)
        return sb_seterr(err, SB_EFORMAT, "cache %s: schema version %lld is newer than this "
                         "build's %d", c->path, (long long)v, SCHEMA_VERSION);
    if (v >= target) { c->schema_version = (int)v; return SB_OK; }
    if (c->read_only)
        return sb_seterr(err, SB_EUNSUP, "cache %s: schema version %lld needs migrating, "
                         "but the file is read-only", c->path, (long long)v);
    if ((rc = sbc_exec(c, "BEGIN IMMEDIATE", err))) return rc;
    /* Another process may have migrated while we waited for the lock. */
    if ((rc = pragma_int(c, "PRAGMA user_version", &v)) != SQLITE_OK) {
        sbc_exec(c, "ROLLBACK", NULL);
        return sbc_fail(c, rc, err, "reading the schema version");
    }
    for (; v < target; v++) {
        if ((rc = sbc_exec(c, migrations[v], err))) { sbc_exec(c, "ROLLBACK", NULL); return rc; }
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %lld", (long long)v);
    if ((rc = sbc_exec(c, sql, err)) || (rc = sbc_exec(c, "COMMIT", err))) {
        sbc_exec(c, "ROLLBACK", NULL);
        return rc;
    }
    c->schema_version = (int)v;
    return SB_OK;
}

static int configure(sb_cache *c, char *err) {
    int rc;
    sqlite3_busy_timeout(c->db, c->opts.busy_timeout_ms);
    /* A garbage file fails here with SQLITE_NOTADB: the first read of page 1. */
    int64_t v = 0;
    if ((rc = pragma_int(c, "PRAGMA user_version", &v)) != SQLITE_OK)
        return sbc_fail(c, rc, err, "opening");
    if (!c->read_only) {
        sqlite3_stmt *st;
        rc = sqlite3_prepare_v2(c->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(st);
            const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
            rc = (mode && !strcmp(mode, "wal")) ? SQLITE_OK : sqlite3_errcode(c->db);
            if (rc == SQLITE_OK && !mode) rc = SQLITE_ERROR;
            sqlite3_finalize(st);
        }
        if (rc != SQLITE_OK) return sbc_fail(c, rc ? rc : SQLITE_ERROR, err, "enabling WAL");
        if ((rc = sbc_exec(c, "PRAGMA synchronous = NORMAL", err))) return rc;
    }
    if (c->opts.max_file_bytes) {
        int64_t page = 4096;
        pragma_int(c, "PRAGMA page_size", &page);
        char sql[80];
        snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld",
                 (long long)SB_MAX(1, (int64_t)c->opts.max_file_bytes / page));
        if ((rc = sbc_exec(c, sql, err))) return rc;
    }
    return SB_OK;
}

/* ------------------------------------------------------------ checkpoints */

static void *checkpointer(void *arg) {
    sb_cache *c = arg;
    pthread_mutex_lock(&c->ckpt_mu);
    while (!c->ckpt_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += CKPT_INTERVAL_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&c->ckpt_cv, &c->ckpt_mu, &ts);
        if (c->ckpt_stop) break;
        pthread_mutex_unlock(&c->ckpt_mu);
        /* PASSIVE never waits for readers or writers; failures (busy, full
         * disk) only mean the WAL stays longer, and the next round retries. */
        int log = 0, done = 0;
        sqlite3_wal_checkpoint_v2(c->ckpt_db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        pthread_mutex_lock(&c->ckpt_mu);
    }
    pthread_mutex_unlock(&c->ckpt_mu);
    return NULL;
}

static void start_checkpointer(sb_cache *c) {
    if (c->read_only || c->opts.no_checkpointer) return;
    if (sqlite3_open_v2(c->path, &c->ckpt_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        sqlite3_close_v2(c->ckpt_db);
        c->ckpt_db = NULL;
        return;                             /* SQLite's inline checkpoints still run */
    }
    sqlite3_busy_timeout(c->ckpt_db, 0);
    pthread_mutex_init(&c->ckpt_mu, NULL);
    pthread_cond_init(&c->ckpt_cv, NULL);
    if (pthread_create(&c->ckpt_thread, NULL, checkpointer, c) != 0) {
        pthread_mutex_destroy(&c->ckpt_mu);
        pthread_cond_destroy(&c->ckpt_cv);
        sqlite3_close_v2(c->ckpt_db);
        c->ckpt_db = NULL;
        return;
    }
    c->ckpt_running = 1;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA wal_autocheckpoint = %d", BACKSTOP_CKPT_PAGES);
    sbc_exec(c, sql, NULL);
}

static void stop_checkpointer(sb_cache *c) {
    if (!c->ckpt_running) return;
    pthread_mutex_lock(&c->ckpt_mu);
    c->ckpt_stop = 1;
    pthread_cond_signal(&c->ckpt_cv);
    pthread_mutex_unlock(&c->ckpt_mu);
    pthread_join(c->ckpt_thread, NULL);
    pthread_mutex_destroy(&c->ckpt_mu);
    pthread_cond_destroy(&c->ckpt_cv);
    sqlite3_close_v2(c->ckpt_db);
    c->ckpt_running = 0;
}

static int reopen_immutable(sb_cache *c, char *err) {
    sb_jw uri = { 0 };
    sb_jw_rawf(&uri, "file:");
    for (const char *p = c->path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#') sb_jw_rawf(&uri, "%%%02X", (unsigned char)*p);
        else sb_jw_raw(&uri, p, 1);
    }
    sb_jw_rawf(&uri, "?immutable=1");
    if (uri.oom) { sb_jw_free(&uri); return sb_seterr(err, SB_ENOMEM, "cache: out of memory"); }
    int rc = sqlite3_open_v2(uri.p, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                             SQLITE_OPEN_NOMUTEX, NULL);
    sb_jw_free(&uri);
    if (rc != SQLITE_OK) return sbc_fail(c, rc, err, "opening read-only");
    sqlite3_extended_result_codes(c->db, 1);
    return SB_OK;
}

/* ------------------------------------------------------------ file modes */

/* The cache holds callers' questions and the answers: owner-only (0600).
 * SQLite creates the database 0644 minus the umask and its -wal/-shm with the
 * database's mode, so creating the database ourselves 0600 covers every new
 * file whatever the umask. Files left by an older version (0644) are narrowed
 * here on every open: group and other bits go, the owner's stay (a 0444
 * shipped read-only cache becomes 0400). A file of another uid cannot be
 * changed: that is logged, not fatal. Failures to open are left to SQLite,
 * which reports them with its own context. */
static void restrict_modes(const char *path, int create) {
    static const char *const suffixes[] = { "", "-wal", "-shm", "-journal" };
    char p[4096];
    for (size_t i = 0; i < SB_ARRAY_LEN(suffixes); i++) {
        if ((size_t)snprintf(p, sizeof p, "%s%s", path, suffixes[i]) >= sizeof p) return;
        int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (i == 0 ? (create ? O_CREAT : 0) : O_NOFOLLOW);
        int fd = open(p, flags, 0600);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077)) {
            if (st.st_uid != geteuid())
                sb_warn("cache %s: mode %04o lets other users read callers' text, and it belongs to uid %u, "
                        "not us: left as it is", p, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
            else if (fchmod(fd, st.st_mode & 0700) != 0)
                sb_warn("cache %s: chmod %04o: %s", p, (unsigned)(st.st_mode & 0700), strerror(errno));
            else
                sb_info("cache %s: mode %04o -> %04o (it holds callers' text)", p,
                        (unsigned)(st.st_mode & 07777), (unsigned)(st.st_mode & 0700));
        }
        close(fd);
    }
}

int sb_cache_open(const char *path, const sb_cache_opts *opts, sb_cache **out, char *err) {
    return sb_cache_open_at(path, opts, SCHEMA_VERSION, out, err);
}

/* schema_target < SCHEMA_VERSION is for tests of the migrations only. */
int sb_cache_open_at(const char *path, const sb_cache_opts *opts, int schema_target,
                     sb_cache **out, char *err) {
    *out = NULL;
    if (!path || !*path) return sb_seterr(err, SB_EINVAL, "cache: no database path");
    if (schema_target < 1 || schema_target > SCHEMA_VERSION) schema_target = SCHEMA_VERSION;
    sb_cache *c = sb_calloc(1, sizeof *c);
    if (!c || !(c->path = sb_strdup(path))) {
        sb_free(c);
        return sb_seterr(err, SB_ENOMEM, "cache: out of memory");
    }
    pthread_mutex_init(&c->lock, NULL);
    if (opts) c->opts = *opts;
    if (!c->opts.max_bytes) c->opts.max_bytes = DEFAULT_MAX_BYTES;
    if (c->opts.busy_timeout_ms <= 0) c->opts.busy_timeout_ms = DEFAULT_BUSY_MS;
    c->read_only = c->opts.read_only;
    int flags = (c->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                SQLITE_OPEN_NOMUTEX;    /* c->lock serialises use of the connection */
    if (strcmp(path, ":memory:") != 0) restrict_modes(path, !c->read_only);
    int rc = sqlite3_open_v2(path, &c->db, flags, NULL), res = SB_OK;
    if (rc != SQLITE_OK) { res = sbc_fail(c, rc, err, "opening"); goto fail; }
    sqlite3_extended_result_codes(c->db, 1);
    /* SQLite silently falls back to read-only when the file is not writable. */
    if (!c->read_only && sqlite3_db_readonly(c->db, "main") == 1) {
        c->read_only = 1;
        c->logged[SBC_LOG_READONLY] = 1;
        sb_warn("cache %s: file is read-only: serving hits, storing nothing", path);
    }
    res = configure(c, err);
    if (res && c->read_only && ((c->last_rc & 0xff) == SQLITE_READONLY ||
                                (c->last_rc & 0xff) == SQLITE_CANTOPEN)) {
        /* A WAL database in a directory we cannot write: SQLite cannot make
         * the -shm file. Nobody can write such a file, so reading it as
         * immutable is safe, and a shipped read-only cache still answers. */
        sqlite3_close_v2(c->db);
        c->db = NULL;
        res = reopen_immutable(c, err);
        if (!res) res = configure(c, err);
    }
    if (res || (res = migrate(c, schema_target, err))) goto fail;
    for (int i = 0; i < SBC_ST_COUNT; i++) {
        if (c->schema_version < SCHEMA_VERSION && i != SBC_ST_TOTAL) continue;  /* tests only */
        rc = sqlite3_prepare_v3(c->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &c->st[i], NULL);
        if (rc != SQLITE_OK) { res = sbc_fail(c, rc, err, "preparing statements"); goto fail; }
    }
    start_checkpointer(c);
    *out = c;
    return SB_OK;
fail:
    sb_cache_close(c);
    return res;
}

void sb_cache_close(sb_cache *c) {
    if (!c) return;
    stop_checkpointer(c);
    for (int i = 0; i < SBC_ST_COUNT; i++) sqlite3_finalize(c->st[i]);
    if (c->db) sqlite3_close_v2(c->db);
    pthread_mutex_destroy(&c->lock);
    sb_free(c->path);
    sb_free(c);
}

/* ------------------------------------------------------------ entries */

static char *col_dup(sqlite3_stmt *st, int i, size_t *len) {
    const void *p = sqlite3_column_blob(st, i);
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *s = sb_malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    if (len) *len = n;
    return s;
}

int sbc_row_to_entry(sqlite3_stmt *st, sb_cache_entry *e) {
    memset(e, 0, sizeof *e);
    const char *key = (const char *)sqlite3_column_text(st, 0);
    snprintf(e->key, sizeof e->key, "%s", key ? key : "");
    e->ns = col_dup(st, 1, NULL);
    e->fingerprint = col_dup(st, 2, NULL);
    e->input = col_dup(st, 3, NULL);
    e->params = col_dup(st, 4, NULL);
    e->response = (uint8_t *)col_dup(st, 5, &e->response_len);
    e->created_ms = sqlite3_column_int64(st, 6);
    e->last_hit_ms = sqlite3_column_int64(st, 7);
    e->local_hits = sqlite3_column_int64(st, 8);
    e->global_hits = sqlite3_column_int64(st, 9);
    e->ttl_s = sqlite3_column_int64(st, 10);
    e->origin = sqlite3_column_int(st, 11);
    e->pinned = sqlite3_column_int(st, 12);
    e->dirty_hits = sqlite3_column_int64(st, 13);
    if (!e->ns || !e->fingerprint || !e->input || !e->params || !e->response) {
        sb_cache_entry_free(e);
        return SB_ENOMEM;
    }
    return SB_OK;
}

void sb_cache_entry_free(sb_cache_entry *e) {
    if (!e) return;
    sb_free(e->ns); sb_free(e->fingerprint); sb_free(e->input); sb_free(e->params);
    sb_free(e->response);
    memset(e, 0, sizeof *e);
}

static int expired(int64_t created_ms, int64_t ttl_s, int64_t now) {
    return ttl_s > 0 && created_ms + ttl_s * 1000 <= now;
}

static int lookup(sb_cache *c, const char *key, sb_cache_entry *out, int count_hit, char *err) {
    memset(out, 0, sizeof *out);
    if (!c) return SB_ENOTFOUND;
    if (!key) return sb_seterr(err, SB_EINVAL, "cache: no key");
    pthread_mutex_lock(&c->lock);
    sqlite3_stmt *st = c->st[SBC_ST_GET];
    int64_t now = sbc_now_ms();
    int res, rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (expired(sqlite3_column_int64(st, 6), sqlite3_column_int64(st, 10), now)) {
            res = sb_seterr(err, SB_ENOTFOUND, "cache: entry expired");
            sqlite3_reset(st);
            if (!c->read_only) {            /* best effort; a failure is only a leftover */
                sqlite3_stmt *del = c->st[SBC_ST_DELETE];
                sqlite3_bind_text(del, 1, key, -1, SQLITE_STATIC);
                sqlite3_step(del);
                sqlite3_reset(del);
            }
        } else {
            res = sbc_row_to_entry(st, out);
            sqlite3_reset(st);
            if (res) res = sb_seterr(err, res, "cache: out of memory");
        }
    } else if (rc == SQLITE_DONE) {
        res = sb_seterr(err, SB_ENOTFOUND, "cache: miss");
        sqlite3_reset(st);
    } else {
        sqlite3_reset(st);
        res = sbc_fail(c, rc, err, "lookup");
    }
    if (res == SB_OK && count_hit && !c->read_only) {
        /* A failure to count (disk full, lock timeout) must not turn the hit
         * into a miss: the answer is right there. It is logged once. */
        sqlite3_stmt *t = c->st[SBC_ST_TOUCH];
        sqlite3_bind_text(t, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(t, 2, now);
        rc = sqlite3_step(t);
        sqlite3_reset(t);
        if (rc != SQLITE_DONE) sbc_fail(c, rc, NULL, "counting a hit");
        else { out->local_hits++; out->dirty_hits++; out->last_hit_ms = now; }
    }
    if (count_hit) {
        if (res == SB_OK) c->hits++;
        else c->misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return res;
}

int sb_cache_get(sb_cache *c, const char *key, sb_cache_entry *out, char *err) {
    return lookup(c, key, out, 1, err);
}

int sb_cache_peek(sb_cache *c, const char *key, sb_cache_entry *out, char *err) {
    return lookup(c, key, out, 0, err);
}

/* ------------------------------------------------------------ put + evict */

static int64_t total_bytes(sb_cache *c, int *rc) {
    sqlite3_stmt *st = c->st[SBC_ST_TOTAL];
    int64_t v = 0;
    *rc = sqlite3_step(st);
    if (*rc == SQLITE_ROW) { v = sqlite3_column_int64(st, 0); *rc = SQLITE_OK; }
    sqlite3_reset(st);
    return v;
}

/* Unpinned entries go first, least recently hit first; pinned ones (pushed by
 * the cloud as popular fleet-wide) only when nothing else is left. The entry
 * being stored is never its own victim. */
static int evict_except(sb_cache *c, const char *keep, char *err) {
    for (;;) {
        int rc;
        int64_t total = total_bytes(c, &rc);
        if (rc != SQLITE_OK) return sbc_fail(c, rc, err, "reading the size");
        if (total <= (int64_t)c->opts.max_bytes) return SB_OK;
        /* Down to 95% of the cap, so a full cache evicts once per ~5% of
         * new data rather than on every put. */
        int64_t excess = total - (int64_t)(c->opts.max_bytes / 100 * EVICT_TO_PERCENT);
        sqlite3_stmt *st = c->st[SBC_ST_EVICT];
        sqlite3_bind_text(st, 1, keep ? keep : "", -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, EVICT_BATCH);
        sqlite3_bind_int64(st, 3, excess);
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) return sbc_fail(c, rc, err, "evicting");
        if (sqlite3_changes(c->db) == 0) return SB_OK;
    }
}

int sbc_evict(sb_cache *c, char *err) { return evict_except(c, NULL, err); }

static int64_t entry_bytes(const sb_cache_item *it) {
    return (int64_t)(strlen(it->key) + strlen(it->ns) +
                       strlen(it->fingerprint) + strlen(it->input) +
                       strlen(it->params ? it->params : "") + it->response_len);
}

int sb_cache_put(sb_cache *c, const sb_cache_item *it, char *err) {
    if (!c) return SB_OK;
    if (!it || !it->key || strlen(it->key) != SB_CACHE_KEY_HEX - 1 || !it->ns ||
        !it->fingerprint || !it->input || (!it->response && it->response_len))
        return sb_seterr(err, SB_EINVAL, "cache put: key, ns, fingerprint, input required");
    /* The key must be the hash of what the entry says it answers: a wrong
     * key would serve this answer to another question, and the cloud would
     * refuse the entry. One SHA-256 of a few hundred bytes, ~1 us. */
    char want[SB_CACHE_KEY_HEX];
    sb_cache_key(it->ns, it->fingerprint, it->input, it->params ? it->params : "", want);
    if (strcmp(want, it->key))
        return sb_seterr(err, SB_EINVAL, "cache put: key does not match ns/fingerprint/input/params");
    int64_t bytes = entry_bytes(it);
    if ((uint64_t)bytes > c->opts.max_bytes)
        return sb_seterr(err, SB_ERANGE, "cache put: entry of %lld bytes exceeds the cap of %llu",
                         (long long)bytes, (unsigned long long)c->opts.max_bytes);
    pthread_mutex_lock(&c->lock);
    int res;
    if (c->read_only) {
        res = sbc_fail(c, SQLITE_READONLY, err, "put");
        goto out;
    }
    if ((res = sbc_exec(c, "BEGIN IMMEDIATE", err))) goto out;
    sqlite3_stmt *st = c->st[SBC_ST_PUT];
    int64_t ttl = it->ttl_s < 0 ? c->opts.default_ttl_s : it->ttl_s;
    sqlite3_bind_text(st, 1, it->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, it->ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, it->fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, it->input, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, it->params ? it->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 6, it->response ? it->response : "", it->response_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, sbc_now_ms());
    sqlite3_bind_int64(st, 8, ttl);
    sqlite3_bind_int(st, 9, it->origin);
    sqlite3_bind_int64(st, 10, bytes);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) res = sbc_fail(c, rc, err, "put");
    if (!res) res = evict_except(c, it->key, err);
    if (!res) res = sbc_exec(c, "COMMIT", err);
    if (res) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
out:
    pthread_mutex_unlock(&c->lock);
    return res;
}

/* ------------------------------------------------------------ stats */

int sb_cache_stats(sb_cache *c, sb_cache_stats_t *s, char *err) {
    memset(s, 0, sizeof *s);
    if (!c) return sb_seterr(err, SB_EINVAL, "cache: disabled");
    pthread_mutex_lock(&c->lock);
    int rc = SQLITE_OK;
    int64_t page = 0, pages = 0, freep = 0;
    s->max_bytes = (int64_t)c->opts.max_bytes;
    s->schema_version = c->schema_version;
    s->read_only = c->read_only;
    s->session_hits = c->hits;
    s->session_misses = c->misses;
    s->session_errors = c->errors;
    struct { const char *sql; int64_t *dst; } q[] = {
        { "SELECT count(*) FROM entries", &s->entries },
        { "SELECT count(*) FROM entries WHERE pinned", &s->pinned },
        { "SELECT count(*) FROM entries WHERE origin = 1", &s->cloud_entries },
        { "SELECT value FROM meta WHERE name = 'total_bytes'", &s->bytes },
        { "SELECT coalesce(sum(local_hits), 0) FROM entries", &s->local_hits_total },
        { "SELECT count(*) FROM entries WHERE dirty_hits > 0", &s->dirty_entries },
        { "SELECT value FROM meta WHERE name = 'sync_cursor'", &s->sync_cursor },
        { "SELECT count(*) FROM sync_outbox", &s->sync_pending },
        { "PRAGMA page_size", &page }, { "PRAGMA page_count", &pages },
        { "PRAGMA freelist_count", &freep },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(q) && rc == SQLITE_OK; i++) {
        if (c->schema_version < 2 && i >= 5 && i <= 7) continue;
        rc = pragma_int(c, q[i].sql, q[i].dst);
    }
    s->file_bytes = page * pages;
    s->free_bytes = page * freep;
    int res = rc == SQLITE_OK ? SB_OK : sbc_fail(c, rc, err, "stats");
    pthread_mutex_unlock(&c->lock);
    return res;
}
