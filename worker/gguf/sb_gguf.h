/* sb_gguf.h - read-only, memory-mapped GGUF reader (versions 2 and 3).
 *
 * The whole file is validated once at open: every length, count, offset and
 * product is checked against the file size with overflow-checked arithmetic,
 * so that nothing returned by this API can point outside the mapping. Errors
 * name the field and the byte offset at which parsing stopped.
 *
 * Strings returned here (sb_str) point into the mapping and are NOT
 * NUL-terminated; they live as long as the sb_gguf.
 */
#ifndef SB_GGUF_H
#define SB_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"

/* Limits on untrusted input; each is far above what real models use. */
#define SB_GGUF_MAX_STRING   (1u << 24)     /* 16 MiB: chat templates are KBs */
#define SB_GGUF_MAX_ARRAY    (1u << 28)     /* 268 M elements */
#define SB_GGUF_MAX_KV       (1u << 20)
#define SB_GGUF_MAX_TENSORS  (1u << 20)
#define SB_GGUF_MAX_DIMS     4
#define SB_GGUF_MAX_NAME     64             /* llama.cpp's GGML_MAX_NAME */
#define SB_GGUF_MAX_DEPTH    8              /* nested arrays */
#define SB_GGUF_DEFAULT_ALIGNMENT 32

typedef enum {
    SB_GGUF_U8 = 0, SB_GGUF_I8 = 1, SB_GGUF_U16 = 2, SB_GGUF_I16 = 3,
    SB_GGUF_U32 = 4, SB_GGUF_I32 = 5, SB_GGUF_F32 = 6, SB_GGUF_BOOL = 7,
    SB_GGUF_STRING = 8, SB_GGUF_ARRAY = 9, SB_GGUF_U64 = 10, SB_GGUF_I64 = 11,
    SB_GGUF_F64 = 12, SB_GGUF_VTYPE_COUNT
} sb_gguf_vtype;

typedef struct { const char *ptr; size_t len; } sb_str;

typedef struct {
    sb_str   key;
    uint32_t type;              /* sb_gguf_vtype */
    /* scalars */
    union { uint64_t u; int64_t i; double f; sb_str s; } v;
    /* arrays (type == SB_GGUF_ARRAY) */
    uint32_t arr_type;          /* element type; nested arrays are validated and
                                   skipped but their elements are not exposed */
    uint64_t arr_n;
    const uint8_t *arr_data;    /* first element inside the mapping (unaligned) */
    uint64_t offset;            /* byte offset of the key in the file */
} sb_gguf_kv;

typedef struct {
    sb_str   name;
    uint32_t n_dims;
    int64_t  ne[SB_GGUF_MAX_DIMS];  /* ne[0] is the contiguous (row) dimension */
    uint32_t type;                  /* GGML type id, see sb_kq.h */
    uint64_t offset;                /* relative to the data section */
    size_t   nbytes;
    const void *data;               /* inside the mapping */
    uint64_t info_offset;           /* byte offset of this tensor's info (its name) in the file */
} sb_gguf_tensor;

typedef struct sb_gguf sb_gguf;

/* Map and validate `path`. On failure *out is NULL and err says why. */
int  sb_gguf_open(const char *path, sb_gguf **out, char *err);
/* Parse a buffer the caller owns (fuzzing, tests); it must outlive the result. */
int  sb_gguf_open_mem(const void *buf, size_t len, const char *label, sb_gguf **out, char *err);
void sb_gguf_close(sb_gguf *g);
/* Bytes of the file mapping the kernel maps with 2 MiB pages now (Linux
 * /proc/self/smaps FilePmdMapped; 0 elsewhere, for a buffer, or before the
 * pages are touched). Decode streams every weight once per token, so on
 * 4 KiB pages it takes a TLB miss per 4 KiB: the kernel maps a file whole
 * where its page cache holds 2 MiB folios (ext4 on Linux 6.18 does for a
 * file read through a mapping, not for one just written; see
 * docs/operations.md, "Model files and huge pages"). */
size_t sb_gguf_huge_bytes(const sb_gguf *g);
/* The n bytes at `at` (inside the file's data: a row of a tensor) read
 * from the file into dst, without touching the mapping; returns dst, or
 * `at` itself when the GGUF is a caller's buffer or the read fails (the
 * mapping holds the same bytes). For a table read a few rows at a time
 * (token embeddings): a row read through the mapping maps the 64 KiB
 * around it, or its whole 2 MiB page, and they count as the process's
 * memory (PSS) though a row is a few hundred bytes. */
const void *sb_gguf_read_at(const sb_gguf *g, const void *at, size_t n, void *dst);
/* Once the metadata has been copied out (the tokenizer's tables): the
 * header's pages leave this process's mapping (MADV_DONTNEED), so they no
 * longer count as its memory. A later read of a metadata value still
 * works: its pages come back from the page cache. */
void sb_gguf_release_header(const sb_gguf *g);

uint32_t    sb_gguf_version(const sb_gguf *g);
size_t      sb_gguf_file_size(const sb_gguf *g);
size_t      sb_gguf_data_offset(const sb_gguf *g);   /* start of the tensor data */
uint32_t    sb_gguf_alignment(const sb_gguf *g);
const char *sb_gguf_path(const sb_gguf *g);
const void *sb_gguf_base(const sb_gguf *g);

size_t               sb_gguf_n_kv(const sb_gguf *g);
const sb_gguf_kv    *sb_gguf_kv_at(const sb_gguf *g, size_t i);
const sb_gguf_kv    *sb_gguf_find(const sb_gguf *g, const char *key);
size_t               sb_gguf_n_tensors(const sb_gguf *g);
const sb_gguf_tensor *sb_gguf_tensor_at(const sb_gguf *g, size_t i);
const sb_gguf_tensor *sb_gguf_find_tensor(const sb_gguf *g, const char *name);

/* Typed getters. Integers of any width and sign convert when the value fits;
 * return SB_ENOTFOUND if the key is absent, SB_EFORMAT if the type is wrong. */
int sb_gguf_get_u64(const sb_gguf *g, const char *key, uint64_t *out);
int sb_gguf_get_u32(const sb_gguf *g, const char *key, uint32_t *out);
int sb_gguf_get_i64(const sb_gguf *g, const char *key, int64_t *out);
int sb_gguf_get_f32(const sb_gguf *g, const char *key, float *out);  /* ints accepted */
int sb_gguf_get_bool(const sb_gguf *g, const char *key, int *out);
int sb_gguf_get_str(const sb_gguf *g, const char *key, sb_str *out);

/* Array element readers (index < kv->arr_n, element type must match). */
int64_t  sb_gguf_arr_int(const sb_gguf_kv *kv, uint64_t i);   /* any integer type */
double   sb_gguf_arr_float(const sb_gguf_kv *kv, uint64_t i); /* f32/f64/int */
/* String arrays are variable-length: this builds an index (caller frees with
 * sb_free). Fails with SB_EFORMAT if kv is not an array of strings. */
int sb_gguf_arr_strings(const sb_gguf_kv *kv, sb_str **out, char *err);

const char *sb_gguf_vtype_name(uint32_t t);
/* Compare an sb_str with a C string. */
int sb_str_eq(sb_str s, const char *c);

#endif
