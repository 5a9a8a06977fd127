/* sessions_store.h - between the sessions' API (sessions_store.c, which
 * also seals and opens what every store keeps sealed) and the stores,
 * SQLite (sessions.c) and PostgreSQL (sessions_pg.c): what a store
 * implements, as a table of functions. Not an API: the router sees
 * router_internal.h's rt_session_* functions, which call through it.
 */
#ifndef SB_SESSIONS_STORE_H
#define SB_SESSIONS_STORE_H

#include "router/router_internal.h"

/* Bytes a store keeps as they come: a sealed box (a session's values, a
 * hand-off package), sb_malloc'ed; p NULL: none. Sealing and opening are
 * done once, above the stores (sessions_store.c), so every store keeps
 * the same boxes and none holds the key's work. */
typedef struct { uint8_t *p; size_t len; } rt_blob;

/* One row erase_matching shows the shared matcher: its session id, up to
 * three texts (NULL: none) and its sealed values (NULL: none). */
typedef struct {
    const char *id;
    const char *text[3];
    size_t len[3];
    const uint8_t *values;
    size_t values_len;
} rt_store_row;
/* Does row hold what is being erased: 0 with *hit, or < 0 (a box that does
 * not open: the erase cannot tell, and fails). */
typedef int (*rt_row_match_fn)(rt_sessions *s, const rt_store_row *row, void *arg, bool *hit, char *err);

/* One row of the console's hand-off list, as a store read it (NULL: none). */
typedef struct {
    const char *session, *pipeline, *intent, *reason, *url, *last_error;
    double created, next_at, delivered;
    bool is_delivered;
    int attempts;
} rt_handoff_row;

/* One entry per rt_session_* function that reads or writes rows; each has
 * that function's contract (router_internal.h), except:
 * - load fills out from the row whatever its expiry (rt_session_load
 *   judges it) and gives the row's values box as stored in *values;
 * - commit stores values (its p NULL: none) as the row's values box, and
 *   queues a hand-off package as rt_session_package makes it (sealed, or
 *   the text);
 * - handoff_due gives each body as stored (body_len bytes, sealed or not),
 *   rt_handoff_due opens it;
 * - erase_matching deletes the sessions for which match says hit, with
 *   their hand-off packages;
 * - handoff_list calls rt_handoff_row_json for each of its latest max rows,
 *   newest first.
 * purge_where deletes the sessions whose `column` (updated or expires:
 * ours, never a caller's) is <= t, with their turns and the emptied rows of
 * their delivered packages: how many, or < 0. erase deletes the session's
 * package too, delivered or not (an erase wins over a delivery); remove
 * does not (a caller who hung up does not). handoff_delivered keeps the row
 * with its package emptied, so the console can say it was delivered. */
typedef struct {
    void (*close)(rt_sessions *s);
    int (*load)(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, rt_blob *values,
                char *err);
    int (*transcript_json)(rt_sessions *s, const char *id, sb_jw *w, char *err);
    int (*commit)(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply, double now,
                  const rt_blob *values, char *err);
    int (*remove)(rt_sessions *s, const char *id, char *err);
    int (*purge_where)(rt_sessions *s, const char *column, double t, char *err);
    int (*erase)(rt_sessions *s, const char *id, sb_bytes *callers, char *err);
    int (*erase_matching)(rt_sessions *s, rt_row_match_fn match, void *arg, char *err);
    int (*checkpoint)(rt_sessions *s, char *err);
    int (*handoff_due)(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err);
    int (*handoff_delivered)(rt_sessions *s, const char *id, char *err);
    int (*handoff_retry)(rt_sessions *s, const char *id, double next_at, const char *why, char *err);
    int (*handoff_list)(rt_sessions *s, int max, sb_jw *w, char *err);
} rt_session_store;

struct rt_sessions {
    const rt_session_store *store;
    void *db;                       /* the store's connection: a sqlite3 *, a PGconn * */
    char *path;                     /* for messages: the file, or the database without its password */
    char (*busy)[RT_SESSION_ID_LEN + 1];    /* sessions with a turn in flight on this router */
    size_t n_busy, cap_busy;
    uint8_t key[SB_SEAL_KEY_LEN];   /* seals values and packages (runtime.secret_key_file) */
    bool has_key;
};

/* A sessions.store that names a PostgreSQL database (a postgresql:// or
 * postgres:// URI, or a key=value conninfo) rather than a file. */
bool rt_sessions_store_is_pg(const char *store);
int  rt_sessions_sqlite_open(const char *path, rt_sessions **out, char *err);
int  rt_sessions_pg_open(const char *conninfo, rt_sessions **out, char *err);
/* The hand-off package of ss, read through s inside the commit's
 * transaction, so its transcript has this turn: its JSON text into *text
 * (placeholders as stored: the answer's handoff). With sealed (the package
 * is queued) and the session's values, the package with the values put
 * back, sealed, into *sealed: the outbox keeps that instead of the text;
 * sealed->p NULL: keep the text. */
int  rt_session_package(rt_sessions *s, const rt_session *ss, char **text, rt_blob *sealed, char *err);
/* One element of the console's hand-off list (rt_handoff_list_json). */
void rt_handoff_row_json(sb_jw *w, const rt_handoff_row *row);
void rt_blob_free(rt_blob *b);

#endif
