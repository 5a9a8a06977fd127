/* test_encoder_grad.c - the encoder's training passes and LoRA adapters
 * (sb_encoder_train.h, sb_lora.h) on the tiny random e5 of tests/e5_tiny.py
 * (tests/data/tiny-e5.e5s1: 2 layers, dim 64, 4 heads, ff 128, a 16-token
 * window), converted to a Q8_0 GGUF in a temporary file at the start:
 *  1. every op's backward against central finite differences of its
 *     forward (LayerNorm, GELU, attention with softmax, linear + LoRA,
 *     mean pooling + L2 norm);
 *  2. the whole encoder's gradient with respect to every adapter matrix,
 *     against finite differences of the training forward;
 *  3. a fresh adapter (B = 0) gives embeddings bit-identical to none, a
 *     non-zero one changes them (the same bits on 1 and 2 threads), and
 *     the training forward agrees with the inference forward with the
 *     adapter (cosine);
 *  4. adapter files round-trip bit for bit, and wrong files (hand-made
 *     with the GGUF writer) are refused with the file and tensor named;
 *  5. AdamW lowers a loss and is deterministic for a seed, on 1 thread as
 *     on 2; the training step (supervised in-batch contrastive loss,
 *     itself checked against finite differences) separates two labels of a
 *     toy set.
 *
 * The bound. Everything runs in F32 (the forward's dot products and row
 * statistics summed in double). Each check compares the whole gradient of
 * a tensor with its central-difference estimate (step h = 2e-2),
 * normwise: |g - fd| / max(|g|, |fd|) ≤ 1e-3. The whole encoder's worst
 * error is 2.7e-4 at h = 2e-2; rounding dominates below (1.1e-3 at
 * h = 3e-3, 5.1e-4 at 1e-2), truncation above (5.6e-4 at 3e-2). Single
 * ops stay below 4e-5. A wrong sign or a missing term gives errors of
 * order 1: flipping one sign in GELU's derivative, the softmax Jacobian,
 * LayerNorm's mean term, the LoRA dA term or the L2 norm's projection
 * fails both the op's check and the encoder's.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/sb_common.h"
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_encoder_train.h"
#include "worker/engine/sb_lora.h"
#include "worker/gguf/sb_gguf_write.h"
#include "worker/kernels/sb_kq.h"

#define E5S1 "tests/data/tiny-e5.e5s1"
static char MODEL[256];         /* the converted GGUF */
#ifndef FD_H                    /* -DFD_H=... to see the error at another step */
#define FD_H 2e-2f
#endif
#define BOUND 1e-3

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) {                          /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}
static void fill(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * urand();
}
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static void temp_path(char *buf, size_t cap, const char *name) {
    const char *d = getenv("TMPDIR");
    snprintf(buf, cap, "%s/sb-lora-%d-%s", d && *d ? d : "/tmp", (int)getpid(), name);
}

/* The loss as a function of the perturbed array, via the caller's closure. */
typedef double (*loss_fn)(void *ctx);

/* Normwise relative error of grad[0..n) against central differences of
 * f with respect to p[0..n) (every idx-th element when stride > 1). */
static double fd_error(loss_fn f, void *ctx, float *p, const float *grad, size_t n, size_t stride) {
    double num = 0, ng = 0, nf = 0;
    for (size_t i = 0; i < n; i += stride) {
        const float keep = p[i];
        p[i] = keep + FD_H;
        const double lp = f(ctx);
        p[i] = keep - FD_H;
        const double lm = f(ctx);
        p[i] = keep;
        const double fd = (lp - lm) / (2.0 * FD_H);
        num += (fd - grad[i]) * (fd - grad[i]);
        ng += (double)grad[i] * grad[i];
        nf += fd * fd;
    }
    return sqrt(num) / fmax(sqrt(fmax(ng, nf)), 1e-30);
}

/* ---- 1. ops ------------------------------------------------------------- */

enum { N = 5, H = 16, NH = 4, OUT = 12, R = 3 };

typedef struct {
    float x[N * H], w[H], b[H], r[N * H], y[N * H], xh[N * H], rs[N];
} ln_ctx;
static double ln_loss(void *p) {
    ln_ctx *c = p;
    sb_op_ln_forward(c->x, c->w, c->b, N, H, 1e-12f, c->y, c->xh, c->rs);
    return dot(c->y, c->r, N * H);
}
static void test_layer_norm(void **state) {
    (void)state;
    ln_ctx c;
    fill(c.x, N * H, 2), fill(c.w, H, 1.5f), fill(c.b, H, 1), fill(c.r, N * H, 1);
    float dx[N * H], dw[H] = { 0 }, db[H] = { 0 };
    ln_loss(&c);
    sb_op_ln_backward(c.r, c.xh, c.rs, c.w, N, H, dx, dw, db);
    const double ex = fd_error(ln_loss, &c, c.x, dx, N * H, 1), ew = fd_error(ln_loss, &c, c.w, dw, H, 1),
                 eb = fd_error(ln_loss, &c, c.b, db, H, 1);
    print_message("LayerNorm: dx %.2e dw %.2e db %.2e\n", ex, ew, eb);
    assert_true(ex <= BOUND && ew <= BOUND && eb <= BOUND);
}

typedef struct { float u[64], r[64]; } gelu_ctx;
static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    double s = 0;
    for (int i = 0; i < 64; i++) s += (double)sb_op_gelu(c->u[i]) * c->r[i];
    return s;
}
static void test_gelu(void **state) {
    (void)state;
    gelu_ctx c;
    fill(c.u, 64, 4), fill(c.r, 64, 1);
    float du[64];
    for (int i = 0; i < 64; i++) du[i] = sb_op_gelu_grad(c.u[i]) * c.r[i];
    const double e = fd_error(gelu_loss, &c, c.u, du, 64, 1);
    print_message("GELU: %.2e\n", e);
    assert_true(e <= BOUND);
}

typedef struct { float q[N * H], k[N * H], v[N * H], r[N * H], P[NH * N * N], ctx[N * H]; } attn_ctx;
static double attn_loss(void *p) {
    attn_ctx *c = p;
    sb_op_attn_forward(c->q, c->k, c->v, N, H, NH, c->P, c->ctx);
    return dot(c->ctx, c->r, N * H);
}
static void test_attention(void **state) {
    (void)state;
    attn_ctx c;
    fill(c.q, N * H, 1.5f), fill(c.k, N * H, 1.5f), fill(c.v, N * H, 1), fill(c.r, N * H, 1);
    float dq[N * H], dk[N * H], dv[N * H];
    attn_loss(&c);
    sb_op_attn_backward(c.r, c.q, c.k, c.v, c.P, N, H, NH, dq, dk, dv);
    const double eq = fd_error(attn_loss, &c, c.q, dq, N * H, 1), ek = fd_error(attn_loss, &c, c.k, dk, N * H, 1),
                 ev = fd_error(attn_loss, &c, c.v, dv, N * H, 1);
    print_message("attention: dq %.2e dk %.2e dv %.2e\n", eq, ek, ev);
    assert_true(eq <= BOUND && ek <= BOUND && ev <= BOUND);
}

typedef struct {
    float x[N * H], W[OUT * H], bias[OUT], a[R * H], b[OUT * R], r[N * OUT], ax[N * R], y[N * OUT];
    sb_lora_mat m;
} lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *c = p;
    sb_op_linear_forward(c->x, N, H, OUT, c->W, c->bias, &c->m, R, 0.7f, c->ax, c->y);
    return dot(c->y, c->r, N * OUT);
}
static void test_linear_lora(void **state) {
    (void)state;
    lin_ctx c;
    fill(c.x, N * H, 1), fill(c.W, OUT * H, 0.5f), fill(c.bias, OUT, 1), fill(c.a, R * H, 0.5f);
    fill(c.b, OUT * R, 0.5f), fill(c.r, N * OUT, 1);
    c.m = (sb_lora_mat){ c.a, c.b, H, OUT };
    float dx[N * H], ga[R * H] = { 0 }, gb[OUT * R] = { 0 };
    lin_loss(&c);
    sb_op_linear_backward(c.r, c.x, N, H, OUT, c.W, &c.m, R, 0.7f, c.ax, dx, ga, gb);
    const double ex = fd_error(lin_loss, &c, c.x, dx, N * H, 1), ea = fd_error(lin_loss, &c, c.a, ga, R * H, 1),
                 eb = fd_error(lin_loss, &c, c.b, gb, OUT * R, 1);
    print_message("linear + LoRA: dx %.2e dA %.2e dB %.2e\n", ex, ea, eb);
    assert_true(ex <= BOUND && ea <= BOUND && eb <= BOUND);
}

typedef struct { float x[N * H], r[H], vec[H]; } pool_ctx;
static double pool_loss(void *p) {
    pool_ctx *c = p;
    sb_op_pool_forward(c->x, N, H, c->vec);
    return dot(c->vec, c->r, H);
}
static void test_pool_l2(void **state) {
    (void)state;
    pool_ctx c;
    fill(c.x, N * H, 1), fill(c.r, H, 1);
    float dx[N * H];
    const float norm = sb_op_pool_forward(c.x, N, H, c.vec);
    sb_op_pool_backward(c.r, c.vec, norm, N, H, dx);
    const double e = fd_error(pool_loss, &c, c.x, dx, N * H, 1);
    print_message("mean pool + L2: %.2e\n", e);
    assert_true(e <= BOUND);
}

enum { SB = 6 };
typedef struct { float V[SB * H], dV[SB * H]; int labels[SB]; } supcon_ctx;
static double supcon_loss(void *p) {
    supcon_ctx *c = p;
    float scratch[SB * H];
    return sb_op_supcon(c->V, c->labels, SB, H, 0.5f, scratch);
}
static void test_supcon(void **state) {
    (void)state;
    supcon_ctx c = { .labels = { 0, 1, 0, 2, 1, 0 } };      /* label 2 has no positive: a negative only */
    fill(c.V, SB * H, 0.5f);
    const double l = sb_op_supcon(c.V, c.labels, SB, H, 0.5f, c.dV);
    const double e = fd_error(supcon_loss, &c, c.V, c.dV, SB * H, 1);
    print_message("supervised contrastive: loss %.4f, gradient %.2e\n", l, e);
    assert_true(l > 0 && e <= BOUND);
    const int none[SB] = { 0, 1, 2, 3, 4, 5 };
    assert_true(sb_op_supcon(c.V, none, SB, H, 0.5f, c.dV) == 0 && c.dV[0] == 0);
}

/* ---- 2-5. the tiny encoder ------------------------------------------------ */

static const char *const texts[] = { "hello world", "the query: is a test", "社保卡办理", "公积金 hello" };
#define NT 4

typedef struct {
    sb_encoder *e;
    sb_lora *lora;
    sb_enc_trainer *t;
    int32_t *ids[NT];
    size_t n[NT];
    int nt;                             /* texts in the loss */
    float r[NT][64];
} model_ctx;

static void open_model_threads(model_ctx *c, int top_n, int threads) {
    char err[256] = "";
    memset(c, 0, sizeof *c);
    assert_int_equal(sb_encoder_open(MODEL, threads, -1, &c->e, err), 0);
    assert_int_equal(sb_encoder_dim(c->e), 64);
    assert_int_equal(sb_lora_new(2, 64, 128, 4, 8.0f, top_n, 42, &c->lora, err), 0);
    assert_int_equal(sb_enc_trainer_new(c->e, c->lora, sb_encoder_n_ctx(c->e), &c->t, err), 0);
    c->nt = NT;
    for (int k = 0; k < NT; k++) {
        assert_int_equal(sb_encoder_tokenize(c->e, SB_EMBED_QUERY, texts[k], strlen(texts[k]), &c->ids[k], &c->n[k], err),
                         0);
        assert_true(c->n[k] <= (size_t)sb_encoder_n_ctx(c->e));
        fill(c->r[k], 64, 1);
    }
}

static void open_model(model_ctx *c, int top_n) { open_model_threads(c, top_n, 1); }

static void close_model(model_ctx *c) {
    for (int k = 0; k < NT; k++) sb_free(c->ids[k]);
    sb_enc_trainer_free(c->t);
    sb_lora_free(c->lora);
    sb_encoder_free(c->e);
}

static void randomize_b(sb_lora *l, float s) {
    for (int il = 0; il < l->n_layer; il++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            sb_lora_mat *m = sb_lora_get(l, il, (sb_lora_which)w);
            if (m) fill(m->b, (size_t)m->out * (size_t)l->rank, s);
        }
}

static double model_loss(void *p) {
    model_ctx *c = p;
    double s = 0;
    float vec[64];
    for (int k = 0; k < c->nt; k++) {
        char err[256];
        assert_int_equal(sb_enc_train_embed(c->t, c->ids[k], (int)c->n[k], vec, err), 0);
        s += dot(vec, c->r[k], 64);
    }
    return s;
}

static void model_grad(model_ctx *c) {
    char err[256];
    sb_enc_train_zero_grad(c->t);
    for (int k = 0; k < c->nt; k++) assert_int_equal(sb_enc_train_backward(c->t, c->ids[k], (int)c->n[k], c->r[k], err), 0);
}

static void check_model_grad(int top_n) {
    model_ctx c;
    open_model(&c, top_n);
    c.nt = 2;                           /* two texts (one Latin, one with "query:") keep it fast under ASan */
    randomize_b(c.lora, 0.2f);          /* with B = 0, A's gradient is 0: nothing to check */
    model_grad(&c);
    double worst = 0;
    for (int il = 2 - top_n; il < 2; il++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            sb_lora_mat *m = sb_lora_get(c.lora, il, (sb_lora_which)w);
            float *ga, *gb;
            assert_non_null(m);
            sb_enc_train_grad(c.t, il, (sb_lora_which)w, &ga, &gb);
            const double ea = fd_error(model_loss, &c, m->a, ga, (size_t)4 * m->in, 31);
            const double eb = fd_error(model_loss, &c, m->b, gb, (size_t)4 * m->out, 31);
            print_message("layer %d matrix %d: dA %.2e dB %.2e\n", il, w, ea, eb);
            worst = fmax(worst, fmax(ea, eb));
        }
    assert_true(worst <= BOUND);
    close_model(&c);
}

static void test_encoder_grad_all_layers(void **state) { (void)state; check_model_grad(2); }
static void test_encoder_grad_top_layer(void **state) { (void)state; check_model_grad(1); }

/* An adapter on the top top_n layers with its own LayerNorms, B and the
 * norms moved off their start (so no gradient is 0 and the norms change
 * the vectors), and its trainer. */
static void open_model_norms(model_ctx *c, int top_n) {
    char err[256];
    open_model(c, top_n);
    sb_enc_trainer_free(c->t);
    assert_int_equal(sb_encoder_adapter_add_norms(c->e, c->lora, err), 0);
    assert_int_equal(sb_enc_trainer_new(c->e, c->lora, sb_encoder_n_ctx(c->e), &c->t, err), 0);
    randomize_b(c->lora, 0.2f);
    for (int il = 0; il < 2; il++)
        for (int k = 0; k < SB_LORA_N_NORMS; k++) {
            sb_lora_norm *nm = sb_lora_norm_get(c->lora, il, (sb_lora_norm_which)k);
            assert_true(!nm == (il < 2 - top_n));
            for (int i = 0; nm && i < 2 * 64; i++) nm->w[i] += 0.3f * urand();
        }
}

static void test_encoder_grad_norms(void **state) {
    (void)state;
    model_ctx c;
    open_model_norms(&c, 2);
    c.nt = 2;
    model_grad(&c);
    double worst = 0;
    for (int il = 0; il < 2; il++)
        for (int k = 0; k < SB_LORA_N_NORMS; k++) {
            sb_lora_norm *nm = sb_lora_norm_get(c.lora, il, (sb_lora_norm_which)k);
            float *gw, *gb;
            sb_enc_train_norm_grad(c.t, il, (sb_lora_norm_which)k, &gw, &gb);
            assert_non_null(gw);
            const double ew = fd_error(model_loss, &c, nm->w, gw, 64, 1);
            const double eb = fd_error(model_loss, &c, nm->b, gb, 64, 1);
            print_message("layer %d norm %d: dw %.2e db %.2e\n", il, k, ew, eb);
            worst = fmax(worst, fmax(ew, eb));
        }
    assert_true(worst <= BOUND);
    close_model(&c);
}

static void embed_all(model_ctx *c, float out[NT][64]) {
    char err[256];
    for (int k = 0; k < NT; k++)
        assert_int_equal(sb_encoder_embed(c->e, SB_EMBED_QUERY, texts[k], strlen(texts[k]), out[k], NULL, err), 0);
}

static void test_fresh_adapter_is_identity(void **state) {
    (void)state;
    model_ctx c;
    char err[256];
    float plain[NT][64], adapted[NT][64], train[64];
    open_model(&c, 2);
    embed_all(&c, plain);
    assert_int_equal(sb_encoder_set_adapter(c.e, c.lora, err), 0);
    embed_all(&c, adapted);
    assert_memory_equal(plain, adapted, sizeof plain);             /* B = 0: the same bits */
    randomize_b(c.lora, 0.2f);
    embed_all(&c, adapted);
    for (int k = 0; k < NT; k++) {
        const double cos_plain = dot(plain[k], adapted[k], 64);
        assert_int_equal(sb_enc_train_embed(c.t, c.ids[k], (int)c.n[k], train, err), 0);
        const double cos_train = dot(train, adapted[k], 64);
        print_message("%s: cosine to no adapter %.4f, training forward to inference %.6f\n", texts[k], cos_plain,
                      cos_train);
        assert_true(cos_plain < 0.999);     /* the adapter is applied ... */
        assert_true(cos_train > 0.999);     /* ... the same way in both passes (Q8_0 activations, F16 K/V aside) */
    }
    sb_encoder *e2;                     /* the same bits on 2 threads as on 1 */
    float two[NT][64];
    assert_int_equal(sb_encoder_open(MODEL, 2, -1, &e2, err), 0);
    assert_int_equal(sb_encoder_set_adapter(e2, c.lora, err), 0);
    for (int k = 0; k < NT; k++)
        assert_int_equal(sb_encoder_embed(e2, SB_EMBED_QUERY, texts[k], strlen(texts[k]), two[k], NULL, err), 0);
    assert_memory_equal(two, adapted, sizeof two);
    sb_encoder_free(e2);
    sb_lora small = *c.lora;
    small.n_layer = 1;
    assert_int_equal(sb_encoder_set_adapter(c.e, &small, err), SB_EINVAL);
    close_model(&c);
}

/* Trained norms travel in the file and are applied at inference: within
 * rounding of the trainer's vectors, and not those of the same adapter
 * without its norms; fresh copies of the base's change no bit. */
static void test_adapter_norms_at_inference(void **state) {
    (void)state;
    model_ctx c;
    char err[256] = "", path[256];
    float plain[NT][64], got[NT][64], bare[NT][64], train[64];
    open_model(&c, 1);
    embed_all(&c, plain);
    assert_int_equal(sb_encoder_adapter_add_norms(c.e, c.lora, err), 0);
    assert_int_equal(sb_encoder_set_adapter(c.e, c.lora, err), 0);
    embed_all(&c, got);
    assert_memory_equal(plain, got, sizeof plain);
    close_model(&c);
    open_model_norms(&c, 1);
    temp_path(path, sizeof path, "n.gguf");
    assert_int_equal(sb_lora_save(c.lora, path, err), 0);
    sb_lora *back = NULL;
    assert_int_equal(sb_lora_load(path, 2, 64, 128, &back, err), 0);
    unlink(path);
    assert_null(sb_lora_norm_get(back, 0, SB_LORA_LN_ATTN));
    for (int k = 0; k < SB_LORA_N_NORMS; k++)
        assert_memory_equal(sb_lora_norm_get(back, 1, (sb_lora_norm_which)k)->w,
                            sb_lora_norm_get(c.lora, 1, (sb_lora_norm_which)k)->w, 2 * 64 * sizeof(float));
    assert_int_equal(sb_encoder_set_adapter(c.e, back, err), 0);
    embed_all(&c, got);
    sb_lora without = *back;
    sb_lora_norm none[2 * SB_LORA_N_NORMS] = { { 0 } };
    without.norms = none;
    assert_int_equal(sb_encoder_set_adapter(c.e, &without, err), 0);
    embed_all(&c, bare);
    for (int k = 0; k < NT; k++) {
        assert_int_equal(sb_enc_train_embed(c.t, c.ids[k], (int)c.n[k], train, err), 0);
        const double cos_train = dot(train, got[k], 64), cos_bare = dot(got[k], bare[k], 64);
        print_message("%s: trainer to inference %.6f, without the norms %.4f\n", texts[k], cos_train, cos_bare);
        assert_true(cos_train > 0.999 && cos_bare < 0.999);
    }
    sb_lora_free(back);
    close_model(&c);
}

static void test_adapter_file_round_trip(void **state) {
    (void)state;
    model_ctx c;
    char err[256] = "", path[256];
    float before[NT][64], after[NT][64];
    open_model(&c, 1);
    randomize_b(c.lora, 0.3f);
    temp_path(path, sizeof path, "a.gguf");
    assert_int_equal(sb_lora_save(c.lora, path, err), 0);
    sb_lora *back = NULL;
    assert_int_equal(sb_lora_load(path, 2, 64, 128, &back, err), 0);
    assert_int_equal(back->rank, 4);
    assert_true(back->alpha == 8.0f);
    assert_null(sb_lora_get(back, 0, SB_LORA_Q));
    for (int w = 0; w < SB_LORA_N_MATS; w++) {
        const sb_lora_mat *m = sb_lora_get(c.lora, 1, (sb_lora_which)w), *m2 = sb_lora_get(back, 1, (sb_lora_which)w);
        assert_non_null(m2);
        assert_memory_equal(m->a, m2->a, (size_t)4 * m->in * sizeof(float));
        assert_memory_equal(m->b, m2->b, (size_t)4 * m->out * sizeof(float));
    }
    assert_int_equal(sb_encoder_set_adapter(c.e, c.lora, err), 0);
    embed_all(&c, before);
    assert_int_equal(sb_encoder_set_adapter(c.e, back, err), 0);
    embed_all(&c, after);
    assert_memory_equal(before, after, sizeof before);
    /* the wrong model's shape, and a file that is not an adapter */
    sb_lora *bad = NULL;
    assert_int_equal(sb_lora_load(path, 2, 32, 128, &bad, err), SB_EFORMAT);
    assert_non_null(strstr(err, "attn_q.weight.lora_a"));
    assert_int_equal(sb_lora_load(MODEL, 2, 64, 128, &bad, err), SB_EFORMAT);
    assert_non_null(strstr(err, "general.type"));
    assert_null(bad);
    unlink(path);
    sb_lora_free(back);
    close_model(&c);
}

/* ---- hand-made adapter files that must be refused ---- */

typedef struct { const char *name; int64_t ne0, ne1; int type; float value; } bad_tensor;

static void write_adapter(const char *path, int with_alpha, const bad_tensor *ts, int n) {
    char err[256] = "";
    sb_gguf_writer *w;
    uint8_t *header;
    size_t hl;
    sb_outfile *of;
    const float alpha = 8;
    assert_int_equal(sb_gguf_writer_new(&w), 0);
    sb_gguf_writer_set_str(w, "general.architecture", "bert");
    sb_gguf_writer_set_str(w, "general.type", "adapter");
    sb_gguf_writer_set_str(w, "adapter.type", "lora");
    if (with_alpha) sb_gguf_writer_set_raw(w, "adapter.lora.alpha", SB_GGUF_F32, &alpha, sizeof alpha);
    for (int i = 0; i < n; i++) {
        const int64_t ne[2] = { ts[i].ne0, ts[i].ne1 };
        assert_int_equal(sb_gguf_writer_add_tensor(w, ts[i].name, strlen(ts[i].name), 2, ne, (uint32_t)ts[i].type, err), 0);
    }
    assert_int_equal(sb_gguf_writer_header(w, &header, &hl, err), 0);
    assert_int_equal(sb_outfile_open(path, &of, err), 0);
    assert_int_equal(sb_outfile_write(of, header, hl, err), 0);
    for (int i = 0; i < n; i++) {
        const uint64_t end = (i + 1 < n ? sb_gguf_writer_tensor_offset(w, (size_t)i + 1) : sb_gguf_writer_data_size(w)) + hl;
        const size_t count = (size_t)(ts[i].ne0 * ts[i].ne1);
        for (size_t k = 0; k < count && ts[i].type == SB_TYPE_F32; k++)
            assert_int_equal(sb_outfile_write(of, &ts[i].value, sizeof(float), err), 0);
        assert_int_equal(sb_outfile_write_zeros(of, (size_t)(end - sb_outfile_offset(of)), err), 0);
    }
    assert_int_equal(sb_outfile_commit(of, err), 0);
    sb_free(header);
    sb_gguf_writer_free(w);
}

static void test_bad_adapter_files(void **state) {
    (void)state;
    char path[256], err[256];
    temp_path(path, sizeof path, "bad.gguf");
    const bad_tensor good_a = { "blk.1.ffn_up.weight.lora_a", 64, 4, SB_TYPE_F32, 0.5f },
                     good_b = { "blk.1.ffn_up.weight.lora_b", 4, 128, SB_TYPE_F32, 0.5f };
    const struct { bad_tensor t[2]; int n, alpha; const char *why; } cases[] = {
        { { good_a, good_b }, 2, 0, "adapter.lora.alpha" },
        { { good_a }, 1, 1, "LoRA pair for 'blk.1.ffn_up.weight' is missing one half" },
        { { good_a, { "blk.1.ffn_up.weight.lora_b", 2, 128, SB_TYPE_F32, 0.5f } }, 2, 1, "has rank 2, others 4" },
        { { good_a, { "blk.1.ffn_up.weight.lora_b", 4, 128, SB_TYPE_F16, 0 } }, 2, 1, "must be F32 [4, 128]" },
        { { good_a, { "blk.1.ffn_up.weight.lora_b", 4, 64, SB_TYPE_F32, 0.5f } }, 2, 1, "must be F32 [4, 128]" },
        { { good_a, { "blk.1.ffn_up.weight.lora_b", 4, 128, SB_TYPE_F32, NAN } }, 2, 1, "non-finite value at element 0" },
        { { good_a, { "blk.1.attn_norm.weight.lora_b", 4, 64, SB_TYPE_F32, 0 } }, 2, 1, "is neither a LoRA half" },
        { { good_a, { "blk.2.ffn_up.weight.lora_b", 4, 128, SB_TYPE_F32, 0 } }, 2, 1, "of a layer 0..1 matrix" },
        { { good_a, { "sb.blk.1.attn_output_norm.weight", 64, 1, SB_TYPE_F32, 1 } }, 2, 1, "must be F32 [64, 2]" },
        { { good_a, { "sb.blk.1.layer_output_norm.weight", 64, 2, SB_TYPE_F32, NAN } }, 2, 1, "non-finite value" },
        { { good_a, { "sb.blk.1.attn_norm.weight", 64, 2, SB_TYPE_F32, 1 } }, 2, 1, "nor a trained norm" },
        { { good_a, { "blk.1.ffn_up.weight.lora_c", 4, 128, SB_TYPE_F32, 0 } }, 2, 1, "is neither a LoRA half" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_lora *l = NULL;
        write_adapter(path, cases[i].alpha, cases[i].t, cases[i].n);
        err[0] = 0;
        assert_int_equal(sb_lora_load(path, 2, 64, 128, &l, err), SB_EFORMAT);
        assert_null(l);
        print_message("%s\n", err);
        assert_non_null(strstr(err, cases[i].why));
        assert_non_null(strstr(err, path));
    }
    sb_lora *l = NULL;                  /* and the good pair alone loads */
    const bad_tensor good[2] = { good_a, good_b };
    write_adapter(path, 1, good, 2);
    assert_int_equal(sb_lora_load(path, 2, 64, 128, &l, err), 0);
    assert_non_null(sb_lora_get(l, 1, SB_LORA_UP));
    assert_null(sb_lora_get(l, 1, SB_LORA_DOWN));
    assert_true(l->rank == 4 && sb_lora_get(l, 1, SB_LORA_UP)->b[511] == 0.5f);
    sb_lora_free(l);
    unlink(path);
}

/* Pull each text's vector towards a fixed target; returns the last loss. */
static double train(model_ctx *c, int steps, double *first) {
    const sb_adamw_params p = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                                .warmup_steps = 3, .total_steps = steps };
    double loss = 0;
    for (int s = 0; s < steps; s++) {
        loss = -model_loss(c);
        if (s == 0) *first = loss;
        for (int k = 0; k < NT; k++)
            for (int i = 0; i < 64; i++) c->r[k][i] = -c->r[k][i];     /* d(-r·v)/dv */
        model_grad(c);
        for (int k = 0; k < NT; k++)
            for (int i = 0; i < 64; i++) c->r[k][i] = -c->r[k][i];
        sb_adamw_step(c->t, &p);
    }
    return -model_loss(c);
}

static void test_adamw_learns_deterministically(void **state) {
    (void)state;
    model_ctx a, b;
    double first_a, first_b;
    rng = 7;
    open_model(&a, 2);
    rng = 7;
    open_model_threads(&b, 2, 2);       /* the same bits on 2 threads */
    const double last_a = train(&a, 25, &first_a), last_b = train(&b, 25, &first_b);
    print_message("loss %.4f -> %.4f\n", first_a, last_a);
    assert_true(last_a < first_a - 0.5);
    assert_true(last_a == last_b);
    for (int w = 0; w < SB_LORA_N_MATS; w++) {
        const sb_lora_mat *ma = sb_lora_get(a.lora, 1, (sb_lora_which)w), *mb = sb_lora_get(b.lora, 1, (sb_lora_which)w);
        assert_memory_equal(ma->b, mb->b, (size_t)4 * ma->out * sizeof(float));
    }
    const sb_adamw_params p = { .lr = 1.0f, .warmup_steps = 4, .total_steps = 8 };
    assert_true(sb_adamw_lr(&p, 2) == 0.5f && sb_adamw_lr(&p, 4) == 1.0f && sb_adamw_lr(&p, 8) < 1e-6f);
    close_model(&a);
    close_model(&b);
}

static int convert_model(void **state) {
    (void)state;
    char err[256] = "";
    temp_path(MODEL, sizeof MODEL, "tiny-q8_0.gguf");
    if (sb_e5_convert(E5S1, MODEL, SB_TYPE_Q8_0, err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int remove_model(void **state) {
    (void)state;
    unlink(MODEL);
    return 0;
}

/* The training step on a toy labelled set: greetings against Chinese
 * service words. With 3 positives among 7 others, the loss cannot go below
 * log 3 (all positives equal, negatives far off); it must get close. */
static void test_train_step_learns_labels(void **state) {
    (void)state;
    static const char *const toy[] = { "hello world", "the world", "hello", "world hello",
                                       "社保卡办理", "公积金", "办理社保", "公积金办理" };
    const int labels[8] = { 0, 0, 0, 0, 1, 1, 1, 1 };
    model_ctx c;
    char err[256];
    int32_t *ids[8];
    int n[8];
    open_model(&c, 2);
    for (int i = 0; i < 8; i++) {
        size_t len;
        assert_int_equal(sb_encoder_tokenize(c.e, SB_EMBED_QUERY, toy[i], strlen(toy[i]), &ids[i], &len, err), 0);
        n[i] = (int)len;
    }
    const sb_adamw_params p = { .lr = 5e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                                .warmup_steps = 2, .total_steps = 0 };
    double first = 0, loss = 0;
    for (int s = 0; s < 20; s++) {
        assert_int_equal(sb_enc_train_step(c.t, (const int32_t *const *)ids, n, labels, 8, 0.1f, &p, &loss, err), 0);
        if (s == 0) first = loss;
    }
    print_message("supervised contrastive loss %.4f -> %.4f\n", first, loss);
    assert_true(first > log(3.0) + 0.5 && loss < log(3.0) + 0.02);
    n[3] = 99;
    assert_int_equal(sb_enc_train_step(c.t, (const int32_t *const *)ids, n, labels, 8, 0.1f, &p, &loss, err), SB_EINVAL);
    assert_non_null(strstr(err, "text 3"));
    for (int i = 0; i < 8; i++) sb_free(ids[i]);
    close_model(&c);
}

/* The frozen layers' states (sb_enc_train_prefix) reused: embedding,
 * gradients and a training step from them are the bits of the same from
 * the ids. Fast mode (SIMD F32 products): vectors within rounding of the
 * reference (cosine > 0.99999), gradients within 1e-4 normwise, and its
 * training run the same bits on 1 thread as on 2. */
static void train_fast(int threads, int top_n, sb_lora **out) {
    model_ctx c;
    char err[256];
    open_model_threads(&c, top_n, threads);
    assert_int_equal(sb_enc_trainer_set_fast(c.t, 1, err), 0);
    float *h0[NT];
    int n[NT];
    const int labels[NT] = { 0, 0, 1, 1 };
    for (int k = 0; k < NT; k++) {
        n[k] = (int)c.n[k];
        h0[k] = sb_malloc(c.n[k] * 64 * sizeof(float));
        assert_int_equal(sb_enc_train_prefix(c.t, c.ids[k], n[k], h0[k], err), 0);
    }
    const sb_adamw_params p = { .lr = 5e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f };
    for (int s = 0; s < 5; s++)
        assert_int_equal(sb_enc_train_step_from(c.t, (const float *const *)h0, n, labels, NT, 0.1f, &p, NULL, err), 0);
    for (int k = 0; k < NT; k++) sb_free(h0[k]);
    *out = c.lora;
    c.lora = NULL;
    close_model(&c);
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) d += (a[i] - b[i]) * (double)(a[i] - b[i]), na += a[i] * (double)a[i], nb += b[i] * (double)b[i];
    return sqrt(d) / fmax(sqrt(fmax(na, nb)), 1e-30);
}

static void test_prefix_and_fast_mode(void **state) {
    (void)state;
    model_ctx c;
    char err[256];
    open_model(&c, 1);
    randomize_b(c.lora, 0.3f);
    float ref[NT][64], fast[NT][64], v[64], h0[16 * 64];
    float *ga, *gb, ref_ga[4 * 64], ref_gb[4 * 64];     /* layer 1's Q: every W of the layer is behind its gradient */
    for (int k = 0; k < NT; k++) {
        const int n = (int)c.n[k];
        assert_int_equal(sb_enc_train_embed(c.t, c.ids[k], n, ref[k], err), 0);
        assert_int_equal(sb_enc_train_prefix(c.t, c.ids[k], n, h0, err), 0);
        assert_int_equal(sb_enc_train_embed_from(c.t, h0, n, v, err), 0);
        assert_memory_equal(v, ref[k], sizeof v);
        sb_enc_train_zero_grad(c.t);
        assert_int_equal(sb_enc_train_backward(c.t, c.ids[k], n, c.r[k], err), 0);
        sb_enc_train_grad(c.t, 1, SB_LORA_Q, &ga, &gb);
        memcpy(ref_ga, ga, sizeof ref_ga), memcpy(ref_gb, gb, sizeof ref_gb);
        sb_enc_train_zero_grad(c.t);
        assert_int_equal(sb_enc_train_backward_from(c.t, h0, n, c.r[k], err), 0);
        assert_memory_equal(ga, ref_ga, sizeof ref_ga);
        assert_memory_equal(gb, ref_gb, sizeof ref_gb);
    }
    assert_int_equal(sb_enc_trainer_set_fast(c.t, 1, err), 0);
    for (int k = 0; k < NT; k++) {
        const int n = (int)c.n[k];
        assert_int_equal(sb_enc_train_embed(c.t, c.ids[k], n, fast[k], err), 0);
        double dot = 0;
        for (int i = 0; i < 64; i++) dot += fast[k][i] * (double)ref[k][i];
        if (!(dot > 0.99999)) fail_msg("text %d: fast mode's cosine to the reference %.7f", k, dot);
        sb_enc_train_zero_grad(c.t);
        assert_int_equal(sb_enc_train_backward(c.t, c.ids[k], n, c.r[k], err), 0);
        sb_enc_train_grad(c.t, 1, SB_LORA_Q, &ga, &gb);
    }
    /* the last text's gradients, fast against the reference */
    if (!(rel_diff(ga, ref_ga, 4 * 64) < 1e-4 && rel_diff(gb, ref_gb, 4 * 64) < 1e-4))
        fail_msg("fast gradients off by %.2e, %.2e", rel_diff(ga, ref_ga, 4 * 64), rel_diff(gb, ref_gb, 4 * 64));
    close_model(&c);
    sb_lora *one, *two;
    train_fast(1, 2, &one);
    train_fast(2, 2, &two);
    for (int il = 0; il < 2; il++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            const sb_lora_mat *a = sb_lora_get(one, il, (sb_lora_which)w), *b = sb_lora_get(two, il, (sb_lora_which)w);
            assert_memory_equal(a->a, b->a, (size_t)one->rank * (size_t)a->in * sizeof(float));
            assert_memory_equal(a->b, b->b, (size_t)one->rank * (size_t)a->out * sizeof(float));
        }
    float nb = 0;
    const sb_lora_mat *m = sb_lora_get(one, 1, SB_LORA_Q);
    for (int i = 0; i < 64 * one->rank; i++) nb += fabsf(m->b[i]);
    assert_true(nb > 0);                /* it trained */
    sb_lora_free(one);
    sb_lora_free(two);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_linear_lora),
        cmocka_unit_test(test_pool_l2),
        cmocka_unit_test(test_supcon),
        cmocka_unit_test(test_encoder_grad_all_layers),
        cmocka_unit_test(test_encoder_grad_top_layer),
        cmocka_unit_test(test_encoder_grad_norms),
        cmocka_unit_test(test_adapter_norms_at_inference),
        cmocka_unit_test(test_fresh_adapter_is_identity),
        cmocka_unit_test(test_adapter_file_round_trip),
        cmocka_unit_test(test_bad_adapter_files),
        cmocka_unit_test(test_adamw_learns_deterministically),
        cmocka_unit_test(test_train_step_learns_labels),
        cmocka_unit_test(test_prefix_and_fast_mode),
    };
    return cmocka_run_group_tests_name("encoder_grad", tests, convert_model, remove_model);
}
