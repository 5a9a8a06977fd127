/* encoder.c - BERT / XLM-RoBERTa encoders and sentence vectors (see
 * sb_encoder.h). Weights are found with model.c's checks (sb_weight_find)
 * and multiplied by matmul.c, so the encoder runs on the decoder's kernels
 * and thread pool; what is new here is the bidirectional attention,
 * LayerNorm with bias, GELU, pooling and windowing.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "worker/engine/matmul_impl.h"
#include "common/sb_common.h"
#include "worker/engine/encoder_impl.h"

#define ROWS_PER_TASK 4         /* token rows per pool task in the row-wise steps */

int sb_encoder_dim(const sb_encoder *e) { return e->H; }
int sb_encoder_n_ctx(const sb_encoder *e) { return e->n_ctx; }
const sb_ugm *sb_encoder_tokenizer(const sb_encoder *e) { return e->tok; }
const sb_gguf *sb_encoder_gguf(const sb_encoder *e) { return e->gguf; }

int sb_encoder_file_is_encoder(const sb_gguf *g) {
    sb_str a;
    return sb_gguf_get_str(g, "general.architecture", &a) == 0 && sb_str_eq(a, "bert");
}

void sb_encoder_describe(const sb_encoder *e, char *buf, size_t cap) {
    snprintf(buf, cap, "bert: %d layers, %d dim, %d heads, ff %d, vocab %d, %.1f MiB of weights", e->NL, e->H, e->NH,
             e->FF, e->n_vocab, (double)e->weight_bytes / (1024.0 * 1024.0));
}

void sb_encoder_free(sb_encoder *e) {
    if (!e) return;
    for (int l = 0; e->layers && l < e->NL; l++) {
        enc_layer *L = &e->layers[l];
        float *v[] = { L->bq, L->bk, L->bv, L->bo, L->bup, L->bdown, L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b };
        for (size_t i = 0; i < SB_ARRAY_LEN(v); i++) sb_aligned_free(v[i]);
    }
    sb_free(e->layers);
    float *bufs[] = { e->pos, e->type0, e->eln_w, e->eln_b, e->x, e->q, e->k, e->v, e->ctx, e->tmp, e->mid, e->scores,
                      e->qh };
    for (size_t i = 0; i < SB_ARRAY_LEN(bufs); i++) sb_aligned_free(bufs[i]);
    sb_aligned_free(e->kh);
    sb_aligned_free(e->vh);
    sb_aligned_free(e->embd_rows);
    sb_mm_free(&e->mm);
    sb_pool_free(e->pool);
    sb_ugm_free(e->tok);
    sb_gguf_close(e->gguf);
    sb_free(e);
}

/* ---- loading ----------------------------------------------------------- */

static int hp_u32(const sb_gguf *g, const char *key, int32_t *out, char *err) {
    uint32_t v;
    if (sb_gguf_get_u32(g, key, &v) != 0 || v == 0 || v > (1u << 24))
        return sb_seterr(err, SB_EFORMAT, "%s: metadata key '%s' missing or out of range", sb_gguf_path(g), key);
    *out = (int32_t)v;
    return 0;
}

/* A whole [ne0 x ne1] tensor converted to F32 (position embeddings, types). */
static int load_table(const sb_gguf *g, const char *name, int64_t ne0, int64_t ne1, float **out, char *err) {
    sb_weight w;
    int rc = sb_weight_find(g, name, ne0, ne1, 1, &w, err);
    if (rc) return rc;
    const sb_kq_traits *tt = &sb_kq_table(SB_KQ_REF)[w.type];
    if (!tt->to_float) return sb_seterr(err, SB_EUNSUP, "%s: tensor '%s' cannot be converted", sb_gguf_path(g), name);
    if (!(*out = sb_aligned_alloc((size_t)(ne0 * ne1) * sizeof(float)))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int64_t r = 0; r < ne1; r++)
        tt->to_float((const uint8_t *)w.data + (size_t)r * w.row_bytes, *out + r * ne0, ne0);
    return 0;
}

static int load_layer(sb_encoder *e, int il, char *err) {
    enc_layer *L = &e->layers[il];
    const sb_gguf *g = e->gguf;
    const int64_t H = e->H, F = e->FF;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    const struct { const char *name; int64_t ne0, ne1; sb_weight *w; } mats[] = {
        { "attn_q.weight", H, H, &L->wq }, { "attn_k.weight", H, H, &L->wk }, { "attn_v.weight", H, H, &L->wv },
        { "attn_output.weight", H, H, &L->wo }, { "ffn_up.weight", H, F, &L->wup }, { "ffn_down.weight", F, H, &L->wdown },
    };
    const struct { const char *name; int64_t n; float **v; } vecs[] = {
        { "attn_q.bias", H, &L->bq }, { "attn_k.bias", H, &L->bk }, { "attn_v.bias", H, &L->bv },
        { "attn_output.bias", H, &L->bo }, { "ffn_up.bias", F, &L->bup }, { "ffn_down.bias", H, &L->bdown },
        { "attn_output_norm.weight", H, &L->ln1_w }, { "attn_output_norm.bias", H, &L->ln1_b },
        { "layer_output_norm.weight", H, &L->ln2_w }, { "layer_output_norm.bias", H, &L->ln2_b },
    };
    int rc = 0;
    for (size_t i = 0; i < SB_ARRAY_LEN(mats) && !rc; i++) {
        rc = sb_weight_find(g, NAME(mats[i].name), mats[i].ne0, mats[i].ne1, 1, mats[i].w, err);
        if (!rc) e->weight_bytes += mats[i].w->row_bytes * (size_t)mats[i].ne1;
    }
    for (size_t i = 0; i < SB_ARRAY_LEN(vecs) && !rc; i++)
        rc = sb_weight_load_vector(g, NAME(vecs[i].name), vecs[i].n, 1, vecs[i].v, err);
#undef NAME
    return rc;
}

static int load_weights(sb_encoder *e, char *err) {
    const sb_gguf *g = e->gguf;
    int32_t tvs = 0;
    int rc;
    if ((rc = hp_u32(g, "bert.embedding_length", &e->H, err)) || (rc = hp_u32(g, "bert.block_count", &e->NL, err)) ||
        (rc = hp_u32(g, "bert.attention.head_count", &e->NH, err)) ||
        (rc = hp_u32(g, "bert.feed_forward_length", &e->FF, err)) || (rc = hp_u32(g, "bert.context_length", &e->n_ctx, err)))
        return rc;
    if (e->H % e->NH || e->H / e->NH > MAX_HEAD_DIM || e->NL > 1024 || e->n_ctx > 65536 || e->n_ctx < 3)
        return sb_seterr(err, SB_EFORMAT, "%s: impossible sizes: %d dim, %d heads, %d layers, context %d", sb_gguf_path(g),
                         e->H, e->NH, e->NL, e->n_ctx);
    e->eps = 1e-12f;
    if (sb_gguf_get_f32(g, "bert.attention.layer_norm_epsilon", &e->eps) == 0 && !(e->eps > 0 && e->eps < 1))
        return sb_seterr(err, SB_EFORMAT, "%s: layer_norm_epsilon out of range", sb_gguf_path(g));
    const sb_gguf_tensor *te = sb_gguf_find_tensor(g, "token_embd.weight");
    const sb_gguf_tensor *tt = sb_gguf_find_tensor(g, "token_types.weight");
    if (!te || !tt) return sb_seterr(err, SB_EFORMAT, "%s: missing tensor token_embd or token_types", sb_gguf_path(g));
    e->n_vocab = (int)SB_MIN(te->ne[1], (int64_t)INT32_MAX);
    tvs = (int32_t)SB_MIN(tt->ne[1], (int64_t)64);
    if ((rc = sb_weight_find(g, "token_embd.weight", e->H, e->n_vocab, 1, &e->tok_embd, err))) return rc;
    e->weight_bytes = e->tok_embd.row_bytes * (size_t)e->n_vocab;
    if (!sb_kq_table(SB_KQ_REF)[e->tok_embd.type].to_float)
        return sb_seterr(err, SB_EUNSUP, "%s: token_embd.weight cannot be dequantized", sb_gguf_path(g));
    float *types = NULL;
    if ((rc = load_table(g, "position_embd.weight", e->H, e->n_ctx, &e->pos, err)) ||
        (rc = load_table(g, "token_types.weight", e->H, tvs, &types, err)))
        return rc;
    e->type0 = types;                   /* row 0 first: all our inputs are one segment */
    if ((rc = sb_weight_load_vector(g, "token_embd_norm.weight", e->H, 1, &e->eln_w, err)) ||
        (rc = sb_weight_load_vector(g, "token_embd_norm.bias", e->H, 1, &e->eln_b, err)))
        return rc;
    if (!(e->layers = sb_calloc((size_t)e->NL, sizeof *e->layers))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int l = 0; l < e->NL && !rc; l++) rc = load_layer(e, l, err);
    return rc;
}

static int alloc_rows(float **p, size_t rows, size_t width) {
    return (*p = sb_aligned_alloc(rows * width * sizeof(float))) ? 0 : -1;
}

int sb_encoder_open(const char *path, int n_threads, int kq_level, sb_encoder **out, char *err) {
    *out = NULL;
    sb_encoder *e = sb_calloc(1, sizeof *e);
    if (!e) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = sb_gguf_open(path, &e->gguf, err);
    if (!rc && !sb_encoder_file_is_encoder(e->gguf))
        rc = sb_seterr(err, SB_EUNSUP, "%s: not an encoder model (general.architecture is not 'bert')", path);
    if (!rc) rc = load_weights(e, err);
    if (!rc) rc = sb_ugm_load(e->gguf, &e->tok, err);
    if (!rc && (sb_ugm_bos(e->tok) < 0 || sb_ugm_eos(e->tok) < 0 || sb_ugm_n_tokens(e->tok) > e->n_vocab))
        rc = sb_seterr(err, SB_EFORMAT, "%s: tokenizer without BOS/EOS or larger than token_embd", path);
    if (rc) goto fail;
    int level = kq_level >= 0 && kq_level < sb_kq_best_level() ? kq_level : sb_kq_best_level();
    const sb_kq_kernels *kernels = sb_kq_engine_kernels(level);
    e->kq = kernels->row;
    e->vec = sb_kq_vec_table(level);
    const int nt = SB_MAX(1, SB_MIN(n_threads, 256));
    const size_t rows = (size_t)e->n_ctx, H = (size_t)e->H, F = (size_t)e->FF;
    if (sb_pool_new(nt, &e->pool) != 0) { rc = sb_seterr(err, SB_ENOMEM, "cannot start %d threads", nt); goto fail; }
    if (alloc_rows(&e->x, rows, H) || alloc_rows(&e->q, rows, H) || alloc_rows(&e->k, rows, H) ||
        alloc_rows(&e->v, rows, H) || alloc_rows(&e->ctx, rows, H) || alloc_rows(&e->tmp, rows, H) ||
        alloc_rows(&e->mid, rows, F) || alloc_rows(&e->scores, (size_t)nt, rows) ||
        alloc_rows(&e->qh, (size_t)nt, H / (size_t)e->NH) || !(e->kh = sb_aligned_alloc(rows * H * 2)) ||
        !(e->vh = sb_aligned_alloc(rows * H * 2)) || !(e->embd_rows = sb_aligned_alloc(rows * e->tok_embd.row_bytes)) ||
        sb_mm_init(&e->mm, kernels, e->pool, rows * SB_MAX(H, F) * 4 + 4096, 0)) {
        rc = sb_seterr(err, SB_ENOMEM, "out of memory for a %d-token window", e->n_ctx);
        goto fail;
    }
    sb_gguf_release_header(e->gguf);    /* the tokenizer has its copy */
    *out = e;
    return 0;
fail:
    sb_encoder_free(e);
    return rc;
}

/* ---- the forward pass -------------------------------------------------- */

/* x = LN(x + y) (y may be NULL), per row; biased LayerNorm, mean/var in float. */
static void layer_norm(float *x, const float *y, const float *w, const float *b, int H, float eps) {
    float mean = 0;
    for (int i = 0; i < H; i++) { if (y) x[i] += y[i]; mean += x[i]; }
    mean /= (float)H;
    float var = 0;
    for (int i = 0; i < H; i++) { const float d = x[i] - mean; var += d * d; }
    const float inv = 1.0f / sqrtf(var / (float)H + eps);
    for (int i = 0; i < H; i++) x[i] = (x[i] - mean) * inv * w[i] + b[i];
}

typedef enum { STEP_EMBED, STEP_QKV_BIAS, STEP_ATTN_OUT, STEP_FFN_UP, STEP_FFN_OUT, STEP_ATTN } step_kind;

typedef struct {
    sb_encoder *e;
    const enc_layer *L;
    const int32_t *ids;
    int n, step;
} step_job;

/* The window's token embedding rows, read from the file before the
 * parallel embedding step: read through the mapping, each row would map
 * the 64 KiB (or 2 MiB page) around it, and a 250k-token table is read a
 * few rows per query (sb_gguf_read_at). */
static void read_embd_rows(sb_encoder *e, const int32_t *ids, int n) {
    const size_t rb = e->tok_embd.row_bytes;
    for (int t = 0; t < n; t++) {
        uint8_t *dst = e->embd_rows + (size_t)t * rb;
        const uint8_t *at = (const uint8_t *)e->tok_embd.data + (size_t)ids[t] * rb;
        if (sb_gguf_read_at(e->gguf, at, rb, dst) != dst) memcpy(dst, at, rb);
    }
}

static void embed_row(sb_encoder *e, int t) {
    const int H = e->H;
    float *x = e->x + (size_t)t * H;
    e->kq[e->tok_embd.type].to_float(e->embd_rows + (size_t)t * e->tok_embd.row_bytes, x, H);
    const float *p = e->pos + (size_t)t * H;
    for (int i = 0; i < H; i++) x[i] += p[i] + e->type0[i];
    layer_norm(x, NULL, e->eln_w, e->eln_b, H, e->eps);
}

static void add_bias(float *y, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] += b[i];
}

/* One query head over all n keys: softmax(q·Kᵀ/√d)·V into ctx, with K, V
 * and q rounded to F16 and the SIMD kernels of the decoder's F16 KV cache
 * (what llama.cpp does too); 20x faster than plain float loops on a
 * 512-token window, and within 1e-4 cosine of them. */
static void attend(sb_encoder *e, int h, int t, int n, float *s, float *qh) {
    const int H = e->H, hd = H / e->NH;
    const sb_kq_traits *f16 = &e->kq[SB_TYPE_F16];
    sb_fp16 q16[MAX_HEAD_DIM];
    f16->from_float(e->q + (size_t)t * H + h * hd, q16, hd);
    f16->to_float(q16, qh, hd);
    const float mx = e->vec->qk_f16(hd, n, qh, e->kh + h * hd, (size_t)H, 1.0f / sqrtf((float)hd), s);
    const double sum = e->vec->softmax_exp(s, n, mx);
    e->vec->pv_f16(hd, n, s, (float)(1.0 / sum), e->vh + h * hd, (size_t)H, e->ctx + (size_t)t * H + h * hd);
}

/* Layer L's norm k: the adapter's trained one if it has it, else the base's. */
static void norm_of(const sb_encoder *e, const enc_layer *L, sb_lora_norm_which k, const float **w, const float **b) {
    const sb_lora_norm *nm = sb_lora_norm_get(e->lora, (int)(L - e->layers), k);
    *w = nm ? nm->w : k == SB_LORA_LN_ATTN ? L->ln1_w : L->ln2_w;
    *b = nm ? nm->b : k == SB_LORA_LN_ATTN ? L->ln1_b : L->ln2_b;
}

static void step_task(void *arg, int task, int thread) {
    const step_job *j = arg;
    sb_encoder *e = j->e;
    const enc_layer *L = j->L;
    const int H = e->H, F = e->FF;
    const float *lnw, *lnb;
    if (j->step == STEP_ATTN) {                     /* task = head × block of tokens */
        const int nb = (j->n + ROWS_PER_TASK - 1) / ROWS_PER_TASK, h = task / nb, t0 = task % nb * ROWS_PER_TASK;
        for (int t = t0; t < SB_MIN(t0 + ROWS_PER_TASK, j->n); t++)
            attend(e, h, t, j->n, e->scores + (size_t)thread * e->n_ctx, e->qh + (size_t)thread * (H / e->NH));
        return;
    }
    for (int t = task * ROWS_PER_TASK; t < SB_MIN((task + 1) * ROWS_PER_TASK, j->n); t++) {
        const size_t r = (size_t)t * H;
        switch (j->step) {
        case STEP_EMBED: embed_row(e, t); break;
        case STEP_QKV_BIAS:
            add_bias(e->q + r, L->bq, H);
            add_bias(e->k + r, L->bk, H);
            add_bias(e->v + r, L->bv, H);
            e->kq[SB_TYPE_F16].from_float(e->k + r, e->kh + r, H);
            e->kq[SB_TYPE_F16].from_float(e->v + r, e->vh + r, H);
            break;
        case STEP_ATTN_OUT:
            add_bias(e->tmp + r, L->bo, H);
            norm_of(e, L, SB_LORA_LN_ATTN, &lnw, &lnb);
            layer_norm(e->x + r, e->tmp + r, lnw, lnb, H, e->eps);
            break;
        case STEP_FFN_UP: {
            float *m = e->mid + (size_t)t * F;
            for (int i = 0; i < F; i++) {
                const float u = m[i] + L->bup[i];
                m[i] = 0.5f * u * (1.0f + erff(u * 0.70710678118654752f));    /* exact GELU, as HF's "gelu" */
            }
            break;
        }
        case STEP_FFN_OUT:
            add_bias(e->tmp + r, L->bdown, H);
            norm_of(e, L, SB_LORA_LN_FFN, &lnw, &lnb);
            layer_norm(e->x + r, e->tmp + r, lnw, lnb, H, e->eps);
            break;
        default: break;
        }
    }
}

static void run_step(sb_encoder *e, const enc_layer *L, const int32_t *ids, int n, int step) {
    step_job j = { e, L, ids, n, step };
    const int blocks = (n + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    sb_pool_run(e->pool, step_task, &j, step == STEP_ATTN ? blocks * e->NH : blocks);
}

static void matmul(sb_encoder *e, const sb_weight *w, const float *x, int n, float *y) {
    sb_mm_out o = { w, y, (size_t)w->ne1 };
    sb_mm_reset(&e->mm);                            /* x was rewritten since it was last converted */
    sb_mm_run(&e->mm, x, n, &o, 1);
}

typedef struct {
    const sb_lora_mat *m;
    int rank, n;
    float scale;
    const float *x;
    float *y;
} lora_job;

static void lora_task(void *arg, int task, int thread) {
    const lora_job *j = arg;
    const int t0 = task * ROWS_PER_TASK;
    sb_lora_apply(j->m, j->rank, j->scale, j->x + (size_t)t0 * j->m->in, SB_MIN(ROWS_PER_TASK, j->n - t0),
                  j->y + (size_t)t0 * j->m->out);
}

/* y += the adapter's term for matrix w of layer l, when it has one: after
 * the frozen product, before the bias, in F32 (a zero B adds exact zeros).
 * Rows are independent, so the pool's split does not change the bits. */
static void adapt(sb_encoder *e, int l, sb_lora_which w, const float *x, int n, float *y) {
    const sb_lora_mat *m = sb_lora_get(e->lora, l, w);
    if (!m) return;
    lora_job j = { m, e->lora->rank, n, sb_lora_scale(e->lora), x, y };
    sb_pool_run(e->pool, lora_task, &j, (n + ROWS_PER_TASK - 1) / ROWS_PER_TASK);
}

int sb_encoder_set_adapter(sb_encoder *e, const sb_lora *lora, char *err) {
    if (lora && (lora->n_layer != e->NL || lora->H != e->H || lora->FF != e->FF))
        return sb_seterr(err, SB_EINVAL, "adapter for %d layers, dim %d, ff %d; the model has %d, %d, %d",
                         lora->n_layer, lora->H, lora->FF, e->NL, e->H, e->FF);
    e->lora = lora;
    return 0;
}

int sb_encoder_adapter_load(const sb_encoder *e, const char *path, sb_lora **out, char *err) {
    return sb_lora_load(path, e->NL, e->H, e->FF, out, err);
}

int sb_encoder_adapter_new(const sb_encoder *e, int rank, float alpha, int top_n, uint64_t seed, sb_lora **out,
                           char *err) {
    return sb_lora_new(e->NL, e->H, e->FF, rank, alpha, top_n, seed, out, err);
}

int sb_encoder_n_layer(const sb_encoder *e) { return e->NL; }

int sb_encoder_adapter_add_norms(const sb_encoder *e, sb_lora *lora, char *err) {
    int rc = 0;
    for (int l = sb_lora_first_layer(lora); l < e->NL && !rc; l++) {
        const enc_layer *L = &e->layers[l];
        rc = sb_lora_set_norm(lora, l, SB_LORA_LN_ATTN, L->ln1_w, L->ln1_b, err);
        if (!rc) rc = sb_lora_set_norm(lora, l, SB_LORA_LN_FFN, L->ln2_w, L->ln2_b, err);
    }
    return rc;
}

const sb_lora *sb_encoder_adapter(const sb_encoder *e) { return e->lora; }

static bool cancelled(const atomic_int *cancel) {
    return cancel && atomic_load(cancel);
}

/* Mean of the last hidden states of ids[0..n) (n ≤ n_ctx) into sum (added).
 * SB_ECANCEL when *cancel is set: checked before each layer and twice
 * inside it (after attention, between the FFN's two products), every ~1/36
 * of a 512-token window of e5-small, so a caller who hung up frees the
 * encoder at once rather than after the whole text, also on a loaded box. */
static int forward(sb_encoder *e, const int32_t *ids, int n, double weight, double *sum, const atomic_int *cancel) {
    const size_t H = (size_t)e->H;
    read_embd_rows(e, ids, n);
    run_step(e, NULL, ids, n, STEP_EMBED);
    for (int l = 0; l < e->NL; l++) {
        if (cancelled(cancel)) return SB_ECANCEL;
        const enc_layer *L = &e->layers[l];
        const sb_mm_out qkv[3] = { { &L->wq, e->q, H }, { &L->wk, e->k, H }, { &L->wv, e->v, H } };
        sb_mm_reset(&e->mm);
        sb_mm_run(&e->mm, e->x, n, qkv, 3);
        adapt(e, l, SB_LORA_Q, e->x, n, e->q);
        adapt(e, l, SB_LORA_K, e->x, n, e->k);
        adapt(e, l, SB_LORA_V, e->x, n, e->v);
        run_step(e, L, ids, n, STEP_QKV_BIAS);
        run_step(e, L, ids, n, STEP_ATTN);
        if (cancelled(cancel)) return SB_ECANCEL;
        matmul(e, &L->wo, e->ctx, n, e->tmp);
        adapt(e, l, SB_LORA_O, e->ctx, n, e->tmp);
        run_step(e, L, ids, n, STEP_ATTN_OUT);
        matmul(e, &L->wup, e->x, n, e->mid);
        adapt(e, l, SB_LORA_UP, e->x, n, e->mid);
        run_step(e, L, ids, n, STEP_FFN_UP);
        if (cancelled(cancel)) return SB_ECANCEL;
        matmul(e, &L->wdown, e->mid, n, e->tmp);
        adapt(e, l, SB_LORA_DOWN, e->mid, n, e->tmp);
        run_step(e, L, ids, n, STEP_FFN_OUT);
    }
    for (int t = 0; t < n; t++)
        for (size_t i = 0; i < H; i++) sum[i] += weight / n * e->x[(size_t)t * H + i];
    return 0;
}

/* ---- texts ------------------------------------------------------------- */

static const char *prefix_of(sb_embed_kind kind) {
    return kind == SB_EMBED_QUERY ? "query: " : kind == SB_EMBED_PASSAGE ? "passage: " : "";
}

int sb_encoder_pieces(const sb_encoder *e, sb_embed_kind kind, const char *text, size_t len, int32_t **out,
                      size_t *n, char *err) {
    const char *pfx = prefix_of(kind);
    const size_t pl = strlen(pfx);
    char *buf = sb_malloc(pl + len + 1);
    if (!buf) return sb_seterr(err, SB_ENOMEM, "out of memory");
    memcpy(buf, pfx, pl);
    if (len) memcpy(buf + pl, text, len);
    int rc = sb_ugm_tokenize(e->tok, buf, pl + len, 0, out, n, err);
    sb_free(buf);
    return rc;
}

int sb_encoder_tokenize(const sb_encoder *e, sb_embed_kind kind, const char *text, size_t len, int32_t **out,
                        size_t *n_out, char *err) {
    int32_t *c;
    size_t n;
    *out = NULL;
    *n_out = 0;
    int rc = sb_encoder_pieces(e, kind, text, len, &c, &n, err);
    if (rc) return rc;
    int32_t *ids = sb_malloc((n + 2) * sizeof *ids);
    if (!ids) { sb_free(c); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    ids[0] = sb_ugm_bos(e->tok);
    memcpy(ids + 1, c, n * sizeof *c);
    ids[n + 1] = sb_ugm_eos(e->tok);
    sb_free(c);
    *out = ids;
    *n_out = n + 2;
    return 0;
}

int sb_encoder_embed_pieces(sb_encoder *e, const int32_t *c, size_t n, const atomic_int *cancel, float *out,
                            int *n_tokens, char *err) {
    int rc = 0;
    const size_t wmax = (size_t)e->n_ctx - 2;
    int32_t *win = sb_malloc((size_t)e->n_ctx * sizeof *win);
    double *sum = sb_calloc((size_t)e->H, sizeof *sum);
    if (!win || !sum) {
        rc = sb_seterr(err, SB_ENOMEM, "out of memory");
        goto done;
    }
    int total = 0;
    double wsum = 0;
    for (size_t a = 0; a == 0 || a < n; a += wmax) {   /* one window even for no content */
        const size_t b = SB_MIN(a + wmax, n);
        win[0] = sb_ugm_bos(e->tok);
        memcpy(win + 1, c + a, (b - a) * sizeof *c);
        win[b - a + 1] = sb_ugm_eos(e->tok);
        const double w = b > a ? (double)(b - a) : 1.0;
        if (forward(e, win, (int)(b - a + 2), w, sum, cancel)) {
            rc = sb_seterr(err, SB_ECANCEL, "cancelled after %d tokens", total);
            goto done;
        }
        wsum += w;
        total += (int)(b - a + 2);
    }
    double norm = 0;
    for (int i = 0; i < e->H; i++) norm += (sum[i] / wsum) * (sum[i] / wsum);
    norm = 1.0 / sqrt(SB_MAX(norm, 1e-12));
    for (int i = 0; i < e->H; i++) out[i] = (float)(sum[i] / wsum * norm);
    if (n_tokens) *n_tokens = total;
done:
    sb_free(win);
    sb_free(sum);
    return rc;
}

int sb_encoder_embed(sb_encoder *e, sb_embed_kind kind, const char *text, size_t len, float *out, int *n_tokens,
                     char *err) {
    int32_t *c;
    size_t n;
    int rc = sb_encoder_pieces(e, kind, text, len, &c, &n, err);
    if (rc) return rc;
    rc = sb_encoder_embed_pieces(e, c, n, NULL, out, n_tokens, err);
    sb_free(c);
    return rc;
}
