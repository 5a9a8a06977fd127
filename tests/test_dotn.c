/* test_dotn.c - the multi-token dots (traits .vec_dotn, sb_kq_vec_dotn).
 *
 * For every weight type at every level this CPU runs, one weight row against
 * nt = 1..16 activation rows (and 37 through sb_kq_vec_dotn's groups):
 *  1. each result is the same level's vec_dot on that row pair, BIT FOR BIT
 *     (memcmp), on quantized random rows, random-byte blocks and rows at
 *     the extremes of the quant ranges, with padded activation strides and an
 *     output stride whose gaps must stay untouched; this is what lets a
 *     sequence's numbers not depend on what else is in its decode batch;
 *  2. each result is the reference vec_dot within the kernels' tolerance;
 *  3. the kernels exist where they are meant to (Q2_K…Q6_K, Q4_0, Q5_0, Q8_0 at
 *     AVX-512; Q4_K…Q6_K at AVX2), so 1 and 2 do not pass vacuously, and a level never keeps
 *     the vec_dotn of a level below whose vec_dot it replaced;
 *  4. vec_dotn_il (Q4_K…Q6_K at AVX-512: several weight rows against up to 16 tokens
 *     interleaved by sb_kq_q8_K_interleave) is vec_dot bit for bit for every row, token,
 *     row count and token count, writes only its outputs, and that vec_dot is the
 *     reference's bit for bit (the per-block float step the interleaved kernel repeats);
 *     the same for Q4_0/Q5_0/Q8_0 at AVX-512 on Q8_0 activations prepared by
 *     sb_kq_q8_0_prepare (every tail of n/32 mod 4 blocks; vec_dot bit for bit).
 *  5. every registered variant of a decode dot (sb_kq_variants: the candidates
 *     `switchboard tune` may put in a profile) is its level's vec_dot bit for bit,
 *     on quantized rows, random-byte blocks and extremes, every length above;
 *     its group's first entry is the table's own vec_dot; and resolving a plan
 *     swaps exactly that pointer in (vec_dotn kept: it still matches).
 *  6. vec_dot2 and vec_dot4 (two or four weight rows, a padded stride apart, against one
 *     activation row; Q2_K…Q6_K at AVX-512, none elsewhere) give each row its level's
 *     vec_dot BIT FOR BIT, for quantized, random-byte and extreme rows mixed and every
 *     length above, write only their strided outputs, and so do those of every prefetch
 *     twin; resolving a plan swaps in the twin's multi-row dots with its vec_dot (test 5).
 *  7. the kernels a level runs only on CPUs with one more feature (the Q2_K dots through
 *     VBMI's vpermb) are the level's plain ones bit for bit, every entry point and prefetch
 *     twin, on the rows and lengths above, and the level's table runs them on such a CPU.
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

#include "common/sb_common.h"
#include "tests/kq_testlib.h"
#include "worker/kernels/kq_internal.h"
#include "worker/kernels/sb_kq.h"

#define S_STRIDE 3                  /* output floats apart: the gaps are checked */
#define SENTINEL -12345.0f
#define NT_BIG 37                   /* through sb_kq_vec_dotn: groups of 16, 16, 5 */

static int is_weight(int type) { return ref_row(type)->blck_size > 0 && ref_row(type)->vec_dot != NULL; }

/* nt activation rows of n elements, y_stride bytes apart, quantized from random floats of varied
 * size, or all at the most negative value the quantizer writes. */
static uint8_t *make_acts(int yt, int nt, int n, size_t y_stride, int extreme) {
    uint8_t *y = calloc(1, y_stride * (size_t)nt + 64);
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_true(y && f);
    for (int t = 0; t < nt; t++) {
        const float scale = extreme ? 1.0f : (float)(1 + t % 5) * (t % 3 ? 1.0f : 30.0f);
        for (int i = 0; i < n; i++) f[i] = extreme ? -1.0f : scale * rng_normal();
        ref_row(yt)->from_float(f, y + (size_t)t * y_stride, n);
    }
    free(f);
    return y;
}

/* One weight row x against nt activation rows at one level. */
static void check_row(int level, int type, int n, int nt, const uint8_t *x, const uint8_t *y, size_t y_stride,
                      const char *what) {
    const sb_kq_traits *t = &sb_kq_table(level)[type];
    float *s = malloc(sizeof(float) * S_STRIDE * (size_t)nt);
    assert_non_null(s);
    for (int i = 0; i < S_STRIDE * nt; i++) s[i] = SENTINEL;
    if (nt <= SB_KQ_DOTN_MAX && t->vec_dotn) t->vec_dotn(n, nt, s, S_STRIDE, x, y, y_stride);
    else sb_kq_vec_dotn(t, n, nt, s, S_STRIDE, x, y, y_stride);
    for (int k = 0; k < nt; k++) {
        const uint8_t *yk = y + (size_t)k * y_stride;
        float one, ref;
        t->vec_dot(n, &one, x, yk);
        ref_row(type)->vec_dot(n, &ref, x, yk);
        const float got = s[k * S_STRIDE];
        if (memcmp(&got, &one, sizeof got))
            fail_msg("%s vec_dotn at %s (%s), n %d, nt %d, token %d: %.9g (0x%08x), vec_dot %.9g (0x%08x)", t->name,
                     sb_kq_level_name(level), what, n, nt, k, got, sb_fp32_to_bits(got), one, sb_fp32_to_bits(one));
        const double tol = 2e-6 * abs_dot(type, x, t->vec_dot_type, yk, n) + 1e-30;
        if (!(fabs((double)got - ref) <= tol))
            fail_msg("%s vec_dotn at %s (%s), n %d, token %d: %.9g, ref %.9g (tol %.3g)", t->name,
                     sb_kq_level_name(level), what, n, k, got, ref, tol);
        for (int g = 1; g < S_STRIDE; g++)
            if (s[k * S_STRIDE + g] != SENTINEL) fail_msg("%s vec_dotn wrote into the stride gap", t->name);
    }
    free(s);
}

/* Row lengths: one block, an odd block count (the legacy kernels' 4-block
 * loop plus their tail), and model rows (Phi-3's 3072, 8B's 4096 / 14336
 * are covered in shape by 3072's 12 super-blocks). */
static int lengths_for(int type, int *out) {
    const int bs = ref_row(type)->blck_size;
    if (bs == 1) {
        out[0] = 17, out[1] = 64 + 5, out[2] = 3072;
        return 3;
    }
    out[0] = bs, out[1] = 7 * bs, out[2] = 3 * bs, out[3] = 3072;
    return 4;
}

static void test_dotn_bit_identical(void **state) {
    (void)state;
    rng_seed(7);
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            if (!is_weight(type)) continue;
            const int yt = ref_row(type)->vec_dot_type;
            int lens[4];
            const int nl = lengths_for(type, lens);
            for (int li = 0; li < nl; li++) {
                const int n = lens[li];
                /* padded rows: every 4-byte offset mod 64 (4: Q8_K's and
                 * F32's float alignment, which real rows keep) */
                const size_t y_stride = sb_kq_row_size(ref_row(yt), n) + 4 * (2 * (size_t)li + 1);
                size_t bx;
                uint8_t *x = make_rows(type, 1, n, &bx), *rx = malloc(bx + 64);
                assert_non_null(rx);
                fill_random_blocks(type, rx, n);
                uint8_t *y = make_acts(yt, NT_BIG, n, y_stride, 0);
                for (int nt = 1; nt <= SB_KQ_DOTN_MAX; nt++) {
                    check_row(level, type, n, nt, x, y, y_stride, "quantized");
                    check_row(level, type, n, nt, rx, y + (size_t)(nt % 3) * y_stride, y_stride, "random bytes");
                }
                check_row(level, type, n, NT_BIG, x, y, y_stride, "37 tokens");
                free(x);
                free(rx);
                free(y);
            }
        }
}

/* Every quant at the largest magnitude of its type (kq_testlib.h) against
 * saturated activations: the saturating / 16-bit steps at their limits. */
static void test_dotn_extremes(void **state) {
    (void)state;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            if (!ref_row(type)->gemm) continue;     /* the types make_extreme_rows knows */
            const int n = 7 * ref_row(type)->blck_size, yt = ref_row(type)->vec_dot_type;
            size_t bx, by;
            uint8_t *x = make_extreme_rows(type, 1, n, &bx), *y = make_extreme_rows(yt, SB_KQ_DOTN_MAX, n, &by);
            for (int nt = 1; nt <= SB_KQ_DOTN_MAX; nt += 5) check_row(level, type, n, nt, x, y, by, "extremes");
            free(x);
            free(y);
        }
}

static void test_dotn_table(void **state) {
    (void)state;
    static const int avx512_types[] = { SB_TYPE_Q2_K, SB_TYPE_Q3_K, SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K,
                                        SB_TYPE_Q4_0, SB_TYPE_Q5_0, SB_TYPE_Q8_0 };
    if (sb_kq_best_level() >= SB_KQ_AVX512) {
        const sb_kq_traits *t = sb_kq_table(SB_KQ_AVX512);
        for (size_t i = 0; i < sizeof avx512_types / sizeof avx512_types[0]; i++)
            if (!t[avx512_types[i]].vec_dotn) fail_msg("%s has no AVX-512 vec_dotn", t[avx512_types[i]].name);
    } else {
        print_message("    (no AVX-512 on this CPU: only the fallbacks and lower levels are checked)\n");
    }
    static const int avx2_types[] = { SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K };
    if (sb_kq_best_level() >= SB_KQ_AVX2)
        for (size_t i = 0; i < sizeof avx2_types / sizeof avx2_types[0]; i++)
            if (!sb_kq_table(SB_KQ_AVX2)[avx2_types[i]].vec_dotn)
                fail_msg("%s has no AVX2 vec_dotn", ref_row(avx2_types[i])->name);
    /* a vec_dotn belongs to one vec_dot: where a level replaced vec_dot,
     * it may not inherit the vec_dotn written against the one below */
    for (int l = 1; l < SB_KQ_LEVELS; l++) {
        const sb_kq_traits *t = sb_kq_table(l), *below = sb_kq_table(l - 1);
        for (int id = 0; id < SB_TYPE_COUNT; id++)
            if (t[id].vec_dot != below[id].vec_dot && t[id].vec_dotn)
                assert_true(t[id].vec_dotn != below[id].vec_dotn);
    }
}

/* nrows rows of x (bx apart) against nt tokens of y through vec_dotn_il:
 * every result is vec_dot's bit for bit, the output's row gaps untouched.
 * Q8_K activations are interleaved (and vec_dot is then the reference's bit
 * for bit too), Q8_0 ones prepared (sb_kq_q8_0_prepare; vec_dot's closeness
 * to the reference is test_dotn_bit_identical's). */
static void check_il(int level, int type, int n, int nrows, int nt, const uint8_t *x, size_t bx, const uint8_t *y,
                     size_t y_stride, const char *what) {
    const sb_kq_traits *t = &sb_kq_table(level)[type];
    const int q8_0 = t->vec_dot_type == SB_TYPE_Q8_0;
    const size_t s_stride = (size_t)nrows + 2;
    const size_t il_bytes = q8_0 ? sb_kq_q8_0_prep_bytes(n) : (size_t)(n / 256) * SB_KQ_IL_BLOCK_BYTES;
    uint8_t *il = sb_aligned_alloc(il_bytes);
    float *s = malloc(sizeof(float) * s_stride * (size_t)nt);
    assert_true(il && s);
    for (size_t i = 0; i < s_stride * (size_t)nt; i++) s[i] = SENTINEL;
    if (q8_0) sb_kq_q8_0_prepare(n, nt, y, y_stride, il);
    else sb_kq_q8_K_interleave(n / 256, nt, y, y_stride, il);
    t->vec_dotn_il(n, nrows, nt, s, s_stride, x, bx, il);
    for (int k = 0; k < nt; k++) {
        for (int r = 0; r < nrows; r++) {
            float one, ref;
            t->vec_dot(n, &one, x + (size_t)r * bx, y + (size_t)k * y_stride);
            ref_row(type)->vec_dot(n, &ref, x + (size_t)r * bx, y + (size_t)k * y_stride);
            const float got = s[(size_t)k * s_stride + (size_t)r];
            if (memcmp(&got, &one, sizeof got) || memcmp(&one, &ref, sizeof one))
                fail_msg("%s vec_dotn_il at %s (%s), n %d, rows %d, nt %d, row %d, token %d: %.9g (0x%08x), "
                         "vec_dot %.9g (0x%08x), reference %.9g (0x%08x)", t->name, sb_kq_level_name(level), what, n,
                         nrows, nt, r, k, got, sb_fp32_to_bits(got), one, sb_fp32_to_bits(one), ref,
                         sb_fp32_to_bits(ref));
        }
        for (size_t g = (size_t)nrows; g < s_stride; g++)
            if (s[(size_t)k * s_stride + g] != SENTINEL) fail_msg("%s vec_dotn_il wrote into the row gap", t->name);
    }
    free(s);
    sb_aligned_free(il);
}

static void test_dotn_il(void **state) {
    (void)state;
    rng_seed(11);
    int checked = 0;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            if (!is_weight(type) || !sb_kq_table(level)[type].vec_dotn_il) continue;
            const int yt = sb_kq_table(level)[type].vec_dot_type;
            /* Q8_0 activations: block counts with every tail (n/32 mod 4) and
             * the 0.5B Qwen's 896; Q8_K: 1, 3 and 12 super-blocks. */
            static const int lens_k[] = { 256, 3 * 256, 3072 }, lens_0[] = { 32, 96, 5 * 32, 896, 3072 + 64 };
            const int *lens = yt == SB_TYPE_Q8_0 ? lens_0 : lens_k;
            const size_t n_lens = yt == SB_TYPE_Q8_0 ? SB_ARRAY_LEN(lens_0) : SB_ARRAY_LEN(lens_k);
            for (size_t li = 0; li < n_lens; li++) {
                const int n = lens[li];
                const size_t y_stride = sb_kq_row_size(ref_row(yt), n) + 4 * (2 * li + 1);
                size_t bx;
                uint8_t *x = make_rows(type, 9, n, &bx), *rx = make_rows(type, 9, n, &bx);
                for (int r = 0; r < 9; r++) fill_random_blocks(type, rx + (size_t)r * bx, n);
                uint8_t *y = make_acts(yt, SB_KQ_IL_TOK, n, y_stride, 0);
                for (int nt = 1; nt <= SB_KQ_IL_TOK; nt++)
                    for (int nrows = 1; nrows <= 9; nrows += nt % 2 ? 3 : 4) {
                        check_il(level, type, n, nrows, nt, x, bx, y, y_stride, "quantized");
                        check_il(level, type, n, nrows, nt, rx, bx, y, y_stride, "random bytes");
                    }
                free(x);
                free(rx);
                free(y);
            }
            size_t bx, by;
            const int n = yt == SB_TYPE_Q8_0 ? 7 * 32 : 7 * 256;
            uint8_t *x = make_extreme_rows(type, 5, n, &bx), *y = make_extreme_rows(yt, SB_KQ_IL_TOK, n, &by);
            for (int nt = 1; nt <= SB_KQ_IL_TOK; nt += 3) check_il(level, type, n, 5, nt, x, bx, y, by, "extremes");
            free(x);
            free(y);
            checked++;
        }
    /* Q4_K, Q5_K, Q6_K interleaved; Q4_0, Q5_0, Q8_0 prepared */
    if (sb_kq_best_level() >= SB_KQ_AVX512) assert_int_equal(checked, 6);
}

/* One row pair through a variant and through its level's vec_dot: memcmp. */
static void check_variant(const sb_kq_variant *v, int n, const uint8_t *x, const uint8_t *y, const char *what) {
    float got, want;
    v->vec_dot(n, &got, x, y);
    sb_kq_table(v->level)[v->type].vec_dot(n, &want, x, y);
    if (memcmp(&got, &want, sizeof got))
        fail_msg("variant %s of %s (%s, n=%d): %.9g, the level's vec_dot %.9g", v->name, ref_row(v->type)->name,
                 what, n, (double)got, (double)want);
}

static void test_dotn_variants(void **state) {
    (void)state;
    rng_seed(11);
    int checked = 0;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            const sb_kq_variant *v;
            const int nv = sb_kq_variants(level, type, &v);
            if (!nv) continue;
            assert_true(v[0].vec_dot == sb_kq_table(level)[type].vec_dot);    /* the default comes first */
            const int yt = ref_row(type)->vec_dot_type;
            int lens[4];
            const int nl = lengths_for(type, lens);
            for (int li = 0; li < nl; li++) {
                const int n = lens[li];
                size_t bx, bex;
                uint8_t *x = make_rows(type, 1, n, &bx), *ex = make_extreme_rows(type, 1, n, &bex), *rx = malloc(bx + 64);
                assert_non_null(rx);
                fill_random_blocks(type, rx, n);
                uint8_t *y = make_acts(yt, 2, n, sb_kq_row_size(ref_row(yt), n), 0);
                uint8_t *ey = make_acts(yt, 1, n, sb_kq_row_size(ref_row(yt), n), 1);
                for (int i = 0; i < nv; i++) {
                    check_variant(&v[i], n, x, y, "quantized");
                    check_variant(&v[i], n, rx, y + sb_kq_row_size(ref_row(yt), n), "random bytes");
                    check_variant(&v[i], n, ex, ey, "extremes");
                }
                free(x), free(ex), free(rx), free(y), free(ey);
            }
            /* a plan swaps in exactly the variant's pointer */
            for (int i = 0; i < nv; i++) {
                sb_kq_plan plan;
                sb_kq_kernels k;
                sb_kq_plan_default(level, &plan);
                plan.dot[type] = &v[i];
                sb_kq_resolve(&plan, &k);
                assert_true(k.row[type].vec_dot == v[i].vec_dot);
                /* and its own multi-row twins (none where the level has none) */
                assert_true(k.row[type].vec_dot2 == v[i].vec_dot2 && k.row[type].vec_dot4 == v[i].vec_dot4);
                assert_true(k.row[type].vec_dotn == sb_kq_table(level)[type].vec_dotn);
                assert_int_equal(k.tuned, i > 0);
                assert_true(sb_kq_variant_find(level, type, v[i].name) == &v[i]);
                checked++;
            }
        }
    /* the prefetch twins: 5 per k-quant at AVX2; and 5 per legacy and k-quant type at AVX-512 */
    if (sb_kq_best_level() >= SB_KQ_AVX2) assert_true(checked >= 25);
    if (sb_kq_best_level() >= SB_KQ_AVX512) assert_int_equal(checked, 65);
}

/* dotr over R rows x_step bytes apart against vec_dot on each, bit for bit;
 * the gaps between its s_step-apart outputs stay untouched. */
static void check_dotr(sb_vec_dotr_fn dotr, int R, sb_vec_dot_fn dot, const char *name, int n, const uint8_t *x,
                       size_t x_step, const uint8_t *y, const char *what) {
    float s[4 * S_STRIDE];
    for (int i = 0; i < 4 * S_STRIDE; i++) s[i] = SENTINEL;
    dotr(n, s, S_STRIDE, x, x_step, y);
    for (int k = 0; k < R; k++) {
        float want;
        dot(n, &want, x + (size_t)k * x_step, y);
        const float got = s[k * S_STRIDE];
        if (memcmp(&got, &want, sizeof got))
            fail_msg("%s vec_dot%d (%s), n %d, row %d: %.9g (0x%08x), vec_dot %.9g (0x%08x)", name, R, what, n, k,
                     (double)got, sb_fp32_to_bits(got), (double)want, sb_fp32_to_bits(want));
        for (int g = 1; g < S_STRIDE; g++)
            if (s[k * S_STRIDE + g] != SENTINEL) fail_msg("%s vec_dot%d wrote into the stride gap", name, R);
    }
    for (int i = R * S_STRIDE; i < 4 * S_STRIDE; i++)
        if (s[i] != SENTINEL) fail_msg("%s vec_dot%d wrote past its %d rows", name, R, R);
}

/* Four rows x_step apart (a padded stride): each of kind[k] - 'q'
 * quantized, 'r' random bytes, 'e' the extremes. */
static uint8_t *mixed_rows(int type, int n, const char *kind, size_t *x_step) {
    size_t bx;
    uint8_t *q = make_rows(type, 4, n, &bx), *e = make_extreme_rows(type, 1, n, &bx);
    *x_step = bx + 36;             /* rows off every alignment */
    uint8_t *x = calloc(4, *x_step + 64);
    assert_non_null(x);
    for (int k = 0; k < 4; k++) {
        uint8_t *row = x + (size_t)k * *x_step;
        if (kind[k] == 'r') fill_random_blocks(type, row, n);
        else memcpy(row, kind[k] == 'e' ? e : q + (size_t)k * bx, bx);
    }
    free(q), free(e);
    return x;
}

/* Four-row sets of every kind below, at every length of the type, against
 * a quantized activation (the extremes' against the extreme one): each
 * handed to check(n, x, x_step, y, kind, ctx). */
typedef void (*rows_check_fn)(int n, const uint8_t *x, size_t x_step, const uint8_t *y, const char *kind, const void *ctx);
static void for_each_row_set(int type, rows_check_fn check, const void *ctx) {
    static const char *const kinds[] = { "qqqq", "rqeq", "qrqr", "eeee", "qeqr" };
    const int yt = ref_row(type)->vec_dot_type;
    int lens[4];
    const int nl = lengths_for(type, lens);
    for (int li = 0; li < nl; li++) {
        const int n = lens[li];
        uint8_t *y = make_acts(yt, 1, n, sb_kq_row_size(ref_row(yt), n), 0);
        uint8_t *ey = make_acts(yt, 1, n, sb_kq_row_size(ref_row(yt), n), 1);
        for (size_t kd = 0; kd < sizeof kinds / sizeof kinds[0]; kd++) {
            size_t x_step;
            uint8_t *x = mixed_rows(type, n, kinds[kd], &x_step);
            check(n, x, x_step, strcmp(kinds[kd], "eeee") ? y : ey, kinds[kd], ctx);
            free(x);
        }
        free(y), free(ey);
    }
}

/* The multi-row dots of every variant of one type at one level. */
typedef struct {
    const sb_kq_traits *t;
    const sb_kq_variant *v;
    int nv;
} dotr_case;

static void check_variants_dotr(int n, const uint8_t *x, size_t x_step, const uint8_t *y, const char *kind, const void *ctx) {
    const dotr_case *c = ctx;
    for (int i = 0; i < c->nv; i++) {
        assert_true(c->v[i].vec_dot2 && c->v[i].vec_dot4);
        check_dotr(c->v[i].vec_dot2, 2, c->t->vec_dot, c->v[i].name, n, x, x_step, y, kind);
        check_dotr(c->v[i].vec_dot4, 4, c->t->vec_dot, c->v[i].name, n, x, x_step, y, kind);
    }
}

static void test_dotr(void **state) {
    (void)state;
    rng_seed(13);
    int types = 0;
    for (int level = 0; level <= sb_kq_best_level(); level++)
        for (int type = 0; type < SB_TYPE_COUNT; type++) {
            const sb_kq_traits *t = &sb_kq_table(level)[type];
            const int kquant = type == SB_TYPE_Q2_K || type == SB_TYPE_Q3_K || type == SB_TYPE_Q4_K ||
                               type == SB_TYPE_Q5_K || type == SB_TYPE_Q6_K;
            /* where they are meant to be, and nowhere else (a level below AVX-512 has none) */
            if (level == SB_KQ_AVX512 && kquant) assert_true(t->vec_dot2 && t->vec_dot4);
            else if (t->vec_dot2 || t->vec_dot4)
                fail_msg("%s has a multi-row dot at %s", t->name, sb_kq_level_name(level));
            if (!t->vec_dot2) continue;
            types++;
            const sb_kq_variant *v;
            const int nv = sb_kq_variants(level, type, &v);
            assert_true(nv > 0 && v[0].vec_dot2 == t->vec_dot2 && v[0].vec_dot4 == t->vec_dot4);
            const dotr_case c = { t, v, nv };
            for_each_row_set(type, check_variants_dotr, &c);
        }
    if (sb_kq_best_level() >= SB_KQ_AVX512) assert_int_equal(types, 5);
    else print_message("    (no AVX-512 on this CPU: no multi-row dot to check)\n");
}

/* The kernels a CPU feature beyond the level's buys, against the level's
 * plain ones, entry point by entry point (each a prefetch twin). */
#define TWINS(fn) { fn, fn##_pf0, fn##_pf4k, fn##_pf16k, fn##_pf32k }
typedef struct {
    int type;
    const char *feature;
    int has;                        /* the CPU has it */
    sb_vec_dot_fn plain;            /* the level's own vec_dot */
    sb_vec_dot_fn one[5];
    sb_vec_dotr_fn two[5], four[5];
    sb_vec_dotn_fn dotn;            /* the level's vec_dotn, kept beside them */
} cpu_twin;

static void check_cpu_twin_rows(int n, const uint8_t *x, size_t x_step, const uint8_t *y, const char *kind, const void *ctx) {
    const cpu_twin *c = ctx;
    for (int i = 0; i < 5; i++) {
        for (int k = 0; k < 4; k++) {
            float got, want;
            c->one[i](n, &got, x + (size_t)k * x_step, y);
            c->plain(n, &want, x + (size_t)k * x_step, y);
            if (memcmp(&got, &want, sizeof got))
                fail_msg("%s %s vec_dot %d (%s), n %d, row %d: %.9g, AVX-512 %.9g", ref_row(c->type)->name, c->feature,
                         i, kind, n, k, (double)got, (double)want);
        }
        check_dotr(c->two[i], 2, c->plain, c->feature, n, x, x_step, y, kind);
        check_dotr(c->four[i], 4, c->plain, c->feature, n, x, x_step, y, kind);
    }
}

static void check_cpu_twin(const cpu_twin *c) {
    const sb_kq_traits *t = &sb_kq_table(SB_KQ_AVX512)[c->type];
    /* the table runs them, with the level's vec_dotn beside */
    assert_true(t->vec_dot == c->one[0] && t->vec_dot2 == c->two[0] && t->vec_dot4 == c->four[0] && t->vec_dotn == c->dotn);
    for_each_row_set(c->type, check_cpu_twin_rows, c);
}

static void test_cpu_twins(void **state) {
    (void)state;
    if (sb_kq_best_level() < SB_KQ_AVX512) {
        print_message("    (no AVX-512 on this CPU: nothing to compare)\n");
        skip();
    }
    __builtin_cpu_init();
    const cpu_twin twins[] = {
        { SB_TYPE_Q2_K, "avx512vbmi", __builtin_cpu_supports("avx512vbmi"), sb_kq_dot_q2_K_q8_K_avx512,
          TWINS(sb_kq_dot_q2_K_q8_K_avx512vbmi), TWINS(sb_kq_dot2_q2_K_q8_K_avx512vbmi),
          TWINS(sb_kq_dot4_q2_K_q8_K_avx512vbmi), sb_kq_dotn_q2_K_q8_K_avx512 },
    };
    rng_seed(17);
    int checked = 0;
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
        if (!twins[i].has) {
            print_message("    (no %s on this CPU: its %s dots not compared)\n", twins[i].feature, ref_row(twins[i].type)->name);
            continue;
        }
        check_cpu_twin(&twins[i]);
        checked++;
    }
    if (!checked) skip();
}

/* A variant is applied only in its own level's table and type's row. */
static void test_dotn_variant_foreign(void **state) {
    (void)state;
    if (sb_kq_best_level() < SB_KQ_AVX512) skip();
    const sb_kq_variant *v = sb_kq_variant_find(SB_KQ_AVX2, SB_TYPE_Q4_K, "avx2-pf0");
    assert_non_null(v);
    sb_kq_plan plan;
    sb_kq_kernels k;
    sb_kq_plan_default(SB_KQ_AVX512, &plan);
    plan.dot[SB_TYPE_Q4_K] = v;                 /* another level's */
    plan.dot[SB_TYPE_Q5_K] = v;                 /* another type's */
    sb_kq_resolve(&plan, &k);
    assert_true(k.row[SB_TYPE_Q4_K].vec_dot == sb_kq_table(SB_KQ_AVX512)[SB_TYPE_Q4_K].vec_dot);
    assert_true(k.row[SB_TYPE_Q5_K].vec_dot == sb_kq_table(SB_KQ_AVX512)[SB_TYPE_Q5_K].vec_dot);
    assert_int_equal(k.tuned, 0);
    assert_null(sb_kq_variant_find(SB_KQ_AVX512, SB_TYPE_Q4_K, "avx2-pf0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dotn_variants),
        cmocka_unit_test(test_dotn_variant_foreign),
        cmocka_unit_test(test_dotn_table),
        cmocka_unit_test(test_dotn_bit_identical),
        cmocka_unit_test(test_dotn_extremes),
        cmocka_unit_test(test_dotn_il),
        cmocka_unit_test(test_dotr),
        cmocka_unit_test(test_cpu_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
