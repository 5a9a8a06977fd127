/* sb_lora.h - LoRA adapters for the encoder: W' = W + (alpha/r)·B·A on the
 * attention Q/K/V/O and FFN up/down matrices of the top N layers, kept
 * in F32 beside the frozen (quantized) base weights.
 *
 * Orientation is llama.cpp's (and PEFT's): for a base matrix of `out` rows
 * of `in` columns, A is r rows of `in` floats (GGUF ne [in, r]) and B is
 * `out` rows of r floats (ne [r, out]); y += (alpha/r)·B·(A·x).
 *
 * A fresh adapter has A uniform in ±1/√in (PEFT's kaiming_uniform_ with
 * a = √5) from a seeded generator, and B = 0, so it changes nothing: an
 * encoder with it gives the same bits as without.
 *
 * Files are GGUF in llama.cpp's adapter conventions: general.type
 * "adapter", general.architecture "bert", adapter.type "lora",
 * adapter.lora.alpha (f32), and F32 tensors "<base>.lora_a" /
 * "<base>.lora_b" for "<base>" = "blk.N.attn_q.weight" etc.
 *
 * An adapter may also replace a layer's two LayerNorms (after attention,
 * after the FFN) with trained ones (`route train --norms`): one F32
 * tensor per norm, "sb.blk.N.attn_output_norm.weight" or
 * "sb.blk.N.layer_output_norm.weight", ne [H, 2]: row 0 the weight
 * (gamma), row 1 the bias (beta), the values themselves, not a change to
 * the base's. The "sb." prefix keeps them apart from every llama.cpp
 * tensor name; llama.cpp's adapter loader skips tensors whose names end
 * in "_norm.weight" (its norm vectors are unimplemented), so it still
 * reads such a file's A/B pairs but ignores the norms: its vectors then
 * differ from ours.
 */
#ifndef SB_LORA_H
#define SB_LORA_H

#include <stdint.h>

#define SB_LORA_MAX_RANK 256

/* The adaptable matrices of a layer, in this order everywhere. */
typedef enum { SB_LORA_Q, SB_LORA_K, SB_LORA_V, SB_LORA_O, SB_LORA_UP, SB_LORA_DOWN, SB_LORA_N_MATS } sb_lora_which;

typedef struct {
    float *a, *b;               /* [r][in], [out][r] */
    int    in, out;
} sb_lora_mat;

/* The LayerNorms of a layer: after attention, after the FFN. */
typedef enum { SB_LORA_LN_ATTN, SB_LORA_LN_FFN, SB_LORA_N_NORMS } sb_lora_norm_which;

typedef struct {
    float *w, *b;               /* [H] each, one allocation: b = w + H */
} sb_lora_norm;

typedef struct sb_lora {
    int    n_layer, H, FF;      /* the base model's shape */
    int    rank;
    float  alpha;
    sb_lora_mat *mats;          /* [n_layer][SB_LORA_N_MATS]; a == NULL: not adapted */
    sb_lora_norm *norms;        /* [n_layer][SB_LORA_N_NORMS]; w == NULL: the base's */
} sb_lora;

/* A fresh adapter for a model of n_layer layers (dim H, FFN FF) on the top
 * `top_n` layers (1..n_layer), rank 1..SB_LORA_MAX_RANK. */
int  sb_lora_new(int n_layer, int H, int FF, int rank, float alpha, int top_n, uint64_t seed, sb_lora **out,
                 char *err);
void sb_lora_free(sb_lora *l);

/* The adapted matrix, or NULL. */
sb_lora_mat *sb_lora_get(const sb_lora *l, int layer, sb_lora_which w);
float sb_lora_scale(const sb_lora *l);           /* alpha / rank */
/* The trained norm, or NULL (the base's is used). */
sb_lora_norm *sb_lora_norm_get(const sb_lora *l, int layer, sb_lora_norm_which k);
/* Replace layer's norm k by a copy of w, b (H floats each). */
int  sb_lora_set_norm(sb_lora *l, int layer, sb_lora_norm_which k, const float *w, const float *b, char *err);
/* The lowest layer with an adapted matrix or norm (n_layer if none). */
int  sb_lora_first_layer(const sb_lora *l);
/* "blk.3.ffn_up.weight": the base tensor a matrix adapts. */
void sb_lora_base_name(int layer, sb_lora_which w, char *buf, size_t cap);

/* y[t] += scale·B·(A·x[t]) for t < n; x rows of m->in, y rows of m->out. */
void sb_lora_apply(const sb_lora_mat *m, int rank, float scale, const float *x, int n, float *y);

/* Write the adapter atomically (sb_outfile). */
int sb_lora_save(const sb_lora *l, const char *path, char *err);
/* Read an adapter for a model of n_layer layers, dim H, FFN FF. Refuses
 * (SB_EFORMAT, naming file and key/tensor) a file that is not a bert LoRA
 * adapter, a tensor not in {Q,K,V,O,up,down} of an existing layer nor one
 * of its norms, a norm not F32 [H, 2], a pair
 * missing one half, a shape that is not the base's, mixed ranks, a
 * non-F32 tensor or a non-finite value. */
int sb_lora_load(const char *path, int n_layer, int H, int FF, sb_lora **out, char *err);

#endif
