/* worker_reply.c - a worker's answer, read once into the typed reply.
 *
 * The worker's results are msgpack maps (docs/ipc.md): `generate` gives
 * text, finish_reason, its token counts and times, its tool calls and
 * logprobs (a streamed `token` event: text and logprobs), `score` the
 * candidates' probs and logprobs, `embed` its vectors. Everything above the
 * backend reads rt_reply's fields; the keys are spelled here only. A field
 * the worker left out reads as 0 (or "", NULL), as each caller read it
 * before; an array that is not all numbers reads as absent.
 */
#include <string.h>

#include "router/backend/backend_internal.h"

/* The numbers of array o into a new array of n doubles; NULL when o is not
 * an array of numbers (or is empty). */
static double *doubles(const sb_mp_obj *o, size_t *n) {
    *n = 0;
    uint32_t k = sb_mp_type_of(o) == SB_MP_ARRAY ? sb_mp_count(o) : 0;
    double *v = k ? sb_malloc(k * sizeof *v) : NULL;
    for (uint32_t i = 0; v && i < k; i++)
        if (sb_mp_as_f64(sb_mp_array_at(o, i), &v[i])) { sb_free(v); return NULL; }
    if (v) *n = k;
    return v;
}

/* A logprobs entry's token: its bytes (bin) and logprob. */
static void token_prob(const sb_mp_obj *e, rt_token_prob *t) {
    const void *b = NULL;
    *t = (rt_token_prob){ .bytes = "" };
    if (!sb_mp_as_bin(sb_mp_map_get(e, "bytes"), &b, &t->len) && b) t->bytes = b;
    sb_mp_as_f64(sb_mp_map_get(e, "logprob"), &t->logprob);
}

/* The worker's logprobs entries [{bytes, logprob, top: [{bytes, logprob}]}]
 * as n entries, their alternatives after them, in one allocation (*store,
 * NULL when there are none). 0 or SB_ENOMEM. */
static int logprobs(const sb_mp_obj *arr, const rt_logprob **out, size_t *n, void **store) {
    *out = NULL;
    *n = 0;
    *store = NULL;
    uint32_t k = sb_mp_type_of(arr) == SB_MP_ARRAY ? sb_mp_count(arr) : 0;
    size_t n_top = 0;
    for (uint32_t i = 0; i < k; i++) {
        const sb_mp_obj *top = sb_mp_map_get(sb_mp_array_at(arr, i), "top");
        n_top += sb_mp_type_of(top) == SB_MP_ARRAY ? sb_mp_count(top) : 0;
    }
    if (!k) return 0;
    rt_logprob *v = sb_malloc(k * sizeof *v + n_top * sizeof(rt_token_prob));
    if (!v) return SB_ENOMEM;
    rt_token_prob *tops = (rt_token_prob *)(v + k);
    for (uint32_t i = 0; i < k; i++) {
        const sb_mp_obj *e = sb_mp_array_at(arr, i), *top = sb_mp_map_get(e, "top");
        token_prob(e, &v[i].tok);
        v[i].top = tops;
        v[i].n_top = sb_mp_type_of(top) == SB_MP_ARRAY ? sb_mp_count(top) : 0;
        for (uint32_t t = 0; t < v[i].n_top; t++) token_prob(sb_mp_array_at(top, t), tops++);
    }
    *out = v;
    *n = k;
    *store = v;
    return 0;
}

int rt_token_from_worker(const sb_mp_obj *data, rt_token *t, void **store) {
    *t = (rt_token){ .text = "" };
    *store = NULL;
    if (sb_mp_get_str(data, "text", SB_MP_REQUIRED, &t->text, &t->len, NULL)) return SB_EINVAL;
    const sb_mp_obj *lps = sb_mp_map_get(data, "logprobs");
    t->has_logprobs = lps != NULL;
    return logprobs(lps, &t->logprobs, &t->n_logprobs, store);
}

/* The calls [{name, arguments}] as rt_tool_calls (*store). 0 or SB_ENOMEM. */
static int tool_calls(const sb_mp_obj *arr, rt_gen_result *g, void **store) {
    uint32_t k = sb_mp_type_of(arr) == SB_MP_ARRAY ? sb_mp_count(arr) : 0;
    rt_tool_call *v = k ? sb_calloc(k, sizeof *v) : NULL;
    if (k && !v) return SB_ENOMEM;
    for (uint32_t i = 0; i < k; i++) {
        const sb_mp_obj *c = sb_mp_array_at(arr, i);
        v[i].name = v[i].arguments = "";
        sb_mp_get_str(c, "name", SB_MP_REQUIRED, &v[i].name, &v[i].name_len, NULL);
        sb_mp_get_str(c, "arguments", SB_MP_REQUIRED, &v[i].arguments, &v[i].arguments_len, NULL);
    }
    g->calls = v;
    g->n_calls = k;
    *store = v;
    return 0;
}

/* Calls and logprobs go into store[0] and store[1]. */
static int gen_result(const sb_mp_obj *r, rt_gen_result *g, void *store[2]) {
    g->text = "";
    sb_mp_get_str(r, "text", SB_MP_OPTIONAL, &g->text, &g->len, NULL);
    sb_mp_get_str(r, "finish_reason", SB_MP_OPTIONAL, &g->finish_reason, NULL, NULL);
    sb_mp_get_int(r, "prompt_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &g->prompt_tokens, NULL);
    sb_mp_get_int(r, "completion_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &g->completion_tokens, NULL);
    sb_mp_get_int(r, "reused_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &g->reused_tokens, NULL);
    sb_mp_get_num(r, "prompt_ms", SB_MP_OPTIONAL, 0, 1e12, &g->prompt_ms, NULL);
    sb_mp_get_num(r, "gen_ms", SB_MP_OPTIONAL, 0, 1e12, &g->gen_ms, NULL);
    const sb_mp_obj *lps = sb_mp_map_get(r, "logprobs");
    g->has_logprobs = lps != NULL;
    if (tool_calls(sb_mp_map_get(r, "tool_calls"), g, &store[0])) return SB_ENOMEM;
    return logprobs(lps, &g->logprobs, &g->n_logprobs, &store[1]);
}

/* Two arrays in one allocation: probs, then logprobs. */
static int score_result(const sb_mp_obj *r, rt_score_result *s, void **store) {
    size_t np, nl;
    double *p = doubles(sb_mp_map_get(r, "probs"), &np), *l = doubles(sb_mp_map_get(r, "logprobs"), &nl);
    double *both = np + nl ? sb_malloc((np + nl) * sizeof *both) : NULL;
    int rc = np + nl && !both ? SB_ENOMEM : 0;
    if (both) {
        if (np) memcpy(both, p, np * sizeof *p);
        if (nl) memcpy(both + np, l, nl * sizeof *l);
        *s = (rt_score_result){ np ? both : NULL, np, nl ? both + np : NULL, nl };
        *store = both;
    }
    sb_free(p);
    sb_free(l);
    return rc;
}

/* Vectors of one length, as floats: the worker computes float32s and
 * sends them as doubles, so the conversion is exact. */
static int embed_result(const sb_mp_obj *r, rt_embed_result *e, void **store) {
    const sb_mp_obj *vs = sb_mp_map_get(r, "embeddings");
    sb_mp_get_int(r, "n_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &e->n_tokens, NULL);
    sb_mp_get_num(r, "embed_ms", SB_MP_OPTIONAL, 0, 1e12, &e->embed_ms, NULL);
    e->n = sb_mp_type_of(vs) == SB_MP_ARRAY ? sb_mp_count(vs) : 0;
    const sb_mp_obj *v0 = e->n ? sb_mp_array_at(vs, 0) : NULL;
    uint32_t dim = sb_mp_type_of(v0) == SB_MP_ARRAY ? sb_mp_count(v0) : 0;
    if (!dim) return 0;
    float *out = sb_malloc(e->n * dim * sizeof *out);
    if (!out) return SB_ENOMEM;
    for (size_t i = 0; i < e->n; i++) {
        const sb_mp_obj *v = sb_mp_array_at(vs, (uint32_t)i);
        bool ok = sb_mp_type_of(v) == SB_MP_ARRAY && sb_mp_count(v) == dim;
        for (uint32_t k = 0; ok && k < dim; k++) {
            double x;
            ok = !sb_mp_as_f64(sb_mp_array_at(v, k), &x);
            out[i * dim + k] = (float)x;
        }
        if (!ok) { sb_free(out); return 0; }
    }
    e->vecs = out;
    e->dim = dim;
    *store = out;
    return 0;
}

void rt_reply_from_worker(int method, const sb_ipc_result *res, rt_reply *out, void *store[2]) {
    *out = (rt_reply){ .method = method, .ok = res->ok, .code = res->code, .message = res->message };
    out->gen.text = "";
    store[0] = store[1] = NULL;
    if (!res->ok) return;
    int rc = 0;
    if (method == RT_CALL_GENERATE) rc = gen_result(res->result, &out->gen, store);
    else if (method == RT_CALL_SCORE) rc = score_result(res->result, &out->score, &store[0]);
    else rc = embed_result(res->result, &out->embed, &store[0]);
    if (rc) *out = (rt_reply){ .method = method, .code = SB_IPC_INTERNAL, .message = "out of memory reading the reply",
                               .gen.text = "" };
}
