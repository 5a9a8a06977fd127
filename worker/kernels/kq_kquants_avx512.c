/* kq_kquants_avx512.c - AVX-512 dots of the k-quants with Q8_K activations.
 *
 * 64 quants per register, against 64 contiguous activation bytes. The
 * u8×i8 pair sums come from vpmaddubsw (i16, cannot overflow for these
 * ranges) and go straight into VNNI's vpdpwssd, which multiplies them by the
 * 16-bit sub-block scales and accumulates in i32: one instruction where
 * AVX2 needs madd + add. The integer result per super-block is exact, as in
 * the AVX2 and reference kernels; offsets and mins come from the bsums.
 *
 * Each k-quant dot is written once for nr = 1, 2 or 4 weight rows against
 * the same activation row: nr = 1 is the vec_dot, 2 and 4 the vec_dot2 and
 * vec_dot4, which run their rows block by block. Each row keeps its own
 * accumulators and meets the same operations in the same order as in the
 * vec_dot, so every result is that vec_dot's bit for bit. Why several rows
 * at all: a decode dot streams its row from DRAM, and rows read block by
 * block side by side keep more lines in flight than one; the same rows read
 * one after the other (a task's runs, matmul.c) stream measurably slower
 * (docs/PERFORMANCE.md, "Rows side by side in one dot").
 */
#include <stddef.h>
#include <string.h>

#include "worker/kernels/kq_kstep_avx512.h"

static inline __m512i load_q8_64(const int8_t *p) { return _mm512_loadu_si512(p); }

/* One 64-quant step: acc += scales · Σpairs(q·q8). */
static inline __m512i step(__m512i acc, __m512i q, const int8_t *q8, __m512i scales) {
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, load_q8_64(q8)), scales);
}

/* Q4_K, Q5_K and Q6_K end each super-block as the reference kernel does
 * (kq_kquants_ref.c): the block's exact integer sum and min sum, then
 * sum += (d·dy)·isum − (dmin·dy)·summs in scalar float, that order. So
 * these dots equal the reference bit for bit, and the multi-token kernels
 * (kq_dotn_il_avx512.c), which hold one token per lane, can repeat the
 * step lane for lane. The horizontal integer sums cost a few instructions
 * per block; a decode of one token streams weights from DRAM, and a batch
 * of tokens goes through those kernels. (The step: kq_ref_step, kq_x86.h.) */

/* ==== Q2_K ================================================================== */

/* One Q2_K super-block's integer sum against Q8_K (16 lanes), and the
 * products of its mins with the bsums (8 lanes). */
KQ_INLINE __m512i q2k_block(const sb_block_q2_K *x, const sb_block_q8_K *y, __m256i *mins, size_t pf) {
    const __m512i m3 = _mm512_set1_epi8(3), sh01 = halves_epi16(0, 2), sh23 = halves_epi16(4, 6);
    kq512_prefetch(x, sizeof *x, pf);
    /* one widening (port 5) for both nibbles */
    const __m256i sm16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    const __m256i sc16 = _mm256_and_si256(sm16, _mm256_set1_epi16(0xF));
    const __m256i mn16 = _mm256_srli_epi16(sm16, 4);
    *mins = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)y->bsums));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i bits = load_32_twice(x->qs + 32 * h);
        /* planes 0,1 then 2,3 of this 128: elements 0..63, 64..127 */
        const __m512i q01 = planes2(bits, sh01, m3), q23 = planes2(bits, sh23, m3);
        sumi = step(sumi, q01, y->qs + 128 * h, spread_scales(sc, 8 * h, 3));
        sumi = step(sumi, q23, y->qs + 128 * h + 64, spread_scales(sc, 8 * h + 4, 3));
    }
    return sumi;
}

KQ_DOT_Q2_K(dot_q2_K, q2k_block)
KQ_ROWS_BODIES(dot_q2_K)
KQ_PF_VARIANTS(dot_q2_K_1, sb_kq_dot_q2_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q2_K_r2, sb_kq_dot2_q2_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q2_K_r4, sb_kq_dot4_q2_K_q8_K_avx512)

/* ==== Q3_K ================================================================== */

/* One Q3_K super-block's integer sum against Q8_K, its −4 offset
 * (4 · Σ scale · bsum) taken off: 16 lanes adding up to isum. */
KQ_INLINE __m512i q3k_block(const sb_block_q3_K *x, const sb_block_q8_K *y, size_t pf) {
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m512i sh01 = halves_epi16(0, 2), sh23 = halves_epi16(4, 6);
    /* hmask bit k of each byte to bit 2, by a dword rotate left of 2 - k
     * (mod 32): the bit that lands on bit 2 of a byte comes from that same
     * byte for k = 0..7. rot[h][j]: planes 4h+2j, 4h+2j+1 in the two halves. */
    const __m512i rot[2][2] = {
        { _mm512_inserti64x4(_mm512_set1_epi32(2), _mm256_set1_epi32(1), 1),
          _mm512_inserti64x4(_mm512_set1_epi32(0), _mm256_set1_epi32(31), 1) },
        { _mm512_inserti64x4(_mm512_set1_epi32(30), _mm256_set1_epi32(29), 1),
          _mm512_inserti64x4(_mm512_set1_epi32(28), _mm256_set1_epi32(27), 1) },
    };
    kq512_prefetch(x, sizeof *x, pf);
    const __m256i sc16 = _mm256_cvtepi8_epi16(kq_scales_q3_128(x->scales));
    const __m512i offset = _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums)), 2));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    const __m512i hm = load_32_twice(x->hmask);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i bits = load_32_twice(x->qs + 32 * h);
        /* high bit of each plane as 0/4 (hmask bit 4h + plane) */
        const __m512i h01 = _mm512_and_si512(_mm512_rolv_epi32(hm, rot[h][0]), four);
        const __m512i h23 = _mm512_and_si512(_mm512_rolv_epi32(hm, rot[h][1]), four);
        const __m512i q01 = _mm512_or_si512(planes2(bits, sh01, m3), h01);
        const __m512i q23 = _mm512_or_si512(planes2(bits, sh23, m3), h23);
        sumi = step(sumi, q01, y->qs + 128 * h, spread_scales(sc, 8 * h, 3));
        sumi = step(sumi, q23, y->qs + 128 * h + 64, spread_scales(sc, 8 * h + 4, 3));
    }
    return _mm512_sub_epi32(sumi, offset);
}

KQ_INLINE void dot_q3_K(int n, int nr, float *const *s, const void *const *vx, const void *vy, size_t pf) {
    const sb_block_q8_K *y = vy;
    const sb_block_q3_K *x[KQ_ROWS_MAX];
    __m512 acc[KQ_ROWS_MAX];
    KQ_ROWS for (int r = 0; r < nr; r++) {
        x[r] = vx[r];
        acc[r] = _mm512_setzero_ps();
    }
    for (int i = 0; i < n / SB_QK_K; i++)
        KQ_ROWS for (int r = 0; r < nr; r++) {
            const __m512i sumi = q3k_block(&x[r][i], &y[i], pf);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(kq_f16(x[r][i].d) * y[i].d), _mm512_cvtepi32_ps(sumi), acc[r]);
        }
    KQ_ROWS for (int r = 0; r < nr; r++) *s[r] = _mm512_reduce_add_ps(acc[r]);
}
KQ_ROWS_BODIES(dot_q3_K)
KQ_PF_VARIANTS(dot_q3_K_1, sb_kq_dot_q3_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q3_K_r2, sb_kq_dot2_q3_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q3_K_r4, sb_kq_dot4_q3_K_q8_K_avx512)

/* ==== Q4_K / Q5_K =========================================================== */

/* Per-16-bit-lane shift counts: 0 in the low half, 4 in the high half, so
 * one vpsrlvw turns [bytes, bytes] into [low nibbles, high nibbles]. */
static inline __m512i lo_hi_shift4(void) {
    return _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
}

/* One Q4_K super-block's integer sum against Q8_K (16 lanes), and the
 * products of its mins with the bsums (8 lanes). */
KQ_INLINE __m512i q4k_block(const sb_block_q4_K *x, const sb_block_q8_K *y, __m256i *mins, size_t pf) {
    const __m512i m4 = _mm512_set1_epi8(0xF), lo_hi_shift = lo_hi_shift4();
    kq512_prefetch(x, sizeof *x, pf);
    const __m128i sm = kq_scales_k4_128(x);
    const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        /* sub-blocks 2j (low nibbles) and 2j+1 (high): elements 64j..64j+63 */
        const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(load_32_twice(x->qs + 32 * j), lo_hi_shift), m4);
        sumi = step(sumi, q, y->qs + 64 * j, spread_scales(sc, 2 * j, 4));
    }
    *mins = kq_k4_mins_dot_bsums(sm, y->bsums);
    return sumi;
}

KQ_INLINE __m512i q5k_block(const sb_block_q5_K *x, const sb_block_q8_K *y, __m256i *mins, size_t pf) {
    const __m512i m4 = _mm512_set1_epi8(0xF), one = _mm512_set1_epi8(1), lo_hi_shift = lo_hi_shift4();
    kq512_prefetch(x, sizeof *x, pf);
    const __m128i sm = kq_scales_k4_128(x);
    const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
    __m512i hz = join(qh, _mm256_srli_epi16(qh, 1)); /* bit 2j / 2j+1 at bit 0 after >> 2j */
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i hb = _mm512_slli_epi16(_mm512_and_si512(hz, one), 4);
        hz = _mm512_srli_epi16(hz, 2);
        const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(load_32_twice(x->qs + 32 * j), lo_hi_shift), m4);
        sumi = step(sumi, _mm512_or_si512(nib, hb), y->qs + 64 * j, spread_scales(sc, 2 * j, 4));
    }
    *mins = kq_k4_mins_dot_bsums(sm, y->bsums);
    return sumi;
}

/* Two blocks' isum and summs at once (one reduction tree instead of four):
 * lanes [isum0, summs0, isum1, summs1]. */
static inline __m128i isum_pair(__m512i s0, __m256i m0, __m512i s1, __m256i m1) {
    const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(s0), _mm512_extracti64x4_epi64(s0, 1));
    const __m256i b = _mm256_add_epi32(_mm512_castsi512_si256(s1), _mm512_extracti64x4_epi64(s1, 1));
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, m0), _mm256_hadd_epi32(b, m1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* ref_step of two blocks in a row, the products as one vector (the same
 * roundings: each lane is one scalar product). dm0/dm1: the blocks' d and
 * dmin as two fp16 side by side, as Q4_K and Q5_K store them. */
static inline float ref_step_pair(float sum, const void *dm0, const void *dm1, float dy0, float dy1, __m128i r) {
    int32_t h0, h1;
    memcpy(&h0, dm0, 4);
    memcpy(&h1, dm1, 4);
    const __m128 d = _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(h0), _mm_cvtsi32_si128(h1)));
    const __m128 dy = _mm_shuffle_ps(_mm_set1_ps(dy0), _mm_set1_ps(dy1), 0);
    const __m128 p = _mm_mul_ps(_mm_mul_ps(d, dy), _mm_cvtepi32_ps(r));     /* A0, B0, A1, B1 */
    const __m128 c = _mm_sub_ps(p, _mm_movehdup_ps(p));                     /* A0 − B0, ·, A1 − B1, · */
    return _mm_cvtss_f32(_mm_add_ss(_mm_add_ss(_mm_set_ss(sum), c), _mm_movehl_ps(c, c)));
}

#define DOT_K4(name, blk_t, block_fn)                                                                  \
    KQ_INLINE void dot_##name(int n, int nr, float *const *s, const void *const *vx, const void *vy, size_t pf) { \
        const blk_t *x[KQ_ROWS_MAX];                                                                  \
        const sb_block_q8_K *y = vy;                                                                  \
        const int nb = n / SB_QK_K;                                                                   \
        float sum[KQ_ROWS_MAX];                                                                       \
        KQ_ROWS for (int r = 0; r < nr; r++) {                                                        \
            x[r] = vx[r];                                                                             \
            sum[r] = 0;                                                                               \
        }                                                                                             \
        int i = 0;                                                                                    \
        for (; i + 1 < nb; i += 2)                                                                    \
            KQ_ROWS for (int r = 0; r < nr; r++) {                                                    \
                __m256i m0, m1;                                                                       \
                const __m512i s0 = block_fn(&x[r][i], &y[i], &m0, pf), s1 = block_fn(&x[r][i + 1], &y[i + 1], &m1, pf); \
                sum[r] = ref_step_pair(sum[r], &x[r][i].d, &x[r][i + 1].d, y[i].d, y[i + 1].d, isum_pair(s0, m0, s1, m1)); \
            }                                                                                         \
        if (i < nb)                                                                                   \
            KQ_ROWS for (int r = 0; r < nr; r++) {                                                    \
                __m256i m;                                                                            \
                const __m512i si = block_fn(&x[r][i], &y[i], &m, pf);                                 \
                sum[r] = kq_ref_step(sum[r], kq_f16(x[r][i].d), kq_f16(x[r][i].dmin), y[i].d, _mm512_reduce_add_epi32(si), \
                                     kq_hsum_i32x8(m));                                               \
            }                                                                                         \
        KQ_ROWS for (int r = 0; r < nr; r++) *s[r] = sum[r];                                          \
    }                                                                                                 \
    KQ_ROWS_BODIES(dot_##name)
DOT_K4(q4_K, sb_block_q4_K, q4k_block)
DOT_K4(q5_K, sb_block_q5_K, q5k_block)
KQ_PF_VARIANTS(dot_q4_K_1, sb_kq_dot_q4_K_q8_K_avx512)
KQ_PF_VARIANTS(dot_q5_K_1, sb_kq_dot_q5_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q4_K_r2, sb_kq_dot2_q4_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q4_K_r4, sb_kq_dot4_q4_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q5_K_r2, sb_kq_dot2_q5_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q5_K_r4, sb_kq_dot4_q5_K_q8_K_avx512)

/* ==== Q6_K ================================================================== */

/* One Q6_K super-block's integer sum against Q8_K, its −32 offset
 * (32 · Σ scale · bsum) taken off: 16 lanes adding up to isum. */
KQ_INLINE __m512i q6k_block(const sb_block_q6_K *x, const sb_block_q8_K *y, size_t pf) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(0x30);
    const __m512i sh01 = halves_epi16(4, 2), sh23 = halves_epi16(0, 2);   /* qh bits 2p..2p+1 to bits 4..5 */
    kq512_prefetch(x, sizeof *x, pf);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    const __m512i offset = _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums)), 5));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        /* ql[0..63] low nibbles are elements 0..63, high nibbles 64..127 */
        const __m512i l = _mm512_loadu_si512(x->ql + 64 * h);
        const __m512i hb = load_32_twice(x->qh + 32 * h);
        const __m512i h01 = _mm512_sllv_epi16(hb, sh01), h23 = _mm512_srlv_epi16(hb, sh23);
        const __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(h01, m2));
        const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(h23, m2));
        sumi = step(sumi, q01, y->qs + 128 * h, spread_scales(sc, 8 * h, 3));
        sumi = step(sumi, q23, y->qs + 128 * h + 64, spread_scales(sc, 8 * h + 4, 3));
    }
    return _mm512_sub_epi32(sumi, offset);
}

KQ_INLINE void dot_q6_K(int n, int nr, float *const *s, const void *const *vx, const void *vy, size_t pf) {
    const sb_block_q6_K *x[KQ_ROWS_MAX];
    const sb_block_q8_K *y = vy;
    const int nb = n / SB_QK_K;
    float sum[KQ_ROWS_MAX];
    KQ_ROWS for (int r = 0; r < nr; r++) {
        x[r] = vx[r];
        sum[r] = 0;
    }
    int i = 0;
    for (; i + 1 < nb; i += 2)     /* two blocks' sums through one reduction tree: lanes isum0, isum1 */
        KQ_ROWS for (int r = 0; r < nr; r++) {
            const __m512i s0 = q6k_block(&x[r][i], &y[i], pf), s1 = q6k_block(&x[r][i + 1], &y[i + 1], pf);
            const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(s0), _mm512_extracti64x4_epi64(s0, 1));
            const __m256i b = _mm256_add_epi32(_mm512_castsi512_si256(s1), _mm512_extracti64x4_epi64(s1, 1));
            const __m256i h = _mm256_hadd_epi32(a, b), h2 = _mm256_hadd_epi32(h, h);
            const __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h2), _mm256_extracti128_si256(h2, 1));
            sum[r] += (kq_f16(x[r][i].d) * y[i].d) * (float)_mm_cvtsi128_si32(q);
            sum[r] += (kq_f16(x[r][i + 1].d) * y[i + 1].d) * (float)_mm_extract_epi32(q, 1);
        }
    if (i < nb)
        KQ_ROWS for (int r = 0; r < nr; r++)
            sum[r] += (kq_f16(x[r][i].d) * y[i].d) * (float)_mm512_reduce_add_epi32(q6k_block(&x[r][i], &y[i], pf));
    KQ_ROWS for (int r = 0; r < nr; r++) *s[r] = sum[r];
}
KQ_ROWS_BODIES(dot_q6_K)
KQ_PF_VARIANTS(dot_q6_K_1, sb_kq_dot_q6_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q6_K_r2, sb_kq_dot2_q6_K_q8_K_avx512)
KQ_PF_VARIANTS_R(dot_q6_K_r4, sb_kq_dot4_q6_K_q8_K_avx512)
