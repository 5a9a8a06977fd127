/* test_gemm.c - the tiled kernels (traits .gemm) against the 1×1 ones.
 *
 * For every weight type with a gemm, at every level this CPU runs:
 *  1. gemm(level) on an nr × nc tile equals nr·nc calls of vec_dot(level)
 *     and of vec_dot(ref) up to float summation order (2e-6·Σ|x·y|), for
 *     tile shapes that hit every remainder path (1..9 rows, 1..9 columns),
 *     model-sized rows, rows with an odd number of blocks, and shapes that
 *     take the packed-panel path (37 rows, 19 columns, 19 super-blocks);
 *  2. the output lands where ldc says and nothing else is written;
 *     the same at the extremes of every quant range (16-bit sums that
 *     would wrap);
 *  3. the _ref gemm is exactly vec_dot_ref per pair (bit for bit);
 *  4. a (row, token) result does not depend on the other rows and tokens of
 *     its call (tile and panel edges), as long as the call's token count
 *     stays on the same side of the kernel's method switch (≤ 3 or ≥ 8
 *     tokens at every level): what lets a multi-sequence pass run each
 *     part's tokens as their own call (docs/BATCHING.md);
 *  5. at the AVX2 and AVX-512 levels, the packed panels of Q4_0, Q5_0,
 *     Q8_0, Q4_K, Q5_K and Q6_K (at AVX2 also Q2_K and Q3_K) equal vec_dot,
 *     and vec_dot the reference vec_dot, bit for bit;
 *  6. where the CPU and the OS allow AMX, its k-quant gemms equal the
 *     AVX-512 ones they replace bit for bit, on every edge of their tiles
 *     (1..70 rows, 8..70 tokens), and write nothing beside their output.
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
#include "worker/kernels/kq_internal.h"
#include "worker/kernels/sb_kq.h"

#define SENTINEL -12345.0f

/* One nr × nc tile of the given rows at one level, checked pair by pair;
 * frees x and y. */
static void check_tile_of(int level, int type, int n, int nr, int nc, uint8_t *x, size_t bx, uint8_t *y, size_t by) {
    const sb_kq_traits *t = &sb_kq_table(level)[type], *tr = ref_row(type);
    const int at = t->vec_dot_type;
    const size_t ldc = (size_t)nr + 3;                 /* gaps between columns stay untouched */
    float *s = malloc(sizeof(float) * ldc * (size_t)nc);
    assert_non_null(s);
    for (size_t i = 0; i < ldc * (size_t)nc; i++) s[i] = SENTINEL;
    t->gemm(n, nr, nc, x, bx, y, by, s, ldc);
    for (int c = 0; c < nc; c++) {
        for (int r = 0; r < nr; r++) {
            float one, ref;
            t->vec_dot(n, &one, x + (size_t)r * bx, y + (size_t)c * by);
            tr->vec_dot(n, &ref, x + (size_t)r * bx, y + (size_t)c * by);
            const double tol = 2e-6 * abs_dot(type, x + (size_t)r * bx, at, y + (size_t)c * by, n) + 1e-30;
            const float got = s[(size_t)c * ldc + r];
            if (fabs((double)got - one) > tol || fabs((double)got - ref) > tol)
                fail_msg("%s gemm at %s, n %d, tile %dx%d, pair (%d,%d): %.9g, vec_dot %.9g, ref %.9g (tol %.3g)",
                         t->name, sb_kq_level_name(level), n, nr, nc, r, c, got, one, ref, tol);
        }
        for (size_t r = (size_t)nr; r < ldc; r++) assert_true(s[(size_t)c * ldc + r] == SENTINEL);
    }
    free(x);
    free(y);
    free(s);
}

static void check_tile(int level, int type, int n, int nr, int nc) {
    size_t bx, by;
    uint8_t *x = make_rows(type, nr, n, &bx);
    uint8_t *y = make_rows(sb_kq_table(level)[type].vec_dot_type, nc, n, &by);
    check_tile_of(level, type, n, nr, nc, x, bx, y, by);
}

static int has_gemm(int type) { return ref_row(type)->blck_size > 0 && ref_row(type)->gemm != NULL; }

static void test_gemm_matches_vec_dot(void **state) {
    (void)state;
    int covered = 0;
    for (int level = 0; level <= sb_kq_best_level(); level++) {
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            const sb_kq_traits *t = &sb_kq_table(level)[type];
            if (!t->gemm) continue;
            covered += level == sb_kq_best_level();
            const int bs = t->blck_size;
            /* every remainder of 4-row / 4-column tiles, odd block counts */
            for (int nr = 1; nr <= 9; nr++)
                for (int nc = 1; nc <= 9; nc++) check_tile(level, type, bs * (1 + (nr + nc) % 3), nr, nc);
            check_tile(level, type, bs == 32 ? 896 : 2048, 8, 12);   /* model-sized rows */
            check_tile(level, type, 4864, 4, 5);
            /* several 16-row panels and a partial one, several packed
             * chunks of super-blocks, column counts past a micro-kernel */
            check_tile(level, type, 4864, 37, 19);
            check_tile(level, type, 768, 20, 70);       /* more columns than one precomputed group */
        }
    }
    /* The types the hotline models use must have a tiled kernel. */
    static const int must[] = { SB_TYPE_Q4_0, SB_TYPE_Q5_0, SB_TYPE_Q8_0, SB_TYPE_Q2_K, SB_TYPE_Q3_K,
                                SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K };
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) assert_true(has_gemm(must[i]));
    assert_true(covered >= (int)(sizeof must / sizeof must[0]));
}

/* At the limits of every quant range, the tiled kernels still agree. */
static void test_gemm_extreme_values(void **state) {
    (void)state;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            const sb_kq_traits *t = &sb_kq_table(level)[type];
            if (!t->gemm || !has_gemm(type)) continue;
            const int n = t->blck_size == 32 ? 512 : 1024, nr = 11, nc = 9;
            size_t bx, by;
            uint8_t *x = make_extreme_rows(type, nr, n, &bx), *y = make_extreme_rows(t->vec_dot_type, nc, n, &by);
            check_tile_of(level, type, n, nr, nc, x, bx, y, by);
        }
}

/* The scalar twin is vec_dot_ref per pair, exactly. */
static void test_gemm_ref_is_vec_dot_ref(void **state) {
    (void)state;
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        if (!has_gemm(type)) continue;
        const sb_kq_traits *t = ref_row(type);
        const int n = 2 * t->blck_size * (t->blck_size == 32 ? 7 : 1), nr = 5, nc = 3;
        size_t bx, by;
        uint8_t *x = make_rows(type, nr, n, &bx), *y = make_rows(t->vec_dot_type, nc, n, &by);
        float s[5 * 3];
        t->gemm(n, nr, nc, x, bx, y, by, s, (size_t)nr);
        for (int c = 0; c < nc; c++)
            for (int r = 0; r < nr; r++) {
                float d;
                t->vec_dot(n, &d, x + (size_t)r * bx, y + (size_t)c * by);
                assert_memory_equal(&d, &s[c * nr + r], sizeof d);
            }
        free(x);
        free(y);
    }
}

/* The types whose every path sums as the reference vec_dot at a SIMD
 * level: at AVX2 all the types with a gemm; at AVX-512 not Q2_K and Q3_K,
 * whose 1×1 kernels keep vector accumulators. */
static int batch_invariant(int level, int type) {
    switch (type) {
    case SB_TYPE_Q4_0: case SB_TYPE_Q5_0: case SB_TYPE_Q8_0:
    case SB_TYPE_Q4_K: case SB_TYPE_Q5_K: case SB_TYPE_Q6_K: return 1;
    case SB_TYPE_Q2_K: case SB_TYPE_Q3_K: return level == SB_KQ_AVX2;
    default: return 0;
    }
}

/* At the AVX2 and AVX-512 levels the packed panels (and at AVX-512 the
 * register tiles' replacement, the one-token kernels) of the types the
 * hotline models use run vec_dot's float steps lane for lane, and vec_dot
 * runs the reference's: every result is vec_dot_ref's bit for bit, so a
 * token's numbers are the same in a prompt pass and in a decode step
 * (forward.c; tests/test_forward_invariant.c checks it on whole models;
 * test_dotn and test_x8 check the multi-token dots and gemv8 against the
 * same). Shapes with several packed chunks of blocks (152 legacy blocks,
 * 19 super-blocks), a partial panel and a partial column group. */
static void test_gemm_panels_are_vec_dot(void **state) {
    (void)state;
    if (sb_kq_best_level() < SB_KQ_AVX2) skip();
    for (int level = SB_KQ_AVX2; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            if (!batch_invariant(level, type)) continue;
            const sb_kq_traits *t = &sb_kq_table(level)[type], *tr = ref_row(type);
            static const int shapes[][3] = { { 4864, 37, 19 }, { 896, 20, 8 }, { 2048, 16, 70 } };
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                const int n = shapes[k][0], nr = shapes[k][1], nc = shapes[k][2];
                size_t bx, by;
                uint8_t *x = make_rows(type, nr, n, &bx), *y = make_rows(t->vec_dot_type, nc, n, &by);
                float *s = malloc(sizeof(float) * (size_t)nr * (size_t)nc);
                assert_non_null(s);
                t->gemm(n, nr, nc, x, bx, y, by, s, (size_t)nr);
                for (int c = 0; c < nc; c++)
                    for (int r = 0; r < nr; r++) {
                        float one, ref;
                        t->vec_dot(n, &one, x + (size_t)r * bx, y + (size_t)c * by);
                        tr->vec_dot(n, &ref, x + (size_t)r * bx, y + (size_t)c * by);
                        if (memcmp(&one, &s[(size_t)c * nr + r], sizeof one) || memcmp(&one, &ref, sizeof one))
                            fail_msg("%s at %s, n %d, %dx%d, pair (%d,%d): gemm %.9g, vec_dot %.9g, ref %.9g", t->name,
                                     sb_kq_level_name(level), n, nr, nc, r, c, s[(size_t)c * nr + r], one, ref);
                    }
                free(s);
                free(x);
                free(y);
            }
        }
}

/* s_sub (rows r0.., tokens c0..) must equal the same pairs of s_full. */
static void check_sub(int level, int type, int n, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                      const float *full, int ld_full, int r0, int nr, int c0, int nc) {
    const sb_kq_traits *t = &sb_kq_table(level)[type];
    float *sub = malloc(sizeof(float) * (size_t)nr * (size_t)nc);
    assert_non_null(sub);
    t->gemm(n, nr, nc, x + (size_t)r0 * bx, bx, y + (size_t)c0 * by, by, sub, (size_t)nr);
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            if (memcmp(&sub[(size_t)c * nr + r], &full[(size_t)(c0 + c) * ld_full + r0 + r], sizeof(float)))
                fail_msg("%s gemm at %s: pair (%d,%d) of a %dx%d call differs from the same pair in a wider call",
                         t->name, sb_kq_level_name(level), r0 + r, c0 + c, nr, nc);
    free(sub);
}

static void test_gemm_position_independent(void **state) {
    (void)state;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            const sb_kq_traits *t = &sb_kq_table(level)[type];
            if (!t->gemm) continue;
            const int n = t->blck_size == 32 ? 896 : 2048, nr = 37;
            size_t bx, by;
            uint8_t *x = make_rows(type, nr, n, &bx), *y = make_rows(t->vec_dot_type, 24, n, &by);
            float *full = malloc(sizeof(float) * (size_t)nr * 24), *small = malloc(sizeof(float) * (size_t)nr * 3);
            assert_true(full && small);
            t->gemm(n, nr, 24, x, bx, y, by, full, (size_t)nr);        /* packed panels at every level */
            check_sub(level, type, n, x, bx, y, by, full, nr, 3, 29, 5, 9);
            check_sub(level, type, n, x, bx, y, by, full, nr, 17, 20, 13, 11);
            t->gemm(n, nr, 3, x, bx, y, by, small, (size_t)nr);        /* tiles or pairs at every level */
            check_sub(level, type, n, x, bx, y, by, small, nr, 1, 7, 1, 2);
            check_sub(level, type, n, x, bx, y, by, small, nr, 6, 30, 2, 1);
            free(full);
            free(small);
            free(x);
            free(y);
        }
}

/* matmul.c cuts a prompt's rows into blocks of the plan's gemm_rows (then
 * halves them for small matrices): every block size a profile may hold
 * (multiples of 16 up to 512, and the halvings down to 8) must give the
 * pairs one whole call gives, bit for bit, or tuning it would change the
 * logits. */
static void test_gemm_row_blocks(void **state) {
    (void)state;
    static const int blocks[] = { 8, 16, 32, 48, 64, 128, 512 };
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            const sb_kq_traits *t = &sb_kq_table(level)[type];
            if (!t->gemm) continue;
            const int n = t->blck_size == 32 ? 256 : 512, nr = 200, nc = 40;
            size_t bx, by;
            uint8_t *x = make_rows(type, nr, n, &bx), *y = make_rows(t->vec_dot_type, nc, n, &by);
            float *full = malloc(sizeof(float) * (size_t)nr * nc);
            assert_non_null(full);
            t->gemm(n, nr, nc, x, bx, y, by, full, (size_t)nr);
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
                for (int r0 = 0; r0 < nr; r0 += blocks[b])
                    check_sub(level, type, n, x, bx, y, by, full, nr, r0, blocks[b] < nr - r0 ? blocks[b] : nr - r0, 0, nc);
            free(full);
            free(x);
            free(y);
        }
}

/* The AMX gemms and the AVX-512 ones the table runs without them. Shapes:
 * a partial panel, several panel groups and packed chunks, and every tail
 * of a 16-token tile (the AMX kernel's second configuration) down to the
 * 8 tokens where both hand over to the register tiles. */
static void test_gemm_amx_twins(void **state) {
    (void)state;
    if (sb_kq_best_level() < SB_KQ_AVX512 || !sb_kq_amx_usable()) skip();
    static const struct { int type; sb_gemm_fn amx, avx512; } twins[] = {
        { SB_TYPE_Q2_K, sb_kq_gemm_q2_K_q8_K_amx, sb_kq_gemm_q2_K_q8_K_avx512 },
        { SB_TYPE_Q3_K, sb_kq_gemm_q3_K_q8_K_amx, sb_kq_gemm_q3_K_q8_K_avx512 },
        { SB_TYPE_Q4_K, sb_kq_gemm_q4_K_q8_K_amx, sb_kq_gemm_q4_K_q8_K_avx512 },
        { SB_TYPE_Q5_K, sb_kq_gemm_q5_K_q8_K_amx, sb_kq_gemm_q5_K_q8_K_avx512 },
        { SB_TYPE_Q6_K, sb_kq_gemm_q6_K_q8_K_amx, sb_kq_gemm_q6_K_q8_K_avx512 },
    };
    static const int shapes[][3] = { { 4864, 37, 19 }, { 512, 1, 8 }, { 1280, 70, 70 }, { 256, 16, 16 },
                                     { 768, 130, 33 }, { 512, 20, 9 }, { 512, 64, 15 }, { 256, 17, 17 } };
    for (size_t w = 0; w < sizeof twins / sizeof twins[0]; w++) {
        /* every table row a CPU with AMX runs must be the AMX twin, unless SB_AMX=0 said not to */
        const char *off = getenv("SB_AMX");
        assert_ptr_equal(sb_kq_table(SB_KQ_AVX512)[twins[w].type].gemm,
                         off && !strcmp(off, "0") ? twins[w].avx512 : twins[w].amx);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            const int n = shapes[k][0], nr = shapes[k][1], nc = shapes[k][2];
            const size_t ldc = (size_t)nr + 5;
            size_t bx, by;
            uint8_t *x = make_rows(twins[w].type, nr, n, &bx), *y = make_rows(SB_TYPE_Q8_K, nc, n, &by);
            float *a = malloc(sizeof(float) * ldc * (size_t)nc), *b = malloc(sizeof(float) * ldc * (size_t)nc);
            assert_non_null(a);
            assert_non_null(b);
            for (size_t i = 0; i < ldc * (size_t)nc; i++) a[i] = b[i] = SENTINEL;
            twins[w].amx(n, nr, nc, x, bx, y, by, a, ldc);
            twins[w].avx512(n, nr, nc, x, bx, y, by, b, ldc);
            for (int c = 0; c < nc; c++)
                for (size_t r = 0; r < ldc; r++)
                    if (memcmp(&a[(size_t)c * ldc + r], &b[(size_t)c * ldc + r], sizeof(float)))
                        fail_msg("%s amx gemm, n %d, %dx%d, pair (%zu,%d): %.9g, avx512 %.9g", sb_kq_table(0)[twins[w].type].name,
                                 n, nr, nc, r, c, a[(size_t)c * ldc + r], b[(size_t)c * ldc + r]);
            free(a);
            free(b);
            free(x);
            free(y);
        }
    }
}

int main(void) {
    rng_seed(0x2545F4914F6CDD1Dull);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_matches_vec_dot),
        cmocka_unit_test(test_gemm_extreme_values),
        cmocka_unit_test(test_gemm_ref_is_vec_dot_ref),
        cmocka_unit_test(test_gemm_position_independent),
        cmocka_unit_test(test_gemm_row_blocks),
        cmocka_unit_test(test_gemm_panels_are_vec_dot),
        cmocka_unit_test(test_gemm_amx_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
