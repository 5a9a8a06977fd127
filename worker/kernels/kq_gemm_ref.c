/* kq_gemm_ref.c - scalar twins of the tiled kernels (sb_gemm_fn): one
 * vec_dot_ref per (row, column) pair. They define what every SIMD tile must
 * compute, and the reference table uses them so that every level has a gemm
 * for the same types. Built without SIMD flags, like the other _ref files.
 */
#include "worker/kernels/kq_internal.h"

#define GEMM_REF(wt, at)                                                                  \
    void sb_kq_gemm_##wt##_##at##_ref(KQ_GEMM_ARGS) {                                     \
        const uint8_t *xb = x, *yb = y;                                                   \
        for (int c = 0; c < nc; c++)                                                      \
            for (int r = 0; r < nr; r++)                                                  \
                sb_kq_dot_##wt##_##at##_ref(n, &s[(size_t)c * ldc + r], xb + (size_t)r * bx, \
                                            yb + (size_t)c * by);                         \
    }

GEMM_REF(q4_0, q8_0)
GEMM_REF(q5_0, q8_0)
GEMM_REF(q8_0, q8_0)
GEMM_REF(q2_K, q8_K)
GEMM_REF(q3_K, q8_K)
GEMM_REF(q4_K, q8_K)
GEMM_REF(q5_K, q8_K)
GEMM_REF(q6_K, q8_K)
