/* detect_text.c - identifiers made of letters and digits: e-mail addresses,
 * passport numbers, vehicle plates, and the operator's text patterns. */
#include <string.h>

#include "common/sb_common.h"
#include "privacy/privacy_internal.h"

static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alnum(char c) { return is_alpha(c) || is_digit(c); }
static char upper(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }

/* ---------------------------------------------------------------- e-mail */

static bool local_char(char c) { return is_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'; }
static bool domain_char(char c) { return is_alnum(c) || c == '.' || c == '-'; }

/* The address around the '@' at `at`, if it is one: LOCAL@LABEL.LABEL...TLD
 * with a TLD of two or more letters. A sentence's full stop after it is not
 * part of it. */
static int email_at(const char *t, size_t len, size_t at, sb_pii_spans *out, size_t *next) {
    size_t a = at, b = at + 1;
    while (a > 0 && local_char(t[a - 1])) a--;
    while (a < at && t[a] == '.') a++;
    while (b < len && domain_char(t[b])) b++;
    while (b > at + 1 && (t[b - 1] == '.' || t[b - 1] == '-')) b--;
    *next = b > at + 1 ? b : at + 1;
    if (a == at || b == at + 1) return 0;
    size_t dot = 0, label = 0;
    for (size_t i = at + 1; i < b; i++) {
        if (t[i] == '.') {
            if (label == 0) return 0;               /* "a..b" or ".com" */
            dot = i;
            label = 0;
        } else {
            label++;
        }
    }
    if (!dot || b - dot - 1 < 2) return 0;
    for (size_t i = dot + 1; i < b; i++)
        if (!is_alpha(t[i])) return 0;
    char v[SB_PII_VALUE_MAX];
    size_t n = SB_MIN(b - a, sizeof v - 1);
    for (size_t i = 0; i < n; i++) v[i] = (char)(t[a + i] >= 'A' && t[a + i] <= 'Z' ? t[a + i] + 32 : t[a + i]);
    return pii_push(out, a, b, SB_PII_EMAIL, -1, v, n);
}

/* ---------------------------------------------------------------- passports */

static const char *const PASSPORT_WORDS[] = {"护照", "passport", NULL};
#define PASSPORT_CONTEXT 40

static bool digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_digit(s[i])) return false;
    return true;
}

/* The numbering of the People's Republic's passports: E + 8 digits, E +
 * a letter (not I or O) + 7 digits (from 2017), G + 8 digits (before 2012),
 * DE / SE / PE + 7 digits (diplomatic, service, public affairs). */
static bool passport_cn(const char *w, size_t n) {
    char a = upper(w[0]), b = n > 1 ? upper(w[1]) : 0;
    if (n == 9 && (a == 'E' || a == 'G') && digits(w + 1, 8)) return true;
    if (n == 9 && a == 'E' && is_upper(b) && b != 'I' && b != 'O' && digits(w + 2, 7)) return true;
    return n == 9 && (a == 'D' || a == 'S' || a == 'P') && b == 'E' && digits(w + 2, 7);
}

/* Other countries' passports: one or two letters and 7 or 8 digits, only
 * where the caller has just said "passport" / 护照. */
static bool passport_generic(const char *w, size_t n) {
    size_t l = 0;
    while (l < n && is_upper(w[l])) l++;
    return l >= 1 && l <= 2 && n - l >= 7 && n - l <= 8 && digits(w + l, n - l);
}

static int word(const sb_privacy *p, const char *t, size_t len, size_t a, size_t b, sb_pii_spans *out) {
    if (!(p->types & (1u << SB_PII_PASSPORT)) || b - a < 8 || b - a > 10) return 0;
    if (b < len && (t[b] == '@' || (t[b] == '.' && b + 1 < len && is_alnum(t[b + 1])))) return 0;
    bool cn = passport_cn(t + a, b - a);
    if (!cn && !(passport_generic(t + a, b - a) &&
                 pii_has_word(t, a > PASSPORT_CONTEXT ? a - PASSPORT_CONTEXT : 0, a, PASSPORT_WORDS)))
        return 0;
    char v[16];
    for (size_t i = a; i < b; i++) v[i - a] = upper(t[i]);
    return pii_push(out, a, b, SB_PII_PASSPORT, -1, v, b - a);
}

/* ---------------------------------------------------------------- plates */

/* The one-character abbreviations of the provinces, in a plate's first place. */
static const char PROVINCES[] = "京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼";
/* The last place of special plates: learner, police, trailer, HK/Macao, embassy... */
static const char SUFFIXES[] = "学警挂港澳领试超使";

static bool in_set(const char *set, const char *c3) {
    for (const char *s = set; *s; s += 3)
        if (!memcmp(s, c3, 3)) return true;
    return false;
}

static bool plate_char(char c) { return (is_upper(c) && c != 'I' && c != 'O') || is_digit(c); }

/* At the province character t[i..i+3): letter, optional separator, then 5
 * characters (at most two letters, as GA 36 allows) or the new-energy 6
 * (D/F first or last), or 4 and a special suffix. Returns the span's end or 0. */
static size_t plate_at(const char *t, size_t len, size_t i, size_t *tail) {
    size_t j = i + 3;
    if (j >= len || !is_upper(t[j])) return 0;
    j++;
    static const char *const seps[] = {"·", "・", "•", " ", "-", "."};
    for (size_t k = 0; k < SB_ARRAY_LEN(seps); k++) {
        size_t n = strlen(seps[k]);
        if (j + n <= len && !memcmp(t + j, seps[k], n)) { j += n; break; }
    }
    size_t e = j, nd = 0;
    *tail = j;
    while (e < len && plate_char(t[e]) && e - j < 7) nd += is_digit(t[e++]);
    size_t n = e - j;
    if (e < len && is_alnum(t[e])) return 0;
    if (n == 5 && nd >= 3) return e;
    if (n == 6 && nd >= 4 && (t[j] == 'D' || t[j] == 'F' || t[e - 1] == 'D' || t[e - 1] == 'F')) return e;
    if (n == 4 && e + 3 <= len && in_set(SUFFIXES, t + e)) return e + 3;
    return 0;
}

static int plate(const char *t, size_t len, size_t i, sb_pii_spans *out, size_t *next) {
    size_t tail, e = plate_at(t, len, i, &tail);
    if (!e) return 0;
    char v[SB_PII_VALUE_MAX];                   /* province, letter, the rest without the dot */
    memcpy(v, t + i, 4);
    memcpy(v + 4, t + tail, e - tail);
    *next = e;
    return pii_push(out, i, e, SB_PII_PLATE, -1, v, 4 + e - tail);
}

/* ---------------------------------------------------------------- patterns */

/* Every non-empty match of pattern k in the NUL-free stretch c[from, to)
 * (c NUL-terminated at to). */
static int pattern_matches(const sb_privacy *p, size_t k, const char *c, size_t from, size_t to, sb_pii_spans *out) {
    size_t pos = from;
    while (pos <= to) {
        regmatch_t m;
        if (regexec(&p->pats[k].re, c + pos, 1, &m, pos > from ? REG_NOTBOL : 0)) break;
        size_t a = pos + (size_t)m.rm_so, b = pos + (size_t)m.rm_eo;
        if (b > a && pii_pattern_accepts(&p->pats[k], c + a, b - a)) {
            int rc = pii_push(out, a, b, SB_PII_CUSTOM, (int)k, c + a, b - a);
            if (rc) return rc;
            pos = b;
        } else if (b > a) {
            pos = a + 1;            /* a shorter match further on may pass the check */
        } else {
            pos = a + 1;
        }
    }
    return 0;
}

/* regexec wants a NUL-terminated string (REG_STARTEND is not portable, and
 * sanitizers read to the NUL regardless), so the text is copied; a NUL
 * inside it separates stretches searched one by one. */
static int text_patterns(const sb_privacy *p, const char *t, size_t len, sb_pii_spans *out) {
    if (!p->any_text_pattern) return 0;
    char small[1024], *c = len < sizeof small ? small : sb_malloc(len + 1);
    if (!c) return SB_ENOMEM;
    memcpy(c, t, len);
    c[len] = 0;
    int rc = 0;
    for (size_t k = 0; k < p->n_pats && rc == 0; k++) {
        if (p->pats[k].on != SB_PII_ON_TEXT) continue;
        for (size_t from = 0; from <= len && rc == 0;) {
            size_t to = from + strlen(c + from);
            rc = pattern_matches(p, k, c, from, to, out);
            from = to + 1;
        }
    }
    if (c != small) sb_free(c);
    return rc;
}

/* ---------------------------------------------------------------- the pass */

int pii_scan_text(const sb_privacy *p, const char *t, size_t len, sb_pii_spans *out) {
    bool emails = p->types & (1u << SB_PII_EMAIL), plates = p->types & (1u << SB_PII_PLATE);
    size_t i = 0;
    int rc = 0;
    while (i < len && rc == 0) {
        unsigned char c = (unsigned char)t[i];
        if (c == '@' && emails) {
            rc = email_at(t, len, i, out, &i);
        } else if (is_alnum((char)c) && (i == 0 || !is_alnum(t[i - 1]))) {
            size_t e = i;
            while (e < len && is_alnum(t[e])) e++;
            rc = word(p, t, len, i, e, out);
            i = e;
        } else if (c >= 0xE0 && plates && i + 3 <= len && in_set(PROVINCES, t + i)) {
            size_t next = i + 3;
            rc = plate(t, len, i, out, &next);
            i = next;
        } else {
            i++;
        }
    }
    if (rc == 0) rc = text_patterns(p, t, len, out);
    return rc;
}
