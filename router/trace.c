/* trace.c - call ids, the ring of recent call traces, operator feedback.
 *
 * Every pipeline call gets an id (the caller's X-Call-Id when it sends a
 * valid one, else ours), returned as X-Call-Id. When the call ends its
 * trace is recorded: the whole result with every stage's input, output,
 * status and time, the intent and confidence, cache hit or miss, the reply
 * status. The ring keeps the last console.traces of them (oldest dropped);
 * GET /v1/calls/ID returns one, the console shows them live.
 *
 * Masking (console.show_caller_text: false, the default): the caller's
 * words are replaced by a placeholder wherever they appear verbatim in the
 * trace - the input, the stages' prompts and stdin, outputs that echo
 * them. Text a model derived from them (an extracted JSON field) is not
 * recognisable and stays. The words themselves stay in the router's memory
 * only, for an operator's feedback to store (sb_feedback.h).
 */
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "router/obs.h"
#include "cache/sb_feedback.h"

#define STAGES_MAX 16                           /* stages kept for the latency view per call */
#define CONFUSION_MAX_AGE_S 60                  /* the confusion's refresh without a mark of ours */

struct rt_trace {
    char id[RT_CALL_ID_MAX + 1];
    char pipeline[SB_CONFIG_MAX_NAME + 1];
    char *input;                                /* the caller's words, never shown when masked */
    char *predicted;                            /* the intent, or NULL */
    char *full;                                 /* the trace JSON without its closing brace */
    size_t full_len;
    char *summary;                              /* the console's line for it */
    size_t summary_len;
    char *feedback;                             /* the operator's intent, or NULL */
    double ms, ttft_ms;                         /* ttft_ms < 0: not streamed */
    double at;                                  /* Unix time it was recorded (retention) */
    bool ok, hit;
    int n_stages;
    struct { char name[SB_CONFIG_MAX_NAME + 1]; double ms; } st[STAGES_MAX];
};

bool rt_trace_on(rt *r) { return r->obs && r->obs->cap > 0; }

/* The id is a path segment of /v1/calls/ID: "." or ".." would be resolved
 * away by a browser (the console could not open or mark the call), so
 * punctuation may not lead. */
bool rt_call_id_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > RT_CALL_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != ':' && c != '-'))) return false;
    }
    return true;
}

void rt_call_id_new(rt *r, char out[RT_CALL_ID_MAX + 1]) {
    uint64_t n = r->obs ? ++r->obs->next_id : ++r->next_id;
    snprintf(out, RT_CALL_ID_MAX + 1, "call-%llx-%llu", (unsigned long long)time(NULL), (unsigned long long)n);
}

static void trace_free(rt_trace *t) {
    if (!t) return;
    sb_free(t->input);
    sb_free(t->predicted);
    sb_free(t->full);
    sb_free(t->summary);
    sb_free(t->feedback);
    sb_free(t);
}

/* ------------------------------------------------------------- masking */

typedef struct {
    const char *needle[2];                      /* the caller's words; with line breaks folded */
    size_t len[2];
    char mask[96];
} masker;

static void masked_str(sb_jw *w, const char *s, size_t n, const masker *m) {
    sb_jw tmp;
    sb_jw_init(&tmp);
    size_t i = 0;
    while (i < n) {
        int hit = -1;
        for (int k = 0; k < 2 && hit < 0; k++)
            if (m->len[k] && n - i >= m->len[k] && !memcmp(s + i, m->needle[k], m->len[k])) hit = k;
        if (hit >= 0) {
            sb_jw_raw(&tmp, m->mask, strlen(m->mask));
            i += m->len[hit];
        } else {
            sb_jw_raw(&tmp, s + i, 1);
            i++;
        }
    }
    sb_jw_strn(w, tmp.p ? tmp.p : "", tmp.len);
    w->oom |= tmp.oom;
    sb_jw_free(&tmp);
}

/* v re-encoded with every string's caller text masked (m NULL: as is). */
static void copy_json(sb_jw *w, const sb_json *v, const masker *m) {
    switch (sb_json_type_of(v)) {
    case SB_JSON_STRING:
        if (m) masked_str(w, sb_json_str(v), sb_json_len(v), m);
        else sb_jw_value(w, v);
        break;
    case SB_JSON_ARRAY:
        sb_jw_arr(w);
        for (size_t i = 0; i < sb_json_len(v); i++) copy_json(w, sb_json_at(v, i), m);
        sb_jw_arr_end(w);
        break;
    case SB_JSON_OBJECT:
        sb_jw_obj(w);
        for (size_t i = 0; i < sb_json_len(v); i++) {
            sb_jw_key(w, sb_json_key_at(v, i));
            copy_json(w, sb_json_val_at(v, i), m);
        }
        sb_jw_obj_end(w);
        break;
    default:
        sb_jw_value(w, v);
    }
}

/* --------------------------------------------------------------- record */

/* Calls per intent over the last hour, by minute. */
static void count_routing(rt_obs *o, const char *intent, bool fallback) {
    int64_t minute = (int64_t)time(NULL) / 60;
    rt_rslot *s = &o->slots[minute % RT_ROUTING_SLOTS];
    if (s->minute != minute) memset(s, 0, sizeof *s), s->minute = minute;
    s->calls++;
    s->fallback += fallback;
    if (!intent) return;
    for (int i = 0; i < RT_ROUTING_INTENTS; i++) {
        if (!o->intents[i][0]) snprintf(o->intents[i], sizeof o->intents[i], "%s", intent);
        if (!strcmp(o->intents[i], intent)) { s->n[i]++; return; }
    }
    s->other++;
}

static void summary_json(const rt_trace *t, const rt_call_info *ci, const sb_json *res, const sb_json *caller,
                         sb_jw *w, double wall) {
    sb_jw_obj(w);
    sb_jw_key(w, "type"); sb_jw_str(w, "call");
    sb_jw_key(w, "id"); sb_jw_str(w, t->id);
    sb_jw_key(w, "time"); sb_jw_num(w, wall);
    sb_jw_key(w, "pipeline"); sb_jw_str(w, t->pipeline);
    sb_jw_key(w, "caller"); copy_json(w, caller, NULL);
    sb_jw_key(w, "intent"); sb_jw_str(w, t->predicted);
    sb_jw_key(w, "confidence"); sb_jw_value(w, sb_json_get(res, "confidence"));
    sb_jw_key(w, "fallback"); sb_jw_bool(w, sb_json_bool(sb_json_get(res, "fallback")));
    sb_jw_key(w, "cache"); sb_jw_str(w, ci->cache);
    sb_jw_key(w, "status"); sb_jw_int(w, ci->status);
    sb_jw_key(w, "error"); sb_jw_str(w, ci->error);
    sb_jw_key(w, "ms"); sb_jw_num(w, (double)(int64_t)(t->ms * 10) / 10);
    sb_jw_key(w, "ttft_ms");
    if (t->ttft_ms >= 0) sb_jw_num(w, t->ttft_ms); else sb_jw_null(w);
    sb_jw_key(w, "stages");
    sb_jw_arr(w);
    const sb_json *st = sb_json_get(res, "stages");
    for (size_t i = 0; i < sb_json_len(st); i++) {
        const sb_json *s = sb_json_at(st, i);
        sb_jw_obj(w);
        sb_jw_key(w, "name"); sb_jw_value(w, sb_json_get(s, "name"));
        sb_jw_key(w, "status"); sb_jw_value(w, sb_json_get(s, "status"));
        sb_jw_key(w, "ms"); sb_jw_value(w, sb_json_get(s, "ms"));
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    sb_jw_key(w, "feedback"); sb_jw_null(w);
    sb_jw_obj_end(w);
}

/* Stage times and the end-to-end time of a call that ran (not a hit), for
 * the console's percentiles. */
static void keep_times(rt_trace *t, const sb_json *res) {
    const sb_json *st = sb_json_get(res, "stages");
    for (size_t i = 0; i < sb_json_len(st) && t->n_stages < STAGES_MAX; i++) {
        const sb_json *s = sb_json_at(st, i), *status = sb_json_get(s, "status");
        if (!sb_json_str(status) || (strcmp(sb_json_str(status), "ok") && strcmp(sb_json_str(status), "error")))
            continue;
        snprintf(t->st[t->n_stages].name, sizeof t->st[0].name, "%s", sb_json_str(sb_json_get(s, "name")));
        t->st[t->n_stages++].ms = sb_json_num(sb_json_get(s, "ms"));
    }
    const sb_json *tt = sb_json_get(res, "ttft_ms");
    t->ttft_ms = sb_json_type_of(tt) == SB_JSON_NUMBER ? sb_json_num(tt) : -1;
}

static int build(rt *r, rt_trace *t, const rt_call_info *ci) {
    rt_obs *o = r->obs;
    sb_jw res, w;
    sb_jw_init(&res);
    sb_jw_init(&w);
    if (ci->run) rt_run_trace_json(ci->run, &res);
    else if (ci->cached) sb_jw_raw(&res, ci->cached, ci->cached_len);
    else sb_jw_raw(&res, "{}", 2);
    sb_json_doc *d = NULL, *cd = NULL;
    int rc = res.oom ? SB_ENOMEM : sb_json_parse(res.p, res.len, &d, NULL);
    /* The masked form of the caller's words. */
    masker mk = { { ci->input, NULL }, { strlen(ci->input), 0 }, "" };
    char *folded = sb_strdup(ci->input);
    if (folded) {
        for (char *p = folded; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
        if (strcmp(folded, ci->input)) { mk.needle[1] = folded; mk.len[1] = strlen(folded); }
    }
    snprintf(mk.mask, sizeof mk.mask, "[caller text: %zu bytes]", mk.len[0]);
    const masker *m = o->show_text ? NULL : &mk;
    sb_jw cj;
    sb_jw_init(&cj);
    if (m) sb_jw_str(&cj, mk.mask); else sb_jw_str(&cj, ci->input);
    if (!rc && !cj.oom) rc = sb_json_parse(cj.p, cj.len, &cd, NULL);
    if (!rc) {
        const sb_json *root = sb_json_root(d);
        const char *intent = sb_json_str(sb_json_get(root, "intent"));
        t->predicted = intent ? sb_strdup(intent) : NULL;
        t->hit = ci->cached != NULL;
        if (!t->hit) keep_times(t, root);
        else t->ttft_ms = -1;
        double wall = (double)time(NULL);
        sb_jw_obj(&w);
        sb_jw_key(&w, "id"); sb_jw_str(&w, t->id);
        sb_jw_key(&w, "time"); sb_jw_num(&w, wall);
        sb_jw_key(&w, "pipeline"); sb_jw_str(&w, t->pipeline);
        sb_jw_key(&w, "source"); sb_jw_str(&w, ci->source);
        sb_jw_key(&w, "caller"); copy_json(&w, sb_json_root(cd), NULL);
        sb_jw_key(&w, "caller_masked"); sb_jw_bool(&w, m != NULL);
        sb_jw_key(&w, "cache"); sb_jw_str(&w, ci->cache);
        sb_jw_key(&w, "status"); sb_jw_int(&w, ci->status);
        sb_jw_key(&w, "error"); if (m && ci->error) masked_str(&w, ci->error, strlen(ci->error), m); else sb_jw_str(&w, ci->error);
        sb_jw_key(&w, "ms"); sb_jw_num(&w, (double)(int64_t)(t->ms * 10) / 10);
        sb_jw_key(&w, "result"); copy_json(&w, root, m);
        /* no closing brace: "feedback" is added when served */
        t->full = w.oom ? NULL : sb_malloc(w.len + 1);
        if (t->full) { memcpy(t->full, w.p, w.len); t->full_len = w.len; }
        sb_jw_reset(&w);
        summary_json(t, ci, root, sb_json_root(cd), &w, wall);
        t->summary = w.oom ? NULL : sb_malloc(w.len + 1);
        if (t->summary) { memcpy(t->summary, w.p, w.len); t->summary_len = w.len; }
        if (!t->full || !t->summary) rc = SB_ENOMEM;
        else count_routing(o, t->predicted, sb_json_bool(sb_json_get(root, "fallback")));
    }
    sb_free(folded);
    sb_json_doc_free(d);
    sb_json_doc_free(cd);
    sb_jw_free(&cj);
    sb_jw_free(&res);
    sb_jw_free(&w);
    return rc;
}

/* The call's times into (or out of) the sorted latency window: those of
 * calls that ran (hits are the cache's own story), as the ring holds them. */
static void lat_window(rt_obs *o, const rt_trace *t, bool add) {
    if (!t || t->hit) return;
    struct { const char *p, *s; double v; bool on; } vals[2 + STAGES_MAX] = {
        { "", RT_LAT_END_TO_END, t->ms, t->ok },
        { "", RT_LAT_TTFT, t->ttft_ms, t->ttft_ms >= 0 },
    };
    int n = 2;
    for (int u = 0; u < t->n_stages; u++, n++) {
        vals[n].p = t->pipeline;
        vals[n].s = t->st[u].name;
        vals[n].v = t->st[u].ms;
        vals[n].on = true;
    }
    for (int i = 0; i < n; i++) {
        if (!vals[i].on) continue;
        if (!add) rt_latwin_remove(&o->lat, vals[i].p, vals[i].s, vals[i].v);
        else if (rt_latwin_add(&o->lat, vals[i].p, vals[i].s, vals[i].v)) sb_warn("call %s: latency window: out of memory", t->id);
    }
}

void rt_trace_record(rt *r, const rt_call_info *ci) {
    rt_obs *o = r->obs;
    if (!o || (!o->cap && !rt_otel_on(o)) || !ci->call_id[0]) return;
    rt_trace *t = sb_calloc(1, sizeof *t);
    if (!t) return;
    snprintf(t->id, sizeof t->id, "%s", ci->call_id);
    snprintf(t->pipeline, sizeof t->pipeline, "%s", ci->pipeline);
    t->ms = (sb_now_s() - ci->t0) * 1e3;
    t->ok = ci->status < 400;
    t->at = (double)time(NULL);
    t->input = sb_strdup(ci->input ? ci->input : "");
    rt_call_info c = *ci;
    c.input = t->input ? t->input : "";
    if (!t->input || build(r, t, &c)) {
        sb_warn("call %s: trace not recorded (out of memory)", t->id);
        trace_free(t);
        return;
    }
    rt_otel_export(r, &c, t->full, t->full_len);
    if (!o->cap) { trace_free(t); return; }     /* exported only: the ring is off */
    lat_window(o, o->ring[o->head], false);
    trace_free(o->ring[o->head]);
    o->ring[o->head] = t;
    lat_window(o, t, true);
    o->changes++;
    o->head = (o->head + 1) % o->cap;
    if (o->count < o->cap) o->count++;
    rt_console_call(r);
}

/* The ring is in recording order, so the traces recorded before `before`
 * are its oldest: dropped from that end. */
int rt_trace_purge_before(rt *r, double before) {
    rt_obs *o = r->obs;
    int n = 0;
    while (o && o->count) {
        size_t oldest = (o->head + o->cap - o->count) % o->cap;
        rt_trace *t = o->ring[oldest];
        if (t->at >= before) break;
        lat_window(o, t, false);
        trace_free(t);
        o->ring[oldest] = NULL;
        o->count--;
        o->changes++;
        n++;
    }
    return n;
}

/* Erasure: the ring rebuilt without the matching traces, in order. Their
 * input is handed to `dropped` first (the cache entries made from it go
 * too). */
int rt_trace_erase(rt *r, const char *call_id, rt_text_match_fn match, void *arg,
                   void (*dropped)(void *arg, const char *input), void *darg) {
    rt_obs *o = r->obs;
    if (!o || !o->count) return 0;
    size_t kept = 0, first = (o->head + o->cap - o->count) % o->cap;
    int n = 0;
    for (size_t k = 0; k < o->count; k++) {
        size_t at = (first + k) % o->cap;
        rt_trace *t = o->ring[at];
        o->ring[at] = NULL;
        bool hit = (call_id && !strcmp(t->id, call_id)) ||
                   (match && (match(arg, t->input, strlen(t->input)) || match(arg, t->full, t->full_len) ||
                              match(arg, t->summary, t->summary_len)));
        if (!hit) {
            o->ring[(first + kept++) % o->cap] = t;
            continue;
        }
        if (dropped) dropped(darg, t->input);
        lat_window(o, t, false);
        trace_free(t);
        n++;
    }
    o->count = kept;
    o->head = (first + kept) % o->cap;
    if (o->unsent > kept) o->unsent = kept;
    if (n) o->changes++;
    return n;
}

/* The newest trace with this id, or NULL. */
static rt_trace *find(rt_obs *o, const char *id) {
    for (size_t k = 1; o && k <= o->count; k++) {
        rt_trace *t = o->ring[(o->head + o->cap - k) % o->cap];
        if (!strcmp(t->id, id)) return t;
    }
    return NULL;
}

/* ----------------------------------------------------------- the views */

/* A call's summary line, with the operator's mark when it has one. */
static void put_summary(sb_jw *w, const rt_trace *t) {
    static const char tail[] = "\"feedback\":null}";
    if (!t->feedback || t->summary_len < sizeof tail) { sb_jw_raw(w, t->summary, t->summary_len); return; }
    /* A marked call: the summary's "feedback":null patched in the copy
     * (an intent is a label name, no escaping needed). */
    sb_jw_raw(w, t->summary, t->summary_len - (sizeof tail - 1));
    sb_jw_raw(w, "\"feedback\":\"", 12);
    sb_jw_raw(w, t->feedback, strlen(t->feedback));
    sb_jw_raw(w, "\"}", 2);
}

void rt_trace_recent_json(rt *r, sb_jw *w, int max) {
    rt_obs *o = r->obs;
    sb_jw_arr(w);                   /* items go in raw: commas are ours */
    for (size_t k = 1; o && k <= o->count && (int)k <= max; k++) {
        if (k > 1) sb_jw_raw(w, ",", 1);
        put_summary(w, o->ring[(o->head + o->cap - k) % o->cap]);
    }
    sb_jw_arr_end(w);
}

void rt_trace_feed(rt *r, sb_jw *w, size_t n) {
    rt_obs *o = r->obs;
    if (!o || n > o->count) n = o ? o->count : 0;
    for (size_t k = n; k >= 1; k--) {
        sb_jw_raw(w, "data: ", 6);
        put_summary(w, o->ring[(o->head + o->cap - k) % o->cap]);
        sb_jw_raw(w, "\n\n", 2);
    }
}

void rt_trace_latency_json(rt *r, sb_jw *w) {
    if (r->obs) rt_latwin_json(&r->obs->lat, w);
    else { sb_jw_obj(w); sb_jw_obj_end(w); }
}

static sb_feedback *feedback_db(rt_obs *o, bool create) {
    if (o->fb || !o->feedback_path) return o->fb;
    char err[SB_ERR_LEN];
    int rc = sb_feedback_open(o->feedback_path, create, &o->fb, err);
    if (rc && rc != SB_ENOTFOUND) sb_warn("%s", err);
    return o->fb;
}

int rt_feedback_erase(rt *r, const char *call_id, rt_text_match_fn match, void *arg, char *err) {
    sb_feedback *f = r->obs ? feedback_db(r->obs, false) : NULL;
    int n = f ? sb_feedback_erase(f, call_id, match, arg, err) : 0;
    if (n > 0) r->obs->confusion_ok = false;
    return n;
}

int rt_feedback_purge_before(rt *r, double before, char *err) {
    sb_feedback *f = r->obs ? feedback_db(r->obs, false) : NULL;   /* no file: nothing to purge */
    int n = f ? sb_feedback_purge_before(f, (int64_t)before, err) : 0;
    if (n > 0) r->obs->confusion_ok = false;
    return n;
}

static void pair_json(void *arg, const char *pipeline, const char *predicted, const char *intent, int64_t n) {
    sb_jw *w = arg;
    sb_jw_obj(w);
    sb_jw_key(w, "pipeline"); sb_jw_str(w, pipeline);
    sb_jw_key(w, "predicted"); sb_jw_str(w, predicted);
    sb_jw_key(w, "corrected"); sb_jw_str(w, intent);
    sb_jw_key(w, "n"); sb_jw_int(w, n);
    sb_jw_obj_end(w);
}

/* Calls per intent and the fallback rate over the last hour; the
 * confusion operators' corrections show. */
void rt_trace_routing_json(rt *r, sb_jw *w) {
    rt_obs *o = r->obs;
    int64_t now = (int64_t)time(NULL) / 60;
    uint64_t calls = 0, fb = 0, other = 0, n[RT_ROUTING_INTENTS] = {0};
    for (int s = 0; o && s < RT_ROUTING_SLOTS; s++) {
        const rt_rslot *sl = &o->slots[s];
        if (sl->minute <= now - RT_ROUTING_SLOTS) continue;
        calls += sl->calls;
        fb += sl->fallback;
        other += sl->other;
        for (int i = 0; i < RT_ROUTING_INTENTS; i++) n[i] += sl->n[i];
    }
    sb_jw_obj(w);
    sb_jw_key(w, "window_s"); sb_jw_int(w, RT_ROUTING_SLOTS * 60);
    sb_jw_key(w, "calls"); sb_jw_int(w, (int64_t)calls);
    sb_jw_key(w, "fallback"); sb_jw_int(w, (int64_t)fb);
    sb_jw_key(w, "intents");
    sb_jw_obj(w);
    for (int i = 0; o && i < RT_ROUTING_INTENTS && o->intents[i][0]; i++)
        if (n[i]) { sb_jw_key(w, o->intents[i]); sb_jw_int(w, (int64_t)n[i]); }
    if (other) { sb_jw_key(w, "(other)"); sb_jw_int(w, (int64_t)other); }
    sb_jw_obj_end(w);
    sb_jw_key(w, "confusion");
    /* A query of the feedback database: run again only after a mark (this
     * router writes them) or CONFUSION_MAX_AGE_S, for another writer. */
    double now_s = sb_now_s();
    if (o && (!o->confusion_ok || now_s - o->confusion_at >= CONFUSION_MAX_AGE_S)) {
        sb_jw_reset(&o->confusion);
        sb_jw_arr(&o->confusion);
        sb_feedback *f = feedback_db(o, false);
        if (f) sb_feedback_confusion(f, pair_json, &o->confusion, NULL);
        sb_jw_arr_end(&o->confusion);
        o->confusion_ok = !o->confusion.oom;
        o->confusion_at = now_s;
    }
    sb_jw_arr(w);                       /* the kept items go in raw, between our brackets */
    if (o && o->confusion_ok && o->confusion.len > 2) sb_jw_raw(w, o->confusion.p + 1, o->confusion.len - 2);
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
}

/* ---------------------------------------------------------- the routes */

static void reply_trace(rt_req *q, const rt_trace *t) {
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    sb_jw_raw(w, t->full, t->full_len);
    sb_jw_raw(w, ",\"feedback\":", 12);
    if (t->feedback) { sb_jw_raw(w, "\"", 1); sb_jw_raw(w, t->feedback, strlen(t->feedback)); sb_jw_raw(w, "\"}", 2); }
    else sb_jw_raw(w, "null}", 5);
    if (w->oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, w->p, w->len, NULL);
}

/* The labels an operator may choose for a call of pipeline p: its intent
 * stages' labels and fallbacks, in the current config. */
static bool label_allowed(rt *r, const char *pipeline, const char *intent) {
    rt_conf *c = rt_conf_acquire(&r->ex);
    const sb_pipeline *p = c ? sb_pipelines_find(c->pipes, pipeline) : NULL;
    bool ok = false;
    for (size_t i = 0; p && i < p->n_stages && !ok; i++) {
        const sb_stage *s = &p->stages[i];
        if (s->kind != SB_STAGE_INTENT) continue;
        ok = s->fallback && !strcmp(s->fallback, intent);
        for (size_t k = 0; k < s->n_labels && !ok; k++) ok = !strcmp(s->labels[k].name, intent);
    }
    rt_conf_release(c);
    return ok;
}

static void feedback(rt_req *q, rt_trace *t) {
    rt *r = q->r;
    sb_json_doc *d = rt_req_body_json(q);
    if (!d) return;
    const sb_json *in = sb_json_get(sb_json_root(d), "intent");
    const char *intent = sb_json_str(in);
    char err[SB_ERR_LEN];
    if (!intent || sb_json_len(sb_json_root(d)) != 1) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "expected {\"intent\": LABEL}");
    } else if (!label_allowed(r, t->pipeline, intent)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                     "'intent': '%.64s' is not a label of pipeline '%s''s intent stage", intent, t->pipeline);
    } else if (!feedback_db(r->obs, true)) {
        rt_req_error(q, 503, "server_error", "feedback_unavailable", "the feedback database cannot be opened (see the log)");
    } else {
        sb_feedback_row row = { t->id, t->pipeline, t->predicted, intent, t->input, (int64_t)time(NULL) };
        if (sb_feedback_put(r->obs->fb, &row, err)) {
            sb_warn("%s", err);
            rt_req_error(q, 503, "server_error", "feedback_unavailable", "the feedback was not stored (see the log)");
        } else {
            sb_free(t->feedback);
            t->feedback = sb_strdup(intent);
            r->obs->confusion_ok = false;
            r->obs->changes++;
            sb_jw *w = &q->out;
            sb_jw_reset(w);
            sb_jw_obj(w);
            sb_jw_key(w, "type"); sb_jw_str(w, "feedback");
            sb_jw_key(w, "id"); sb_jw_str(w, t->id);
            sb_jw_key(w, "predicted"); sb_jw_str(w, t->predicted);
            sb_jw_key(w, "intent"); sb_jw_str(w, intent);
            sb_jw_obj_end(w);
            if (!w->oom) rt_console_publish(r, w->p, w->len);
            rt_req_json(q, 200, w->p, w->len, NULL);
        }
    }
    sb_json_doc_free(d);
}

void rt_handle_calls(rt_req *q, const char *rest, bool is_post) {
    rt *r = q->r;
    if (!*rest) {                   /* GET /v1/calls: the recent summaries, newest first */
        sb_jw *w = &q->out;
        sb_jw_reset(w);
        sb_jw_obj(w);
        sb_jw_key(w, "calls");
        rt_trace_recent_json(r, w, INT32_MAX);
        sb_jw_obj_end(w);
        rt_req_json(q, 200, w->p, w->len, NULL);
        return;
    }
    char id[RT_CALL_ID_MAX + 1];
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    bool want_fb = slash && !strcmp(slash, "/feedback");
    if (n > RT_CALL_ID_MAX || (slash && !want_fb)) {
        rt_req_error(q, 404, "invalid_request_error", "not_found", "no route for %s", q->path);
        return;
    }
    memcpy(id, rest, n);
    id[n] = '\0';
    if (want_fb != is_post) {
        evhttp_add_header(evhttp_request_get_output_headers(q->req), "Allow", want_fb ? "POST" : "GET");
        rt_req_error(q, 405, "invalid_request_error", "method_not_allowed", "%s takes %s", q->path,
                     want_fb ? "POST" : "GET");
        return;
    }
    rt_trace *t = rt_call_id_valid(id) ? find(r->obs, id) : NULL;
    if (!t) {
        rt_req_error(q, 404, "invalid_request_error", "call_not_found",
                     "no call '%.64s' among the last %zu traced (console.traces)", id, r->obs ? r->obs->cap : 0);
        return;
    }
    if (want_fb) feedback(q, t);
    else reply_trace(q, t);
}

static int tsv_out(void *arg, const char *line, size_t len) {
    sb_jw *w = arg;
    sb_jw_raw(w, line, len);
    return w->oom ? SB_ENOMEM : 0;
}

void rt_handle_feedback_tsv(rt_req *q) {
    rt *r = q->r;
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    char err[SB_ERR_LEN];
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(q->req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    struct evkeyvalq args;
    args.tqh_first = NULL;          /* TAILQ_INIT, which libevent's public headers do not define */
    args.tqh_last = &args.tqh_first;
    const char *pipeline = query && !evhttp_parse_query_str(query, &args) ? evhttp_find_header(&args, "pipeline") : NULL;
    sb_feedback *f = r->obs ? feedback_db(r->obs, false) : NULL;
    int rc = f ? sb_feedback_tsv(f, pipeline, tsv_out, w, err) : 0;
    evhttp_clear_headers(&args);
    if (rc) { rt_req_error(q, 500, "server_error", "feedback_unavailable", "%s", err); return; }
    rt_req_reply(q, 200, "text/tab-separated-values; charset=utf-8", w->p ? w->p : "", w->len);
}

/* ------------------------------------------------------------- config */

int rt_obs_configure(rt *r, const sb_config *cfg, char *err) {
    rt_obs *o = r->obs;
    if (!o) {
        if (!(o = r->obs = sb_calloc(1, sizeof *o))) return sb_seterr(err, SB_ENOMEM, "out of memory");
        sb_jw_init(&o->batch);
        sb_jw_init(&o->confusion);
    }
    size_t cap = (size_t)cfg->console.traces;
    if (cap != o->cap) {            /* a new size starts an empty ring */
        rt_trace **ring = cap ? sb_calloc(cap, sizeof *ring) : NULL;
        if (cap && !ring) return sb_seterr(err, SB_ENOMEM, "console.traces: out of memory for %zu traces", cap);
        for (size_t i = 0; i < o->cap; i++) trace_free(o->ring[i]);
        sb_free(o->ring);
        rt_latwin_clear(&o->lat);
        o->ring = ring;
        o->cap = cap;
        o->head = o->count = 0;
    }
    o->show_text = cfg->console.show_caller_text;
    if (!o->feedback_path || strcmp(o->feedback_path, cfg->console.feedback_path)) {
        sb_feedback_close(o->fb);
        o->fb = NULL;
        sb_free(o->feedback_path);
        o->feedback_path = sb_strdup(cfg->console.feedback_path);
        o->confusion_ok = false;
    }
    return rt_otel_configure(o, cfg->console.otel_file, err);
}

void rt_obs_free(rt *r) {
    rt_obs *o = r->obs;
    if (!o) return;
    rt_console_stop(r);
    for (size_t i = 0; i < o->cap; i++) trace_free(o->ring[i]);
    sb_free(o->ring);
    rt_latwin_clear(&o->lat);
    sb_jw_free(&o->confusion);
    sb_free(o->rss);
    sb_feedback_close(o->fb);
    sb_free(o->feedback_path);
    rt_otel_free(o);
    rt_hist_free(o);
    sb_free(o);
    r->obs = NULL;
}
