/* console.c - GET /console: the operator's page, and its live feed.
 *
 * The page (console/index.html, app.js, app.css in the repository) is
 * embedded into the binary at build time (the Makefile runs xxd -i), so it
 * works offline and needs nothing installed beside the binary. It holds no
 * data, so it is served without the API key; everything it shows comes
 * from the routes below, behind the key, which the page sends as a bearer
 * header (docs/operations.md, "The console").
 *
 *   GET /v1/console/events   SSE: one "hello" (recent calls + a snapshot),
 *                            then a "call" per finished call, a "feedback"
 *                            per operator mark and a "state" snapshot
 *                            whenever what it shows changed (at most one
 *                            a second), batched into one write
 *   GET /v1/console/state    the snapshot once (JSON)
 *   GET /v1/console/handoffs the latest hand-offs of conversations and
 *                            where their delivery stands (the session
 *                            store's outbox); polled by the page, not fed:
 *                            a delivery happens on another thread
 *
 * The snapshot's work is done once for all subscribers and only when
 * something changed; its slow parts are kept between snapshots (sorted
 * latency windows in latwin.c, the feedback confusion until a mark, RSS
 * for RSS_EVERY_S), and the tick stops when nobody watches: without a
 * console open the router pays only for the traces.
 * The console's own CPU time is counted per path on /metrics
 * (switchboard_console_cpu_seconds_total).
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "router/obs.h"

/* The files of console/, embedded by the Makefile (xxd -i names them after the path). */
extern unsigned char console_index_html[], console_app_js[], console_app_css[];
extern unsigned int console_index_html_len, console_app_js_len, console_app_css_len;

#define HELLO_CALLS 100                 /* calls the page gets when it connects */
/* What the feed costs is mostly its writes: a loopback TCP write with the
 * receiver's wake-up costs 30-65 us of the router's CPU on a 2-core VM
 * (docs/router.md), more than formatting everything it carries. So batches
 * go out at most every FEED_DELAY_MS (a call after a quiet spell after
 * FEED_FIRST_MS, with whatever ended beside it; well inside the page's 1 s
 * promise), and a snapshot rides along with
 * calls instead of taking a write of its own: at most two writes a second
 * per client, whatever the call rate. */
#define FEED_DELAY_MS 500
#define FEED_FIRST_MS 100
/* A snapshot goes out when what it shows changed (state_sig), at most once
 * per STATE_MIN_S: the first call after a quiet spell brings one at once,
 * under a steady load the panels refresh every STATE_MIN_S while every call
 * still shows within the second (each row carries its own stages, times,
 * intent and cache outcome). Without calls the tick looks every TICK_MS, so
 * a worker that restarts or a queue that fills shows within that. Nothing
 * changes when the hotline is idle, and then nothing is sent. */
#define STATE_MIN_S 5.0
#define TICK_MS 2000
/* The workers' RSS comes from /proc (an open, read and close each): read
 * at most this often, shown with the snapshots in between. */
#define RSS_EVERY_S 30
#define CACHE_STATS_S 60
#define CACHE_STATS_SHARE 1000

bool rt_console_static(rt_req *q, const char *path) {
    const struct { const char *path, *type; const unsigned char *data; const unsigned int *len; } assets[] = {
        { "/console", "text/html; charset=utf-8", console_index_html, &console_index_html_len },
        { "/console/app.js", "text/javascript; charset=utf-8", console_app_js, &console_app_js_len },
        { "/console/app.css", "text/css; charset=utf-8", console_app_css, &console_app_css_len },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(assets); i++) {
        if (strcmp(path, assets[i].path)) continue;
        struct evkeyvalq *h = evhttp_request_get_output_headers(q->req);
        /* Only our own files, no framing: the key the page holds stays there. */
        evhttp_add_header(h, "Content-Security-Policy",
                          "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                          "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
        evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
        evhttp_add_header(h, "Referrer-Policy", "no-referrer");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        rt_req_reply(q, 200, assets[i].type, (const char *)assets[i].data, *assets[i].len);
        return true;
    }
    return false;
}

/* ------------------------------------------------------ its own cost */

/* This thread's CPU time, seconds. The console's paths are timed with it,
 * two reads per batch, snapshot or request - never per call or per byte:
 * a read is a system call (~0.3 us in this VM). So what the console costs
 * is counted directly instead of as the difference of two noisy totals
 * (docs/router.md, "What the console costs"). */
static double thread_cpu_s(void) {
    struct timespec ts;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) ? 0 : (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Adds the CPU time since `since` to path, less what the cache's stats
 * took meanwhile (they have their own path, whichever path ran them). */
static void account(rt_obs *o, int path, double since, double cache_before) {
    double now = thread_cpu_s(), d = now - since - (o->cpu_s[RT_CONSOLE_CACHE_STATS] - cache_before);
    if (since > 0 && d > 0) o->cpu_s[path] += d;
}

void rt_console_render(rt *r, sb_jw *w) {
    static const char *const path[RT_CONSOLE_PATHS] = { "feed", "snapshot", "connect", "state", "cache_stats" };
    const rt_obs *o = r->obs;
    if (!o) return;
    sb_jw_rawf(w, "# HELP switchboard_console_cpu_seconds_total Router CPU time spent on the console's own work, by path.\n"
                  "# TYPE switchboard_console_cpu_seconds_total counter\n");
    for (int i = 0; i < RT_CONSOLE_PATHS; i++)
        sb_jw_rawf(w, "switchboard_console_cpu_seconds_total{path=\"%s\"} %.6f\n", path[i], o->cpu_s[i]);
    sb_jw_rawf(w, "# HELP switchboard_console_sent_bytes_total Bytes of live feed written to console clients.\n"
                  "# TYPE switchboard_console_sent_bytes_total counter\nswitchboard_console_sent_bytes_total %llu\n",
               (unsigned long long)o->feed_bytes);
}

/* ------------------------------------------------------------ snapshot */

static long read_rss_kb(int64_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/statm", (long long)pid);
    FILE *f = fopen(path, "r");
    long size = 0, rss = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = -1;
        fclose(f);
    }
    return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The RSS of pid as of the last refresh (every RSS_EVERY_S, or when a
 * worker has a pid the cache has not seen: a restart shows at once). */
static long rss_kb(rt *r, int64_t pid) {
    rt_obs *o = r->obs;
    double now = sb_now_s();
    for (size_t i = 0; i < o->n_rss; i++)
        if (o->rss[i].pid == pid) {
            if (now - o->rss_at < RSS_EVERY_S) return o->rss[i].kb;
            break;
        }
    /* Refresh all: the router and every local worker. */
    size_t n = 1 + r->ex.be.n_models, k = 0;
    void *nr = sb_realloc(o->rss, n * sizeof *o->rss);
    if (!nr) return read_rss_kb(pid);
    o->rss = nr;
    o->rss[k].pid = getpid();
    o->rss[k++].kb = read_rss_kb(getpid());
    for (size_t i = 0; i < r->ex.be.n_models; i++) {
        const rt_model *m = r->ex.be.models[i];
        if (m->removed || m->remote || m->pid <= 0) continue;
        o->rss[k].pid = m->pid;
        o->rss[k++].kb = read_rss_kb(m->pid);
    }
    o->n_rss = k;
    o->rss_at = now;
    for (size_t i = 0; i < k; i++)
        if (o->rss[i].pid == pid) return o->rss[i].kb;
    return read_rss_kb(pid);
}

/* Everything a snapshot shows that can change while the router runs,
 * mixed (FNV-1a), except RSS and uptime: equal means nothing to send. */
static uint64_t state_sig(rt *r) {
    uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 1099511628211ull)
    const rt_metrics *mt = &r->metrics;
    MIX(r->obs->changes); MIX(mt->in_flight); MIX(mt->cache_hits); MIX(mt->cache_misses); MIX(mt->cache_bypass);
    MIX(time(NULL) / 60);                               /* the routing hour's window slides */
    MIX(r->ex.be.n_models);
    for (size_t i = 0; i < r->ex.be.n_models; i++) {
        const rt_model *m = r->ex.be.models[i];
        MIX(m->up | m->failed << 1 | m->removed << 2 | m->remote << 3 | m->kind_known << 4 | m->encoder << 5);
        MIX(m->pid); MIX(m->restarts); MIX(m->n_waiting); MIX(m->n_inflight); MIX(m->requests); MIX(m->errors);
        MIX(m->prompt_tokens); MIX(m->reused_tokens);
    }
#undef MIX
    return h;
}

rt_models_up rt_models_json(rt *r, sb_jw *w, int view) {
    const bool health = view == RT_MODELS_HEALTH;
    rt_models_up n = { 0, 0 };
    if (health) sb_jw_obj(w); else sb_jw_arr(w);
    for (size_t i = 0; i < r->ex.be.n_models; i++) {
        const rt_model *m = r->ex.be.models[i];
        if (m->removed) continue;
        if (!m->remote) {
            n.local++;
            n.up += m->up;
        }
        if (health) {
            sb_jw_key(w, m->name);
            sb_jw_obj(w);
            sb_jw_key(w, "status"); sb_jw_str(w, m->remote ? "remote" : m->up ? "up" : "down");
            if (m->remote) {
                sb_jw_obj_end(w);
                continue;
            }
        } else {
            sb_jw_obj(w);
            sb_jw_key(w, "model"); sb_jw_str(w, m->name);
            sb_jw_key(w, "state");
            sb_jw_str(w, m->remote ? "remote" : m->up ? (m->n_inflight ? "busy" : "idle") : m->failed ? "failed" : "down");
            sb_jw_key(w, "kind"); sb_jw_str(w, m->kind_known ? (m->encoder ? "encoder" : "generative") : NULL);
        }
        /* /health says 0 for a worker not started yet; the console shows none. */
        sb_jw_key(w, "pid"); if (health || (m->pid > 0 && !m->remote)) sb_jw_int(w, m->pid); else sb_jw_null(w);
        sb_jw_key(w, "queued"); sb_jw_int(w, m->n_waiting);
        sb_jw_key(w, "in_flight"); sb_jw_int(w, m->n_inflight);
        if (health) { sb_jw_key(w, "capacity"); sb_jw_int(w, rt_model_capacity(m)); }
        sb_jw_key(w, "restarts"); sb_jw_int(w, (int64_t)m->restarts);
        if (!health) {
            sb_jw_key(w, "requests"); sb_jw_int(w, (int64_t)m->requests);
            sb_jw_key(w, "errors"); sb_jw_int(w, (int64_t)m->errors);
            sb_jw_key(w, "tokens_per_s"); sb_jw_fixed(w, m->last_tps, 1);
            /* The share of prompt tokens the worker's KV prefix cache served. */
            sb_jw_key(w, "kv_reuse");
            if (m->prompt_tokens) sb_jw_fixed(w, (double)m->reused_tokens / (double)m->prompt_tokens, 4); else sb_jw_null(w);
            long kb = m->pid > 0 && !m->remote ? rss_kb(r, m->pid) : -1;
            sb_jw_key(w, "rss_kb"); if (kb >= 0) sb_jw_int(w, kb); else sb_jw_null(w);
        }
        sb_jw_obj_end(w);
    }
    if (health) sb_jw_obj_end(w); else sb_jw_arr_end(w);
    return n;
}

static void cache_json(rt *r, sb_jw *w) {
    const rt_metrics *m = &r->metrics;
    sb_jw_obj(w);
    sb_jw_key(w, "enabled"); sb_jw_bool(w, r->cache != NULL);
    sb_jw_key(w, "hits"); sb_jw_int(w, (int64_t)m->cache_hits);
    sb_jw_key(w, "misses"); sb_jw_int(w, (int64_t)m->cache_misses);
    sb_jw_key(w, "bypass"); sb_jw_int(w, (int64_t)m->cache_bypass);
    uint64_t look = m->cache_hits + m->cache_misses;
    sb_jw_key(w, "hit_rate"); if (look) sb_jw_fixed(w, (double)m->cache_hits / (double)look, 4); else sb_jw_null(w);
    rt_obs *o = r->obs;
    double now = sb_now_s();
    if (r->cache && (!o->cstats_at || now - o->cstats_at >= o->cstats_every)) {
        double t0 = thread_cpu_s();
        o->cstats_ok = !sb_cache_stats(r->cache, &o->cstats, NULL);
        o->cstats_at = now;
        double cost = thread_cpu_s() - t0;
        o->cpu_s[RT_CONSOLE_CACHE_STATS] += cost;          /* and taken out of its caller's path below */
        o->cstats_every = cost * CACHE_STATS_SHARE > CACHE_STATS_S ? cost * CACHE_STATS_SHARE : CACHE_STATS_S;
    }
    const sb_cache_stats_t st = o->cstats;
    if (r->cache && o->cstats_ok) {
        sb_jw_key(w, "stats_age_s"); sb_jw_int(w, (int64_t)(now - o->cstats_at));
        sb_jw_key(w, "entries"); sb_jw_int(w, st.entries);
        sb_jw_key(w, "bytes"); sb_jw_int(w, st.bytes);
        sb_jw_key(w, "max_bytes"); sb_jw_int(w, st.max_bytes);
        sb_jw_key(w, "sync");
        sb_jw_obj(w);
        sb_jw_key(w, "url"); sb_jw_str(w, r->sync ? r->ex.conf->cfg->cache.sync.url : NULL);
        sb_jw_key(w, "cursor"); sb_jw_int(w, st.sync_cursor);
        sb_jw_key(w, "pending"); sb_jw_bool(w, st.sync_pending != 0);
        sb_jw_key(w, "dirty_entries"); sb_jw_int(w, st.dirty_entries);
        sb_jw_key(w, "cloud_entries"); sb_jw_int(w, st.cloud_entries);
        sb_jw_obj_end(w);
    }
    sb_jw_obj_end(w);
}

static void state_json(rt *r, sb_jw *w) {
    sb_jw_obj(w);
    sb_jw_key(w, "type"); sb_jw_str(w, "state");
    sb_jw_key(w, "uptime_s"); sb_jw_int(w, (int64_t)(sb_now_s() - r->started));
    sb_jw_key(w, "router");
    sb_jw_obj(w);
    sb_jw_key(w, "pid"); sb_jw_int(w, getpid());
    sb_jw_key(w, "in_flight"); sb_jw_int(w, (int64_t)r->metrics.in_flight);
    sb_jw_key(w, "rss_kb"); sb_jw_int(w, rss_kb(r, getpid()));
    sb_jw_key(w, "traces"); sb_jw_int(w, r->obs ? (int64_t)r->obs->cap : 0);
    sb_jw_key(w, "caller_text"); sb_jw_str(w, r->obs && r->obs->show_text ? "shown" : "masked");
    sb_jw_obj_end(w);
    sb_jw_key(w, "workers"); rt_models_json(r, w, RT_MODELS_CONSOLE);
    sb_jw_key(w, "cache"); cache_json(r, w);
    sb_jw_key(w, "routing"); rt_trace_routing_json(r, w);
    sb_jw_key(w, "latency"); rt_trace_latency_json(r, w);
    sb_jw_obj_end(w);
}

void rt_handle_console_state(rt_req *q) {
    rt_obs *o = q->r->obs;
    double t0 = thread_cpu_s(), c0 = o ? o->cpu_s[RT_CONSOLE_CACHE_STATS] : 0;
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    state_json(q->r, w);
    if (w->oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, w->p, w->len, NULL);      /* q is freed */
    if (o) account(o, RT_CONSOLE_STATE, t0, c0);
}

#define HANDOFFS_SHOWN 50

void rt_handle_console_handoffs(rt_req *q) {
    rt *r = q->r;
    char err[SB_ERR_LEN];
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    sb_jw_obj(w);
    sb_jw_key(w, "enabled"); sb_jw_bool(w, r->sessions != NULL);
    sb_jw_key(w, "handoffs");
    int rc = 0;
    if (r->sessions) rc = rt_handoff_list_json(r->sessions, HANDOFFS_SHOWN, w, err);
    else { sb_jw_arr(w); sb_jw_arr_end(w); }
    sb_jw_obj_end(w);
    if (rc) rt_req_error(q, 500, "server_error", "internal", "%s", err);
    else if (w->oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, w->p, w->len, NULL);
}

/* ---------------------------------------------------------- the feed */

static void unsubscribe(rt_obs *o, rt_req *q) {
    for (size_t i = 0; i < o->n_subs; i++)
        if (o->subs[i] == q) { o->subs[i] = o->subs[--o->n_subs]; return; }
}

static void sub_gone(rt_req *q) {
    if (q->r->obs) unsubscribe(q->r->obs, q);
}

/* Hands what evhttp queued for q to its socket now, inside the timed
 * window: left to the loop, the write (and the loopback delivery the
 * kernel does in the sender's context) would happen later, where no path
 * can be told apart. What the socket does not take (a slow reader)
 * libevent writes later, untimed. */
static void write_now(rt_req *q) {
    struct evhttp_connection *c = q->req ? evhttp_request_get_connection(q->req) : NULL;
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    if (bev) (void)evbuffer_write(bufferevent_get_output(bev), bufferevent_getfd(bev));
}

/* One chunk of q's chunked reply straight to its socket, in one writev,
 * when nothing of q's is queued before it (so the byte order holds). The
 * evhttp path would queue it in the connection's output and arm a write
 * event: two epoll_ctl calls and a wake-up of the loop per batch per
 * client, on top of the write itself - which is the console's main cost
 * under a slow load (docs/router.md). What the socket does not take (a
 * slow reader) is queued for libevent to write as usual. true: handled. */
static bool send_direct(rt_req *q, const char *p, size_t n) {
    struct evhttp_connection *c = evhttp_request_get_connection(q->req);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    struct evbuffer *out = bev ? bufferevent_get_output(bev) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (!out || fd < 0 || !q->req->chunked || evbuffer_get_length(out)) return false;
    char head[24];
    int hl = snprintf(head, sizeof head, "%zx\r\n", n);
    struct iovec iov[3] = { { head, (size_t)hl }, { (void *)p, n }, { (void *)"\r\n", 2 } };
    ssize_t wr = writev(fd, iov, 3);
    size_t done = wr > 0 ? (size_t)wr : 0;
    if (done == (size_t)hl + n + 2) return true;
    /* The rest (or all: EAGAIN, or an error libevent will meet and report) is queued. */
    for (int i = 0; i < 3; i++) {
        size_t skip = done < iov[i].iov_len ? done : iov[i].iov_len;
        done -= skip;
        if (skip < iov[i].iov_len) evbuffer_add(out, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip);
    }
    bufferevent_enable(bev, EV_WRITE);
    return true;
}

static void send_raw(rt_obs *o, rt_req *q, const char *p, size_t n) {
    if (q->gone || !q->streaming || !q->req) return;
    if (!send_direct(q, p, n)) {
        struct evbuffer *b = evbuffer_new();
        if (!b) return;
        evbuffer_add(b, p, n);
        evhttp_send_reply_chunk(q->req, b);
        evbuffer_free(b);
        write_now(q);
    }
    o->feed_bytes += n;
}

/* The snapshot, appended to the batch when what it shows changed and the
 * last is at least STATE_MIN_S old. Timed as the snapshot's path. */
static void add_state(rt *r) {
    rt_obs *o = r->obs;
    double now = sb_now_s();
    if (now - o->state_at < STATE_MIN_S) return;
    uint64_t sig = state_sig(r);
    if (sig == o->state_sig && o->state_at > 0) return;
    double t0 = thread_cpu_s(), c0 = o->cpu_s[RT_CONSOLE_CACHE_STATS];
    sb_jw_raw(&o->batch, "data: ", 6);
    state_json(r, &o->batch);
    sb_jw_raw(&o->batch, "\n\n", 2);
    o->state_sig = sig;
    o->state_at = now;
    account(o, RT_CONSOLE_SNAPSHOT, t0, c0);
}

static void write_batch(rt_obs *o) {
    if (!o->batch.oom && o->batch.len) {
        for (size_t i = 0; i < o->n_subs; i++) send_raw(o, o->subs[i], o->batch.p, o->batch.len);
        o->feed_at = sb_now_s();
    }
    sb_jw_reset(&o->batch);
    o->batch.oom = 0;
}

/* The calls recorded since the last batch (their summaries, from the
 * ring), the other events and a due snapshot, in one write to every
 * subscriber. */
static void flush(rt *r) {
    rt_obs *o = r->obs;
    if (o->n_subs && o->unsent) rt_trace_feed(r, &o->batch, o->unsent);
    o->unsent = 0;
    if (o->n_subs) add_state(r);
    write_batch(o);
}

static void on_flush(evutil_socket_t fd, short what, void *arg) {
    rt *r = arg;
    double t0 = thread_cpu_s(), c0 = r->obs->cpu_s[RT_CONSOLE_CACHE_STATS], s0 = r->obs->cpu_s[RT_CONSOLE_SNAPSHOT];
    flush(r);
    /* The snapshot's share is its own path: taken out of the feed's like the cache stats. */
    account(r->obs, RT_CONSOLE_FEED, t0, c0 - (r->obs->cpu_s[RT_CONSOLE_SNAPSHOT] - s0));
}

/* A batch goes out FEED_DELAY_MS after the last one, or FEED_FIRST_MS
 * after a call when the last is older: the calls a batched worker finishes
 * in one step end within milliseconds of each other, and share the write. */
static void arm_flush(rt *r) {
    rt_obs *o = r->obs;
    if (!o->flush && !(o->flush = evtimer_new(r->ex.be.base, on_flush, r))) return;
    if (evtimer_pending(o->flush, NULL)) return;
    double wait_s = FEED_DELAY_MS / 1e3 - (sb_now_s() - o->feed_at);
    if (wait_s < FEED_FIRST_MS / 1e3) wait_s = FEED_FIRST_MS / 1e3;
    long us = (long)(wait_s * 1e6);
    struct timeval tv = { us / 1000000, us % 1000000 };
    evtimer_add(o->flush, &tv);
}

/* Per call only a count: the summary is copied from the ring when the
 * batch goes out, so the per-call cost needs no clock of its own. */
void rt_console_call(rt *r) {
    rt_obs *o = r->obs;
    if (!o || !o->n_subs) return;
    o->unsent++;
    arm_flush(r);
}

void rt_console_publish(rt *r, const char *event, size_t len) {
    rt_obs *o = r->obs;
    if (!o || !o->n_subs) return;
    sb_jw_raw(&o->batch, "data: ", 6);
    sb_jw_raw(&o->batch, event, len);
    sb_jw_raw(&o->batch, "\n\n", 2);
    if (o->batch.oom) { sb_jw_reset(&o->batch); o->batch.oom = 0; return; }
    arm_flush(r);
}

void rt_console_stop(rt *r) {
    rt_obs *o = r->obs;
    if (!o) return;
    while (o->n_subs) {
        rt_req *q = o->subs[--o->n_subs];
        q->on_gone = NULL;
        rt_req_sse_end(q);
    }
    if (o->tick) event_free(o->tick);
    o->tick = NULL;
    if (o->flush) event_free(o->flush);
    o->flush = NULL;
    sb_jw_free(&o->batch);
    o->unsent = 0;
    sb_free(o->subs);
    o->subs = NULL;
    o->cap_subs = 0;
}

/* A snapshot when something changed and no batch is on its way (that
 * one will carry it). */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    rt *r = arg;
    rt_obs *o = r->obs;
    if (r->stopping) { rt_console_stop(r); return; }    /* a feed never ends by itself: drain would wait */
    if (!o->n_subs) { event_del(o->tick); return; }
    if (o->flush && evtimer_pending(o->flush, NULL)) return;
    if (sb_now_s() - o->state_at < STATE_MIN_S || state_sig(r) == o->state_sig) return;
    double t0 = thread_cpu_s(), c0 = o->cpu_s[RT_CONSOLE_CACHE_STATS], s0 = o->cpu_s[RT_CONSOLE_SNAPSHOT];
    add_state(r);
    write_batch(o);
    /* The write is the feed's (add_state timed the snapshot itself). */
    account(o, RT_CONSOLE_FEED, t0, c0 - (o->cpu_s[RT_CONSOLE_SNAPSHOT] - s0));
}

/* Room for one more subscriber and the running tick; false: answered 500/503. */
static bool subscribe_ready(rt_req *q) {
    rt *r = q->r;
    rt_obs *o = r->obs;
    if (!o) { rt_req_error(q, 503, "server_error", "console_unavailable", "the console is not available"); return false; }
    if (o->n_subs == o->cap_subs) {
        size_t cap = o->cap_subs ? o->cap_subs * 2 : 4;
        rt_req **ns = sb_realloc(o->subs, cap * sizeof *ns);
        if (!ns) { rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory"); return false; }
        o->subs = ns;
        o->cap_subs = cap;
    }
    if (!o->tick && !(o->tick = event_new(r->ex.be.base, -1, EV_PERSIST, on_tick, r))) {
        rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
        return false;
    }
    struct timeval tv = { TICK_MS / 1000, (TICK_MS % 1000) * 1000 };
    if (!event_pending(o->tick, EV_TIMEOUT, NULL)) event_add(o->tick, &tv);
    return true;
}

void rt_handle_console_events(rt_req *q) {
    rt *r = q->r;
    if (!subscribe_ready(q)) return;
    rt_obs *o = r->obs;
    /* What is pending goes to the others first: the hello below already
     * holds those calls, and the batch must not repeat them to q. */
    if (o->unsent || o->batch.len) on_flush(-1, 0, r);
    double t0 = thread_cpu_s(), c0 = o->cpu_s[RT_CONSOLE_CACHE_STATS];
    rt_req_sse_start(q, NULL);
    o->subs[o->n_subs++] = q;
    q->on_gone = sub_gone;
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    sb_jw_obj(w);
    sb_jw_key(w, "type"); sb_jw_str(w, "hello");
    sb_jw_key(w, "calls"); rt_trace_recent_json(r, w, HELLO_CALLS);
    sb_jw_key(w, "state"); state_json(r, w);
    sb_jw_obj_end(w);
    if (!w->oom) {
        rt_req_sse_send(q, w->p, w->len);
        write_now(q);
        o->feed_bytes += w->len + 8;        /* "data: " and "\n\n" */
    }
    account(o, RT_CONSOLE_CONNECT, t0, c0);
}
