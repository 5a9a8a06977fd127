/* sessions_store.h - between the sessions' API (sessions.c, which is also
 * the SQLite store) and the other store, PostgreSQL (sessions_pg.c): what a
 * store implements, as a table of functions. Not an API: the router sees
 * router_internal.h's rt_session_* functions, which call through it.
 */
#ifndef SB_SESSIONS_STORE_H
#define SB_SESSIONS_STORE_H

#include "router/router_internal.h"

/* One entry per rt_session_* function that reads or writes rows; each has
 * that function's contract (router_internal.h), except that load fills out
 * from the row whatever its expiry (rt_session_load judges it). purge_where
 * deletes the sessions whose `column` (updated or expires: ours, never a
 * caller's) is <= t, with their turns: how many, or < 0. */
typedef struct {
    void (*close)(rt_sessions *s);
    int (*load)(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, char *err);
    int (*transcript_json)(rt_sessions *s, const char *id, sb_jw *w, char *err);
    int (*commit)(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply, double now,
                  char *err);
    int (*remove)(rt_sessions *s, const char *id, char *err);
    int (*purge_where)(rt_sessions *s, const char *column, double t, char *err);
    int (*erase)(rt_sessions *s, const char *id, sb_bytes *callers, char *err);
    int (*erase_matching)(rt_sessions *s, rt_text_match_fn match, void *arg, char *err);
    int (*checkpoint)(rt_sessions *s, char *err);
    int (*handoff_due)(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err);
    int (*handoff_delivered)(rt_sessions *s, const char *id, char *err);
    int (*handoff_retry)(rt_sessions *s, const char *id, double next_at, const char *why, char *err);
} rt_session_store;

struct rt_sessions {
    const rt_session_store *store;
    void *db;                       /* the store's connection: a sqlite3 *, a PGconn * */
    char *path;                     /* for messages: the file, or the database without its password */
    char (*busy)[RT_SESSION_ID_LEN + 1];    /* sessions with a turn in flight on this router */
    size_t n_busy, cap_busy;
};

/* A sessions.store that names a PostgreSQL database (a postgresql:// or
 * postgres:// URI, or a key=value conninfo) rather than a file. */
bool rt_sessions_store_is_pg(const char *store);
int  rt_sessions_sqlite_open(const char *path, rt_sessions **out, char *err);
int  rt_sessions_pg_open(const char *conninfo, rt_sessions **out, char *err);
/* The hand-off package of ss (JSON text into *out), read through s inside
 * the commit's transaction, so its transcript has this turn. */
int  rt_session_package(rt_sessions *s, const rt_session *ss, char **out, char *err);

#endif
