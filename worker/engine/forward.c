/* forward.c - inference contexts and the transformer forward pass.
 *
 * One pass over a batch of tokens, layer by layer:
 *   x = embed(tokens)
 *   per layer:  xb = rmsnorm(x)·w;  q,k,v = W·xb (+bias);  rope(q,k)
 *               append k,v to the KV cache;  att = softmax(q·Kᵀ/√d)·V
 *               x += Wo·att;  xb = rmsnorm(x)·w;  x += Wdown·(silu(Wg·xb) ⊙ Wu·xb)
 *   logits = Wout·rmsnorm(x)·w
 * Matrix products go through the kernel traits table: the activations are
 * converted once per input to the weight type's vec_dot_type (Q8_K, Q8_0,
 * F16…) and every weight row is dotted with every token's row, blocks of
 * rows at a time so that a block stays in cache while all tokens pass by.
 *
 * A pass may hold parts of several sequences (sb_ctx_eval_parts): each
 * token carries its sequence and position, K/V go to that sequence's
 * blocks of the pool (kv.c), and every part gets the numbers it gets alone
 * (docs/BATCHING.md).
 */
#include <math.h>
#include <string.h>

#include "worker/engine/kv_impl.h"
#include "worker/engine/matmul_impl.h"
#include "common/sb_common.h"

#define DEFAULT_BATCH 512
/* Query heads per attention task: heads that share a KV head go together so
 * that each K/V element is widened once for all of them, up to the 4 the
 * kernels hold in registers at once. A bigger group (8 per KV head, say) is
 * split: more tasks for the pool when there are few tokens (decode) and few
 * KV heads, for one more pass over K and V from cache. */
#define ATTN_HEADS 4

struct sb_ctx {
    const sb_model     *m;
    const sb_kq_traits *kq;
    const sb_kq_vec    *vec;        /* attention and SwiGLU kernels, same level as kq */
    sb_pool            *pool;
    int n_ctx, n_batch, kv_type;
    sb_kv kv;                   /* the KV pool and the sequences' block tables */
    /* scratch, n_batch rows each */
    float *x, *xb, *q, *k, *v, *att, *qkv, *ffa, *ffb;
    sb_mm mm;                   /* matmuls and their converted inputs */
    /* the tokens of the pass: sequence, position, and whether its attention
     * window lies in consecutive blocks */
    int *tok_seq, *tok_pos;
    uint8_t *tok_contig;
    sb_seq_part *ord;           /* [n_seq]: the parts of a pass in matmul order */
    float *lbuf;                /* [n_seq][n_vocab]: last-token logits of a multi-part pass */
    /* per-thread attention scratch, for up to ATTN_HEADS heads */
    float *scores;              /* [n_threads][ATTN_HEADS][n_ctx] */
    uint8_t *qconv;             /* [n_threads][ATTN_HEADS][head_dim] in the KV type */
    float *vtmp;                /* [n_threads][ATTN_HEADS][head_dim] */
    sb_fp16 *kgat, *vgat;       /* [n_threads][n_ctx][head_dim]: a fragmented window's K and V, gathered (F16 cache) */
    float *rope_cs;             /* [n_batch][n_rot] cos,sin pairs */
    uint8_t *embd_buf;          /* one token embedding row, read from the file */
    sb_prof *prof;              /* per-op profile, or NULL */
};

#define MARK(c, op) sb_prof_mark((c)->prof, SB_OP_##op)

const char *sb_op_name(int op) {
    static const char *const names[SB_OP_COUNT] = {
        "embed + rope cache", "attn_norm", "act quantize", "qkv matmul", "qkv post (bias, rope)", "kv store",
        "attention", "wo matmul", "residual add", "ffn_norm", "gate/up matmul", "swiglu", "down matmul",
        "output norm", "output matmul", "sampling", "pool barrier wait",
    };
    return op >= 0 && op < SB_OP_COUNT ? names[op] : "?";
}

void sb_ctx_set_profile(sb_ctx *c, sb_prof *p) {
    c->prof = p;
    c->mm.prof = p;
    sb_pool_set_wait_counter(c->pool, p ? &p->wait : NULL);
}

int sb_ctx_n_ctx(const sb_ctx *c) { return c->n_ctx; }
sb_pool *sb_ctx_pool(sb_ctx *c) { return c->pool; }
int sb_ctx_n_past(const sb_ctx *c) { return c->kv.n_past[0]; }
void sb_ctx_truncate(sb_ctx *c, int n) { sb_kv_truncate(&c->kv, 0, n); }

int  sb_ctx_seq_new(sb_ctx *c, int *seq, char *err) { return sb_kv_seq_new(&c->kv, seq, err); }
void sb_ctx_seq_free(sb_ctx *c, int seq) { sb_kv_seq_free(&c->kv, seq); }
void sb_ctx_seq_expect(sb_ctx *c, int seq, int positions) { sb_kv_seq_expect(&c->kv, seq, positions); }
int  sb_ctx_seq_n_past(const sb_ctx *c, int seq) { return sb_kv_in_use(&c->kv, seq) ? c->kv.n_past[seq] : -1; }
void sb_ctx_seq_truncate(sb_ctx *c, int seq, int n) { sb_kv_truncate(&c->kv, seq, n); }
int  sb_ctx_seq_fork(sb_ctx *c, int dst, int src, int n, char *err) { return sb_kv_fork(&c->kv, dst, src, n, err); }
int  sb_ctx_kv_blocks_total(const sb_ctx *c) { return c->kv.n_blocks; }
int  sb_ctx_kv_blocks_free(const sb_ctx *c) { return c->kv.n_free; }
int  sb_ctx_kv_blocks_needed(const sb_ctx *c, int seq, int n_new) { return sb_kv_needed(&c->kv, seq, n_new); }

void sb_ctx_free(sb_ctx *c) {
    if (!c) return;
    sb_pool_free(c->pool);
    sb_kv_free(&c->kv);
    float *bufs[] = { c->x, c->xb, c->q, c->k, c->v, c->att, c->qkv, c->ffa, c->ffb, c->scores, c->vtmp, c->rope_cs,
                      c->lbuf };
    for (size_t i = 0; i < SB_ARRAY_LEN(bufs); i++) sb_aligned_free(bufs[i]);
    sb_aligned_free(c->qconv);
    sb_aligned_free(c->kgat);
    sb_aligned_free(c->vgat);
    sb_aligned_free(c->embd_buf);
    sb_free(c->tok_seq);
    sb_free(c->tok_pos);
    sb_free(c->tok_contig);
    sb_free(c->ord);
    sb_mm_free(&c->mm);
    sb_free(c);
}

static int alloc_floats(float **p, size_t n) {
    *p = sb_aligned_alloc(n * sizeof(float));
    return *p ? 0 : -1;
}

int sb_ctx_new(const sb_model *m, const sb_ctx_params *p, sb_ctx **out, char *err) {
    *out = NULL;
    const sb_hparams *hp = &m->hp;
    sb_ctx *c = sb_calloc(1, sizeof *c);
    if (!c) return sb_seterr(err, SB_ENOMEM, "out of memory");
    c->m = m;
    int level = p->kq_level >= 0 && p->kq_level < SB_KQ_LEVELS ? p->kq_level : sb_kq_best_level();
    if (level > sb_kq_best_level()) level = sb_kq_best_level();
    const sb_kq_kernels *kernels = p->kernels && p->kernels->level <= sb_kq_best_level() ? p->kernels
                                                                                         : sb_kq_engine_kernels(level);
    level = kernels->level;
    c->kq = kernels->row;
    c->vec = sb_kq_vec_table(level);
    c->n_ctx = p->n_ctx > 0 ? p->n_ctx : SB_MIN(hp->n_ctx_train, 4096);
    c->n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_BATCH;
    const int n_seq = p->n_seq > 0 ? p->n_seq : 1;
    /* a pass holds at most every sequence's whole context */
    if (c->n_batch > (int64_t)c->n_ctx * n_seq) c->n_batch = c->n_ctx * n_seq;
    c->kv_type = p->kv_f32 ? SB_TYPE_F32 : SB_TYPE_F16;
    int nt = p->n_threads > 0 ? p->n_threads : 1;
    if (nt > 256) nt = 256;
    const size_t dq = (size_t)hp->n_head * hp->head_dim, dkv = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t nb = (size_t)c->n_batch, hd = (size_t)hp->head_dim;
    int rc = sb_kv_init(&c->kv, hp->n_layer, dkv * (c->kv_type == SB_TYPE_F16 ? 2 : 4), c->n_ctx, n_seq,
                        p->kv_blocks, err);
    if (rc) {
        sb_ctx_free(c);
        return rc;
    }
    const size_t gat = c->kv_type == SB_TYPE_F16 ? (size_t)nt * (size_t)c->n_ctx * hd * sizeof(sb_fp16) : 0;
    int bad = alloc_floats(&c->x, nb * (size_t)hp->n_embd) || alloc_floats(&c->xb, nb * SB_MAX((size_t)hp->n_embd, dq));
    bad = bad || alloc_floats(&c->q, nb * dq) || alloc_floats(&c->k, nb * dkv) || alloc_floats(&c->v, nb * dkv);
    bad = bad || alloc_floats(&c->att, nb * dq);
    bad = bad || (hp->arch == SB_ARCH_PHI3 && alloc_floats(&c->qkv, nb * (dq + 2 * dkv)));
    bad = bad || alloc_floats(&c->ffa, nb * 2 * (size_t)hp->n_ff) || alloc_floats(&c->ffb, nb * (size_t)hp->n_ff);
    bad = bad || alloc_floats(&c->scores, (size_t)nt * ATTN_HEADS * (size_t)c->n_ctx);
    bad = bad || alloc_floats(&c->vtmp, (size_t)nt * ATTN_HEADS * hd);
    bad = bad || alloc_floats(&c->rope_cs, nb * (size_t)hp->n_rot);
    bad = bad || (n_seq > 1 && alloc_floats(&c->lbuf, (size_t)n_seq * (size_t)hp->n_vocab));
    bad = bad || !(c->qconv = sb_aligned_alloc((size_t)nt * ATTN_HEADS * hd * 4));
    bad = bad || !(c->embd_buf = sb_aligned_alloc(m->tok_embd.row_bytes));
    bad = bad || (gat && (!(c->kgat = sb_aligned_alloc(gat)) || !(c->vgat = sb_aligned_alloc(gat))));
    bad = bad || !(c->tok_seq = sb_malloc(nb * sizeof(int))) || !(c->tok_pos = sb_malloc(nb * sizeof(int)));
    bad = bad || !(c->tok_contig = sb_malloc(nb)) || !(c->ord = sb_malloc((size_t)n_seq * sizeof *c->ord));
    if (bad) {
        sb_ctx_free(c);
        return sb_seterr(err, SB_ENOMEM, "out of memory for a %d-token context", p->n_ctx);
    }
    if (sb_pool_new(nt, &c->pool) != 0) {
        sb_ctx_free(c);
        return sb_seterr(err, SB_ENOMEM, "cannot start %d threads", nt);
    }
    /* Activation buffers sized for the widest input (n_ff, or q for wo) in
     * the bulkiest activation format (F32 = 4 bytes/element covers all). */
    const size_t widest = SB_MAX((size_t)hp->n_ff, SB_MAX((size_t)hp->n_embd, dq));
    if (sb_mm_init(&c->mm, kernels, c->pool, nb * widest * 4 + 4096, m->x8_row_bytes) != 0) {
        sb_ctx_free(c);
        return sb_seterr(err, SB_ENOMEM, "out of memory for a %d-token batch", c->n_batch);
    }
    /* At AVX-512 the tiled kernels' packed panels (8 tokens and more) sum
     * as vec_dot does, bit for bit, and their register tiles (fewer) do
     * not: with fewer tokens to the one-token kernels, a token's numbers
     * do not depend on the pass it is in, so a generation decoding token
     * by token gets what one pass over its whole text gives (`switchboard
     * logits`, logprobs). At AVX2 the gemm has no register tiles (fewer
     * than 4 tokens are vec_dot per pair) and its panels sum as vec_dot
     * too, so the default stays (docs/KERNELS.md, "Batch invariance"). */
    if (level >= SB_KQ_AVX512) c->mm.gemm_min_toks = 8;
    *out = c;
    return 0;
}

/* ---- matrix products ---------------------------------------------------- */

static void matmul(sb_ctx *c, const sb_weight *w, const float *x, int n_tok, float *y, size_t y_stride) {
    const sb_mm_out o = { w, y, y_stride };
    sb_mm_run(&c->mm, x, n_tok, &o, 1);
}

/* ---- element-wise steps ---------------------------------------------------- */

/* ggml sums squares in double; so do we, to land on the same bits. */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

/* cos/sin of every rotary pair for one position, computed like ggml: theta
 * advances by a running product, in float. */
static void rope_cache(float *cs, int pos, int n_rot, float base, float freq_scale, const float *factors) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i0 = 0; i0 < n_rot; i0 += 2) {
        const float ff = factors ? factors[i0 / 2] : 1.0f;
        const float th = freq_scale * (theta / ff);
        cs[i0] = cosf(th);
        cs[i0 + 1] = sinf(th);
        theta *= theta_scale;
    }
}

static void rope_apply(float *x, int n_heads, int hd, int n_rot, const float *cs, int neox) {
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i0 = 0; i0 < n_rot; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1];
            const int a = neox ? i0 / 2 : i0, b = neox ? i0 / 2 + n_rot / 2 : i0 + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

/* ---- attention --------------------------------------------------------------- */

typedef struct {
    sb_ctx *c;
    int layer, n_tok;
    int n_sub;                  /* tasks per KV head and token: its query heads in groups of ATTN_HEADS */
} attn_job;

/* Positions start..pos of a fragmented window, kv head at byte offset
 * head_off, copied into rows hd apart: the kernels then read what they
 * would read in one contiguous range, so the scores and the sums are those
 * of a sequence laid out in consecutive blocks. */
static void gather(const sb_kv *kv, const uint8_t *base, int layer, int seq, int start, int pos, size_t head_off,
                   int hd, sb_fp16 *dst) {
    for (int p = start; p <= pos; p++)
        memcpy(dst + (size_t)(p - start) * hd, base + sb_kv_row_off(kv, layer, seq, p) + head_off,
               (size_t)hd * sizeof(sb_fp16));
}

/* F32 cache: one head, position by position, so blocks change nothing. qc
 * is q in the cache's type. */
static void attn_head_f32(const sb_ctx *c, int layer, int seq, int start, int pos, size_t head_off, const void *qc,
                          float *s, float *vt, float *out) {
    const sb_kv *kvp = &c->kv;
    const sb_kq_traits *kv = &c->kq[c->kv_type];
    const int hd = c->m->hp.head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    float mx = -INFINITY;
    for (int p = start; p <= pos; p++) {
        float d;
        kv->vec_dot(hd, &d, kvp->k + sb_kv_row_off(kvp, layer, seq, p) + head_off, qc);
        d *= scale;
        s[p - start] = d;
        if (d > mx) mx = d;
    }
    double sum = 0.0;
    for (int p = start; p <= pos; p++) {
        const float e = expf(s[p - start] - mx);
        s[p - start] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int p = start; p <= pos; p++) {
        kv->to_float(kvp->v + sb_kv_row_off(kvp, layer, seq, p) + head_off, vt, hd);
        const float w = s[p - start] * inv;
        for (int i = 0; i < hd; i++) out[i] += w * vt[i];
    }
}

/* One task: one token and up to ATTN_HEADS of the query heads that share a
 * KV head (all of a group of 4 or fewer). Each head's numbers are those of
 * the per-head kernels (sb_kq_vec: qk_f16_g, pv_f16_g). */
static void attn_task(void *arg, int task, int thread) {
    const attn_job *j = arg;
    sb_ctx *c = j->c;
    const sb_kv *kvp = &c->kv;
    const sb_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, n_head = hp->n_head, group = n_head / hp->n_head_kv;
    const int n_sub = j->n_sub, per_tok = hp->n_head_kv * n_sub;
    const int t = task / per_tok, kvh = task % per_tok / n_sub, sub = task % n_sub;
    const int h0 = kvh * group + sub * ATTN_HEADS, ng = SB_MIN(ATTN_HEADS, group - sub * ATTN_HEADS);
    const int seq = c->tok_seq[t], pos = c->tok_pos[t];
    const int start = hp->n_swa > 0 ? SB_MAX(0, pos - hp->n_swa + 1) : 0;
    const size_t head_off = (size_t)kvh * (size_t)hd * (c->kv_type == SB_TYPE_F16 ? 2 : 4);
    const sb_kq_traits *kv = &c->kq[c->kv_type];
    const float *q = c->q + (size_t)t * (size_t)n_head * hd + (size_t)h0 * hd;   /* the ng heads, hd apart */
    float *s = c->scores + (size_t)thread * ATTN_HEADS * (size_t)c->n_ctx;
    float *vt = c->vtmp + (size_t)thread * ATTN_HEADS * hd;
    uint8_t *qc = c->qconv + (size_t)thread * ATTN_HEADS * hd * 4;
    float *out = c->att + (size_t)t * (size_t)n_head * hd + (size_t)h0 * hd;

    /* K·q in the cache's type, as llama.cpp does (q is rounded to F16 for an
     * F16 cache): the scores then match its bit patterns closely. The
     * conversion is element by element, so all ng heads go at once. */
    kv->from_float(q, qc, (int64_t)ng * hd);
    if (c->kv_type != SB_TYPE_F16) {
        const size_t qbytes = sb_kq_row_size(kv, hd);
        for (int g = 0; g < ng; g++)
            attn_head_f32(c, j->layer, seq, start, pos, head_off, qc + (size_t)g * qbytes, s, vt,
                          out + (size_t)g * hd);
        return;
    }
    const int np = pos - start + 1;
    const sb_fp16 *K, *V;
    size_t stride;
    if (c->tok_contig[t]) {
        const size_t off = sb_kv_row_off(kvp, j->layer, seq, start) + head_off;
        K = (const sb_fp16 *)(kvp->k + off);
        V = (const sb_fp16 *)(kvp->v + off);
        stride = kvp->row_bytes / sizeof(sb_fp16);
    } else {
        sb_fp16 *kg = c->kgat + (size_t)thread * (size_t)c->n_ctx * hd;
        sb_fp16 *vg = c->vgat + (size_t)thread * (size_t)c->n_ctx * hd;
        gather(kvp, kvp->k, j->layer, seq, start, pos, head_off, hd, kg);
        gather(kvp, kvp->v, j->layer, seq, start, pos, head_off, hd, vg);
        K = kg;
        V = vg;
        stride = (size_t)hd;
    }
    kv->to_float(qc, vt, (int64_t)ng * hd);     /* the F16-rounded q, widened: exact products */
    float mx[ATTN_HEADS], inv[ATTN_HEADS];
    const size_t ss = (size_t)c->n_ctx;
    c->vec->qk_f16_g(hd, np, ng, vt, K, stride, 1.0f / sqrtf((float)hd), s, ss, mx);
    for (int g = 0; g < ng; g++) inv[g] = (float)(1.0 / c->vec->softmax_exp(s + (size_t)g * ss, np, mx[g]));
    c->vec->pv_f16_g(hd, np, ng, s, ss, inv, V, stride, out);
}

/* ---- one batch ---------------------------------------------------------------- */

/* Token tok's embedding row. Read from the file (sb_gguf_read_at) unless
 * the table is also the output matrix, which every pass reads whole
 * through the mapping anyway: a 151k-row table is read a few rows per
 * pass, and each row read through the mapping maps the 64 KiB (or the
 * 2 MiB page) around it as the process's memory. */
static const void *embd_row(sb_ctx *c, int32_t tok) {
    const sb_model *m = c->m;
    const uint8_t *at = (const uint8_t *)m->tok_embd.data + (size_t)tok * m->tok_embd.row_bytes;
    if (m->output.data == m->tok_embd.data) return at;
    return sb_gguf_read_at(m->gguf, at, m->tok_embd.row_bytes, c->embd_buf);
}

typedef struct {
    sb_ctx *c;
    const sb_layer *L;
    int stage;
} tok_job;

/* The residual adds (x += xb, xb the output of wo or ffn_down) run inside
 * the next norm's task, per token on the pool: one pass over x instead of a
 * serial loop over n·d floats and then the norm's own read. */
enum { ST_ATTN_NORM, ST_RESID_ATTN_NORM, ST_QKV_POST, ST_RESID_FFN_NORM, ST_SWIGLU, ST_RESID };

/* Per-token element-wise work, spread over the pool for long batches. */
static void tok_task(void *arg, int t, int thread) {
    const tok_job *j = arg;
    sb_ctx *c = j->c;
    const sb_hparams *hp = &c->m->hp;
    const int d = hp->n_embd, hd = hp->head_dim;
    const size_t dq = (size_t)hp->n_head * hd, dkv = (size_t)hp->n_head_kv * hd;
    switch (j->stage) {
    case ST_RESID_ATTN_NORM:
    case ST_RESID_FFN_NORM:
    case ST_RESID: {
        float *x = c->x + (size_t)t * d;
        const float *xb = c->xb + (size_t)t * d;
        for (int i = 0; i < d; i++) x[i] += xb[i];
        if (j->stage == ST_RESID) break;
        rmsnorm(c->xb + (size_t)t * d, x, j->stage == ST_RESID_FFN_NORM ? j->L->ffn_norm : j->L->attn_norm, d,
                hp->rms_eps);
        break;
    }
    case ST_ATTN_NORM:
        rmsnorm(c->xb + (size_t)t * d, c->x + (size_t)t * d, j->L->attn_norm, d, hp->rms_eps);
        break;
    case ST_QKV_POST: {
        float *q = c->q + (size_t)t * dq, *k = c->k + (size_t)t * dkv, *v = c->v + (size_t)t * dkv;
        if (c->qkv) {
            const float *f = c->qkv + (size_t)t * (dq + 2 * dkv);
            memcpy(q, f, dq * sizeof(float));
            memcpy(k, f + dq, dkv * sizeof(float));
            memcpy(v, f + dq + dkv, dkv * sizeof(float));
        }
        if (j->L->bq) {
            for (size_t i = 0; i < dq; i++) q[i] += j->L->bq[i];
            for (size_t i = 0; i < dkv; i++) { k[i] += j->L->bk[i]; v[i] += j->L->bv[i]; }
        }
        const float *cs = c->rope_cs + (size_t)t * hp->n_rot;
        rope_apply(q, hp->n_head, hd, hp->n_rot, cs, hp->rope_neox);
        rope_apply(k, hp->n_head_kv, hd, hp->n_rot, cs, hp->rope_neox);
        break;
    }
    case ST_SWIGLU: {
        const size_t nf = (size_t)hp->n_ff;
        const float *g, *u;
        if (c->qkv) {           /* phi3: ffn_up produced gate | up in one row */
            g = c->ffa + (size_t)t * 2 * nf;
            u = g + nf;
        } else {
            g = c->ffa + (size_t)t * nf;
            u = c->ffb + (size_t)t * nf;
        }
        float *o = c->ffb + (size_t)t * nf;
        c->vec->swiglu((int)nf, g, u, o);   /* o aliases u for llama */
        break;
    }
    }
}

static void run_tokens(sb_ctx *c, const sb_layer *L, int stage, int n_tok) {
    tok_job j = { c, L, stage };
    sb_pool_run(c->pool, tok_task, &j, n_tok);
}

static void store_kv(sb_ctx *c, int il, int n_tok) {
    const sb_hparams *hp = &c->m->hp;
    const size_t dkv = (size_t)hp->n_head_kv * hp->head_dim;
    const sb_kq_traits *kv = &c->kq[c->kv_type];
    for (int t = 0; t < n_tok; t++) {
        const size_t off = sb_kv_row_off(&c->kv, il, c->tok_seq[t], c->tok_pos[t]);
        kv->from_float(c->k + (size_t)t * dkv, c->kv.k + off, (int64_t)dkv);
        kv->from_float(c->v + (size_t)t * dkv, c->kv.v + off, (int64_t)dkv);
    }
}

static void run_layers(sb_ctx *c, int n) {
    const sb_model *m = c->m;
    const sb_hparams *hp = &m->hp;
    const int d = hp->n_embd;
    const size_t dq = (size_t)hp->n_head * hp->head_dim, dkv = (size_t)hp->n_head_kv * hp->head_dim;
    for (int il = 0; il < hp->n_layer; il++) {
        const sb_layer *L = &m->layers[il];
        sb_mm_reset(&c->mm);
        run_tokens(c, L, il ? ST_RESID_ATTN_NORM : ST_ATTN_NORM, n);    /* the previous layer's ffn residual */
        MARK(c, ATTN_NORM);
        if (L->wqkv.data) {
            matmul(c, &L->wqkv, c->xb, n, c->qkv, dq + 2 * dkv);
        } else {
            const sb_mm_out qkv[3] = { { &L->wq, c->q, dq }, { &L->wk, c->k, dkv }, { &L->wv, c->v, dkv } };
            sb_mm_run(&c->mm, c->xb, n, qkv, 3);
        }
        MARK(c, QKV);
        run_tokens(c, L, ST_QKV_POST, n);
        MARK(c, ROPE);
        store_kv(c, il, n);
        MARK(c, KV_STORE);
        attn_job aj = { c, il, n, (hp->n_head / hp->n_head_kv + ATTN_HEADS - 1) / ATTN_HEADS };
        sb_pool_run(c->pool, attn_task, &aj, n * hp->n_head_kv * aj.n_sub);
        MARK(c, ATTN);
        /* Residual: wo writes into xb, then x += xb before the ffn norm. */
        matmul(c, &L->wo, c->att, n, c->xb, (size_t)d);
        MARK(c, WO);
        sb_mm_reset(&c->mm);
        run_tokens(c, L, ST_RESID_FFN_NORM, n);
        MARK(c, FFN_NORM);
        if (L->w_gate.data) {
            const sb_mm_out gate_up[2] = { { &L->w_gate, c->ffa, (size_t)hp->n_ff }, { &L->w_up, c->ffb, (size_t)hp->n_ff } };
            sb_mm_run(&c->mm, c->xb, n, gate_up, 2);
        } else {
            matmul(c, &L->w_up, c->xb, n, c->ffa, 2 * (size_t)hp->n_ff);
        }
        MARK(c, GATE_UP);
        run_tokens(c, L, ST_SWIGLU, n);
        MARK(c, SWIGLU);
        matmul(c, &L->w_down, c->ffb, n, c->xb, (size_t)d);
        MARK(c, DOWN);
    }
    run_tokens(c, NULL, ST_RESID, n);          /* the last layer's ffn residual */
    MARK(c, RESIDUAL);
}

/* The logits the parts asked for. Last-token rows (and one-token parts'
 * rows) go through the output matrix together on the one-token kernels,
 * as each would alone; several-row parts each through their own run. */
static void pass_logits(sb_ctx *c, const sb_seq_part *parts, int n_parts) {
    const sb_model *m = c->m;
    const sb_hparams *hp = &m->hp;
    const int d = hp->n_embd;
    const size_t nv = (size_t)hp->n_vocab;
    int n1 = 0, t = 0;
    sb_mm_reset(&c->mm);
    for (int i = 0; i < n_parts; t += parts[i].n, i++)
        if (parts[i].logits && (!parts[i].all_logits || parts[i].n == 1))
            rmsnorm(c->xb + (size_t)n1++ * d, c->x + (size_t)(t + parts[i].n - 1) * d, m->output_norm, d, hp->rms_eps);
    MARK(c, OUT_NORM);
    if (n1) {
        float *dst = n_parts == 1 ? parts[0].logits : c->lbuf;
        c->mm.n_one = n1;
        matmul(c, &m->output, c->xb, n1, dst, nv);
        c->mm.n_one = 0;
        for (int i = 0, r = 0; i < n_parts && dst == c->lbuf; i++)
            if (parts[i].logits && (!parts[i].all_logits || parts[i].n == 1))
                memcpy(parts[i].logits, c->lbuf + (size_t)r++ * nv, nv * sizeof(float));
        MARK(c, OUTPUT);
    }
    t = 0;
    for (int i = 0; i < n_parts; t += parts[i].n, i++) {
        if (!parts[i].logits || !parts[i].all_logits || parts[i].n == 1) continue;
        sb_mm_reset(&c->mm);
        for (int k = 0; k < parts[i].n; k++)
            rmsnorm(c->xb + (size_t)k * d, c->x + (size_t)(t + k) * d, m->output_norm, d, hp->rms_eps);
        MARK(c, OUT_NORM);
        matmul(c, &m->output, c->xb, parts[i].n, parts[i].logits, nv);
        MARK(c, OUTPUT);
    }
}

/* One forward pass over parts whose tokens were checked and whose blocks
 * are available; one-token parts come first (they are the matmuls'
 * one-token segment). */
static void eval_pass(sb_ctx *c, const sb_seq_part *parts, int n_parts) {
    const sb_model *m = c->m;
    const sb_hparams *hp = &m->hp;
    const int d = hp->n_embd;
    const sb_kq_traits *et = &c->kq[m->tok_embd.type];
    int segs[SB_MM_MAX_SEGS], n_one = 0, n_seg = 0, t = 0;
    if (c->prof) {
        c->prof->last = sb_now_ns();
        c->prof->last_wait = c->prof->wait;
    }
    for (int i = 0; i < n_parts; i++) {
        const sb_seq_part *pp = &parts[i];
        if (pp->n == 1) n_one++;
        else segs[n_seg++] = pp->n;
        sb_kv_reserve(&c->kv, pp->seq, pp->n);
        const int np = c->kv.n_past[pp->seq];
        for (int k = 0; k < pp->n; k++, t++) {
            const int pos = np + k, start = hp->n_swa > 0 ? SB_MAX(0, pos - hp->n_swa + 1) : 0;
            c->tok_seq[t] = pp->seq;
            c->tok_pos[t] = pos;
            c->tok_contig[t] = (uint8_t)sb_kv_contiguous(&c->kv, pp->seq, start, pos);
            et->to_float(embd_row(c, pp->tokens[k]), c->x + (size_t)t * d, d);
            rope_cache(c->rope_cs + (size_t)t * hp->n_rot, pos, hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale,
                       m->rope_freqs);
        }
    }
    MARK(c, EMBED);
    c->mm.n_one = n_one;
    c->mm.n_seg = n_seg;
    c->mm.seg = segs;
    run_layers(c, t);
    c->mm.n_one = c->mm.n_seg = 0;
    c->mm.seg = NULL;
    for (int i = 0; i < n_parts; i++) c->kv.n_past[parts[i].seq] += parts[i].n;
    pass_logits(c, parts, n_parts);
}

static int check_tokens(const sb_ctx *c, const int32_t *tokens, int n, char *err) {
    const int nv = c->m->hp.n_vocab;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= nv)
            return sb_seterr(err, SB_EINVAL, "token %d at index %d is outside the vocabulary (0..%d)", tokens[t], t,
                             nv - 1);
    return 0;
}

static int check_room(const sb_ctx *c, int seq, int n, char *err) {
    const int np = c->kv.n_past[seq];
    if (n > c->n_ctx - np)
        return sb_seterr(err, SB_ERANGE, "context full: %d tokens held + %d new exceed the context size %d", np, n,
                         c->n_ctx);
    return 0;
}

int sb_ctx_eval(sb_ctx *c, const int32_t *tokens, int n, float *logits, int all_logits, char *err) {
    if (n <= 0) return sb_seterr(err, SB_EINVAL, "no tokens to evaluate");
    int rc = check_room(c, 0, n, err);
    if (rc || (rc = check_tokens(c, tokens, n, err))) return rc;
    const int need = sb_kv_needed(&c->kv, 0, n);
    if (need > c->kv.n_free)
        return sb_seterr(err, SB_EBUSY, "KV pool: %d tokens need %d blocks, %d free", n, need, c->kv.n_free);
    const size_t nv = (size_t)c->m->hp.n_vocab;
    for (int i = 0; i < n; i += c->n_batch) {
        const int nb = SB_MIN(c->n_batch, n - i);
        const int last = i + nb == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)i * nv;
        else if (logits && last) out = logits;
        const sb_seq_part part = { 0, tokens + i, nb, out, all_logits };
        eval_pass(c, &part, 1);
    }
    return 0;
}

int sb_ctx_seq_verify(sb_ctx *c, int seq, const int32_t *tokens, int n, float *logits, int exact, char *err) {
    if (n > c->n_batch) return sb_seterr(err, SB_EINVAL, "verify: %d tokens exceed the batch of %d", n, c->n_batch);
    /* One part, one pass: what sb_ctx_eval makes of n <= n_batch tokens. */
    const sb_seq_part part = { seq, tokens, n, logits, 1 };
    c->mm.decode_kernels = exact;
    int rc = sb_ctx_eval_parts(c, &part, 1, err);
    c->mm.decode_kernels = 0;
    return rc;
}

/* Every check before anything changes: a failed call leaves the pool and
 * every sequence as they were. */
static int check_parts(const sb_ctx *c, const sb_seq_part *parts, int n_parts, char *err) {
    if (n_parts <= 0 || n_parts > c->kv.n_seq)
        return sb_seterr(err, SB_EINVAL, "eval_parts: %d parts (1..%d)", n_parts, c->kv.n_seq);
    int total = 0, need = 0, multi = 0, rc;
    for (int i = 0; i < n_parts; i++) {
        const sb_seq_part *p = &parts[i];
        if (!sb_kv_in_use(&c->kv, p->seq))
            return sb_seterr(err, SB_EINVAL, "eval_parts: part %d: sequence %d is not in use", i, p->seq);
        for (int k = 0; k < i; k++)
            if (parts[k].seq == p->seq)
                return sb_seterr(err, SB_EINVAL, "eval_parts: parts %d and %d are both sequence %d", k, i, p->seq);
        if (p->n <= 0 || !p->tokens) return sb_seterr(err, SB_EINVAL, "eval_parts: part %d has no tokens", i);
        if ((rc = check_room(c, p->seq, p->n, err)) || (rc = check_tokens(c, p->tokens, p->n, err))) return rc;
        total += p->n;
        multi += p->n > 1;
        need += sb_kv_needed(&c->kv, p->seq, p->n);
    }
    if (total > c->n_batch)
        return sb_seterr(err, SB_EINVAL, "eval_parts: %d tokens exceed the batch of %d", total, c->n_batch);
    if (multi > SB_MM_MAX_SEGS)
        return sb_seterr(err, SB_EINVAL, "eval_parts: %d parts of several tokens (at most %d)", multi, SB_MM_MAX_SEGS);
    if (need > c->kv.n_free)
        return sb_seterr(err, SB_EBUSY, "KV pool: the pass needs %d blocks, %d free", need, c->kv.n_free);
    return 0;
}

int sb_ctx_eval_parts(sb_ctx *c, const sb_seq_part *parts, int n_parts, char *err) {
    int rc = check_parts(c, parts, n_parts, err);
    if (rc) return rc;
    sb_seq_part *ord = c->ord;  /* one-token parts first, each group in the caller's order */
    int k = 0;
    for (int i = 0; i < n_parts; i++)
        if (parts[i].n == 1) ord[k++] = parts[i];
    for (int i = 0; i < n_parts; i++)
        if (parts[i].n > 1) ord[k++] = parts[i];
    eval_pass(c, ord, n_parts);
    return 0;
}
