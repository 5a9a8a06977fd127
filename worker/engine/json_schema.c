/* json_schema.c - a JSON Schema subset compiled into a byte grammar
 * (sb_grammar.h; the subset and its limits are in docs/GRAMMAR.md).
 *
 * The grammar writes what a model may emit, not everything the schema
 * accepts: properties come in the schema's order, no property outside
 * "properties" is ever written (additionalProperties false or not),
 * whitespace is "", " " or a newline and up to 16 spaces, numbers have at
 * most 16 integer and 15 fraction digits, strings are valid UTF-8 with no
 * \u surrogate escapes. Every document in that language validates against
 * the schema; anything the compiler cannot promise that for is an error
 * naming the keyword and where it is ("$.properties.n: unsupported keyword
 * 'minimum'"), never a silently weaker grammar.
 */
#include <stdio.h>
#include <string.h>

#include "worker/engine/sb_grammar.h"
#include "common/sb_json.h"

#define MAX_UNROLL 4096     /* maxLength / maxItems / {n,m} copies a grammar may hold */
#define WS_INDENT  16       /* spaces after a newline between tokens */

typedef struct {
    sb_grammar *g;
    char       *err;
    char        path[512];
    /* shared rules, created on first use (-1 before) */
    int ws, comma, chr, u8, chars, number, integer, any, any_obj;
} sc;

static int fail(sc *c, const char *fmt, const char *a) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, a);
    return sb_seterr(c->err, SB_EINVAL, "%s: %s", c->path, msg);
}

static size_t path_push(sc *c, const char *fmt, const char *a) {
    size_t mark = strlen(c->path);
    snprintf(c->path + mark, sizeof c->path - mark, fmt, a);
    return mark;
}

static int rule_of(sc *c, sb_gseq *s) { return sb_gram_rule_seq(c->g, s); }

static int rule_lit(sc *c, const char *lit) {
    sb_gseq s = { 0 };
    sb_gseq_lit(&s, lit, strlen(lit));
    int r = rule_of(c, &s);
    sb_gseq_free(&s);
    return r;
}

static int repeat_rule(sc *c, int item, int sep, int k) { return sb_gram_repeat(c->g, item, sep, k); }

/* ---- shared rules ---- */

static int ws_rule(sc *c) {
    if (c->ws >= 0) return c->ws;
    sb_gseq s = { 0 };
    int sp = rule_lit(c, " ");
    int indent = repeat_rule(c, sp, -1, WS_INDENT);
    c->ws = sb_gram_rule(c->g);
    sb_gram_alt(c->g, c->ws, &s);
    sb_gseq_byte(&s, ' ');
    sb_gram_alt(c->g, c->ws, &s);
    sb_gseq_byte(&s, '\n');
    sb_gseq_ref(&s, indent);
    sb_gram_alt(c->g, c->ws, &s);
    sb_gseq_free(&s);
    return c->ws;
}

/* One alternative per shape of a valid UTF-8 multi-byte sequence (RFC 3629
 * table 3-7: no overlongs, no surrogates, nothing above U+10FFFF). */
static void add_u8_alts(sb_grammar *g, int r) {
    static const unsigned char u8[][4][2] = {
        { { 0xC2, 0xDF }, { 0x80, 0xBF } },
        { { 0xE0, 0xE0 }, { 0xA0, 0xBF }, { 0x80, 0xBF } },
        { { 0xE1, 0xEC }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xED, 0xED }, { 0x80, 0x9F }, { 0x80, 0xBF } },
        { { 0xEE, 0xEF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF0, 0xF0 }, { 0x90, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF1, 0xF3 }, { 0x80, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF4, 0xF4 }, { 0x80, 0x8F }, { 0x80, 0xBF }, { 0x80, 0xBF } },
    };
    sb_gseq s = { 0 };
    for (size_t i = 0; i < SB_ARRAY_LEN(u8); i++) {
        for (int k = 0; k < 4 && u8[i][k][0]; k++) sb_gseq_range(&s, u8[i][k][0], u8[i][k][1]);
        sb_gram_alt(g, r, &s);
    }
    sb_gseq_free(&s);
}

static int u8_rule(sc *c) {
    if (c->u8 < 0) {
        c->u8 = sb_gram_rule(c->g);
        add_u8_alts(c->g, c->u8);
    }
    return c->u8;
}

/* A JSON string character as written: printable ASCII but '"' and '\',
 * an escape (\u without surrogates), or one valid UTF-8 multi-byte
 * sequence - so a character split across tokens is still checked. */
static int chr_rule(sc *c) {
    if (c->chr >= 0) return c->chr;
    sb_grammar *g = c->g;
    sb_gseq s = { 0 };
    int r = c->chr = sb_gram_rule(g);
    uint8_t set[32] = { 0 };
    for (int b = 0x20; b < 0x80; b++)
        if (b != '"' && b != '\\') set[b >> 3] |= (uint8_t)(1 << (b & 7));
    sb_gseq_set(g, &s, set);
    sb_gram_alt(g, r, &s);
    memset(set, 0, sizeof set);
    for (const char *e = "\"\\/bfnrt"; *e; e++) set[(unsigned char)*e >> 3] |= (uint8_t)(1 << (*e & 7));
    sb_gseq_byte(&s, '\\');
    sb_gseq_set(g, &s, set);
    sb_gram_alt(g, r, &s);
    uint8_t hex[32] = { 0 }, hex_nd[32] = { 0 };
    for (const char *h = "0123456789abcdefABCDEF"; *h; h++) {
        hex[(unsigned char)*h >> 3] |= (uint8_t)(1 << (*h & 7));
        if (*h != 'd' && *h != 'D') hex_nd[(unsigned char)*h >> 3] |= (uint8_t)(1 << (*h & 7));
    }
    for (int surrogate_free = 0; surrogate_free < 2; surrogate_free++) {
        sb_gseq_lit(&s, "\\u", 2);
        if (surrogate_free) { sb_gseq_set(g, &s, hex_nd); sb_gseq_set(g, &s, hex); }
        else { sb_gseq_set(g, &s, (uint8_t[32]){ ['D' >> 3] = 1 << ('D' & 7), ['d' >> 3] = 1 << ('d' & 7) });
               sb_gseq_range(&s, '0', '7'); }
        sb_gseq_set(g, &s, hex);
        sb_gseq_set(g, &s, hex);
        sb_gram_alt(g, r, &s);
    }
    add_u8_alts(g, r);
    sb_gseq_free(&s);
    return r;
}

/* "..." with between lo and hi characters (hi < 0: no bound). */
static int string_rule(sc *c, int lo, int hi) {
    if (lo == 0 && hi < 0 && c->chars >= 0) return c->chars;
    int ch = chr_rule(c);
    int tail = repeat_rule(c, ch, -1, hi < 0 ? -1 : hi - lo);
    sb_gseq s = { 0 };
    sb_gseq_byte(&s, '"');
    for (int i = 0; i < lo; i++) sb_gseq_ref(&s, ch);
    sb_gseq_ref(&s, tail);
    sb_gseq_byte(&s, '"');
    int r = rule_of(c, &s);
    sb_gseq_free(&s);
    if (lo == 0 && hi < 0) c->chars = r;
    return r;
}

/* -?(0|[1-9][0-9]{0,15}), then for numbers (\.[0-9]{1,15})?([eE][-+]?[0-9]{1,3})? */
static int number_rule(sc *c, int integer) {
    int *cached = integer ? &c->integer : &c->number;
    if (*cached >= 0) return *cached;
    sb_gseq s = { 0 };
    int digit = sb_gram_rule(c->g);
    sb_gseq_range(&s, '0', '9');
    sb_gram_alt(c->g, digit, &s);
    int sign = sb_gram_rule(c->g);
    sb_gram_alt(c->g, sign, &s);
    sb_gseq_byte(&s, '-');
    sb_gram_alt(c->g, sign, &s);
    int ipart = sb_gram_rule(c->g);
    sb_gseq_byte(&s, '0');
    sb_gram_alt(c->g, ipart, &s);
    sb_gseq_range(&s, '1', '9');
    sb_gseq_ref(&s, repeat_rule(c, digit, -1, 15));
    sb_gram_alt(c->g, ipart, &s);
    sb_gseq_ref(&s, sign);
    sb_gseq_ref(&s, ipart);
    if (!integer) {
        int frac = sb_gram_rule(c->g), exp = sb_gram_rule(c->g), esign = sb_gram_rule(c->g);
        sb_gseq t = { 0 };
        sb_gram_alt(c->g, frac, &t);
        sb_gseq_byte(&t, '.');
        sb_gseq_ref(&t, digit);
        sb_gseq_ref(&t, repeat_rule(c, digit, -1, 14));
        sb_gram_alt(c->g, frac, &t);
        sb_gram_alt(c->g, esign, &t);
        sb_gseq_range(&t, '+', '+');
        sb_gram_alt(c->g, esign, &t);
        sb_gseq_byte(&t, '-');
        sb_gram_alt(c->g, esign, &t);
        sb_gram_alt(c->g, exp, &t);
        sb_gseq_set(c->g, &t, (uint8_t[32]){ ['e' >> 3] = 1 << ('e' & 7) | 1 << ('E' & 7) });
        sb_gseq_ref(&t, esign);
        sb_gseq_ref(&t, digit);
        sb_gseq_ref(&t, repeat_rule(c, digit, -1, 1));     /* 2 digits: up to 1e115, never out of range */
        sb_gram_alt(c->g, exp, &t);
        sb_gseq_free(&t);
        sb_gseq_ref(&s, frac);
        sb_gseq_ref(&s, exp);
    }
    *cached = rule_of(c, &s);
    sb_gseq_free(&s);
    return *cached;
}

/* ws "," ws: between array items and object members. */
static int comma_rule(sc *c) {
    if (c->comma >= 0) return c->comma;
    int ws = ws_rule(c);
    sb_gseq s = { 0 };
    sb_gseq_ref(&s, ws);
    sb_gseq_byte(&s, ',');
    sb_gseq_ref(&s, ws);
    c->comma = rule_of(c, &s);
    sb_gseq_free(&s);
    return c->comma;
}

/* open ws close | open ws item (, item){lo-1..hi-1} ws close: arrays, and
 * objects as lists of members. */
static int list_rule(sc *c, char open, int item, int lo, int hi, char close) {
    int ws = ws_rule(c), comma = comma_rule(c);
    sb_gseq s = { 0 };
    int r = sb_gram_rule(c->g);
    if (lo == 0) {
        sb_gseq_byte(&s, (unsigned char)open);
        sb_gseq_ref(&s, ws);
        sb_gseq_byte(&s, (unsigned char)close);
        sb_gram_alt(c->g, r, &s);
    }
    if (hi != 0) {
        int first = SB_MAX(lo, 1);
        int tail = repeat_rule(c, item, comma, hi < 0 ? -1 : hi - first);
        sb_gseq_byte(&s, (unsigned char)open);
        sb_gseq_ref(&s, ws);
        sb_gseq_ref(&s, item);
        for (int i = 1; i < first; i++) { sb_gseq_ref(&s, comma); sb_gseq_ref(&s, item); }
        sb_gseq_ref(&s, tail);
        sb_gseq_ref(&s, ws);
        sb_gseq_byte(&s, (unsigned char)close);
        sb_gram_alt(c->g, r, &s);
    }
    sb_gseq_free(&s);
    return r;
}

/* Any JSON value (an empty schema, an array without items); any_obj is
 * any object (one without properties). Recursive through v. */
static int any_rule(sc *c) {
    if (c->any >= 0) return c->any;
    int v = c->any = sb_gram_rule(c->g);
    int ws = ws_rule(c), str = string_rule(c, 0, -1);
    sb_gseq s = { 0 };
    sb_gseq_ref(&s, str);
    sb_gseq_ref(&s, ws);
    sb_gseq_byte(&s, ':');
    sb_gseq_ref(&s, ws);
    sb_gseq_ref(&s, v);
    int member = rule_of(c, &s);
    c->any_obj = list_rule(c, '{', member, 0, -1, '}');
    const int alts[] = { c->any_obj, list_rule(c, '[', v, 0, -1, ']'), str, number_rule(c, 0),
                         rule_lit(c, "true"), rule_lit(c, "false"), rule_lit(c, "null") };
    for (size_t i = 0; i < SB_ARRAY_LEN(alts); i++) {
        sb_gseq_ref(&s, alts[i]);
        sb_gram_alt(c->g, v, &s);
    }
    sb_gseq_free(&s);
    return v;
}


/* ---- schema nodes ---- */

static int node(sc *c, const sb_json *s, int *out);

static int get_count(sc *c, const sb_json *s, const char *key, int dflt, int *out) {
    const sb_json *v = sb_json_get(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!sb_json_is_int(v, 0, MAX_UNROLL)) {
        char what[80];
        snprintf(what, sizeof what, "'%s' must be an integer in 0..%d", key, MAX_UNROLL);
        return fail(c, "%s", what);
    }
    *out = (int)sb_json_num(v);
    return 0;
}

/* A literal JSON value (enum member, const) as one rule. */
static int value_lit(sc *c, const sb_json *v) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_value(&w, v);
    int r = w.oom ? -1 : rule_lit(c, w.p);
    sb_jw_free(&w);
    return r;
}

static int type_matches(const char *type, const sb_json *v) {
    sb_json_type t = sb_json_type_of(v);
    if (!type) return 1;
    if (!strcmp(type, "integer")) return sb_json_is_int(v, INT64_MIN, INT64_MAX);
    return !strcmp(type, t == SB_JSON_NUMBER ? "number" : sb_json_type_name(t));
}

static int enum_rule(sc *c, const sb_json *s, const char *type, int *out) {
    const sb_json *cst = sb_json_get(s, "const"), *en = sb_json_get(s, "enum");
    if (en && sb_json_type_of(en) != SB_JSON_ARRAY) return fail(c, "%s", "'enum' must be an array");
    int r = sb_gram_rule(c->g), n = 0;
    sb_gseq q = { 0 };
    size_t count = cst ? 1 : sb_json_len(en);
    for (size_t i = 0; i < count; i++) {
        const sb_json *v = cst ? cst : sb_json_at(en, i);
        if (!type_matches(type, v)) continue;
        sb_gseq_ref(&q, value_lit(c, v));
        sb_gram_alt(c->g, r, &q);
        n++;
    }
    sb_gseq_free(&q);
    if (!n) return fail(c, "%s", cst ? "'const' does not match 'type'" : "no 'enum' value matches 'type'");
    *out = r;
    return 0;
}

static int object_rule(sc *c, const sb_json *s, int *out) {
    const sb_json *props = sb_json_get(s, "properties"), *req = sb_json_get(s, "required"),
                  *addl = sb_json_get(s, "additionalProperties");
    if (addl && sb_json_type_of(addl) != SB_JSON_BOOL)
        return fail(c, "%s", "unsupported keyword 'additionalProperties' (only true or false)");
    if (props && sb_json_type_of(props) != SB_JSON_OBJECT) return fail(c, "%s", "'properties' must be an object");
    if (req && sb_json_type_of(req) != SB_JSON_ARRAY) return fail(c, "%s", "'required' must be an array");
    const size_t n = sb_json_len(props);
    for (size_t i = 0; i < sb_json_len(req); i++) {
        const sb_json *k = sb_json_at(req, i);
        if (sb_json_type_of(k) != SB_JSON_STRING) return fail(c, "%s", "'required' must hold strings");
        if (!sb_json_get(props, sb_json_str(k)))
            return fail(c, "required property '%s' is not in 'properties'", sb_json_str(k));
    }
    if (!props && !(addl && !sb_json_bool(addl))) {
        any_rule(c);
        *out = c->any_obj;
        return 0;
    }
    int ws = ws_rule(c), comma = comma_rule(c);
    /* first[i]: properties i.. with none written yet; rest[i]: after one. */
    int first = rule_lit(c, ""), rest = rule_lit(c, "");
    sb_gseq q = { 0 };
    int rc = 0;
    for (size_t k = n; k-- > 0 && rc == 0;) {
        const char *key = sb_json_key_at(props, k);
        int required = 0;
        for (size_t i = 0; i < sb_json_len(req); i++)
            if (!strcmp(sb_json_str(sb_json_at(req, i)), key)) required = 1;
        size_t mark = path_push(c, ".properties.%s", key);
        int val;
        rc = node(c, sb_json_val_at(props, k), &val);
        c->path[mark] = 0;
        if (rc) break;
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_str(&w, key);
        if (w.oom) { sb_jw_free(&w); rc = SB_ENOMEM; break; }
        sb_gseq_lit(&q, w.p, w.len);
        sb_jw_free(&w);
        sb_gseq_ref(&q, ws);
        sb_gseq_byte(&q, ':');
        sb_gseq_ref(&q, ws);
        sb_gseq_ref(&q, val);
        int kv = rule_of(c, &q);
        int nf = sb_gram_rule(c->g), nr = sb_gram_rule(c->g);
        sb_gseq_ref(&q, kv);
        sb_gseq_ref(&q, rest);
        sb_gram_alt(c->g, nf, &q);
        sb_gseq_ref(&q, comma);
        sb_gseq_ref(&q, kv);
        sb_gseq_ref(&q, rest);
        sb_gram_alt(c->g, nr, &q);
        if (!required) {
            sb_gseq_ref(&q, first);
            sb_gram_alt(c->g, nf, &q);
            sb_gseq_ref(&q, rest);
            sb_gram_alt(c->g, nr, &q);
        }
        first = nf;
        rest = nr;
    }
    if (rc == 0) {
        sb_gseq_byte(&q, '{');
        sb_gseq_ref(&q, ws);
        sb_gseq_ref(&q, first);
        sb_gseq_ref(&q, ws);
        sb_gseq_byte(&q, '}');
        *out = rule_of(c, &q);
    }
    sb_gseq_free(&q);
    return rc;
}

static int typed_rule(sc *c, const sb_json *s, const char *type, int *out) {
    if (sb_json_get(s, "enum") || sb_json_get(s, "const")) return enum_rule(c, s, type, out);
    if (!strcmp(type, "string")) {
        int lo, hi, rc;
        if ((rc = get_count(c, s, "minLength", 0, &lo)) || (rc = get_count(c, s, "maxLength", -1, &hi))) return rc;
        if (hi >= 0 && hi < lo) return fail(c, "%s", "'maxLength' is below 'minLength'");
        const sb_json *pat = sb_json_get(s, "pattern");
        if (!pat) { *out = string_rule(c, lo, hi); return 0; }
        if (sb_json_type_of(pat) != SB_JSON_STRING) return fail(c, "%s", "'pattern' must be a string");
        if (lo > 0 || hi >= 0) return fail(c, "%s", "'pattern' together with 'minLength'/'maxLength' is unsupported");
        char msg[200];
        int rc2 = sb_pattern_compile(c->g, sb_json_str(pat), chr_rule(c), u8_rule(c), out, msg, sizeof msg);
        return rc2 == SB_EINVAL ? fail(c, "%s", msg) : rc2;
    }
    if (!strcmp(type, "integer") || !strcmp(type, "number")) { *out = number_rule(c, type[0] == 'i'); return 0; }
    if (!strcmp(type, "boolean")) {
        sb_gseq q = { 0 };
        *out = sb_gram_rule(c->g);
        sb_gseq_lit(&q, "true", 4);
        sb_gram_alt(c->g, *out, &q);
        sb_gseq_lit(&q, "false", 5);
        sb_gram_alt(c->g, *out, &q);
        sb_gseq_free(&q);
        return 0;
    }
    if (!strcmp(type, "null")) { *out = rule_lit(c, "null"); return 0; }
    if (!strcmp(type, "object")) return object_rule(c, s, out);
    if (!strcmp(type, "array")) {
        int lo, hi, item, rc;
        if ((rc = get_count(c, s, "minItems", 0, &lo)) || (rc = get_count(c, s, "maxItems", -1, &hi))) return rc;
        if (hi >= 0 && hi < lo) return fail(c, "%s", "'maxItems' is below 'minItems'");
        const sb_json *items = sb_json_get(s, "items");
        if (!items) item = any_rule(c);
        else {
            size_t mark = path_push(c, "%s", ".items");
            rc = node(c, items, &item);
            c->path[mark] = 0;
            if (rc) return rc;
        }
        *out = list_rule(c, '[', item, lo, hi, ']');
        return 0;
    }
    return fail(c, "unknown type '%s'", type);
}

static const char *const known_kw[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "enum", "const", "anyOf",
    /* annotations: no effect on validation */
    "title", "description", "$schema", "$id", "$comment", "default", "examples",
};

/* The type a schema without "type" stands for, from its keywords. */
static const char *implied_type(const sb_json *s) {
    if (sb_json_get(s, "properties") || sb_json_get(s, "required") || sb_json_get(s, "additionalProperties"))
        return "object";
    if (sb_json_get(s, "items") || sb_json_get(s, "minItems") || sb_json_get(s, "maxItems")) return "array";
    if (sb_json_get(s, "pattern") || sb_json_get(s, "minLength") || sb_json_get(s, "maxLength")) return "string";
    return NULL;
}

static int node(sc *c, const sb_json *s, int *out) {
    if (sb_json_type_of(s) == SB_JSON_BOOL) {
        if (!sb_json_bool(s)) return fail(c, "%s", "schema 'false' matches nothing");
        *out = any_rule(c);
        return 0;
    }
    if (sb_json_type_of(s) != SB_JSON_OBJECT) return fail(c, "%s", "a schema must be an object or a boolean");
    for (size_t i = 0; i < sb_json_len(s); i++) {
        const char *k = sb_json_key_at(s, i);
        size_t j = 0;
        while (j < SB_ARRAY_LEN(known_kw) && strcmp(known_kw[j], k)) j++;
        if (j == SB_ARRAY_LEN(known_kw)) return fail(c, "unsupported keyword '%s'", k);
    }
    const sb_json *any_of = sb_json_get(s, "anyOf"), *type = sb_json_get(s, "type");
    if (any_of) {
        if (sb_json_type_of(any_of) != SB_JSON_ARRAY || !sb_json_len(any_of))
            return fail(c, "%s", "'anyOf' must be a non-empty array");
        if (type || implied_type(s) || sb_json_get(s, "enum") || sb_json_get(s, "const"))
            return fail(c, "%s", "keywords beside 'anyOf' are unsupported (move them into each branch)");
        int r = sb_gram_rule(c->g);
        sb_gseq q = { 0 };
        for (size_t i = 0; i < sb_json_len(any_of); i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            size_t mark = path_push(c, ".anyOf[%s]", idx);
            int sub, rc = node(c, sb_json_at(any_of, i), &sub);
            c->path[mark] = 0;
            if (rc) { sb_gseq_free(&q); return rc; }
            sb_gseq_ref(&q, sub);
            sb_gram_alt(c->g, r, &q);
        }
        sb_gseq_free(&q);
        *out = r;
        return 0;
    }
    if (!type) {
        const char *t = implied_type(s);
        if (t) return typed_rule(c, s, t, out);
        if (sb_json_get(s, "enum") || sb_json_get(s, "const")) return enum_rule(c, s, NULL, out);
        *out = any_rule(c);
        return 0;
    }
    if (sb_json_type_of(type) == SB_JSON_STRING) return typed_rule(c, s, sb_json_str(type), out);
    if (sb_json_type_of(type) != SB_JSON_ARRAY || !sb_json_len(type))
        return fail(c, "%s", "'type' must be a string or a non-empty array of strings");
    int r = sb_gram_rule(c->g);
    sb_gseq q = { 0 };
    for (size_t i = 0; i < sb_json_len(type); i++) {
        int sub, rc = sb_json_type_of(sb_json_at(type, i)) != SB_JSON_STRING
                          ? fail(c, "%s", "'type' must be a string or a non-empty array of strings")
                          : typed_rule(c, s, sb_json_str(sb_json_at(type, i)), &sub);
        if (rc) { sb_gseq_free(&q); return rc; }
        sb_gseq_ref(&q, sub);
        sb_gram_alt(c->g, r, &q);
    }
    sb_gseq_free(&q);
    *out = r;
    return 0;
}

int sb_json_schema_rule(sb_grammar *g, const char *schema, size_t len, int *root, char *err) {
    sb_json_doc *doc = NULL;
    char perr[SB_ERR_LEN];
    int rc = sb_json_parse(schema, len, &doc, perr);
    if (rc) return rc == SB_ENOMEM ? sb_seterr(err, rc, "json schema: out of memory")
                                   : sb_seterr(err, SB_EINVAL, "json schema: not JSON: %s", perr);
    sc c = { .g = g, .err = err, .path = "$", .ws = -1, .comma = -1, .chr = -1, .u8 = -1, .chars = -1, .number = -1,
             .integer = -1, .any = -1, .any_obj = -1 };
    rc = node(&c, sb_json_root(doc), root);
    sb_json_doc_free(doc);
    return rc;
}

int sb_json_schema_compile(const char *schema, size_t len, sb_grammar **out, char *err) {
    *out = NULL;
    sb_grammar *g = NULL;
    int root = -1, rc = sb_gram_new(&g);
    if (rc == 0) rc = sb_json_schema_rule(g, schema, len, &root, err);
    if (rc == 0) rc = sb_gram_finish(g, root, err);
    if (rc) {
        sb_grammar_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

#define MAX_SCHEMA_FILE (1u << 20)

int sb_json_schema_load(const char *arg, char **text, size_t *len, char *err) {
    const char *p = arg;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p != '{') return sb_read_file(arg, MAX_SCHEMA_FILE, text, len, err);
    *len = strlen(arg);
    if (!(*text = sb_malloc(*len + 1))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    memcpy(*text, arg, *len + 1);
    return 0;
}
