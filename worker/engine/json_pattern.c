/* json_pattern.c - the regular-expression subset of JSON Schema's "pattern"
 * as a grammar over the string's JSON text (see sb_pattern_compile).
 *
 * Supported: literals, escaped punctuation, . \d \w \s \D \W \S, classes
 * [...] / [^...] with ASCII ranges, groups (...) and (?:...), alternation,
 * * + ? {n} {n,} {n,m} (lazy forms too: the language is the same), and ^ / $
 * at the very start / end. Not supported (an error names it): backreferences,
 * lookaround, \b, non-ASCII inside a class, counts above MAX_COUNT.
 *
 * The grammar describes the JSON-encoded characters: a '"' in the text is
 * written \", a newline \n; it never offers \u escapes or other spellings,
 * which keeps it a subset of what matches. Negated classes and '.' match
 * printable ASCII and any non-ASCII character, never a control character:
 * again a subset.
 */
#include <stdio.h>
#include <string.h>

#include "worker/engine/sb_grammar.h"

#define MAX_COUNT 256       /* largest {n,m} bound: each copy is grammar */

typedef struct {
    sb_grammar *g;
    const char *p;
    size_t      i;
    int         chr, u8;
    char       *msg;
    size_t      msg_len;
    int         depth, top_alts;    /* group nesting; alternatives at depth 0 */
} rx;

typedef struct { uint8_t bits[16]; } cls;   /* ASCII 0..127 */

static int rx_fail(rx *x, const char *what) {
    snprintf(x->msg, x->msg_len, "unsupported in 'pattern' at offset %zu: %s", x->i, what);
    return SB_EINVAL;
}

static void cls_add(cls *c, int lo, int hi) {
    for (int b = lo; b <= hi; b++) c->bits[b >> 3] |= (uint8_t)(1 << (b & 7));
}
static int cls_has(const cls *c, int b) { return (c->bits[b >> 3] >> (b & 7)) & 1; }

/* \d \w \s (and their upper-case negations, reported through *neg). */
static int cls_shorthand(cls *c, char e, int *neg) {
    *neg = e == 'D' || e == 'W' || e == 'S';
    switch (e | 0x20) {
    case 'd': cls_add(c, '0', '9'); return 1;
    case 'w': cls_add(c, '0', '9'); cls_add(c, 'A', 'Z'); cls_add(c, 'a', 'z'); cls_add(c, '_', '_'); return 1;
    case 's': cls_add(c, ' ', ' '); cls_add(c, '\t', '\t'); cls_add(c, '\n', '\n'); cls_add(c, '\r', '\r'); return 1;
    default: return 0;
    }
}

/* The character an escape \e stands for, or -1 for one we do not take. */
static int escape_char(char e) {
    switch (e) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) return -1;
        return (unsigned char)e;
    }
}

/* How the JSON text writes ASCII character b: NULL for itself. */
static const char *json_spelling(int b) {
    switch (b) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\f': return "\\f";
    case '\b': return "\\b";
    default: return b < 0x20 ? "" : NULL;     /* "": other controls are never written */
    }
}

/* A class (negated: its complement over printable ASCII, plus non-ASCII). */
static int cls_rule(rx *x, const cls *c, int negated) {
    uint8_t set[32] = { 0 };
    int r = sb_gram_rule(x->g), any = 0;
    sb_gseq s = { 0 };
    for (int b = 0; b < 128; b++) {
        if (cls_has(c, b) == negated) continue;
        const char *sp = json_spelling(b);
        if (!sp) { set[b >> 3] |= (uint8_t)(1 << (b & 7)); any = 1; }
        else if (*sp) { sb_gseq_lit(&s, sp, strlen(sp)); sb_gram_alt(x->g, r, &s); }
    }
    if (any) { sb_gseq_set(x->g, &s, set); sb_gram_alt(x->g, r, &s); }
    if (negated) { sb_gseq_ref(&s, x->u8); sb_gram_alt(x->g, r, &s); }
    sb_gseq_free(&s);
    return r;
}

static int rx_alt(rx *x, int *out);

/* [...] with x->i just past '['. */
static int rx_class(rx *x, int *out) {
    cls c = { { 0 } };
    int negated = 0;
    if (x->p[x->i] == '^') { negated = 1; x->i++; }
    for (int first = 1; x->p[x->i] != ']' || first; first = 0) {
        unsigned char ch = (unsigned char)x->p[x->i];
        if (!ch) return rx_fail(x, "unterminated '['");
        if (ch >= 0x80) return rx_fail(x, "non-ASCII character in a class");
        int lo = ch;
        x->i++;
        if (ch == '\\') {
            char e = x->p[x->i++];
            int neg;
            if (cls_shorthand(&c, e, &neg)) {
                if (neg) return rx_fail(x, "\\D, \\W or \\S inside a class");
                continue;
            }
            if ((lo = escape_char(e)) < 0) return rx_fail(x, "escape inside a class");
        } else if (ch == '[' && x->p[x->i] == ':') {
            return rx_fail(x, "POSIX class");
        }
        int hi = lo;
        if (x->p[x->i] == '-' && x->p[x->i + 1] && x->p[x->i + 1] != ']') {
            unsigned char h = (unsigned char)x->p[x->i + 1];
            if (h == '\\' || h >= 0x80) return rx_fail(x, "escaped or non-ASCII range end");
            hi = h;
            x->i += 2;
            if (hi < lo) return rx_fail(x, "range out of order");
        }
        cls_add(&c, lo, hi);
    }
    x->i++;
    *out = cls_rule(x, &c, negated);
    return 0;
}

/* One literal character (ASCII or a whole UTF-8 sequence) at x->i. */
static int rx_literal(rx *x, int ch, int *out) {
    sb_gseq s = { 0 };
    const char *sp = ch < 0x80 ? json_spelling(ch) : NULL;
    if (sp && !*sp) return rx_fail(x, "control character");
    if (sp) sb_gseq_lit(&s, sp, strlen(sp));
    else if (ch < 0x80) sb_gseq_byte(&s, (unsigned char)ch);
    else {                       /* the pattern is valid UTF-8: copy the sequence */
        size_t j = x->i - 1;
        sb_gseq_byte(&s, (unsigned char)x->p[j++]);
        while (((unsigned char)x->p[j] & 0xC0) == 0x80) sb_gseq_byte(&s, (unsigned char)x->p[j++]);
        x->i = j;
    }
    *out = sb_gram_rule_seq(x->g, &s);
    sb_gseq_free(&s);
    return 0;
}

static int rx_atom(rx *x, int *out) {
    unsigned char ch = (unsigned char)x->p[x->i++];
    if (ch == '(') {
        if (x->p[x->i] == '?') {
            if (x->p[x->i + 1] != ':') return rx_fail(x, "lookaround or named group");
            x->i += 2;
        }
        x->depth++;
        int rc = rx_alt(x, out);
        x->depth--;
        if (rc) return rc;
        if (x->p[x->i] != ')') return rx_fail(x, "unbalanced '('");
        x->i++;
        return 0;
    }
    if (ch == '[') return rx_class(x, out);
    if (ch == '.') {
        cls none = { { 0 } };
        *out = cls_rule(x, &none, 1);
        return 0;
    }
    if (ch == '\\') {
        char e = x->p[x->i++];
        cls c = { { 0 } };
        int neg;
        if (cls_shorthand(&c, e, &neg)) { *out = cls_rule(x, &c, neg); return 0; }
        if (e == 'b' || e == 'B') return rx_fail(x, "word boundary");
        if (e >= '1' && e <= '9') return rx_fail(x, "backreference");
        int lit = escape_char(e);
        if (lit < 0) return rx_fail(x, "escape sequence");
        return rx_literal(x, lit, out);
    }
    if (ch == '^' || ch == '$') return rx_fail(x, "anchor not at the start or end");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return rx_fail(x, "quantifier without an operand");
    return rx_literal(x, ch, out);
}

static int read_int(rx *x, int *v) {
    if (x->p[x->i] < '0' || x->p[x->i] > '9') return -1;
    long n = 0;
    while (x->p[x->i] >= '0' && x->p[x->i] <= '9') {
        n = n * 10 + (x->p[x->i++] - '0');
        if (n > MAX_COUNT) return -2;
    }
    *v = (int)n;
    return 0;
}

/* atom{lo,hi}: lo copies, then up to hi-lo optional ones (hi < 0: any). */
static int quantified(rx *x, int atom, int lo, int hi) {
    sb_gseq s = { 0 };
    for (int i = 0; i < lo; i++) sb_gseq_ref(&s, atom);
    if (hi != lo) sb_gseq_ref(&s, sb_gram_repeat(x->g, atom, -1, hi < 0 ? -1 : hi - lo));
    int r = sb_gram_rule_seq(x->g, &s);
    sb_gseq_free(&s);
    return r;
}

static int rx_quant(rx *x, int *atom) {
    char q = x->p[x->i];
    int lo, hi;
    if (q == '*') { lo = 0; hi = -1; }
    else if (q == '+') { lo = 1; hi = -1; }
    else if (q == '?') { lo = 0; hi = 1; }
    else if (q == '{') {
        size_t at = x->i++;
        int rc = read_int(x, &lo);
        if (rc == -2) return rx_fail(x, "count above 256");
        if (rc) { x->i = at; return rx_fail(x, "'{' that is not a count"); }
        hi = lo;
        if (x->p[x->i] == ',') {
            x->i++;
            hi = -1;
            if (x->p[x->i] != '}' && (rc = read_int(x, &hi))) return rx_fail(x, rc == -2 ? "count above 256" : "bad count");
        }
        if (x->p[x->i] != '}') return rx_fail(x, "unterminated count");
        if (hi >= 0 && hi < lo) return rx_fail(x, "count range out of order");
    } else {
        return 1;       /* no quantifier */
    }
    x->i++;
    if (x->p[x->i] == '?') x->i++;          /* lazy: same language */
    else if (x->p[x->i] == '+') return rx_fail(x, "possessive quantifier");
    *atom = quantified(x, *atom, lo, hi);
    return 0;
}

static int rx_seq(rx *x, sb_gseq *s) {
    for (;;) {
        char ch = x->p[x->i];
        if (!ch || ch == '|' || ch == ')') return 0;
        if (ch == '$' && !x->p[x->i + 1]) return 0;
        int atom, rc;
        if ((rc = rx_atom(x, &atom))) return rc;
        while ((rc = rx_quant(x, &atom)) == 0) {}
        if (rc < 0) return rc;
        sb_gseq_ref(s, atom);
    }
}

static int rx_alt(rx *x, int *out) {
    int r = sb_gram_rule(x->g), n = 0;
    sb_gseq s = { 0 };
    for (;; n++) {
        int rc = rx_seq(x, &s);
        if (rc) { sb_gseq_free(&s); return rc; }
        sb_gram_alt(x->g, r, &s);
        if (x->depth == 0) x->top_alts = n + 1;
        if (x->p[x->i] != '|') break;
        x->i++;
    }
    sb_gseq_free(&s);
    *out = r;
    return 0;
}

int sb_pattern_compile(sb_grammar *g, const char *pat, int chr, int u8, int *out, char *msg, size_t msg_len) {
    rx x = { g, pat, 0, chr, u8, msg, msg_len, 0, 0 };
    int anchored_start = pat[0] == '^';
    if (anchored_start) x.i++;
    int body, rc = rx_alt(&x, &body);
    if (rc) return rc;
    int anchored_end = 0;
    if (pat[x.i] == '$' && !pat[x.i + 1]) { anchored_end = 1; x.i++; }
    if (pat[x.i]) return rx_fail(&x, pat[x.i] == ')' ? "unbalanced ')'" : "anchor not at the start or end");
    if ((anchored_start || anchored_end) && x.top_alts > 1)
        return rx_fail(&x, "an anchor with '|' outside a group (write ^(a|b)$)");
    /* JSON Schema patterns search: an unanchored side may hold anything. */
    int anything = sb_gram_repeat(g, chr, -1, -1);
    sb_gseq s = { 0 };
    sb_gseq_byte(&s, '"');
    if (!anchored_start) sb_gseq_ref(&s, anything);
    sb_gseq_ref(&s, body);
    if (!anchored_end) sb_gseq_ref(&s, anything);
    sb_gseq_byte(&s, '"');
    *out = sb_gram_rule_seq(g, &s);
    sb_gseq_free(&s);
    return 0;
}
