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
#include "common/sb_json.h"
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
    /* secure_delete: a purged row's words are overwritten, not left in a free page. */
    if (sqlite3_exec(f->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(f->db, "PRAGMA secure_delete = ON", NULL, NULL, NULL) != SQLITE_OK ||
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

int sb_feedback_purge_before(sb_feedback *f, int64_t before, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(f->db, "DELETE FROM feedback WHERE time < ?1", -1, &st, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "purge", err);
    sqlite3_bind_int64(st, 1, before);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_err(f, SB_EIO, "purge", err);
    sqlite3_finalize(st);
    int n = rc ? 0 : sqlite3_changes(f->db);
    /* Until a checkpoint the WAL still holds the frames that wrote the rows. */
    if (!rc && n && sqlite3_exec(f->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK)
        rc = db_err(f, SB_EIO, "checkpoint", err);
    return rc ? rc : n;
}

int sb_feedback_erase(sb_feedback *f, const char *call_id, sb_feedback_match_fn match, void *arg, char *err) {
    sqlite3_stmt *sel, *del;
    if (sqlite3_prepare_v2(f->db, "SELECT call_id, utterance FROM feedback", -1, &sel, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "erase", err);
    if (sqlite3_prepare_v2(f->db, "DELETE FROM feedback WHERE call_id = ?1", -1, &del, NULL) != SQLITE_OK) {
        sqlite3_finalize(sel);
        return db_err(f, SB_EIO, "erase", err);
    }
    /* Deleting the rows a SELECT is on is defined in SQLite only for the
     * current one; inside one transaction it is both atomic and safe. */
    int rc = sqlite3_exec(f->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : db_err(f, SB_EIO, "erase", err);
    int n = 0, step = SQLITE_DONE;
    while (!rc && (step = sqlite3_step(sel)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(sel, 0), *u = (const char *)sqlite3_column_text(sel, 1);
        bool hit = (call_id && id && !strcmp(id, call_id)) ||
                   (match && u && match(arg, u, (size_t)sqlite3_column_bytes(sel, 1)));
        if (!hit) continue;
        sqlite3_bind_text(del, 1, id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(del) != SQLITE_DONE) rc = db_err(f, SB_EIO, "erase", err);
        sqlite3_reset(del);
        n++;
    }
    if (!rc && step != SQLITE_DONE) rc = db_err(f, SB_EIO, "erase", err);
    sqlite3_finalize(sel);
    sqlite3_finalize(del);
    if (rc) {
        sqlite3_exec(f->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    if (sqlite3_exec(f->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) return db_err(f, SB_EIO, "erase", err);
    if (n && sqlite3_exec(f->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "checkpoint", err);
    return n;
}

/* Bytes of a line break at s (0: none): what some reader of the TSV splits
 * lines on - ASCII's (Python's str.splitlines adds \v \f and the file,
 * group and record separators) and Unicode's NEL, LINE and PARAGRAPH
 * SEPARATOR. A tab splits columns. */
static size_t line_break_at(const unsigned char *s) {
    if (*s == '\t' || *s == '\n' || *s == '\r' || *s == '\v' || *s == '\f' || (*s >= 0x1c && *s <= 0x1e)) return 1;
    if (s[0] == 0xc2 && s[1] == 0x85) return 2;                                    /* U+0085 */
    if (s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9)) return 3;  /* U+2028, U+2029 */
    return 0;
}

/* The caller's words as one TSV cell: line breaks and tabs become spaces,
 * and a cell a spreadsheet would take for a formula (=, +, -, @ first)
 * gets a leading ', as OWASP advises for CSV exports: the file is meant to
 * be opened by people too, and its words are a stranger's. */
static void put_cell(sb_jw *w, const char *u) {
    const unsigned char *p = (const unsigned char *)u;
    if (*p == '=' || *p == '+' || *p == '-' || *p == '@') sb_jw_raw(w, "'", 1);
    while (*p) {
        size_t n = line_break_at(p);
        if (n) { sb_jw_raw(w, " ", 1); p += n; continue; }
        sb_jw_raw(w, p++, 1);
    }
}

int sb_feedback_tsv(sb_feedback *f, const char *pipeline, sb_feedback_out_fn out, void *arg, char *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(f->db,
                           "SELECT intent, utterance FROM feedback WHERE ?1 IS NULL OR pipeline = ?1"
                           " ORDER BY time, rowid", -1, &st, NULL) != SQLITE_OK)
        return db_err(f, SB_EIO, "select", err);
    sqlite3_bind_text(st, 1, pipeline, -1, SQLITE_STATIC);
    sb_jw line;
    sb_jw_init(&line);
    int rc = 0, s;
    while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *label = (const char *)sqlite3_column_text(st, 0);
        const char *u = (const char *)sqlite3_column_text(st, 1);
        sb_jw_reset(&line);
        /* The label is a name from the config (checked when marked); the
         * words are the caller's. One example per line, two columns. */
        sb_jw_raw(&line, label ? label : "", strlen(label ? label : ""));
        sb_jw_raw(&line, "\t", 1);
        put_cell(&line, u ? u : "");
        sb_jw_raw(&line, "\n", 1);
        if (line.oom) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); break; }
        rc = out(arg, line.p, line.len);
    }
    if (!rc && s != SQLITE_DONE) rc = db_err(f, SB_EIO, "select", err);
    sb_jw_free(&line);
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
