/* fuzz_sync.c - libFuzzer target for what the edge reads from the cloud
 * during a sync: the reply body (libcurl has taken the HTTP apart), read by
 * common/json.c, then what sync_edge.c's apply_reply takes from it (cursor,
 * more, entries, deletions), every entry through sbc_entry_from_json and its
 * base64 answer through the decoder. The input is the body.
 * Beyond "no crash, no leak": strings are NUL-terminated at their length,
 * a valid UTF-8 string written back by sb_jw_strn reads back the same,
 * and base64 decoding what the encoder wrote gives back the bytes.
 */
#include <stdint.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "tests/fuzz/fuzz_utf8.h"

static void check_string(const char *s, size_t n) {
    if (s[n] != '\0') __builtin_trap();
    if (!valid_utf8((const unsigned char *)s, n)) return;
    sb_jw b = { 0 };
    sb_jw_strn(&b, s, n);
    sb_json_doc *j = NULL;
    if (!b.oom) {
        if (sb_json_parse(b.p, b.len, &j, NULL)) __builtin_trap();
        const sb_json *v = sb_json_root(j);
        if (sb_json_type_of(v) != SB_JSON_STRING || sb_json_len(v) != n || memcmp(sb_json_str(v), s, n))
            __builtin_trap();
    }
    sb_json_doc_free(j);
    sb_jw_free(&b);
}

static void walk(const sb_json *j, int depth) {
    if (depth > SB_JSON_MAX_DEPTH) __builtin_trap();
    if (sb_json_type_of(j) == SB_JSON_STRING) check_string(sb_json_str(j), sb_json_len(j));
    for (size_t i = 0; sb_json_type_of(j) == SB_JSON_OBJECT && i < sb_json_len(j); i++) {
        check_string(sb_json_key_at(j, i), strlen(sb_json_key_at(j, i)));
        walk(sb_json_val_at(j, i), depth + 1);
    }
    for (size_t i = 0; sb_json_type_of(j) == SB_JSON_ARRAY && i < sb_json_len(j); i++)
        walk(sb_json_at(j, i), depth + 1);
}

static void check_base64(const char *s) {
    uint8_t *raw;
    size_t n;
    if (sbc_base64_decode(s, strlen(s), &raw, &n)) return;
    sb_jw b = { 0 };
    sbc_base64_encode(&b, raw, n);
    uint8_t *again;
    size_t m;
    if (!b.oom) {
        if (sbc_base64_decode(b.p ? b.p : "", b.len, &again, &m) || m != n || memcmp(raw, again, n))
            __builtin_trap();
        sb_free(again);
    }
    sb_jw_free(&b);
    sb_free(raw);
}

/* What sb_cache_sync and apply_reply read of a reply body. */
static void check_body(const char *body, size_t len) {
    sb_json_doc *doc = NULL;
    char err[SB_ERR_LEN];
    if (sb_json_parse(body, len, &doc, err)) return;
    const sb_json *j = sb_json_root(doc);
    walk(j, 0);
    int64_t cursor;
    const sb_json *entries = sb_json_get(j, "entries"), *deletions = sb_json_get(j, "deletions");
    (void)sbc_json_int(j, "cursor", &cursor);
    (void)sb_json_bool(sb_json_get(j, "more"));
    for (size_t i = 0; i < sb_json_len(entries) && sb_json_type_of(entries) == SB_JSON_ARRAY; i++) {
        const sb_json *e = sb_json_at(entries, i);
        sb_cache_entry ent;
        const char *b64;
        if (!sbc_json_str(e, "response_b64", &b64)) check_base64(b64);
        if (sbc_entry_from_json(e, &ent, err) == SB_OK) {
            if (strlen(ent.key) != SB_CACHE_KEY_HEX - 1) __builtin_trap();
            sb_cache_entry_free(&ent);
        }
    }
    for (size_t i = 0; i < sb_json_len(deletions) && sb_json_type_of(deletions) == SB_JSON_ARRAY; i++) {
        const sb_json *d = sb_json_at(deletions, i);
        if (sb_json_str(d) && sb_json_str(d)[sb_json_len(d)] != '\0') __builtin_trap();
    }
    sb_json_doc_free(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_body((const char *)data, size);
    return 0;
}
