/* encoder_train.c - the training forward and backward passes of the
 * encoder with a LoRA adapter, and AdamW (see sb_encoder_train.h). The
 * ops are in train_ops.c; this file holds the layer order, which must be
 * encoder.c's forward, and the buffers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/encoder_impl.h"
#include "worker/engine/sb_encoder_train.h"

/* What a layer's backward needs from its forward, for one text. */
typedef struct {
    float *x0, *q, *k, *v, *P, *c, *xh1, *r1, *x1, *u, *g, *xh2, *r2;
    float *ax[SB_LORA_N_MATS];          /* scale·x·Aᵀ of each adapted matrix */
} tr_cache;

typedef struct { float *ga, *gb, *ma, *va, *mb, *vb; } tr_state;   /* gradients, AdamW moments */
typedef struct { float *g, *m, *v; } tr_norm_state;     /* [2H] each: the weight's, then the bias's */

struct sb_enc_trainer {
    const sb_encoder *e;
    sb_lora *lora;
    int      max_n, first, rank;
    float    scale;
    float  **W;                         /* [NL][6]: the frozen matrices in F32, [out][in] */
    float  **Wt;                        /* [NL][6]: fast mode, adapted layers: W transposed, [in][out] */
    int      fast;
    tr_cache *cache;                    /* [NL - first + 1]: the last slot serves the frozen layers */
    tr_state *st;                       /* [NL][6] (used where the adapter has the matrix) */
    tr_norm_state *nst;                 /* [NL][2] (used where the adapter has the norm) */
    float   *h, *tmp, *dh, *dt, *dx1, *dc, *dq, *dk, *dv, *dg;
    float   *vec;
    float    norm;
    int      step;
    float   *arena;
    size_t   used;
};

/* Carves n floats from the arena; a planning pass (arena NULL) only counts. */
static float *take(sb_enc_trainer *t, size_t n) {
    float *p = t->arena ? t->arena + t->used : NULL;
    t->used += (n + 15) & ~(size_t)15;
    return p;
}

static void mat_dims(const sb_encoder *e, int w, int *in, int *out) {
    *in = w == SB_LORA_DOWN ? e->FF : e->H;
    *out = w == SB_LORA_UP ? e->FF : e->H;
}

static void plan(sb_enc_trainer *t) {
    const sb_encoder *e = t->e;
    const size_t n = (size_t)t->max_n, H = (size_t)e->H, F = (size_t)e->FF;
    t->used = 0;
    for (int l = 0; l < e->NL; l++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            int in, out;
            mat_dims(e, w, &in, &out);
            t->W[l * SB_LORA_N_MATS + w] = take(t, (size_t)in * (size_t)out);
            if (!sb_lora_get(t->lora, l, (sb_lora_which)w)) continue;
            tr_state *s = &t->st[l * SB_LORA_N_MATS + w];
            const size_t na = (size_t)t->rank * (size_t)in, nb = (size_t)t->rank * (size_t)out;
            s->ga = take(t, na), s->ma = take(t, na), s->va = take(t, na);
            s->gb = take(t, nb), s->mb = take(t, nb), s->vb = take(t, nb);
        }
    for (int l = t->first; l < e->NL; l++)
        for (int k = 0; k < SB_LORA_N_NORMS; k++)
            if (sb_lora_norm_get(t->lora, l, (sb_lora_norm_which)k)) {
                tr_norm_state *s = &t->nst[l * SB_LORA_N_NORMS + k];
                s->g = take(t, 2 * H), s->m = take(t, 2 * H), s->v = take(t, 2 * H);
            }
    for (int i = 0; i <= e->NL - t->first; i++) {
        tr_cache *c = &t->cache[i];
        float **nh[] = { &c->x0, &c->q, &c->k, &c->v, &c->c, &c->xh1, &c->x1, &c->xh2 };
        for (size_t j = 0; j < SB_ARRAY_LEN(nh); j++) *nh[j] = take(t, n * H);
        c->P = take(t, (size_t)e->NH * n * n);
        c->r1 = take(t, n), c->r2 = take(t, n);
        c->u = take(t, n * F), c->g = take(t, n * F);
        for (int w = 0; w < SB_LORA_N_MATS; w++) c->ax[w] = take(t, n * (size_t)t->rank);
    }
    float **nh[] = { &t->h, &t->tmp, &t->dh, &t->dt, &t->dx1, &t->dc, &t->dq, &t->dk, &t->dv };
    for (size_t j = 0; j < SB_ARRAY_LEN(nh); j++) *nh[j] = take(t, n * H);
    t->dg = take(t, n * F);
    t->vec = take(t, H);
}

static void dequantize(sb_enc_trainer *t) {
    const sb_encoder *e = t->e;
    for (int l = 0; l < e->NL; l++) {
        const enc_layer *L = &e->layers[l];
        const sb_weight *ws[SB_LORA_N_MATS] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->wup, &L->wdown };
        for (int w = 0; w < SB_LORA_N_MATS; w++)
            for (int64_t r = 0; r < ws[w]->ne1; r++)
                e->kq[ws[w]->type].to_float((const uint8_t *)ws[w]->data + (size_t)r * ws[w]->row_bytes,
                                            t->W[l * SB_LORA_N_MATS + w] + r * ws[w]->ne0, ws[w]->ne0);
    }
}

void sb_enc_trainer_free(sb_enc_trainer *t) {
    if (!t) return;
    for (int i = 0; t->Wt && i < t->e->NL * SB_LORA_N_MATS; i++) sb_aligned_free(t->Wt[i]);
    sb_free(t->Wt);
    sb_free(t->W);
    sb_free(t->cache);
    sb_free(t->st);
    sb_free(t->nst);
    sb_aligned_free(t->arena);
    sb_free(t);
}

int sb_enc_trainer_new(const sb_encoder *e, sb_lora *lora, int max_tokens, sb_enc_trainer **out, char *err) {
    *out = NULL;
    if (lora->n_layer != e->NL || lora->H != e->H || lora->FF != e->FF)
        return sb_seterr(err, SB_EINVAL, "adapter for %d layers, dim %d, ff %d; the model has %d, %d, %d",
                         lora->n_layer, lora->H, lora->FF, e->NL, e->H, e->FF);
    if (max_tokens < 3 || max_tokens > e->n_ctx)
        return sb_seterr(err, SB_EINVAL, "max tokens %d outside 3..%d", max_tokens, e->n_ctx);
    for (int l = 0; l < e->NL; l++) {
        const enc_layer *L = &e->layers[l];
        const sb_weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->wup, &L->wdown };
        for (size_t w = 0; w < SB_ARRAY_LEN(ws); w++)
            if (!e->kq[ws[w]->type].to_float || ws[w]->x8_buf)
                return sb_seterr(err, SB_EUNSUP, "layer %d: a weight type the trainer cannot dequantize", l);
    }
    sb_enc_trainer *t = sb_calloc(1, sizeof *t);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    t->e = e, t->lora = lora, t->max_n = max_tokens, t->rank = lora->rank, t->scale = sb_lora_scale(lora);
    t->first = sb_lora_first_layer(lora);
    t->W = sb_calloc((size_t)e->NL * SB_LORA_N_MATS, sizeof *t->W);
    t->st = sb_calloc((size_t)e->NL * SB_LORA_N_MATS, sizeof *t->st);
    t->nst = sb_calloc((size_t)e->NL * SB_LORA_N_NORMS, sizeof *t->nst);
    t->cache = sb_calloc((size_t)(e->NL - t->first + 1), sizeof *t->cache);
    if (t->W && t->st && t->nst && t->cache) {
        plan(t);
        const size_t bytes = t->used * sizeof(float);
        if ((t->arena = sb_aligned_alloc(bytes))) {
            memset(t->arena, 0, bytes);
            plan(t);
        }
    }
    if (!t->arena) {
        sb_enc_trainer_free(t);
        return sb_seterr(err, SB_ENOMEM, "out of memory for the trainer's buffers");
    }
    dequantize(t);
    *out = t;
    return 0;
}

int sb_enc_trainer_set_fast(sb_enc_trainer *t, int on, char *err) {
    const sb_encoder *e = t->e;
    if (on && !t->Wt) {
        if (!(t->Wt = sb_calloc((size_t)e->NL * SB_LORA_N_MATS, sizeof *t->Wt)))
            return sb_seterr(err, SB_ENOMEM, "out of memory");
        for (int l = t->first; l < e->NL; l++)
            for (int w = 0; w < SB_LORA_N_MATS; w++) {
                int in, out;
                mat_dims(e, w, &in, &out);
                float *wt = sb_aligned_alloc((size_t)in * (size_t)out * sizeof *wt);
                if (!(t->Wt[l * SB_LORA_N_MATS + w] = wt)) return sb_seterr(err, SB_ENOMEM, "out of memory");
                const float *W = t->W[l * SB_LORA_N_MATS + w];
                for (int o = 0; o < out; o++)
                    for (int i = 0; i < in; i++) wt[(size_t)i * out + o] = W[(size_t)o * in + i];
            }
    }
    t->fast = on;
    return 0;
}

/* ---- forward ----------------------------------------------------------- */

static void embed(sb_enc_trainer *t, const int32_t *ids, int n) {
    const sb_encoder *e = t->e;
    const int H = e->H;
    for (int s = 0; s < n; s++) {
        float *x = t->tmp + (size_t)s * H;
        e->kq[e->tok_embd.type].to_float((const uint8_t *)e->tok_embd.data + (size_t)ids[s] * e->tok_embd.row_bytes, x,
                                         H);
        for (int i = 0; i < H; i++) x[i] += e->pos[(size_t)s * H + i] + e->type0[i];
    }
    sb_op_ln_forward(t->tmp, e->eln_w, e->eln_b, n, H, e->eps, t->h, t->dt, t->dh);   /* dt, dh: unused stats */
}

static const float *W_of(const sb_enc_trainer *t, int l, int w) { return t->W[l * SB_LORA_N_MATS + w]; }

#define TRAIN_ROWS 8            /* token rows per pool task: each W row is read once per task */

/* A product over token rows on the encoder's pool: each row is one task's
 * whole sum, so the bits do not depend on the thread count. */
typedef struct {
    const sb_enc_trainer *t;
    int l, w, n, in, out, backward;
    const float *x, *bias, *dy;
    float *ax, *y, *dx;
} lin_job;

static void lin_task(void *arg, int task, int thread) {
    const lin_job *j = arg;
    const sb_enc_trainer *t = j->t;
    const int t0 = task * TRAIN_ROWS, rows = SB_MIN(TRAIN_ROWS, j->n - t0);
    const sb_lora_mat *m = sb_lora_get(t->lora, j->l, (sb_lora_which)j->w);
    const float *x = j->x + (size_t)t0 * j->in, *ax = j->ax + (size_t)t0 * t->rank;
    const float *W = W_of(t, j->l, j->w);
    if (t->fast) {          /* the frozen product by the kernel; the op adds the rest */
        const sb_vec_dot_fn dot = t->e->kq[SB_TYPE_F32].vec_dot;
        const int back = j->backward, k = back ? j->out : j->in, m_out = back ? j->in : j->out;
        const float *M = back ? t->Wt[j->l * SB_LORA_N_MATS + j->w] : W;
        const float *src = back ? j->dy + (size_t)t0 * j->out : x;
        float *dst = back ? j->dx + (size_t)t0 * j->in : j->y + (size_t)t0 * j->out;
        for (int o = 0; o < m_out; o++)             /* a matrix row stays in cache for the task's rows */
            for (int r = 0; r < rows; r++) dot(k, &dst[(size_t)r * m_out + o], M + (size_t)o * k, src + (size_t)r * k);
        W = NULL;
    }
    if (j->backward)
        sb_op_linear_backward(j->dy + (size_t)t0 * j->out, x, rows, j->in, j->out, W, m, t->rank,
                              t->scale, ax, j->dx + (size_t)t0 * j->in, NULL, NULL);
    else
        sb_op_linear_forward(x, rows, j->in, j->out, W, j->bias, m, t->rank, t->scale,
                             j->ax + (size_t)t0 * t->rank, j->y + (size_t)t0 * j->out);
}

static void run_rows(const sb_enc_trainer *t, lin_job *j) {
    mat_dims(t->e, j->w, &j->in, &j->out);
    sb_pool_run(t->e->pool, lin_task, j, (j->n + TRAIN_ROWS - 1) / TRAIN_ROWS);
}

static void linear(sb_enc_trainer *t, int l, int w, const float *x, int n, const float *bias, float *ax, float *y) {
    lin_job j = { .t = t, .l = l, .w = w, .n = n, .x = x, .bias = bias, .ax = ax, .y = y };
    run_rows(t, &j);
}

/* Layer l's norm k, the adapter's if it has one (as sb_encoder's forward);
 * gw/gb: where its gradients go, NULL if it is the base's (frozen). */
typedef struct { const float *w, *b; float *gw, *gb; } tr_norm;

static tr_norm norm_of(const sb_enc_trainer *t, int l, sb_lora_norm_which k) {
    const enc_layer *L = &t->e->layers[l];
    const sb_lora_norm *nm = sb_lora_norm_get(t->lora, l, k);
    if (!nm) return k == SB_LORA_LN_ATTN ? (tr_norm){ L->ln1_w, L->ln1_b, NULL, NULL }
                                         : (tr_norm){ L->ln2_w, L->ln2_b, NULL, NULL };
    float *g = t->nst[l * SB_LORA_N_NORMS + k].g;
    return (tr_norm){ nm->w, nm->b, g, g ? g + t->e->H : NULL };
}

/* Layer l on c->x0 (which the caller filled), its output into t->h. */
static void layer_forward(sb_enc_trainer *t, int l, tr_cache *c, int n) {
    const sb_encoder *e = t->e;
    const enc_layer *L = &e->layers[l];
    const int H = e->H;
    linear(t, l, SB_LORA_Q, c->x0, n, L->bq, c->ax[SB_LORA_Q], c->q);
    linear(t, l, SB_LORA_K, c->x0, n, L->bk, c->ax[SB_LORA_K], c->k);
    linear(t, l, SB_LORA_V, c->x0, n, L->bv, c->ax[SB_LORA_V], c->v);
    sb_op_attn_forward(c->q, c->k, c->v, n, H, e->NH, c->P, c->c);
    linear(t, l, SB_LORA_O, c->c, n, L->bo, c->ax[SB_LORA_O], t->tmp);
    for (size_t i = 0; i < (size_t)n * H; i++) t->tmp[i] = c->x0[i] + t->tmp[i];
    const tr_norm n1 = norm_of(t, l, SB_LORA_LN_ATTN), n2 = norm_of(t, l, SB_LORA_LN_FFN);
    sb_op_ln_forward(t->tmp, n1.w, n1.b, n, H, e->eps, c->x1, c->xh1, c->r1);
    linear(t, l, SB_LORA_UP, c->x1, n, L->bup, c->ax[SB_LORA_UP], c->u);
    for (size_t i = 0; i < (size_t)n * e->FF; i++) c->g[i] = sb_op_gelu(c->u[i]);
    linear(t, l, SB_LORA_DOWN, c->g, n, L->bdown, c->ax[SB_LORA_DOWN], t->tmp);
    for (size_t i = 0; i < (size_t)n * H; i++) t->tmp[i] = c->x1[i] + t->tmp[i];
    sb_op_ln_forward(t->tmp, n2.w, n2.b, n, H, e->eps, t->h, c->xh2, c->r2);
}

static int check_ids(const sb_enc_trainer *t, const int32_t *ids, int n, char *err) {
    if (n < 1 || n > t->max_n) return sb_seterr(err, SB_EINVAL, "%d tokens: the trainer takes 1..%d", n, t->max_n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->e->n_vocab)
            return sb_seterr(err, SB_EINVAL, "token %d at position %d is outside the vocabulary", ids[i], i);
    return 0;
}

/* t->h = the hidden states entering the lowest adapted layer. */
static int prefix(sb_enc_trainer *t, const int32_t *ids, int n, char *err) {
    int rc = check_ids(t, ids, n, err);
    if (rc) return rc;
    const sb_encoder *e = t->e;
    embed(t, ids, n);
    tr_cache *c = &t->cache[e->NL - t->first];          /* the frozen layers' slot */
    for (int l = 0; l < t->first; l++) {
        memcpy(c->x0, t->h, (size_t)n * e->H * sizeof *c->x0);
        layer_forward(t, l, c, n);
    }
    return 0;
}

/* The adapted layers from t->h, then the pooled vector. */
static void forward_top(sb_enc_trainer *t, int n, float *vec) {
    const sb_encoder *e = t->e;
    for (int l = t->first; l < e->NL; l++) {
        tr_cache *c = &t->cache[l - t->first];
        memcpy(c->x0, t->h, (size_t)n * e->H * sizeof *c->x0);
        layer_forward(t, l, c, n);
    }
    t->norm = sb_op_pool_forward(t->h, n, e->H, t->vec);
    if (vec) memcpy(vec, t->vec, (size_t)e->H * sizeof *vec);
}

/* A text as token ids (ids) or as its prefix states (h0, n rows). */
typedef struct { const int32_t *ids; const float *h0; int n; } tr_input;

static int forward(sb_enc_trainer *t, tr_input in, float *vec, char *err) {
    if (in.ids) {
        int rc = prefix(t, in.ids, in.n, err);
        if (rc) return rc;
    } else {
        if (in.n < 1 || in.n > t->max_n)
            return sb_seterr(err, SB_EINVAL, "%d tokens: the trainer takes 1..%d", in.n, t->max_n);
        memcpy(t->h, in.h0, (size_t)in.n * t->e->H * sizeof *t->h);
    }
    forward_top(t, in.n, vec);
    return 0;
}

int sb_enc_train_embed(sb_enc_trainer *t, const int32_t *ids, int n, float *vec, char *err) {
    return forward(t, (tr_input){ ids, NULL, n }, vec, err);
}

int sb_enc_train_prefix(sb_enc_trainer *t, const int32_t *ids, int n, float *h0, char *err) {
    int rc = prefix(t, ids, n, err);
    if (!rc) memcpy(h0, t->h, (size_t)n * t->e->H * sizeof *h0);
    return rc;
}

int sb_enc_train_embed_from(sb_enc_trainer *t, const float *h0, int n, float *vec, char *err) {
    return forward(t, (tr_input){ NULL, h0, n }, vec, err);
}

/* ---- backward ---------------------------------------------------------- */

/* dx row by row on the pool; the adapter's gradients, sums over all rows,
 * on this thread in row order. */
static void linear_back(sb_enc_trainer *t, int l, int w, const float *dy, const float *x, int n, float *ax,
                        float *dx) {
    lin_job j = { .t = t, .l = l, .w = w, .n = n, .backward = 1, .x = x, .dy = dy, .ax = ax, .dx = dx };
    if (dx) run_rows(t, &j);
    const sb_lora_mat *m = sb_lora_get(t->lora, l, (sb_lora_which)w);
    const tr_state *s = &t->st[l * SB_LORA_N_MATS + w];
    mat_dims(t->e, w, &j.in, &j.out);
    if (m) sb_op_linear_backward(dy, x, n, j.in, j.out, W_of(t, l, w), m, t->rank, t->scale, ax, NULL, s->ga, s->gb);
}

static void add_into(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* t->dh = d/d(output of layer l) in, d/d(its input) out (unless last). */
static void layer_backward(sb_enc_trainer *t, int l, const tr_cache *c, int n, int last) {
    const sb_encoder *e = t->e;
    const int H = e->H;
    const size_t nh = (size_t)n * H;
    const tr_norm n1 = norm_of(t, l, SB_LORA_LN_ATTN), n2 = norm_of(t, l, SB_LORA_LN_FFN);
    sb_op_ln_backward(t->dh, c->xh2, c->r2, n2.w, n, H, t->dt, n2.gw, n2.gb);     /* dt = d(x1 + ffn) */
    linear_back(t, l, SB_LORA_DOWN, t->dt, c->g, n, c->ax[SB_LORA_DOWN], t->dg);
    for (size_t i = 0; i < (size_t)n * e->FF; i++) t->dg[i] *= sb_op_gelu_grad(c->u[i]);
    linear_back(t, l, SB_LORA_UP, t->dg, c->x1, n, c->ax[SB_LORA_UP], t->dx1);
    add_into(t->dx1, t->dt, nh);
    sb_op_ln_backward(t->dx1, c->xh1, c->r1, n1.w, n, H, t->dt, n1.gw, n1.gb);    /* dt = d(x0 + attn) */
    linear_back(t, l, SB_LORA_O, t->dt, c->c, n, c->ax[SB_LORA_O], t->dc);
    sb_op_attn_backward(t->dc, c->q, c->k, c->v, c->P, n, H, e->NH, t->dq, t->dk, t->dv);
    const int ws[3] = { SB_LORA_Q, SB_LORA_K, SB_LORA_V };
    float *dys[3] = { t->dq, t->dk, t->dv };
    if (!last) memcpy(t->dh, t->dt, nh * sizeof *t->dh);
    for (int i = 0; i < 3; i++) {
        linear_back(t, l, ws[i], dys[i], c->x0, n, c->ax[ws[i]], last ? NULL : t->tmp);
        if (!last) add_into(t->dh, t->tmp, nh);
    }
}

static int backward(sb_enc_trainer *t, tr_input in, const float *dvec, char *err) {
    int rc = forward(t, in, NULL, err);
    if (rc) return rc;
    const sb_encoder *e = t->e;
    sb_op_pool_backward(dvec, t->vec, t->norm, in.n, e->H, t->dh);
    for (int l = e->NL - 1; l >= t->first; l--) layer_backward(t, l, &t->cache[l - t->first], in.n, l == t->first);
    return 0;
}

int sb_enc_train_backward(sb_enc_trainer *t, const int32_t *ids, int n, const float *dvec, char *err) {
    return backward(t, (tr_input){ ids, NULL, n }, dvec, err);
}

int sb_enc_train_backward_from(sb_enc_trainer *t, const float *h0, int n, const float *dvec, char *err) {
    return backward(t, (tr_input){ NULL, h0, n }, dvec, err);
}

void sb_enc_train_zero_grad(sb_enc_trainer *t) {
    for (int l = t->first; l < t->e->NL; l++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            const sb_lora_mat *m = sb_lora_get(t->lora, l, (sb_lora_which)w);
            if (!m) continue;
            tr_state *s = &t->st[l * SB_LORA_N_MATS + w];
            memset(s->ga, 0, (size_t)t->rank * (size_t)m->in * sizeof(float));
            memset(s->gb, 0, (size_t)t->rank * (size_t)m->out * sizeof(float));
        }
    for (int i = 0; i < t->e->NL * SB_LORA_N_NORMS; i++)
        if (t->nst[i].g) memset(t->nst[i].g, 0, 2 * (size_t)t->e->H * sizeof(float));
}

void sb_enc_train_grad(sb_enc_trainer *t, int layer, sb_lora_which w, float **ga, float **gb) {
    const int ok = layer >= 0 && layer < t->e->NL && sb_lora_get(t->lora, layer, w);
    *ga = ok ? t->st[layer * SB_LORA_N_MATS + w].ga : NULL;
    *gb = ok ? t->st[layer * SB_LORA_N_MATS + w].gb : NULL;
}

void sb_enc_train_norm_grad(sb_enc_trainer *t, int layer, sb_lora_norm_which k, float **gw, float **gb) {
    float *g = layer >= t->first && layer < t->e->NL ? t->nst[layer * SB_LORA_N_NORMS + k].g : NULL;
    *gw = g;
    *gb = g ? g + t->e->H : NULL;
}

/* The batch's texts, then n_fixed constant vectors (fixed[i] with
 * fixed_labels[i]) that take part in the loss but get no gradient. */
static int step(sb_enc_trainer *t, const int32_t *const *ids, const float *const *h0, const int *n,
                const int *labels, int batch, const float *fixed, const int *fixed_labels, int n_fixed, float tau,
                const sb_adamw_params *p, double *loss, char *err) {
    if (batch < 1 || batch + n_fixed < 2 || !(tau > 0))
        return sb_seterr(err, SB_EINVAL, "a step needs 2 or more texts and a temperature > 0");
    const size_t H = (size_t)t->e->H, all = (size_t)batch + (size_t)n_fixed;
    float *V = sb_malloc(all * H * sizeof *V), *dV = sb_malloc(all * H * sizeof *dV);
    int *lab = sb_malloc(all * sizeof *lab);
    int rc = V && dV && lab ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int i = 0; i < batch && !rc; i++) {
        char why[160] = "";
        const tr_input in = { ids ? ids[i] : NULL, ids ? NULL : h0[i], n[i] };
        rc = forward(t, in, V + i * H, why);
        if (rc) sb_seterr(err, rc, "text %d of the batch: %s", i, why);
        else lab[i] = labels[i];
    }
    if (!rc && n_fixed) {
        memcpy(V + (size_t)batch * H, fixed, (size_t)n_fixed * H * sizeof *V);
        memcpy(lab + batch, fixed_labels, (size_t)n_fixed * sizeof *lab);
    }
    if (!rc) {
        const double l = sb_op_supcon(V, lab, (int)all, (int)H, tau, dV);
        if (loss) *loss = l;
        sb_enc_train_zero_grad(t);
        for (int i = 0; i < batch && !rc; i++)
            rc = backward(t, (tr_input){ ids ? ids[i] : NULL, ids ? NULL : h0[i], n[i] }, dV + i * H, err);
    }
    if (!rc) sb_adamw_step(t, p);
    sb_free(V);
    sb_free(dV);
    sb_free(lab);
    return rc;
}

int sb_enc_train_step(sb_enc_trainer *t, const int32_t *const *ids, const int *n, const int *labels, int batch,
                      float tau, const sb_adamw_params *p, double *loss, char *err) {
    return step(t, ids, NULL, n, labels, batch, NULL, NULL, 0, tau, p, loss, err);
}

int sb_enc_train_step_from(sb_enc_trainer *t, const float *const *h0, const int *n, const int *labels, int batch,
                           float tau, const sb_adamw_params *p, double *loss, char *err) {
    return step(t, NULL, h0, n, labels, batch, NULL, NULL, 0, tau, p, loss, err);
}

int sb_enc_train_step_fixed(sb_enc_trainer *t, const float *const *h0, const int *n, const int *labels, int batch,
                            const float *fixed, const int *fixed_labels, int n_fixed, float tau,
                            const sb_adamw_params *p, double *loss, char *err) {
    return step(t, NULL, h0, n, labels, batch, fixed, fixed_labels, n_fixed, tau, p, loss, err);
}

/* ---- the training loop ------------------------------------------------- */

/* splitmix64: the batch order's stream, fixed for a seed on every platform. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(size_t *order, size_t n, uint64_t *rng) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(next_u64(rng) % i), tmp = order[i - 1];
        order[i - 1] = order[j], order[j] = tmp;
    }
}

static void fmt_secs(double s, char *buf, size_t cap) {
    if (s < 60) snprintf(buf, cap, "%.0fs", s);
    else snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

int sb_enc_train_fit(sb_enc_trainer *t, const sb_enc_text *texts, size_t m, const sb_enc_fit_opts *o, char *err) {
    const size_t B = SB_MIN((size_t)o->batch, m);
    size_t *pick = sb_malloc((m ? m : 1) * sizeof *pick);
    const float **h0 = sb_malloc((B ? B : 1) * sizeof *h0);
    int *n = sb_malloc((B ? B : 1) * sizeof *n), *lab = sb_malloc((B ? B : 1) * sizeof *lab);
    int rc = pick && h0 && n && lab ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!rc && (m < 1 || m + (size_t)o->n_fixed < 2))
        rc = sb_seterr(err, SB_EINVAL, "training needs 2 or more texts");
    const sb_adamw_params p = { .lr = (float)o->lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                .weight_decay = (float)o->weight_decay,
                                .warmup_steps = o->warmup >= 0 ? o->warmup : o->steps / 10,
                                .total_steps = o->steps };
    uint64_t rng = o->seed ^ 0x5EEDBA7C4E5ull;
    size_t pos = m;
    const size_t min_b = o->n_fixed ? 1 : 2;        /* a step's loss needs two vectors */
    const double t0 = sb_now_s();
    for (int st = 1; st <= o->steps && !rc; st++) {
        if (pos + min_b > m) {
            for (size_t i = 0; i < m; i++) pick[i] = i;
            shuffle(pick, m, &rng);
            pos = 0;
        }
        const size_t b = SB_MIN(B, m - pos);
        for (size_t i = 0; i < b; i++) {
            const sb_enc_text *x = &texts[pick[pos + i]];
            h0[i] = x->h0, n[i] = x->n, lab[i] = x->label;
        }
        pos += b;
        double loss = 0;
        const float lr = sb_adamw_lr(&p, st);
        rc = step(t, NULL, h0, n, lab, (int)b, o->fixed, o->fixed_labels, o->n_fixed, (float)o->tau, &p, &loss, err);
        if (o->progress && !rc) {
            const double el = sb_now_s() - t0;
            char es[32], eta[32];
            fmt_secs(el, es, sizeof es);
            fmt_secs(el / st * (o->steps - st), eta, sizeof eta);
            fprintf(o->progress, "%sstep %d/%d  loss %.4f  lr %.2e  %s  ETA %s\n", o->prefix ? o->prefix : "", st,
                    o->steps, loss, (double)lr, es, eta);
        }
    }
    sb_free(pick), sb_free(h0), sb_free(n), sb_free(lab);
    return rc;
}

/* ---- AdamW ------------------------------------------------------------- */

float sb_adamw_lr(const sb_adamw_params *p, int step) {
    if (p->warmup_steps > 0 && step <= p->warmup_steps) return p->lr * (float)step / (float)p->warmup_steps;
    if (p->total_steps <= p->warmup_steps) return p->lr;
    const double f = (double)(step - p->warmup_steps) / (double)(p->total_steps - p->warmup_steps);
    return (float)(p->lr * 0.5 * (1.0 + cos(M_PI * (f < 1 ? f : 1))));
}

static void adamw(float *w, const float *g, float *m, float *v, size_t n, const sb_adamw_params *p, float lr,
                  double c1, double c2) {
    for (size_t i = 0; i < n; i++) {
        m[i] = p->beta1 * m[i] + (1 - p->beta1) * g[i];
        v[i] = p->beta2 * v[i] + (1 - p->beta2) * g[i] * g[i];
        const double mh = m[i] / c1, vh = v[i] / c2;
        w[i] -= lr * (float)(mh / (sqrt(vh) + p->eps) + p->weight_decay * w[i]);
    }
}

void sb_adamw_step(sb_enc_trainer *t, const sb_adamw_params *p) {
    t->step++;
    const float lr = sb_adamw_lr(p, t->step);
    const double c1 = 1 - pow(p->beta1, t->step), c2 = 1 - pow(p->beta2, t->step);
    for (int l = t->first; l < t->e->NL; l++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            sb_lora_mat *m = sb_lora_get(t->lora, l, (sb_lora_which)w);
            if (!m) continue;
            tr_state *s = &t->st[l * SB_LORA_N_MATS + w];
            adamw(m->a, s->ga, s->ma, s->va, (size_t)t->rank * (size_t)m->in, p, lr, c1, c2);
            adamw(m->b, s->gb, s->mb, s->vb, (size_t)t->rank * (size_t)m->out, p, lr, c1, c2);
        }
    /* No weight decay on the norms: decoupled decay pulls a weight toward 0,
     * and a LayerNorm's gain belongs near the base's (about 1), not near 0
     * (BERT's own fine-tuning exempts LayerNorm and biases from decay). */
    sb_adamw_params nd = *p;
    nd.weight_decay = 0;
    for (int l = t->first; l < t->e->NL; l++)
        for (int k = 0; k < SB_LORA_N_NORMS; k++) {
            sb_lora_norm *nm = sb_lora_norm_get(t->lora, l, (sb_lora_norm_which)k);
            const tr_norm_state *s = &t->nst[l * SB_LORA_N_NORMS + k];
            if (nm && s->g) adamw(nm->w, s->g, s->m, s->v, 2 * (size_t)t->e->H, &nd, lr, c1, c2);
        }
}
