/* spec_sim.c - replay prompt-lookup drafting policies offline.
 *
 * With exact verification (--spec-exact) greedy text does not depend on the
 * drafts, so whether a drafted token is accepted is decided by the plain
 * greedy continuation alone: a draft d1..dk after position j keeps the
 * longest prefix equal to the greedy tokens j+1.. . This tool generates the
 * plain greedy reply once (cached in DIR/NAME.ids), then replays the
 * engine's drafting code (worker/engine/spec.c, linked in) over it and
 * predicts the decode speed-up from a table of verification costs:
 * cost(n) = time of one exact pass over n tokens / time of one token, which
 * it measures on the model (--costs) or reads from SB_SIM_COSTS.
 *
 *   spec_sim MODEL PROMPT_FILE N CACHE_DIR [--costs]
 *
 * --costs: (re)generate and time exact passes of 1..17 tokens at the end of
 * the reply (9 interleaved rounds; medians and minima), and replay with them.
 * Else the costs come from SB_SIM_COSTS="c2 c3 .. c17" (default 1 + 0.1 (n-1)).
 * Prints, for lookup 8: the old fixed-length lookup with its 32-token
 * backoff, the engine's policy (sb_spec_draft, fed the same costs as its
 * timings: SB_SIM_KNOWN=1 gives it all of them up front), and an oracle
 * (the cheapest plan knowing the reply: a bound for any policy drafting
 * from the longest match). SB_SIM_ANALYZE=1 prints every position's match
 * length and how far its copy goes; SB_SIM_VERBOSE=0|1 each step of one.
 *
 * Build (after make):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -pthread -I. -o spec_sim tools/spec_sim.c build/libswitchboard.a \
 *      -levent_pthreads -levent -lmsgpackc -lyaml -lsqlite3 -lpq -lcurl -lcrypto -lm
 * A tool for choosing the policy (docs/PERFORMANCE.md); `bench --lookup` is
 * what measures it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/engine_impl.h"
#include "worker/engine/sb_model.h"

#define MAXN 17

typedef struct { int32_t *ids; int n, cap; } tokv;

static int grab(void *ud, const char *text, size_t len, int32_t token) {
    (void)text; (void)len;
    tokv *v = ud;
    if (token < 0) return 0;
    if (v->n == v->cap) { v->cap = v->cap ? 2 * v->cap : 256; v->ids = realloc(v->ids, (size_t)v->cap * 4); }
    v->ids[v->n++] = token;
    return 0;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

/* Replay: seq[0..np) prompt, seq[np..np+ng) the greedy reply. Old policy
 * (policy 0: fixed max, 32-token window backoff) or the engine's current
 * (policy 1). Returns predicted plain_cost / spec_cost. */
static double replay(const int32_t *seq, int np, int ng, int max_draft, int policy, const double *cost, int verbose,
                     int *o_drafted, int *o_acc, int *o_steps) {
    double t = 0;
    int j = np, drafted = 0, acc = 0, steps = 0;
    int len = max_draft, wd = 0, wa = 0;
    sb_spec_policy pol;
    sb_spec_policy_init(&pol, max_draft);
    if (getenv("SB_SIM_KNOWN")) for (int i = 1; i <= MAXN; i++) sb_spec_time(&pol, i, cost[i]);
    int32_t d[SB_SPEC_MAX_DRAFT];
    while (j < np + ng) {
        const int left = np + ng - j - 1;         /* tokens still to come after seq[j] */
        int k = 0, m = 0;
        if (policy == 0) {
            int mx = len < left ? len : left;
            k = mx > 0 ? sb_spec_lookup(seq, j + 1, mx, d) : 0;
        } else {
            k = sb_spec_draft(&pol, seq, j + 1, left, d, &m);
        }
        if (k <= 0) { t += 1; j++; if (policy) sb_spec_time(&pol, 1, 1.0); continue; }
        int a = 0;
        while (a < k && d[a] == seq[j + 1 + a]) a++;
        if (verbose) fprintf(stderr, "  j=%d m=%d k=%d a=%d\n", j - np, m, k, a);
        t += cost[k + 1];
        drafted += k; acc += a; steps++;
        if (policy == 0) len = sb_spec_backoff(len, &wd, &wa, k, a);
        else { sb_spec_update(&pol, m, k, a); sb_spec_time(&pol, k + 1, cost[k + 1]); }
        j += a + 1;
    }
    *o_drafted = drafted; *o_acc = acc; *o_steps = steps;
    return ng / t;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: spec_sim MODEL PROMPT_FILE N CACHE_DIR [--costs]\n"); return 2; }
    const char *model = argv[1], *pfile = argv[2], *dir = argv[4];
    const int n = atoi(argv[3]), want_costs = argc > 5 && !strcmp(argv[5], "--costs");
    const char *mb = strrchr(model, '/') ? strrchr(model, '/') + 1 : model, *pb = strrchr(pfile, '/') ? strrchr(pfile, '/') + 1 : pfile;
    char cpath[1024];
    snprintf(cpath, sizeof cpath, "%s/%.40s.%s.%d.ids", dir, mb, pb, n);
    int32_t *seq = NULL;
    int np = 0, ng = 0;
    double cost[MAXN + 1] = { 0 };
    FILE *f = fopen(cpath, "rb");
    sb_engine *e = NULL;
    char err[SB_ERR_LEN];
    if (f && !want_costs) {
        if (fread(&np, 4, 1, f) != 1 || fread(&ng, 4, 1, f) != 1) return 1;
        seq = malloc((size_t)(np + ng) * 4);
        if (fread(seq, 4, (size_t)(np + ng), f) != (size_t)(np + ng)) return 1;
        fclose(f);
    } else {
        if (f) fclose(f);
        FILE *pf = fopen(pfile, "rb");
        if (!pf) return 1;
        static char ptxt[1 << 16];
        size_t pl = fread(ptxt, 1, sizeof ptxt - 1, pf);
        fclose(pf);
        ptxt[pl] = 0;
        sb_ctx_params cp;
        sb_ctx_params_default(&cp);
        cp.n_threads = 2;
        int32_t *ids; size_t nids;
        if (sb_engine_open(model, &cp, &e, err) || sb_engine_tokenize(e, ptxt, pl, 1, &ids, &nids, err)) { fprintf(stderr, "%s\n", err); return 1; }
        sb_gen_opts o;
        sb_gen_opts_default(&o);
        o.sampling.temp = 0;
        o.max_tokens = n;
        tokv out = { 0 };
        o.on_piece = grab;
        o.ud = &out;
        sb_gen_result res;
        sb_engine_reset(e);
        if (sb_engine_generate(e, ids, (int)nids, &o, &res, err)) { fprintf(stderr, "%s\n", err); return 1; }
        np = (int)nids; ng = out.n;
        seq = malloc((size_t)(np + ng) * 4);
        memcpy(seq, ids, (size_t)np * 4);
        memcpy(seq + np, out.ids, (size_t)ng * 4);
        if ((f = fopen(cpath, "wb"))) { fwrite(&np, 4, 1, f); fwrite(&ng, 4, 1, f); fwrite(seq, 4, (size_t)(np + ng), f); fclose(f); }
        if (want_costs) {
            /* one exact pass over n tokens at the end of the reply, 5 times each, medians */
            const int nv = sb_model_hparams(e->model)->n_vocab;
            float *rows = sb_aligned_alloc((size_t)MAXN * nv * sizeof(float));
            const int base = np + ng - MAXN - 1;
            if (engine_prefill(e, seq, base, NULL, err)) { fprintf(stderr, "%s\n", err); return 1; }
            /* interleaved: every size once per round, so a load change
             * slows all alike; medians and minima over the rounds */
            enum { R = 9 };
            static double ts[MAXN + 1][R];
            for (int r = 0; r < R; r++)
                for (int nt = 1; nt <= MAXN; nt++) {
                    double t0 = sb_now_s();
                    if (sb_ctx_seq_verify(e->ctx, 0, seq + base, nt, rows, 1, err)) { fprintf(stderr, "%s\n", err); return 1; }
                    ts[nt][r] = sb_now_s() - t0;
                    sb_ctx_seq_truncate(e->ctx, 0, base);
                }
            for (int nt = 1; nt <= MAXN; nt++) qsort(ts[nt], R, sizeof(double), cmpd);
            for (int nt = 1; nt <= MAXN; nt++) {
                cost[nt] = ts[nt][R / 2] / ts[1][R / 2];
                printf("cost %2d median %.3f (%.1f ms) min %.3f (%.1f ms)\n", nt, cost[nt], ts[nt][R / 2] * 1e3,
                       ts[nt][0] / ts[1][0], ts[nt][0] * 1e3);
            }
            sb_aligned_free(rows);
        }
        sb_engine_free(e);
    }
    if (!want_costs) {
        const char *cs = getenv("SB_SIM_COSTS");  /* "c2 c3 ... c17" (cost[1] = 1) */
        cost[1] = 1;
        for (int i = 2; i <= MAXN; i++) {
            cost[i] = cs ? strtod(cs, (char **)&cs) : 1 + 0.1 * (i - 1);
        }
    }
    if (getenv("SB_SIM_ANALYZE")) {
        /* every reply position: longest match m, and how many of its copied
         * tokens (up to 16) the greedy reply continues with */
        for (int j = np; j < np + ng - 1; j++) {
            int at, m = sb_spec_find(seq, j + 1, SB_SPEC_MATCH_MAX, &at), a = 0;
            if (m > 0) while (a < 16 && at + a <= j && j + 1 + a < np + ng && seq[at + a] == seq[j + 1 + a]) a++;
            printf("A %d %d %d\n", j - np, m, a);
        }
    }
    const int verbose = getenv("SB_SIM_VERBOSE") != NULL;
    int dr, ac, st;
    double s0 = replay(seq, np, ng, 8, 0, cost, verbose && atoi(getenv("SB_SIM_VERBOSE")) == 0, &dr, &ac, &st);
    printf("%s %s prompt %d reply %d | old lookup 8: %.3fx %d/%d steps %d", mb, pb, np, ng, s0, ac, dr, st);
    double s1 = replay(seq, np, ng, 8, 1, cost, verbose && atoi(getenv("SB_SIM_VERBOSE")) == 1, &dr, &ac, &st);
    printf(" | new: %.3fx %d/%d steps %d\n", s1, ac, dr, st);
    {
        /* oracle: knowing the reply, the cheapest plan of plain steps and
         * drafts (from the longest match, any length up to 8) */
        const int N = np + ng;
        double *best = calloc((size_t)N + 2, sizeof *best);
        for (int j = N - 1; j >= np; j--) {
            best[j] = 1 + best[j + 1];
            int at, m = sb_spec_find(seq, j + 1, SB_SPEC_MATCH_MAX, &at);
            if (m < 1) continue;
            int a = 0;
            for (int k = 1; k <= 8 && at + k - 1 <= j && j + k < N; k++) {
                if (a == k - 1 && seq[at + k - 1] == seq[j + k]) a++;
                int nj = j + a + 1; if (nj > N) nj = N;
                double c = cost[k + 1] + best[nj];
                if (c < best[j]) best[j] = c;
            }
        }
        printf("  oracle %.3fx\n", ng / best[np]);
        free(best);
    }
    free(seq);
    return 0;
}
