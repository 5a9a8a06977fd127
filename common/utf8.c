/* utf8.c - UTF-8 code points in and out (sb_utf8.h). */
#include "common/sb_utf8.h"

#include "common/sb_common.h"

#include <stdio.h>
#include <string.h>

size_t sb_utf8_len(uint8_t lead) {
    static const uint8_t by_high_nibble[16] = { 1,1,1,1,1,1,1,1, 1,1,1,1, 2,2, 3, 4 };
    return by_high_nibble[lead >> 4];
}

static int is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

size_t sb_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (!(b & 0x80)) { *cp = b; return 1; }
    if (!(b & 0x40)) return 0;                       /* stray continuation byte */
    if (!(b & 0x20)) {
        if (n < 2 || !is_cont(s[1])) return 0;
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (!(b & 0x10)) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) return 0;
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (!(b & 0x08)) {
        if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) return 0;
        *cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;                                        /* 0xF8..0xFF */
}

size_t sb_utf8_valid(const uint8_t *s, size_t n) {
    uint32_t c = s[0], min;
    size_t len;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; c &= 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; c &= 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; c &= 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if (!is_cont(s[i])) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return len;
}

size_t sb_utf8_encode(uint32_t cp, char out[4]) {
    if (cp <= 0x7F) { out[0] = (char)cp; return 1; }
    if (cp <= 0x7FF) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp <= 0xFFFF) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int sb_utf8_to_cpts(const char *s, size_t n, uint32_t **out, size_t *n_out) {
    uint32_t *c = sb_malloc((n ? n : 1) * sizeof *c);
    if (!c) return SB_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t used = sb_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (used == 0) { cp = 0xFFFD; used = 1; }
        c[k++] = cp;
        i += used;
    }
    *out = c;
    *n_out = k;
    return 0;
}

char *sb_utf8_escape_controls(const char *s) {
    const size_t n = strlen(s);
    char *o = sb_malloc(n * 6 + 1);             /* worst case: every byte as \u00XX */
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const uint8_t c = (uint8_t)s[i];
        const size_t len = sb_utf8_valid((const uint8_t *)s + i, n - i);
        const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\\' ? "\\\\" : NULL;
        if (named) {
            memcpy(o + k, named, 2);
            k += 2;
            i++;
        } else if (len == 0 || c < 0x20 || c == 0x7f) {          /* C0, DEL, a byte that is not UTF-8 */
            k += (size_t)snprintf(o + k, 5, "\\x%02x", c);
            i++;
        } else if (len == 2 && c == 0xc2 && (uint8_t)s[i + 1] < 0xa0) {  /* C1: U+0080..U+009F, CSI among them */
            k += (size_t)snprintf(o + k, 7, "\\u%04x", (unsigned)(uint8_t)s[i + 1]);
            i += 2;
        } else {
            memcpy(o + k, s + i, len);
            k += len;
            i += len;
        }
    }
    o[k] = '\0';
    return o;
}
