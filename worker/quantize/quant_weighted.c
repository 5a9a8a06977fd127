/* quant_weighted.c - row quantizers for model files, with or without an
 * importance matrix.
 *
 * Without an imatrix every type uses the kernel table's from_float_ref (the
 * searches of ggml's quantize_row_*_ref), which is what llama-quantize runs
 * then, so the bytes are llama-quantize's.
 *
 * With an imatrix llama.cpp switches to other searches (ggml-quants.c's
 * quantize_row_*_impl): each element's error is weighted by
 * w = imatrix[col] * sqrt(sigma2 + x²) (sigma2: the row's or super-block's
 * mean square), the asymmetric types use sb_kq_search_asymmetric, ggml's make_qkx3 (a finer scale
 * sweep than the reference, weighted squared error) and the sub-block scales
 * and mins of the k-quants are themselves quantized by make_qp_quants (a
 * weighted search of the super-block scale with single-element refinement)
 * instead of by max/63. These are our own implementations of those
 * algorithms, with the same constants and the same order of float
 * operations (so the chosen candidates, and the bytes, are llama.cpp's; this
 * file is built in ISO C mode, so nothing is contracted into FMAs).
 * Q8_0 ignores the imatrix, as in llama.cpp.
 */
#include <math.h>
#include <string.h>

#include "worker/kernels/sb_kq.h"
#include "worker/quantize/sb_quantize.h"

#define QK SB_QK_K
#define GROUP_MAX_EPS 1e-15f    /* ggml's "this group is all zeros" threshold */

/* Round half to even for |v| < 2^22 (ggml's nearest_int trick). */
static inline int nearest_int(float v) {
    float biased = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &biased, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ==== the weighted searches ================================================ */

/* Non-negative values (sub-block scales or mins) to levels [0, nmax] under
 * one scale: 9 candidate scales by weighted squared error, then up to 5
 * passes moving single elements to the level that improves the fit. */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        const float w = quant_weights[i];
        best_mse += w * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * l;
            const float w = quant_weights[i];
            mse += w * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        const float w = quant_weights[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = quant_weights[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Mean square of n values (the sigma2 the weights are built on). */
static float sum_squares(const float *x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s;
}

/* ==== legacy 32-blocks ====================================================== */

static void weights_32(const float *xb, const float *qw, float sigma2, float *w) {
    for (int j = 0; j < 32; ++j) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

/* 5th bits of 32 levels into the 32-bit qh (element j -> bit j). */
static void pack_q5(const uint8_t *L, uint8_t *qs, uint8_t *qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= ((L[j] & 0x10u) >> 4) << j;
        qh |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

static void row_q4_0(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q4_0 *y = vy;
    const float sigma2 = sum_squares(x, n) / n;
    float w[32];
    int8_t L[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        weights_32(x + 32 * ib, qw + 32 * ib, sigma2, w);
        y[ib].d = sb_fp32_to_fp16(sb_kq_search_symmetric(32, 8, x + 32 * ib, w, L));
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void row_q4_1(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q4_1 *y = vy;
    const float sigma2 = sum_squares(x, n) / n;
    float w[32], min;
    uint8_t L[32], Laux[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        weights_32(x + 32 * ib, qw + 32 * ib, sigma2, w);
        const float d = sb_kq_search_asymmetric(32, 15, x + 32 * ib, w, L, &min, Laux, -0.9f, 0.05f, 36, 0);
        y[ib].d = sb_fp32_to_fp16(d);
        y[ib].m = sb_fp32_to_fp16(-min);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void row_q5_0(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q5_0 *y = vy;
    const float sigma2 = sum_squares(x, n) / n;
    float w[32];
    int8_t L[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        weights_32(x + 32 * ib, qw + 32 * ib, sigma2, w);
        y[ib].d = sb_fp32_to_fp16(sb_kq_search_symmetric(32, 16, x + 32 * ib, w, L));
        pack_q5((const uint8_t *)L, y[ib].qs, y[ib].qh);
    }
}

static void row_q5_1(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q5_1 *y = vy;
    const float sigma2 = sum_squares(x, n) / n;
    float w[32], min;
    uint8_t L[32], Laux[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        weights_32(x + 32 * ib, qw + 32 * ib, sigma2, w);
        const float d = sb_kq_search_asymmetric(32, 31, x + 32 * ib, w, L, &min, Laux, -0.9f, 0.05f, 36, 0);
        y[ib].d = sb_fp32_to_fp16(d);
        y[ib].m = sb_fp32_to_fp16(-min);
        pack_q5(L, y[ib].qs, y[ib].qh);
    }
}

/* ==== k-quants ============================================================== */

/* 4 2-bit planes: byte l of each 32-byte group holds elements l, l+32,
 * l+64, l+96 of its 128. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static void row_q2_K(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q2_K *y = vy;
    uint8_t L[QK], Laux[16], Ls[16], Lm[16];
    float mins[16], scales[16], sw[16], weight[16];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        memset(sw, 0, sizeof sw);
        const float sigma2 = sum_squares(x, QK) / QK;
        for (int j = 0; j < 16; ++j) {
            const float *w = qw + QK * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < 16; ++l) sw[j] += weight[l];
            scales[j] = sb_kq_search_asymmetric(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
        }
        y[i].d = sb_fp32_to_fp16(make_qp_quants(16, 15, scales, Ls, sw));
        y[i].dmin = sb_fp32_to_fp16(make_qp_quants(16, 15, mins, Lm, sw));
        const float dm = sb_fp16_to_fp32(y[i].d), mm = sb_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < 16; ++j) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (uint8_t)clampi(nearest_int((x[16 * j + ii] + m) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

static void row_q3_K(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q3_K *y = vy;
    int8_t L[QK], Ls[16];
    float scales[16], weight[16], sw[16];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float sigma2 = 2 * sum_squares(x, QK) / QK;
        for (int j = 0; j < 16; ++j) {
            const float *w = qw + QK * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = sb_kq_search_symmetric(16, 4, x + 16 * j, weight, L + 16 * j);
        }
        memset(y[i].scales, 0, 12);
        const float d_block = sb_kq_search_symmetric(16, 32, scales, sw, Ls);
        for (int j = 0; j < 16; ++j) {
            int l = Ls[j];
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            l >>= 4;
            y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        y[i].d = sb_fp32_to_fp16(d_block);
        for (int j = 0; j < 16; ++j) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = sb_fp16_to_fp32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clampi(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        /* bit 2 of element e goes to bit e/32 of hmask[e%32] */
        memset(y[i].hmask, 0, 32);
        uint8_t low[QK];
        for (int e = 0; e < QK; ++e) {
            if (L[e] > 3) y[i].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            low[e] = (uint8_t)(L[e] > 3 ? L[e] - 4 : L[e]);
        }
        pack_2bit(low, y[i].qs);
    }
}

/* Q4_K / Q5_K share everything but the level count and the bit packing:
 * 8 sub-blocks of 32 with weighted asymmetric levels, their scales and
 * mins quantized to 6 bits by make_qp_quants, then requantized. */
static void row_k32(const float *x, uint8_t *scales_out, sb_fp16 *d_out, sb_fp16 *dmin_out, uint8_t *L,
                    int nmax, const float *qw, int clamp_63) {
    uint8_t Laux[32], Ls[8], Lm[8];
    float weights[32], sw[8], mins[8], scales[8];
    const float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int j = 0; j < 8; ++j) {
        const float *w = qw + 32 * j;
        for (int l = 0; l < 32; ++l) weights[l] = w[l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = sb_kq_search_asymmetric(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
    }
    const float d_block = make_qp_quants(8, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; ++j) {
        /* only Q5_K clamps (a no-op unless a scale came out negative) */
        const uint8_t ls = clamp_63 && Ls[j] > 63 ? 63 : Ls[j], lm = clamp_63 && Lm[j] > 63 ? 63 : Lm[j];
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = sb_fp32_to_fp16(d_block);
    *dmin_out = sb_fp32_to_fp16(m_block);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        if (j < 4) {
            sc = scales_out[j] & 63;
            m = scales_out[j + 4] & 63;
        } else {
            sc = (uint8_t)((scales_out[j + 4] & 0xF) | ((scales_out[j - 4] >> 6) << 4));
            m = (uint8_t)((scales_out[j + 4] >> 4) | ((scales_out[j] >> 6) << 4));
        }
        const float d = sb_fp16_to_fp32(*d_out) * sc;
        if (!d) continue;
        const float dm = sb_fp16_to_fp32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)clampi(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

static void row_q4_K(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q4_K *y = vy;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        row_k32(x, y[i].scales, &y[i].d, &y[i].dmin, L, 15, qw + QK * i, 0);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void row_q5_K(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q5_K *y = vy;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        row_k32(x, y[i].scales, &y[i].d, &y[i].dmin, L, 31, qw + QK * i, 1);
        uint8_t *ql = y[i].qs, *qh = y[i].qh;
        memset(qh, 0, 32);
        uint8_t m1 = 1, m2 = 2;
        for (int b = 0; b < QK; b += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[b + j], l2 = L[b + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

static void row_q6_K(const float *x, void *vy, int64_t n, const float *qw) {
    sb_block_q6_K *y = vy;
    int8_t L[QK];
    float scales[16];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ++ib) {
            /* Q6_K weights by the imatrix alone (no sigma2 term) */
            const float scale = sb_kq_search_symmetric(16, 32, x + 16 * ib, qw + QK * i + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = sb_fp32_to_fp16(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = sb_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ++ib) {
            const int s = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; ++j) {
            const float d = sb_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clampi(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* ==== entry point =========================================================== */

typedef void (*row_fn)(const float *x, void *y, int64_t n, const float *qw);

size_t sb_quant_rows(int type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                     const float *imatrix) {
    const sb_kq_traits *t = &sb_kq_table(SB_KQ_REF)[type];
    const size_t row_size = sb_kq_row_size(t, n_per_row);
    if (type == SB_TYPE_F32) {
        memcpy(dst, src, (size_t)(nrows * n_per_row) * sizeof(float));
        return (size_t)nrows * row_size;
    }
    row_fn weighted = NULL;
    if (imatrix) {
        switch (type) {
        case SB_TYPE_Q4_0: weighted = row_q4_0; break;
        case SB_TYPE_Q4_1: weighted = row_q4_1; break;
        case SB_TYPE_Q5_0: weighted = row_q5_0; break;
        case SB_TYPE_Q5_1: weighted = row_q5_1; break;
        case SB_TYPE_Q2_K: weighted = row_q2_K; break;
        case SB_TYPE_Q3_K: weighted = row_q3_K; break;
        case SB_TYPE_Q4_K: weighted = row_q4_K; break;
        case SB_TYPE_Q5_K: weighted = row_q5_K; break;
        case SB_TYPE_Q6_K: weighted = row_q6_K; break;
        default: break;             /* Q8_0, F16, BF16: the imatrix does not apply */
        }
    }
    if (!weighted) {
        /* rows are independent blocks: one call covers them all */
        t->from_float_ref(src, dst, nrows * n_per_row);
        return (size_t)nrows * row_size;
    }
    uint8_t *out = dst;
    for (int64_t r = 0; r < nrows; r++)
        weighted(src + r * n_per_row, out + (size_t)r * row_size, n_per_row, imatrix);
    return (size_t)nrows * row_size;
}
