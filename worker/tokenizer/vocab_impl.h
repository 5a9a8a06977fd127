/* vocab_impl.h - private to the tokenizer files: vocab.c (loading, special
 * tokens, pieces), tok_spm.c, tok_bpe.c, unicode.c. Not a public API (that
 * is sb_vocab.h); it lets those files share the vocab struct. */
#ifndef SB_VOCAB_IMPL_H
#define SB_VOCAB_IMPL_H

#include "common/sb_utf8.h"
#include "worker/tokenizer/sb_vocab.h"

/* ---- Unicode (unicode.c, table in the generated unicode_data.c) ---- */

/* Code point flags; values as llama.cpp's unicode_cpt_flags. */
enum {
    SB_UCD_UNDEFINED  = 0x001,   /* unassigned (Cn) */
    SB_UCD_NUMBER     = 0x002,   /* \p{N} */
    SB_UCD_LETTER     = 0x004,   /* \p{L} */
    SB_UCD_SEPARATOR  = 0x008,   /* \p{Z} */
    SB_UCD_MARK       = 0x010,   /* \p{M} */
    SB_UCD_PUNCT      = 0x020,   /* \p{P} */
    SB_UCD_SYMBOL     = 0x040,   /* \p{S} */
    SB_UCD_CONTROL    = 0x080,   /* \p{C} */
    SB_UCD_CATEGORIES = 0x0FF,
    SB_UCD_WHITESPACE = 0x100,   /* \s: the White_Space property */
};
extern const uint32_t sb_ucd_ranges[];
extern const size_t   sb_ucd_n_ranges;

/* Flags of a code point; beyond U+10FFFF: SB_UCD_UNDEFINED (as llama.cpp). */
unsigned sb_ucd_flags(uint32_t cp);
/* GPT-2 byte <-> printable code point (bytes_to_unicode). */
uint32_t sb_byte_to_cp(uint8_t b);
int      sb_cp_to_byte(uint32_t cp);          /* -1 if cp is not one of the 256 */

/* ---- growable arrays ---- */
typedef struct { int32_t *v; size_t n, cap; } sb_ids;
int sb_ids_push(sb_ids *a, int32_t x);

/* ---- binary heap of fixed-size elements (the SPM and BPE merge queues) ---- */
typedef struct {
    unsigned char *v;
    size_t n, cap, size;                        /* size: bytes per element */
    int (*before)(const void *a, const void *b);  /* a leaves the heap first */
} sb_heap;
int  sb_heap_push(sb_heap *h, const void *elem);
void sb_heap_pop(sb_heap *h, void *out);      /* h->n > 0 */

/* ---- the vocab ---- */

/* Token attributes; values as llama.cpp's llama_token_attr. */
enum {
    SB_ATTR_UNDEFINED    = 0,
    SB_ATTR_UNKNOWN      = 1 << 0,
    SB_ATTR_UNUSED       = 1 << 1,
    SB_ATTR_NORMAL       = 1 << 2,
    SB_ATTR_CONTROL      = 1 << 3,
    SB_ATTR_USER_DEFINED = 1 << 4,
    SB_ATTR_BYTE         = 1 << 5,
    SB_ATTR_LSTRIP       = 1 << 7,
    SB_ATTR_RSTRIP       = 1 << 8,
};

/* BPE pre-tokenizers we implement (tokenizer.ggml.pre selects one). */
typedef enum {
    SB_PRE_SPM = 0,        /* not BPE */
    SB_PRE_DEFAULT,        /* punctuation runs, gpt2, digit runs, 3-digit groups */
    SB_PRE_GPT2,
    SB_PRE_LLAMA3,         /* digits in groups of up to 3 */
    SB_PRE_QWEN2,          /* llama3's rules, digits one by one */
    SB_PRE_STARCODER,      /* every digit alone, then gpt2 */
    SB_PRE_FALCON,         /* punctuation runs (with '`'), gpt2, 3-digit groups */
} sb_pre_kind;

typedef struct {
    uint32_t off, len;     /* text in v->text */
    float    score;
    uint16_t attr;
} sb_token;

typedef struct {
    uint32_t off, len;     /* "left right" in v->merge_text */
    uint32_t split;        /* length of left */
} sb_merge;

struct sb_vocab {
    sb_vocab_kind kind;
    sb_pre_kind   pre;
    int32_t   n_tokens;
    sb_token *tok;
    char     *text;                     /* all token texts, back to back */
    int32_t  *tok_hash;                 /* open addressing: id or -1 */
    size_t    tok_hash_mask;

    uint32_t  n_merges;                 /* BPE: rank = index */
    sb_merge *merge;
    char     *merge_text;
    int32_t  *merge_hash;
    size_t    merge_hash_mask;

    int32_t   bos, eos, eot, eom, unk, pad, nl;
    int       add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
    int32_t   byte_tok[256];            /* SPM byte fallback, -1 if missing */
    uint8_t   byte_utf8[256][3];        /* BPE: [0] = length, then the UTF-8 of sb_byte_to_cp */
    int16_t   cp_byte[256 + 68];        /* BPE: code point of the byte alphabet -> byte, or -1 */
    int32_t  *special;                  /* control/user-defined/unknown ids, longest text first */
    size_t    n_special;
    uint8_t  *eog;                      /* [n_tokens] */
};

static inline const char *sb_tok_text(const sb_vocab *v, int32_t id) { return v->text + v->tok[id].off; }

/* Text -> id, -1 if absent. */
int32_t sb_vocab_lookup(const sb_vocab *v, const char *s, size_t n);
/* Rank of merging left+right, -1 if no such merge. */
int32_t sb_vocab_merge_rank(const sb_vocab *v, const char *l, size_t ln, const char *r, size_t rn);

/* Tokenize one fragment of raw text (no special tokens in it), appending to out. */
int sb_spm_tokenize(const sb_vocab *v, const char *text, size_t len, sb_ids *out, char *err);
int sb_bpe_tokenize(const sb_vocab *v, const char *text, size_t len, sb_ids *out, char *err);
/* Pre-tokenize cpts[0..n) into word lengths (in code points), appended to words. */
int sb_bpe_pretokenize(sb_pre_kind pre, const uint32_t *cpts, size_t n, sb_ids *words);

#endif
