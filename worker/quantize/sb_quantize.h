/* sb_quantize.h - `switchboard quantize`: F32/F16/BF16 GGUF in, the
 * quantization mixes of llama-quantize out.
 *
 * Three layers, each usable on its own:
 *  - the mix (quant_mix.c): for a file type such as Q4_K_M, which type each
 *    tensor gets - llama.cpp's llama_tensor_get_type rules (attn_v /
 *    ffn_down / output raised per layer, GQA and expert conditions, block
 *    fallbacks for rows that are not a multiple of 256) - and the order the
 *    tensors are written in (llama-quantize's: by layer, then by name);
 *  - the row quantizers (quant_weighted.c): the reference quantizers of the
 *    kernel table, or with an importance matrix the weighted searches of
 *    ggml's quantize_*_impl;
 *  - the driver (quantize.c): threads, progress, metadata, atomic write.
 * The importance matrix reader is quant_imatrix.c.
 */
#ifndef SB_QUANTIZE_H
#define SB_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"
#include "worker/gguf/sb_gguf.h"

/* llama.cpp's LLAMA_FTYPE numbering: what general.file_type holds. */
enum sb_ftype {
    SB_FTYPE_ALL_F32 = 0, SB_FTYPE_F16 = 1, SB_FTYPE_Q4_0 = 2, SB_FTYPE_Q4_1 = 3,
    SB_FTYPE_Q8_0 = 7, SB_FTYPE_Q5_0 = 8, SB_FTYPE_Q5_1 = 9, SB_FTYPE_Q2_K = 10,
    SB_FTYPE_Q3_K_S = 11, SB_FTYPE_Q3_K_M = 12, SB_FTYPE_Q3_K_L = 13, SB_FTYPE_Q4_K_S = 14,
    SB_FTYPE_Q4_K_M = 15, SB_FTYPE_Q5_K_S = 16, SB_FTYPE_Q5_K_M = 17, SB_FTYPE_Q6_K = 18,
    SB_FTYPE_Q2_K_S = 21, SB_FTYPE_BF16 = 32,
};

typedef struct {
    const char *name;           /* "Q4_K_M", as llama-quantize spells it */
    int         ftype;          /* SB_FTYPE_* */
    int         default_type;   /* SB_TYPE_* most tensors get */
    const char *summary;
} sb_ftype_info;

/* Look up a TYPE argument (case-insensitive; Q3_K/Q4_K/Q5_K mean _M, as in
 * llama-quantize). NULL if unknown. */
const sb_ftype_info *sb_ftype_by_name(const char *name);
const sb_ftype_info *sb_ftype_by_id(int ftype);
/* The i-th supported file type (NULL past the end), for --help. */
const sb_ftype_info *sb_ftype_at(size_t i);

/* ---- the mix --------------------------------------------------------------- */

/* The model facts the rules look at, from the input's metadata. */
typedef struct {
    char     arch[32];
    uint32_t n_layer;           /* {arch}.block_count */
    uint32_t n_head, n_head_kv; /* of layer 0 (arrays allowed) */
    uint32_t n_expert;
    int      is_70b;            /* llama.cpp's LLM_TYPE_70B (8 KV heads shared) */
} sb_quant_hparams;

int sb_quant_hparams_read(const sb_gguf *g, sb_quant_hparams *hp, char *err);

typedef struct {
    int ftype;
    int pure;                   /* --pure: default type everywhere (fallbacks still apply) */
    int has_imatrix;            /* some rules change when an imatrix is given */
} sb_quant_mix_params;

typedef struct {
    size_t src_index;           /* tensor index in the input file */
    int    type;                /* output type (SB_TYPE_*) */
    int    quantize;            /* 0: copied as is (norms, biases, 1-D tensors) */
    int    fallback;            /* the row length forced a different type */
    int    requires_imatrix;    /* Q2_K_S's Q2_K tensors */
} sb_quant_plan_entry;

/* For every tensor of g, in llama-quantize's output order, its output type.
 * out has room for sb_gguf_n_tensors(g) entries. */
int sb_quant_plan(const sb_gguf *g, const sb_quant_hparams *hp, const sb_quant_mix_params *p,
                  sb_quant_plan_entry *out, char *err);

/* ---- row quantizers -------------------------------------------------------- */

/* Quantize nrows rows of n_per_row floats to `type` (F32/F16/BF16 or a
 * quantized type with a from_float_ref). imatrix (n_per_row importance
 * weights, may be NULL) selects ggml's weighted searches; without it the
 * output is byte for byte llama-quantize's. Returns bytes written. */
size_t sb_quant_rows(int type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                     const float *imatrix);

/* ---- importance matrix ----------------------------------------------------- */

typedef struct sb_imatrix sb_imatrix;

/* llama-imatrix output: the GGUF format (<tensor>.in_sum2 / <tensor>.counts
 * plus imatrix.* metadata) or the legacy binary .dat format. Values are
 * turned into per-column means as llama-quantize does. */
int  sb_imatrix_load(const char *path, sb_imatrix **out, char *err);
void sb_imatrix_free(sb_imatrix *m);
size_t sb_imatrix_n_entries(const sb_imatrix *m);
int    sb_imatrix_chunk_count(const sb_imatrix *m);
const char *sb_imatrix_dataset(const sb_imatrix *m);    /* first dataset or NULL */
/* The weights for tensor `name` (n values), or NULL if it has none. */
const float *sb_imatrix_find(const sb_imatrix *m, const char *name, size_t name_len, size_t *n);

/* ---- the whole file -------------------------------------------------------- */

typedef struct {
    int         ftype;
    int         n_threads;          /* >= 1 */
    int         pure;
    int         allow_requantize;   /* accept quantized inputs (dequantized first) */
    const char *imatrix_path;       /* NULL: none */
    int         quiet;              /* no progress lines on stderr */
} sb_quant_params;

typedef struct {
    uint64_t bytes_in, bytes_out;   /* tensor data, as llama-quantize counts it */
    uint64_t n_elements;
    size_t   n_tensors, n_quantized, n_fallback;
    double   seconds;
} sb_quant_stats;

/* Read in_path, write out_path atomically (nothing named out_path appears
 * unless it is complete). stats may be NULL. */
int sb_quantize_file(const char *in_path, const char *out_path, const sb_quant_params *p,
                     sb_quant_stats *stats, char *err);

#endif
