/* test_forward_invariant.c - a token's logits do not depend on how its
 * sequence was cut into passes (forward.c, matmul.c).
 *
 * For each fixture whose weight types have batch-invariant kernels (Q4_0,
 * Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, F16; and Q2_K, Q3_K at AVX2), at
 * every kernel level the CPU runs (reference, AVX2, AVX-512; so CI on an
 * AVX-512 machine checks the AVX2 kernels too): the logits of every
 * position of a 40-token sequence are the same bits
 *   - in one pass over all 40 (what `switchboard logits` does),
 *   - after a 6-token prompt (the few-token path) and one-token decode
 *     steps against the KV cache (a generation),
 *   - after a 20-token prompt (the tiled kernels) and decode steps.
 * Float sums in another order would show at the first differing bit, and
 * a real model's outlier activations turn such bits into logprob
 * differences of 0.07 (docs/router.md, logprobs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "worker/engine/sb_model.h"
#include "worker/kernels/sb_kq.h"

#define N_TOK 40

static const char *const FIXTURES[] = {
    "tests/data/tiny-llama-spm-Q4_0.gguf",   "tests/data/tiny-llama-spm-Q8_0.gguf",
    "tests/data/tiny-llama-spm-Q4_K_M.gguf", "tests/data/tiny-llama-spm-Q5_K_M.gguf",
    "tests/data/tiny-llama-spm-Q6_K.gguf",   "tests/data/tiny-llama-spm-f16.gguf",
    "tests/data/tiny-llama3-Q4_K_M.gguf",    "tests/data/tiny-phi3-Q4_K_M.gguf",
    "tests/data/tiny-phi3-Q8_0.gguf",
};

/* Q2_K and Q3_K: their AVX-512 dots keep vector accumulators (docs/KERNELS.md,
 * "Batch invariance"); the AVX2 level is invariant (checked here) and so is
 * the reference (its gemm is vec_dot per pair; the other fixtures check
 * the rest of its forward pass, the slowest part of this test under SAN). */
static const char *const FIXTURES_BELOW_AVX512[] = {
    "tests/data/tiny-llama-spm-Q2_K.gguf",
    "tests/data/tiny-llama-spm-Q3_K_M.gguf",
};

/* Rows n_prompt-1 .. N_TOK-1 of logits: a prompt pass of n_prompt tokens,
 * then one token per pass (n_prompt = N_TOK: one pass, every row). */
static void run(sb_ctx *c, const int32_t *tok, int n_prompt, int nv, float *rows) {
    char err[SB_ERR_LEN];
    sb_ctx_truncate(c, 0);
    if (n_prompt == N_TOK) {
        assert_int_equal(sb_ctx_eval(c, tok, N_TOK, rows, 1, err), 0);
        return;
    }
    assert_int_equal(sb_ctx_eval(c, tok, n_prompt, rows + (size_t)(n_prompt - 1) * nv, 0, err), 0);
    for (int i = n_prompt; i < N_TOK; i++)
        assert_int_equal(sb_ctx_eval(c, tok + i, 1, rows + (size_t)i * nv, 0, err), 0);
}

static void check_model(const char *path, int level) {
    char err[SB_ERR_LEN];
    sb_model *m;
    if (sb_model_load(path, &m, err)) fail_msg("%s: %s", path, err);
    const int nv = sb_model_hparams(m)->n_vocab;
    sb_ctx_params p;
    sb_ctx_params_default(&p);
    p.n_threads = 2;
    p.n_ctx = 64;
    p.kq_level = level;
    sb_ctx *c;
    if (sb_ctx_new(m, &p, &c, err)) fail_msg("%s: %s", path, err);
    int32_t tok[N_TOK];
    uint32_t r = 12345;
    for (int i = 0; i < N_TOK; i++) {
        r = r * 1103515245u + 12345u;
        tok[i] = (int32_t)((r >> 8) % (uint32_t)nv);
    }
    const size_t bytes = (size_t)N_TOK * nv * sizeof(float);
    float *whole = malloc(bytes), *cut = malloc(bytes);
    assert_true(whole && cut);
    run(c, tok, N_TOK, nv, whole);
    static const int prompts[] = { 6, 20 };
    for (size_t k = 0; k < sizeof prompts / sizeof prompts[0]; k++) {
        run(c, tok, prompts[k], nv, cut);
        for (int i = prompts[k] - 1; i < N_TOK; i++)
            if (memcmp(whole + (size_t)i * nv, cut + (size_t)i * nv, (size_t)nv * sizeof(float)))
                fail_msg("%s at %s: position %d after a %d-token prompt and decode steps differs from one pass",
                         path, sb_kq_level_name(level), i, prompts[k]);
    }
    free(whole);
    free(cut);
    sb_ctx_free(c);
    sb_model_free(m);
}

static void test_decode_equals_one_pass(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        for (int level = SB_KQ_REF; level <= sb_kq_best_level(); level++) check_model(FIXTURES[i], level);
    }
    for (size_t i = 0; i < sizeof FIXTURES_BELOW_AVX512 / sizeof FIXTURES_BELOW_AVX512[0]; i++)
        if (sb_kq_best_level() >= SB_KQ_AVX2) check_model(FIXTURES_BELOW_AVX512[i], SB_KQ_AVX2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_equals_one_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
