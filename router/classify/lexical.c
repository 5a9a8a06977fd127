/* lexical.c - hashed lexical features of a call (sb_classify.h, "Lexical
 * features").
 *
 * A small multilingual encoder blurs short Chinese calls that one word
 * settles ("电费", "燃气", "医保", "公积金"): the words are in the call, the
 * vector loses them. These features keep them: the call's n-grams hashed
 * into a fixed number of buckets, so they sit beside the embedding in the
 * classifier without a vocabulary to build or ship.
 *
 * Text is read by code point with common/'s strict UTF-8 check; a byte that
 * is not UTF-8 separates, like a space, so bad input still gives the
 * features of the rest. Folding is the part of NFKC and case folding that
 * matters for callers' words and needs no tables: full-width ASCII
 * ("ＡＢＣ１２３") to ASCII, the ideographic space to a space, ASCII and
 * Latin-1 capitals to small letters. (The full NFKC tables live in cache/,
 * a module this one may not use.)
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "router/classify/sb_classify.h"
#include "common/sb_utf8.h"

#define MAX_WORD 64              /* bytes of a word that are hashed; a longer "word" is noise */
#define FNV_OFFSET 0xCBF29CE484222325ull
#define FNV_PRIME 0x100000001B3ull

typedef struct {
    float *v;
    int dim, n;
} bag;

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * FNV_PRIME;
    return h;
}

/* One feature: its kind (a byte, so "电" the unigram and "电" inside a word
 * hash apart) and up to two byte strings joined by a space. The top bit of
 * the hash is its sign: collisions then cancel on average instead of
 * adding up. */
static void count(bag *b, char kind, const char *a, size_t na, const char *c, size_t nc) {
    uint64_t h = fnv1a(FNV_OFFSET, &kind, 1);
    h = fnv1a(h, a, na);
    if (c) h = fnv1a(fnv1a(h, " ", 1), c, nc);
    b->v[(h & 0x7FFFFFFFFFFFFFFFull) % (uint64_t)b->dim] += (h >> 63) ? -1.0f : 1.0f;
    b->n++;
}

/* Han (with extension A, compatibility and the supplementary planes),
 * kana and Hangul: scripts written without spaces between words. */
static int is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0x20000 && cp <= 0x3FFFF) || (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0xAC00 && cp <= 0xD7AF);
}

/* Letters and digits of space-separated scripts: ASCII alphanumerics and
 * the Latin, Greek, Cyrillic... blocks below the punctuation at U+2000,
 * without Latin-1's symbols and × ÷. */
static int is_word(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    return cp >= 0xC0 && cp < 0x2000 && cp != 0xD7 && cp != 0xF7;
}

static uint32_t fold(uint32_t cp) {
    if (cp >= 0xFF01 && cp <= 0xFF5E) cp -= 0xFEE0;            /* full-width ASCII */
    else if (cp == 0x3000) cp = ' ';
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) cp += 0x20;
    return cp;
}

typedef struct {
    char word[MAX_WORD], prev[MAX_WORD];
    size_t nw, np;
    char cjk[4];                 /* the previous CJK character, for bigrams; ncjk 0: none */
    size_t ncjk;
} walk;

/* Subword trigrams of "<word>": a word heard half right ("electricty")
 * still shares most of them with the right one. */
static void subwords(bag *b, const char *w, size_t n) {
    char t[MAX_WORD + 2];
    t[0] = '<';
    memcpy(t + 1, w, n);
    t[n + 1] = '>';
    for (size_t i = 0; i + 3 <= n + 2; i++) count(b, 'S', t + i, 3, NULL, 0);
}

static void end_word(bag *b, walk *w, unsigned flags) {
    if (!w->nw) return;
    count(b, 'W', w->word, w->nw, NULL, 0);
    if (w->np) count(b, 'P', w->prev, w->np, w->word, w->nw);
    if ((flags & SB_LEX_SUBWORDS) && w->nw >= 3) subwords(b, w->word, w->nw);
    memcpy(w->prev, w->word, w->nw);
    w->np = w->nw;
    w->nw = 0;
}

static void on_cjk(bag *b, walk *w, unsigned flags, const char *u, size_t nu) {
    end_word(b, w, flags);
    w->np = 0;                   /* a word bigram does not reach across Chinese */
    count(b, 'C', u, nu, NULL, 0);
    if (w->ncjk) count(b, 'B', w->cjk, w->ncjk, u, nu);
    memcpy(w->cjk, u, nu);
    w->ncjk = nu;
}

/* Sublinear counts (1 + ln n, keeping the sign a bucket summed to), then
 * unit length. */
static void finish(bag *b) {
    double ss = 0;
    for (int i = 0; i < b->dim; i++) {
        float x = b->v[i], a = fabsf(x);
        b->v[i] = a >= 1.0f ? copysignf(1.0f + logf(a), x) : 0.0f;
        ss += (double)b->v[i] * b->v[i];
    }
    if (ss <= 0) return;
    float inv = (float)(1.0 / sqrt(ss));
    for (int i = 0; i < b->dim; i++) b->v[i] *= inv;
}

int sb_lex_features(const char *text, size_t n, unsigned flags, float *out, int dim) {
    if (dim < 1) return -1;
    memset(out, 0, (size_t)dim * sizeof *out);
    bag b = { out, dim, 0 };
    walk w = {0};
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; text && i < n;) {
        uint32_t cp = 0;
        size_t len = sb_utf8_valid(s + i, n - i);
        if (!len) {              /* not UTF-8: a separator */
            end_word(&b, &w, flags);
            w.ncjk = 0;
            i++;
            continue;
        }
        sb_utf8_decode(s + i, len, &cp);
        i += len;
        cp = fold(cp);
        char u[4];
        size_t nu = sb_utf8_encode(cp, u);
        if (is_cjk(cp)) {
            on_cjk(&b, &w, flags, u, nu);
        } else if (is_word(cp)) {
            w.ncjk = 0;
            if (w.nw + nu <= MAX_WORD) memcpy(w.word + w.nw, u, nu), w.nw += nu;
        } else {
            end_word(&b, &w, flags);
            w.ncjk = 0;
        }
    }
    end_word(&b, &w, flags);
    finish(&b);
    return b.n;
}

int sb_lex_append(const float *emb, int emb_dim, const char *text, size_t n, unsigned flags, float *out) {
    if (out != emb) memcpy(out, emb, (size_t)emb_dim * sizeof *out);
    return sb_lex_features(text, n, flags, out + emb_dim, SB_LEX_DIM);
}
