/* kv.c - the KV pool of an inference context: blocks of SB_KV_BLOCK
 * positions, their reference counts, and each sequence's block table
 * (layout and sharing rules in kv_impl.h).
 *
 * Free blocks are those with ref 0, found by a scan rather than popped from
 * a list: where a block goes matters (a sequence whose blocks are
 * consecutive is read by the attention kernels in one call, without a
 * gather), and the scan over a few thousand counters costs far less than
 * the 16 positions of a pass that a new block serves.
 */
#include <assert.h>
#include <string.h>

#include "worker/engine/kv_impl.h"
#include "common/sb_common.h"

static int blocks_for(int n) { return (n + SB_KV_BLOCK - 1) / SB_KV_BLOCK; }
static int32_t *seq_table(const sb_kv *kv, int seq) { return kv->table + (size_t)seq * kv->max_blocks; }

int sb_kv_init(sb_kv *kv, int n_layer, size_t row_bytes, int n_ctx, int n_seq, int n_blocks, char *err) {
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->n_seq = n_seq;
    kv->max_blocks = blocks_for(n_ctx);
    kv->n_blocks = n_blocks > 0 ? n_blocks : kv->max_blocks;
    kv->row_bytes = row_bytes;
    size_t bytes;
    if (sb_mul_size(row_bytes, (size_t)kv->n_blocks * SB_KV_BLOCK, &kv->layer_bytes) ||
        sb_mul_size(kv->layer_bytes, (size_t)n_layer, &bytes))
        return sb_seterr(err, SB_ERANGE, "KV pool of %d blocks: size overflows", kv->n_blocks);
    /* Sized for n_seq whole contexts, while most sequences are short or
     * absent: pages that are written only, not the whole pool at start. */
    kv->pool_bytes = bytes;
    kv->k = sb_pages_alloc(bytes);
    kv->v = sb_pages_alloc(bytes);
    kv->ref = sb_calloc((size_t)kv->n_blocks, sizeof *kv->ref);
    kv->table = sb_calloc((size_t)n_seq * (size_t)kv->max_blocks, sizeof *kv->table);
    kv->n_past = sb_malloc((size_t)n_seq * sizeof *kv->n_past);
    if (!kv->k || !kv->v || !kv->ref || !kv->table || !kv->n_past) {
        const int nb = kv->n_blocks;
        sb_kv_free(kv);
        return sb_seterr(err, SB_ENOMEM, "out of memory for a KV pool of %d blocks (%.1f MiB)", nb,
                         2.0 * (double)bytes / 1048576.0);
    }
    kv->n_free = kv->n_blocks;
    for (int s = 0; s < n_seq; s++) kv->n_past[s] = s == 0 ? 0 : -1;
    return 0;
}

void sb_kv_free(sb_kv *kv) {
    sb_pages_free(kv->k, kv->pool_bytes);
    sb_pages_free(kv->v, kv->pool_bytes);
    sb_free(kv->ref);
    sb_free(kv->table);
    sb_free(kv->n_past);
    memset(kv, 0, sizeof *kv);
}

int sb_kv_in_use(const sb_kv *kv, int seq) { return seq >= 0 && seq < kv->n_seq && kv->n_past[seq] >= 0; }

/* A free block for a sequence whose previous block is `after` (-1: none):
 * the next one if free; else inside the largest free run, at its start when
 * nothing precedes it, otherwise at its middle, leaving the first half to
 * the sequence that ends before the run. Requires n_free > 0. */
static int32_t pick_block(const sb_kv *kv, int32_t after) {
    if (after >= 0 && after + 1 < kv->n_blocks && kv->ref[after + 1] == 0) return after + 1;
    int best = -1, best_len = 0;
    for (int b = 0; b < kv->n_blocks;) {
        if (kv->ref[b]) { b++; continue; }
        int e = b;
        while (e < kv->n_blocks && kv->ref[e] == 0) e++;
        if (e - b > best_len) { best = b; best_len = e - b; }
        b = e;
    }
    assert(best >= 0);
    return best == 0 ? 0 : best + best_len / 2;
}

static int32_t take_block(sb_kv *kv, int32_t after) {
    const int32_t b = pick_block(kv, after);
    kv->ref[b] = 1;
    kv->n_free--;
    return b;
}

static void drop_block(sb_kv *kv, int32_t b) {
    assert(kv->ref[b] > 0);
    if (--kv->ref[b] == 0) kv->n_free++;
}

/* Positions 0..n-1 of block src into block dst, every layer, K and V. */
static void copy_rows(sb_kv *kv, int32_t dst, int32_t src, int n) {
    const size_t bytes = (size_t)n * kv->row_bytes, blk = (size_t)SB_KV_BLOCK * kv->row_bytes;
    for (int l = 0; l < kv->n_layer; l++) {
        const size_t lo = (size_t)l * kv->layer_bytes;
        memcpy(kv->k + lo + (size_t)dst * blk, kv->k + lo + (size_t)src * blk, bytes);
        memcpy(kv->v + lo + (size_t)dst * blk, kv->v + lo + (size_t)src * blk, bytes);
    }
}

int sb_kv_seq_new(sb_kv *kv, int *seq, char *err) {
    for (int s = 1; s < kv->n_seq; s++)
        if (kv->n_past[s] < 0) {
            kv->n_past[s] = 0;
            *seq = s;
            return 0;
        }
    return sb_seterr(err, SB_EBUSY, "all %d sequences are in use", kv->n_seq);
}

void sb_kv_truncate(sb_kv *kv, int seq, int n) {
    if (!sb_kv_in_use(kv, seq) || n < 0 || n >= kv->n_past[seq]) return;
    int32_t *t = seq_table(kv, seq);
    for (int i = blocks_for(n); i < blocks_for(kv->n_past[seq]); i++) drop_block(kv, t[i]);
    kv->n_past[seq] = n;
}

void sb_kv_seq_free(sb_kv *kv, int seq) {
    if (!sb_kv_in_use(kv, seq)) return;
    sb_kv_truncate(kv, seq, 0);
    if (seq != 0) kv->n_past[seq] = -1;
}

int sb_kv_needed(const sb_kv *kv, int seq, int n_new) {
    if (!sb_kv_in_use(kv, seq) || n_new <= 0) return 0;
    const int np = kv->n_past[seq];
    int need = blocks_for(np + n_new) - blocks_for(np);
    if (np % SB_KV_BLOCK && kv->ref[seq_table(kv, seq)[np / SB_KV_BLOCK]] > 1) need++;
    return need;
}

void sb_kv_reserve(sb_kv *kv, int seq, int n_new) {
    int32_t *t = seq_table(kv, seq);
    const int np = kv->n_past[seq], have = blocks_for(np);
    if (np % SB_KV_BLOCK && kv->ref[t[have - 1]] > 1) {     /* copy-on-write: a shared partial last block */
        const int32_t old = t[have - 1], b = take_block(kv, have > 1 ? t[have - 2] : -1);
        copy_rows(kv, b, old, np % SB_KV_BLOCK);
        drop_block(kv, old);
        t[have - 1] = b;
    }
    for (int i = have; i < blocks_for(np + n_new); i++) t[i] = take_block(kv, i > 0 ? t[i - 1] : -1);
    if (have > 0) assert(kv->ref[t[have - 1]] == 1 || np % SB_KV_BLOCK == 0);
}

int sb_kv_fork(sb_kv *kv, int dst, int src, int n, char *err) {
    if (!sb_kv_in_use(kv, dst) || !sb_kv_in_use(kv, src) || dst == src)
        return sb_seterr(err, SB_EINVAL, "fork: sequences %d -> %d are not two sequences in use", src, dst);
    if (kv->n_past[dst] != 0) return sb_seterr(err, SB_EINVAL, "fork: sequence %d is not empty", dst);
    if (n < 0 || n > kv->n_past[src])
        return sb_seterr(err, SB_ERANGE, "fork: %d positions of a sequence holding %d", n, kv->n_past[src]);
    const int full = n / SB_KV_BLOCK, part = n % SB_KV_BLOCK;
    if (part && kv->n_free == 0) return sb_seterr(err, SB_EBUSY, "fork: no free KV block for the partial block");
    const int32_t *s = seq_table(kv, src);
    int32_t *d = seq_table(kv, dst);
    for (int i = 0; i < full; i++) {
        d[i] = s[i];
        kv->ref[s[i]]++;
    }
    if (part) {
        d[full] = take_block(kv, full > 0 ? d[full - 1] : -1);
        copy_rows(kv, d[full], s[full], part);
    }
    kv->n_past[dst] = n;
    return 0;
}

int sb_kv_contiguous(const sb_kv *kv, int seq, int p0, int p1) {
    const int32_t *t = seq_table(kv, seq);
    for (int i = p0 / SB_KV_BLOCK; i < p1 / SB_KV_BLOCK; i++)
        if (t[i + 1] != t[i] + 1) return 0;
    return 1;
}
