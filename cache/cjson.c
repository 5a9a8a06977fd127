/* cjson.c - the small JSON reader/writer and base64 the cache needs for
 * export/import lines and the sync protocol. Not a general JSON library:
 * numbers are integers (we only ever send counts and times), depth is capped,
 * and input is untrusted (it arrives over the network), so every read is
 * bounds-checked against the end of the buffer.
 */
#include "cache_internal.h"

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

typedef struct {
    const char *start, *p, *end;
    char *err;
    int depth;
} reader;

static int fail(reader *r, const char *what) {
    return sb_seterr(r->err, SB_EFORMAT, "JSON: %s at byte %ld", what, (long)(r->p - r->start));
}

static void skip_ws(reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int hex4(reader *r, uint32_t *v) {
    if (r->end - r->p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = *r->p++;
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 :
                ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

static void put_utf8(sbc_buf *b, uint32_t c) {
    char o[4];
    size_t n;
    if (c < 0x80) { o[0] = (char)c; n = 1; }
    else if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F)); n = 3;
    } else {
        o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); n = 4;
    }
    sbc_buf_add(b, o, n);
}

static int parse_string(reader *r, char **out, size_t *out_len) {
    sbc_buf b = { 0 };
    r->p++;                                     /* opening quote */
    while (r->p < r->end && *r->p != '"') {
        char ch = *r->p++;
        if ((unsigned char)ch < 0x20) { sbc_buf_free(&b); return fail(r, "control character in string"); }
        if (ch != '\\') { sbc_buf_add(&b, &ch, 1); continue; }
        if (r->p >= r->end) break;
        char e = *r->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            sbc_buf_add(&b, &map[simple - "\"\\/bfnrt"], 1);
        } else if (e == 'u') {
            uint32_t c, lo;
            if (hex4(r, &c)) { sbc_buf_free(&b); return fail(r, "bad \\u escape"); }
            if (c >= 0xD800 && c <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' &&
                r->p[1] == 'u') {
                r->p += 2;
                if (hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF) { sbc_buf_free(&b); return fail(r, "bad surrogate pair"); }
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
            } else if (c >= 0xD800 && c <= 0xDFFF) {
                c = 0xFFFD;
            }
            put_utf8(&b, c);
        } else {
            sbc_buf_free(&b);
            return fail(r, "bad escape");
        }
    }
    if (r->p >= r->end) { sbc_buf_free(&b); return fail(r, "unterminated string"); }
    r->p++;
    if (b.oom) { sbc_buf_free(&b); return SB_ENOMEM; }
    if (!b.p) { b.p = sb_malloc(1); if (!b.p) return SB_ENOMEM; b.p[0] = '\0'; }
    *out = b.p;
    *out_len = b.len;
    return SB_OK;
}

static int parse_value(reader *r, sbj **out);

static int parse_container(reader *r, sbj *node, char close) {
    if (++r->depth > SBJ_MAX_DEPTH) return fail(r, "nested too deep");
    r->p++;
    sbj **tail = &node->child;
    skip_ws(r);
    if (r->p < r->end && *r->p == close) { r->p++; r->depth--; return SB_OK; }
    for (;;) {
        char *key = NULL;
        size_t klen;
        skip_ws(r);
        if (close == '}') {
            if (r->p >= r->end || *r->p != '"') return fail(r, "expected a member name");
            int rc = parse_string(r, &key, &klen);
            if (rc) return rc;
            skip_ws(r);
            if (r->p >= r->end || *r->p != ':') { sb_free(key); return fail(r, "expected ':'"); }
            r->p++;
        }
        sbj *child = NULL;
        int rc = parse_value(r, &child);
        if (rc) { sb_free(key); sbj_free(child); return rc; }
        child->key = key;
        *tail = child;
        tail = &child->next;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') { r->p++; continue; }
        if (r->p < r->end && *r->p == close) { r->p++; r->depth--; return SB_OK; }
        return fail(r, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(reader *r, sbj **out) {
    skip_ws(r);
    if (r->p >= r->end) return fail(r, "unexpected end");
    sbj *n = sb_calloc(1, sizeof *n);
    if (!n) return SB_ENOMEM;
    *out = n;
    char ch = *r->p;
    size_t left = (size_t)(r->end - r->p);
    if (ch == '{') { n->type = SBJ_OBJ; return parse_container(r, n, '}'); }
    if (ch == '[') { n->type = SBJ_ARR; return parse_container(r, n, ']'); }
    if (ch == '"') { n->type = SBJ_STR; return parse_string(r, &n->str, &n->str_len); }
    if (left >= 4 && !memcmp(r->p, "true", 4)) { n->type = SBJ_BOOL; n->boolean = 1; r->p += 4; return SB_OK; }
    if (left >= 5 && !memcmp(r->p, "false", 5)) { n->type = SBJ_BOOL; r->p += 5; return SB_OK; }
    if (left >= 4 && !memcmp(r->p, "null", 4)) { n->type = SBJ_NULL; r->p += 4; return SB_OK; }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        char tmp[40];
        size_t k = 0;
        while (r->p < r->end && k < sizeof tmp - 1 && strchr("+-.eE0123456789", *r->p))
            tmp[k++] = *r->p++;
        tmp[k] = '\0';
        char *end;
        n->type = SBJ_NUM;
        n->num = strtoll(tmp, &end, 10);
        n->is_int = *end == '\0';
        if (!n->is_int) {
            double d = strtod(tmp, &end);
            if (*end) return fail(r, "bad number");
            /* Converting a double outside int64_t's range is undefined. */
            if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) return fail(r, "number out of range");
            n->num = (int64_t)d;
        }
        return SB_OK;
    }
    return fail(r, "unexpected character");
}

void sbj_free(sbj *j) {
    while (j) {
        sbj *next = j->next;
        sbj_free(j->child);
        sb_free(j->key);
        sb_free(j->str);
        sb_free(j);
        j = next;
    }
}

int sbj_parse(const char *text, size_t len, sbj **out, char *err) {
    reader r = { text, text, text + len, err, 0 };
    *out = NULL;
    sbj *root = NULL;
    int rc = parse_value(&r, &root);
    if (!rc) {
        skip_ws(&r);
        if (r.p != r.end) rc = fail(&r, "trailing characters");
    }
    if (rc) { sbj_free(root); return rc; }
    *out = root;
    return SB_OK;
}

const sbj *sbj_get(const sbj *obj, const char *key) {
    if (!obj || obj->type != SBJ_OBJ) return NULL;
    for (const sbj *c = obj->child; c; c = c->next)
        if (c->key && !strcmp(c->key, key)) return c;
    return NULL;
}

int sbj_get_str(const sbj *obj, const char *key, const char **out) {
    const sbj *v = sbj_get(obj, key);
    if (!v) return SB_ENOTFOUND;
    if (v->type != SBJ_STR) return SB_EFORMAT;
    *out = v->str;
    return SB_OK;
}

int sbj_get_int(const sbj *obj, const char *key, int64_t *out) {
    const sbj *v = sbj_get(obj, key);
    if (!v) return SB_ENOTFOUND;
    if (v->type != SBJ_NUM) return SB_EFORMAT;
    *out = v->num;
    return SB_OK;
}
