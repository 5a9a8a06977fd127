/* tok_bpe.c - byte-level BPE of one text fragment, as llama.cpp's
 * llm_tokenizer_bpe_session does it.
 *
 *  1. The fragment is decoded to code points (invalid bytes -> U+FFFD) and
 *     split into words by the pre-tokenizer. llama.cpp writes each one as a
 *     regex over Unicode categories and runs hand-written matchers for the
 *     common ones (unicode.cpp, unicode_regex_split_custom_*); the matchers
 *     below follow those step by step, including their corner cases, with
 *     our own category table (unicode_data.c).
 *  2. Each word is re-encoded in GPT-2's byte alphabet (every UTF-8 byte
 *     becomes one printable character), which is what the vocab stores.
 *  3. Starting from one symbol per character, the adjacent pair with the
 *     lowest merge rank (ties: leftmost) is merged until no pair has a rank.
 *     With ignore_merges (Llama-3), a word that is itself a token is taken
 *     whole. A final symbol that is not a token is emitted byte by byte, and
 *     bytes without a token are dropped - llama.cpp does the same.
 */
#include <string.h>

#include "worker/tokenizer/vocab_impl.h"

/* ------------------------------------------------------------------ */
/* pre-tokenizers: word lengths in code points                          */

#define OUT_OF_RANGE 0xFFFFFFFFu

typedef struct {
    const uint32_t *cpts;
    size_t ini, end;        /* the chunk being split */
    size_t prev_end;        /* end of the last word emitted */
    sb_ids *words;
    int rc;
} splitter;

static uint32_t cp_at(const splitter *s, size_t pos) {
    return pos >= s->ini && pos < s->end ? s->cpts[pos] : OUT_OF_RANGE;
}
/* Flags, 0 outside the chunk (so "any category" tests fail there). */
static unsigned fl_at(const splitter *s, size_t pos) {
    return pos >= s->ini && pos < s->end ? sb_ucd_flags(s->cpts[pos]) : 0;
}
/* Emit the word [prev_end, end); returns its length. */
static size_t emit(splitter *s, size_t end) {
    size_t n = end - s->prev_end;
    if (n > 0 && !s->rc) s->rc = sb_ids_push(s->words, (int32_t)n);
    s->prev_end = end;
    return n;
}

/* Only A-Z lower to the ASCII letters the contractions test for: the two
 * other code points whose simple lowercase is ASCII (U+0130 -> i, U+212A ->
 * k) map to letters no contraction uses. */
static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int is_rn(uint32_t c) { return c == '\r' || c == '\n'; }

/* 's 't 're 've 'm 'll 'd (case-insensitive when `fold`): the length of the
 * contraction at pos, or 0. */
static size_t contraction_at(const splitter *s, size_t pos, int fold) {
    if (cp_at(s, pos) != '\'' || pos + 1 >= s->end) return 0;
    uint32_t c1 = cp_at(s, pos + 1);
    if (fold) c1 = ascii_lower(c1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= s->end) return 0;
    uint32_t c2 = cp_at(s, pos + 2);
    if (fold) c2 = ascii_lower(c2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2 is the same with \p{N} (max_digits = 1). */
static void split_llama3(splitter *s, size_t max_digits) {
    const unsigned WLN = SB_UCD_WHITESPACE | SB_UCD_LETTER | SB_UCD_NUMBER;
    for (size_t pos = s->ini; pos < s->end;) {
        const uint32_t cpt = cp_at(s, pos);
        const unsigned fl = fl_at(s, pos);

        size_t c = contraction_at(s, pos, 1);
        if (c) { pos += emit(s, pos + c); continue; }

        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(is_rn(cpt) || (fl & SB_UCD_NUMBER)) &&
            ((fl & SB_UCD_LETTER) || (fl_at(s, pos + 1) & SB_UCD_LETTER))) {
            pos++;
            while (fl_at(s, pos) & SB_UCD_LETTER) pos++;
            emit(s, pos);
            continue;
        }
        /* \p{N}{1,max_digits} */
        if (fl & SB_UCD_NUMBER) {
            size_t group = pos;
            while (fl_at(s, pos) & SB_UCD_NUMBER) {
                if (++pos - group >= max_digits) { emit(s, pos); group = pos; }
            }
            emit(s, pos);
            continue;
        }
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*'. llama.cpp tests the flags of the
         * current code point for "in range" here, not of the one after the
         * space; so do we. */
        unsigned fl2 = cpt == ' ' ? fl_at(s, pos + 1) : fl;
        if (!(fl2 & WLN) && fl) {
            pos += cpt == ' ';
            while (!(fl2 & WLN) && fl2) fl2 = fl_at(s, ++pos);
            while (is_rn(cp_at(s, pos))) pos++;
            emit(s, pos);
            continue;
        }
        /* whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ */
        size_t nws = 0, last_rn_end = 0;
        while (fl_at(s, pos + nws) & SB_UCD_WHITESPACE) {
            if (is_rn(cp_at(s, pos + nws))) last_rn_end = pos + nws + 1;
            nws++;
        }
        if (last_rn_end > 0) { pos = last_rn_end; emit(s, pos); continue; }
        if (nws > 1 && cp_at(s, pos + nws) != OUT_OF_RANGE) { pos += nws - 1; emit(s, pos); continue; }
        if (nws > 0) { pos += nws; emit(s, pos); continue; }
        emit(s, ++pos);                                 /* no match: one code point */
    }
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(splitter *s) {
    const unsigned WLN = SB_UCD_WHITESPACE | SB_UCD_LETTER | SB_UCD_NUMBER;
    for (size_t pos = s->ini; pos < s->end;) {
        const uint32_t cpt = cp_at(s, pos);
        const unsigned fl = fl_at(s, pos);

        size_t c = contraction_at(s, pos, 0);
        if (c) { pos += emit(s, pos + c); continue; }

        unsigned fl2 = cpt == ' ' ? fl_at(s, pos + 1) : fl;
        if (fl2 & SB_UCD_LETTER) {
            pos += cpt == ' ';
            while (fl2 & SB_UCD_LETTER) fl2 = fl_at(s, ++pos);
            emit(s, pos);
            continue;
        }
        if (fl2 & SB_UCD_NUMBER) {
            pos += cpt == ' ';
            while (fl2 & SB_UCD_NUMBER) fl2 = fl_at(s, ++pos);
            emit(s, pos);
            continue;
        }
        if (!(fl2 & WLN) && fl2) {
            pos += cpt == ' ';
            while (!(fl2 & WLN) && fl2) fl2 = fl_at(s, ++pos);
            emit(s, pos);
            continue;
        }
        size_t nws = 0;
        while (fl_at(s, pos + nws) & SB_UCD_WHITESPACE) nws++;
        if (nws > 1 && cp_at(s, pos + nws) != OUT_OF_RANGE) { pos += nws - 1; emit(s, pos); continue; }
        if (nws > 0) { pos += nws; emit(s, pos); continue; }
        emit(s, ++pos);
    }
}

/* The simple regexes llama.cpp runs through std::regex on a "collapsed" text
 * (every non-ASCII code point replaced by one byte standing for its
 * category, non-ASCII whitespace by \v). Each splits a chunk into matches
 * and the gaps between them. */
typedef enum { RX_PUNCT_RUN, RX_PUNCT_BT_RUN, RX_NUMBER_RUN, RX_NUMBER_ONE, RX_DIGIT3 } simple_regex;

/* [\p{P}\$\+<=>\^~\|] : ASCII punctuation and symbols except '`' (Falcon's
 * class adds it: with_backtick). */
static int is_punct_class(uint32_t c, int with_backtick) {
    if (c < 128) return c > ' ' && c < 127 && !(c >= '0' && c <= '9') &&
                        !((c | 32) >= 'a' && (c | 32) <= 'z') && (c != '`' || with_backtick);
    unsigned f = sb_ucd_flags(c);
    return !(f & SB_UCD_WHITESPACE) && (f & SB_UCD_CATEGORIES) == SB_UCD_PUNCT;
}
static int is_number_class(uint32_t c) {
    if (c < 128) return c >= '0' && c <= '9';
    unsigned f = sb_ucd_flags(c);
    return !(f & SB_UCD_WHITESPACE) && (f & SB_UCD_CATEGORIES) == SB_UCD_NUMBER;
}
static int is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* Length of the leftmost-longest match starting exactly at pos, or 0. */
static size_t simple_match_at(simple_regex rx, const splitter *s, size_t pos) {
    size_t n = 0;
    switch (rx) {
    case RX_PUNCT_RUN:  while (pos + n < s->end && is_punct_class(s->cpts[pos + n], 0)) n++; return n;
    case RX_PUNCT_BT_RUN: while (pos + n < s->end && is_punct_class(s->cpts[pos + n], 1)) n++; return n;
    case RX_NUMBER_RUN: while (pos + n < s->end && is_number_class(s->cpts[pos + n])) n++; return n;
    case RX_NUMBER_ONE: return is_number_class(s->cpts[pos]) ? 1 : 0;
    case RX_DIGIT3:
        return pos + 3 <= s->end && is_ascii_digit(s->cpts[pos]) && is_ascii_digit(s->cpts[pos + 1]) &&
               is_ascii_digit(s->cpts[pos + 2]) ? 3 : 0;
    }
    return 0;
}

static void split_simple(splitter *s, simple_regex rx) {
    for (size_t pos = s->ini; pos < s->end;) {
        size_t m = simple_match_at(rx, s, pos);
        if (m == 0) { pos++; continue; }
        emit(s, pos);                /* the gap before the match, if any */
        pos += m;
        emit(s, pos);
    }
    emit(s, s->end);
}

typedef enum { ST_GPT2, ST_LLAMA3, ST_QWEN2, ST_PUNCT, ST_PUNCT_BT, ST_NUMBERS, ST_DIGIT, ST_DIGIT3 } stage;

/* Apply one stage to every chunk of `in`, writing the finer split to `out`. */
static int run_stage(stage st, const uint32_t *cpts, const sb_ids *in, sb_ids *out) {
    size_t start = 0;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        splitter s = { cpts, start, start + (size_t)in->v[i], start, out, 0 };
        switch (st) {
        case ST_GPT2:    split_gpt2(&s); break;
        case ST_LLAMA3:  split_llama3(&s, 3); break;
        case ST_QWEN2:   split_llama3(&s, 1); break;
        case ST_PUNCT:   split_simple(&s, RX_PUNCT_RUN); break;
        case ST_PUNCT_BT: split_simple(&s, RX_PUNCT_BT_RUN); break;
        case ST_NUMBERS: split_simple(&s, RX_NUMBER_RUN); break;
        case ST_DIGIT:   split_simple(&s, RX_NUMBER_ONE); break;
        case ST_DIGIT3:  split_simple(&s, RX_DIGIT3); break;
        }
        if (s.rc) return s.rc;
        start = s.end;
    }
    return 0;
}

int sb_bpe_pretokenize(sb_pre_kind pre, const uint32_t *cpts, size_t n, sb_ids *words) {
    /* The regex lists of llm_tokenizer_bpe, in order. */
    static const stage st_default[] = { ST_PUNCT, ST_GPT2, ST_NUMBERS, ST_DIGIT3 };
    static const stage st_gpt2[] = { ST_GPT2 }, st_llama3[] = { ST_LLAMA3 }, st_qwen2[] = { ST_QWEN2 };
    static const stage st_starcoder[] = { ST_DIGIT, ST_GPT2 };
    static const stage st_falcon[] = { ST_PUNCT_BT, ST_GPT2, ST_DIGIT3 };
    const stage *stages;
    size_t n_stages;
    switch (pre) {
    case SB_PRE_GPT2:      stages = st_gpt2;      n_stages = 1; break;
    case SB_PRE_LLAMA3:    stages = st_llama3;    n_stages = 1; break;
    case SB_PRE_QWEN2:     stages = st_qwen2;     n_stages = 1; break;
    case SB_PRE_STARCODER: stages = st_starcoder; n_stages = 2; break;
    case SB_PRE_FALCON:    stages = st_falcon;    n_stages = 3; break;
    default:               stages = st_default;   n_stages = 4; break;
    }
    if (n == 0) return 0;
    if (n > INT32_MAX) return SB_ERANGE;
    sb_ids a = { 0 }, b = { 0 };
    int rc = sb_ids_push(&a, (int32_t)n);
    for (size_t i = 0; !rc && i < n_stages; i++) {
        rc = run_stage(stages[i], cpts, &a, &b);
        sb_ids t = a; a = b; b = t;
    }
    for (size_t i = 0; !rc && i < a.n; i++) rc = sb_ids_push(words, a.v[i]);
    sb_free(a.v);
    sb_free(b.v);
    return rc;
}

/* ------------------------------------------------------------------ */
/* merges                                                               */

typedef struct {
    uint32_t off, n;
    int32_t prev, next;
} bpe_symbol;

typedef struct {
    int32_t left, right;
    int32_t rank;
    uint32_t ln, rn;        /* sizes when offered: a pair is stale once either changed */
} bpe_bigram;

/* Does a leave the heap before b? Lower rank, then leftmost. */
static int bigram_before(const void *pa, const void *pb) {
    const bpe_bigram *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->left < b->left;
}

typedef struct {
    const sb_vocab *v;
    bpe_symbol *sym;
    size_t cap;
    sb_heap heap;
} bpe_work;

static int offer_pair(bpe_work *w, const char *word, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const bpe_symbol *l = &w->sym[left], *r = &w->sym[right];
    int32_t rank = sb_vocab_merge_rank(w->v, word + l->off, l->n, word + r->off, r->n);
    if (rank < 0) return 0;
    bpe_bigram b = { left, right, rank, l->n, r->n };
    return sb_heap_push(&w->heap, &b);
}

static int merge_word(bpe_work *w, const char *word, size_t len, sb_ids *out) {
    const sb_vocab *v = w->v;
    if (len == 0) return 0;
    if (len > w->cap) {
        bpe_symbol *p = sb_realloc(w->sym, len * sizeof *p);
        if (!p) return SB_ENOMEM;
        w->sym = p;
        w->cap = len;
    }
    bpe_symbol *sym = w->sym;
    int32_t n = 0;
    int rc = 0;
    if (v->ignore_merges && sb_vocab_lookup(v, word, len) >= 0) {
        sym[0] = (bpe_symbol){ 0, (uint32_t)len, -1, -1 };
        n = 1;
    } else {
        for (size_t off = 0; off < len; n++) {
            size_t cl = sb_utf8_len((uint8_t)word[off]);
            if (cl > len - off) cl = len - off;
            sym[n] = (bpe_symbol){ (uint32_t)off, (uint32_t)cl, n - 1, -1 };
            off += cl;
            if (off < len) sym[n].next = n + 1;
        }
    }
    w->heap.n = 0;
    for (int32_t i = 1; i < n && !rc; i++) rc = offer_pair(w, word, i - 1, i);
    while (!rc && w->heap.n) {
        bpe_bigram b;
        sb_heap_pop(&w->heap, &b);
        bpe_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n != b.ln || r->n != b.rn) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        rc = offer_pair(w, word, l->prev, b.left);
        if (!rc) rc = offer_pair(w, word, b.left, l->next);
    }
    for (int32_t i = 0; !rc && n > 0 && i != -1; i = sym[i].next) {
        if (sym[i].n == 0) continue;
        int32_t id = sb_vocab_lookup(v, word + sym[i].off, sym[i].n);
        if (id >= 0) { rc = sb_ids_push(out, id); continue; }
        for (uint32_t j = 0; !rc && j < sym[i].n; j++) {
            int32_t bt = sb_vocab_lookup(v, word + sym[i].off + j, 1);
            if (bt >= 0) rc = sb_ids_push(out, bt);
        }
    }
    return rc;
}

int sb_bpe_tokenize(const sb_vocab *v, const char *text, size_t len, sb_ids *out, char *err) {
    uint32_t *cpts = NULL;
    size_t n_cpts = 0;
    sb_ids words = { 0 };
    sb_bytes word = { 0 };
    bpe_work w = { v, NULL, 0, { .size = sizeof(bpe_bigram), .before = bigram_before } };
    int rc = sb_utf8_to_cpts(text, len, &cpts, &n_cpts);
    if (!rc) rc = sb_bpe_pretokenize(v->pre, cpts, n_cpts, &words);

    size_t start = 0;
    for (size_t i = 0; !rc && i < words.n; i++) {
        word.n = 0;
        for (size_t k = start; !rc && k < start + (size_t)words.v[i]; k++) {
            char u[4];
            /* llama.cpp throws on code points past U+10FFFF (possible from
             * F4..F7 lead bytes); we encode them as U+FFFD instead. */
            size_t un = sb_utf8_encode(cpts[k] <= 0x10FFFF ? cpts[k] : 0xFFFD, u);
            for (size_t j = 0; !rc && j < un; j++) {
                const uint8_t *e = v->byte_utf8[(uint8_t)u[j]];
                rc = sb_bytes_put(&word, e + 1, e[0]);
            }
        }
        start += (size_t)words.v[i];
        if (!rc) rc = merge_word(&w, word.p, word.n, out);
    }
    if (rc) sb_seterr(err, rc, rc == SB_ENOMEM ? "out of memory" : "text too long");
    sb_free(cpts);
    sb_free(words.v);
    sb_free(word.p);
    sb_free(w.sym);
    sb_free(w.heap.v);
    return rc;
}
