/* cloud_store.c - the cloud tier's PostgreSQL store (docs/cache-sync.md).
 *
 * Ordering: every change (an uploaded entry, a hit-count delta, a purge)
 * takes the next value of one counter, sb_meta.version, and stamps the row
 * with it. The counter is a row updated under SELECT ... FOR UPDATE in the
 * same transaction, not a sequence: sequences hand out numbers outside
 * transactions, so an edge could read cursor 12 while the transaction that
 * took 11 has not committed yet, and then miss it forever. With the row lock
 * a change's version is visible exactly when it commits, in order, and an
 * edge's cursor ("everything up to version N") is exact. It also serialises
 * syncs, which is fine at a fleet's sync rate and keeps replicas correct.
 */
#include "cache/cloud/cloud_internal.h"

#include "common/sb_pg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sbc_store {
    PGconn *pg;
    int64_t last_purge_s;
    char erase_key[SB_CACHE_KEY_HEX];   /* "" without an admin token: no erasure can be made */
    sb_privacy *det;                    /* finds erased values in entries */
    int64_t n_edges;                    /* configured: erasures wait for all of them */
    sb_jw edge_ids;                     /* their ids as a PostgreSQL array literal */
};

static const char schema_sql[] =
    "SELECT pg_advisory_xact_lock(7220151);"
    "CREATE TABLE IF NOT EXISTS sb_meta(id int PRIMARY KEY CHECK (id = 1),"
    "  version bigint NOT NULL, schema_version int NOT NULL);"
    "INSERT INTO sb_meta VALUES (1, 0, 1) ON CONFLICT DO NOTHING;"
    "CREATE TABLE IF NOT EXISTS sb_entries(key text PRIMARY KEY, ns text, fingerprint text,"
    "  input text, params text, response bytea, created_ms bigint, ttl_s bigint NOT NULL DEFAULT 0,"
    "  global_hits bigint NOT NULL DEFAULT 0, deleted boolean NOT NULL DEFAULT false,"
    "  deleted_ms bigint, version bigint NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sb_entries_version ON sb_entries(version);"
    "CREATE TABLE IF NOT EXISTS sb_syncs(edge_id text NOT NULL, sync_id text NOT NULL,"
    "  applied_ms bigint NOT NULL, PRIMARY KEY (edge_id, sync_id));"
    "CREATE TABLE IF NOT EXISTS sb_seen(sig text PRIMARY KEY, ts bigint NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sb_seen_ts ON sb_seen(ts);"
    /* Erasures on their way to the edges (docs/PRIVACY.md, "Erasure"): a
     * value only as its keyed hash; kept until every edge's cursor passed. */
    "CREATE TABLE IF NOT EXISTS sb_erasures(version bigint PRIMARY KEY, kind text NOT NULL,"
    "  id text, mac text, digits int NOT NULL DEFAULT 0, at_ms bigint NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sb_edges(edge_id text PRIMARY KEY, cursor bigint NOT NULL);";

static PGresult *run(sbc_store *s, const char *sql, int n, const char *const *params, char *err,
                     const char *what) {
    return sb_pg_run(s->pg, sql, n, params, err, what);
}

static int exec_ok(sbc_store *s, const char *sql, char *err) { return sb_pg_exec(s->pg, sql, err); }

int sbc_store_open(const char *dsn, sbc_store **out, char *err) {
    *out = NULL;
    sbc_store *s = sb_calloc(1, sizeof *s);
    if (!s) return sb_seterr(err, SB_ENOMEM, "cloud: out of memory");
    int rc = sb_privacy_new(SB_PII_ALL, &s->det, err);
    if (!rc) rc = sb_pg_connect(dsn, &s->pg, err);
    if (!rc) rc = exec_ok(s, "BEGIN", err);
    if (!rc) rc = exec_ok(s, schema_sql, err);
    if (!rc) rc = exec_ok(s, "COMMIT", err);
    if (rc) { sbc_store_close(s); return rc; }
    *out = s;
    return SB_OK;
}

void sbc_store_close(sbc_store *s) {
    if (!s) return;
    if (s->pg) PQfinish(s->pg);
    sb_privacy_free(s->det);
    sb_jw_free(&s->edge_ids);
    sb_free(s);
}

int sbc_store_set_erasure(sbc_store *s, const char *admin_token, const char *const *edge_ids, size_t n_edges) {
    s->n_edges = (int64_t)n_edges;
    sb_jw_free(&s->edge_ids);
    sb_jw_raw(&s->edge_ids, "{", 1);
    for (size_t i = 0; i < n_edges; i++) {
        sb_jw_raw(&s->edge_ids, i ? ",\"" : "\"", i ? 2 : 1);
        for (const char *c = edge_ids[i]; *c; c++) {
            if (*c == '"' || *c == '\\') sb_jw_raw(&s->edge_ids, "\\", 1);
            sb_jw_raw(&s->edge_ids, c, 1);
        }
        sb_jw_raw(&s->edge_ids, "\"", 1);
    }
    sb_jw_raw(&s->edge_ids, "}", 1);
    if (admin_token) sb_erase_key(admin_token, s->erase_key);
    else s->erase_key[0] = '\0';
    return s->edge_ids.oom ? SB_ENOMEM : SB_OK;
}

int sbc_store_remember_signature(sbc_store *s, const char *sig, int64_t ts, int *fresh, char *err) {
    char tsbuf[24], old[24];
    snprintf(tsbuf, sizeof tsbuf, "%lld", (long long)ts);
    *fresh = 0;
    if (ts - s->last_purge_s > 60) {
        snprintf(old, sizeof old, "%lld", (long long)(ts - 2 * SBC_MAX_SKEW_S));
        const char *p[1] = { old };
        PGresult *r = run(s, "DELETE FROM sb_seen WHERE ts < $1::bigint", 1, p, err, "forgetting signatures");
        if (!r) return SB_EIO;
        PQclear(r);
        s->last_purge_s = ts;
    }
    const char *p[2] = { sig, tsbuf };
    PGresult *r = run(s, "INSERT INTO sb_seen(sig, ts) VALUES ($1, $2::bigint) ON CONFLICT DO NOTHING",
                      2, p, err, "remembering a signature");
    if (!r) return SB_EIO;
    *fresh = atoi(PQcmdTuples(r)) == 1;
    PQclear(r);
    return SB_OK;
}

/* ------------------------------------------------------------ sync */

typedef struct { char v[24]; } num;
static num n2s(int64_t x) { num n; snprintf(n.v, sizeof n.v, "%lld", (long long)x); return n; }

static int valid_key(const char *k) {
    if (!k || strlen(k) != SB_CACHE_KEY_HEX - 1) return 0;
    for (const char *p = k; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return 1;
}

/* The values erased so far, each with when: an entry uploaded after an
 * erase but made before it (an edge that had not heard of it yet) holds
 * what was erased, and is not stored. */
typedef struct {
    sb_erase_matcher *m;
    int64_t *at_ms;
    size_t n;
} erased_values;

static void erased_free(erased_values *ev) {
    for (size_t i = 0; i < ev->n; i++) sb_erase_matcher_free(&ev->m[i]);
    sb_free(ev->m);
    sb_free(ev->at_ms);
    memset(ev, 0, sizeof *ev);
}

static int erased_load(sbc_store *s, erased_values *ev, char *err) {
    memset(ev, 0, sizeof *ev);
    if (!s->erase_key[0]) return SB_OK;
    PGresult *r = run(s, "SELECT mac, digits, at_ms FROM sb_erasures WHERE kind = 'value'", 0, NULL, err,
                      "reading erasures");
    if (!r) return SB_EIO;
    int rows = PQntuples(r);
    ev->m = sb_calloc((size_t)rows + 1, sizeof *ev->m);
    ev->at_ms = sb_calloc((size_t)rows + 1, sizeof *ev->at_ms);
    for (int i = 0; ev->m && ev->at_ms && i < rows; i++)
        if (!sb_erase_matcher_init(&ev->m[ev->n], s->det, s->erase_key, PQgetvalue(r, i, 0),
                                   atoll(PQgetvalue(r, i, 1)), err))
            ev->at_ms[ev->n++] = atoll(PQgetvalue(r, i, 2));
    PQclear(r);
    if (!ev->m || !ev->at_ms) { erased_free(ev); return sb_seterr(err, SB_ENOMEM, "cloud: out of memory"); }
    return SB_OK;
}

static bool erased(erased_values *ev, int64_t created, const char *input, const uint8_t *resp, size_t n) {
    for (size_t i = 0; i < ev->n; i++)
        if (created < ev->at_ms[i] &&
            (sb_erase_matches(&ev->m[i], input, strlen(input)) || sb_erase_matches(&ev->m[i], (const char *)resp, n)))
            return true;
    return false;
}

/* An uploaded entry: fills a stub (deltas came first), or revives a purged
 * key only with an answer made after the purge - an edge that had not yet
 * heard of the purge must not bring the old answer back. */
static int apply_entry(sbc_store *s, const sb_json *e, erased_values *ev, int64_t *version, char *err) {
    const char *key, *ns, *fp, *input, *params, *b64;
    int64_t created = 0, ttl = 0;
    /* A bad entry is skipped, not fatal: failing the request would leave the
     * edge resending the same batch forever, and its other deltas unapplied. */
    if (sbc_json_str(e, "key", &key) || !valid_key(key) || sbc_json_str(e, "namespace", &ns) ||
        sbc_json_str(e, "fingerprint", &fp) || sbc_json_str(e, "input", &input) ||
        sbc_json_str(e, "params", &params) || sbc_json_str(e, "response_b64", &b64)) {
        sb_warn("sync: skipping an entry without key, namespace, fingerprint, input, params, "
                "response_b64");
        return SB_OK;
    }
    /* Any key version this build knows: an older edge's v1 entries are kept
     * for the older edges (reply_changes sends each edge only its versions). */
    uint8_t *bytes = NULL;
    size_t n = 0;
    if (!sb_cache_key_version(key, ns, fp, input, params) ||
        sbc_base64_decode(b64, strlen(b64), &bytes, &n)) {
        sb_warn("sync: skipping entry %.16s: key does not match its contents, or response_b64 "
                "is not base64", key);
        return SB_OK;
    }
    sbc_json_int(e, "created_ms", &created);
    sbc_json_int(e, "ttl_s", &ttl);
    bool gone = erased(ev, created, input, bytes, n);
    sb_free(bytes);
    if (gone) {
        sb_info("sync: an uploaded entry made before an erase holds the erased value: not stored");
        return SB_OK;
    }
    num v = n2s(++*version), c = n2s(created), t = n2s(ttl);
    const char *p[9] = { key, ns, fp, input, params, b64, c.v, t.v, v.v };
    PGresult *r = run(s,
        "INSERT INTO sb_entries(key, ns, fingerprint, input, params, response, created_ms, ttl_s,"
        " global_hits, version) VALUES ($1, $2, $3, $4, $5, decode($6, 'base64'), $7::bigint,"
        " $8::bigint, 0, $9::bigint)"
        " ON CONFLICT (key) DO UPDATE SET ns = EXCLUDED.ns, fingerprint = EXCLUDED.fingerprint,"
        " input = EXCLUDED.input, params = EXCLUDED.params, response = EXCLUDED.response,"
        " created_ms = EXCLUDED.created_ms, ttl_s = EXCLUDED.ttl_s,"
        " global_hits = CASE WHEN sb_entries.deleted THEN 0 ELSE sb_entries.global_hits END,"
        " deleted = false, deleted_ms = NULL, version = EXCLUDED.version"
        " WHERE (sb_entries.response IS NULL AND NOT sb_entries.deleted)"
        "    OR (sb_entries.deleted AND sb_entries.deleted_ms < EXCLUDED.created_ms)",
        9, p, err, "storing an entry");
    if (!r) return SB_EIO;
    PQclear(r);
    return SB_OK;
}

static int apply_delta(sbc_store *s, const sb_json *d, int64_t *version, char *err) {
    const char *key;
    int64_t delta = 0;
    if (sbc_json_str(d, "key", &key) || !valid_key(key) || sbc_json_int(d, "delta", &delta) ||
        delta <= 0 || delta > 1000000000)
        return SB_OK;           /* skipped, like a bad entry */
    num v = n2s(++*version), n = n2s(delta);
    const char *p[3] = { key, n.v, v.v };
    /* A key the cloud has no answer for yet gets a stub that counts; deltas
     * for a purged key are dropped (edges that had it delete it next sync). */
    PGresult *r = run(s,
        "INSERT INTO sb_entries(key, global_hits, version) VALUES ($1, $2::bigint, $3::bigint)"
        " ON CONFLICT (key) DO UPDATE SET global_hits = sb_entries.global_hits + EXCLUDED.global_hits,"
        " version = EXCLUDED.version WHERE NOT sb_entries.deleted",
        3, p, err, "adding a delta");
    if (!r) return SB_EIO;
    PQclear(r);
    return SB_OK;
}

/* The key versions an edge can use, as a bit mask (bit v = version v): its
 * "key_versions", or version 1 for an edge from before key versions. */
static unsigned edge_key_versions(const sb_json *req) {
    const sb_json *kv = sb_json_get(req, "key_versions");
    unsigned mask = 0;
    for (size_t i = 0; sb_json_type_of(kv) == SB_JSON_ARRAY && i < sb_json_len(kv); i++) {
        const sb_json *v = sb_json_at(kv, i);
        double n = trunc(sb_json_num(v));       /* the integral part, as the old reader kept */
        if (sb_json_type_of(v) == SB_JSON_NUMBER && n >= 1 && n <= SB_CACHE_KEY_VERSION) mask |= 1u << (int)n;
    }
    return kv ? mask : 1u << 1;
}

/* An entry the edge cannot use is left out but its version still moves the
 * cursor past it: an older edge never sees a newer key (it would refuse it,
 * one warning per entry), a newer one never stores a key it cannot look up. */
static int edge_can_use(PGresult *r, int i, unsigned versions) {
    int v = sb_cache_key_version(PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                                 PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
    return v && ((versions >> v) & 1u);
}

/* The entries and deletions part of a reply; returns the cursor it brings
 * the edge to. */
static int64_t reply_changes(PGresult *r, int limit, int64_t version, unsigned versions, sb_jw *out) {
    int rows = PQntuples(r), more = rows > limit;
    int64_t cursor = version;
    if (more) cursor = atoll(PQgetvalue(r, limit - 1, 9));
    sb_jw_rawf(out, "{\"entries\":[");
    int first = 1;
    for (int i = 0; i < rows && i < limit; i++) {
        if (PQgetvalue(r, i, 8)[0] == 't' || !edge_can_use(r, i, versions)) continue;
        if (!first) sb_jw_raw(out, ",", 1);
        first = 0;
        sb_jw_rawf(out, "{\"key\":\"%s\",\"namespace\":", PQgetvalue(r, i, 0));
        for (int col = 1; col <= 4; col++) {
            static const char *const names[] = { "", "namespace", "fingerprint", "input", "params" };
            if (col > 1) sb_jw_rawf(out, ",\"%s\":", names[col]);
            sb_jw_strn(out, PQgetvalue(r, i, col), (size_t)PQgetlength(r, i, col));
        }
        sb_jw_rawf(out, ",\"response_b64\":\"%s\",\"created_ms\":%s,\"ttl_s\":%s,"
                       "\"global_hits\":%s,\"origin\":\"cloud\",\"pinned\":true}",
                       PQgetvalue(r, i, 5), PQgetvalue(r, i, 6), PQgetvalue(r, i, 7),
                       PQgetvalue(r, i, 10));
    }
    sb_jw_rawf(out, "],\"deletions\":[");
    first = 1;
    for (int i = 0; i < rows && i < limit; i++) {
        if (PQgetvalue(r, i, 8)[0] != 't') continue;
        sb_jw_rawf(out, "%s\"%s\"", first ? "" : ",", PQgetvalue(r, i, 0));
        first = 0;
    }
    sb_jw_rawf(out, "]");
    return cursor;
}

/* The erasures the edge has not had, up to the cursor the reply brings it
 * to, with the key that finds an erased value (only when there is one). */
static int reply_erasures(sbc_store *s, int64_t from, int64_t to, sb_jw *out, char *err) {
    num f = n2s(from), t = n2s(to);
    const char *p[2] = { f.v, t.v };
    PGresult *r = run(s, "SELECT kind, coalesce(id, ''), coalesce(mac, ''), digits FROM sb_erasures"
                         " WHERE version > $1::bigint AND version <= $2::bigint ORDER BY version",
                      2, p, err, "reading erasures");
    if (!r) return SB_EIO;
    sb_jw_rawf(out, ",\"erasures\":[");
    for (int i = 0; i < PQntuples(r); i++) {
        sb_jw_rawf(out, "%s{\"kind\":", i ? "," : "");
        sb_jw_str(out, PQgetvalue(r, i, 0));
        if (PQgetvalue(r, i, 1)[0]) { sb_jw_rawf(out, ",\"id\":"); sb_jw_str(out, PQgetvalue(r, i, 1)); }
        if (PQgetvalue(r, i, 2)[0]) sb_jw_rawf(out, ",\"mac\":\"%s\",\"digits\":%s", PQgetvalue(r, i, 2), PQgetvalue(r, i, 3));
        sb_jw_rawf(out, "}");
    }
    sb_jw_rawf(out, "]");
    if (PQntuples(r) && s->erase_key[0]) sb_jw_rawf(out, ",\"erase_key\":\"%s\"", s->erase_key);
    PQclear(r);
    return SB_OK;
}

int sbc_store_sync(sbc_store *s, const char *edge_id, const sb_json *req, int64_t threshold,
                   sb_jw *reply, char *err) {
    const char *sync_id;
    int64_t cursor = 0, limit = 500;
    const sb_json *deltas = sb_json_get(req, "hit_deltas"), *entries = sb_json_get(req, "new_entries");
    if (sbc_json_str(req, "sync_id", &sync_id) || !*sync_id || strlen(sync_id) > 64 ||
        sbc_json_int(req, "cursor", &cursor) || cursor < 0 ||
        (deltas && sb_json_type_of(deltas) != SB_JSON_ARRAY) ||
        (entries && sb_json_type_of(entries) != SB_JSON_ARRAY))
        return sb_seterr(err, SB_EINVAL, "sync: needs sync_id, cursor >= 0, and arrays "
                         "hit_deltas / new_entries");
    sbc_json_int(req, "limit", &limit);
    if (limit < 1 || limit > 5000) limit = 500;
    if (exec_ok(s, "BEGIN", err)) return SB_EIO;
    int rc = SB_EIO, applied = 0;
    PGresult *r = run(s, "SELECT version FROM sb_meta WHERE id = 1 FOR UPDATE", 0, NULL, err, "locking");
    if (!r) goto fail;
    int64_t version = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    num now = n2s(sbc_now_ms());
    const char *p[3] = { edge_id, sync_id, now.v };
    /* The sync_id row makes re-applying a batch a no-op: a retried batch only
     * reads what changed since its cursor. */
    if (!(r = run(s, "INSERT INTO sb_syncs VALUES ($1, $2, $3::bigint) ON CONFLICT DO NOTHING",
                  3, p, err, "recording the sync"))) goto fail;
    applied = atoi(PQcmdTuples(r)) == 1;
    PQclear(r);
    if (applied) {
        erased_values ev = { 0 };
        if ((rc = sb_json_len(entries) ? erased_load(s, &ev, err) : SB_OK)) goto fail;
        for (size_t i = 0; !rc && i < sb_json_len(entries); i++)
            rc = apply_entry(s, sb_json_at(entries, i), &ev, &version, err);
        erased_free(&ev);
        if (rc) goto fail;
        for (size_t i = 0; i < sb_json_len(deltas); i++)
            if ((rc = apply_delta(s, sb_json_at(deltas, i), &version, err))) goto fail;
        num v = n2s(version);
        const char *pv[1] = { v.v };
        rc = SB_EIO;
        if (!(r = run(s, "UPDATE sb_meta SET version = $1::bigint WHERE id = 1", 1, pv, err,
                      "advancing the version"))) goto fail;
        PQclear(r);
    }
    num c = n2s(cursor), th = n2s(threshold), lim = n2s(limit + 1);
    const char *pq[3] = { c.v, th.v, lim.v };
    rc = SB_EIO;
    if (!(r = run(s,
        "SELECT key, coalesce(ns, ''), coalesce(fingerprint, ''), coalesce(input, ''),"
        " coalesce(params, ''), translate(encode(coalesce(response, ''::bytea), 'base64'), E'\\n', ''),"
        " coalesce(created_ms, 0), ttl_s, deleted, version, global_hits FROM sb_entries"
        " WHERE version > $1::bigint AND (deleted OR (response IS NOT NULL AND"
        " global_hits >= $2::bigint)) ORDER BY version LIMIT $3::bigint",
        3, pq, err, "reading changes"))) goto fail;
    int64_t to = reply_changes(r, (int)limit, version, edge_key_versions(req), reply);
    PQclear(r);
    if (reply_erasures(s, cursor, to, reply, err)) goto fail;
    sb_jw_rawf(reply, ",\"cursor\":%lld,\"more\":%s,\"applied\":%s}", (long long)to, to < version ? "true" : "false",
               applied ? "true" : "false");
    /* The edge applied everything up to its cursor: erasures every edge has
     * are forgotten (they hold hashes of what was erased). */
    const char *pe[2] = { edge_id, c.v };
    if (!(r = run(s, "INSERT INTO sb_edges VALUES ($1, $2::bigint) ON CONFLICT (edge_id) DO UPDATE"
                     " SET cursor = greatest(sb_edges.cursor, EXCLUDED.cursor)", 2, pe, err, "recording the cursor")))
        goto fail;
    PQclear(r);
    num ne = n2s(s->n_edges);
    const char *pn[2] = { ne.v, s->edge_ids.p ? s->edge_ids.p : "{}" };
    if (!(r = run(s, "DELETE FROM sb_erasures WHERE version <= (SELECT CASE WHEN count(*) >= $1::bigint"
                     " THEN min(cursor) ELSE 0 END FROM sb_edges WHERE edge_id = ANY($2::text[]))",
                  2, pn, err, "forgetting erasures")))
        goto fail;
    PQclear(r);
    if (exec_ok(s, "COMMIT", err)) { rc = SB_EIO; goto fail; }
    return reply->oom ? sb_seterr(err, SB_ENOMEM, "sync: out of memory") : SB_OK;
fail:
    sb_pg_rollback(s->pg);
    return rc;
}

/* A key made a tombstone at the next version, in the caller's transaction.
 * The input goes with the answer: it is the caller's words. */
static int tombstone(sbc_store *s, const char *key, int64_t *version, char *err) {
    num v = n2s(++*version), now = n2s(sbc_now_ms());
    const char *p[3] = { key, v.v, now.v };
    PGresult *r = run(s,
        "INSERT INTO sb_entries(key, deleted, deleted_ms, version) VALUES ($1, true, $3::bigint,"
        " $2::bigint) ON CONFLICT (key) DO UPDATE SET deleted = true, deleted_ms = EXCLUDED.deleted_ms,"
        " response = NULL, input = NULL, params = NULL, global_hits = 0, version = EXCLUDED.version",
        3, p, err, "purging");
    if (!r) return SB_EIO;
    PQclear(r);
    return SB_OK;
}

static int lock_version(sbc_store *s, int64_t *version, char *err) {
    if (exec_ok(s, "BEGIN", err)) return SB_EIO;
    PGresult *r = run(s, "SELECT version FROM sb_meta WHERE id = 1 FOR UPDATE", 0, NULL, err, "locking");
    if (!r) { sb_pg_rollback(s->pg); return SB_EIO; }
    *version = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return SB_OK;
}

/* The version moved to where the transaction's changes reached, committed. */
static int commit_version(sbc_store *s, int64_t version, char *err) {
    num v = n2s(version);
    const char *pv[1] = { v.v };
    PGresult *r = run(s, "UPDATE sb_meta SET version = $1::bigint WHERE id = 1", 1, pv, err, "advancing the version");
    if (!r) return SB_EIO;
    PQclear(r);
    return exec_ok(s, "COMMIT", err) ? SB_EIO : SB_OK;
}

/* The stored entries holding the erased value, made tombstones. */
static int tombstone_value(sbc_store *s, const char *mac, int64_t digits, int64_t *version, int64_t *n, char *err) {
    sb_erase_matcher m;
    if (sb_erase_matcher_init(&m, s->det, s->erase_key, mac, digits, err)) return SB_EINVAL;
    PGresult *r = run(s, "SELECT key, input, translate(encode(response, 'base64'), E'\\n', '') FROM sb_entries"
                         " WHERE NOT deleted AND response IS NOT NULL", 0, NULL, err, "reading entries");
    int rc = r ? SB_OK : SB_EIO;
    for (int i = 0; !rc && r && i < PQntuples(r); i++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        const char *b64 = PQgetvalue(r, i, 2), *input = PQgetvalue(r, i, 1);
        if (sbc_base64_decode(b64, strlen(b64), &bytes, &len)) continue;
        bool hit = sb_erase_matches(&m, input, strlen(input)) || sb_erase_matches(&m, (const char *)bytes, len);
        sb_free(bytes);
        if (hit && !(rc = tombstone(s, PQgetvalue(r, i, 0), version, err))) ++*n;
    }
    if (r) PQclear(r);
    sb_erase_matcher_free(&m);
    return rc;
}

int sbc_store_erase(sbc_store *s, const sbc_erasure *e, int64_t *version, int64_t *n_entries, char *err) {
    *n_entries = 0;
    if (!s->erase_key[0]) return sb_seterr(err, SB_EINVAL, "erase: no admin_token configured");
    for (size_t i = 0; i < e->n_keys; i++)
        if (!valid_key(e->keys[i])) return sb_seterr(err, SB_EINVAL, "erase: cache_keys[%zu] is not 64 hex digits", i);
    int rc = lock_version(s, version, err);
    for (size_t i = 0; !rc && i < e->n_keys; i++)
        if (!(rc = tombstone(s, e->keys[i], version, err))) ++*n_entries;
    if (!rc && e->mac) rc = tombstone_value(s, e->mac, e->digits, version, n_entries, err);
    num v = n2s(++*version), now = n2s(sbc_now_ms()), d = n2s(e->digits);
    const char *p[6] = { v.v, e->kind, e->id, e->mac, d.v, now.v };
    PGresult *r = rc ? NULL : run(s, "INSERT INTO sb_erasures VALUES ($1::bigint, $2, $3, $4, $5::int, $6::bigint)",
                                  6, p, err, "recording the erasure");
    if (!r && !rc) rc = SB_EIO;
    if (r) PQclear(r);
    if (!rc) rc = commit_version(s, *version, err);
    if (rc) sb_pg_rollback(s->pg);
    return rc;
}

int sbc_store_delete(sbc_store *s, const char *key, int64_t *version, char *err) {
    if (!valid_key(key)) return sb_seterr(err, SB_EINVAL, "purge: a key is 64 hex digits");
    if (lock_version(s, version, err)) return SB_EIO;
    if (tombstone(s, key, version, err) || commit_version(s, *version, err)) {
        sb_pg_rollback(s->pg);
        return SB_EIO;
    }
    return SB_OK;
}
