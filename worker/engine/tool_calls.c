/* tool_calls.c - what a model may answer when given tools, as a grammar,
 * and the calls read back out of its answer (sb_chat.h, "Tool calls").
 *
 * A call is the template's own shape around a JSON object whose schema is
 * built here from the function: {"name": {"const": NAME}, "arguments":
 * PARAMETERS} ("parameters" for llama31), compiled by the JSON-Schema
 * compiler into the same grammar, so the arguments validate against the
 * function's parameters by construction (docs/GRAMMAR.md).
 */
#include "worker/engine/sb_chat.h"
#include "worker/engine/chat_impl.h"

#include <stdio.h>
#include <string.h>

static const char CALL_OPEN[] = "<tool_call>", CALL_CLOSE[] = "</tool_call>";

const char *sb_tool_choice_name(int choice) {
    static const char *const names[] = { "none", "auto", "required" };
    return choice >= 0 && choice <= SB_TOOL_CHOICE_REQUIRED ? names[choice] : "none";
}

/* ------------------------------------------------------- the spec */

#define BAD(...) do { sb_seterr(err, SB_EINVAL, __VA_ARGS__); goto out; } while (0)

int sb_chat_tools_spec(int format, const char *tools, size_t len, int choice, const char *name, int parallel,
                       sb_jw *out, char *err) {
    sb_json_doc *d = NULL;
    char why[SB_ERR_LEN];
    int rc = sb_json_parse(tools, len, &d, why);
    if (rc) return rc == SB_ENOMEM ? sb_seterr(err, rc, "out of memory") : sb_seterr(err, SB_EINVAL, "tools: %s", why);
    const sb_json *arr = sb_json_root(d);
    rc = SB_EINVAL;
    if (sb_json_type_of(arr) != SB_JSON_ARRAY || !sb_json_len(arr)) BAD("tools: expected a non-empty array");
    if (choice < SB_TOOL_CHOICE_AUTO || choice > SB_TOOL_CHOICE_REQUIRED) BAD("tool_choice: out of range");
    int found = !name;
    sb_jw_obj(out);
    sb_jw_key(out, "format"); sb_jw_str(out, sb_chat_tools_name(format));
    sb_jw_key(out, "choice"); sb_jw_str(out, sb_tool_choice_name(choice));
    sb_jw_key(out, "parallel"); sb_jw_bool(out, parallel && format != SB_TOOLS_LLAMA31);
    sb_jw_key(out, "functions");
    sb_jw_arr(out);
    for (size_t i = 0; i < sb_json_len(arr); i++) {
        const sb_json *t = sb_json_at(arr, i), *fn = sb_json_get(t, "function");
        const char *type = sb_json_str(sb_json_get(t, "type")), *fname = sb_json_str(sb_json_get(fn, "name"));
        const sb_json *params = sb_json_get(fn, "parameters");
        if (!type || strcmp(type, "function") || !fname || !*fname)
            BAD("tools[%zu]: expected {\"type\": \"function\", \"function\": {\"name\": string, ...}}", i);
        if (params && sb_json_type_of(params) != SB_JSON_OBJECT) BAD("tools[%zu].function.parameters: expected a JSON Schema object", i);
        if (name && strcmp(name, fname)) continue;
        found = 1;
        sb_jw_obj(out);
        sb_jw_key(out, "name"); sb_jw_str(out, fname);
        sb_jw_key(out, "parameters");
        if (params) sb_jw_value(out, params);
        else { sb_jw_obj(out); sb_jw_key(out, "type"); sb_jw_str(out, "object"); sb_jw_obj_end(out); }
        sb_jw_obj_end(out);
    }
    sb_jw_arr_end(out);
    sb_jw_obj_end(out);
    if (!found) BAD("tool_choice: no function named '%.64s' in tools", name);
    rc = out->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
out:
    sb_json_doc_free(d);
    return rc;
}

/* ---------------------------------------------------- the grammar */

/* One function's call object as a JSON Schema. */
static void call_schema(sb_jw *s, const sb_json *fn, const char *args_key) {
    sb_jw_obj(s);
    sb_jw_key(s, "type"); sb_jw_str(s, "object");
    sb_jw_key(s, "properties");
    sb_jw_obj(s);
    sb_jw_key(s, "name"); sb_jw_obj(s); sb_jw_key(s, "const"); sb_jw_value(s, sb_json_get(fn, "name")); sb_jw_obj_end(s);
    sb_jw_key(s, args_key); sb_jw_value(s, sb_json_get(fn, "parameters"));
    sb_jw_obj_end(s);
    sb_jw_key(s, "required"); sb_jw_arr(s); sb_jw_str(s, "name"); sb_jw_str(s, args_key); sb_jw_arr_end(s);
    sb_jw_key(s, "additionalProperties"); sb_jw_bool(s, false);
    sb_jw_obj_end(s);
}

/* Free text that does not open like a call: "" or a first byte other than
 * `first`, then anything. */
static int text_rule(sb_grammar *g, char first) {
    uint8_t all[32], not_first[32];
    memset(all, 0xff, sizeof all);
    memcpy(not_first, all, sizeof all);
    not_first[(unsigned char)first / 8] &= (uint8_t)~(1u << ((unsigned char)first % 8));
    sb_gseq s = { 0 };
    int any = sb_gram_rule(g), rest = sb_gram_repeat(g, any, -1, -1), text = sb_gram_rule(g);
    sb_gseq_set(g, &s, all);
    sb_gram_alt(g, any, &s);
    sb_gram_alt(g, text, &s);                   /* "" */
    sb_gseq_set(g, &s, not_first);
    sb_gseq_ref(&s, rest);
    sb_gram_alt(g, text, &s);
    sb_gseq_free(&s);
    return text;
}

int sb_chat_tools_grammar(const char *spec, size_t len, sb_grammar **out, char *err) {
    *out = NULL;
    sb_json_doc *d = NULL;
    int rc = sb_json_parse(spec, len, &d, NULL);
    if (rc) return sb_seterr(err, rc, "tool grammar: the spec is not JSON");
    const sb_json *root = sb_json_root(d), *fns = sb_json_get(root, "functions");
    const char *format = sb_json_str(sb_json_get(root, "format")), *choice = sb_json_str(sb_json_get(root, "choice"));
    const int llama = format && !strcmp(format, "llama31"), parallel = sb_json_bool(sb_json_get(root, "parallel"));
    sb_jw schema;
    sb_jw_init(&schema);
    if (sb_json_len(fns) > 1) { sb_jw_obj(&schema); sb_jw_key(&schema, "anyOf"); sb_jw_arr(&schema); }
    for (size_t i = 0; i < sb_json_len(fns); i++) call_schema(&schema, sb_json_at(fns, i), llama ? "parameters" : "arguments");
    if (sb_json_len(fns) > 1) { sb_jw_arr_end(&schema); sb_jw_obj_end(&schema); }
    sb_grammar *g = NULL;
    int obj = -1, top = -1;
    if (!choice || !sb_json_len(fns)) rc = sb_seterr(err, SB_EINVAL, "tool grammar: no functions");
    else if (schema.oom) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    else if (!(rc = sb_gram_new(&g))) rc = sb_json_schema_rule(g, schema.p, schema.len, &obj, err);
    if (!rc) {
        sb_gseq s = { 0 };
        int call = obj;
        if (!llama) {                           /* <tool_call>\n{...}\n</tool_call> */
            sb_gseq_lit(&s, CALL_OPEN, sizeof CALL_OPEN - 1);
            sb_gseq_byte(&s, '\n');
            sb_gseq_ref(&s, obj);
            sb_gseq_byte(&s, '\n');
            sb_gseq_lit(&s, CALL_CLOSE, sizeof CALL_CLOSE - 1);
            call = sb_gram_rule_seq(g, &s);
        }
        int calls = call;
        if (parallel) {                         /* call ("\n" call){0,SB_TOOL_MAX_CALLS-1} */
            sb_gseq_byte(&s, '\n');
            int sep = sb_gram_rule_seq(g, &s);
            sb_gseq_ref(&s, call);
            sb_gseq_ref(&s, sb_gram_repeat(g, call, sep, SB_TOOL_MAX_CALLS - 1));
            calls = sb_gram_rule_seq(g, &s);
        }
        top = calls;
        if (!strcmp(choice, "auto")) {
            top = sb_gram_rule(g);
            sb_gseq_ref(&s, calls);
            sb_gram_alt(g, top, &s);
            sb_gseq_ref(&s, text_rule(g, llama ? '{' : '<'));
            sb_gram_alt(g, top, &s);
        }
        sb_gseq_free(&s);
        rc = sb_gram_finish(g, top, err);
    }
    if (rc) sb_grammar_free(g);
    else *out = g;
    sb_jw_free(&schema);
    sb_json_doc_free(d);
    return rc;
}

/* ------------------------------------------------------ read back */

static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static char *dup_n(const char *s, size_t n) {
    char *c = sb_malloc(n + 1);
    if (c) { memcpy(c, s, n); c[n] = 0; }
    return c;
}

/* One call object text[0..n): its name and its arguments as written. */
static int read_call(const char *obj, size_t n, const char *args_key, sb_chat_call *c) {
    sb_json_doc *d;
    int rc = sb_json_parse(obj, n, &d, NULL);
    if (rc) return rc == SB_ENOMEM ? rc : SB_EFORMAT;
    const sb_json *name = sb_json_get(sb_json_root(d), "name");
    const char *at;
    size_t at_n;
    rc = SB_EFORMAT;
    if (sb_json_type_of(name) == SB_JSON_STRING && !sb_chat_json_member(obj, n, args_key, &at, &at_n)) {
        char *nm = dup_n(sb_json_str(name), sb_json_len(name)), *args = dup_n(at, at_n);
        if (nm && args) {
            *c = (sb_chat_call){ NULL, nm, args, at_n };
            rc = 0;
        } else {
            sb_free(nm);
            sb_free(args);
            rc = SB_ENOMEM;
        }
    }
    sb_json_doc_free(d);
    return rc;
}

void sb_chat_calls_free(sb_chat_call *calls, size_t n) {
    for (size_t i = 0; calls && i < n; i++) {
        sb_free((char *)calls[i].name);
        sb_free((char *)calls[i].arguments);
    }
    sb_free(calls);
}

int sb_chat_parse_calls(int format, const char *text, size_t len, sb_chat_call **calls, size_t *n_calls) {
    *calls = NULL;
    *n_calls = 0;
    const char *p = skip_space(text, text + len), *end = text + len;
    const int llama = format == SB_TOOLS_LLAMA31;
    size_t cap = 0, n = 0;          /* cap in bytes (sb_grow) */
    sb_chat_call *v = NULL;
    int rc = 0;
    while (p < end && !rc) {
        if (!llama) {
            if ((size_t)(end - p) < sizeof CALL_OPEN - 1 || memcmp(p, CALL_OPEN, sizeof CALL_OPEN - 1)) break;
            p = skip_space(p + sizeof CALL_OPEN - 1, end);
        } else if (n) {
            break;                          /* one call, the whole answer */
        }
        const char *obj = p;
        p = chat_json_skip(p, end);
        char *grown = (char *)v;
        if (sb_grow(&grown, &cap, (n + 1) * sizeof *v)) { rc = SB_ENOMEM; break; }
        v = (sb_chat_call *)grown;
        if ((rc = read_call(obj, (size_t)(p - obj), llama ? "parameters" : "arguments", &v[n]))) break;
        n++;
        p = skip_space(p, end);
        if (!llama) {
            if ((size_t)(end - p) < sizeof CALL_CLOSE - 1 || memcmp(p, CALL_CLOSE, sizeof CALL_CLOSE - 1)) {
                rc = SB_EFORMAT;
                break;
            }
            p = skip_space(p + sizeof CALL_CLOSE - 1, end);
        }
    }
    /* Calls only when the answer is calls and nothing else (a grammar's
     * call branch): text, or a call cut short by max_tokens, is text. */
    if (rc || p != end || !n) {
        sb_chat_calls_free(v, n);
        return rc == SB_ENOMEM ? rc : 0;
    }
    *calls = v;
    *n_calls = n;
    return 0;
}
