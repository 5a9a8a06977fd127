/* kq_kquants_avx2.c - AVX2 dots of the k-quants with Q8_K activations.
 *
 * Shape of every kernel: per 256-element super-block, maddubs (u8 quants ×
 * i8 activations -> i16 pair sums) then madd with the 16-bit sub-block
 * scales (-> i32), summed exactly over the super-block; the min / offset
 * terms come from the activation's bsums (Σq8 per 16 elements), also in
 * integers; then the reference's float step per super-block, in scalar
 * float and block order (kq_ref_step; sum + (d·dy)·isum for Q3_K and Q6_K).
 * So the integer sums and the result equal the reference kernel's, bit for
 * bit, and so do the multi-token kernels of this level (kq_dotn_avx2.c,
 * kq_x8_avx2.c, kq_kpack_avx2.c), which repeat that step: a token's numbers
 * do not depend on the pass it is in. The horizontal integer sums (one
 * reduction for isum and the min sum: kq_ref_step_x8) cost a few
 * instructions per super-block against the ~80 of its integer work.
 *
 * Layouts (see kq_kquants_ref.c): Q2_K/Q3_K keep 4 2-bit planes per 32
 * bytes (plane p of byte l = element 32p + l of that 128); Q4_K/Q5_K keep
 * sub-block pairs as the low/high nibbles of 32 bytes; Q6_K splits 128
 * elements into ql[0..63] nibbles and qh[0..31] 2-bit planes.
 */
#include "worker/kernels/kq_x86.h"

/* ==== Q2_K: q in 0..3, x = d·(sc&15)·q - dmin·(sc>>4) ===================== */

static inline __attribute__((always_inline)) void dot_q2_K(int n, float *s, const void *vx, const void *vy, size_t pf) {
    const sb_block_q2_K *x = vx;
    const sb_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum = 0.0f;
    for (int i = 0; i < n / SB_QK_K; i++) {
        kq_prefetch_at(&x[i], pf, sizeof x[i]);
        const __m128i packed = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m128i sc8 = _mm_and_si128(packed, _mm_set1_epi8(0xF));
        const __m128i mn8 = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF));
        const __m256i mins = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn8), _mm256_loadu_si256((const __m256i *)y[i].bsums));
        const __m256i sc16 = _mm256_cvtepu8_epi16(sc8);
        /* per 128-half h: the 8 scales 8h..8h+7 in both lanes */
        const __m256i sch[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * p), m3);
                const __m256i p16 = _mm256_maddubs_epi16(q2, _mm256_loadu_si256((const __m256i *)(q8 + 32 * p)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sch[h], scale_16_shuffle(p)), p16));
            }
            q8 += 128;
        }
        sum = kq_ref_step_x8(sum, kq_f16(x[i].d), kq_f16(x[i].dmin), y[i].d, sumi, mins);
    }
    *s = sum;
}
KQ_PF_VARIANTS(dot_q2_K, sb_kq_dot_q2_K_q8_K_avx2)

/* ==== Q3_K: q in -4..3 = low 2 bits + 4·hmask bit - 4 ======================= */
/* We dot the unsigned 0..7 value and take 4·Σ sc·bsums back out. */

static inline __attribute__((always_inline)) void dot_q3_K(int n, float *s, const void *vx, const void *vy, size_t pf) {
    const sb_block_q3_K *x = vx;
    const sb_block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    float sum = 0.0f;
    for (int i = 0; i < n / SB_QK_K; i++) {
        kq_prefetch_at(&x[i], pf, sizeof x[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(kq_scales_q3_128(x[i].scales));
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums)), 2);
        const __m256i sch[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const int plane = 4 * h + p; /* hmask bit of these 32 elements */
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * p), m3);
                /* bring bit `plane` to bit 2: shift left or right by |plane-2| */
                const __m256i hb = plane >= 2 ? _mm256_srli_epi16(hbits, plane - 2) : _mm256_slli_epi16(hbits, 2 - plane);
                const __m256i q3 = _mm256_or_si256(lo, _mm256_and_si256(hb, m4));
                const __m256i p16 = _mm256_maddubs_epi16(q3, _mm256_loadu_si256((const __m256i *)(q8 + 32 * p)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sch[h], scale_16_shuffle(p)), p16));
            }
            q8 += 128;
        }
        sum += (kq_f16(x[i].d) * y[i].d) * (float)kq_hsum_i32x8(_mm256_sub_epi32(sumi, offset));
    }
    *s = sum;
}
KQ_PF_VARIANTS(dot_q3_K, sb_kq_dot_q3_K_q8_K_avx2)

/* ==== Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scales and mins ================ */

static inline __attribute__((always_inline)) void dot_q4_K(int n, float *s, const void *vx, const void *vy, size_t pf) {
    const sb_block_q4_K *x = vx;
    const sb_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float sum = 0.0f;
    for (int i = 0; i < n / SB_QK_K; i++) {
        kq_prefetch_at(&x[i], pf, sizeof x[i]);
        const __m128i sm = kq_scales_k4_128(&x[i]);
        const __m256i sc2 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
            const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sc2, scale_pair_shuffle(2 * j)), p_lo));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sc2, scale_pair_shuffle(2 * j + 1)), p_hi));
        }
        sum = kq_ref_step_x8(sum, kq_f16(x[i].d), kq_f16(x[i].dmin), y[i].d, sumi, kq_k4_mins_dot_bsums(sm, y[i].bsums));
    }
    *s = sum;
}
KQ_PF_VARIANTS(dot_q4_K, sb_kq_dot_q4_K_q8_K_avx2)

static inline __attribute__((always_inline)) void dot_q5_K(int n, float *s, const void *vx, const void *vy, size_t pf) {
    const sb_block_q5_K *x = vx;
    const sb_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float sum = 0.0f;
    for (int i = 0; i < n / SB_QK_K; i++) {
        kq_prefetch_at(&x[i], pf, sizeof x[i]);
        const __m128i sm = kq_scales_k4_128(&x[i]);
        const __m256i sc2 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const int8_t *q8 = y[i].qs;
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            /* bit 2j of qh is sub-block 2j's fifth bit, bit 2j+1 sub-block
             * 2j+1's; one shift and one mask each (this loop's instruction
             * count bounds the dot) */
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), kq_bit_to_4(hbits, 2 * j));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), kq_bit_to_4(hbits, 2 * j + 1));
            const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
            const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sc2, scale_pair_shuffle(2 * j)), p_lo));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sc2, scale_pair_shuffle(2 * j + 1)), p_hi));
        }
        sum = kq_ref_step_x8(sum, kq_f16(x[i].d), kq_f16(x[i].dmin), y[i].d, sumi, kq_k4_mins_dot_bsums(sm, y[i].bsums));
    }
    *s = sum;
}
KQ_PF_VARIANTS(dot_q5_K, sb_kq_dot_q5_K_q8_K_avx2)

/* ==== Q6_K: q in -32..31 stored +32; int8 scales per 16 ===================== */
/* Dot the unsigned 0..63 value and take 32·Σ sc·bsums back out. */

static inline __attribute__((always_inline)) void dot_q6_K(int n, float *s, const void *vx, const void *vy, size_t pf) {
    const sb_block_q6_K *x = vx;
    const sb_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(0x30);
    float sum = 0.0f;
    for (int i = 0; i < n / SB_QK_K; i++) {
        kq_prefetch_at(&x[i], pf, sizeof x[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums)), 5);
        const __m256i sch[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            /* planes 0..3: elements l, l+32, l+64, l+96 of this 128 */
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2)),
            };
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const __m256i p16 = _mm256_maddubs_epi16(q[p], _mm256_loadu_si256((const __m256i *)(q8 + 32 * p)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(sch[h], scale_16_shuffle(p)), p16));
            }
            q8 += 128;
        }
        sum += (kq_f16(x[i].d) * y[i].d) * (float)kq_hsum_i32x8(_mm256_sub_epi32(sumi, offset));
    }
    *s = sum;
}
KQ_PF_VARIANTS(dot_q6_K, sb_kq_dot_q6_K_q8_K_avx2)
