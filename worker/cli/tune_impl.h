/* tune_impl.h - private to cli_tune.c and tune_measure.c: what
 * `switchboard tune` measures and the results it plans from. */
#ifndef SB_TUNE_IMPL_H
#define SB_TUNE_IMPL_H

#include "common/sb_common.h"
#include "worker/kernels/sb_kq.h"

#define TUNE_FAMILIES 4             /* avx2, avx512_vnni, avx_vnni, amx */
#define TUNE_MAX_VARIANTS 8
#define TUNE_MARGIN 0.03            /* a non-default choice's median must be this much faster */
#define TUNE_MAX_ROUNDS 32
#define TUNE_PATH 4096
#define TUNE_MAX_MODELS 16

typedef struct {
    double bw1, bwt;                /* GB/s, 1 and T threads */
    double peak[TUNE_FAMILIES];     /* int8 multiply-adds/s of one core; < 0: absent (-1), refused (-2), faulted (-3) */
    /* The gemm's family with every thread at it at once, summed: what a
     * prompt can use. A VM's vCPUs may be one host core's two hyperthreads,
     * or share a clock that drops with wide vectors on both, so the
     * per-core peak times the threads can be a rate no run reaches. */
    double peak_t;                  /* <= 0: not measured */
    size_t l2_bytes, l3_bytes;      /* 0: unknown */
} tune_machine;

/* Tokens/s of each timed round of one candidate. */
typedef struct {
    double v[TUNE_MAX_ROUNDS];
    int n;
} tune_samples;

typedef struct {
    int type, n_variants, rounds, pick;
    const char *model;                      /* the model it was timed on */
    const sb_kq_variant *variant[TUNE_MAX_VARIANTS];
    tune_samples tps[TUNE_MAX_VARIANTS];    /* decode tokens/s with that variant for the type, per round */
} tune_dot_result;

const char *tune_family_name(int f);
void   tune_sample_add(tune_samples *s, double tps);
/* Nearest-rank q-quantile of the rounds; 0 for none. */
double tune_quantile(const tune_samples *s, double q);
/* Whether candidate a is faster than b beyond the noise their own rounds
 * show: a's first quartile above b's third, and a's median TUNE_MARGIN above
 * b's. Two rounds each: a's slower round must beat b's faster one. */
int    tune_beats(const tune_samples *a, const tune_samples *b);
/* Caches, peaks and bandwidth, in about `seconds`; gemm_family names the
 * family whose all-threads peak is measured too (sb_kq_gemm_family). */
void tune_measure_machine(tune_machine *mc, int threads, const char *gemm_family, double seconds);
/* GGUF paths from files and directories (*.gguf directly inside), sorted. */
int  tune_find_models(char **args, int n_args, char paths[][TUNE_PATH], int cap);

#endif
