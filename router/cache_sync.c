/* cache_sync.c - the router's periodic sync of its response cache with the
 * cloud tier (cache.sync in the config, protocol in docs/cache-sync.md), and
 * the pull of the knowledge bases marked `pull: true` from the same cloud
 * (sb_kb_pull: at start, then at every interval; docs/KNOWLEDGE.md "Sync").
 * A pulled base is swapped in by one SQLite transaction, which the loop
 * thread's retrieve stages see at their next query.
 *
 * A sync does network I/O and may take seconds, so it runs on its own
 * thread, never on the event loop. The cache handle is shared: sb_cache
 * serialises access with its own mutex. A failed sync is logged and retried
 * at the next interval; sb_cache_sync is safe to cut off and repeat.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "router/router_internal.h"
#include "kb/sb_kb.h"
#include "cache/sync/sb_sync.h"

typedef struct { char *name, *path; } pull_kb;

/* An erasure of a sync reply, copied out of it for the loop thread. */
typedef struct {
    char kind[8], id[129], mac[SB_CACHE_KEY_HEX];
    int64_t digits;
} erasure;

enum { ERASE_NONE, ERASE_PENDING, ERASE_DONE, ERASE_FAILED };

struct rt_sync {
    sb_cache *cache;
    char *url, *edge_id, *secret, *ca_file;
    int interval_s;
    pull_kb *kbs;           /* knowledge bases to pull */
    size_t n_kbs;
    int stop;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* CLOCK_MONOTONIC: an interval is not moved by clock changes */
    /* Erasures handed to the loop thread (the traces are its), under mu. */
    erasure *erasures;
    size_t n_erasures;
    char erase_key[SB_CACHE_KEY_HEX];
    int erase_state;
    char erase_err[SB_ERR_LEN];
};

/* sb_cache_sync_opts.on_erasures, on the sync thread: the erasures go to
 * the loop thread, and the round waits until they are applied there - the
 * cursor moves past them only then, so a failure or a stop brings them
 * again with the next sync. */
static int on_erasures(void *arg, const sb_json *list, const char *key_hex, char *err) {
    rt_sync *s = arg;
    size_t n = sb_json_len(list);
    erasure *v = sb_calloc(n + 1, sizeof *v);
    if (!v) return sb_seterr(err, SB_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const sb_json *e = sb_json_at(list, i);
        const char *kind = sb_json_str(sb_json_get(e, "kind")), *id = sb_json_str(sb_json_get(e, "id")),
                   *mac = sb_json_str(sb_json_get(e, "mac"));
        snprintf(v[i].kind, sizeof v[i].kind, "%s", kind ? kind : "");
        snprintf(v[i].id, sizeof v[i].id, "%s", id ? id : "");
        snprintf(v[i].mac, sizeof v[i].mac, "%s", mac ? mac : "");
        v[i].digits = (int64_t)sb_json_num(sb_json_get(e, "digits"));
    }
    pthread_mutex_lock(&s->mu);
    s->erasures = v;
    s->n_erasures = n;
    snprintf(s->erase_key, sizeof s->erase_key, "%s", key_hex ? key_hex : "");
    s->erase_state = ERASE_PENDING;
    while (s->erase_state == ERASE_PENDING && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    int rc = s->erase_state == ERASE_DONE ? SB_OK
             : sb_seterr(err, SB_EIO, "erasures from the cloud not applied: %s",
                         s->erase_state == ERASE_FAILED ? s->erase_err : "stopping");
    s->erase_state = ERASE_NONE;
    s->erasures = NULL;
    s->n_erasures = 0;
    pthread_mutex_unlock(&s->mu);
    sb_free(v);
    return rc;
}

void rt_sync_erasures(rt_sync *s, rt *r) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    bool pending = s->erase_state == ERASE_PENDING;
    pthread_mutex_unlock(&s->mu);
    if (!pending) return;       /* the list stays put while pending: on_erasures waits */
    char err[SB_ERR_LEN] = "";
    int rc = 0;
    for (size_t i = 0; !rc && i < s->n_erasures; i++) {
        const erasure *e = &s->erasures[i];
        rt_erasure one = { e->kind, e->id[0] ? e->id : NULL, e->mac[0] ? e->mac : NULL, e->digits };
        rc = rt_erase_remote(r, &one, s->erase_key, err);
    }
    pthread_mutex_lock(&s->mu);
    s->erase_state = rc ? ERASE_FAILED : ERASE_DONE;
    snprintf(s->erase_err, sizeof s->erase_err, "%s", err);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void pull_kbs(rt_sync *s) {
    sb_cloud_peer peer = { .url = s->url, .edge_id = s->edge_id, .secret = s->secret, .ca_file = s->ca_file };
    for (size_t i = 0; i < s->n_kbs; i++) {
        char err[SB_ERR_LEN];
        sb_kb_pull_result r;
        if (sb_kb_pull(s->kbs[i].path, s->kbs[i].name, &peer, &r, err))
            sb_warn("knowledge base '%s': pull from %s failed, keeping the base it has (retrying in %d s): %s",
                    s->kbs[i].name, s->url, s->interval_s, err);
        else if (!r.unchanged)
            sb_info("knowledge base '%s': pulled version %.16s (%lld bytes) from %s in %.0f ms", s->kbs[i].name,
                    r.got.version, (long long)r.got.bytes, s->url, (r.fetch_s + r.swap_s) * 1e3);
    }
}

static void *sync_main(void *arg) {
    rt_sync *s = arg;
    pull_kbs(s);                /* a new edge answers from the published base as soon as it can */
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += s->interval_s;
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {}
        if (s->stop) break;
        pthread_mutex_unlock(&s->mu);
        char err[SB_ERR_LEN];
        sb_cache_sync_opts o = { .url = s->url, .edge_id = s->edge_id, .secret = s->secret,
                                 .ca_file = s->ca_file, .on_erasures = on_erasures, .erasures_arg = s };
        sb_cache_sync_result res;
        double t0 = sb_now_s();
        if (!s->cache)
            ;                   /* knowledge bases only */
        else if (sb_cache_sync(s->cache, &o, &res, err))
            sb_warn("cache sync with %s failed (retrying in %d s): %s", s->url, s->interval_s, err);
        else
            sb_info("cache sync with %s: sent %lld hit deltas and %lld entries, got %lld entries, %lld deletions and "
                    "%lld erasures in %.0f ms", s->url, (long long)res.deltas_sent, (long long)res.entries_sent,
                    (long long)res.entries_received, (long long)res.deletions_received,
                    (long long)res.erasures_received, (sb_now_s() - t0) * 1e3);
        pull_kbs(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static char *read_secret(const char *path, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { sb_seterr(err, SB_EIO, "cache.sync.secret_file %s: %s", path, strerror(errno)); return NULL; }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) n--;
    buf[n] = 0;
    if (!n) { sb_seterr(err, SB_EINVAL, "cache.sync.secret_file %s is empty", path); return NULL; }
    char *s = sb_strdup(buf);
    if (!s) sb_seterr(err, SB_ENOMEM, "out of memory");
    return s;
}

static void sync_free(rt_sync *s) {
    sb_free(s->url);
    sb_free(s->edge_id);
    sb_free(s->ca_file);
    for (size_t i = 0; i < s->n_kbs; i++) {
        sb_free(s->kbs[i].name);
        sb_free(s->kbs[i].path);
    }
    sb_free(s->kbs);
    if (s->secret) memset(s->secret, 0, strlen(s->secret));
    sb_free(s->secret);
    sb_free(s);
}

void rt_sync_stop(rt_sync *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->tid, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    sync_free(s);
}

int rt_sync_start(sb_cache *cache, const sb_config *cfg, rt_sync **out, char *err) {
    *out = NULL;
    const char *url = cfg->cache.sync.url, *edge_id = cfg->cache.sync.edge_id,
               *secret_file = cfg->cache.sync.secret_file, *ca_file = cfg->cache.sync.ca_file;
    int interval_s = cfg->cache.sync.interval_s;
    rt_sync *s = sb_calloc(1, sizeof *s);
    if (!s || !(s->kbs = sb_calloc(cfg->n_kbs + 1, sizeof *s->kbs))) {
        sb_free(s);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cfg->n_kbs; i++) {
        if (!cfg->kbs[i].pull) continue;
        pull_kb *k = &s->kbs[s->n_kbs++];
        k->name = sb_strdup(cfg->kbs[i].name);
        k->path = sb_strdup(cfg->kbs[i].path);
        if (!k->name || !k->path) {
            sync_free(s);
            return sb_seterr(err, SB_ENOMEM, "out of memory");
        }
    }
    s->cache = cache;
    s->interval_s = interval_s;
    s->url = sb_strdup(url);
    s->edge_id = sb_strdup(edge_id);
    s->ca_file = ca_file ? sb_strdup(ca_file) : NULL;
    s->secret = read_secret(secret_file, err);
    if (!s->url || !s->edge_id || !s->secret || (ca_file && !s->ca_file)) {
        sync_free(s);
        return SB_EINVAL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    if (pthread_create(&s->tid, NULL, sync_main, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        sync_free(s);
        return sb_seterr(err, SB_ENOMEM, "cannot start the cache sync thread");
    }
    *out = s;
    return 0;
}
