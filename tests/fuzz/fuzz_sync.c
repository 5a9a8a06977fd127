/* fuzz_sync.c - libFuzzer target for what the edge reads from the cloud
 * during a sync: the reply body (libcurl has taken the HTTP apart), read by
 * cache/cjson.c, then what sync_edge.c's apply_reply takes from it (cursor,
 * more, entries, deletions), every entry through sbc_entry_from_json and its
 * base64 answer through the decoder. The input is the body.
 * Beyond "no crash, no leak": strings are NUL-terminated at their length,
 * a valid UTF-8 string written back by sbc_buf_json_str reads back the same,
 * and base64 decoding what the encoder wrote gives back the bytes.
 */
#include <stdint.h>
#include <string.h>

#include "cache_internal.h"
#include "fuzz_utf8.h"

static void check_string(const char *s, size_t n) {
    if (s[n] != '\0') __builtin_trap();
    if (!valid_utf8((const unsigned char *)s, n)) return;
    sbc_buf b = { 0 };
    sbc_buf_json_str(&b, s, n);
    sbj *j = NULL;
    if (!b.oom) {
        if (sbj_parse(b.p, b.len, &j, NULL) || j->type != SBJ_STR || j->str_len != n || memcmp(j->str, s, n))
            __builtin_trap();
    }
    sbj_free(j);
    sbc_buf_free(&b);
}

static void walk(const sbj *j, int depth) {
    if (depth > SBJ_MAX_DEPTH) __builtin_trap();
    for (; j; j = j->next) {
        if (j->key) check_string(j->key, strlen(j->key));
        if (j->type == SBJ_STR) check_string(j->str, j->str_len);
        walk(j->child, depth + 1);
    }
}

static void check_base64(const char *s) {
    uint8_t *raw;
    size_t n;
    if (sbc_base64_decode(s, strlen(s), &raw, &n)) return;
    sbc_buf b = { 0 };
    sbc_buf_base64(&b, raw, n);
    uint8_t *again;
    size_t m;
    if (!b.oom) {
        if (sbc_base64_decode(b.p ? b.p : "", b.len, &again, &m) || m != n || memcmp(raw, again, n))
            __builtin_trap();
        sb_free(again);
    }
    sbc_buf_free(&b);
    sb_free(raw);
}

/* What sb_cache_sync and apply_reply read of a reply body. */
static void check_body(const char *body, size_t len) {
    sbj *j = NULL;
    char err[SB_ERR_LEN];
    if (sbj_parse(body, len, &j, err)) return;
    walk(j, 0);
    int64_t cursor;
    const sbj *entries = sbj_get(j, "entries"), *deletions = sbj_get(j, "deletions");
    (void)sbj_get_int(j, "cursor", &cursor);
    (void)sbj_get(j, "more");
    for (const sbj *e = entries && entries->type == SBJ_ARR ? entries->child : NULL; e; e = e->next) {
        sb_cache_entry ent;
        const char *b64;
        if (!sbj_get_str(e, "response_b64", &b64)) check_base64(b64);
        if (sbc_entry_from_json(e, &ent, err) == SB_OK) {
            if (strlen(ent.key) != SB_CACHE_KEY_HEX - 1) __builtin_trap();
            sb_cache_entry_free(&ent);
        }
    }
    for (const sbj *d = deletions && deletions->type == SBJ_ARR ? deletions->child : NULL; d; d = d->next)
        if (d->type == SBJ_STR && d->str[d->str_len] != '\0') __builtin_trap();
    sbj_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_body((const char *)data, size);
    return 0;
}
