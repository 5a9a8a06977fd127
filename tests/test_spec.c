/* test_spec.c - speculative decoding: prompt-lookup drafts, the acceptance
 * rule, and the engine's verify/rollback loop on the fixtures.
 *
 *  - the acceptance rule's output must be distributed as the target p for a
 *    point-mass draft (prompt lookup) and for a real draft distribution q:
 *    "always accept", "accept with p(x)" but redraw from p, or a residual
 *    without max(0, ·) all fail the chi-square bound;
 *  - greedy generation with drafts (lookup and a Q2_K draft model of the
 *    same vocabulary) gives the tokens of plain decoding: exactly through
 *    the one-token kernels, on every fixture; a missing KV rollback or a
 *    wrong accept test changes them;
 *  - at temperature > 0 the second token (the first one a draft decides)
 *    has the same distribution over seeds with and without drafting.
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

#include "worker/engine/sb_engine.h"
#include "worker/engine/sb_spec.h"

#define TARGET "tests/data/tiny-llama-spm-Q8_0.gguf"
#define DRAFT  "tests/data/tiny-llama-spm-Q2_K.gguf"

/* Chi-square quantile at z = 4.75 (p ~ 1e-6), Wilson-Hilferty. */
static double chi2_bound(int df) {
    const double a = 2.0 / (9.0 * df), z = 4.75;
    return df * pow(1 - a + z * sqrt(a), 3);
}

static uint64_t rng = 88172645463325252ull;
static double uni(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1.0p-53;
}

static void test_lookup(void **state) {
    (void)state;
    int32_t d[8];
    /* "5 6" occurs twice; the most recent one (followed by 9 1) wins, and
     * the 3-gram "4 5 6" beats both. */
    const int32_t a[] = { 1, 5, 6, 7, 8, 5, 6, 9, 1, 2, 5, 6 };
    assert_int_equal(sb_spec_lookup(a, 12, 8, d), 5);
    assert_int_equal(d[0], 9); assert_int_equal(d[1], 1); assert_int_equal(d[4], 6);
    assert_int_equal(sb_spec_lookup(a, 12, 3, d), 3);
    const int32_t b[] = { 4, 5, 6, 7, 8, 5, 6, 9, 4, 5, 6 };
    assert_int_equal(sb_spec_lookup(b, 11, 2, d), 2);
    assert_int_equal(d[0], 7); assert_int_equal(d[1], 8);
    const int32_t c[] = { 1, 2, 3, 4, 5 };
    assert_int_equal(sb_spec_lookup(c, 5, 8, d), 0);
    assert_int_equal(sb_spec_lookup(b, 11, 0, d), 0);
}

/* sb_spec_find: the longest suffix wins over a more recent shorter one;
 * among equally long ones the most recent; capped at max_ngram. */
static void test_find_longest(void **state) {
    (void)state;
    int at;
    /* tail "7 8 9": "8 9" recurs at 6-7 (then 5), "7 8 9" only at 0-2 (then 4) */
    const int32_t a[] = { 7, 8, 9, 4, 1, 3, 8, 9, 5, 2, 7, 8, 9 };
    assert_int_equal(sb_spec_find(a, 13, 8, &at), 3);
    assert_int_equal(at, 3);
    assert_int_equal(sb_spec_find(a, 13, 2, &at), 2);     /* capped: the most recent 2-gram */
    assert_int_equal(at, 8);
    /* two equally long (3) matches: the later one */
    const int32_t b[] = { 1, 2, 3, 4, 6, 1, 2, 3, 4, 7, 0, 2, 3, 4 };
    assert_int_equal(sb_spec_find(b, 14, 8, &at), 3);
    assert_int_equal(at, 9);
    const int32_t c[] = { 5, 6, 1, 2, 5 };
    assert_int_equal(sb_spec_find(c, 5, 8, &at), 1);
    assert_int_equal(at, 1);
    assert_int_equal(sb_spec_find(c, 4, 8, &at), 0);
    /* a match as long as the cap stops the search at the most recent one */
    const int32_t d[] = { 1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3 };
    assert_int_equal(sb_spec_find(d, 11, 3, &at), 3);
    assert_int_equal(at, 7);
}

/* The policy's costs: measured sizes as measured (relative to a plain
 * step), others from the largest measured size below plus the optimistic
 * slope; the prior before any plain step. */
static void test_policy_cost(void **state) {
    (void)state;
    sb_spec_policy p;
    sb_spec_policy_init(&p, 8);
    assert_true(fabs(sb_spec_cost(&p, 1) - 1.0) < 1e-9);
    assert_true(fabs(sb_spec_cost(&p, 9) - (1.0 + 8 * SB_SPEC_COST_SLOPE)) < 1e-9);
    sb_spec_time(&p, 1, 0.040);
    sb_spec_time(&p, 1, 0.060);             /* mean 50 ms */
    sb_spec_time(&p, 3, 0.100);
    sb_spec_time(&p, 8, 0.140);
    assert_true(fabs(sb_spec_cost(&p, 3) - 2.0) < 1e-9);
    assert_true(fabs(sb_spec_cost(&p, 8) - 2.8) < 1e-9);
    assert_true(fabs(sb_spec_cost(&p, 5) - (2.0 + 2 * SB_SPEC_COST_SLOPE)) < 1e-9);
    assert_true(fabs(sb_spec_cost(&p, 9) - (2.8 + SB_SPEC_COST_SLOPE)) < 1e-9);
    assert_true(fabs(sb_spec_cost(&p, 2) - (1.0 + SB_SPEC_COST_SLOPE)) < 1e-9);
}

/* The length choice: the k of the best tokens per cost, or 0. */
static void test_policy_choice(void **state) {
    (void)state;
    sb_spec_policy p;
    sb_spec_policy_init(&p, 8);
    /* a kernel that works in groups of 8: 8 tokens cost 2.5, 9 cost 4 */
    const double cost[10] = { 0, 1, 1.6, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 4.0 };
    for (int n = 1; n <= 9; n++) sb_spec_time(&p, n, cost[n]);
    /* copies that always go through: 7 drafts (a pass of 8), not 8 */
    for (int r = 0; r < 20; r++) sb_spec_update(&p, 4, 8, 8);
    assert_int_equal(sb_spec_choose(&p, 4, 8), 7);
    assert_true(sb_spec_expect(&p, 4, 7) > 5.5);
    /* at most what the caller allows, and the user's N */
    assert_int_equal(sb_spec_choose(&p, 4, 3), 3);
    sb_spec_policy q = p;
    q.max_draft = 2;
    assert_int_equal(sb_spec_choose(&q, 4, 8), 2);
    /* a one-token match that never went right: no draft at all */
    for (int r = 0; r < 10; r++) sb_spec_update(&p, 1, 4, 0);
    assert_int_equal(sb_spec_choose(&p, 1, 8), 0);
    assert_true(sb_spec_expect(&p, 1, 8) < 0.1);
    /* the statistics are per match length: 3 is still at its prior */
    assert_true(sb_spec_expect(&p, 3, 1) > 0.5);
    /* matches of 2 whose first token goes right but never the second: one token */
    for (int r = 0; r < 20; r++) sb_spec_update(&p, 2, 4, 1);
    assert_true(sb_spec_expect(&p, 2, 1) > 0.9 && sb_spec_expect(&p, 2, 4) < 1.2);
    const double c1[10] = { 0, 1, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4 };
    sb_spec_policy r2;
    sb_spec_policy_init(&r2, 8);
    for (int n = 1; n <= 9; n++) sb_spec_time(&r2, n, c1[n]);
    for (int r = 0; r < 20; r++) sb_spec_update(&r2, 2, 4, 1);
    assert_int_equal(sb_spec_choose(&r2, 2, 8), 1);
    /* sb_spec_draft copies what followed the longest match, cut at the
     * context's end and at the chosen length */
    const int32_t ctx[] = { 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 2, 3, 4, 5, 6 };
    int32_t d[16];
    int m;
    assert_int_equal(sb_spec_draft(&p, ctx, 17, 8, d, &m), 7);
    assert_int_equal(m, 4);
    assert_int_equal(d[0], 7);
    assert_int_equal(d[6], 13);
    assert_int_equal(sb_spec_draft(&p, ctx, 13, 8, d, &m), 0);      /* "2" never occurred before */
}

/* Draw n outcomes of the rule and compare with p by chi-square. */
static int check_rule(const float *qdense, int nv, const int32_t *ids, const float *p, int n, int32_t fixed_x) {
    enum { DRAWS = 200000 };
    int count[16] = { 0 };
    int accepted = 0;
    for (int d = 0; d < DRAWS; d++) {
        int32_t x = fixed_x;
        if (qdense) {           /* x ~ q */
            double u = uni(), run = 0;
            x = nv - 1;
            for (int t = 0; t < nv; t++) if ((run += qdense[t]) > u) { x = t; break; }
        }
        int32_t out;
        accepted += sb_spec_accept(ids, p, n, x, qdense, uni(), uni(), &out);
        assert_true(out >= 0 && out < 16);
        count[out]++;
    }
    double chi2 = 0;
    for (int i = 0; i < n; i++) {
        const double e = DRAWS * (double)p[i];
        chi2 += (count[ids[i]] - e) * (count[ids[i]] - e) / e;
    }
    int outside = DRAWS;
    for (int i = 0; i < n; i++) outside -= count[ids[i]];
    assert_int_equal(outside, 0);           /* nothing outside p's support */
    if (chi2 > chi2_bound(n - 1)) fail_msg("chi-square %.1f > %.1f", chi2, chi2_bound(n - 1));
    return accepted;
}

static void test_accept_rule(void **state) {
    (void)state;
    const int32_t ids[] = { 3, 7, 9, 12 };
    const float p[] = { 0.45f, 0.30f, 0.20f, 0.05f };
    int a = check_rule(NULL, 16, ids, p, 4, 7);     /* lookup draft of a likely token: taken 30 % of the time */
    assert_true(a > 58000 && a < 62000);
    assert_true(check_rule(NULL, 16, ids, p, 4, 12) > 0);  /* of an unlikely one */
    assert_int_equal(check_rule(NULL, 16, ids, p, 4, 5), 0);  /* of one p excludes: never accepted */
    float q[16] = { 0 };                    /* a draft model that is over-confident, with mass where p has none */
    q[3] = 0.1f; q[7] = 0.6f; q[9] = 0.1f; q[5] = 0.2f;
    check_rule(q, 16, ids, p, 4, -1);
    float q2[16] = { 0 };
    q2[3] = 0.45f; q2[7] = 0.30f; q2[9] = 0.20f; q2[12] = 0.05f;  /* q = p: always accepted */
    assert_int_equal(check_rule(q2, 16, ids, p, 4, -1), 200000);
}

/* Backoff: a window of 32 drafted tokens under 30 % accepted halves the
 * draft length, down to 0 (off); a good window keeps it; each decision
 * starts a new window. */
static void test_backoff(void **state) {
    (void)state;
    int wd = 0, wa = 0, len = 8;
    for (int i = 0; i < 3; i++) len = sb_spec_backoff(len, &wd, &wa, 8, 4);   /* 24 drafted: no decision */
    assert_int_equal(len, 8);
    len = sb_spec_backoff(len, &wd, &wa, 8, 4);         /* 32, 50 %: kept */
    assert_int_equal(len, 8);
    assert_int_equal(wd, 0);
    for (int i = 0; i < 4; i++) len = sb_spec_backoff(len, &wd, &wa, 8, i == 0 ? 9 : 0);  /* 9 / 32 = 28 % */
    assert_int_equal(len, 4);
    for (int i = 0; i < 8; i++) len = sb_spec_backoff(len, &wd, &wa, 4, i < 3 ? 4 : 0);   /* 12 / 32 = 37.5 % */
    assert_int_equal(len, 4);
    for (int i = 0; i < 8; i++) len = sb_spec_backoff(len, &wd, &wa, 4, 1);   /* 8 / 32 */
    assert_int_equal(len, 2);
    for (int i = 0; i < 16; i++) len = sb_spec_backoff(len, &wd, &wa, 2, 0);
    assert_int_equal(len, 0);                            /* below 2: off */
}

/* ---- the engine ---- */

typedef struct { int32_t tok[512]; int n; } toks;

static int grab(void *ud, const char *text, size_t len, int32_t token) {
    (void)text; (void)len;
    toks *t = ud;
    if (token >= 0 && t->n < 512) t->tok[t->n++] = token;
    return 0;
}

static sb_engine *open_engine(const char *path) {
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = 2;
    cp.n_ctx = 512;
    sb_engine *e = NULL;
    char err[SB_ERR_LEN];
    if (sb_engine_open(path, &cp, &e, err)) fail_msg("%s: %s", path, err);
    return e;
}

static void gen(sb_engine *e, const int32_t *prompt, int n, sb_gen_opts *o, toks *out, sb_gen_result *res) {
    char err[SB_ERR_LEN];
    out->n = 0;
    sb_engine_reset(e);         /* every run from the whole prompt, the same numbers */
    o->on_piece = grab;
    o->ud = out;
    if (sb_engine_generate(e, prompt, n, o, res, err)) fail_msg("generate: %s", err);
}

static int32_t *prompt_of(sb_engine *e, const char *text, int *n) {
    int32_t *ids;
    size_t nn;
    char err[SB_ERR_LEN];
    if (sb_engine_tokenize(e, text, strlen(text), 1, &ids, &nn, err)) fail_msg("%s", err);
    *n = (int)nn;
    return ids;
}

static const char *const FIXTURES[] = {
    "tests/data/tiny-llama-spm-Q2_K.gguf", "tests/data/tiny-llama-spm-Q4_K_M.gguf",
    "tests/data/tiny-llama-spm-Q8_0.gguf", "tests/data/tiny-llama-spm-f16.gguf",
    "tests/data/tiny-llama3-Q4_K_M.gguf", "tests/data/tiny-phi3-Q4_K_M.gguf",
};

static void test_greedy_identity(void **state) {
    (void)state;
    const char *text = "one two three four one two three four one two three";
    sb_engine *draft = open_engine(DRAFT);
    for (size_t f = 0; f < sizeof FIXTURES / sizeof *FIXTURES; f++) {
        sb_engine *e = open_engine(FIXTURES[f]);
        int n;
        int32_t *prompt = prompt_of(e, text, &n);
        static toks plain, spec;
        sb_gen_opts o;
        sb_gen_result r0, r1;
        sb_gen_opts_default(&o);
        o.sampling.temp = 0;
        o.max_tokens = 200;
        gen(e, prompt, n, &o, &plain, &r0);
        assert_int_equal(r0.n_drafted, 0);
        const int same_vocab = sb_engine_check_draft(e, draft, NULL) == 0;
        for (int mode = 0; mode < 4; mode++) {
            if (mode == 2 && !same_vocab) continue;
            sb_gen_opts so = o;
            so.spec_exact = 1;
            so.lookup = mode == 0 || mode == 3 ? 4 : mode == 1 ? SB_SPEC_MAX_DRAFT : 0;
            /* cheap checks: the policy drafts at every match, so drafts get
             * rejected and rolled back; mode 3 times its passes (the
             * runtime's way): identical text whatever it drafts */
            so.spec_cost = mode == 3 ? 0 : 0.01;
            if (mode == 2) { so.draft = draft; so.n_draft = 5; }
            gen(e, prompt, n, &so, &spec, &r1);
            if (spec.n != plain.n || memcmp(spec.tok, plain.tok, (size_t)plain.n * sizeof(int32_t)))
                fail_msg("%s mode %d: speculative greedy differs from plain (%d vs %d tokens)", FIXTURES[f], mode,
                         spec.n, plain.n);
            assert_int_equal(r1.n_gen, r0.n_gen);
            assert_string_equal(r1.finish, r0.finish);
            /* The loop really ran: drafts were made, some taken, some not. */
            assert_true(r1.n_drafted > 0);
            if (mode == 3) continue;    /* timed: how much it drafts depends on the machine */
            assert_true(r1.n_accepted > 0 && r1.n_accepted <= r1.n_drafted);
            if (mode != 2) assert_true(r1.n_accepted < r1.n_drafted);
        }
        free(prompt);
        sb_engine_free(e);
    }
    sb_engine_free(draft);
}

/* The draft engine must refuse a model of another vocabulary. */
static void test_draft_vocab_check(void **state) {
    (void)state;
    sb_engine *a = open_engine(TARGET), *b = open_engine("tests/data/tiny-llama3-Q4_K_M.gguf");
    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_engine_check_draft(a, b, err), SB_EINVAL);
    assert_non_null(strstr(err, "not the same vocabulary"));
    sb_engine *c = open_engine(DRAFT);
    assert_int_equal(sb_engine_check_draft(a, c, err), 0);
    sb_engine_free(a); sb_engine_free(b); sb_engine_free(c);
}

/* For the lookup test: a prompt after which (almost) every likely first
 * token t makes a draft, i.e. the bigram (last prompt token, t) occurs in it:
 * segments [L, t, y] for the first tokens seen, then the base prompt. The
 * segments change what comes first, so iterate a few times. */
static int32_t *lookup_prompt(sb_engine *e, int32_t *base, int *n, int nv) {
    const int nb = *n;
    const int32_t last = base[nb - 1];
    char *seen = calloc((size_t)nv, 1);
    int32_t *p = malloc(512 * sizeof *p);
    memcpy(p, base, (size_t)nb * sizeof *p);
    int np = nb;
    static toks t;
    for (int it = 0; it < 4; it++) {
        for (int s = 0; s < 100; s++) {
            sb_gen_opts o;
            sb_gen_result r;
            sb_gen_opts_default(&o);
            o.sampling.temp = 0.7f;
            o.sampling.top_k = 12;
            o.sampling.seed = 1000000u + (unsigned)s;
            o.max_tokens = 1;
            gen(e, p, np, &o, &t, &r);
            if (t.n == 1) seen[t.tok[0]] = 1;
        }
        np = 0;
        for (int v = 0; v < nv && np + 3 + nb <= 400; v++)
            if (seen[v]) { p[np++] = last; p[np++] = v; p[np++] = base[1]; }
        memcpy(p + np, base, (size_t)nb * sizeof *p);
        np += nb;
    }
    free(seen);
    free(base);
    *n = np;
    return p;
}

/* Second token over seeds, with and without drafting: two-sample chi-square
 * over the outcomes seen at least 10 times in all. */
static void sampled_second_token(int use_draft) {
    enum { SEEDS = 1500 };
    sb_engine *e = open_engine(TARGET), *d = use_draft ? open_engine(DRAFT) : NULL;
    int n;
    int32_t *prompt = prompt_of(e, "a b c d a b c d a b c d a b c", &n);
    int nv = sb_model_hparams(sb_engine_model(e))->n_vocab;
    if (!use_draft) prompt = lookup_prompt(e, prompt, &n, nv);
    int *cnt[2] = { calloc((size_t)nv, sizeof(int)), calloc((size_t)nv, sizeof(int)) };
    long drafted = 0;
    static toks t;
    for (int mode = 0; mode < 2; mode++)
        for (int s = 0; s < SEEDS; s++) {
            sb_gen_opts o;
            sb_gen_result r;
            sb_gen_opts_default(&o);
            o.sampling.temp = 0.7f;
            o.sampling.top_k = 12;
            o.sampling.seed = (uint64_t)s * 2 + (uint64_t)mode;     /* independent samples */
            o.max_tokens = 2;
            if (mode) {
                if (use_draft) { o.draft = d; o.n_draft = 3; }
                else { o.lookup = 4; o.spec_cost = 0.01; }   /* fixed: a draft at every match */
            }
            gen(e, prompt, n, &o, &t, &r);
            /* A piece held back (part of a UTF-8 sequence) or an end
             * token leaves fewer: the same for both modes when they agree. */
            cnt[mode][t.n == 2 ? t.tok[1] : 0]++;
            if (mode) drafted += r.n_drafted;
        }
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < nv; i++) {
        const int a = cnt[0][i], b = cnt[1][i];
        if (a + b < 10) continue;
        chi2 += (double)(a - b) * (a - b) / (a + b);
        df++;
    }
    assert_true(df >= 2);
    fprintf(stderr, "# %s: %ld drafted over %d seeds\n", use_draft ? "draft" : "lookup", drafted, SEEDS);
    assert_true(drafted > SEEDS / 2);       /* most second tokens were decided by the rule */
    if (chi2 > chi2_bound(df)) fail_msg("%s: chi-square %.1f > %.1f (df %d)", use_draft ? "draft" : "lookup", chi2,
                                        chi2_bound(df), df);
    free(cnt[0]); free(cnt[1]);
    free(prompt);
    sb_engine_free(d);
    sb_engine_free(e);
}

static void test_sampled_lookup(void **state) { (void)state; sampled_second_token(0); }
static void test_sampled_draft(void **state) { (void)state; sampled_second_token(1); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_find_longest),
        cmocka_unit_test(test_policy_cost),
        cmocka_unit_test(test_policy_choice),
        cmocka_unit_test(test_accept_rule),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_greedy_identity),
        cmocka_unit_test(test_draft_vocab_check),
        cmocka_unit_test(test_sampled_lookup),
        cmocka_unit_test(test_sampled_draft),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
