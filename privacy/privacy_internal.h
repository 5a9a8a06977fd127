/* privacy_internal.h - what the files of privacy/ share: the detector's
 * struct, its operator patterns and the two scanners. */
#ifndef PRIVACY_INTERNAL_H
#define PRIVACY_INTERNAL_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

#include "privacy/sb_privacy.h"

#define PII_NAME_MAX 24

typedef struct {
    char name[PII_NAME_MAX + 1];
    int on;                     /* SB_PII_ON_TEXT | SB_PII_ON_DIGITS */
    sb_pii_check check;         /* a match counts only if its check characters pass */
    regex_t re;
} pii_pattern;

/* Whether the n bytes of a match of pp pass its check (always without one). */
bool pii_pattern_accepts(const pii_pattern *pp, const char *v, size_t n);

struct sb_privacy {
    unsigned types;             /* built-in detectors on: bits 1u << sb_pii_type */
    pii_pattern *pats;
    size_t n_pats;
    bool any_digit_pattern, any_text_pattern;
};

/* Room in the array *v (of *cap elements of `size` bytes) for element n:
 * doubles from `first`. 0 or SB_ENOMEM (*v and *cap unchanged). */
int pii_grow(void **v, size_t *cap, size_t n, size_t size, size_t first);
/* Append a span (value cut to fit); 0 or SB_ENOMEM. */
int pii_push(sb_pii_spans *s, size_t start, size_t end, sb_pii_type type, int pattern,
             const char *value, size_t vlen);
/* Whether one of words (ASCII ones compared case-insensitively) occurs in
 * t[from, to). */
bool pii_has_word(const char *t, size_t from, size_t to, const char *const *words);

/* The numbers: resident IDs, mobiles, landlines, cards, operator digit
 * patterns (detect_digits.c). */
int pii_scan_digits(const sb_privacy *p, const char *t, size_t len, sb_pii_spans *out);
/* The words: e-mail, passports, plates, operator text patterns (detect_text.c). */
int pii_scan_text(const sb_privacy *p, const char *t, size_t len, sb_pii_spans *out);

#endif
