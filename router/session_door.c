/* session_door.c - sessions as the doors see them: a pipeline call's turn
 * of a conversation (begin, commit), GET and DELETE /v1/sessions/ID, and
 * the periodic purge of expired sessions. The store is sessions.c.
 *
 * A turn of a session is never answered from the response cache (its
 * answer depends on the session), and is committed before its reply is
 * sent: when the commit fails the caller gets a 500 rather than an answer
 * the next turn would not know about.
 */
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "router/router_internal.h"

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --------------------------------------------------------------- a turn */


static void not_found(rt_req *q, int rc, const char *id) {
    if (rc == SB_ETIMEOUT)
        rt_req_error(q, 404, "invalid_request_error", "session_expired",
                     "session %s expired (idle longer than its pipeline's conversation.ttl_s)", id);
    else
        rt_req_error(q, 404, "invalid_request_error", "session_not_found", "no session %.64s", id);
}

/* The session of this turn into q->sess: the one named (its owner's, alive,
 * of this pipeline), or a new one. false: q was answered. */
static bool open_session(rt_req *q, const sb_pipeline *p, const char *id) {
    rt *r = q->r;
    char err[SB_ERR_LEN];
    rt_session *ss = sb_calloc(1, sizeof *ss);
    if (!ss) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); return false; }
    if (id) {
        int rc = rt_session_id_valid(id) ? rt_session_load(r->sessions, id, q->key_name, wall_now(), ss, err)
                                         : SB_ENOTFOUND;
        if (rc) {
            sb_free(ss);
            if (rc == SB_ENOTFOUND || rc == SB_ETIMEOUT) not_found(q, rc, id);
            else rt_req_error(q, 500, "server_error", "internal", "%s", err);
            return false;
        }
        q->sess = ss;                       /* from here rt_req_done frees it */
        if (strcmp(ss->pipeline, p->name)) {
            rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                         "'session': session %s belongs to pipeline '%s'", id, ss->pipeline);
            return false;
        }
        if (ss->done) {
            rt_req_error(q, 409, "invalid_request_error", "session_ended",
                         "session %s has ended (max_turns or max_bytes); start a new one", id);
            return false;
        }
    } else {
        q->sess = ss;
        ss->stage = -1;
        snprintf(ss->owner, sizeof ss->owner, "%s", q->key_name);
        if (rt_session_new_id(ss->id) || !(ss->pipeline = sb_strdup(p->name)) || !(ss->slots = sb_strdup("{}"))) {
            rt_req_error(q, 500, "server_error", "internal", "cannot make a session id");
            return false;
        }
    }
    if (!rt_session_claim(r->sessions, ss->id)) {
        rt_req_error(q, 409, "invalid_request_error", "session_busy",
                     "session %s is answering another turn; send the next one after its reply", ss->id);
        return false;
    }
    q->sess_claimed = true;
    return true;
}

/* A turn the session cannot store: the call ends here, before any work,
 * and says so (done, with why as the handoff's reason). */
static void end_call(rt_req *q, const sb_pipeline *p, const char *reason) {
    rt_session *ss = q->sess;
    char err[SB_ERR_LEN];
    ss->done = true;
    ss->handoff_reason = reason;
    ss->handoff_url = p->conv.handoff_url;
    ss->handoff_ca_file = p->conv.handoff_ca_file;
    ss->handoff_confidence = -1;
    if (rt_session_commit(q->r->sessions, ss, p->conv.ttl_s, NULL, NULL, wall_now(), err)) {
        rt_req_error(q, 500, "server_error", "internal", "%s", err);
        return;
    }
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "pipeline"); sb_jw_str(&w, p->name);
    sb_jw_key(&w, "intent"); sb_jw_str(&w, ss->intent);
    sb_jw_key(&w, "output"); sb_jw_str(&w, "");
    sb_jw_key(&w, "reply"); sb_jw_str(&w, "");
    sb_jw_key(&w, "session"); sb_jw_str(&w, ss->id);
    sb_jw_key(&w, "state"); rt_session_state_json(ss, &w);
    sb_jw_key(&w, "awaiting"); sb_jw_null(&w);
    sb_jw_key(&w, "fallback"); sb_jw_bool(&w, false);
    sb_jw_key(&w, "handoff");
    sb_json_doc *d;             /* the package the commit built (ours: it parses) */
    if (ss->handoff && !sb_json_parse(ss->handoff, strlen(ss->handoff), &d, NULL)) {
        sb_jw_value(&w, sb_json_root(d));
        sb_json_doc_free(d);
    } else {
        sb_jw_null(&w);
    }
    sb_jw_key(&w, "done"); sb_jw_bool(&w, true);
    sb_jw_obj_end(&w);
    rt_answer a = { .text = "", .finish_reason = "stop", .result = w.oom ? NULL : w.p, .result_len = w.len };
    /* Before the privacy door: its values put back here, as it would. */
    char *shown = NULL;
    size_t n;
    if (a.result && ss->values.n && !sb_privacy_restore(&ss->values, w.p, w.len, false, &shown, &n)) {
        a.result = shown;
        a.result_len = n;
    }
    rt_req_set_header(q, "X-Session-Id", ss->id);
    if (ss->handoff_url) rt_handoff_out_kick(q->r->handoff_out);
    q->reply.finish(q->reply.arg, &a);
    sb_jw_free(&w);
    sb_free(shown);
}

/* Where the call stands after a turn, and the reply header. */
static void viewed(rt_req *q, rt_turn_view *view, const char *reply) {
    rt_session *ss = q->sess;
    *view = (rt_turn_view){ .session = ss->id, .reply = reply, .slots = ss->slots, .turn = ss->turns,
                            .awaiting = ss->awaiting, .handoff = ss->handoff, .done = ss->done };
    rt_req_set_header(q, "X-Session-Id", ss->id);
}

/* The turn hands the call off: the commit builds the package (and queues
 * its delivery to conversation.handoff_url) in the turn's transaction. */
static void handing_off(rt_session *ss, const sb_pipeline *p, const rt_run *run, const char *reason) {
    ss->handoff_reason = reason;
    ss->handoff_url = p->conv.handoff_url;
    ss->handoff_ca_file = p->conv.handoff_ca_file;
    ss->handoff_confidence = rt_run_intent(run) ? rt_run_confidence(run) : -1;
}

static int set_text(char **field, const char *text, char *err) {
    char *copy = text ? sb_strdup(text) : NULL;
    if (text && !copy) return sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_free(*field);
    *field = copy;
    return 0;
}

/* The run's slots, when a stage gathers them, become the session's. */
static int keep_slots(rt_session *ss, const rt_run *run, char *err) {
    const sb_json *slots = rt_run_slots(run);
    if (!slots) return 0;
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_value(&w, slots);
    int rc = w.oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : set_text(&ss->slots, w.p, err);
    sb_jw_free(&w);
    return rc;
}

int rt_turn_begin(rt_req *q, const sb_pipeline *p, const char *session, const char *input) {
    if (!session && !p->conv.on) return 0;
    if (!p->conv.on) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                     "'session': pipeline '%s' has no conversation: block, so it keeps no sessions", p->name);
        return 1;
    }
    if (!q->r->sessions) {
        rt_req_error(q, 503, "server_busy", "sessions_unavailable",
                     "the session store could not be opened (see the router's log)");
        return 1;
    }
    if (!open_session(q, p, session)) return 1;
    if (!(q->sess->said = sb_strdup(input))) {
        rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
        return 1;
    }
    if (q->sess->bytes + (long long)strlen(input) > p->conv.max_bytes) {
        end_call(q, p, "max_bytes");
        return 1;
    }
    return 0;
}

int rt_turn_commit(rt_req *q, const sb_pipeline *p, const rt_run *run, const char *input, const char *reply,
                   rt_turn_view *view, char *err) {
    rt_session *ss = q->sess;
    if (ss->said) input = ss->said;
    int rc = rt_run_intent(run) ? set_text(&ss->intent, rt_run_intent(run), err) : 0;
    if (rc || (rc = set_text(&ss->awaiting, NULL, err)) || (rc = keep_slots(ss, run, err))) return rc;
    ss->stage = -1;                 /* nothing is awaited: the run went to its end */
    ss->turns++;
    ss->bytes += (long long)(strlen(input) + strlen(reply));
    const char *reason = rt_run_handoff_reason(run);
    if (!reason && ss->turns >= p->conv.max_turns) reason = "max_turns";
    ss->done = reason != NULL;
    if (reason) handing_off(ss, p, run, reason);
    if ((rc = rt_session_commit(q->r->sessions, ss, p->conv.ttl_s, input, reply, wall_now(), err))) return rc;
    if (reason && ss->handoff_url) rt_handoff_out_kick(q->r->handoff_out);
    viewed(q, view, NULL);
    return 0;
}

int rt_turn_asked(rt_req *q, const sb_pipeline *p, const rt_run *run, const char *input, const char *question,
                  rt_turn_view *view, char *err) {
    rt_session *ss = q->sess;
    if (ss->said) input = ss->said;
    sb_jw w;
    sb_jw_init(&w);
    rt_run_awaiting_json(run, &w);
    int rc = w.oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : set_text(&ss->awaiting, w.p, err);
    sb_jw_free(&w);
    if (!rc && rt_run_intent(run)) rc = set_text(&ss->intent, rt_run_intent(run), err);
    if (!rc) rc = keep_slots(ss, run, err);
    if (rc) return rc;
    ss->stage = rt_run_waiting_stage(run);
    ss->turns++;
    ss->bytes += (long long)(strlen(input) + strlen(question));
    ss->done = ss->turns >= p->conv.max_turns;  /* then no answer will come: the call ends asking */
    if (ss->done) handing_off(ss, p, run, "max_turns");
    if ((rc = rt_session_commit(q->r->sessions, ss, p->conv.ttl_s, input, question, wall_now(), err))) return rc;
    if (ss->done && ss->handoff_url) rt_handoff_out_kick(q->r->handoff_out);
    viewed(q, view, question);
    return 0;
}

/* ------------------------------------------------------------- context */

/* A turn's words on one line: a caller who could start a line in the
 * composer's prompt could write a turn of the agent's. */
static void one_line(sb_jw *w, const char *text) {
    for (const char *t = text; *t; t++) sb_jw_raw(w, *t == '\n' || *t == '\r' ? " " : t, 1);
}

/* About how many tokens text takes: one per non-ASCII character (a CJK
 * character is one or two for the small models' vocabularies) and one per
 * four ASCII bytes. The router has no tokenizer; this errs on the side of
 * a shorter history. */
static int tokens_about(const char *text, size_t len) {
    int ascii = 0, other = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x80) ascii++;
        else if ((c & 0xC0) != 0x80) other++;
    }
    return other + (ascii + 3) / 4;
}

/* The last history_turns turns, "Caller: ...\nAgent: ...\n" each, the
 * oldest dropped first until they fit history_tokens. */
static int history(rt_req *q, const sb_pipeline *p, sb_jw *out, char *err) {
    sb_jw t;
    sb_jw_init(&t);
    int rc = rt_session_transcript_json(q->r->sessions, q->sess->id, &t, err);
    sb_json_doc *d = NULL;
    if (!rc && (t.oom || sb_json_parse(t.p, t.len, &d, NULL))) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_jw_free(&t);
    if (rc) return rc;
    const sb_json *turns = sb_json_root(d);
    size_t n = sb_json_len(turns), from = n > (size_t)p->conv.history_turns ? n - (size_t)p->conv.history_turns : 0;
    sb_jw lines[50];
    int used = 0;
    size_t first = n;
    for (size_t i = n; i > from; i--) {
        const sb_json *turn = sb_json_at(turns, i - 1);
        sb_jw *w = &lines[i - 1 - from];
        sb_jw_init(w);
        sb_jw_raw(w, "Caller: ", 8);
        one_line(w, sb_json_str(sb_json_get(turn, "caller")));
        sb_jw_raw(w, "\nAgent: ", 8);
        one_line(w, sb_json_str(sb_json_get(turn, "reply")));
        sb_jw_raw(w, "\n", 1);
        used += tokens_about(w->p ? w->p : "", w->len);
        if (used > p->conv.history_tokens) { sb_jw_free(w); break; }
        first = i - 1;
    }
    for (size_t i = first; i < n; i++) {
        sb_jw *w = &lines[i - from];
        sb_jw_raw(out, w->p ? w->p : "", w->len);
        if (w->oom) out->oom = 1;
        sb_jw_free(w);
    }
    sb_jw_raw(out, "", 0);
    sb_json_doc_free(d);
    return out->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
}

int rt_turn_context(rt_req *q, const sb_pipeline *p, rt_run *run, bool fresh, char *err) {
    if (!q->sess) return 0;
    if (fresh && rt_run_carry_slots(run, q->sess->slots)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!p->conv.history_turns || !q->sess->turns) return 0;
    sb_jw w;
    sb_jw_init(&w);
    int rc = history(q, p, &w, err);
    if (!rc && rt_run_set_history(run, w.p)) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_jw_free(&w);
    return rc;
}

/* ------------------------------------------------------- suspended runs */

/* A run that asked waits here, in memory, for its session's next turn;
 * the session row says which stage asked, so after a restart the next
 * turn starts a run at that stage instead (rt_run_start_at).
 * Only the latest RT_WAITING_MAX are kept: a suspended run is about 12 KB,
 * so 10,000 callers who went quiet mid-call would hold 120 MB of the
 * router's memory. An older one's session goes on at its stage as after a
 * restart (the outputs of the stages before it are not kept there). */
#define RT_WAITING_MAX 1024
typedef struct rt_waiting {
    struct rt_waiting *next;
    char id[RT_SESSION_ID_LEN + 1];
    int turns;                      /* the session's turns when it asked */
    rt_run *run;
    double expires;                 /* the session's idle expiry: then the run is dropped */
} rt_waiting;

void rt_waiting_put(rt *r, const rt_session *ss, rt_run *run, double ttl_s) {
    rt_waiting *w = sb_calloc(1, sizeof *w);
    if (!w) { rt_run_cancel(run); return; }     /* the next turn starts it at the stage again */
    snprintf(w->id, sizeof w->id, "%s", ss->id);
    w->turns = ss->turns;
    w->run = run;
    w->expires = wall_now() + ttl_s;
    w->next = r->waiting;
    r->waiting = w;
    size_t kept = 1;
    while (w->next && kept < RT_WAITING_MAX) { w = w->next; kept++; }
    for (rt_waiting *old = w->next, *next; old; old = next) {   /* the oldest, past the cap */
        next = old->next;
        rt_run_cancel(old->run);
        sb_free(old);
    }
    w->next = NULL;
}

/* With a shared store the session may have moved on through another
 * router's turns (the caller's words went to another box): resuming
 * this router's run would answer an old question. */
rt_run *rt_waiting_take(rt *r, const rt_session *ss) {
    for (rt_waiting **pp = &r->waiting; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->id, ss->id)) {
            rt_waiting *w = *pp;
            rt_run *run = w->run;
            bool current = w->turns == ss->turns;
            *pp = w->next;
            sb_free(w);
            if (current) return run;
            rt_run_cancel(run);
            return NULL;
        }
    return NULL;
}

/* Drop the suspended runs of session id (NULL: of every session whose
 * expiry is before now; now < 0 with id NULL: all). */
static void drop_waiting(rt *r, const char *id, double now) {
    for (rt_waiting **pp = &r->waiting; *pp;) {
        rt_waiting *w = *pp;
        if (id ? !strcmp(w->id, id) : now < 0 || w->expires <= now) {
            *pp = w->next;
            rt_run_cancel(w->run);
            sb_free(w);
        } else {
            pp = &w->next;
        }
    }
}

/* A turn that failed is not in the transcript, but counts. */
void rt_turn_failed(rt_req *q, const sb_pipeline *p) {
    rt_session *ss = q->sess;
    char err[SB_ERR_LEN];
    ss->failures++;
    if (rt_session_commit(q->r->sessions, ss, p->conv.ttl_s, NULL, NULL, wall_now(), err))
        sb_warn("session %s: %s", ss->id, err);
}

void rt_turn_end(rt_req *q) {
    if (!q->sess) return;
    if (q->sess_claimed) rt_session_release(q->r->sessions, q->sess->id);
    rt_session_clear(q->sess);
    sb_free(q->sess);
    q->sess = NULL;
}

/* ---------------------------------------------------- GET/DELETE /v1/sessions/ID */

void rt_handle_session(rt_req *q, const char *id, bool del) {
    rt *r = q->r;
    char err[SB_ERR_LEN];
    if (!r->sessions) {
        rt_req_error(q, 503, "server_busy", "sessions_unavailable", "the session store could not be opened");
        return;
    }
    rt_session ss;
    /* The owner's key reads and deletes it; an admin key reads anyone's
     * (audited at the door). Deleting is the owner's, or an erase. */
    bool as_admin = !del && (q->key_roles & RT_ROLE_ADMIN);
    int rc = !rt_session_id_valid(id) ? SB_ENOTFOUND
             : rt_session_load(r->sessions, id, as_admin ? NULL : q->key_name, wall_now(), &ss, err);
    if (rc == SB_ENOTFOUND || rc == SB_ETIMEOUT) { not_found(q, rc, id); return; }
    if (rc) { rt_req_error(q, 500, "server_error", "internal", "%s", err); return; }
    sb_jw w;
    sb_jw_init(&w);
    if (del) {
        drop_waiting(r, id, 0);
        rc = rt_session_delete(r->sessions, id, err);
        sb_jw_obj(&w);
        sb_jw_key(&w, "id"); sb_jw_str(&w, id);
        sb_jw_key(&w, "deleted"); sb_jw_bool(&w, true);
        sb_jw_obj_end(&w);
    } else {
        rc = rt_session_json(r->sessions, &ss, &w, err);
    }
    rt_session_clear(&ss);
    if (rc) rt_req_error(q, 500, "server_error", "internal", "%s", err);
    else rt_req_json(q, 200, w.p, w.len, NULL);
    sb_jw_free(&w);
}

/* ------------------------------------------------------------- the sweep */

static bool open_store(rt *r, const sb_config *cfg);

static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    rt *r = arg;
    char err[SB_ERR_LEN];
    if (!r->sessions) {             /* it did not open: a site's database may be back */
        open_store(r, r->ex.conf->cfg);
        return;
    }
    double now = wall_now();
    drop_waiting(r, NULL, now);
    int n = rt_sessions_sweep(r->sessions, now, err);
    if (n < 0) sb_warn("session sweep: %s", err);
    else if (n) sb_info("session sweep: %d expired session(s) purged", n);
}

/* The store and its hand-off delivery. A store that will not open leaves
 * conversations off (503), not the router, and is tried again at every
 * sweep: a fleet's database may come up after its boxes, or come back. */
static bool open_store(rt *r, const sb_config *cfg) {
    char err[SB_ERR_LEN];
    uint8_t key[SB_SEAL_KEY_LEN];
    bool keyed = cfg->runtime.secret_key_file != NULL;
    if (keyed && sb_seal_key_load(cfg->runtime.secret_key_file, key, err)) {
        sb_warn("sessions disabled: %s (trying again in %d s)", err, cfg->sessions.sweep_s);
        return false;
    }
    if (rt_sessions_open(cfg->sessions.store, &r->sessions, err)) {
        sb_warn("sessions disabled: %s (trying again in %d s)", err, cfg->sessions.sweep_s);
        explicit_bzero(key, sizeof key);
        return false;
    }
    if (keyed) rt_sessions_set_key(r->sessions, key);
    if (rt_handoff_out_start(cfg->sessions.store, keyed ? key : NULL, &r->handoff_out, err))
        sb_warn("hand-off delivery off: %s", err);
    explicit_bzero(key, sizeof key);
    return true;
}

/* Opened when a pipeline keeps conversations (at start, or when a reload
 * adds one), so a router without any leaves no file behind. */
void rt_sessions_start(rt *r, const sb_config *cfg) {
    const sb_pipelines *ps = r->ex.conf->pipes;
    bool want = false;
    for (size_t i = 0; ps && i < ps->n; i++) want |= ps->items[i].conv.on;
    if (!want || r->sessions || r->session_timer) return;
    r->session_timer = event_new(r->ex.be.base, -1, EV_PERSIST, on_sweep, r);
    struct timeval tv = { cfg->sessions.sweep_s, 0 };
    if (r->session_timer) event_add(r->session_timer, &tv);
    if (open_store(r, cfg)) on_sweep(-1, 0, r);
}

void rt_sessions_stop(rt *r) {
    drop_waiting(r, NULL, -1);
    rt_handoff_out_stop(r->handoff_out);
    r->handoff_out = NULL;
    if (r->session_timer) event_free(r->session_timer);
    r->session_timer = NULL;
    rt_sessions_close(r->sessions);
    r->sessions = NULL;
}
