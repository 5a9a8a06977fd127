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
 * Under a privacy policy the words are placeholders (⟨PHONE_1⟩), and the
 * values behind them - which later turns restore into replies and reveal
 * to tools - are kept only sealed (AES-256-GCM, cache/seal.c, with the
 * site's runtime.secret_key_file), bound to their session by the
 * associated data: a box copied into another session's row does not open.
 * A hand-off package, which carries the real values to the person who
 * takes the call, is sealed the same way until it is delivered.
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

#include "router/router_internal.h"

struct rt_sessions {
    sqlite3 *db;
    char *path;
    char (*busy)[RT_SESSION_ID_LEN + 1];    /* sessions with a turn in flight */
    size_t n_busy, cap_busy;
    uint8_t key[SB_SEAL_KEY_LEN];   /* seals values and packages; has_key false: none */
    bool has_key;
};

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS sessions ("
    " id TEXT PRIMARY KEY, owner TEXT NOT NULL, pipeline TEXT NOT NULL,"
    " created REAL NOT NULL, updated REAL NOT NULL, expires REAL NOT NULL,"
    " turns INTEGER NOT NULL, failures INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " intent TEXT, slots TEXT NOT NULL, awaiting TEXT, stage INTEGER NOT NULL, done INTEGER NOT NULL, values_box BLOB);"
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

int rt_sessions_open(const char *path, rt_sessions **out, char *err) {
    *out = NULL;
    int rc = create_private(path, err);
    if (rc) return rc;
    rt_sessions *s = sb_calloc(1, sizeof *s);
    if (!s || !(s->path = sb_strdup(path))) {
        sb_free(s);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
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

void rt_sessions_close(rt_sessions *s) {
    if (!s) return;
    sqlite3_close_v2(s->db);
    explicit_bzero(s->key, sizeof s->key);
    sb_free(s->busy);
    sb_free(s->path);
    sb_free(s);
}

void rt_sessions_set_key(rt_sessions *s, const uint8_t key[SB_SEAL_KEY_LEN]) {
    memcpy(s->key, key, sizeof s->key);
    s->has_key = true;
}

/* ---------------------------------------------------------------- sealing */

/* What a box of session id holds (values or a hand-off package): the
 * associated data, so a box opens only in its own session and place. */
static void box_aad(char *aad, size_t n, const char *id, const char *what) { snprintf(aad, n, "%s/%s", id, what); }

static int seal_text(rt_sessions *s, const char *id, const char *what, const char *text, size_t len, uint8_t **box,
                     size_t *box_len, char *err) {
    *box = NULL;
    if (!s->has_key)
        return sb_seterr(err, SB_EINVAL, "sessions %s: session %s keeps callers' values, and no "
                         "runtime.secret_key_file is set to seal them", s->path, id);
    char aad[RT_SESSION_ID_LEN + 16];
    box_aad(aad, sizeof aad, id, what);
    if (!(*box = sb_malloc(len + SB_SEAL_OVERHEAD))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = sb_seal(s->key, aad, strlen(aad), text, len, *box);
    if (rc) {
        sb_free(*box);
        *box = NULL;
        return sb_seterr(err, rc, "session %s: sealing its %s failed", id, what);
    }
    *box_len = len + SB_SEAL_OVERHEAD;
    return 0;
}

/* The text in a box, NUL-terminated and sb_malloc'ed. A box that does not
 * open is SB_EINVAL naming the likely cause: it never crashes a turn or
 * leaks a byte of the box. */
static int open_box(rt_sessions *s, const char *id, const char *what, const void *box, size_t len, char **text,
                    char *err) {
    *text = NULL;
    if (!s->has_key)
        return sb_seterr(err, SB_EINVAL, "session %s: its %s are sealed, and no runtime.secret_key_file is set "
                         "to open them", id, what);
    char aad[RT_SESSION_ID_LEN + 16];
    box_aad(aad, sizeof aad, id, what);
    if (len < SB_SEAL_OVERHEAD || !(*text = sb_malloc(len - SB_SEAL_OVERHEAD + 1)))
        return len < SB_SEAL_OVERHEAD ? sb_seterr(err, SB_EINVAL, "session %s: its sealed %s are cut short", id, what)
                                      : sb_seterr(err, SB_ENOMEM, "out of memory");
    if (sb_unseal(s->key, aad, strlen(aad), box, len, (uint8_t *)*text)) {
        sb_free(*text);
        *text = NULL;
        return sb_seterr(err, SB_EINVAL, "session %s: its sealed %s do not open with runtime.secret_key_file "
                         "(a different key than the one that sealed them, or the store was altered)", id, what);
    }
    (*text)[len - SB_SEAL_OVERHEAD] = '\0';
    return 0;
}

/* The session's values from the box in column i of st, into ss->values. */
static int load_values(rt_sessions *s, sqlite3_stmt *st, int i, rt_session *ss, char *err) {
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return 0;
    char *json;
    int rc = open_box(s, ss->id, "values", sqlite3_column_blob(st, i), (size_t)sqlite3_column_bytes(st, i), &json, err);
    if (rc) return rc;
    rc = sb_pii_table_load(json, strlen(json), &ss->values, err);
    explicit_bzero(json, strlen(json));
    sb_free(json);
    return rc;
}

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

void rt_session_clear(rt_session *ss) {
    sb_free(ss->pipeline);
    sb_free(ss->intent);
    sb_free(ss->slots);
    sb_free(ss->awaiting);
    sb_free(ss->handoff);
    sb_free(ss->said);
    sb_pii_table_free(&ss->values);
    memset(ss, 0, sizeof *ss);
}

int rt_session_load(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, char *err) {
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
    rc = load_values(s, st, 13, out, err);
    sqlite3_finalize(st);
    if (rc) {
        rt_session_clear(out);
        return rc;
    }
    if (!out->pipeline || !out->slots) {
        rt_session_clear(out);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (out->expires <= now) {
        rt_session_clear(out);
        return sb_seterr(err, SB_ETIMEOUT, "session %s expired", id);
    }
    return 0;
}

/* A JSON text as a value of w (stored JSON is ours; unreadable is null). */
static void json_text(sb_jw *w, const char *text) {
    sb_json_doc *d;
    if (!text || sb_json_parse(text, strlen(text), &d, NULL)) { sb_jw_null(w); return; }
    sb_jw_value(w, sb_json_root(d));
    sb_json_doc_free(d);
}

void rt_session_state_json(const rt_session *ss, sb_jw *w) {
    sb_jw_obj(w);
    sb_jw_key(w, "intent"); sb_jw_str(w, ss->intent);
    sb_jw_key(w, "slots"); json_text(w, ss->slots);
    sb_jw_key(w, "turn"); sb_jw_int(w, ss->turns);
    sb_jw_obj_end(w);
}

int rt_session_json(rt_sessions *s, const rt_session *ss, sb_jw *w, char *err) {
    sb_jw_obj(w);
    sb_jw_key(w, "id"); sb_jw_str(w, ss->id);
    sb_jw_key(w, "pipeline"); sb_jw_str(w, ss->pipeline);
    sb_jw_key(w, "created"); sb_jw_fixed(w, ss->created, 3);
    sb_jw_key(w, "updated"); sb_jw_fixed(w, ss->updated, 3);
    sb_jw_key(w, "expires"); sb_jw_fixed(w, ss->expires, 3);
    sb_jw_key(w, "state"); rt_session_state_json(ss, w);
    sb_jw_key(w, "awaiting"); json_text(w, ss->awaiting);
    sb_jw_key(w, "turns"); sb_jw_int(w, ss->turns);
    sb_jw_key(w, "failures"); sb_jw_int(w, ss->failures);
    sb_jw_key(w, "bytes"); sb_jw_int(w, ss->bytes);
    sb_jw_key(w, "done"); sb_jw_bool(w, ss->done);
    sb_jw_key(w, "transcript");
    int rc = rt_session_transcript_json(s, ss->id, w, err);
    sb_jw_obj_end(w);
    return rc ? rc : w->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
}

int rt_session_transcript_json(rt_sessions *s, const char *id, sb_jw *w, char *err) {
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

typedef struct { uint8_t *p; size_t len; } box;

static int bind_state(sqlite3_stmt *st, const rt_session *ss, int ttl_s, double now, const box *values) {
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
    if (values->p) sqlite3_bind_blob(st, 14, values->p, (int)values->len, SQLITE_STATIC);
    else sqlite3_bind_null(st, 14);
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

typedef struct { const rt_session *ss; int ttl_s; double now; const char *caller, *reply; box values; } turn_args;

static int bind_row(sqlite3_stmt *st, const void *arg) {
    const turn_args *t = arg;
    return bind_state(st, t->ss, t->ttl_s, t->now, &t->values);
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

/* One line for the person who takes the call: the intent and the slots
 * given ("billing: account=4410032, name=张三"), then why. A long line is
 * cut; the slots are whole in the package beside it. */
#define SUMMARY_MAX 512
static void summary(const rt_session *ss, sb_jw *w) {
    char line[SUMMARY_MAX];
    size_t n = (size_t)snprintf(line, sizeof line, "%s:", ss->intent ? ss->intent : "no intent");
    sb_json_doc *d;
    int given = 0;
    if (ss->slots && !sb_json_parse(ss->slots, strlen(ss->slots), &d, NULL)) {
        const sb_json *o = sb_json_root(d);
        for (size_t i = 0; i < sb_json_len(o) && n < sizeof line; i++) {
            const sb_json *v = sb_json_val_at(o, i);
            if (sb_json_type_of(v) == SB_JSON_NULL || (sb_json_type_of(v) == SB_JSON_STRING && !*sb_json_str(v)))
                continue;
            sb_jw vw;
            sb_jw_init(&vw);
            if (sb_json_type_of(v) != SB_JSON_STRING) sb_jw_value(&vw, v);
            const char *text = sb_json_type_of(v) == SB_JSON_STRING ? sb_json_str(v) : vw.oom ? "?" : vw.p;
            n += (size_t)snprintf(line + n, sizeof line - n, "%s %s=%s", given++ ? "," : "", sb_json_key_at(o, i), text);
            sb_jw_free(&vw);
        }
        sb_json_doc_free(d);
    }
    if (!given && n < sizeof line) n += (size_t)snprintf(line + n, sizeof line - n, " no slots given");
    if (n < sizeof line) snprintf(line + n, sizeof line - n, "; handed off: %s", ss->handoff_reason);
    sb_jw_str(w, line);
}

/* The package for the person who takes the call: the intent and its
 * confidence, the slots with their real values (that person needs them),
 * the transcript as stored (this turn's row included: it is read inside
 * the commit's transaction), a one-line summary and why. */
static int package_text(rt_sessions *s, const rt_session *ss, char **out, char *err) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "session"); sb_jw_str(&w, ss->id);
    sb_jw_key(&w, "pipeline"); sb_jw_str(&w, ss->pipeline);
    sb_jw_key(&w, "reason"); sb_jw_str(&w, ss->handoff_reason);
    sb_jw_key(&w, "intent"); sb_jw_str(&w, ss->intent);
    sb_jw_key(&w, "confidence");
    if (ss->handoff_confidence >= 0) sb_jw_num(&w, ss->handoff_confidence); else sb_jw_null(&w);
    sb_jw_key(&w, "slots"); json_text(&w, ss->slots);
    sb_jw_key(&w, "summary"); summary(ss, &w);
    sb_jw_key(&w, "transcript");
    int rc = rt_session_transcript_json(s, ss->id, &w, err);
    sb_jw_obj_end(&w);
    if (!rc && w.oom) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!rc && !(*out = sb_strdup(w.p))) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_jw_free(&w);
    return rc;
}

typedef struct { const rt_session *ss; const char *body; box sealed; double now; } outbox_args;

static int bind_outbox(sqlite3_stmt *st, const void *arg) {
    const outbox_args *o = arg;
    sqlite3_bind_text(st, 1, o->ss->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->ss->handoff_url, -1, SQLITE_STATIC);
    if (o->sealed.p) sqlite3_bind_blob(st, 3, o->sealed.p, (int)o->sealed.len, SQLITE_STATIC);
    else sqlite3_bind_text(st, 3, o->body, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, o->sealed.p != NULL);
    sqlite3_bind_text(st, 6, o->ss->handoff_reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, o->ss->handoff_ca_file, -1, SQLITE_STATIC);
    return sqlite3_bind_double(st, 4, o->now);
}

/* The package queued for delivery. With values, the receiver gets them
 * put back in (the person who takes the call needs the real number), and
 * the package waits in the outbox sealed. */
static int enqueue(rt_sessions *s, const rt_session *ss, const sb_pii_table *values, const char *body, double now,
                   char *err) {
    outbox_args o = { ss, body, { NULL, 0 }, now };
    int rc = 0;
    if (values) {
        char *real;
        size_t n;
        if (sb_privacy_restore(values, body, strlen(body), false, &real, &n)) return sb_seterr(err, SB_ENOMEM, "out of memory");
        rc = seal_text(s, ss->id, "handoff", real, n, &o.sealed.p, &o.sealed.len, err);
        explicit_bzero(real, n);
        sb_free(real);
    }
    if (!rc)
        rc = step_once(s, "INSERT INTO handoff_outbox (session, url, body, created, attempts, next_at, sealed, reason,"
                          " ca_file) VALUES (?1, ?2, ?3, ?4, 0, ?4, ?5, ?6, ?7) ON CONFLICT(session) DO NOTHING", err,
                       bind_outbox, &o);
    sb_free(o.sealed.p);
    return rc;
}

/* A due package's body: as stored, or unsealed. A box that does not open
 * (another key) leaves body NULL and says why, for the retry. */
static int due_body(rt_sessions *s, sqlite3_stmt *st, rt_handoff_item *it) {
    char err[SB_ERR_LEN];
    it->error = NULL;
    if (!sqlite3_column_int(st, 4)) return (it->body = col_dup(st, 2)) ? 0 : SB_ENOMEM;
    int rc = open_box(s, it->session, "handoff", sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                      &it->body, err);
    if (rc == SB_EINVAL) it->error = "the sealed package does not open with runtime.secret_key_file (another key?)";
    return rc == SB_EINVAL ? 0 : rc;
}

int rt_handoff_due(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT session, url, body, attempts, sealed, ca_file FROM handoff_outbox"
                                  " WHERE next_at <= ?1 AND delivered IS NULL ORDER BY next_at LIMIT ?2", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(s, err, "reading the hand-off outbox");
    sqlite3_bind_double(st, 1, now);
    sqlite3_bind_int(st, 2, max);
    int n = 0, rc;
    while (n < max && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rt_handoff_item *it = &items[n];
        snprintf(it->session, sizeof it->session, "%s", (const char *)sqlite3_column_text(st, 0));
        it->body = NULL;
        it->url = col_dup(st, 1);
        it->ca_file = col_dup(st, 5);
        it->attempts = sqlite3_column_int(st, 3);
        n++;
        if (!it->url || (sqlite3_column_type(st, 5) != SQLITE_NULL && !it->ca_file) || due_body(s, st, it)) {
            rt_handoff_items_free(items, n);
            sqlite3_finalize(st);
            return sb_seterr(err, SB_ENOMEM, "out of memory");
        }
    }
    sqlite3_finalize(st);
    return n;
}

void rt_handoff_items_free(rt_handoff_item *items, int n) {
    for (int i = 0; i < n; i++) {
        sb_free(items[i].url);
        sb_free(items[i].ca_file);
        if (items[i].body) explicit_bzero(items[i].body, strlen(items[i].body));
        sb_free(items[i].body);
    }
}

typedef struct { const char *id; double next_at; const char *why; } retry_args;

static int bind_retry(sqlite3_stmt *st, const void *arg) {
    const retry_args *r = arg;
    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, r->next_at);
    return sqlite3_bind_text(st, 3, r->why, -1, SQLITE_STATIC);
}

static int bind_id(sqlite3_stmt *st, const void *arg) { return sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC); }

/* The latest max hand-offs for the console, newest first: where each
 * stands in its delivery, and never the package (it holds the caller's
 * values): [{session, pipeline, intent, reason, url, created, state
 * (queued | retrying | delivered), attempts, next_at, delivered, last_error}]. */
int rt_handoff_list_json(rt_sessions *s, int max, sb_jw *w, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT o.session, s.pipeline, s.intent, o.reason, o.url, o.created, o.attempts,"
                                  " o.next_at, o.delivered, o.last_error FROM handoff_outbox o LEFT JOIN sessions s"
                                  " ON s.id = o.session ORDER BY o.created DESC LIMIT ?1", -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, err, "reading the hand-off outbox");
    sqlite3_bind_int(st, 1, max);
    sb_jw_arr(w);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        bool delivered = sqlite3_column_type(st, 8) != SQLITE_NULL;
        int attempts = sqlite3_column_int(st, 6);
        sb_jw_obj(w);
        static const char *const keys[] = { "session", "pipeline", "intent", "reason", "url" };
        for (int i = 0; i < 5; i++) { sb_jw_key(w, keys[i]); sb_jw_str(w, (const char *)sqlite3_column_text(st, i)); }
        sb_jw_key(w, "created"); sb_jw_fixed(w, sqlite3_column_double(st, 5), 3);
        sb_jw_key(w, "state"); sb_jw_str(w, delivered ? "delivered" : attempts ? "retrying" : "queued");
        sb_jw_key(w, "attempts"); sb_jw_int(w, attempts);
        sb_jw_key(w, "next_at"); if (delivered) sb_jw_null(w); else sb_jw_fixed(w, sqlite3_column_double(st, 7), 3);
        sb_jw_key(w, "delivered"); if (delivered) sb_jw_fixed(w, sqlite3_column_double(st, 8), 3); else sb_jw_null(w);
        sb_jw_key(w, "last_error"); sb_jw_str(w, (const char *)sqlite3_column_text(st, 9));
        sb_jw_obj_end(w);
    }
    sqlite3_finalize(st);
    sb_jw_arr_end(w);
    return rc == SQLITE_DONE ? 0 : db_fail(s, err, "reading the hand-off outbox");
}

/* The row stays, without its package (the receiver has it), so the
 * console can say it was delivered; it goes with its session. */
int rt_handoff_delivered(rt_sessions *s, const char *id, char *err) {
    return step_once(s, "UPDATE handoff_outbox SET body = '', sealed = 0, delivered = (julianday('now') - 2440587.5) * 86400,"
                        " attempts = attempts + 1, last_error = NULL WHERE session = ?1", err, bind_id, id);
}

int rt_handoff_retry(rt_sessions *s, const char *id, double next_at, const char *why, char *err) {
    retry_args r = { id, next_at, why };
    return step_once(s, "UPDATE handoff_outbox SET attempts = attempts + 1, next_at = ?2, last_error = ?3"
                        " WHERE session = ?1", err, bind_retry, &r);
}

/* The values a commit seals: the call's table, else those loaded. */
static const sb_pii_table *values_of(const rt_session *ss) {
    return ss->seal ? ss->seal : ss->values.n ? &ss->values : NULL;
}

static int seal_values(rt_sessions *s, const rt_session *ss, box *b, char *err) {
    const sb_pii_table *values = values_of(ss);
    if (!values) return 0;
    char *json;
    size_t n;
    if (sb_pii_table_save(values, &json, &n)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = seal_text(s, ss->id, "values", json, n, &b->p, &b->len, err);
    explicit_bzero(json, n);
    sb_free(json);
    return rc;
}

/* ss holds the state after the turn (ss->turns counts it; a new session
 * has turns 1). The row is inserted or updated, the turn (caller NULL:
 * none) added, in one transaction: both or neither. created is kept from
 * the first commit. */
int rt_session_commit(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply,
                      double now, char *err) {
    turn_args t = { ss, ttl_s, now, caller ? caller : "", reply ? reply : "", { NULL, 0 } };
    int rc = seal_values(s, ss, &t.values, err);
    if (!rc) rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) { sb_free(t.values.p); return rc; }
    rc = step_once(s,
                   "INSERT INTO sessions (id, owner, pipeline, created, updated, expires, turns, failures, bytes,"
                   " intent, slots, awaiting, stage, done, values_box) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?9,"
                   " ?10, ?11, ?12, ?13, ?14) ON CONFLICT(id) DO UPDATE SET updated = ?4, expires = ?5, turns = ?6,"
                   " failures = ?7, bytes = ?8, intent = ?9, slots = ?10, awaiting = ?11, stage = ?12, done = ?13,"
                   " values_box = ?14",
                   err, bind_row, &t);
    sb_free(t.values.p);
    if (!rc && caller)
        rc = step_once(s, "INSERT INTO turns (session, n, at, caller, reply) VALUES (?1, ?2, ?3, ?4, ?5)", err,
                       bind_turn, &t);
    char *package = NULL;
    if (!rc && ss->handoff_reason) rc = package_text(s, ss, &package, err);
    if (!rc && package && ss->handoff_url) rc = enqueue(s, ss, values_of(ss), package, now, err);
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
 * does not). */
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

int rt_session_delete(rt_sessions *s, const char *id, char *err) {
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
    if (!rc) rc = exec(s, "DELETE FROM handoff_outbox WHERE delivered IS NOT NULL AND session NOT IN (SELECT id FROM sessions)", err);
    if (rc) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    rc = exec(s, "COMMIT", err);
    if (!rc && n) rc = rt_sessions_checkpoint(s, err);
    return rc ? rc : n;
}

int rt_sessions_sweep(rt_sessions *s, double now, char *err) { return purge_where(s, "expires", now, err); }

int rt_sessions_purge_before(rt_sessions *s, double before, char *err) {
    return purge_where(s, "updated", before, err);
}

int rt_session_erase(rt_sessions *s, const char *id, sb_bytes *callers, char *err) {
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

/* Does session id's sealed values box (column col of st) hold what match
 * looks for? A box this key cannot open fails the erase: it cannot tell. */
static int values_match(rt_sessions *s, sqlite3_stmt *st, int col, rt_text_match_fn match, void *arg, bool *hit,
                        char *err) {
    if (sqlite3_column_type(st, col) != SQLITE_BLOB) return 0;
    const char *id = (const char *)sqlite3_column_text(st, 0);
    char *json;
    int rc = open_box(s, id ? id : "?", "values", sqlite3_column_blob(st, col), (size_t)sqlite3_column_bytes(st, col),
                      &json, err);
    if (rc) return rc;
    *hit = match(arg, json, strlen(json));
    explicit_bzero(json, strlen(json));
    sb_free(json);
    return 0;
}

int rt_sessions_erase_matching(rt_sessions *s, rt_text_match_fn match, void *arg, char *err) {
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
        for (int col = 1; col <= 3 && !hit; col++) {
            const char *t = (const char *)sqlite3_column_text(st, col);
            hit = t && match(arg, t, (size_t)sqlite3_column_bytes(st, col));
        }
        if (!hit && (rc = values_match(s, st, 4, match, arg, &hit, err))) break;
        const char *id = (const char *)sqlite3_column_text(st, 0);
        if (hit && rt_session_id_valid(id) && sb_bytes_put(&ids, id, ID))
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
int rt_sessions_checkpoint(rt_sessions *s, char *err) {
    return exec(s, "PRAGMA wal_checkpoint(TRUNCATE)", err);
}
