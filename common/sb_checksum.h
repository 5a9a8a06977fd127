/* sb_checksum.h - check digits of identifiers people read out: the Chinese
 * resident ID's ISO 7064 MOD 11-2 and bank cards' Luhn (ISO/IEC 7812-1).
 *
 * Used by personal-data detection (privacy/) and by anything that validates
 * a number a caller gave (a slot filled in a conversation). Inputs are ASCII
 * digit strings with an explicit length; nothing here allocates.
 */
#ifndef SB_CHECKSUM_H
#define SB_CHECKSUM_H

#include <stdbool.h>
#include <stddef.h>

/* The ISO 7064 MOD 11-2 check character ('0'..'9' or 'X') of the n digits at
 * s (n >= 1), or 0 if one of them is not an ASCII digit. For a resident ID
 * the n is 17: weights 2^(17-i) mod 11, check = (12 - sum mod 11) mod 11. */
char sb_mod11_2_check(const char *s, size_t n);
/* Whether the n characters at s are digits followed by their MOD 11-2 check
 * character ('x' is taken as 'X'). n >= 2. */
bool sb_mod11_2_valid(const char *s, size_t n);

/* The Luhn check digit ('0'..'9') to append to the n digits at s, or 0 if
 * one of them is not a digit. */
char sb_luhn_check(const char *s, size_t n);
/* Whether the n digits at s (their last one the check digit) pass Luhn.
 * n >= 2; false on any non-digit. */
bool sb_luhn_valid(const char *s, size_t n);

#endif
