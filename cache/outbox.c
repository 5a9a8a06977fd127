/* outbox.c - the local file's side of a cloud sync (docs/cache-sync.md):
 * steps 1 and 3 of a round, whose network step 2 is cache/sync/sync_edge.c.
 *
 *   1. In one transaction: take the pending batch from sync_outbox, or build
 *      a new one (hit-count deltas, new local entries, a fresh sync_id), zero
 *      the deltas it carries and store it. From here on the batch is owned by
 *      the outbox, so a kill at any later point loses nothing.
 *   3. In one transaction: apply the reply (entries, deletions), move the
 *      cursor, delete the outbox row. A kill before the commit leaves step 1's
 *      state, and the retry gets the same reply again (the cursor did not move).
 */
#include "cache/cache_internal.h"
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#define MAX_DELTAS_PER_BATCH   5000
#define MAX_ENTRIES_PER_BATCH  200

static int scalar(sb_cache *c, const char *sql, int64_t *out) {
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) { *out = sqlite3_column_int64(st, 0); rc = SQLITE_OK; }
        else if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

static int load_pending(sb_cache *c, sb_cache_batch *b, int *found) {
    sqlite3_stmt *st;
    *found = 0;
    int rc = sqlite3_prepare_v2(c->db, "SELECT sync_id, body FROM sync_outbox ORDER BY created_ms"
                                " LIMIT 1", -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        snprintf(b->sync_id, sizeof b->sync_id, "%s", (const char *)sqlite3_column_text(st, 0));
        sb_jw_raw(&b->body, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
        *found = 1;
        sb_json_doc *j = NULL;      /* only to report what the resent batch carries */
        if (b->body.p && sb_json_parse(b->body.p, b->body.len, &j, NULL) == SB_OK) {
            const sb_json *d = sb_json_get(sb_json_root(j), "hit_deltas");
            const sb_json *e = sb_json_get(sb_json_root(j), "new_entries");
            b->n_deltas += sb_json_type_of(d) == SB_JSON_ARRAY ? (int64_t)sb_json_len(d) : 0;
            b->n_entries += sb_json_type_of(e) == SB_JSON_ARRAY ? (int64_t)sb_json_len(e) : 0;
        }
        sb_json_doc_free(j);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Deltas first (cheap, and what the fleet-wide counts are made of). */
static int add_deltas(sb_cache *c, sb_cache_batch *b) {
    sqlite3_stmt *sel, *clr;
    int rc = sqlite3_prepare_v2(c->db, "SELECT id, key, dirty_hits FROM entries WHERE dirty_hits > 0"
                                " LIMIT ?1", -1, &sel, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_prepare_v2(c->db, "UPDATE entries SET dirty_hits = 0 WHERE id = ?1", -1, &clr, NULL);
    if (rc != SQLITE_OK) { sqlite3_finalize(sel); return rc; }
    sqlite3_bind_int(sel, 1, MAX_DELTAS_PER_BATCH + 1);
    sb_jw_rawf(&b->body, ",\"hit_deltas\":[");
    while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
        if (b->n_deltas == MAX_DELTAS_PER_BATCH) { b->more_local = 1; continue; }
        sb_jw_rawf(&b->body, "%s{\"key\":\"%s\",\"delta\":%lld}", b->n_deltas ? "," : "",
                       (const char *)sqlite3_column_text(sel, 1),
                       (long long)sqlite3_column_int64(sel, 2));
        sqlite3_bind_int64(clr, 1, sqlite3_column_int64(sel, 0));
        int r2 = sqlite3_step(clr);
        sqlite3_reset(clr);
        if (r2 != SQLITE_DONE) { rc = r2; break; }
        b->n_deltas++;
    }
    sb_jw_rawf(&b->body, "]");
    sqlite3_finalize(sel);
    sqlite3_finalize(clr);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int add_entries(sb_cache *c, const sb_cache_sync_opts *o, sb_cache_batch *b) {
    sb_jw_rawf(&b->body, ",\"new_entries\":[");
    if (o->no_upload) { sb_jw_rawf(&b->body, "]"); return SQLITE_OK; }
    sqlite3_stmt *sel, *mark;
    int rc = sqlite3_prepare_v2(c->db, "SELECT " SBC_ENTRY_COLUMNS ", id FROM entries"
                                " WHERE uploaded = 0 AND origin = 0 AND local_hits + 1 >= ?1"
                                " AND (ttl_s = 0 OR created_ms + ttl_s * 1000 > ?2) LIMIT ?3",
                                -1, &sel, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_prepare_v2(c->db, "UPDATE entries SET uploaded = 1 WHERE id = ?1", -1, &mark, NULL);
    if (rc != SQLITE_OK) { sqlite3_finalize(sel); return rc; }
    sqlite3_bind_int64(sel, 1, o->upload_min_asks > 0 ? o->upload_min_asks : 1);
    sqlite3_bind_int64(sel, 2, sbc_now_ms());
    sqlite3_bind_int(sel, 3, MAX_ENTRIES_PER_BATCH + 1);
    while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
        if (b->n_entries == MAX_ENTRIES_PER_BATCH) { b->more_local = 1; continue; }
        sb_cache_entry e;
        if (sbc_row_to_entry(sel, &e)) { rc = SQLITE_NOMEM; break; }
        if (b->n_entries) sb_jw_raw(&b->body, ",", 1);
        sbc_entry_json(&b->body, &e);
        sb_cache_entry_free(&e);
        sqlite3_bind_int64(mark, 1, sqlite3_column_int64(sel, 14));
        int r2 = sqlite3_step(mark);
        sqlite3_reset(mark);
        if (r2 != SQLITE_DONE) { rc = r2; break; }
        b->n_entries++;
    }
    sb_jw_rawf(&b->body, "]");
    sqlite3_finalize(sel);
    sqlite3_finalize(mark);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Step 1: the batch this round sends, stored before it leaves. */
static int take_batch(sb_cache *c, const sb_cache_sync_opts *o, sb_cache_batch *b, char *err) {
    int res = sbc_exec(c, "BEGIN IMMEDIATE", err), rc, found = 0;
    if (res) return res;
    if ((rc = load_pending(c, b, &found)) != SQLITE_OK) goto sqlfail;
    if (found) {
        b->resumed = 1;
        return sbc_exec(c, "COMMIT", err);
    }
    int64_t cursor = 0;
    if ((rc = scalar(c, "SELECT value FROM meta WHERE name = 'sync_cursor'", &cursor))) goto sqlfail;
    if (sbc_new_id(b->sync_id)) { sbc_exec(c, "ROLLBACK", NULL); return sb_seterr(err, SB_EIO, "getrandom failed"); }
    sb_jw_rawf(&b->body, "{\"edge_id\":");
    sb_jw_strn(&b->body, o->edge_id, strlen(o->edge_id));
    /* key_versions: the entries this edge can use; an older edge sends none
     * and the cloud then sends it only version 1 (docs/cache-sync.md). */
    sb_jw_rawf(&b->body, ",\"sync_id\":\"%s\",\"cursor\":%lld,\"limit\":%lld,\"key_versions\":[%d]",
                   b->sync_id, (long long)cursor, (long long)(o->page_limit > 0 ? o->page_limit : 500),
                   SB_CACHE_KEY_VERSION);
    if ((rc = add_deltas(c, b)) || (rc = add_entries(c, o, b))) goto sqlfail;
    sb_jw_rawf(&b->body, "}");
    if (b->body.oom) { sbc_exec(c, "ROLLBACK", NULL); return sb_seterr(err, SB_ENOMEM, "sync: out of memory"); }
    sqlite3_stmt *st;
    if ((rc = sqlite3_prepare_v2(c->db, "INSERT INTO sync_outbox(sync_id, body, created_ms)"
                                 " VALUES(?1, ?2, ?3)", -1, &st, NULL)) != SQLITE_OK) goto sqlfail;
    sqlite3_bind_text(st, 1, b->sync_id, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 2, b->body.p, b->body.len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, sbc_now_ms());
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) goto sqlfail;
    return sbc_exec(c, "COMMIT", err);
sqlfail:
    res = sbc_fail(c, rc, err, "sync: preparing the batch");
    sbc_exec(c, "ROLLBACK", NULL);
    return res;
}

static int exec_key(sb_cache *c, const char *sql, const char *key) {
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The entries that hold an erased value, deleted (docs/PRIVACY.md,
 * "Erasure"). The keys are gathered first: a statement reading the table
 * is not stepped while rows of it are deleted. */
static int erase_value(sb_cache *c, sb_erase_matcher *m, int64_t *n, char *err) {
    sqlite3_stmt *st;
    sb_bytes keys = { 0 };
    int rc = sqlite3_prepare_v2(c->db, "SELECT key, input, response FROM entries", -1, &st, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *input = (const char *)sqlite3_column_text(st, 1);
        const char *resp = sqlite3_column_blob(st, 2);
        if ((input && sb_erase_matches(m, input, (size_t)sqlite3_column_bytes(st, 1))) ||
            (resp && sb_erase_matches(m, resp, (size_t)sqlite3_column_bytes(st, 2))))
            if (sb_bytes_put(&keys, sqlite3_column_text(st, 0), SB_CACHE_KEY_HEX)) rc = SQLITE_NOMEM;
        if (rc == SQLITE_ROW) rc = SQLITE_OK;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
    sqlite3_finalize(st);
    for (size_t i = 0; rc == SQLITE_OK && i < keys.n; i += SB_CACHE_KEY_HEX, ++*n)
        rc = exec_key(c, "DELETE FROM entries WHERE key = ?1", keys.p + i);
    sb_free(keys.p);
    return rc == SQLITE_OK ? SB_OK : sbc_fail(c, rc, err, "sync: erasing a value");
}

/* A reply's erasures, as far as the cache is concerned: entries holding an
 * erased value go (an erased session's or call's entries come as
 * deletions, by key). The other stores are the caller's
 * (sb_cache_sync_opts.on_erasures). */
static int apply_erasures(sb_cache *c, const sb_json *erasures, const char *key, sb_cache_sync_result *res,
                          char *err) {
    sb_privacy *det = NULL;
    int rc = SB_OK;
    for (size_t i = 0; !rc && i < sb_json_len(erasures); i++) {
        const sb_json *e = sb_json_at(erasures, i);
        const char *kind = NULL, *mac = NULL;
        int64_t digits = 0;
        res->erasures_received++;
        if (sbc_json_str(e, "kind", &kind) || strcmp(kind, "value")) continue;
        sb_erase_matcher m;
        char why[SB_ERR_LEN];
        sbc_json_int(e, "digits", &digits);
        if (!det && (rc = sb_privacy_new(SB_PII_ALL, &det, err))) break;
        if (sbc_json_str(e, "mac", &mac) || sb_erase_matcher_init(&m, det, key ? key : "", mac, digits, why)) {
            sb_warn("sync: skipping an erasure the cache cannot read: %s", mac ? why : "no mac");
            continue;
        }
        rc = erase_value(c, &m, &res->erased_entries, err);
        sb_erase_matcher_free(&m);
    }
    sb_privacy_free(det);
    return rc;
}

/* Step 3: the reply, its cursor and the end of the batch, all or nothing. */
static int apply_reply(sb_cache *c, const sb_cache_batch *b, const sb_json *reply, sb_cache_sync_result *res,
                       int *more, char *err) {
    int64_t cursor = 0;
    const sb_json *entries = sb_json_get(reply, "entries"), *deletions = sb_json_get(reply, "deletions"),
                  *erasures = sb_json_get(reply, "erasures");
    if (sbc_json_int(reply, "cursor", &cursor) || (entries && sb_json_type_of(entries) != SB_JSON_ARRAY) ||
        (deletions && sb_json_type_of(deletions) != SB_JSON_ARRAY) ||
        (erasures && sb_json_type_of(erasures) != SB_JSON_ARRAY))
        return sb_seterr(err, SB_EFORMAT, "sync: reply has no cursor or malformed lists");
    *more = sb_json_bool(sb_json_get(reply, "more"));
    int r = sbc_exec(c, "BEGIN IMMEDIATE", err), rc = SQLITE_OK;
    if (r) return r;
    int64_t pending = 0;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM sync_outbox WHERE sync_id = '%s'", b->sync_id);
    if ((rc = scalar(c, sql, &pending))) goto sqlfail;
    if (!pending) {             /* another process applied this batch meanwhile */
        *more = 1;
        return sbc_exec(c, "COMMIT", err);
    }
    int64_t older = 0;
    for (size_t i = 0; i < sb_json_len(entries); i++) {
        sb_cache_entry ent;
        char why[SB_ERR_LEN];
        int bad = sbc_entry_from_json(sb_json_at(entries, i), &ent, why);
        if (bad == SB_EUNSUP) { older++; continue; }    /* an older cloud passes every version on */
        if (bad) { sb_warn("sync: skipping an entry: %s", why); continue; }
        r = sbc_upsert_entry(c, &ent, 1, err);
        sb_cache_entry_free(&ent);
        if (r) { sbc_exec(c, "ROLLBACK", NULL); return r; }
        res->entries_received++;
    }
    for (size_t i = 0; i < sb_json_len(deletions); i++) {
        const char *key = sb_json_str(sb_json_at(deletions, i));
        if (!key) continue;
        if ((rc = exec_key(c, "DELETE FROM entries WHERE key = ?1", key))) goto sqlfail;
        res->deletions_received++;
    }
    if ((r = apply_erasures(c, erasures, sb_json_str(sb_json_get(reply, "erase_key")), res, err))) {
        sbc_exec(c, "ROLLBACK", NULL);
        return r;
    }
    if (older) sb_info("sync: %lld entries under an older key version not stored", (long long)older);
    snprintf(sql, sizeof sql, "UPDATE meta SET value = max(value, %lld) WHERE name = 'sync_cursor'",
             (long long)cursor);
    if ((r = sbc_exec(c, sql, err))) { sbc_exec(c, "ROLLBACK", NULL); return r; }
    if ((rc = exec_key(c, "DELETE FROM sync_outbox WHERE sync_id = ?1", b->sync_id))) goto sqlfail;
    if ((r = sbc_evict(c, err)) || (r = sbc_exec(c, "COMMIT", err))) {
        sbc_exec(c, "ROLLBACK", NULL);
        return r;
    }
    res->cursor = SB_MAX(res->cursor, cursor);
    return SB_OK;
sqlfail:
    r = sbc_fail(c, rc, err, "sync: applying the reply");
    sbc_exec(c, "ROLLBACK", NULL);
    return r;
}

int sb_cache_outbox_take(sb_cache *c, const sb_cache_sync_opts *o, sb_cache_batch *b, char *err) {
    memset(b, 0, sizeof *b);
    if (c->read_only) return sbc_fail(c, SQLITE_READONLY, err, "sync");
    pthread_mutex_lock(&c->lock);
    int rc = take_batch(c, o, b, err);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int sb_cache_outbox_apply(sb_cache *c, const sb_cache_batch *b, const sb_json *reply,
                          sb_cache_sync_result *res, int *more, char *err) {
    pthread_mutex_lock(&c->lock);
    int64_t erasures = res->erasures_received;
    int rc = apply_reply(c, b, reply, res, more, err);
    pthread_mutex_unlock(&c->lock);
    /* An erase leaves no copy of what it deleted in free pages or the WAL. */
    if (!rc && res->erasures_received > erasures) rc = sb_cache_vacuum(c, err);
    return rc;
}

void sb_cache_outbox_drop(sb_cache *c, const char *sync_id) {
    pthread_mutex_lock(&c->lock);
    if (exec_key(c, "DELETE FROM sync_outbox WHERE sync_id = ?1", sync_id))
        sbc_fail(c, sqlite3_errcode(c->db), NULL, "sync: dropping a batch");
    pthread_mutex_unlock(&c->lock);
}
