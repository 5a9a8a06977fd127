/* encoder_impl.h - the encoder's weights and scratch, shared by the
 * forward pass (encoder.c) and the training passes (encoder_train.c),
 * which read the same frozen weights. Not a public API. */
#ifndef SB_ENCODER_IMPL_H
#define SB_ENCODER_IMPL_H

#include "worker/engine/matmul_impl.h"
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_lora.h"

#define MAX_HEAD_DIM 256        /* BERTs use 64 (e5-small 32); bounds a stack buffer */

typedef struct {
    sb_weight wq, wk, wv, wo, wup, wdown;
    float *bq, *bk, *bv, *bo, *bup, *bdown;
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;       /* attn_output_norm, layer_output_norm */
} enc_layer;

struct sb_encoder {
    sb_gguf  *gguf;
    sb_ugm   *tok;
    int       H, NL, NH, FF, n_ctx, n_vocab;
    float     eps;
    sb_weight tok_embd;
    float    *pos, *type0;                      /* [n_ctx][H], token type 0's row */
    float    *eln_w, *eln_b;
    enc_layer *layers;
    size_t    weight_bytes;
    const sb_kq_traits *kq;
    const sb_kq_vec *vec;                       /* attention kernels, same level as kq */
    sb_pool  *pool;
    sb_mm     mm;
    float    *x, *q, *k, *v, *ctx, *tmp, *mid;  /* n_ctx rows each (mid: FF wide) */
    float    *scores;                           /* [threads][n_ctx] */
    sb_fp16  *kh, *vh;                          /* K and V rounded to F16, [n_ctx][H] */
    float    *qh;                               /* [threads][head dim]: a q head, F16-rounded */
    uint8_t  *embd_rows;                        /* [n_ctx][tok_embd row]: a window's token rows, read from the file */
    const sb_lora *lora;                        /* optional adapter (not owned), NULL = none */
};

#endif
