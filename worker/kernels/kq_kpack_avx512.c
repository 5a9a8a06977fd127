/* kq_kpack_avx512.c - k-quant × Q8_K matrix products for many tokens, on
 * weight panels packed on the fly (sb_gemm_fn of Q2_K … Q6_K at AVX-512).
 *
 * The 1×1 and tiled kernels spend most instructions unpacking weights and
 * reducing lanes. Here 16 weight rows are interleaved so that one register
 * holds 4 consecutive quants of each of the 16 rows (a "group"); one VNNI
 * vpdpbusd against 4 activation bytes broadcast to all lanes then does 64
 * multiply-adds for 16 rows at once, with no horizontal sums at all: lane r
 * is row r, and the 16 results of a column are stored as one register.
 *
 * Per super-block, for each sub-block s and column c:
 *     t  = Σ_groups of s  vpdpbusd(q_group, broadcast(y_c[4g..4g+3]))   (exact)
 *     fsum_c += float(t) · sc_s                                           (cvt + fma)
 * then the mins (Q4_K, Q5_K; dmin scale) or the offsets of Q3_K / Q6_K
 * (same d scale) as vpdpwssd of 16-bit (min, min) pairs against the
 * broadcast (bsum, bsum) pairs of Q8_K into msum, and finally
 *     acc_c += (d·dy)·(fsum + msum) − (dmin·dy)·msum      (Q2_K: isum, below)
 * with the roundings of the 1×1 kernels' float step (ref_step of
 * kq_kquants_avx512.c: two products, their difference, then the add; no
 * FMA), so for Q4_K, Q5_K and Q6_K each result equals that vec_dot's bit
 * for bit as long as fsum is exact (below): a token's numbers do not
 * depend on whether it was a prompt's or a decode's.
 * The scale goes on in float because vpmulld is two port-0 uops (plus the
 * add) against one each for the convert and the FMA: on a kernel bound by
 * its vector ports, kq_bench's 64-token Q5_K gemm went from 152 to 164 G
 * multiply-adds/s (one thread). t·sc_s < 2^23 is
 * exact in float, and so is fsum while it stays below 2^24 (its integer
 * equals the 1×1 kernel's isum); beyond that it rounds, a relative 6e-8.
 * Q2_K's panels hold sc·q (below), so its super-block is one exact
 * integer chain, as in the 1×1 kernel.
 *
 * A panel is packed for PACK_SB super-blocks at a time with the SIMD decode
 * steps of the tiled kernels and a 16×16 dword transpose. GROUP panels
 * (64 rows) are packed together and every block of COLS columns passes all
 * of them while its activations sit in L1: one panel at a time streamed the
 * whole activation matrix (2.4 MB for 512 tokens of 4096) from L3 once per
 * 16 rows, and on two cores that traffic capped the kernel (Llama-3-8B
 * shape pp512, 2 threads, one run each: 34.4 → 42.5 t/s with both
 * changes). Panel results of later
 * chunks are added to the output. Fewer than PACK_MIN_COLS columns do not
 * repay the packing: those go to the tiled kernels (kq_kgemm_avx512.c).
 */
#include "worker/kernels/kq_kstep_avx512.h"

#define PANEL 16                /* rows per panel: one per 32-bit lane */
#define PACK_SB 4               /* super-blocks per packed chunk */
#define COLS 8                  /* columns per micro-kernel call */
#define PACK_MIN_COLS 8
#define GROUP 4                 /* panels packed together (64 rows: matmul.c's GEMM_ROWS) */

/* One super-block of a panel. */
typedef struct {
    uint8_t q[64][PANEL][4];    /* group g: quants 4g..4g+3 of each row, unsigned */
    int32_t sc[16][PANEL];      /* sub-block scales (8 used by Q4_K / Q5_K), read at pack time only */
    float scf[16][PANEL];       /* the same as floats, which the micro-kernel reads. Storing only
                                 * these measured 3-4 % slower on Q3_K/Q4_K/Q6_K (kq_bench gemm,
                                 * alternating builds): the struct's size and strides, not the work */
    int32_t mn[8][PANEL];       /* int16 pairs against bsums 2k, 2k+1 */
    float d[PANEL], dmin[PANEL];
} panel_sb;

KQ_INLINE int n_sub(int wt) { return wt == W_Q4_K || wt == W_Q5_K ? 8 : 16; }
KQ_INLINE int has_min(int wt) { return wt == W_Q2_K || wt == W_Q4_K || wt == W_Q5_K; }


/* Scales, mins/offsets and d of row r of a super-block. */
KQ_INLINE void pack_scales(int wt, const uint8_t *blk, int r, panel_sb *p) {
    int16_t sc[16];
    uint8_t mn[16];
    int32_t pairs[8];
    kq_kblock_scales(wt, blk, sc, mn);
    kq_kblock_bsum_pairs(wt, sc, mn, pairs);
    for (int s = 0; s < n_sub(wt); s++) p->sc[s][r] = sc[s];
    for (int k = 0; k < 8; k++) p->mn[k][r] = pairs[k];
    /* d is the first field of Q2_K's tail and of Q4_K/Q5_K, the last of Q3_K/Q6_K */
    p->d[r] = kq_f16(wt == W_Q2_K ? ((const sb_block_q2_K *)blk)->d
                     : wt == W_Q3_K ? ((const sb_block_q3_K *)blk)->d
                     : wt == W_Q6_K ? ((const sb_block_q6_K *)blk)->d : ((const sb_block_q4_K *)blk)->d);
    p->dmin[r] = wt == W_Q2_K ? kq_f16(((const sb_block_q2_K *)blk)->dmin)
               : has_min(wt)  ? kq_f16(((const sb_block_q4_K *)blk)->dmin) : 0;
}

/* Q2_K: quants (0..3) times their 4-bit sub-block scale (0..15) still fit a
 * byte (≤ 45), so the panel stores sc·q and the micro-kernel needs no
 * per-sub-block multiply: one vpdpbusd chain over the whole super-block
 * gives Σ sc·q·y, the same integer as the 1×1 kernel. Sub-block 4j+l of
 * step j is 128-bit lane l; vpmullw on byte pairs cannot carry (45 < 256). */
KQ_INLINE __m512i q2_times_scales(__m512i q, const uint8_t *blk, int j) {
    const sb_block_q2_K *b = (const sb_block_q2_K *)blk;
    const int s0 = b->scales[4 * j] & 0xF, s1 = b->scales[4 * j + 1] & 0xF;
    const int s2 = b->scales[4 * j + 2] & 0xF, s3 = b->scales[4 * j + 3] & 0xF;
    const __m512i sc16 = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_setr_m128i(_mm_set1_epi16((short)s0), _mm_set1_epi16((short)s1))),
        _mm256_setr_m128i(_mm_set1_epi16((short)s2), _mm_set1_epi16((short)s3)), 1);
    return _mm512_mullo_epi16(q, sc16);
}

/* Pack super-blocks i0..i0+nsb-1 of rows x[0..nr) (nr <= 16; missing rows
 * are zero: zero quants, scales and d). */
KQ_INLINE void pack_panel(int wt, const uint8_t *x, size_t bx, int nr, int i0, int nsb, panel_sb *out) {
    const size_t bs = kq_block_bytes(wt);
    for (int i = 0; i < nsb; i++) {
        panel_sb *p = &out[i];
        if (nr < PANEL) memset(p, 0, sizeof *p);
        for (int r = 0; r < nr; r++) {
            kq_prefetch_ahead(x + (size_t)r * bx + (size_t)(i0 + i) * bs, bs);     /* the weights stream from DRAM */
            pack_scales(wt, x + (size_t)r * bx + (size_t)(i0 + i) * bs, r, p);
        }
        for (int k = 0; k < 16; k++)
            for (int r = 0; r < PANEL; r++) p->scf[k][r] = (float)p->sc[k][r];
        for (int j = 0; j < 4; j++) {
            __m512i rows[PANEL], cols[PANEL];
            for (int r = 0; r < PANEL; r++) {
                const uint8_t *blk = x + (size_t)r * bx + (size_t)(i0 + i) * bs;
                rows[r] = r < nr ? kq_kstep_decode(wt, blk, j) : _mm512_setzero_si512();
                if (wt == W_Q2_K && r < nr) rows[r] = q2_times_scales(rows[r], blk, j);
            }
            transpose16(rows, cols);
            for (int k = 0; k < 16; k++) _mm512_storeu_si512(p->q[16 * j + k], cols[k]);
        }
    }
}

static inline int imin(int a, int b) { return a < b ? a : b; }

static inline __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* t += Σ4 u8(q)·s8(*p broadcast): vpdpbusd with an embedded {1to16}
 * broadcast operand, which compilers do not form from set1 themselves
 * (a separate vpbroadcastd per multiply-add otherwise). */
typedef int32_t __attribute__((may_alias, aligned(1))) i32_any;
static inline __m512i dpbusd_bcast(__m512i t, __m512i q, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(t) : "v"(q), "m"(*(const i32_any *)p));
    return t;
}

/* C columns against nsb packed super-blocks; results (16 rows) stored at
 * s + c·ldc under mask m, going on from what is there when add (the
 * super-blocks before i0): one chain per row in super-block order, as the
 * 1×1 kernel sums. */
KQ_INLINE void micro(int wt, int C, const panel_sb *pan, int nsb, const sb_block_q8_K *const *yc, int i0,
                     float *s, size_t ldc, __mmask16 m, int add) {
    __m512 acc[COLS];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = add ? _mm512_maskz_loadu_ps(m, s + (size_t)c * ldc) : _mm512_setzero_ps();
    const int ns = n_sub(wt), gps = 64 / ns;    /* groups per sub-block */
    for (int i = 0; i < nsb; i++) {
        const panel_sb *p = &pan[i];
        const sb_block_q8_K *yb[COLS];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) yb[c] = yc[c] + i0 + i;
        __m512i isum[COLS];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) isum[c] = _mm512_setzero_si512();
        if (wt == W_Q2_K) {     /* scales already in the panel's quants */
#pragma GCC unroll 4
            for (int g = 0; g < 64; g++) {
                const __m512i q = _mm512_loadu_si512(p->q[g]);
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) isum[c] = dpbusd_bcast(isum[c], q, yb[c]->qs + 4 * g);
            }
        }
        __m512 fsum[COLS];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) fsum[c] = _mm512_setzero_ps();
        for (int sb = 0; sb < (wt == W_Q2_K ? 0 : ns); sb++) {
            __m512i t[COLS];
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) t[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = sb * gps; g < sb * gps + gps; g++) {
                const __m512i q = _mm512_loadu_si512(p->q[g]);
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) t[c] = dpbusd_bcast(t[c], q, yb[c]->qs + 4 * g);
            }
            const __m512 sc = _mm512_loadu_ps(p->scf[sb]);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) fsum[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[c]), sc, fsum[c]);
        }
        const __m512 d = _mm512_loadu_ps(p->d);
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) ms = _mm512_dpwssd_epi32(ms, _mm512_loadu_si512(p->mn[k]), bcast32(&yb[c]->bsums[2 * k]));
            const __m512 dy = _mm512_set1_ps(yb[c]->d);
            if (wt != W_Q2_K) {    /* the 1×1 kernels' ref_step: sum + ((d·dy)·isum − (dmin·dy)·summs) */
                const __m512 is = _mm512_add_ps(fsum[c], _mm512_cvtepi32_ps(has_min(wt) ? isum[c] : _mm512_add_epi32(isum[c], ms)));
                __m512 step = _mm512_mul_ps(_mm512_mul_ps(d, dy), is);
                if (has_min(wt))
                    step = _mm512_sub_ps(step, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p->dmin), dy), _mm512_cvtepi32_ps(ms)));
                acc[c] = _mm512_add_ps(acc[c], step);
            } else if (has_min(wt)) {
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[c]), acc[c]);
                acc[c] = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(p->dmin), dy), _mm512_cvtepi32_ps(ms), acc[c]);
            } else {
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(_mm512_add_epi32(isum[c], ms)), acc[c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(s + (size_t)c * ldc, m, acc[c]);
}

KQ_INLINE void micro_n(int wt, int cc, const panel_sb *pan, int nsb, const sb_block_q8_K *const *yc, int i0,
                       float *so, size_t ldc, __mmask16 m, int add) {
    switch (cc) {
    case 8: micro(wt, 8, pan, nsb, yc, i0, so, ldc, m, add); break;
    case 7: micro(wt, 7, pan, nsb, yc, i0, so, ldc, m, add); break;
    case 6: micro(wt, 6, pan, nsb, yc, i0, so, ldc, m, add); break;
    case 5: micro(wt, 5, pan, nsb, yc, i0, so, ldc, m, add); break;
    case 4: micro(wt, 4, pan, nsb, yc, i0, so, ldc, m, add); break;
    case 3: micro(wt, 3, pan, nsb, yc, i0, so, ldc, m, add); break;
    case 2: micro(wt, 2, pan, nsb, yc, i0, so, ldc, m, add); break;
    default: micro(wt, 1, pan, nsb, yc, i0, so, ldc, m, add); break;
    }
}

/* Up to GROUP panels are packed together and every column block passes all
 * of them while its activations are in L1: with one panel at a time the
 * whole activation matrix (2.4 MB for 512 tokens of 4096, 8.4 MB of 14336)
 * streamed from L3 once per 16 rows. */
KQ_INLINE void gemm_packed(int wt, int n, int nr, int nc, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                           float *s, size_t ldc) {
    _Alignas(64) panel_sb pan[GROUP][PACK_SB];
    const int nsb_all = n / SB_QK_K;
    for (int g0 = 0; g0 < nr; g0 += GROUP * PANEL) {
        const int np = (imin(nr - g0, GROUP * PANEL) + PANEL - 1) / PANEL;
        for (int i0 = 0; i0 < nsb_all; i0 += PACK_SB) {
            const int nsb = nsb_all - i0 < PACK_SB ? nsb_all - i0 : PACK_SB;
            for (int k = 0; k < np; k++) {
                const int r0 = g0 + k * PANEL;
                pack_panel(wt, x + (size_t)r0 * bx, bx, imin(nr - r0, PANEL), i0, nsb, pan[k]);
            }
            for (int c0 = 0; c0 < nc; c0 += COLS) {
                const sb_block_q8_K *yc[COLS];
                const int cc = nc - c0 < COLS ? nc - c0 : COLS;
                for (int c = 0; c < cc; c++) yc[c] = (const sb_block_q8_K *)(y + (size_t)(c0 + c) * by);
                for (int k = 0; k < np; k++) {
                    const int r0 = g0 + k * PANEL, pr = imin(nr - r0, PANEL);
                    const __mmask16 m = (__mmask16)(pr == PANEL ? 0xFFFF : (1u << pr) - 1);
                    micro_n(wt, cc, pan[k], nsb, yc, i0, s + (size_t)c0 * ldc + r0, ldc, m, i0 > 0);
                }
            }
        }
    }
}

KQ_KGEMM_ENTRIES(avx512, gemm_packed)
