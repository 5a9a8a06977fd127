/* kq_il.c - activations laid out for the multi-token kernels: Q8_K
 * interleaved (sb_kq_q8_K_interleave), Q8_0 prepared (sb_kq_q8_0_prepare);
 * layouts in sb_kq.h. Level-independent: only the kernels that read the
 * layouts are SIMD. */
#include <string.h>

#include "worker/kernels/kq_internal.h"

void sb_kq_q8_K_interleave(int nb, int nt, const void *y, size_t y_stride, void *dst) {
    const int G = SB_KQ_IL_TOK / sb_kq_il_tokens(nt);
    sb_kq_il_block *o = dst;
    memset(o, 0, (size_t)nb * sizeof *o);
    for (int t = 0; t < nt; t++) {
        const sb_block_q8_K *yt = (const sb_block_q8_K *)((const uint8_t *)y + (size_t)t * y_stride);
        for (int i = 0; i < nb; i++) {
            for (int g = 0; g < 64; g++) memcpy(o[i].q[g / G][t * G + g % G], yt[i].qs + 4 * g, 4);
            for (int k = 0; k < 8; k++) memcpy(o[i].bs[k / G][t * G + k % G], yt[i].bsums + 2 * k, 4);
            for (int h = 0; h < G; h++) o[i].d[t * G + h] = yt[i].d;
        }
    }
}

size_t sb_kq_q8_0_prep_bytes(int n) {
    const int nb = n / 32, pairs = nb / 4 * 2;
    const size_t b = (size_t)pairs * SB_KQ_P8_PAIR_BYTES + (size_t)(nb % 4) * sizeof(sb_block_q8_0);
    return (b + 63) / 64 * 64;
}

void sb_kq_q8_0_prepare(int n, int nt, const void *y, size_t y_stride, void *dst) {
    const int nb = n / 32, pairs = nb / 4 * 2;
    const size_t tb = sb_kq_q8_0_prep_bytes(n);
    for (int t = 0; t < nt; t++) {
        const sb_block_q8_0 *yt = (const sb_block_q8_0 *)((const uint8_t *)y + (size_t)t * y_stride);
        uint8_t *o = (uint8_t *)dst + (size_t)t * tb;
        for (int p = 0; p < pairs; p++, o += SB_KQ_P8_PAIR_BYTES) {
            float d[16];
            int32_t s16[16];
            for (int h = 0; h < 2; h++) {
                const sb_block_q8_0 *b = &yt[2 * p + h];
                memcpy(o + 32 * h, b->qs, 32);
                for (int k = 0; k < 8; k++) {
                    d[8 * h + k] = sb_fp16_to_fp32(b->d);
                    s16[8 * h + k] = 16 * (b->qs[4 * k] + b->qs[4 * k + 1] + b->qs[4 * k + 2] + b->qs[4 * k + 3]);
                }
            }
            memcpy(o + 64, d, sizeof d);
            memcpy(o + 128, s16, sizeof s16);
        }
        memcpy(o, yt + 2 * pairs, (size_t)(nb - 2 * pairs) * sizeof *yt);
    }
}
