/* test_x8.c - the row-interleaved (x8) weight layout and its decode kernels.
 *
 *  1. sb_kq_x8_unpack(sb_kq_x8_pack(rows)) gives back the rows byte for
 *     byte, for arbitrary bytes (every bit of a block is data);
 *  2. the scalar gemv8 equals vec_dot_ref row by row, bit for bit, on
 *     quantized random weights and at the extremes of every quant range
 *     (where a 16-bit sum kept over too many groups would wrap);
 *  3. every level's gemv8 equals the scalar one bit for bit (same integer
 *     sums, same float steps): the SIMD kernel against its scalar twin.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/kq_testlib.h"
#include "worker/kernels/sb_kq.h"

static const int x8_types[] = { SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K };
#define N_X8 (int)(sizeof x8_types / sizeof x8_types[0])

static void test_pack_round_trip(void **state) {
    (void)state;
    assert_true(sb_kq_x8_supported(SB_TYPE_Q5_K) && !sb_kq_x8_supported(SB_TYPE_Q2_K));
    for (int i = 0; i < N_X8; i++) {
        const int type = x8_types[i], n = 3 * SB_QK_K;
        const size_t rb = sb_kq_row_size(ref_row(type), n), total = 8 * rb;
        uint8_t *rows = malloc(total), *x8 = malloc(total), *back = malloc(total);
        assert_true(rows && x8 && back);
        for (size_t k = 0; k < total; k++) rows[k] = (uint8_t)rng_u32();
        sb_kq_x8_pack(type, n, rows, rb, x8);
        assert_memory_not_equal(rows, x8, total);           /* it did move bytes */
        memset(back, 0xA5, total);
        sb_kq_x8_unpack(type, n, x8, back, rb);
        assert_memory_equal(rows, back, total);
        free(rows);
        free(x8);
        free(back);
    }
}

/* Every row of the x8 group through gemv8 of `level` against vec_dot_ref
 * and the scalar gemv8: all three the same floats. */
static void check_group(int level, int type, int n, const uint8_t *rows, size_t rb, const uint8_t *y) {
    const sb_kq_traits *t = &sb_kq_table(level)[type], *tr = ref_row(type);
    uint8_t *x8 = malloc(8 * rb);
    assert_non_null(x8);
    sb_kq_x8_pack(type, n, rows, rb, x8);
    float got[8], ref8[8];
    t->gemv8(n, got, x8, y);
    tr->gemv8(n, ref8, x8, y);
    for (int r = 0; r < 8; r++) {
        float one;
        tr->vec_dot(n, &one, rows + (size_t)r * rb, y);
        if (memcmp(&one, &ref8[r], 4) || memcmp(&one, &got[r], 4))
            fail_msg("%s gemv8 at %s, n %d, row %d: %.9g, scalar gemv8 %.9g, vec_dot_ref %.9g", t->name,
                     sb_kq_level_name(level), n, r, got[r], ref8[r], one);
    }
    free(x8);
}

static void test_gemv8_matches_vec_dot_ref(void **state) {
    (void)state;
    int covered = 0;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int i = 0; i < N_X8; i++) {
            const int type = x8_types[i];
            if (!sb_kq_table(level)[type].gemv8) continue;
            covered++;
            for (int nb = 1; nb <= 17; nb += 4) {
                const int n = nb * SB_QK_K;
                size_t rb, yb;
                uint8_t *rows = make_rows(type, 8, n, &rb), *y = make_rows(SB_TYPE_Q8_K, 1, n, &yb);
                check_group(level, type, n, rows, rb, y);
                free(rows);
                free(y);
            }
        }
    assert_true(covered >= N_X8);       /* at least the scalar twins ran */
}

/* All quant bits set (Q4_K/Q5_K: scales and mins 63; Q6_K: q = 31, scale
 * -1) or all clear with Q6_K scales at -128 (q = -32), d = dmin = 1, and
 * activations all at -127. */
static void test_gemv8_extremes(void **state) {
    (void)state;
    const int n = 4 * SB_QK_K;
    size_t yb;
    uint8_t *y = malloc(sb_kq_row_size(ref_row(SB_TYPE_Q8_K), n));
    float *ones = malloc(sizeof(float) * n);
    assert_true(y && ones);
    for (int k = 0; k < n; k++) ones[k] = 1.0f;
    ref_row(SB_TYPE_Q8_K)->from_float(ones, y, n);
    assert_int_equal(((const sb_block_q8_K *)y)->qs[0], -127);
    yb = sb_kq_row_size(ref_row(SB_TYPE_Q8_K), n);
    (void)yb;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int i = 0; i < N_X8; i++) {
            const int type = x8_types[i];
            if (!sb_kq_table(level)[type].gemv8) continue;
            const size_t rb = sb_kq_row_size(ref_row(type), n), bs = ref_row(type)->type_size;
            uint8_t *rows = malloc(8 * rb);
            assert_non_null(rows);
            for (int variant = 0; variant < 2; variant++) {
                memset(rows, variant ? 0x00 : 0xFF, 8 * rb);
                const sb_fp16 one = 0x3C00;
                for (size_t b = 0; b < 8 * rb; b += bs) {
                    if (type == SB_TYPE_Q6_K) {
                        memcpy(rows + b + offsetof(sb_block_q6_K, d), &one, 2);
                        if (variant) memset(rows + b + offsetof(sb_block_q6_K, scales), 0x80, 16);
                    } else {
                        memcpy(rows + b, &one, 2);          /* d, dmin first in Q4_K / Q5_K */
                        memcpy(rows + b + 2, &one, 2);
                    }
                }
                check_group(level, type, n, rows, rb, y);
            }
            free(rows);
        }
    free(ones);
    free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_round_trip),
        cmocka_unit_test(test_gemv8_matches_vec_dot_ref),
        cmocka_unit_test(test_gemv8_extremes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
