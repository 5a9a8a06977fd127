/* wire.c - the cache's wire format: entries as JSON objects (export lines,
 * sync bodies), base64 for the stored bytes, and typed reads of a parsed
 * object. Parsing itself is common/json.c's strict reader: the input
 * arrives over the network, and one reader means one set of rules.
 */
#include "cache/cache_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ------------------------------------------------------------ writer */

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void sbc_base64_encode(sb_jw *b, const void *data, size_t n) {
    const uint8_t *p = data;
    char o[4096];                   /* 1024 groups per append */
    size_t k = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        o[k++] = b64chars[v >> 18]; o[k++] = b64chars[(v >> 12) & 63];
        o[k++] = b64chars[(v >> 6) & 63]; o[k++] = b64chars[v & 63];
        if (k == sizeof o) { sb_jw_raw(b, o, k); k = 0; }
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        o[k++] = b64chars[v >> 18]; o[k++] = b64chars[(v >> 12) & 63];
        o[k++] = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        o[k++] = '=';
    }
    sb_jw_raw(b, o, k);
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

void sbc_entry_json(sb_jw *b, const sb_cache_entry *e) {
    sb_jw_obj(b);
    sb_jw_key(b, "key"); sb_jw_str(b, e->key);
    sb_jw_key(b, "namespace"); sb_jw_str(b, e->ns);
    sb_jw_key(b, "fingerprint"); sb_jw_str(b, e->fingerprint);
    sb_jw_key(b, "input"); sb_jw_str(b, e->input);
    sb_jw_key(b, "params"); sb_jw_str(b, e->params);
    sb_jw b64 = { 0 };
    sbc_base64_encode(&b64, e->response, e->response_len);
    if (b64.oom) b->oom = 1;
    sb_jw_key(b, "response_b64"); sb_jw_strn(b, b64.p ? b64.p : "", b64.len);
    sb_jw_free(&b64);
    sb_jw_key(b, "created_ms"); sb_jw_int(b, e->created_ms);
    sb_jw_key(b, "last_hit_ms"); sb_jw_int(b, e->last_hit_ms);
    sb_jw_key(b, "local_hits"); sb_jw_int(b, e->local_hits);
    sb_jw_key(b, "global_hits"); sb_jw_int(b, e->global_hits);
    sb_jw_key(b, "ttl_s"); sb_jw_int(b, e->ttl_s);
    sb_jw_key(b, "origin"); sb_jw_str(b, e->origin == SB_CACHE_ORIGIN_CLOUD ? "cloud" : "local");
    sb_jw_key(b, "pinned"); sb_jw_bool(b, e->pinned);
    sb_jw_obj_end(b);
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

int sbc_new_id(char out[33]) {
    uint8_t r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return -1;
    sb_hex_encode(r, sizeof r, out);
    return 0;
}
