/* fuzz_utf8.h - the strict UTF-8 check the fuzz targets hold outputs to
 * (no overlongs, surrogates or values above U+10FFFF). Test code only: the
 * library's own decoders are static to their modules. */
#ifndef SB_FUZZ_UTF8_H
#define SB_FUZZ_UTF8_H

#include <stddef.h>

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], k, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) { k = 1; min = 0x80; c &= 0x1f; }
        else if ((c & 0xf0) == 0xe0) { k = 2; min = 0x800; c &= 0x0f; }
        else if ((c & 0xf8) == 0xf0) { k = 3; min = 0x10000; c &= 0x07; }
        else return 0;
        if (n - i <= k) return 0;
        for (unsigned j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            c = c << 6 | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

#endif
