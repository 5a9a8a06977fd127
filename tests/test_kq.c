/* test_kq.c - the quantized kernels, table-driven over the traits tables.
 *
 *  1. every weight type at every level this CPU runs: vec_dot(level) equals
 *     vec_dot(ref) up to float summation order, on quantized random rows and
 *     on random-byte blocks (with finite scales);
 *  2. vec_dot(ref) equals the float dot of the two dequantized rows (the
 *     activation pairing and the block semantics are right);
 *  3. dequantize(quantize(x)) stays within a per-type error bound (like
 *     ggml's test-quantize-fns);
 *  4. fp16 / bf16 conversions: round trips and round-half-even edges;
 *  5. activation quantizers and dequantizers at every level give the
 *     reference bytes, exactly;
 *  6. from_float_ref reproduces llama.cpp's bytes: the tests/data fixtures
 *     were quantized by llama-quantize from the F16 files next to them.
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

#include "worker/gguf/sb_gguf.h"
#include "tests/kq_testlib.h"
#include "worker/kernels/kq_internal.h"
#include "worker/kernels/sb_kq.h"

#define N_ROW 4096          /* one row of a 4096-wide model: 16 super-blocks */

/* ---- helpers ------------------------------------------------------------ */

static void fill_normal(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = scale * rng_normal();
}

static int n_levels(void) { return sb_kq_best_level() + 1; }


/* Types that are weights somewhere (have a dot). */
static int is_weight(int type) {
    const sb_kq_traits *t = ref_row(type);
    return t->blck_size > 0 && t->vec_dot != NULL;
}

static float f16_random_finite(float scale) { return sb_fp16_to_fp32(sb_fp32_to_fp16(scale * rng_normal())); }

/* Σ x·y and Σ|x·y| of two rows after dequantizing them. */
static void float_dot(int xt, const void *x, int yt, const void *y, int n, double *dot, double *abs_dot) {
    float *fx = malloc(sizeof(float) * (size_t)n), *fy = malloc(sizeof(float) * (size_t)n);
    assert_non_null(fx);
    assert_non_null(fy);
    ref_row(xt)->to_float(x, fx, n);
    ref_row(yt)->to_float(y, fy, n);
    double d = 0, a = 0;
    for (int i = 0; i < n; i++) {
        d += (double)fx[i] * fy[i];
        a += fabs((double)fx[i] * fy[i]);
    }
    *dot = d;
    *abs_dot = a;
    free(fx);
    free(fy);
}

typedef struct {
    int n;
    void *x, *y;            /* weight row, activation row */
    float *fx, *fy;
} dot_case;

static void case_alloc(dot_case *c, int type, int n) {
    const int yt = ref_row(type)->vec_dot_type;
    c->n = n;
    c->x = calloc(1, sb_kq_row_size(ref_row(type), n) + 64);
    c->y = calloc(1, sb_kq_row_size(ref_row(yt), n) + 64);
    c->fx = malloc(sizeof(float) * (size_t)n);
    c->fy = malloc(sizeof(float) * (size_t)n);
    assert_true(c->x && c->y && c->fx && c->fy);
}

static void case_free(dot_case *c) {
    free(c->x);
    free(c->y);
    free(c->fx);
    free(c->fy);
}

/* Row lengths to try: the model-sized row, and for the per-element types
 * lengths that exercise every SIMD tail. */
static int lengths_for(int type, int *out) {
    const int bs = ref_row(type)->blck_size;
    int k = 0;
    out[k++] = N_ROW;
    out[k++] = bs == 1 ? 64 : (bs == 32 ? 96 : 512);     /* short: tail loops */
    out[k++] = bs;
    if (bs == 1) {
        out[k++] = 17;
        out[k++] = 4096 + 13;
        out[k++] = 3;
    }
    return k;
}

/* ---- 1. SIMD dot == reference dot ----------------------------------------- */

static void check_levels_agree(int type, const dot_case *c, const char *what) {
    float want;
    ref_row(type)->vec_dot(c->n, &want, c->x, c->y);
    double fdot, fabs_dot;
    float_dot(type, c->x, ref_row(type)->vec_dot_type, c->y, c->n, &fdot, &fabs_dot);
    /* only the float summation order differs: bound by ε·Σ|terms|·log-ish */
    const double tol = 2e-6 * fabs_dot + 1e-30;
    for (int l = 1; l < n_levels(); l++) {
        float got;
        sb_kq_table(l)[type].vec_dot(c->n, &got, c->x, c->y);
        if (!(fabs((double)got - want) <= tol))
            fail_msg("%s vec_dot %s vs ref, n=%d (%s): %.9g vs %.9g (Σ|xy| %.6g, tol %.3g)", ref_row(type)->name,
                     sb_kq_level_name(l), c->n, what, got, want, fabs_dot, tol);
    }
}

static void test_dot_levels_match_ref(void **state) {
    (void)state;
    rng_seed(1);
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        if (!is_weight(type)) continue;
        int lens[8];
        const int nl = lengths_for(type, lens);
        const int yt = ref_row(type)->vec_dot_type;
        for (int li = 0; li < nl; li++) {
            dot_case c;
            case_alloc(&c, type, lens[li]);
            for (int rep = 0; rep < 4; rep++) {
                /* quantized random data, with an offset so mins matter */
                fill_normal(c.fx, c.n, 1.0f);
                for (int i = 0; i < c.n; i++) c.fx[i] += rep == 1 ? 0.5f : 0.0f;
                fill_normal(c.fy, c.n, rep == 2 ? 30.0f : 1.0f);
                ref_row(type)->from_float_ref(c.fx, c.x, c.n);
                ref_row(yt)->from_float(c.fy, c.y, c.n);
                check_levels_agree(type, &c, "quantized");
                /* random-byte weight blocks */
                fill_random_blocks(type, c.x, c.n);
                check_levels_agree(type, &c, "random bytes");
            }
            case_free(&c);
        }
    }
}

/* ---- 2. reference dot == float dot of the dequantized rows ---------------- */

static void test_dot_semantics(void **state) {
    (void)state;
    rng_seed(2);
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        if (!is_weight(type)) continue;
        const int yt = ref_row(type)->vec_dot_type;
        /* Q4_1/Q5_1 use the activation's s = fp16(d·Σq) for the min term,
         * not Σ of the dequantized values: that rounding is part of the
         * format (llama.cpp does the same), so allow fp16 precision there. */
        const double rel = (type == SB_TYPE_Q4_1 || type == SB_TYPE_Q5_1) ? 1e-3 : 4e-6;
        dot_case c;
        case_alloc(&c, type, N_ROW);
        for (int rep = 0; rep < 3; rep++) {
            fill_normal(c.fx, c.n, 1.0f);
            fill_normal(c.fy, c.n, 1.0f);
            for (int i = 0; i < c.n; i++) c.fx[i] += rep * 0.3f;
            ref_row(type)->from_float_ref(c.fx, c.x, c.n);
            ref_row(yt)->from_float(c.fy, c.y, c.n);
            if (rep == 2) fill_random_blocks(type, c.x, c.n);
            float got;
            ref_row(type)->vec_dot(c.n, &got, c.x, c.y);
            double want, abs_dot;
            float_dot(type, c.x, yt, c.y, c.n, &want, &abs_dot);
            if (!(fabs(got - want) <= rel * abs_dot))
                fail_msg("%s·%s ref dot %.9g, float dot of dequantized rows %.9g (Σ|xy| %.6g)", ref_row(type)->name,
                         ref_row(yt)->name, got, want, abs_dot);
        }
        case_free(&c);
    }
}

/* ---- 3. round-trip error ------------------------------------------------ */

/* Upper bounds on RMSE(x - deq(quant(x))) / RMS(x) for N(0,1) data; each
 * about 1.25x what the reference quantizers measure, so a broken search
 * or a swapped nibble fails. */
static double rmse_bound(int type) {
    switch (type) {
    case SB_TYPE_F32: return 1e-9;
    case SB_TYPE_F16: return 4e-4;
    case SB_TYPE_BF16: return 3e-3;
    case SB_TYPE_Q4_0: return 0.125;
    case SB_TYPE_Q4_1: return 0.105;
    case SB_TYPE_Q5_0: return 0.062;
    case SB_TYPE_Q5_1: return 0.052;
    case SB_TYPE_Q8_0: case SB_TYPE_Q8_1: return 0.0085;
    case SB_TYPE_Q2_K: return 0.38;
    case SB_TYPE_Q3_K: return 0.21;
    case SB_TYPE_Q4_K: return 0.10;
    case SB_TYPE_Q5_K: return 0.052;
    case SB_TYPE_Q6_K: return 0.026;
    case SB_TYPE_Q8_K: return 0.009;
    default: return 0;
    }
}

static void test_roundtrip_error(void **state) {
    (void)state;
    rng_seed(3);
    float *x = malloc(sizeof(float) * N_ROW), *y = malloc(sizeof(float) * N_ROW);
    void *q = malloc(N_ROW * 4 + 64);
    assert_true(x && y && q);
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        const sb_kq_traits *t = ref_row(type);
        if (!t->blck_size) continue;
        fill_normal(x, N_ROW, 1.0f);
        t->from_float_ref(x, q, N_ROW);
        t->to_float(q, y, N_ROW);
        double se = 0, ss = 0;
        for (int i = 0; i < N_ROW; i++) {
            se += (double)(x[i] - y[i]) * (x[i] - y[i]);
            ss += (double)x[i] * x[i];
        }
        const double rel = sqrt(se / ss);
        print_message("    %-5s relative RMSE %.5f (bound %.5f)\n", t->name, rel, rmse_bound(type));
        if (!(rel <= rmse_bound(type))) fail_msg("%s round trip: relative RMSE %.5f > %.5f", t->name, rel, rmse_bound(type));
        /* an all-zero row must come back as zeros, not NaN */
        memset(x, 0, sizeof(float) * N_ROW);
        t->from_float_ref(x, q, N_ROW);
        t->to_float(q, y, N_ROW);
        for (int i = 0; i < N_ROW; i++)
            if (y[i] != 0.0f) fail_msg("%s: zero row came back with y[%d] = %g", t->name, i, y[i]);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- 4. fp16 / bf16 conversions --------------------------------------- */

static void test_fp16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = sb_fp16_to_fp32((sb_fp16)h);
        if (isnan(f)) {
            assert_true(((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF));
            assert_true(isnan(sb_fp16_to_fp32(sb_fp32_to_fp16(f))));
        } else {
            assert_int_equal(sb_fp32_to_fp16(f), h);
        }
    }
    static const struct { float f; uint16_t h; } edges[] = {
        { 1.0f, 0x3C00 }, { -2.0f, 0xC000 }, { 65504.0f, 0x7BFF },
        { 1.0f + 0x1p-11f, 0x3C00 },                 /* tie -> even (down) */
        { 1.0f + 3 * 0x1p-11f, 0x3C02 },             /* tie -> even (up) */
        { 1.0f + 0x1p-11f + 0x1p-20f, 0x3C01 },      /* above the tie */
        { 65519.0f, 0x7BFF }, { 65520.0f, 0x7C00 },  /* tie at max -> inf */
        { 0x1p-24f, 0x0001 }, { 0x1p-25f, 0x0000 },  /* subnormal tie -> 0 */
        { 3 * 0x1p-25f, 0x0002 }, { 0x1p-14f, 0x0400 },
        { -0.0f, 0x8000 }, { INFINITY, 0x7C00 }, { -INFINITY, 0xFC00 }, { 1e10f, 0x7C00 },
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        if (sb_fp32_to_fp16(edges[i].f) != edges[i].h)
            fail_msg("fp16(%a) = 0x%04x, want 0x%04x", (double)edges[i].f, sb_fp32_to_fp16(edges[i].f), edges[i].h);
    assert_true(isnan(sb_fp16_to_fp32(sb_fp32_to_fp16(NAN))));

    for (uint32_t h = 0; h < 65536; h++) {
        const float f = sb_bf16_to_fp32((sb_bf16)h);
        if (!isnan(f)) assert_int_equal(sb_fp32_to_bf16(f), h);
    }
    assert_int_equal(sb_fp32_to_bf16(sb_fp32_from_bits(0x3F808000u)), 0x3F80);  /* tie -> even */
    assert_int_equal(sb_fp32_to_bf16(sb_fp32_from_bits(0x3F818000u)), 0x3F82);
    assert_int_equal(sb_fp32_to_bf16(sb_fp32_from_bits(0x3F808001u)), 0x3F81);
    assert_int_equal(sb_fp32_to_bf16(sb_fp32_from_bits(0x7F7FFFFFu)), 0x7F80);  /* rounds to inf */
    assert_true(isnan(sb_bf16_to_fp32(sb_fp32_to_bf16(NAN))));
}

/* ---- 5. activation quantizers and dequantizers: every level, same bytes --- */

/* Data that hits the rounding and sign corner cases of the quantizers. */
static void fill_corner_cases(float *x, int n, int variant) {
    switch (variant) {
    case 0: fill_normal(x, n, 1.0f); break;
    case 1: memset(x, 0, sizeof(float) * (size_t)n); break;
    case 2: /* amax 127 per block: x·127/amax = x exactly, so .5 values tie */
        for (int i = 0; i < n; i++) x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(rng_u32() % 253) - 126) + 0.5f;
        break;
    case 3: /* +a and -a both at the max: the first one fixes the sign of d */
        fill_normal(x, n, 1.0f);
        for (int i = 0; i < n; i += 64) { x[i + 5] = -8.0f; x[i + 9] = 8.0f; }
        break;
    case 4: /* tiny and huge magnitudes, subnormal fp16 scales */
        fill_normal(x, n / 2, 1e-6f);
        fill_normal(x + n / 2, n - n / 2, 1e4f);
        for (int i = 0; i < n; i += 7) x[i] *= 1e-3f;
        break;
    default: /* ±f16-representable values, exact conversions */
        for (int i = 0; i < n; i++) x[i] = f16_random_finite(100.0f);
    }
}

static void test_activation_quantizers_match_ref(void **state) {
    (void)state;
    static const int act_types[] = { SB_TYPE_Q8_0, SB_TYPE_Q8_1, SB_TYPE_Q8_K, SB_TYPE_F16, SB_TYPE_BF16, SB_TYPE_F32 };
    rng_seed(5);
    const int n = N_ROW + 256;
    float *x = malloc(sizeof(float) * (size_t)(n + 8));
    uint8_t *want = malloc((size_t)n * 4 + 64), *got = malloc((size_t)n * 4 + 64);
    assert_true(x && want && got);
    for (size_t k = 0; k < sizeof act_types / sizeof act_types[0]; k++) {
        const int type = act_types[k];
        const sb_kq_traits *r = ref_row(type);
        for (int variant = 0; variant < 6; variant++) {
            int len = n - (variant & 1 ? 256 : 0);
            if (r->blck_size == 1) len += variant;            /* odd tails */
            fill_corner_cases(x, len, variant);
            const size_t bytes = sb_kq_row_size(r, len);
            r->from_float(x, want, len);
            for (int l = 1; l < n_levels(); l++) {
                memset(got, 0xA5, bytes);
                sb_kq_table(l)[type].from_float(x, got, len);
                if (memcmp(got, want, bytes) != 0) {
                    size_t at = 0;
                    while (got[at] == want[at]) at++;
                    fail_msg("%s from_float %s differs from ref at byte %zu (variant %d, n=%d)", r->name,
                             sb_kq_level_name(l), at, variant, len);
                }
            }
        }
    }
    free(x);
    free(want);
    free(got);
}

/* The quantizers are only half of it: the reference Q8_0 activation
 * quantizer is llama.cpp's x86 one (127/amax, ties to even), which differs
 * from quantize_row_q8_0_ref (1/d, roundf) exactly on ties. Pin that. */
static void test_q8_0_activation_vs_file_quantizer(void **state) {
    (void)state;
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)i - 15.5f;   /* .5 everywhere */
    x[31] = 127.0f;                                          /* id = 1 */
    sb_block_q8_0 act, file;
    ref_row(SB_TYPE_Q8_0)->from_float(x, &act, 32);
    ref_row(SB_TYPE_Q8_0)->from_float_ref(x, &file, 32);
    assert_int_equal(act.qs[0], -16);   /* -15.5 -> even */
    assert_int_equal(file.qs[0], -16);  /* roundf: away from zero */
    assert_int_equal(act.qs[1], -14);   /* -14.5 -> even */
    assert_int_equal(file.qs[1], -15);
}

static void test_dequantizers_match_ref(void **state) {
    (void)state;
    rng_seed(6);
    float *want = malloc(sizeof(float) * (N_ROW + 32)), *got = malloc(sizeof(float) * (N_ROW + 32));
    void *q = malloc(N_ROW * 4 + 256);
    assert_true(want && got && q);
    for (int type = 0; type < SB_TYPE_COUNT; type++) {
        const sb_kq_traits *r = ref_row(type);
        if (!r->blck_size) continue;
        const int len = r->blck_size == 1 ? N_ROW + 7 : N_ROW;
        if (is_weight(type)) {
            fill_random_blocks(type, q, len);
        } else {
            fill_normal(got, len, 3.0f);
            r->from_float(got, q, len);
        }
        r->to_float(q, want, len);
        for (int l = 1; l < n_levels(); l++) {
            sb_kq_table(l)[type].to_float(q, got, len);
            for (int i = 0; i < len; i++)
                if (memcmp(&got[i], &want[i], 4) != 0)
                    fail_msg("%s to_float %s: element %d is %a, ref %a", r->name, sb_kq_level_name(l), i, (double)got[i],
                             (double)want[i]);
        }
    }
    free(want);
    free(got);
    free(q);
}

/* ---- 6. bit-exact against llama-quantize ---------------------------------- */

/* Quantize every tensor of `src` (F16) that `quant` stores in another type
 * with our reference quantizer and compare with llama.cpp's bytes. */
static void check_file_bytes(const char *src_path, const char *quant_path, int *seen_types) {
    char err[SB_ERR_LEN];
    sb_gguf *src = NULL, *q = NULL;
    if (sb_gguf_open(src_path, &src, err) != 0) fail_msg("%s", err);
    if (sb_gguf_open(quant_path, &q, err) != 0) fail_msg("%s", err);
    size_t compared = 0;
    for (size_t i = 0; i < sb_gguf_n_tensors(q); i++) {
        const sb_gguf_tensor *tq = sb_gguf_tensor_at(q, i);
        char name[SB_GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)tq->name.len, tq->name.ptr);
        const sb_gguf_tensor *ts = sb_gguf_find_tensor(src, name);
        assert_non_null(ts);
        if (tq->type == ts->type || ts->type == SB_TYPE_F32) continue;   /* kept as is */
        int64_t nel = 1;
        for (uint32_t d = 0; d < ts->n_dims; d++) nel *= ts->ne[d];
        const sb_kq_traits *tt = ref_row((int)tq->type);
        assert_true(tt->blck_size > 0);
        float *f = malloc(sizeof(float) * (size_t)nel);
        uint8_t *mine = malloc(tq->nbytes);
        assert_true(f && mine);
        ref_row((int)ts->type)->to_float(ts->data, f, nel);
        tt->from_float_ref(f, mine, nel);
        assert_int_equal(sb_kq_row_size(tt, nel), tq->nbytes);
        if (memcmp(mine, tq->data, tq->nbytes) != 0) {
            size_t b = 0;
            while (memcmp(mine + b * tt->type_size, (const uint8_t *)tq->data + b * tt->type_size, tt->type_size) == 0) b++;
            fail_msg("%s: %s (%s) differs from llama.cpp's bytes, first in block %zu", quant_path, name, tt->name, b);
        }
        seen_types[tq->type]++;
        compared++;
        free(f);
        free(mine);
    }
    assert_true(compared > 0);
    sb_gguf_close(src);
    sb_gguf_close(q);
}

static void test_llama_cpp_bytes(void **state) {
    (void)state;
    static const char *const pairs[][2] = {
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q8_0.gguf" },
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q4_0.gguf" },
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q2_K.gguf" },
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q3_K_M.gguf" },
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q4_K_M.gguf" },
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q5_K_M.gguf" },
        { "tests/data/tiny-llama-spm-f16.gguf", "tests/data/tiny-llama-spm-Q6_K.gguf" },
        { "tests/data/tiny-phi3-f16.gguf", "tests/data/tiny-phi3-Q8_0.gguf" },
        { "tests/data/tiny-phi3-f16.gguf", "tests/data/tiny-phi3-Q4_K_M.gguf" },
        { "tests/data/tiny-llama3-f16.gguf", "tests/data/tiny-llama3-Q5_K_M.gguf" },
    };
    int seen[SB_TYPE_COUNT] = { 0 };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) check_file_bytes(pairs[i][0], pairs[i][1], seen);
    /* the fixtures must actually cover every type we claim to reproduce */
    static const int must[] = { SB_TYPE_Q8_0, SB_TYPE_Q4_0, SB_TYPE_Q2_K, SB_TYPE_Q3_K,
                                SB_TYPE_Q4_K, SB_TYPE_Q5_K, SB_TYPE_Q6_K };
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        print_message("    %-5s %d tensors byte-identical to llama-quantize\n", ref_row(must[i])->name, seen[must[i]]);
        assert_true(seen[must[i]] > 0);
    }
}

/* ---- the table itself ------------------------------------------------------ */

static void test_table_shape(void **state) {
    (void)state;
    static const struct { int type; int bs; size_t size; int vdt; } rows[] = {
        { SB_TYPE_F32, 1, 4, SB_TYPE_F32 }, { SB_TYPE_F16, 1, 2, SB_TYPE_F16 }, { SB_TYPE_BF16, 1, 2, SB_TYPE_BF16 },
        { SB_TYPE_Q4_0, 32, 18, SB_TYPE_Q8_0 }, { SB_TYPE_Q4_1, 32, 20, SB_TYPE_Q8_1 },
        { SB_TYPE_Q5_0, 32, 22, SB_TYPE_Q8_0 }, { SB_TYPE_Q5_1, 32, 24, SB_TYPE_Q8_1 },
        { SB_TYPE_Q8_0, 32, 34, SB_TYPE_Q8_0 }, { SB_TYPE_Q8_1, 32, 36, SB_TYPE_Q8_1 },
        { SB_TYPE_Q2_K, 256, 84, SB_TYPE_Q8_K }, { SB_TYPE_Q3_K, 256, 110, SB_TYPE_Q8_K },
        { SB_TYPE_Q4_K, 256, 144, SB_TYPE_Q8_K }, { SB_TYPE_Q5_K, 256, 176, SB_TYPE_Q8_K },
        { SB_TYPE_Q6_K, 256, 210, SB_TYPE_Q8_K }, { SB_TYPE_Q8_K, 256, 292, SB_TYPE_Q8_K },
    };
    for (int l = 0; l < SB_KQ_LEVELS; l++) {
        const sb_kq_traits *t = sb_kq_table(l);
        int supported = 0;
        for (int id = 0; id < SB_TYPE_COUNT; id++) {
            if (!t[id].blck_size) {
                /* placeholders: named, and nothing callable */
                if (id < 40 && !t[id].name) fail_msg("level %s: type %d has no name", sb_kq_level_name(l), id);
                assert_null(t[id].to_float);
                assert_null(t[id].vec_dot);
                continue;
            }
            supported++;
            assert_non_null(t[id].to_float);
            assert_non_null(t[id].from_float);
            assert_non_null(t[id].from_float_ref);
            assert_string_equal(t[id].name, ref_row(id)->name);
        }
        assert_int_equal(supported, (int)(sizeof rows / sizeof rows[0]));
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            assert_int_equal(t[rows[i].type].blck_size, rows[i].bs);
            assert_int_equal(t[rows[i].type].type_size, rows[i].size);
            assert_int_equal(t[rows[i].type].vec_dot_type, rows[i].vdt);
        }
    }
    assert_null(ref_row(SB_TYPE_Q8_1)->vec_dot);
    assert_null(ref_row(SB_TYPE_Q8_K)->vec_dot);
    /* The kernels' compile-time block sizes are the table's. */
    for (int id = 0; id < SB_TYPE_COUNT; id++) {
        const sb_kq_traits *r = ref_row(id);
        if (r->blck_size && r->is_quantized) assert_int_equal(kq_block_bytes(id), r->type_size);
        else assert_int_equal(kq_block_bytes(id), 0);
    }
    /* A level lists only its overrides: whatever it leaves out resolves to
     * the level below, so no kernel is lost going up, layout never changes,
     * and the reference quantizer is the reference table's at every level. */
    for (int l = 1; l < SB_KQ_LEVELS; l++) {
        const sb_kq_traits *t = sb_kq_table(l), *below = sb_kq_table(l - 1);
        for (int id = 0; id < SB_TYPE_COUNT; id++) {
            assert_true(t[id].name == ref_row(id)->name);
            assert_int_equal(t[id].is_quantized, ref_row(id)->is_quantized);
            assert_true(t[id].from_float_ref == ref_row(id)->from_float_ref);
            assert_int_equal(!t[id].vec_dot, !below[id].vec_dot);
            if (below[id].gemm) assert_non_null(t[id].gemm);
            if (below[id].gemv8) assert_non_null(t[id].gemv8);
        }
    }
}

static void test_level_override(void **state) {
    (void)state;
    const char *old = getenv("SB_KERNELS");
    char *saved = old ? strdup(old) : NULL;
    unsetenv("SB_KERNELS");
    const int cpu = sb_kq_best_level();
    print_message("    CPU level: %s\n", sb_kq_level_name(cpu));
    setenv("SB_KERNELS", "ref", 1);
    assert_int_equal(sb_kq_best_level(), SB_KQ_REF);
    setenv("SB_KERNELS", "avx2", 1);
    assert_int_equal(sb_kq_best_level(), cpu < SB_KQ_AVX2 ? cpu : SB_KQ_AVX2);
    setenv("SB_KERNELS", "avx512", 1);
    assert_int_equal(sb_kq_best_level(), cpu);  /* never above the CPU */
    setenv("SB_KERNELS", "bogus", 1);
    assert_int_equal(sb_kq_best_level(), cpu);
    if (saved) {
        setenv("SB_KERNELS", saved, 1);
        free(saved);
    } else {
        unsetenv("SB_KERNELS");
    }
    assert_string_equal(sb_kq_level_name(SB_KQ_AVX512), "avx512");
    assert_true(sb_kq_table(-1) == sb_kq_table(SB_KQ_REF));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_shape),
        cmocka_unit_test(test_level_override),
        cmocka_unit_test(test_fp16_conversions),
        cmocka_unit_test(test_dot_levels_match_ref),
        cmocka_unit_test(test_dot_semantics),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_activation_quantizers_match_ref),
        cmocka_unit_test(test_q8_0_activation_vs_file_quantizer),
        cmocka_unit_test(test_dequantizers_match_ref),
        cmocka_unit_test(test_llama_cpp_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
