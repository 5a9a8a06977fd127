/* unicode.c - the little Unicode the tokenizers need: UTF-8 as llama.cpp
 * decodes it (leniently), code point categories, GPT-2's byte alphabet. */
#include <string.h>

#include "worker/tokenizer/vocab_impl.h"

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
