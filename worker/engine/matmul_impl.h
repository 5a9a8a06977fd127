/* matmul_impl.h - private to forward.c and matmul.c: weight matrices times
 * a batch of activations, spread over the context's thread pool. */
#ifndef SB_MATMUL_IMPL_H
#define SB_MATMUL_IMPL_H

#include "common/sb_common.h"
#include "worker/engine/model_impl.h"
#include "worker/engine/sb_pool.h"

#define SB_MM_ACT_SLOTS 3       /* (input, activation type) pairs cached: one run never evicts its own */
#define SB_MM_MAX_OUTS 3        /* matrices one run can share an input between (q, k, v) */
#define SB_MM_MAX_SEGS 32       /* several-token segments of one run (parts of a multi-sequence pass) */

typedef struct {
    const float *src;           /* the f32 input this slot was made from */
    int          type;          /* its vec_dot_type */
    void        *buf;
    size_t       row_bytes;
} sb_act_slot;

typedef struct {
    const sb_kq_traits *kq;
    sb_kq_split         split;      /* how runs are cut into pool tasks (the kernels' plan) */
    sb_pool            *pool;
    sb_act_slot         act[SB_MM_ACT_SLOTS];
    int                 act_next;
    uint8_t            *x8_rows;    /* per thread: a row block of an x8 weight back in file layout, for gemm */
    size_t              x8_rows_bytes;
    int                 decode_kernels; /* nonzero: never the tiled path, so every token's numbers are a lone token's */
    int                 gemm_min_toks;  /* the fewest tokens of a segment that take the tiled path (2 from sb_mm_init) */
    /* Token segments of the next runs (a multi-sequence pass sets them, 0/0
     * restores the default of one segment of all tokens): tokens
     * [0, n_one) go through the one-token kernels; then n_seg segments of
     * seg[i] tokens each, each run as if it were a run of its own (the same
     * path choice and token blocks), so a part's numbers do not depend on
     * what else is in the batch. */
    int                 n_one, n_seg;
    const int          *seg;
    sb_prof            *prof;       /* per-op profile (forward.c's), or NULL */
    uint8_t            *il;         /* the run's Q8_K activations interleaved for vec_dotn_il (grown on demand) */
    size_t              il_cap;
} sb_mm;

/* Profiling: the time since the previous mark goes to `op`, except what
 * the pool spent waiting at run ends meanwhile, which goes to
 * SB_OP_BARRIER. A no-op when p is NULL. */
static inline void sb_prof_mark(sb_prof *p, int op) {
    if (!p) return;
    const uint64_t now = sb_now_ns(), dw = p->wait - p->last_wait;
    p->ns[op] += now - p->last - dw;
    p->ns[SB_OP_BARRIER] += dw;
    p->last = now;
    p->last_wait = p->wait;
}

/* One product of a run: y[t][0..w->ne1) = W · x[t], rows y_stride floats apart. */
typedef struct {
    const sb_weight *w;
    float           *y;
    size_t           y_stride;
} sb_mm_out;

/* act_bytes: the largest converted batch (n_batch × widest input, in the
 * bulkiest activation format); x8_row_bytes: the longest row of a weight
 * in the x8 layout (0: none). Returns 0 or SB_ENOMEM. */
int  sb_mm_init(sb_mm *mm, const sb_kq_kernels *kq, sb_pool *pool, size_t act_bytes, size_t x8_row_bytes);
void sb_mm_free(sb_mm *mm);
/* Forget the converted inputs (their f32 source is about to change). */
void sb_mm_reset(sb_mm *mm);
/* All n_outs products of one input x (n_tok rows of outs[0].w->ne0 floats)
 * in one pool run, so that a token's q, k and v (or gate and up) cost one
 * synchronisation instead of three. The weights must share ne0. */
void sb_mm_run(sb_mm *mm, const float *x, int n_tok, const sb_mm_out *outs, int n_outs);

#endif
