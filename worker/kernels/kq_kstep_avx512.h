/* kq_kstep_avx512.h - private to the AVX-512 k-quant matrix kernels
 * (kq_kgemm_avx512.c, kq_kpack_avx512.c, kq_dotn_avx512.c): the weight types
 * they share, the decode of one 64-quant step of a super-block and the
 * spread of its sub-block scales, so the tiled kernels, the panel packer and
 * the multi-token dots unpack bits with one piece of code. Include only from
 * files compiled with the AVX-512 flags. */
#ifndef SB_KQ_KSTEP_AVX512_H
#define SB_KQ_KSTEP_AVX512_H

#include "worker/kernels/kq_x86.h"

#define KQ_INLINE static inline __attribute__((always_inline))

enum { W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_Q6_K };

KQ_INLINE size_t block_bytes(int wt) {
    switch (wt) {
    case W_Q2_K: return sizeof(sb_block_q2_K);
    case W_Q3_K: return sizeof(sb_block_q3_K);
    case W_Q4_K: return sizeof(sb_block_q4_K);
    case W_Q5_K: return sizeof(sb_block_q5_K);
    default: return sizeof(sb_block_q6_K);
    }
}

KQ_INLINE __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* int16 lanes: scale base + lane >> shift of sc16 (see kq_kquants_avx512.c). */
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

#endif
