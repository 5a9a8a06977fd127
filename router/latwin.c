/* latwin.c - latency percentiles over the calls in the trace ring, kept
 * sorted as calls enter and leave it.
 *
 * The console shows p50/p95/p99 end to end, of the time to first token and
 * per pipeline/stage over the ring. Sorting the ring for every snapshot
 * (one qsort and one scan with string compares per stage) cost more than
 * anything else the console does per second under a slow hotline load
 * (docs/router.md, "What the console costs"); a sorted array per key costs
 * a binary search and a memmove per value as a call is recorded or
 * dropped, and a snapshot reads three elements per key.
 */
#include <stdio.h>
#include <string.h>

#include "router/obs.h"

/* First index whose value is >= v. */
static size_t lower_bound(const double *a, size_t n, double v) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static rt_latkey *find_key(rt_latwin *lw, const char *pipeline, const char *stage, bool create) {
    for (size_t i = 0; i < lw->n; i++)
        if (!strcmp(lw->k[i].pipeline, pipeline) && !strcmp(lw->k[i].stage, stage)) return &lw->k[i];
    if (!create) return NULL;
    if (lw->n == lw->cap) {
        size_t cap = lw->cap ? lw->cap * 2 : 8;
        rt_latkey *nk = sb_realloc(lw->k, cap * sizeof *nk);
        if (!nk) return NULL;
        lw->k = nk;
        lw->cap = cap;
    }
    rt_latkey *k = &lw->k[lw->n++];
    memset(k, 0, sizeof *k);
    snprintf(k->pipeline, sizeof k->pipeline, "%s", pipeline);
    snprintf(k->stage, sizeof k->stage, "%s", stage);
    return k;
}

int rt_latwin_add(rt_latwin *lw, const char *pipeline, const char *stage, double v) {
    rt_latkey *k = find_key(lw, pipeline, stage, true);
    if (!k) return SB_ENOMEM;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 16;
        double *nv = sb_realloc(k->v, cap * sizeof *nv);
        if (!nv) return SB_ENOMEM;
        k->v = nv;
        k->cap = cap;
    }
    size_t at = lower_bound(k->v, k->n, v);
    memmove(k->v + at + 1, k->v + at, (k->n - at) * sizeof *k->v);
    k->v[at] = v;
    k->n++;
    return 0;
}

void rt_latwin_remove(rt_latwin *lw, const char *pipeline, const char *stage, double v) {
    rt_latkey *k = find_key(lw, pipeline, stage, false);
    if (!k) return;
    size_t at = lower_bound(k->v, k->n, v);
    if (at == k->n || k->v[at] != v) return;        /* never added (out of memory then) */
    memmove(k->v + at, k->v + at + 1, (k->n - at - 1) * sizeof *k->v);
    k->n--;
}

void rt_latwin_clear(rt_latwin *lw) {
    for (size_t i = 0; i < lw->n; i++) sb_free(lw->k[i].v);
    sb_free(lw->k);
    memset(lw, 0, sizeof *lw);
}

/* {"n", "p50", "p95", "p99"}, nearest rank (as before: the figures the
 * console showed when it sorted the ring). */
static void pcts(sb_jw *w, const rt_latkey *k) {
    static const double q[] = { 0.50, 0.95, 0.99 };
    static const char *const name[] = { "p50", "p95", "p99" };
    size_t n = k ? k->n : 0;
    sb_jw_obj(w);
    sb_jw_key(w, "n"); sb_jw_int(w, (int64_t)n);
    for (int i = 0; i < 3; i++) {
        sb_jw_key(w, name[i]);
        size_t rank = (size_t)(q[i] * (double)n + 0.999999);
        if (n) sb_jw_fixed(w, k->v[(rank ? rank : 1) - 1], 1); else sb_jw_null(w);   /* ms, to 0.1 */
    }
    sb_jw_obj_end(w);
}

void rt_latwin_json(rt_latwin *lw, sb_jw *w) {
    sb_jw_obj(w);
    sb_jw_key(w, "end_to_end"); pcts(w, find_key(lw, "", RT_LAT_END_TO_END, false));
    sb_jw_key(w, "ttft"); pcts(w, find_key(lw, "", RT_LAT_TTFT, false));
    sb_jw_key(w, "stages");
    sb_jw_obj(w);
    for (size_t i = 0; i < lw->n; i++) {
        const rt_latkey *k = &lw->k[i];
        if (!k->pipeline[0] || !k->n) continue;         /* the two above; stages no call in the ring ran */
        char key[2 * SB_CONFIG_MAX_NAME + 2];
        snprintf(key, sizeof key, "%s/%s", k->pipeline, k->stage);
        sb_jw_key(w, key);
        pcts(w, k);
    }
    sb_jw_obj_end(w);
    sb_jw_obj_end(w);
}
