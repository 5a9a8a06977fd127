/* test_batch.c - continuous batching in the engine (sb_engine_submit_*,
 * sb_engine_step) on the fixtures:
 *
 *  - tasks run together give, token for token, what each gives alone
 *    through sb_engine_generate at temperature 0 (prompts longer than the
 *    step budget are read in chunks; every fixture architecture);
 *  - a task submitted while others decode joins at the next step;
 *  - a cancelled task gives its blocks back within one step;
 *  - admission reserves a task's whole growth: the task that does not fit
 *    gets SB_EBUSY at submit, and no running task ever fails;
 *  - the prefix cache: a second task with the same system prompt starts
 *    from its cached blocks, evaluates that many fewer tokens, and the
 *    counters say so; two such tasks at once: the second waits for the
 *    first to read the shared part;
 *  - a score task gives exactly sb_engine_score's log-probabilities;
 *  - when the budget is short, the higher priority's prompt goes first;
 *  - generations with one json_schema at once share its mask cache;
 *  - a drafting generation that runs alone speculates (lookup, a draft
 *    model) and gives plain greedy's tokens; joined by another task it
 *    takes plain steps, and both still give what they give alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "worker/engine/sb_engine.h"

static const char *const FIXTURES[] = {
    "tests/data/tiny-llama-spm-Q8_0.gguf",
    "tests/data/tiny-llama3-Q4_K_M.gguf",
    "tests/data/tiny-phi3-Q4_K_M.gguf",
};

#define MAX_OUT 256

/* What a generation handed to its callback, in order. */
typedef struct {
    int32_t tok[MAX_OUT];
    int n;
    char text[4096];
    size_t len;
    int seq_no;                 /* global order of its first piece (priority test) */
} out_t;

static int piece_clock;

static int collect(void *ud, const char *text, size_t len, int32_t token) {
    out_t *o = ud;
    if (o->n == 0) o->seq_no = ++piece_clock;
    if (o->n < MAX_OUT) o->tok[o->n++] = token;
    if (o->len + len < sizeof o->text) {
        memcpy(o->text + o->len, text, len);
        o->len += len;
    }
    return 0;
}

static sb_engine *open_engine(const char *path, int n_seq, int kv_blocks, int n_batch) {
    sb_ctx_params p;
    sb_ctx_params_default(&p);
    p.n_threads = 2;
    p.n_ctx = 256;
    p.n_batch = n_batch;
    p.n_seq = n_seq;
    p.kv_blocks = kv_blocks;
    char err[SB_ERR_LEN];
    sb_engine *e = NULL;
    if (sb_engine_open(path, &p, &e, err)) fail_msg("%s: %s", path, err);
    return e;
}

static void greedy(sb_gen_opts *o, int max_tokens, out_t *out) {
    sb_gen_opts_default(o);
    o->max_tokens = max_tokens;
    o->sampling.temp = 0;
    o->on_piece = collect;
    o->ud = out;
    memset(out, 0, sizeof *out);
}

/* Deterministic prompt tokens in [3, n_vocab): no BOS/EOS games. */
static void make_prompt(int32_t *p, int n, int n_vocab, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(n_vocab - 3));
    }
}

/* The reference: the prompt run alone from an empty cache. */
static void alone(sb_engine *e, const int32_t *prompt, int n, int max_tokens, out_t *out, sb_gen_result *res) {
    sb_gen_opts o;
    greedy(&o, max_tokens, out);
    char err[SB_ERR_LEN];
    sb_engine_reset(e);
    if (sb_engine_generate(e, prompt, n, &o, res, err)) fail_msg("generate: %s", err);
    sb_engine_reset(e);
}

static int run_all(sb_engine *e, sb_task **t, int n) {
    char err[SB_ERR_LEN];
    int steps = 0, rc;
    while ((rc = sb_engine_step(e, err)) > 0) steps++;
    if (rc < 0) fail_msg("step: %s", err);
    for (int i = 0; i < n; i++) {
        sb_gen_result r;
        int st = sb_task_poll(t[i], &r, NULL, err);
        if (st != 1) fail_msg("task %d: poll %d: %s", i, st, err);
    }
    return steps;
}

static void assert_same(const out_t *a, const out_t *b) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) assert_int_equal(a->tok[i], b->tok[i]);
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->text, b->text, a->len);
}

/* Four prompts (one longer than the 32-token step budget, one of a single
 * token) run together on every fixture == each alone. */
static void test_together_equals_alone(void **state) {
    (void)state;
    enum { N = 4, GEN = 20 };
    static const int lens[N] = { 1, 9, 27, 75 };
    for (size_t f = 0; f < SB_ARRAY_LEN(FIXTURES); f++) {
        sb_engine *e = open_engine(FIXTURES[f], N, 0, 32);
        const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
        int32_t prompt[N][80];
        out_t ref[N], got[N];
        sb_gen_result rref[N];
        sb_gen_opts o[N];
        sb_task *t[N];
        char err[SB_ERR_LEN];
        for (int i = 0; i < N; i++) {
            make_prompt(prompt[i], lens[i], nv, 7u + (uint32_t)i);
            alone(e, prompt[i], lens[i], GEN, &ref[i], &rref[i]);
        }
        for (int i = 0; i < N; i++) {
            greedy(&o[i], GEN, &got[i]);
            assert_int_equal(sb_engine_submit_generate(e, prompt[i], lens[i], &o[i], 0, &t[i], err), 0);
        }
        run_all(e, t, N);
        for (int i = 0; i < N; i++) {
            sb_gen_result r;
            sb_task_poll(t[i], &r, NULL, err);
            assert_same(&got[i], &ref[i]);
            assert_int_equal(r.n_gen, rref[i].n_gen);
            assert_string_equal(r.finish, rref[i].finish);
            sb_task_free(e, t[i]);
        }
        sb_engine_free(e);
    }
}

/* B submitted while A decodes is in the very next pass: that step carries
 * A's token and B's whole (short) prompt. */
static void test_join_next_step(void **state) {
    (void)state;
    sb_engine *e = open_engine(FIXTURES[0], 2, 0, 64);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t pa[12], pb[10];
    make_prompt(pa, 12, nv, 1);
    make_prompt(pb, 10, nv, 2);
    out_t ra, rb, ga, gb;
    sb_gen_result r;
    alone(e, pa, 12, 16, &ra, &r);
    alone(e, pb, 10, 16, &rb, &r);
    sb_gen_opts oa, ob;
    greedy(&oa, 16, &ga);
    greedy(&ob, 16, &gb);
    sb_task *t[2];
    char err[SB_ERR_LEN];
    assert_int_equal(sb_engine_submit_generate(e, pa, 12, &oa, 0, &t[0], err), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(sb_engine_step(e, err), 1);
    assert_int_equal(sb_engine_submit_generate(e, pb, 10, &ob, 0, &t[1], err), 0);
    sb_engine_stats s0, s1;
    sb_engine_stats_get(e, &s0);
    assert_int_equal(sb_engine_step(e, err), 2);
    sb_engine_stats_get(e, &s1);
    assert_int_equal(s1.steps - s0.steps, 1);
    assert_int_equal(s1.step_tokens - s0.step_tokens, 1 + 10);
    run_all(e, t, 2);
    assert_same(&ga, &ra);
    assert_same(&gb, &rb);
    sb_task_free(e, t[0]);
    sb_task_free(e, t[1]);
    sb_engine_free(e);
}

/* Cancel during decode: one step later the pool is whole again. */
static void test_cancel_frees_blocks(void **state) {
    (void)state;
    sb_engine *e = open_engine(FIXTURES[0], 2, 0, 64);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t p[12];                      /* < one block: no prefix entry keeps blocks */
    make_prompt(p, 12, nv, 3);
    sb_engine_stats s;
    sb_engine_stats_get(e, &s);
    const int total = s.blocks_total;
    assert_int_equal(s.blocks_free, total);
    out_t g;
    sb_gen_opts o;
    greedy(&o, 200, &g);
    atomic_int cancel = 0;
    o.cancel = &cancel;
    sb_task *t;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_engine_submit_generate(e, p, 12, &o, 0, &t, err), 0);
    for (int i = 0; i < 20; i++) assert_int_equal(sb_engine_step(e, err), 1);
    sb_engine_stats_get(e, &s);
    assert_true(s.blocks_free < total);
    atomic_store(&cancel, 1);
    assert_int_equal(sb_engine_step(e, err), 0);
    sb_engine_stats_get(e, &s);
    assert_int_equal(s.blocks_free, total);
    assert_int_equal(s.seqs_running, 0);
    sb_gen_result r;
    assert_int_equal(sb_task_poll(t, &r, NULL, err), 1);
    assert_string_equal(r.finish, "cancelled");
    sb_task_free(e, t);
    /* Cancelled while its prompt is still being read (75 tokens, 16 a
     * step): no token is ever emitted, the step itself must notice. */
    sb_engine *slow = open_engine(FIXTURES[0], 2, 0, 16);
    int32_t lp[75];
    make_prompt(lp, 75, nv, 4);
    atomic_store(&cancel, 0);
    greedy(&o, 200, &g);
    o.cancel = &cancel;
    assert_int_equal(sb_engine_submit_generate(slow, lp, 75, &o, 0, &t, err), 0);
    assert_int_equal(sb_engine_step(slow, err), 1);
    atomic_store(&cancel, 1);
    assert_int_equal(sb_engine_step(slow, err), 0);
    sb_engine_stats_get(slow, &s);
    assert_int_equal(s.blocks_free, s.blocks_total);
    assert_int_equal(g.n, 0);
    sb_task_free(slow, t);
    sb_engine_free(slow);
    /* Dropping a running task gives its blocks back at once. */
    greedy(&o, 200, &g);
    assert_int_equal(sb_engine_submit_generate(e, p, 12, &o, 0, &t, err), 0);
    for (int i = 0; i < 5; i++) sb_engine_step(e, err);
    sb_task_free(e, t);
    sb_engine_stats_get(e, &s);
    assert_int_equal(s.blocks_free, total);
    sb_engine_free(e);
}

/* A pool of 24 blocks; each task may grow to 12 + 100 positions (7 blocks):
 * three are admitted, the fourth is refused at submit, and all three run to
 * their end. Admitting by prompt blocks alone would let the fourth in and
 * the pool run dry mid-generation, failing the step for everybody. */
static void test_pool_exhaustion_busy(void **state) {
    (void)state;
    enum { GEN = 100 };
    sb_engine *e = open_engine(FIXTURES[0], 4, 24, 64);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t p[4][12];
    out_t g[4], ref;
    sb_gen_opts o[4];
    sb_task *t[4];
    char err[SB_ERR_LEN];
    sb_gen_result r;
    for (int i = 0; i < 4; i++) make_prompt(p[i], 12, nv, 40u + (uint32_t)i);
    for (int i = 0; i < 3; i++) {
        greedy(&o[i], GEN, &g[i]);
        assert_int_equal(sb_engine_submit_generate(e, p[i], 12, &o[i], 0, &t[i], err), 0);
    }
    greedy(&o[3], GEN, &g[3]);
    assert_int_equal(sb_engine_submit_generate(e, p[3], 12, &o[3], 0, &t[3], err), SB_EBUSY);
    /* ... and nothing changed: still EBUSY after a step. */
    assert_int_equal(sb_engine_step(e, err), 3);
    assert_int_equal(sb_engine_submit_generate(e, p[3], 12, &o[3], 0, &t[3], err), SB_EBUSY);
    run_all(e, t, 3);
    int grew = 0;
    for (int i = 0; i < 3; i++) {
        sb_task_poll(t[i], &r, NULL, err);
        grew += r.n_gen;
        sb_task_free(e, t[i]);
    }
    /* The test means something only if the tasks did take their blocks. */
    assert_true(grew > 3 * 40);
    /* Room again: the fourth runs, and gives what it gives alone. */
    greedy(&o[3], GEN, &g[3]);
    assert_int_equal(sb_engine_submit_generate(e, p[3], 12, &o[3], 0, &t[3], err), 0);
    run_all(e, &t[3], 1);
    sb_task_free(e, t[3]);
    alone(e, p[3], 12, GEN, &ref, &r);
    assert_same(&g[3], &ref);
    /* A task that can never fit the pool is told so, not kept waiting. */
    sb_engine *small = open_engine(FIXTURES[0], 2, 4, 64);
    greedy(&o[0], 200, &g[0]);
    assert_int_equal(sb_engine_submit_generate(small, p[0], 12, &o[0], 0, &t[0], err), SB_ERANGE);
    sb_engine_free(small);
    sb_engine_free(e);
}

/* Same 40-token system prompt, two user texts: the second task forks the
 * first one's cached blocks (32 positions: whole blocks of the shared
 * part), evaluates 32 fewer tokens, and still gives what it gives alone. */
static void test_prefix_cache(void **state) {
    (void)state;
    enum { SYS = 40, USER = 10, GEN = 8 };
    sb_engine *e = open_engine(FIXTURES[1], 2, 0, 64);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t a[SYS + USER], b[SYS + USER];
    make_prompt(a, SYS, nv, 11);
    memcpy(b, a, sizeof(int32_t) * SYS);
    make_prompt(a + SYS, USER, nv, 12);
    make_prompt(b + SYS, USER, nv, 13);
    out_t ref, ga, gb;
    sb_gen_result r, rr;
    alone(e, b, SYS + USER, GEN, &ref, &rr);
    sb_gen_opts o;
    sb_task *t;
    char err[SB_ERR_LEN];
    sb_engine_stats s0, s1, s2;
    sb_engine_stats_get(e, &s0);
    greedy(&o, GEN, &ga);
    assert_int_equal(sb_engine_submit_generate(e, a, SYS + USER, &o, 0, &t, err), 0);
    run_all(e, &t, 1);
    sb_task_poll(t, &r, NULL, err);
    assert_int_equal(r.n_reused, 0);
    sb_task_free(e, t);
    sb_engine_stats_get(e, &s1);
    assert_int_equal(s1.prefix_misses - s0.prefix_misses, 1);
    assert_int_equal(s1.prefix_hits - s0.prefix_hits, 0);
    assert_int_equal(s1.step_tokens - s0.step_tokens, SYS + USER + r.n_gen);
    assert_true(s1.blocks_cached > 0);
    greedy(&o, GEN, &gb);
    assert_int_equal(sb_engine_submit_generate(e, b, SYS + USER, &o, 0, &t, err), 0);
    run_all(e, &t, 1);
    sb_task_poll(t, &r, NULL, err);
    assert_int_equal(r.n_reused, 32);
    sb_task_free(e, t);
    sb_engine_stats_get(e, &s2);
    assert_int_equal(s2.prefix_hits - s1.prefix_hits, 1);
    assert_int_equal(s2.prefix_tokens_reused - s1.prefix_tokens_reused, 32);
    assert_int_equal(s2.step_tokens - s1.step_tokens, SYS + USER - 32 + r.n_gen);
    assert_same(&gb, &ref);
    sb_engine_free(e);
}

/* Two calls with one system prompt at the same moment: the second waits
 * (SB_EBUSY) while the first reads the shared part, then starts from it. */
static void test_prefix_wait(void **state) {
    (void)state;
    enum { SYS = 100, USER = 20 };
    sb_engine *e = open_engine(FIXTURES[2], 2, 0, 32);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t a[SYS + USER], b[SYS + USER];
    make_prompt(a, SYS, nv, 31);
    memcpy(b, a, sizeof(int32_t) * SYS);
    make_prompt(a + SYS, USER, nv, 32);
    make_prompt(b + SYS, USER, nv, 33);
    out_t ga, gb, ref;
    sb_gen_result r;
    alone(e, b, SYS + USER, 6, &ref, &r);
    sb_gen_opts oa, ob;
    greedy(&oa, 6, &ga);
    greedy(&ob, 6, &gb);
    sb_task *t[2];
    char err[SB_ERR_LEN];
    assert_int_equal(sb_engine_submit_generate(e, a, SYS + USER, &oa, 0, &t[0], err), 0);
    assert_int_equal(sb_engine_submit_generate(e, b, SYS + USER, &ob, 0, &t[1], err), SB_EBUSY);
    int steps = 0;
    while (sb_engine_submit_generate(e, b, SYS + USER, &ob, 0, &t[1], err) == SB_EBUSY) {
        assert_int_equal(sb_engine_step(e, err), 1);
        assert_true(++steps < 10);
    }
    run_all(e, t, 2);
    sb_task_poll(t[1], &r, NULL, err);
    assert_int_equal(r.n_reused, 96);
    assert_same(&gb, &ref);
    sb_task_free(e, t[0]);
    sb_task_free(e, t[1]);
    sb_engine_free(e);
}

/* Ten candidates (more than run at once; lengths 1 to 40, one longer than
 * the step budget) after a 21-token prompt, scored next to a running
 * generation: exactly sb_engine_score's numbers. */
static void test_score_equals(void **state) {
    (void)state;
    enum { NC = 10, NP = 21 };
    for (size_t f = 0; f < SB_ARRAY_LEN(FIXTURES); f++) {
        sb_engine *e = open_engine(FIXTURES[f], 3, 0, 32);
        const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
        int32_t prompt[NP], cbuf[NC][40];
        const int32_t *cands[NC];
        int lens[NC];
        for (int c = 0; c < NC; c++) {
            lens[c] = c == 9 ? 40 : 1 + c % 5;
            make_prompt(cbuf[c], lens[c], nv, 100u + (uint32_t)c);
            cands[c] = cbuf[c];
        }
        make_prompt(prompt, NP, nv, 99);
        double ref[NC], got[NC];
        char err[SB_ERR_LEN];
        sb_engine_reset(e);
        assert_int_equal(sb_engine_score(e, prompt, NP, cands, lens, NC, ref, err), 0);
        sb_engine_reset(e);
        out_t g;
        sb_gen_opts o;
        greedy(&o, 30, &g);
        sb_task *t[2];
        assert_int_equal(sb_engine_submit_generate(e, cbuf[9], 30, &o, 0, &t[0], err), 0);
        sb_engine_step(e, err);
        assert_int_equal(sb_engine_submit_score(e, prompt, NP, cands, lens, NC, 0, &t[1], err), 0);
        run_all(e, t, 2);
        sb_gen_result r;
        assert_int_equal(sb_task_poll(t[1], &r, got, err), 1);
        for (int c = 0; c < NC; c++) assert_true(got[c] == ref[c]);
        sb_task_free(e, t[0]);
        sb_task_free(e, t[1]);
        sb_engine_free(e);
    }
}

/* A budget of 16 and two 40-token prompts: the later, higher-priority one
 * is read first and speaks first. */
static void test_priority(void **state) {
    (void)state;
    sb_engine *e = open_engine(FIXTURES[0], 2, 0, 16);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t lo[40], hi[40];
    make_prompt(lo, 40, nv, 21);
    make_prompt(hi, 40, nv, 22);
    out_t gl, gh;
    sb_gen_opts ol, oh;
    greedy(&ol, 4, &gl);
    greedy(&oh, 4, &gh);
    sb_task *t[2];
    char err[SB_ERR_LEN];
    assert_int_equal(sb_engine_submit_generate(e, lo, 40, &ol, 0, &t[0], err), 0);
    assert_int_equal(sb_engine_submit_generate(e, hi, 40, &oh, 5, &t[1], err), 0);
    run_all(e, t, 2);
    assert_true(gh.n > 0 && gl.n > 0);
    assert_true(gh.seq_no < gl.seq_no);
    sb_task_free(e, t[0]);
    sb_task_free(e, t[1]);
    sb_engine_free(e);
}

/* Speculation in the batch: one task alone drafts and verifies (its
 * drafted counter moves), its greedy tokens are plain decoding's; a task
 * that joins mid-way makes the steps plain again, both stay exact. */
static void test_spec_alone(void **state) {
    (void)state;
    enum { GEN = 60 };
    const char *text = "one two three four one two three four one two three";
    char err[SB_ERR_LEN];
    sb_engine *draft = open_engine("tests/data/tiny-llama-spm-Q2_K.gguf", 0, 0, 64);
    for (size_t f = 0; f < SB_ARRAY_LEN(FIXTURES); f++) {
        sb_engine *e = open_engine(FIXTURES[f], 2, 0, 64);
        const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
        int32_t *pa, pb[10];
        size_t na;
        if (sb_engine_tokenize(e, text, strlen(text), 1, &pa, &na, err)) fail_msg("%s", err);
        make_prompt(pb, 10, nv, 3);
        out_t ra, rb, ga, gb;
        sb_gen_result r;
        alone(e, pa, (int)na, GEN, &ra, &r);
        alone(e, pb, 10, 10, &rb, &r);     /* B ends first: A is alone again after */
        const int with_draft = sb_engine_check_draft(e, draft, NULL) == 0;
        for (int mode = 0; mode < 4; mode++) {
            if (mode >= 2 && !with_draft) continue;
            const int join = mode & 1;
            sb_gen_opts oa, ob;
            greedy(&oa, GEN, &ga);
            greedy(&ob, 10, &gb);
            oa.spec_exact = 1;
            if (mode < 2) oa.lookup = 4;
            else { oa.draft = draft; oa.n_draft = 4; }
            sb_task *t[2];
            sb_engine_stats s0, s1;
            sb_engine_stats_get(e, &s0);
            assert_int_equal(sb_engine_submit_generate(e, pa, (int)na, &oa, 0, &t[0], err), 0);
            if (join) {
                for (int i = 0; i < 4; i++) assert_int_equal(sb_engine_step(e, err), 1);
                assert_int_equal(sb_engine_submit_generate(e, pb, 10, &ob, 0, &t[1], err), 0);
            }
            run_all(e, t, 1 + join);
            sb_engine_stats_get(e, &s1);
            assert_int_equal(sb_task_poll(t[0], &r, NULL, err), 1);
            if (ga.n != ra.n || memcmp(ga.tok, ra.tok, (size_t)ra.n * sizeof *ra.tok))
                fail_msg("%s mode %d: speculative task differs from plain greedy", FIXTURES[f], mode);
            assert_same(&ga, &ra);
            if (!(r.n_drafted > 0 && r.n_accepted <= r.n_drafted)) fail_msg("%s mode %d: drafted %d accepted %d gen %d", FIXTURES[f], mode, r.n_drafted, r.n_accepted, r.n_gen);
            assert_int_equal(s1.spec_drafted - s0.spec_drafted, (uint64_t)r.n_drafted);
            assert_int_equal(s1.spec_accepted - s0.spec_accepted, (uint64_t)r.n_accepted);
            if (join) assert_same(&gb, &rb);
            for (int i = 0; i <= join; i++) sb_task_free(e, t[i]);
        }
        free(pa);
        sb_engine_free(e);
    }
    sb_engine_free(draft);
}

/* Generations with one json_schema at once share the schema's mask cache:
 * after one task has been through the positions, three more run together
 * on the same prompt compute no mask at all (each used to get a matcher
 * with an empty cache of its own but one, and recompute every mask on the
 * compute thread between passes), and they give the lone task's tokens. */
static void test_schema_masks_shared(void **state) {
    (void)state;
    enum { N = 3, GEN = 24 };
    static const char SCHEMA[] =
        "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"topic\"],"
        " \"properties\": {\"topic\": {\"type\": \"string\", \"maxLength\": 12}}}";
    sb_engine *e = open_engine(FIXTURES[1], N + 1, 0, 64);
    const int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    int32_t p[10];
    make_prompt(p, 10, nv, 11);
    char err[SB_ERR_LEN];
    sb_gen_opts o0, o[N];
    out_t ref, got[N];
    sb_task *t0, *t[N];
    sb_gen_result r0, r;
    greedy(&o0, GEN, &ref);
    o0.json_schema = SCHEMA;
    o0.json_schema_len = strlen(SCHEMA);
    assert_int_equal(sb_engine_submit_generate(e, p, 10, &o0, 0, &t0, err), 0);
    run_all(e, &t0, 1);
    assert_int_equal(sb_task_poll(t0, &r0, NULL, err), 1);
    sb_task_free(e, t0);
    assert_true(r0.masks_computed > 1);
    assert_true(ref.n > 1);
    for (int i = 0; i < N; i++) {
        greedy(&o[i], GEN, &got[i]);
        o[i].json_schema = SCHEMA;
        o[i].json_schema_len = strlen(SCHEMA);
        assert_int_equal(sb_engine_submit_generate(e, p, 10, &o[i], 0, &t[i], err), 0);
    }
    run_all(e, t, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(sb_task_poll(t[i], &r, NULL, err), 1);
        assert_same(&got[i], &ref);
        if (r.masks_computed != 0)
            fail_msg("task %d computed %llu masks (reused %llu): the schema's cache was not shared", i,
                     (unsigned long long)r.masks_computed, (unsigned long long)r.masks_reused);
        assert_int_equal(r.masks_reused, r0.masks_computed + r0.masks_reused);
        sb_task_free(e, t[i]);
    }
    sb_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_together_equals_alone),
        cmocka_unit_test(test_join_next_step),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_pool_exhaustion_busy),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_prefix_wait),
        cmocka_unit_test(test_score_equals),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_spec_alone),
        cmocka_unit_test(test_schema_masks_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
