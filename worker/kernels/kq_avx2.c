/* kq_avx2.c - AVX2/FMA/F16C kernels: float types, activation quantizers and
 * the legacy 32-element quants. (The k-quant dots are in kq_kquants_avx2.c.)
 *
 * The integer part of every quant dot is exact and equal to the reference
 * one; Q4_0, Q5_0 and Q8_0 also add in the reference's order (below), Q4_1
 * and Q5_1 in their own. The activation
 * quantizers produce the same bytes as their _ref twins.
 */
#include "worker/kernels/kq_x86.h"

/* ==== float types ========================================================== */

void sb_kq_dot_f32_f32_avx2(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = kq_hsum_f32x8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static inline __m256 load_f16x8(const sb_fp16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

void sb_kq_dot_f16_f16_avx2(int n, float *s, const void *vx, const void *vy) {
    const sb_fp16 *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), load_f16x8(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), load_f16x8(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), load_f16x8(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), a0);
    float sum = kq_hsum_f32x8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += kq_f16(x[i]) * kq_f16(y[i]);
    *s = sum;
}

static inline __m256 load_bf16x8(const sb_bf16 *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

void sb_kq_dot_bf16_bf16_avx2(int n, float *s, const void *vx, const void *vy) {
    const sb_bf16 *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), load_bf16x8(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16x8(x + i + 16), load_bf16x8(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16x8(x + i + 24), load_bf16x8(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), a0);
    float sum = kq_hsum_f32x8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += sb_bf16_to_fp32(x[i]) * sb_bf16_to_fp32(y[i]);
    *s = sum;
}

void sb_kq_deq_f16_avx2(const void *src, float *dst, int64_t n) {
    const sb_fp16 *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(h + i));
    for (; i < n; i++) dst[i] = kq_f16(h[i]);
}

/* F16C rounds to nearest even, as sb_fp32_to_fp16 does. */
void sb_kq_act_f16_avx2(const float *src, void *dst, int64_t n) {
    sb_fp16 *h = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = sb_fp32_to_fp16(src[i]);
}

void sb_kq_deq_bf16_avx2(const void *src, float *dst, int64_t n) {
    const sb_bf16 *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(h + i));
    for (; i < n; i++) dst[i] = sb_bf16_to_fp32(h[i]);
}

/* sb_fp32_to_bf16 on 8 lanes: round half to even, NaNs made quiet. */
void sb_kq_act_bf16_avx2(const float *src, void *dst, int64_t n) {
    sb_bf16 *h = dst;
    int64_t i = 0;
    const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i + 8 * k));
            const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb);
            const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, odd)), 16);
            const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
            const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
            r[k] = _mm256_blendv_epi8(rounded, quiet, is_nan);
        }
        /* values are 0..65535: packus keeps them; fix the lane interleave */
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(h + i), packed);
    }
    for (; i < n; i++) h[i] = sb_fp32_to_bf16(src[i]);
}

/* ==== activation quantizers ================================================ */

/* One 32-element block the way llama.cpp's AVX2 quantize_row_q8_0 does it:
 * d = amax/127, q = round_half_even(x·127/amax). Returns d; *qsum = Σq. */
static inline float quant_block_q8(const float *x, int8_t *qs, int *qsum) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
    amax = _mm256_max_ps(amax, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_abs = _mm_cvtss_f32(m4);
    const __m256 id = _mm256_set1_ps(max_abs != 0.0f ? 127.f / max_abs : 0.0f);
    const __m256i i0 = kq_round_i32(_mm256_mul_ps(v0, id)), i1 = kq_round_i32(_mm256_mul_ps(v1, id));
    const __m256i i2 = kq_round_i32(_mm256_mul_ps(v2, id)), i3 = kq_round_i32(_mm256_mul_ps(v3, id));
    if (qsum) *qsum = kq_hsum_i32x8(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    _mm256_storeu_si256((__m256i *)qs, kq_pack_i32_to_i8(i0, i1, i2, i3));
    return max_abs / 127.f;
}

void sb_kq_act_q8_0_avx2(const float *src, void *dst, int64_t n) {
    sb_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) y[i].d = sb_fp32_to_fp16(quant_block_q8(src + 32 * i, y[i].qs, NULL));
}

void sb_kq_act_q8_1_avx2(const float *src, void *dst, int64_t n) {
    sb_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum;
        const float d = quant_block_q8(src + 32 * i, y[i].qs, &sum);
        y[i].d = sb_fp32_to_fp16(d);
        y[i].s = sb_fp32_to_fp16(d * (float)sum);
    }
}

/* Q8_K, byte-identical to sb_kq_quant_q8_K_ref: the scale comes from the
 * FIRST element of largest magnitude (its sign decides the sign of d). */
void sb_kq_act_q8_K_avx2(const float *src, void *dst, int64_t n) {
    sb_block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / SB_QK_K; i++) {
        const float *x = src + i * SB_QK_K;
        __m256 amax8 = _mm256_setzero_ps();
        for (int j = 0; j < SB_QK_K; j += 8) amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax8, 1), _mm256_castps256_ps128(amax8));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (!(amax > 0.0f)) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const __m256 vmax = _mm256_set1_ps(amax);
        int first = 0;
        for (int j = 0; j < SB_QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), vmax, _CMP_EQ_OQ));
            if (hit) { first = j + __builtin_ctz((unsigned)hit); break; }
        }
        const float iscale = -127.f / x[first];
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        for (int j = 0; j < SB_QK_K; j += 128) {
            __m256i quad[4];
            for (int k = 0; k < 4; k++) {
                const float *p = x + j + 32 * k;
                __m256i q[4];
                for (int m = 0; m < 4; m++) q[m] = _mm256_min_epi32(kq_round_i32(_mm256_mul_ps(_mm256_loadu_ps(p + 8 * m), vs)), cap);
                const __m256i packed = kq_pack_i32_to_i8(q[0], q[1], q[2], q[3]);
                _mm256_storeu_si256((__m256i *)(y[i].qs + j + 32 * k), packed);
                /* lanes 0..3: sums of 4 over elements 0..15, 4..7: 16..31 */
                quad[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, packed), ones16);
            }
            /* two hadds: lane 0 = groups 0,2,4,6 of these 128, lane 1 = 1,3,5,7 */
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(quad[0], quad[1]), _mm256_hadd_epi32(quad[2], quad[3]));
            int32_t g[8];
            _mm256_storeu_si256((__m256i *)g, h);
            int16_t *bs = y[i].bsums + j / 16;
            for (int k = 0; k < 4; k++) {
                bs[2 * k] = (int16_t)g[k];
                bs[2 * k + 1] = (int16_t)g[4 + k];
            }
        }
        y[i].d = 1 / iscale;
    }
}

void sb_kq_deq_q8_0_avx2(const void *src, float *dst, int64_t n) {
    const sb_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(kq_f16(x[i].d));
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * k)));
            _mm256_storeu_ps(dst + 32 * i + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

void sb_kq_deq_q4_0_avx2(const void *src, float *dst, int64_t n) {
    const sb_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(kq_f16(x[i].d));
        const __m256i q = _mm256_sub_epi8(kq_nibbles_32(x[i].qs), _mm256_set1_epi8(8));
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m128i parts[4] = { lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8) };
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(dst + 32 * i + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d));
    }
}

/* ==== legacy quant dots ===================================================== */
/* The block loaders (q as signed bytes, or unsigned for the types with a
 * min). Q4_1 and Q5_1 (DOT_WITH_MIN) take two blocks per iteration into two
 * accumulators, so that the convert+FMA latency of one block hides behind
 * the integer work of the next: they have no gemm, so every pass runs
 * these same dots and their order need not be the reference's. */

/* q - 8 as signed bytes */
static inline __m256i load_q4_0(const sb_block_q4_0 *b) { return _mm256_sub_epi8(kq_nibbles_32(b->qs), _mm256_set1_epi8(8)); }
static inline __m256i load_q4_1(const sb_block_q4_1 *b) { return kq_nibbles_32(b->qs); }
/* q - 16 as signed bytes: a clear fifth bit means "subtract 16", i.e. set
 * the byte's top nibble (nibble | 0xF0 == nibble - 16 in two's complement). */
static inline __m256i load_q5_0(const sb_block_q5_0 *b) {
    const __m256i hi = _mm256_andnot_si256(kq_bits_to_bytes_32(b->qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(kq_nibbles_32(b->qs), hi);
}
static inline __m256i load_q5_1(const sb_block_q5_1 *b) {
    const __m256i hi = _mm256_and_si256(kq_bits_to_bytes_32(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(kq_nibbles_32(b->qs), hi);
}
static inline __m256i load_q8_0(const sb_block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
static inline __m256i load_y(const int8_t *qs) { return _mm256_loadu_si256((const __m256i *)qs); }

/* Symmetric types (Q4_0, Q5_0, Q8_0): the reference's numbers. sum +=
 * (dx·dy)·isum block by block, in block order, as kq_ref.c does; the
 * integer sums are exact in any grouping, so every result is the
 * reference's bit for bit, and so is every result of this level's gemm
 * panels (kq_kpack_avx2.c), which run the same step with one weight row
 * per lane: a token's numbers do not depend on the pass it is in
 * (docs/KERNELS.md, "Batch invariance"). What is vector here is the
 * integer work, and 8 blocks' sums and scale products at once (lane j =
 * block j); the 8 float adds stay one chain, an add's latency per block
 * (docs/KERNELS.md weighs that against decode's weight stream). */

/* Lane j = the sum of the 8 dwords of p[j]. */
static inline __m256i block_sums_8(const __m256i p[8]) {
    /* per 128-bit half: blocks 0..3 (4..7) over dwords 0..3, then over 4..7 */
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The fp16 in the low half of each dword of v, as 8 floats. */
static inline __m256 f16_of_dwords(__m256i v) {
    const __m256i lo16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i w = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, lo16), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(w));
}

/* The next cnt ≤ 8 blocks' float steps onto sum; p[k] = block k's 8 dword
 * partial sums, its dx (every legacy block's first field) at x + k·xb. The
 * scales come by two gathers: fp16 stored one per block and read back as a
 * vector would stall on store forwarding. */
static inline __attribute__((always_inline)) float legacy_steps(float sum, const __m256i p[8], const uint8_t *x,
                                                                size_t xb, const sb_block_q8_0 *y, int cnt) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), iota);
    const __m256i hx = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)x,
                                                   _mm256_mullo_epi32(iota, _mm256_set1_epi32((int)xb)), live, 1);
    const __m256i hy = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)&y->d,
                                                   _mm256_mullo_epi32(iota, _mm256_set1_epi32((int)sizeof *y)), live, 1);
    const __m256 scale = _mm256_mul_ps(f16_of_dwords(hx), f16_of_dwords(hy));
    _Alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(block_sums_8(p))));
    for (int k = 0; k < cnt; k++) sum += v[k];
    return sum;
}

/* The blocks' partial sums are computed before any float step: 8
 * independent integer chains. */
#define DOT_SYMMETRIC(name, xtype, load_x)                                                   \
    static inline __attribute__((always_inline)) float name##_group(float sum, const xtype *x, \
                                                                    const sb_block_q8_0 *y, int cnt) { \
        __m256i p[8];                                                                        \
        _Pragma("GCC unroll 8")                                                              \
        for (int k = 0; k < 8; k++)                                                          \
            p[k] = k < cnt ? kq_dot_i8i8_32(load_x(&x[k]), load_y(y[k].qs)) : _mm256_setzero_si256(); \
        return legacy_steps(sum, p, (const uint8_t *)x, sizeof *x, y, cnt);                  \
    }                                                                                        \
    void name(int n, float *s, const void *vx, const void *vy) {                             \
        const xtype *x = vx;                                                                 \
        const sb_block_q8_0 *y = vy;                                                         \
        const int nb = n / 32;                                                               \
        float sum = 0.0f;                                                                    \
        int i = 0;                                                                           \
        for (; i + 8 <= nb; i += 8) sum = name##_group(sum, x + i, y + i, 8);                \
        if (i < nb) sum = name##_group(sum, x + i, y + i, nb - i);                           \
        *s = sum;                                                                            \
    }

DOT_SYMMETRIC(sb_kq_dot_q4_0_q8_0_avx2, sb_block_q4_0, load_q4_0)
DOT_SYMMETRIC(sb_kq_dot_q5_0_q8_0_avx2, sb_block_q5_0, load_q5_0)
DOT_SYMMETRIC(sb_kq_dot_q8_0_q8_0_avx2, sb_block_q8_0, load_q8_0)

/* Types with a min: Σ dx·dy·Σ(q·q8) + Σ mx·sy. (d, m) and (d, s) are
 * adjacent fp16 pairs, so one conversion and one multiply give both
 * [dx·dy, mx·sy]; lane 1 accumulates the min term. */
static inline __m128 f16_pair(const sb_fp16 *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)w));
}

#define DOT_WITH_MIN(name, xtype, load_x)                                                    \
    void name(int n, float *s, const void *vx, const void *vy) {                             \
        const xtype *x = vx;                                                                 \
        const sb_block_q8_1 *y = vy;                                                         \
        const int nb = n / 32;                                                               \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                       \
        __m128 mins = _mm_setzero_ps();                                                      \
        int i = 0;                                                                           \
        for (; i + 2 <= nb; i += 2) {                                                        \
            const __m256i p0 = kq_dot_u8i8_32(load_x(&x[i]), load_y(y[i].qs));              \
            const __m256i p1 = kq_dot_u8i8_32(load_x(&x[i + 1]), load_y(y[i + 1].qs));      \
            const __m128 f0 = _mm_mul_ps(f16_pair(&x[i].d), f16_pair(&y[i].d));              \
            const __m128 f1 = _mm_mul_ps(f16_pair(&x[i + 1].d), f16_pair(&y[i + 1].d));      \
            mins = _mm_add_ps(mins, _mm_add_ps(f0, f1));                                     \
            acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(f0), _mm256_cvtepi32_ps(p0), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(f1), _mm256_cvtepi32_ps(p1), acc1); \
        }                                                                                    \
        if (i < nb) {                                                                        \
            const __m256i p0 = kq_dot_u8i8_32(load_x(&x[i]), load_y(y[i].qs));              \
            const __m128 f0 = _mm_mul_ps(f16_pair(&x[i].d), f16_pair(&y[i].d));              \
            mins = _mm_add_ps(mins, f0);                                                     \
            acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(f0), _mm256_cvtepi32_ps(p0), acc0); \
        }                                                                                    \
        *s = kq_hsum_f32x8(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(mins)); \
    }

DOT_WITH_MIN(sb_kq_dot_q4_1_q8_1_avx2, sb_block_q4_1, load_q4_1)
DOT_WITH_MIN(sb_kq_dot_q5_1_q8_1_avx2, sb_block_q5_1, load_q5_1)
