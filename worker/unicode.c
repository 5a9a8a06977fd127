/* unicode.c - the little Unicode the tokenizers need: UTF-8 as llama.cpp
 * decodes it (leniently), code point categories, GPT-2's byte alphabet. */
#include <string.h>

#include "vocab_impl.h"

unsigned sb_ucd_flags(uint32_t cp) {
    if (cp >= 0x110000) return SB_UCD_UNDEFINED;
    /* Entries are (start << 9) | flags: the last entry whose start <= cp. */
    const uint32_t key = (cp << 9) | 0x1FF;
    size_t lo = 0, hi = sb_ucd_n_ranges;      /* answer in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (sb_ucd_ranges[mid] <= key) lo = mid; else hi = mid;
    }
    return sb_ucd_ranges[lo] & 0x1FF;
}

size_t sb_utf8_len(uint8_t lead) {
    static const uint8_t by_high_nibble[16] = { 1,1,1,1,1,1,1,1, 1,1,1,1, 2,2, 3, 4 };
    return by_high_nibble[lead >> 4];
}

static int is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

size_t sb_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (!(b & 0x80)) { *cp = b; return 1; }
    if (!(b & 0x40)) return 0;                       /* stray continuation byte */
    if (!(b & 0x20)) {
        if (n < 2 || !is_cont(s[1])) return 0;
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (!(b & 0x10)) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) return 0;
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (!(b & 0x08)) {
        if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) return 0;
        *cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;                                        /* 0xF8..0xFF */
}

size_t sb_utf8_encode(uint32_t cp, char out[4]) {
    if (cp <= 0x7F) { out[0] = (char)cp; return 1; }
    if (cp <= 0x7FF) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp <= 0xFFFF) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int sb_utf8_to_cpts(const char *s, size_t n, uint32_t **out, size_t *n_out) {
    uint32_t *c = sb_malloc((n ? n : 1) * sizeof *c);
    if (!c) return SB_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t used = sb_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (used == 0) { cp = 0xFFFD; used = 1; }
        c[k++] = cp;
        i += used;
    }
    *out = c;
    *n_out = k;
    return 0;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 are moved to U+0100.. in byte order, so every byte has a
 * visible, non-space character in the vocabulary. */
static int byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t sb_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;                                  /* non-printable bytes below b */
    for (unsigned x = 0; x < b; x++) n += !byte_is_printable(x);
    return 256 + n;
}

int sb_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t n = 256;
    for (unsigned x = 0; x < 256; x++) {
        if (byte_is_printable(x)) continue;
        if (n++ == cp) return (int)x;
    }
    return -1;
}

int sb_ids_push(sb_ids *a, int32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *p = sb_realloc(a->v, cap * sizeof *p);
        if (!p) return SB_ENOMEM;
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

int sb_bytes_put(sb_bytes *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        char *p = sb_realloc(b->p, cap);
        if (!p) return SB_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}

int sb_heap_push(sb_heap *h, const void *elem) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        unsigned char *p = sb_realloc(h->v, cap * h->size);
        if (!p) return SB_ENOMEM;
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!h->before(elem, h->v + parent * h->size)) break;
        memcpy(h->v + i * h->size, h->v + parent * h->size, h->size);
        i = parent;
    }
    memcpy(h->v + i * h->size, elem, h->size);
    return 0;
}

void sb_heap_pop(sb_heap *h, void *out) {
    const size_t sz = h->size;
    memcpy(out, h->v, sz);
    const unsigned char *last = h->v + --h->n * sz;
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->before(h->v + (c + 1) * sz, h->v + c * sz)) c++;
        if (!h->before(h->v + c * sz, last)) break;
        memcpy(h->v + i * sz, h->v + c * sz, sz);
        i = c;
    }
    if (h->n) memmove(h->v + i * sz, last, sz);
}
