/* sb_gguf_write.h - building GGUF files, and writing any file atomically.
 *
 * Two small pieces the quantizer (and later converters) need:
 *
 *  - sb_gguf_writer: the metadata and tensor table of a GGUF v3 file. Keys
 *    keep their insertion order; setting an existing key removes it and
 *    appends it at the end, exactly as ggml's gguf_set_val_* does, so a file
 *    built like llama-quantize builds its output has its key order. Tensor
 *    offsets are the running sum of the aligned tensor sizes.
 *
 *  - sb_outfile: a file that appears under its final name only when it is
 *    complete. Bytes go to NAME.tmp-XXXXXX in the same directory; commit
 *    fsyncs it, renames it over NAME and fsyncs the directory; abort (or any
 *    failed write) unlinks it. A crash, a full disk or a kill leaves either
 *    the old NAME or the new one, never half a file.
 */
#ifndef SB_GGUF_WRITE_H
#define SB_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"
#include "worker/gguf/sb_gguf.h"

typedef struct sb_gguf_writer sb_gguf_writer;

/* An empty file description with alignment 32 (GGUF's default). */
int  sb_gguf_writer_new(sb_gguf_writer **out);
void sb_gguf_writer_free(sb_gguf_writer *w);

/* Copy key/value `kv` of the open file `src` byte for byte (any type,
 * arrays of strings and nested arrays included). A key already present is
 * replaced and moves to the end. "general.alignment" also sets the writer's
 * alignment (it must be a power-of-two u32, which the reader checked). */
int sb_gguf_writer_copy_kv(sb_gguf_writer *w, const sb_gguf *src, const sb_gguf_kv *kv, char *err);
/* Typed setters (replace + move to the end, as gguf_set_val_*). */
int sb_gguf_writer_set_u32(sb_gguf_writer *w, const char *key, uint32_t v);
int sb_gguf_writer_set_str(sb_gguf_writer *w, const char *key, const char *s);
/* Any value already serialized as GGUF stores it after the type tag (a
 * float, a bool, an array: u32 element type, u64 count, elements). */
int sb_gguf_writer_set_raw(sb_gguf_writer *w, const char *key, uint32_t type, const void *value, size_t n);
/* Remove a key if present (no error if absent). */
void sb_gguf_writer_remove(sb_gguf_writer *w, const char *key);
size_t sb_gguf_writer_n_kv(const sb_gguf_writer *w);
uint32_t sb_gguf_writer_alignment(const sb_gguf_writer *w);

/* Append a tensor: name (name_len bytes, < SB_GGUF_MAX_NAME), dims, GGML type.
 * ne[0] must be a multiple of the type's block size. Its data offset is the
 * previous tensor's offset plus its size padded to the alignment. */
int sb_gguf_writer_add_tensor(sb_gguf_writer *w, const char *name, size_t name_len, uint32_t n_dims,
                              const int64_t *ne, uint32_t type, char *err);
size_t   sb_gguf_writer_n_tensors(const sb_gguf_writer *w);
uint64_t sb_gguf_writer_tensor_offset(const sb_gguf_writer *w, size_t i); /* in the data section */
size_t   sb_gguf_writer_tensor_nbytes(const sb_gguf_writer *w, size_t i);
/* Total size of the data section (last tensor padded). */
uint64_t sb_gguf_writer_data_size(const sb_gguf_writer *w);

/* Serialize header + metadata + tensor table + padding to the alignment
 * into a new buffer (*out, caller frees with sb_free); tensor data follows
 * it directly in the file. */
int sb_gguf_writer_header(const sb_gguf_writer *w, uint8_t **out, size_t *len, char *err);

/* ---- atomic output file -------------------------------------------------- */
typedef struct sb_outfile sb_outfile;

/* Create PATH.tmp-XXXXXX (mode 0644 minus umask) next to path. */
int sb_outfile_open(const char *path, sb_outfile **out, char *err);
/* Append n bytes. On failure (ENOSPC, EFBIG, EIO…) err names the file and
 * the byte offset; the caller then calls sb_outfile_abort. */
int sb_outfile_write(sb_outfile *f, const void *buf, size_t n, char *err);
int sb_outfile_write_zeros(sb_outfile *f, size_t n, char *err);
uint64_t sb_outfile_offset(const sb_outfile *f);
/* fsync, rename over the final path, fsync the directory; frees f either way
 * (on failure the temporary file is removed). */
int  sb_outfile_commit(sb_outfile *f, char *err);
/* Remove the temporary file and free f (NULL is allowed). */
void sb_outfile_abort(sb_outfile *f);

#endif
