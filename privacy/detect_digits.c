/* detect_digits.c - numbers that identify a person, however they were
 * written: "13800138000", "138 0013 8000", "+86-138...", "幺三八零零幺三...",
 * "one three eight double oh ...", "1 3 8 0 0 ...".
 *
 * One pass collects RUNS: digit tokens (ASCII or full-width digits, Chinese
 * numerals, English digit words) joined by at most a few separator
 * characters (spaces, dashes, brackets, a '+'; commas only between spoken
 * digits, because "1,234" is an amount and "110、120" a list). Each stretch of tokens between
 * separators is a GROUP. A run is then cut into identifiers at group
 * boundaries, longest first, so "138 1234 5678 和 ..." and two numbers read
 * one after the other are both found, and a date's "2024-05-01" (eight
 * digits) stays a date. Digits glued to ASCII letters ("12kWh", "GD2024...")
 * belong to a word, not a number.
 */
#include <string.h>

#include "common/sb_checksum.h"
#include "common/sb_common.h"
#include "common/sb_utf8.h"
#include "privacy/privacy_internal.h"

#define RUN_MAX 64          /* digits in one run; a longer run is cut (and scanned in pieces) */
#define WINDOW_MAX 29       /* "0086" + 25 digits: the longest thing classified */
#define SEP_MAX 3           /* separator characters allowed between two groups */
#define NO_PLUS ((size_t)-1)

typedef struct {
    char d[RUN_MAX + 1];
    size_t ds[RUN_MAX], de[RUN_MAX];    /* bytes of the token each digit came from */
    int group_first[RUN_MAX + 1];       /* index of the first digit of each group */
    size_t plus_at[RUN_MAX];            /* a '+' right before group g, or NO_PLUS */
    int n, ng;
    bool spoken_last;                   /* the last token was a numeral or a word */
    bool new_group;                     /* a separator came since the last digit */
    int seps;                           /* separator characters since the last digit */
    size_t plus;                        /* '+' seen among those separators */
    bool comma;                         /* a comma among them */
    bool skip;                          /* drop digits glued to an over-long group... */
    size_t skip_end;                    /* ...which ended here so far */
} run;

/* Context that turns a bare long number into an account: the bank card /
 * account words of the hotline's two languages. */
static const char *const CARD_WORDS[] = {
    "卡号", "银行卡", "账号", "帐号", "账户", "帐户", "储蓄卡", "信用卡", "借记卡", "存折",
    "card", "account", "acct", NULL,
};
/* "ID card" / 身份证 is an identity document, not a bank card: where these
 * precede a 15-digit number that reads as an old ID, it is one. */
static const char *const ID_WORDS[] = {"身份证", "ID card", "ID number", "identity", NULL};
#define CONTEXT_BEFORE 40   /* bytes: about 13 Chinese characters or a short English clause */

/* ---------------------------------------------------------------- checks */

static bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static bool valid_date(int y, int m, int d) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    return d <= days[m - 1] + (m == 2 && leap(y));
}

static int num(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    return v;
}

static bool all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

/* The province-level codes that open a resident ID (GB/T 2260), 71 Taiwan
 * and 81-83 the residence permits of Hong Kong, Macao and Taiwan. */
static bool id_region(const char *s) {
    int p = num(s, 2);
    return (p >= 11 && p <= 15) || (p >= 21 && p <= 23) || (p >= 31 && p <= 37) ||
           (p >= 41 && p <= 46) || (p >= 50 && p <= 54) || (p >= 61 && p <= 65) ||
           p == 71 || (p >= 81 && p <= 83);
}

static bool id18(const char *d, size_t n) {
    if (n != 18 || !all_digits(d, 17) || !id_region(d)) return false;
    int y = num(d + 6, 4);
    return y >= 1900 && y <= 2099 && valid_date(y, num(d + 10, 2), num(d + 12, 2)) &&
           sb_mod11_2_valid(d, 18);
}

/* The 15-character form (issued until 1999) has no check digit: region and
 * a 19YY birth date are all there is to go on. */
static bool id15(const char *d, size_t n) {
    return n == 15 && all_digits(d, 15) && id_region(d) &&
           valid_date(1900 + num(d + 6, 2), num(d + 8, 2), num(d + 10, 2));
}

static bool mobile(const char *d, size_t n) {
    return n == 11 && d[0] == '1' && d[1] >= '3' && d[1] <= '9' && all_digits(d, 11);
}

/* Area code 010, 02X (three digits, eight-digit numbers) or 0[3-9]XX (four
 * digits, seven or eight). Local numbers start with 2-8 in the numbering
 * plan; 1 is allowed too, because examples and forms write "010-12345678",
 * but never 0 (that is a second trunk prefix, not a number). */
static bool landline(const char *d, size_t n) {
    if (n < 11 || n > 12 || d[0] != '0' || !all_digits(d, n)) return false;
    size_t area;
    if (d[1] == '0') return false;                          /* 00: the international prefix */
    if (d[1] == '1') area = d[2] == '0' ? 3 : 0;
    else if (d[1] == '2') area = 3;
    else area = 4;
    if (!area || (area == 3 && n != 11)) return false;
    return d[area] != '0';
}

/* Card numbers open with their industry digit: 2-6 (Mastercard's 2-series,
 * Amex/JCB, Visa, Mastercard, UnionPay), 9 (older Chinese domestic cards). */
static bool card(const char *d, size_t n) {
    return n >= 13 && n <= 19 && ((d[0] >= '2' && d[0] <= '6') || d[0] == '9') &&
           all_digits(d, n) && sb_luhn_valid(d, n);
}

/* What the digits d[0..n) are, or -1; *value gets the normalised form. */
static int classify(const char *d, size_t n, bool plus, bool card_ctx, bool id_ctx, char *value) {
    /* +86 / 0086: the country code of a mobile or (without its 0) a landline */
    size_t skip = n > 4 && !memcmp(d, "0086", 4) ? 4 : plus && n > 2 && !memcmp(d, "86", 2) ? 2 : 0;
    if (skip) {
        const char *r = d + skip;
        size_t m = n - skip;
        if (mobile(r, m)) { memcpy(value, r, m); value[m] = 0; return SB_PII_PHONE; }
        if (m >= 10 && m <= 11 && r[0] != '0') {
            value[0] = '0';
            memcpy(value + 1, r, m); value[m + 1] = 0;
            if (landline(value, m + 1)) return SB_PII_TEL;
        }
        return -1;
    }
    int type = -1;
    if (id18(d, n)) type = SB_PII_ID;
    else if (mobile(d, n)) type = SB_PII_PHONE;
    else if (n == 12 && d[0] == '0' && mobile(d + 1, 11)) {   /* a mobile dialled long-distance */
        memcpy(value, d + 1, 11); value[11] = 0;
        return SB_PII_PHONE;
    } else if (landline(d, n)) type = SB_PII_TEL;
    else if (id15(d, n) && (!card_ctx || id_ctx)) type = SB_PII_ID;
    else if (card(d, n)) type = SB_PII_CARD;
    else if (card_ctx && n >= 10 && n <= 25 && all_digits(d, n)) type = SB_PII_CARD;
    if (type < 0) return -1;
    memcpy(value, d, n);
    value[n] = 0;
    return type;
}

/* ---------------------------------------------------------------- tokens */

static const struct { const char *s; char d; } NUMERALS[] = {
    {"零", '0'}, {"〇", '0'}, {"一", '1'}, {"幺", '1'}, {"二", '2'}, {"两", '2'}, {"三", '3'},
    {"四", '4'}, {"五", '5'}, {"六", '6'}, {"七", '7'}, {"八", '8'}, {"九", '9'},
};

static const struct { const char *w; char d; } WORDS[] = {
    {"zero", '0'}, {"oh", '0'}, {"o", '0'}, {"one", '1'}, {"two", '2'}, {"three", '3'},
    {"four", '4'}, {"five", '5'}, {"six", '6'}, {"seven", '7'}, {"eight", '8'}, {"nine", '9'},
};

static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alnum(char c) { return is_alpha(c) || is_digit(c); }

/* The digit an English word t[0..n) names, or 0. */
static char word_digit(const char *t, size_t n) {
    char w[8];
    if (n >= sizeof w) return 0;
    for (size_t i = 0; i < n; i++) w[i] = (char)(t[i] | 0x20);
    w[n] = 0;
    for (size_t i = 0; i < SB_ARRAY_LEN(WORDS); i++)
        if (!strcmp(w, WORDS[i].w)) return WORDS[i].d;
    return 0;
}

static bool word_is(const char *t, size_t n, const char *w) {
    if (strlen(w) != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((t[i] | 0x20) != w[i]) return false;
    return true;
}

static size_t word_end(const char *t, size_t len, size_t i) {
    while (i < len && is_alpha(t[i])) i++;
    return i;
}

/* Separators between groups of one number. */
static bool separator(uint32_t cp) {
    return cp == ' ' || cp == '\t' || cp == '-' || cp == '(' || cp == ')' || cp == 0xA0 ||
           cp == 0x3000 || cp == 0x2010 || cp == 0x2011 || cp == 0x2013 || cp == 0x2014 ||
           cp == 0xFF08 || cp == 0xFF09 || cp == 0xFF0D || cp == 0x2212;
}

static bool comma(uint32_t cp) { return cp == ',' || cp == 0xFF0C || cp == 0x3001; }

/* ---------------------------------------------------------------- runs */

typedef struct {
    const sb_privacy *p;
    const char *t;
    size_t len;
    sb_pii_spans *out;
    int rc;
} scan;

static int try_patterns(const scan *s, const char *d, char *value) {
    for (size_t i = 0; i < s->p->n_pats; i++) {
        const pii_pattern *pp = &s->p->pats[i];
        regmatch_t m;
        if (pp->on != SB_PII_ON_DIGITS || regexec(&pp->re, d, 1, &m, 0)) continue;
        if (m.rm_so != 0 || d[m.rm_eo] != 0) continue;          /* the whole string, or nothing */
        if (!pii_pattern_accepts(pp, d, strlen(d))) continue;
        strcpy(value, d);
        return (int)i;
    }
    return -1;
}

/* The span of run digits [a, b): it starts at the '+' before the first
 * group if there is one, and takes an opening bracket whose closing one it
 * contains ("(021)6234 5678"), so a replacement leaves no half pair. */
static void window_span(const scan *s, const run *r, int g, int b, size_t *start, size_t *end) {
    *start = r->plus_at[g] != NO_PLUS ? r->plus_at[g] : r->ds[r->group_first[g]];
    *end = r->de[b - 1];
    static const char *const open[] = {"(", "（"}, *const close[] = {")", "）"};
    for (int k = 0; k < 2; k++) {
        size_t ol = strlen(open[k]);
        if (*start >= ol && !memcmp(s->t + *start - ol, open[k], ol) &&
            memmem(s->t + *start, *end - *start, close[k], strlen(close[k]))) {
            *start -= ol;
            break;
        }
    }
}

/* The identifier, if any, in run digits [a, b) (windows starting at group
 * g): type or -1, value filled. ctx caches the context look-ups of g. */
static int window(const scan *s, const run *r, int g, int a, int b, int ctx[2], int *pat, char *value) {
    char d[WINDOW_MAX + 1];
    memcpy(d, r->d + a, (size_t)(b - a));
    d[b - a] = 0;
    int type = -1;
    *pat = -1;
    const unsigned numbers = (1u << SB_PII_ID) | (1u << SB_PII_PHONE) | (1u << SB_PII_TEL) | (1u << SB_PII_CARD);
    if ((s->p->types & numbers) && b - a >= 10) {
        if (ctx[0] < 0) {
            size_t from = r->ds[a] > CONTEXT_BEFORE ? r->ds[a] - CONTEXT_BEFORE : 0;
            ctx[0] = pii_has_word(s->t, from, r->ds[a], CARD_WORDS);
            ctx[1] = ctx[0] && pii_has_word(s->t, from, r->ds[a], ID_WORDS);
        }
        type = classify(d, (size_t)(b - a), r->plus_at[g] != NO_PLUS, ctx[0], ctx[1], value);
        if (type >= 0 && !(s->p->types & (1u << type))) type = -1;
    }
    if (type < 0 && s->p->any_digit_pattern && (*pat = try_patterns(s, d, value)) >= 0) type = SB_PII_CUSTOM;
    return type;
}

/* Cut groups [from, ...) of the run into identifiers at group boundaries:
 * from each group, the longest stretch of whole groups (ending before group
 * h_end) that classifies; else move one group on. Only groups starting at
 * or before digit start_max are tried. Returns the first group not tried. */
static int cut(scan *s, run *r, int from, int start_max, int h_end) {
    r->group_first[r->ng] = r->n;
    int g = from;
    while (g < h_end && r->group_first[g] <= start_max && s->rc == 0) {
        int a = r->group_first[g], matched = -1, ctx[2] = {-1, -1};
        int h = h_end;
        while (h > g && r->group_first[h] - a > WINDOW_MAX) h--;
        for (; h > g && r->group_first[h] - a >= 5; h--) {
            int b = r->group_first[h], pat;
            char value[WINDOW_MAX + 2];
            int type = window(s, r, g, a, b, ctx, &pat, value);
            if (type < 0) continue;
            size_t start, end;
            window_span(s, r, g, b, &start, &end);
            s->rc = pii_push(s->out, start, end, (sb_pii_type)type, pat, value, strlen(value));
            matched = h;
            break;
        }
        g = matched > 0 ? matched : g + 1;
    }
    return g;
}

static void reset(run *r) {
    r->n = r->ng = 0;
    r->new_group = true;
    r->seps = 0;
    r->plus = NO_PLUS;
    r->comma = false;
    r->skip = false;
}

/* The run has ended: every group is tried. */
static void flush(scan *s, run *r) {
    if (r->n) cut(s, r, 0, r->n, r->ng);
    reset(r);
}

/* The run is full and goes on: try the groups whose every window is
 * already complete, then keep the rest (under WINDOW_MAX digits) at the
 * front. A single group too long to be anything is dropped, and so are its
 * digits still to come (skip). */
static void make_room(scan *s, run *r) {
    int complete = r->new_group ? r->ng : r->ng - 1;       /* the last group may still grow */
    int g = cut(s, r, 0, r->n - WINDOW_MAX - 1, complete);
    int keep_from = g < r->ng ? r->group_first[g] : r->n;
    bool growing = !r->new_group;
    if (r->n - keep_from > WINDOW_MAX) {                    /* one over-long group is all that is left */
        size_t last = r->de[r->n - 1];
        reset(r);
        r->skip = growing;
        r->skip_end = last;
        return;
    }
    int shift = keep_from;
    memmove(r->d, r->d + shift, (size_t)(r->n - shift));
    memmove(r->ds, r->ds + shift, (size_t)(r->n - shift) * sizeof r->ds[0]);
    memmove(r->de, r->de + shift, (size_t)(r->n - shift) * sizeof r->de[0]);
    int ng = r->ng - g;
    for (int k = 0; k < ng; k++) {
        r->group_first[k] = r->group_first[g + k] - shift;
        r->plus_at[k] = r->plus_at[g + k];
    }
    r->n -= shift;
    r->ng = ng;
}

/* Add the digits of one token at bytes [start, end). */
static void add(scan *s, run *r, const char *digits, int nd, size_t start, size_t end, bool spoken) {
    if (r->n > 0 && r->comma && !(spoken && r->spoken_last)) flush(s, r);     /* "1,234", "110、120" */
    if (r->skip) {                      /* still inside the over-long group? */
        if (start == r->skip_end) { r->skip_end = end; return; }
        r->skip = false;
    }
    if (r->n + nd > RUN_MAX) make_room(s, r);
    if (r->skip) { r->skip_end = end; return; }
    if (r->n == 0 || r->new_group) {
        r->group_first[r->ng] = r->n;
        r->plus_at[r->ng] = r->plus;
        r->ng++;
    }
    for (int i = 0; i < nd; i++) {
        r->d[r->n] = digits[i];
        r->ds[r->n] = start;
        r->de[r->n] = end;
        r->n++;
    }
    r->spoken_last = spoken;
    r->new_group = false;
    r->seps = 0;
    r->plus = NO_PLUS;
    r->comma = false;
}

/* The ASCII digits at i (glued letters make them a word, skipped whole; a
 * trailing X after 17 digits is an ID's check character). Returns the end. */
static size_t ascii_digits(scan *s, run *r, size_t i) {
    const char *t = s->t;
    size_t j = i;
    while (j < s->len && is_digit(t[j])) j++;
    bool glued_before = i > 0 && is_alpha(t[i - 1]);
    if (r->n && r->comma) flush(s, r);              /* "1,234": settled before counting digits */
    bool x = j < s->len && (t[j] == 'X' || t[j] == 'x') && (j + 1 >= s->len || !is_alnum(t[j + 1])) &&
             r->n + (j - i) == 17;                  /* an ID's check character, or just a glued letter */
    if (glued_before || (j < s->len && is_alpha(t[j]) && !x)) {
        flush(s, r);
        while (j < s->len && is_alnum(t[j])) j++;
        return j;
    }
    for (size_t k = i; k < j; k++) add(s, r, &t[k], 1, k, k + 1, false);
    if (x) {
        add(s, r, "X", 1, j, j + 1, false);
        flush(s, r);
        return j + 1;
    }
    return j;
}

/* An English word at i: a digit ("double five" is two), an X closing an
 * ID, or any other word, which ends the run. Returns the end. */
static size_t english_word(scan *s, run *r, size_t i) {
    const char *t = s->t;
    size_t e = word_end(t, s->len, i);
    if (e < s->len && is_digit(t[e])) {          /* "A1234567": a code, not words */
        flush(s, r);
        while (e < s->len && is_alnum(t[e])) e++;
        return e;
    }
    char d = word_digit(t + i, e - i);
    if (d) { add(s, r, &d, 1, i, e, true); return e; }
    if (word_is(t + i, e - i, "plus")) {         /* "plus eight six ...": a spoken '+' */
        flush(s, r);
        r->plus = i;
        return e;
    }
    int times = word_is(t + i, e - i, "double") ? 2 : word_is(t + i, e - i, "triple") ? 3 : 0;
    if (times) {
        size_t k = e;
        while (k < s->len && t[k] == ' ') k++;
        size_t e2 = word_end(t, s->len, k);
        char d2 = k > e && e2 > k ? word_digit(t + k, e2 - k) : 0;
        if (d2) {
            char dd[3] = {d2, d2, d2};
            add(s, r, dd, times, i, e2, true);
            return e2;
        }
    }
    if ((word_is(t + i, e - i, "x") || word_is(t + i, e - i, "ex")) && r->n == 17) {
        add(s, r, "X", 1, i, e, true);
        flush(s, r);
        return e;
    }
    flush(s, r);
    return e;
}

/* A non-ASCII code point at i of n bytes: a full-width digit, a numeral,
 * 叉 closing an ID, a separator, or anything else (ends the run). */
static void wide_char(scan *s, run *r, size_t i, size_t n, uint32_t cp) {
    if (cp == 0xFF0B) {                         /* full-width plus */
        if (r->n && r->seps < SEP_MAX) { r->new_group = true; r->seps++; }
        else flush(s, r);
        r->plus = i;
        return;
    }
    if (cp >= 0xFF10 && cp <= 0xFF19) {
        char d = (char)('0' + (cp - 0xFF10));
        add(s, r, &d, 1, i, i + n, false);
        return;
    }
    if (n == 3 && !memcmp(s->t + i, "加", 3) && i + 9 <= s->len && !memcmp(s->t + i + 3, "八六", 6)) {
        flush(s, r);                            /* 加八六: a spoken +86 */
        r->plus = i;
        return;
    }
    if (n == 3) {
        for (size_t k = 0; k < SB_ARRAY_LEN(NUMERALS); k++)
            if (!memcmp(s->t + i, NUMERALS[k].s, 3)) {
                add(s, r, &NUMERALS[k].d, 1, i, i + n, true);
                return;
            }
        if (!memcmp(s->t + i, "叉", 3) && r->n == 17) {
            add(s, r, "X", 1, i, i + n, true);
            flush(s, r);
            return;
        }
    }
    if (r->n && (separator(cp) || comma(cp)) && r->seps < SEP_MAX) {
        r->new_group = true;
        r->seps++;
        r->comma |= comma(cp);
        return;
    }
    flush(s, r);
}

int pii_scan_digits(const sb_privacy *p, const char *t, size_t len, sb_pii_spans *out) {
    scan s = {p, t, len, out, 0};
    run r;
    reset(&r);
    r.spoken_last = false;
    size_t i = 0;
    while (i < len && s.rc == 0) {
        char c = t[i];
        if (is_digit(c)) { i = ascii_digits(&s, &r, i); continue; }
        if (is_alpha(c)) {
            if (i > 0 && is_digit(t[i - 1])) {           /* "3rd", the tail of a code */
                flush(&s, &r);
                while (i < len && is_alnum(t[i])) i++;
                continue;
            }
            i = english_word(&s, &r, i);
            continue;
        }
        if ((unsigned char)c < 0x80) {
            bool sep = separator((uint32_t)c) || comma((uint32_t)c) || c == '+';
            if (sep && c == '+' && (r.n == 0 || r.seps < SEP_MAX)) {
                if (r.n) { r.new_group = true; r.seps++; }
                r.plus = i;
            } else if (sep && r.n && r.seps < SEP_MAX) {
                r.new_group = true;
                r.seps++;
                r.comma |= comma((uint32_t)c);
            } else if (!(sep && r.n == 0 && (c == '(' || c == ' '))) {
                flush(&s, &r);
            }
            i++;
            continue;
        }
        uint32_t cp;
        size_t n = sb_utf8_valid((const uint8_t *)t + i, len - i);
        if (n == 0) { flush(&s, &r); i++; continue; }          /* an invalid byte: a non-digit */
        sb_utf8_decode((const uint8_t *)t + i, n, &cp);
        wide_char(&s, &r, i, n, cp);
        i += n;
    }
    if (s.rc == 0 && r.n) flush(&s, &r);
    return s.rc;
}
