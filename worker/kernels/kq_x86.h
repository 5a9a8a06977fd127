/* kq_x86.h - small AVX2 helpers shared by the *_avx2.c / *_avx512.c kernel
 * files. Include it only from those files: it needs their -m flags. */
#ifndef KQ_X86_H
#define KQ_X86_H

#include <immintrin.h>
#include "worker/kernels/kq_internal.h"

/* Decode reads each weight byte once, from DRAM. The hardware prefetchers
 * do not run far enough ahead of a kernel that does this much work per
 * byte (one thread reached ~10 GB/s of the 19 it can read), so the
 * decode kernels ask for the bytes KQ_PREFETCH_AHEAD ahead of the block
 * they work on; past the end of a matrix this touches the next one, which
 * is read soon anyway, and a prefetch never faults. Measured on Llama-3-8B
 * shapes, 2 threads: without it decode is ~15 % slower; 4, 8 and 16 KiB
 * ahead, and the T0, T2 and NTA hints, are alike within the noise. */
/* (KQ_PREFETCH_AHEAD itself is in kq_internal.h: the variant list of
 * kq_tune.c names the default distance too.) */
#ifndef KQ_PREFETCH_HINT
#define KQ_PREFETCH_HINT _MM_HINT_T0
#endif
/* always_inline: a plain static inline that does nothing but prefetch is
 * found "const" by GCC's IPA pass before the early inliner has taken it in
 * where its callers are large, and a call to a const void function is dead
 * code - GCC 12 deleted every prefetch of kq_dotn_il_avx512.c,
 * kq_dotn_avx2.c and the legacy dots that way (objdump showed none). */
static inline __attribute__((always_inline)) void kq_prefetch_at(const void *block, size_t ahead, size_t bytes) {
    if (ahead)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)block + ahead + o, KQ_PREFETCH_HINT);
}
static inline __attribute__((always_inline)) void kq_prefetch_ahead(const void *block, size_t bytes) {
    kq_prefetch_at(block, KQ_PREFETCH_AHEAD, bytes);
}

/* The decode dots' prefetch distance is a variant, not a constant: the
 * best one depends on the machine (docs/KERNELS.md, "Tuning"). A body
 * written as body(n, s, x, y, ahead), always inlined, becomes the default
 * kernel `name` (KQ_PREFETCH_AHEAD) and one twin per other distance,
 * declared by KQ_DECLARE_PF in kq_internal.h. The distance only moves
 * prefetches, so every twin computes what `name` does, bit for bit
 * (test_dotn compares them with memcmp). */
#define KQ_PF_VARIANTS(body, name)                                                                  \
    void name(int n, float *s, const void *x, const void *y) { body(n, s, x, y, KQ_PREFETCH_AHEAD); } \
    void name##_pf0(int n, float *s, const void *x, const void *y) { body(n, s, x, y, 0); }           \
    void name##_pf4k(int n, float *s, const void *x, const void *y) { body(n, s, x, y, 4096); }       \
    void name##_pf16k(int n, float *s, const void *x, const void *y) { body(n, s, x, y, 16384); }     \
    void name##_pf32k(int n, float *s, const void *x, const void *y) { body(n, s, x, y, 32768); }
/* The same twins of a multi-row body: body(n, s, s_step, x, x_step, y, ahead). */
#define KQ_DOTR_ARGS int n, float *s, size_t s_step, const void *x, size_t x_step, const void *y
#define KQ_PF_VARIANTS_R(body, name)                                                                     \
    void name(KQ_DOTR_ARGS) { body(n, s, s_step, x, x_step, y, KQ_PREFETCH_AHEAD); }                       \
    void name##_pf0(KQ_DOTR_ARGS) { body(n, s, s_step, x, x_step, y, 0); }                                 \
    void name##_pf4k(KQ_DOTR_ARGS) { body(n, s, s_step, x, x_step, y, 4096); }                             \
    void name##_pf16k(KQ_DOTR_ARGS) { body(n, s, s_step, x, x_step, y, 16384); }                           \
    void name##_pf32k(KQ_DOTR_ARGS) { body(n, s, s_step, x, x_step, y, 32768); }

/* fp16 -> fp32 with F16C (exact, like sb_fp16_to_fp32, but one instruction). */
static inline float kq_f16(sb_fp16 h) { return _cvtsh_ss(h); }

static inline float kq_hsum_f32x8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline float kq_hsum_f32x4(__m128 r) {
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline int kq_hsum_i32x8(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

static inline int kq_hsum_i32x4(__m128i r) {
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

/* The reference k-quant dot's float step for one super-block (kq_kquants_ref.c):
 * the block's exact integer sum and min sum, then
 * sum + ((d·dy)·isum − (dmin·dy)·summs), each operation rounded, no FMA.
 * Every kernel that ends its super-blocks with it, in block order, gives
 * the reference's bits, whatever else it does in integers: so a token's
 * result is the same in a decode step and in a prompt pass (docs/KERNELS.md,
 * "Batch invariance"). Types without mins pass dmin = 0 and summs = 0. */
static inline float kq_ref_step(float sum, float d, float dmin, float dy, int isum, int summs) {
    return sum + ((d * dy) * (float)isum - (dmin * dy) * (float)summs);
}

/* kq_ref_step on a super-block's integer sums still spread over 8 lanes
 * each (isum, summs): one horizontal reduction for both. */
static inline float kq_ref_step_x8(float sum, float d, float dmin, float dy, __m256i isum, __m256i summs) {
    const __m256i h = _mm256_hadd_epi32(isum, summs);   /* per half: i01 i23 m01 m23 */
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    r = _mm_hadd_epi32(r, r);                            /* Σisum, Σsumms, … */
    return kq_ref_step(sum, d, dmin, dy, _mm_cvtsi128_si32(r), _mm_extract_epi32(r, 1));
}

/* Bit v (0..7) of every byte of h, moved to bit 4: the Q5_K fifth bit,
 * ready to OR onto a nibble. One 16-bit shift (none for v = 4) and a mask:
 * the bit that lands on bit 4 of a byte always comes from the same byte.
 * v is a constant after unrolling. */
static inline __m256i kq_bit_to_4(__m256i h, int v) {
    const __m256i t = v < 4 ? _mm256_slli_epi16(h, 4 - v) : v > 4 ? _mm256_srli_epi16(h, v - 4) : h;
    return _mm256_and_si256(t, _mm256_set1_epi8(0x10));
}

/* The k-quant scale unpackers of kq_internal.h, returning a register
 * instead of a byte array: a byte array read back as one vector stalls on
 * store forwarding (four 4-byte stores read as one 16-byte load), which
 * cost more than the whole dot of a super-block.
 *
 * Q4_K / Q5_K: scales 0..7 in bytes 0..7, mins 0..7 in bytes 8..15, from
 * the first 16 bytes of the block (d, dmin, then the 12 packed bytes q):
 * j < 4: q[j] & 63 and q[j+4] & 63; j >= 4: the nibbles of q[j+4] with
 * the top 2 bits of q[j-4] / q[j] above them. In SIMD: 9 vector ops
 * instead of 3 loads, ~15 scalar ops and 4 inserts per 256 weights (the
 * Q5_K dot's loop fell from ~135 to ~120 instructions; from L2 it gained
 * only 1-2 %, as the vector ports, not the scalar ones, are its limit). */
static inline __m128i kq_scales_k4_128(const void *block) {
    const __m128i v = _mm_loadu_si128((const __m128i *)block);     /* q[k] = byte k + 4 */
    const __m128i lo = _mm_or_si128(
        _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, -1, -1, -1, -1)),
        _mm_shuffle_epi8(_mm_srli_epi16(v, 4), _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 12, 13, 14, 15)));
    const __m128i lo_mask = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    /* bits 6..7 of q[k] sit at bits 4..5 of byte k + 4 after a 2-bit shift */
    const __m128i hi = _mm_shuffle_epi8(_mm_srli_epi16(v, 2), _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    return _mm_or_si128(_mm_and_si128(lo, lo_mask), _mm_and_si128(hi, _mm_set1_epi8(0x30)));
}

static inline __m128i kq_scales_q3_128(const uint8_t *packed) {   /* 16 × int8, bias removed */
    /* Dword k holds scales 4k..4k+3: low nibbles of bytes 0..3 / 4..7, then
     * their high nibbles (k = 2, 3), each with two high bits from bytes
     * 8..11 (bits 2k, 2k+1 of each). Vector shifts of two broadcast loads:
     * the same bytes the scalar unpack built in general registers, without
     * its ~30 integer instructions and four inserts per block. */
    int64_t lo;
    int32_t hi;
    memcpy(&lo, packed, 8);
    memcpy(&hi, packed + 8, 4);
    const __m128i l = _mm_srlv_epi32(_mm_set1_epi64x(lo), _mm_setr_epi32(0, 0, 4, 4));
    const __m128i h = _mm_srlv_epi32(_mm_set1_epi32(hi), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i v = _mm_or_si128(_mm_and_si128(l, _mm_set1_epi8(0x0F)),
                                   _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi8(0x03)), 4));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/* Q4_K / Q5_K min term as 8 int32 partial sums: min j covers bsums 2j and
 * 2j+1, so duplicate each min and let madd pair them with the bsums. sm is
 * kq_scales_k4_128's result (scales in bytes 0..7, mins in 8..15). */
static inline __m256i kq_k4_mins_dot_bsums(__m128i sm, const int16_t *bsums) {
    const __m128i dup = _mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(dup), _mm256_loadu_si256((const __m256i *)bsums));
}

/* Shuffle controls that broadcast int16 scale k of the 8 in each 128-bit
 * lane: bytes 2k, 2k+1 everywhere. (The loops using them are unrolled, so
 * these fold into constants.) Shared by the AVX2 k-quant dots and their
 * multi-token twins (kq_dotn_avx2.c). */
static inline __m256i scale_pair_shuffle(int k) {
    return _mm256_set1_epi16((short)(((2 * k + 1) << 8) | (2 * k)));
}

/* For the 16-element sub-blocks: lane 0 gets int16 scale 2k, lane 1 scale
 * 2k+1 (a 32-byte chunk spans two sub-blocks). */
static inline __m256i scale_16_shuffle(int k) {
    const __m256i lane1_plus2 = _mm256_setr_epi64x(0, 0, 0x0202020202020202LL, 0x0202020202020202LL);
    return _mm256_add_epi8(_mm256_set1_epi16((short)(((4 * k + 1) << 8) | (4 * k))), lane1_plus2);
}

/* 16 packed nibbles -> 32 bytes 0..15: low nibbles first (elements 0..15),
 * then high nibbles (16..31), the legacy-quant element order. */
static inline __m256i kq_nibbles_32(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set (bit j -> byte j). */
static inline __m256i kq_bits_to_bytes_32(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

/* Σ pairs of u8·i8 products then pairs again: 8 int32 lanes, each the sum of
 * 4 adjacent products. maddubs cannot saturate here as long as the unsigned
 * side is < 128 or the signed side is > -128 at the same time. */
static inline __m256i kq_dot_u8i8_32(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The same for two signed operands: move x's sign onto y. */
static inline __m256i kq_dot_i8i8_32(__m256i x, __m256i y) {
    return kq_dot_u8i8_32(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 8 floats -> 8 int32, round half to even (MXCSR default), like nearest_int. */
static inline __m256i kq_round_i32(__m256 v) { return _mm256_cvtps_epi32(v); }

/* 32 int32 in 4 vectors -> 32 int8 in element order (signed saturation). */
static inline __m256i kq_pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b);
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd);
    /* the packs work per 128-bit lane; undo the resulting dword interleave */
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

#endif
