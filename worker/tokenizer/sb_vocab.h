/* sb_vocab.h - tokenizers that reproduce llama.cpp's token ids exactly.
 *
 * Two families, chosen by tokenizer.ggml.model:
 *  - "llama": SentencePiece-style (Llama-2/TinyLlama, Phi-3): bigram merges by
 *    score, spaces escaped as U+2581, a space prefix, byte fallback <0xXX>;
 *  - "gpt2":  byte-level BPE (Llama-3, Qwen2): a pre-tokenizer selected by
 *    tokenizer.ggml.pre splits the text, merges are applied by rank.
 * Special (control / user-defined) tokens are cut out of the text first, as
 * llama.cpp's tokenizer_st_partition does, including the per-model LSTRIP /
 * RSTRIP attributes (Phi-3 strips whitespace after its special tokens).
 *
 * The reference is llama.cpp's src/llama-vocab.cpp and src/unicode.cpp;
 * docs of each rule are next to the code that implements it.
 *
 * A vocab is immutable after load and may be shared by threads.
 */
#ifndef SB_VOCAB_H
#define SB_VOCAB_H

#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"
#include "worker/gguf/sb_gguf.h"

typedef struct sb_vocab sb_vocab;

typedef enum { SB_VOCAB_SPM = 1, SB_VOCAB_BPE = 2 } sb_vocab_kind;

/* Build a vocab from the tokenizer.ggml.* keys of `g` (everything is copied:
 * the vocab does not keep `g`). Errors name the missing or malformed key,
 * e.g. "tokenizer.ggml.tokens: missing", "unknown pre-tokenizer 'x'". */
int  sb_vocab_load(const sb_gguf *g, sb_vocab **out, char *err);
void sb_vocab_free(sb_vocab *v);

sb_vocab_kind sb_vocab_kind_of(const sb_vocab *v);
const char   *sb_vocab_pre_name(const sb_vocab *v);   /* "spm", "llama3", "qwen2", "gpt2", "default"… */
int32_t sb_vocab_n_tokens(const sb_vocab *v);
/* Special ids, -1 when the vocab has none. */
int32_t sb_vocab_bos(const sb_vocab *v);
int32_t sb_vocab_eos(const sb_vocab *v);
int32_t sb_vocab_eot(const sb_vocab *v);
int32_t sb_vocab_nl(const sb_vocab *v);               /* the newline token */
/* tokenizer.ggml.add_bos_token, or the tokenizer type's default. */
int  sb_vocab_add_bos(const sb_vocab *v);
/* End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by
 * text (<|eot_id|>, <|end|>, <|im_end|>, <|endoftext|>, <|eom_id|>…). */
int  sb_vocab_is_eog(const sb_vocab *v, int32_t tok);
/* Control or unknown token: not rendered unless asked for (see below). */
int  sb_vocab_is_control(const sb_vocab *v, int32_t tok);
/* Exact token text -> id, or -1. */
int32_t sb_vocab_find(const sb_vocab *v, const char *text);
/* Raw token text as stored in the GGUF (not NUL-terminated); {NULL,0} if
 * tok is out of range. */
sb_str sb_vocab_text(const sb_vocab *v, int32_t tok);

/* Tokenize `len` bytes of `text` (any bytes: invalid UTF-8 is handled as
 * llama.cpp does). add_bos: add the BOS (and EOS) that the vocab asks for -
 * llama.cpp's add_special. parse_special: match control tokens in the text
 * (user-defined tokens are always matched, as in llama.cpp). *out is
 * sb_malloc'ed (non-NULL even when *n_out is 0); the caller sb_free()s it. */
int  sb_tokenize(const sb_vocab *v, const char *text, size_t len, int add_bos, int parse_special,
                 int32_t **out, size_t *n_out, char *err);

/* ---- prompts of trusted and untrusted text ----
 *
 * A prompt is usually assembled: a chat or pipeline template (trusted: its
 * "<|im_start|>", "<|eot_id|>", "</s>" are meant as control tokens) with a
 * caller's words, an HTTP client's messages or an earlier model's output
 * spliced in (untrusted). Tokenized as one string with special tokens
 * parsed, a caller who types "<|im_end|>" gets the real control token and
 * can close his turn and write the system's or the assistant's (llama.cpp's
 * server tokenizes such content with parse_special off for this reason).
 * An sb_prompt keeps the text whole, so tokenization across the joins is
 * exactly that of the concatenated string, and records which byte ranges
 * are untrusted ("plain"): no special token - control, unknown or
 * user-defined (Qwen's "<tool_call>", Phi-3's "</s>") - is matched if any
 * of its bytes lies in one; such text is tokenized as the characters it is
 * made of. Stricter than llama.cpp's parse_special off, which still matches
 * user-defined tokens: those are markup the model was trained to obey (a
 * tool call, an end of turn), and a caller must not be able to write it. */
typedef struct { size_t off, len; } sb_span;

typedef struct {
    char    *text;          /* NUL-terminated once anything was added */
    size_t   len, cap;
    sb_span *plain;         /* untrusted ranges of text, in order; adjacent ones merged */
    size_t   n_plain, cap_plain;
    int      failed;        /* an append ran out of memory (sticky; sb_tokenize_prompt reports it) */
} sb_prompt;

/* One piece of a prompt as a caller hands it over: special = trusted. */
typedef struct { const char *text; size_t len; int special; } sb_text_seg;

/* Start from a zeroed sb_prompt. Appends n bytes, trusted when special. */
void sb_prompt_add(sb_prompt *p, const char *s, size_t n, int special);
/* Mark everything appended so far untrusted (a request with special off). */
void sb_prompt_all_plain(sb_prompt *p);
void sb_prompt_free(sb_prompt *p);
/* sb_tokenize of p->text with special tokens parsed outside the plain
 * ranges only (see above). SB_ENOMEM if an append had failed. */
int  sb_tokenize_prompt(const sb_vocab *v, const sb_prompt *p, int add_bos, int32_t **out, size_t *n_out,
                        char *err);

/* The bytes of one token as llama.cpp's token_to_piece renders them: byte
 * tokens become the raw byte, U+2581 a space, BPE byte-unicode is decoded;
 * control/unknown tokens give "" unless `special`. Like snprintf: writes at
 * most cap bytes (no NUL) and returns the full length, so a result > cap
 * means truncation. Returns SB_EINVAL for an id outside the vocab. */
int  sb_token_to_piece(const sb_vocab *v, int32_t tok, char *buf, size_t cap, int special);

/* llama.cpp's llama_detokenize: the pieces joined, the leading space of an
 * SPM text dropped, BOS/EOS removed if remove_special, control tokens shown
 * if unparse_special, and for most BPE vocabs the clean-up of " ," " 's"…
 * (clean_up_tokenization_spaces). snprintf semantics as above; negative only
 * for an invalid id or out of memory. */
long sb_detokenize(const sb_vocab *v, const int32_t *toks, size_t n, char *buf, size_t cap,
                   int remove_special, int unparse_special);

#endif
