/* fuzz_privacy.c - libFuzzer target for personal-data detection, replacement
 * and restore (privacy/sb_privacy.h; tools/fuzz.sh).
 *
 * Every caller's text goes through the detector, valid UTF-8 or not. The
 * first byte picks the mode and the detectors switched off; the rest is the
 * text. Whatever it is:
 *   - detection succeeds with spans inside the text, in order, not
 *     overlapping, each value NUL-terminated within its buffer;
 *   - pseudonymize then restore with the caller's wording gives the text
 *     back byte for byte, when each value was written one way and the text
 *     has no placeholder brackets of its own;
 *   - mask and tag succeed.
 */
#include <stdint.h>
#include <string.h>

#include "common/sb_common.h"
#include "privacy/sb_privacy.h"

static bool has_bracket(const uint8_t *d, size_t n) {
    return memchr(d, '<', n) || memmem(d, n, "\xE2\x9F\xA8", 3) || memmem(d, n, "\xE3\x80\x88", 3) ||
           memmem(d, n, "\xEF\xBC\x9C", 3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    sb_privacy *p;
    if (sb_privacy_new(SB_PII_ALL & ~(flags >> 4 & 0xF), &p, NULL)) return 0;
    if (flags & 8) {
        sb_privacy_add_pattern(p, "TXT", "[A-Z]{3}-[0-9]+", 0, NULL);
        sb_privacy_add_pattern(p, "DIG", "9[0-9]{5,9}", 1, NULL);
    }
    sb_pii_spans s = {0};
    if (sb_privacy_detect(p, text, len, &s) == 0) {
        for (size_t i = 0; i < s.n; i++) {
            if (s.v[i].start >= s.v[i].end || s.v[i].end > len) __builtin_trap();
            if (i && s.v[i - 1].end > s.v[i].start) __builtin_trap();
            if (!memchr(s.v[i].value, 0, sizeof s.v[i].value)) __builtin_trap();
        }
    }
    sb_pii_table t = {0};
    char *out, *back;
    size_t n, bn;
    if (sb_privacy_redact(p, text, len, SB_PII_PSEUDONYMIZE, &t, &s, &out, &n) == 0) {
        if (out[n] != 0) __builtin_trap();
        if (sb_privacy_restore(&t, out, n, true, &back, &bn) == 0) {
            if (s.n == t.n && !has_bracket(data + 1, len) && (bn != len || memcmp(back, text, len)))
                __builtin_trap();
            sb_free(back);
        }
        sb_free(out);
    }
    sb_pii_table_free(&t);
    if (sb_privacy_redact(p, text, len, flags & 1 ? SB_PII_MASK : SB_PII_TAG, NULL, NULL, &out, &n) == 0)
        sb_free(out);
    sb_pii_spans_free(&s);
    sb_privacy_free(p);
    return 0;
}
