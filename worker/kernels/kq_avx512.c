/* kq_avx512.c - AVX-512 (F, BW, DQ, VL, VNNI) kernels: float types and the
 * dots of the 32-element block types. Two blocks fill one 512-bit register;
 * VNNI's vpdpbusd does the u8×i8 multiply and the 4-way sum in one
 * instruction.
 * Types without a kernel here use the AVX2 one (see kq_table.c).
 */
#include "worker/kernels/kq_kstep_avx512.h"

/* ==== float types ========================================================== */

static inline __m512 load_f16x16(const sb_fp16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

void sb_kq_dot_f32_f32_avx512(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void sb_kq_dot_f16_f16_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_fp16 *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_f16x16(x + i), load_f16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(load_f16x16(x + i + 16), load_f16x16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_f16x16(x + i + 32), load_f16x16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_f16x16(x + i + 48), load_f16x16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_f16x16(x + i), load_f16x16(y + i), a0);
    if (i < n) {
        /* masked-off lanes load as +0.0 halves, which add nothing */
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        const __m512 yv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i));
        a1 = _mm512_fmadd_ps(xv, yv, a1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void sb_kq_deq_f16_avx512(const void *src, float *dst, int64_t n) {
    const sb_fp16 *h = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load_f16x16(h + i));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
    }
}

void sb_kq_act_f16_avx512(const float *src, void *dst, int64_t n) {
    sb_fp16 *h = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(h + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* ==== Q4_0 / Q5_0 / Q8_0: the reference's numbers ========================== */
/* sum += (dx·dy)·isum block by block, in block order, as kq_ref.c (and
 * ggml's scalar code) does. The integer sums are exact in any grouping and
 * the float steps are the reference's, so every result is the reference's
 * bit for bit - and so is every result of the multi-token kernels
 * (kq_dotn_il_avx512.c), which run the same float step with one token per
 * lane. What is vector here is the integer work: 16 blocks' sums at once,
 * their 16 scale products at once; the 16 float adds stay one chain (an
 * add's latency per block, which decode's weight stream hides: 32 elements
 * of Q5_0 are 22 bytes). */

/* p[k] holds blocks 2k and 2k+1, 8 dword partial sums each → lane j = the
 * sum of block j. */
KQ_INLINE __m512i block_sums_16(const __m512i p[8]) {
    __m512i a[4], b[2];
    for (int k = 0; k < 4; k++)
        a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]), _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
    for (int k = 0; k < 2; k++)
        b[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
    /* 128-bit lane l of b[k]: the sums of p[4k..4k+3] over their lane l */
    const __m512i s = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* s holds blocks 0 2 4 6, 1 3 5 7, 8 10 12 14, 9 11 13 15 */
    return _mm512_permutexvar_epi32(_mm512_set_epi32(15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0), s);
}

/* dx·dy of the first cnt ≤ 16 blocks, lane j = block j (d is every block
 * type's first field; a gather reads it and the next two bytes). */
KQ_INLINE __m512 block_scales_16(const void *x, size_t xb, const sb_block_q8_0 *y, int cnt) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __mmask16 m = (__mmask16)((1u << cnt) - 1);
    const __m512i hx = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)xb)), x, 1);
    const __m512i hy = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)sizeof *y)), y, 1);
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(hx)), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hy)));
}

/* Σ q·y of blocks b and b1 = Σ u·y − bias·Σ y (u = q + bias, unsigned, for
 * VNNI's u8 side): 8 dword partials per block. Exact for any y. */
KQ_INLINE __m512i pair_isum(int wt, const void *vx, const sb_block_q8_0 *y, int b, int b1) {
    const __m512i yv = load_2x32(y[b].qs, y[b1].qs);
    const __m512i bias = _mm512_set1_epi8((char)(1 << legacy_bias_shift(wt)));
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), legacy_unsigned_2x32(wt, vx, b, b1), yv),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, yv));
}

/* The next cnt ≤ 16 blocks' float steps onto sum. */
KQ_INLINE float legacy_group(int wt, float sum, const void *vx, const sb_block_q8_0 *y, int cnt) {
    __m512i p[8];
    for (int k = 0; k < 8; k++) {
        const int b = 2 * k;
        p[k] = b + 1 < cnt ? pair_isum(wt, vx, y, b, b + 1)
             : b < cnt     ? _mm512_maskz_mov_epi32(0x00FF, pair_isum(wt, vx, y, b, b))
                           : _mm512_setzero_si512();
    }
    float v[16];
    _mm512_storeu_ps(v, _mm512_mul_ps(block_scales_16(vx, kq_block_bytes(wt), y, cnt), _mm512_cvtepi32_ps(block_sums_16(p))));
    for (int k = 0; k < cnt; k++) sum += v[k];
    return sum;
}

KQ_INLINE void dot_legacy(int wt, int n, float *s, const void *vx, const void *vy, size_t pf) {
    const size_t xb = kq_block_bytes(wt);
    const sb_block_q8_0 *y = vy;
    const int nb = n / 32;
    float sum = 0.0f;
    int i = 0;
    for (; i + 16 <= nb; i += 16) {
        const uint8_t *xi = (const uint8_t *)vx + (size_t)i * xb;
        kq_prefetch_at(xi, pf, 16 * xb);     /* the weights stream from DRAM */
        sum = legacy_group(wt, sum, xi, y + i, 16);
    }
    if (i < nb) sum = legacy_group(wt, sum, (const uint8_t *)vx + (size_t)i * xb, y + i, nb - i);
    *s = sum;
}

KQ_INLINE void dot_q4_0(int n, float *s, const void *vx, const void *vy, size_t pf) { dot_legacy(L_Q4_0, n, s, vx, vy, pf); }
KQ_INLINE void dot_q5_0(int n, float *s, const void *vx, const void *vy, size_t pf) { dot_legacy(L_Q5_0, n, s, vx, vy, pf); }
KQ_INLINE void dot_q8_0(int n, float *s, const void *vx, const void *vy, size_t pf) { dot_legacy(L_Q8_0, n, s, vx, vy, pf); }
KQ_PF_VARIANTS(dot_q4_0, sb_kq_dot_q4_0_q8_0_avx512)
KQ_PF_VARIANTS(dot_q5_0, sb_kq_dot_q5_0_q8_0_avx512)
KQ_PF_VARIANTS(dot_q8_0, sb_kq_dot_q8_0_q8_0_avx512)

/* [dx·dy, mx·sy] of one block: (d, m) and (d, s) are adjacent fp16 pairs. */
static inline __m128 f16_pair_product(const sb_fp16 *xdm, const sb_fp16 *yds) {
    uint32_t a, b;
    memcpy(&a, xdm, 4);
    memcpy(&b, yds, 4);
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)a)), _mm_cvtph_ps(_mm_cvtsi32_si128((int)b)));
}

/* Q4_1 / Q5_1: Σ dx·dy·Σ q·y + Σ mx·sy; q unsigned, so VNNI takes it as is. */
#define DOT_WITH_MIN_512(name, xtype, load2, tail)                                          \
    void name(int n, float *s, const void *vx, const void *vy) {                            \
        const xtype *x = vx;                                                                \
        const sb_block_q8_1 *y = vy;                                                        \
        const int nb = n / 32;                                                              \
        __m512 acc = _mm512_setzero_ps();                                                   \
        __m128 mins = _mm_setzero_ps();                                                     \
        int i = 0;                                                                          \
        for (; i + 2 <= nb; i += 2) {                                                       \
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), load2(x + i), load_2x32(y[i].qs, y[i + 1].qs)); \
            const __m128 f0 = f16_pair_product(&x[i].d, &y[i].d);                           \
            const __m128 f1 = f16_pair_product(&x[i + 1].d, &y[i + 1].d);                   \
            mins = _mm_add_ps(mins, _mm_add_ps(f0, f1));                                    \
            const __m512 d = _mm512_insertf32x8(_mm512_broadcastss_ps(f0), _mm256_broadcastss_ps(f1), 1); \
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);                           \
        }                                                                                   \
        float sum = _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(_mm_movehdup_ps(mins));       \
        if (i < nb) {                                                                       \
            float rest;                                                                     \
            tail(32, &rest, x + i, y + i);                                                  \
            sum += rest;                                                                    \
        }                                                                                   \
        *s = sum;                                                                           \
    }

static inline __m512i load_q4_1_x2(const sb_block_q4_1 *b) { return nibbles_2x32(b[0].qs, b[1].qs); }
static inline __m512i load_q5_1_x2(const sb_block_q5_1 *b) { return q5_x2(b[0].qs, b[0].qh, b[1].qs, b[1].qh); }

DOT_WITH_MIN_512(sb_kq_dot_q4_1_q8_1_avx512, sb_block_q4_1, load_q4_1_x2, sb_kq_dot_q4_1_q8_1_avx2)
DOT_WITH_MIN_512(sb_kq_dot_q5_1_q8_1_avx512, sb_block_q5_1, load_q5_1_x2, sb_kq_dot_q5_1_q8_1_avx2)

/* ==== BF16 ================================================================ */
/* bf16 is the top half of an fp32: widen to 32 bits and shift. */
static inline __m512 load_bf16x16(const sb_bf16 *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

void sb_kq_dot_bf16_bf16_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_bf16 *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_bf16x16(x + i), load_bf16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(load_bf16x16(x + i + 16), load_bf16x16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_bf16x16(x + i + 32), load_bf16x16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_bf16x16(x + i + 48), load_bf16x16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_bf16x16(x + i), load_bf16x16(y + i), a0);
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) sum += sb_bf16_to_fp32(x[i]) * sb_bf16_to_fp32(y[i]);
    *s = sum;
}
