/* kq_gemm_avx512.c - tiled AVX-512 VNNI kernels (sb_gemm_fn) for the legacy
 * 32-element quants with Q8_0 activations: Q4_0, Q5_0, Q8_0.
 *
 * Up to 7 tokens: register tiles of R weight rows × C activation rows (4×4). Per pair of blocks
 * (64 elements, one register) each weight row is decoded once into unsigned
 * quants u = q + K (K = 8, 16 or 128) and each activation row loaded once;
 * then every (row, column) pair costs one vpdpbusd, one conversion and one
 * multiply-add:
 *     Σ q·y = Σ u·y − K·Σ y,
 * where −K·Σy is the column's accumulator start value, computed once per
 * column. The integers and the scale products dx·dy are those of the 1×1
 * kernels in kq_avx512.c; only the float summation order differs.
 */
#include "worker/kernels/kq_kstep_avx512.h"

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

/* Unsigned quants (q + K, kq_kstep_avx512.h) of weight blocks b and b+1,
 * and their scales. Without the second block the upper half repeats the
 * first: every use meets it with zero activations or drops it. */
KQ_INLINE __m512i decode_pair(int wt, const uint8_t *blk, int two, __m512 *d) {
    sb_fp16 d0, d1 = 0;     /* every block type's first field */
    memcpy(&d0, blk, sizeof d0);
    if (two) memcpy(&d1, blk + kq_block_bytes(wt), sizeof d1);
    *d = scale_pair(d0, d1, two);
    return legacy_unsigned_2x32(wt, blk, 0, two);
}

KQ_INLINE int offset_k(int wt) { return 1 << legacy_bias_shift(wt); }

/* One pair of blocks (i, i+1) for every pair of the tile. */
KQ_INLINE void tile_step(int wt, int R, int C, int i, int two, const uint8_t *x, size_t bx,
                         const uint8_t *y, size_t by, __m512 acc[TILE_R][TILE_C]) {
    __m512i u[TILE_R];
    __m512 dx[TILE_R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) u[r] = decode_pair(wt, x + (size_t)r * bx + (size_t)i * kq_block_bytes(wt), two, &dx[r]);
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
    tile_legacy(L_Q4_0, n, R, C, x, bx, y, by, s, ldc);
}
KQ_INLINE void tile_q5_0(int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by, float *s, size_t ldc) {
    tile_legacy(L_Q5_0, n, R, C, x, bx, y, by, s, ldc);
}
KQ_INLINE void tile_q8_0(int n, int R, int C, const uint8_t *x, size_t bx, const uint8_t *y, size_t by, float *s, size_t ldc) {
    tile_legacy(L_Q8_0, n, R, C, x, bx, y, by, s, ldc);
}

/* ==== packed panels (8 or more tokens) ======================================
 * As for the k-quants (kq_kpack_avx512.c): 16 weight rows interleaved so that
 * a register holds 4 consecutive unsigned quants of each row, one vpdpbusd
 * against 4 broadcast activation bytes per 64 multiply-adds, lane r = row r.
 * Per block and column the accumulator starts at −K·Σy (computed once per
 * column and block for all panels of a call), then 8 vpdpbusd, and
 * acc += (dx·dy)·int: the integers, products and float steps of the 1×1
 * kernels, so each result equals vec_dot's bit for bit (one multiply more
 * per block than an FMA, the price of batch-invariant numbers). */

#define PANEL 16
#define PACK_B 64               /* blocks per packed chunk: 36 KB */
#define COLS 8
#define COL_GROUP 128           /* columns whose sums and scales are precomputed at once */
#define PACK_MIN_COLS 8

typedef struct {
    uint8_t q[8][PANEL][4];     /* group g: unsigned quants 4g..4g+3 of each row */
    float d[PANEL];
} panel_blk;

typedef int32_t __attribute__((may_alias, aligned(1))) i32_any;
/* t += Σ4 u8(q)·s8(*p broadcast), with an embedded {1to16} broadcast. */
static inline __m512i dpbusd_bcast(__m512i t, __m512i q, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(t) : "v"(q), "m"(*(const i32_any *)p));
    return t;
}

/* Blocks i0..i0+nbk-1 of rows x[0..nr) into panel blocks (missing rows zero). */
KQ_INLINE void pack_panel(int wt, const uint8_t *x, size_t bx, int nr, int i0, int nbk, panel_blk *out) {
    const size_t bs = kq_block_bytes(wt);
    for (int i = 0; i < nbk; i += 2) {
        const int two = i + 1 < nbk;
        __m512i rows[PANEL], cols[PANEL];
        for (int r = 0; r < PANEL; r++) {
            if (r < nr) {
                __m512 d;
                kq_prefetch_ahead(x + (size_t)r * bx + (size_t)(i0 + i) * bs, 2 * bs);     /* the weights stream from DRAM */
                rows[r] = decode_pair(wt, x + (size_t)r * bx + (size_t)(i0 + i) * bs, two, &d);
                out[i].d[r] = _mm512_cvtss_f32(d);
                if (two) out[i + 1].d[r] = _mm512_cvtss_f32(_mm512_shuffle_f32x4(d, d, 2));
            } else {
                rows[r] = _mm512_setzero_si512();
                out[i].d[r] = 0;
                if (two) out[i + 1].d[r] = 0;
            }
        }
        transpose16(rows, cols);
        for (int k = 0; k < 8; k++) _mm512_storeu_si512(out[i].q[k], cols[k]);
        if (two)
            for (int k = 0; k < 8; k++) _mm512_storeu_si512(out[i + 1].q[k], cols[8 + k]);
    }
}

/* C columns against nbk packed blocks; 16 results per column stored at
 * s + c·ldc under mask m, the sums going on from what is there when add
 * (the blocks before i0). start[c][b] = −K·Σy, dy[c][b] = the activation
 * scales. Each lane runs the 1×1 kernel's float step, sum += (dx·dy)·isum
 * in block order with no FMA, so a token's result is its vec_dot's bit for
 * bit whatever else is in the batch: a prompt's numbers are a decode's. */
KQ_INLINE void micro(int C, const panel_blk *pan, int nbk, const sb_block_q8_0 *const *yc,
                     const int32_t (*start)[PACK_B], const float (*dy)[PACK_B], float *s, size_t ldc,
                     __mmask16 m, int add) {
    __m512 acc[COLS];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = add ? _mm512_maskz_loadu_ps(m, s + (size_t)c * ldc) : _mm512_setzero_ps();
    for (int b = 0; b < nbk; b++) {
        const panel_blk *p = &pan[b];
        __m512i t[COLS];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) t[c] = _mm512_set1_epi32(start[c][b]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i q = _mm512_loadu_si512(p->q[g]);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) t[c] = dpbusd_bcast(t[c], q, yc[c][b].qs + 4 * g);
        }
        const __m512 dx = _mm512_loadu_ps(p->d);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dx, _mm512_set1_ps(dy[c][b])), _mm512_cvtepi32_ps(t[c])));
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(s + (size_t)c * ldc, m, acc[c]);
}

/* −K·Σ y and dy of one activation block. */
static inline void block_sums(const sb_block_q8_0 *yb, int k, int32_t *start, float *dy) {
    /* Σ (y + 128) by vpsadbw against 0, then remove the 32·128 */
    const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)yb->qs), _mm256_set1_epi8((char)0x80));
    const __m256i sad = _mm256_sad_epu8(u, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    const int sum = (int)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
    *start = -k * sum;
    *dy = kq_f16(yb->d);
}

KQ_INLINE void gemm_packed(int wt, int n, int nr, int nc, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                           float *s, size_t ldc) {
    _Alignas(64) panel_blk pan[PACK_B];
    int32_t start[COL_GROUP][PACK_B];
    float dy[COL_GROUP][PACK_B];
    const int nb = n / 32, k = offset_k(wt);
    for (int c0 = 0; c0 < nc; c0 += COL_GROUP) {
        const int ncg = nc - c0 < COL_GROUP ? nc - c0 : COL_GROUP;
        for (int i0 = 0; i0 < nb; i0 += PACK_B) {
            const int nbk = nb - i0 < PACK_B ? nb - i0 : PACK_B;
            const sb_block_q8_0 *yc[COL_GROUP];
            for (int c = 0; c < ncg; c++) {
                yc[c] = (const sb_block_q8_0 *)(y + (size_t)(c0 + c) * by) + i0;
                for (int b = 0; b < nbk; b++) block_sums(&yc[c][b], k, &start[c][b], &dy[c][b]);
            }
            for (int r0 = 0; r0 < nr; r0 += PANEL) {
                const int pr = nr - r0 < PANEL ? nr - r0 : PANEL;
                const __mmask16 m = (__mmask16)(pr == PANEL ? 0xFFFF : (1u << pr) - 1);
                pack_panel(wt, x + (size_t)r0 * bx, bx, pr, i0, nbk, pan);
                for (int c = 0; c < ncg; c += COLS) {
                    const int cc = ncg - c < COLS ? ncg - c : COLS;
                    float *so = s + (size_t)(c0 + c) * ldc + r0;
                    const int add = i0 > 0;
                    switch (cc) {
                    case 8: micro(8, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    case 7: micro(7, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    case 6: micro(6, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    case 5: micro(5, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    case 4: micro(4, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    case 3: micro(3, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    case 2: micro(2, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    default: micro(1, pan, nbk, yc + c, start + c, dy + c, so, ldc, m, add); break;
                    }
                }
            }
        }
    }
}

#define GEMM_FN(t, wt)                                                                  \
    void sb_kq_gemm_##t##_q8_0_avx512(KQ_GEMM_ARGS) {                                   \
        if (nc < PACK_MIN_COLS) {                                                       \
            KQ_GEMM_BODY(tile_##t, TILE_R, TILE_C)                                      \
            return;                                                                     \
        }                                                                               \
        gemm_packed(wt, n, nr, nc, x, bx, y, by, s, ldc);                               \
    }

GEMM_FN(q4_0, L_Q4_0)
GEMM_FN(q5_0, L_Q5_0)
GEMM_FN(q8_0, L_Q8_0)
