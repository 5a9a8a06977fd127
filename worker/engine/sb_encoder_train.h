/* sb_encoder_train.h - training LoRA adapters (sb_lora.h) of an encoder
 * (sb_encoder.h): an F32 forward pass that keeps its activations, the
 * backward pass, and AdamW.
 *
 * Where the adapter carries its own LayerNorms (sb_lora.h; added by
 * sb_encoder_adapter_add_norms), the forward uses them, as sb_encoder's
 * does, and they are trained too: their weight and bias get gradients
 * and AdamW steps (without weight decay) beside A and B.
 *
 * The base weights stay frozen: the trainer dequantizes each layer's six
 * matrices once into F32 (4·(4·H² + 2·H·FF)·layers bytes: 81 MiB for
 * multilingual-e5-small, 256 KiB for the test model), and gradients flow
 * only to the adapter's A and B. Backpropagation stops at the input of the
 * lowest adapted layer: the embeddings and the layers below get none.
 *
 * The training forward is BERT's, as sb_encoder's, but all in F32 (no Q8_0
 * activations, no F16 K/V): its vectors are within rounding of the
 * inference ones, not bit-identical. One text is one window of at most
 * max_tokens tokens (<s> … </s>), mean-pooled and L2-normalised. The
 * products run on the encoder's thread pool split by token rows, and the
 * sums over rows (the adapter's gradients) on one thread in row order, so
 * a run's bits depend on its inputs and seed, not on the thread count.
 *
 * A batch step: embed every text (sb_enc_train_embed), compute the loss
 * and its gradient d(loss)/d(vector) per text, then sb_enc_train_backward
 * each text (it runs the forward again, keeping activations for one text
 * at a time, so memory does not grow with the batch), then sb_adamw_step.
 *
 * The op-level passes are public so the gradient checks can test each one.
 */
#ifndef SB_ENCODER_TRAIN_H
#define SB_ENCODER_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_lora.h"

typedef struct sb_enc_trainer sb_enc_trainer;

/* lora must match e's shape and outlive the trainer; max_tokens ≤ n_ctx.
 * The trainer runs on e's thread pool: one caller at a time on e, whether
 * it trains or embeds (as sb_encoder.h says). */
int  sb_enc_trainer_new(const sb_encoder *e, sb_lora *lora, int max_tokens, sb_enc_trainer **out, char *err);
void sb_enc_trainer_free(sb_enc_trainer *t);
/* Fast mode (on = 1): the frozen matrices' products in F32 with the SIMD
 * dot kernels of e's kernel level (sums in F32, in the kernel's order)
 * instead of the reference's double sums; the adapted layers' transposed
 * matrices are kept for the backward (4·(4·H² + 2·H·FF) bytes a layer,
 * 7 MiB on e5-small). About ten times faster; the bits then depend on the
 * kernel level (SB_KERNELS), still not on the thread count. The gradient
 * checks run the reference. */
int  sb_enc_trainer_set_fast(sb_enc_trainer *t, int on, char *err);

/* vec[0..H) = the L2-normalised vector of ids[0..n) (n ≤ max_tokens, ids
 * as sb_encoder_tokenize gives them). */
int  sb_enc_train_embed(sb_enc_trainer *t, const int32_t *ids, int n, float *vec, char *err);
/* The layers below the adapter are frozen, so a text's hidden states
 * entering the lowest adapted layer never change: a caller that trains on
 * the same texts for many steps computes them once (h0, n rows of the
 * model's dim) and passes them to the _from variants, which run only the
 * adapted layers. The results are the same bits as from the ids. */
int  sb_enc_train_prefix(sb_enc_trainer *t, const int32_t *ids, int n, float *h0, char *err);
int  sb_enc_train_embed_from(sb_enc_trainer *t, const float *h0, int n, float *vec, char *err);
int  sb_enc_train_backward_from(sb_enc_trainer *t, const float *h0, int n, const float *dvec, char *err);
/* Adds d(loss)/d(A), d(loss)/d(B) for d(loss)/d(vec) = dvec into the
 * gradients (sb_enc_train_grad). */
int  sb_enc_train_backward(sb_enc_trainer *t, const int32_t *ids, int n, const float *dvec, char *err);
void sb_enc_train_zero_grad(sb_enc_trainer *t);
/* The gradient of adapter matrix m (same layout as m->a / m->b). */
void sb_enc_train_grad(sb_enc_trainer *t, int layer, sb_lora_which w, float **ga, float **gb);
/* The gradient of the adapter's norm k of layer (its w and b), NULL if
 * the adapter has not that norm. */
void sb_enc_train_norm_grad(sb_enc_trainer *t, int layer, sb_lora_norm_which k, float **gw, float **gb);

/* ---- AdamW ---------------------------------------------------------------- */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int   warmup_steps;         /* lr rises linearly over these steps */
    int   total_steps;          /* > 0: cosine decay to 0 after warm-up; 0: constant */
} sb_adamw_params;

/* The learning rate of step (1-based) under p's schedule. */
float sb_adamw_lr(const sb_adamw_params *p, int step);
/* One AdamW step over every adapter matrix with the trainer's gradients
 * (decoupled weight decay, bias-corrected moments), and over the
 * adapter's norms with no weight decay. */
void sb_adamw_step(sb_enc_trainer *t, const sb_adamw_params *p);

/* ---- a training step ------------------------------------------------------ */
/* One step on a batch of labelled texts: embed all, the supervised in-batch
 * contrastive loss (sb_op_supcon) at temperature tau, gradients, AdamW.
 * *loss (may be NULL) = the batch's loss before the step. Texts whose label
 * no other text of the batch shares are negatives only. */
int sb_enc_train_step(sb_enc_trainer *t, const int32_t *const *ids, const int *n, const int *labels, int batch,
                      float tau, const sb_adamw_params *p, double *loss, char *err);

/* The same from the texts' prefix states (sb_enc_train_prefix). */
int sb_enc_train_step_from(sb_enc_trainer *t, const float *const *h0, const int *n, const int *labels, int batch,
                           float tau, const sb_adamw_params *p, double *loss, char *err);

/* The same with n_fixed constant vectors in the loss beside the batch's
 * texts (fixed[n_fixed][H], labels fixed_labels): anchors, positives and
 * negatives like the texts, but no gradient flows to them - a retrieval
 * base's passages, embedded once, against which questions are trained
 * (`kb adapt`). batch ≥ 1, batch + n_fixed ≥ 2. */
int sb_enc_train_step_fixed(sb_enc_trainer *t, const float *const *h0, const int *n, const int *labels, int batch,
                            const float *fixed, const int *fixed_labels, int n_fixed, float tau,
                            const sb_adamw_params *p, double *loss, char *err);

/* ---- the training loop ---------------------------------------------------- */
typedef struct {
    const float *h0;            /* the text's prefix states (sb_enc_train_prefix) */
    int n, label;
} sb_enc_text;

typedef struct {
    int steps, batch;
    int warmup;                 /* < 0: steps / 10 */
    double lr, weight_decay, tau;
    uint64_t seed;              /* the batches' order */
    const float *fixed;         /* sb_enc_train_step_fixed's constant vectors (NULL, 0: none) */
    const int *fixed_labels;
    int n_fixed;
    FILE *progress;             /* NULL: quiet; else a line per step: loss, lr, elapsed, ETA */
    const char *prefix;         /* the progress lines' */
} sb_enc_fit_opts;

/* `steps` AdamW steps (cosine schedule after a linear warm-up) of the
 * supervised contrastive loss over texts[0..m): each batch is the next
 * slice of a per-epoch shuffle of the texts (seeded), the last slice of an
 * epoch possibly short, plus the fixed vectors. Deterministic for the
 * texts, options and seed, whatever the thread count. route train and kb
 * adapt both train through it. */
int sb_enc_train_fit(sb_enc_trainer *t, const sb_enc_text *texts, size_t m, const sb_enc_fit_opts *o, char *err);

/* ---- ops (rows are tokens) ------------------------------------------------ */
/* y = LN(x)·w + b per row of H; keeps xhat and rstd for the backward. */
void sb_op_ln_forward(const float *x, const float *w, const float *b, int n, int H, float eps, float *y, float *xhat,
                      float *rstd);
/* dx = ∂/∂x given dy; dw, db (may be NULL) accumulate. */
void sb_op_ln_backward(const float *dy, const float *xhat, const float *rstd, const float *w, int n, int H, float *dx,
                       float *dw, float *db);
float sb_op_gelu(float u);                              /* 0.5·u·(1 + erf(u/√2)) */
float sb_op_gelu_grad(float u);                         /* its derivative */
/* Per head: P = softmax(q·kᵀ/√hd) over the n keys (no mask: a window has
 * no padding), ctx = P·v. q, k, v, ctx: [n][H]; P: [NH][n][n]. */
void sb_op_attn_forward(const float *q, const float *k, const float *v, int n, int H, int NH, float *P, float *ctx);
/* dq, dk, dv (overwritten) from dctx. */
void sb_op_attn_backward(const float *dctx, const float *q, const float *k, const float *v, const float *P, int n, int H,
                         int NH, float *dq, float *dk, float *dv);
/* y = x·Wᵀ + scale·(x·Aᵀ)·Bᵀ + bias; W [out][in] F32; m may be NULL (no
 * adapter); ax [n][rank] keeps scale·x·Aᵀ (NULL when m is). W NULL: y
 * already holds x·Wᵀ (computed by a faster kernel), the rest is added. */
void sb_op_linear_forward(const float *x, int n, int in, int out, const float *W, const float *bias,
                          const sb_lora_mat *m, int rank, float scale, float *ax, float *y);
/* dx (overwritten) and, with m, gA, gB (accumulated); each of the three
 * may be NULL (not computed), so rows can be split among threads for dx
 * while one thread sums the gradients over all rows. W NULL: dx already
 * holds dy·W, the adapter's term is added. */
void sb_op_linear_backward(const float *dy, const float *x, int n, int in, int out, const float *W,
                           const sb_lora_mat *m, int rank, float scale, const float *ax, float *dx, float *ga,
                           float *gb);
/* vec = normalize(mean of the n rows); returns the mean's norm. */
float sb_op_pool_forward(const float *x, int n, int H, float *vec);
/* dx (every row the same) from dvec, given vec and the norm. */
void sb_op_pool_backward(const float *dvec, const float *vec, float norm, int n, int H, float *dx);
/* Supervised contrastive loss (Khosla et al., 2020) over the B unit vectors
 * V[B][H]: for each anchor i with positives P(i) (same label, j ≠ i),
 * -1/|P(i)| Σ_p log(exp(v_i·v_p/tau) / Σ_{a≠i} exp(v_i·v_a/tau)), averaged
 * over those anchors (0 if none). dV[B][H] (overwritten) = its gradient. */
double sb_op_supcon(const float *V, const int *labels, int B, int H, float tau, float *dV);

#endif
