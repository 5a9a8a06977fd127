/* kv.c - the KV pool of an inference context: blocks of SB_KV_BLOCK
 * positions, their reference counts, and each sequence's block table
 * (layout and sharing rules in kv_impl.h).
 *
 * Free blocks are those with ref 0, found by a scan rather than popped from
 * a list: where a block goes matters (a sequence whose blocks are
 * consecutive is read by the attention kernels in one call, without a
 * gather), and the scan over a few thousand counters costs far less than
 * the 16 positions of a pass that a new block serves.
 *
 * Memory: the pool is sized for every sequence's whole context and is
 * mostly idle, so it is fresh pages resident only where written
 * (sb_pages_alloc). A new run starts at the lowest free block that leaves
 * the sequence room for what it expects to reach, and a block whose last
 * user goes gives its pages back (MADV_DONTNEED: they read as zero on the
 * next write, which nothing relies on - a block is always written before
 * it is read). The resident part is then the blocks in use, whatever the
 * order the sequences came and went in.
 */
#include <assert.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
    const long page = sysconf(_SC_PAGESIZE);
    kv->page = page > 0 ? (size_t)page : 4096;
    size_t bytes;
    if (sb_mul_size(row_bytes, (size_t)kv->n_blocks * SB_KV_BLOCK, &kv->layer_bytes) ||
        kv->layer_bytes > SIZE_MAX - kv->page ||
        sb_mul_size(kv->layer_bytes = (kv->layer_bytes + kv->page - 1) / kv->page * kv->page, (size_t)n_layer, &bytes))
        return sb_seterr(err, SB_ERANGE, "KV pool of %d blocks: size overflows", kv->n_blocks);
    /* Sized for n_seq whole contexts, while most sequences are short or
     * absent: pages that are written only, not the whole pool at start. */
    kv->pool_bytes = bytes;
    kv->k = sb_pages_alloc(bytes);
    kv->v = sb_pages_alloc(bytes);
    kv->ref = sb_calloc((size_t)kv->n_blocks, sizeof *kv->ref);
    kv->table = sb_calloc((size_t)n_seq * (size_t)kv->max_blocks, sizeof *kv->table);
    kv->n_past = sb_malloc((size_t)n_seq * sizeof *kv->n_past);
    kv->expect = sb_calloc((size_t)n_seq, sizeof *kv->expect);
    kv->held = sb_calloc((size_t)n_seq, sizeof *kv->held);
    if (!kv->k || !kv->v || !kv->ref || !kv->table || !kv->n_past || !kv->expect || !kv->held) {
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
    sb_free(kv->expect);
    sb_free(kv->held);
    memset(kv, 0, sizeof *kv);
}

int sb_kv_in_use(const sb_kv *kv, int seq) { return seq >= 0 && seq < kv->n_seq && kv->n_past[seq] >= 0; }

/* Free blocks right after `last` that another sequence than `seq`, whose
 * table ends there, still expects to grow into. */
static int room_claimed(const sb_kv *kv, int seq, int32_t last) {
    int room = 0;
    for (int s = 0; s < kv->n_seq; s++)
        if (s != seq && kv->n_past[s] >= 0 && kv->held[s] > 0 && seq_table(kv, s)[kv->held[s] - 1] == last)
            room = SB_MAX(room, kv->expect[s] - kv->held[s]);
    return room;
}

/* A free block for seq, whose previous block is `after` (-1: none) and
 * that wants `want` more blocks (this one included): the next one if free;
 * else the start of the lowest free run with `want` blocks or more, after
 * the room that the sequence ending just before the run expects to take -
 * so each sequence grows in consecutive blocks, and the pool's written part
 * stays low; else the longest free run. Requires n_free > 0. */
static int32_t pick_block(const sb_kv *kv, int seq, int32_t after, int want) {
    if (after >= 0 && after + 1 < kv->n_blocks && kv->ref[after + 1] == 0) return after + 1;
    int best = -1, best_len = 0, best_free = -1, best_free_len = 0;
    for (int b = 0; b < kv->n_blocks;) {
        if (kv->ref[b]) { b++; continue; }
        int e = b;
        while (e < kv->n_blocks && kv->ref[e] == 0) e++;
        const int start = b > 0 ? b + room_claimed(kv, seq, b - 1) : b;
        if (e - start >= want) return start;
        if (e - start > best_len) { best = start; best_len = e - start; }
        if (e - b > best_free_len) { best_free = b; best_free_len = e - b; }
        b = e;
    }
    assert(best_free >= 0);
    return best >= 0 ? best : best_free;      /* every free run claimed: the longest, at its start */
}

static int32_t take_block(sb_kv *kv, int seq, int32_t after, int want) {
    const int32_t b = pick_block(kv, seq, after, want);
    kv->ref[b] = 1;
    kv->n_free--;
    return b;
}

/* The pages of free blocks lo..hi-1 back to the system, every layer, K and
 * V. A page shared with a neighbour in use stays; the run is widened over
 * free neighbours up to page boundaries first, so that pages straddling two
 * blocks freed at different times go too. */
static void release_run(sb_kv *kv, int lo, int hi) {
    const size_t blk = (size_t)SB_KV_BLOCK * kv->row_bytes;
    while (lo > 0 && kv->ref[lo - 1] == 0 && (size_t)lo * blk % kv->page) lo--;
    while (hi < kv->n_blocks && kv->ref[hi] == 0 && (size_t)hi * blk % kv->page) hi++;
    const size_t start = ((size_t)lo * blk + kv->page - 1) / kv->page * kv->page;
    const size_t end = hi == kv->n_blocks ? kv->layer_bytes : (size_t)hi * blk / kv->page * kv->page;
    if (end <= start) return;
    for (int l = 0; l < kv->n_layer; l++) {
        const size_t off = (size_t)l * kv->layer_bytes + start;
        madvise(kv->k + off, end - start, MADV_DONTNEED);
        madvise(kv->v + off, end - start, MADV_DONTNEED);
    }
}

/* Blocks freed together (a sequence's table, in order) are mostly
 * consecutive: gathered into runs, each released in one call per layer. */
typedef struct { int lo, hi; } freed_run;

static void freed_flush(sb_kv *kv, freed_run *r) {
    if (r->hi > r->lo) release_run(kv, r->lo, r->hi);
    r->lo = r->hi = 0;
}

static void drop_block(sb_kv *kv, int32_t b, freed_run *r) {
    assert(kv->ref[b] > 0);
    if (--kv->ref[b]) return;
    kv->n_free++;
    if (r->hi > r->lo && b == r->hi) { r->hi++; return; }
    freed_flush(kv, r);
    *r = (freed_run){ b, b + 1 };
}

static void drop_one(sb_kv *kv, int32_t b) {
    freed_run r = { 0, 0 };
    drop_block(kv, b, &r);
    freed_flush(kv, &r);
}

/* Blocks seq still wants beyond its first `have`, from this pass's need and
 * what it said it expects to reach. */
static int wanted(const sb_kv *kv, int seq, int have, int need_blocks) {
    return SB_MAX(need_blocks, kv->expect[seq]) - have;
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
            kv->expect[s] = kv->held[s] = 0;
            *seq = s;
            return 0;
        }
    return sb_seterr(err, SB_EBUSY, "all %d sequences are in use", kv->n_seq);
}

void sb_kv_seq_expect(sb_kv *kv, int seq, int positions) {
    if (sb_kv_in_use(kv, seq)) kv->expect[seq] = blocks_for(SB_MIN(SB_MAX(positions, 0), kv->n_ctx));
}

void sb_kv_truncate(sb_kv *kv, int seq, int n) {
    if (!sb_kv_in_use(kv, seq) || n < 0 || n >= kv->n_past[seq]) return;
    int32_t *t = seq_table(kv, seq);
    freed_run r = { 0, 0 };
    for (int i = blocks_for(n); i < blocks_for(kv->n_past[seq]); i++) drop_block(kv, t[i], &r);
    freed_flush(kv, &r);
    kv->n_past[seq] = n;
    kv->held[seq] = blocks_for(n);
}

void sb_kv_seq_free(sb_kv *kv, int seq) {
    if (!sb_kv_in_use(kv, seq)) return;
    sb_kv_truncate(kv, seq, 0);
    kv->expect[seq] = 0;
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
    const int np = kv->n_past[seq], have = blocks_for(np), need = blocks_for(np + n_new);
    if (np % SB_KV_BLOCK && kv->ref[t[have - 1]] > 1) {     /* copy-on-write: a shared partial last block */
        const int32_t old = t[have - 1], b = take_block(kv, seq, have > 1 ? t[have - 2] : -1,
                                                        wanted(kv, seq, have - 1, need));
        copy_rows(kv, b, old, np % SB_KV_BLOCK);
        drop_one(kv, old);
        t[have - 1] = b;
    }
    for (int i = have; i < need; i++) {
        t[i] = take_block(kv, seq, i > 0 ? t[i - 1] : -1, wanted(kv, seq, i, need));
        kv->held[seq] = i + 1;
    }
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
        d[full] = take_block(kv, dst, full > 0 ? d[full - 1] : -1, wanted(kv, dst, full, full + 1));
        copy_rows(kv, d[full], s[full], part);
    }
    kv->n_past[dst] = n;
    kv->held[dst] = blocks_for(n);
    return 0;
}

int sb_kv_contiguous(const sb_kv *kv, int seq, int p0, int p1) {
    const int32_t *t = seq_table(kv, seq);
    for (int i = p0 / SB_KV_BLOCK; i < p1 / SB_KV_BLOCK; i++)
        if (t[i + 1] != t[i] + 1) return 0;
    return 1;
}
