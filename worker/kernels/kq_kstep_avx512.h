/* kq_kstep_avx512.h - private to the AVX-512 matrix kernels (kq_avx512.c,
 * kq_gemm_avx512.c, kq_kgemm_avx512.c, kq_kpack_avx512.c, kq_dotn_avx512.c,
 * kq_dotn_il_avx512.c, kq_kquants_avx512.c, kq_q2k_avx512vbmi.c,
 * kq_kpack_amx.c): the weight types they share, the decode of one 64-quant
 * step of a k-quant super-block and the spread of its sub-block scales,
 * the packed k-quant gemms' entry points, the decode dots' prefetch and
 * rows, the Q2_K dot around its block, the decode of two Q4_0/Q5_0/Q8_0
 * blocks, the 16×16 dword transpose the panel packers use, and the lane
 * helpers of the one-token-per-lane kernels, so every kernel unpacks bits
 * with one piece of code. Include only from files compiled with the
 * AVX-512 flags. */
#ifndef SB_KQ_KSTEP_AVX512_H
#define SB_KQ_KSTEP_AVX512_H

#include <stddef.h>
#include <string.h>

#include "worker/kernels/kq_x86.h"

#define KQ_INLINE static inline __attribute__((always_inline))

/* The weight types, by SB_TYPE id (their block sizes: kq_block_bytes). */
enum { W_Q2_K = SB_TYPE_Q2_K, W_Q3_K = SB_TYPE_Q3_K, W_Q4_K = SB_TYPE_Q4_K, W_Q5_K = SB_TYPE_Q5_K, W_Q6_K = SB_TYPE_Q6_K };

/* o[k] = dword k of every r[i], i = 0..15 (a 16×16 dword transpose). */
static inline void transpose16(const __m512i r[16], __m512i o[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int a = 0; a < 4; a++) {   /* rows 4a..4a+3 */
        u[4 * a + 0] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
        u[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    /* u[4a+b], 128-bit lane l: rows 4a..4a+3 of dword 4l+b */
    for (int b = 0; b < 4; b++) {
        const __m512i v = _mm512_shuffle_i32x4(u[b], u[4 + b], 0x88), w = _mm512_shuffle_i32x4(u[b], u[4 + b], 0xDD);
        const __m512i x = _mm512_shuffle_i32x4(u[8 + b], u[12 + b], 0x88), y = _mm512_shuffle_i32x4(u[8 + b], u[12 + b], 0xDD);
        o[b] = _mm512_shuffle_i32x4(v, x, 0x88);
        o[8 + b] = _mm512_shuffle_i32x4(v, x, 0xDD);
        o[4 + b] = _mm512_shuffle_i32x4(w, y, 0x88);
        o[12 + b] = _mm512_shuffle_i32x4(w, y, 0xDD);
    }
}

KQ_INLINE __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* A vector of int16 lanes holding scale base + lane >> shift of sc16 (the
 * 16 int16 scales in a 256-bit register): shift 3 gives one scale per
 * 128-bit lane (16-element sub-blocks), 4 one per 256-bit half (32-element
 * sub-blocks). vpermw does the broadcast. */
KQ_INLINE __m512i spread_scales(__m512i sc16, int base, int shift) {
    const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                          15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)base), _mm512_srli_epi16(iota, (unsigned)shift));
    return _mm512_permutexvar_epi16(idx, sc16);
}

/* Quants 64j..64j+63 of one super-block as unsigned bytes, element order
 * (the decode of kq_kquants_avx512.c, without the scales). */
KQ_INLINE __m512i kq_kstep_decode(int wt, const uint8_t *blk, int j) {
    const int h = j >> 1, odd = j & 1;
    switch (wt) {
    case W_Q2_K: {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(((const sb_block_q2_K *)blk)->qs + 32 * h));
        const __m512i v = odd ? join(_mm256_srli_epi16(bits, 4), _mm256_srli_epi16(bits, 6)) : join(bits, _mm256_srli_epi16(bits, 2));
        return _mm512_and_si512(v, _mm512_set1_epi8(3));
    }
    case W_Q3_K: {
        const sb_block_q3_K *b = (const sb_block_q3_K *)blk;
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        const int pl = 4 * h + 2 * odd;
        const __m512i lo = odd ? join(_mm256_srli_epi16(bits, 4), _mm256_srli_epi16(bits, 6)) : join(bits, _mm256_srli_epi16(bits, 2));
        const __m512i hi = _mm512_slli_epi16(_mm512_and_si512(join(_mm256_srli_epi16(hm, pl), _mm256_srli_epi16(hm, pl + 1)), _mm512_set1_epi8(1)), 2);
        return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi8(3)), hi);
    }
    case W_Q4_K:
    case W_Q5_K: {
        const uint8_t *qs = wt == W_Q4_K ? ((const sb_block_q4_K *)blk)->qs : ((const sb_block_q5_K *)blk)->qs;
        const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * j)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, shift), _mm512_set1_epi8(0xF));
        if (wt == W_Q5_K) {
            const __m256i qh = _mm256_loadu_si256((const __m256i *)((const sb_block_q5_K *)blk)->qh);
            const __m512i hz = join(_mm256_srli_epi16(qh, 2 * j), _mm256_srli_epi16(qh, 2 * j + 1));
            q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(hz, _mm512_set1_epi8(1)), 4));
        }
        return q;
    }
    default: {
        const sb_block_q6_K *b = (const sb_block_q6_K *)blk;
        const __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(0x30);
        if (!odd)
            return _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(join(_mm256_slli_epi16(hb, 4), _mm256_slli_epi16(hb, 2)), m2));
        return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(join(hb, _mm256_srli_epi16(hb, 2)), m2));
    }
    }
}

/* The five k-quant gemm entry points sb_kq_gemm_<type>_q8_K_<sfx> of a
 * packed kernel packed(wt, n, nr, nc, x, bx, y, by, s, ldc) (kq_kpack_avx512.c,
 * kq_kpack_amx.c): fewer than the including file's PACK_MIN_COLS tokens do
 * not repay the packing and go to the register tiles (kq_kgemm_avx512.c). */
#define KQ_KGEMM_ENTRY(t, wt, sfx, packed)                                      \
    void sb_kq_gemm_##t##_q8_K_##sfx(KQ_GEMM_ARGS) {                            \
        if (nc < PACK_MIN_COLS) {                                               \
            sb_kq_gemm_##t##_q8_K_tile_avx512(n, nr, nc, x, bx, y, by, s, ldc); \
            return;                                                             \
        }                                                                       \
        packed(wt, n, nr, nc, x, bx, y, by, s, ldc);                            \
    }
#define KQ_KGEMM_ENTRIES(sfx, packed)                \
    KQ_KGEMM_ENTRY(q2_K, W_Q2_K, sfx, packed)        \
    KQ_KGEMM_ENTRY(q3_K, W_Q3_K, sfx, packed)        \
    KQ_KGEMM_ENTRY(q4_K, W_Q4_K, sfx, packed)        \
    KQ_KGEMM_ENTRY(q5_K, W_Q5_K, sfx, packed)        \
    KQ_KGEMM_ENTRY(q6_K, W_Q6_K, sfx, packed)

/* ---- the decode dots' prefetch and rows (kq_kquants_avx512.c) ------------- */

/* Decode streams the weights from DRAM: the AVX2 dots' prefetch of the
 * bytes KQ_PREFETCH_AHEAD ahead (kq_x86.h). KQ_AVX512_PREFETCH=0 builds
 * without it, for the A/B of docs/PERFORMANCE.md ("AVX-512 decode"). */
#ifndef KQ_AVX512_PREFETCH
#define KQ_AVX512_PREFETCH 1
#endif
KQ_INLINE void kq512_prefetch(const void *block, size_t bytes, size_t ahead) {
    if (KQ_AVX512_PREFETCH) kq_prefetch_at(block, ahead, bytes);
}

/* The k-quant decode dots (kq_kquants_avx512.c, kq_q2k_avx512vbmi.c)
 * take nr ≤ KQ_ROWS_MAX rows; nr is a constant where they are inlined, and KQ_ROWS unrolls their per-row loops so that
 * each row's accumulators stay in registers. KQ_ROWS_BODIES(body) makes
 * body_1 (one row: the vec_dot's shape), body_r2 and body_r4 (vec_dot2's
 * and vec_dot4's: rows x_step bytes apart, results s_step floats apart).
 * Four rows prefetch half the distance ahead each, so that their streams
 * together ask for as many bytes ahead as two rows' do: at 8 KiB a row four
 * rows decoded the 8B 10 % slower than at 4 KiB (docs/PERFORMANCE.md). */
#define KQ_ROWS_MAX 4
#define KQ_ROWS _Pragma("GCC unroll 4")
#define KQ_ROWS_R(body, R)                                                                                  \
    KQ_INLINE void body##_r##R(int n, float *s, size_t s_step, const void *x, size_t x_step, const void *y, size_t pf) { \
        float *ss[R];                                                                                       \
        const void *xs[R];                                                                                  \
        KQ_ROWS for (int k = 0; k < R; k++) {                                                               \
            ss[k] = s + (size_t)k * s_step;                                                                 \
            xs[k] = (const uint8_t *)x + (size_t)k * x_step;                                                \
        }                                                                                                   \
        body(n, R, ss, xs, y, R > 2 ? pf * 2 / R : pf);                                                     \
    }
#define KQ_ROWS_BODIES(body)                                                                               \
    KQ_INLINE void body##_1(int n, float *s, const void *x, const void *y, size_t pf) {                    \
        float *const ss[1] = { s };                                                                        \
        const void *const xs[1] = { x };                                                                   \
        body(n, 1, ss, xs, y, pf);                                                                         \
    }                                                                                                      \
    KQ_ROWS_R(body, 2)                                                                                     \
    KQ_ROWS_R(body, 4)

/* ---- Q2_K / Q3_K bit planes, and the Q2_K dot around its block ------------- */

/* 32 bytes in both halves of a register (a broadcast load: no shuffle). */
static inline __m512i load_32_twice(const uint8_t *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }

/* Per-16-bit-lane counts: lo in the low 256 bits, hi in the high ones, so
 * one vpsrlvw of [bytes, bytes] gives two 2-bit planes (Q2_K/Q3_K) without
 * shifting two halves apart and joining them (a port-5 insert each). */
static inline __m512i halves_epi16(short lo, short hi) {
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

/* Q2_K/Q3_K: planes p and p+1 of 32 quant bytes broadcast to both halves,
 * as 0..3 per byte; sh = halves_epi16(2p, 2p + 2). */
static inline __m512i planes2(__m512i bits2, __m512i sh, __m512i m3) {
    return _mm512_and_si512(_mm512_srlv_epi16(bits2, sh), m3);
}

_Static_assert(offsetof(sb_block_q2_K, dmin) == offsetof(sb_block_q2_K, d) + sizeof(sb_fp16), "Q2_K d, dmin adjacent");

/* The Q2_K dot of nr rows, around block_fn(x, y, &mins, pf): one
 * super-block's integer sum (16 lanes) and the products of its mins with
 * the bsums (8 lanes). The two block functions (kq_kquants_avx512.c, and
 * kq_q2k_avx512vbmi.c for CPUs with vpermb) give the same lanes, so the
 * dots built on them agree bit for bit. */
#define KQ_DOT_Q2_K(name, block_fn) \
    KQ_INLINE void name(int n, int nr, float *const *s, const void *const *vx, const void *vy, size_t pf) {                      \
        const sb_block_q8_K *y = vy;                                                                                             \
        const sb_block_q2_K *x[KQ_ROWS_MAX];                                                                                     \
        __m512 acc[KQ_ROWS_MAX];                                                                                                 \
        __m256 acc_min[KQ_ROWS_MAX];                                                                                             \
        KQ_ROWS for (int r = 0; r < nr; r++) {                                                                                   \
            x[r] = vx[r];                                                                                                        \
            acc[r] = _mm512_setzero_ps();                                                                                        \
            acc_min[r] = _mm256_setzero_ps();                                                                                    \
        }                                                                                                                        \
        for (int i = 0; i < n / SB_QK_K; i++)                                                                                    \
            KQ_ROWS for (int r = 0; r < nr; r++) {                                                                               \
                __m256i mins;                                                                                                    \
                const __m512i sumi = block_fn(&x[r][i], &y[i], &mins, pf);                                                       \
                /* d and dmin side by side: one conversion and one multiply by dy                                                \
                 * for both (the same products as two scalar ones) */                                                            \
                int32_t dm;                                                                                                      \
                memcpy(&dm, &x[r][i].d, sizeof dm);                                                                              \
                const __m128 ddy = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dm)), _mm_set1_ps(y[i].d));                         \
                acc[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(ddy), _mm512_cvtepi32_ps(sumi), acc[r]);                          \
                acc_min[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(ddy)), _mm256_cvtepi32_ps(mins), acc_min[r]); \
            }                                                                                                                    \
        KQ_ROWS for (int r = 0; r < nr; r++) *s[r] = _mm512_reduce_add_ps(acc[r]) - kq_hsum_f32x8(acc_min[r]);                   \
    }

/* ---- Q4_0 / Q5_0 / Q8_0: two 32-element blocks per register ---------------- */

enum { L_Q4_0 = SB_TYPE_Q4_0, L_Q5_0 = SB_TYPE_Q5_0, L_Q8_0 = SB_TYPE_Q8_0 };

/* The 32 quants of two blocks in one register (a, b may be the same). */
KQ_INLINE __m512i load_2x32(const int8_t *a, const int8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The nibbles of two blocks, in element order: [lo0 hi0 lo1 hi1] × 16. */
KQ_INLINE __m512i nibbles_2x32(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs0)),
                                                 _mm_loadu_si128((const __m128i *)qs1), 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
    /* z = [q0, q1, q0>>4, q1>>4]; reorder the 128-bit lanes to 0,2,1,3 */
    return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

/* Q5: the nibbles plus 0x10 where the block's fifth bit is set (bit e of
 * qh is element e's). */
KQ_INLINE __m512i q5_x2(const uint8_t *qs0, const uint8_t *qh0, const uint8_t *qs1, const uint8_t *qh1) {
    uint32_t h0, h1;
    memcpy(&h0, qh0, 4);
    memcpy(&h1, qh1, 4);
    const __mmask64 hi = (__mmask64)h0 | ((__mmask64)h1 << 32);
    return _mm512_or_si512(nibbles_2x32(qs0, qs1), _mm512_maskz_mov_epi8(hi, _mm512_set1_epi8(0x10)));
}

/* Blocks b and b1 of a Q4_0/Q5_0/Q8_0 row as unsigned bytes u = q + bias,
 * element order, so that q·y = u·y − bias·y and VNNI's u8 operand takes
 * them as they are: Q4_0 bias 8, Q5_0 16, Q8_0 128 (its sign bit flipped). */
KQ_INLINE __m512i legacy_unsigned_2x32(int wt, const void *vx, int b, int b1) {
    if (wt == L_Q4_0) {
        const sb_block_q4_0 *x = vx;
        return nibbles_2x32(x[b].qs, x[b1].qs);
    }
    if (wt == L_Q5_0) {
        const sb_block_q5_0 *x = vx;
        return q5_x2(x[b].qs, x[b].qh, x[b1].qs, x[b1].qh);
    }
    const sb_block_q8_0 *x = vx;
    return _mm512_xor_si512(load_2x32(x[b].qs, x[b1].qs), _mm512_set1_epi8((char)0x80));
}

/* log2 of the bias above. */
KQ_INLINE int legacy_bias_shift(int wt) { return wt == L_Q4_0 ? 3 : wt == L_Q5_0 ? 4 : 7; }

/* ---- one token per lane (kq_dotn_il_avx512.c) ------------------------------- */

/* G consecutive dwords of p broadcast: lane t·G + h gets p[h]. */
KQ_INLINE __m512i bcast_g(const void *p, int G) {
    switch (G) {
    case 1: return _mm512_set1_epi32(*(const int32_t *)p);
    case 2: return _mm512_set1_epi64(*(const int64_t *)p);
    default: return _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)p));
    }
}

/* Lane t·G + h → the sum over h of each token's G lanes, in all of them. */
KQ_INLINE __m512i sum_g(__m512i v, int G) {
    if (G >= 2) v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)_MM_SHUFFLE(2, 3, 0, 1)));
    if (G >= 4) v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2)));
    return v;
}

#endif
