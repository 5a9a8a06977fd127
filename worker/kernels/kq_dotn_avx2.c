/* kq_dotn_avx2.c - AVX2 vec_dotn of Q4_K, Q5_K, Q6_K: one weight row
 * against up to 16 activation rows, each result bit for bit the AVX2 vec_dot
 * of kq_kquants_avx2.c (see sb_kq.h and kq_dotn_avx512.c for the scheme).
 *
 * Per super-block the eight 32-quant steps are unpacked once, with their
 * 16-bit scale vectors, into arrays (16 ymm registers cannot hold them, so
 * they sit in L1); each token then does vpmaddubsw + vpmaddwd + vpaddd per
 * step and the 1×1 kernel's float step per super-block (the reference's,
 * kq_ref_step) onto its own sum.
 */
#include "worker/kernels/kq_x86.h"

#define NT_MAX SB_KQ_DOTN_MAX
/* Below this many tokens the 1×1 kernel per token is as fast or faster:
 * spilling the unpacked block to L1 and reading it back costs about what
 * it saves (kq_bench dotn, AVX2 on the Zen 5 box: 0.6-0.8x at nt 1-2,
 * 0.95-1.17x at 4, 1.2-1.55x at 8-16). */
#define SHARED_MIN_NT 3
#define KQ_INLINE static inline __attribute__((always_inline))

enum { W_Q4_K, W_Q5_K, W_Q6_K };

typedef struct {
    __m256i q[8];       /* step k: quants 32k..32k+31, unsigned */
    __m256i sc[8];      /* step k: the int16 scale of each pair lane */
    __m256i pair16;     /* Q4_K/Q5_K: the min of each bsum; Q6_K: its scale */
    float d, dmin;
} kblock2;

KQ_INLINE void decode_k4(int wt, const uint8_t *blk, kblock2 *b) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const sb_block_q4_K *x4 = (const sb_block_q4_K *)blk;      /* d, dmin, scales: same offsets in Q5_K */
    const uint8_t *qs = wt == W_Q4_K ? x4->qs : ((const sb_block_q5_K *)blk)->qs;
    const __m128i sm = kq_scales_k4_128(blk);
    const __m256i sc2 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    b->pair16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    b->d = kq_f16(x4->d);
    b->dmin = kq_f16(x4->dmin);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if (wt == W_Q5_K) {
            const __m256i hbits = _mm256_loadu_si256((const __m256i *)((const sb_block_q5_K *)blk)->qh);
            lo = _mm256_or_si256(lo, kq_bit_to_4(hbits, 2 * j));
            hi = _mm256_or_si256(hi, kq_bit_to_4(hbits, 2 * j + 1));
        }
        b->q[2 * j] = lo;
        b->q[2 * j + 1] = hi;
        b->sc[2 * j] = _mm256_shuffle_epi8(sc2, scale_pair_shuffle(2 * j));
        b->sc[2 * j + 1] = _mm256_shuffle_epi8(sc2, scale_pair_shuffle(2 * j + 1));
    }
}

KQ_INLINE void decode_q6(const uint8_t *blk, kblock2 *b) {
    const sb_block_q6_K *x = (const sb_block_q6_K *)blk;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(0x30);
    b->pair16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    const __m256i sch[2] = { _mm256_permute2x128_si256(b->pair16, b->pair16, 0x00),
                             _mm256_permute2x128_si256(b->pair16, b->pair16, 0x11) };
    b->d = kq_f16(x->d);
    b->dmin = 0;
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        b->q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
        b->q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
        b->q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2));
        b->q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) b->sc[4 * h + p] = _mm256_shuffle_epi8(sch[h], scale_16_shuffle(p));
    }
}

KQ_INLINE void dotn_k2(int wt, int n, int nt, float *s, size_t s_stride, const void *vx, const void *vy, size_t y_stride) {
    if (nt < SHARED_MIN_NT) {
        const sb_vec_dot_fn dot = wt == W_Q4_K ? sb_kq_dot_q4_K_q8_K_avx2 : wt == W_Q5_K ? sb_kq_dot_q5_K_q8_K_avx2
                                                                          : sb_kq_dot_q6_K_q8_K_avx2;
        for (int t = 0; t < nt; t++) dot(n, s + (size_t)t * s_stride, vx, (const uint8_t *)vy + (size_t)t * y_stride);
        return;
    }
    const uint8_t *x = vx;
    const size_t bb = wt == W_Q4_K ? sizeof(sb_block_q4_K) : wt == W_Q5_K ? sizeof(sb_block_q5_K) : sizeof(sb_block_q6_K);
    float sum[NT_MAX];
    for (int t = 0; t < nt; t++) sum[t] = 0.0f;
    for (int i = 0; i < n / SB_QK_K; i++) {
        const uint8_t *blk = x + (size_t)i * bb;
        kq_prefetch_ahead(blk, bb);
        kblock2 b;
        if (wt == W_Q6_K) decode_q6(blk, &b);
        else decode_k4(wt, blk, &b);
        for (int t = 0; t < nt; t++) {
            const sb_block_q8_K *y = (const sb_block_q8_K *)((const uint8_t *)vy + (size_t)t * y_stride) + i;
            __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(b.sc[k], _mm256_maddubs_epi16(b.q[k], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * k)))));
            const __m256i m = _mm256_madd_epi16(b.pair16, _mm256_loadu_si256((const __m256i *)y->bsums));
            if (wt == W_Q6_K)
                sum[t] += (b.d * y->d) * (float)kq_hsum_i32x8(_mm256_sub_epi32(sumi, _mm256_slli_epi32(m, 5)));
            else
                sum[t] = kq_ref_step_x8(sum[t], b.d, b.dmin, y->d, sumi, m);
        }
    }
    for (int t = 0; t < nt; t++) s[(size_t)t * s_stride] = sum[t];
}

void sb_kq_dotn_q4_K_q8_K_avx2(KQ_DOTN_ARGS) { dotn_k2(W_Q4_K, n, nt, s, s_stride, x, y, y_stride); }
void sb_kq_dotn_q5_K_q8_K_avx2(KQ_DOTN_ARGS) { dotn_k2(W_Q5_K, n, nt, s, s_stride, x, y, y_stride); }
void sb_kq_dotn_q6_K_q8_K_avx2(KQ_DOTN_ARGS) { dotn_k2(W_Q6_K, n, nt, s, s_stride, x, y, y_stride); }
