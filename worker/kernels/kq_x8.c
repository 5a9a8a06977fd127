/* kq_x8.c - row-interleaved ("x8") weights for decode, and their scalar
 * reference dot.
 *
 * Why: one token's matrix-vector product reads every weight byte once, so
 * it should run at memory speed; on a 2-core AVX2 machine it does not. The
 * per-row kernels (kq_kquants_avx2.c) spend most of their instructions on
 * what does not scale with the data: unpacking 6-bit scales, shuffling a
 * scale into place for each 32 elements, summing 8 lanes at the end of
 * each row. Interleaving 8 rows super-block by super-block lets one
 * instruction do that work for 8 rows at once: each 32-bit lane of a
 * vector holds 4 consecutive quants of one row, so the activation is a
 * 4-byte broadcast, the scale of a sub-block is one vector for 8 rows,
 * and the 8 results come out in one vector with no horizontal sum.
 * (From L2 that is 1.2-1.3x the per-row Q4_K/Q5_K dot; from DRAM, with
 * both prefetching, the gain is small: see docs/KERNELS.md, and why the
 * model loader uses this layout only with SB_REPACK=1.)
 *
 * The layout is a permutation of the same bytes: rows 8g..8g+7 keep their
 * place (the group starts at 8g·row_bytes) and the byte count is the same,
 * so a weight can be repacked in place of its file copy and unpacked back
 * for the tiled prompt kernels, which want the file layout.
 *
 * One tile = 8 rows × one 256-element super-block, tiles of a row group in
 * super-block order. Inside a tile (r = row 0..7, e = element 0..255):
 *   Q4_K / Q5_K: d[8], dmin[8]; 6-bit scales sc[r][j] and mins mn[r][j]
 *     of sub-block j (32 elements) as
 *       scl[8j'+r] = sc[r][j'] & 15 | (sc[r][j'+4] & 15) << 4     (j' < 4)
 *       mnl[8j'+r] = the same for the mins
 *       sh[8j'+r]  = sc[r][j']>>4 | (sc[r][j'+4]>>4) << 2 | mn[r][j']>>4 << 4 | (mn[r][j'+4]>>4) << 6
 *     quants: 32-byte chunk c (0..3) of sub-block j at qs + 32(4j+c):
 *       byte 4r+i = q[r][32j+8c+i] | q[r][32j+8c+4+i] << 4   (low 4 bits)
 *     Q5_K: qh + 32j, byte 4r+i, bit 2c+h = bit 4 of q[r][32j+8c+4h+i].
 *   Q6_K: d[8]; int8 scale of 16-element sub-block j at sc[8j+r]; the low
 *     nibbles as above for 32-element group j (ql + 32(4j+c)); the top two
 *     bits of group j at qh + 64j + 32(c/2), byte 4r+i, bits 2(2(c%2)+h)..+1.
 */
#include <stddef.h>

#include "worker/kernels/kq_internal.h"

#define QK SB_QK_K

/* One super-block of one row, decoded: what every layout stores. */
typedef struct {
    sb_fp16 d, dmin;
    uint8_t sc[16], mn[8];      /* Q6_K: 16 int8 scales in sc */
    uint8_t q[QK];              /* Q4_K 0..15, Q5_K 0..31, Q6_K 0..63 (biased) */
} kblock;

/* ---- tile -> decoded rows: the layout by element (for the reference dots) -- */

static void tile_get_k4(const kq_k4x8_head *t, const uint8_t *qh, const uint8_t *qs, kblock k[8]) {
    for (int r = 0; r < 8; r++) {
        k[r].d = t->d[r];
        k[r].dmin = t->dmin[r];
        for (int j = 0; j < 4; j++) {
            const uint8_t l = t->scl[8 * j + r], m = t->mnl[8 * j + r], h = t->sh[8 * j + r];
            k[r].sc[j] = (uint8_t)((l & 15) | (h & 3) << 4);
            k[r].sc[j + 4] = (uint8_t)((l >> 4) | ((h >> 2) & 3) << 4);
            k[r].mn[j] = (uint8_t)((m & 15) | ((h >> 4) & 3) << 4);
            k[r].mn[j + 4] = (uint8_t)((m >> 4) | (h >> 6) << 4);
        }
    }
    for (int j = 0; j < 8; j++)
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 8; r++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t byte = qs[32 * (4 * j + c) + 4 * r + i];
                    const uint8_t h = qh ? qh[32 * j + 4 * r + i] : 0;
                    k[r].q[32 * j + 8 * c + i] = (uint8_t)((byte & 0xF) | ((h >> (2 * c)) & 1) << 4);
                    k[r].q[32 * j + 8 * c + 4 + i] = (uint8_t)((byte >> 4) | ((h >> (2 * c + 1)) & 1) << 4);
                }
}

static void tile_get_q6(const kq_q6_Kx8 *t, kblock k[8]) {
    for (int r = 0; r < 8; r++) {
        k[r].d = t->d[r];
        for (int j = 0; j < 16; j++) k[r].sc[j] = (uint8_t)t->sc[8 * j + r];
    }
    for (int j = 0; j < 8; j++)
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 8; r++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t byte = t->ql[32 * (4 * j + c) + 4 * r + i];
                    const uint8_t h = t->qh[64 * j + 32 * (c / 2) + 4 * r + i];
                    const int f = 2 * (c % 2);
                    k[r].q[32 * j + 8 * c + i] = (uint8_t)((byte & 0xF) | ((h >> (2 * f)) & 3) << 4);
                    k[r].q[32 * j + 8 * c + 4 + i] = (uint8_t)((byte >> 4) | ((h >> (2 * f + 2)) & 3) << 4);
                }
}

/* ---- file layout <-> tile, a word at a time ------------------------------------
 * Loading a model repacks every weight and each prompt unpacks them again
 * (the tiled kernels want the file layout), so these move 4 or 8 bytes per
 * step instead of one element: ~2 GB/s instead of 0.2. The round trip and
 * the reference dots above (which read the tile element by element) are
 * what test them. */

static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

#define NIB 0x0F0F0F0Fu
#define NIB64 0x0F0F0F0F0F0F0F0FULL
#define BIT0_64 0x0101010101010101ULL
#define BITS2_64 0x0303030303030303ULL

/* Nibbles: 8 file bytes holding elements l..l+7 of a 32-element sub-block in
 * their nibble `shift` -> the tile's 4 bytes (l..l+3 low, l+4..l+7 high). */
static inline uint32_t nib_pack(uint64_t x, int shift) {
    x = (x >> shift) & NIB64;
    return (uint32_t)x | (uint32_t)(x >> 32) << 4;
}

/* The inverse for two sub-blocks sharing file bytes: t0 of the one in the
 * low nibbles, t1 of the one in the high nibbles -> 8 file bytes. */
static inline uint64_t nib_unpack(uint32_t t0, uint32_t t1) {
    const uint32_t lo = (t0 & NIB) | (t1 & NIB) << 4, hi = ((t0 >> 4) & NIB) | (t1 & ~NIB);
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* 8 rows' low nibble planes: sub-block (or Q6_K group) j of row r sits at
 * file offset off(j) in nibble shift(j); tile chunk (j, c) at 32(4j+c). */
static void nibs_to_tile(const uint8_t *const rows[8], const int off[8], const int shift[8], uint8_t *qs) {
    for (int j = 0; j < 8; j++)
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 8; r++)
                st32(qs + 32 * (4 * j + c) + 4 * r, nib_pack(ld64(rows[r] + off[j] + 8 * c), shift[j]));
}

/* The inverse; j and j + jstep share file bytes (low / high nibble). */
static void nibs_from_tile(const uint8_t *qs, uint8_t *const rows[8], const int off[8], const int shift[8]) {
    for (int j = 0; j < 8; j++) {
        if (shift[j]) continue;                 /* written with its low-nibble partner */
        int jh = 0;
        while (jh < 8 && !(off[jh] == off[j] && shift[jh])) jh++;
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 8; r++)
                st64(rows[r] + off[j] + 8 * c,
                     nib_unpack(ld32(qs + 32 * (4 * j + c) + 4 * r), ld32(qs + 32 * (4 * jh + c) + 4 * r)));
    }
}

/* Q4_K / Q5_K: sub-block j's nibbles are at qs[32(j/2)..], high nibble if j odd. */
static const int k4_off[8] = { 0, 0, 32, 32, 64, 64, 96, 96 }, k4_shift[8] = { 0, 4, 0, 4, 0, 4, 0, 4 };
/* Q6_K: group j (32 elements) = half j/4, quarter p = j%4: ql[64(j/4) + 32(p&1)], high nibble if p ≥ 2. */
static const int q6_off[8] = { 0, 32, 0, 32, 64, 96, 64, 96 }, q6_shift[8] = { 0, 0, 4, 4, 0, 0, 4, 4 };

static void k4_scales_pack(const uint8_t *const scales[8], kq_k4x8_head *t) {
    for (int r = 0; r < 8; r++) {
        uint8_t sm[16];
        kq_unpack_scales_k4(scales[r], sm);
        for (int j = 0; j < 4; j++) {
            const uint8_t s0 = sm[j], s1 = sm[j + 4], m0 = sm[8 + j], m1 = sm[12 + j];
            t->scl[8 * j + r] = (uint8_t)((s0 & 15) | (s1 & 15) << 4);
            t->mnl[8 * j + r] = (uint8_t)((m0 & 15) | (m1 & 15) << 4);
            t->sh[8 * j + r] = (uint8_t)((s0 >> 4) | (s1 >> 4) << 2 | (m0 >> 4) << 4 | (m1 >> 4) << 6);
        }
    }
}

static void k4_scales_unpack(const kq_k4x8_head *t, uint8_t *const scales[8]) {
    for (int r = 0; r < 8; r++)
        for (int j = 0; j < 4; j++) {
            /* the inverse of kq_scale_min_k4 */
            const uint8_t l = t->scl[8 * j + r], m = t->mnl[8 * j + r], h = t->sh[8 * j + r];
            scales[r][j] = (uint8_t)((l & 15) | (h & 3) << 4 | ((h >> 2) & 3) << 6);
            scales[r][j + 4] = (uint8_t)((m & 15) | ((h >> 4) & 3) << 4 | (h >> 6) << 6);
            scales[r][j + 8] = (uint8_t)((l >> 4) | (m >> 4) << 4);
        }
}

/* Q5_K fifth bits: file qh[l] bit j (element 32j+l) <-> tile byte 32j+4r+i
 * bit v, where l = 4v + i. */
static void q5_qh_pack(const uint8_t *const qh[8], uint8_t *tile_qh) {
    for (int r = 0; r < 8; r++) {
        uint64_t x[4];
        for (int k = 0; k < 4; k++) x[k] = ld64(qh[r] + 8 * k);
        for (int j = 0; j < 8; j++) {
            uint32_t out = 0;
            for (int k = 0; k < 4; k++) {
                const uint64_t y = (x[k] >> j) & BIT0_64;
                out |= (uint32_t)y << (2 * k) | (uint32_t)(y >> 32) << (2 * k + 1);
            }
            st32(tile_qh + 32 * j + 4 * r, out);
        }
    }
}

static void q5_qh_unpack(const uint8_t *tile_qh, uint8_t *const qh[8]) {
    for (int r = 0; r < 8; r++) {
        uint32_t t[8];
        for (int j = 0; j < 8; j++) t[j] = ld32(tile_qh + 32 * j + 4 * r);
        for (int v = 0; v < 8; v++) {
            uint32_t out = 0;
            for (int j = 0; j < 8; j++) out |= ((t[j] >> v) & 0x01010101u) << j;
            st32(qh[r] + 4 * v, out);
        }
    }
}

/* Q6_K top bits: file qh[32h + l] bits 2p..2p+1 (group j = 4h + p) <->
 * tile qh byte 64j + 32(c/2) + 4r + i, field 2(c%2) + (l%8 ≥ 4), l = 8c + ... */
static void q6_qh_pack(const uint8_t *const qh[8], uint8_t *tile_qh) {
    for (int j = 0; j < 8; j++) {
        const int h = j / 4, p = j % 4;
        for (int c = 0; c < 4; c++) {
            const int f = 2 * (c % 2);
            for (int r = 0; r < 8; r++) {
                const uint64_t y = (ld64(qh[r] + 32 * h + 8 * c) >> (2 * p)) & BITS2_64;
                uint8_t *dst = tile_qh + 64 * j + 32 * (c / 2) + 4 * r;
                st32(dst, (c % 2 ? ld32(dst) : 0) | (uint32_t)y << (2 * f) | (uint32_t)(y >> 32) << (2 * f + 2));
            }
        }
    }
}

static void q6_qh_unpack(const uint8_t *tile_qh, uint8_t *const qh[8]) {
    for (int r = 0; r < 8; r++)
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 4; c++) {
                const int f = 2 * (c % 2);
                uint64_t x = 0;
                for (int p = 0; p < 4; p++) {
                    const uint32_t t = ld32(tile_qh + 64 * (4 * h + p) + 32 * (c / 2) + 4 * r);
                    const uint64_t a = (t >> (2 * f)) & 0x03030303u, b = (t >> (2 * f + 2)) & 0x03030303u;
                    x |= (a | b << 32) << (2 * p);
                }
                st64(qh[r] + 32 * h + 8 * c, x);
            }
}

/* ---- public: pack / unpack ----------------------------------------------------- */

int sb_kq_x8_supported(int type) {
    return type == SB_TYPE_Q4_K || type == SB_TYPE_Q5_K || type == SB_TYPE_Q6_K;
}

/* Super-block b of 8 rows (row_bytes apart) <-> one tile. */
static void tile_convert(int type, int to_x8, uint8_t *rows, size_t row_bytes, uint8_t *tile, int64_t b) {
    uint8_t *blk[8];
    const size_t bs = type == SB_TYPE_Q6_K ? sizeof(sb_block_q6_K) : type == SB_TYPE_Q5_K ? sizeof(sb_block_q5_K)
                                                                                            : sizeof(sb_block_q4_K);
    for (int r = 0; r < 8; r++) blk[r] = rows + (size_t)r * row_bytes + (size_t)b * bs;
    uint8_t *part[8];
    if (type == SB_TYPE_Q6_K) {
        kq_q6_Kx8 *t = (kq_q6_Kx8 *)tile;
        for (int r = 0; r < 8; r++) {
            sb_block_q6_K *o = (sb_block_q6_K *)blk[r];
            for (int j = 0; j < 16; j++) {
                if (to_x8) t->sc[8 * j + r] = o->scales[j];
                else o->scales[j] = t->sc[8 * j + r];
            }
            if (to_x8) t->d[r] = o->d;
            else o->d = t->d[r];
        }
        for (int r = 0; r < 8; r++) part[r] = blk[r] + offsetof(sb_block_q6_K, ql);
        if (to_x8) nibs_to_tile((const uint8_t *const *)part, q6_off, q6_shift, t->ql);
        else nibs_from_tile(t->ql, part, q6_off, q6_shift);
        for (int r = 0; r < 8; r++) part[r] = blk[r] + offsetof(sb_block_q6_K, qh);
        if (to_x8) q6_qh_pack((const uint8_t *const *)part, t->qh);
        else q6_qh_unpack(t->qh, part);
        return;
    }
    /* Q4_K and Q5_K share d, dmin and scales[12]; Q5_K has qh[32] before qs */
    const int q5 = type == SB_TYPE_Q5_K;
    kq_k4x8_head *h = (kq_k4x8_head *)tile;
    uint8_t *qh = tile + sizeof *h, *qs = tile + sizeof *h + (q5 ? 256 : 0);
    for (int r = 0; r < 8; r++) {
        sb_fp16 dd[2];
        if (to_x8) {
            memcpy(dd, blk[r], 4);
            h->d[r] = dd[0];
            h->dmin[r] = dd[1];
        } else {
            dd[0] = h->d[r];
            dd[1] = h->dmin[r];
            memcpy(blk[r], dd, 4);
        }
        part[r] = blk[r] + 4;
    }
    if (to_x8) k4_scales_pack((const uint8_t *const *)part, h);
    else k4_scales_unpack(h, part);
    if (q5) {
        for (int r = 0; r < 8; r++) part[r] = blk[r] + offsetof(sb_block_q5_K, qh);
        if (to_x8) q5_qh_pack((const uint8_t *const *)part, qh);
        else q5_qh_unpack(qh, part);
    }
    for (int r = 0; r < 8; r++) part[r] = blk[r] + (q5 ? offsetof(sb_block_q5_K, qs) : offsetof(sb_block_q4_K, qs));
    if (to_x8) nibs_to_tile((const uint8_t *const *)part, k4_off, k4_shift, qs);
    else nibs_from_tile(qs, part, k4_off, k4_shift);
}

void sb_kq_x8_pack(int type, int64_t n, const void *rows, size_t row_bytes, void *dst) {
    const size_t ts = 8 * (row_bytes / (size_t)(n / QK));
    for (int64_t b = 0; b < n / QK; b++)
        tile_convert(type, 1, (uint8_t *)rows, row_bytes, (uint8_t *)dst + (size_t)b * ts, b);
}

void sb_kq_x8_unpack(int type, int64_t n, const void *src, void *rows, size_t row_bytes) {
    const size_t ts = 8 * (row_bytes / (size_t)(n / QK));
    for (int64_t b = 0; b < n / QK; b++)
        tile_convert(type, 0, (uint8_t *)rows, row_bytes, (uint8_t *)src + (size_t)b * ts, b);
}

/* ---- reference dots: the integer sums and float steps of vec_dot_ref ----------- */

/* One Q4_K/Q5_K super-block of 8 unpacked rows against one Q8_K block,
 * added to sum[8] in vec_dot_ref's order. */
static void k4_tile_dot(const kblock k[8], const sb_block_q8_K *y, float sum[8]) {
    for (int r = 0; r < 8; r++) {
        int isum = 0, summs = 0;
        for (int j = 0; j < 8; j++) {
            int isub = 0;
            for (int l = 0; l < 32; l++) isub += k[r].q[32 * j + l] * y->qs[32 * j + l];
            isum += k[r].sc[j] * isub;
            summs += k[r].mn[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
        }
        sum[r] += (sb_fp16_to_fp32(k[r].d) * y->d) * isum - (sb_fp16_to_fp32(k[r].dmin) * y->d) * summs;
    }
}

void sb_kq_gemv8_q4_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const sb_block_q8_K *y = vy;
    float sum[8] = { 0 };
    for (int b = 0; b < n / QK; b++, x += sizeof(kq_k4x8_head) + 1024) {
        kblock k[8];
        tile_get_k4((const kq_k4x8_head *)x, NULL, x + sizeof(kq_k4x8_head), k);
        k4_tile_dot(k, &y[b], sum);
    }
    memcpy(s, sum, sizeof sum);
}

void sb_kq_gemv8_q5_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const uint8_t *x = vx;
    const sb_block_q8_K *y = vy;
    float sum[8] = { 0 };
    for (int b = 0; b < n / QK; b++, x += sizeof(kq_k4x8_head) + 256 + 1024) {
        kblock k[8];
        tile_get_k4((const kq_k4x8_head *)x, x + sizeof(kq_k4x8_head), x + sizeof(kq_k4x8_head) + 256, k);
        k4_tile_dot(k, &y[b], sum);
    }
    memcpy(s, sum, sizeof sum);
}

void sb_kq_gemv8_q6_K_q8_K_ref(int n, float *s, const void *vx, const void *vy) {
    const kq_q6_Kx8 *x = vx;
    const sb_block_q8_K *y = vy;
    float sum[8] = { 0 };
    for (int b = 0; b < n / QK; b++) {
        kblock k[8];
        tile_get_q6(&x[b], k);
        for (int r = 0; r < 8; r++) {
            int isum = 0;
            for (int e0 = 0; e0 < QK; e0 += 16) {
                int isub = 0;
                for (int e = e0; e < e0 + 16; e++) isub += (k[r].q[e] - 32) * y[b].qs[e];
                isum += (int8_t)k[r].sc[e0 / 16] * isub;
            }
            sum[r] += (sb_fp16_to_fp32(k[r].d) * y[b].d) * isum;
        }
    }
    memcpy(s, sum, sizeof sum);
}
