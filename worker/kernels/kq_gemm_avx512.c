/* kq_gemm_avx512.c - tiled AVX-512 VNNI kernels (sb_gemm_fn) for the legacy
 * 32-element quants with Q8_0 activations: Q4_0, Q5_0, Q8_0.
 *
 * A tile is R weight rows × C activation rows (4×4 here). Per pair of blocks
 * (64 elements, one register) each weight row is decoded once into unsigned
 * quants u = q + K (K = 8, 16 or 128) and each activation row loaded once;
 * then every (row, column) pair costs one vpdpbusd, one conversion and one
 * multiply-add:
 *     Σ q·y = Σ u·y − K·Σ y,
 * where −K·Σy is the column's accumulator start value, computed once per
 * column. The integers and the scale products dx·dy are those of the 1×1
 * kernels in kq_avx512.c; only the float summation order differs.
 */
#include "kq_x86.h"

#define KQ_INLINE static inline __attribute__((always_inline))
#define TILE_R 4
#define TILE_C 4

/* 32 bytes of two consecutive blocks' quants in one register (two) or the
 * first block's alone with the upper half zero (the odd last block). */
KQ_INLINE __m512i load_pair(const void *a, const void *b, int two) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)a);
    return two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)b), 1)
               : _mm512_zextsi256_si512(lo);
}

/* [d0 ×8 | d1 ×8] (or [d0 ×8 | 0 ×8]): a block's scale against its lanes. */
KQ_INLINE __m512 scale_pair(sb_fp16 d0, sb_fp16 d1, int two) {
    return _mm512_insertf32x8(_mm512_set1_ps(kq_f16(d0)), _mm256_set1_ps(two ? kq_f16(d1) : 0.0f), 1);
}

/* 16 nibble bytes of each block -> [lo0 hi0 lo1 hi1]: the element order of
 * two consecutive 32-element blocks. */
KQ_INLINE __m512i nibbles_pair(const uint8_t *qs0, const uint8_t *qs1, int two) {
    const __m128i a = _mm_loadu_si128((const __m128i *)qs0);
    const __m128i b = two ? _mm_loadu_si128((const __m128i *)qs1) : _mm_setzero_si128();
    const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(ab), _mm256_srli_epi16(ab, 4), 1);
    return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

enum { W_Q4_0, W_Q5_0, W_Q8_0 };

/* Unsigned quants (q + K) of weight blocks b and b+1, and their scales. */
KQ_INLINE __m512i decode_pair(int wt, const uint8_t *blk, int two, __m512 *d) {
    if (wt == W_Q4_0) {
        const sb_block_q4_0 *b = (const sb_block_q4_0 *)blk;
        *d = scale_pair(b[0].d, two ? b[1].d : 0, two);
        return nibbles_pair(b[0].qs, b[1].qs, two);
    }
    if (wt == W_Q5_0) {
        const sb_block_q5_0 *b = (const sb_block_q5_0 *)blk;
        uint32_t h0, h1 = 0;
        memcpy(&h0, b[0].qh, 4);
        if (two) memcpy(&h1, b[1].qh, 4);
        *d = scale_pair(b[0].d, two ? b[1].d : 0, two);
        const __mmask64 hi = (__mmask64)h0 | ((__mmask64)h1 << 32);
        return _mm512_or_si512(nibbles_pair(b[0].qs, b[1].qs, two), _mm512_maskz_mov_epi8(hi, _mm512_set1_epi8(0x10)));
    }
    const sb_block_q8_0 *b = (const sb_block_q8_0 *)blk;
    *d = scale_pair(b[0].d, two ? b[1].d : 0, two);
    return _mm512_xor_si512(load_pair(b[0].qs, b[1].qs, two), _mm512_set1_epi8((char)0x80));
}

KQ_INLINE int offset_k(int wt) { return wt == W_Q4_0 ? 8 : wt == W_Q5_0 ? 16 : 128; }

KQ_INLINE size_t block_bytes(int wt) {
    return wt == W_Q4_0 ? sizeof(sb_block_q4_0) : wt == W_Q5_0 ? sizeof(sb_block_q5_0) : sizeof(sb_block_q8_0);
}

/* One pair of blocks (i, i+1) for every pair of the tile. */
KQ_INLINE void tile_step(int wt, int R, int C, int i, int two, const uint8_t *x, size_t bx,
                         const uint8_t *y, size_t by, __m512 acc[TILE_R][TILE_C]) {
    __m512i u[TILE_R];
    __m512 dx[TILE_R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) u[r] = decode_pair(wt, x + (size_t)r * bx + (size_t)i * block_bytes(wt), two, &dx[r]);
    const __m512i k = _mm512_set1_epi8((char)offset_k(wt));
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const sb_block_q8_0 *yb = (const sb_block_q8_0 *)(y + (size_t)c * by) + i;
        const __m512i yv = load_pair(yb[0].qs, yb[1].qs, two);
        const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k, yv));
        const __m512 dy = scale_pair(yb[0].d, two ? yb[1].d : 0, two);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512i p = _mm512_dpbusd_epi32(start, u[r], yv);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dx[r], dy), acc[r][c]);
        }
    }
}

KQ_INLINE void tile_legacy(int wt, int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                           float *s, size_t ldc) {
    __m512 acc[TILE_R][TILE_C];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    const int nb = n / 32;
    int i = 0;
    for (; i + 2 <= nb; i += 2) tile_step(wt, R, C, i, 1, x, bx, y, by, acc);
    if (i < nb) tile_step(wt, R, C, i, 0, x, bx, y, by, acc);
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) s[(size_t)c * ldc + r] = _mm512_reduce_add_ps(acc[r][c]);
}

KQ_INLINE void tile_q4_0(int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by, float *s, size_t ldc) {
    tile_legacy(W_Q4_0, n, R, C, x, bx, y, by, s, ldc);
}
KQ_INLINE void tile_q5_0(int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by, float *s, size_t ldc) {
    tile_legacy(W_Q5_0, n, R, C, x, bx, y, by, s, ldc);
}
KQ_INLINE void tile_q8_0(int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by, float *s, size_t ldc) {
    tile_legacy(W_Q8_0, n, R, C, x, bx, y, by, s, ldc);
}

void sb_kq_gemm_q4_0_q8_0_avx512(KQ_GEMM_ARGS) { KQ_GEMM_BODY(tile_q4_0, TILE_R, TILE_C) }
void sb_kq_gemm_q5_0_q8_0_avx512(KQ_GEMM_ARGS) { KQ_GEMM_BODY(tile_q5_0, TILE_R, TILE_C) }
void sb_kq_gemm_q8_0_q8_0_avx512(KQ_GEMM_ARGS) { KQ_GEMM_BODY(tile_q8_0, TILE_R, TILE_C) }
