/* kq_avx512.c - AVX-512 (F, BW, DQ, VL, VNNI) kernels: float types and the
 * Q8_0 / Q4_0 dots. Two 32-element blocks fill one 512-bit register; VNNI's
 * vpdpbusd does the u8×i8 multiply and the 4-way sum in one instruction.
 * Types without a kernel here use the AVX2 one (see kq_table.c).
 */
#include "worker/kernels/kq_x86.h"

/* ==== float types ========================================================== */

static inline __m512 load_f16x16(const sb_fp16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

void sb_kq_dot_f32_f32_avx512(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void sb_kq_dot_f16_f16_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_fp16 *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_f16x16(x + i), load_f16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(load_f16x16(x + i + 16), load_f16x16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_f16x16(x + i + 32), load_f16x16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_f16x16(x + i + 48), load_f16x16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_f16x16(x + i), load_f16x16(y + i), a0);
    if (i < n) {
        /* masked-off lanes load as +0.0 halves, which add nothing */
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        const __m512 yv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i));
        a1 = _mm512_fmadd_ps(xv, yv, a1);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void sb_kq_deq_f16_avx512(const void *src, float *dst, int64_t n) {
    const sb_fp16 *h = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load_f16x16(h + i));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
    }
}

void sb_kq_act_f16_avx512(const float *src, void *dst, int64_t n) {
    sb_fp16 *h = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(h + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* ==== Q8_0 / Q4_0 ========================================================== */

/* The 32 quants of two consecutive blocks in one register. */
static inline __m512i load_2x32(const int8_t *a, const int8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* Σ x·y per 4 bytes for signed x, y (y != -128): |x| as the unsigned side,
 * y negated where x < 0. */
static inline __m512i dot_i8i8_64(__m512i x, __m512i y) {
    const __mmask64 neg = _mm512_movepi8_mask(x);
    const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy);
}

/* [d0 ×8, d1 ×8]: the combined scales of two blocks against their lanes. */
static inline __m512 scale_2(float d0, float d1) {
    return _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
}

void sb_kq_dot_q8_0_q8_0_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q8_0 *x = vx;
    const sb_block_q8_0 *y = vy;
    const int nb = n / 32;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i p0 = dot_i8i8_64(load_2x32(x[i].qs, x[i + 1].qs), load_2x32(y[i].qs, y[i + 1].qs));
        const __m512i p1 = dot_i8i8_64(load_2x32(x[i + 2].qs, x[i + 3].qs), load_2x32(y[i + 2].qs, y[i + 3].qs));
        const __m512 d0 = scale_2(kq_f16(x[i].d) * kq_f16(y[i].d),
                                  kq_f16(x[i + 1].d) * kq_f16(y[i + 1].d));
        const __m512 d1 = scale_2(kq_f16(x[i + 2].d) * kq_f16(y[i + 2].d),
                                  kq_f16(x[i + 3].d) * kq_f16(y[i + 3].d));
        acc0 = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(p0), acc0);
        acc1 = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(p1), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if (i < nb) {
        float rest;
        sb_kq_dot_q8_0_q8_0_avx2((nb - i) * 32, &rest, x + i, y + i);
        sum += rest;
    }
    *s = sum;
}

/* The nibbles of two blocks, in element order: [lo0 hi0 lo1 hi1] × 16. */
static inline __m512i nibbles_2x32(const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs0)),
                                                 _mm_loadu_si128((const __m128i *)qs1), 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
    /* z = [q0, q1, q0>>4, q1>>4]; reorder the 128-bit lanes to 0,2,1,3 */
    return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

static inline __m512i load_q4_0_x2(const sb_block_q4_0 *b) { return nibbles_2x32(b[0].qs, b[1].qs); }

/* Q5: the nibbles plus 0x10 where the block's fifth bit is set. */
static inline __m512i q5_x2(const uint8_t *qs0, const uint8_t *qh0, const uint8_t *qs1, const uint8_t *qh1) {
    uint32_t h0, h1;
    memcpy(&h0, qh0, 4);
    memcpy(&h1, qh1, 4);
    const __mmask64 hi = (__mmask64)h0 | ((__mmask64)h1 << 32);
    return _mm512_or_si512(nibbles_2x32(qs0, qs1), _mm512_maskz_mov_epi8(hi, _mm512_set1_epi8(0x10)));
}

/* Σ (q - 8)·y = Σ q·y - 8·Σ y: two unsigned VNNI dots, no sign games. */
void sb_kq_dot_q4_0_q8_0_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q4_0 *x = vx;
    const sb_block_q8_0 *y = vy;
    const int nb = n / 32;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i y0 = load_2x32(y[i].qs, y[i + 1].qs), y1 = load_2x32(y[i + 2].qs, y[i + 3].qs);
        __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), load_q4_0_x2(&x[i]), y0);
        __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), load_q4_0_x2(&x[i + 2]), y1);
        p0 = _mm512_sub_epi32(p0, _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, y0));
        p1 = _mm512_sub_epi32(p1, _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, y1));
        const __m512 d0 = scale_2(kq_f16(x[i].d) * kq_f16(y[i].d),
                                  kq_f16(x[i + 1].d) * kq_f16(y[i + 1].d));
        const __m512 d1 = scale_2(kq_f16(x[i + 2].d) * kq_f16(y[i + 2].d),
                                  kq_f16(x[i + 3].d) * kq_f16(y[i + 3].d));
        acc0 = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(p0), acc0);
        acc1 = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(p1), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if (i < nb) {
        float rest;
        sb_kq_dot_q4_0_q8_0_avx2((nb - i) * 32, &rest, x + i, y + i);
        sum += rest;
    }
    *s = sum;
}

/* Q5_0: Σ (q - 16)·y = Σ q·y - 16·Σ y, q the unsigned 5-bit value. */
void sb_kq_dot_q5_0_q8_0_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q5_0 *x = vx;
    const sb_block_q8_0 *y = vy;
    const int nb = n / 32;
    const __m512i sixteen = _mm512_set1_epi8(16);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m512i y0 = load_2x32(y[i].qs, y[i + 1].qs), y1 = load_2x32(y[i + 2].qs, y[i + 3].qs);
        __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q5_x2(x[i].qs, x[i].qh, x[i + 1].qs, x[i + 1].qh), y0);
        __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q5_x2(x[i + 2].qs, x[i + 2].qh, x[i + 3].qs, x[i + 3].qh), y1);
        p0 = _mm512_sub_epi32(p0, _mm512_dpbusd_epi32(_mm512_setzero_si512(), sixteen, y0));
        p1 = _mm512_sub_epi32(p1, _mm512_dpbusd_epi32(_mm512_setzero_si512(), sixteen, y1));
        const __m512 d0 = scale_2(kq_f16(x[i].d) * kq_f16(y[i].d), kq_f16(x[i + 1].d) * kq_f16(y[i + 1].d));
        const __m512 d1 = scale_2(kq_f16(x[i + 2].d) * kq_f16(y[i + 2].d), kq_f16(x[i + 3].d) * kq_f16(y[i + 3].d));
        acc0 = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(p0), acc0);
        acc1 = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(p1), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if (i < nb) {
        float rest;
        sb_kq_dot_q5_0_q8_0_avx2((nb - i) * 32, &rest, x + i, y + i);
        sum += rest;
    }
    *s = sum;
}

/* [dx·dy, mx·sy] of one block: (d, m) and (d, s) are adjacent fp16 pairs. */
static inline __m128 f16_pair_product(const sb_fp16 *xdm, const sb_fp16 *yds) {
    uint32_t a, b;
    memcpy(&a, xdm, 4);
    memcpy(&b, yds, 4);
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)a)), _mm_cvtph_ps(_mm_cvtsi32_si128((int)b)));
}

/* Q4_1 / Q5_1: Σ dx·dy·Σ q·y + Σ mx·sy; q unsigned, so VNNI takes it as is. */
#define DOT_WITH_MIN_512(name, xtype, load2, tail)                                          \
    void name(int n, float *s, const void *vx, const void *vy) {                            \
        const xtype *x = vx;                                                                \
        const sb_block_q8_1 *y = vy;                                                        \
        const int nb = n / 32;                                                              \
        __m512 acc = _mm512_setzero_ps();                                                   \
        __m128 mins = _mm_setzero_ps();                                                     \
        int i = 0;                                                                          \
        for (; i + 2 <= nb; i += 2) {                                                       \
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), load2(x + i), load_2x32(y[i].qs, y[i + 1].qs)); \
            const __m128 f0 = f16_pair_product(&x[i].d, &y[i].d);                           \
            const __m128 f1 = f16_pair_product(&x[i + 1].d, &y[i + 1].d);                   \
            mins = _mm_add_ps(mins, _mm_add_ps(f0, f1));                                    \
            const __m512 d = _mm512_insertf32x8(_mm512_broadcastss_ps(f0), _mm256_broadcastss_ps(f1), 1); \
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);                           \
        }                                                                                   \
        float sum = _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(_mm_movehdup_ps(mins));       \
        if (i < nb) {                                                                       \
            float rest;                                                                     \
            tail(32, &rest, x + i, y + i);                                                  \
            sum += rest;                                                                    \
        }                                                                                   \
        *s = sum;                                                                           \
    }

static inline __m512i load_q4_1_x2(const sb_block_q4_1 *b) { return nibbles_2x32(b[0].qs, b[1].qs); }
static inline __m512i load_q5_1_x2(const sb_block_q5_1 *b) { return q5_x2(b[0].qs, b[0].qh, b[1].qs, b[1].qh); }

DOT_WITH_MIN_512(sb_kq_dot_q4_1_q8_1_avx512, sb_block_q4_1, load_q4_1_x2, sb_kq_dot_q4_1_q8_1_avx2)
DOT_WITH_MIN_512(sb_kq_dot_q5_1_q8_1_avx512, sb_block_q5_1, load_q5_1_x2, sb_kq_dot_q5_1_q8_1_avx2)

/* ==== BF16 ================================================================ */
/* bf16 is the top half of an fp32: widen to 32 bits and shift. */
static inline __m512 load_bf16x16(const sb_bf16 *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

void sb_kq_dot_bf16_bf16_avx512(int n, float *s, const void *vx, const void *vy) {
    const sb_bf16 *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(load_bf16x16(x + i), load_bf16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(load_bf16x16(x + i + 16), load_bf16x16(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(load_bf16x16(x + i + 32), load_bf16x16(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(load_bf16x16(x + i + 48), load_bf16x16(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(load_bf16x16(x + i), load_bf16x16(y + i), a0);
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) sum += sb_bf16_to_fp32(x[i]) * sb_bf16_to_fp32(y[i]);
    *s = sum;
}

/* ==== vec_dotn of Q4_0 / Q5_0 / Q8_0 (sb_kq.h) ============================= */
/* The 4-block step of the 1×1 dots above with the weight half shared: per
 * 4 blocks the quants are unpacked once (Q8_0: |x| and its sign mask) for
 * every token, then each token runs the rest of its 1×1 kernel - the same
 * integer sums, its own two accumulators, the same reduction and AVX2 tail -
 * so each result is that kernel's bit for bit (as kq_dotn_avx512.c does for
 * the k-quants). */
enum { L_Q4_0, L_Q5_0, L_Q8_0 };

typedef struct {
    __m512i u[2];       /* blocks i, i+1 and i+2, i+3: unsigned quants (Q8_0: |x|) */
    __mmask64 neg[2];   /* Q8_0: where x < 0 */
    float d[4];
} legacy_quad;

static inline __attribute__((always_inline)) void legacy_decode(int wt, const void *vx, int i, legacy_quad *q) {
    for (int k = 0; k < 2; k++) {
        const int b = i + 2 * k;
        if (wt == L_Q4_0) {
            const sb_block_q4_0 *x = vx;
            q->u[k] = load_q4_0_x2(&x[b]);
            q->d[2 * k] = kq_f16(x[b].d), q->d[2 * k + 1] = kq_f16(x[b + 1].d);
        } else if (wt == L_Q5_0) {
            const sb_block_q5_0 *x = vx;
            q->u[k] = q5_x2(x[b].qs, x[b].qh, x[b + 1].qs, x[b + 1].qh);
            q->d[2 * k] = kq_f16(x[b].d), q->d[2 * k + 1] = kq_f16(x[b + 1].d);
        } else {
            const sb_block_q8_0 *x = vx;
            const __m512i v = load_2x32(x[b].qs, x[b + 1].qs);
            q->neg[k] = _mm512_movepi8_mask(v);
            q->u[k] = _mm512_abs_epi8(v);
            q->d[2 * k] = kq_f16(x[b].d), q->d[2 * k + 1] = kq_f16(x[b + 1].d);
        }
    }
}

static inline __attribute__((always_inline)) void dotn_legacy(int wt, int n, int nt, float *s, size_t s_stride,
                                                              const void *vx, const void *vy, size_t y_stride) {
    const int nb = n / 32;
    const size_t xb = wt == L_Q4_0 ? sizeof(sb_block_q4_0) : wt == L_Q5_0 ? sizeof(sb_block_q5_0) : sizeof(sb_block_q8_0);
    const __m512i bias = _mm512_set1_epi8(wt == L_Q4_0 ? 8 : 16);
    __m512 acc0[SB_KQ_DOTN_MAX], acc1[SB_KQ_DOTN_MAX];
    for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        legacy_quad q;
        legacy_decode(wt, vx, i, &q);
        for (int t = 0; t < nt; t++) {
            const sb_block_q8_0 *y = (const sb_block_q8_0 *)((const uint8_t *)vy + (size_t)t * y_stride);
            const __m512i y0 = load_2x32(y[i].qs, y[i + 1].qs), y1 = load_2x32(y[i + 2].qs, y[i + 3].qs);
            __m512i p0, p1;
            if (wt == L_Q8_0) {
                p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[0], _mm512_mask_sub_epi8(y0, q.neg[0], _mm512_setzero_si512(), y0));
                p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[1], _mm512_mask_sub_epi8(y1, q.neg[1], _mm512_setzero_si512(), y1));
            } else {
                p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[0], y0);
                p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[1], y1);
                p0 = _mm512_sub_epi32(p0, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, y0));
                p1 = _mm512_sub_epi32(p1, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, y1));
            }
            const __m512 d0 = scale_2(q.d[0] * kq_f16(y[i].d), q.d[1] * kq_f16(y[i + 1].d));
            const __m512 d1 = scale_2(q.d[2] * kq_f16(y[i + 2].d), q.d[3] * kq_f16(y[i + 3].d));
            acc0[t] = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(p0), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(p1), acc1[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
        if (i < nb) {
            const void *xr = (const uint8_t *)vx + (size_t)i * xb;
            const void *yr = (const sb_block_q8_0 *)((const uint8_t *)vy + (size_t)t * y_stride) + i;
            float rest;
            if (wt == L_Q4_0) sb_kq_dot_q4_0_q8_0_avx2((nb - i) * 32, &rest, xr, yr);
            else if (wt == L_Q5_0) sb_kq_dot_q5_0_q8_0_avx2((nb - i) * 32, &rest, xr, yr);
            else sb_kq_dot_q8_0_q8_0_avx2((nb - i) * 32, &rest, xr, yr);
            sum += rest;
        }
        s[(size_t)t * s_stride] = sum;
    }
}

void sb_kq_dotn_q4_0_q8_0_avx512(KQ_DOTN_ARGS) { dotn_legacy(L_Q4_0, n, nt, s, s_stride, x, y, y_stride); }
void sb_kq_dotn_q5_0_q8_0_avx512(KQ_DOTN_ARGS) { dotn_legacy(L_Q5_0, n, nt, s, s_stride, x, y, y_stride); }
void sb_kq_dotn_q8_0_q8_0_avx512(KQ_DOTN_ARGS) { dotn_legacy(L_Q8_0, n, nt, s, s_stride, x, y, y_stride); }

/* ==== vec_dotn_il of Q4_0 / Q5_0 / Q8_0 on prepared activations =========== */
/* dotn_legacy above still redoes, for every weight row, what depends on the
 * token alone: its two 32-byte loads and insert per block pair, the fp16
 * scales' conversion, the scale vector's assembly from scalars, and for
 * Q4_0/Q5_0 a second VNNI dot for the −8/−16 offset. sb_kq_q8_0_prepare
 * does those once per matrix input, so per token and block pair a row costs
 * a load, one vpdpbusd (Q8_0: and the sign fix), one subtract, one multiply
 * of the row's scales by the token's, the conversion and the FMA. The
 * numbers are vec_dot's bit for bit: the integer sums are the same exact
 * integers, the scale product is the same float product lane for lane
 * (vmulps rounds as mulss; no contraction in ISO C), and the accumulators,
 * reduction and AVX2 tail are vec_dot's. */
static inline __attribute__((always_inline)) void dotn_prep(int wt, int n, int nrows, int nt, float *s,
                                                            size_t s_stride, const void *vx, size_t x_stride,
                                                            const void *yp) {
    const int nb = n / 32, nq = nb / 4;
    const size_t tb = sb_kq_q8_0_prep_bytes(n);
    __m512 acc0[SB_KQ_IL_TOK], acc1[SB_KQ_IL_TOK];
    for (int r = 0; r < nrows; r++) {
        const void *xr = (const uint8_t *)vx + (size_t)r * x_stride;
        for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
        for (int i = 0; i < nq; i++) {
            legacy_quad q;
            legacy_decode(wt, xr, 4 * i, &q);
            const __m512 dx0 = scale_2(q.d[0], q.d[1]), dx1 = scale_2(q.d[2], q.d[3]);
            for (int t = 0; t < nt; t++) {
                const uint8_t *pr = (const uint8_t *)yp + (size_t)t * tb + (size_t)i * 2 * SB_KQ_P8_PAIR_BYTES;
                const __m512i y0 = _mm512_loadu_si512(pr), y1 = _mm512_loadu_si512(pr + SB_KQ_P8_PAIR_BYTES);
                __m512i p0, p1;
                if (wt == L_Q8_0) {
                    p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[0], _mm512_mask_sub_epi8(y0, q.neg[0], _mm512_setzero_si512(), y0));
                    p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[1], _mm512_mask_sub_epi8(y1, q.neg[1], _mm512_setzero_si512(), y1));
                } else {
                    __m512i o0 = _mm512_loadu_si512(pr + 128), o1 = _mm512_loadu_si512(pr + SB_KQ_P8_PAIR_BYTES + 128);
                    if (wt == L_Q4_0) o0 = _mm512_srai_epi32(o0, 1), o1 = _mm512_srai_epi32(o1, 1);
                    p0 = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[0], y0), o0);
                    p1 = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q.u[1], y1), o1);
                }
                const __m512 d0 = _mm512_mul_ps(dx0, _mm512_loadu_ps((const float *)(pr + 64)));
                const __m512 d1 = _mm512_mul_ps(dx1, _mm512_loadu_ps((const float *)(pr + SB_KQ_P8_PAIR_BYTES + 64)));
                acc0[t] = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(p0), acc0[t]);
                acc1[t] = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(p1), acc1[t]);
            }
        }
        for (int t = 0; t < nt; t++) {
            float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
            if (4 * nq < nb) {
                const size_t xb = wt == L_Q4_0 ? sizeof(sb_block_q4_0) : wt == L_Q5_0 ? sizeof(sb_block_q5_0) : sizeof(sb_block_q8_0);
                const void *xt = (const uint8_t *)xr + (size_t)(4 * nq) * xb;
                const void *yt = (const uint8_t *)yp + (size_t)t * tb + (size_t)nq * 2 * SB_KQ_P8_PAIR_BYTES;
                float rest;
                if (wt == L_Q4_0) sb_kq_dot_q4_0_q8_0_avx2((nb - 4 * nq) * 32, &rest, xt, yt);
                else if (wt == L_Q5_0) sb_kq_dot_q5_0_q8_0_avx2((nb - 4 * nq) * 32, &rest, xt, yt);
                else sb_kq_dot_q8_0_q8_0_avx2((nb - 4 * nq) * 32, &rest, xt, yt);
                sum += rest;
            }
            s[(size_t)t * s_stride + (size_t)r] = sum;
        }
    }
}

void sb_kq_dotn_il_q4_0_q8_0_avx512(KQ_DOTN_IL_ARGS) { dotn_prep(L_Q4_0, n, nrows, nt, s, s_stride, x, x_stride, yil); }
void sb_kq_dotn_il_q5_0_q8_0_avx512(KQ_DOTN_IL_ARGS) { dotn_prep(L_Q5_0, n, nrows, nt, s, s_stride, x, x_stride, yil); }
void sb_kq_dotn_il_q8_0_q8_0_avx512(KQ_DOTN_IL_ARGS) { dotn_prep(L_Q8_0, n, nrows, nt, s, s_stride, x, x_stride, yil); }
