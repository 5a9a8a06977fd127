/* sessions_store.c - the sessions' store API (router_internal.h) over the
 * store that sessions.store names: a SQLite file (sessions.c), or a
 * PostgreSQL database the routers of one site share (sessions_pg.c), so
 * that any of them can take a conversation's next turn. Each call goes
 * through the store's table (sessions_store.h).
 *
 * What every store shares is here, once: the views of a session (its JSON,
 * the hand-off package) and the sealing. Under a privacy policy the words
 * a store keeps are placeholders (⟨PHONE_1⟩), and the values behind them -
 * which later turns restore into replies and reveal to tools - are kept
 * only sealed (AES-256-GCM, cache/seal.c, with the site's
 * runtime.secret_key_file), bound to their session and place by the
 * associated data "<id>/values": a box copied into another session's row
 * does not open. A hand-off package, which carries the real values to the
 * person who takes the call, is sealed the same way ("<id>/handoff") until
 * it is delivered. A store only moves the boxes; none sees the key.
 */
#include <stdio.h>
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
    explicit_bzero(s->key, sizeof s->key);
    sb_free(s->busy);
    sb_free(s->path);
    sb_free(s);
}

void rt_sessions_set_key(rt_sessions *s, const uint8_t key[SB_SEAL_KEY_LEN]) {
    memcpy(s->key, key, sizeof s->key);
    s->has_key = true;
}

void rt_blob_free(rt_blob *b) {
    sb_free(b->p);
    b->p = NULL;
    b->len = 0;
}

/* ---------------------------------------------------------------- sealing */

/* What a box of session id holds (values or a hand-off package): the
 * associated data, so a box opens only in its own session and place. */
static void box_aad(char *aad, size_t n, const char *id, const char *what) { snprintf(aad, n, "%s/%s", id, what); }

static int seal_text(rt_sessions *s, const char *id, const char *what, const char *text, size_t len, rt_blob *box,
                     char *err) {
    box->p = NULL;
    if (!s->has_key)
        return sb_seterr(err, SB_EINVAL, "sessions %s: session %s keeps callers' values, and no "
                         "runtime.secret_key_file is set to seal them", s->path, id);
    char aad[RT_SESSION_ID_LEN + 16];
    box_aad(aad, sizeof aad, id, what);
    if (!(box->p = sb_malloc(len + SB_SEAL_OVERHEAD))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = sb_seal(s->key, aad, strlen(aad), text, len, box->p);
    if (rc) {
        rt_blob_free(box);
        return sb_seterr(err, rc, "session %s: sealing its %s failed", id, what);
    }
    box->len = len + SB_SEAL_OVERHEAD;
    return 0;
}

/* The text in a box, NUL-terminated and sb_malloc'ed. A box that does not
 * open is SB_EINVAL naming the likely cause: it never crashes a turn or
 * leaks a byte of the box. */
static int open_box(rt_sessions *s, const char *id, const char *what, const uint8_t *box, size_t len, char **text,
                    char *err) {
    *text = NULL;
    if (!s->has_key)
        return sb_seterr(err, SB_EINVAL, "session %s: its %s are sealed, and no runtime.secret_key_file is set "
                         "to open them", id, what);
    if (len < SB_SEAL_OVERHEAD) return sb_seterr(err, SB_EINVAL, "session %s: its sealed %s are cut short", id, what);
    if (!(*text = sb_malloc(len - SB_SEAL_OVERHEAD + 1))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    char aad[RT_SESSION_ID_LEN + 16];
    box_aad(aad, sizeof aad, id, what);
    if (sb_unseal(s->key, aad, strlen(aad), box, len, (uint8_t *)*text)) {
        sb_free(*text);
        *text = NULL;
        return sb_seterr(err, SB_EINVAL, "session %s: its sealed %s do not open with runtime.secret_key_file "
                         "(a different key than the one that sealed them, or the store was altered)", id, what);
    }
    (*text)[len - SB_SEAL_OVERHEAD] = '\0';
    return 0;
}

/* The session's values from their box into ss->values. */
static int load_values(rt_sessions *s, rt_session *ss, const rt_blob *box, char *err) {
    char *json;
    int rc = open_box(s, ss->id, "values", box->p, box->len, &json, err);
    if (rc) return rc;
    rc = sb_pii_table_load(json, strlen(json), &ss->values, err);
    explicit_bzero(json, strlen(json));
    sb_free(json);
    return rc;
}

/* The values a commit seals: the call's table, else those loaded. */
static const sb_pii_table *values_of(const rt_session *ss) {
    return ss->seal ? ss->seal : ss->values.n ? &ss->values : NULL;
}

static int seal_values(rt_sessions *s, const rt_session *ss, rt_blob *box, char *err) {
    const sb_pii_table *values = values_of(ss);
    if (!values) return 0;
    char *json;
    size_t n;
    if (sb_pii_table_save(values, &json, &n)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = seal_text(s, ss->id, "values", json, n, box, err);
    explicit_bzero(json, n);
    sb_free(json);
    return rc;
}

/* An erase by value: the row's texts, then its sealed values, opened. A
 * box this key cannot open fails the erase: it cannot tell. */
typedef struct { rt_text_match_fn match; void *arg; } text_match;

static int row_matches(rt_sessions *s, const rt_store_row *row, void *arg, bool *hit, char *err) {
    const text_match *m = arg;
    *hit = false;
    for (int i = 0; i < 3 && !*hit; i++) *hit = row->text[i] && m->match(m->arg, row->text[i], row->len[i]);
    if (*hit || !row->values) return 0;
    char *json;
    int rc = open_box(s, row->id, "values", row->values, row->values_len, &json, err);
    if (rc) return rc;
    *hit = m->match(m->arg, json, strlen(json));
    explicit_bzero(json, strlen(json));
    sb_free(json);
    return 0;
}

/* ---------------------------------------------------------------- views */

/* A JSON text as a value of w (stored JSON is ours; unreadable is null). */
static void json_text(sb_jw *w, const char *text) {
    sb_json_doc *d;
    if (!text || sb_json_parse(text, strlen(text), &d, NULL)) { sb_jw_null(w); return; }
    sb_jw_value(w, sb_json_root(d));
    sb_json_doc_free(d);
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


/* With values, the receiver gets them put back in (the person who takes
 * the call needs the real number), and the package waits in the outbox
 * sealed. */
int rt_session_package(rt_sessions *s, const rt_session *ss, char **text, rt_blob *sealed, char *err) {
    int rc = package_text(s, ss, text, err);
    const sb_pii_table *values = values_of(ss);
    if (sealed) sealed->p = NULL;
    if (rc || !sealed || !values) return rc;
    char *real = NULL;
    size_t n = 0;
    if (sb_privacy_restore(values, *text, strlen(*text), false, &real, &n))
        rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    else
        rc = seal_text(s, ss->id, "handoff", real, n, sealed, err);
    if (real) explicit_bzero(real, n);
    sb_free(real);
    if (rc) {
        sb_free(*text);
        *text = NULL;
    }
    return rc;
}

/* ---------------------------------------------------------------- the API over the store */

/* A store fills out from the row (its copies may have failed); what it
 * gave and the expiry are judged here, once for every store, and its
 * values opened. */
int rt_session_load(rt_sessions *s, const char *id, const char *owner, double now, rt_session *out, char *err) {
    rt_blob values = { 0 };
    int rc = s->store->load(s, id, owner, now, out, &values, err);
    if (!rc && values.p) rc = load_values(s, out, &values, err);
    rt_blob_free(&values);
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

int rt_session_transcript_json(rt_sessions *s, const char *id, sb_jw *w, char *err) {
    return s->store->transcript_json(s, id, w, err);
}

int rt_session_commit(rt_sessions *s, rt_session *ss, int ttl_s, const char *caller, const char *reply,
                      double now, char *err) {
    rt_blob values = { 0 };
    int rc = seal_values(s, ss, &values, err);
    if (!rc) rc = s->store->commit(s, ss, ttl_s, caller, reply, now, &values, err);
    rt_blob_free(&values);
    return rc;
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
    text_match m = { match, arg };
    return s->store->erase_matching(s, row_matches, &m, err);
}

int rt_sessions_checkpoint(rt_sessions *s, char *err) { return s->store->checkpoint(s, err); }

/* The due packages, a sealed one opened. One that does not open (another
 * key) is given with body NULL and why, to be retried: a fixed key file
 * delivers it. */
int rt_handoff_due(rt_sessions *s, double now, rt_handoff_item *items, int max, char *err) {
    int n = s->store->handoff_due(s, now, items, max, err);
    for (int i = 0; i < n; i++) {
        rt_handoff_item *it = &items[i];
        it->error = NULL;
        if (!it->sealed) continue;
        char why[SB_ERR_LEN], *text;
        int rc = open_box(s, it->session, "handoff", (const uint8_t *)it->body, it->body_len, &text, why);
        sb_free(it->body);
        it->body = text;
        it->sealed = false;
        if (rc == SB_EINVAL) {
            it->error = "the sealed package does not open with runtime.secret_key_file (another key?)";
        } else if (rc) {
            rt_handoff_items_free(items, n);
            return sb_seterr(err, rc, "%s", why);
        }
        it->body_len = text ? strlen(text) : 0;
    }
    return n;
}

void rt_handoff_items_free(rt_handoff_item *items, int n) {
    for (int i = 0; i < n; i++) {
        sb_free(items[i].url);
        sb_free(items[i].ca_file);
        if (items[i].body) explicit_bzero(items[i].body, items[i].body_len);
        sb_free(items[i].body);
        items[i].url = items[i].ca_file = items[i].body = NULL;
    }
}

int rt_handoff_delivered(rt_sessions *s, const char *id, char *err) {
    return s->store->handoff_delivered(s, id, err);
}

int rt_handoff_retry(rt_sessions *s, const char *id, double next_at, const char *why, char *err) {
    return s->store->handoff_retry(s, id, next_at, why, err);
}

/* The latest max hand-offs for the console, newest first: where each
 * stands in its delivery, and never the package (it holds the caller's
 * values): [{session, pipeline, intent, reason, url, created, state
 * (queued | retrying | delivered), attempts, next_at, delivered,
 * last_error}]. */
int rt_handoff_list_json(rt_sessions *s, int max, sb_jw *w, char *err) {
    sb_jw_arr(w);
    int rc = s->store->handoff_list(s, max, w, err);
    sb_jw_arr_end(w);
    return rc;
}

void rt_handoff_row_json(sb_jw *w, const rt_handoff_row *row) {
    sb_jw_obj(w);
    const char *const keys[] = { "session", "pipeline", "intent", "reason", "url" };
    const char *const vals[] = { row->session, row->pipeline, row->intent, row->reason, row->url };
    for (size_t i = 0; i < SB_ARRAY_LEN(keys); i++) { sb_jw_key(w, keys[i]); sb_jw_str(w, vals[i]); }
    sb_jw_key(w, "created"); sb_jw_fixed(w, row->created, 3);
    sb_jw_key(w, "state"); sb_jw_str(w, row->is_delivered ? "delivered" : row->attempts ? "retrying" : "queued");
    sb_jw_key(w, "attempts"); sb_jw_int(w, row->attempts);
    sb_jw_key(w, "next_at");
    if (row->is_delivered) sb_jw_null(w); else sb_jw_fixed(w, row->next_at, 3);
    sb_jw_key(w, "delivered");
    if (row->is_delivered) sb_jw_fixed(w, row->delivered, 3); else sb_jw_null(w);
    sb_jw_key(w, "last_error"); sb_jw_str(w, row->last_error);
    sb_jw_obj_end(w);
}
