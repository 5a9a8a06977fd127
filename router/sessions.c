/* sessions.c - conversations' state: one SQLite file (sessions.store).
 *
 * A session is a caller's call across turns: its transcript, the intent,
 * the slots and what is awaited (JSON), counts of turns and failures, and
 * the API key name it belongs to. The row and the turn are written in one
 * transaction before the turn's reply is sent, so a turn that was answered
 * survives the router: WAL with synchronous=FULL, because NORMAL keeps a
 * commit through a crash of the process (kill -9) but not through a power
 * cut, and a caller who heard an answer must not be asked the same thing
 * again after one. One fsync per turn is nothing against a turn's model
 * time.
 *
 * The file holds callers' words: it is created 0600, as the cache is.
 * Under a privacy policy a session's values and a queued hand-off package
 * come here sealed (sessions_store.c seals and opens them), as BLOBs.
 * Everything runs on the router's loop; a turn's reads and its commit are
 * a few page reads and one fsync.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "router/sessions_store.h"

static const rt_session_store sqlite_store;

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS sessions ("
    " id TEXT PRIMARY KEY, owner TEXT NOT NULL, pipeline TEXT NOT NULL,"
    " created REAL NOT NULL, updated REAL NOT NULL, expires REAL NOT NULL,"
    " turns INTEGER NOT NULL, failures INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " intent TEXT, slots TEXT NOT NULL, awaiting TEXT, stage INTEGER NOT NULL, done INTEGER NOT NULL,"
    " values_box BLOB);"
    "CREATE INDEX IF NOT EXISTS sessions_expires ON sessions(expires);"
    "CREATE TABLE IF NOT EXISTS turns ("
    " session TEXT NOT NULL, n INTEGER NOT NULL, at REAL NOT NULL, caller TEXT NOT NULL, reply TEXT NOT NULL,"
    " PRIMARY KEY (session, n)) WITHOUT ROWID;"
    /* Hand-off packages to deliver: one per session (its id is the
     * idempotency key), kept until the receiver takes it, whatever becomes
     * of the session. A delivered one keeps its row without the package
     * (what the console shows) until its session is gone. body is a sealed
     * box (BLOB) when sealed is 1. */
    "CREATE TABLE IF NOT EXISTS handoff_outbox ("
    " session TEXT PRIMARY KEY, url TEXT NOT NULL, body TEXT NOT NULL, created REAL NOT NULL,"
    " attempts INTEGER NOT NULL, next_at REAL NOT NULL, last_error TEXT, sealed INTEGER NOT NULL DEFAULT 0,"
    " reason TEXT, delivered REAL, ca_file TEXT);";

/* Columns added after the first release, for files made before them. */
static const struct { const char *table, *column, *decl; } added_columns[] = {
    { "sessions", "values_box", "BLOB" },
    { "handoff_outbox", "sealed", "INTEGER NOT NULL DEFAULT 0" },
    { "handoff_outbox", "reason", "TEXT" },
    { "handoff_outbox", "delivered", "REAL" },
    { "handoff_outbox", "ca_file", "TEXT" },
};

static int db_fail(rt_sessions *s, char *err, const char *what) {
    return sb_seterr(err, SB_EIO, "sessions %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static int exec(rt_sessions *s, const char *sql, char *err) {
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : db_fail(s, err, sql);
}

/* Created 0600 before SQLite sees it: SQLite gives its -wal and -shm the
 * database's mode. */
static int create_private(const char *path, char *err) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return sb_seterr(err, SB_EIO, "sessions %s: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) == 0 && (st.st_mode & 077)) {
        if (st.st_uid != geteuid())
            rc = sb_seterr(err, SB_EINVAL, "sessions %s: mode %04o and owned by uid %u: other users could read "
                           "callers' words", path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
        else if (fchmod(fd, st.st_mode & 0700))
            rc = sb_seterr(err, SB_EIO, "sessions %s: chmod: %s", path, strerror(errno));
    }
    close(fd);
    return rc;
}

static int add_columns(rt_sessions *s, char *err) {
    int rc = 0;
    for (size_t i = 0; !rc && i < SB_ARRAY_LEN(added_columns); i++) {
        char sql[160];
        sqlite3_stmt *st;
        snprintf(sql, sizeof sql, "SELECT %s FROM %s LIMIT 0", added_columns[i].column, added_columns[i].table);
        if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) {
            sqlite3_finalize(st);
            continue;
        }
        snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s %s", added_columns[i].table, added_columns[i].column,
                 added_columns[i].decl);
        rc = exec(s, sql, err);
    }
    return rc;
}

int rt_sessions_sqlite_open(const char *path, rt_sessions **out, char *err) {
    *out = NULL;
    int rc = create_private(path, err);
    if (rc) return rc;
    rt_sessions *s = sb_calloc(1, sizeof *s);
    if (!s || !(s->path = sb_strdup(path))) {
        sb_free(s);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    s->store = &sqlite_store;
    sqlite3 *db = NULL;
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    s->db = db;
    if (rc != SQLITE_OK) {
        rc = db_fail(s, err, "open");
    } else {
        sqlite3_busy_timeout(s->db, 2000);
        rc = exec(s, "PRAGMA journal_mode=WAL", err);
        if (!rc) rc = exec(s, "PRAGMA synchronous=FULL", err);
        if (!rc) rc = exec(s, "PRAGMA secure_delete=ON", err);   /* a purged transcript's bytes go */
        if (!rc) rc = exec(s, schema, err);
        if (!rc) rc = add_columns(s, err);
    }
    if (rc) {
        rt_sessions_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

static void sqlite_close(rt_sessions *s) { sqlite3_close_v2(s->db); }

int rt_session_new_id(char out[RT_SESSION_ID_LEN + 1]) {
    uint8_t r[RT_SESSION_ID_LEN / 2];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return SB_EIO;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof r; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[RT_SESSION_ID_LEN] = '\0';
    return 0;
}

bool rt_session_id_valid(const char *id) {
    if (!id || strlen(id) != RT_SESSION_ID_LEN) return false;
    for (; *id; id++)
        if (!((*id >= '0' && *id <= '9') || (*id >= 'a' && *id <= 'f'))) return false;
    return true;
}

/* ---------------------------------------------------------------- turns in flight */

/* One turn of a session at a time: a second would read the state the
 * first is about to change. */
bool rt_session_claim(rt_sessions *s, const char *id) {
    for (size_t i = 0; i < s->n_busy; i++)
        if (!strcmp(s->busy[i], id)) return false;
    if (s->n_busy == s->cap_busy) {
        size_t cap = s->cap_busy ? s->cap_busy * 2 : 16;
        void *g = sb_realloc(s->busy, cap * sizeof *s->busy);
        if (!g) return false;
        s->busy = g;
        s->cap_busy = cap;
    }
    snprintf(s->busy[s->n_busy++], RT_SESSION_ID_LEN + 1, "%s", id);
    return true;
}

void rt_session_release(rt_sessions *s, const char *id) {
    for (size_t i = 0; s && i < s->n_busy; i++)
        if (!strcmp(s->busy[i], id)) {
            memcpy(s->busy[i], s->busy[--s->n_busy], sizeof *s->busy);
            return;
        }
}

/* ---------------------------------------------------------------- reads */

static char *col_dup(sqlite3_stmt *st, int i) {
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? sb_strdup(t) : NULL;
}

/* A BLOB column's bytes, copied (NULL: none). 0 or SB_ENOMEM. */
static int col_blob(sqlite3_stmt *st, int i, rt_blob *out) {
    out->p = NULL;
    out->len = 0;
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return 0;
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    if (!(out->p = sb_malloc(n ? n : 1))) return SB_ENOMEM;
    if (n) memcpy(out->p, sqlite3_column_blob(st, i), n);
    out->len = n;
    return 0;
}

static int sqlite_load(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out,
                       rt_blob *values, char *err) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT owner, pipeline, created, updated, expires, turns, failures, bytes, intent, slots,"
                           " awaiting, stage, done, values_box FROM sessions WHERE id = ?1", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "reading a session");
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    /* Another key's session is answered as one that does not exist: its
     * id is not a thing that key may learn about. */
    if (rc == SQLITE_DONE || (rc == SQLITE_ROW && owner && strcmp((const char *)sqlite3_column_text(st, 0), owner))) {
        sqlite3_finalize(st);
        return sb_seterr(err, SB_ENOTFOUND, "no session %s", id);
    }
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_fail(s, err, "reading a session");
    }
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->owner, sizeof out->owner, "%s", (const char *)sqlite3_column_text(st, 0));
    out->pipeline = col_dup(st, 1);
    out->created = sqlite3_column_double(st, 2);
    out->updated = sqlite3_column_double(st, 3);
    out->expires = sqlite3_column_double(st, 4);
    out->turns = sqlite3_column_int(st, 5);
    out->failures = sqlite3_column_int(st, 6);
    out->bytes = sqlite3_column_int64(st, 7);
    out->intent = col_dup(st, 8);
    out->slots = col_dup(st, 9);
    out->awaiting = col_dup(st, 10);
    out->stage = sqlite3_column_int(st, 11);
    out->done = sqlite3_column_int(st, 12);
    rc = col_blob(st, 13, values);
    sqlite3_finalize(st);
    return rc ? sb_seterr(err, rc, "out of memory") : 0;
}

static int sqlite_transcript_json(rt_sessions *s, const char *id, sb_jw *w, char *err) {
    sb_jw_arr(w);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT n, at, caller, reply FROM turns WHERE session = ?1 ORDER BY n", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(s, err, "reading a transcript");
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sb_jw_obj(w);
        sb_jw_key(w, "turn"); sb_jw_int(w, sqlite3_column_int(st, 0));
        sb_jw_key(w, "at"); sb_jw_fixed(w, sqlite3_column_double(st, 1), 3);
        sb_jw_key(w, "caller"); sb_jw_str(w, (const char *)sqlite3_column_text(st, 2));
        sb_jw_key(w, "reply"); sb_jw_str(w, (const char *)sqlite3_column_text(st, 3));
        sb_jw_obj_end(w);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return db_fail(s, err, "reading a transcript");
    sb_jw_arr_end(w);
    return 0;
}

/* ---------------------------------------------------------------- writes */

static void bind_blob(sqlite3_stmt *st, int i, const rt_blob *b) {
    if (b && b->p) sqlite3_bind_blob(st, i, b->p, (int)b->len, SQLITE_STATIC);
    else sqlite3_bind_null(st, i);
}

static int bind_state(sqlite3_stmt *st, const rt_session *ss, int ttl_s, double now, const rt_blob *values) {
    sqlite3_bind_text(st, 1, ss->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, ss->owner, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, ss->pipeline, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 4, now);
    sqlite3_bind_double(st, 5, now + ttl_s);
    sqlite3_bind_int(st, 6, ss->turns);
    sqlite3_bind_int(st, 7, ss->failures);
    sqlite3_bind_int64(st, 8, ss->bytes);
    sqlite3_bind_text(st, 9, ss->intent, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 10, ss->slots ? ss->slots : "{}", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 11, ss->awaiting, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 12, ss->stage);
    bind_blob(st, 14, values);
    return sqlite3_bind_int(st, 13, ss->done);
}

static int step_once(rt_sessions *s, const char *sql, char *err, int (*bind)(sqlite3_stmt *, const void *),
                     const void *arg) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(s, err, "preparing a write");
    bind(st, arg);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_fail(s, err, "writing");
}

typedef struct {
    const rt_session *ss;
    int ttl_s;
    double now;
    const char *caller, *reply;
    const rt_blob *values;
} turn_args;

static int bind_row(sqlite3_stmt *st, const void *arg) {
    const turn_args *t = arg;
    return bind_state(st, t->ss, t->ttl_s, t->now, t->values);
}

static int bind_turn(sqlite3_stmt *st, const void *arg) {
    const turn_args *t = arg;
    sqlite3_bind_text(st, 1, t->ss->id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, t->ss->turns);
    sqlite3_bind_double(st, 3, t->now);
    sqlite3_bind_text(st, 4, t->caller, -1, SQLITE_STATIC);
    return sqlite3_bind_text(st, 5, t->reply, -1, SQLITE_STATIC);
}

/* ------------------------------------------------------- hand-off */

typedef struct { const rt_session *ss; const char *body; const rt_blob *sealed; double now; } outbox_args;

static int bind_outbox(sqlite3_stmt *st, const void *arg) {
    const outbox_args *o = arg;
    sqlite3_bind_text(st, 1, o->ss->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->ss->handoff_url, -1, SQLITE_STATIC);
    if (o->sealed->p) bind_blob(st, 3, o->sealed);
    else sqlite3_bind_text(st, 3, o->body, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, o->sealed->p != NULL);
    sqlite3_bind_text(st, 6, o->ss->handoff_reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, o->ss->handoff_ca_file, -1, SQLITE_STATIC);
    return sqlite3_bind_double(st, 4, o->now);
}

/* The package as text, or sealed (sealed->p) in its place. */
static int enqueue(rt_sessions *s, const rt_session *ss, const char *body, const rt_blob *sealed, double now,
                   char *err) {
    outbox_args o = { ss, body, sealed, now };
    return step_once(s, "INSERT INTO handoff_outbox (session, url, body, created, attempts, next_at, sealed, reason,"
                        " ca_file) VALUES (?1, ?2, ?3, ?4, 0, ?4, ?5, ?6, ?7) ON CONFLICT(session) DO NOTHING", err,
                     bind_outbox, &o);
}

/* A due item from its row: body's bytes as stored (a sealed box is
 * opened by rt_handoff_due). 0 or SB_ENOMEM. */
static int due_item(sqlite3_stmt *st, rt_handoff_item *it) {
    memset(it, 0, sizeof *it);
    snprintf(it->session, sizeof it->session, "%s", (const char *)sqlite3_column_text(st, 0));
    it->url = col_dup(st, 1);
    it->ca_file = col_dup(st, 5);
    it->attempts = sqlite3_column_int(st, 3);
    it->sealed = sqlite3_column_int(st, 4);
    size_t n = (size_t)sqlite3_column_bytes(st, 2);
    if ((it->body = sb_malloc(n + 1))) {
        if (n) memcpy(it->body, sqlite3_column_blob(st, 2), n);
        it->body[n] = '\0';
        it->body_len = n;
    }
    bool ca_lost = sqlite3_column_type(st, 5) != SQLITE_NULL && !it->ca_file;
    return !it->url || !it->body || ca_lost ? SB_ENOMEM : 0;
}

static int sqlite_handoff_due(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT session, url, body, attempts, sealed, ca_file FROM handoff_outbox"
                                  " WHERE next_at <= ?1 AND delivered IS NULL ORDER BY next_at LIMIT ?2", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(s, err, "reading the hand-off outbox");
    sqlite3_bind_double(st, 1, now);
    sqlite3_bind_int(st, 2, max);
    int n = 0, rc = 0;
    while (n < max && sqlite3_step(st) == SQLITE_ROW) {
        rc = due_item(st, &items[n++]);
        if (rc) break;
    }
    sqlite3_finalize(st);
    if (rc) {
        rt_handoff_items_free(items, n);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    return n;
}

static const char *col_text(sqlite3_stmt *st, int i) { return (const char *)sqlite3_column_text(st, i); }

static int sqlite_handoff_list(rt_sessions *s, int max, sb_jw *w, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT o.session, s.pipeline, s.intent, o.reason, o.url, o.created, o.attempts,"
                                  " o.next_at, o.delivered, o.last_error FROM handoff_outbox o LEFT JOIN sessions s"
                                  " ON s.id = o.session ORDER BY o.created DESC LIMIT ?1", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "reading the hand-off outbox");
    sqlite3_bind_int(st, 1, max);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        rt_handoff_row row = {
            .session = col_text(st, 0), .pipeline = col_text(st, 1), .intent = col_text(st, 2),
            .reason = col_text(st, 3), .url = col_text(st, 4), .created = sqlite3_column_double(st, 5),
            .attempts = sqlite3_column_int(st, 6), .next_at = sqlite3_column_double(st, 7),
            .is_delivered = sqlite3_column_type(st, 8) != SQLITE_NULL, .delivered = sqlite3_column_double(st, 8),
            .last_error = col_text(st, 9),
        };
        rt_handoff_row_json(w, &row);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_fail(s, err, "reading the hand-off outbox");
}

typedef struct { const char *id; double next_at; const char *why; } retry_args;

static int bind_retry(sqlite3_stmt *st, const void *arg) {
    const retry_args *r = arg;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, r->next_at);
    return sqlite3_bind_text(st, 3, r->why, -1, SQLITE_STATIC);
}

static int bind_id(sqlite3_stmt *st, const void *arg) { return sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC); }

/* The row stays, without its package (the receiver has it), so the
 * console can say it was delivered; it goes with its session. */
static int sqlite_handoff_delivered(rt_sessions *s, const char *id, char *err) {
    return step_once(s, "UPDATE handoff_outbox SET body = '', sealed = 0, delivered = (julianday('now') - 2440587.5)"
                        " * 86400, attempts = attempts + 1, last_error = NULL WHERE session = ?1", err, bind_id, id);
}

static int sqlite_handoff_retry(rt_sessions *s, const char *id, double next_at, const char *why, char *err) {
    retry_args r = { id, next_at, why };
    return step_once(s, "UPDATE handoff_outbox SET attempts = attempts + 1, next_at = ?2, last_error = ?3"
                        " WHERE session = ?1", err, bind_retry, &r);
}

/* ss holds the state after the turn (ss->turns counts it; a new session
 * has turns 1). The row is inserted or updated, the turn (caller NULL:
 * none) added, in one transaction: both or neither. created is kept from
 * the first commit. */
static int sqlite_commit(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply,
                         double now, const rt_blob *values, char *err) {
    turn_args t = { ss, ttl_s, now, caller ? caller : "", reply ? reply : "", values };
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    rc = step_once(s,
                   "INSERT INTO sessions (id, owner, pipeline, created, updated, expires, turns, failures, bytes,"
                   " intent, slots, awaiting, stage, done, values_box) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?9,"
                   " ?10, ?11, ?12, ?13, ?14) ON CONFLICT(id) DO UPDATE SET updated = ?4, expires = ?5, turns = ?6,"
                   " failures = ?7, bytes = ?8, intent = ?9, slots = ?10, awaiting = ?11, stage = ?12, done = ?13,"
                   " values_box = ?14",
                   err, bind_row, &t);
    if (!rc && caller)
        rc = step_once(s, "INSERT INTO turns (session, n, at, caller, reply) VALUES (?1, ?2, ?3, ?4, ?5)", err,
                       bind_turn, &t);
    char *package = NULL;
    rt_blob sealed = { 0 };
    if (!rc && ss->handoff_reason)
        rc = rt_session_package(s, ss, &package, ss->handoff_url ? &sealed : NULL, err);
    if (!rc && package && ss->handoff_url) rc = enqueue(s, ss, package, &sealed, now, err);
    rt_blob_free(&sealed);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        sb_free(package);
        return rc;
    }
    if (package) {
        sb_free(ss->handoff);
        ss->handoff = package;
    }
    return 0;
}

static int bind_now(sqlite3_stmt *st, const void *arg) { return sqlite3_bind_double(st, 1, *(const double *)arg); }

/* A session, its turns, and with outbox its hand-off package even if not
 * delivered yet (an erase wins over a delivery; a caller who hung up
 * does not): 1, 0 (no such session) or < 0. */
static int delete_session(rt_sessions *s, const char *id, bool outbox, char *err) {
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (!rc) rc = step_once(s, "DELETE FROM turns WHERE session = ?1", err, bind_id, id);
    if (!rc) rc = step_once(s, "DELETE FROM sessions WHERE id = ?1", err, bind_id, id);
    int n = rc ? 0 : sqlite3_changes(s->db);
    if (!rc && outbox) rc = step_once(s, "DELETE FROM handoff_outbox WHERE session = ?1", err, bind_id, id);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    rc = exec(s, "COMMIT", err);
    return rc ? rc : n;
}

static int sqlite_delete(rt_sessions *s, const char *id, char *err) {
    int rc = delete_session(s, id, false, err);
    return rc < 0 ? rc : 0;
}

/* Delete the sessions `column <= t` (column is ours, never the caller's)
 * with their turns; how many, or < 0. */
static int purge_where(rt_sessions *s, const char *column, double t, char *err) {
    char turns[160], rows[96];
    snprintf(turns, sizeof turns, "DELETE FROM turns WHERE session IN (SELECT id FROM sessions WHERE %s <= ?1)", column);
    snprintf(rows, sizeof rows, "DELETE FROM sessions WHERE %s <= ?1", column);
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (!rc) rc = step_once(s, turns, err, bind_now, &t);
    if (!rc) rc = step_once(s, rows, err, bind_now, &t);
    int n = sqlite3_changes(s->db);
    /* A delivered package's row goes with its session. */
    if (!rc)
        rc = exec(s, "DELETE FROM handoff_outbox WHERE delivered IS NOT NULL AND session NOT IN (SELECT id FROM"
                     " sessions)", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    rc = exec(s, "COMMIT", err);
    if (!rc && n) rc = rt_sessions_checkpoint(s, err);
    return rc ? rc : n;
}

static int sqlite_erase(rt_sessions *s, const char *id, sb_bytes *callers, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT caller FROM turns WHERE session = ?1", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "reading a session");
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        if (t && sb_bytes_put(callers, t, strlen(t) + 1)) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (!rc && step != SQLITE_DONE) rc = db_fail(s, err, "reading a session");
    sqlite3_finalize(st);
    int n = rc ? rc : delete_session(s, id, true, err);
    if (n > 0 && (rc = rt_sessions_checkpoint(s, err))) return rc;
    return n;
}

/* The row's texts and sealed values, as the shared matcher reads them. */
static rt_store_row store_row(sqlite3_stmt *st) {
    rt_store_row row = { .id = col_text(st, 0) };
    for (int i = 0; i < 3; i++) {
        row.text[i] = col_text(st, i + 1);
        row.len[i] = (size_t)sqlite3_column_bytes(st, i + 1);
    }
    if (sqlite3_column_type(st, 4) == SQLITE_BLOB) {
        row.values = sqlite3_column_blob(st, 4);
        row.values_len = (size_t)sqlite3_column_bytes(st, 4);
    }
    return row;
}

static int sqlite_erase_matching(rt_sessions *s, rt_row_match_fn match, void *arg, char *err) {
    /* The ids first, the deletes after: no delete under an open statement. */
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT id, intent, slots, awaiting, values_box FROM sessions UNION ALL"
                           " SELECT session, caller, reply, NULL, NULL FROM turns", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "reading the sessions");
    enum { ID = RT_SESSION_ID_LEN + 1 };
    sb_bytes ids = { 0 };       /* matching ids, ID bytes each (NUL included) */
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        bool hit = false;
        rt_store_row row = store_row(st);
        if ((rc = match(s, &row, arg, &hit, err))) break;
        if (hit && rt_session_id_valid(row.id) && sb_bytes_put(&ids, row.id, ID))
            rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (!rc && step != SQLITE_DONE) rc = db_fail(s, err, "reading the sessions");
    sqlite3_finalize(st);
    int deleted = 0;
    for (size_t i = 0; !rc && i < ids.n; i += ID) {
        bool again = false;     /* one session can match in its row and in several turns */
        for (size_t j = 0; j < i && !again; j += ID) again = !strcmp(ids.p + i, ids.p + j);
        int n = again ? 0 : delete_session(s, ids.p + i, true, err);
        if (n < 0) rc = n;
        else deleted += n;
    }
    sb_free(ids.p);
    if (!rc && deleted) rc = rt_sessions_checkpoint(s, err);
    return rc ? rc : deleted;
}

/* The deleted rows' pages are zeroed (secure_delete), but the WAL still
 * holds the frames that wrote them until a checkpoint copies them back and
 * truncates it: a purge is not over while the words are in the -wal. */
static int sqlite_checkpoint(rt_sessions *s, char *err) {
    return exec(s, "PRAGMA wal_checkpoint(TRUNCATE)", err);
}

static const rt_session_store sqlite_store = {
    .close = sqlite_close, .load = sqlite_load, .transcript_json = sqlite_transcript_json,
    .commit = sqlite_commit, .remove = sqlite_delete, .purge_where = purge_where, .erase = sqlite_erase,
    .erase_matching = sqlite_erase_matching, .checkpoint = sqlite_checkpoint, .handoff_due = sqlite_handoff_due,
    .handoff_delivered = sqlite_handoff_delivered, .handoff_retry = sqlite_handoff_retry,
    .handoff_list = sqlite_handoff_list,
};
