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

size_t sb_kq_q8_0_prep_bytes(int n) { return (size_t)(n / 32) * SB_KQ_P8_BLOCK_BYTES; }

void sb_kq_q8_0_prepare(int n, int nt, const void *y, size_t y_stride, void *dst) {
    const int nb = n / 32, G = SB_KQ_IL_TOK / sb_kq_il_tokens(nt);
    sb_kq_p8_block *o = dst;
    memset(o, 0, (size_t)nb * sizeof *o);
    for (int t = 0; t < nt; t++) {
        const sb_block_q8_0 *yt = (const sb_block_q8_0 *)((const uint8_t *)y + (size_t)t * y_stride);
        for (int i = 0; i < nb; i++) {
            int32_t sum = 0;
            for (int j = 0; j < 32; j++) sum += yt[i].qs[j];
            for (int g = 0; g < 8; g++) memcpy(o[i].q[g / G][t * G + g % G], yt[i].qs + 4 * g, 4);
            for (int h = 0; h < G; h++) {
                o[i].s[t * G + h] = sum;
                o[i].d[t * G + h] = sb_fp16_to_fp32(yt[i].d);
            }
        }
    }
}
