/* kq_dotn_avx512.c - AVX-512 vec_dotn: one weight row against up to 16
 * activation rows (one decode step of up to 16 sequences), see sb_kq.h.
 *
 * Per block the weight bits are loaded and unpacked once (quants, sub-block
 * scales, the min/scale vector paired with the bsums, d and dmin), then each
 * token runs the tail of its level's 1×1 kernel on them: the same vpmaddubsw
 * + vpdpwssd per 64-quant step (kq_kquants_avx512.c), the same per-block
 * float step and the same final reduction, with one float accumulator (two
 * where the 1×1 kernel has two) per token. Integer sums are exact (and
 * wrap-around arithmetic is associative), so the order in which a token's
 * integer products are added cannot change them; the float operations are
 * the 1×1 kernel's, one for one, in its order. So each result equals that
 * vec_dot bit for bit (tests/test_dotn.c checks it, every nt, odd strides).
 *
 * The accumulators of 16 tokens do not fit in registers beside the decoded
 * block: they live in small arrays (L1), one load and store per token and
 * block, which is cheap next to the four multiply-add steps.
 */
#include "worker/kernels/kq_kstep_avx512.h"

#define NT_MAX SB_KQ_DOTN_MAX

static inline const void *tok_row(const void *y, size_t y_stride, int t) {
    return (const uint8_t *)y + (size_t)t * y_stride;
}

/* ==== k-quants (Q2_K … Q6_K) ================================================ */

/* What one super-block of the weight row gives every token. */
typedef struct {
    __m512i q[4];       /* quants of steps j = 0..3 (64 each), unsigned */
    __m512i sc[4];      /* their int16 sub-block scales, spread over the pair lanes */
    __m256i pair16;     /* int16 per bsum: the min (Q2/Q4/Q5) or the scale (Q3/Q6) */
    float d, dmin;
} kblock;

KQ_INLINE void kblock_decode(int wt, const uint8_t *blk, kblock *b) {
    __m512i sc;
    int shift;
    switch (wt) {
    case W_Q2_K: {
        const sb_block_q2_K *x = (const sb_block_q2_K *)blk;
        const __m128i packed = _mm_loadu_si128((const __m128i *)x->scales);
        sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0xF))));
        b->pair16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
        b->d = kq_f16(x->d);
        b->dmin = kq_f16(x->dmin);
        shift = 3;
        break;
    }
    case W_Q3_K: {
        const sb_block_q3_K *x = (const sb_block_q3_K *)blk;
        b->pair16 = _mm256_cvtepi8_epi16(kq_scales_q3_128(x->scales));
        sc = _mm512_castsi256_si512(b->pair16);
        b->d = kq_f16(x->d);
        b->dmin = 0;
        shift = 3;
        break;
    }
    case W_Q4_K:
    case W_Q5_K: {
        const sb_block_q4_K *x = (const sb_block_q4_K *)blk;    /* d, dmin, scales: same offsets in Q5_K */
        const __m128i sm = kq_scales_k4_128(x);
        sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        b->pair16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
        b->d = kq_f16(x->d);
        b->dmin = kq_f16(x->dmin);
        shift = 4;
        break;
    }
    default: {
        const sb_block_q6_K *x = (const sb_block_q6_K *)blk;
        b->pair16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
        sc = _mm512_castsi256_si512(b->pair16);
        b->d = kq_f16(x->d);
        b->dmin = 0;
        shift = 3;
        break;
    }
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        b->q[j] = kq_kstep_decode(wt, blk, j);
        b->sc[j] = spread_scales(sc, shift == 4 ? 2 * j : 4 * j, shift);
    }
}

/* Q3_K / Q6_K subtract their offset (scale · bsum · 4 or 32) from the
 * integer sum; Q2_K / Q4_K / Q5_K keep a second, min accumulator. */
KQ_INLINE int has_offset(int wt) { return wt == W_Q3_K || wt == W_Q6_K; }

KQ_INLINE void dotn_k(int wt, int n, int nt, float *s, size_t s_stride, const void *vx, const void *vy, size_t y_stride) {
    const uint8_t *x = vx;
    const size_t bb = kq_block_bytes(wt);
    __m512 acc[NT_MAX];
    __m256 acc_min[NT_MAX];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps();
        acc_min[t] = _mm256_setzero_ps();
    }
    for (int i = 0; i < n / SB_QK_K; i++) {
        kblock b;
        kblock_decode(wt, x + (size_t)i * bb, &b);
        for (int t = 0; t < nt; t++) {
            const sb_block_q8_K *y = (const sb_block_q8_K *)tok_row(vy, y_stride, t) + i;
            __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(b.q[j], _mm512_loadu_si512(y->qs + 64 * j)), b.sc[j]);
            const __m256i m = _mm256_madd_epi16(b.pair16, _mm256_loadu_si256((const __m256i *)y->bsums));
            const float dy = y->d;
            if (has_offset(wt)) {
                sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(m, wt == W_Q3_K ? 2 : 5)));
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(b.d * dy), _mm512_cvtepi32_ps(sumi), acc[t]);
            } else {
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(b.d * dy), _mm512_cvtepi32_ps(sumi), acc[t]);
                acc_min[t] = _mm256_fmadd_ps(_mm256_set1_ps(b.dmin * dy), _mm256_cvtepi32_ps(m), acc_min[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        s[(size_t)t * s_stride] = has_offset(wt) ? _mm512_reduce_add_ps(acc[t])
                                                 : _mm512_reduce_add_ps(acc[t]) - kq_hsum_f32x8(acc_min[t]);
}

#define DOTN_K(name, wt)                                                                              \
    void sb_kq_dotn_##name##_q8_K_avx512(int n, int nt, float *s, size_t s_stride, const void *x,    \
                                         const void *y, size_t y_stride) {                           \
        dotn_k(wt, n, nt, s, s_stride, x, y, y_stride);                                               \
    }
DOTN_K(q2_K, W_Q2_K)
DOTN_K(q3_K, W_Q3_K)
/* Q4_K, Q5_K, Q6_K: kq_dotn_il_avx512.c (their vec_dot ends each block as
 * the reference kernel does, one float step per token and block). */
