/* kq_q2k_avx512vbmi.c - the AVX-512 Q2_K decode dots for CPUs with VBMI
 * (vpermb): the same numbers as kq_kquants_avx512.c's, with fewer
 * instructions on the port that multiplies.
 *
 * Q2_K quants are 0..3 and its sub-block scales 0..15, so q·scale fits an
 * unsigned byte (≤ 45). One super-block's 16 scales times the 4 values of q
 * make a 64-byte table, T[4k + q] = q·scale_k, and one vpermb looks all 64
 * quants of a step up in it (index q | 4k, k the byte's sub-block). VNNI's
 * vpdpbusd then multiplies those bytes by the activations and adds each 4
 * into an int32 lane: per 64 quants one multiply instead of vpmaddubsw +
 * vpdpwssd, and the scale spread (vpermw) becomes the lookup itself.
 * Every int32 lane sums the same 4 quants' q·scale·y as the vpmaddubsw +
 * vpdpwssd pair does (exact integers, no saturation at these ranges), so
 * the lanes, and the floats made from them in the same order, are
 * identical: the dots are bit for bit those of kq_kquants_avx512.c
 * (test_dotn checks it). On the AVX-512 Xeon the block loop runs ~12 %
 * faster from L2 (docs/PERFORMANCE.md). Chosen by CPUID (kq_table.c). */
#include "worker/kernels/kq_kstep_avx512.h"

/* Byte j of a step's table index: its sub-block base + j/16, times 4 (the
 * quant goes into bits 0-1). */
KQ_INLINE __m512i subblock_index(int base) {
    const __m512i j16 = _mm512_set_epi32(0x0C0C0C0C, 0x0C0C0C0C, 0x0C0C0C0C, 0x0C0C0C0C, 0x08080808, 0x08080808,
                                         0x08080808, 0x08080808, 0x04040404, 0x04040404, 0x04040404, 0x04040404, 0, 0,
                                         0, 0);
    return _mm512_add_epi8(j16, _mm512_set1_epi8((char)(4 * base)));
}

/* The super-block's table: T[4k + q] = q · (scales[k] & 15). */
KQ_INLINE __m512i q2k_table(const uint8_t *scales) {
    const __m512i spread = _mm512_set_epi32(0x0F0F0F0F, 0x0E0E0E0E, 0x0D0D0D0D, 0x0C0C0C0C, 0x0B0B0B0B, 0x0A0A0A0A,
                                            0x09090909, 0x08080808, 0x07070707, 0x06060606, 0x05050505, 0x04040404,
                                            0x03030303, 0x02020202, 0x01010101, 0x00000000);
    const __m512i sc = _mm512_and_si512(_mm512_permutexvar_epi8(spread, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)scales))),
                                        _mm512_set1_epi8(0xF));
    /* q·sc = (q & 2)·sc + (q & 1)·sc: 2·sc where q ≥ 2, then + sc where q is odd */
    const __m512i two = _mm512_maskz_add_epi8(0xCCCCCCCCCCCCCCCCull, sc, sc);
    return _mm512_mask_add_epi8(two, 0xAAAAAAAAAAAAAAAAull, two, sc);
}

/* One Q2_K super-block: the lanes of q2k_block (kq_kquants_avx512.c). */
KQ_INLINE __m512i q2k_block_vbmi(const sb_block_q2_K *x, const sb_block_q8_K *y, __m256i *mins, size_t pf) {
    const __m512i m3 = _mm512_set1_epi8(3), sh01 = halves_epi16(0, 2), sh23 = halves_epi16(4, 6);
    kq512_prefetch(x, sizeof *x, pf);
    const __m256i mn16 = _mm256_srli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)x->scales)), 4);
    *mins = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)y->bsums));
    const __m512i table = q2k_table(x->scales);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i bits = load_32_twice(x->qs + 32 * h);
        /* (plane bits & 3) | 4k in one ternary op: 0xEA is (a & b) | c */
        const __m512i i01 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(bits, sh01), m3, subblock_index(8 * h), 0xEA);
        const __m512i i23 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(bits, sh23), m3, subblock_index(8 * h + 4), 0xEA);
        sumi = _mm512_dpbusd_epi32(sumi, _mm512_permutexvar_epi8(i01, table), _mm512_loadu_si512(y->qs + 128 * h));
        sumi = _mm512_dpbusd_epi32(sumi, _mm512_permutexvar_epi8(i23, table), _mm512_loadu_si512(y->qs + 128 * h + 64));
    }
    return sumi;
}

KQ_DOT_Q2_K(dot_q2_K_vbmi, q2k_block_vbmi)
KQ_ROWS_BODIES(dot_q2_K_vbmi)
KQ_PF_VARIANTS(dot_q2_K_vbmi_1, sb_kq_dot_q2_K_q8_K_avx512vbmi)
KQ_PF_VARIANTS_R(dot_q2_K_vbmi_r2, sb_kq_dot2_q2_K_q8_K_avx512vbmi)
KQ_PF_VARIANTS_R(dot_q2_K_vbmi_r4, sb_kq_dot4_q2_K_q8_K_avx512vbmi)
