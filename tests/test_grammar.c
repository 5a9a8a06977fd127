/* test_grammar.c - JSON-Schema-constrained decoding (sb_grammar.h).
 *
 *  - the schema compiler: documents accepted and rejected, errors that name
 *    the keyword and its path;
 *  - the automaton against a small reference validator (parse with the
 *    router's strict JSON parser, then check the schema's rules) on random
 *    documents, valid and not;
 *  - the token mask on llama.cpp's SPM and BPE test vocabularies: at several
 *    positions (inside strings, mid-UTF-8 character, at the end) every token
 *    the mask allows extends the prefix and every token it forbids does not,
 *    checked by feeding each token's piece to a fresh matcher;
 *  - generation on the tiny fixture models (garbage unconstrained): every
 *    output parses and validates, with greedy and random sampling.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "worker/engine/sb_engine.h"
#include "worker/gguf/sb_gguf.h"
#include "worker/engine/sb_grammar.h"
#include "worker/engine/sb_pool.h"
#include "router/run/sb_run.h"

/* Every keyword of the subset; strings bounded so garbage models finish. */
static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"topic\":{\"type\":\"string\",\"maxLength\":8},"
    "\"n\":{\"type\":\"integer\"},"
    "\"x\":{\"type\":\"number\"},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"role\":{\"enum\":[\"user\",\"agent\",null,3]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"maxItems\":2},"
    "\"any\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}]}"
    "},\"required\":[\"topic\",\"n\"],\"additionalProperties\":false}";

static sb_grammar *compile(const char *schema) {
    sb_grammar *g = NULL;
    char err[SB_ERR_LEN] = "";
    if (sb_json_schema_compile(schema, strlen(schema), &g, err)) fail_msg("%s: %s", schema, err);
    return g;
}

/* A trie-less matcher is enough for byte-level checks: a trie of no tokens. */
typedef struct { sb_grammar *g; sb_tok_trie *t; sb_gmatch *m; sb_gguf *gg; sb_vocab *v; } rig;

static rig rig_bytes(const char *schema, const char *vocab_path) {
    rig r = { 0 };
    char err[SB_ERR_LEN] = "";
    r.g = compile(schema);
    const char *path = vocab_path ? vocab_path : "tests/data/vocab/ggml-vocab-llama-spm.gguf";
    if (sb_gguf_open(path, &r.gg, err) || sb_vocab_load(r.gg, &r.v, err) ||
        sb_tok_trie_new(r.v, sb_vocab_n_tokens(r.v), &r.t, err) || sb_gmatch_new(r.g, r.t, &r.m, err))
        fail_msg("%s", err);
    return r;
}

static void rig_free(rig *r) {
    sb_gmatch_free(r->m);
    sb_tok_trie_free(r->t);
    sb_grammar_free(r->g);
    sb_vocab_free(r->v);
    sb_gguf_close(r->gg);
}

static int accepts(sb_gmatch *m, const char *doc) {
    sb_gmatch_reset(m);
    return sb_gmatch_bytes(m, doc, strlen(doc)) == 0 && sb_gmatch_complete(m);
}

/* ---- a reference validator for the subset (no patterns) ---- */

static size_t codepoints(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int json_equal(const sb_json *a, const sb_json *b) {
    sb_json_type t = sb_json_type_of(a);
    if (t != sb_json_type_of(b)) return 0;
    if (t == SB_JSON_NULL) return 1;
    if (t == SB_JSON_BOOL) return sb_json_bool(a) == sb_json_bool(b);
    if (t == SB_JSON_NUMBER) return sb_json_num(a) == sb_json_num(b);
    if (t == SB_JSON_STRING) return sb_json_len(a) == sb_json_len(b) && !memcmp(sb_json_str(a), sb_json_str(b), sb_json_len(a));
    return 0;   /* containers are not used in enums here */
}

static int valid(const sb_json *v, const sb_json *s) {
    const sb_json *t;
    if ((t = sb_json_get(s, "anyOf"))) {
        for (size_t i = 0; i < sb_json_len(t); i++)
            if (valid(v, sb_json_at(t, i))) return 1;
        return 0;
    }
    if ((t = sb_json_get(s, "enum"))) {
        for (size_t i = 0; i < sb_json_len(t); i++)
            if (json_equal(v, sb_json_at(t, i))) return 1;
        return 0;
    }
    const char *type = sb_json_str(sb_json_get(s, "type"));
    sb_json_type vt = sb_json_type_of(v);
    if (!type) return 1;
    if (!strcmp(type, "null")) return vt == SB_JSON_NULL;
    if (!strcmp(type, "boolean")) return vt == SB_JSON_BOOL;
    if (!strcmp(type, "number")) return vt == SB_JSON_NUMBER;
    if (!strcmp(type, "integer")) return sb_json_is_int(v, INT64_MIN, INT64_MAX);
    if (!strcmp(type, "string")) {
        if (vt != SB_JSON_STRING) return 0;
        size_t n = codepoints(sb_json_str(v), sb_json_len(v));
        if ((t = sb_json_get(s, "maxLength")) && n > (size_t)sb_json_num(t)) return 0;
        if ((t = sb_json_get(s, "minLength")) && n < (size_t)sb_json_num(t)) return 0;
        return 1;
    }
    if (!strcmp(type, "array")) {
        if (vt != SB_JSON_ARRAY) return 0;
        if ((t = sb_json_get(s, "maxItems")) && sb_json_len(v) > (size_t)sb_json_num(t)) return 0;
        for (size_t i = 0; i < sb_json_len(v); i++)
            if (!valid(sb_json_at(v, i), sb_json_get(s, "items"))) return 0;
        return 1;
    }
    if (vt != SB_JSON_OBJECT) return 0;
    const sb_json *props = sb_json_get(s, "properties"), *req = sb_json_get(s, "required");
    for (size_t i = 0; i < sb_json_len(req); i++)
        if (!sb_json_get(v, sb_json_str(sb_json_at(req, i)))) return 0;
    for (size_t i = 0; i < sb_json_len(v); i++) {
        const sb_json *ps = sb_json_get(props, sb_json_key_at(v, i));
        if (!ps || !valid(sb_json_val_at(v, i), ps)) return 0;   /* additionalProperties: false */
    }
    return 1;
}

static int validates(const char *schema, const char *doc, size_t len) {
    sb_json_doc *sd = NULL, *dd = NULL;
    char err[SB_ERR_LEN];
    if (sb_json_parse(schema, strlen(schema), &sd, err)) fail_msg("schema: %s", err);
    int ok = sb_json_parse(doc, len, &dd, err) == 0 && valid(sb_json_root(dd), sb_json_root(sd));
    sb_json_doc_free(sd);
    sb_json_doc_free(dd);
    return ok;
}

/* ---- compiler: accepted and rejected documents ---- */

static void test_documents(void **state) {
    (void)state;
    rig r = rig_bytes(SCHEMA, NULL);
    static const char *const good[] = {
        "{\"topic\":\"hi\",\"n\":1}",
        "{\"topic\":\"\",\"n\":-20,\"x\":1.5e-3,\"ok\":false,\"role\":null,\"tags\":[],\"any\":\"ab\"}",
        "{ \"topic\" : \"\\u00e9\\\"\\n\", \"n\": 0 }",
        "{\n  \"topic\": \"\xc3\xa9t\xc3\xa9\",\n  \"n\": 7,\n  \"tags\": [\"a\", \"\xe2\x82\xac\"]\n}",
        "{\"topic\":\"12345678\",\"n\":3,\"role\":3}",
        "{\"topic\":\"x\",\"n\":1,\"role\":\"agent\",\"any\":null}",
    };
    static const char *const bad[] = {
        "{\"n\":1}",                                        /* required topic */
        "{\"topic\":\"hi\",\"n\":1,\"role\":\"admin\"}",    /* not in enum */
        "{\"topic\":\"hi\",\"n\":1,\"extra\":1}",           /* additionalProperties false */
        "{\"topic\":\"123456789\",\"n\":1}",                /* maxLength 8 */
        "{\"topic\":\"hi\",\"n\":1.5}",                     /* integer */
        "{\"topic\":\"hi\",\"n\":01}",                      /* leading zero */
        "{\"topic\":\"hi\",\"n\":1,\"tags\":[\"a\",\"b\",\"c\"]}",   /* maxItems */
        "{\"topic\":\"hi\",\"n\":1,\"any\":\"abc\"}",       /* anyOf: neither */
        "{\"topic\":\"\xff\",\"n\":1}",                     /* invalid UTF-8 */
        "{\"topic\":\"\xed\xa0\x80\",\"n\":1}",             /* UTF-8 surrogate */
        "{\"topic\":\"\\ud800\",\"n\":1}",                  /* escaped lone surrogate */
        "{\"topic\":\"a\x01\",\"n\":1}",                    /* raw control */
        "{\"topic\":\"hi\",\"n\":1} ",                      /* trailing bytes */
        " {\"topic\":\"hi\",\"n\":1}",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(good); i++)
        if (!accepts(r.m, good[i])) fail_msg("rejected a valid document: %s", good[i]);
    for (size_t i = 0; i < SB_ARRAY_LEN(bad); i++)
        if (accepts(r.m, bad[i])) fail_msg("accepted an invalid document: %s", bad[i]);
    /* Prefixes of a valid document are alive but not complete. */
    const char *doc = good[3];
    for (size_t n = 0; n < strlen(doc); n++) {
        sb_gmatch_reset(r.m);
        assert_int_equal(sb_gmatch_bytes(r.m, doc, n), 0);
        assert_false(sb_gmatch_complete(r.m));
    }
    rig_free(&r);
}

static void test_patterns_and_types(void **state) {
    (void)state;
    static const struct { const char *schema, *doc; int ok; } cases[] = {
        { "{\"type\":\"string\",\"pattern\":\"^[0-9]{4}-[A-Z]{2}$\"}", "\"2024-AB\"", 1 },
        { "{\"type\":\"string\",\"pattern\":\"^[0-9]{4}-[A-Z]{2}$\"}", "\"2024-ab\"", 0 },
        { "{\"type\":\"string\",\"pattern\":\"^[0-9]{4}-[A-Z]{2}$\"}", "\"2024-ABC\"", 0 },
        { "{\"type\":\"string\",\"pattern\":\"ab+c\"}", "\"xxabbbcyy\"", 1 },      /* unanchored: a search */
        { "{\"type\":\"string\",\"pattern\":\"ab+c\"}", "\"xxacyy\"", 0 },
        { "{\"type\":\"string\",\"pattern\":\"^(yes|no)\\\\.?$\"}", "\"no.\"", 1 },
        { "{\"type\":\"string\",\"pattern\":\"^\\\\d+(?:\\\\.\\\\d{1,2})?$\"}", "\"12.50\"", 1 },
        { "{\"type\":\"string\",\"pattern\":\"^\\\\d+(?:\\\\.\\\\d{1,2})?$\"}", "\"12.505\"", 0 },
        { "{\"type\":\"string\",\"pattern\":\"^[^a-z]*$\"}", "\"AB \\\" \xc3\xa9\"", 1 },
        { "{\"type\":\"string\",\"pattern\":\"^[^a-z]*$\"}", "\"ABc\"", 0 },
        { "{\"type\":\"string\",\"pattern\":\"^a\\\"b$\"}", "\"a\\\"b\"", 1 },
        { "{\"type\":[\"integer\",\"null\"]}", "null", 1 },
        { "{\"type\":[\"integer\",\"null\"]}", "12", 1 },
        { "{\"type\":[\"integer\",\"null\"]}", "\"12\"", 0 },
        { "{\"const\":{\"a\":[1,true]}}", "{\"a\":[1,true]}", 1 },
        { "{\"const\":{\"a\":[1,true]}}", "{\"a\":[1,false]}", 0 },
        { "{}", "[{\"k\":[1,2.5e3,\"s\",null]},false]", 1 },
        { "{\"type\":\"object\"}", "{\"any\":{\"thing\":[]}}", 1 },
        { "{\"type\":\"object\"}", "[]", 0 },
        { "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1]", 0 },
        { "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1, 2]", 1 },
        { "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1,2,3,4]", 0 },
        { "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false}", "{}", 1 },
        { "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false}", "{\"b\":1}", 1 },
        { "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false}", "{\"a\":1,\"b\":2}", 1 },
        { "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false}", "{\"a\":1,}", 0 },
        { "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false}", "{,\"b\":1}", 0 },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(cases); i++) {
        rig r = rig_bytes(cases[i].schema, NULL);
        if (accepts(r.m, cases[i].doc) != cases[i].ok)
            fail_msg("%s on %s: expected %s", cases[i].schema, cases[i].doc, cases[i].ok ? "accept" : "reject");
        rig_free(&r);
    }
}

static void test_errors(void **state) {
    (void)state;
    static const struct { const char *schema, *want; } cases[] = {
        { "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}",
          "$.properties.n: unsupported keyword 'minimum'" },
        { "{\"oneOf\":[{}]}", "$: unsupported keyword 'oneOf'" },
        { "{\"$ref\":\"#/x\"}", "unsupported keyword '$ref'" },
        { "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"date\"}}", "$.items: unsupported keyword 'format'" },
        { "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}]}", "$.anyOf[1]: unsupported in 'pattern'" },
        { "{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "lookaround" },
        { "{\"type\":\"string\",\"pattern\":\"a\\\\bc\"}", "word boundary" },
        { "{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "anchor" },
        { "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "'pattern' together with" },
        { "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "'additionalProperties'" },
        { "{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"]}", "required property 'a'" },
        { "{\"type\":\"strin\"}", "unknown type 'strin'" },
        { "{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' must be an integer" },
        { "{\"type\":", "not JSON" },
        { "false", "matches nothing" },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(cases); i++) {
        sb_grammar *g = NULL;
        char err[SB_ERR_LEN] = "";
        int rc = sb_json_schema_compile(cases[i].schema, strlen(cases[i].schema), &g, err);
        if (rc != SB_EINVAL || !strstr(err, cases[i].want))
            fail_msg("%s: rc %d, error '%s', expected '%s'", cases[i].schema, rc, err, cases[i].want);
        assert_null(g);
    }
}

/* ---- random documents: automaton == validator ---- */

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static void rand_string(uint64_t *s, sb_jw *w) {
    static const char *const pieces[] = { "a", "Z", " ", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\\\"",
                                          "\\\\", "\\n", "\\u00e9", "\\u0041", "\xff", "\x01", "\\x", "\xc3" };
    sb_jw_raw(w, "\"", 1);
    int n = (int)(rnd(s) % 11);
    for (int i = 0; i < n; i++) {
        size_t k = rnd(s) % 100 < 97 ? rnd(s) % 11 : 11 + rnd(s) % 4;   /* 3 %: a broken piece */
        sb_jw_raw(w, pieces[k], strlen(pieces[k]));
    }
    sb_jw_raw(w, "\"", 1);
}

static void rand_value(uint64_t *s, sb_jw *w, int depth) {
    static const char *const scalars[] = { "0", "-12", "7", "1.5", "-2.75", "3.125e1", "true", "false", "null", "3",
                                           "\"user\"", "\"agent\"", "\"admin\"" };
    switch (rnd(s) % (depth > 1 ? 2 : 4)) {
    case 0: { const char *v = scalars[rnd(s) % SB_ARRAY_LEN(scalars)]; sb_jw_raw(w, v, strlen(v)); break; }
    case 1: rand_string(s, w); break;
    case 2:
        sb_jw_raw(w, "[", 1);
        for (int i = 0, n = (int)(rnd(s) % 4); i < n; i++) {
            if (i) sb_jw_raw(w, ",", 1);
            rand_value(s, w, depth + 1);
        }
        sb_jw_raw(w, "]", 1);
        break;
    default: sb_jw_raw(w, "{\"k\":", 5); rand_value(s, w, depth + 1); sb_jw_raw(w, "}", 1);
    }
}

/* Compact documents with SCHEMA's properties in order: the language the
 * grammar writes, so acceptance must equal validity exactly. */
static void test_random_documents(void **state) {
    (void)state;
    static const char *const keys[] = { "topic", "n", "x", "ok", "role", "tags", "any" };
    rig r = rig_bytes(SCHEMA, NULL);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int n_valid = 0;
    sb_jw w;
    sb_jw_init(&w);
    for (int iter = 0; iter < 4000; iter++) {
        sb_jw_reset(&w);
        sb_jw_raw(&w, "{", 1);
        int first = 1;
        for (size_t k = 0; k < SB_ARRAY_LEN(keys); k++) {
            if (rnd(&seed) % 100 < (k < 2 ? 3 : 40)) continue;
            int extra = rnd(&seed) % 100 < 3;
            const char *key = extra ? "zz" : keys[k];
            if (!first) sb_jw_raw(&w, ",", 1);
            first = 0;
            sb_jw_raw(&w, "\"", 1);
            sb_jw_raw(&w, key, strlen(key));
            sb_jw_raw(&w, "\":", 2);
            if (rnd(&seed) % 100 < 20) { rand_value(&seed, &w, 0); continue; }
            /* Mostly the right type, so that valid documents are common. */
            static const char *const typed[][3] = {
                { "", "", "" }, { "0", "-12", "123456" }, { "1.5", "-2", "3.125e1" }, { "true", "false", "true" },
                { "\"user\"", "null", "3" },
            };
            if (!strcmp(key, "tags")) {
                sb_jw_raw(&w, "[", 1);
                for (int i = 0, n = (int)(rnd(&seed) % 4); i < n; i++) {
                    if (i) sb_jw_raw(&w, ",", 1);
                    rand_string(&seed, &w);
                }
                sb_jw_raw(&w, "]", 1);
            } else if (k == 0 || k == 6 || extra) {
                rand_string(&seed, &w);
            } else {
                const char *v = typed[k][rnd(&seed) % 3];
                sb_jw_raw(&w, v, strlen(v));
            }
        }
        sb_jw_raw(&w, "}", 1);
        assert_false(w.oom);
        int want = validates(SCHEMA, w.p, w.len);
        n_valid += want;
        if (accepts(r.m, w.p) != want) fail_msg("automaton %s, validator %s: %s", want ? "rejects" : "accepts",
                                                 want ? "accepts" : "rejects", w.p);
    }
    sb_jw_free(&w);
    /* Both sides must have been exercised. */
    if (n_valid < 200 || n_valid > 3800) fail_msg("%d of 4000 random documents valid", n_valid);
    rig_free(&r);
}

/* ---- the mask on real vocabularies ---- */

/* At the position after `prefix`, the mask must equal the brute-force set:
 * token t allowed iff prefix + piece(t) is a live prefix (EOG: iff the
 * prefix is complete). */
static void check_mask_at(rig *r, sb_gmatch *probe, const char *prefix) {
    sb_gmatch_reset(r->m);
    assert_int_equal(sb_gmatch_bytes(r->m, prefix, strlen(prefix)), 0);
    const uint32_t *mask = sb_gmatch_mask(r->m);
    assert_non_null(mask);
    const int32_t n = sb_vocab_n_tokens(r->v);
    int n_allowed = 0;
    char piece[512];
    for (int32_t t = 0; t < n; t++) {
        int want;
        if (sb_vocab_is_eog(r->v, t)) want = sb_gmatch_complete(r->m);
        else {
            int len = sb_token_to_piece(r->v, t, piece, sizeof piece, 0);
            sb_gmatch_reset(probe);
            want = !sb_vocab_is_control(r->v, t) && len > 0 && len <= (int)sizeof piece &&
                   sb_gmatch_bytes(probe, prefix, strlen(prefix)) == 0 &&
                   sb_gmatch_bytes(probe, piece, (size_t)len) == 0;
        }
        n_allowed += want;
        if (sb_mask_has(mask, t) != want)
            fail_msg("after '%s': token %d ('%.*s') %s by the mask", prefix, t, (int)sb_vocab_text(r->v, t).len,
                     sb_vocab_text(r->v, t).ptr, want ? "forbidden" : "allowed");
    }
    assert_true(n_allowed > 0);
}

static void check_vocab(const char *path) {
    rig r = rig_bytes(SCHEMA, path);
    sb_gmatch *probe;
    char err[SB_ERR_LEN];
    if (sb_gmatch_new(r.g, r.t, &probe, err)) fail_msg("%s", err);
    static const char *const prefixes[] = {
        "", "{", "{\"to", "{\"topic\":", "{\"topic\": \"ab", "{\"topic\":\"1234567",
        "{\"topic\":\"\xe2\x82", "{\"topic\":\"a\\u00", "{\"topic\":\"\",\"n\":-", "{\"topic\":\"\",\"n\":12",
        "{\"topic\":\"\",\"n\":1,\"tags\":[\"ab\"", "{\"topic\":\"\",\"n\":1,\"any\":\"a", "{\"topic\":\"\",\"n\":1}",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(prefixes); i++) check_mask_at(&r, probe, prefixes[i]);
    /* The cache returns the same mask for a position reached again. */
    uint64_t computed, reused;
    sb_gmatch_stats(r.m, &computed, &reused);
    check_mask_at(&r, probe, prefixes[3]);
    uint64_t c2, r2;
    sb_gmatch_stats(r.m, &c2, &r2);
    assert_int_equal(c2, computed);
    assert_int_equal(r2, reused + 1);
    sb_gmatch_free(probe);
    rig_free(&r);
}

static void test_mask_spm(void **state) { (void)state; check_vocab("tests/data/vocab/ggml-vocab-llama-spm.gguf"); }
static void test_mask_bpe(void **state) { (void)state; check_vocab("tests/data/vocab/ggml-vocab-qwen2.gguf"); }

/* Matchers sharing a cache (sb_gmatch_new_sharing): a position's mask is
 * computed once for all of them and is the mask a lone matcher computes;
 * the cache outlives the matcher it came from. */
static void test_mask_shared(void **state) {
    (void)state;
    rig r = rig_bytes(SCHEMA, "tests/data/vocab/ggml-vocab-qwen2.gguf");
    char err[SB_ERR_LEN];
    sb_gmatch *a, *b, *lone;
    if (sb_gmatch_new_sharing(r.m, &a, err) || sb_gmatch_new_sharing(a, &b, err) ||
        sb_gmatch_new(r.g, r.t, &lone, err))
        fail_msg("%s", err);
    const size_t words = ((size_t)sb_tok_trie_n_vocab(r.t) + 31) / 32;
    uint32_t *want = malloc(words * sizeof *want);
    assert_non_null(want);
    static const char *const prefixes[] = { "{\"topic\": \"ab", "{\"topic\":\"\",\"n\":12", "{" };
    for (size_t i = 0; i < SB_ARRAY_LEN(prefixes); i++) {
        const char *pre = prefixes[i];
        sb_gmatch *first = i == 0 ? r.m : a, *second = i == 0 ? a : b;
        sb_gmatch_reset(lone);
        assert_int_equal(sb_gmatch_bytes(lone, pre, strlen(pre)), 0);
        memcpy(want, sb_gmatch_mask(lone), words * sizeof *want);
        uint64_t c1, r1, c2, r2, c3, r3;
        sb_gmatch_stats(first, &c1, &r1);
        sb_gmatch_stats(second, &c2, &r2);
        sb_gmatch_reset(first);
        sb_gmatch_reset(second);
        assert_int_equal(sb_gmatch_bytes(first, pre, strlen(pre)), 0);
        assert_int_equal(sb_gmatch_bytes(second, pre, strlen(pre)), 0);
        assert_memory_equal(sb_gmatch_mask(first), want, words * sizeof *want);
        assert_memory_equal(sb_gmatch_mask(second), want, words * sizeof *want);
        sb_gmatch_stats(first, &c3, &r3);
        assert_int_equal(c3, c1 + 1);           /* computed by the first ... */
        sb_gmatch_stats(second, &c3, &r3);
        assert_int_equal(c3, c2);               /* ... found by the second */
        assert_int_equal(r3, r2 + 1);
        if (i == 0) {                           /* the cache's first owner goes */
            sb_gmatch_free(r.m);
            r.m = NULL;
        }
    }
    /* A lone matcher's cache is its own: the shared one's masks do not reach it. */
    uint64_t cl, rl;
    sb_gmatch_stats(lone, &cl, &rl);
    assert_int_equal(cl, SB_ARRAY_LEN(prefixes));
    assert_int_equal(rl, 0);
    free(want);
    sb_gmatch_free(a);
    sb_gmatch_free(b);
    sb_gmatch_free(lone);
    rig_free(&r);
}

/* sb_gmatch_prefetch on a real pool: every position the caches lack is
 * computed once (duplicates among the matchers too), split over the
 * threads, and is bit for bit the mask a lone matcher computes; a single
 * missing position (walked in root-edge parts) as well. */
static void test_mask_prefetch(void **state) {
    (void)state;
    rig r = rig_bytes(SCHEMA, "tests/data/vocab/ggml-vocab-qwen2.gguf");
    char err[SB_ERR_LEN];
    sb_pool *pool, *one;
    assert_int_equal(sb_pool_new(2, &pool), 0);
    assert_int_equal(sb_pool_new(1, &one), 0);
    enum { N = 6 };
    static const char *const pos[N] = { "{\"topic\": \"ab", "{", "{\"topic\": \"ab", "{\"topic\":\"\",\"n\":12", "{", "" };
    sb_gmatch *m[N], *lone;
    m[0] = r.m;
    for (int i = 1; i < N; i++)
        if (sb_gmatch_new_sharing(r.m, &m[i], err)) fail_msg("%s", err);
    if (sb_gmatch_new(r.g, r.t, &lone, err)) fail_msg("%s", err);
    const size_t words = ((size_t)sb_tok_trie_n_vocab(r.t) + 31) / 32;
    uint32_t *want = malloc(N * words * sizeof *want);
    assert_non_null(want);
    for (int i = 0; i < N; i++) {
        sb_gmatch_reset(lone);
        assert_int_equal(sb_gmatch_bytes(lone, pos[i], strlen(pos[i])), 0);
        memcpy(want + i * words, sb_gmatch_mask(lone), words * sizeof *want);
        assert_int_equal(sb_gmatch_bytes(m[i], pos[i], strlen(pos[i])), 0);
    }
    /* "" is in the cache already; the other four distinct positions are not. */
    (void)sb_gmatch_mask(m[5]);
    uint64_t c0[N], r0[N], c, rr;
    for (int i = 0; i < N; i++) sb_gmatch_stats(m[i], &c0[i], &r0[i]);
    sb_gmatch_prefetch(m, N, one);             /* one thread: nothing happens */
    uint64_t total = 0;
    for (int i = 0; i < N; i++) sb_gmatch_stats(m[i], &c, &rr), total += c - c0[i];
    assert_int_equal(total, 0);
    sb_gmatch_prefetch(m, N, pool);
    for (int i = 0; i < N; i++) sb_gmatch_stats(m[i], &c, &rr), total += c - c0[i];
    assert_int_equal(total, 0);                /* counted when looked up, as if computed then */
    uint64_t dc = 0, dr = 0;
    for (int i = 0; i < N; i++) {
        assert_memory_equal(sb_gmatch_mask(m[i]), want + i * words, words * sizeof *want);
        sb_gmatch_stats(m[i], &c, &rr);
        dc += c - c0[i];
        dr += rr - r0[i];
    }
    /* "ab", "{" and the n:12 position were each computed once (for m[0],
     * m[1], m[3]); m[2], m[4] and m[5] found theirs in the cache. */
    assert_int_equal(dc, 3);
    assert_int_equal(dr, 3);
    sb_gmatch_stats(m[2], &c, &rr);
    assert_int_equal(c, c0[2]);
    /* One position alone: all tasks are parts of its root edges. */
    const char *solo = "{\"topic\":\"x\",\"n\":";
    sb_gmatch_reset(lone);
    assert_int_equal(sb_gmatch_bytes(lone, solo, strlen(solo)), 0);
    memcpy(want, sb_gmatch_mask(lone), words * sizeof *want);
    sb_gmatch_reset(m[1]);
    assert_int_equal(sb_gmatch_bytes(m[1], solo, strlen(solo)), 0);
    sb_gmatch_stats(m[1], &c0[1], &r0[1]);
    sb_gmatch_prefetch(&m[1], 1, pool);
    assert_memory_equal(sb_gmatch_mask(m[1]), want, words * sizeof *want);
    sb_gmatch_stats(m[1], &c, &rr);
    assert_int_equal(c, c0[1] + 1);
    assert_int_equal(rr, r0[1]);
    free(want);
    for (int i = 1; i < N; i++) sb_gmatch_free(m[i]);
    sb_gmatch_free(lone);
    sb_pool_free(pool);
    sb_pool_free(one);
    rig_free(&r);
}

/* ---- generation on the tiny models ---- */

typedef struct { char buf[8192]; size_t len; } out_buf;

static int collect(void *ud, const char *text, size_t len, int32_t token) {
    (void)token;
    out_buf *o = ud;
    if (o->len + len < sizeof o->buf) { memcpy(o->buf + o->len, text, len); o->len += len; }
    return 0;
}

static void test_generate_tiny(void **state) {
    (void)state;
    static const char *const models[] = { "tests/data/tiny-llama-spm-Q4_0.gguf", "tests/data/tiny-llama3-Q4_K_M.gguf",
                                          "tests/data/tiny-phi3-Q4_K_M.gguf" };
    for (size_t mi = 0; mi < SB_ARRAY_LEN(models); mi++) {
        sb_ctx_params cp;
        sb_ctx_params_default(&cp);
        cp.n_threads = 1;
        cp.n_ctx = 512;
        sb_engine *e;
        char err[SB_ERR_LEN];
        if (sb_engine_open(models[mi], &cp, &e, err)) fail_msg("%s", err);
        int32_t *ids;
        size_t n_ids;
        if (sb_engine_tokenize(e, "Reply in JSON:", 14, 0, &ids, &n_ids, err)) fail_msg("%s", err);
        for (int run = 0; run < 6; run++) {
            sb_gen_opts o;
            sb_gen_opts_default(&o);
            o.max_tokens = 400;
            o.sampling.temp = run == 0 ? 0.0f : 1.5f;     /* hot: the garbage is as wild as it gets */
            o.sampling.top_k = 0;
            o.sampling.top_p = 1.0f;
            o.sampling.min_p = 0.0f;
            o.sampling.seed = (uint64_t)run;
            o.json_schema = SCHEMA;
            o.json_schema_len = strlen(SCHEMA);
            out_buf out = { .len = 0 };
            o.on_piece = collect;
            o.ud = &out;
            sb_gen_result res;
            if (sb_engine_generate(e, ids, (int)n_ids, &o, &res, err)) fail_msg("%s: %s", models[mi], err);
            if (strcmp(res.finish, "stop") || !validates(SCHEMA, out.buf, out.len))
                fail_msg("%s run %d (finish %s): invalid output '%.*s'", models[mi], run, res.finish, (int)out.len,
                         out.buf);
        }
        sb_free(ids);
        sb_engine_free(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_patterns_and_types),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_random_documents),
        cmocka_unit_test(test_mask_spm),
        cmocka_unit_test(test_mask_bpe),
        cmocka_unit_test(test_mask_shared),
        cmocka_unit_test(test_mask_prefetch),
        cmocka_unit_test(test_generate_tiny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
