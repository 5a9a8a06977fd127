/* sb_json.h - the one JSON reader and writer: a strict RFC 8259 parser and
 * a streaming emitter (we add no JSON library; every HTTP body, the config
 * tooling, kb's and route eval's --json and the grammar's schemas go
 * through this). common/json.c.
 */
#ifndef SB_JSON_H
#define SB_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Nesting of arrays/objects, for the parser and the emitter alike: a value
 * the parser accepts can be written back, and the emitter never writes
 * what the parser would refuse. An OpenAI request is 4-5 levels deep; 64
 * keeps the recursive parser's stack use trivial whatever the input. */
#define SB_JSON_MAX_DEPTH 64

typedef enum {
    SB_JSON_NULL, SB_JSON_BOOL, SB_JSON_NUMBER, SB_JSON_STRING, SB_JSON_ARRAY, SB_JSON_OBJECT,
} sb_json_type;

typedef struct sb_json sb_json;         /* one value inside a document */
typedef struct sb_json_doc sb_json_doc; /* owns every value and string */

/* Parse exactly one JSON value from text[0..len) (RFC 8259, strictly): no
 * comments, trailing commas, single quotes, leading zeros, NaN/Infinity,
 * unescaped control characters, invalid UTF-8, lone surrogates, duplicate
 * object keys or trailing bytes other than whitespace. 0, or SB_EFORMAT with
 * "at line L column C (byte N): what" in err, or SB_ENOMEM. */
int  sb_json_parse(const char *text, size_t len, sb_json_doc **out, char *err);
void sb_json_doc_free(sb_json_doc *d);                  /* NULL ok */
const sb_json *sb_json_root(const sb_json_doc *d);

/* Accessors accept NULL and wrong types (they return NULL / 0 / false). */
sb_json_type   sb_json_type_of(const sb_json *v);       /* NULL -> SB_JSON_NULL */
const char    *sb_json_type_name(sb_json_type t);       /* "string", "object", ... */
size_t         sb_json_len(const sb_json *v);           /* array items / object pairs / string bytes */
const sb_json *sb_json_at(const sb_json *arr, size_t i);
const char    *sb_json_key_at(const sb_json *obj, size_t i);
const sb_json *sb_json_val_at(const sb_json *obj, size_t i);
const sb_json *sb_json_get(const sb_json *obj, const char *key);   /* NULL when absent */
/* NUL-terminated (an embedded \u0000 is kept; use sb_json_len for the size). */
const char    *sb_json_str(const sb_json *v);
/* Containers nested in v: 0 for a scalar, 1 for [] or {"a": 1}. */
int            sb_json_depth(const sb_json *v);
/* true when a string or key in v holds a NUL byte (\u0000); path[0..n)
 * then names the first one: "model", "messages[0].content", "" for v. */
bool           sb_json_find_nul(const sb_json *v, char *path, size_t n);
double         sb_json_num(const sb_json *v);
bool           sb_json_bool(const sb_json *v);
/* The number is an integer in [lo, hi] (1e3 counts; 1.5 does not). */
bool           sb_json_is_int(const sb_json *v, int64_t lo, int64_t hi);

/* A growable output buffer with a sticky failure: write everything, check
 * `oom` once. Commas between members are inserted automatically. `oom` is
 * set when memory runs out or when a container would be nested deeper than
 * SB_JSON_MAX_DEPTH (then `too_deep` too): the output is then unusable. */
typedef struct {
    char  *p;           /* NUL-terminated while !oom */
    size_t len, cap;
    int    oom;
    int    too_deep;
    uint64_t comma;     /* bit d-1: the container at depth d already has a member */
    int    depth;
    int    after_key;
} sb_jw;

void sb_jw_init(sb_jw *w);
void sb_jw_free(sb_jw *w);
void sb_jw_reset(sb_jw *w);                             /* empty, keeps capacity */
void sb_jw_obj(sb_jw *w);                               /* { */
void sb_jw_obj_end(sb_jw *w);                           /* } */
void sb_jw_arr(sb_jw *w);
void sb_jw_arr_end(sb_jw *w);
void sb_jw_key(sb_jw *w, const char *key);
/* Strings are escaped; invalid UTF-8 bytes become U+FFFD so the output is
 * always valid JSON whatever a model produced. */
void sb_jw_str(sb_jw *w, const char *s);                /* NULL -> null */
void sb_jw_strn(sb_jw *w, const char *s, size_t n);
void sb_jw_int(sb_jw *w, int64_t v);
void sb_jw_num(sb_jw *w, double v);                     /* NaN/Inf -> null */
/* A figure for display, rounded to `decimals` places (0-6), trailing zeros
 * dropped: 20-30 ns a number against ~1 us for sb_jw_num's shortest exact
 * form (measured in a hot loop), which a value passed through needs and a
 * percentile or a rate does not. */
void sb_jw_fixed(sb_jw *w, double v, int decimals);
void sb_jw_bool(sb_jw *w, bool v);
void sb_jw_null(sb_jw *w);
void sb_jw_value(sb_jw *w, const sb_json *v);           /* re-encode a parsed value */
/* Raw text appended as is, outside the comma logic (SSE framing, a
 * protocol's fixed parts, or sb_jw used as a plain growable byte buffer:
 * sticky failure, always NUL-terminated). */
void sb_jw_raw(sb_jw *w, const void *s, size_t n);
void sb_jw_rawf(sb_jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
