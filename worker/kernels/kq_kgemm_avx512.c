/* kq_kgemm_avx512.c - tiled AVX-512 kernels (sb_gemm_fn) for the k-quants
 * (Q2_K … Q6_K) with Q8_K activations.
 *
 * A tile is R = 2 weight rows × C = 4 activation rows. Per super-block each
 * row's scales are unpacked once and each 64-quant step decoded once for the
 * four columns; each activation step is loaded once for both rows. The inner
 * operation is that of the 1×1 kernels in kq_kquants_avx512.c (vpmaddubsw,
 * then VNNI vpdpwssd with the 16-bit sub-block scales), so the integer sum
 * of every super-block is the same; mins and offsets come from Q8_K's bsums
 * as there. Only the float summation order differs (the min term goes into
 * the same accumulator instead of a second one).
 *
 * Steps: j = 0..3 covers elements 64j..64j+63 of the super-block. For
 * 32-element sub-blocks (Q4_K, Q5_K) that is sub-blocks 2j, 2j+1; for the
 * 16-element ones (Q2_K, Q3_K, Q6_K) sub-blocks 4j..4j+3.
 */
#include "worker/kernels/kq_kstep_avx512.h"

#define TILE_R 2
#define TILE_C 4

/* What one weight row needs for a super-block, whatever the columns. */
typedef struct {
    __m512i sc;         /* int16 sub-block scales (low 256 or 128 bits) */
    __m256i mins;       /* int16 per bsum: the min (Q2/Q4/Q5) or scale (Q3/Q6) each bsum pairs with */
    float d, dmin;
} row_prep;

KQ_INLINE row_prep prep_row(int wt, const uint8_t *blk) {
    row_prep p;
    switch (wt) {
    case W_Q2_K: {
        const sb_block_q2_K *b = (const sb_block_q2_K *)blk;
        const __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
        p.sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0xF))));
        p.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
        p.d = kq_f16(b->d);
        p.dmin = kq_f16(b->dmin);
        break;
    }
    case W_Q3_K: {
        const sb_block_q3_K *b = (const sb_block_q3_K *)blk;
        const __m256i sc16 = _mm256_cvtepi8_epi16(kq_scales_q3_128(b->scales));
        p.sc = _mm512_castsi256_si512(sc16);
        p.mins = sc16;
        p.d = kq_f16(b->d);
        p.dmin = 0;
        break;
    }
    case W_Q4_K:
    case W_Q5_K: {
        const sb_block_q4_K *b = (const sb_block_q4_K *)blk;   /* d, dmin, scales: same offsets in Q5_K */
        const __m128i sm = kq_scales_k4_128(b);
        p.sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        p.mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
        p.d = kq_f16(b->d);
        p.dmin = kq_f16(b->dmin);
        break;
    }
    default: {
        const sb_block_q6_K *b = (const sb_block_q6_K *)blk;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        p.sc = _mm512_castsi256_si512(sc16);
        p.mins = sc16;
        p.d = kq_f16(b->d);
        p.dmin = 0;
        break;
    }
    }
    return p;
}

/* Quants 64j..64j+63 of a super-block as unsigned bytes, and the int16
 * scale of each pair of them: 16-element sub-blocks (Q2_K, Q3_K, Q6_K) give
 * four scales per step, 32-element ones (Q4_K, Q5_K) two. */
KQ_INLINE __m512i decode_step(int wt, const uint8_t *blk, int j, const row_prep *p, __m512i *scale) {
    *scale = wt == W_Q4_K || wt == W_Q5_K ? spread_scales(p->sc, 2 * j, 4) : spread_scales(p->sc, 4 * j, 3);
    return kq_kstep_decode(wt, blk, j);
}

KQ_INLINE void tile_k(int wt, int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                      float *s, size_t ldc) {
    __m512 acc[TILE_R][TILE_C];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    const size_t xs = kq_block_bytes(wt);
    for (int i = 0; i < n / SB_QK_K; i++) {
        row_prep p[TILE_R];
        const uint8_t *xb[TILE_R];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            xb[r] = x + (size_t)r * bx + (size_t)i * xs;
            p[r] = prep_row(wt, xb[r]);
        }
        __m512i sumi[TILE_R][TILE_C];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) sumi[r][c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i q[TILE_R], sc[TILE_R];
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) q[r] = decode_step(wt, xb[r], j, &p[r], &sc[r]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const sb_block_q8_K *yb = (const sb_block_q8_K *)(y + (size_t)c * by) + i;
                const __m512i yv = _mm512_loadu_si512(yb->qs + 64 * j);
#pragma GCC unroll 2
                for (int r = 0; r < R; r++)
                    sumi[r][c] = _mm512_dpwssd_epi32(sumi[r][c], _mm512_maddubs_epi16(q[r], yv), sc[r]);
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const sb_block_q8_K *yb = (const sb_block_q8_K *)(y + (size_t)c * by) + i;
            const __m256i bsums = _mm256_loadu_si256((const __m256i *)yb->bsums);
            const float dy = yb->d;
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                const __m256i m = _mm256_madd_epi16(p[r].mins, bsums);
                if (wt == W_Q3_K || wt == W_Q6_K) {
                    /* offsets of 4 (Q3_K) or 32 (Q6_K) times the sub-block scales */
                    const __m256i off = _mm256_slli_epi32(m, wt == W_Q3_K ? 2 : 5);
                    const __m512i t = _mm512_sub_epi32(sumi[r][c], _mm512_zextsi256_si512(off));
                    acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[r].d * dy), _mm512_cvtepi32_ps(t), acc[r][c]);
                } else {
                    acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(dy * p[r].d), _mm512_cvtepi32_ps(sumi[r][c]), acc[r][c]);
                    acc[r][c] = _mm512_fnmadd_ps(_mm512_set1_ps(dy * p[r].dmin),
                                                 _mm512_cvtepi32_ps(_mm512_zextsi256_si512(m)), acc[r][c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) s[(size_t)c * ldc + r] = _mm512_reduce_add_ps(acc[r][c]);
}

#define TILE_FN(t, wt)                                                                                \
    KQ_INLINE void tile_##t(int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by, \
                            float *s, size_t ldc) {                                                   \
        tile_k(wt, n, R, C, x, bx, y, by, s, ldc);                                                    \
    }                                                                                                 \
    void sb_kq_gemm_##t##_q8_K_tile_avx512(KQ_GEMM_ARGS) { KQ_GEMM_BODY(tile_##t, TILE_R, TILE_C) }

TILE_FN(q2_K, W_Q2_K)
TILE_FN(q3_K, W_Q3_K)
TILE_FN(q4_K, W_Q4_K)
TILE_FN(q5_K, W_Q5_K)
TILE_FN(q6_K, W_Q6_K)
