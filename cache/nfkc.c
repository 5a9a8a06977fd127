/* nfkc.c - input normalisation for cache keys: NFC (or NFKC), Latin
 * case-fold, whitespace collapse and trim (see sb_cache.h for the flags).
 *
 * What is folded by default is only what cannot change an answer: NFC (the
 * same text by Unicode's definition: "e" + U+0301 is "é") and surrounding
 * and repeated whitespace. Case and width folding (NFKC turns "１２３，？"
 * into "123,?") are opt-in per pipeline: "xk7q2b" and "XK7Q2B" are different
 * questions to a model that echoes or looks up tokens.
 *
 * Both forms are what Python's unicodedata.normalize returns, and the tests
 * compare against it for every code point. The algorithm is UAX #15: full
 * canonical (NFC) or compatibility (NFKC) decomposition (tables from
 * tools/gen_nfkc.py, Hangul by arithmetic), canonical ordering by combining
 * class, then canonical composition of primary composites.
 */
#include "cache/cache_internal.h"

#include <string.h>

/* Hangul syllable arithmetic (Unicode chapter 3.12). */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT,
       S_COUNT = L_COUNT * N_COUNT };

typedef struct {
    uint32_t *cp;
    size_t    len, cap;
} cp_vec;

static int vec_push(cp_vec *v, uint32_t c) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        uint32_t *p = sb_realloc(v->cp, cap * sizeof *p);
        if (!p) return SB_ENOMEM;
        v->cp = p;
        v->cap = cap;
    }
    v->cp[v->len++] = c;
    return SB_OK;
}

/* ------------------------------------------------------------ lookups */

static unsigned ccc_of(uint32_t c) {
    if (c < 0x300) return 0;            /* nothing below U+0300 combines */
    size_t lo = 0, hi = sb_nfkc_ccc_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t k = sb_nfkc_ccc[mid] >> 8;
        if (k == c) return sb_nfkc_ccc[mid] & 0xff;
        if (k < c) lo = mid + 1; else hi = mid;
    }
    return 0;
}

/* Full NFKD (compat) or NFD expansion of c, or NULL if c maps to itself. */
static const uint32_t *decomp_of(uint32_t c, int compat, size_t *n) {
    if (c < 0xA0) return NULL;          /* ASCII and C1 controls are stable */
    const uint64_t *tab = compat ? sb_nfkc_decomp : sb_nfc_decomp;
    size_t lo = 0, hi = compat ? sb_nfkc_decomp_n : sb_nfc_decomp_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t k = (uint32_t)(tab[mid] >> 32);
        if (k == c) {
            uint32_t v = (uint32_t)tab[mid];
            *n = v & 31;
            return sb_nfkc_decomp_data + (v >> 5);
        }
        if (k < c) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 &&
        b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    uint64_t want = (uint64_t)a << 21 | b;
    size_t lo = 0, hi = sb_nfkc_comp_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint64_t k = sb_nfkc_comp[mid] >> 21;
        if (k == want) return (uint32_t)(sb_nfkc_comp[mid] & 0x1fffff);
        if (k < want) lo = mid + 1; else hi = mid;
    }
    return 0;
}

static uint32_t latin_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    size_t lo = 0, hi = sb_latin_lower_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t k = (uint32_t)(sb_latin_lower[mid] >> 21);
        if (k == c) return (uint32_t)(sb_latin_lower[mid] & 0x1fffff);
        if (k < c) lo = mid + 1; else hi = mid;
    }
    return c;
}

/* Unicode's White_Space property (PropList.txt); it is short and stable. */
static int is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* The White_Space characters that end a line: LF, VT, FF, CR, NEL, LS, PS. */
static int is_line_break(uint32_t c) {
    return (c >= 0x0A && c <= 0x0D) || c == 0x85 || c == 0x2028 || c == 0x2029;
}

/* ------------------------------------------------------------ UTF-8 */

/* Decode one code point; malformed, overlong, surrogate or out-of-range
 * sequences consume one byte and yield U+FFFD. */
static uint32_t utf8_next(const uint8_t *s, size_t len, size_t *i) {
    uint8_t b = s[*i];
    if (b < 0x80) { (*i)++; return b; }
    int n; uint32_t c, min;
    if ((b & 0xE0) == 0xC0) { n = 1; c = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { n = 2; c = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { n = 3; c = b & 0x07; min = 0x10000; }
    else { (*i)++; return 0xFFFD; }
    if (*i + (size_t)n >= len) { (*i)++; return 0xFFFD; }     /* truncated */
    for (int k = 1; k <= n; k++) {
        uint8_t cb = s[*i + (size_t)k];
        if ((cb & 0xC0) != 0x80) { (*i)++; return 0xFFFD; }
        c = c << 6 | (cb & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) { (*i)++; return 0xFFFD; }
    *i += (size_t)n + 1;
    return c;
}

static size_t utf8_put(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* ------------------------------------------------------------ NFC / NFKC */

static int decompose_into(cp_vec *out, uint32_t c, int compat) {
    if (c >= S_BASE && c < S_BASE + S_COUNT) {
        uint32_t s = c - S_BASE, t = s % T_COUNT;
        int rc = vec_push(out, L_BASE + s / N_COUNT);
        if (!rc) rc = vec_push(out, V_BASE + (s % N_COUNT) / T_COUNT);
        if (!rc && t) rc = vec_push(out, T_BASE + t);
        return rc;
    }
    size_t n = 0;
    const uint32_t *d = decomp_of(c, compat, &n);
    if (!d) return vec_push(out, c);
    for (size_t k = 0; k < n; k++)      /* table entries are already fully decomposed */
        if (vec_push(out, d[k])) return SB_ENOMEM;
    return SB_OK;
}

/* Stable insertion sort of each run of non-starters by combining class;
 * runs are short (a few marks), so this beats anything clever. */
static void canonical_order(cp_vec *v) {
    for (size_t i = 1; i < v->len; i++) {
        unsigned ci = ccc_of(v->cp[i]);
        if (!ci) continue;
        uint32_t c = v->cp[i];
        size_t j = i;
        while (j > 0) {
            unsigned cj = ccc_of(v->cp[j - 1]);
            if (cj <= ci) break;            /* starters (0) stop the run */
            v->cp[j] = v->cp[j - 1];
            j--;
        }
        v->cp[j] = c;
    }
}

/* UAX #15 canonical composition, in place. A character C combines with the
 * last starter S unless something between them blocks it: a starter, or a
 * mark whose class is >= C's class. */
static void compose(cp_vec *v) {
    if (!v->len) return;
    size_t out = 1;
    long starter = ccc_of(v->cp[0]) == 0 ? 0 : -1;
    unsigned last_ccc = 0;      /* class of the last mark kept after the starter */
    for (size_t i = 1; i < v->len; i++) {
        uint32_t c = v->cp[i];
        unsigned cc = ccc_of(c);
        if (starter >= 0 && ((size_t)starter == out - 1 || last_ccc < cc)) {
            uint32_t comp = compose_pair(v->cp[starter], c);
            if (comp) {
                v->cp[starter] = comp;
                continue;
            }
        }
        if (cc == 0) { starter = (long)out; last_ccc = 0; }
        else last_ccc = cc;
        v->cp[out++] = c;
    }
    v->len = out;
}

static int normal_form(cp_vec *in, cp_vec *tmp, int compat) {
    tmp->len = 0;
    for (size_t i = 0; i < in->len; i++)
        if (decompose_into(tmp, in->cp[i], compat)) return SB_ENOMEM;
    canonical_order(tmp);
    compose(tmp);
    /* swap so the result is in `in` */
    cp_vec t = *in; *in = *tmp; *tmp = t;
    return SB_OK;
}

/* ------------------------------------------------------------ the pipeline */

/* Case-fold, then whitespace. COLLAPSE keeps the shape of the text: line
 * breaks stay (each one, as it is), and so does the indentation that starts
 * a line (code, YAML and nested lists depend on it); whitespace at the end of
 * a line goes, and any other run of White_Space becomes one U+0020. A
 * request's JSON escapes its newlines, so the chat endpoint normalises each
 * message before encoding it (router/openai.c), not the JSON text. */
static void fold_and_space(cp_vec *v, unsigned flags) {
    size_t out = 0, run = 0;        /* run: where the pending whitespace starts in out */
    int in_run = 0, indent = 1;     /* indent: the run began at a line start */
    for (size_t i = 0; i < v->len; i++) {
        uint32_t c = v->cp[i];
        if (flags & SB_NORM_CASEFOLD) c = latin_lower(c);
        if ((flags & SB_NORM_COLLAPSE) && is_space(c)) {
            if (is_line_break(c)) {
                if (in_run) out = run;      /* trailing whitespace of the line */
                in_run = 0;
                indent = 1;
            } else if (!in_run) {
                in_run = 1;
                run = out;
            }
            v->cp[out++] = c;               /* kept if it turns out to be indentation */
            continue;
        }
        if (in_run && !indent) {
            out = run;
            v->cp[out++] = ' ';
        }
        in_run = 0;
        indent = 0;
        v->cp[out++] = c;
    }
    if (in_run) out = run;                  /* the last line's trailing whitespace */
    v->len = out;
    if (flags & SB_NORM_TRIM) {
        size_t start = 0;
        while (start < v->len && is_space(v->cp[start])) start++;
        while (v->len > start && is_space(v->cp[v->len - 1])) v->len--;
        if (start) {
            memmove(v->cp, v->cp + start, (v->len - start) * sizeof *v->cp);
            v->len -= start;
        }
    }
}

int sb_cache_normalize(unsigned flags, const char *in, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    if (!in) return SB_EINVAL;
    cp_vec v = { 0 }, tmp = { 0 };
    int rc = SB_OK;
    const uint8_t *s = (const uint8_t *)in;
    for (size_t i = 0; i < len && !rc;) rc = vec_push(&v, utf8_next(s, len, &i));
    /* NFKC output is also NFC; width folding replaces the default form. */
    if (!rc && (flags & (SB_NORM_NFKC | SB_NORM_NFC)))
        rc = normal_form(&v, &tmp, (flags & SB_NORM_NFKC) != 0);
    char *res = NULL;
    if (!rc) fold_and_space(&v, flags);
    /* Folding can make a pair composable ("W" U+030A -> "w" U+030A, which
     * composes to U+1E98): compose again, or the output is not its own
     * normal form and a key made from a stored input misses its entry. */
    if (!rc && (flags & (SB_NORM_NFKC | SB_NORM_NFC)) && (flags & SB_NORM_CASEFOLD))
        rc = normal_form(&v, &tmp, (flags & SB_NORM_NFKC) != 0);
    if (!rc) {
        res = sb_malloc(v.len * 4 + 1);
        if (!res) rc = SB_ENOMEM;
    }
    if (!rc) {
        size_t n = 0;
        for (size_t i = 0; i < v.len; i++) n += utf8_put(v.cp[i], res + n);
        res[n] = '\0';
        *out = res;
        if (out_len) *out_len = n;
    }
    sb_free(v.cp);
    sb_free(tmp.cp);
    return rc;
}

const char *sb_cache_unicode_version(void) { return sb_nfkc_unicode_version; }
