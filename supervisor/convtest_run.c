/* convtest_run.c - one scripted conversation against the gateway: each
 * turn POSTed to /v1/pipelines/NAME with the session the first answer
 * opened, its answer checked against the turn's expectations, a hang-up
 * sent as DELETE /v1/sessions/ID. The run stops at the first expectation
 * not met: what follows a wrong turn says nothing more.
 */
#include "supervisor/convtest.h"
#include "supervisor/ask_internal.h"
#include "common/sb_json.h"

#include <stdarg.h>
#include <string.h>

typedef struct {
    const ct_target *t;
    const ct_conv *conv;
    ct_result *res;
    char session[128];
} runner;

static bool failf(ct_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool failf(ct_result *res, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->failure, sizeof res->failure, fmt, ap);
    va_end(ap);
    return false;
}

static bool plain(const sb_config_node *n, const char *word) {
    return n->kind == SB_CFG_SCALAR && !n->quoted && !strcmp(n->value, word);
}

/* A JSON value as the script would write it: a string's text, any other
 * value's JSON. */
static void as_text(const sb_json *v, char *out, size_t cap) {
    if (sb_json_type_of(v) == SB_JSON_STRING) { snprintf(out, cap, "%s", sb_json_str(v)); return; }
    sb_jw w = { 0 };
    sb_jw_value(&w, v);
    snprintf(out, cap, "%s", w.oom || !w.p ? "?" : w.p);
    sb_jw_free(&w);
}

/* A scalar of the script against a value of the answer; null matches an
 * absent value too. */
static bool same_value(const sb_config_node *want, const sb_json *got) {
    if (sb_config_node_is_null(want)) return sb_json_type_of(got) == SB_JSON_NULL;
    if (!got || sb_json_type_of(got) == SB_JSON_NULL) return false;
    char text[1024];
    as_text(got, text, sizeof text);
    return !strcmp(text, want->value);
}

static const char *shown(const sb_json *v, char *buf, size_t cap) {
    if (!v) return "nothing";
    if (sb_json_type_of(v) == SB_JSON_STRING) { snprintf(buf, cap, "\"%s\"", sb_json_str(v)); return buf; }
    as_text(v, buf, cap);
    return buf;
}

static bool check_slots(ct_result *res, const sb_config_node *want, const sb_json *slots) {
    char got[512];
    for (size_t i = 0; i < want->n_pairs; i++) {
        const sb_config_node *k = want->pairs[i].key, *v = want->pairs[i].value;
        const sb_json *g = sb_json_get(slots, k->value);
        if (!same_value(v, g))
            return failf(res, "slots.%s: expected %s, got %s", k->value, sb_config_node_is_null(v) ? "null" : v->value,
                         shown(g, got, sizeof got));
    }
    return true;
}

static bool has_option(const sb_json *opts, const char *label) {
    for (size_t i = 0; i < sb_json_len(opts); i++) {
        const char *s = sb_json_str(sb_json_at(opts, i));
        if (s && !strcmp(s, label)) return true;
    }
    return false;
}

/* kind, and the slot or the options (as a set: the order is the router's
 * ranking, not what a caller hears as a different question). */
static bool check_awaiting(ct_result *res, const sb_config_node *want, const sb_json *got) {
    char buf[512];
    bool got_null = sb_json_type_of(got) == SB_JSON_NULL;
    if (sb_config_node_is_null(want))
        return got_null || failf(res, "awaiting: expected null, got %s", shown(got, buf, sizeof buf));
    const sb_config_node *kind = sb_config_node_get(want, "kind"), *slot = sb_config_node_get(want, "slot"),
                         *opts = sb_config_node_get(want, "options");
    const char *gk = sb_json_str(sb_json_get(got, "kind"));
    if (!gk || strcmp(gk, kind->value))
        return failf(res, "awaiting: expected kind %s, got %s", kind->value, shown(got, buf, sizeof buf));
    if (slot && !same_value(slot, sb_json_get(got, "slot")))
        return failf(res, "awaiting.slot: expected %s, got %s", slot->value,
                     shown(sb_json_get(got, "slot"), buf, sizeof buf));
    if (opts) {
        const sb_json *go = sb_json_get(got, "options");
        size_t n = opts->kind == SB_CFG_SEQ ? opts->n_items : 1;
        bool ok = sb_json_type_of(go) == SB_JSON_ARRAY && sb_json_len(go) == n;
        for (size_t i = 0; ok && i < n; i++) ok = has_option(go, (opts->kind == SB_CFG_SEQ ? opts->items[i] : opts)->value);
        if (!ok) return failf(res, "awaiting.options: expected the options in the script, got %s", shown(go, buf, sizeof buf));
    }
    return true;
}

static bool check_reply(ct_result *res, const sb_config_node *want, const char *reply) {
    size_t n = want->kind == SB_CFG_SEQ ? want->n_items : 1;
    for (size_t i = 0; i < n; i++) {
        const char *s = (want->kind == SB_CFG_SEQ ? want->items[i] : want)->value;
        if (!strstr(reply, s)) return failf(res, "reply_contains: expected \"%s\" in the reply, got \"%.400s\"", s, reply);
    }
    return true;
}

static bool check_bool(ct_result *res, const char *key, const sb_config_node *want, const sb_json *got) {
    bool w = plain(want, "true");
    if (sb_json_type_of(got) == SB_JSON_BOOL && sb_json_bool(got) == w) return true;
    char buf[256];
    return failf(res, "%s: expected %s, got %s", key, w ? "true" : "false", shown(got, buf, sizeof buf));
}

/* true / false: whether there is a handoff; a word: its reason. */
static bool check_handoff(ct_result *res, const sb_config_node *want, const sb_json *got) {
    char buf[512];
    bool any = sb_json_type_of(got) != SB_JSON_NULL;
    if (plain(want, "true") || plain(want, "false")) {
        bool w = plain(want, "true");
        return any == w || failf(res, "handoff: expected %s, got %s", w ? "a handoff" : "null", shown(got, buf, sizeof buf));
    }
    const sb_json *reason = sb_json_get(got, "reason");
    return same_value(want, reason) ||
           failf(res, "handoff: expected the reason %s, got %s", want->value, shown(got, buf, sizeof buf));
}

static bool check_answer(ct_result *res, const ct_turn *t, const sb_json *a) {
    const sb_json *state = sb_json_get(a, "state");
    char buf[512];
    if (t->intent && !same_value(t->intent, sb_json_get(state, "intent")))
        return failf(res, "intent: expected %s, got %s", sb_config_node_is_null(t->intent) ? "null" : t->intent->value,
                     shown(sb_json_get(state, "intent"), buf, sizeof buf));
    if (t->slots && !check_slots(res, t->slots, sb_json_get(state, "slots"))) return false;
    if (t->awaiting && !check_awaiting(res, t->awaiting, sb_json_get(a, "awaiting"))) return false;
    const char *reply = sb_json_str(sb_json_get(a, "reply"));
    if (t->reply_contains && !check_reply(res, t->reply_contains, reply ? reply : "")) return false;
    if (t->handoff && !check_handoff(res, t->handoff, sb_json_get(a, "handoff"))) return false;
    if (t->done && !check_bool(res, "done", t->done, sb_json_get(a, "done"))) return false;
    if (t->fallback && !check_bool(res, "fallback", t->fallback, sb_json_get(a, "fallback"))) return false;
    return true;
}

/* What the answer said besides, so a failure can be read without a
 * rerun: its reply and slots. */
static void add_context(ct_result *res, const sb_json *a) {
    char slots[256];
    const char *reply = sb_json_str(sb_json_get(a, "reply"));
    as_text(sb_json_get(sb_json_get(a, "state"), "slots"), slots, sizeof slots);
    size_t n = strlen(res->failure);
    snprintf(res->failure + n, sizeof res->failure - n, " (reply \"%.200s\", slots %s)", reply ? reply : "", slots);
}

/* The error of a non-200 answer, as the gateway words it. */
static bool http_failure(ct_result *res, const sb_http_reply *r) {
    sb_json_doc *doc = NULL;
    const char *code = NULL, *msg = NULL;
    if (!sb_json_parse(r->body, r->len, &doc, NULL)) {
        const sb_json *e = sb_json_get(sb_json_root(doc), "error");
        code = sb_json_str(sb_json_get(e, "code"));
        msg = sb_json_str(sb_json_get(e, "message"));
    }
    res->http_error = true;
    failf(res, "HTTP %d %s: %.300s", r->status, code ? code : "", msg ? msg : r->body);
    sb_json_doc_free(doc);
    return false;
}

static bool exchange(runner *rn, const char *method, const char *path, const char *body, size_t len,
                     sb_http_reply *r) {
    const sb_http_call call = { .url = rn->t->url, .method = method, .path = path, .api = true,
                                .api_key = rn->t->api_key, .body = body, .body_len = len,
                                .timeout_ms = rn->t->timeout_ms };
    uint64_t t0 = sb_now_ns();
    if (sb_ask_http_call(&call, r)) {
        rn->res->unreachable = true;
        return failf(rn->res, "no answer from %s", rn->t->url);
    }
    rn->res->latency_ms[rn->res->turns_run++] = (double)(sb_now_ns() - t0) / 1e6;
    return true;
}

static bool say(runner *rn, const ct_turn *t) {
    sb_jw b = { 0 };
    sb_jw_obj(&b);
    sb_jw_key(&b, "input");
    sb_jw_str(&b, t->say);
    if (rn->session[0]) { sb_jw_key(&b, "session"); sb_jw_str(&b, rn->session); }
    sb_jw_obj_end(&b);
    char path[256];
    snprintf(path, sizeof path, "/pipelines/%s", rn->conv->pipeline);
    sb_http_reply r;
    bool ok = !b.oom ? exchange(rn, "POST", path, b.p, b.len, &r) : failf(rn->res, "out of memory");
    sb_jw_free(&b);
    if (!ok) return false;
    sb_json_doc *doc = NULL;
    char why[SB_ERR_LEN];
    if (r.status != 200) ok = http_failure(rn->res, &r);
    else if (sb_json_parse(r.body, r.len, &doc, why)) ok = failf(rn->res, "the answer is not JSON: %s", why);
    else {
        const sb_json *a = sb_json_root(doc);
        const char *id = sb_json_str(sb_json_get(a, "session"));
        const sb_json *ct = sb_json_get(sb_json_get(a, "usage"), "completion_tokens");
        rn->res->generated[rn->res->turns_run - 1] = ct && sb_json_num(ct) > 0;
        if (id && !rn->session[0]) snprintf(rn->session, sizeof rn->session, "%s", id);
        if (!(ok = check_answer(rn->res, t, a))) add_context(rn->res, a);
    }
    sb_json_doc_free(doc);
    sb_free(r.body);
    return ok;
}

static bool hang_up(runner *rn) {
    if (!rn->session[0]) return failf(rn->res, "hangup: the pipeline opened no session to end");
    char path[256];
    snprintf(path, sizeof path, "/sessions/%s", rn->session);
    sb_http_reply r;
    if (!exchange(rn, "DELETE", path, NULL, 0, &r)) return false;
    bool ok = r.status == 200 || http_failure(rn->res, &r);
    sb_free(r.body);
    rn->session[0] = '\0';
    return ok;
}

void ct_run_conv(const ct_target *t, const ct_conv *conv, ct_result *res) {
    memset(res, 0, sizeof *res);
    runner rn = { .t = t, .conv = conv, .res = res };
    res->latency_ms = sb_calloc(conv->n_turns, sizeof *res->latency_ms);
    res->generated = sb_calloc(conv->n_turns, sizeof *res->generated);
    if (!res->latency_ms || !res->generated) {
        failf(res, "out of memory");
        res->failed_turn = 1;
        res->failed_line = conv->line;
        return;
    }
    res->passed = true;
    for (size_t i = 0; i < conv->n_turns && res->passed; i++) {
        const ct_turn *turn = &conv->turns[i];
        if (!(turn->hangup ? hang_up(&rn) : say(&rn, turn))) {
            res->passed = false;
            res->failed_turn = (int)i + 1;
            res->failed_line = turn->line;
        }
    }
    /* A conversation that did not hang up leaves no session behind for its ttl. */
    if (rn.session[0] && !res->unreachable) {
        char path[256];
        snprintf(path, sizeof path, "/sessions/%s", rn.session);
        const sb_http_call call = { .url = t->url, .method = "DELETE", .path = path, .api = true,
                                    .api_key = t->api_key, .timeout_ms = t->timeout_ms };
        sb_http_reply r;
        if (!sb_ask_http_call(&call, &r)) sb_free(r.body);
    }
}
