/* erase.c - POST /v1/privacy/erase: a caller's data deleted from every
 * store of this router on request (docs/PRIVACY.md, "Erasure").
 *
 * One of three things is erased:
 *   {"session": ID}  the session and its transcript, and the traces, cache
 *                    entries and feedback marks of its turns (their input
 *                    is one of the transcript's caller turns);
 *   {"call": ID}     the call's trace, its feedback mark, and the cache
 *                    entries whose input is the call's input;
 *   {"value": V}     every session, trace, cache entry and feedback mark
 *                    that holds V in any rendering: V is read by the
 *                    privacy detectors into its normalised value (a mobile
 *                    said as "幺三八 ..." or "+86 138-..." is 13800138000),
 *                    and a text holds it when it contains that value or V
 *                    as given, or when the detectors find in it an
 *                    identifier with that value (spaced, spoken, in
 *                    Chinese numerals or English words).
 * Each store is rewritten so that no copy is left in its file or WAL
 * (secure_delete and a truncating checkpoint; the cache is vacuumed; the
 * OTel export rewritten in place without the lines that hold it).
 *
 * The route needs the admin role. What was erased is logged as the key's
 * name, the kind, and counts: never the value.
 */
#include <string.h>

#include "router/obs.h"
#include "cache/sb_cache.h"
#include "privacy/sb_privacy.h"


typedef struct {
    const sb_privacy *det;
    sb_pii_spans spans;
    char norm[SB_PII_VALUE_MAX];
    const char *raw;
    sb_erase_matcher *remote;   /* an erase from another edge: the value known by its keyed hash only */
    sb_bytes inputs;            /* --session / --call: the calls' inputs, NUL-separated */
    sb_bytes quoted;            /* the inputs and the call id as JSON strings (the OTel lines' form) */
    sb_bytes cache_keys;        /* the cache entries erased, SB_CACHE_KEY_HEX bytes each */
} target;

static bool holds_value(void *arg, const char *text, size_t len) {
    target *t = arg;
    if (t->remote) return sb_erase_matches(t->remote, text, len);
    if (!t->norm[0]) return false;
    if (memmem(text, len, t->norm, strlen(t->norm)) || memmem(text, len, t->raw, strlen(t->raw))) return true;
    /* Out of memory finding the spans: what was found is checked; a text
     * not read to its end is not claimed erased by a miss here. */
    sb_privacy_detect(t->det, text, len, &t->spans);
    for (size_t i = 0; i < t->spans.n; i++)
        if (!strcmp(t->spans.v[i].value, t->norm)) return true;
    return false;
}

/* Is text one of the inputs (exactly, or as the cache normalises inputs)? */
static bool is_input(void *arg, const char *text, size_t len) {
    target *t = arg;
    char *norm = NULL;
    sb_cache_normalize(SB_NORM_DEFAULT, text, len, &norm, NULL);
    bool hit = false;
    for (size_t i = 0; !hit && i < t->inputs.n; i += strlen(t->inputs.p + i) + 1) {
        const char *in = t->inputs.p + i;
        hit = (strlen(in) == len && !memcmp(in, text, len)) || (norm && !strcmp(in, norm));
    }
    sb_free(norm);
    return hit;
}

static void add_input(void *arg, const char *input) {
    target *t = arg;
    char *norm = NULL;
    sb_bytes_put(&t->inputs, input, strlen(input) + 1);
    if (!sb_cache_normalize(SB_NORM_DEFAULT, input, strlen(input), &norm, NULL))
        sb_bytes_put(&t->inputs, norm, strlen(norm) + 1);
    sb_free(norm);
}

/* An OTel line is erased when it holds the value, or one of the inputs or
 * the call's id as a whole JSON string (an attribute's value). */
static bool otel_line_holds(void *arg, const char *line, size_t len) {
    target *t = arg;
    if ((t->norm[0] || t->remote) && holds_value(t, line, len)) return true;
    for (size_t i = 0; i < t->quoted.n; i += strlen(t->quoted.p + i) + 1)
        if (memmem(line, len, t->quoted.p + i, strlen(t->quoted.p + i))) return true;
    return false;
}

static void quote(target *t, const char *s) {
    if (!s[0]) return;                  /* "" would match every line's empty attribute */
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_str(&w, s);
    if (w.p && !sb_bytes_put(&t->quoted, w.p, w.len)) sb_bytes_put(&t->quoted, "", 1);
    sb_jw_free(&w);
}

typedef struct {
    target *t;
    rt_text_match_fn match;
    sb_bytes keys;              /* SB_CACHE_KEY_HEX bytes each */
} cache_scan;

static int collect_entry(void *arg, const sb_cache_entry *e) {
    cache_scan *cs = arg;
    if (cs->match(cs->t, e->input, strlen(e->input)) ||
        cs->match(cs->t, (const char *)e->response, e->response_len))
        return sb_bytes_put(&cs->keys, e->key, sizeof e->key);
    return 0;
}

/* The matching entries deleted, then the file vacuumed: a deleted entry's
 * bytes would stay in free pages and the WAL otherwise. */
static int erase_cache(rt *r, target *t, rt_text_match_fn match, char *err) {
    if (!r->cache) return 0;
    cache_scan cs = { t, match, { 0 } };
    sb_cache_filter all = { 0 };
    int rc = sb_cache_list(r->cache, &all, collect_entry, &cs, err), n = 0;
    for (size_t i = 0; !rc && i < cs.keys.n; i += SB_CACHE_KEY_HEX) {
        int one = sb_cache_purge_key(r->cache, cs.keys.p + i, err);
        if (one && one != SB_ENOTFOUND) rc = one;
        else if (!one) n++;
    }
    sb_free(t->cache_keys.p);
    t->cache_keys = cs.keys;            /* the reply names them: the cloud's copies are purged by key */
    if (!rc && n) rc = sb_cache_vacuum(r->cache, err);
    return rc ? rc : n;
}

static void reply(rt_req *q, const char *kind, const int n[5], const sb_bytes *keys) {
    static const char *const stores[5] = { "sessions", "traces", "cache_entries", "feedback", "otel_lines" };
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "erased"); sb_jw_obj(&w);
    for (int i = 0; i < 5; i++) { sb_jw_key(&w, stores[i]); sb_jw_int(&w, n[i]); }
    sb_jw_obj_end(&w);
    /* Not in the log: a key is a hash of an input that held the value. */
    sb_jw_key(&w, "cache_keys"); sb_jw_arr(&w);
    for (size_t i = 0; keys->p && i < keys->n; i += SB_CACHE_KEY_HEX) sb_jw_str(&w, keys->p + i);
    sb_jw_arr_end(&w);
    sb_jw_obj_end(&w);
    sb_info("privacy erase by key '%s': %s; %d session(s), %d trace(s), %d cache entr(y/ies), %d feedback mark(s), "
            "%d OTel line(s)", q->key_name[0] ? q->key_name : "-", kind, n[0], n[1], n[2], n[3], n[4]);
    rt_req_json(q, 200, w.p, w.len, NULL);
    sb_jw_free(&w);
}

/* Which one of session, call, value the body names, or NULL (answered). */
static const char *what_of(rt_req *q, const sb_json *body, const char **arg) {
    static const char *const kinds[3] = { "session", "call", "value" };
    const char *kind = NULL;
    for (int i = 0; i < 3; i++) {
        const sb_json *v = sb_json_get(body, kinds[i]);
        if (!v) continue;
        if (kind || !sb_json_str(v) || !sb_json_str(v)[0]) {
            rt_req_error(q, 400, "invalid_request_error", "invalid_erase",
                         "expected exactly one of \"session\", \"call\", \"value\", a non-empty string");
            return NULL;
        }
        kind = kinds[i];
        *arg = sb_json_str(v);
    }
    if (!kind)
        rt_req_error(q, 400, "invalid_request_error", "invalid_erase",
                     "expected exactly one of \"session\", \"call\", \"value\", a non-empty string");
    return kind;
}

/* Every store but the cache's own sync state, for one erase: n[] counts
 * per store (sessions, traces, cache entries, feedback, OTel lines). A
 * value's target has norm set (asked here) or remote (asked at another
 * edge); a session's or call's, arg its id. 0, or < 0 with err. */
static int erase_all(rt *r, const char *kind, const char *arg, target *t, int n[5], char *err) {
    int rc = 0;
    rt_text_match_fn match = is_input;
    if (!strcmp(kind, "value")) {
        match = holds_value;
        if (r->sessions && (rc = n[0] = rt_sessions_erase_matching(r->sessions, holds_value, t, err)) < 0) return rc;
        n[1] = rt_trace_erase(r, NULL, holds_value, t, NULL, NULL);
    } else if (!strcmp(kind, "session")) {
        sb_bytes callers = { 0 };
        if (r->sessions && (rc = n[0] = rt_session_erase(r->sessions, arg, &callers, err)) < 0) {
            sb_free(callers.p);
            return rc;
        }
        for (size_t i = 0; i < callers.n; i += strlen(callers.p + i) + 1) add_input(t, callers.p + i);
        sb_free(callers.p);
        n[1] = rt_trace_erase(r, NULL, is_input, t, NULL, NULL);
    } else {
        n[1] = rt_trace_erase(r, arg, NULL, NULL, add_input, t);
    }
    if ((rc = n[2] = erase_cache(r, t, match, err)) < 0) return rc;
    if ((rc = n[3] = rt_feedback_erase(r, strcmp(kind, "call") ? NULL : arg, match, t, err)) < 0) return rc;
    for (size_t i = 0; i < t->inputs.n; i += strlen(t->inputs.p + i) + 1) quote(t, t->inputs.p + i);
    if (!strcmp(kind, "call")) quote(t, arg);
    if ((rc = n[4] = rt_otel_erase(r->obs, otel_line_holds, t, err)) < 0) return rc;
    return 0;
}

static void target_free(target *t) {
    sb_free(t->inputs.p);
    sb_free(t->quoted.p);
    sb_free(t->cache_keys.p);
    sb_pii_spans_free(&t->spans);
}

void rt_handle_privacy_erase(rt_req *q, const sb_json *body) {
    rt *r = q->r;
    const char *arg = NULL, *kind = what_of(q, body, &arg);
    if (!kind) return;
    char err[SB_ERR_LEN];
    sb_privacy *det = NULL;
    if (sb_privacy_new(SB_PII_ALL, &det, err)) {
        rt_req_error(q, 500, "server_error", "internal", "%s", err);
        return;
    }
    target t = { .det = det, .raw = arg };
    int n[5] = { 0 };
    if (!strcmp(kind, "value")) {
        sb_erase_normalise(det, arg, &t.spans, t.norm);
        if (strlen(t.norm) < SB_ERASE_VALUE_MIN) {
            rt_req_error(q, 400, "invalid_request_error", "invalid_erase",
                         "the value is shorter than %d characters: it would match unrelated text", SB_ERASE_VALUE_MIN);
            goto out;
        }
    } else if (!strcmp(kind, "session") && !rt_session_id_valid(arg)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_erase", "not a session id: 32 hex digits");
        goto out;
    }
    if (erase_all(r, kind, arg, &t, n, err) < 0) {
        sb_warn("privacy erase by key '%s' (%s) failed: %s", q->key_name[0] ? q->key_name : "-", kind, err);
        rt_req_error(q, 500, "server_error", "erase_failed", "the erase did not finish (see the log); run it again");
    } else {
        reply(q, kind, n, &t.cache_keys);
    }
out:
    target_free(&t);
    sb_privacy_free(det);
}

int rt_erase_remote(rt *r, const rt_erasure *e, const char *key_hex, char *err) {
    sb_privacy *det = NULL;
    sb_erase_matcher m;
    int rc = sb_privacy_new(SB_PII_ALL, &det, err);
    target t = { .det = det, .raw = "" };
    if (!rc && !strcmp(e->kind, "value")) {
        if (sb_erase_matcher_init(&m, det, key_hex ? key_hex : "", e->mac ? e->mac : "", e->digits, err)) {
            /* Not readable here, ever: refusing it would stop every later sync. */
            sb_warn("cloud erase skipped: %s", err);
            sb_privacy_free(det);
            return 0;
        }
        t.remote = &m;
    } else if (!rc && (!e->id || (strcmp(e->kind, "session") && strcmp(e->kind, "call")) ||
                       (!strcmp(e->kind, "session") && !rt_session_id_valid(e->id)))) {
        sb_warn("cloud erase of an unknown kind skipped");
        sb_privacy_free(det);
        return 0;
    }
    int n[5] = { 0 };
    if (!rc) rc = erase_all(r, e->kind, e->id, &t, n, err);
    if (!rc)
        sb_info("privacy erase from the cloud: %s; %d session(s), %d trace(s), %d cache entr(y/ies), "
                "%d feedback mark(s), %d OTel line(s)", e->kind, n[0], n[1], n[2], n[3], n[4]);
    if (t.remote) sb_erase_matcher_free(&m);
    target_free(&t);
    sb_privacy_free(det);
    return rc < 0 ? rc : 0;
}
