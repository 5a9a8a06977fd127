/* sessions_pg.c - the sessions' PostgreSQL store: the rows of the SQLite
 * store (sessions.c) in a database the routers of one site share, so that
 * whichever router the balancer sends a turn to can take it.
 *
 * sessions.store is libpq's connection string, passed through as written:
 * TLS and each box's own credentials are its sslmode, sslrootcert, sslcert,
 * user and passfile (docs/config.md). Messages name the host and the
 * database, never the password.
 *
 * Two routers may run turns of one session at once (a caller retrying
 * through the balancer). Every row carries a version, and a commit updates
 * the row only over the version its turn read: optimistic, because a lock
 * held across a model's run would hold the row for seconds. The later
 * commit fails with SB_EBUSY (the caller hears session_busy and sends that
 * turn again), so no answered turn is ever overwritten.
 *
 * A session's values and a queued hand-off package come here sealed under
 * a privacy policy (sessions_store.c seals and opens them for every
 * store): bytea, passed and read in its hex text form.
 *
 * A turn is answered after its COMMIT returns, and PostgreSQL returns it
 * once its WAL is flushed (synchronous_commit on, its default). Like the
 * SQLite store's fsync, the round trips block the router's loop; a site's
 * database is on its LAN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_pg.h"
#include "router/sessions_store.h"

static const rt_session_store pg_store;

/* Under an advisory lock: the routers of a site start together. */
static const char schema_sql[] =
    "SELECT pg_advisory_xact_lock(7220152);"
    "CREATE TABLE IF NOT EXISTS sb_sessions(id text PRIMARY KEY, owner text NOT NULL, pipeline text NOT NULL,"
    "  created double precision NOT NULL, updated double precision NOT NULL,"
    "  expires double precision NOT NULL, turns int NOT NULL, failures int NOT NULL, bytes bigint NOT NULL,"
    "  intent text, slots text NOT NULL, awaiting text, stage int NOT NULL, done boolean NOT NULL,"
    "  version bigint NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sb_sessions_expires ON sb_sessions(expires);"
    "CREATE INDEX IF NOT EXISTS sb_sessions_updated ON sb_sessions(updated);"
    "CREATE TABLE IF NOT EXISTS sb_session_turns(session text NOT NULL REFERENCES sb_sessions(id)"
    "  ON DELETE CASCADE, n int NOT NULL, at double precision NOT NULL, caller text NOT NULL,"
    "  reply text NOT NULL, PRIMARY KEY (session, n));"
    /* As in the SQLite store: one package per session, its id the
     * idempotency key, kept until delivered whatever becomes of the session. */
    "CREATE TABLE IF NOT EXISTS sb_handoff_outbox(session text PRIMARY KEY, url text NOT NULL,"
    "  body text NOT NULL, created double precision NOT NULL, attempts int NOT NULL,"
    "  next_at double precision NOT NULL, last_error text);"
    /* Added after the first release, for databases made before them. A
     * sealed package's body is its box in bytea's hex text form ("\\x..."). A
     * delivered one keeps its row without the package (what the console
     * shows) until its session is gone. */
    "ALTER TABLE sb_sessions ADD COLUMN IF NOT EXISTS values_box bytea;"
    "ALTER TABLE sb_handoff_outbox ADD COLUMN IF NOT EXISTS sealed boolean NOT NULL DEFAULT false,"
    "  ADD COLUMN IF NOT EXISTS reason text, ADD COLUMN IF NOT EXISTS delivered double precision,"
    "  ADD COLUMN IF NOT EXISTS ca_file text;"
    "CREATE INDEX IF NOT EXISTS sb_handoff_outbox_created ON sb_handoff_outbox(created);";

typedef struct { char v[32]; } num;
static num fnum(double x) { num n; snprintf(n.v, sizeof n.v, "%.6f", x); return n; }
static num inum(long long x) { num n; snprintf(n.v, sizeof n.v, "%lld", x); return n; }

/* A box as a bytea parameter (its hex text form), sb_malloc'ed; NULL for
 * none, or when out of memory (*oom set). */
static char *bytea_param(const rt_blob *b, bool *oom) {
    if (!b || !b->p) return NULL;
    char *t = sb_malloc(2 * b->len + 3);
    if (!t) { *oom = true; return NULL; }
    static const char hex[] = "0123456789abcdef";
    t[0] = '\\';
    t[1] = 'x';
    for (size_t i = 0; i < b->len; i++) {
        t[2 + 2 * i] = hex[b->p[i] >> 4];
        t[3 + 2 * i] = hex[b->p[i] & 15];
    }
    t[2 + 2 * b->len] = '\0';
    return t;
}

/* A bytea value as read (hex text form) into out, sb_malloc'ed. 0 or
 * SB_ENOMEM. */
static int bytea_value(const char *text, rt_blob *out) {
    size_t n = 0;
    unsigned char *raw = PQunescapeBytea((const unsigned char *)text, &n);
    if (!raw) return SB_ENOMEM;
    out->p = sb_malloc(n ? n : 1);
    if (out->p) memcpy(out->p, raw, n);
    out->len = out->p ? n : 0;
    PQfreemem(raw);
    return out->p ? 0 : SB_ENOMEM;
}

static PGresult *run(rt_sessions *s, const char *sql, int n, const char *const *p, char *err, const char *what) {
    return sb_pg_run(s->db, sql, n, p, err, what);
}

static int run_ok(rt_sessions *s, const char *sql, int n, const char *const *p, char *err, const char *what) {
    PGresult *r = run(s, sql, n, p, err, what);
    if (!r) return SB_EIO;
    PQclear(r);
    return 0;
}

/* "postgresql db on host:port as user", for messages. */
static char *describe(PGconn *pg) {
    char buf[512];
    snprintf(buf, sizeof buf, "postgresql %s on %s:%s as %s", PQdb(pg), PQhost(pg), PQport(pg), PQuser(pg));
    return sb_strdup(buf);
}

int rt_sessions_pg_open(const char *conninfo, rt_sessions **out, char *err) {
    *out = NULL;
    rt_sessions *s = sb_calloc(1, sizeof *s);
    if (!s) return sb_seterr(err, SB_ENOMEM, "out of memory");
    s->store = &pg_store;
    PGconn *pg = NULL;
    int rc = sb_pg_connect(conninfo, &pg, err);
    s->db = pg;
    if (!rc && !(s->path = describe(pg))) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!rc) rc = sb_pg_exec(pg, "BEGIN", err);
    if (!rc) rc = sb_pg_exec(pg, schema_sql, err);
    if (!rc) rc = sb_pg_exec(pg, "COMMIT", err);
    if (rc) {
        char why[SB_ERR_LEN];
        snprintf(why, sizeof why, "%s", err);
        sb_seterr(err, rc, "sessions: %s", why);
        rt_sessions_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

static void pg_close(rt_sessions *s) { PQfinish(s->db); }

/* ------------------------------------------------------------- reads */

static char *val_dup(PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? NULL : sb_strdup(PQgetvalue(r, row, col));
}

static int pg_load(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, rt_blob *values,
                   char *err) {
    memset(out, 0, sizeof *out);
    const char *p[1] = { id };
    PGresult *r = run(s, "SELECT owner, pipeline, created, updated, expires, turns, failures, bytes, intent, slots,"
                         " awaiting, stage, done, version, values_box FROM sb_sessions WHERE id = $1",
                      1, p, err, "reading a session");
    if (!r) return SB_EIO;
    /* Another key's session is answered as one that does not exist. */
    if (PQntuples(r) != 1 || (owner && strcmp(PQgetvalue(r, 0, 0), owner))) {
        PQclear(r);
        return sb_seterr(err, SB_ENOTFOUND, "no session %s", id);
    }
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->owner, sizeof out->owner, "%s", PQgetvalue(r, 0, 0));
    out->pipeline = val_dup(r, 0, 1);
    out->created = atof(PQgetvalue(r, 0, 2));
    out->updated = atof(PQgetvalue(r, 0, 3));
    out->expires = atof(PQgetvalue(r, 0, 4));
    out->turns = atoi(PQgetvalue(r, 0, 5));
    out->failures = atoi(PQgetvalue(r, 0, 6));
    out->bytes = atoll(PQgetvalue(r, 0, 7));
    out->intent = val_dup(r, 0, 8);
    out->slots = val_dup(r, 0, 9);
    out->awaiting = val_dup(r, 0, 10);
    out->stage = atoi(PQgetvalue(r, 0, 11));
    out->done = PQgetvalue(r, 0, 12)[0] == 't';
    out->version = atoll(PQgetvalue(r, 0, 13));
    int rc = PQgetisnull(r, 0, 14) ? 0 : bytea_value(PQgetvalue(r, 0, 14), values);
    PQclear(r);
    return rc ? sb_seterr(err, rc, "out of memory") : 0;
}

static int pg_transcript_json(rt_sessions *s, const char *id, sb_jw *w, char *err) {
    const char *p[1] = { id };
    PGresult *r = run(s, "SELECT n, at, caller, reply FROM sb_session_turns WHERE session = $1 ORDER BY n",
                      1, p, err, "reading a transcript");
    if (!r) return SB_EIO;
    sb_jw_arr(w);
    for (int i = 0; i < PQntuples(r); i++) {
        sb_jw_obj(w);
        sb_jw_key(w, "turn"); sb_jw_int(w, atoi(PQgetvalue(r, i, 0)));
        sb_jw_key(w, "at"); sb_jw_fixed(w, atof(PQgetvalue(r, i, 1)), 3);
        sb_jw_key(w, "caller"); sb_jw_str(w, PQgetvalue(r, i, 2));
        sb_jw_key(w, "reply"); sb_jw_str(w, PQgetvalue(r, i, 3));
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    PQclear(r);
    return 0;
}

/* ------------------------------------------------------------- writes */

/* The row over the version ss was read at (0: a new session), to version
 * + 1. Zero rows written: another router took a turn meanwhile, or the
 * session was ended or deleted. */
static int write_row(rt_sessions *s, const rt_session *ss, int ttl_s, double now, const rt_blob *values,
                     char *err) {
    bool oom = false;
    char *box = bytea_param(values, &oom);
    if (oom) return sb_seterr(err, SB_ENOMEM, "out of memory");
    num at = fnum(now), exp = fnum(now + ttl_s), turns = inum(ss->turns), fails = inum(ss->failures),
        bytes = inum(ss->bytes), stage = inum(ss->stage), version = inum(ss->version);
    const char *p[15] = { ss->id, ss->owner, ss->pipeline, at.v, exp.v, turns.v, fails.v, bytes.v, ss->intent,
                          ss->slots ? ss->slots : "{}", ss->awaiting, stage.v, ss->done ? "true" : "false",
                          box, version.v };
    PGresult *r = ss->version == 0
        ? run(s, "INSERT INTO sb_sessions (id, owner, pipeline, created, updated, expires, turns, failures, bytes,"
                 " intent, slots, awaiting, stage, done, values_box, version) VALUES ($1, $2, $3, $4, $4, $5, $6,"
                 " $7, $8, $9, $10, $11, $12, $13, $14, 1) ON CONFLICT (id) DO NOTHING", 14, p, err,
              "storing a session")
        : run(s, "UPDATE sb_sessions SET updated = $4, expires = $5, turns = $6, failures = $7, bytes = $8,"
                 " intent = $9, slots = $10, awaiting = $11, stage = $12, done = $13, values_box = $14,"
                 " version = version + 1 WHERE id = $1 AND owner = $2 AND pipeline = $3 AND version = $15", 15, p,
              err, "storing a session");
    sb_free(box);
    if (!r) return SB_EIO;
    int n = atoi(PQcmdTuples(r));
    PQclear(r);
    if (n != 1)
        return sb_seterr(err, SB_EBUSY, "session %s changed on another router while this turn ran (or was "
                         "deleted); this turn was not kept, send it again", ss->id);
    return 0;
}

static int add_turn(rt_sessions *s, const rt_session *ss, double now, const char *caller, const char *reply,
                    char *err) {
    num n = inum(ss->turns), at = fnum(now);
    const char *p[5] = { ss->id, n.v, at.v, caller, reply ? reply : "" };
    return run_ok(s, "INSERT INTO sb_session_turns (session, n, at, caller, reply) VALUES ($1, $2, $3, $4, $5)",
                  5, p, err, "storing a turn");
}

/* The package as text, or sealed (sealed->p) in its place. */
static int enqueue(rt_sessions *s, const rt_session *ss, const char *body, const rt_blob *sealed, double now,
                   char *err) {
    num at = fnum(now);
    bool oom = false;
    char *box = bytea_param(sealed, &oom);
    if (oom) return sb_seterr(err, SB_ENOMEM, "out of memory");
    const char *p[7] = { ss->id, ss->handoff_url, box ? box : body, at.v, box ? "true" : "false",
                         ss->handoff_reason, ss->handoff_ca_file };
    int rc = run_ok(s, "INSERT INTO sb_handoff_outbox (session, url, body, created, attempts, next_at, sealed, reason,"
                       " ca_file) VALUES ($1, $2, $3, $4, 0, $4, $5, $6, $7) ON CONFLICT (session) DO NOTHING", 7, p,
                    err, "queuing a hand-off");
    sb_free(box);
    return rc;
}

static int pg_commit(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply, double now,
                     const rt_blob *values, char *err) {
    char *package = NULL;
    rt_blob sealed = { 0 };
    int rc = sb_pg_exec(s->db, "BEGIN", err);
    if (!rc) rc = write_row(s, ss, ttl_s, now, values, err);
    if (!rc && caller) rc = add_turn(s, ss, now, caller, reply, err);
    if (!rc && ss->handoff_reason)
        rc = rt_session_package(s, ss, &package, ss->handoff_url ? &sealed : NULL, err);
    if (!rc && package && ss->handoff_url) rc = enqueue(s, ss, package, &sealed, now, err);
    rt_blob_free(&sealed);
    if (!rc) rc = sb_pg_exec(s->db, "COMMIT", err);
    if (rc) {
        sb_pg_rollback(s->db);
        sb_free(package);
        return rc;
    }
    ss->version++;
    if (package) {
        sb_free(ss->handoff);
        ss->handoff = package;
    }
    return 0;
}

/* Deleting a session deletes its turns (ON DELETE CASCADE): how many
 * sessions, or < 0. */
static int delete_where(rt_sessions *s, const char *sql, const char *arg, char *err) {
    const char *p[1] = { arg };
    PGresult *r = run(s, sql, 1, p, err, "deleting sessions");
    if (!r) return SB_EIO;
    int n = atoi(PQcmdTuples(r));
    PQclear(r);
    return n;
}

static int pg_delete(rt_sessions *s, const char *id, char *err) {
    int n = delete_where(s, "DELETE FROM sb_sessions WHERE id = $1", id, err);
    return n < 0 ? n : 0;
}

/* With its package, delivered or not (an erase wins over a delivery), in
 * one transaction: 1, 0 (no such session) or < 0. */
static int erase_session(rt_sessions *s, const char *id, char *err) {
    int rc = sb_pg_exec(s->db, "BEGIN", err);
    int n = rc ? rc : delete_where(s, "DELETE FROM sb_sessions WHERE id = $1", id, err);
    if (n >= 0 && delete_where(s, "DELETE FROM sb_handoff_outbox WHERE session = $1", id, err) < 0) n = SB_EIO;
    if (n >= 0 && (rc = sb_pg_exec(s->db, "COMMIT", err))) n = rc;
    if (n < 0) sb_pg_rollback(s->db);
    return n;
}

/* A delivered package's row goes with its session. */
static int pg_purge_where(rt_sessions *s, const char *column, double t, char *err) {
    char sql[96];
    snprintf(sql, sizeof sql, "DELETE FROM sb_sessions WHERE %s <= $1", column);
    int n = delete_where(s, sql, fnum(t).v, err);
    if (n >= 0 && run_ok(s, "DELETE FROM sb_handoff_outbox o WHERE delivered IS NOT NULL AND NOT EXISTS"
                            " (SELECT 1 FROM sb_sessions s WHERE s.id = o.session)", 0, NULL, err,
                         "deleting delivered hand-offs"))
        return SB_EIO;
    return n;
}

static int pg_erase(rt_sessions *s, const char *id, sb_bytes *callers, char *err) {
    const char *p[1] = { id };
    PGresult *r = run(s, "SELECT caller FROM sb_session_turns WHERE session = $1", 1, p, err, "reading a session");
    if (!r) return SB_EIO;
    int rc = 0;
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        const char *t = PQgetvalue(r, i, 0);
        if (sb_bytes_put(callers, t, strlen(t) + 1)) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    PQclear(r);
    return rc ? rc : erase_session(s, id, err);
}

/* Row i's texts and sealed values, as the shared matcher reads them;
 * values: the box's bytes, owned by the caller. */
static int store_row(PGresult *r, int i, rt_store_row *row, rt_blob *values) {
    memset(row, 0, sizeof *row);
    row->id = PQgetvalue(r, i, 0);
    for (int col = 1; col <= 3; col++) {
        row->text[col - 1] = PQgetisnull(r, i, col) ? NULL : PQgetvalue(r, i, col);
        row->len[col - 1] = (size_t)PQgetlength(r, i, col);
    }
    if (PQgetisnull(r, i, 4)) return 0;
    int rc = bytea_value(PQgetvalue(r, i, 4), values);
    row->values = values->p;
    row->values_len = values->len;
    return rc;
}

static int pg_erase_matching(rt_sessions *s, rt_row_match_fn match, void *arg, char *err) {
    PGresult *r = run(s, "SELECT id, intent, slots, awaiting, values_box FROM sb_sessions UNION ALL"
                         " SELECT session, caller, reply, NULL, NULL FROM sb_session_turns ORDER BY 1", 0, NULL, err,
                      "reading the sessions");
    if (!r) return SB_EIO;
    int deleted = 0, rc = 0;
    const char *last = "";      /* ordered by id: a session matching in several rows is deleted once */
    for (int i = 0; rc >= 0 && i < PQntuples(r); i++) {
        rt_store_row row;
        rt_blob values = { 0 };
        bool hit = false;
        if (!strcmp(PQgetvalue(r, i, 0), last)) continue;
        rc = store_row(r, i, &row, &values);
        if (rc) rc = sb_seterr(err, rc, "out of memory");
        else rc = match(s, &row, arg, &hit, err);
        rt_blob_free(&values);
        if (rc || !hit) continue;
        last = row.id;
        if ((rc = erase_session(s, row.id, err)) > 0) deleted += rc;
    }
    PQclear(r);
    return rc < 0 ? rc : deleted;
}

/* Nothing of a deleted row is left for a router to wipe: the server's
 * vacuum reclaims it, and its WAL is the server's. */
static int pg_checkpoint(rt_sessions *s, char *err) { return 0; }

/* ------------------------------------------------------------- hand-off */

/* A package is taken by one router at a time: the rows are locked (SKIP
 * LOCKED: another router takes the next ones) and their next try moved a
 * minute on, so a router that dies while delivering leaves them to be tried
 * again - at least once, the receiver dropping repeats by idempotency key. */
/* A due item from row i: body's bytes as stored (a sealed box is opened
 * by rt_handoff_due). 0 or SB_ENOMEM. */
static int due_item(PGresult *r, int i, rt_handoff_item *it) {
    memset(it, 0, sizeof *it);
    snprintf(it->session, sizeof it->session, "%s", PQgetvalue(r, i, 0));
    it->url = sb_strdup(PQgetvalue(r, i, 1));
    it->attempts = atoi(PQgetvalue(r, i, 3));
    it->sealed = PQgetvalue(r, i, 4)[0] == 't';
    it->ca_file = PQgetisnull(r, i, 5) ? NULL : sb_strdup(PQgetvalue(r, i, 5));
    rt_blob body = { 0 };
    if (it->sealed) {
        if (bytea_value(PQgetvalue(r, i, 2), &body)) body.p = NULL;
    } else if ((body.p = (uint8_t *)sb_strdup(PQgetvalue(r, i, 2)))) {
        body.len = strlen((char *)body.p);
    }
    it->body = (char *)body.p;
    it->body_len = body.len;
    return !it->url || !it->body || (!PQgetisnull(r, i, 5) && !it->ca_file) ? SB_ENOMEM : 0;
}

static int pg_handoff_due(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err) {
    num at = fnum(now), later = fnum(now + 60), lim = inum(max);
    const char *p[3] = { at.v, lim.v, later.v };
    PGresult *r = run(s, "UPDATE sb_handoff_outbox SET next_at = $3 WHERE session IN (SELECT session FROM"
                         " sb_handoff_outbox WHERE next_at <= $1 AND delivered IS NULL ORDER BY next_at LIMIT $2"
                         " FOR UPDATE SKIP LOCKED) RETURNING session, url, body, attempts, sealed, ca_file", 3, p,
                      err, "reading the hand-off outbox");
    if (!r) return SB_EIO;
    int n = 0, rc = 0;
    for (; !rc && n < max && n < PQntuples(r); n++) rc = due_item(r, n, &items[n]);
    PQclear(r);
    if (rc) {
        rt_handoff_items_free(items, n);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    return n;
}

/* The row stays, without its package (the receiver has it), so the
 * console can say it was delivered; it goes with its session. */
static int pg_handoff_delivered(rt_sessions *s, const char *id, char *err) {
    const char *p[1] = { id };
    return run_ok(s, "UPDATE sb_handoff_outbox SET body = '', sealed = false, delivered = extract(epoch from now()),"
                     " attempts = attempts + 1, last_error = NULL WHERE session = $1", 1, p, err,
                  "marking a hand-off delivered");
}

static const char *val(PGresult *r, int i, int col) { return PQgetisnull(r, i, col) ? NULL : PQgetvalue(r, i, col); }

static int pg_handoff_list(rt_sessions *s, int max, sb_jw *w, char *err) {
    num lim = inum(max);
    const char *p[1] = { lim.v };
    PGresult *r = run(s, "SELECT o.session, s.pipeline, s.intent, o.reason, o.url, o.created, o.attempts, o.next_at,"
                         " o.delivered, o.last_error FROM sb_handoff_outbox o LEFT JOIN sb_sessions s"
                         " ON s.id = o.session ORDER BY o.created DESC LIMIT $1", 1, p, err,
                      "reading the hand-off outbox");
    if (!r) return SB_EIO;
    for (int i = 0; i < PQntuples(r); i++) {
        rt_handoff_row row = {
            .session = val(r, i, 0), .pipeline = val(r, i, 1), .intent = val(r, i, 2), .reason = val(r, i, 3),
            .url = val(r, i, 4), .created = atof(PQgetvalue(r, i, 5)), .attempts = atoi(PQgetvalue(r, i, 6)),
            .next_at = atof(PQgetvalue(r, i, 7)), .is_delivered = !PQgetisnull(r, i, 8),
            .delivered = atof(PQgetvalue(r, i, 8)), .last_error = val(r, i, 9),
        };
        rt_handoff_row_json(w, &row);
    }
    PQclear(r);
    return 0;
}

static int pg_handoff_retry(rt_sessions *s, const char *id, double next_at, const char *why, char *err) {
    num at = fnum(next_at);
    const char *p[3] = { id, at.v, why };
    return run_ok(s, "UPDATE sb_handoff_outbox SET attempts = attempts + 1, next_at = $2, last_error = $3"
                     " WHERE session = $1", 3, p, err, "rescheduling a hand-off");
}

static const rt_session_store pg_store = {
    .close = pg_close, .load = pg_load, .transcript_json = pg_transcript_json, .commit = pg_commit,
    .remove = pg_delete, .purge_where = pg_purge_where, .erase = pg_erase, .erase_matching = pg_erase_matching,
    .checkpoint = pg_checkpoint, .handoff_due = pg_handoff_due, .handoff_delivered = pg_handoff_delivered,
    .handoff_retry = pg_handoff_retry, .handoff_list = pg_handoff_list,
};
