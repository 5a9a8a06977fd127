/* kq_tune.c - the registered kernel variants, plans, and the engine's
 * kernels (a level's table with this machine's profile applied).
 *
 * A variant is a function pointer plus the parameter it was built with, in
 * a const list; a plan names one per type, and resolving a plan copies the
 * level's rows and swaps those pointers in. Nothing branches on a variant
 * at run time: the choice is made once, when the rows are built.
 *
 * Only variants that compute their level's default bit for bit are listed.
 * The prefetch twins qualify by construction (a prefetch moves no data).
 * The AVX2 dots are NOT candidates at the AVX-512 level although both run
 * there: they add their floats in another order (8-lane accumulators
 * against the reference order of the AVX-512 dots), so a plan picking them
 * would change the logits.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/kernels/kq_internal.h"

/* The default kernel and its prefetch twins (kq_x86.h), default first. */
#define PF_TWINS(lvl, lvl_name, T, fn)                                    \
    { lvl_name, lvl, T, KQ_PREFETCH_AHEAD, fn, NULL, NULL },              \
    { lvl_name "-pf0", lvl, T, 0, fn##_pf0, NULL, NULL },                 \
    { lvl_name "-pf4k", lvl, T, 4096, fn##_pf4k, NULL, NULL },            \
    { lvl_name "-pf16k", lvl, T, 16384, fn##_pf16k, NULL, NULL },         \
    { lvl_name "-pf32k", lvl, T, 32768, fn##_pf32k, NULL, NULL }
/* The same with each twin's vec_dot2 and vec_dot4 beside it (built from the
 * same distance; vec_dot4 prefetches half of it per row). */
#define PF_TWINS_R(lvl, lvl_name, T, fn, fn2, fn4)                                 \
    { lvl_name, lvl, T, KQ_PREFETCH_AHEAD, fn, fn2, fn4 },                         \
    { lvl_name "-pf0", lvl, T, 0, fn##_pf0, fn2##_pf0, fn4##_pf0 },                \
    { lvl_name "-pf4k", lvl, T, 4096, fn##_pf4k, fn2##_pf4k, fn4##_pf4k },         \
    { lvl_name "-pf16k", lvl, T, 16384, fn##_pf16k, fn2##_pf16k, fn4##_pf16k },    \
    { lvl_name "-pf32k", lvl, T, 32768, fn##_pf32k, fn2##_pf32k, fn4##_pf32k }
/* An AVX-512 k-quant's group: sb_kq_dot{,2,4}_<t>_q8_K_<sfx> (sfx avx512,
 * or a CPU-feature twin's avx512vbmi). */
#define PF_TWINS_K(T, t, sfx) \
    PF_TWINS_R(SB_KQ_AVX512, "avx512", T, sb_kq_dot_##t##_q8_K_##sfx, sb_kq_dot2_##t##_q8_K_##sfx, sb_kq_dot4_##t##_q8_K_##sfx)

#define TWINS_PER_TYPE 5
static const sb_kq_variant variants[] = {
    PF_TWINS(SB_KQ_AVX2, "avx2", SB_TYPE_Q2_K, sb_kq_dot_q2_K_q8_K_avx2),
    PF_TWINS(SB_KQ_AVX2, "avx2", SB_TYPE_Q3_K, sb_kq_dot_q3_K_q8_K_avx2),
    PF_TWINS(SB_KQ_AVX2, "avx2", SB_TYPE_Q4_K, sb_kq_dot_q4_K_q8_K_avx2),
    PF_TWINS(SB_KQ_AVX2, "avx2", SB_TYPE_Q5_K, sb_kq_dot_q5_K_q8_K_avx2),
    PF_TWINS(SB_KQ_AVX2, "avx2", SB_TYPE_Q6_K, sb_kq_dot_q6_K_q8_K_avx2),
    PF_TWINS(SB_KQ_AVX512, "avx512", SB_TYPE_Q4_0, sb_kq_dot_q4_0_q8_0_avx512),
    PF_TWINS(SB_KQ_AVX512, "avx512", SB_TYPE_Q5_0, sb_kq_dot_q5_0_q8_0_avx512),
    PF_TWINS(SB_KQ_AVX512, "avx512", SB_TYPE_Q8_0, sb_kq_dot_q8_0_q8_0_avx512),
    PF_TWINS_K(SB_TYPE_Q2_K, q2_K, avx512),
    /* the same names for the VBMI Q2_K dots (kq_table.c runs them where the
     * CPU has VBMI): a profile names a prefetch distance, not the CPU path */
    PF_TWINS_K(SB_TYPE_Q2_K, q2_K, avx512vbmi),
    PF_TWINS_K(SB_TYPE_Q3_K, q3_K, avx512),
    PF_TWINS_K(SB_TYPE_Q4_K, q4_K, avx512),
    PF_TWINS_K(SB_TYPE_Q5_K, q5_K, avx512),
    PF_TWINS_K(SB_TYPE_Q6_K, q6_K, avx512),
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

/* The group of the kernel the level's table runs for the type (a type can
 * have one group per CPU path, e.g. with and without VBMI). */
int sb_kq_variants(int level, int type, const sb_kq_variant **out) {
    const sb_kq_traits *row =
        level >= 0 && level < SB_KQ_LEVELS && type >= 0 && type < SB_TYPE_COUNT ? &sb_kq_table(level)[type] : NULL;
    for (size_t i = 0; row && i < N_VARIANTS; i += TWINS_PER_TYPE)
        if (variants[i].level == level && variants[i].type == type && variants[i].vec_dot == row->vec_dot) {
            *out = &variants[i];
            return TWINS_PER_TYPE;
        }
    *out = NULL;
    return 0;
}

const sb_kq_variant *sb_kq_variant_find(int level, int type, const char *name) {
    const sb_kq_variant *v;
    const int n = sb_kq_variants(level, type, &v);
    for (int i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0) return &v[i];
    return NULL;
}

/* The default kernel of v's type and level (the first of its group). */
static sb_vec_dot_fn variants_default(const sb_kq_variant *v) {
    return variants[(size_t)(v - variants) / TWINS_PER_TYPE * TWINS_PER_TYPE].vec_dot;
}

/* The built-in split: 16 rows (one cache line of output) per task, at most
 * 24 tasks per thread, at least 256 KiB of weights per task, 256-row gemm
 * blocks, and a task's rows read as four interleaved runs through
 * vec_dot4, their rows block by block in one call: a decode dot waits on
 * DRAM with too few lines in flight for one stream, and more streams read
 * side by side keep more of them in flight. On the AVX-512 Xeon
 * (docs/PERFORMANCE.md, "Rows side by side in one dot") this decoded the
 * 8B, Phi-3 and TinyLlama shapes 8, 9 and 3 % faster than two runs through
 * vec_dot2, which were 18, 8 and 6 % faster than two runs row after row;
 * the 256 KiB floor decoded TinyLlama 6 % faster and left Phi-3 and the 8B,
 * whose tasks are larger anyway, as they were ("Tasks big enough to
 * stream"). A gemm call reads all its tokens' activations once, so the AMX
 * gemm, fast enough for that read to count, ran the prompts of the three
 * shapes 25-31 % faster in blocks of 256 rows than of 64; the AVX-512 and
 * AVX2 gemms ran them as fast either way ("The prompt on AMX tiles"). */
static const sb_kq_split split_builtin = {
    .rows_per_task = 16, .tasks_per_thread = 24, .gemm_rows = 256, .streams = 4, .dot_rows = 4, .task_kib = 256
};

void sb_kq_plan_default(int level, sb_kq_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->level = level;
    plan->split = split_builtin;
}

void sb_kq_resolve(const sb_kq_plan *plan, sb_kq_kernels *out) {
    const sb_kq_traits *base = sb_kq_table(plan->level);
    memcpy(out->row, base, sizeof out->row);
    out->level = plan->level;
    out->split = plan->split;
    out->tuned = 0;
    for (int t = 0; t < SB_TYPE_COUNT; t++) {
        const sb_kq_variant *v = plan->dot[t];
        /* a variant of another level, or of a type whose row that level
         * does not run through it, is never applied */
        if (!v || v->level != plan->level || v->type != t || base[t].vec_dot != variants_default(v)) continue;
        out->row[t].vec_dot = v->vec_dot;
        /* its multi-row twins have its prefetch; they stay NULL where the level has none */
        if (base[t].vec_dot2) out->row[t].vec_dot2 = v->vec_dot2;
        if (base[t].vec_dot4) out->row[t].vec_dot4 = v->vec_dot4;
        out->tuned |= v->vec_dot != base[t].vec_dot;
    }
    if (memcmp(&plan->split, &split_builtin, sizeof split_builtin) != 0) out->tuned = 1;
}

/* ---- the engine's kernels ---------------------------------------------------
 * Resolved once per process, like the tables: the profile is read on the
 * first call (sb_ctx_new, before its pool starts), and after pthread_once
 * nothing writes the result. */
static sb_kq_kernels engine[SB_KQ_LEVELS];
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

/* The plan of the profile at the default path, or -1 (no profile: silent;
 * one that does not apply: one log line naming the file and why). */
static int profile_plan(sb_kq_plan *plan) {
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    char path[4096], err[256], why[256];
    if (sb_kq_profile_path(&cpu, path, sizeof path) != 0) return -1;
    char *text = NULL;
    size_t len = 0;
    if (sb_read_file(path, 1 << 20, &text, &len, err) != 0) {
        /* the default path is absent until `switchboard tune` runs: only a
         * profile asked for by name is worth a line when it is missing */
        const char *env = getenv("SB_TUNE_PROFILE");
        if (env && *env) sb_warn("tune profile %s ignored: %s", path, err);
        return -1;
    }
    const int rc = sb_kq_profile_parse(text, len, &cpu, plan, why, sizeof why);
    sb_free(text);
    if (rc != 0) {
        sb_warn("tune profile %s ignored: %s (built-in kernel choices used)", path, why);
        return -1;
    }
    sb_info("tune profile %s applied (level %s)", path, sb_kq_level_name(plan->level));
    return 0;
}

static void resolve_engine(void) {
    sb_kq_plan tuned;
    const int have = profile_plan(&tuned) == 0;
    for (int l = 0; l < SB_KQ_LEVELS; l++) {
        sb_kq_plan plan;
        sb_kq_plan_default(l, &plan);
        /* a plan was measured at one level; SB_KERNELS lowering the level
         * gets that level's built-in choices */
        sb_kq_resolve(have && tuned.level == l ? &tuned : &plan, &engine[l]);
    }
}

const sb_kq_kernels *sb_kq_engine_kernels(int level) {
    if (level < 0) level = 0;
    if (level >= SB_KQ_LEVELS) level = SB_KQ_LEVELS - 1;
    pthread_once(&engine_once, resolve_engine);
    return &engine[level];
}
