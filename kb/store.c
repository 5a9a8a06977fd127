/* store.c - a knowledge base's SQLite file (sb_kb.h has the layout).
 *
 * Durability: WAL + synchronous=NORMAL, as the cache: a committed add
 * survives the process being killed at any instant; a power cut may lose
 * the last adds (re-run them) but never corrupts the file. Each source is
 * replaced in one BEGIN IMMEDIATE transaction, so readers and a kill -9 see
 * the whole old version or the whole new one.
 */
#include "kb/kb_internal.h"
#include "cache/sb_cache.h"           /* sb_sha256, sb_hex_encode */

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUSY_MS 5000            /* a reader waits this long for a writer's commit */

struct kb_store {
    sqlite3 *db;
    char *path;
    int64_t vec_version;        /* data_version the cache was loaded at; -1 = stale */
    int64_t ver_version;        /* data_version `version` was computed at; -1 = stale */
    char version[65];
    int64_t *ids;
    float *vecs;
    size_t n_vecs;
};

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS docs(id INTEGER PRIMARY KEY, source TEXT NOT NULL UNIQUE, sha256 TEXT NOT NULL,"
    "  bytes INTEGER NOT NULL, chunking TEXT NOT NULL, added_s INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS chunks(id INTEGER PRIMARY KEY, doc_id INTEGER NOT NULL REFERENCES docs(id),"
    "  pos INTEGER NOT NULL, section TEXT NOT NULL, text TEXT NOT NULL, n_tokens INTEGER NOT NULL,"
    "  vec BLOB NOT NULL);"
    "CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id, pos);";

static int db_fail(kb_store *s, int rc, char *err, const char *what) {
    return sb_seterr(err, rc == SQLITE_NOMEM ? SB_ENOMEM : rc == SQLITE_BUSY ? SB_EBUSY : SB_EIO, "%s: %s: %s",
                     s->path, what, sqlite3_errmsg(s->db));
}

static int exec(kb_store *s, const char *sql, char *err) {
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(s, rc, err, sql);
}

/* The base holds the agency's text: owner-only (0600), whatever the umask.
 * SQLite gives -wal/-shm the database's mode, so creating the database 0600
 * ourselves covers them; an existing file with group/other bits is
 * narrowed (the cache does the same, cache/cache.c). */
static int make_private(const char *path, int create, char *err) {
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    /* Creating, ENOENT can only be the folder: telling the caller to run
     * the very `kb add` that failed would send them in a circle. */
    if (fd < 0 && errno == ENOENT && create)
        return sb_seterr(err, SB_ENOTFOUND, "%s: the folder it goes in does not exist (create it, or point "
                         "the knowledge base's path: elsewhere)", path);
    if (fd < 0 && errno == ENOENT) return sb_seterr(err, SB_ENOTFOUND, "%s: no such knowledge base "
                                                    "(create it with `switchboard kb add`)", path);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & 077) && st.st_uid == geteuid() && fchmod(fd, st.st_mode & 0700))
        sb_warn("kb %s: chmod: %s", path, strerror(errno));
    close(fd);
    return 0;
}

int kb_store_open(const char *path, int create, int readonly, kb_store **out, char *err) {
    *out = NULL;
    int rc = readonly ? 0 : make_private(path, create, err);
    if (rc) return rc;
    if (readonly && access(path, R_OK))
        return sb_seterr(err, SB_ENOTFOUND, "%s: %s", path, strerror(errno));
    kb_store *s = sb_calloc(1, sizeof *s);
    if (!s || !(s->path = sb_strdup(path))) {
        sb_free(s);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    s->vec_version = s->ver_version = -1;
    int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX;
    if ((rc = sqlite3_open_v2(path, &s->db, flags, NULL)) != SQLITE_OK) {
        rc = db_fail(s, rc, err, "open");
        kb_store_close(s);
        return rc;
    }
    sqlite3_busy_timeout(s->db, BUSY_MS);
    if (!readonly && ((rc = exec(s, "PRAGMA journal_mode = WAL", err)) ||
                      (rc = exec(s, "PRAGMA synchronous = NORMAL", err)) || (rc = exec(s, schema, err)))) {
        kb_store_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void kb_store_close(kb_store *s) {
    if (!s) return;
    sqlite3_close(s->db);
    sb_free(s->ids);
    sb_free(s->vecs);
    sb_free(s->path);
    sb_free(s);
}

static int prepare(kb_store *s, const char *sql, sqlite3_stmt **st, char *err) {
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(s, rc, err, "prepare");
}

int kb_store_get_meta(kb_store *s, int *dim, char *embed_id, size_t cap, sb_kb_fts *fts, char *err) {
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT key, value FROM meta", &st, err), seen = 0;
    if (rc) return rc;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0), *v = (const char *)sqlite3_column_text(st, 1);
        if (!strcmp(k, "dim")) *dim = atoi(v), seen |= 1;
        else if (!strcmp(k, "embed_id")) snprintf(embed_id, cap, "%s", v), seen |= 2;
        else if (!strcmp(k, "fts") && kb_fts_parse(v) >= 0) *fts = (sb_kb_fts)kb_fts_parse(v), seen |= 4;
    }
    rc = sqlite3_finalize(st);
    if (rc != SQLITE_OK) return db_fail(s, rc, err, "reading meta");
    return seen == 7 ? 0 : SB_ENOTFOUND;
}

int kb_store_set_meta(kb_store *s, int dim, const char *embed_id, sb_kb_fts fts, char *err) {
    char sql[512];
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    snprintf(sql, sizeof sql, "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, section, tokenize = '%s')",
             kb_fts_tokenizer(fts));
    sqlite3_stmt *st = NULL;
    if (!(rc = exec(s, sql, err)) &&
        !(rc = prepare(s, "INSERT OR REPLACE INTO meta VALUES('dim', ?1), ('embed_id', ?2), ('fts', ?3)", &st, err))) {
        sqlite3_bind_int(st, 1, dim);
        sqlite3_bind_text(st, 2, embed_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, kb_fts_name(fts), -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) rc = db_fail(s, sqlite3_errcode(s->db), err, "writing meta");
    }
    sqlite3_finalize(st);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    s->ver_version = -1;
    return rc;
}

int kb_store_doc_state(kb_store *s, const char *source, char sha[65], char chunking[32], int *found, char *err) {
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT sha256, chunking FROM docs WHERE source = ?1", &st, err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, source, -1, SQLITE_STATIC);
    *found = sqlite3_step(st) == SQLITE_ROW;
    if (*found) {
        snprintf(sha, 65, "%s", (const char *)sqlite3_column_text(st, 0));
        snprintf(chunking, 32, "%s", (const char *)sqlite3_column_text(st, 1));
    }
    rc = sqlite3_finalize(st);
    return rc == SQLITE_OK ? 0 : db_fail(s, rc, err, "reading docs");
}

/* Delete a document's chunks and FTS rows, and the docs row. */
static int delete_doc(kb_store *s, int64_t doc, char *err) {
    static const char *const sql[] = {
        "DELETE FROM fts WHERE rowid IN (SELECT id FROM chunks WHERE doc_id = ?1)",
        "DELETE FROM chunks WHERE doc_id = ?1",
        "DELETE FROM docs WHERE id = ?1",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(sql); i++) {
        sqlite3_stmt *st;
        int rc = prepare(s, sql[i], &st, err);
        if (rc) return rc;
        sqlite3_bind_int64(st, 1, doc);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s, sqlite3_errcode(s->db), err, "deleting chunks");
        sqlite3_finalize(st);
        if (rc) return rc;
    }
    return 0;
}

static int64_t doc_id(kb_store *s, const char *source) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM docs WHERE source = ?1", -1, &st, NULL) != SQLITE_OK) return -1;
    sqlite3_bind_text(st, 1, source, -1, SQLITE_STATIC);
    int64_t id = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return id;
}

static int insert_chunks(kb_store *s, int64_t doc, const sb_kb_chunk *c, size_t n, const float *vecs, int dim,
                         sb_kb_fts fts, char *err) {
    sqlite3_stmt *ci = NULL, *fi = NULL;
    int rc = prepare(s, "INSERT INTO chunks(doc_id, pos, section, text, n_tokens, vec) VALUES(?1,?2,?3,?4,?5,?6)",
                     &ci, err);
    if (!rc) rc = prepare(s, "INSERT INTO fts(rowid, body, section) VALUES(?1, ?2, ?3)", &fi, err);
    for (size_t i = 0; i < n && !rc; i++) {
        sqlite3_reset(ci);
        sqlite3_bind_int64(ci, 1, doc);
        sqlite3_bind_int(ci, 2, c[i].position);
        sqlite3_bind_text(ci, 3, c[i].section, -1, SQLITE_STATIC);
        sqlite3_bind_text(ci, 4, c[i].text, -1, SQLITE_STATIC);
        sqlite3_bind_int(ci, 5, c[i].n_tokens);
        sqlite3_bind_blob(ci, 6, vecs + i * (size_t)dim, dim * (int)sizeof(float), SQLITE_STATIC);
        if (sqlite3_step(ci) != SQLITE_DONE) { rc = db_fail(s, sqlite3_errcode(s->db), err, "storing a chunk"); break; }
        char *body = kb_fts_index_text(fts, c[i].text, strlen(c[i].text));
        char *sec = kb_fts_index_text(fts, c[i].section, strlen(c[i].section));
        if (!body || !sec) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
        sqlite3_reset(fi);
        sqlite3_bind_int64(fi, 1, sqlite3_last_insert_rowid(s->db));
        sqlite3_bind_text(fi, 2, body, -1, SQLITE_STATIC);
        sqlite3_bind_text(fi, 3, sec, -1, SQLITE_STATIC);
        if (!rc && sqlite3_step(fi) != SQLITE_DONE) rc = db_fail(s, sqlite3_errcode(s->db), err, "indexing a chunk");
        sb_free(body);
        sb_free(sec);
    }
    sqlite3_finalize(ci);
    sqlite3_finalize(fi);
    return rc;
}

int kb_store_replace(kb_store *s, const char *source, const char *sha, int64_t bytes, const char *chunking,
                     const sb_kb_chunk *c, size_t n, const float *vecs, int dim, sb_kb_fts fts, int *replaced,
                     char *err) {
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    int64_t old = doc_id(s, source);
    *replaced = old > 0;
    if (old < 0) rc = db_fail(s, sqlite3_errcode(s->db), err, "reading docs");
    if (!rc && old > 0) rc = delete_doc(s, old, err);
    sqlite3_stmt *st = NULL;
    if (!rc && !(rc = prepare(s, "INSERT INTO docs(source, sha256, bytes, chunking, added_s) VALUES(?1,?2,?3,?4,?5)",
                              &st, err))) {
        sqlite3_bind_text(st, 1, source, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, sha, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, bytes);
        sqlite3_bind_text(st, 4, chunking, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, (int64_t)time(NULL));
        if (sqlite3_step(st) != SQLITE_DONE) rc = db_fail(s, sqlite3_errcode(s->db), err, "storing the document");
    }
    sqlite3_finalize(st);
    if (!rc) rc = insert_chunks(s, sqlite3_last_insert_rowid(s->db), c, n, vecs, dim, fts, err);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    s->vec_version = s->ver_version = -1;       /* data_version ignores our own writes */
    return rc;
}

int kb_store_remove(kb_store *s, const char *source, char *err) {
    int rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    int64_t id = doc_id(s, source);
    if (id < 0) rc = db_fail(s, sqlite3_errcode(s->db), err, "reading docs");
    else if (id == 0) rc = sb_seterr(err, SB_ENOTFOUND, "%s: no source '%s' in this knowledge base", s->path, source);
    else rc = delete_doc(s, id, err);
    if (!rc) rc = exec(s, "COMMIT", err);
    if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    s->vec_version = s->ver_version = -1;
    return rc;
}

int kb_store_list(kb_store *s, sb_kb_doc **out, size_t *n, char *err) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT d.source, d.bytes, d.added_s, d.sha256, count(c.id), coalesce(sum(c.n_tokens), 0) "
                        "FROM docs d LEFT JOIN chunks c ON c.doc_id = d.id GROUP BY d.id ORDER BY d.source", &st, err);
    if (rc) return rc;
    size_t cap = 0;
    while (!rc && sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            sb_kb_doc *v = sb_realloc(*out, cap * sizeof *v);
            if (!v) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); break; }
            *out = v;
        }
        sb_kb_doc *d = &(*out)[(*n)++];
        *d = (sb_kb_doc){ .bytes = sqlite3_column_int64(st, 1), .added_s = sqlite3_column_int64(st, 2),
                          .n_chunks = sqlite3_column_int(st, 4), .n_tokens = sqlite3_column_int(st, 5) };
        d->source = sb_strdup((const char *)sqlite3_column_text(st, 0));
        d->sha256 = sb_strdup((const char *)sqlite3_column_text(st, 3));
        if (!d->source || !d->sha256) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if (sqlite3_finalize(st) != SQLITE_OK && !rc) rc = db_fail(s, sqlite3_errcode(s->db), err, "listing");
    if (rc) { sb_kb_docs_free(*out, *n); *out = NULL; *n = 0; }
    return rc;
}

int kb_store_stats(kb_store *s, sb_kb_stats *out, char *err) {
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT (SELECT count(*) FROM docs), count(*), coalesce(sum(n_tokens), 0) FROM chunks",
                     &st, err);
    if (rc) return rc;
    if (sqlite3_step(st) == SQLITE_ROW) {
        out->n_docs = sqlite3_column_int64(st, 0);
        out->n_chunks = sqlite3_column_int64(st, 1);
        out->n_tokens = sqlite3_column_int64(st, 2);
    }
    rc = sqlite3_finalize(st) == SQLITE_OK ? 0 : db_fail(s, sqlite3_errcode(s->db), err, "stats");
    struct stat fst;
    out->file_bytes = stat(s->path, &fst) ? 0 : (int64_t)fst.st_size;
    return rc;
}

int kb_store_bm25(kb_store *s, const char *match, int limit, int64_t *ids, double *scores, size_t *n, char *err) {
    *n = 0;
    if (!*match) return 0;
    sqlite3_stmt *st;
    /* The body counts twice the heading: a heading word is in every chunk
     * of its section, so it tells them apart less. */
    int rc = prepare(s, "SELECT rowid, -bm25(fts, 1.0, 0.5) FROM fts WHERE fts MATCH ?1 "
                        "ORDER BY bm25(fts, 1.0, 0.5) LIMIT ?2", &st, err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, match, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, limit);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        ids[*n] = sqlite3_column_int64(st, 0);
        scores[(*n)++] = sqlite3_column_double(st, 1);
    }
    rc = rc == SQLITE_DONE ? 0 : db_fail(s, rc, err, "full-text search");
    sqlite3_finalize(st);
    return rc;
}

static int64_t data_version(kb_store *s) {
    sqlite3_stmt *st;
    int64_t v = -1;
    if (sqlite3_prepare_v2(s->db, "PRAGMA data_version", -1, &st, NULL) != SQLITE_OK) return -1;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int kb_store_vectors(kb_store *s, int dim, const int64_t **ids, const float **vecs, size_t *n, char *err) {
    int64_t v = data_version(s);
    if (v < 0 || v != s->vec_version) {
        sqlite3_stmt *st;
        int rc = prepare(s, "SELECT id, vec FROM chunks", &st, err);
        if (rc) return rc;
        size_t cap = 0, k = 0;
        int64_t *vi = NULL;
        float *vf = NULL;
        while (!rc && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            rc = 0;
            if (sqlite3_column_bytes(st, 1) != dim * (int)sizeof(float)) continue;  /* not this model's */
            if (k == cap) {
                cap = cap ? cap * 2 : 1024;
                int64_t *ni = sb_realloc(vi, cap * sizeof *ni);
                if (ni) vi = ni;
                float *nf = ni ? sb_realloc(vf, cap * (size_t)dim * sizeof *nf) : NULL;
                if (!nf) { rc = SB_ENOMEM; break; }
                vf = nf;
            }
            vi[k] = sqlite3_column_int64(st, 0);
            memcpy(vf + k * (size_t)dim, sqlite3_column_blob(st, 1), (size_t)dim * sizeof(float));
            k++;
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) {
            sb_free(vi);
            sb_free(vf);
            return rc == SB_ENOMEM ? sb_seterr(err, rc, "out of memory") : db_fail(s, rc, err, "reading vectors");
        }
        sb_free(s->ids);
        sb_free(s->vecs);
        s->ids = vi;
        s->vecs = vf;
        s->n_vecs = k;
        s->vec_version = v;
    }
    *ids = s->ids;
    *vecs = s->vecs;
    *n = s->n_vecs;
    return 0;
}

int kb_store_fetch(kb_store *s, sb_kb_hit *h, char *err) {
    sqlite3_stmt *st;
    int rc = prepare(s, "SELECT d.source, c.section, c.text, c.pos FROM chunks c JOIN docs d ON d.id = c.doc_id "
                        "WHERE c.id = ?1", &st, err);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, h->id);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        h->source = sb_strdup((const char *)sqlite3_column_text(st, 0));
        h->section = sb_strdup((const char *)sqlite3_column_text(st, 1));
        h->text = sb_strdup((const char *)sqlite3_column_text(st, 2));
        h->position = sqlite3_column_int(st, 3);
        rc = h->source && h->section && h->text ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    } else {
        rc = sb_seterr(err, SB_ENOTFOUND, "%s: chunk %lld vanished (removed meanwhile)", s->path, (long long)h->id);
    }
    sqlite3_finalize(st);
    return rc;
}

/* The content version: SHA-256 over the meta rows (embedder, dimension,
 * tokenizer) and every source's name, SHA-256 and chunking, in a fixed
 * order - what the chunks and vectors are a function of. Recomputed only
 * when the file changed (data_version, or our own write). */
int kb_store_version(kb_store *s, char out[65], char *err) {
    int64_t v = data_version(s);
    if (v < 0 || v != s->ver_version) {
        static const char *const sql[2] = { "SELECT key, value, '' FROM meta ORDER BY key",
                                            "SELECT source, sha256, chunking FROM docs ORDER BY source" };
        sb_sha256_ctx h;
        sb_sha256_init(&h);
        int rc = 0;
        for (int q = 0; !rc && q < 2; q++) {
            sqlite3_stmt *st;
            if ((rc = prepare(s, sql[q], &st, err))) break;
            while ((rc = sqlite3_step(st)) == SQLITE_ROW)
                for (int c = 0; c < 3; c++)     /* each field with its NUL: no two rows hash alike */
                    sb_sha256_update(&h, sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c) + 1);
            rc = rc == SQLITE_DONE ? 0 : db_fail(s, rc, err, "reading the version");
            sqlite3_finalize(st);
        }
        uint8_t d[SB_SHA256_LEN];
        if (rc) { sb_sha256_discard(&h); return rc; }
        sb_sha256_final(&h, d);
        sb_hex_encode(d, sizeof d, s->version);
        s->ver_version = v;
    }
    memcpy(out, s->version, 65);
    return 0;
}

int64_t kb_store_data_version(kb_store *s) {
    return data_version(s);
}

int kb_store_snapshot(kb_store *s, const char *path, char *err) {
    sqlite3_stmt *st;
    int rc = prepare(s, "VACUUM INTO ?1", &st, err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s, sqlite3_errcode(s->db), err, "snapshot (VACUUM INTO)");
    sqlite3_finalize(st);
    return rc;
}

/* The backup API copies every page of src over this base under one write
 * transaction: readers (the router) see the old content or the new, a kill
 * -9 rolls back to the old, and in WAL mode the copy stays WAL. */
int kb_store_restore(kb_store *s, const char *src, char *err) {
    sqlite3 *from = NULL;
    int rc = sqlite3_open_v2(src, &from, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    sqlite3_backup *b = rc == SQLITE_OK ? sqlite3_backup_init(s->db, "main", from, "main") : NULL;
    if (!b) {
        rc = sb_seterr(err, SB_EIO, "%s: restoring from %s: %s", s->path, src,
                       from ? sqlite3_errmsg(rc == SQLITE_OK ? s->db : from) : "out of memory");
        sqlite3_close(from);
        return rc;
    }
    double t0 = sb_now_s();
    while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_BUSY || rc == SQLITE_LOCKED) {
        if (sb_now_s() - t0 > BUSY_MS / 1000.0) break;      /* a writer holds the base: give up, as a writer would */
        sqlite3_sleep(20);
    }
    int done = rc == SQLITE_DONE;
    rc = sqlite3_backup_finish(b);
    int r = done && rc == SQLITE_OK ? 0 : db_fail(s, done ? rc : sqlite3_errcode(s->db), err, "restoring a snapshot");
    sqlite3_close(from);
    s->vec_version = s->ver_version = -1;
    return r;
}
