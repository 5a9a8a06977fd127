/* hist.c - latency histograms for /metrics, in the Prometheus text format
 * (`_bucket` with cumulative counts and `le`, `_sum`, `_count`).
 *
 * One family per question an operator asks: which stage is slow (per
 * pipeline and stage), how long a call takes end to end, when the first
 * token reaches the caller, how long a model call takes at the worker and
 * how long it waited in the router's FIFO before. Label values are config
 * names ([A-Za-z0-9_-]), so a family has as many series as the config has
 * stages or models; RT_HIST_MAX_SERIES bounds it anyway (a reload that
 * renames everything adds series, old ones stay until restart).
 */
#include <stdio.h>
#include <string.h>

#include "router/obs.h"

/* Seconds: a cache hit's stage is sub-millisecond; a composer on a 2-core
 * box takes tens of seconds. Buckets per decade 1, 2.5, 5. */
static const double bounds[RT_HIST_BUCKETS] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,   0.5,   1,      2.5,   5,    10,   30,    120 };

static const struct {
    const char *name, *a, *b, *help;
} fams[RT_H_COUNT] = {
    [RT_H_STAGE] = { "switchboard_stage_duration_seconds", "pipeline", "stage",
                     "Time of one pipeline stage, from its start to its result (any status but skipped)." },
    [RT_H_PIPELINE] = { "switchboard_pipeline_duration_seconds", "pipeline", NULL,
                        "A successful pipeline run, first stage start to last stage end (cache hits excluded)." },
    [RT_H_TTFT_PIPELINE] = { "switchboard_pipeline_ttft_seconds", "pipeline", NULL,
                             "Run start to the answer's first streamed token (stream: true calls only)." },
    [RT_H_MODEL] = { "switchboard_model_call_seconds", "model", "method",
                     "One call at a model's worker or upstream, handed over to answered." },
    [RT_H_QUEUE] = { "switchboard_model_queue_wait_seconds", "model", NULL,
                     "Time a call waited in the router's FIFO for a model before it was handed over." },
    [RT_H_TTFT_MODEL] = { "switchboard_model_ttft_seconds", "model", NULL,
                          "A generate call's time to first token: submit to the first streamed token, or "
                          "queue wait plus the worker's prompt time when not streamed." },
};

static rt_hseries *series(rt_hfam *f, const char *a, const char *b) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->s[i].a, a) && !strcmp(f->s[i].b, b)) return &f->s[i];
    if (f->n == f->cap) {
        if (f->cap >= RT_HIST_MAX_SERIES) return NULL;
        size_t cap = f->cap ? f->cap * 2 : 8;
        rt_hseries *ns = sb_realloc(f->s, cap * sizeof *ns);
        if (!ns) return NULL;
        f->s = ns;
        f->cap = cap;
    }
    rt_hseries *s = &f->s[f->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->a, sizeof s->a, "%s", a);
    snprintf(s->b, sizeof s->b, "%s", b);
    return s;
}

void rt_hist_observe(rt *r, int f, const char *a, const char *b, double seconds) {
    if (!r->obs || f < 0 || f >= RT_H_COUNT) return;
    if (seconds < 0) seconds = 0;
    rt_hfam *fam = &r->obs->fam[f];
    rt_hseries *s = series(fam, a ? a : "", b ? b : "");
    if (!s) { fam->dropped++; return; }
    int k = 0;
    while (k < RT_HIST_BUCKETS && seconds > bounds[k]) k++;
    s->bucket[k]++;
    s->sum += seconds;
    s->n++;
}

/* A label value as the exposition format wants it: \ " and newline escaped. */
static void label(sb_jw *w, const char *name, const char *v) {
    sb_jw_raw(w, name, strlen(name));
    sb_jw_raw(w, "=\"", 2);
    for (const char *p = v; *p; p++) {
        if (*p == '\\' || *p == '"') sb_jw_raw(w, "\\", 1);
        if (*p == '\n') sb_jw_raw(w, "\\n", 2);
        else sb_jw_raw(w, p, 1);
    }
    sb_jw_raw(w, "\"", 1);
}

static void sample(sb_jw *w, int f, const rt_hseries *s, const char *suffix, const char *le, double v) {
    char num[64];
    sb_jw_raw(w, fams[f].name, strlen(fams[f].name));
    sb_jw_raw(w, suffix, strlen(suffix));
    sb_jw_raw(w, "{", 1);
    label(w, fams[f].a, s->a);
    if (fams[f].b) { sb_jw_raw(w, ",", 1); label(w, fams[f].b, s->b); }
    if (le) { sb_jw_raw(w, ",", 1); label(w, "le", le); }
    int n = snprintf(num, sizeof num, "} %.9g\n", v);
    sb_jw_raw(w, num, (size_t)n);
}

void rt_hist_render(rt *r, sb_jw *w) {
    if (!r->obs) return;
    char head[512], le[32];
    for (int f = 0; f < RT_H_COUNT; f++) {
        const rt_hfam *fam = &r->obs->fam[f];
        int n = snprintf(head, sizeof head, "# HELP %s %s\n# TYPE %s histogram\n", fams[f].name, fams[f].help,
                         fams[f].name);
        sb_jw_raw(w, head, (size_t)n);
        for (size_t i = 0; i < fam->n; i++) {
            const rt_hseries *s = &fam->s[i];
            uint64_t cum = 0;
            for (int k = 0; k < RT_HIST_BUCKETS; k++) {
                cum += s->bucket[k];
                snprintf(le, sizeof le, "%g", bounds[k]);
                sample(w, f, s, "_bucket", le, (double)cum);
            }
            sample(w, f, s, "_bucket", "+Inf", (double)s->n);
            sample(w, f, s, "_sum", NULL, s->sum);
            sample(w, f, s, "_count", NULL, (double)s->n);
        }
    }
}

void rt_hist_free(rt_obs *o) {
    for (int f = 0; f < RT_H_COUNT; f++) sb_free(o->fam[f].s);
}
