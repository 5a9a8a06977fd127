/* worker_reply.c - a worker's answer, read once into the typed reply.
 *
 * The worker's results are msgpack maps (docs/ipc.md): `generate` gives
 * text, finish_reason and its token counts and times, `score` the
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

static void gen_result(const sb_mp_obj *r, rt_gen_result *g) {
    g->text = "";
    sb_mp_get_str(r, "text", SB_MP_OPTIONAL, &g->text, &g->len, NULL);
    sb_mp_get_str(r, "finish_reason", SB_MP_OPTIONAL, &g->finish_reason, NULL, NULL);
    sb_mp_get_int(r, "prompt_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &g->prompt_tokens, NULL);
    sb_mp_get_int(r, "completion_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &g->completion_tokens, NULL);
    sb_mp_get_int(r, "reused_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &g->reused_tokens, NULL);
    sb_mp_get_num(r, "prompt_ms", SB_MP_OPTIONAL, 0, 1e12, &g->prompt_ms, NULL);
    sb_mp_get_num(r, "gen_ms", SB_MP_OPTIONAL, 0, 1e12, &g->gen_ms, NULL);
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

void rt_reply_from_worker(int method, const sb_ipc_result *res, rt_reply *out, void **store) {
    *out = (rt_reply){ .method = method, .ok = res->ok, .code = res->code, .message = res->message };
    out->gen.text = "";
    *store = NULL;
    if (!res->ok) return;
    int rc = 0;
    if (method == RT_CALL_GENERATE) gen_result(res->result, &out->gen);
    else if (method == RT_CALL_SCORE) rc = score_result(res->result, &out->score, store);
    else rc = embed_result(res->result, &out->embed, store);
    if (rc) *out = (rt_reply){ .method = method, .code = SB_IPC_INTERNAL, .message = "out of memory reading the reply" };
}
