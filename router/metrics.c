/* metrics.c - the probes: GET /health, and GET /metrics with its counters
 * in the Prometheus text format (0.0.4). Neither queues: both answer from
 * the loop while every worker is busy.
 *
 * Everything is counted on the loop thread, so plain integers suffice.
 * Statuses are kept per route in a short table: a route sees a handful of
 * distinct codes, and anything beyond RT_MAX_STATUS lands in the last slot.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "router/obs.h"
#include "router/router_internal.h"

/* Seconds. From a cache hit (< 1 ms) to a long composer answer (minutes on
 * a 2-core box). */
static const double lat_bounds[RT_LAT_BUCKETS] = { 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                   0.5,   1,     2.5,  5,     10,  30,  120 };

const char *rt_route_name(int route) {
    static const char *const names[RT_ROUTE_COUNT] = { "chat_completions", "completions", "models", "pipelines",
                                                       "health", "metrics", "other", "embeddings",
                                                       "console" };
    return route >= 0 && route < RT_ROUTE_COUNT ? names[route] : "other";
}

void rt_metrics_request(rt_metrics *m, int route, int status, double seconds) {
    if (route < 0 || route >= RT_ROUTE_COUNT) route = RT_ROUTE_OTHER;
    int slot = RT_MAX_STATUS - 1;
    for (int i = 0; i < RT_MAX_STATUS; i++) {
        if (m->status[route][i].code == status || m->status[route][i].code == 0) { slot = i; break; }
    }
    m->status[route][slot].code = status;
    m->status[route][slot].n++;
    int b = 0;
    while (b < RT_LAT_BUCKETS && seconds > lat_bounds[b]) b++;
    m->lat[route][b]++;
    m->lat_sum[route] += seconds;
    m->lat_count[route]++;
}

static void line(sb_jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(sb_jw *w, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) sb_jw_raw(w, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* What a batching worker's health reports (rt_model, -1: not reported).
 * A family no worker reports is left out: an older worker or an encoder
 * has no KV pool, and a 0 there would read as an empty one. */
static void render_batch(rt *r, sb_jw *w) {
    static const struct { const char *name, *type, *help; size_t off; } fam[] = {
        { "switchboard_model_parallel", "gauge", "Sequences the worker runs at once (its batch).",
          offsetof(rt_model, parallel) },
        { "switchboard_model_running", "gauge", "Sequences the worker is running now.", offsetof(rt_model, running) },
        { "switchboard_kv_blocks", "gauge", "Blocks in the worker's KV pool.", offsetof(rt_model, kv_blocks_total) },
        { "switchboard_kv_blocks_free", "gauge", "Free blocks in the worker's KV pool.",
          offsetof(rt_model, kv_blocks_free) },
        { "switchboard_prefix_cache_hits_total", "counter", "Prompts that started with a cached prefix.",
          offsetof(rt_model, prefix_hits) },
        { "switchboard_prefix_cache_misses_total", "counter", "Prompts whose prefix was not cached.",
          offsetof(rt_model, prefix_misses) },
        { "switchboard_prefix_cache_tokens_reused_total", "counter", "Prompt tokens served from cached prefixes.",
          offsetof(rt_model, prefix_tokens_reused) },
        { "switchboard_spec_drafted_total", "counter", "Tokens drafted for speculative decoding.",
          offsetof(rt_model, spec_drafted) },
        { "switchboard_spec_accepted_total", "counter", "Drafted tokens the model accepted.",
          offsetof(rt_model, spec_accepted) },
    };
    for (size_t f = 0; f < SB_ARRAY_LEN(fam); f++) {
        bool head = false;
        for (size_t i = 0; i < r->ex.be.n_models; i++) {
            rt_model *md = r->ex.be.models[i];
            int64_t v = *(const int64_t *)((const char *)md + fam[f].off);
            if (md->removed || md->remote || v < 0) continue;
            if (!head) line(w, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name, fam[f].type);
            head = true;
            line(w, "%s{model=\"%s\"} %lld\n", fam[f].name, md->name, (long long)v);
        }
    }
}

/* Request latency: one histogram per route that has answered. */
static void render_latency(const rt_metrics *m, sb_jw *w) {
    line(w, "# HELP switchboard_http_request_duration_seconds Time from request to the end of its reply.\n"
            "# TYPE switchboard_http_request_duration_seconds histogram\n");
    for (int rt_ = 0; rt_ < RT_ROUTE_COUNT; rt_++) {
        if (!m->lat_count[rt_]) continue;
        uint64_t cum = 0;
        for (int b = 0; b < RT_LAT_BUCKETS; b++) {
            cum += m->lat[rt_][b];
            line(w, "switchboard_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                 rt_route_name(rt_), lat_bounds[b], (unsigned long long)cum);
        }
        cum += m->lat[rt_][RT_LAT_BUCKETS];
        line(w, "switchboard_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
             rt_route_name(rt_), (unsigned long long)cum);
        line(w, "switchboard_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", rt_route_name(rt_),
             m->lat_sum[rt_]);
        line(w, "switchboard_http_request_duration_seconds_count{route=\"%s\"} %llu\n", rt_route_name(rt_),
             (unsigned long long)m->lat_count[rt_]);
    }
}

/* The HTTP front door: requests by route and status. */
static void render_http(const rt_metrics *m, sb_jw *w) {
    line(w, "# HELP switchboard_http_requests_total HTTP requests answered, by route and status.\n"
            "# TYPE switchboard_http_requests_total counter\n");
    for (int rt_ = 0; rt_ < RT_ROUTE_COUNT; rt_++)
        for (int i = 0; i < RT_MAX_STATUS && m->status[rt_][i].code; i++)
            line(w, "switchboard_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n", rt_route_name(rt_),
                 m->status[rt_][i].code, (unsigned long long)m->status[rt_][i].n);
    render_latency(m, w);
    line(w, "# HELP switchboard_http_in_flight Requests being answered now.\n"
            "# TYPE switchboard_http_in_flight gauge\nswitchboard_http_in_flight %llu\n",
         (unsigned long long)m->in_flight);
    line(w, "# HELP switchboard_http_rejected_total Requests refused before they were complete.\n"
            "# TYPE switchboard_http_rejected_total counter\n"
            "switchboard_http_rejected_total{reason=\"timeout\"} %llu\n"
            "switchboard_http_rejected_total{reason=\"body_too_large\"} %llu\n"
            "switchboard_http_rejected_total{reason=\"headers_too_large\"} %llu\n",
         (unsigned long long)m->rejected_408, (unsigned long long)m->rejected_413,
         (unsigned long long)m->rejected_431);
}

/* Router overhead and the response cache. */
static void render_overhead_cache(const rt_metrics *m, sb_jw *w) {
    line(w, "# HELP switchboard_gateway_overhead_seconds Router time per successful request outside the workers.\n"
            "# TYPE switchboard_gateway_overhead_seconds summary\n"
            "switchboard_gateway_overhead_seconds_sum %.6f\nswitchboard_gateway_overhead_seconds_count %llu\n",
         m->overhead_sum, (unsigned long long)m->overhead_n);
    line(w, "# HELP switchboard_cache_requests_total Response cache lookups.\n"
            "# TYPE switchboard_cache_requests_total counter\n"
            "switchboard_cache_requests_total{result=\"hit\"} %llu\n"
            "switchboard_cache_requests_total{result=\"miss\"} %llu\n"
            "switchboard_cache_requests_total{result=\"bypass\"} %llu\n",
         (unsigned long long)m->cache_hits, (unsigned long long)m->cache_misses,
         (unsigned long long)m->cache_bypass);
}

/* Per local model: the worker's state and counters. */
static void render_models(rt *r, sb_jw *w) {
    static const struct { const char *name, *type, *help; } fam[] = {
        { "switchboard_model_up", "gauge", "1 when the model's worker answers its health probe." },
        { "switchboard_model_queue_depth", "gauge", "Requests waiting in the router for the model's worker." },
        { "switchboard_model_in_flight", "gauge", "Requests handed to the worker and not yet answered." },
        { "switchboard_model_requests_total", "counter", "Calls sent to the worker." },
        { "switchboard_model_errors_total", "counter", "Calls that ended in an error (busy, disconnected...)." },
        { "switchboard_model_prompt_tokens_total", "counter", "Prompt tokens the worker was given." },
        { "switchboard_model_reused_tokens_total", "counter", "Prompt tokens served from the worker's KV cache." },
        { "switchboard_model_completion_tokens_total", "counter", "Tokens generated." },
        { "switchboard_model_generation_seconds_total", "counter", "Worker time spent generating." },
        { "switchboard_model_tokens_per_second", "gauge", "Generation speed of the last request." },
        { "switchboard_worker_restarts_total", "counter", "Worker restarts the router noticed (its pid changed)." },
    };
    for (size_t f = 0; f < SB_ARRAY_LEN(fam); f++) {
        line(w, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name, fam[f].type);
        for (size_t i = 0; i < r->ex.be.n_models; i++) {
            rt_model *md = r->ex.be.models[i];
            if (md->removed || md->remote) continue;
            double v = 0;
            switch (f) {
            case 0: v = md->up; break;
            case 1: v = md->n_waiting; break;
            case 2: v = md->n_inflight; break;
            case 3: v = (double)md->requests; break;
            case 4: v = (double)md->errors; break;
            case 5: v = (double)md->prompt_tokens; break;
            case 6: v = (double)md->reused_tokens; break;
            case 7: v = (double)md->completion_tokens; break;
            case 8: v = md->gen_s; break;
            case 9: v = md->last_tps; break;
            default: v = (double)md->restarts; break;
            }
            line(w, "%s{model=\"%s\"} %.6g\n", fam[f].name, md->name, v);
        }
    }
}

void rt_metrics_render(rt *r, sb_jw *w) {
    sb_jw_reset(w);
    render_http(&r->metrics, w);
    render_overhead_cache(&r->metrics, w);
    render_models(r, w);
    render_batch(r, w);
    rt_hist_render(r, w);
    rt_otel_render(r, w);
    rt_console_render(r, w);
}

void rt_handle_metrics(rt_req *q) {
    rt_metrics_render(q->r, &q->out);
    rt_req_reply(q, 200, "text/plain; version=0.0.4", q->out.p, q->out.len);
}

/* 200 when every local model is up, else 503 (a load balancer's readiness). */
void rt_handle_health(rt_req *q) {
    rt *r = q->r;
    sb_jw *w = &q->out;
    sb_jw_obj(w);
    sb_jw_key(w, "models");
    rt_models_up n = rt_models_json(r, w, RT_MODELS_HEALTH);
    sb_jw_key(w, "status");
    sb_jw_str(w, n.up == n.local ? "ok" : n.up ? "degraded" : "down");
    sb_jw_key(w, "uptime_s");
    sb_jw_num(w, sb_now_s() - r->started);
    sb_jw_obj_end(w);
    rt_req_json(q, n.up == n.local ? 200 : 503, w->p, w->len, NULL);
}
