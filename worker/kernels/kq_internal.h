/* kq_internal.h - what the kernel files share among themselves (not public:
 * the rest of the program sees only sb_kq.h and reaches kernels through the
 * traits tables).
 *
 * Naming (see STYLE.md): sb_kq_dot_<weight>_<activation>_<level>,
 * sb_kq_deq_<type>_<level> (to_float), sb_kq_quant_<type>_ref (the
 * deterministic reference quantizer, from_float_ref) and
 * sb_kq_act_<type>_<level> (the activation quantizer, from_float).
 *
 * Two quantizers exist for Q8_0 and Q8_1 because llama.cpp has two: the
 * reference one (roundf, scale 1/d) writes model files, the one its CPU
 * backend uses on x86 for activations (scale 127/amax, round-half-even)
 * feeds the dot products. We copy each where llama.cpp uses it, so files
 * and logits both land on llama.cpp's bits. Every level's act_ quantizer
 * produces the same bytes.
 */
#ifndef KQ_INTERNAL_H
#define KQ_INTERNAL_H

#include <stdint.h>
#include <string.h>
#include "worker/kernels/sb_kq.h"

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5·2^23 leaves the
 * integer in the low mantissa bits. The same trick as ggml's nearest_int, and
 * it must stay this one: the k-quant searches compare results of it. */
static inline int kq_nearest_int(float v) {
    float biased = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &biased, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

/* Bytes per block of each quantized type, by SB_TYPE id: the traits
 * table's type_size (test_kq checks every row against it), as a switch so
 * that a kernel instantiated for one type reads a constant - the table is
 * built at run time, and reading it would put a load in every row's loop.
 * 0 for a type without blocks. */
static inline __attribute__((always_inline)) size_t kq_block_bytes(int type) {
    switch (type) {
    case SB_TYPE_Q4_0: return sizeof(sb_block_q4_0);
    case SB_TYPE_Q4_1: return sizeof(sb_block_q4_1);
    case SB_TYPE_Q5_0: return sizeof(sb_block_q5_0);
    case SB_TYPE_Q5_1: return sizeof(sb_block_q5_1);
    case SB_TYPE_Q8_0: return sizeof(sb_block_q8_0);
    case SB_TYPE_Q8_1: return sizeof(sb_block_q8_1);
    case SB_TYPE_Q2_K: return sizeof(sb_block_q2_K);
    case SB_TYPE_Q3_K: return sizeof(sb_block_q3_K);
    case SB_TYPE_Q4_K: return sizeof(sb_block_q4_K);
    case SB_TYPE_Q5_K: return sizeof(sb_block_q5_K);
    case SB_TYPE_Q6_K: return sizeof(sb_block_q6_K);
    case SB_TYPE_Q8_K: return sizeof(sb_block_q8_K);
    default: return 0;
    }
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) out of the 12
 * packed bytes: j < 4 in the low 6 bits of bytes j and j+4; j >= 4 split
 * into a nibble of byte j+4 and the top 2 bits of bytes j-4 / j. */
static inline void kq_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K / Q5_K: all eight scales (out[0..7]) and mins (out[8..15]), the
 * same values as kq_scale_min_k4 but four at a time in 32-bit words (no
 * branches: this runs once per super-block inside every dot). */
static inline void kq_unpack_scales_k4(const uint8_t *packed, uint8_t out[16]) {
    uint32_t w[3], o[4];
    memcpy(w, packed, 12);
    o[0] = w[0] & 0x3f3f3f3fu;                                             /* scales 0..3 */
    o[1] = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);      /* scales 4..7 */
    o[2] = w[1] & 0x3f3f3f3fu;                                             /* mins 0..3 */
    o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4); /* mins 4..7 */
    memcpy(out, o, 16);
}

/* Q3_K: the sixteen 6-bit scales, already minus their bias of 32. Low
 * nibbles are in bytes 0..7 (j < 8: low half, j >= 8: high half of byte
 * j-8); the top 2 bits of scale j are bits 2*(j/4) of byte 8 + j%4.
 * Done four scales per 32-bit word. */
static inline void kq_unpack_scales_q3(const uint8_t *packed, int8_t out[16]) {
    uint32_t w[3], o[4];
    memcpy(w, packed, 12);
    const uint32_t lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    o[0] = (w[0] & lo4) | (((w[2] >> 0) & lo2) << 4);
    o[1] = (w[1] & lo4) | (((w[2] >> 2) & lo2) << 4);
    o[2] = ((w[0] >> 4) & lo4) | (((w[2] >> 4) & lo2) << 4);
    o[3] = ((w[1] >> 4) & lo4) | (((w[2] >> 6) & lo2) << 4);
    uint8_t b[16];
    memcpy(b, o, 16);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(b[j] - 32);
}

/* ---- a k-quant super-block's scales, for the packed gemms ----------------- */

/* Its sub-block scales (signed: Q3_K's without their bias) and mins (Q2_K,
 * Q4_K, Q5_K; else 0): 16 of each, of which Q4_K and Q5_K use 8. */
static inline void kq_kblock_scales(int type, const void *blk, int16_t sc[16], uint8_t mn[16]) {
    memset(mn, 0, 16);
    switch (type) {
    case SB_TYPE_Q2_K: {
        const sb_block_q2_K *b = (const sb_block_q2_K *)blk;
        for (int s = 0; s < 16; s++) sc[s] = b->scales[s] & 0xF, mn[s] = b->scales[s] >> 4;
        break;
    }
    case SB_TYPE_Q3_K: {
        int8_t s8[16];
        kq_unpack_scales_q3(((const sb_block_q3_K *)blk)->scales, s8);
        for (int s = 0; s < 16; s++) sc[s] = s8[s];
        break;
    }
    case SB_TYPE_Q4_K:
    case SB_TYPE_Q5_K: {      /* scales at the same offset in Q5_K */
        uint8_t sm[16];
        kq_unpack_scales_k4(((const sb_block_q4_K *)blk)->scales, sm);
        for (int s = 0; s < 8; s++) sc[s] = sm[s], mn[s] = sm[8 + s], sc[8 + s] = 0;
        break;
    }
    default: {
        const sb_block_q6_K *b = (const sb_block_q6_K *)blk;
        for (int s = 0; s < 16; s++) sc[s] = b->scales[s];
        break;
    }
    }
}

static inline int32_t kq_pair16(int a, int b) { return (int32_t)(((uint32_t)(uint16_t)(int16_t)b << 16) | (uint16_t)(int16_t)a); }

/* The int16 pairs the VNNI panels put against Q8_K's bsums 2k, 2k+1: a
 * min per bsum (Q2_K), one min per two (Q4_K, Q5_K), or the offset of
 * the quants times the scale (Q3_K: -4, Q6_K: -32). */
static inline void kq_kblock_bsum_pairs(int type, const int16_t sc[16], const uint8_t mn[16], int32_t pairs[8]) {
    for (int k = 0; k < 8; k++)
        pairs[k] = type == SB_TYPE_Q2_K ? kq_pair16(mn[2 * k], mn[2 * k + 1])
                 : type == SB_TYPE_Q3_K ? kq_pair16(-4 * sc[2 * k], -4 * sc[2 * k + 1])
                 : type == SB_TYPE_Q6_K ? kq_pair16(-32 * sc[2 * k], -32 * sc[2 * k + 1])
                                        : kq_pair16(mn[k], mn[k]);
}

/* ---- tiled kernels (sb_gemm_fn) ------------------------------------------- */

/* The body of an sb_gemm_fn built from a tile function
 *     tile(n, R, C, x, bx, y, by, s, ldc)
 * that computes an R×C block of dots. The tile function is always inlined,
 * so here R and C are constants: its loops over them unroll and its R×C
 * accumulators live in registers. Full RT×CT tiles first, the leftover
 * columns (< CT) by narrower tiles, leftover rows one row at a time. */
#define KQ_GEMM_BODY(tile, RT, CT)                                              \
    _Static_assert((CT) >= 1 && (CT) <= 4 && (RT) >= 1, "tile shape");          \
    const uint8_t *xb_ = x, *yb_ = y;                                            \
    int r_ = 0;                                                                  \
    for (; r_ + (RT) <= nr; r_ += (RT)) KQ_GEMM_COLS(tile, RT, CT)               \
    for (; r_ < nr; r_++) KQ_GEMM_COLS(tile, 1, CT)

#define KQ_GEMM_COLS(tile, R, CT)                                                          \
    {                                                                                      \
        const uint8_t *xr_ = xb_ + (size_t)r_ * bx;                                        \
        int c_ = 0;                                                                        \
        for (; c_ + (CT) <= nc; c_ += (CT))                                                \
            tile(n, R, CT, xr_, bx, yb_ + (size_t)c_ * by, by, s + (size_t)c_ * ldc + r_, ldc); \
        switch (nc - c_) {                                                                 \
        case 1: tile(n, R, 1, xr_, bx, yb_ + (size_t)c_ * by, by, s + (size_t)c_ * ldc + r_, ldc); break; \
        case 2: if ((CT) > 2) tile(n, R, 2, xr_, bx, yb_ + (size_t)c_ * by, by, s + (size_t)c_ * ldc + r_, ldc); break; \
        case 3: if ((CT) > 3) tile(n, R, 3, xr_, bx, yb_ + (size_t)c_ * by, by, s + (size_t)c_ * ldc + r_, ldc); break; \
        default: break;                                                                    \
        }                                                                                  \
    }

#define KQ_GEMM_ARGS int n, int nr, int nc, const void *x, size_t bx, const void *y, size_t by, float *s, size_t ldc

/* Weight types with a tiled kernel (the _ref ones loop over vec_dot_ref:
 * the scalar twin every SIMD tile is tested against). */
#define KQ_DECLARE_GEMMS(lvl)                               \
    void sb_kq_gemm_q4_0_q8_0_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q5_0_q8_0_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q8_0_q8_0_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q2_K_q8_K_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q3_K_q8_K_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q4_K_q8_K_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q5_K_q8_K_##lvl(KQ_GEMM_ARGS);          \
    void sb_kq_gemm_q6_K_q8_K_##lvl(KQ_GEMM_ARGS);
KQ_DECLARE_GEMMS(ref)
KQ_DECLARE_GEMMS(avx2)
KQ_DECLARE_GEMMS(avx512)
/* The AVX-512 k-quant gemms pack weight panels (kq_kpack_avx512.c); for a
 * few columns they call these register tiles instead (kq_kgemm_avx512.c). */
void sb_kq_gemm_q2_K_q8_K_tile_avx512(KQ_GEMM_ARGS);
void sb_kq_gemm_q3_K_q8_K_tile_avx512(KQ_GEMM_ARGS);
void sb_kq_gemm_q4_K_q8_K_tile_avx512(KQ_GEMM_ARGS);
void sb_kq_gemm_q5_K_q8_K_tile_avx512(KQ_GEMM_ARGS);
void sb_kq_gemm_q6_K_q8_K_tile_avx512(KQ_GEMM_ARGS);
/* The same products on AMX tiles (kq_kpack_amx.c), where the CPU and the OS
 * allow them; each equals its AVX-512 twin's result (that file says when). */
void sb_kq_gemm_q2_K_q8_K_amx(KQ_GEMM_ARGS);
void sb_kq_gemm_q3_K_q8_K_amx(KQ_GEMM_ARGS);
void sb_kq_gemm_q4_K_q8_K_amx(KQ_GEMM_ARGS);
void sb_kq_gemm_q5_K_q8_K_amx(KQ_GEMM_ARGS);
void sb_kq_gemm_q6_K_q8_K_amx(KQ_GEMM_ARGS);

/* ---- x8 layout (kq_x8.c) --------------------------------------------------- */
/* The head of a Q4_K / Q5_K tile (8 rows x 256 elements); Q5_K's qh[256]
 * and then qs[1024] follow, Q4_K's qs[1024] directly. */
typedef struct {
    sb_fp16 d[8], dmin[8];
    uint8_t scl[32], mnl[32], sh[32];
} kq_k4x8_head;
typedef struct {
    sb_fp16 d[8];
    int8_t  sc[128];
    uint8_t qh[512];
    uint8_t ql[1024];
} kq_q6_Kx8;
_Static_assert(sizeof(kq_k4x8_head) + 1024 == 8 * sizeof(sb_block_q4_K), "q4_K x8 tile");
_Static_assert(sizeof(kq_k4x8_head) + 256 + 1024 == 8 * sizeof(sb_block_q5_K), "q5_K x8 tile");
_Static_assert(sizeof(kq_q6_Kx8) == 8 * sizeof(sb_block_q6_K), "q6_K x8 tile");
#define KQ_DECLARE_GEMV8(lvl)                                                        \
    void sb_kq_gemv8_q4_K_q8_K_##lvl(int n, float *s, const void *vx, const void *vy); \
    void sb_kq_gemv8_q5_K_q8_K_##lvl(int n, float *s, const void *vx, const void *vy); \
    void sb_kq_gemv8_q6_K_q8_K_##lvl(int n, float *s, const void *vx, const void *vy);
KQ_DECLARE_GEMV8(ref)
KQ_DECLARE_GEMV8(avx2)

/* ---- attention (kq_attn_*.c), one set per level ---------------------------- */
#define KQ_DECLARE_ATTN(lvl)                                                                               \
    float sb_kq_attn_qk_f16_##lvl(int hd, int n_pos, const float *q, const sb_fp16 *k, size_t stride,      \
                                  float scale, float *s);                                                  \
    double sb_kq_attn_exp_##lvl(float *s, int n, float max);                                               \
    void sb_kq_attn_pv_f16_##lvl(int hd, int n_pos, const float *e, float inv, const sb_fp16 *v,          \
                                 size_t stride, float *out);                                               \
    void sb_kq_attn_qk_f16_g_##lvl(int hd, int n_pos, int ng, const float *q, const sb_fp16 *k, size_t stride, \
                                   float scale, float *s, size_t s_stride, float *mx);                     \
    void sb_kq_attn_pv_f16_g_##lvl(int hd, int n_pos, int ng, float *e, size_t e_stride, const float *inv,  \
                                   const sb_fp16 *v, size_t stride, float *out);                           \
    void sb_kq_swiglu_##lvl(int n, const float *g, const float *u, float *out);
KQ_DECLARE_ATTN(ref)
KQ_DECLARE_ATTN(avx2)
KQ_DECLARE_ATTN(avx512)

/* exp(x) for x <= 0 (the softmax range): x = n·ln2 + r, |r| <= ln2/2,
 * exp(r) by Cephes' degree-6 expf polynomial, then · 2^n. The constants
 * are shared by the scalar twin and the SIMD versions. */
#define KQ_EXP_LOG2E 1.44269504088896341f
#define KQ_EXP_LN2_HI 0.693359375f
#define KQ_EXP_LN2_LO -2.12194440e-4f
#define KQ_EXP_P0 1.9875691500e-4f
#define KQ_EXP_P1 1.3981999507e-3f
#define KQ_EXP_P2 8.3334519073e-3f
#define KQ_EXP_P3 4.1665795894e-2f
#define KQ_EXP_P4 1.6666665459e-1f
#define KQ_EXP_P5 5.0000001201e-1f
#define KQ_EXP_MIN -87.3365448f     /* below: the result is under FLT_MIN, taken as 0 */

/* ---- reference level (kq_ref.c, kq_kquants_ref.c: no SIMD flags) ---------- */
#define KQ_DECLARE_TYPE_REF(t)                                                  \
    void sb_kq_deq_##t##_ref(const void *src, float *dst, int64_t n);           \
    void sb_kq_quant_##t##_ref(const float *src, void *dst, int64_t n);
KQ_DECLARE_TYPE_REF(f32)
KQ_DECLARE_TYPE_REF(f16)
KQ_DECLARE_TYPE_REF(bf16)
KQ_DECLARE_TYPE_REF(q4_0)
KQ_DECLARE_TYPE_REF(q4_1)
KQ_DECLARE_TYPE_REF(q5_0)
KQ_DECLARE_TYPE_REF(q5_1)
KQ_DECLARE_TYPE_REF(q8_0)
KQ_DECLARE_TYPE_REF(q8_1)
KQ_DECLARE_TYPE_REF(q2_K)
KQ_DECLARE_TYPE_REF(q3_K)
KQ_DECLARE_TYPE_REF(q4_K)
KQ_DECLARE_TYPE_REF(q5_K)
KQ_DECLARE_TYPE_REF(q6_K)
KQ_DECLARE_TYPE_REF(q8_K)
#undef KQ_DECLARE_TYPE_REF

/* activation quantizers, scalar twins of the SIMD ones (same bytes) */
void sb_kq_act_q8_0_ref(const float *src, void *dst, int64_t n);
void sb_kq_act_q8_1_ref(const float *src, void *dst, int64_t n);

#define KQ_DECLARE_DOTS(lvl)                                                    \
    void sb_kq_dot_f32_f32_##lvl(int n, float *s, const void *x, const void *y);   \
    void sb_kq_dot_f16_f16_##lvl(int n, float *s, const void *x, const void *y);   \
    void sb_kq_dot_bf16_bf16_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q4_0_q8_0_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q4_1_q8_1_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q5_0_q8_0_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q5_1_q8_1_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q8_0_q8_0_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q2_K_q8_K_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q3_K_q8_K_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q4_K_q8_K_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q5_K_q8_K_##lvl(int n, float *s, const void *x, const void *y); \
    void sb_kq_dot_q6_K_q8_K_##lvl(int n, float *s, const void *x, const void *y);
KQ_DECLARE_DOTS(ref)
KQ_DECLARE_DOTS(avx2)

/* Bytes ahead the default decode dots prefetch (why: kq_x86.h). */
#ifndef KQ_PREFETCH_AHEAD
#define KQ_PREFETCH_AHEAD 8192
#endif
/* Prefetch-distance twins of a decode dot (KQ_PF_VARIANTS in kq_x86.h). */
#define KQ_DECLARE_PF(name)                                                  \
    void name##_pf0(int n, float *s, const void *x, const void *y);           \
    void name##_pf4k(int n, float *s, const void *x, const void *y);          \
    void name##_pf16k(int n, float *s, const void *x, const void *y);         \
    void name##_pf32k(int n, float *s, const void *x, const void *y);
KQ_DECLARE_PF(sb_kq_dot_q2_K_q8_K_avx2)
KQ_DECLARE_PF(sb_kq_dot_q3_K_q8_K_avx2)
KQ_DECLARE_PF(sb_kq_dot_q4_K_q8_K_avx2)
KQ_DECLARE_PF(sb_kq_dot_q5_K_q8_K_avx2)
KQ_DECLARE_PF(sb_kq_dot_q6_K_q8_K_avx2)
KQ_DECLARE_PF(sb_kq_dot_q4_0_q8_0_avx512)
KQ_DECLARE_PF(sb_kq_dot_q5_0_q8_0_avx512)
KQ_DECLARE_PF(sb_kq_dot_q8_0_q8_0_avx512)
KQ_DECLARE_PF(sb_kq_dot_q2_K_q8_K_avx512)
KQ_DECLARE_PF(sb_kq_dot_q3_K_q8_K_avx512)
KQ_DECLARE_PF(sb_kq_dot_q4_K_q8_K_avx512)
KQ_DECLARE_PF(sb_kq_dot_q5_K_q8_K_avx512)
KQ_DECLARE_PF(sb_kq_dot_q6_K_q8_K_avx512)
/* vec_dot2 and vec_dot4 (kq_kquants_avx512.c) and their prefetch twins. */
#define KQ_DECLARE_DOTR_1(name) void name(int n, float *s, size_t s_step, const void *x, size_t x_step, const void *y);
#define KQ_DECLARE_DOTR(name)                                                                        \
    KQ_DECLARE_DOTR_1(name) KQ_DECLARE_DOTR_1(name##_pf0) KQ_DECLARE_DOTR_1(name##_pf4k)             \
    KQ_DECLARE_DOTR_1(name##_pf16k) KQ_DECLARE_DOTR_1(name##_pf32k)
KQ_DECLARE_DOTR(sb_kq_dot2_q2_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot4_q2_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot2_q3_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot4_q3_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot2_q4_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot4_q4_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot2_q5_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot4_q5_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot2_q6_K_q8_K_avx512)
KQ_DECLARE_DOTR(sb_kq_dot4_q6_K_q8_K_avx512)
/* kq_q2k_avx512vbmi.c: the AVX-512 Q2_K dots bit for bit, through vpermb
 * (CPUs with AVX512_VBMI; kq_table.c picks them by CPUID). */
void sb_kq_dot_q2_K_q8_K_avx512vbmi(int n, float *s, const void *x, const void *y);
KQ_DECLARE_PF(sb_kq_dot_q2_K_q8_K_avx512vbmi)
KQ_DECLARE_DOTR(sb_kq_dot2_q2_K_q8_K_avx512vbmi)
KQ_DECLARE_DOTR(sb_kq_dot4_q2_K_q8_K_avx512vbmi)

/* ---- AVX2 level (kq_avx2.c, kq_kquants_avx2.c) ---------------------------- */
#define KQ_DOTN_ARGS int n, int nt, float *s, size_t s_stride, const void *x, const void *y, size_t y_stride
/* kq_dotn_avx2.c: vec_dotn, bit for bit the AVX2 vec_dot */
void sb_kq_dotn_q4_K_q8_K_avx2(KQ_DOTN_ARGS);
void sb_kq_dotn_q5_K_q8_K_avx2(KQ_DOTN_ARGS);
void sb_kq_dotn_q6_K_q8_K_avx2(KQ_DOTN_ARGS);
void sb_kq_act_q8_0_avx2(const float *src, void *dst, int64_t n);
void sb_kq_act_q8_1_avx2(const float *src, void *dst, int64_t n);
void sb_kq_act_q8_K_avx2(const float *src, void *dst, int64_t n);
void sb_kq_act_f16_avx2(const float *src, void *dst, int64_t n);
void sb_kq_act_bf16_avx2(const float *src, void *dst, int64_t n);
void sb_kq_deq_f16_avx2(const void *src, float *dst, int64_t n);
void sb_kq_deq_bf16_avx2(const void *src, float *dst, int64_t n);
void sb_kq_deq_q8_0_avx2(const void *src, float *dst, int64_t n);
void sb_kq_deq_q4_0_avx2(const void *src, float *dst, int64_t n);

/* ---- AVX-512 level (kq_avx512.c, kq_kquants_avx512.c) --------------------- */
void sb_kq_dot_f32_f32_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_f16_f16_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q4_0_q8_0_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q8_0_q8_0_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q4_1_q8_1_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q5_0_q8_0_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q5_1_q8_1_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_bf16_bf16_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q2_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q3_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q4_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q5_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void sb_kq_dot_q6_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
/* kq_dotn_avx512.c: vec_dotn, bit for bit the vec_dot of this level */
void sb_kq_dotn_q2_K_q8_K_avx512(KQ_DOTN_ARGS);
void sb_kq_dotn_q3_K_q8_K_avx512(KQ_DOTN_ARGS);
void sb_kq_dotn_q4_K_q8_K_avx512(KQ_DOTN_ARGS);      /* these three: kq_dotn_il_avx512.c */
void sb_kq_dotn_q5_K_q8_K_avx512(KQ_DOTN_ARGS);
void sb_kq_dotn_q6_K_q8_K_avx512(KQ_DOTN_ARGS);
/* kq_dotn_il_avx512.c: on interleaved activations (sb_kq_q8_K_interleave) */
typedef struct {            /* one super-block of SB_KQ_IL_TOK tokens, layout of sb_kq.h */
    int8_t q[64][SB_KQ_IL_TOK][4];
    int16_t bs[8][SB_KQ_IL_TOK][2];
    float d[SB_KQ_IL_TOK];
} sb_kq_il_block;
_Static_assert(sizeof(sb_kq_il_block) == SB_KQ_IL_BLOCK_BYTES, "interleaved Q8_K block");
typedef struct {            /* one 32-element Q8_0 block of SB_KQ_IL_TOK tokens, layout of sb_kq.h */
    int8_t q[8][SB_KQ_IL_TOK][4];
    int32_t s[SB_KQ_IL_TOK];
    float d[SB_KQ_IL_TOK];
} sb_kq_p8_block;
_Static_assert(sizeof(sb_kq_p8_block) == SB_KQ_P8_BLOCK_BYTES, "interleaved Q8_0 block");
#define KQ_DOTN_IL_ARGS int n, int nrows, int nt, float *s, size_t s_stride, const void *x, size_t x_stride, const void *yil
void sb_kq_dotn_il_q4_K_q8_K_avx512(KQ_DOTN_IL_ARGS);
void sb_kq_dotn_il_q5_K_q8_K_avx512(KQ_DOTN_IL_ARGS);
void sb_kq_dotn_il_q6_K_q8_K_avx512(KQ_DOTN_IL_ARGS);
void sb_kq_dotn_q4_0_q8_0_avx512(KQ_DOTN_ARGS);    /* these six: kq_dotn_il_avx512.c too */
void sb_kq_dotn_q5_0_q8_0_avx512(KQ_DOTN_ARGS);
void sb_kq_dotn_q8_0_q8_0_avx512(KQ_DOTN_ARGS);
void sb_kq_dotn_il_q4_0_q8_0_avx512(KQ_DOTN_IL_ARGS);   /* on interleaved Q8_0 (sb_kq_q8_0_prepare) */
void sb_kq_dotn_il_q5_0_q8_0_avx512(KQ_DOTN_IL_ARGS);
void sb_kq_dotn_il_q8_0_q8_0_avx512(KQ_DOTN_IL_ARGS);
void sb_kq_deq_f16_avx512(const void *src, float *dst, int64_t n);
void sb_kq_act_f16_avx512(const float *src, void *dst, int64_t n);

#endif
