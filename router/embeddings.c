/* embeddings.c - POST /v1/embeddings (OpenAI's shape) on encoder models.
 *
 * The request becomes one `embed` call to the model's worker (docs/ipc.md)
 * through the same FIFO, admission bound, deadline and hang-up
 * cancellation as a completion. `encoding_format: base64` is supported
 * because the official Python client asks for it by default (and decodes
 * it itself): little-endian float32, as OpenAI sends it.
 */
#include <stdio.h>
#include <string.h>

#include "router/router_internal.h"

/* As many texts as the worker takes in one call (serve_embed.h). */
#define MAX_INPUTS 256

static void call_gone(rt_req *q) {
    rt_job_cancel(q->job);
    q->job = NULL;
}

static void base64(sb_jw *w, const uint8_t *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[4];
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        quad[0] = tab[v >> 18 & 63];
        quad[1] = tab[v >> 12 & 63];
        quad[2] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        quad[3] = i + 2 < n ? tab[v & 63] : '=';
        sb_jw_raw(w, quad, 4);
    }
}

/* One vector: a JSON array of numbers, or a base64 string of float32s. */
static int put_vector(sb_jw *w, const float *vec, uint32_t dim, bool b64) {
    if (dim == 0) return -1;
    uint8_t *le = b64 ? sb_malloc((size_t)dim * 4) : NULL;
    if (b64 && !le) return -1;
    if (!b64) sb_jw_arr(w);
    for (uint32_t k = 0; k < dim; k++) {
        float f = vec[k];
        if (!b64) { sb_jw_num(w, f); continue; }
        uint32_t u;
        memcpy(&u, &f, 4);
        for (int i = 0; i < 4; i++) le[4 * k + (uint32_t)i] = (uint8_t)(u >> (8 * i));
    }
    if (!b64) { sb_jw_arr_end(w); return 0; }
    sb_jw b;
    sb_jw_init(&b);
    base64(&b, le, (size_t)dim * 4);
    sb_jw_strn(w, b.p ? b.p : "", b.len);
    int oom = b.oom;
    sb_jw_free(&b);
    sb_free(le);
    return oom ? -1 : 0;
}

static void on_embedded(void *arg, const rt_reply *res) {
    rt_req *q = arg;
    if (rt_req_model_failed(q, res)) return;
    const rt_embed_result *e = &res->embed;
    int64_t nt = e->n_tokens <= INT32_MAX ? e->n_tokens : 0;
    q->t_model = e->embed_ms / 1e3;
    sb_jw *w = &q->out;
    sb_jw_reset(w);
    sb_jw_obj(w);
    sb_jw_key(w, "object"); sb_jw_str(w, "list");
    sb_jw_key(w, "data");
    sb_jw_arr(w);
    int bad = (int)e->n != q->n_embed;
    for (uint32_t i = 0; !bad && i < e->n; i++) {
        sb_jw_obj(w);
        sb_jw_key(w, "object"); sb_jw_str(w, "embedding");
        sb_jw_key(w, "index"); sb_jw_int(w, i);
        sb_jw_key(w, "embedding");
        bad = put_vector(w, e->vecs + (size_t)i * e->dim, e->dim, q->embed_b64);
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    sb_jw_key(w, "model"); sb_jw_str(w, q->model);
    sb_jw_key(w, "usage");
    sb_jw_obj(w);
    sb_jw_key(w, "prompt_tokens"); sb_jw_int(w, nt);
    sb_jw_key(w, "total_tokens"); sb_jw_int(w, nt);
    sb_jw_obj_end(w);
    sb_jw_obj_end(w);
    if (bad) rt_req_error(q, 502, "server_error", "bad_worker_reply", "model '%s': the worker's vectors are malformed", q->model);
    else if (w->oom) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, w->p, w->len, NULL);
}

#define BAD(...) do { rt_req_error(q, 400, "invalid_request_error", "invalid_value", __VA_ARGS__); return; } while (0)

/* Parameters: OpenAI's, plus `input_type` (query | passage | raw: e5's
 * prefixes, docs/EMBEDDINGS.md), which some embedding APIs also use, and
 * `adapter`: "none" (the frozen encoder) or one of the entry's named
 * adapters, checked by the worker; absent, the entry's `adapter:`. */
void rt_handle_embeddings(rt_req *q, const sb_json *body) {
    const sb_json *jm = sb_json_get(body, "model"), *in = sb_json_get(body, "input"),
                  *fmt = sb_json_get(body, "encoding_format"), *it = sb_json_get(body, "input_type"),
                  *dims = sb_json_get(body, "dimensions"), *ad = sb_json_get(body, "adapter");
    if (sb_json_type_of(jm) != SB_JSON_STRING) BAD("'model': expected a string naming an encoder model");
    snprintf(q->model, sizeof q->model, "%s", sb_json_str(jm));
    bool list = sb_json_type_of(in) == SB_JSON_ARRAY;
    size_t n = list ? sb_json_len(in) : 1;
    if (!list && sb_json_type_of(in) != SB_JSON_STRING) BAD("'input': expected a string or an array of strings");
    if (n == 0 || n > MAX_INPUTS) BAD("'input': expected 1 to %d strings, got %zu", MAX_INPUTS, n);
    for (size_t i = 0; list && i < n; i++)
        if (sb_json_type_of(sb_json_at(in, i)) != SB_JSON_STRING)
            BAD("'input'[%zu]: expected a string (token arrays are not supported: send the text)", i);
    const char *f = fmt && sb_json_type_of(fmt) != SB_JSON_NULL ? sb_json_str(fmt) : "float";
    if (!f || (strcmp(f, "float") && strcmp(f, "base64"))) BAD("'encoding_format': expected \"float\" or \"base64\"");
    const char *kind = it && sb_json_type_of(it) != SB_JSON_NULL ? sb_json_str(it) : "query";
    if (!kind || (strcmp(kind, "query") && strcmp(kind, "passage") && strcmp(kind, "raw")))
        BAD("'input_type': expected \"query\", \"passage\" or \"raw\"");
    if (dims && sb_json_type_of(dims) != SB_JSON_NULL)
        BAD("'dimensions': not supported (the model's vectors have a fixed size)");
    const char *adapter = ad && sb_json_type_of(ad) != SB_JSON_NULL ? sb_json_str(ad) : NULL;
    if (ad && sb_json_type_of(ad) != SB_JSON_NULL && (!adapter || !sb_cfg_valid_name(adapter, SB_CONFIG_MAX_NAME)))
        BAD("'adapter': expected \"none\" or the name of one of the model's adapters (models.NAME.adapters)");
    rt_model *m = rt_model_find(&q->r->ex.be, q->model);
    if (!m) {
        rt_req_error(q, 404, "invalid_request_error", "model_not_found",
                     "the model '%.80s' does not exist (GET /v1/models lists them)", q->model);
        return;
    }
    /* The worker would say so too; known, the answer needs no queue slot. */
    if (m->remote || (m->kind_known && !m->encoder))
        BAD("model '%s' is %s model: /v1/embeddings needs an encoder (embedding) model such as "
            "multilingual-e5-small", q->model, m->remote ? "an upstream (generate-only)" : "a generative (decoder)");
    q->n_embed = (int)n;
    q->embed_b64 = !strcmp(f, "base64");
    const char *texts[MAX_INPUTS];
    size_t lens[MAX_INPUTS];
    for (size_t i = 0; i < n; i++) {
        const sb_json *s = list ? sb_json_at(in, i) : in;
        texts[i] = sb_json_str(s);
        lens[i] = sb_json_len(s);
    }
    rt_embed_req r = { .kind = kind, .texts = texts, .lens = lens, .n = n, .adapter = adapter };
    char err[SB_ERR_LEN];
    int rc = rt_model_submit_embed(m, &r, m->deadline_ms, on_embedded, q, &q->job, err);
    if (rc) {
        if (rc == SB_EBUSY || rc == SB_EIO) rt_req_retry_after(q, rc == SB_EBUSY ? rt_model_retry_after(m) : 5);
        rt_req_error(q, rc == SB_ENOMEM ? 500 : 503, rc == SB_EBUSY ? "server_busy" : "model_unavailable",
                     rc == SB_EBUSY ? "queue_full" : "model_unavailable", "%s", err);
        return;
    }
    q->on_gone = call_gone;
    rt_req_set_deadline(q, m->deadline_ms + 5000);
}
