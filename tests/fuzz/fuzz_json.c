/* fuzz_json.c - libFuzzer target for the gateway's JSON parser and writer
 * (router/json.c; every HTTP body the router accepts goes through
 * sb_json_parse, and every answer it builds through sb_jw_*).
 *
 * For any input:
 *   - sb_json_parse ends in a document or an error that says where;
 *   - an accepted value, written back with sb_jw_value, is valid JSON that
 *     parses to the same value (numbers exactly, strings byte for byte with
 *     their embedded NULs, keys in order), and writing that again gives the
 *     same bytes;
 *   - sb_json_extract_object (model output -> the first object in it) never
 *     reads out of bounds, and what it finds is an object.
 */
#include <stdint.h>
#include <string.h>

#include "router/run/sb_run.h"

/* Deep equality; numbers compare as doubles (-0 == 0 is fine: both write "0"
 * or "-0" and parse back to a value that compares equal). */
static int same(const sb_json *a, const sb_json *b) {
    sb_json_type t = sb_json_type_of(a);
    if (t != sb_json_type_of(b)) return 0;
    switch (t) {
    case SB_JSON_NULL: return 1;
    case SB_JSON_BOOL: return sb_json_bool(a) == sb_json_bool(b);
    case SB_JSON_NUMBER: return sb_json_num(a) == sb_json_num(b);
    case SB_JSON_STRING:
        return sb_json_len(a) == sb_json_len(b) && !memcmp(sb_json_str(a), sb_json_str(b), sb_json_len(a));
    case SB_JSON_ARRAY:
        if (sb_json_len(a) != sb_json_len(b)) return 0;
        for (size_t i = 0; i < sb_json_len(a); i++)
            if (!same(sb_json_at(a, i), sb_json_at(b, i))) return 0;
        return 1;
    case SB_JSON_OBJECT:
        if (sb_json_len(a) != sb_json_len(b)) return 0;
        for (size_t i = 0; i < sb_json_len(a); i++) {
            const char *ka = sb_json_key_at(a, i), *kb = sb_json_key_at(b, i);
            if (strcmp(ka, kb) || !same(sb_json_val_at(a, i), sb_json_val_at(b, i))) return 0;
            /* The lookup by name finds this member (keys are unique); a key
             * with an escaped NUL is not findable by its C string (NULL). */
            const sb_json *got = sb_json_get(a, ka);
            if (got && got != sb_json_val_at(a, i)) return 0;
        }
        return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    char err[SB_ERR_LEN];
    err[0] = '\0';
    sb_json_doc *d = NULL;
    int rc = sb_json_parse(text, size, &d, err);
    if (rc) {
        if (d || (rc == SB_EFORMAT && strncmp(err, "invalid JSON at line ", 21))) __builtin_trap();
    } else {
        const sb_json *root = sb_json_root(d);
        sb_jw w1, w2;
        sb_jw_init(&w1);
        sb_jw_init(&w2);
        sb_jw_value(&w1, root);
        if (!w1.oom) {
            sb_json_doc *d2 = NULL;
            if (sb_json_parse(w1.p, w1.len, &d2, err) == SB_EFORMAT) __builtin_trap();  /* invalid JSON out */
            if (d2) {
                if (!same(root, sb_json_root(d2))) __builtin_trap();   /* the value changed */
                sb_jw_value(&w2, sb_json_root(d2));
                if (!w2.oom && (w2.len != w1.len || memcmp(w1.p, w2.p, w1.len))) __builtin_trap();
                sb_json_doc_free(d2);
            }
        }
        if (w1.depth != 0) __builtin_trap();                   /* every container closed */
        sb_jw_free(&w1);
        sb_jw_free(&w2);
        sb_json_doc_free(d);
    }
    sb_json_doc *x = NULL;
    const sb_json *o = sb_json_extract_object(text, size, &x);
    if ((o != NULL) != (x != NULL) || (o && sb_json_type_of(o) != SB_JSON_OBJECT)) __builtin_trap();
    sb_json_doc_free(x);
    return 0;
}
