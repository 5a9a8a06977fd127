/* sb_utf8.h - UTF-8 code points in and out, for the tokenizers and any
 * module that walks text by code point (kb's chunker).
 *
 * The decoder is lenient in exactly llama.cpp's way (no overlong or
 * surrogate checks): the tokenizers must cut text where llama.cpp does, or
 * token ids differ. Validation of untrusted input (JSON, HTTP) is the
 * strict sb_utf8_valid below, which the JSON reader and writer use.
 */
#ifndef SB_UTF8_H
#define SB_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation
 * bytes), llama.cpp's unicode_len_utf8. */
size_t   sb_utf8_len(uint8_t lead);
/* Decode the code point at s[0..n): returns the bytes used, or 0 when the
 * sequence is invalid. No overlong/surrogate checks - llama.cpp has none. */
size_t   sb_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Length (1..4) of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlong form, no surrogate, nothing above U+10FFFF), or 0 if it is not
 * one. n >= 1. */
size_t   sb_utf8_valid(const uint8_t *s, size_t n);
/* Encode cp (<= 0x10FFFF) into out; returns 1..4. */
size_t   sb_utf8_encode(uint32_t cp, char out[4]);
/* Whole text to code points; an invalid byte becomes U+FFFD and decoding
 * resumes at the next byte (llama.cpp's unicode_cpts_from_utf8).
 * *out is sb_malloc'ed. */
int      sb_utf8_to_cpts(const char *s, size_t n, uint32_t **out, size_t *n_out);
/* s made safe to print on a terminal, one line: control characters (C0,
 * DEL, and C1 such as U+009B, a CSI) and bytes that are not UTF-8 become
 * escapes (\n \r \t, \xHH, \u00HH), a backslash becomes \\; the rest
 * is kept. For names from outside (file names, sources) that would
 * otherwise move the cursor, recolour the screen or break a table row.
 * sb_malloc'ed; NULL when out of memory. */
char    *sb_utf8_escape_controls(const char *s);

#endif
