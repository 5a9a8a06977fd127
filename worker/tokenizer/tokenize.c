/* tokenize.c - text <-> token ids: cutting special tokens out of the text,
 * dispatching the raw fragments to the SPM or BPE tokenizer, and rendering
 * tokens back to bytes (llama.cpp's tokenize, token_to_piece, detokenize).
 */
#include <stdlib.h>
#include <string.h>

#include "worker/tokenizer/vocab_impl.h"

/* ------------------------------------------------------------------ */
/* special-token partition (llama.cpp's tokenizer_st_partition)         */

typedef struct {
    int32_t tok;            /* -1: raw text [off, off+len) */
    size_t  off, len;
} fragment;

typedef struct { fragment *v; size_t n, cap; } fragments;

static int frag_push(fragments *f, int32_t tok, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        fragment *p = sb_realloc(f->v, cap * sizeof *p);
        if (!p) return SB_ENOMEM;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (fragment){ tok, off, len };
    return 0;
}

/* C-locale isspace, which is what llama.cpp's strip loops see for bytes. */
static int ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Does [lo, hi) share a byte with one of the sorted ranges? */
static int touches(const sb_span *r, size_t n, size_t lo, size_t hi) {
    size_t a = 0, b = n;
    while (a < b) {                     /* the first range ending after lo */
        size_t m = a + (b - a) / 2;
        if (r[m].off + r[m].len <= lo) a = m + 1; else b = m;
    }
    return a < n && r[a].off < hi;
}

/* The first occurrence of t[0..tn) in text[base, base+blen) that touches
 * no untrusted range (guard NULL: the first occurrence). */
static const char *find_token(const char *text, size_t base, size_t blen, const char *t, size_t tn,
                              const sb_prompt *guard) {
    size_t from = base, end = base + blen;
    while (end - from >= tn) {
        const char *m = memmem(text + from, end - from, t, tn);
        if (!m) return NULL;
        size_t at = (size_t)(m - text);
        if (!guard || !touches(guard->plain, guard->n_plain, at, at + tn)) return m;
        from = at + 1;
    }
    return NULL;
}

/* Split every raw fragment of `in` at each occurrence of special token id,
 * into `out`; with a guard, only at occurrences clear of untrusted text.
 * LSTRIP drops whitespace before an occurrence, RSTRIP after it; the search
 * goes on in what is right of the occurrence. */
static int split_at_token(const sb_vocab *v, const char *text, int32_t id, const sb_prompt *guard,
                          const fragments *in, fragments *out) {
    const char *t = sb_tok_text(v, id);
    const size_t tn = v->tok[id].len;
    const uint16_t attr = v->tok[id].attr;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const fragment *f = &in->v[i];
        if (f->tok >= 0) { if (frag_push(out, f->tok, 0, 0)) return SB_ENOMEM; continue; }
        size_t base = f->off, blen = f->len;
        for (;;) {
            const char *m = find_token(text, base, blen, t, tn, guard);
            if (!m) {
                if (blen > 0 && frag_push(out, -1, base, blen)) return SB_ENOMEM;
                break;
            }
            size_t at = (size_t)(m - text);
            size_t left = at - base;
            if (attr & SB_ATTR_LSTRIP) while (left > 0 && ascii_space(text[base + left - 1])) left--;
            if (left > 0 && frag_push(out, -1, base, left)) return SB_ENOMEM;
            if (frag_push(out, id, 0, 0)) return SB_ENOMEM;
            size_t rbase = at + tn, rlen = base + blen - rbase;
            if (rlen == 0) break;
            if (attr & SB_ATTR_RSTRIP) while (rlen > 0 && ascii_space(text[rbase])) { rbase++; rlen--; }
            base = rbase;
            blen = rlen;
        }
    }
    return 0;
}

/* guard: the prompt whose untrusted ranges no special token may touch -
 * control, unknown or user-defined (Qwen's "<tool_call>"): whatever the
 * model was taught to read as markup is markup only where the prompt's
 * author wrote it (NULL: no guard). */
static int partition(const sb_vocab *v, const char *text, size_t len, int parse_special, const sb_prompt *guard,
                     fragments *out) {
    fragments other = { 0 };
    int rc = frag_push(out, -1, 0, len);
    for (size_t k = 0; !rc && k < v->n_special; k++) {
        int32_t id = v->special[k];
        const int control = (v->tok[id].attr & (SB_ATTR_CONTROL | SB_ATTR_UNKNOWN)) != 0;
        /* Without parse_special only user-defined tokens are cut out. */
        if (!parse_special && control) continue;
        if (v->tok[id].len > len) continue;        /* cannot occur: saves the pass */
        rc = split_at_token(v, text, id, guard, out, &other);
        fragments t = *out; *out = other; other = t;
    }
    sb_free(other.v);
    return rc;
}

/* ------------------------------------------------------------------ */
/* tokenize                                                             */

/* SPM: an optional leading space, then every space as U+2581. */
static int spm_fragment(const sb_vocab *v, const char *s, size_t n, int space_prefix, sb_bytes *buf,
                        sb_ids *out, char *err) {
    static const char ESC[3] = { (char)0xE2, (char)0x96, (char)0x81 };
    buf->n = 0;
    if (space_prefix && sb_bytes_put(buf, ESC, 3)) return SB_ENOMEM;
    size_t run = 0;                       /* copy the bytes between spaces in one go */
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != ' ') continue;
        if (sb_bytes_put(buf, s + run, i - run)) return SB_ENOMEM;
        if (i < n && sb_bytes_put(buf, ESC, 3)) return SB_ENOMEM;
        run = i + 1;
    }
    return sb_spm_tokenize(v, buf->p, buf->n, out, err);
}

static int tokenize(const sb_vocab *v, const char *text, size_t len, int add_bos, int parse_special,
                    const sb_prompt *guard, int32_t **out, size_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    fragments frags = { 0 };
    sb_ids ids = { 0 };
    sb_bytes buf = { 0 };
    int rc = 0;
    if (len && !text) return sb_seterr(err, SB_EINVAL, "NULL text");
    if (len) rc = partition(v, text, len, parse_special, guard, &frags);
    if (rc) goto fail;

    if (add_bos && v->add_bos) rc = sb_ids_push(&ids, v->bos);
    /* SPM puts a space before the first fragment and before any text that
     * follows a special token (SentencePiece's "dummy prefix"). */
    int prev_special = 1;
    for (size_t i = 0; !rc && i < frags.n; i++) {
        const fragment *f = &frags.v[i];
        if (f->tok >= 0) {
            rc = sb_ids_push(&ids, f->tok);
            prev_special = 1;
        } else if (v->kind == SB_VOCAB_SPM) {
            rc = spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, &buf, &ids, err);
            prev_special = 0;
        } else {
            rc = sb_bpe_tokenize(v, text + f->off, f->len, &ids, err);
        }
    }
    if (!rc && add_bos && v->add_eos) rc = sb_ids_push(&ids, v->eos);
    if (rc) goto fail;
    if (!ids.v && !(ids.v = sb_malloc(sizeof *ids.v))) { rc = SB_ENOMEM; goto fail; }
    sb_free(frags.v);
    sb_free(buf.p);
    *out = ids.v;
    *n_out = ids.n;
    return 0;
fail:
    if (rc == SB_ENOMEM) sb_seterr(err, rc, "out of memory tokenizing %zu bytes", len);
    sb_free(frags.v);
    sb_free(ids.v);
    sb_free(buf.p);
    return rc;
}

int sb_tokenize(const sb_vocab *v, const char *text, size_t len, int add_bos, int parse_special,
                int32_t **out, size_t *n_out, char *err) {
    return tokenize(v, text, len, add_bos, parse_special, NULL, out, n_out, err);
}

/* ------------------------------------------------------------------ */
/* prompts of trusted and untrusted text                                */

void sb_prompt_add(sb_prompt *p, const char *s, size_t n, int special) {
    if (p->failed) return;
    size_t need;
    if (sb_add_size(p->len, n, &need) || sb_add_size(need, 1, &need)) { p->failed = 1; return; }
    if (need > p->cap) {
        size_t cap = SB_MAX(need, p->cap * 2);
        char *t = sb_realloc(p->text, cap);
        if (!t) { p->failed = 1; return; }
        p->text = t;
        p->cap = cap;
    }
    if (n) memcpy(p->text + p->len, s, n);
    p->text[p->len + n] = '\0';
    if (!special && n) {
        sb_span *last = p->n_plain ? &p->plain[p->n_plain - 1] : NULL;
        if (last && last->off + last->len == p->len) {
            last->len += n;
        } else {
            if (p->n_plain == p->cap_plain) {
                size_t cap = p->cap_plain ? p->cap_plain * 2 : 8;
                sb_span *r = sb_realloc(p->plain, cap * sizeof *r);
                if (!r) { p->failed = 1; return; }
                p->plain = r;
                p->cap_plain = cap;
            }
            p->plain[p->n_plain++] = (sb_span){ p->len, n };
        }
    }
    p->len += n;
}

void sb_prompt_all_plain(sb_prompt *p) {
    if (p->failed || !p->len) return;
    if (!p->cap_plain) {
        if (!(p->plain = sb_malloc(sizeof *p->plain))) { p->failed = 1; return; }
        p->cap_plain = 1;
    }
    p->plain[0] = (sb_span){ 0, p->len };
    p->n_plain = 1;
}

void sb_prompt_free(sb_prompt *p) {
    sb_free(p->text);
    sb_free(p->plain);
    memset(p, 0, sizeof *p);
}

int sb_tokenize_prompt(const sb_vocab *v, const sb_prompt *p, int add_bos, int32_t **out, size_t *n_out,
                       char *err) {
    *out = NULL;
    *n_out = 0;
    if (p->failed) return sb_seterr(err, SB_ENOMEM, "out of memory assembling a prompt");
    return tokenize(v, p->text, p->len, add_bos, 1, p->n_plain ? p : NULL, out, n_out, err);
}

/* ------------------------------------------------------------------ */
/* pieces                                                               */

/* An snprintf-like sink: counts everything, stores what fits. */
typedef struct {
    char  *buf;
    size_t cap, len;
    int    skip_space;      /* drop one leading space (detokenize's lstrip) */
} sink;

static void put(sink *s, const char *d, size_t n) {
    if (s->skip_space && n) {
        s->skip_space = 0;
        if (d[0] == ' ') { d++; n--; }
    }
    if (s->len < s->cap) memcpy(s->buf + s->len, d, SB_MIN(n, s->cap - s->len));
    s->len += n;
}

static void put_hex_byte(sink *s, uint8_t b) {
    static const char hex[] = "0123456789abcdef";
    char h[2] = { hex[b >> 4], hex[b & 15] };
    put(s, h, 2);
}

/* llama_decode_text: each code point of a BPE token is one byte of the GPT-2
 * alphabet; anything else is shown as [UNK_BYTE_0x..<token text>]. */
static void put_bpe_decoded(const sb_vocab *v, sink *s, const char *t, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t used = sb_utf8_decode((const uint8_t *)t + i, n - i, &cp);
        if (used == 0) { cp = 0xFFFD; used = 1; }
        i += used;
        int b = cp < SB_ARRAY_LEN(v->cp_byte) ? v->cp_byte[cp] : -1;
        if (b >= 0) { char c = (char)b; put(s, &c, 1); continue; }
        char u[4];
        size_t un = sb_utf8_encode(cp <= 0x10FFFF ? cp : 0xFFFD, u);
        put(s, "[UNK_BYTE_0x", 12);
        for (size_t j = 0; j < un; j++) put_hex_byte(s, (uint8_t)u[j]);
        put(s, t, n);
        put(s, "]", 1);
    }
}

/* The byte of a <0xXX> token (llama.cpp: strtol of the two characters). */
static char byte_of(const char *t, size_t n) {
    char hex[3] = { 0, 0, 0 };
    if (n > 3) hex[0] = t[3];
    if (n > 4) hex[1] = t[4];
    return (char)strtol(hex, NULL, 16);
}

static void piece(const sb_vocab *v, int32_t id, int special, sink *s) {
    const uint16_t attr = v->tok[id].attr;
    const char *t = sb_tok_text(v, id);
    const size_t n = v->tok[id].len;
    if (!special && (attr & (SB_ATTR_UNKNOWN | SB_ATTR_CONTROL))) return;
    if (attr & (SB_ATTR_UNKNOWN | SB_ATTR_CONTROL | SB_ATTR_USER_DEFINED)) { put(s, t, n); return; }
    if (attr & SB_ATTR_NORMAL) {
        if (v->kind == SB_VOCAB_BPE) { put_bpe_decoded(v, s, t, n); return; }
        size_t run = 0, i = 0;                  /* U+2581 -> ' ' */
        while (i < n) {
            if (i + 3 <= n && (uint8_t)t[i] == 0xE2 && (uint8_t)t[i + 1] == 0x96 && (uint8_t)t[i + 2] == 0x81) {
                put(s, t + run, i - run);
                put(s, " ", 1);
                run = i += 3;
            } else {
                i++;
            }
        }
        put(s, t + run, n - run);
        return;
    }
    if (attr & SB_ATTR_BYTE) { char b = byte_of(t, n); put(s, &b, 1); }
    /* unused / undefined tokens render as nothing */
}

int sb_token_to_piece(const sb_vocab *v, int32_t tok, char *buf, size_t cap, int special) {
    if (tok < 0 || tok >= v->n_tokens) return SB_EINVAL;
    sink s = { buf, buf ? cap : 0, 0, 0 };
    piece(v, tok, special, &s);
    return (int)s.len;
}

/* clean_up_tokenization_spaces, exactly as llama.cpp's three in-place passes. */
static size_t clean_spaces(char *text, size_t total) {
    size_t t1 = total, t = total ? 1 : 0;
    for (size_t i = 1; i < t1; i++) {               /* " ?" " !" " ." " ," */
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) t--;
        text[t++] = x;
    }
    size_t t2 = t;
    t = t ? 1 : 0;
    for (size_t i = 1; i < t2; i++) {               /* " ' " */
        char x = text[i];
        if (x == '\'' && i + 1 < t2 && text[i - 1] == ' ' && text[i + 1] == ' ') { t--; text[++i] = 0; }
        text[t++] = x;
    }
    size_t t3 = t;
    t = t ? 1 : 0;
    for (size_t i = 1; i < t3; i++) {               /* " 's" " 'm" " 're" " 've" */
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') t--;
            else if (i + 2 < t3 && ((x1 == 'r' && text[i + 2] == 'e') || (x1 == 'v' && text[i + 2] == 'e'))) t--;
        }
        text[t++] = x;
    }
    return t;
}

long sb_detokenize(const sb_vocab *v, const int32_t *toks, size_t n, char *buf, size_t cap,
                   int remove_special, int unparse_special) {
    for (size_t i = 0; i < n; i++) if (toks[i] < 0 || toks[i] >= v->n_tokens) return SB_EINVAL;
    int skip_space = v->add_space_prefix;
    if (remove_special && v->add_bos && n > 0 && toks[0] == v->bos) { skip_space = 0; toks++; n--; }
    if (remove_special && v->add_eos && n > 0 && toks[n - 1] == v->eos) n--;

    /* Measure, render into scratch, clean, copy: the clean-up needs it all. */
    sink s = { NULL, 0, 0, skip_space };
    for (size_t i = 0; i < n; i++) { piece(v, toks[i], unparse_special, &s); s.skip_space = 0; }
    char *tmp = sb_malloc(s.len ? s.len : 1);
    if (!tmp) return SB_ENOMEM;
    sink w = { tmp, s.len, 0, skip_space };
    for (size_t i = 0; i < n; i++) { piece(v, toks[i], unparse_special, &w); w.skip_space = 0; }
    size_t total = v->clean_spaces ? clean_spaces(tmp, w.len) : w.len;
    if (buf && cap) memcpy(buf, tmp, SB_MIN(total, cap));
    sb_free(tmp);
    return (long)total;
}
