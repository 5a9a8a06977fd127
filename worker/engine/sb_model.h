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
#include "worker/gguf/sb_gguf.h"

enum sb_arch { SB_ARCH_LLAMA, SB_ARCH_PHI3, SB_ARCH_QWEN2, SB_ARCH_COUNT };

struct sb_pool;
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
    const struct sb_kq_kernels *kernels;   /* NULL: sb_kq_engine_kernels(level), the machine's
                                       profile applied; else these (switchboard tune's
                                       candidates), when their level is one the CPU runs */
    int n_batch;            /* max tokens per internal forward pass; 0 = 512 */
    int n_seq;              /* sequences the context can hold at once; 0 = 1 */
    int kv_blocks;          /* KV pool size in blocks of SB_KV_BLOCK positions, shared by
                               all sequences; 0 = n_ctx / SB_KV_BLOCK (rounded up) */
} sb_ctx_params;

/* Positions per KV block: the unit of the pool, of sharing and of admission. */
#define SB_KV_BLOCK 16

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

/* Per-op time of the forward pass (switchboard bench --profile): ns[op] sums
 * the wall time of every step of that kind over all layers and passes since
 * the struct was zeroed; time the pool's calling thread spends waiting for
 * the others to finish a run goes to SB_OP_BARRIER instead of the step.
 * SB_OP_SAMPLE is the caller's to fill. `last`, `last_wait` and `wait` are
 * the context's bookkeeping. */
enum {
    SB_OP_EMBED, SB_OP_ATTN_NORM, SB_OP_ACT_QUANT, SB_OP_QKV, SB_OP_ROPE, SB_OP_KV_STORE, SB_OP_ATTN, SB_OP_WO,
    SB_OP_RESIDUAL, SB_OP_FFN_NORM, SB_OP_GATE_UP, SB_OP_SWIGLU, SB_OP_DOWN, SB_OP_OUT_NORM, SB_OP_OUTPUT,
    SB_OP_SAMPLE, SB_OP_BARRIER, SB_OP_COUNT
};
typedef struct {
    uint64_t ns[SB_OP_COUNT];
    uint64_t last, last_wait, wait;
} sb_prof;
const char *sb_op_name(int op);
/* Start (p non-NULL) or stop (NULL) accumulating into p. Off costs one
 * pointer test per step. */
void sb_ctx_set_profile(sb_ctx *c, sb_prof *p);

int  sb_ctx_new(const sb_model *m, const sb_ctx_params *p, sb_ctx **out, char *err);
void sb_ctx_free(sb_ctx *c);
int  sb_ctx_n_ctx(const sb_ctx *c);
/* The context's thread pool, for other work between passes (grammar masks). */
struct sb_pool *sb_ctx_pool(sb_ctx *c);
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
/* sb_ctx_eval with all logits, for speculative verification, on sequence
 * seq (in use): one pass of n <= the batch size tokens, all rows of
 * logits, the pool checked first (SB_EBUSY, nothing changed). exact:
 * through the one-token kernels (vec_dot/gemv8, never the tiled gemm), so
 * each row is bit for bit the row that decoding the tokens one at a time
 * gives, at about n times a token's compute; otherwise the tiled kernels,
 * which sum in another order (rows agree to ~1e-6 relative;
 * docs/SPECULATIVE.md). */
int sb_ctx_seq_verify(sb_ctx *c, int seq, const int32_t *tokens, int n, float *logits, int exact, char *err);

/* ---- several sequences in one context (continuous batching) ----------------
 *
 * The KV cache is one pool of blocks of SB_KV_BLOCK positions (all layers'
 * K and V of those positions), handed to sequences as they grow. Sequence 0
 * exists from sb_ctx_new and is the one sb_ctx_eval/n_past/truncate act on,
 * so single-sequence callers are unchanged. Every sequence may grow to n_ctx
 * positions; the pool, not a per-sequence split, bounds the total.
 *
 * Blocks are reference-counted: sb_ctx_seq_fork shares a sequence's whole
 * blocks read-only with another (a stage's fixed prompt is evaluated once);
 * a shared block is never written, the partial last block is copied. */

/* A free sequence id (its n_past 0). SB_EBUSY when all n_seq are in use. */
int  sb_ctx_seq_new(sb_ctx *c, int *seq, char *err);
/* seq will hold up to `positions`: its blocks come from a free run with
 * room for them all when there is one (consecutive blocks are read without
 * a gather). A hint: a sequence may still grow past it, up to n_ctx. */
void sb_ctx_seq_expect(sb_ctx *c, int seq, int positions);
/* Release seq and its blocks (a shared block when its last user goes).
 * Sequence 0 is never released, only emptied. */
void sb_ctx_seq_free(sb_ctx *c, int seq);
/* -1 when seq is not in use. */
int  sb_ctx_seq_n_past(const sb_ctx *c, int seq);
/* Forget seq's positions n.. (blocks no longer needed go back to the pool). */
void sb_ctx_seq_truncate(sb_ctx *c, int seq, int n);
/* dst (empty) becomes src's first n positions: whole blocks shared, the
 * partial last block copied. SB_EBUSY when the copy finds no free block. */
int  sb_ctx_seq_fork(sb_ctx *c, int dst, int src, int n, char *err);
int  sb_ctx_kv_blocks_total(const sb_ctx *c);
int  sb_ctx_kv_blocks_free(const sb_ctx *c);
/* Blocks appending n_new positions to seq would take from the pool. */
int  sb_ctx_kv_blocks_needed(const sb_ctx *c, int seq, int n_new);

/* One part of a multi-sequence pass: tokens appended to `seq` at its n_past. */
typedef struct {
    int seq;
    const int32_t *tokens;
    int n;
    float *logits;          /* NULL, the last token's row, or n rows when all_logits */
    int all_logits;
} sb_seq_part;

/* One forward pass over every part (their tokens together ≤ the batch size,
 * which may reach n_seq × n_ctx; one part per sequence, each in use; at
 * most 32 parts of several tokens; SB_EINVAL otherwise). Each part's numbers are those it gets evaluated
 * alone: one-token parts through the decode kernels, longer parts through
 * the prompt kernels, so what else is in the batch never changes a
 * sequence's logits. SB_EBUSY when the pool lacks the blocks (nothing is
 * changed); SB_ERANGE when a sequence would pass n_ctx. */
int  sb_ctx_eval_parts(sb_ctx *c, const sb_seq_part *parts, int n_parts, char *err);

#endif
