/* privacy_door.c - a pipeline's `privacy:` policy, applied once, where a
 * call is resolved (pipecall.c for both HTTP doors, router.c for the
 * socket), before the cache lookup and the run: from there on the cache
 * key, every stage's prompt, retrieval query and upstream body, the trace,
 * the feedback row and the logs see the redacted text only.
 *
 *   pseudonymize  the caller's values become typed placeholders (⟨PHONE_1⟩);
 *                 the values stay in this call's table, in memory, and the
 *                 door's sink is wrapped so the reply has them put back.
 *                 A conversation's turn starts from the table its session
 *                 kept (sealed at rest, sessions.c), so one value keeps one
 *                 placeholder across turns and a later turn restores and
 *                 reveals the values of earlier ones; the commit seals the
 *                 table again, with what this turn added
 *   mask          masks (138****5678); nothing is kept, nothing restored
 *   reject        400 personal_data naming the types found, not the values
 *
 * docs/PRIVACY.md says what this covers and what it does not.
 */
#include <stdio.h>
#include <string.h>

#include "router/router_internal.h"

/* Streamed text is passed on up to a placeholder's opening bracket with no
 * closing one yet; a tail longer than this is no placeholder. */
#define HELD_MAX 64

struct rt_privacy_call {
    sb_pii_table table;
    char *input;                    /* the redacted input the call runs on */
    rt_sink door;                   /* the door's own sink, behind this one */
    sb_jw held;                     /* streamed text not yet passed on */
    bool restore;                   /* pseudonymize: the reply gets the values back */
};

void rt_privacy_free(rt_privacy_call *pc) {
    if (!pc) return;
    sb_pii_table_free(&pc->table);
    sb_free(pc->input);
    sb_jw_free(&pc->held);
    sb_free(pc);
}

/* "ID, PHONE" for the types of spans, each once. */
static void type_list(const sb_pii_spans *sp, char *out, size_t n) {
    unsigned seen = 0;
    size_t len = 0;
    out[0] = 0;
    for (size_t i = 0; i < sp->n && len < n; i++) {
        unsigned bit = 1u << sp->v[i].type;
        if (seen & bit) continue;
        seen |= bit;
        len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", sb_pii_type_name(sp->v[i].type));
    }
}

int rt_privacy_enter(const sb_pipeline *p, const char *input, sb_pii_table *kept, rt_privacy_call **out, char *err) {
    *out = NULL;
    if (!p->privacy || p->privacy_mode == SB_PRIVACY_OFF) return 0;
    rt_privacy_call *pc = sb_calloc(1, sizeof *pc);
    if (!pc) return sb_seterr(err, SB_ENOMEM, "out of memory");
    if (kept && p->privacy_mode == SB_PRIVACY_PSEUDONYMIZE) {   /* taken over: the call's table from here on */
        pc->table = *kept;
        memset(kept, 0, sizeof *kept);
    }
    sb_jw_init(&pc->held);
    sb_pii_spans sp = { 0 };
    size_t n;
    sb_pii_mode mode = p->privacy_mode == SB_PRIVACY_PSEUDONYMIZE ? SB_PII_PSEUDONYMIZE : SB_PII_MASK;
    int rc = sb_privacy_redact(p->privacy, input, strlen(input), mode, &pc->table, &sp, &pc->input, &n);
    if (rc) {
        rc = sb_seterr(err, rc, "out of memory detecting personal data");
    } else if (p->privacy_mode == SB_PRIVACY_REJECT && sp.n) {
        char types[128];
        type_list(&sp, types, sizeof types);
        rc = sb_seterr(err, SB_EINVAL, "the input holds personal data (%s); pipeline '%s' refuses it (privacy mode reject)",
                       types, p->name);
    }
    sb_pii_spans_free(&sp);
    pc->restore = mode == SB_PII_PSEUDONYMIZE;
    if (rc) { rt_privacy_free(pc); return rc; }
    *out = pc;
    return 0;
}

const char *rt_privacy_input(const rt_privacy_call *pc) { return pc->input; }

void rt_privacy_attach(rt_privacy_call *pc, rt_run *run) {
    if (pc && run) rt_run_set_privacy(run, &pc->table);
}

/* ------------------------------------------------------- the reply sink */

/* text with the call's values put back, sb_malloc'ed (NULL: out of memory). */
static char *restored(const rt_privacy_call *pc, const char *text, size_t len, size_t *out_len) {
    char *out;
    return sb_privacy_restore(&pc->table, text, len, false, &out, out_len) ? NULL : out;
}

static bool at(const char *s, size_t i, size_t len, const char *m) {
    size_t k = strlen(m);
    return i + k <= len && !memcmp(s + i, m, k);
}

/* Where the held text must stop: at the last opening bracket (⟨ 〈 <) that
 * no closing one (⟩ 〉 >) follows, when it is near the end. */
static size_t safe_prefix(const char *s, size_t len) {
    size_t start = len > HELD_MAX ? len - HELD_MAX : 0;
    for (size_t i = len; i-- > start;) {
        if (at(s, i, len, ">") || at(s, i, len, "\u27e9") || at(s, i, len, "\u3009")) return len;
        if (at(s, i, len, "<") || at(s, i, len, "\u27e8") || at(s, i, len, "\u3008")) return i;
    }
    return len;
}

static void pass_on(rt_privacy_call *pc, size_t n) {
    if (!n) return;
    size_t len;
    char *t = restored(pc, pc->held.p, n, &len);
    /* Out of memory: the placeholders go out as they are, never a value. */
    pc->door.delta(pc->door.arg, t ? t : pc->held.p, t ? len : n);
    sb_free(t);
    memmove(pc->held.p, pc->held.p + n, pc->held.len - n + 1);
    pc->held.len -= n;
}

static void priv_delta(void *arg, const char *text, size_t len) {
    rt_privacy_call *pc = arg;
    sb_jw_raw(&pc->held, text, len);
    if (pc->held.oom) {         /* the text goes on without restoring rather than not at all */
        pc->door.delta(pc->door.arg, text, len);
        return;
    }
    pass_on(pc, safe_prefix(pc->held.p, pc->held.len));
}

/* a with its text and result restored, then the door's finish (or ask).
 * The door may free the request and with it pc: nothing of pc after. */
static void priv_answer(rt_privacy_call *pc, const rt_answer *a, bool ask) {
    if (pc->door.delta && !pc->held.oom) pass_on(pc, pc->held.len);
    rt_answer out = *a;
    size_t n;
    char *text = restored(pc, a->text ? a->text : "", a->text ? a->len : 0, &n), *result = NULL;
    if (text) { out.text = text; out.len = n; }
    sb_jw j;
    sb_jw_init(&j);
    if (!a->result && a->run) {     /* the socket door renders it itself: render it here, restored */
        rt_run_result_json(a->run, &j);
        if (!j.oom) { out.result = j.p; out.result_len = j.len; }
    }
    if (out.result && (result = restored(pc, out.result, out.result_len, &n))) out.result_len = n;
    if (out.result && !result) out.result = NULL;   /* out of memory: never the unrestored placeholders as if whole */
    else if (result) out.result = result;
    rt_sink door = pc->door;
    if (ask) door.ask(door.arg, &out);
    else door.finish(door.arg, &out);
    sb_free(text);
    sb_free(result);
    sb_jw_free(&j);
}

static void priv_finish(void *arg, const rt_answer *a) { priv_answer(arg, a, false); }
static void priv_ask(void *arg, const rt_answer *a) { priv_answer(arg, a, true); }

static void priv_error(void *arg, const rt_failure *f) {
    rt_privacy_call *pc = arg;
    pc->door.error(pc->door.arg, f);
}

void rt_privacy_wrap(rt_privacy_call *pc, rt_sink *sink) {
    /* Even with no value yet: a tool's answer may add some (stage_tool.c). */
    if (!pc || !pc->restore) return;
    pc->door = *sink;
    *sink = (rt_sink){ sink->delta ? priv_delta : NULL, priv_finish, priv_error, pc, sink->ask ? priv_ask : NULL };
}

/* ---------------------------------------------------------- HTTP doors */

bool rt_privacy_door(rt_req *q, const sb_pipeline *p, const char **input) {
    char err[SB_ERR_LEN];
    int rc = rt_privacy_enter(p, *input, q->sess ? &q->sess->values : NULL, &q->privacy, err);
    if (rc == SB_EINVAL) rt_req_error(q, 400, "invalid_request_error", "personal_data", "%s", err);
    else if (rc) rt_req_error(q, 500, "server_error", "out_of_memory", "%s", err);
    if (rc) return false;
    if (!q->privacy) return true;
    *input = q->privacy->input;
    rt_privacy_wrap(q->privacy, &q->reply);
    if (q->sess) {              /* the transcript keeps the redacted words, the store the sealed table */
        char *said = sb_strdup(*input);
        if (!said) {
            rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
            return false;
        }
        sb_free(q->sess->said);
        q->sess->said = said;
        if (q->privacy->restore) q->sess->seal = &q->privacy->table;
    }
    return true;
}
