/* test_kvpool.c - the multi-sequence KV pool and sb_ctx_eval_parts on the
 * fixtures (docs/BATCHING.md):
 *  a. one part on one sequence gives sb_ctx_eval's logits bit for bit;
 *  b. batch independence: four sequences generated greedily together, each
 *     step mixing prefill chunks (of sizes on both sides of the kernels'
 *     packing threshold) with other sequences' decode tokens, in a pool
 *     small enough that their blocks interleave, give token for token and
 *     bit for bit what each gives alone with the same chunking;
 *  c. fork shares whole blocks (free count), copies the partial one, and
 *     the fork's continuation is a fresh evaluation's; appending into a
 *     block still shared after a truncate copies it first (the other
 *     sequence's numbers are unchanged);
 *  d. a pass the pool cannot hold fails with SB_EBUSY and changes nothing,
 *     the other sequences keep working, seq_free returns the blocks; the
 *     other refusals (ERANGE, duplicate sequence, batch size);
 *  e. truncate returns blocks;
 *  f. a sliding window (phi3's 2047) that starts off a 4-position boundary
 *     and spans shared and own blocks gives the contiguous cache's numbers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/sb_common.h"
#include "worker/engine/sb_model.h"

static const char *const FIXTURES[] = {
    "tests/data/tiny-llama-spm-Q4_K_M.gguf", "tests/data/tiny-llama-spm-Q4_0.gguf",
    "tests/data/tiny-phi3-Q8_0.gguf", "tests/data/tiny-llama3-Q5_K_M.gguf",
};

static sb_model *load(const char *path) {
    char err[SB_ERR_LEN];
    sb_model *m = NULL;
    if (sb_model_load(path, &m, err)) fail_msg("%s: %s", path, err);
    return m;
}

static sb_ctx *ctx(const sb_model *m, int n_seq, int kv_blocks) {
    char err[SB_ERR_LEN];
    sb_ctx_params p;
    sb_ctx_params_default(&p);
    p.n_threads = 2;
    p.n_ctx = 128;
    p.n_batch = 64;
    p.n_seq = n_seq;
    p.kv_blocks = kv_blocks;
    sb_ctx *c = NULL;
    if (sb_ctx_new(m, &p, &c, err)) fail_msg("sb_ctx_new: %s", err);
    return c;
}

static void tokens(int32_t *t, int n, int seed, int nv) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(((uint32_t)(i + 1) * 2654435761u + (uint32_t)seed * 40503u) % (uint32_t)nv);
}

static int32_t argmax(const float *l, int nv) {
    int32_t b = 0;
    for (int i = 1; i < nv; i++) if (l[i] > l[b]) b = i;
    return b;
}

static void eval_part(sb_ctx *c, int seq, const int32_t *t, int n, float *logits, int all) {
    char err[SB_ERR_LEN];
    const sb_seq_part p = { seq, t, n, logits, all };
    if (sb_ctx_eval_parts(c, &p, 1, err)) fail_msg("eval_parts: %s", err);
}

/* ---- a ---------------------------------------------------------------------------- */

static void test_single(void **state) {
    (void)state;
    for (size_t f = 0; f < SB_ARRAY_LEN(FIXTURES); f++) {
        sb_model *m = load(FIXTURES[f]);
        const int nv = sb_model_hparams(m)->n_vocab;
        sb_ctx *a = ctx(m, 1, 0), *b = ctx(m, 3, 0);
        float *la = malloc(sizeof(float) * (size_t)nv * 40), *lb = malloc(sizeof(float) * (size_t)nv * 40);
        int32_t t[48];
        tokens(t, 48, 1, nv);
        char err[SB_ERR_LEN];
        int s1;
        assert_int_equal(sb_ctx_seq_new(b, &s1, err), 0);
        assert_int_equal(sb_ctx_eval(a, t, 40, la, 1, err), 0);
        eval_part(b, s1, t, 40, lb, 1);     /* a sequence other than 0, alone in its pass */
        assert_memory_equal(la, lb, sizeof(float) * (size_t)nv * 40);
        for (int i = 40; i < 48; i++) {
            assert_int_equal(sb_ctx_eval(a, t + i, 1, la, 0, err), 0);
            eval_part(b, s1, t + i, 1, lb, 0);
            assert_memory_equal(la, lb, sizeof(float) * (size_t)nv);
        }
        assert_int_equal(sb_ctx_seq_n_past(b, s1), 48);
        assert_int_equal(sb_ctx_n_past(b), 0);
        free(la);
        free(lb);
        sb_ctx_free(a);
        sb_ctx_free(b);
        sb_model_free(m);
    }
}

/* ---- b ---------------------------------------------------------------------------- */

enum { NS = 4, GEN = 6, MAXL = 64 };
static const int PLEN[NS] = { 37, 21, 12, 50 };
static const int CHUNK[NS] = { 16, 5, 3, 9 };     /* packed gemm (≥ 8), tiles, gemv8/tiles, packed */
static const int START[NS] = { 0, 1, 3, 4 };
static const int ALL[NS] = { 0, 1, 0, 0 };        /* sequence 1 asks for every row of its chunks */

typedef struct {
    int32_t toks[MAXL + GEN];
    int n_done, n_gen;          /* prompt tokens evaluated, tokens generated */
    float *rows;                /* every logits row asked for, in order */
    int n_rows;
} run;

/* The next part of run r (its next chunk or its last token), rows into out. */
static sb_seq_part next_part(run *r, int i, int seq, float *out) {
    sb_seq_part p = { seq, NULL, 0, out, ALL[i] };
    if (r->n_done < PLEN[i]) {
        p.tokens = r->toks + r->n_done;
        p.n = SB_MIN(CHUNK[i], PLEN[i] - r->n_done);
        if (!ALL[i] && r->n_done + p.n < PLEN[i]) p.logits = NULL;     /* prefill only */
    } else {
        p.tokens = r->toks + PLEN[i] + r->n_gen;
        p.n = 1;
    }
    return p;
}

/* After part p of run r was evaluated: keep its rows, pick the next token. */
static void after_part(run *r, int i, const sb_seq_part *p, int nv) {
    const int rows = p->logits ? (p->all_logits ? p->n : 1) : 0;
    if (rows) memcpy(r->rows + (size_t)r->n_rows * nv, p->logits, sizeof(float) * (size_t)rows * nv);
    r->n_rows += rows;
    if (r->n_done < PLEN[i]) r->n_done += p->n;
    else r->n_gen++;
    if (r->n_done == PLEN[i] && rows) r->toks[PLEN[i] + r->n_gen] = argmax(p->logits + (size_t)(rows - 1) * nv, nv);
}

static void check_batch(const char *path) {
    sb_model *m = load(path);
    const int nv = sb_model_hparams(m)->n_vocab;
    char err[SB_ERR_LEN];
    run batch[NS], alone[NS];
    float *buf = malloc(sizeof(float) * (size_t)nv * 64);
    for (int i = 0; i < NS; i++) {
        for (run *r = &batch[i]; r; r = r == &batch[i] ? &alone[i] : NULL) {
            memset(r, 0, sizeof *r);
            tokens(r->toks, PLEN[i], 10 + i, nv);
            r->rows = malloc(sizeof(float) * (size_t)nv * (MAXL + GEN));
        }
    }
    /* alone: each sequence in a fresh context, through sb_ctx_eval */
    for (int i = 0; i < NS; i++) {
        sb_ctx *c = ctx(m, 1, 0);
        run *r = &alone[i];
        while (r->n_gen < GEN) {
            const sb_seq_part p = next_part(r, i, 0, buf);
            assert_int_equal(sb_ctx_eval(c, p.tokens, p.n, p.logits, p.all_logits, err), 0);
            after_part(r, i, &p, nv);
        }
        sb_ctx_free(c);
    }
    /* together: 12 blocks for 11 needed, so the sequences' blocks interleave */
    sb_ctx *c = ctx(m, NS, 12);
    int seq[NS] = { 0 };
    for (int i = 1; i < NS; i++) assert_int_equal(sb_ctx_seq_new(c, &seq[i], err), 0);
    for (int step = 0;; step++) {
        sb_seq_part parts[NS];
        int idx[NS], n = 0, off = 0;
        for (int i = 0; i < NS; i++) {
            if (step < START[i] || batch[i].n_gen >= GEN) continue;
            parts[n] = next_part(&batch[i], i, seq[i], buf + (size_t)off * nv);
            off += parts[n].n;
            idx[n++] = i;
        }
        if (!n) break;
        assert_int_equal(sb_ctx_eval_parts(c, parts, n, err), 0);
        for (int k = 0; k < n; k++) after_part(&batch[idx[k]], idx[k], &parts[k], nv);
    }
    for (int i = 0; i < NS; i++) {
        assert_int_equal(batch[i].n_rows, alone[i].n_rows);
        assert_memory_equal(batch[i].toks, alone[i].toks, sizeof(int32_t) * (size_t)(PLEN[i] + GEN));
        for (int r = 0; r < alone[i].n_rows; r++)
            if (memcmp(batch[i].rows + (size_t)r * nv, alone[i].rows + (size_t)r * nv, sizeof(float) * (size_t)nv))
                fail_msg("%s: sequence %d, logits row %d differs from the sequence alone", path, i, r);
        free(batch[i].rows);
        free(alone[i].rows);
    }
    free(buf);
    sb_ctx_free(c);
    sb_model_free(m);
}

static void test_batch_independence(void **state) {
    (void)state;
    for (size_t f = 0; f < SB_ARRAY_LEN(FIXTURES); f++) check_batch(FIXTURES[f]);
}

/* ---- c ---------------------------------------------------------------------------- */

/* Evaluate t in chunks of `chunk` on seq, the last row into out. */
static void chunked(sb_ctx *c, int seq, const int32_t *t, int n, int chunk, float *out) {
    for (int i = 0; i < n; i += chunk) eval_part(c, seq, t + i, SB_MIN(chunk, n - i), out, 0);
}

static void test_fork(void **state) {
    (void)state;
    sb_model *m = load(FIXTURES[0]);
    const int nv = sb_model_hparams(m)->n_vocab;
    char err[SB_ERR_LEN];
    int32_t t[80];
    tokens(t, 80, 7, nv);
    float *ref = malloc(sizeof(float) * (size_t)nv), *got = malloc(sizeof(float) * (size_t)nv);
    const int cuts[] = { 40, 32 };       /* a partial last block, and a block boundary */
    for (size_t k = 0; k < SB_ARRAY_LEN(cuts); k++) {
        const int n = cuts[k];
        /* reference: the whole prompt, fresh, with the same chunking */
        sb_ctx *r = ctx(m, 1, 0);
        chunked(r, 0, t, n, 8, ref);
        chunked(r, 0, t + n, 30, 10, ref);
        sb_ctx_free(r);

        sb_ctx *c = ctx(m, 3, 0);
        chunked(c, 0, t, n, 8, got);
        const int free0 = sb_ctx_kv_blocks_free(c);
        int b;
        assert_int_equal(sb_ctx_seq_new(c, &b, err), 0);
        assert_int_equal(sb_ctx_seq_fork(c, b, 0, n, err), 0);
        assert_int_equal(sb_ctx_seq_n_past(c, b), n);
        /* whole blocks shared; only a partial block is copied */
        assert_int_equal(sb_ctx_kv_blocks_free(c), free0 - (n % SB_KV_BLOCK ? 1 : 0));
        chunked(c, b, t + n, 30, 10, got);
        assert_memory_equal(ref, got, sizeof(float) * (size_t)nv);
        /* the source goes on unaffected by its fork's appends */
        float *src_ref = malloc(sizeof(float) * (size_t)nv);
        sb_ctx *r2 = ctx(m, 1, 0);
        chunked(r2, 0, t, n, 8, src_ref);
        chunked(r2, 0, t + 50, 5, 5, src_ref);
        sb_ctx_free(r2);
        chunked(c, 0, t + 50, 5, 5, got);
        assert_memory_equal(src_ref, got, sizeof(float) * (size_t)nv);
        free(src_ref);
        sb_ctx_seq_free(c, b);
        sb_ctx_free(c);
    }
    /* copy-on-write: a block still shared after a truncate is copied before
     * an append; the other sequence's numbers do not move */
    sb_ctx *c = ctx(m, 3, 0);
    chunked(c, 0, t, 32, 16, got);
    int b;
    assert_int_equal(sb_ctx_seq_new(c, &b, err), 0);
    assert_int_equal(sb_ctx_seq_fork(c, b, 0, 32, err), 0);
    sb_ctx_seq_truncate(c, b, 20);          /* block 1 (16..31) is now partial in b and shared */
    assert_int_equal(sb_ctx_kv_blocks_needed(c, b, 1), 1);
    const int free0 = sb_ctx_kv_blocks_free(c);
    float *bgot = malloc(sizeof(float) * (size_t)nv);
    eval_part(c, b, t + 60, 4, bgot, 0);
    assert_int_equal(sb_ctx_kv_blocks_free(c), free0 - 1);
    sb_ctx *r = ctx(m, 1, 0);
    chunked(r, 0, t, 32, 16, ref);
    chunked(r, 0, t + 70, 3, 3, ref);
    sb_ctx_free(r);
    chunked(c, 0, t + 70, 3, 3, got);       /* 0's positions 20..31 were not overwritten */
    assert_memory_equal(ref, got, sizeof(float) * (size_t)nv);
    r = ctx(m, 1, 0);                       /* b: t[0..32) in chunks of 16, cut to 20, then t[60..64) */
    chunked(r, 0, t, 32, 16, ref);
    sb_ctx_truncate(r, 20);
    eval_part(r, 0, t + 60, 4, ref, 0);
    sb_ctx_free(r);
    assert_memory_equal(ref, bgot, sizeof(float) * (size_t)nv);
    free(bgot);
    sb_ctx_free(c);
    free(ref);
    free(got);
    sb_model_free(m);
}

/* ---- d, e --------------------------------------------------------------------------- */

static void test_exhaustion(void **state) {
    (void)state;
    sb_model *m = load(FIXTURES[0]);
    const int nv = sb_model_hparams(m)->n_vocab;
    char err[SB_ERR_LEN];
    int32_t t[128];
    tokens(t, 128, 3, nv);
    float *l = malloc(sizeof(float) * (size_t)nv), *ref = malloc(sizeof(float) * (size_t)nv);
    sb_ctx *c = ctx(m, 3, 6);
    assert_int_equal(sb_ctx_kv_blocks_total(c), 6);
    int a, b;
    assert_int_equal(sb_ctx_seq_new(c, &a, err), 0);
    assert_int_equal(sb_ctx_seq_new(c, &b, err), 0);
    int extra;
    assert_int_equal(sb_ctx_seq_new(c, &extra, err), SB_EBUSY);
    eval_part(c, a, t, 60, l, 0);           /* 4 blocks */
    assert_int_equal(sb_ctx_kv_blocks_free(c), 2);
    assert_int_equal(sb_ctx_kv_blocks_needed(c, b, 40), 3);
    /* b's 40 tokens and a's next one in one pass: 3 blocks > 2 free */
    const sb_seq_part parts[2] = { { a, t + 60, 1, l, 0 }, { b, t + 64, 40, l, 0 } };
    assert_int_equal(sb_ctx_eval_parts(c, parts, 2, err), SB_EBUSY);
    assert_int_equal(sb_ctx_seq_n_past(c, a), 60);
    assert_int_equal(sb_ctx_seq_n_past(c, b), 0);
    assert_int_equal(sb_ctx_kv_blocks_free(c), 2);
    assert_int_equal(sb_ctx_eval(c, t, 40, l, 0, err), SB_EBUSY);     /* sequence 0 too */
    assert_int_equal(sb_ctx_n_past(c), 0);
    /* a keeps working, with the numbers it has alone */
    eval_part(c, a, t + 60, 1, l, 0);
    sb_ctx *r = ctx(m, 1, 0);
    assert_int_equal(sb_ctx_eval(r, t, 60, ref, 0, err), 0);
    assert_int_equal(sb_ctx_eval(r, t + 60, 1, ref, 0, err), 0);
    sb_ctx_free(r);
    assert_memory_equal(l, ref, sizeof(float) * (size_t)nv);
    /* other refusals, nothing changed */
    const sb_seq_part dup[2] = { { a, t, 1, l, 0 }, { a, t + 1, 1, l, 0 } };
    assert_int_equal(sb_ctx_eval_parts(c, dup, 2, err), SB_EINVAL);
    const sb_seq_part big = { b, t, 65, l, 0 };
    assert_int_equal(sb_ctx_eval_parts(c, &big, 1, err), SB_EINVAL);     /* > n_batch */
    const sb_seq_part gone = { 9, t, 1, l, 0 };
    assert_int_equal(sb_ctx_eval_parts(c, &gone, 1, err), SB_EINVAL);
    assert_int_equal(sb_ctx_seq_n_past(c, a), 61);
    /* free returns a's blocks; b fits now */
    sb_ctx_seq_free(c, a);
    assert_int_equal(sb_ctx_seq_n_past(c, a), -1);
    assert_int_equal(sb_ctx_kv_blocks_free(c), 6);
    eval_part(c, b, t + 64, 40, l, 0);
    assert_int_equal(sb_ctx_kv_blocks_free(c), 3);
    /* e: truncate returns the blocks past the new end */
    sb_ctx_seq_truncate(c, b, 17);
    assert_int_equal(sb_ctx_kv_blocks_free(c), 4);
    sb_ctx_seq_truncate(c, b, 16);
    assert_int_equal(sb_ctx_kv_blocks_free(c), 5);
    sb_ctx_seq_truncate(c, b, 0);
    assert_int_equal(sb_ctx_kv_blocks_free(c), 6);
    sb_ctx_free(c);
    /* ERANGE past n_ctx: 128 positions, a pool big enough */
    c = ctx(m, 2, 16);
    assert_int_equal(sb_ctx_seq_new(c, &a, err), 0);
    for (int i = 0; i < 2; i++) eval_part(c, a, t, 64, NULL, 0);
    const sb_seq_part over = { a, t, 1, l, 0 };
    assert_int_equal(sb_ctx_eval_parts(c, &over, 1, err), SB_ERANGE);
    assert_int_equal(sb_ctx_seq_n_past(c, a), 128);
    sb_ctx_free(c);
    free(l);
    free(ref);
    sb_model_free(m);
}

/* ---- f ---------------------------------------------------------------------------- */

static sb_ctx *ctx_long(const sb_model *m, int n_seq) {
    char err[SB_ERR_LEN];
    sb_ctx_params p;
    sb_ctx_params_default(&p);
    p.n_threads = 2;
    p.n_ctx = 2112;
    p.n_batch = 256;
    p.n_seq = n_seq;
    p.kv_blocks = n_seq * 2112 / SB_KV_BLOCK;
    sb_ctx *c = NULL;
    if (sb_ctx_new(m, &p, &c, err)) fail_msg("sb_ctx_new: %s", err);
    return c;
}

static void test_sliding_window(void **state) {
    (void)state;
    sb_model *m = load("tests/data/tiny-phi3-Q8_0.gguf");
    assert_int_equal(sb_model_hparams(m)->n_swa, 2047);
    const int nv = sb_model_hparams(m)->n_vocab;
    int32_t *t = malloc(sizeof(int32_t) * 2300);
    tokens(t, 2300, 5, nv);
    float *ref = malloc(sizeof(float) * (size_t)nv * 4), *got = malloc(sizeof(float) * (size_t)nv * 4);
    /* alone, contiguous: 2082 positions, the last 4 with windows starting at 32..35 */
    sb_ctx *r = ctx_long(m, 1);
    chunked(r, 0, t, 2078, 256, ref);
    for (int i = 0; i < 4; i++) eval_part(r, 0, t + 2078 + i, 1, ref + (size_t)i * nv, 0);
    sb_ctx_free(r);
    /* the same positions as a fork of the first 1024, after the source took the blocks that follow them */
    char err[SB_ERR_LEN];
    sb_ctx *c = ctx_long(m, 2);
    chunked(c, 0, t, 1024, 256, got);
    int b;
    assert_int_equal(sb_ctx_seq_new(c, &b, err), 0);
    assert_int_equal(sb_ctx_seq_fork(c, b, 0, 1024, err), 0);
    chunked(c, 0, t + 2100, 200, 200, got);
    eval_part(c, b, t + 1024, 256, got, 0);       /* 1024 + 256 chunks, as the reference's */
    chunked(c, b, t + 1280, 2078 - 1280, 256, got);
    for (int i = 0; i < 4; i++) eval_part(c, b, t + 2078 + i, 1, got + (size_t)i * nv, 0);
    assert_memory_equal(ref, got, sizeof(float) * (size_t)nv * 4);
    sb_ctx_free(c);
    free(t);
    free(ref);
    free(got);
    sb_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_batch_independence),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_sliding_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
