/* kq_dotn_il_avx512.c - AVX-512 multi-token dots of Q4_K, Q5_K, Q6_K and
 * of Q4_0, Q5_0, Q8_0 weights, one token per 32-bit lane (a decode step of
 * up to 16 sequences).
 *
 * Their vec_dot (kq_kquants_avx512.c) ends every super-block as the
 * reference kernel does: the block's exact integer sum isum (and min sum
 * summs), then sum += (d·dy)·isum − (dmin·dy)·summs in float. That step is
 * one value per token and block, so 16 tokens can share a register, lane t
 * being token t, and the float step runs for all of them in a handful of
 * vector instructions, lane for lane the scalar one: every result equals
 * vec_dot bit for bit (tests/test_dotn.c).
 *
 * The activations are interleaved first (sb_kq_q8_K_interleave: per 4-byte
 * group of a super-block, the 16 tokens' bytes side by side). Per group, 4
 * weight quants broadcast to every lane go through VNNI vpdpbusd against
 * that register: 64 multiply-adds per instruction, where vec_dot's
 * vpmaddubsw + vpdpwssd need two. A sub-block's sum is then multiplied by
 * its scale (vpmulld) into isum; the mins (Q4_K, Q5_K) and the −32 offset
 * of Q6_K come from the bsums through vpdpwssd. Integer sums are exact in
 * any order, so the grouping cannot change isum.
 *
 * Up to ROWS weight rows go through a pass together, so each activation
 * register loaded serves all of them (the interleaved activations of a
 * long row do not fit in L1).
 */
#include "worker/kernels/kq_kstep_avx512.h"

#define ROWS 4          /* weight rows per pass */
#define CHUNK 4         /* super-blocks interleaved at a time by the one-row API */

/* One super-block of one weight row, unpacked for the pass. */
typedef struct {
    uint32_t q[64];     /* quants 4g..4g+3, unsigned bytes (vpdpbusd's u8 operand) */
    int32_t sc[16];     /* sub-block scales (Q4_K/Q5_K: 8) */
    int32_t pair[8];    /* int16 pairs against bsums (2k, 2k+1): (min, min), or Q6_K's (−32·sc, −32·sc') */
    float d, dmin;
} __attribute__((aligned(64))) il_row;

KQ_INLINE void row_prep(int wt, const uint8_t *blk, il_row *p) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) _mm512_store_si512(p->q + 16 * j, kq_kstep_decode(wt, blk, j));
    if (wt == W_Q6_K) {
        const sb_block_q6_K *x = (const sb_block_q6_K *)blk;
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
        _mm512_store_si512(p->sc, _mm512_cvtepi8_epi32(sc8));
        _mm256_store_si256((__m256i *)p->pair, _mm256_mullo_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_set1_epi16(-32)));
        p->d = kq_f16(x->d);
        p->dmin = 0;
    } else {
        const sb_block_q4_K *x = (const sb_block_q4_K *)blk;    /* d, dmin, scales: same offsets in Q5_K */
        const __m128i sm = kq_scales_k4_128(x);                 /* bytes 0..7 scales, 8..15 mins */
        _mm512_store_si512(p->sc, _mm512_cvtepu8_epi32(sm));
        const __m256i mn = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));
        _mm256_store_si256((__m256i *)p->pair, _mm256_or_si256(mn, _mm256_slli_epi32(mn, 16)));
        p->d = kq_f16(x->d);
        p->dmin = kq_f16(x->dmin);
    }
}

/* nb super-blocks of R rows (x_stride bytes apart) against one interleaved
 * group of 16/G tokens (sb_kq.h: register v holds groups vG..vG+G-1 of
 * every token, lane t·G + h): sum[r] lane t·G += each block's float step
 * of row r, token t. With fewer tokens a register carries several groups,
 * so 8 tokens need half the instructions of 16. */
KQ_INLINE void il_pass(int wt, int G, int nb, int R, const uint8_t *x, size_t x_stride, const sb_kq_il_block *y,
                       __m512 *sum) {
    const size_t bb = kq_block_bytes(wt);
    const int nsub = wt == W_Q6_K ? 16 : 8;
    const int rps = 64 / nsub / G;      /* registers per sub-block: 8 or 4 (Q6_K) groups, G per register */
    for (int i = 0; i < nb; i++) {
        il_row p[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = x + (size_t)r * x_stride + (size_t)i * bb;
            kq_prefetch_ahead(blk, bb);     /* the weights stream from DRAM, as in vec_dot */
            row_prep(wt, blk, &p[r]);
        }
        const sb_kq_il_block *yb = &y[i];
        __m512i isum[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) isum[r] = _mm512_setzero_si512();
        /* two sub-blocks at a time: 2·R independent vpdpbusd chains */
        for (int sb = 0; sb < nsub; sb += 2) {
            __m512i acc[2][ROWS];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < rps; k++)
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    const int v = (sb + h) * rps + k;
                    const __m512i yv = _mm512_load_si512(yb->q[v]);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++)
                        acc[h][r] = _mm512_dpbusd_epi32(acc[h][r], bcast_g(&p[r].q[v * G], G), yv);
                }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                isum[r] = _mm512_add_epi32(_mm512_add_epi32(isum[r], _mm512_mullo_epi32(acc[0][r], _mm512_set1_epi32(p[r].sc[sb]))),
                                           _mm512_mullo_epi32(acc[1][r], _mm512_set1_epi32(p[r].sc[sb + 1])));
        }
        const __m512 dy = _mm512_load_ps(yb->d);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512i m = _mm512_setzero_si512();
            for (int u = 0; u < 8 / G; u++) m = _mm512_dpwssd_epi32(m, _mm512_load_si512(yb->bs[u]), bcast_g(&p[r].pair[u * G], G));
            m = sum_g(m, G);
            const __m512i is = sum_g(isum[r], G);
            const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(p[r].d), dy);
            if (wt == W_Q6_K) {
                sum[r] = _mm512_add_ps(sum[r], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_add_epi32(is, m))));
            } else {
                const __m512 ddmin = _mm512_mul_ps(_mm512_set1_ps(p[r].dmin), dy);
                sum[r] = _mm512_add_ps(sum[r], _mm512_sub_ps(_mm512_mul_ps(dd, _mm512_cvtepi32_ps(is)),
                                                             _mm512_mul_ps(ddmin, _mm512_cvtepi32_ps(m))));
            }
        }
    }
}

/* il_pass with constant G and R (the loops unroll per copy). */
KQ_INLINE void il_pass_rg(int wt, int G, int nb, int R, const uint8_t *x, size_t x_stride, const sb_kq_il_block *y,
                          __m512 *sum) {
#define IL_R(g)                                                                                         \
    switch (R) {                                                                                      \
    case 4: il_pass(wt, g, nb, 4, x, x_stride, y, sum); break;                                         \
    case 3: il_pass(wt, g, nb, 3, x, x_stride, y, sum); break;                                         \
    case 2: il_pass(wt, g, nb, 2, x, x_stride, y, sum); break;                                         \
    default: il_pass(wt, g, nb, 1, x, x_stride, y, sum); break;                                        \
    }
    if (G == 1) IL_R(1)
    else if (G == 2) IL_R(2)
    else IL_R(4)
#undef IL_R
}

KQ_INLINE void store_sums(int R, int nt, int G, const __m512 *sum, float *s, size_t s_stride) {
    float v[SB_KQ_IL_TOK];
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(v, sum[r]);
        for (int t = 0; t < nt; t++) s[(size_t)t * s_stride + r] = v[t * G];
    }
}

KQ_INLINE void dotn_il(int wt, int n, int nrows, int nt, float *s, size_t s_stride, const void *vx, size_t x_stride,
                       const void *yil) {
    const uint8_t *x = vx;
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        __m512 sum[ROWS] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
        const uint8_t *xr = x + (size_t)r0 * x_stride;
        const int R = nrows - r0 < ROWS ? nrows - r0 : ROWS, G = SB_KQ_IL_TOK / sb_kq_il_tokens(nt);
        il_pass_rg(wt, G, n / SB_QK_K, R, xr, x_stride, yil, sum);
        store_sums(R, nt, G, sum, s + r0, s_stride);
    }
}

/* vec_dot per token: too few tokens for the lanes to pay. */
static void dot_each(int n, int nt, float *s, size_t s_stride, const void *vx, const void *vy, size_t y_stride,
                     sb_vec_dot_fn dot) {
    for (int t = 0; t < nt; t++) dot(n, s + (size_t)t * s_stride, vx, (const uint8_t *)vy + (size_t)t * y_stride);
}

/* The one-row API (vec_dotn): the activations interleaved CHUNK blocks at
 * a time into a stack buffer. Costs the interleave per row: matmul.c
 * interleaves once per input and calls vec_dotn_il instead, or (fewer than
 * SB_KQ_IL_MIN_TOK tokens) comes here, where those go to vec_dot. */
KQ_INLINE void dotn_rows(int wt, int n, int nt, float *s, size_t s_stride, const void *vx, const void *vy,
                         size_t y_stride, sb_vec_dot_fn dot) {
    if (nt < SB_KQ_IL_MIN_TOK) {
        dot_each(n, nt, s, s_stride, vx, vy, y_stride, dot);
        return;
    }
    sb_kq_il_block buf[CHUNK] __attribute__((aligned(64)));
    __m512 sum = _mm512_setzero_ps();
    const int nb = n / SB_QK_K, G = SB_KQ_IL_TOK / sb_kq_il_tokens(nt);
    for (int i0 = 0; i0 < nb; i0 += CHUNK) {
        const int c = nb - i0 < CHUNK ? nb - i0 : CHUNK;
        sb_kq_q8_K_interleave(c, nt, (const sb_block_q8_K *)vy + i0, y_stride, buf);
        il_pass_rg(wt, G, c, 1, (const uint8_t *)vx + (size_t)i0 * kq_block_bytes(wt), 0, buf, &sum);
    }
    store_sums(1, nt, G, &sum, s, s_stride);
}

#define DOTN_IL(name, wt)                                                                              \
    void sb_kq_dotn_il_##name##_q8_K_avx512(KQ_DOTN_IL_ARGS) {                                       \
        dotn_il(wt, n, nrows, nt, s, s_stride, x, x_stride, yil);                                     \
    }                                                                                                 \
    void sb_kq_dotn_##name##_q8_K_avx512(KQ_DOTN_ARGS) {                                             \
        dotn_rows(wt, n, nt, s, s_stride, x, y, y_stride, sb_kq_dot_##name##_q8_K_avx512);            \
    }
DOTN_IL(q4_K, W_Q4_K)
DOTN_IL(q5_K, W_Q5_K)
DOTN_IL(q6_K, W_Q6_K)

/* ==== Q4_0 / Q5_0 / Q8_0 on interleaved Q8_0 ============================== */
/* Their vec_dot (kq_avx512.c) is the reference's: per 32-element block the
 * exact isum, then sum += (dx·dy)·isum in block order. As for the k-quants,
 * that step is one value per token and block, so lane t carries token t
 * (sb_kq_q8_0_prepare interleaves the activations): per block and row, 8/G
 * vpdpbusd of the weight's unsigned quants (q + bias, kq_kstep_avx512.h)
 * broadcast against the tokens' bytes, the bias taken off through Σy, and
 * the float step of all tokens in a few vector instructions, lane for lane
 * the scalar one: every result is vec_dot's, and the reference's, bit for
 * bit. The per-token work the older kernel did per block (two loads of
 * prepared scales and offsets, the scale product and accumulate for each
 * of 16 lanes of one token) is now shared by up to 16 tokens. */

#define CHUNK0 8        /* blocks interleaved at a time by the one-row API */

KQ_INLINE float legacy_d(int wt, const uint8_t *row, int b) {
    sb_fp16 d;      /* every block type's first field */
    memcpy(&d, row + (size_t)b * kq_block_bytes(wt), sizeof d);
    return kq_f16(d);
}

/* bcast_g of floats. */
KQ_INLINE __m512 bcast_g_ps(const float *p, int G) {
    switch (G) {
    case 1: return _mm512_set1_ps(p[0]);
    case 2: {
        double d;
        memcpy(&d, p, sizeof d);
        return _mm512_castpd_ps(_mm512_set1_pd(d));
    }
    default: return _mm512_broadcast_f32x4(_mm_load_ps(p));
    }
}

/* Two rows' accumulators, lane t·2 + h = token t's partial sum h → one
 * register, lane t·2 + j = row j's sum for token t. */
KQ_INLINE __m512i merge2(__m512i a, __m512i b) {
    const __m512i x = _mm512_mask_blend_epi32(0xAAAA, a, b), y = _mm512_mask_blend_epi32(0xAAAA, b, a);
    return _mm512_add_epi32(x, _mm512_shuffle_epi32(y, (_MM_PERM_ENUM)_MM_SHUFFLE(2, 3, 0, 1)));
}

/* G rows' accumulators (lane t·G + h: token t's partial sum h) → one
 * register, lane t·G + j = row j's whole sum for token t: the sum over a
 * token's G lanes (sum_g) done for G rows at once, so the float step after
 * it runs once per G rows on a full register. */
KQ_INLINE __m512i merge_g(const __m512i *a, int G) {
    if (G == 1) return a[0];
    const __m512i ab = merge2(a[0], a[1]);
    if (G == 2) return ab;
    const __m512i cd = merge2(a[2], a[3]);
    const __m512i x = _mm512_mask_blend_epi32(0xCCCC, ab, cd), y = _mm512_mask_blend_epi32(0xCCCC, cd, ab);
    return _mm512_add_epi32(x, _mm512_shuffle_epi32(y, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2)));
}

/* nb blocks of R rows (x_stride bytes apart) against one interleaved group
 * of 16/G tokens: msum[m] lane t·G + j += each block's float step of row
 * m·G + j, token t, in block order (rows past R: zeros, not stored). */
KQ_INLINE void il0_pass(int wt, int G, int nb, int R, const uint8_t *x, size_t x_stride, const sb_kq_p8_block *y,
                        __m512 *msum) {
    const size_t bb = kq_block_bytes(wt);
    const int nv = 8 / G, shift = legacy_bias_shift(wt), M = (R + G - 1) / G;
    for (int i = 0; i < nb; i += 2) {
        const int two = i + 1 < nb;
        uint32_t q[ROWS][16] __attribute__((aligned(64)));     /* blocks i, i+1 as unsigned quants */
        float dx[2][ROWS] __attribute__((aligned(64))) = { { 0 } };     /* their d, per block, row by row (0 past R) */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *row = x + (size_t)r * x_stride;
            kq_prefetch_ahead(row + (size_t)i * bb, 2 * bb);
            _mm512_store_si512(q[r], legacy_unsigned_2x32(wt, row, i, two ? i + 1 : i));
            dx[0][r] = legacy_d(wt, row, i);
            dx[1][r] = two ? legacy_d(wt, row, i + 1) : 0.0f;
        }
        /* Read q back from memory: the broadcasts below are then load-port
         * broadcasts; without this GCC keeps q in registers and extracts
         * every dword group with port-5 shuffles (160 of them a pass). */
        __asm__ volatile("" ::: "memory");
        for (int h = 0; h <= two; h++) {
            const sb_kq_p8_block *yb = &y[i + h];
            __m512i acc[ROWS];
#pragma GCC unroll 4
            for (int r = 0; r < M * G; r++) acc[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) {
                const __m512i yv = _mm512_load_si512(yb->q[v]);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) acc[r] = _mm512_dpbusd_epi32(acc[r], bcast_g(&q[r][8 * h + v * G], G), yv);
            }
            const __m512i bias = _mm512_slli_epi32(_mm512_load_si512(yb->s), (unsigned)shift);
            const __m512 dy = _mm512_load_ps(yb->d);
#pragma GCC unroll 4
            for (int m = 0; m < M; m++) {
                const __m512i is = _mm512_sub_epi32(merge_g(&acc[m * G], G), bias);
                const __m512 dd = _mm512_mul_ps(bcast_g_ps(&dx[h][m * G], G), dy);
                msum[m] = _mm512_add_ps(msum[m], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(is)));
            }
        }
    }
}

/* msum as il0_pass leaves it → s[t·s_stride + r] for R rows, nt tokens. */
KQ_INLINE void store_sums0(int R, int nt, int G, const __m512 *msum, float *s, size_t s_stride) {
    float v[SB_KQ_IL_TOK];
    for (int m = 0; m * G < R; m++) {
        _mm512_storeu_ps(v, msum[m]);
        for (int j = 0; j < G && m * G + j < R; j++)
            for (int t = 0; t < nt; t++) s[(size_t)t * s_stride + (size_t)(m * G + j)] = v[t * G + j];
    }
}

/* il0_pass with constant G and R (the loops unroll per copy). */
KQ_INLINE void il0_pass_rg(int wt, int G, int nb, int R, const uint8_t *x, size_t x_stride, const sb_kq_p8_block *y,
                           __m512 *sum) {
#define IL0_R(g)                                                                                        \
    switch (R) {                                                                                      \
    case 4: il0_pass(wt, g, nb, 4, x, x_stride, y, sum); break;                                        \
    case 3: il0_pass(wt, g, nb, 3, x, x_stride, y, sum); break;                                        \
    case 2: il0_pass(wt, g, nb, 2, x, x_stride, y, sum); break;                                        \
    default: il0_pass(wt, g, nb, 1, x, x_stride, y, sum); break;                                       \
    }
    if (G == 1) IL0_R(1)
    else if (G == 2) IL0_R(2)
    else IL0_R(4)
#undef IL0_R
}

KQ_INLINE void dotn_il0(int wt, int n, int nrows, int nt, float *s, size_t s_stride, const void *vx, size_t x_stride,
                        const void *yil) {
    const uint8_t *x = vx;
    const int G = SB_KQ_IL_TOK / sb_kq_il_tokens(nt);
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        __m512 sum[ROWS] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
        const int R = nrows - r0 < ROWS ? nrows - r0 : ROWS;
        il0_pass_rg(wt, G, n / 32, R, x + (size_t)r0 * x_stride, x_stride, yil, sum);
        store_sums0(R, nt, G, sum, s + r0, s_stride);
    }
}

/* The one-row API (vec_dotn): the activations interleaved CHUNK0 blocks at
 * a time into a stack buffer (matmul.c interleaves once per input and calls
 * vec_dotn_il instead). Fewer than SB_KQ_P8_MIN_TOK tokens take vec_dot. */
KQ_INLINE void dotn_rows0(int wt, int n, int nt, float *s, size_t s_stride, const void *vx, const void *vy,
                          size_t y_stride, sb_vec_dot_fn dot) {
    if (nt < SB_KQ_P8_MIN_TOK) {
        dot_each(n, nt, s, s_stride, vx, vy, y_stride, dot);
        return;
    }
    sb_kq_p8_block buf[CHUNK0] __attribute__((aligned(64)));
    __m512 sum = _mm512_setzero_ps();
    const int nb = n / 32, G = SB_KQ_IL_TOK / sb_kq_il_tokens(nt);
    for (int i0 = 0; i0 < nb; i0 += CHUNK0) {
        const int c = nb - i0 < CHUNK0 ? nb - i0 : CHUNK0;
        sb_kq_q8_0_prepare(32 * c, nt, (const sb_block_q8_0 *)vy + i0, y_stride, buf);
        il0_pass_rg(wt, G, c, 1, (const uint8_t *)vx + (size_t)i0 * kq_block_bytes(wt), 0, buf, &sum);
    }
    store_sums0(1, nt, G, &sum, s, s_stride);
}

#define DOTN_IL0(name, wt)                                                                             \
    void sb_kq_dotn_il_##name##_q8_0_avx512(KQ_DOTN_IL_ARGS) {                                       \
        dotn_il0(wt, n, nrows, nt, s, s_stride, x, x_stride, yil);                                    \
    }                                                                                                 \
    void sb_kq_dotn_##name##_q8_0_avx512(KQ_DOTN_ARGS) {                                             \
        dotn_rows0(wt, n, nt, s, s_stride, x, y, y_stride, sb_kq_dot_##name##_q8_0_avx512);           \
    }
DOTN_IL0(q4_0, L_Q4_0)
DOTN_IL0(q5_0, L_Q5_0)
DOTN_IL0(q8_0, L_Q8_0)
