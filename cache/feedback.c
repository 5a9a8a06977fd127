/* feedback.c - operators' corrections of routed calls, in their own SQLite
 * file (console.feedback_path, default RUNTIME_DIR/feedback.sqlite).
 *
 * Its own file rather than a table in the response cache: the cache is
 * optional, may be purged or vacuumed by `switchboard cache`, and syncs
 * with the cloud; corrections are a small, precious, local record. Writes
 * come from the router's loop at a supervisor's click rate, so one
 * connection and plain statements suffice.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/sb_common.h"
#include "cache/sb_feedback.h"

struct sb_feedback {
    sqlite3 *db;
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS feedback ("
    " call_id TEXT PRIMARY KEY, time INTEGER NOT NULL, pipeline TEXT NOT NULL,"
    " predicted TEXT, intent TEXT NOT NULL, utterance TEXT NOT NULL)";

static int db_err(sb_feedback *f, int code, const char *what, char *err) {
    return sb_seterr(err, code, "feedback database: %s: %s", what, f && f->db ? sqlite3_errmsg(f->db) : "no handle");
}

int sb_feedback_open(const char *path, bool create, sb_feedback **out, char *err) {
    *out = NULL;
    /* Created here, 0600, before SQLite sees it: SQLite would use the
     * umask, and its -wal/-shm files copy the database file's mode. */
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
    if (fd < 0)
        return sb_seterr(err, errno == ENOENT ? SB_ENOTFOUND : SB_EIO, "feedback database %s: %s", path,
                         strerror(errno));
    close(fd);
    sb_feedback *f = sb_calloc(1, sizeof *f);
    if (!f) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = SB_EIO;
    if (sqlite3_open_v2(path, &f->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        db_err(f, rc, path, err);
        goto fail;
    }
    sqlite3_busy_timeout(f->db, 2000);
    if (sqlite3_exec(f->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(f->db, schema, NULL, NULL, NULL) != SQLITE_OK) {
        rc = sqlite3_errcode(f->db) == SQLITE_NOTADB ? SB_EFORMAT : SB_EIO;
        db_err(f, rc, path, err);
        goto fail;
    }
    *out = f;
    return 0;
fail:
    sb_feedback_close(f);
    return rc;
}

void sb_feedback_close(sb_feedback *f) {
    if (!f) return;
    sqlite3_close(f->db);
    sb_free(f);
}

int sb_feedback_put(sb_feedback *f, const sb_feedback_row *row, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(f->db,
                           "INSERT OR REPLACE INTO feedback (call_id, time, pipeline, predicted, intent, utterance)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6)", -1, &st, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "insert", err);
    sqlite3_bind_text(st, 1, row->call_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, row->time);
    sqlite3_bind_text(st, 3, row->pipeline, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, row->predicted, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, row->intent, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, row->utterance, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_err(f, SB_EIO, "insert", err);
    sqlite3_finalize(st);
    return rc;
}

int sb_feedback_tsv(sb_feedback *f, const char *pipeline, sb_feedback_out_fn out, void *arg, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(f->db,
                           "SELECT intent, utterance FROM feedback WHERE ?1 IS NULL OR pipeline = ?1"
                           " ORDER BY time, rowid", -1, &st, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "select", err);
    sqlite3_bind_text(st, 1, pipeline, -1, SQLITE_STATIC);
    int rc = 0, s;
    while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *label = (const char *)sqlite3_column_text(st, 0);
        const char *u = (const char *)sqlite3_column_text(st, 1);
        size_t ln = strlen(label ? label : ""), un = strlen(u ? u : "");
        char *line = sb_malloc(ln + un + 3);
        if (!line) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); break; }
        memcpy(line, label ? label : "", ln);
        line[ln] = '\t';
        /* One example per line, two columns: the reader splits on the first tab. */
        for (size_t i = 0; i < un; i++) line[ln + 1 + i] = u[i] == '\t' || u[i] == '\n' || u[i] == '\r' ? ' ' : u[i];
        line[ln + 1 + un] = '\n';
        rc = out(arg, line, ln + un + 2);
        sb_free(line);
    }
    if (!rc && s != SQLITE_DONE) rc = db_err(f, SB_EIO, "select", err);
    sqlite3_finalize(st);
    return rc;
}

int sb_feedback_confusion(sb_feedback *f, sb_feedback_pair_fn fn, void *arg, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(f->db,
                           "SELECT pipeline, predicted, intent, count(*) AS n FROM feedback"
                           " GROUP BY pipeline, predicted, intent ORDER BY n DESC LIMIT 100", -1, &st, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "select", err);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        fn(arg, (const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1),
           (const char *)sqlite3_column_text(st, 2), sqlite3_column_int64(st, 3));
    int rc = s == SQLITE_DONE ? 0 : db_err(f, SB_EIO, "select", err);
    sqlite3_finalize(st);
    return rc;
}
