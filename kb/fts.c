/* fts.c - what FTS5 indexes and how a caller's question becomes a MATCH
 * expression, for the three tokenizers measured in docs/KNOWLEDGE.md.
 *
 * FTS5's unicode61 tokenizer takes a run of Chinese characters without
 * spaces as ONE token, so a question matches a chunk only if it repeats a
 * whole clause of it. Two remedies:
 *   bigram    (the default) we index overlapping character pairs of every
 *             CJK run ("住房公积金" -> "住房 房公 公积 积金"), the classic
 *             CJK indexing of Lucene's CJKAnalyzer, with porter+unicode61 for
 *             the rest (English stems: "withdrawing" matches "withdrawal");
 *   trigram   FTS5's own trigram tokenizer over the raw text: substrings of
 *             three characters, so two-character Chinese words ("户口",
 *             "社保") cannot match at all.
 * Questions are free text, never FTS5 syntax: every term is quoted and the
 * terms are OR-ed, BM25 ranks by how many and how rare.
 */
#include "kb/kb_internal.h"

#include <string.h>

static const char *const names[] = { "bigram", "trigram", "unicode61" };

const char *kb_fts_name(sb_kb_fts fts) { return (unsigned)fts < SB_ARRAY_LEN(names) ? names[fts] : "?"; }

int kb_fts_parse(const char *name) {
    for (size_t i = 0; i < SB_ARRAY_LEN(names); i++)
        if (!strcmp(name, names[i])) return (int)i;
    return -1;
}

const char *kb_fts_tokenizer(sb_kb_fts fts) {
    switch (fts) {
    case SB_KB_FTS_TRIGRAM: return "trigram";
    case SB_KB_FTS_UNICODE61: return "unicode61 remove_diacritics 2";
    default: return "porter unicode61 remove_diacritics 2";
    }
}

/* A character of a word written without spaces (ideographs, kana,
 * Hangul), not CJK punctuation or full-width ASCII. */
static bool cjk_letter(uint32_t cp) {
    return (cp >= 0x3040 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7AF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0x20000 && cp <= 0x3FFFF);
}

/* A character that is part of a term: letters and digits, any non-ASCII
 * character that is not CJK punctuation or a full-width symbol. */
static bool term_char(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (cp >= 0x2000 && cp <= 0x206F) return false;         /* general punctuation */
    if (cp >= 0x3000 && cp <= 0x303F) return false;         /* CJK punctuation */
    if (cp >= 0xFF00 && cp <= 0xFF0F) return false;
    if (cp >= 0xFF1A && cp <= 0xFF20) return false;
    if (cp >= 0xFF3B && cp <= 0xFF40) return false;
    if (cp >= 0xFF5B && cp <= 0xFF65) return false;
    return cp != 0xA0 && cp != 0xFFFD;
}

/* Replace every CJK run by its overlapping bigrams, space-separated (a
 * one-character run stays as it is). */
static int bigrams(sb_bytes *o, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t cp = kb_cp_at(s, n, i, &used);
        if (!cjk_letter(cp)) {
            if (sb_bytes_put(o, s + i, used)) return SB_ENOMEM;
            i += used;
            continue;
        }
        size_t a = i, b = i + used;             /* [a, b): the current character */
        size_t c = b, used2 = 0;
        bool alone = !(c < n && cjk_letter(kb_cp_at(s, n, c, &used2)));
        if (alone && (sb_bytes_put(o, " ", 1) || sb_bytes_put(o, s + a, b - a) || sb_bytes_put(o, " ", 1)))
            return SB_ENOMEM;
        while (c < n && cjk_letter(kb_cp_at(s, n, c, &used2))) {
            if (sb_bytes_put(o, " ", 1) || sb_bytes_put(o, s + a, c + used2 - a) || sb_bytes_put(o, " ", 1))
                return SB_ENOMEM;
            a = b;
            b = c + used2;
            c = b;
        }
        i = c;
    }
    return 0;
}

char *kb_fts_index_text(sb_kb_fts fts, const char *s, size_t n) {
    sb_bytes o = { 0 };
    int rc = fts == SB_KB_FTS_BIGRAM ? bigrams(&o, s, n) : sb_bytes_put(&o, s, n);
    if (rc || sb_bytes_put(&o, "", 1)) { sb_free(o.p); return NULL; }
    return o.p;
}

/* Append "term" (quotes doubled) OR-ed to the expression, once. */
static int add_term(sb_bytes *q, const char *t, size_t n) {
    sb_bytes quoted = { 0 };
    int rc = sb_bytes_put(&quoted, "\"", 1);
    for (size_t i = 0; i < n && !rc; i++) rc = sb_bytes_put(&quoted, t[i] == '"' ? "\"\"" : t + i, t[i] == '"' ? 2 : 1);
    if (!rc) rc = sb_bytes_put(&quoted, "\"", 1);
    if (!rc && !(q->n && memmem(q->p, q->n, quoted.p, quoted.n))) {
        if (q->n) rc = sb_bytes_put(q, " OR ", 4);
        if (!rc) rc = sb_bytes_put(q, quoted.p, quoted.n);
    }
    sb_free(quoted.p);
    return rc;
}

/* Trigram: terms of three characters or more; a CJK run is cut into its
 * overlapping trigrams (a question rarely repeats a whole clause). */
static int trigram_terms(sb_bytes *q, const char *t, size_t n) {
    size_t pos[64], k = 0;                      /* code point starts of the term */
    for (size_t i = 0; i < n && k < SB_ARRAY_LEN(pos);) {
        size_t used;
        kb_cp_at(t, n, i, &used);
        pos[k++] = i;
        i += used;
    }
    if (k < 3) return 0;
    size_t used;
    if (!cjk_letter(kb_cp_at(t, n, 0, &used))) return add_term(q, t, n);
    for (size_t i = 0; i + 3 <= k; i++) {
        size_t end = i + 3 < k ? pos[i + 3] : n;
        int rc = add_term(q, t + pos[i], end - pos[i]);
        if (rc) return rc;
    }
    return 0;
}

char *kb_fts_query(sb_kb_fts fts, const char *s, size_t n) {
    char *src = fts == SB_KB_FTS_BIGRAM ? kb_fts_index_text(fts, s, n) : NULL;
    if (fts == SB_KB_FTS_BIGRAM && !src) return NULL;
    const char *t = src ? src : s;
    size_t tn = src ? strlen(src) : n;
    sb_bytes q = { 0 };
    int rc = 0;
    for (size_t i = 0; i < tn && !rc;) {
        size_t used, start = i;
        while (i < tn && term_char(kb_cp_at(t, tn, i, &used))) i += used;
        if (i > start) {
            rc = fts == SB_KB_FTS_TRIGRAM ? trigram_terms(&q, t + start, i - start) : add_term(&q, t + start, i - start);
            continue;
        }
        kb_cp_at(t, tn, i, &used);
        i += used;
    }
    sb_free(src);
    if (rc || sb_bytes_put(&q, "", 1)) { sb_free(q.p); return NULL; }
    return q.p;
}
