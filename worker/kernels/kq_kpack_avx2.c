/* kq_kpack_avx2.c - quantized weights × Q8_K / Q8_0 activations for many
 * tokens at AVX2 (sb_gemm_fn of Q2_K … Q6_K, Q4_0, Q5_0, Q8_0), on weight
 * panels packed on the fly.
 *
 * Prompt processing through one vec_dot per (row, token) decodes every
 * weight block once per token and ends every dot with a horizontal sum.
 * Here 8 weight rows are interleaved so that one register holds 4
 * consecutive quants of each of the 8 rows (a "group"); vpmaddubsw against
 * 4 activation bytes broadcast to all lanes gives, in 16-bit lane 2r and
 * 2r+1, the two pair sums of row r: 32 multiply-adds for 8 rows, no shuffle,
 * no horizontal sum. Pair sums of a few groups are added in 16 bits (the
 * CHUNK of each type is the most that cannot overflow: see chunk_groups),
 * then vpmaddwd against the row's sub-block scale (in both lanes of the row)
 * widens to 32 bits and applies the scale in the same instruction.
 *
 * So per super-block and column, as in the 1×1 kernels of
 * kq_kquants_avx2.c: isum = Σ_sub-blocks sc·Σ q·y (exact), the mins
 * (Q2_K, Q4_K, Q5_K; dmin) or the offsets of Q3_K / Q6_K (folded into isum)
 * from Q8_K's bsums with vpmaddwd, then vec_dot's float step per lane,
 * acc + ((d·dy)·isum − (dmin·dy)·msum) (acc + (d·dy)·(isum + msum) for
 * Q3_K and Q6_K). The legacy types keep q signed (Q4_0: q−8, Q5_0: q−16)
 * and move the sign onto the activation (vpsignb), then acc + (dx·dy)·isum
 * per 32-block. Those are the reference's integers and float steps, in
 * block order, with a multiply and an add where an FMA would round once:
 * each result equals vec_dot's (kq_avx2.c, kq_kquants_avx2.c) bit for bit,
 * so a token's numbers are the same whether it came in a prompt of many
 * tokens or alone in a decode step (docs/KERNELS.md, "Batch invariance").
 *
 * A panel is packed for a chunk of blocks at a time (~23 KB: L1/L2-resident
 * while all columns pass) with the SIMD decode below and an 8×8 dword
 * transpose; a later chunk's sums go on from the stored ones. Fewer than
 * PACK_MIN_COLS columns do not repay the packing: those are dotted pair by
 * pair.
 */
#include "worker/kernels/kq_x86.h"

#define KQ_INLINE static inline __attribute__((always_inline))

#define PANEL 8                 /* rows per panel: one per 32-bit lane */
#define PACK_SB 8               /* k-quant super-blocks per packed chunk */
#define PACK_BK 64              /* legacy 32-blocks per packed chunk */
#define COLS 4                  /* columns per micro-kernel call (4 × 3 accumulators + temporaries = 16 ymm) */
#define PACK_MIN_COLS 4

/* The weight types, by SB_TYPE id (their block sizes: kq_block_bytes). */
enum { W_Q2_K = SB_TYPE_Q2_K, W_Q3_K = SB_TYPE_Q3_K, W_Q4_K = SB_TYPE_Q4_K, W_Q5_K = SB_TYPE_Q5_K,
       W_Q6_K = SB_TYPE_Q6_K, W_Q4_0 = SB_TYPE_Q4_0, W_Q5_0 = SB_TYPE_Q5_0, W_Q8_0 = SB_TYPE_Q8_0 };

KQ_INLINE int is_legacy(int wt) { return wt == W_Q4_0 || wt == W_Q5_0 || wt == W_Q8_0; }
KQ_INLINE int n_sub(int wt) { return wt == W_Q4_K || wt == W_Q5_K ? 8 : 16; }
KQ_INLINE int has_min(int wt) { return wt == W_Q2_K || wt == W_Q4_K || wt == W_Q5_K; }

/* Groups whose 16-bit pair sums can be added before widening. A lane sums
 * 2 products per group, |y| ≤ 127 (Q8_K and Q8_0 both quantize to ±127):
 * Q2_K q ≤ 3, Q3_K ≤ 7 (one 16-element sub-block = 4 groups), Q4_K ≤ 15:
 * 16·15·127 < 2^15 (a whole 32-element sub-block), Q5_K ≤ 31: 4 groups,
 * Q6_K ≤ 63: 2 groups; Q4_0 |q| ≤ 8 and Q5_0 ≤ 16: the whole block
 * (16·16·127 = 32512); Q8_0 ≤ 128: one group. */
KQ_INLINE int chunk_groups(int wt) {
    switch (wt) {
    case W_Q4_K: case W_Q4_0: case W_Q5_0: return 8;
    case W_Q6_K: return 2;
    case W_Q8_0: return 1;
    default: return 4;
    }
}

/* One super-block of a k-quant panel. */
typedef struct {
    uint8_t q[64][PANEL][4];    /* group g: quants 4g..4g+3 of each row, unsigned */
    int16_t sc[16][2 * PANEL];  /* sub-block scale of row r in lanes 2r, 2r+1 (8 used by Q4_K / Q5_K) */
    int16_t mn[8][2 * PANEL];   /* row r's pair against bsums 2k, 2k+1 in lanes 2r, 2r+1 */
    float d[PANEL], dmin[PANEL];
} panel_sb;

/* One 32-block of a legacy panel. */
typedef struct {
    int8_t q[8][PANEL][4];      /* signed quants */
    float d[PANEL];
} panel_bk;

/* ---- decode: one block of one row into bytes in element order ------------ */

KQ_INLINE void store32(uint8_t *p, __m256i v) { _mm256_storeu_si256((__m256i *)p, v); }

KQ_INLINE void decode_block(int wt, const uint8_t *blk, uint8_t *out) {
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    switch (wt) {
    case W_Q2_K:
    case W_Q3_K: {
        /* element 128h + 32p + l = bits p of byte l of qs[32h..] (+ hmask bit 4h+p for Q3_K) */
        const uint8_t *qs = wt == W_Q2_K ? ((const sb_block_q2_K *)blk)->qs : ((const sb_block_q3_K *)blk)->qs;
        const __m256i hm = wt == W_Q3_K ? _mm256_loadu_si256((const __m256i *)((const sb_block_q3_K *)blk)->hmask)
                                        : _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
            for (int p = 0; p < 4; p++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * p), m3);
                if (wt == W_Q3_K)
                    q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + p), one), 2));
                store32(out + 128 * h + 32 * p, q);
            }
        }
        break;
    }
    case W_Q4_K:
    case W_Q5_K: {
        /* elements 64j + l: low nibble of qs[32j + l]; 64j + 32 + l: high (+ qh bits 2j, 2j+1 for Q5_K) */
        const uint8_t *qs = wt == W_Q4_K ? ((const sb_block_q4_K *)blk)->qs : ((const sb_block_q5_K *)blk)->qs;
        const __m256i qh = wt == W_Q5_K ? _mm256_loadu_si256((const __m256i *)((const sb_block_q5_K *)blk)->qh)
                                        : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            if (wt == W_Q5_K) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
            }
            store32(out + 64 * j, lo);
            store32(out + 64 * j + 32, hi);
        }
        break;
    }
    case W_Q6_K: {
        /* element 128h + 32p + l: nibble (p & 2 ? high : low) of ql[64h + 32(p & 1) + l], bits 2p of qh[32h + l] */
        const sb_block_q6_K *b = (const sb_block_q6_K *)blk;
        const __m256i m2 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            store32(out + 128 * h, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2)));
            store32(out + 128 * h + 32, _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2)));
            store32(out + 128 * h + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2)));
            store32(out + 128 * h + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2)));
        }
        break;
    }
    case W_Q4_0:
        store32(out, _mm256_sub_epi8(kq_nibbles_32(((const sb_block_q4_0 *)blk)->qs), _mm256_set1_epi8(8)));
        break;
    case W_Q5_0: {
        const sb_block_q5_0 *b = (const sb_block_q5_0 *)blk;
        const __m256i hb = _mm256_and_si256(kq_bits_to_bytes_32(b->qh), _mm256_set1_epi8(0x10));
        store32(out, _mm256_sub_epi8(_mm256_or_si256(kq_nibbles_32(b->qs), hb), _mm256_set1_epi8(16)));
        break;
    }
    default:
        memcpy(out, ((const sb_block_q8_0 *)blk)->qs, 32);
        break;
    }
}

/* ---- packing ------------------------------------------------------------------ */

/* Scales, mins/offsets and d of row r of a super-block. */
KQ_INLINE void pack_scales(int wt, const uint8_t *blk, int r, panel_sb *p) {
    int16_t sc[16];
    uint8_t m8[16];
    int32_t mn[8];
    kq_kblock_scales(wt, blk, sc, m8);
    kq_kblock_bsum_pairs(wt, sc, m8, mn);
    for (int s = 0; s < (wt == W_Q4_K || wt == W_Q5_K ? 8 : 16); s++) p->sc[s][2 * r] = p->sc[s][2 * r + 1] = sc[s];
    p->dmin[r] = wt == W_Q2_K ? kq_f16(((const sb_block_q2_K *)blk)->dmin)
               : wt == W_Q4_K || wt == W_Q5_K ? kq_f16(((const sb_block_q4_K *)blk)->dmin) : 0;
    for (int k = 0; k < 8; k++) memcpy(&p->mn[k][2 * r], &mn[k], 4);
    /* d is the first field of Q2_K's tail and of Q4_K/Q5_K, the last of Q3_K/Q6_K */
    const sb_fp16 *d = wt == W_Q2_K ? &((const sb_block_q2_K *)blk)->d
                     : wt == W_Q3_K ? &((const sb_block_q3_K *)blk)->d
                     : wt == W_Q6_K ? &((const sb_block_q6_K *)blk)->d : &((const sb_block_q4_K *)blk)->d;
    p->d[r] = kq_f16(*d);
}

/* o[k] = dword k of every r[i], i = 0..7 (an 8×8 dword transpose). */
static inline void transpose8(const __m256i r[8], __m256i o[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);       /* r2i[0] r2i+1[0] r2i[1] r2i+1[1] | [4],[5] */
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);   /* [2],[3] | [6],[7] */
    }
    for (int a = 0; a < 2; a++) {   /* rows 4a..4a+3 */
        u[4 * a + 0] = _mm256_unpacklo_epi64(t[4 * a], t[4 * a + 2]);       /* dword 0 | 4 of the 4 rows */
        u[4 * a + 1] = _mm256_unpackhi_epi64(t[4 * a], t[4 * a + 2]);       /* 1 | 5 */
        u[4 * a + 2] = _mm256_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);   /* 2 | 6 */
        u[4 * a + 3] = _mm256_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);   /* 3 | 7 */
    }
    for (int b = 0; b < 4; b++) {
        o[b] = _mm256_permute2x128_si256(u[b], u[4 + b], 0x20);
        o[4 + b] = _mm256_permute2x128_si256(u[b], u[4 + b], 0x31);
    }
}

/* Groups g0..g0+7 (elements 4·g0 … 4·g0+31) of the decoded rows, transposed
 * into dst[0..7][row][4]. */
static inline void transpose_groups(const uint8_t (*rows)[256], int e0, uint8_t *dst) {
    __m256i r[8], o[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i *)(rows[i] + e0));
    transpose8(r, o);
    for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(dst + 32 * k), o[k]);
}

/* Pack super-blocks i0..i0+nsb-1 of rows x[0..nr) (nr ≤ 8; missing rows are
 * zero: zero quants, scales and d). */
KQ_INLINE void pack_panel_k(int wt, const uint8_t *x, size_t bx, int nr, int i0, int nsb, panel_sb *out) {
    _Alignas(32) uint8_t rows[PANEL][256];
    if (nr < PANEL) memset(rows, 0, sizeof rows);
    const size_t bs = kq_block_bytes(wt);
    for (int i = 0; i < nsb; i++) {
        panel_sb *p = &out[i];
        if (nr < PANEL) memset(p, 0, sizeof *p);
        for (int r = 0; r < nr; r++) {
            const uint8_t *blk = x + (size_t)r * bx + (size_t)(i0 + i) * bs;
            pack_scales(wt, blk, r, p);
            decode_block(wt, blk, rows[r]);
        }
        for (int e0 = 0; e0 < 256; e0 += 32) transpose_groups((const uint8_t (*)[256])rows, e0, &p->q[e0 / 4][0][0]);
    }
}

KQ_INLINE void pack_panel_legacy(int wt, const uint8_t *x, size_t bx, int nr, int i0, int nbk, panel_bk *out) {
    _Alignas(32) uint8_t rows[PANEL][256];
    if (nr < PANEL) memset(rows, 0, sizeof rows);
    const size_t bs = kq_block_bytes(wt);
    for (int i = 0; i < nbk; i++) {
        panel_bk *p = &out[i];
        for (int r = 0; r < PANEL; r++) p->d[r] = 0.0f;
        for (int r = 0; r < nr; r++) {
            const uint8_t *blk = x + (size_t)r * bx + (size_t)(i0 + i) * bs;
            sb_fp16 d;
            memcpy(&d, blk, sizeof d);   /* d leads every legacy block */
            p->d[r] = kq_f16(d);
            decode_block(wt, blk, rows[r]);
        }
        transpose_groups((const uint8_t (*)[256])rows, 0, (uint8_t *)&p->q[0][0][0]);
    }
}

/* ---- micro-kernels ---------------------------------------------------------- */

static inline __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The sums each of C columns starts from: zero, or with add the sums of
 * the chunks before (the first pr rows at s + c·ldc), so that every row
 * is one chain of float steps in block order, as in vec_dot. */
KQ_INLINE void load_cols(int C, __m256 *acc, const float *s, size_t ldc, int pr, int add) {
    for (int c = 0; c < C; c++) {
        const float *o = s + (size_t)c * ldc;
        if (!add) {
            acc[c] = _mm256_setzero_ps();
        } else if (pr == PANEL) {
            acc[c] = _mm256_loadu_ps(o);
        } else {
            _Alignas(32) float t[PANEL] = { 0 };
            for (int r = 0; r < pr; r++) t[r] = o[r];
            acc[c] = _mm256_load_ps(t);
        }
    }
}

/* The 8 row results of each of C columns, stored at s + c·ldc (all 8 lanes
 * when pr == PANEL, else the first pr). */
KQ_INLINE void store_cols(int C, const __m256 *acc, float *s, size_t ldc, int pr) {
    for (int c = 0; c < C; c++) {
        float *o = s + (size_t)c * ldc;
        if (pr == PANEL) {
            _mm256_storeu_ps(o, acc[c]);
        } else {
            _Alignas(32) float t[PANEL];
            _mm256_store_ps(t, acc[c]);
            for (int r = 0; r < pr; r++) o[r] = t[r];
        }
    }
}

/* C columns against nsb packed super-blocks. */
KQ_INLINE void micro_k(int wt, int C, const panel_sb *pan, int nsb, const sb_block_q8_K *const *yc, int i0,
                       float *s, size_t ldc, int pr, int add) {
    __m256 acc[COLS];
    load_cols(C, acc, s, ldc, pr, add);
    const int ns = n_sub(wt), gps = 64 / ns, ch = chunk_groups(wt) < gps ? chunk_groups(wt) : gps;
    for (int i = 0; i < nsb; i++) {
        const panel_sb *p = &pan[i];
        const sb_block_q8_K *yb[COLS];
        for (int c = 0; c < C; c++) yb[c] = yc[c] + i0 + i;
        __m256i isum[COLS];
        for (int c = 0; c < C; c++) isum[c] = _mm256_setzero_si256();
        /* Loops kept rolled: fully unrolled, gcc turns the 16-bit sums into
         * trees of all products at once and spills them (measured 1.3x
         * slower). */
#pragma GCC unroll 1
        for (int sb = 0; sb < ns; sb++) {
            const __m256i sc = _mm256_loadu_si256((const __m256i *)p->sc[sb]);
#pragma GCC unroll 1
            for (int g0 = sb * gps; g0 < sb * gps + gps; g0 += ch) {
                __m256i t[COLS];
                for (int c = 0; c < C; c++) t[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
                for (int g = g0; g < g0 + ch; g++) {
                    const __m256i q = _mm256_loadu_si256((const __m256i *)p->q[g]);
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++)
                        t[c] = _mm256_add_epi16(t[c], _mm256_maddubs_epi16(q, bcast32(yb[c]->qs + 4 * g)));
                }
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(t[c], sc));
            }
        }
        const __m256 d = _mm256_loadu_ps(p->d);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            __m256i ms = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)p->mn[k]), bcast32(&yb[c]->bsums[2 * k])));
            const __m256 dy = _mm256_set1_ps(yb[c]->d);
            /* vec_dot's step (kq_ref_step), each operation rounded */
            __m256 step;
            if (has_min(wt))
                step = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum[c])),
                                     _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(p->dmin), dy), _mm256_cvtepi32_ps(ms)));
            else
                step = _mm256_mul_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(_mm256_add_epi32(isum[c], ms)));
            acc[c] = _mm256_add_ps(acc[c], step);
        }
    }
    store_cols(C, acc, s, ldc, pr);
}

KQ_INLINE void micro_legacy(int wt, int C, const panel_bk *pan, int nbk, const sb_block_q8_0 *const *yc, int i0,
                            float *s, size_t ldc, int pr, int add) {
    __m256 acc[COLS];
    load_cols(C, acc, s, ldc, pr, add);
    const int ch = chunk_groups(wt);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < nbk; i++) {
        const panel_bk *p = &pan[i];
        const sb_block_q8_0 *yb[COLS];
        for (int c = 0; c < C; c++) yb[c] = yc[c] + i0 + i;
        __m256i isum[COLS];
#pragma GCC unroll 8
        for (int g0 = 0; g0 < 8; g0 += ch) {
            __m256i t[COLS];
#pragma GCC unroll 8
            for (int g = g0; g < g0 + ch; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)p->q[g]);
                const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    const __m256i m = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast32(yb[c]->qs + 4 * g), q));
                    t[c] = g == g0 ? m : _mm256_add_epi16(t[c], m);
                }
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m256i w = _mm256_madd_epi16(t[c], ones);
                isum[c] = g0 == 0 ? w : _mm256_add_epi32(isum[c], w);
            }
        }
        const __m256 d = _mm256_loadu_ps(p->d);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)   /* vec_dot's step: a multiply and an add, no FMA */
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(kq_f16(yb[c]->d))),
                                                         _mm256_cvtepi32_ps(isum[c])));
    }
    store_cols(C, acc, s, ldc, pr);
}

/* ---- drivers ------------------------------------------------------------------- */

#define DISPATCH_COLS(call_C)                               \
    switch (cc) {                                           \
    case 4: call_C(4); break;                               \
    case 3: call_C(3); break;                               \
    case 2: call_C(2); break;                               \
    default: call_C(1); break;                              \
    }

/* One driver for both families: a panel chunk holds PACK_SB super-blocks
 * (k-quants) or PACK_BK 32-blocks (legacy), packed once and then passed by
 * every column. */
KQ_INLINE void gemm_packed(int wt, int n, int nr, int nc, const uint8_t *x, size_t bx, const uint8_t *y, size_t by,
                           float *s, size_t ldc) {
    _Alignas(32) union { panel_sb k[PACK_SB]; panel_bk l[PACK_BK]; } pan;
    const int legacy = is_legacy(wt), per_chunk = legacy ? PACK_BK : PACK_SB;
    const int nb_all = n / (legacy ? 32 : SB_QK_K);
    for (int r0 = 0; r0 < nr; r0 += PANEL) {
        const int pr = nr - r0 < PANEL ? nr - r0 : PANEL;
        for (int i0 = 0; i0 < nb_all; i0 += per_chunk) {
            const int nb = nb_all - i0 < per_chunk ? nb_all - i0 : per_chunk;
            if (legacy) pack_panel_legacy(wt, x + (size_t)r0 * bx, bx, pr, i0, nb, pan.l);
            else pack_panel_k(wt, x + (size_t)r0 * bx, bx, pr, i0, nb, pan.k);
            for (int c0 = 0; c0 < nc; c0 += COLS) {
                const sb_block_q8_K *yk[COLS];
                const sb_block_q8_0 *yl[COLS];
                const int cc = nc - c0 < COLS ? nc - c0 : COLS;
                for (int c = 0; c < cc; c++) {
                    yk[c] = (const sb_block_q8_K *)(y + (size_t)(c0 + c) * by);
                    yl[c] = (const sb_block_q8_0 *)(y + (size_t)(c0 + c) * by);
                }
                float *so = s + (size_t)c0 * ldc + r0;
#define CALL(C_)                                                                          \
    (legacy ? micro_legacy(wt, C_, pan.l, nb, yl, i0, so, ldc, pr, i0 > 0)                \
            : micro_k(wt, C_, pan.k, nb, yk, i0, so, ldc, pr, i0 > 0))
                DISPATCH_COLS(CALL)
#undef CALL
            }
        }
    }
}

/* Too few columns to repay packing: one vec_dot per pair. */
static void gemm_pairs(sb_vec_dot_fn dot, int n, int nr, int nc, const uint8_t *x, size_t bx, const uint8_t *y,
                       size_t by, float *s, size_t ldc) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) dot(n, &s[(size_t)c * ldc + r], x + (size_t)r * bx, y + (size_t)c * by);
}

#define GEMM_FN(t, vt, wt)                                                                          \
    void sb_kq_gemm_##t##_##vt##_avx2(KQ_GEMM_ARGS) {                                              \
        if (nc < PACK_MIN_COLS) gemm_pairs(sb_kq_dot_##t##_##vt##_avx2, n, nr, nc, x, bx, y, by, s, ldc); \
        else gemm_packed(wt, n, nr, nc, x, bx, y, by, s, ldc);                                      \
    }

GEMM_FN(q2_K, q8_K, W_Q2_K)
GEMM_FN(q3_K, q8_K, W_Q3_K)
GEMM_FN(q4_K, q8_K, W_Q4_K)
GEMM_FN(q5_K, q8_K, W_Q5_K)
GEMM_FN(q6_K, q8_K, W_Q6_K)
GEMM_FN(q4_0, q8_0, W_Q4_0)
GEMM_FN(q5_0, q8_0, W_Q5_0)
GEMM_FN(q8_0, q8_0, W_Q8_0)
