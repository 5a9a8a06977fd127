/* json.c - strict JSON (RFC 8259) parser and emitter for the gateway.
 *
 * Every HTTP body the router accepts comes from the network, so the parser
 * is strict and bounded: depth is capped (SB_JSON_MAX_DEPTH), every read is
 * checked against the end of the input, UTF-8 is validated, and the whole
 * tree lives in one arena that a single free releases. Errors name the line,
 * column and byte, which is what the client sees in the 400 body.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_json.h"
#include "common/sb_common.h"
#include "common/sb_utf8.h"

struct sb_json {
    sb_json_type type;
    bool b;
    double num;
    char *str;              /* string value */
    size_t len;             /* string bytes / items */
    sb_json *items;         /* array values or object values */
    char **keys;            /* object keys (NUL-terminated) */
    size_t *key_lens;
};

/* ---------------------------------------------------------------- arena */

typedef struct block { struct block *next; size_t used, cap; max_align_t data[]; } block;

struct sb_json_doc {
    block *blocks;
    sb_json root;
};

static void *arena_alloc(sb_json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 32768 ? n : 32768;
        b = sb_malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

void sb_json_doc_free(sb_json_doc *d) {
    if (!d) return;
    for (block *b = d->blocks, *n; b; b = n) {
        n = b->next;
        sb_free(b);
    }
    sb_free(d);
}

const sb_json *sb_json_root(const sb_json_doc *d) { return d ? &d->root : NULL; }

/* --------------------------------------------------------------- parser */

typedef struct {
    const unsigned char *s, *end, *start;
    sb_json_doc *doc;
    char *err;
    int failed;
    sb_bytes tmp;           /* scratch for string decoding, reused */
} parser;

static int fail(parser *p, const unsigned char *at, const char *what) {
    if (p->failed) return SB_EFORMAT;
    p->failed = 1;
    int line = 1, col = 1;
    for (const unsigned char *q = p->start; q < at && q < p->end; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    sb_seterr(p->err, SB_EFORMAT, "invalid JSON at line %d column %d (byte %zu): %s", line, col,
              (size_t)(at - p->start), what);
    return SB_EFORMAT;
}

static void skip_ws(parser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

static int hex4(const unsigned char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* p->s at the opening quote. On success *out is an arena copy. */
static int parse_string(parser *p, char **out, size_t *out_len) {
    const unsigned char *q = p->s + 1;
    p->tmp.n = 0;
    for (;;) {
        if (q >= p->end) return fail(p, q, "unterminated string");
        unsigned c = *q;
        if (c == '"') break;
        if (c < 0x20) return fail(p, q, "control character in a string (escape it)");
        if (c == '\\') {
            if (q + 1 >= p->end) return fail(p, q, "unterminated escape");
            unsigned char e = q[1], lit;
            switch (e) {
            case '"': lit = '"'; break;
            case '\\': lit = '\\'; break;
            case '/': lit = '/'; break;
            case 'b': lit = '\b'; break;
            case 'f': lit = '\f'; break;
            case 'n': lit = '\n'; break;
            case 'r': lit = '\r'; break;
            case 't': lit = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (p->end - q < 6 || hex4(q + 2, &cp)) return fail(p, q, "bad \\u escape");
                q += 6;
                if (cp >= 0xdc00 && cp <= 0xdfff) return fail(p, q - 6, "lone low surrogate");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (p->end - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, &lo) || lo < 0xdc00 ||
                        lo > 0xdfff)
                        return fail(p, q - 6, "high surrogate without its low half");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    q += 6;
                }
                char u[4];
                if (sb_bytes_put(&p->tmp, u, sb_utf8_encode(cp, u))) return SB_ENOMEM;
                continue;
            }
            default: return fail(p, q, "unknown escape");
            }
            if (sb_bytes_put(&p->tmp, &lit, 1)) return SB_ENOMEM;
            q += 2;
            continue;
        }
        size_t k = sb_utf8_valid(q, (size_t)(p->end - q));
        if (!k) return fail(p, q, "invalid UTF-8");
        if (sb_bytes_put(&p->tmp, q, k)) return SB_ENOMEM;
        q += k;
    }
    size_t n = p->tmp.n;
    char *s = arena_alloc(p->doc, n + 1);
    if (!s) return SB_ENOMEM;
    if (n) memcpy(s, p->tmp.p, n);
    s[n] = '\0';
    *out = s;
    *out_len = n;
    p->s = q + 1;
    return 0;
}

static int parse_number(parser *p, sb_json *v) {
    const unsigned char *q = p->s, *begin = q;
    if (q < p->end && *q == '-') q++;
    if (q >= p->end) return fail(p, q, "truncated number");
    if (*q == '0') {
        q++;
        if (q < p->end && *q >= '0' && *q <= '9') return fail(p, q, "leading zero in a number");
    } else if (*q >= '1' && *q <= '9') {
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    } else {
        return fail(p, q, "expected a digit");
    }
    if (q < p->end && *q == '.') {
        q++;
        if (q >= p->end || *q < '0' || *q > '9') return fail(p, q, "expected a digit after '.'");
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < p->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < p->end && (*q == '+' || *q == '-')) q++;
        if (q >= p->end || *q < '0' || *q > '9') return fail(p, q, "expected a digit in the exponent");
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[64];
    size_t n = (size_t)(q - begin);
    if (n >= sizeof buf) return fail(p, begin, "number too long");
    memcpy(buf, begin, n);
    buf[n] = '\0';
    v->type = SB_JSON_NUMBER;
    v->num = strtod(buf, NULL);
    if (!isfinite(v->num)) return fail(p, begin, "number out of range");
    p->s = q;
    return 0;
}

static int literal(parser *p, const char *word, sb_json *v, sb_json_type t, bool b) {
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n)) return fail(p, p->s, "unexpected character");
    p->s += n;
    v->type = t;
    v->b = b;
    return 0;
}

static int key_cmp(const void *a, const void *b) {
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

static int parse_value(parser *p, sb_json *v, int depth);

/* Values of an array or object are collected on the heap, then moved into
 * the arena once their count is known. */
typedef struct { sb_json *v; char **k; size_t *kl; size_t n, cap; } collect;

static int collect_push(collect *c, int with_key) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        sb_json *nv = sb_realloc(c->v, cap * sizeof *nv);
        if (!nv) return -1;
        c->v = nv;
        if (with_key) {
            char **nk = sb_realloc(c->k, cap * sizeof *nk);
            if (!nk) return -1;
            c->k = nk;
            size_t *nl = sb_realloc(c->kl, cap * sizeof *nl);
            if (!nl) return -1;
            c->kl = nl;
        }
        c->cap = cap;
    }
    memset(&c->v[c->n], 0, sizeof c->v[0]);
    return 0;
}

static void collect_free(collect *c) {
    sb_free(c->v);
    sb_free(c->k);
    sb_free(c->kl);
}

static int finish_container(parser *p, collect *c, sb_json *v, int is_obj) {
    v->len = c->n;
    if (!c->n) return 0;
    v->items = arena_alloc(p->doc, c->n * sizeof *v->items);
    if (!v->items) return SB_ENOMEM;
    memcpy(v->items, c->v, c->n * sizeof *v->items);
    if (!is_obj) return 0;
    v->keys = arena_alloc(p->doc, c->n * sizeof *v->keys);
    v->key_lens = arena_alloc(p->doc, c->n * sizeof *v->key_lens);
    if (!v->keys || !v->key_lens) return SB_ENOMEM;
    memcpy(v->keys, c->k, c->n * sizeof *v->keys);
    memcpy(v->key_lens, c->kl, c->n * sizeof *v->key_lens);
    /* Duplicate keys: sorted copy, adjacent compare (O(n log n) whatever a
     * hostile body holds). Keys with embedded NULs compare by their prefix,
     * which only makes us stricter. */
    if (c->n > 1) {
        char **sorted = sb_malloc(c->n * sizeof *sorted);
        if (!sorted) return SB_ENOMEM;
        memcpy(sorted, c->k, c->n * sizeof *sorted);
        qsort(sorted, c->n, sizeof *sorted, key_cmp);
        for (size_t i = 1; i < c->n; i++)
            if (!strcmp(sorted[i - 1], sorted[i])) {
                char msg[160];
                snprintf(msg, sizeof msg, "duplicate key \"%.100s\"", sorted[i]);
                sb_free(sorted);
                return fail(p, p->s, msg);
            }
        sb_free(sorted);
    }
    return 0;
}

static int parse_container(parser *p, sb_json *v, int depth, int is_obj) {
    if (depth >= SB_JSON_MAX_DEPTH) return fail(p, p->s, "nested too deeply");
    const unsigned char close = is_obj ? '}' : ']';
    v->type = is_obj ? SB_JSON_OBJECT : SB_JSON_ARRAY;
    p->s++;
    collect c = {0};
    int rc = 0;
    skip_ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        return 0;
    }
    for (;;) {
        skip_ws(p);
        if (collect_push(&c, is_obj)) { rc = SB_ENOMEM; break; }
        if (is_obj) {
            if (p->s >= p->end || *p->s != '"') { rc = fail(p, p->s, "expected a string key"); break; }
            if ((rc = parse_string(p, &c.k[c.n], &c.kl[c.n]))) break;
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':') { rc = fail(p, p->s, "expected ':'"); break; }
            p->s++;
        }
        if ((rc = parse_value(p, &c.v[c.n], depth + 1))) break;
        c.n++;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') { p->s++; continue; }
        if (p->s < p->end && *p->s == close) { p->s++; break; }
        rc = fail(p, p->s, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    if (!rc) rc = finish_container(p, &c, v, is_obj);
    collect_free(&c);
    return rc;
}

static int parse_value(parser *p, sb_json *v, int depth) {
    skip_ws(p);
    if (p->s >= p->end) return fail(p, p->s, "unexpected end of input");
    switch (*p->s) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"': v->type = SB_JSON_STRING; return parse_string(p, &v->str, &v->len);
    case 't': return literal(p, "true", v, SB_JSON_BOOL, true);
    case 'f': return literal(p, "false", v, SB_JSON_BOOL, false);
    case 'n': return literal(p, "null", v, SB_JSON_NULL, false);
    default:
        if (*p->s == '-' || (*p->s >= '0' && *p->s <= '9')) return parse_number(p, v);
        return fail(p, p->s, "unexpected character");
    }
}

int sb_json_parse(const char *text, size_t len, sb_json_doc **out, char *err) {
    *out = NULL;
    sb_json_doc *d = sb_calloc(1, sizeof *d);
    if (!d) return sb_seterr(err, SB_ENOMEM, "out of memory");
    parser p = { (const unsigned char *)text, (const unsigned char *)text + len, (const unsigned char *)text,
                 d, err, 0, { 0 } };
    int rc = parse_value(&p, &d->root, 0);
    if (!rc) {
        skip_ws(&p);
        if (p.s != p.end) rc = fail(&p, p.s, "trailing characters after the value");
    }
    sb_free(p.tmp.p);
    if (rc) {
        if (rc == SB_ENOMEM) sb_seterr(err, SB_ENOMEM, "out of memory parsing JSON");
        sb_json_doc_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* ------------------------------------------------------------ accessors */

sb_json_type sb_json_type_of(const sb_json *v) { return v ? v->type : SB_JSON_NULL; }

const char *sb_json_type_name(sb_json_type t) {
    static const char *const names[] = { "null", "boolean", "number", "string", "array", "object" };
    return (unsigned)t < SB_ARRAY_LEN(names) ? names[t] : "?";
}

size_t sb_json_len(const sb_json *v) {
    return v && (v->type == SB_JSON_ARRAY || v->type == SB_JSON_OBJECT || v->type == SB_JSON_STRING) ? v->len : 0;
}

const sb_json *sb_json_at(const sb_json *a, size_t i) {
    return a && a->type == SB_JSON_ARRAY && i < a->len ? &a->items[i] : NULL;
}

const char *sb_json_key_at(const sb_json *o, size_t i) {
    return o && o->type == SB_JSON_OBJECT && i < o->len ? o->keys[i] : NULL;
}

const sb_json *sb_json_val_at(const sb_json *o, size_t i) {
    return o && o->type == SB_JSON_OBJECT && i < o->len ? &o->items[i] : NULL;
}

const sb_json *sb_json_get(const sb_json *o, const char *key) {
    if (!o || o->type != SB_JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < o->len; i++)
        if (o->key_lens[i] == kl && !memcmp(o->keys[i], key, kl)) return &o->items[i];
    return NULL;
}

const char *sb_json_str(const sb_json *v) { return v && v->type == SB_JSON_STRING ? v->str : NULL; }
double sb_json_num(const sb_json *v) { return v && v->type == SB_JSON_NUMBER ? v->num : 0; }
bool sb_json_bool(const sb_json *v) { return v && v->type == SB_JSON_BOOL && v->b; }

int sb_json_depth(const sb_json *v) {
    int d = 0;
    for (size_t i = 0; v && (v->type == SB_JSON_ARRAY || v->type == SB_JSON_OBJECT) && i < v->len; i++) {
        int k = sb_json_depth(&v->items[i]);
        if (k > d) d = k;
    }
    return v && (v->type == SB_JSON_ARRAY || v->type == SB_JSON_OBJECT) ? d + 1 : 0;
}

/* path is "" at the root; each level appends ".key" or "[i]" (truncated
 * when long: it only names the field in an error message). */
static bool find_nul(const sb_json *v, char *path, size_t n) {
    size_t at = strlen(path);
    if (v->type == SB_JSON_STRING) return memchr(v->str, '\0', v->len) != NULL;
    if (v->type != SB_JSON_ARRAY && v->type != SB_JSON_OBJECT) return false;
    for (size_t i = 0; i < v->len; i++) {
        if (v->type == SB_JSON_OBJECT)
            snprintf(path + at, n - at, "%s%s", at ? "." : "", v->keys[i]);
        else
            snprintf(path + at, n - at, "[%zu]", i);
        if ((v->type == SB_JSON_OBJECT && strlen(v->keys[i]) != v->key_lens[i]) || find_nul(&v->items[i], path, n))
            return true;
    }
    path[at] = '\0';
    return false;
}

bool sb_json_find_nul(const sb_json *v, char *path, size_t n) {
    if (!n) return false;
    path[0] = '\0';
    return v && find_nul(v, path, n);
}

bool sb_json_is_int(const sb_json *v, int64_t lo, int64_t hi) {
    if (!v || v->type != SB_JSON_NUMBER || v->num != floor(v->num)) return false;
    return v->num >= (double)lo && v->num <= (double)hi;
}

/* -------------------------------------------------------------- emitter */

void sb_jw_init(sb_jw *w) { memset(w, 0, sizeof *w); }
void sb_jw_free(sb_jw *w) { sb_free(w->p); sb_jw_init(w); }

void sb_jw_reset(sb_jw *w) {
    w->len = 0;
    w->oom = 0;
    w->comma = 0;
    w->depth = 0;
    w->after_key = 0;
    w->too_deep = 0;
    if (w->p) w->p[0] = '\0';
}

static int reserve(sb_jw *w, size_t extra) {
    size_t need;
    if (w->oom) return -1;
    if (sb_add_size(w->len, extra, &need) || sb_add_size(need, 1, &need) ||
        sb_grow(&w->p, &w->cap, need)) {
        w->oom = 1;
        return -1;
    }
    return 0;
}

void sb_jw_raw(sb_jw *w, const void *s, size_t n) {
    if (reserve(w, n)) return;
    if (n) memcpy(w->p + w->len, s, n);
    w->len += n;
    w->p[w->len] = '\0';
}

void sb_jw_rawf(sb_jw *w, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { w->oom = 1; return; }
    if ((size_t)n < sizeof small) { sb_jw_raw(w, small, (size_t)n); return; }
    if (reserve(w, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(w->p + w->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    w->len += (size_t)n;
}

static void put(sb_jw *w, const char *s) { sb_jw_raw(w, s, strlen(s)); }

/* The container at depth d (1..SB_JSON_MAX_DEPTH) keeps bit d-1 of comma. */
_Static_assert(SB_JSON_MAX_DEPTH <= 64, "sb_jw.comma has one bit per open container");

/* Before any value or key: the comma that separates it from its sibling. */
static void pre(sb_jw *w) {
    if (w->after_key) { w->after_key = 0; return; }
    if (w->depth > 0) {
        uint64_t bit = 1ull << (w->depth - 1);
        if (w->comma & bit) put(w, ",");
        w->comma |= bit;
    }
}

/* Deeper than the parser accepts is an error, not JSON without commas:
 * the whole output is dropped (sticky, like out of memory). */
static void open_c(sb_jw *w, const char *c) {
    if (w->depth >= SB_JSON_MAX_DEPTH) {
        w->too_deep = 1;
        w->oom = 1;
        return;
    }
    pre(w);
    put(w, c);
    w->depth++;
    w->comma &= ~(1ull << (w->depth - 1));
}

static void close_c(sb_jw *w, const char *c) {
    if (w->depth > 0) w->depth--;
    put(w, c);
}

void sb_jw_obj(sb_jw *w) { open_c(w, "{"); }
void sb_jw_obj_end(sb_jw *w) { close_c(w, "}"); }
void sb_jw_arr(sb_jw *w) { open_c(w, "["); }
void sb_jw_arr_end(sb_jw *w) { close_c(w, "]"); }

static void escaped(sb_jw *w, const char *s, size_t n) {
    const unsigned char *q = (const unsigned char *)s, *end = q + n;
    put(w, "\"");
    while (q < end) {
        const unsigned char *run = q;
        while (q < end && *q >= 0x20 && *q != '"' && *q != '\\' && *q < 0x80) q++;
        sb_jw_raw(w, (const char *)run, (size_t)(q - run));
        if (q >= end) break;
        unsigned c = *q;
        if (c >= 0x80) {
            size_t k = sb_utf8_valid(q, (size_t)(end - q));
            if (k) sb_jw_raw(w, (const char *)q, k);
            else put(w, "\xef\xbf\xbd");        /* U+FFFD */
            q += k ? k : 1;
            continue;
        }
        char e[8];
        switch (c) {
        case '"': put(w, "\\\""); break;
        case '\\': put(w, "\\\\"); break;
        case '\n': put(w, "\\n"); break;
        case '\r': put(w, "\\r"); break;
        case '\t': put(w, "\\t"); break;
        default: snprintf(e, sizeof e, "\\u%04x", c); put(w, e);
        }
        q++;
    }
    put(w, "\"");
}

/* A key of n bytes: parsed keys may hold an escaped NUL ("a\u0000b"). */
static void key_n(sb_jw *w, const char *key, size_t n) {
    pre(w);
    escaped(w, key, n);
    put(w, ":");
    w->after_key = 1;
}

void sb_jw_key(sb_jw *w, const char *key) { key_n(w, key, strlen(key)); }

void sb_jw_strn(sb_jw *w, const char *s, size_t n) { pre(w); escaped(w, s, n); }
void sb_jw_str(sb_jw *w, const char *s) {
    if (!s) { sb_jw_null(w); return; }
    sb_jw_strn(w, s, strlen(s));
}
void sb_jw_null(sb_jw *w) { pre(w); put(w, "null"); }
void sb_jw_bool(sb_jw *w, bool v) { pre(w); put(w, v ? "true" : "false"); }

void sb_jw_int(sb_jw *w, int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    pre(w);
    put(w, b);
}

void sb_jw_num(sb_jw *w, double v) {
    if (!isfinite(v)) { sb_jw_null(w); return; }
    char b[40];
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(b, sizeof b, "%.0f", v);
    } else {
        /* The fewest digits (15 to 17) that read back as the same double:
         * a value passed through (a seed, a tool argument) keeps its value. */
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(b, sizeof b, "%.*g", digits, v);
            if (strtod(b, NULL) == v) break;
        }
    }
    pre(w);
    put(w, b);
}

void sb_jw_fixed(sb_jw *w, double v, int decimals) {
    static const double scale[] = { 1, 10, 100, 1e3, 1e4, 1e5, 1e6 };
    if (decimals < 0) decimals = 0;
    if (decimals > 6) decimals = 6;
    double x = v * scale[decimals];
    /* Beyond int64 (or not a number): the exact writer. */
    if (!isfinite(x) || fabs(x) >= 9e18) { sb_jw_num(w, v); return; }
    long long q = llround(x);
    /* Trailing zeros dropped: 2.50 -> 2.5, 3.00 -> 3. */
    while (decimals > 0 && q % 10 == 0) { q /= 10; decimals--; }
    unsigned long long u = q < 0 ? 0ull - (unsigned long long)q : (unsigned long long)q;
    char b[32], *e = b + sizeof b, *p = e;
    int d = 0;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
        if (++d == decimals) *--p = '.';
    } while (u || d < decimals);
    if (d == decimals) *--p = '0';                      /* 0.25: the leading zero */
    if (q < 0) *--p = '-';
    pre(w);
    sb_jw_raw(w, p, (size_t)(e - p));
}

void sb_jw_value(sb_jw *w, const sb_json *v) {
    switch (sb_json_type_of(v)) {
    case SB_JSON_NULL: sb_jw_null(w); break;
    case SB_JSON_BOOL: sb_jw_bool(w, v->b); break;
    case SB_JSON_NUMBER: sb_jw_num(w, v->num); break;
    case SB_JSON_STRING: sb_jw_strn(w, v->str, v->len); break;
    case SB_JSON_ARRAY:
        sb_jw_arr(w);
        for (size_t i = 0; i < v->len; i++) sb_jw_value(w, &v->items[i]);
        sb_jw_arr_end(w);
        break;
    case SB_JSON_OBJECT:
        sb_jw_obj(w);
        for (size_t i = 0; i < v->len; i++) {
            key_n(w, v->keys[i], v->key_lens[i]);
            sb_jw_value(w, &v->items[i]);
        }
        sb_jw_obj_end(w);
        break;
    }
}

/* ------------------------------------------------------------ extraction */

const sb_json *sb_json_extract_object(const char *text, size_t len, sb_json_doc **doc) {
    *doc = NULL;
    for (size_t start = 0; start < len; start++) {
        if (text[start] != '{') continue;
        /* Find the matching brace, honouring strings, then try to parse. */
        int depth = 0, in_str = 0;
        for (size_t i = start; i < len; i++) {
            char c = text[i];
            if (in_str) {
                if (c == '\\') i++;
                else if (c == '"') in_str = 0;
                continue;
            }
            if (c == '"') in_str = 1;
            else if (c == '{') depth++;
            else if (c == '}' && --depth == 0) {
                sb_json_doc *d;
                if (sb_json_parse(text + start, i + 1 - start, &d, NULL) == 0) {
                    *doc = d;
                    return sb_json_root(d);
                }
                break;
            }
        }
    }
    return NULL;
}
