/* handoff_out.c - delivery of hand-off packages (docs/router.md, "Handing
 * off"). The turn that hands a call off stores its package in the session
 * store's handoff_outbox in the turn's own transaction, so a package the
 * caller was told about is never lost; this thread sends it.
 *
 * The pattern is the cache sync's outbox (cache/outbox.c): what is to be
 * sent is stored before it is sent and sent unchanged until the receiver
 * acknowledges it, and the transport is the sync's (sb_http_post_json:
 * TLS verified, one deadline, no redirects). The key a receiver
 * deduplicates on is the session id, sent as Idempotency-Key: a call is
 * handed off once, and a retry after a lost acknowledgement carries the
 * same key and the same bytes. A package of a pipeline with a privacy
 * policy waits sealed (sessions_store.c) and is opened only to be sent.
 *
 * A delivery does network I/O and may take seconds, so it runs on its own
 * thread with its own SQLite connection (the store is WAL: the loop's
 * commits go on meanwhile), never on the event loop.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache/sync/sb_sync.h"
#include "router/router_internal.h"

#define BATCH 16
#define POLL_MS 1000            /* a package queued by another router on the same store is found this late */
#define TIMEOUT_MS 10000        /* one POST, connect to reply */
#define BACKOFF_FIRST_S 0.25    /* doubled at each failure... */
#define BACKOFF_MAX_S 60.0      /* ...up to this */

struct rt_handoff_out {
    char *path;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* CLOCK_MONOTONIC */
    bool stop, kicked;
    uint8_t key[SB_SEAL_KEY_LEN];   /* opens sealed packages (privacy: their real values) */
    bool keyed;
};

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One package: delivered (2xx: removed) or tried again later. */
static void deliver(rt_sessions *s, const rt_handoff_item *it) {
    char err[SB_ERR_LEN], headers[128], why[SB_ERR_LEN + 32];
    if (!it->body) {            /* sealed under another key: retried, so a fixed key file delivers it */
        double wait = fmin(BACKOFF_MAX_S, BACKOFF_FIRST_S * pow(2, it->attempts));
        sb_warn("hand-off of session %s: %s (again in %.2f s)", it->session, it->error, wait);
        if (rt_handoff_retry(s, it->session, wall_now() + wait, it->error, err)) sb_warn("hand-off of session %s: %s", it->session, err);
        return;
    }
    snprintf(headers, sizeof headers, "Idempotency-Key: %.*s\r\n", RT_SESSION_ID_LEN, it->session);
    int status = 0;
    int rc = sb_http_post_json(it->url, headers, it->body, strlen(it->body), TIMEOUT_MS, it->ca_file, &status, err);
    if (!rc && status >= 200 && status < 300) {
        if (rt_handoff_delivered(s, it->session, err)) sb_warn("hand-off of session %s: %s", it->session, err);
        else sb_info("hand-off of session %s delivered to %s (attempt %d)", it->session, it->url, it->attempts + 1);
        return;
    }
    if (rc) snprintf(why, sizeof why, "%s", err);
    else snprintf(why, sizeof why, "HTTP %d", status);
    double wait = fmin(BACKOFF_MAX_S, BACKOFF_FIRST_S * pow(2, it->attempts));
    sb_warn("hand-off of session %s to %s failed (attempt %d, again in %.2f s): %s", it->session, it->url,
            it->attempts + 1, wait, why);
    if (rt_handoff_retry(s, it->session, wall_now() + wait, why, err)) sb_warn("hand-off of session %s: %s", it->session, err);
}

static void deliver_due(rt_sessions *s) {
    rt_handoff_item items[BATCH];
    char err[SB_ERR_LEN];
    int n = rt_handoff_due(s, wall_now(), items, BATCH, err);
    if (n < 0) { sb_warn("hand-off outbox: %s", err); return; }
    for (int i = 0; i < n; i++) deliver(s, &items[i]);
    rt_handoff_items_free(items, n);
}

static void *out_main(void *arg) {
    rt_handoff_out *h = arg;
    rt_sessions *s = NULL;
    char err[SB_ERR_LEN];
    if (rt_sessions_open(h->path, &s, err)) {
        sb_warn("hand-off delivery off: %s", err);
        return NULL;
    }
    if (h->keyed) rt_sessions_set_key(s, h->key);
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        h->kicked = false;
        pthread_mutex_unlock(&h->mu);
        deliver_due(s);
        pthread_mutex_lock(&h->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(POLL_MS % 1000) * 1000000L;
        until.tv_sec += POLL_MS / 1000 + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        while (!h->stop && !h->kicked && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT) {}
    }
    pthread_mutex_unlock(&h->mu);
    rt_sessions_close(s);
    return NULL;
}

int rt_handoff_out_start(const char *path, const uint8_t *key, rt_handoff_out **out, char *err) {
    *out = NULL;
    rt_handoff_out *h = sb_calloc(1, sizeof *h);
    if (!h || !(h->path = sb_strdup(path))) {
        sb_free(h);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    if ((h->keyed = key != NULL)) memcpy(h->key, key, sizeof h->key);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    if (pthread_create(&h->tid, NULL, out_main, h)) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        sb_free(h->path);
        sb_free(h);
        return sb_seterr(err, SB_EIO, "cannot start the hand-off delivery thread");
    }
    *out = h;
    return 0;
}

void rt_handoff_out_kick(rt_handoff_out *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->kicked = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void rt_handoff_out_stop(rt_handoff_out *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->tid, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    explicit_bzero(h->key, sizeof h->key);
    sb_free(h->path);
    sb_free(h);
}
