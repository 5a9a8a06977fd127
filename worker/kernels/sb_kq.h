/* sb_kq.h - tensor types: the one traits table for every GGUF tensor type.
 *
 * Type ids are GGML's on-disk ids (they are written into GGUF files), so the
 * numbering never shifts; retired ids keep a placeholder row with
 * blck_size 0. Adding a type means adding a row, not editing switches.
 *
 * A weight row of type T is dotted with an activation row that was first
 * converted to traits[T].vec_dot_type (Q8_K for k-quants, Q8_0 for the legacy
 * quants, F16 for F16, …), exactly as llama.cpp does, so that our logits land
 * where llama.cpp's do.
 *
 * Kernel tiers (see docs/DESIGN.md): every kernel has a scalar _ref twin in
 * kq_ref.c (built without SIMD flags); kq_avx2.c and kq_avx512.c hold the SIMD
 * versions. Three const tables exist, one per level; sb_kq_table() returns the
 * best one this CPU (and the SB_KERNELS override) allows. No mutable globals.
 */
#ifndef SB_KQ_H
#define SB_KQ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/sb_json.h"

enum sb_type {
    SB_TYPE_F32 = 0, SB_TYPE_F16 = 1, SB_TYPE_Q4_0 = 2, SB_TYPE_Q4_1 = 3,
    /* 4, 5: retired Q4_2, Q4_3 */
    SB_TYPE_Q5_0 = 6, SB_TYPE_Q5_1 = 7, SB_TYPE_Q8_0 = 8, SB_TYPE_Q8_1 = 9,
    SB_TYPE_Q2_K = 10, SB_TYPE_Q3_K = 11, SB_TYPE_Q4_K = 12, SB_TYPE_Q5_K = 13,
    SB_TYPE_Q6_K = 14, SB_TYPE_Q8_K = 15,
    /* 16..29: IQ* and I8..F64 - rows present, not supported */
    SB_TYPE_BF16 = 30,
    SB_TYPE_COUNT = 40
};

#define SB_QK_K 256             /* super-block size of the k-quants */
#define SB_QK4_0 32
#define SB_QK8_0 32

typedef uint16_t sb_fp16;
typedef uint16_t sb_bf16;

/* ---- block layouts: byte-for-byte those of ggml-common.h ------------------ */
typedef struct { sb_fp16 d; uint8_t qs[16]; } sb_block_q4_0;
typedef struct { sb_fp16 d, m; uint8_t qs[16]; } sb_block_q4_1;
typedef struct { sb_fp16 d; uint8_t qh[4]; uint8_t qs[16]; } sb_block_q5_0;
typedef struct { sb_fp16 d, m; uint8_t qh[4]; uint8_t qs[16]; } sb_block_q5_1;
typedef struct { sb_fp16 d; int8_t qs[32]; } sb_block_q8_0;
typedef struct { sb_fp16 d, s; int8_t qs[32]; } sb_block_q8_1;
typedef struct { uint8_t scales[16]; uint8_t qs[64]; sb_fp16 d, dmin; } sb_block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; sb_fp16 d; } sb_block_q3_K;
typedef struct { sb_fp16 d, dmin; uint8_t scales[12]; uint8_t qs[128]; } sb_block_q4_K;
typedef struct { sb_fp16 d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } sb_block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; sb_fp16 d; } sb_block_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } sb_block_q8_K;

_Static_assert(sizeof(sb_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(sb_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(sb_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(sb_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(sb_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(sb_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(sb_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(sb_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(sb_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(sb_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(sb_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(sb_block_q8_K) == 292, "q8_K block");

/* ---- kernel signatures ---------------------------------------------------- */
/* n is the number of elements (a multiple of blck_size). */
typedef void (*sb_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*sb_from_float_fn)(const float *src, void *dst, int64_t n);
/* *s = dot(x, y) over n elements; x is a row of the weight type, y a row of
 * its vec_dot_type. */
typedef void (*sb_vec_dot_fn)(int n, float *s, const void *x, const void *y);
/* R weight rows against one activation row (R = 2 for vec_dot2, 4 for
 * vec_dot4): s[k·s_step] = dot(x + k·x_step bytes, y) for k < R, each the
 * same level's vec_dot BIT FOR BIT. The rows are read block by block side
 * by side, which keeps more DRAM lines in flight than reading them one
 * after the other (matmul.c, sb_kq_split.dot_rows). */
typedef void (*sb_vec_dotr_fn)(int n, float *s, size_t s_step, const void *x, size_t x_step, const void *y);
/* A tile of dots: s[c·ldc + r] = dot(x row r, y row c) for r < nr, c < nc,
 * where row r of x starts at x + r·bx bytes and row c of y at y + c·by.
 * nr weight rows against nc activation rows: each weight block is decoded
 * once for all columns of a tile and each activation block loaded once for
 * all its rows, which is what makes prompt processing compute-bound instead
 * of decode-bound. Every block's integer sum and its scale product are those
 * of vec_dot; only the order of the float additions differs. */
typedef void (*sb_gemm_fn)(int n, int nr, int nc, const void *x, size_t bx, const void *y, size_t by,
                           float *s, size_t ldc);
/* s[0..7] = dot(row r of a group of 8 rows in the x8 layout, y): see
 * sb_kq_x8_pack. Same integer sums and per-block float steps as the
 * reference vec_dot, so the results are the reference's bit for bit. */
typedef void (*sb_gemv8_fn)(int n, float *s, const void *x8, const void *y);
/* One weight row against nt ≤ SB_KQ_DOTN_MAX activation rows (a decode step
 * of nt sequences): s[t·s_stride] = dot(x, y + t·y_stride bytes) for t < nt.
 * Each weight block is read and unpacked once for all nt rows, and each
 * result is the same level's vec_dot(n, &s, x, y_t) BIT FOR BIT (per row the
 * same integer sums, float steps and reduction as the 1×1 kernel), so a
 * sequence's numbers do not depend on what else is in its batch. */
#define SB_KQ_DOTN_MAX 16
/* The most interleaved runs of rows a one-token task reads (sb_kq_split). */
#define SB_KQ_MAX_STREAMS 8
typedef void (*sb_vec_dotn_fn)(int n, int nt, float *s, size_t s_stride, const void *x, const void *y,
                               size_t y_stride);

/* Q8_K activations of up to SB_KQ_IL_TOK tokens interleaved for
 * vec_dotn_il (sb_kq_q8_K_interleave), so that one 64-byte register holds
 * a 4-byte group of quants of T tokens: a kernel broadcasts the weight's
 * quants against it and one VNNI instruction does 4 multiply-adds for each
 * token. T = sb_kq_il_tokens(nt) ∈ {4, 8, 16}, G = 16/T groups per
 * register. Per super-block (SB_KQ_IL_BLOCK_BYTES apart): 64/G registers of
 * quants, register v lane t·G + h = bytes 4g..4g+3 of token t, g = vG + h;
 * at byte 4096, 8/G registers of bsum pairs, lane t·G + h = (bsums 2k,
 * 2k+1), k = uG + h; at byte 4608, d of token t in lanes t·G … t·G + G−1.
 * Lanes of tokens ≥ nt are zero. */
#define SB_KQ_IL_TOK 16
#define SB_KQ_IL_BLOCK_BYTES (64 * 64 + 8 * 64 + 64)
static inline int sb_kq_il_tokens(int nt) { return nt <= 4 ? 4 : nt <= 8 ? 8 : 16; }
/* Below this many tokens vec_dotn_il costs more than vec_dot per token
 * (kq_bench dotn: 2 tokens in lanes for 4 waste half of every register). */
#define SB_KQ_IL_MIN_TOK 3
/* nb super-blocks of nt ≤ SB_KQ_IL_TOK Q8_K rows (y_stride bytes apart,
 * starting at y) -> dst, 64-byte aligned, nb · SB_KQ_IL_BLOCK_BYTES bytes. */
void sb_kq_q8_K_interleave(int nb, int nt, const void *y, size_t y_stride, void *dst);
/* nrows weight rows (x_stride bytes apart) against the nt ≤ SB_KQ_IL_TOK
 * tokens of an interleaved activation group yil (n elements): s[t·s_stride
 * + r] = vec_dot(n, row r, token t), bit for bit the level's vec_dot, like
 * vec_dotn; rows go in groups so that each activation load serves several. */
typedef void (*sb_vec_dotn_il_fn)(int n, int nrows, int nt, float *s, size_t s_stride, const void *x,
                                  size_t x_stride, const void *yil);

/* Q8_0 activations of up to SB_KQ_IL_TOK tokens interleaved for the
 * vec_dotn_il of Q4_0/Q5_0/Q8_0 weights (sb_kq_q8_0_prepare), as Q8_K's
 * above: T = sb_kq_il_tokens(nt) tokens, G = 16/T groups per register. Per
 * 32-element block (SB_KQ_P8_BLOCK_BYTES apart): 8/G registers of quants,
 * register v lane t·G + h = bytes 4g..4g+3 of token t, g = vG + h; at byte
 * 512 the block's Σy (int32) and at byte 576 its d (float) of token t, each
 * in lanes t·G … t·G + G−1. Lanes of tokens ≥ nt are zero. */
#define SB_KQ_P8_BLOCK_BYTES (8 * 64 + 64 + 64)
/* Bytes of one group of up to SB_KQ_IL_TOK tokens of n elements. */
size_t sb_kq_q8_0_prep_bytes(int n);
/* nt ≤ SB_KQ_IL_TOK Q8_0 rows of n elements (y_stride bytes apart) -> dst,
 * 64-byte aligned, sb_kq_q8_0_prep_bytes(n) bytes. */
void sb_kq_q8_0_prepare(int n, int nt, const void *y, size_t y_stride, void *dst);
/* Below this many tokens the interleaved Q8_0 path does not pay (one token
 * takes vec_dot, as a lone decode does). */
#define SB_KQ_P8_MIN_TOK 2

typedef struct {
    const char      *name;          /* "Q4_K", as llama.cpp prints it */
    int              blck_size;     /* elements per block; 0 = unsupported id */
    size_t           type_size;     /* bytes per block */
    int              is_quantized;
    sb_to_float_fn   to_float;      /* dequantize */
    sb_from_float_fn from_float;    /* quantize (activations: fast path) */
    sb_from_float_fn from_float_ref;/* reference quantizer, deterministic */
    sb_vec_dot_fn    vec_dot;       /* NULL if this type is never a weight */
    int              vec_dot_type;  /* what activations are converted to */
    sb_gemm_fn       gemm;          /* tiled vec_dot; NULL: call vec_dot per pair */
    sb_gemv8_fn      gemv8;         /* 8 rows in the x8 layout; NULL: this level keeps the file layout */
    sb_vec_dotn_fn   vec_dotn;      /* this level's vec_dot for nt rows; NULL: call sb_kq_vec_dotn */
    sb_vec_dotn_il_fn vec_dotn_il;  /* the same on interleaved Q8_K (or Q8_0) activations; NULL: vec_dotn */
    sb_vec_dotr_fn   vec_dot2;      /* this level's vec_dot for two rows at once; NULL: none */
    sb_vec_dotr_fn   vec_dot4;      /* the same for four rows; NULL: none */
} sb_kq_traits;

enum sb_kq_level { SB_KQ_REF = 0, SB_KQ_AVX2 = 1, SB_KQ_AVX512 = 2, SB_KQ_LEVELS };

/* The traits table of one level (SB_TYPE_COUNT rows): the reference rows
 * with the kernels that level (or a level below it) overrides. */
const sb_kq_traits *sb_kq_table(int level);
/* Best level for this CPU and OS, lowered by the environment variable
 * SB_KERNELS=ref|avx2|avx512. */
int         sb_kq_best_level(void);
const char *sb_kq_level_name(int level);

/* ---- tuning: kernel variants and a per-machine plan (kq_tune.c) ------------
 * A level's table is the built-in choice; `switchboard tune` times the
 * registered variants on this machine and writes a plan into a profile
 * (kq_profile.c) that the engine applies once, before any thread runs.
 * Every variant computes its level's default bit for bit (test_dotn checks
 * each with memcmp), so a plan changes speed, never numbers. */

/* How matmul.c splits a run into pool tasks: every output element is the
 * same dot whatever the split, so these only move work between threads. */
typedef struct {
    int rows_per_task;      /* one-token path: output rows per task to start from */
    int tasks_per_thread;   /* above this many tasks per thread, rows per task double */
    int gemm_rows;          /* tiled path: weight rows per task (a multiple of 16) */
    int streams;            /* one-token path: a task's rows are read as this many interleaved runs */
    int dot_rows;           /* one-token path: 1, 2 or 4 runs' rows per call (vec_dot, vec_dot2, vec_dot4) where the type has the kernel */
    int task_kib;           /* one-token path: rows per task double while a task holds fewer KiB of weights (0: no floor) */
} sb_kq_split;

/* One registered candidate for a type's decode dot at a level. */
typedef struct {
    const char   *name;     /* "avx512-pf16k": unique among the type's variants */
    int           level;    /* the level whose table it may replace vec_dot in */
    int           type;     /* weight type */
    int           prefetch; /* bytes ahead it prefetches (0: none) */
    sb_vec_dot_fn vec_dot;
    sb_vec_dotr_fn vec_dot2;/* its two- and four-row twins, where the level has them (vec_dot2 prefetches */
                            /* as far ahead per row, vec_dot4 half as far: kq_kquants_avx512.c) */
    sb_vec_dotr_fn vec_dot4;
} sb_kq_variant;

/* The variants of `type` at `level` (the default first); their count. */
int sb_kq_variants(int level, int type, const sb_kq_variant **out);
/* The variant of that name, or NULL. */
const sb_kq_variant *sb_kq_variant_find(int level, int type, const char *name);

/* A plan: per type the decode dot (NULL: the level's default) and the split. */
typedef struct {
    int                  level;
    const sb_kq_variant *dot[SB_TYPE_COUNT];
    sb_kq_split          split;
} sb_kq_plan;

/* What the engine runs with: a level's rows with a plan applied. Built once
 * and read-only after that, like the tables. */
typedef struct sb_kq_kernels {
    sb_kq_traits row[SB_TYPE_COUNT];
    sb_kq_split  split;
    int          level;
    int          tuned;     /* a profile's plan was applied */
} sb_kq_kernels;

/* The built-in plan of a level (every default, the built-in split). */
void sb_kq_plan_default(int level, sb_kq_plan *plan);
/* out = level's table with the plan applied: a pure function. */
void sb_kq_resolve(const sb_kq_plan *plan, sb_kq_kernels *out);
/* The engine's kernels at `level`: the profile's plan (SB_TUNE_PROFILE,
 * else the default path of kq_profile) when it was made on this CPU at
 * this level, else the built-in plan. The profile is read once per process;
 * a profile that does not apply is ignored with one log line. */
const sb_kq_kernels *sb_kq_engine_kernels(int level);

/* ---- this CPU, and the tuning profile (kq_profile.c) --------------------- */
typedef struct {
    char vendor[16];        /* "GenuineIntel" */
    int  family, model, stepping;
    char microcode[24];     /* /proc/cpuinfo "microcode", "" if absent */
    char flags[160];        /* the ISA features the kernels care about, space-separated */
} sb_cpu_id;

void sb_cpu_identify(sb_cpu_id *id);
/* The default profile path: $SB_TUNE_PROFILE if set (and not "off"), else
 * $XDG_CACHE_HOME (or ~/.cache)/switchboard/tune-<vendor>-<family>-<model>-<stepping>.json.
 * Returns 0, or -1 when profiles are off (SB_TUNE_PROFILE=off) or no home. */
int sb_kq_profile_path(const sb_cpu_id *cpu, char *buf, size_t cap);
/* Parse a profile's text: 0 and *plan when it was made on `cpu` (vendor,
 * family, model, stepping, microcode, flags) at a level this build has,
 * and names only known variants; else -1 with the reason in why. */
int sb_kq_profile_parse(const char *text, size_t len, const sb_cpu_id *cpu, sb_kq_plan *plan, char *why,
                        size_t why_cap);
/* Into an open JSON object: "format", "cpu", "level" and "plan" (what
 * sb_kq_profile_parse reads; the writer may add its own keys beside them). */
void sb_kq_profile_write(sb_jw *w, const sb_cpu_id *cpu, const sb_kq_plan *plan);
void sb_kq_profile_write_cpu(sb_jw *w, const sb_cpu_id *cpu);   /* just "cpu" */

/* ---- the machine's int8 peak (kq_peak.c) ---------------------------------
 * Multiply-adds per second of one core through one instruction family:
 * "avx2" (vpmaddubsw + vpmaddwd, the AVX2 kernels'), "avx512_vnni"
 * (vpdpbusd zmm, the AVX-512 gemm's), "avx_vnni" (VEX vpdpbusd ymm) or
 * "amx" (tdpbusd). -1: this CPU lacks it; -2: the OS refused AMX's tile
 * state. Runs about `seconds`. AMX can fault where a hypervisor hides the
 * state the CPUID bits promise: run it in a child process. */
double      sb_kq_peak_macs(const char *family, double seconds);
/* Ask Linux for AMX's tile state (arch_prctl): 0 granted, -1 refused. */
int         sb_kq_amx_request(void);
/* 1 when the CPU has AMX-INT8 and the OS granted the tile state (asking it). */
int         sb_kq_amx_usable(void);
/* The family the k-quant gemm of a level multiplies with ("amx" where the
 * table runs the AMX gemms, "avx512_vnni", "avx2"). */
const char *sb_kq_gemm_family(int level);

/* ---- row-interleaved ("x8") weights, for decode (kq_x8.c) -----------------
 * Groups of 8 rows re-laid super-block by super-block so that one SIMD
 * instruction works on 8 rows (the layout is described in kq_x8.c). A
 * permutation of the same bytes: group g still starts at 8g·row_bytes and
 * has the same size, so it can replace the file copy, and unpack restores
 * the file bytes exactly. n = elements per row (a multiple of 256). */
int  sb_kq_x8_supported(int type);
/* rows: 8 rows row_bytes apart, file layout -> dst (8·row_bytes bytes). */
void sb_kq_x8_pack(int type, int64_t n, const void *rows, size_t row_bytes, void *dst);
/* The inverse: one x8 group -> 8 rows in file layout, row_bytes apart. */
void sb_kq_x8_unpack(int type, int64_t n, const void *src, void *rows, size_t row_bytes);

/* ---- vector kernels of the forward pass -----------------------------------
 * The three loops of one query head's attention over an F16 KV cache, and
 * SwiGLU, per kernel level. Rows of K and V are `stride` elements apart; hd
 * is the head size (any positive value; SIMD tails are handled). */
typedef struct {
    /* s[p] = scale · Σᵢ q[i]·K[p][i] for p < n_pos; returns max_p s[p].
     * q holds F16 values widened to float (the products are then exact). */
    float (*qk_f16)(int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride, float scale, float *s);
    /* s[p] = exp(s[p] − max) in place; returns Σ s[p] (in double). exp is
     * a polynomial good to ~2 ulp, as ggml's own SIMD expf. */
    double (*softmax_exp)(float *s, int n, float max);
    /* out[i] = Σ_p f16(e[p]·inv)·V[p][i]: the probabilities rounded to F16
     * before the product, as llama.cpp multiplies its F16 V cache. */
    void (*pv_f16)(int hd, int n_pos, const float *e, float inv, const sb_fp16 *v, size_t stride, float *out);
    /* qk_f16 for ng query heads that share one K head (GQA): each K element
     * is loaded and widened once for all of them. Head g's q is at q + g·hd,
     * its scores at s + g·s_stride, its max in mx[g]; every head's numbers
     * are qk_f16's bit for bit (the same operations in the same order). */
    void (*qk_f16_g)(int hd, int n_pos, int ng, const float *q, const sb_fp16 *k, size_t stride, float scale,
                     float *s, size_t s_stride, float *mx);
    /* pv_f16 for ng heads that share one V head, bit for bit: head g's
     * e at e + g·e_stride with inv[g], its output at out + g·hd. e is
     * overwritten by the weights f16(e[p]·inv[g]) (rounded once, not once
     * per pass over the dims). */
    void (*pv_f16_g)(int hd, int n_pos, int ng, float *e, size_t e_stride, const float *inv, const sb_fp16 *v,
                     size_t stride, float *out);
    /* out[i] = silu(g[i])·u[i], silu(x) = x·sigmoid(x) with the same exp as
     * softmax_exp (on −|x|, so never overflowing); out may alias u or g. */
    void (*swiglu)(int n, const float *g, const float *u, float *out);
} sb_kq_vec;

/* The vector kernels of one level (same levels as sb_kq_table). */
const sb_kq_vec *sb_kq_vec_table(int level);

/* traits->vec_dotn, or (a type or level without one) vec_dot per row: the
 * same numbers either way. nt may exceed SB_KQ_DOTN_MAX (done in groups). */
static inline void sb_kq_vec_dotn(const sb_kq_traits *t, int n, int nt, float *s, size_t s_stride, const void *x,
                                  const void *y, size_t y_stride) {
    for (int t0 = 0; t0 < nt; t0 += SB_KQ_DOTN_MAX) {
        const int m = nt - t0 < SB_KQ_DOTN_MAX ? nt - t0 : SB_KQ_DOTN_MAX;
        float *so = s + (size_t)t0 * s_stride;
        const uint8_t *yo = (const uint8_t *)y + (size_t)t0 * y_stride;
        if (t->vec_dotn) t->vec_dotn(n, m, so, s_stride, x, yo, y_stride);
        else
            for (int k = 0; k < m; k++) t->vec_dot(n, so + (size_t)k * s_stride, x, yo + (size_t)k * y_stride);
    }
}

/* Bytes of one row of n elements of `type` (n a multiple of the block). */
static inline size_t sb_kq_row_size(const sb_kq_traits *t, int64_t n) {
    return t->blck_size ? (size_t)(n / t->blck_size) * t->type_size : 0;
}

/* ---- building blocks of the reference quantizers ------------------------ */
/* ggml's make_qx_quants: symmetric levels L in [0, 2·nmax) with
 * x ≈ scale·(L - nmax), the best of 18 candidate scales by weighted squared
 * error (weights NULL: x²). Returns the scale. Shared, like the search below,
 * by the reference quantizers and the importance-weighted ones. */
float sb_kq_search_symmetric(int n, int nmax, const float *x, const float *weights, int8_t *L);
/* ggml's make_qkx2/qkx3 search: asymmetric levels L in [0, nmax] with
 * x ≈ scale·L - min, trying nstep+1 candidate scales and keeping the lowest
 * weighted error (absolute if use_mad). Returns the scale, *the_min the min.
 * weights must not be NULL. Shared by the k-quant reference quantizers and
 * the importance-weighted ones of `switchboard quantize`. */
float sb_kq_search_asymmetric(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              int use_mad);

/* ---- fp16 / bf16 scalar conversions (round-to-nearest-even, like F16C) ---- */
static inline float sb_fp32_from_bits(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static inline uint32_t sb_fp32_to_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

static inline float sb_fp16_to_fp32(sb_fp16 h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = sb_fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = sb_fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? sb_fp32_to_bits(denormalized)
                                                                : sb_fp32_to_bits(normalized));
    return sb_fp32_from_bits(result);
}

static inline sb_fp16 sb_fp32_to_fp16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf;
    base *= scale_to_zero;
    const uint32_t w = sb_fp32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = sb_fp32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = sb_fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (sb_fp16)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float sb_bf16_to_fp32(sb_bf16 h) { return sb_fp32_from_bits((uint32_t)h << 16); }
static inline sb_bf16 sb_fp32_to_bf16(float f) {
    uint32_t u = sb_fp32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (sb_bf16)((u >> 16) | 64); /* quiet NaN */
    return (sb_bf16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#endif
