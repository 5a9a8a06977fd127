/* sb_charsmap.h - SentencePiece's "precompiled charsmap" normaliser.
 *
 * A SentencePiece model (and a GGUF's tokenizer.ggml.precompiled_charsmap)
 * stores its normalisation rules as one blob:
 *   u32 trie_bytes | trie: trie_bytes/4 u32 units | replacement strings
 * The trie is a darts-clone XOR-compressed double array over the UTF-8 bytes
 * of the keys; a key's leaf holds the offset of its NUL-terminated
 * replacement in the strings. Normalising takes, at each position, the
 * longest key that matches and emits its replacement (llama.cpp's
 * llm_tokenizer_ugm_session::normalize_prefix reads the same format).
 *
 * Unit layout (as darts-clone and llama.cpp's xcda_array_view):
 *   bit 31      set on value units (so their label never equals a byte)
 *   bits 10..30 base (bit 9 set: base << 8)
 *   bit 8       has a leaf (the node's value unit is at pos ^ base)
 *   bits 0..7   label: the byte that leads to this node
 * Children of the node at pos: pos ^ base ^ byte.
 */
#ifndef SB_CHARSMAP_H
#define SB_CHARSMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t *units;        /* own copy (the blob in a GGUF is unaligned) */
    size_t    n_units;
    char     *repl;         /* replacement strings, own copy */
    size_t    repl_len;
} sb_charsmap;

/* Parse a blob; everything is copied. An empty blob gives an empty map
 * (no rule matches). SB_EFORMAT names what is inconsistent. */
int  sb_charsmap_load(const uint8_t *blob, size_t len, sb_charsmap *cm, char *err);
void sb_charsmap_free(sb_charsmap *cm);

/* The longest key that prefixes s[0..n): returns its length in bytes (0 if
 * none matches) and sets *out / *out_len to its replacement. */
size_t sb_charsmap_match(const sb_charsmap *cm, const char *s, size_t n, const char **out, size_t *out_len);

/* One rule: the key's bytes and what they become (may be empty). */
typedef struct {
    const char *key;
    size_t      key_len;
    const char *repl;
    size_t      repl_len;
} sb_charsmap_rule;

/* Build the blob for `rules` (keys distinct, non-empty, no NUL byte;
 * replacements without NUL). *out is sb_malloc'ed. */
int sb_charsmap_build(const sb_charsmap_rule *rules, size_t n, uint8_t **out, size_t *out_len, char *err);

#endif
