/* kq_x8_avx2.c - AVX2 dots of 8 interleaved rows (x8 layout, kq_x8.c)
 * with one Q8_K activation row: the decode matrix-vector kernels.
 *
 * Each 32-bit lane of a vector is one row: 4 consecutive quants of it.
 * maddubs against the 4 activation bytes broadcast to every lane gives
 * 8 rows' partial sums at once; they are summed in 16 bits over as many
 * groups as cannot overflow (Q4_K: a whole sub-block, Q5_K: half, Q6_K:
 * 8 elements) and widened by madd with the sub-block's scale, which is
 * one vector for the 8 rows. The 8 results leave as one vector: no
 * horizontal sums. The float steps per super-block are those of the
 * reference vec_dot, in the same order and without FMA, so results
 * match sb_kq_gemv8_*_ref (and vec_dot_ref) bit for bit.
 */
#include "worker/kernels/kq_x86.h"

static inline __m256i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Qword q of v (8 bytes, one per row) into the low half of both 128-bit
 * lanes, and qword q+1 into the high halves. */
static inline __m256i qwords_to_lanes(__m256i v, int q) {
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(2 * q, 2 * q + 1, 2 * q + 2, 2 * q + 3,
                                                            2 * q, 2 * q + 1, 2 * q + 2, 2 * q + 3));
}

/* After qwords_to_lanes: lane r = byte r of qword q zero-extended into both
 * 16-bit halves (a scale ready for madd against two 16-bit sums). */
static inline __m256i rows_dup_u16(__m256i p) {
    return _mm256_shuffle_epi8(p, _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                                   4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
}

/* After qwords_to_lanes: lane r = (byte r of qword q, byte r of qword q+1)
 * as two zero-extended 16-bit values. */
static inline __m256i rows_pair_u16(__m256i p) {
    return _mm256_shuffle_epi8(p, _mm256_setr_epi8(0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11, -1,
                                                   4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15, -1));
}

/* 2-bit field f (0..3) of every byte of h, moved to bits 4..5. */
static inline __m256i field_to_45(__m256i h, int f) {
    const __m256i t = f < 2 ? _mm256_slli_epi16(h, 4 - 2 * f) : f > 2 ? _mm256_srli_epi16(h, 2) : h;
    return _mm256_and_si256(t, _mm256_set1_epi8(0x30));
}

/* ==== Q4_K / Q5_K ============================================================ */

/* Σ_j mn[r][j]·(bsum[2j] + bsum[2j+1]) per row r, from the unpacked mins
 * (bytes 8j'+r of m03 / m47, j' = j mod 4). */
static inline __m256i k4_mins(__m256i m03, __m256i m47, const int16_t *bsums) {
    const __m256i b8 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    const __m256i bp = _mm256_packs_epi32(b8, b8);   /* i32 element 0,1,4,5: (B0,B1) (B2,B3) (B4,B5) (B6,B7) */
    __m256i acc = _mm256_madd_epi16(rows_pair_u16(qwords_to_lanes(m03, 0)), _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(0)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(rows_pair_u16(qwords_to_lanes(m03, 2)), _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(1))));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(rows_pair_u16(qwords_to_lanes(m47, 0)), _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(4))));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(rows_pair_u16(qwords_to_lanes(m47, 2)), _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(5))));
}

/* Sub-blocks 4..7 pair with 0..3 as qwords 0..3 of m47: the mins term wants
 * pairs (j, j+1) = (0,1), (2,3) from m03 and (4,5), (6,7) from m47. */

/* The body of both kernels; q5 is a constant after inlining. */
static inline void k4_gemv8(int n, float *s, const uint8_t *x, const sb_block_q8_K *y, int q5) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const size_t tile = sizeof(kq_k4x8_head) + (q5 ? 256 : 0) + 1024;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / SB_QK_K; b++, x += tile) {
        kq_prefetch_ahead(x, tile);
        const kq_k4x8_head *h = (const kq_k4x8_head *)x;
        const uint8_t *qh = x + sizeof *h, *qs = x + sizeof *h + (q5 ? 256 : 0);
        const __m256i L = _mm256_loadu_si256((const __m256i *)h->scl);
        const __m256i ML = _mm256_loadu_si256((const __m256i *)h->mnl);
        const __m256i H = _mm256_loadu_si256((const __m256i *)h->sh);
        const __m256i s03 = _mm256_or_si256(_mm256_and_si256(L, m4), _mm256_slli_epi16(_mm256_and_si256(H, _mm256_set1_epi8(0x03)), 4));
        const __m256i s47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), m4), _mm256_slli_epi16(_mm256_and_si256(H, _mm256_set1_epi8(0x0C)), 2));
        const __m256i m03 = _mm256_or_si256(_mm256_and_si256(ML, m4), _mm256_and_si256(H, _mm256_set1_epi8(0x30)));
        const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ML, 4), m4), _mm256_and_si256(_mm256_srli_epi16(H, 2), _mm256_set1_epi8(0x30)));
        const int8_t *q8 = y[b].qs;
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++, q8 += 32, qs += 128) {
            const __m256i sc = rows_dup_u16(qwords_to_lanes(j < 4 ? s03 : s47, j & 3));
            const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(qh + 32 * j)) : _mm256_setzero_si256();
            __m256i c16[2] = { _mm256_setzero_si256(), _mm256_setzero_si256() };
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m256i X = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                __m256i A = _mm256_and_si256(X, m4), B = _mm256_and_si256(_mm256_srli_epi16(X, 4), m4);
                if (q5) {
                    A = _mm256_or_si256(A, kq_bit_to_4(hb, 2 * c));
                    B = _mm256_or_si256(B, kq_bit_to_4(hb, 2 * c + 1));
                }
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(A, bcast32(q8 + 8 * c)),
                                                   _mm256_maddubs_epi16(B, bcast32(q8 + 8 * c + 4)));
                /* Q5_K: ≤ 2·2·31·127 per chunk, two chunks per 16-bit sum;
                 * Q4_K: ≤ 2·2·15·127, all four fit */
                c16[q5 ? c / 2 : 0] = _mm256_add_epi16(c16[q5 ? c / 2 : 0], p);
            }
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(c16[0], sc));
            if (q5) isum = _mm256_add_epi32(isum, _mm256_madd_epi16(c16[1], sc));
        }
        const __m256i summs = k4_mins(m03, m47, y[b].bsums);
        const __m256 dy = _mm256_set1_ps(y[b].d);
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h->d)), dy);
        const __m256 dm = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h->dmin)), dy);
        acc = _mm256_add_ps(acc, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)),
                                               _mm256_mul_ps(dm, _mm256_cvtepi32_ps(summs))));
    }
    _mm256_storeu_ps(s, acc);
}

void sb_kq_gemv8_q4_K_q8_K_avx2(int n, float *s, const void *vx, const void *vy) {
    k4_gemv8(n, s, vx, vy, 0);
}

void sb_kq_gemv8_q5_K_q8_K_avx2(int n, float *s, const void *vx, const void *vy) {
    k4_gemv8(n, s, vx, vy, 1);
}

/* ==== Q6_K =================================================================== */

void sb_kq_gemv8_q6_K_q8_K_avx2(int n, float *s, const void *vx, const void *vy) {
    const kq_q6_Kx8 *x = vx;
    const sb_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    /* after qwords_to_lanes: lane r = byte r of qword q in all four bytes
     * (arithmetic >> 8 of each 16-bit half then sign-extends it); +8: of
     * qword q+1 */
    const __m256i dup_s8 = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                            4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    /* lane r = (byte r of qword q, byte r of qword q+1), each ·256 */
    const __m256i pair_hi = _mm256_setr_epi8(-1, 0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11,
                                             -1, 4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / SB_QK_K; b++) {
        const kq_q6_Kx8 *t = &x[b];
        kq_prefetch_ahead(t, sizeof *t);
        __m256i sc4[4];
        for (int m = 0; m < 4; m++) sc4[m] = _mm256_loadu_si256((const __m256i *)(t->sc + 32 * m));
        const int8_t *q8 = y[b].qs;
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++, q8 += 32) {
            /* sub-blocks 2g, 2g+1 are qwords (2g)%4 and (2g)%4+1 of sc4[g/2] */
            const __m256i pq = qwords_to_lanes(sc4[g / 2], (2 * g) & 3);
            const __m256i sc[2] = { _mm256_srai_epi16(_mm256_shuffle_epi8(pq, dup_s8), 8),
                                    _mm256_srai_epi16(_mm256_shuffle_epi8(pq, _mm256_add_epi8(dup_s8, _mm256_set1_epi8(8))), 8) };
            const __m256i ha = _mm256_loadu_si256((const __m256i *)(t->qh + 64 * g));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(t->qh + 64 * g + 32));
            const uint8_t *ql = t->ql + 128 * g;
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m256i X = _mm256_loadu_si256((const __m256i *)(ql + 32 * c));
                const __m256i hh = c < 2 ? ha : hb;
                const int f = 2 * (c & 1);
                const __m256i A = _mm256_or_si256(_mm256_and_si256(X, m4), field_to_45(hh, f));
                const __m256i B = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(X, 4), m4), field_to_45(hh, f + 1));
                /* ≤ 2·2·63·127 = 32004: one chunk per 16-bit sum */
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(A, bcast32(q8 + 8 * c)),
                                                   _mm256_maddubs_epi16(B, bcast32(q8 + 8 * c + 4)));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc[c / 2]));
            }
        }
        /* the +32 bias of the stored quants: 32·Σ_j sc[r][j]·bsum[j], as
         * (Σ 256·sc·bsum) / 8 so that the scales need no sign extension */
        __m256i off = _mm256_setzero_si256();
        for (int k = 0; k < 8; k++) {
            int32_t bb;
            memcpy(&bb, &y[b].bsums[2 * k], 4);
            off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_shuffle_epi8(qwords_to_lanes(sc4[k / 2], (2 * k) & 3), pair_hi),
                                                          _mm256_set1_epi32(bb)));
        }
        isum = _mm256_sub_epi32(isum, _mm256_srai_epi32(off, 3));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t->d)), _mm256_set1_ps(y[b].d));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
    }
    _mm256_storeu_ps(s, acc);
}
