/* chunk.c - documents to chunks: sections from headings, sentences from
 * paragraphs, sentences packed into chunks of at most chunk_tokens tokens
 * (measured with the caller's counter: the encoder's tokenizer).
 *
 * Why sentences: a chunk is what a reply quotes and what the encoder sees;
 * a cut mid-sentence loses the half that carried the answer. Why never
 * across sections: the heading is part of the chunk's meaning (it is stored
 * with it and embedded with it), and two sections under one heading would
 * mislabel half the chunk.
 */
#include "kb/kb_internal.h"

#include <string.h>

typedef struct {
    const char *s;              /* into the block's text */
    size_t n;
    size_t tokens;
    bool para_start;            /* first unit of its paragraph */
} unit;

typedef struct {
    int max, overlap;
    sb_kb_count_fn count;
    void *ud;
    char *section;
    unit *u;                    /* the current chunk's units */
    size_t n_u, cap_u;
    size_t tokens;
    size_t fresh;               /* units since the last chunk ended (the rest is overlap) */
    sb_kb_chunk *out;
    size_t n_out, cap_out;
    sb_bytes text;
} chunker;

/* Sentence ends: 。！？；… at once; . ! ? ; when followed by white space
 * (so "3.5" and "e5.c" stay whole). Closing quotes and brackets after the
 * mark stay with the sentence. */
static bool cjk_stop(uint32_t cp) {
    return cp == 0x3002 || cp == 0xFF01 || cp == 0xFF1F || cp == 0xFF1B || cp == 0x2026;
}
static bool closer(uint32_t cp) {
    return cp == '"' || cp == '\'' || cp == ')' || cp == ']' || cp == 0x201D || cp == 0x2019 || cp == 0x300D ||
           cp == 0x300F || cp == 0xFF09 || cp == 0x3011;
}

static size_t sentence_end(const char *s, size_t n, size_t i) {
    while (i < n) {
        size_t used;
        uint32_t cp = kb_cp_at(s, n, i, &used);
        i += used;
        bool latin = cp == '.' || cp == '!' || cp == '?' || cp == ';';
        if (!latin && !cjk_stop(cp)) continue;
        size_t j = i;
        while (j < n) {
            uint32_t c2 = kb_cp_at(s, n, j, &used);
            if (!closer(c2) && !cjk_stop(c2) && !(latin && (c2 == '.' || c2 == '!' || c2 == '?'))) break;
            j += used;
        }
        if (!latin || j == n || s[j] == ' ') return j;
        i = j;
    }
    return n;
}

/* Where the chunk text joins two units: a newline between paragraphs,
 * nothing between Chinese sentences, a space otherwise. */
static const char *joiner(const unit *prev, const unit *u) {
    if (u->para_start) return "\n";
    size_t used;
    if (kb_is_cjk(kb_cp_before(prev->s, prev->n)) || kb_is_cjk(kb_cp_at(u->s, u->n, 0, &used))) return "";
    return " ";
}

static int emit(chunker *c) {
    if (!c->n_u) return 0;
    c->text.n = 0;
    for (size_t i = 0; i < c->n_u; i++) {
        const char *j = i ? joiner(&c->u[i - 1], &c->u[i]) : "";
        if (sb_bytes_put(&c->text, j, strlen(j)) || sb_bytes_put(&c->text, c->u[i].s, c->u[i].n)) return SB_ENOMEM;
    }
    if (c->n_out == c->cap_out) {
        size_t cap = c->cap_out ? c->cap_out * 2 : 16;
        sb_kb_chunk *v = sb_realloc(c->out, cap * sizeof *v);
        if (!v) return SB_ENOMEM;
        c->out = v;
        c->cap_out = cap;
    }
    sb_kb_chunk *k = &c->out[c->n_out];
    *k = (sb_kb_chunk){ .position = (int)c->n_out };
    if (!(k->section = sb_strdup(c->section ? c->section : "")) || !(k->text = sb_malloc(c->text.n + 1))) {
        sb_free(k->section);
        return SB_ENOMEM;
    }
    memcpy(k->text, c->text.p, c->text.n);
    k->text[c->text.n] = '\0';
    k->n_tokens = (int)c->count(c->ud, k->text, c->text.n);
    c->n_out++;
    return 0;
}

/* End the chunk (if it has units of its own, not only the previous one's
 * overlap); keep as overlap the longest tail of whole units within
 * `overlap` tokens, never all of them, so the text moves on. */
static int next_chunk(chunker *c, bool keep_overlap) {
    if (c->fresh) {
        int rc = emit(c);
        if (rc) return rc;
    }
    size_t keep = 0, t = 0;
    while (keep_overlap && c->fresh && keep + 1 < c->n_u &&
           t + c->u[c->n_u - 1 - keep].tokens <= (size_t)c->overlap)
        t += c->u[c->n_u - 1 - keep++].tokens;
    if (keep) memmove(c->u, c->u + c->n_u - keep, keep * sizeof *c->u);
    c->n_u = keep;
    c->tokens = t;
    c->fresh = 0;
    if (keep) c->u[0].para_start = false;
    return 0;
}

static int push_unit(chunker *c, unit u) {
    if (c->fresh && c->tokens + u.tokens > (size_t)c->max) {
        int rc = next_chunk(c, true);
        if (rc) return rc;
    }
    while (c->n_u && c->tokens + u.tokens > (size_t)c->max) {   /* the overlap gives way */
        c->tokens -= c->u[0].tokens;
        memmove(c->u, c->u + 1, --c->n_u * sizeof *c->u);
        if (c->n_u) c->u[0].para_start = false;
    }
    if (c->n_u == c->cap_u) {
        size_t cap = c->cap_u ? c->cap_u * 2 : 32;
        unit *v = sb_realloc(c->u, cap * sizeof *v);
        if (!v) return SB_ENOMEM;
        c->u = v;
        c->cap_u = cap;
    }
    if (!c->n_u) u.para_start = false;
    c->u[c->n_u++] = u;
    c->tokens += u.tokens;
    c->fresh++;
    return 0;
}

/* A cut is allowed after white space, after ， 、 ： , and between two CJK
 * characters; the longest prefix that fits is taken, preferring a comma
 * in its second half. Only with no allowed cut, at a code point. */
static size_t best_cut(chunker *c, const char *s, size_t n) {
    size_t lo_ok = 0, comma = 0;
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t cp = kb_cp_at(s, n, i, &used);
        size_t next = i + used;
        bool cut = cp == ' ' || cp == 0xFF0C || cp == 0x3001 || cp == 0xFF1A || cp == ',';
        if (!cut && kb_is_cjk(cp) && next < n) cut = kb_is_cjk(kb_cp_at(s, n, next, &used));
        i = next;
        if (!cut || i >= n) continue;
        if (c->count(c->ud, s, i) > (size_t)c->max) break;
        lo_ok = i;
        if (cp != ' ' && !kb_is_cjk(cp)) comma = i;
        else if (cp == 0xFF0C || cp == 0x3001 || cp == 0xFF1A) comma = i;
    }
    if (comma && comma * 2 >= lo_ok) return comma;
    if (lo_ok) return lo_ok;
    size_t i = 0, last = 0;                       /* one word longer than a chunk */
    while (i < n) {
        size_t used;
        kb_cp_at(s, n, i, &used);
        if (last && c->count(c->ud, s, i + used) > (size_t)c->max) break;
        i += used;
        last = i;
    }
    return last ? last : n;
}

static int add_sentence(chunker *c, const char *s, size_t n, bool para_start) {
    while (n) {
        while (n && *s == ' ') { s++; n--; }
        while (n && s[n - 1] == ' ') n--;
        if (!n) return 0;
        size_t t = c->count(c->ud, s, n);
        size_t take = t > (size_t)c->max ? best_cut(c, s, n) : n;
        size_t keep = take;                     /* the cut's spaces stay out of both halves */
        while (keep > 1 && s[keep - 1] == ' ') keep--;
        if (take < n) t = c->count(c->ud, s, keep);
        int rc = push_unit(c, (unit){ s, keep, t ? t : 1, para_start });
        if (rc) return rc;
        s += take;
        n -= take;
        para_start = false;
    }
    return 0;
}

static int add_paragraph(chunker *c, const kb_block *b) {
    bool first = true;
    for (size_t i = 0; i < b->len;) {
        size_t e = sentence_end(b->text, b->len, i);
        int rc = add_sentence(c, b->text + i, e - i, first);
        if (rc) return rc;
        first = false;
        i = e;
    }
    return 0;
}

/* Section path "H1 > H2 > H3" from the heading stack. */
static int set_section(chunker *c, const char *const *stack, int depth) {
    sb_bytes b = { 0 };
    int rc = 0;
    for (int i = 1; i <= depth && !rc; i++) {
        if (!stack[i]) continue;
        if (b.n) rc = sb_bytes_put(&b, " > ", 3);
        if (!rc) rc = sb_bytes_put(&b, stack[i], strlen(stack[i]));
    }
    if (!rc) rc = sb_bytes_put(&b, "", 1);
    if (rc) { sb_free(b.p); return SB_ENOMEM; }
    sb_free(c->section);
    c->section = b.p;
    return 0;
}

static int validate_utf8(const char *s, size_t n, char *err) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t used = sb_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!used || (cp >= 0xD800 && cp <= 0xDFFF) || (used > 1 && cp < 0x80) || (used > 2 && cp < 0x800))
            return sb_seterr(err, SB_EINVAL, "not UTF-8 text (invalid byte 0x%02X at offset %zu)",
                             (unsigned char)s[i], i);
        if (cp == 0) return sb_seterr(err, SB_EINVAL, "not a text file (NUL byte at offset %zu)", i);
        i += used;
    }
    return 0;
}

int sb_kb_chunk_text(const char *text, size_t len, sb_kb_format fmt, int chunk_tokens, int overlap,
                     sb_kb_count_fn count, void *ud, sb_kb_chunk **out, size_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    if (chunk_tokens < 1 || overlap < 0 || overlap >= chunk_tokens || !count || fmt == SB_KB_PDF)
        return sb_seterr(err, SB_EINVAL, "chunking: bad arguments (chunk_tokens %d, overlap %d)", chunk_tokens,
                         overlap);
    int rc = validate_utf8(text, len, err);
    if (rc) return rc;
    kb_blocks blocks;
    if (kb_extract(text, len, fmt, &blocks)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    chunker c = { .max = chunk_tokens, .overlap = overlap, .count = count, .ud = ud };
    const char *stack[7] = { 0 };
    int depth = 0;
    for (size_t i = 0; i < blocks.n && !rc; i++) {
        const kb_block *b = &blocks.v[i];
        if (!b->level) { rc = add_paragraph(&c, b); continue; }
        if (!(rc = next_chunk(&c, false))) {
            stack[b->level] = b->text;
            for (int l = b->level + 1; l <= 6; l++) stack[l] = NULL;
            depth = b->level;
            rc = set_section(&c, stack, depth);
        }
    }
    if (!rc) rc = next_chunk(&c, false);
    kb_blocks_free(&blocks);
    sb_free(c.u);
    sb_free(c.section);
    sb_free(c.text.p);
    if (rc) {
        sb_kb_chunks_free(c.out, c.n_out);
        return sb_seterr(err, rc, "out of memory");
    }
    *out = c.out;
    *n_out = c.n_out;
    return 0;
}

void sb_kb_chunks_free(sb_kb_chunk *c, size_t n) {
    for (size_t i = 0; c && i < n; i++) {
        sb_free(c[i].section);
        sb_free(c[i].text);
    }
    sb_free(c);
}
