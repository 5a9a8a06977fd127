/* kv_impl.h - private to kv.c and forward.c: the KV pool of an inference
 * context (docs/BATCHING.md, "KV pool and multi-sequence passes").
 *
 * Layout: per layer one array of n_blocks·SB_KV_BLOCK position rows, K and V
 * apart: row (b·SB_KV_BLOCK + i) of layer l is position i of block b. A
 * block is thus "all layers' K and V of SB_KV_BLOCK positions", and a run of
 * consecutive block ids is one strided range per layer, which the attention
 * kernels read in one call, exactly as the contiguous cache of one sequence
 * was read before the pool. Allocation prefers the block after a
 * sequence's last one, so a sequence alone is laid out exactly as before;
 * otherwise the lowest free run that holds what the sequence is expected to
 * reach (sb_kv_seq_expect), so the pool's written part stays where the
 * sequences at hand are. A block whose last user goes gives its pages back
 * (madvise): the pool's resident memory is that of the blocks in use.
 *
 * Sharing: ref[b] counts the sequences whose table holds b; 0 = free. A
 * block with ref > 1 is read-only: appending into a shared partial block
 * first copies it (copy-on-write), so a pass writes only exclusive blocks.
 */
#ifndef SB_KV_IMPL_H
#define SB_KV_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/engine/sb_model.h"

typedef struct {
    int n_layer, n_ctx, n_seq, n_blocks, max_blocks;    /* max_blocks: per sequence, ceil(n_ctx / SB_KV_BLOCK) */
    size_t row_bytes;           /* one position's K (or V) in one layer */
    size_t layer_bytes;         /* n_blocks · SB_KV_BLOCK · row_bytes, rounded up to whole pages */
    uint8_t *k, *v;             /* [n_layer][n_blocks·SB_KV_BLOCK][row_bytes] */
    size_t pool_bytes;          /* of k, and of v (sb_pages_alloc) */
    int32_t *ref;               /* [n_blocks] */
    int n_free;
    int32_t *table;             /* [n_seq][max_blocks]: block of each SB_KV_BLOCK positions */
    int *n_past;                /* [n_seq]; -1: sequence not in use */
    int *expect;                /* [n_seq]: blocks the sequence is expected to reach (0: not said) */
    int *held;                  /* [n_seq]: blocks in its table (ahead of n_past while a pass runs) */
    size_t page;                /* the system's page size */
} sb_kv;

/* Sequence 0 is in use from the start. Returns 0, SB_ENOMEM or SB_ERANGE. */
int  sb_kv_init(sb_kv *kv, int n_layer, size_t row_bytes, int n_ctx, int n_seq, int n_blocks, char *err);
void sb_kv_free(sb_kv *kv);
int  sb_kv_in_use(const sb_kv *kv, int seq);
int  sb_kv_seq_new(sb_kv *kv, int *seq, char *err);
/* seq will hold up to `positions` (its prompt and the tokens it may
 * generate): its blocks are then taken from a free run that holds them all
 * when one exists, so it stays in consecutive blocks as it grows. */
void sb_kv_seq_expect(sb_kv *kv, int seq, int positions);
void sb_kv_seq_free(sb_kv *kv, int seq);
void sb_kv_truncate(sb_kv *kv, int seq, int n);
int  sb_kv_fork(sb_kv *kv, int dst, int src, int n, char *err);
/* Blocks that appending n_new positions to seq takes from the pool (new
 * blocks, plus the copy of a shared partial last block). */
int  sb_kv_needed(const sb_kv *kv, int seq, int n_new);
/* Give seq exclusive blocks for positions n_past..n_past+n_new. The caller
 * has checked sb_kv_needed ≤ n_free (for all sequences of a pass). */
void sb_kv_reserve(sb_kv *kv, int seq, int n_new);
/* 1 when positions p0..p1 of seq lie in consecutive blocks (one strided
 * range per layer). */
int  sb_kv_contiguous(const sb_kv *kv, int seq, int p0, int p1);

static inline size_t sb_kv_row_off(const sb_kv *kv, int layer, int seq, int pos) {
    const int32_t b = kv->table[(size_t)seq * kv->max_blocks + pos / SB_KV_BLOCK];
    return (size_t)layer * kv->layer_bytes + ((size_t)b * SB_KV_BLOCK + (size_t)(pos % SB_KV_BLOCK)) * kv->row_bytes;
}

#endif
