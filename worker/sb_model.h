/* sb_model.h - transformer models on memory-mapped GGUF weights.
 *
 * sb_model: the weights and hyper-parameters of one GGUF file (read-only,
 * shareable between contexts). sb_ctx: one inference context — KV cache,
 * scratch buffers and a thread pool — that evaluates token batches.
 *
 * Architectures: llama (TinyLlama, Llama-2/3, SmolLM), phi3 (fused attn_qkv
 * and gate+up), qwen2 (Q/K/V biases). Differences between them are data in
 * a per-architecture row, not branches spread through the forward pass.
 */
#ifndef SB_MODEL_H
#define SB_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "sb_gguf.h"

enum sb_arch { SB_ARCH_LLAMA, SB_ARCH_PHI3, SB_ARCH_QWEN2, SB_ARCH_COUNT };

typedef struct {
    int      arch;
    char     arch_name[16];
    int32_t  n_vocab;
    int32_t  n_embd;
    int32_t  n_layer;
    int32_t  n_head;
    int32_t  n_head_kv;
    int32_t  head_dim;      /* n_embd / n_head unless the file says otherwise */
    int32_t  n_ff;
    int32_t  n_rot;         /* rotary dimensions per head */
    int32_t  n_ctx_train;
    int32_t  n_swa;         /* sliding window (0 = none) */
    int      rope_neox;     /* 1: rotate (i, i+n_rot/2) pairs; 0: (2i, 2i+1) */
    float    rope_freq_base;
    float    rope_freq_scale;
    float    rms_eps;
} sb_hparams;

typedef struct sb_model sb_model;
typedef struct sb_ctx sb_ctx;

typedef struct {
    int n_threads;          /* ≥ 1 */
    int n_ctx;              /* KV cache positions; 0 = min(n_ctx_train, 4096) */
    int kv_f32;             /* 0: F16 KV cache (llama.cpp's default), 1: F32 */
    int kq_level;           /* kernel level, -1 = best this CPU allows */
    int n_batch;            /* max tokens per internal forward pass; 0 = 512 */
} sb_ctx_params;

void sb_ctx_params_default(sb_ctx_params *p);

/* Open and map `path`, validate every tensor the architecture needs (name,
 * shape and type), and take ownership of the mapping. */
int  sb_model_load(const char *path, sb_model **out, char *err);
void sb_model_free(sb_model *m);
const sb_hparams *sb_model_hparams(const sb_model *m);
const sb_gguf    *sb_model_gguf(const sb_model *m);
/* Bytes of weights a decode step reads (for bandwidth figures). */
size_t sb_model_weight_bytes(const sb_model *m);
/* One-line description: "llama 2L 256d Q2_K mix, 0.9 MB". */
void sb_model_describe(const sb_model *m, char *buf, size_t cap);

int  sb_ctx_new(const sb_model *m, const sb_ctx_params *p, sb_ctx **out, char *err);
void sb_ctx_free(sb_ctx *c);
int  sb_ctx_n_ctx(const sb_ctx *c);
/* Positions currently held in the KV cache. */
int  sb_ctx_n_past(const sb_ctx *c);
/* Forget KV entries from position n onwards (prefix reuse, rewinds). */
void sb_ctx_truncate(sb_ctx *c, int n);

/* Evaluate tokens[0..n) at positions n_past.. and append them to the KV
 * cache. Logits: if all_logits, n rows of n_vocab are written to `logits`;
 * otherwise one row, that of the last token. logits may be NULL (prefill
 * only). Long inputs are split into n_batch-sized passes internally.
 * Fails with SB_ERANGE if the context would overflow. */
int sb_ctx_eval(sb_ctx *c, const int32_t *tokens, int n, float *logits, int all_logits, char *err);
/* sb_ctx_eval with all logits, for speculative verification (n <= the
 * batch size). exact: through the one-token kernels (vec_dot/gemv8, never
 * the tiled gemm), so each row is bit for bit the row that decoding the
 * tokens one at a time gives, at about n times a token's compute; otherwise
 * the tiled kernels, which sum in another order (rows agree to ~1e-6
 * relative; docs/SPECULATIVE.md). */
int sb_ctx_verify(sb_ctx *c, const int32_t *tokens, int n, float *logits, int exact, char *err);

#endif
