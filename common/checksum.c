/* checksum.c - ISO 7064 MOD 11-2 and Luhn check digits (sb_checksum.h). */
#include "common/sb_checksum.h"

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

char sb_mod11_2_check(const char *s, size_t n) {
    if (n == 0) return 0;
    /* Horner form of sum(d_i * 2^(n-i)): each step doubles what came before,
     * so no weight table ties this to 17 digits. */
    unsigned p = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i])) return 0;
        p = ((p + (unsigned)(s[i] - '0')) * 2) % 11;
    }
    unsigned c = (12 - p) % 11;
    return c == 10 ? 'X' : (char)('0' + c);
}

bool sb_mod11_2_valid(const char *s, size_t n) {
    if (n < 2) return false;
    char want = sb_mod11_2_check(s, n - 1), got = s[n - 1];
    if (got == 'x') got = 'X';
    return want && want == got;
}

/* Sum of the Luhn digits of s[0..n) when the digit right of s[n-1] is the
 * check digit (so s[n-1] is doubled), or -1 on a non-digit. */
static int luhn_sum(const char *s, size_t n, bool double_last) {
    int sum = 0;
    bool dbl = double_last;
    for (size_t i = n; i-- > 0;) {
        if (!is_digit(s[i])) return -1;
        int d = s[i] - '0';
        if (dbl) d = d * 2 > 9 ? d * 2 - 9 : d * 2;
        sum += d;
        dbl = !dbl;
    }
    return sum;
}

char sb_luhn_check(const char *s, size_t n) {
    int sum = luhn_sum(s, n, true);
    return sum < 0 ? 0 : (char)('0' + (10 - sum % 10) % 10);
}

bool sb_luhn_valid(const char *s, size_t n) {
    if (n < 2) return false;
    int sum = luhn_sum(s, n, false);
    return sum >= 0 && sum % 10 == 0;
}
