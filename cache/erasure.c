/* erasure.c - an erase by value, as every store of the fleet finds it
 * (docs/PRIVACY.md, "Erasure"): the value read into its normalised form,
 * and the keyed hash that carries it through the cloud tier to the other
 * edges instead of the value itself.
 *
 * Why a keyed hash: the erase is stored at the cloud until every edge has
 * taken it, and kept in flight on the wire; a bare SHA-256 of a mobile
 * number is reversed by trying the 10^10 numbers there are. The key is
 * derived from the cloud's admin token, which the operator who erases holds
 * and the cloud holds, and travels to the edges only in the signed sync
 * replies that carry an erase; it is never stored next to the hashes.
 *
 * A text holds the value when the detectors find in it an identifier whose
 * normalised value hashes to the erase's hash (every rendering they read:
 * spaced, Chinese numerals, English words), or, for a value that is a
 * number, when a run of ASCII digits in it contains a window of the value's
 * length that does (a longer number holding it: erasure errs towards
 * deleting more).
 */
#include "cache/cache_internal.h"

#include <stdio.h>
#include <string.h>

#define ERASE_KEY_LABEL "switchboard erase key v1"
#define ERASE_VALUE_LABEL "value\n"

void sb_erase_normalise(const sb_privacy *det, const char *v, sb_pii_spans *spans, char norm[SB_PII_VALUE_MAX]) {
    size_t len = strlen(v);
    if (!sb_privacy_detect(det, v, len, spans) && spans->n == 1) {
        snprintf(norm, SB_PII_VALUE_MAX, "%s", spans->v[0].value);
        return;
    }
    size_t n = 0;
    bool number = true;
    for (const char *p = v; *p && number; p++) {
        if (*p >= '0' && *p <= '9') { if (n + 1 < SB_PII_VALUE_MAX) norm[n++] = *p; }
        else number = strchr(" -+()", *p) != NULL;
    }
    norm[n] = '\0';
    if (!number || !n) snprintf(norm, SB_PII_VALUE_MAX, "%s", v);
}

bool sb_erase_value_portable(const sb_privacy *det, const char *norm, sb_pii_spans *spans) {
    size_t n = strlen(norm);
    if (n && strspn(norm, "0123456789") == n) return true;
    return !sb_privacy_detect(det, norm, n, spans) && spans->n == 1 && !strcmp(spans->v[0].value, norm);
}

void sb_erase_key(const char *admin_token, char out[SB_CACHE_KEY_HEX]) {
    uint8_t mac[SB_SHA256_LEN];
    sb_hmac_sha256(admin_token, strlen(admin_token), ERASE_KEY_LABEL, strlen(ERASE_KEY_LABEL), mac);
    sb_hex_encode(mac, sizeof mac, out);
}

static void value_mac(const char *key_hex, const char *v, size_t len, char out[SB_CACHE_KEY_HEX]) {
    const void *parts[] = { ERASE_VALUE_LABEL, v };
    const size_t lens[] = { strlen(ERASE_VALUE_LABEL), len };
    uint8_t mac[SB_SHA256_LEN];
    sb_hmac_sha256_parts(key_hex, strlen(key_hex), 2, parts, lens, mac);
    sb_hex_encode(mac, sizeof mac, out);
}

void sb_erase_value_mac(const char *key_hex, const char *norm, char out[SB_CACHE_KEY_HEX]) {
    value_mac(key_hex, norm, strlen(norm), out);
}

static bool is_hex64(const char *s) {
    if (!s || strlen(s) != SB_CACHE_KEY_HEX - 1) return false;
    return strspn(s, "0123456789abcdef") == SB_CACHE_KEY_HEX - 1;
}

int sb_erase_matcher_init(sb_erase_matcher *m, const sb_privacy *det, const char *key_hex, const char *mac_hex,
                          int64_t digits, char *err) {
    memset(m, 0, sizeof *m);
    if (!is_hex64(key_hex) || !is_hex64(mac_hex))
        return sb_seterr(err, SB_EINVAL, "erase: the key and the value's hash are 64 lower-case hex digits");
    if (digits < 0 || digits >= SB_PII_VALUE_MAX)
        return sb_seterr(err, SB_EINVAL, "erase: digits must be in [0, %d]", SB_PII_VALUE_MAX - 1);
    m->det = det;
    memcpy(m->key, key_hex, SB_CACHE_KEY_HEX);
    memcpy(m->mac, mac_hex, SB_CACHE_KEY_HEX);
    m->digits = (size_t)digits;
    return SB_OK;
}

void sb_erase_matcher_free(sb_erase_matcher *m) { sb_pii_spans_free(&m->spans); }

static bool mac_is(const sb_erase_matcher *m, const char *v, size_t len) {
    char got[SB_CACHE_KEY_HEX];
    value_mac(m->key, v, len, got);
    return sb_ct_equal(got, m->mac, SB_CACHE_KEY_HEX - 1);
}

bool sb_erase_matches(sb_erase_matcher *m, const char *text, size_t len) {
    if (m->digits) {
        for (size_t i = 0; i < len;) {
            if (text[i] < '0' || text[i] > '9') { i++; continue; }
            size_t run = i;
            while (run < len && text[run] >= '0' && text[run] <= '9') run++;
            for (size_t at = i; at + m->digits <= run; at++)
                if (mac_is(m, text + at, m->digits)) return true;
            i = run;
        }
    }
    /* Out of memory finding the spans: what was found is checked. */
    sb_privacy_detect(m->det, text, len, &m->spans);
    for (size_t i = 0; i < m->spans.n; i++)
        if (mac_is(m, m->spans.v[i].value, strlen(m->spans.v[i].value))) return true;
    return false;
}
