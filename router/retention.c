/* retention.c - runtime.retention: what callers said is kept for a
 * configured number of days, then purged (docs/PRIVACY.md, "Retention").
 *
 * Three stores hold callers' words in the router: the ring of call traces
 * (memory), the sessions' transcripts and the feedback marks (SQLite
 * files). Once at start and then every hour each is purged of what is
 * older than its days, read from the config in use at that moment, so a
 * reload's new values need no restart. An hour is the granularity a
 * policy in days needs; the purges are a few indexed deletes.
 */
#include <event2/event.h>
#include <time.h>

#include "router/obs.h"

#define RETENTION_EVERY_S 3600
#define DAY_S 86400.0

void rt_retention_purge(rt *r, double now) {
    const sb_config *cfg = r->ex.conf->cfg;
    int traces = cfg->runtime.retention.traces_days, sessions = cfg->runtime.retention.sessions_days,
        marks = cfg->runtime.retention.feedback_days;
    char err[SB_ERR_LEN];
    int n;
    if (traces && (n = rt_trace_purge_before(r, now - traces * DAY_S)) > 0)
        sb_info("retention: %d trace(s) older than %d day(s) dropped", n, traces);
    if (sessions && r->sessions) {
        if ((n = rt_sessions_purge_before(r->sessions, now - sessions * DAY_S, err)) < 0)
            sb_warn("retention: sessions: %s", err);
        else if (n)
            sb_info("retention: %d session(s) not updated for %d day(s) deleted", n, sessions);
    }
    if (marks) {
        if ((n = rt_feedback_purge_before(r, now - marks * DAY_S, err)) < 0)
            sb_warn("retention: feedback: %s", err);
        else if (n)
            sb_info("retention: %d feedback mark(s) older than %d day(s) deleted", n, marks);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    rt_retention_purge(arg, (double)time(NULL));
}

void rt_retention_start(rt *r) {
    if (r->retention_timer) return;
    r->retention_timer = event_new(r->ex.be.base, -1, EV_PERSIST, on_tick, r);
    struct timeval every = { RETENTION_EVERY_S, 0 };
    if (r->retention_timer) event_add(r->retention_timer, &every);
    else sb_warn("retention: no timer (out of memory); nothing will be purged on schedule");
    on_tick(-1, 0, r);
}

void rt_retention_stop(rt *r) {
    if (r->retention_timer) event_free(r->retention_timer);
    r->retention_timer = NULL;
}
