/* sessions_store.c - the sessions' store API (router_internal.h) over the
 * store that sessions.store names: a SQLite file (sessions.c), or a
 * PostgreSQL database the routers of one site share (sessions_pg.c), so
 * that any of them can take a conversation's next turn. Each call goes
 * through the store's table (sessions_store.h).
 */
#include <string.h>

#include "router/sessions_store.h"

bool rt_sessions_store_is_pg(const char *store) {
    if (!store) return false;
    if (!strncmp(store, "postgresql://", 13) || !strncmp(store, "postgres://", 11)) return true;
    /* A key=value conninfo ("host=db1 dbname=sb sslmode=verify-full"); a
     * file name has no '=' before its first space. */
    const char *eq = strchr(store, '='), *sp = strchr(store, ' ');
    return eq && store[0] != '/' && (!sp || eq < sp);
}

int rt_sessions_open(const char *store, rt_sessions **out, char *err) {
    return rt_sessions_store_is_pg(store) ? rt_sessions_pg_open(store, out, err)
                                          : rt_sessions_sqlite_open(store, out, err);
}

void rt_sessions_close(rt_sessions *s) {
    if (!s) return;
    if (s->db) s->store->close(s);
    sb_free(s->busy);
    sb_free(s->path);
    sb_free(s);
}

/* A store fills out from the row (its copies may have failed); what it
 * gave and the expiry are judged here, once for every store. */
int rt_session_load(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, char *err) {
    int rc = s->store->load(s, id, owner, now, out, err);
    if (rc) return rc;
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

int rt_session_transcript_json(rt_sessions *s, const char *id, sb_jw *w, char *err) {
    return s->store->transcript_json(s, id, w, err);
}

int rt_session_commit(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply,
                      double now, char *err) {
    return s->store->commit(s, ss, ttl_s, caller, reply, now, err);
}

int rt_session_delete(rt_sessions *s, const char *id, char *err) { return s->store->remove(s, id, err); }

int rt_sessions_sweep(rt_sessions *s, double now, char *err) { return s->store->purge_where(s, "expires", now, err); }

int rt_sessions_purge_before(rt_sessions *s, double before, char *err) {
    return s->store->purge_where(s, "updated", before, err);
}

int rt_session_erase(rt_sessions *s, const char *id, sb_bytes *callers, char *err) {
    return s->store->erase(s, id, callers, err);
}

int rt_sessions_erase_matching(rt_sessions *s, rt_text_match_fn match, void *arg, char *err) {
    return s->store->erase_matching(s, match, arg, err);
}

int rt_sessions_checkpoint(rt_sessions *s, char *err) { return s->store->checkpoint(s, err); }

int rt_handoff_due(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err) {
    return s->store->handoff_due(s, now, items, max, err);
}

int rt_handoff_delivered(rt_sessions *s, const char *id, char *err) {
    return s->store->handoff_delivered(s, id, err);
}

int rt_handoff_retry(rt_sessions *s, const char *id, double next_at, const char *why, char *err) {
    return s->store->handoff_retry(s, id, next_at, why, err);
}
