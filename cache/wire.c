/* wire.c - the cache's wire format: entries as JSON objects (export lines,
 * sync bodies), base64 for the stored bytes, and typed reads of a parsed
 * object. Parsing itself is common/json.c's strict reader: the input
 * arrives over the network, and one reader means one set of rules.
 */
#include "cache_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ buffer */

static int buf_reserve(sbc_buf *b, size_t extra) {
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) { b->oom = 1; return -1; }
        cap *= 2;
    }
    char *p = sb_realloc(b->p, cap);
    if (!p) { b->oom = 1; return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

void sbc_buf_add(sbc_buf *b, const void *data, size_t n) {
    if (buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void sbc_buf_str(sbc_buf *b, const char *s) { sbc_buf_add(b, s, strlen(s)); }

void sbc_buf_printf(sbc_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof small) { sbc_buf_add(b, small, (size_t)n); return; }
    if (buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sbc_buf_free(sbc_buf *b) {
    sb_free(b->p);
    memset(b, 0, sizeof *b);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static size_t utf8_valid_len(const uint8_t *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t c = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return len;
}

void sbc_buf_json_str(sbc_buf *b, const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    sbc_buf_add(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        uint8_t ch = s[i];
        if (ch == '"' || ch == '\\') { char e[2] = { '\\', (char)ch }; sbc_buf_add(b, e, 2); i++; }
        else if (ch == '\n') { sbc_buf_add(b, "\\n", 2); i++; }
        else if (ch == '\r') { sbc_buf_add(b, "\\r", 2); i++; }
        else if (ch == '\t') { sbc_buf_add(b, "\\t", 2); i++; }
        else if (ch < 0x20) { sbc_buf_printf(b, "\\u%04x", ch); i++; }
        else {
            size_t len = utf8_valid_len(s + i, n - i);
            if (len) { sbc_buf_add(b, s + i, len); i += len; }
            else { sbc_buf_add(b, "\xEF\xBF\xBD", 3); i++; }
        }
    }
    sbc_buf_add(b, "\"", 1);
}

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void sbc_buf_base64(sbc_buf *b, const void *data, size_t n) {
    const uint8_t *p = data;
    if (buf_reserve(b, (n + 2) / 3 * 4)) return;
    char *o = b->p + b->len;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = b64chars[v >> 18]; *o++ = b64chars[(v >> 12) & 63];
        *o++ = b64chars[(v >> 6) & 63]; *o++ = b64chars[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *o++ = b64chars[v >> 18]; *o++ = b64chars[(v >> 12) & 63];
        *o++ = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
}

int sbc_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    if (n % 4) return SB_EFORMAT;
    uint8_t *o = sb_malloc(n / 4 * 3 + 1);
    if (!o) return SB_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            char ch = s[i + (size_t)j];
            const char *pos = ch ? strchr(b64chars, ch) : NULL;
            if (ch == '=' && i + 4 == n && j >= 2) { pad++; v <<= 6; continue; }
            if (!pos || pad) { sb_free(o); return SB_EFORMAT; }
            v = v << 6 | (uint32_t)(pos - b64chars);
        }
        o[k++] = (uint8_t)(v >> 16);
        if (pad < 2) o[k++] = (uint8_t)(v >> 8);
        if (pad < 1) o[k++] = (uint8_t)v;
    }
    o[k] = 0;
    *out = o;
    *out_len = k;
    return SB_OK;
}

void sbc_buf_entry_json(sbc_buf *b, const sb_cache_entry *e) {
    sbc_buf_printf(b, "{\"key\":\"%s\",\"namespace\":", e->key);
    sbc_buf_json_str(b, e->ns, strlen(e->ns));
    sbc_buf_str(b, ",\"fingerprint\":");
    sbc_buf_json_str(b, e->fingerprint, strlen(e->fingerprint));
    sbc_buf_str(b, ",\"input\":");
    sbc_buf_json_str(b, e->input, strlen(e->input));
    sbc_buf_str(b, ",\"params\":");
    sbc_buf_json_str(b, e->params, strlen(e->params));
    sbc_buf_str(b, ",\"response_b64\":\"");
    sbc_buf_base64(b, e->response, e->response_len);
    sbc_buf_printf(b, "\",\"created_ms\":%lld,\"last_hit_ms\":%lld,\"local_hits\":%lld,"
                   "\"global_hits\":%lld,\"ttl_s\":%lld,\"origin\":\"%s\",\"pinned\":%s}",
                   (long long)e->created_ms, (long long)e->last_hit_ms, (long long)e->local_hits,
                   (long long)e->global_hits, (long long)e->ttl_s,
                   e->origin == SB_CACHE_ORIGIN_CLOUD ? "cloud" : "local",
                   e->pinned ? "true" : "false");
}

/* ------------------------------------------------------------ reader */

int sbc_json_str(const sb_json *obj, const char *key, const char **out) {
    const sb_json *v = sb_json_get(obj, key);
    if (!v) return SB_ENOTFOUND;
    if (sb_json_type_of(v) != SB_JSON_STRING) return SB_EFORMAT;
    *out = sb_json_str(v);
    return SB_OK;
}

int sbc_json_int(const sb_json *obj, const char *key, int64_t *out) {
    const sb_json *v = sb_json_get(obj, key);
    if (!v) return SB_ENOTFOUND;
    if (sb_json_type_of(v) != SB_JSON_NUMBER) return SB_EFORMAT;
    double d = trunc(sb_json_num(v));
    /* Converting a double outside int64_t's range is undefined. */
    if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) return SB_EFORMAT;
    *out = (int64_t)d;
    return SB_OK;
}
