/* kq_table.c - the traits table (layout + reference code), the kernels each
 * SIMD level overrides, and dispatch.
 *
 * A row is indexed by the GGML type id, so a GGUF tensor's type field picks
 * it directly. Ids we do not support keep a named row with blck_size 0 (the
 * GGUF reader rejects those). Everything here is const: picking a level is a
 * pure function of the CPU and the environment.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "worker/kernels/kq_internal.h"

#include <cpuid.h>

/* Rows that do not depend on the level. */
#define UNSUPPORTED(id, nm) [id] = { .name = nm }
#define PLACEHOLDERS                                                           \
    UNSUPPORTED(4, "Q4_2 (retired)"), UNSUPPORTED(5, "Q4_3 (retired)"),        \
    UNSUPPORTED(16, "IQ2_XXS"), UNSUPPORTED(17, "IQ2_XS"),                     \
    UNSUPPORTED(18, "IQ3_XXS"), UNSUPPORTED(19, "IQ1_S"),                      \
    UNSUPPORTED(20, "IQ4_NL"), UNSUPPORTED(21, "IQ3_S"),                       \
    UNSUPPORTED(22, "IQ2_S"), UNSUPPORTED(23, "IQ4_XS"),                       \
    UNSUPPORTED(24, "I8"), UNSUPPORTED(25, "I16"), UNSUPPORTED(26, "I32"),     \
    UNSUPPORTED(27, "I64"), UNSUPPORTED(28, "F64"), UNSUPPORTED(29, "IQ1_M"),  \
    UNSUPPORTED(31, "Q4_0_4_4 (retired)"), UNSUPPORTED(32, "Q4_0_4_8 (retired)"), \
    UNSUPPORTED(33, "Q4_0_8_8 (retired)"), UNSUPPORTED(34, "TQ1_0"),           \
    UNSUPPORTED(35, "TQ2_0"), UNSUPPORTED(36, "IQ4_NL_4_4 (retired)"),         \
    UNSUPPORTED(37, "IQ4_NL_4_8 (retired)"), UNSUPPORTED(38, "IQ4_NL_8_8 (retired)"), \
    UNSUPPORTED(39, "MXFP4")

#define ROW(id, nm, bs, ts, q, tof, fromf, fromref, dot, vdt)                  \
    ROWG(id, nm, bs, ts, q, tof, fromf, fromref, dot, vdt, NULL)
/* A row with a tiled kernel (gemm) besides its vec_dot ... */
#define ROWG(id, nm, bs, ts, q, tof, fromf, fromref, dot, vdt, mm)             \
    ROWG8(id, nm, bs, ts, q, tof, fromf, fromref, dot, vdt, mm, NULL)
/* ... and maybe an x8 decode kernel (gemv8). */
#define ROWG8(id, nm, bs, ts, q, tof, fromf, fromref, dot, vdt, mm, g8)        \
    [id] = { .name = nm, .blck_size = bs, .type_size = ts, .is_quantized = q,  \
             .to_float = tof, .from_float = fromf, .from_float_ref = fromref,  \
             .vec_dot = dot, .vec_dot_type = vdt, .gemm = mm, .gemv8 = g8 }

/* Activation-only types have no vec_dot of their own. */
#define ROW_Q8_1(act) ROW(SB_TYPE_Q8_1, "Q8_1", 32, sizeof(sb_block_q8_1), 1, sb_kq_deq_q8_1_ref, \
                          act, sb_kq_quant_q8_1_ref, NULL, SB_TYPE_Q8_1)
#define ROW_Q8_K(act) ROW(SB_TYPE_Q8_K, "Q8_K", SB_QK_K, sizeof(sb_block_q8_K), 1, sb_kq_deq_q8_K_ref, \
                          act, sb_kq_quant_q8_K_ref, NULL, SB_TYPE_Q8_K)
/* Weight-only quant types: the fast quantizer is the reference one, as in
 * ggml (nothing quantizes weights on a hot path). */
#define ROW_W(id, nm, bs, blk, t, tof, dot, vdt) \
    ROW(id, nm, bs, sizeof(blk), 1, tof, sb_kq_quant_##t##_ref, sb_kq_quant_##t##_ref, dot, vdt)
#define ROW_WG(id, nm, bs, blk, t, tof, dot, vdt, mm) \
    ROWG(id, nm, bs, sizeof(blk), 1, tof, sb_kq_quant_##t##_ref, sb_kq_quant_##t##_ref, dot, vdt, mm)
#define ROW_WG8(id, nm, bs, blk, t, tof, dot, vdt, mm, g8) \
    ROWG8(id, nm, bs, sizeof(blk), 1, tof, sb_kq_quant_##t##_ref, sb_kq_quant_##t##_ref, dot, vdt, mm, g8)

static const sb_kq_traits table_ref[SB_TYPE_COUNT] = {
    ROW(SB_TYPE_F32, "F32", 1, 4, 0, sb_kq_deq_f32_ref, sb_kq_quant_f32_ref, sb_kq_quant_f32_ref,
        sb_kq_dot_f32_f32_ref, SB_TYPE_F32),
    ROW(SB_TYPE_F16, "F16", 1, 2, 0, sb_kq_deq_f16_ref, sb_kq_quant_f16_ref, sb_kq_quant_f16_ref,
        sb_kq_dot_f16_f16_ref, SB_TYPE_F16),
    ROW(SB_TYPE_BF16, "BF16", 1, 2, 0, sb_kq_deq_bf16_ref, sb_kq_quant_bf16_ref, sb_kq_quant_bf16_ref,
        sb_kq_dot_bf16_bf16_ref, SB_TYPE_BF16),
    ROW_WG(SB_TYPE_Q4_0, "Q4_0", 32, sb_block_q4_0, q4_0, sb_kq_deq_q4_0_ref, sb_kq_dot_q4_0_q8_0_ref, SB_TYPE_Q8_0,
           sb_kq_gemm_q4_0_q8_0_ref),
    ROW_W(SB_TYPE_Q4_1, "Q4_1", 32, sb_block_q4_1, q4_1, sb_kq_deq_q4_1_ref, sb_kq_dot_q4_1_q8_1_ref, SB_TYPE_Q8_1),
    ROW_WG(SB_TYPE_Q5_0, "Q5_0", 32, sb_block_q5_0, q5_0, sb_kq_deq_q5_0_ref, sb_kq_dot_q5_0_q8_0_ref, SB_TYPE_Q8_0,
           sb_kq_gemm_q5_0_q8_0_ref),
    ROW_W(SB_TYPE_Q5_1, "Q5_1", 32, sb_block_q5_1, q5_1, sb_kq_deq_q5_1_ref, sb_kq_dot_q5_1_q8_1_ref, SB_TYPE_Q8_1),
    ROWG(SB_TYPE_Q8_0, "Q8_0", 32, sizeof(sb_block_q8_0), 1, sb_kq_deq_q8_0_ref, sb_kq_act_q8_0_ref,
        sb_kq_quant_q8_0_ref, sb_kq_dot_q8_0_q8_0_ref, SB_TYPE_Q8_0,
         sb_kq_gemm_q8_0_q8_0_ref),
    ROW_Q8_1(sb_kq_act_q8_1_ref),
    ROW_WG(SB_TYPE_Q2_K, "Q2_K", SB_QK_K, sb_block_q2_K, q2_K, sb_kq_deq_q2_K_ref, sb_kq_dot_q2_K_q8_K_ref, SB_TYPE_Q8_K,
           sb_kq_gemm_q2_K_q8_K_ref),
    ROW_WG(SB_TYPE_Q3_K, "Q3_K", SB_QK_K, sb_block_q3_K, q3_K, sb_kq_deq_q3_K_ref, sb_kq_dot_q3_K_q8_K_ref, SB_TYPE_Q8_K,
           sb_kq_gemm_q3_K_q8_K_ref),
    ROW_WG8(SB_TYPE_Q4_K, "Q4_K", SB_QK_K, sb_block_q4_K, q4_K, sb_kq_deq_q4_K_ref, sb_kq_dot_q4_K_q8_K_ref, SB_TYPE_Q8_K,
            sb_kq_gemm_q4_K_q8_K_ref, sb_kq_gemv8_q4_K_q8_K_ref),
    ROW_WG8(SB_TYPE_Q5_K, "Q5_K", SB_QK_K, sb_block_q5_K, q5_K, sb_kq_deq_q5_K_ref, sb_kq_dot_q5_K_q8_K_ref, SB_TYPE_Q8_K,
            sb_kq_gemm_q5_K_q8_K_ref, sb_kq_gemv8_q5_K_q8_K_ref),
    ROW_WG8(SB_TYPE_Q6_K, "Q6_K", SB_QK_K, sb_block_q6_K, q6_K, sb_kq_deq_q6_K_ref, sb_kq_dot_q6_K_q8_K_ref, SB_TYPE_Q8_K,
            sb_kq_gemm_q6_K_q8_K_ref, sb_kq_gemv8_q6_K_q8_K_ref),
    ROW_Q8_K(sb_kq_quant_q8_K_ref),
    PLACEHOLDERS,
};

/* ---- per-level overrides ---------------------------------------------------
 * A SIMD level lists only the kernels it has; a NULL field resolves to the
 * level below (avx512 -> avx2 -> ref), so layout and reference code are
 * written once, in table_ref, and a new kernel is one line here. */
typedef struct {
    sb_to_float_fn   to_float;
    sb_from_float_fn from_float;
    sb_vec_dot_fn    vec_dot;
    sb_gemm_fn       gemm;
    sb_gemv8_fn      gemv8;
    sb_vec_dotn_fn   vec_dotn;      /* only with this level's own vec_dot */
    sb_vec_dotn_il_fn vec_dotn_il;  /* likewise */
    sb_vec_dotr_fn   vec_dot2;      /* likewise */
    sb_vec_dotr_fn   vec_dot4;      /* likewise */
} kq_override;

#define OVR(id, ...) [id] = { __VA_ARGS__ }

static const kq_override over_avx2[SB_TYPE_COUNT] = {
    OVR(SB_TYPE_F32, .vec_dot = sb_kq_dot_f32_f32_avx2),
    OVR(SB_TYPE_F16, .to_float = sb_kq_deq_f16_avx2, .from_float = sb_kq_act_f16_avx2,
        .vec_dot = sb_kq_dot_f16_f16_avx2),
    OVR(SB_TYPE_BF16, .to_float = sb_kq_deq_bf16_avx2, .from_float = sb_kq_act_bf16_avx2,
        .vec_dot = sb_kq_dot_bf16_bf16_avx2),
    OVR(SB_TYPE_Q4_0, .to_float = sb_kq_deq_q4_0_avx2, .vec_dot = sb_kq_dot_q4_0_q8_0_avx2,
        .gemm = sb_kq_gemm_q4_0_q8_0_avx2),
    OVR(SB_TYPE_Q4_1, .vec_dot = sb_kq_dot_q4_1_q8_1_avx2),
    OVR(SB_TYPE_Q5_0, .vec_dot = sb_kq_dot_q5_0_q8_0_avx2, .gemm = sb_kq_gemm_q5_0_q8_0_avx2),
    OVR(SB_TYPE_Q5_1, .vec_dot = sb_kq_dot_q5_1_q8_1_avx2),
    OVR(SB_TYPE_Q8_0, .to_float = sb_kq_deq_q8_0_avx2, .from_float = sb_kq_act_q8_0_avx2,
        .vec_dot = sb_kq_dot_q8_0_q8_0_avx2, .gemm = sb_kq_gemm_q8_0_q8_0_avx2),
    OVR(SB_TYPE_Q8_1, .from_float = sb_kq_act_q8_1_avx2),
    OVR(SB_TYPE_Q2_K, .vec_dot = sb_kq_dot_q2_K_q8_K_avx2, .gemm = sb_kq_gemm_q2_K_q8_K_avx2),
    OVR(SB_TYPE_Q3_K, .vec_dot = sb_kq_dot_q3_K_q8_K_avx2, .gemm = sb_kq_gemm_q3_K_q8_K_avx2),
    OVR(SB_TYPE_Q4_K, .vec_dot = sb_kq_dot_q4_K_q8_K_avx2, .gemm = sb_kq_gemm_q4_K_q8_K_avx2,
        .gemv8 = sb_kq_gemv8_q4_K_q8_K_avx2, .vec_dotn = sb_kq_dotn_q4_K_q8_K_avx2),
    OVR(SB_TYPE_Q5_K, .vec_dot = sb_kq_dot_q5_K_q8_K_avx2, .gemm = sb_kq_gemm_q5_K_q8_K_avx2,
        .gemv8 = sb_kq_gemv8_q5_K_q8_K_avx2, .vec_dotn = sb_kq_dotn_q5_K_q8_K_avx2),
    OVR(SB_TYPE_Q6_K, .vec_dot = sb_kq_dot_q6_K_q8_K_avx2, .gemm = sb_kq_gemm_q6_K_q8_K_avx2,
        .gemv8 = sb_kq_gemv8_q6_K_q8_K_avx2, .vec_dotn = sb_kq_dotn_q6_K_q8_K_avx2),
    OVR(SB_TYPE_Q8_K, .from_float = sb_kq_act_q8_K_avx2),
};

/* AVX-512: its own kernels where they pay; the rest resolves to AVX2
 * (including the x8 gemv8, which has no AVX-512 twin yet). */
static const kq_override over_avx512[SB_TYPE_COUNT] = {
    OVR(SB_TYPE_F32, .vec_dot = sb_kq_dot_f32_f32_avx512),
    OVR(SB_TYPE_F16, .to_float = sb_kq_deq_f16_avx512, .from_float = sb_kq_act_f16_avx512,
        .vec_dot = sb_kq_dot_f16_f16_avx512),
    OVR(SB_TYPE_BF16, .vec_dot = sb_kq_dot_bf16_bf16_avx512),
    OVR(SB_TYPE_Q4_0, .vec_dot = sb_kq_dot_q4_0_q8_0_avx512, .gemm = sb_kq_gemm_q4_0_q8_0_avx512,
        .vec_dotn = sb_kq_dotn_q4_0_q8_0_avx512,
        .vec_dotn_il = sb_kq_dotn_il_q4_0_q8_0_avx512),
    OVR(SB_TYPE_Q4_1, .vec_dot = sb_kq_dot_q4_1_q8_1_avx512),
    OVR(SB_TYPE_Q5_0, .vec_dot = sb_kq_dot_q5_0_q8_0_avx512, .gemm = sb_kq_gemm_q5_0_q8_0_avx512,
        .vec_dotn = sb_kq_dotn_q5_0_q8_0_avx512,
        .vec_dotn_il = sb_kq_dotn_il_q5_0_q8_0_avx512),
    OVR(SB_TYPE_Q5_1, .vec_dot = sb_kq_dot_q5_1_q8_1_avx512),
    OVR(SB_TYPE_Q8_0, .vec_dot = sb_kq_dot_q8_0_q8_0_avx512, .gemm = sb_kq_gemm_q8_0_q8_0_avx512,
        .vec_dotn = sb_kq_dotn_q8_0_q8_0_avx512,
        .vec_dotn_il = sb_kq_dotn_il_q8_0_q8_0_avx512),
    OVR(SB_TYPE_Q2_K, .vec_dot = sb_kq_dot_q2_K_q8_K_avx512, .gemm = sb_kq_gemm_q2_K_q8_K_avx512,
        .vec_dotn = sb_kq_dotn_q2_K_q8_K_avx512,
        .vec_dot2 = sb_kq_dot2_q2_K_q8_K_avx512, .vec_dot4 = sb_kq_dot4_q2_K_q8_K_avx512),
    OVR(SB_TYPE_Q3_K, .vec_dot = sb_kq_dot_q3_K_q8_K_avx512, .gemm = sb_kq_gemm_q3_K_q8_K_avx512,
        .vec_dotn = sb_kq_dotn_q3_K_q8_K_avx512,
        .vec_dot2 = sb_kq_dot2_q3_K_q8_K_avx512, .vec_dot4 = sb_kq_dot4_q3_K_q8_K_avx512),
    OVR(SB_TYPE_Q4_K, .vec_dot = sb_kq_dot_q4_K_q8_K_avx512, .gemm = sb_kq_gemm_q4_K_q8_K_avx512,
        .vec_dotn = sb_kq_dotn_q4_K_q8_K_avx512, .vec_dotn_il = sb_kq_dotn_il_q4_K_q8_K_avx512,
        .vec_dot2 = sb_kq_dot2_q4_K_q8_K_avx512, .vec_dot4 = sb_kq_dot4_q4_K_q8_K_avx512),
    OVR(SB_TYPE_Q5_K, .vec_dot = sb_kq_dot_q5_K_q8_K_avx512, .gemm = sb_kq_gemm_q5_K_q8_K_avx512,
        .vec_dotn = sb_kq_dotn_q5_K_q8_K_avx512, .vec_dotn_il = sb_kq_dotn_il_q5_K_q8_K_avx512,
        .vec_dot2 = sb_kq_dot2_q5_K_q8_K_avx512, .vec_dot4 = sb_kq_dot4_q5_K_q8_K_avx512),
    OVR(SB_TYPE_Q6_K, .vec_dot = sb_kq_dot_q6_K_q8_K_avx512, .gemm = sb_kq_gemm_q6_K_q8_K_avx512,
        .vec_dotn = sb_kq_dotn_q6_K_q8_K_avx512, .vec_dotn_il = sb_kq_dotn_il_q6_K_q8_K_avx512,
        .vec_dot2 = sb_kq_dot2_q6_K_q8_K_avx512, .vec_dot4 = sb_kq_dot4_q6_K_q8_K_avx512),
};

static const kq_override *const overrides[SB_KQ_LEVELS] = { NULL, over_avx2, over_avx512 };
static const char *const level_names[SB_KQ_LEVELS] = { "ref", "avx2", "avx512" };

#define RESOLVE(dst, o, f) if ((o)->f) (dst)->f = (o)->f
static void apply(sb_kq_traits *row, const kq_override *o) {
    RESOLVE(row, o, to_float);
    RESOLVE(row, o, from_float);
    /* vec_dotn, vec_dot2 and vec_dot4 must give their level's vec_dot bit for bit, so
     * they go with the vec_dot they were written against: a level that
     * overrides vec_dot without them drops the ones below (vec_dot per row
     * instead). */
    if (o->vec_dot) {
        row->vec_dot = o->vec_dot;
        row->vec_dotn = o->vec_dotn;
        row->vec_dotn_il = o->vec_dotn_il;
        row->vec_dot2 = o->vec_dot2;
        row->vec_dot4 = o->vec_dot4;
    }
    RESOLVE(row, o, gemm);
    RESOLVE(row, o, gemv8);
}

/* Kernels a level runs only where the CPU has a feature beyond the ones the
 * level asks for. Each is its level's kernel bit for bit (its vec_dotn and
 * gemm stay those of the level), so a CPU with the feature computes the
 * same numbers in less time; applied after the level's overrides. */
static int has_avx512vbmi(void) { return __builtin_cpu_supports("avx512vbmi"); }
/* The AMX gemms pack with VBMI (every AMX CPU has it) and need the OS to
 * hand out the tile state; a kernel or hypervisor that refuses it keeps
 * the AVX-512 gemm. SB_AMX=0 keeps it too (an A/B of the two on one
 * machine). */
static int has_amx(void) {
    const char *env = getenv("SB_AMX");
    return !(env && !strcmp(env, "0")) && has_avx512vbmi() && sb_kq_amx_usable();
}
typedef struct {
    int level, type;
    int (*cpu_has)(void);
    kq_override o;
} kq_cpu_override;
static const kq_cpu_override cpu_overrides[] = {
    { SB_KQ_AVX512, SB_TYPE_Q2_K, has_avx512vbmi,
      { .vec_dot = sb_kq_dot_q2_K_q8_K_avx512vbmi, .vec_dotn = sb_kq_dotn_q2_K_q8_K_avx512,
        .vec_dot2 = sb_kq_dot2_q2_K_q8_K_avx512vbmi, .vec_dot4 = sb_kq_dot4_q2_K_q8_K_avx512vbmi } },
    { SB_KQ_AVX512, SB_TYPE_Q2_K, has_amx, { .gemm = sb_kq_gemm_q2_K_q8_K_amx } },
    { SB_KQ_AVX512, SB_TYPE_Q3_K, has_amx, { .gemm = sb_kq_gemm_q3_K_q8_K_amx } },
    { SB_KQ_AVX512, SB_TYPE_Q4_K, has_amx, { .gemm = sb_kq_gemm_q4_K_q8_K_amx } },
    { SB_KQ_AVX512, SB_TYPE_Q5_K, has_amx, { .gemm = sb_kq_gemm_q5_K_q8_K_amx } },
    { SB_KQ_AVX512, SB_TYPE_Q6_K, has_amx, { .gemm = sb_kq_gemm_q6_K_q8_K_amx } },
};

/* The resolved tables are a pure function of the const tables above and
 * of the CPU, computed once (ggml fills its CPU traits at init the same
 * way); after pthread_once nothing writes them, so readers need no lock. */
static sb_kq_traits resolved[SB_KQ_LEVELS][SB_TYPE_COUNT];
static pthread_once_t resolved_once = PTHREAD_ONCE_INIT;

static void resolve_tables(void) {
    for (int l = 0; l < SB_KQ_LEVELS; l++)
        for (int t = 0; t < SB_TYPE_COUNT; t++) {
            resolved[l][t] = l ? resolved[l - 1][t] : table_ref[t];
            if (overrides[l] && table_ref[t].blck_size) apply(&resolved[l][t], &overrides[l][t]);
        }
    __builtin_cpu_init();
    for (size_t i = 0; i < sizeof cpu_overrides / sizeof cpu_overrides[0]; i++)
        if (cpu_overrides[i].cpu_has()) apply(&resolved[cpu_overrides[i].level][cpu_overrides[i].type], &cpu_overrides[i].o);
}

const sb_kq_traits *sb_kq_table(int level) {
    if (level < 0) level = 0;
    if (level >= SB_KQ_LEVELS) level = SB_KQ_LEVELS - 1;
    pthread_once(&resolved_once, resolve_tables);
    return resolved[level];
}

#define ATTN(lvl)                                                                                          \
    { .qk_f16 = sb_kq_attn_qk_f16_##lvl, .softmax_exp = sb_kq_attn_exp_##lvl, .pv_f16 = sb_kq_attn_pv_f16_##lvl, \
      .qk_f16_g = sb_kq_attn_qk_f16_g_##lvl, .pv_f16_g = sb_kq_attn_pv_f16_g_##lvl, .swiglu = sb_kq_swiglu_##lvl }
static const sb_kq_vec vec_tables[SB_KQ_LEVELS] = { ATTN(ref), ATTN(avx2), ATTN(avx512) };

const sb_kq_vec *sb_kq_vec_table(int level) {
    if (level < 0) level = 0;
    if (level >= SB_KQ_LEVELS) level = SB_KQ_LEVELS - 1;
    return &vec_tables[level];
}

const char *sb_kq_level_name(int level) {
    return level >= 0 && level < SB_KQ_LEVELS ? level_names[level] : "?";
}

/* What the CPU and OS allow. __builtin_cpu_supports reads CPUID and XCR0, so
 * a feature the OS does not save across context switches counts as absent. */
static int cpu_level(void) {
    __builtin_cpu_init();
    /* F16C via CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
     * does not know "f16c"; its VEX encoding is covered by the AVX2 check. */
    unsigned a, b, c, d;
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c)
        return SB_KQ_REF;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        return SB_KQ_AVX512;
    return SB_KQ_AVX2;
}

int sb_kq_best_level(void) {
    int level = cpu_level();
    /* SB_KERNELS can only lower the level: asking for more than the CPU has
     * would crash on the first illegal instruction. */
    const char *env = getenv("SB_KERNELS");
    if (env && *env) {
        for (int l = 0; l < SB_KQ_LEVELS; l++)
            if (strcmp(env, level_names[l]) == 0 && l < level) level = l;
    }
    return level;
}
