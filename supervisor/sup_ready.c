/* sup_ready.c - the one `ready` line of `switchboard run`.
 *
 * A child is ready when its socket answers `health`, but the router learns
 * that a worker is up from probes of its own, so for a moment after the
 * last worker is ready GET /health still answers 503 `degraded`. Scripts
 * want the moment /health answers 200: so once every child is ready, the
 * supervisor asks the router's socket for its `health` (the same count of
 * local models up as GET /health) until it says "ok", and then logs
 * "ready: ..." once. Without a router there is no /health: every worker
 * ready is enough. docs/operations.md ("Children").
 */
#include "supervisor/sup_internal.h"

#include <event2/event.h>
#include <string.h>

#define READY_PROBE_EVERY_MS   20
#define READY_PROBE_TIMEOUT_MS 1000     /* the router's health never waits behind work */

static bool every_child_ready(const sup *s) {
    for (const child *c = s->children; c; c = c->next)
        if (c->state != ST_READY) return false;
    return true;
}

void sup_ready_stop(sup *s) {
    sb_ipc_aclient_free(s->ready_probe);   /* a pending call gets no callback */
    s->ready_probe = NULL;
    s->ready_pending = false;
    if (s->ready_timer) event_free(s->ready_timer);
    s->ready_timer = NULL;
}

static void say_ready(sup *s) {
    s->said_ready = true;
    int workers = 0;
    for (const child *c = s->children; c; c = c->next) workers += c->kind == KIND_WORKER;
    double ms = (double)(sb_now_ns() - s->started_ns) / 1e6;
    if (sup_router_child(s))
        sb_info("ready: %d worker(s) up and http://%s/health answers 200, %.0f ms after start", workers,
                s->cfg->runtime.http, ms);
    else
        sb_info("ready: %d worker(s) up (no router, so no /health), %.0f ms after start", workers, ms);
    sup_ready_stop(s);      /* also when called from the probe's callback: allowed */
}

static void retry_later(sup *s) {
    if (!s->ready_timer && !(s->ready_timer = evtimer_new(s->base, sup_ready_on_timer, s))) {
        sb_error("cannot create the readiness timer: no `ready` line will be logged");
        return;
    }
    struct timeval tv = { 0, READY_PROBE_EVERY_MS * 1000 };
    evtimer_add(s->ready_timer, &tv);
}

static void on_router_health(void *arg, uint64_t id, const sb_ipc_result *res) {
    sup *s = arg;
    s->ready_pending = false;
    const char *status = NULL;
    if (res->ok && res->result) sb_mp_get_str(res->result, "status", SB_MP_OPTIONAL, &status, NULL, NULL);
    /* "degraded": the router has not seen every worker yet (asking makes it
     * look again); anything else (a restart, a timeout): the children's
     * states decide on the next try. */
    if (status && !strcmp(status, "ok") && every_child_ready(s)) say_ready(s);
    else retry_later(s);
}

void sup_ready_check(sup *s) {
    if (s->said_ready || s->stopping || s->ready_pending || !every_child_ready(s)) return;
    child *r = sup_router_child(s);
    if (!r) { say_ready(s); return; }
    char err[SB_ERR_LEN];
    if (!s->ready_probe && sb_ipc_aclient_new(s->base, r->sock, 0, &s->ready_probe, err)) {
        sb_error("router: cannot create the readiness probe: %s", err);
        retry_later(s);
        return;
    }
    if (sb_ipc_aclient_call(s->ready_probe, "health", NULL, READY_PROBE_TIMEOUT_MS, NULL, on_router_health, s,
                            NULL, err))
        retry_later(s);
    else
        s->ready_pending = true;
}

void sup_ready_on_timer(evutil_socket_t fd, short what, void *arg) { sup_ready_check(arg); }
