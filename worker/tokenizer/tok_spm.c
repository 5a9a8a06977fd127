/* tok_spm.c - SentencePiece-style tokenization of one text fragment, as
 * llama.cpp's llm_tokenizer_spm_session does it.
 *
 * The text (already escaped: spaces are U+2581) starts as one symbol per
 * UTF-8 character. Every adjacent pair whose concatenation is a token goes
 * into a max-heap by that token's score (ties: leftmost first); the best
 * pair is merged and its new neighbours are offered, until no pair forms a
 * token. Each final symbol is then a token, or is emitted byte by byte as
 * <0xXX> tokens (byte fallback).
 *
 * llama.cpp also keeps a "rev_merge" map to re-split symbols that are not
 * tokens; every merged symbol is a token by construction, so that path never
 * runs and is not reproduced here.
 */
#include <string.h>

#include "worker/tokenizer/vocab_impl.h"

typedef struct {
    uint32_t off, n;        /* bytes of the symbol in the text; n = 0: merged away */
    int32_t  prev, next;
} spm_symbol;

typedef struct {
    int32_t left, right;
    float   score;
    uint32_t size;          /* bytes of left+right when offered: detects stale pairs */
} spm_bigram;

/* Does a leave the heap before b? Higher score, then lower left. */
static int bigram_before(const void *pa, const void *pb) {
    const spm_bigram *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

static int offer_pair(const sb_vocab *v, const char *text, const spm_symbol *sym,
                      int32_t left, int32_t right, sb_heap *h) {
    if (left < 0 || right < 0) return 0;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = sb_vocab_lookup(v, text + sym[left].off, size);
    if (id < 0) return 0;
    spm_bigram b = { left, right, v->tok[id].score, size };
    return sb_heap_push(h, &b);
}

static int emit_symbol(const sb_vocab *v, const char *text, const spm_symbol *s, sb_ids *out, char *err) {
    int32_t id = sb_vocab_lookup(v, text + s->off, s->n);
    if (id >= 0) return sb_ids_push(out, id);
    for (uint32_t j = 0; j < s->n; j++) {
        uint8_t byte = (uint8_t)text[s->off + j];
        int32_t bt = v->byte_tok[byte];
        if (bt < 0)   /* llama.cpp throws here (token_to_id.at) */
            return sb_seterr(err, SB_EFORMAT, "vocab has no byte token <0x%02X> for byte fallback", byte);
        if (sb_ids_push(out, bt)) return SB_ENOMEM;
    }
    return 0;
}

int sb_spm_tokenize(const sb_vocab *v, const char *text, size_t len, sb_ids *out, char *err) {
    if (len == 0) return 0;
    if (len > UINT32_MAX / 2) return sb_seterr(err, SB_ERANGE, "text of %zu bytes is too long", len);
    spm_symbol *sym = sb_malloc(len * sizeof *sym);
    sb_heap heap = { .size = sizeof(spm_bigram), .before = bigram_before };
    int rc = 0;
    if (!sym) return sb_seterr(err, SB_ENOMEM, "out of memory");

    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = sb_utf8_len((uint8_t)text[off]);
        if (cl > len - off) cl = len - off;
        sym[n].off = (uint32_t)off;
        sym[n].n = (uint32_t)cl;
        sym[n].prev = n - 1;
        off += cl;
        sym[n].next = off == len ? -1 : n + 1;
    }
    for (int32_t i = 1; i < n && !rc; i++) rc = offer_pair(v, text, sym, i - 1, i, &heap);

    while (!rc && heap.n) {
        spm_bigram b;
        sb_heap_pop(&heap, &b);
        spm_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        rc = offer_pair(v, text, sym, l->prev, b.left, &heap);
        if (!rc) rc = offer_pair(v, text, sym, b.left, l->next, &heap);
    }
    if (rc) sb_seterr(err, rc, "out of memory");
    for (int32_t i = 0; !rc && i != -1; i = sym[i].next) rc = emit_symbol(v, text, &sym[i], out, err);

    sb_free(heap.v);
    sb_free(sym);
    return rc;
}
