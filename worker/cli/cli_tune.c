/* cli_tune.c - switchboard tune: measure this machine, time the kernel
 * variants on the given models' tensors, and write the profile the engine
 * applies at start (docs/KERNELS.md, "Tuning").
 *
 * A planner in the manner of FFTW and ATLAS: every candidate is timed here,
 * on this CPU, on the shapes the models really have; nothing is predicted.
 * Every candidate computes the default's numbers bit for bit, so a plan
 * changes only the time a token takes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_json.h"
#include "worker/cli/tune_impl.h"
#include "worker/engine/sb_model.h"

static void tune_usage(FILE *f) {
    fprintf(f,
            "usage: switchboard tune [-t T] [--out FILE] [--models DIR|FILE...] [--budget SECONDS]\n\n"
            "Measure this machine and write a tuning profile the engine reads at start:\n"
            "  - memory read bandwidth with 1 and T threads (bench --membw's probe);\n"
            "  - the int8 multiply-add peak of one core per instruction family\n"
            "    (avx2, avx512_vnni, avx_vnni, amx where the OS grants its state);\n"
            "    and the gemm's family again with all T threads at once;\n"
            "  - L2 and L3 sizes;\n"
            "then time, through whole decode steps and a 64-token prompt of the largest\n"
            "model given, the kernel variants of each quant type it uses (the decode\n"
            "dot's prefetch distance) and the engine's work split (interleaved row runs per\n"
            "task and rows per dot call, rows per task, tasks per thread, gemm row blocks;\n"
            "and, on the smallest model, the least weight bytes per decode task).\n"
            "Every variant gives the same numbers bit for bit; only speed changes.\n\n"
            "  -t T              threads (default: the CPUs online)\n"
            "  --models P...     GGUF files, or directories of them, to tune on (default: none:\n"
            "                    machine figures only, built-in kernel choices)\n"
            "  --budget S        seconds for the whole run, 1..600 (default 90)\n"
            "  --out FILE        where to write the profile (default: $SB_TUNE_PROFILE, else\n"
            "                    $XDG_CACHE_HOME or ~/.cache, /switchboard/tune-<cpu>.json)\n\n"
            "The engine applies the profile only on the CPU, microcode and ISA features it was\n"
            "made on; SB_TUNE_PROFILE=FILE points it elsewhere, SB_TUNE_PROFILE=off ignores it.\n"
            "Exit: 0 written, 2 bad usage, 1 failure.\n");
}

typedef struct {
    int threads, n_models, n_dots;     /* n_dots: entries of dots */
    double budget, t0;
    char models[TUNE_MAX_MODELS][TUNE_PATH];
    const char *out;
    tune_machine mc;
    tune_dot_result dots[SB_TYPE_COUNT];
    sb_kq_plan plan;
    char split_model[TUNE_PATH], task_model[TUNE_PATH];
    double split_tps[5][2];     /* streams × dot rows, rows, tasks, gemm, task KiB: built-in and chosen, tokens/s */
} tune_run;

static double left(const tune_run *r) { return r->budget - (sb_now_s() - r->t0); }

/* ---- timing through the engine ------------------------------------------------
 * Every candidate is timed as the engine runs it: whole decode steps (or a
 * prompt) of a real model, so each matrix streams from memory between two
 * uses, as in a decode, not from a cache a kernel benchmark would warm. */

/* Tokens/s of n-token evals (n = 1: 4 decode steps; more: one prompt) with
 * these kernels, one sample a round, over `seconds` and at least min_rounds
 * rounds. */
static void eval_tps(const sb_model *m, const sb_kq_kernels *k, int threads, int n, double seconds, int min_rounds,
                     tune_samples *out) {
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads;
    cp.n_ctx = 80;
    cp.n_batch = 64;
    cp.kernels = k;
    sb_ctx *c;
    char err[SB_ERR_LEN];
    if (sb_ctx_new(m, &cp, &c, err)) return;
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (int32_t)(1000 + 37 * i) % sb_model_hparams(m)->n_vocab;
    const int steps = n == 1 ? 4 : 1;
    const double t0 = sb_now_s();
    for (int round = 0; round < min_rounds || (sb_now_s() - t0 < seconds && out->n < TUNE_MAX_ROUNDS); round++) {
        sb_ctx_truncate(c, 0);
        const double ts = sb_now_s();
        int fail = 0;
        for (int s = 0; s < steps && !fail; s++) fail = sb_ctx_eval(c, toks + s * (n == 1), n, NULL, 0, err) != 0;
        if (fail) break;
        tune_sample_add(out, (double)(steps * n) / (sb_now_s() - ts));
    }
    sb_ctx_free(c);
}

/* The GGUFs that load as decoders, largest file first: the largest one's
 * matrices are what the split is tuned on (it matters most where they are
 * big), and each type's dot on the largest model that has that type. */
typedef struct {
    sb_model *m[TUNE_MAX_MODELS];
    const char *path[TUNE_MAX_MODELS];
    long long size[TUNE_MAX_MODELS];
    int n;
} decoders;

static void load_decoders(const tune_run *r, decoders *d) {
    char err[SB_ERR_LEN];
    d->n = 0;
    for (int i = 0; i < r->n_models; i++) {
        struct stat st;
        sb_model *m;
        if (stat(r->models[i], &st)) continue;
        if (sb_model_load(r->models[i], &m, err)) {
            fprintf(stderr, "tune: not a decoder, skipped: %s\n", err);
            continue;
        }
        int k = d->n++;
        for (; k > 0 && d->size[k - 1] < st.st_size; k--)
            d->m[k] = d->m[k - 1], d->path[k] = d->path[k - 1], d->size[k] = d->size[k - 1];
        d->m[k] = m, d->path[k] = r->models[i], d->size[k] = st.st_size;
    }
}

/* ---- the decode dots ------------------------------------------------------ */

/* The weight types of the models' matrices that have twins at `level`
 * (token_embd is read a row per token, never as a matrix), each with the
 * first (largest) model that has it. */
static int dot_types(const decoders *d, int level, int *types, int *where) {
    int n = 0, seen[SB_TYPE_COUNT] = { 0 };
    for (int i = 0; i < d->n; i++) {
        const sb_gguf *g = sb_model_gguf(d->m[i]);
        for (size_t k = 0; k < sb_gguf_n_tensors(g); k++) {
            const sb_gguf_tensor *t = sb_gguf_tensor_at(g, k);
            const sb_kq_variant *v;
            if (t->type >= SB_TYPE_COUNT || seen[t->type] || t->n_dims != 2 ||
                sb_str_eq(t->name, "token_embd.weight"))
                continue;
            seen[t->type] = 1;
            if (sb_kq_variants(level, (int)t->type, &v) > 1) where[n] = i, types[n++] = (int)t->type;
        }
    }
    return n;
}

/* Every variant of one type in decode, the rest of the plan as chosen so
 * far; rounds alternate the order (forward, backward) so that drifting load
 * hits every variant alike. The default stays unless a twin beats it
 * beyond the rounds' own scatter (tune_beats): a pick that flips with the
 * noise would make two runs disagree for nothing. */
static void tune_dot(tune_run *r, const sb_model *m, int type, double seconds, tune_dot_result *d) {
    const sb_kq_variant *v;
    d->type = type;
    d->n_variants = SB_MIN(TUNE_MAX_VARIANTS, sb_kq_variants(r->plan.level, type, &v));
    for (int i = 0; i < d->n_variants; i++) d->variant[i] = &v[i], d->tps[i].n = 0;
    sb_kq_plan plan = r->plan;
    sb_kq_kernels k;
    /* One untimed step first: a model's first decode faults its file's pages
     * in (0.65 t/s against 3.8 on the 8B shape), and charged to the first
     * variant it made the built-in lose on a round it never ran warm. */
    tune_samples warm = { .n = 0 };
    sb_kq_resolve(&plan, &k);
    eval_tps(m, &k, r->threads, 1, 0, 1, &warm);
    const double t0 = sb_now_s();
    for (int round = 0; round < 2 || (sb_now_s() - t0 < seconds && round < TUNE_MAX_ROUNDS); round++) {
        for (int i = 0; i < d->n_variants; i++) {
            const int x = round & 1 ? d->n_variants - 1 - i : i;
            plan.dot[type] = d->variant[x];
            sb_kq_resolve(&plan, &k);
            eval_tps(m, &k, r->threads, 1, 0, 1, &d->tps[x]);
        }
        d->rounds = round + 1;
    }
    d->pick = 0;
    for (int i = 1; i < d->n_variants; i++)
        if (tune_beats(&d->tps[i], &d->tps[0]) && tune_quantile(&d->tps[i], 0.5) > tune_quantile(&d->tps[d->pick], 0.5))
            d->pick = i;
    if (d->pick) r->plan.dot[type] = d->variant[d->pick];
}

static void tune_dots(tune_run *r, const decoders *d, double seconds) {
    int types[SB_TYPE_COUNT], where[SB_TYPE_COUNT];
    const int n = dot_types(d, r->plan.level, types, where);
    for (int i = 0; i < n; i++) {
        r->dots[r->n_dots].model = d->path[where[i]];
        tune_dot(r, d->m[where[i]], types[i], seconds / n, &r->dots[r->n_dots++]);
    }
}

/* ---- the split ---------------------------------------------------------------- */

/* Try each value of one split field (f1 NULL), or each pair of values of
 * two fields that only pay together (values[2i], values[2i + 1]), in
 * turn; keep one that beats the current choice beyond the noise
 * (tune_beats). res[0]: the built-in's median speed, res[1]: the choice's. */
static void tune_fields(tune_run *r, const sb_model *m, int *f0, int *f1, const int *values, int n_values, int n_tok,
                        double seconds, double res[2]) {
    sb_kq_kernels k;
    const int w = f1 ? 2 : 1, cur0 = *f0, cur1 = f1 ? *f1 : 0;
    sb_kq_resolve(&r->plan, &k);
    tune_samples best = { .n = 0 }, cand;
    eval_tps(m, &k, r->threads, n_tok, seconds / (n_values + 1), 3, &best);
    res[0] = tune_quantile(&best, 0.5);
    int pick = -1;
    for (int i = 0; i < n_values; i++) {
        if (values[w * i] == cur0 && (!f1 || values[w * i + 1] == cur1)) continue;
        *f0 = values[w * i];
        if (f1) *f1 = values[w * i + 1];
        sb_kq_resolve(&r->plan, &k);
        cand.n = 0;
        eval_tps(m, &k, r->threads, n_tok, seconds / (n_values + 1), 3, &cand);
        if (tune_beats(&cand, &best)) best = cand, pick = i;
    }
    *f0 = pick < 0 ? cur0 : values[w * pick];
    if (f1) *f1 = pick < 0 ? cur1 : values[w * pick + 1];
    res[1] = tune_quantile(&best, 0.5);
}

static void tune_field(tune_run *r, const sb_model *m, int *field, const int *values, int n_values, int n_tok,
                       double seconds, double res[2]) {
    tune_fields(r, m, field, NULL, values, n_values, n_tok, seconds, res);
}

static void tune_split(tune_run *r, const sb_model *m, double seconds) {
    /* streams and rows per dot go together: four rows a dot need four runs */
    static const int streams_dot_rows[] = { 1, 1, 2, 1, 2, 2, 4, 2, 4, 4 };
    static const int rows[] = { 4, 8, 16, 32, 64 }, tasks[] = { 8, 24, 64 }, gemm[] = { 64, 128, 256 };
    tune_fields(r, m, &r->plan.split.streams, &r->plan.split.dot_rows, streams_dot_rows, 5, 1, seconds * 0.35,
                r->split_tps[0]);
    tune_field(r, m, &r->plan.split.rows_per_task, rows, 5, 1, seconds * 0.3, r->split_tps[1]);
    tune_field(r, m, &r->plan.split.tasks_per_thread, tasks, 3, 1, seconds * 0.15, r->split_tps[2]);
    tune_field(r, m, &r->plan.split.gemm_rows, gemm, 3, 64, seconds * 0.2, r->split_tps[3]);
}

/* The floor on a task's weight bytes matters where matrices are small (a
 * large model's tasks are above any of these anyway): timed on the smallest
 * model given. */
static void tune_task_kib(tune_run *r, const sb_model *m, double seconds) {
    static const int kib[] = { 0, 64, 128, 256, 512 };
    tune_field(r, m, &r->plan.split.task_kib, kib, 5, 1, seconds, r->split_tps[4]);
}

/* ---- the profile ------------------------------------------------------------ */

static void write_measured(sb_jw *w, const tune_run *r, int level) {
    sb_jw_key(w, "measured");
    sb_jw_obj(w);
    char date[32];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    sb_jw_key(w, "date"), sb_jw_str(w, date);
    sb_jw_key(w, "seconds"), sb_jw_fixed(w, sb_now_s() - r->t0, 1);
    sb_jw_key(w, "threads"), sb_jw_int(w, r->threads);
    sb_jw_key(w, "bandwidth_gbs_1"), sb_jw_fixed(w, r->mc.bw1, 2);
    sb_jw_key(w, "bandwidth_gbs_t"), sb_jw_fixed(w, r->mc.bwt, 2);
    sb_jw_key(w, "l2_bytes"), sb_jw_int(w, (int64_t)r->mc.l2_bytes);
    sb_jw_key(w, "l3_bytes"), sb_jw_int(w, (int64_t)r->mc.l3_bytes);
    sb_jw_key(w, "gemm_family"), sb_jw_str(w, sb_kq_gemm_family(level));
    sb_jw_key(w, "peak_macs_per_core");
    sb_jw_obj(w);
    for (int f = 0; f < TUNE_FAMILIES; f++) {
        sb_jw_key(w, tune_family_name(f));
        if (r->mc.peak[f] > 0) sb_jw_num(w, r->mc.peak[f]);
        else sb_jw_null(w);
    }
    sb_jw_obj_end(w);
    sb_jw_key(w, "gemm_peak_macs_all_threads");     /* gemm_family, all `threads` at once */
    if (r->mc.peak_t > 0) sb_jw_num(w, r->mc.peak_t);
    else sb_jw_null(w);
    sb_jw_key(w, "models");
    sb_jw_arr(w);
    for (int i = 0; i < r->n_models; i++) sb_jw_str(w, r->models[i]);
    sb_jw_arr_end(w);
    sb_jw_key(w, "dot_tps");            /* median decode tokens/s per variant, per type */
    sb_jw_obj(w);
    const sb_kq_traits *names = sb_kq_table(SB_KQ_REF);
    for (int i = 0; i < r->n_dots; i++) {
        const tune_dot_result *d = &r->dots[i];
        sb_jw_key(w, names[d->type].name);
        sb_jw_obj(w);
        sb_jw_key(w, "model"), sb_jw_str(w, d->model);
        for (int v = 0; v < d->n_variants; v++) sb_jw_key(w, d->variant[v]->name), sb_jw_fixed(w, tune_quantile(&d->tps[v], 0.5), 2);
        sb_jw_obj_end(w);
    }
    sb_jw_obj_end(w);
    sb_jw_key(w, "split_model"), sb_jw_str(w, r->split_model[0] ? r->split_model : NULL);
    sb_jw_key(w, "task_model"), sb_jw_str(w, r->task_model[0] ? r->task_model : NULL);
    sb_jw_obj_end(w);
}

/* mkdir -p of path's directory. */
static int make_parent(const char *path) {
    char dir[TUNE_PATH];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = 0;
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(dir, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(dir, 0755) && errno != EEXIST ? -1 : 0;
}

static int write_profile(const tune_run *r, const sb_cpu_id *cpu, const char *path) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_kq_profile_write(&w, cpu, &r->plan);
    write_measured(&w, r, r->plan.level);
    sb_jw_obj_end(&w);
    sb_jw_raw(&w, "\n", 1);
    int rc = w.oom ? -1 : 0;
    char tmp[TUNE_PATH + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = rc ? NULL : (make_parent(path), fopen(tmp, "w"));
    if (!f || fwrite(w.p, 1, w.len, f) != w.len) rc = -1;
    if (f && fclose(f)) rc = -1;
    if (!rc && rename(tmp, path)) rc = -1;       /* a reader never sees half a profile */
    if (rc) fprintf(stderr, "tune: cannot write %s: %s\n", path, strerror(errno));
    sb_jw_free(&w);
    return rc;
}

static void print_report(const tune_run *r, const sb_cpu_id *cpu) {
    printf("cpu: %s family %d model %d stepping %d, microcode %s\nflags: %s\n", cpu->vendor, cpu->family, cpu->model,
           cpu->stepping, cpu->microcode[0] ? cpu->microcode : "?", cpu->flags);
    printf("L2 %zu KiB, L3 %zu KiB\n", r->mc.l2_bytes >> 10, r->mc.l3_bytes >> 10);
    printf("read bandwidth: %.2f GB/s (1 thread), %.2f GB/s (%d threads)\n", r->mc.bw1, r->mc.bwt, r->threads);
    static const char *const why[] = { "", "absent", "refused by the OS", "faulted" };
    for (int f = 0; f < TUNE_FAMILIES; f++) {
        if (r->mc.peak[f] > 0) printf("int8 peak %-12s %8.1f G multiply-adds/s per core\n", tune_family_name(f), r->mc.peak[f] * 1e-9);
        else printf("int8 peak %-12s %s\n", tune_family_name(f), why[(int)-r->mc.peak[f] % 4]);
    }
    if (r->mc.peak_t > 0)
        printf("int8 peak %-12s %8.1f G multiply-adds/s with %d threads at once (the gemm's family)\n",
               sb_kq_gemm_family(r->plan.level), r->mc.peak_t * 1e-9, r->threads);
    const sb_kq_traits *names = sb_kq_table(SB_KQ_REF);
    for (int i = 0; i < r->n_dots; i++) {
        const tune_dot_result *d = &r->dots[i];
        printf("%s dot on %s, decode t/s (median of %d, quartiles):", names[d->type].name, d->model, d->rounds);
        for (int v = 0; v < d->n_variants; v++)
            printf(" %s %.2f [%.2f-%.2f]%s", d->variant[v]->name, tune_quantile(&d->tps[v], 0.5),
                   tune_quantile(&d->tps[v], 0.25), tune_quantile(&d->tps[v], 0.75), v == d->pick ? "*" : "");
        printf("\n");
    }
    if (r->split_model[0])
        printf("split on %s: streams %d, dot rows %d (%.1f -> %.1f t/s), rows/task %d (%.1f -> %.1f), "
               "tasks/thread %d (%.1f -> %.1f), gemm rows %d (pp64 %.1f -> %.1f t/s)\n",
               r->split_model, r->plan.split.streams, r->plan.split.dot_rows, r->split_tps[0][0], r->split_tps[0][1],
               r->plan.split.rows_per_task, r->split_tps[1][0], r->split_tps[1][1], r->plan.split.tasks_per_thread,
               r->split_tps[2][0], r->split_tps[2][1], r->plan.split.gemm_rows, r->split_tps[3][0], r->split_tps[3][1]);
    if (r->task_model[0])
        printf("task floor on %s: %d KiB (%.1f -> %.1f t/s)\n", r->task_model, r->plan.split.task_kib, r->split_tps[4][0],
               r->split_tps[4][1]);
}

int sb_cmd_tune(int argc, char **argv) {
    static tune_run r;
    memset(&r, 0, sizeof r);
    r.threads = (int)SB_MAX(1, sysconf(_SC_NPROCESSORS_ONLN));
    r.budget = 90;
    char **model_args = NULL;
    int n_model_args = 0;
    int64_t x;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tune_usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-t")) { if (sb_opt_int("tune", a, v, 1, 256, &x)) return SB_EXIT_CONFIG; r.threads = (int)x; i++; }
        else if (!strcmp(a, "--budget")) { if (sb_opt_int("tune", a, v, 1, 600, &x)) return SB_EXIT_CONFIG; r.budget = (double)x; i++; }
        else if (!strcmp(a, "--out") && v) { r.out = v; i++; }
        else if (!strcmp(a, "--models") && v) {
            model_args = argv + i + 1;
            while (i + 1 < argc && argv[i + 1][0] != '-') i++, n_model_args++;
        } else { fprintf(stderr, "tune: unknown or incomplete option '%s'\n", a); tune_usage(stderr); return SB_EXIT_CONFIG; }
    }
    r.n_models = tune_find_models(model_args, n_model_args, r.models, TUNE_MAX_MODELS);
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    char path[TUNE_PATH];
    if (r.out) snprintf(path, sizeof path, "%s", r.out);
    else if (sb_kq_profile_path(&cpu, path, sizeof path)) {
        fprintf(stderr, "tune: no profile path (SB_TUNE_PROFILE=off and no --out, or no HOME)\n");
        return SB_EXIT_CONFIG;
    }
    r.t0 = sb_now_s();
    const int level = sb_kq_best_level();
    sb_kq_plan_default(level, &r.plan);
    fprintf(stderr, "tune: level %s, %d threads, %d model(s), budget %.0f s\n", sb_kq_level_name(level), r.threads,
            r.n_models, r.budget);
    tune_measure_machine(&r.mc, r.threads, sb_kq_gemm_family(level), r.budget * (r.n_models ? 0.15 : 0.9));
    static decoders dec;
    load_decoders(&r, &dec);
    if (dec.n) {
        snprintf(r.split_model, sizeof r.split_model, "%s", dec.path[0]);
        /* shares of what is left, so that the minimum rounds each step
         * takes whatever the budget still fit in it */
        tune_dots(&r, &dec, left(&r) * 0.45);
        tune_split(&r, dec.m[0], left(&r) * 0.65);
        snprintf(r.task_model, sizeof r.task_model, "%s", dec.path[dec.n - 1]);
        tune_task_kib(&r, dec.m[dec.n - 1], left(&r) * 0.6);
    }
    for (int i = 0; i < dec.n; i++) sb_model_free(dec.m[i]);
    print_report(&r, &cpu);
    if (write_profile(&r, &cpu, path)) return SB_EXIT_FAIL;
    printf("profile: %s (%.1f s)\n", path, sb_now_s() - r.t0);
    return SB_EXIT_OK;
}
