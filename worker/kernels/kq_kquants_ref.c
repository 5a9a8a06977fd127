/* kq_kquants_ref.c - scalar reference kernels for the k-quants (Q2_K..Q6_K,
 * Q8_K): 256-element super-blocks made of 16 or 32-element sub-blocks, each
 * with its own quantized scale (and min).
 *
 * The quantizers follow ggml's quantize_row_*_ref step for step - the same
 * searches (make_qx_quants, make_q3_quants, make_qkx2_quants), the same
 * operation order, the same round-half-even trick - because a one-ulp
 * difference in a search compare changes which candidate wins and so the
 * bytes. llama-quantize without an importance matrix calls exactly these
 * (ggml's quantize_q*_K(..., quant_weights = NULL) falls through to the _ref
 * rows), so `switchboard quantize` can reproduce its files.
 */
#include <math.h>

#include "worker/kernels/kq_internal.h"

#define QK SB_QK_K
#define GROUP_MAX_EPS 1e-15f    /* ggml's "this group is all zeros" threshold */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ==== scale searches ====================================================== */

/* ggml's make_qx_quants (rmse_type 1): symmetric quants L in [0, 2·nmax)
 * with x ≈ scale·(L - nmax); tries 18 scales around nmax/max and keeps the
 * best weighted least-squares fit. weights NULL = x², the unweighted k-quant
 * reference; the importance-weighted quantizers pass their own. */
float sb_kq_search_symmetric(int n, int nmax, const float *x, const float *weights, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
#define QX_WEIGHT(i) (weights ? weights[i] : x[i] * x[i])
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = QX_WEIGHT(i);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = QX_WEIGHT(i);
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
#undef QX_WEIGHT
    return scale;
}

/* Q3_K's variant: start from nmax/max, then move single elements to the
 * level that most improves the x²-weighted fit (up to 5 passes). */
static float search_symmetric_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = clampi(kq_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric quants L in [0, nmax] with x ≈ scale·L - min (min >= 0 is
 * returned in *the_min). Tries nstep+1 scales (nmax + rmin + rdelta·is)
 * /(max - min), solving the weighted least-squares scale and min for each,
 * and keeps the lowest weighted error (absolute if use_mad, else squared). */
float sb_kq_search_asymmetric(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)clampi(kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Store 4 2-bit planes: byte l of each 32-byte group holds elements l, l+32,
 * l+64, l+96 of its 128 (Q2_K and Q3_K low bits). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* Q4_K / Q5_K: 8 scales and 8 mins, 6 bits each, into 12 bytes. */
static void pack_scales_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t *sc) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            sc[j] = ls[j];
            sc[j + 4] = lm[j];
        } else {
            sc[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            sc[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            sc[j - 0] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* ==== Q2_K: 16 × 16 elements, x = d·sc·q - dmin·m, q in 0..3 ============== */

void sb_kq_quant_q2_K_ref(const float *src, void *dst, int64_t n) {
    sb_block_q2_K *y = dst;
    uint8_t L[QK], Laux[16];
    float weights[16], mins[16], scales[16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = sb_kq_search_asymmetric(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)kq_nearest_int(iscale * scales[j]);
            y[i].d = sb_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; ++j) y[i].scales[j] = 0;
            y[i].d = sb_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j) y[i].scales[j] |= (uint8_t)(kq_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = sb_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = sb_fp32_to_fp16(0.f);
        }
        for (int j = 0; j < 16; ++j) {
            const float d = sb_fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = sb_fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (uint8_t)clampi(kq_nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

void sb_kq_deq_q2_K_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q2_K *x = src;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = sb_fp16_to_fp32(x[i].d), min = sb_fp16_to_fp32(x[i].dmin);
        float *y = dst + i * QK;
        for (int e = 0; e < QK; e++) {
            /* element e: 128-half h, plane p (shift 2p), byte l within 32 */
            const int h = e / 128, p = (e % 128) / 32, l = e % 32;
            const uint8_t sc = x[i].scales[e / 16];
            const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
            y[e] = dl * ((x[i].qs[h * 32 + l] >> (2 * p)) & 3) - ml;
        }
    }
}

/* ==== Q3_K: 16 × 16 elements, x = d·(sc - 32)·(q - 4), q in 0..7 ========== */

void sb_kq_quant_q3_K_ref(const float *src, void *dst, int64_t n) {
    sb_block_q3_K *y = dst;
    int8_t L[QK];
    float scales[16];
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = search_symmetric_q3(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; ++j) {
                const int l = clampi(kq_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = sb_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = sb_fp32_to_fp16(0.f);
        }
        int8_t sc[16];
        kq_unpack_scales_q3(y[i].scales, sc);
        for (int j = 0; j < 16; ++j) {
            const float d = sb_fp16_to_fp32(y[i].d) * sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clampi(kq_nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        /* bit 2 of element e goes to bit e/32 of hmask[e%32] */
        memset(y[i].hmask, 0, 32);
        uint8_t low[QK];
        for (int e = 0; e < QK; ++e) {
            if (L[e] > 3) y[i].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            low[e] = (uint8_t)(L[e] & 3);
        }
        pack_2bit(low, y[i].qs);
    }
}

void sb_kq_deq_q3_K_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q3_K *x = src;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d_all = sb_fp16_to_fp32(x[i].d);
        int8_t sc[16];
        kq_unpack_scales_q3(x[i].scales, sc);
        float *y = dst + i * QK;
        for (int e = 0; e < QK; e++) {
            const int h = e / 128, p = (e % 128) / 32, l = e % 32;
            const int q = ((x[i].qs[h * 32 + l] >> (2 * p)) & 3) - ((x[i].hmask[l] >> (e / 32)) & 1 ? 0 : 4);
            y[e] = (d_all * sc[e / 16]) * q;
        }
    }
}

/* ==== Q4_K / Q5_K: 8 × 32 elements, x = d·sc·q - dmin·m ==================== */

/* The shared first half of the Q4_K and Q5_K quantizers: per sub-block
 * scale/min search, then 6-bit scales, then requantize L with them. */
static void quant_k4_common(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                            sb_fp16 *dd, sb_fp16 *dmin, uint8_t *packed) {
    uint8_t Laux[32], ls[8], lm[8];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = sb_kq_search_asymmetric(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        /* ggml stores nearest_int into a uint8_t before clamping: keep that */
        const uint8_t a = (uint8_t)kq_nearest_int(inv_scale * scales[j]);
        const uint8_t b = (uint8_t)kq_nearest_int(inv_min * mins[j]);
        ls[j] = a > 63 ? 63 : a;
        lm[j] = b > 63 ? 63 : b;
    }
    memset(packed, 0, 12);
    pack_scales_k4(ls, lm, packed);
    *dd = sb_fp32_to_fp16(max_scale / 63.f);
    *dmin = sb_fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        kq_scale_min_k4(j, packed, &sc, &m);
        const float d = sb_fp16_to_fp32(*dd) * sc;
        if (!d) continue;
        const float dm = sb_fp16_to_fp32(*dmin) * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)clampi(kq_nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

void sb_kq_quant_q4_K_ref(const float *src, void *dst, int64_t n) {
    sb_block_q4_K *y = dst;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        quant_k4_common(src + i * QK, 15, -1.f, 20, L, &y[i].d, &y[i].dmin, y[i].scales);
        /* 32-byte group g holds elements 64g..64g+31 low, 64g+32.. high */
        for (int g = 0; g < 4; ++g)
            for (int l = 0; l < 32; ++l)
                y[i].qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + l + 32] << 4));
    }
}

void sb_kq_deq_q4_K_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q4_K *x = src;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = sb_fp16_to_fp32(x[i].d), min = sb_fp16_to_fp32(x[i].dmin);
        float *y = dst + i * QK;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kq_scale_min_k4(j, x[i].scales, &sc, &m);
            const float dl = d * sc, ml = min * m;
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) y[32 * j + l] = dl * ((j & 1) ? q[l] >> 4 : q[l] & 0xF) - ml;
        }
    }
}

void sb_kq_quant_q5_K_ref(const float *src, void *dst, int64_t n) {
    sb_block_q5_K *y = dst;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        quant_k4_common(src + i * QK, 31, -0.5f, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
        /* like Q4_K, plus bit 4 of element 32j+l in bit j of qh[l] */
        memset(y[i].qh, 0, 32);
        for (int g = 0; g < 4; ++g) {
            for (int l = 0; l < 32; ++l) {
                int l1 = L[64 * g + l], l2 = L[64 * g + l + 32];
                if (l1 > 15) { l1 -= 16; y[i].qh[l] |= (uint8_t)(1u << (2 * g)); }
                if (l2 > 15) { l2 -= 16; y[i].qh[l] |= (uint8_t)(2u << (2 * g)); }
                y[i].qs[32 * g + l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void sb_kq_deq_q5_K_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q5_K *x = src;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = sb_fp16_to_fp32(x[i].d), min = sb_fp16_to_fp32(x[i].dmin);
        float *y = dst + i * QK;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kq_scale_min_k4(j, x[i].scales, &sc, &m);
            const float dl = d * sc, ml = min * m;
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                const int lo = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
                const int hi = (x[i].qh[l] >> j) & 1 ? 16 : 0;
                y[32 * j + l] = dl * (lo + hi) - ml;
            }
        }
    }
}

/* ==== Q6_K: 16 × 16 elements, x = d·sc·(q - 32), q in 0..63 =============== */

void sb_kq_quant_q6_K_ref(const float *src, void *dst, int64_t n) {
    sb_block_q6_K *y = dst;
    int8_t L[QK];
    float scales[16];
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ++ib) {
            const float scale = sb_kq_search_symmetric(16, 32, x + 16 * ib, NULL, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = sb_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ++ib) {
            const int v = kq_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < 16; ++j) {
            const float d = sb_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clampi(kq_nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        /* per 128 elements: ql[l] = low nibbles of l | l+64, ql[l+32] = of
         * l+32 | l+96; qh[l] = the 2 high bits of l, l+32, l+64, l+96 */
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t *q = (const uint8_t *)L + j + l;
                ql[l] = (uint8_t)((q[0] & 0xF) | ((q[64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q[32] & 0xF) | ((q[96] & 0xF) << 4));
                qh[l] = (uint8_t)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
    }
}

/* Element e of a Q6_K block as a signed quant (-32..31). */
static inline int q6_at(const sb_block_q6_K *b, int e) {
    const int h = e / 128, r = e % 128, l = r % 32, p = r / 32;
    const uint8_t lo = b->ql[64 * h + l + 32 * (p & 1)];
    const int nib = (p & 2) ? lo >> 4 : lo & 0xF;
    const int hi = (b->qh[32 * h + l] >> (2 * p)) & 3;
    return (nib | (hi << 4)) - 32;
}

void sb_kq_deq_q6_K_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q6_K *x = src;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = sb_fp16_to_fp32(x[i].d);
        float *y = dst + i * QK;
        for (int e = 0; e < QK; e++) y[e] = d * x[i].scales[e / 16] * q6_at(&x[i], e);
    }
}

/* ==== Q8_K: the activation type of the k-quants ============================ */
/* x = d·q with d = max/-127 (signed max, so q = -127 at the extreme);
 * bsums[j] = Σ q over elements 16j..16j+15 serve the min terms of the dots. */

void sb_kq_quant_q8_K_ref(const float *src, void *dst, int64_t n) {
    sb_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float max = 0, amax = 0;
        for (int j = 0; j < QK; ++j) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK; ++j) {
            const int v = kq_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void sb_kq_deq_q8_K_ref(const void *src, float *dst, int64_t n) {
    const sb_block_q8_K *x = src;
    for (int64_t i = 0; i < n / QK; i++)
        for (int j = 0; j < QK; ++j) dst[i * QK + j] = x[i].d * x[i].qs[j];
}

/* ==== dot products with Q8_K ================================================ */
/* Per super-block: an exact integer sum of sc·q·q8 (and of m·bsums for the
 * types with mins), then one float multiply-add with d·y.d. */

void sb_kq_dot_q2_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q2_K *x = vx;
    const sb_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK; ++i) {
        int summs = 0, isum = 0;
        for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
        for (int e = 0; e < QK; e += 16) {
            const int h = e / 128, p = (e % 128) / 32, l0 = e % 32;
            int isub = 0;
            for (int l = l0; l < l0 + 16; ++l) isub += y[i].qs[e + l - l0] * ((x[i].qs[h * 32 + l] >> (2 * p)) & 3);
            isum += (x[i].scales[e / 16] & 0xF) * isub;
        }
        const float dall = y[i].d * sb_fp16_to_fp32(x[i].d);
        const float dmin = y[i].d * sb_fp16_to_fp32(x[i].dmin);
        sum += dall * isum - dmin * summs;
    }
    *s = sum;
}

void sb_kq_dot_q3_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q3_K *x = vx;
    const sb_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK; ++i) {
        int8_t sc[16];
        kq_unpack_scales_q3(x[i].scales, sc);
        int isum = 0;
        for (int e0 = 0; e0 < QK; e0 += 16) {
            int isub = 0;
            for (int e = e0; e < e0 + 16; ++e) {
                const int h = e / 128, p = (e % 128) / 32, l = e % 32;
                const int q = ((x[i].qs[h * 32 + l] >> (2 * p)) & 3) - ((x[i].hmask[l] >> (e / 32)) & 1 ? 0 : 4);
                isub += q * y[i].qs[e];
            }
            isum += sc[e0 / 16] * isub;
        }
        sum += (sb_fp16_to_fp32(x[i].d) * y[i].d) * isum;
    }
    *s = sum;
}

void sb_kq_dot_q4_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q4_K *x = vx;
    const sb_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK; ++i) {
        uint8_t sm[16];
        kq_unpack_scales_k4(x[i].scales, sm);
        int isum = 0, summs = 0;
        for (int j = 0; j < 8; ++j) {
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int8_t *q8 = y[i].qs + 32 * j;
            int isub = 0;
            for (int l = 0; l < 32; ++l) isub += ((j & 1) ? q[l] >> 4 : q[l] & 0xF) * q8[l];
            isum += sm[j] * isub;
            summs += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += (sb_fp16_to_fp32(x[i].d) * y[i].d) * isum - (sb_fp16_to_fp32(x[i].dmin) * y[i].d) * summs;
    }
    *s = sum;
}

void sb_kq_dot_q5_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q5_K *x = vx;
    const sb_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK; ++i) {
        uint8_t sm[16];
        kq_unpack_scales_k4(x[i].scales, sm);
        int isum = 0, summs = 0;
        for (int j = 0; j < 8; ++j) {
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int8_t *q8 = y[i].qs + 32 * j;
            int isub = 0;
            for (int l = 0; l < 32; ++l) {
                const int lo = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
                isub += (lo | (((x[i].qh[l] >> j) & 1) << 4)) * q8[l];
            }
            isum += sm[j] * isub;
            summs += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        sum += (sb_fp16_to_fp32(x[i].d) * y[i].d) * isum - (sb_fp16_to_fp32(x[i].dmin) * y[i].d) * summs;
    }
    *s = sum;
}

void sb_kq_dot_q6_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const sb_block_q6_K *x = vx;
    const sb_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK; ++i) {
        int isum = 0;
        for (int e0 = 0; e0 < QK; e0 += 16) {
            int isub = 0;
            for (int e = e0; e < e0 + 16; ++e) isub += q6_at(&x[i], e) * y[i].qs[e];
            isum += x[i].scales[e0 / 16] * isub;
        }
        sum += (sb_fp16_to_fp32(x[i].d) * y[i].d) * isum;
    }
    *s = sum;
}
