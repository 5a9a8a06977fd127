/* kq_il.c - Q8_K activations interleaved for the multi-token kernels
 * (sb_kq_q8_K_interleave, layout in sb_kq.h). Level-independent: only the
 * kernels that read the layout are SIMD. */
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
