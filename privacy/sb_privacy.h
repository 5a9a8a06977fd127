/* sb_privacy.h - callers' personal data: find it in text, replace it with
 * typed placeholders (or masks), and put the real values back into a reply.
 *
 * What is detected, the exact rules, what is deliberately not matched and
 * the measured recall / false positives / latency are in docs/PRIVACY.md.
 *
 * Detection runs on every call, so it is a single left-to-right pass over
 * the bytes with no allocation beyond the caller's reusable span list
 * (operator patterns add POSIX regexec calls, and text patterns a copy of
 * a text over 1 KB). Text need not be valid UTF-8:
 * an invalid byte is a character that is not part of any identifier.
 *
 * A detector (sb_privacy) is immutable once built and may be shared by
 * threads; sb_pii_spans and sb_pii_table belong to one caller.
 */
#ifndef SB_PRIVACY_H
#define SB_PRIVACY_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    SB_PII_ID,          /* Chinese resident ID: 18 (MOD 11-2) or 15 characters */
    SB_PII_PHONE,       /* mobile: 1[3-9] + 9 digits, +86 / 0086 prefixes */
    SB_PII_TEL,         /* landline with its area code */
    SB_PII_CARD,        /* bank card (Luhn) or account number in a card/account context */
    SB_PII_EMAIL,
    SB_PII_PASSPORT,
    SB_PII_PLATE,       /* vehicle plate */
    SB_PII_N_BUILTIN,
    SB_PII_CUSTOM = SB_PII_N_BUILTIN,   /* an operator's pattern (sb_pii_span.pattern) */
} sb_pii_type;

#define SB_PII_ALL ((1u << SB_PII_N_BUILTIN) - 1)   /* every built-in detector */
#define SB_PII_VALUE_MAX 96                          /* normalised value, NUL included */

/* "ID", "PHONE", "TEL", "CARD", "EMAIL", "PASSPORT", "PLATE" (the
 * placeholders' names); "CUSTOM" for SB_PII_CUSTOM. */
const char *sb_pii_type_name(sb_pii_type t);
/* The type named name (case-insensitive, the names above), or -1. */
int sb_pii_type_parse(const char *name);

typedef struct {
    size_t start, end;          /* bytes [start, end) of the text */
    sb_pii_type type;
    int pattern;                /* SB_PII_CUSTOM: index of the operator pattern, else -1 */
    /* Digits without separators (an ID's check character 'X'), a mobile
     * without +86, a landline with its leading 0, passports and plates in
     * upper case, an e-mail in lower case, an operator pattern's match as
     * written. Cut (still NUL-terminated) at SB_PII_VALUE_MAX - 1 bytes. */
    char value[SB_PII_VALUE_MAX];
} sb_pii_span;

/* The spans of one text, in text order, never overlapping. Reuse one
 * across calls: sb_privacy_detect empties it and keeps its memory. */
typedef struct { sb_pii_span *v; size_t n, cap; } sb_pii_spans;
void sb_pii_spans_free(sb_pii_spans *s);

typedef struct sb_privacy sb_privacy;

/* A detector running the built-in detectors in the mask `types`
 * (bits 1u << sb_pii_type; SB_PII_ALL for every one). */
int  sb_privacy_new(unsigned types, sb_privacy **out, char *err);
void sb_privacy_free(sb_privacy *p);

/* An operator's pattern, found as type SB_PII_CUSTOM under NAME (what its
 * placeholders are called: 1-24 of A-Z 0-9 _, starting with a letter, not
 * a built-in type's name). regex is POSIX extended (regex.h), case-sensitive.
 *   SB_PII_ON_TEXT   the regex searches the raw text; every match is a span
 *                    (matches of length 0 are ignored).
 *   SB_PII_ON_DIGITS the regex must match the WHOLE digit string of a number
 *                    as the built-in detectors see it: ASCII or full-width
 *                    digits, Chinese numerals, English digit words, with the
 *                    spaces/dashes between groups removed ("幺三八 0013"
 *                    is "1380013"). It is tried on each group-aligned part
 *                    of a number the built-ins did not claim, longest first,
 *                    so "^9[0-9]{9}$" finds ten-digit numbers starting
 *                    with 9 however they were said.
 * Built-in detections win over an operator's overlapping text match.
 * Call before the detector is shared; SB_EINVAL naming the problem. */
enum { SB_PII_ON_TEXT, SB_PII_ON_DIGITS };
int  sb_privacy_add_pattern(sb_privacy *p, const char *name, const char *regex, int on, char *err);
/* The check digit an operator's identifier carries: pattern NAME's matches
 * count only when their check characters pass it - the match's digits (and
 * a final X or x for MOD 11-2), anything else in it ignored - so a pattern
 * broad enough to catch every employee number does not take every number
 * of that length. luhn: ISO/IEC 7812-1 (bank cards); mod11-2: ISO 7064
 * MOD 11-2 (the resident ID's). 0, or SB_EINVAL: no such pattern. */
typedef enum { SB_PII_CHECK_NONE, SB_PII_CHECK_LUHN, SB_PII_CHECK_MOD11_2 } sb_pii_check;
extern const char *const sb_pii_check_names[];      /* "none", "luhn", "mod11-2", NULL: by sb_pii_check */
int  sb_privacy_pattern_check(sb_privacy *p, const char *name, sb_pii_check check, char *err);
const char *sb_privacy_pattern_name(const sb_privacy *p, int pattern);

/* Every identifier in text[0..len) (need not be NUL-terminated). 0, or
 * SB_ENOMEM (out then holds what was found before memory ran out). */
int sb_privacy_detect(const sb_privacy *p, const char *text, size_t len, sb_pii_spans *out);

/* ---- replacing and restoring ---- */

/* One value of a call: its placeholder ("⟨PHONE_1⟩"), type name, normalised
 * value and the text it was first written as. */
typedef struct {
    char *placeholder;
    char *name;                 /* "PHONE", or an operator pattern's name */
    char *value;
    char *raw;
    unsigned number;            /* the N of NAME_N */
} sb_pii_entry;
/* The values behind a call's placeholders. Start zeroed; pass the same
 * table to every sb_privacy_redact of a call (or conversation) so one value
 * keeps one placeholder throughout. */
typedef struct { sb_pii_entry *v; size_t n, cap; } sb_pii_table;
void sb_pii_table_free(sb_pii_table *t);
/* A table as text, to keep it between a conversation's turns (the session
 * store seals it), and back: a JSON array of {name, number, value, raw}.
 * save: *out sb_malloc'ed, 0 or SB_ENOMEM. load: t is emptied first, then
 * 0, SB_EINVAL (not a saved table) or SB_ENOMEM, t empty on an error. */
int sb_pii_table_save(const sb_pii_table *t, char **out, size_t *out_len);
int sb_pii_table_load(const char *text, size_t len, sb_pii_table *t, char *err);

typedef enum {
    SB_PII_PSEUDONYMIZE,        /* ⟨PHONE_1⟩, value kept in the table */
    SB_PII_MASK,                /* 138****5678: part of the value kept, nothing in a table */
    SB_PII_TAG,                 /* ⟨PHONE⟩: the type only, nothing in a table */
} sb_pii_mode;
/* "pseudonymize" | "mask" | "tag", or -1. */
int sb_pii_mode_parse(const char *name);

/* text with every span detected replaced as mode says; *out is sb_malloc'ed
 * and NUL-terminated. table is required for SB_PII_PSEUDONYMIZE (values
 * already in it keep their placeholders) and ignored otherwise. spans, if
 * not NULL, receives the detections. 0, SB_EINVAL (pseudonymize without a
 * table) or SB_ENOMEM; on an error nothing is returned. */
int sb_privacy_redact(const sb_privacy *p, const char *text, size_t len, sb_pii_mode mode,
                      sb_pii_table *table, sb_pii_spans *spans, char **out, size_t *out_len);

/* text (a model's reply) with every placeholder of table put back: the
 * normalised value, or the caller's raw wording when raw. A model's echo is
 * recognised with ASCII < > or 〈 〉 for ⟨ ⟩, spaces inside the brackets,
 * a space for the underscore and any letter case ("< phone 1 >"). Unknown
 * placeholders are left as they are. 0 or SB_ENOMEM. */
int sb_privacy_restore(const sb_pii_table *t, const char *text, size_t len, bool raw,
                       char **out, size_t *out_len);

#endif
