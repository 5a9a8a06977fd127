/* reply.c - what every HTTP door shares once a call is under way: the
 * failure writer (the error half of their reply sinks), the end of a
 * model call, and the response cache.
 *
 * The response cache sits in front of both pipelines and plain models: the
 * key covers the namespace (model:NAME / pipeline:NAME), a fingerprint of
 * the model files (and the pipeline's definition), the normalised input and
 * the parameters that change the answer. `Cache-Control: no-cache` skips the
 * lookup (the fresh answer is still stored). Replies carry X-Cache.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "router/router_internal.h"

/* -------------------------------------------------------------- failures */

void rt_req_fail(void *req, const rt_failure *f) {
    rt_req *q = req;
    if (f->retry_after) rt_req_retry_after(q, f->retry_after);
    rt_req_error(q, f->status, f->type, f->code, "%s", f->message);
}

bool rt_req_model_failed(rt_req *q, const rt_reply *res) {
    q->job = NULL;
    q->on_gone = NULL;
    if (res->ok) return false;
    char msg[SB_ERR_LEN + 256];
    snprintf(msg, sizeof msg, "model '%s': %s", q->model, res->message ? res->message : "failed");
    rt_failure f = { .code = res->code ? res->code : "error", .message = msg };
    f.status = rt_worker_error_status(res->code, &f.type);
    f.retry_after = f.status == 503 ? 2 : 0;
    rt_req_fail(q, &f);
    return true;
}

/* ---------------------------------------------------------------- cache */

int rt_cache_lookup(rt_req *q, const char *ns, const char *fp, const char *input, unsigned norm,
                    const char *params, sb_cache_entry *entry) {
    rt *r = q->r;
    if (!r->cache || !fp || !fp[0] || !input) return -1;
    char err[SB_ERR_LEN];
    sb_cache_query cq;
    if (sb_cache_make_key_norm(r->cache, norm, ns, fp, input, params, &cq, err)) return -1;
    q->cache_key = sb_strdup(cq.key);
    q->cache_input = cq.input;
    q->cache_ns = sb_strdup(ns);
    q->cache_fp = sb_strdup(fp);
    q->cache_params = sb_strdup(params);
    if (!q->cache_key || !q->cache_ns || !q->cache_fp || !q->cache_params) {
        sb_free(q->cache_key);
        q->cache_key = NULL;
        return -1;
    }
    const char *cc = rt_req_header(q, "Cache-Control");
    if (cc && strcasestr(cc, "no-cache")) {
        r->metrics.cache_bypass++;
        return 0;
    }
    int rc = sb_cache_get(r->cache, cq.key, entry, err);
    if (rc == 0) {
        r->metrics.cache_hits++;
        return 1;
    }
    r->metrics.cache_misses++;
    return 0;
}

void rt_cache_store(rt_req *q, const char *response, size_t len) {
    if (!q->cache_key || !q->r->cache) return;
    sb_cache_item it = { .key = q->cache_key, .ns = q->cache_ns, .fingerprint = q->cache_fp, .input = q->cache_input,
                         .params = q->cache_params, .response = response, .response_len = len, .ttl_s = -1,
                         .origin = SB_CACHE_ORIGIN_LOCAL };
    char err[SB_ERR_LEN];
    sb_cache_put(q->r->cache, &it, err);     /* a failure only means "not stored"; the cache logs it once */
}
