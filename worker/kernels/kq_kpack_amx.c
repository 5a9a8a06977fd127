/* kq_kpack_amx.c - k-quant × Q8_K matrix products on AMX tiles: the gemm
 * (sb_gemm_fn) of Q2_K … Q6_K on a CPU with AMX-INT8 whose OS grants the
 * tile state (kq_table.c checks both, once).
 *
 * One tdpbsud multiplies a 16×64-byte tile by a 64×16 one into 16×16 int32
 * sums: 16384 multiply-adds, where a core retires 64 per AVX-512 vpdpbusd
 * (kq_peak measures both). The tile unit cannot apply a k-quant's sub-block
 * scale between its sums, so the panels hold each weight with its
 * sub-block scale already applied, w = sc·q (q with its offset removed), as
 * exact integers in byte planes:
 *
 *     Q2_K   0..45            one unsigned plane
 *     Q3_K   -124..128        one signed plane, negated (-128..124)
 *     Q4_K   0..945           two planes: w & 255 (unsigned) and w >> 8
 *     Q5_K   0..1953            (unsigned for Q4_K/Q5_K, signed for Q6_K),
 *     Q6_K   -4064..4096        summed as lo + 256·hi
 *
 * A super-block's integer sum is therefore exact: the integer the AVX-512
 * kernels build (Q3_K and Q6_K: with their offsets folded in). The mins of
 * Q2_K, Q4_K and Q5_K go on with vpdpwssd, as there (Q4_K/Q5_K against
 * sums of 32, one per sub-block: the same integer), and the float step
 * after each super-block is kq_kpack_avx512.c's, lane for lane (lanes are
 * the 16 weight rows there and here), so every result equals that gemm's
 * bit for bit while its float sum of scaled sub-block sums is exact (below
 * 2^24, as its comment says) - and then the 1×1 vec_dot's for Q4_K, Q5_K
 * and Q6_K.
 *
 * Tiles: C (tokens × 16 rows, int32) += A (tokens × 64 activation bytes) ·
 * B (16 rows × 64 weights, four consecutive weights of each row side by
 * side: the layout of the vpdpbusd panels). The tile unit outruns the L2:
 * four products whose tiles all came from L2 took 51 ns here, from L1
 * 28 ns. So the eight tile registers hold two tiles of tokens and two of
 * weights - the two planes of one panel, or one plane of two panels - and
 * four sums: every tile loaded feeds two products, and a panel's planes
 * stay in L1 while the tokens pass. tools/kq_ceiling.c measures what the
 * products alone reach.
 */
#include <immintrin.h>

#include "worker/kernels/kq_internal.h"
#include "worker/kernels/kq_kstep_avx512.h"

#define PANEL 16                /* rows per panel: one per lane of the float step */
#define PACK_SB 2               /* super-blocks per packed chunk */
#define GROUP 16                /* panels packed together: up to 256 rows share one pass over the activations */
#define TBLOCK 64               /* tokens whose activations are copied together */
#define TOKS 16                 /* tokens per tile */
#define PACK_MIN_COLS 8         /* fewer tokens go to the register tiles, as at AVX-512 */

/* One super-block of a panel: plane, step (64 weights), tile row (4
 * weights of 16 rows); the mins as int16 pairs, sub-blocks 2k and 2k+1. */
typedef struct {
    uint8_t b[2][4][16][64];
    int32_t mn[8][PANEL];
    float d[PANEL], dmin[PANEL];
} amx_sb;

enum { P_LO, P_HI };

KQ_INLINE int two_planes(int wt) { return wt == W_Q4_K || wt == W_Q5_K || wt == W_Q6_K; }
KQ_INLINE int has_min(int wt) { return wt == W_Q2_K || wt == W_Q4_K || wt == W_Q5_K; }
KQ_INLINE int sub_len(int wt) { return wt == W_Q4_K || wt == W_Q5_K ? 32 : 16; }
KQ_INLINE int min_pairs(int wt) { return wt == W_Q2_K ? 8 : 4; }     /* int16 pairs of mins a super-block has */

/* A row's d and dmin (0 for the types without mins). */
KQ_INLINE void row_d(int wt, const uint8_t *blk, float *d, float *dmin) {
    /* d is the first field of Q2_K's tail and of Q4_K/Q5_K, the last of Q3_K/Q6_K */
    *d = kq_f16(wt == W_Q2_K ? ((const sb_block_q2_K *)blk)->d
                : wt == W_Q3_K ? ((const sb_block_q3_K *)blk)->d
                : wt == W_Q6_K ? ((const sb_block_q6_K *)blk)->d : ((const sb_block_q4_K *)blk)->d);
    *dmin = wt == W_Q2_K ? kq_f16(((const sb_block_q2_K *)blk)->dmin)
          : has_min(wt)  ? kq_f16(((const sb_block_q4_K *)blk)->dmin) : 0;
}

/* Pack super-blocks i0..i0+nsb-1 of rows x[0..nr) (nr <= 16; missing rows
 * are zero, d included). The quants of a step are transposed first (one
 * 16×16 dword transpose): tile row t then holds 4 weights of every row, all
 * of one sub-block, so the scales go on as one int16 vector per half of
 * the rows and sub-block, and vpermt2b splits the int16 products into the
 * lo and hi planes in one instruction each. Building each plane row by
 * row and transposing it ran the Q6_K gemm (256 rows, 512 tokens, one
 * thread) at 406 G multiply-adds/s; this, at 451. */
KQ_INLINE void pack_panel(int wt, const uint8_t *x, size_t bx, int nr, int i0, int nsb, amx_sb *out) {
    const size_t bs = kq_block_bytes(wt);
    const int L = sub_len(wt);
    /* int16 lane l of a half (rows 8h..8h+7) is row l/4: word 2(l/4) of 8 dwords */
    const __m512i spread = _mm512_set_epi16(14, 14, 14, 14, 12, 12, 12, 12, 10, 10, 10, 10, 8, 8, 8, 8,
                                            6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    /* bytes 2l (lo) and 2l+1 (hi) of the two int16 vectors, as one */
    __m512i even, odd;
    {
        _Alignas(64) uint8_t e[64], o[64];
        for (int l = 0; l < 64; l++) e[l] = (uint8_t)(2 * l), o[l] = (uint8_t)(2 * l + 1);
        even = _mm512_load_si512(e);
        odd = _mm512_load_si512(o);
    }
    const __m512i off = _mm512_set1_epi16(wt == W_Q3_K ? 4 : wt == W_Q6_K ? 32 : 0);
    for (int i = 0; i < nsb; i++) {
        amx_sb *p = &out[i];
        _Alignas(64) int32_t sc[16][PANEL];    /* [sub-block][row] */
        const uint8_t *blk[PANEL];
        for (int r = 0; r < PANEL; r++) {
            blk[r] = x + (size_t)r * bx + (size_t)(i0 + i) * bs;
            if (r >= nr) {
                p->d[r] = p->dmin[r] = 0;
                for (int k = 0; k < 16; k++) sc[k][r] = 0;
                for (int k = 0; k < 8; k++) p->mn[k][r] = 0;
                continue;
            }
            int16_t s16[16];
            uint8_t m8[16];
            kq_prefetch_ahead(blk[r], bs);     /* the weights stream from DRAM */
            kq_kblock_scales(wt, blk[r], s16, m8);
            row_d(wt, blk[r], &p->d[r], &p->dmin[r]);
            for (int k = 0; k < 16; k++) sc[k][r] = s16[k];
            for (int k = 0; k < 8; k++)     /* two sub-blocks' mins against their sums (act_block) */
                p->mn[k][r] = k < min_pairs(wt) ? kq_pair16(m8[2 * k], m8[2 * k + 1]) : 0;
        }
        for (int j = 0; j < 4; j++) {
            __m512i rows[PANEL], cols[PANEL];
            for (int r = 0; r < PANEL; r++) rows[r] = r < nr ? kq_kstep_decode(wt, blk[r], j) : _mm512_setzero_si512();
            transpose16(rows, cols);
            for (int t = 0; t < 16; t++) {
                const int k = (64 * j + 4 * t) / L;    /* the sub-block of tile row t */
                const __m512i sv = _mm512_load_si512(sc[k]);
                __m512i w0 = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(cols[t])), off),
                                                _mm512_permutexvar_epi16(spread, sv));
                __m512i w1 = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(cols[t], 1)), off),
                                                _mm512_permutexvar_epi16(spread, _mm512_shuffle_i64x2(sv, sv, 0xEE)));
                if (wt == W_Q3_K) {
                    w0 = _mm512_sub_epi16(_mm512_setzero_si512(), w0);
                    w1 = _mm512_sub_epi16(_mm512_setzero_si512(), w1);
                }
                _mm512_store_si512(p->b[P_LO][j][t], _mm512_permutex2var_epi8(w0, even, w1));
                if (two_planes(wt)) _mm512_store_si512(p->b[P_HI][j][t], _mm512_permutex2var_epi8(w0, odd, w1));
            }
        }
    }
}

typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles: 0, 1 tokens; 2, 3 weights; 4-7 sums (token tile u, weight tile
 * w: 4 + 2u + w). Token tiles and sums have `toks` rows. */
static void configure(int toks) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = (uint8_t)(t == 2 || t == 3 ? 16 : toks);
    }
    _tile_loadconfig(&cfg);
}

static inline int imin(int a, int b) { return a < b ? a : b; }

/* A block of the chunk's activations, tile by tile: [tile][super-block][step]
 * holds 16 tokens' 64 bytes side by side, so a tile loads 1 KiB in a row.
 * Tiles loaded straight from the Q8_K rows (16 lines 4.6 KB apart, a
 * stride no hardware prefetcher follows) ran the Q5_K gemm at 347 G
 * multiply-adds/s, against 424 from contiguous ones.
 * Beside them each token's d and the sums its mins go against: Q2_K's 16
 * bsums, or for Q4_K/Q5_K the 8 sums of 32 (one per sub-block, half the
 * multiply-adds of pairing each min with two bsums). */
typedef struct {
    int8_t q[TBLOCK / TOKS][PACK_SB][4][TOKS][64];
    int16_t bs[TBLOCK / TOKS][PACK_SB][TOKS][16];
    float d[TBLOCK / TOKS][PACK_SB][TOKS];
} act_block;


KQ_INLINE void copy_block(int wt, const uint8_t *y, size_t by, int ntok, int i0, int nsb, act_block *a) {
    for (int t = 0; t < ntok; t++) {
        const uint8_t *row = y + (size_t)t * by;
        for (int i = 0; i < nsb; i++) {
            const sb_block_q8_K *b = (const sb_block_q8_K *)row + i0 + i;
            for (int j = 0; j < 4; j++)
                _mm512_store_si512(a->q[t / TOKS][i][j][t % TOKS], _mm512_loadu_si512(b->qs + 64 * j));
            a->d[t / TOKS][i][t % TOKS] = b->d;
            int16_t *bs = a->bs[t / TOKS][i][t % TOKS];
            if (has_min(wt))
                for (int k = 0; k < 16; k++)     /* a sum of 32 is at most 4096 in size: int16 holds it */
                    bs[k] = wt == W_Q2_K ? b->bsums[k] : k < 8 ? (int16_t)(b->bsums[2 * k] + b->bsums[2 * k + 1]) : 0;
        }
    }
}

/* t += (int16 pairs of q) · (the pair at p, broadcast): vpdpwssd with an
 * embedded {1to16} broadcast, which compilers do not form from set1 (a
 * vpbroadcastd on the shuffle port per multiply-add otherwise: the mins
 * then cost more than the tile products). */
typedef int32_t __attribute__((may_alias, aligned(1))) i32_any;
static inline __m512i dpwssd_bcast(__m512i t, __m512i q, const int16_t *p) {
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(t) : "v"(q), "m"(*(const i32_any *)p));
    return t;
}

/* The float step of one super-block for R tokens of one panel, from its
 * integer sums c[t] (and hi[t] for two planes) into the output rows s + t·ldc
 * (16 rows, mask m), which hold the sum so far unless first: the
 * operations of kq_kpack_avx512.c's micro-kernel, in its order. */
KQ_INLINE void float_step(int wt, int R, const int32_t (*c)[PANEL], const int32_t (*hi)[PANEL], const amx_sb *p,
                          const float *dys, const int16_t (*bs)[16], float *s, size_t ldc, __mmask16 m, int first) {
    const __m512 d = _mm512_loadu_ps(p->d), dmin = _mm512_loadu_ps(p->dmin);
    __m512i mn[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) mn[k] = has_min(wt) ? _mm512_load_si512(p->mn[k]) : _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int t = 0; t < R; t++) {
        float *so = s + (size_t)t * ldc;
        __m512 acc = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, so);
        __m512i isum = _mm512_load_si512(c[t]);
        if (two_planes(wt)) isum = _mm512_add_epi32(isum, _mm512_slli_epi32(_mm512_load_si512(hi[t]), 8));
        if (wt == W_Q3_K) isum = _mm512_sub_epi32(_mm512_setzero_si512(), isum);
        const __m512 dy = _mm512_set1_ps(dys[t]);
        __m512i ms = _mm512_setzero_si512();
        if (has_min(wt)) {      /* two chains: exact integers, in any order */
            __m512i ms1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < min_pairs(wt); k += 2) {
                ms = dpwssd_bcast(ms, mn[k], &bs[t][2 * k]);
                ms1 = dpwssd_bcast(ms1, mn[k + 1], &bs[t][2 * k + 2]);
            }
            ms = _mm512_add_epi32(ms, ms1);
        }
        if (wt == W_Q2_K) {     /* its Q2_K step: two FMAs */
            acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum), acc);
            acc = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(ms), acc);
        } else {                /* its ref_step: sum + ((d·dy)·isum − (dmin·dy)·summs) */
            __m512 step = _mm512_mul_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum));
            if (has_min(wt)) step = _mm512_sub_ps(step, _mm512_mul_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(ms)));
            acc = _mm512_add_ps(acc, step);
        }
        _mm512_mask_storeu_ps(so, m, acc);
    }
}

/* dst += a · b with the instruction for the type's signs: weights of Q3_K
 * and Q6_K's hi plane are signed. Tile numbers must be immediates. */
#define DP(signed_w, dst, a, b)              \
    do {                                     \
        if (signed_w) _tile_dpbssd(dst, a, b); \
        else _tile_dpbsud(dst, a, b);        \
    } while (0)

/* U (1, 2) tiles of R tokens against W (1, 2) weight tiles for nsb
 * super-blocks: the two planes of panel p0 (two-plane types, W = 2), or
 * the plane of panels p0 and p1. Results into s (tokens' rows, ldc apart;
 * panel p1's 16 rows after p0's, masks m0, m1), going on from what is
 * there unless i0 = 0: one chain per output in super-block order. */
KQ_INLINE void micro(int wt, int R, int U, int W, const amx_sb *p0, const amx_sb *p1, int nsb,
                     const act_block *a, int u0, int i0, float *s, size_t ldc, __mmask16 m0, __mmask16 m1) {
    const int two = two_planes(wt), sw0 = wt == W_Q3_K, sw1 = wt == W_Q3_K || wt == W_Q6_K;
    _Alignas(64) int32_t c[2][2][TOKS][PANEL];     /* [token tile][weight tile] */
    for (int i = 0; i < nsb; i++) {
        _tile_zero(4);
        if (W == 2) _tile_zero(5);
        if (U == 2) {
            _tile_zero(6);
            if (W == 2) _tile_zero(7);
        }
        for (int j = 0; j < 4; j++) {
            _tile_loadd(0, a->q[u0][i][j], 64);
            if (U == 2) _tile_loadd(1, a->q[u0 + 1][i][j], 64);
            _tile_loadd(2, p0[i].b[P_LO][j], 64);
            if (W == 2) _tile_loadd(3, two ? p0[i].b[P_HI][j] : p1[i].b[P_LO][j], 64);
            DP(sw0, 4, 0, 2);
            if (W == 2) DP(sw1, 5, 0, 3);
            if (U == 2) {
                DP(sw0, 6, 1, 2);
                if (W == 2) DP(sw1, 7, 1, 3);
            }
        }
        _tile_stored(4, c[0][0], 64);
        if (W == 2) _tile_stored(5, c[0][1], 64);
        if (U == 2) {
            _tile_stored(6, c[1][0], 64);
            if (W == 2) _tile_stored(7, c[1][1], 64);
        }
        const int first = i0 + i == 0;
        for (int u = 0; u < U; u++) {
            const float *dy = a->d[u0 + u][i];
            const int16_t (*bs)[16] = (const int16_t (*)[16])a->bs[u0 + u][i];
            float *su = s + (size_t)u * TOKS * ldc;
            if (two) {
                float_step(wt, R, c[u][0], c[u][1], &p0[i], dy, bs, su, ldc, m0, first);
            } else {
                float_step(wt, R, c[u][0], NULL, &p0[i], dy, bs, su, ldc, m0, first);
                if (W == 2) float_step(wt, R, c[u][1], NULL, &p1[i], dy, bs, su + PANEL, ldc, m1, first);
            }
        }
    }
}

KQ_INLINE __mmask16 rows_mask(int nr, int r0) {
    const int pr = imin(nr - r0, PANEL);
    return (__mmask16)(pr >= PANEL ? 0xFFFF : (1u << pr) - 1);
}

/* Super-blocks in chunks of PACK_SB; for each chunk the GROUP panels are
 * packed (L2), then the tokens go by blocks of TBLOCK: the block's
 * activations are copied tile by tile and pass every panel (or pair of
 * panels), whose planes stay in L1 while the block's tiles pass them two
 * at a time. A last tile of fewer than 16 tokens runs under a second
 * configuration (its rows). */
KQ_INLINE void gemm_amx(int wt, int n, int nr, int nc, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                        float *s, size_t ldc) {
    _Alignas(64) amx_sb pan[GROUP][PACK_SB];
    _Alignas(64) act_block act;
    const int nsb_all = n / SB_QK_K, W = two_planes(wt) ? 2 : 1;
    int config = 0;
    for (int g0 = 0; g0 < nr; g0 += GROUP * PANEL) {
        const int np = (imin(nr - g0, GROUP * PANEL) + PANEL - 1) / PANEL;
        for (int i0 = 0; i0 < nsb_all; i0 += PACK_SB) {
            const int nsb = imin(nsb_all - i0, PACK_SB);
            for (int k = 0; k < np; k++) {
                const int r0 = g0 + k * PANEL;
                pack_panel(wt, x + (size_t)r0 * bx, bx, imin(nr - r0, PANEL), i0, nsb, pan[k]);
            }
            for (int b0 = 0; b0 < nc; b0 += TBLOCK) {
                const int nb = imin(nc - b0, TBLOCK), full = nb / TOKS, tail = nb % TOKS;
                copy_block(wt, y + (size_t)b0 * by, by, nb, i0, nsb, &act);
                for (int k = 0; k < np; k += 3 - W) {       /* a panel, or two of a one-plane type */
                    const int r0 = g0 + k * PANEL, pair = W == 1 && k + 1 < np;
                    const __mmask16 m0 = rows_mask(nr, r0), m1 = pair ? rows_mask(nr, r0 + PANEL) : 0;
                    const amx_sb *p1 = pair ? pan[k + 1] : pan[k];
                    float *sb = s + (size_t)b0 * ldc + r0;
                    /* the weight tiles: W = 2 (two planes) or a pair of one-plane panels */
#define MICRO(R_, U_, u_) \
    (W == 2 || pair ? micro(wt, R_, U_, 2, pan[k], p1, nsb, &act, u_, i0, sb + (size_t)(u_) * TOKS * ldc, ldc, m0, m1) \
                    : micro(wt, R_, U_, 1, pan[k], p1, nsb, &act, u_, i0, sb + (size_t)(u_) * TOKS * ldc, ldc, m0, m1))
                    if (full && config != TOKS) configure(config = TOKS);
                    int u = 0;
                    for (; u + 2 <= full; u += 2) MICRO(TOKS, 2, u);
                    if (u < full) MICRO(TOKS, 1, u);
                    if (tail) {
                        if (config != tail) configure(config = tail);
                        MICRO(tail, 1, full);
                    }
#undef MICRO
                }
            }
        }
    }
    _tile_release();    /* the kernel need not save 8 KiB of tiles at every switch */
}

KQ_KGEMM_ENTRIES(amx, gemm_amx)
