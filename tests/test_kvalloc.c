/* test_kvalloc.c - where the KV pool puts blocks and what stays resident
 * (worker/engine/kv.c; numbers, sharing and refusals are test_kvpool's):
 *  a. a sequence's blocks come from the lowest free run with room for what
 *     it expects to reach, past the room a sequence ending just before the
 *     run expects (even one whose blocks were taken earlier in the same
 *     pass), so each grows in consecutive blocks; a freed run is reused
 *     from its start;
 *  b. the pages of a block whose last user goes are given back, in every
 *     layer, K and V (mincore), and nobody else's are; a block shared with
 *     a fork stays until the fork goes too;
 *  c. blocks smaller than a page: a page stays while a block on it is in
 *     use, and goes once both of its blocks are free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/sb_common.h"
#include "worker/engine/kv_impl.h"

static sb_kv pool(size_t row_bytes, int n_seq, int n_blocks) {
    char err[SB_ERR_LEN];
    sb_kv kv;
    if (sb_kv_init(&kv, 2, row_bytes, 256, n_seq, n_blocks, err)) fail_msg("sb_kv_init: %s", err);
    return kv;
}

static int new_seq(sb_kv *kv, int expect) {
    char err[SB_ERR_LEN];
    int s;
    if (sb_kv_seq_new(kv, &s, err)) fail_msg("seq_new: %s", err);
    sb_kv_seq_expect(kv, s, expect);
    return s;
}

/* What a pass does for seq's n new positions: blocks first (every part of
 * the pass), the rows written, n_past moved after (append_done). */
static void reserve_and_write(sb_kv *kv, int seq, int n) {
    sb_kv_reserve(kv, seq, n);
    for (int l = 0; l < kv->n_layer; l++)
        for (int p = kv->n_past[seq]; p < kv->n_past[seq] + n; p++) {
            memset(kv->k + sb_kv_row_off(kv, l, seq, p), 0x3c, kv->row_bytes);
            memset(kv->v + sb_kv_row_off(kv, l, seq, p), 0x3c, kv->row_bytes);
        }
}

static void append(sb_kv *kv, int seq, int n) {
    reserve_and_write(kv, seq, n);
    kv->n_past[seq] += n;
}

static int32_t block_of(const sb_kv *kv, int seq, int i) { return kv->table[(size_t)seq * kv->max_blocks + i]; }

/* Pages of K (or V) in layer l covering block b that are resident. */
static int resident(const sb_kv *kv, const uint8_t *base, int l, int b) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), blk = SB_KV_BLOCK * kv->row_bytes;
    const size_t lo = ((size_t)l * kv->layer_bytes + (size_t)b * blk) / page * page;
    const size_t hi = (size_t)l * kv->layer_bytes + (size_t)(b + 1) * blk;
    unsigned char vec[64];
    const size_t n = (hi - lo + page - 1) / page;
    assert_true(n <= sizeof vec);
    assert_int_equal(mincore((void *)(base + lo), hi - lo, vec), 0);
    int r = 0;
    for (size_t i = 0; i < n; i++) r += vec[i] & 1;
    return r;
}

/* Resident in every layer, K and V (1), or in none (0). */
static void assert_block_resident(const sb_kv *kv, int b, int yes) {
    for (int l = 0; l < kv->n_layer; l++) {
        if (yes) {
            assert_true(resident(kv, kv->k, l, b) > 0);
            assert_true(resident(kv, kv->v, l, b) > 0);
        } else {
            assert_int_equal(resident(kv, kv->k, l, b), 0);
            assert_int_equal(resident(kv, kv->v, l, b), 0);
        }
    }
}

static void test_placement(void **state) {
    (void)state;
    sb_kv kv = pool(256, 5, 64);        /* a block: 4 KiB per layer, K and V */
    const int a = new_seq(&kv, 160);    /* 10 blocks */
    const int b = new_seq(&kv, 160);
    /* one pass: both prompts' first chunk; a's n_past has not moved yet
     * when b takes its blocks */
    reserve_and_write(&kv, a, 48);
    reserve_and_write(&kv, b, 48);
    kv.n_past[a] += 48;
    kv.n_past[b] += 48;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(block_of(&kv, a, i), i);
        assert_int_equal(block_of(&kv, b, i), 10 + i);
    }
    /* both grow to what they expected, each in consecutive blocks */
    for (int i = 0; i < 112; i++) {
        append(&kv, a, 1);
        append(&kv, b, 1);
    }
    assert_true(sb_kv_contiguous(&kv, a, 0, 159));
    assert_true(sb_kv_contiguous(&kv, b, 0, 159));
    assert_int_equal(block_of(&kv, b, 9), 19);
    /* past its expectation a still grows (elsewhere) */
    append(&kv, a, 1);
    assert_int_equal(block_of(&kv, a, 10), 20);
    /* a third sequence goes after the others; a's run, once free, is reused from its start */
    const int c = new_seq(&kv, 64);
    append(&kv, c, 20);
    assert_int_equal(block_of(&kv, c, 0), 21);
    sb_kv_seq_free(&kv, a);
    const int d = new_seq(&kv, 64);
    append(&kv, d, 64);
    for (int i = 0; i < 4; i++) assert_int_equal(block_of(&kv, d, i), i);
    /* no expectation said: the lowest free block */
    const int e = new_seq(&kv, 0);
    append(&kv, e, 1);
    assert_int_equal(block_of(&kv, e, 0), 4);
    sb_kv_free(&kv);
}

static void test_release(void **state) {
    (void)state;
    sb_kv kv = pool(256, 4, 64);
    const int a = new_seq(&kv, 64), b = new_seq(&kv, 64);
    append(&kv, a, 64);
    append(&kv, b, 64);
    for (int i = 0; i < 4; i++) {
        assert_block_resident(&kv, block_of(&kv, a, i), 1);
        assert_block_resident(&kv, block_of(&kv, b, i), 1);
    }
    const int32_t a0 = block_of(&kv, a, 0);
    /* a fork shares a's first two blocks: freeing a gives back only the other two */
    char err[SB_ERR_LEN];
    int f;
    assert_int_equal(sb_kv_seq_new(&kv, &f, err), 0);
    assert_int_equal(sb_kv_fork(&kv, f, a, 32, err), 0);
    int32_t ab[4];
    for (int i = 0; i < 4; i++) ab[i] = block_of(&kv, a, i);
    sb_kv_seq_free(&kv, a);
    assert_block_resident(&kv, ab[0], 1);
    assert_block_resident(&kv, ab[1], 1);
    assert_block_resident(&kv, ab[2], 0);
    assert_block_resident(&kv, ab[3], 0);
    for (int i = 0; i < 4; i++) assert_block_resident(&kv, block_of(&kv, b, i), 1);
    sb_kv_seq_free(&kv, f);
    assert_block_resident(&kv, ab[0], 0);
    assert_block_resident(&kv, ab[1], 0);
    /* truncating gives back the blocks past the new end */
    int32_t bb[4];
    for (int i = 0; i < 4; i++) bb[i] = block_of(&kv, b, i);
    sb_kv_truncate(&kv, b, 20);
    assert_block_resident(&kv, bb[0], 1);
    assert_block_resident(&kv, bb[1], 1);
    assert_block_resident(&kv, bb[2], 0);
    assert_block_resident(&kv, bb[3], 0);
    /* a freed block is written again as new */
    const int c = new_seq(&kv, 16);
    append(&kv, c, 16);
    assert_int_equal(block_of(&kv, c, 0), a0);
    assert_block_resident(&kv, a0, 1);
    sb_kv_free(&kv);
}

static void test_small_blocks(void **state) {
    (void)state;
    if (sysconf(_SC_PAGESIZE) != 4096) skip();
    sb_kv kv = pool(128, 4, 64);        /* a block: 2 KiB per layer: two on a page */
    const int a = new_seq(&kv, 16), b = new_seq(&kv, 16);
    append(&kv, a, 16);
    append(&kv, b, 16);
    assert_int_equal(block_of(&kv, a, 0), 0);
    assert_int_equal(block_of(&kv, b, 0), 1);
    sb_kv_seq_free(&kv, a);             /* its page holds b's block too */
    assert_block_resident(&kv, 0, 1);
    sb_kv_seq_free(&kv, b);
    assert_block_resident(&kv, 0, 0);
    assert_block_resident(&kv, 1, 0);
    sb_kv_free(&kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_small_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
