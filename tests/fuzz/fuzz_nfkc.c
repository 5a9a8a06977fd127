/* fuzz_nfkc.c - libFuzzer target for the cache-key normaliser (tools/fuzz.sh).
 *
 * The caller's text reaches sb_cache_normalize straight from an HTTP body.
 * The first byte picks the flags (any of the five), the rest is the text,
 * valid UTF-8 or not. Whatever it is:
 *   - the output is valid UTF-8 of exactly *out_len bytes, NUL-terminated;
 *   - normalising is idempotent, for the chosen flags and for NFKC and NFC
 *     alone (norm(norm(x)) == norm(x): otherwise a key computed from a
 *     stored input would not find its own entry);
 *   - with no flags, valid UTF-8 comes back unchanged.
 */
#include <stdint.h>
#include <string.h>

#include "cache/sb_cache.h"
#include "tests/fuzz/fuzz_utf8.h"

/* norm(flags, in) is valid and a fixed point of norm(flags, .). */
static void check(unsigned flags, const char *in, size_t len) {
    char *a, *b;
    size_t na, nb;
    if (sb_cache_normalize(flags, in, len, &a, &na)) return;        /* out of memory only */
    if (a[na] != '\0' || !valid_utf8((const unsigned char *)a, na)) __builtin_trap();
    if (!flags && valid_utf8((const unsigned char *)in, len) && (na != len || memcmp(a, in, len)))
        __builtin_trap();
    if (sb_cache_normalize(flags, a, na, &b, &nb) == 0) {
        if (nb != na || memcmp(a, b, na)) __builtin_trap();        /* not idempotent */
        sb_free(b);
    }
    sb_free(a);
}

/* Blocks where normalisation does something: Latin and its marks, Greek,
 * Tibetan, Hangul jamo and syllables, Latin Extended Additional, spaces and
 * letterlike symbols, CJK punctuation, full-width forms. */
static const uint32_t blocks[][2] = {
    { 0x0000, 0x0100 }, { 0x0100, 0x0200 }, { 0x0300, 0x0370 }, { 0x0370, 0x0400 },
    { 0x0F40, 0x0FC0 }, { 0x1100, 0x1200 }, { 0x1E00, 0x1F00 }, { 0x1F00, 0x2000 },
    { 0x2000, 0x2100 }, { 0x2100, 0x2200 }, { 0x3000, 0x3100 }, { 0xAC00, 0xAD00 },
    { 0xFF00, 0xFFF0 }, { 0x1D400, 0x1D500 },
};

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Byte 0: the flags (low 5 bits); bit 5 set: the rest is pairs of bytes,
 * (block, offset), turned into code points of the blocks above, so the
 * mutator reaches mark and jamo sequences that random bytes seldom form;
 * clear: the rest is the text as is. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const unsigned all = SB_NORM_NFKC | SB_NORM_CASEFOLD | SB_NORM_COLLAPSE | SB_NORM_TRIM | SB_NORM_NFC;
    unsigned flags = data[0] & all;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char *built = NULL;
    if (data[0] & 0x20) {
        built = sb_malloc(len * 2 + 1);
        if (!built) return 0;
        size_t n = 0;
        for (size_t i = 0; i + 1 < len; i += 2) {
            const uint32_t *b = blocks[data[1 + i] % (sizeof blocks / sizeof blocks[0])];
            n += put_utf8(b[0] + data[2 + i] % (b[1] - b[0]), built + n);
        }
        text = built;
        len = n;
    }
    check(flags, text, len);
    if (flags != SB_NORM_NFKC) check(SB_NORM_NFKC, text, len);
    if (flags != SB_NORM_NFC) check(SB_NORM_NFC, text, len);
    sb_free(built);
    return 0;
}
