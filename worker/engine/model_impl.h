/* model_impl.h - private to model.c and forward.c: the loaded model's layout.
 * Not a public API (that is sb_model.h); like SQLite's sqliteInt.h it lets
 * two files of one module share a struct without exposing it. */
#ifndef SB_MODEL_IMPL_H
#define SB_MODEL_IMPL_H

#include "worker/engine/sb_model.h"
#include "worker/kernels/sb_kq.h"

/* A weight matrix as the kernels see it: rows of ne0 elements of `type`. */
typedef struct {
    const void *data;           /* inside the mapping, or x8_buf; NULL if absent */
    int         type;
    int64_t     ne0, ne1;       /* columns (contiguous), rows */
    size_t      row_bytes;
    void       *x8_buf;         /* non-NULL: data is this anonymous copy in the x8 layout (sb_kq_x8_pack) */
} sb_weight;

/* Tensor `name` of g as an [ne0 x ne1] weight (ne1 > 1 needs a dot
 * kernel for its type); absent and not required: w->data is NULL. Errors
 * name the tensor and the shape or type that is wrong. Shared with the
 * encoder (encoder.c). */
int sb_weight_find(const sb_gguf *g, const char *name, int64_t ne0, int64_t ne1, int required,
                   sb_weight *w, char *err);
/* A 1-D tensor of n elements, converted to an sb_aligned_alloc'ed F32 copy
 * (*out NULL when absent and not required); non-finite values are refused. */
int sb_weight_load_vector(const sb_gguf *g, const char *name, int64_t n, int required, float **out, char *err);

typedef struct {
    float     *attn_norm;       /* [n_embd], converted to F32 at load */
    float     *ffn_norm;
    sb_weight  wq, wk, wv;      /* llama, qwen2 */
    sb_weight  wqkv;            /* phi3: rows = q | k | v */
    float     *bq, *bk, *bv;    /* qwen2 biases, NULL elsewhere */
    sb_weight  wo;
    sb_weight  w_gate, w_up;    /* phi3: w_up rows = gate | up, w_gate absent */
    sb_weight  w_down;
} sb_layer;

struct sb_model {
    sb_gguf    *gguf;
    sb_hparams  hp;
    sb_weight   tok_embd;
    float      *output_norm;
    sb_weight   output;         /* == tok_embd when tied */
    float      *rope_freqs;     /* Llama-3.1 style per-dimension factors, or NULL */
    sb_layer   *layers;
    size_t      weight_bytes;
    size_t      x8_row_bytes;   /* longest row of a weight model.c re-laid in the x8 layout; 0: none */
};

#endif
