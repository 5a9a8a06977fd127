/* chat_tools.c - tools, tool calls and tool results in a chat prompt, as the
 * model's own template writes them (sb_chat.h, "Tools").
 *
 * The templates print JSON with transformers' tojson, which is Python's
 * json.dumps: ", " and ": " between members (",\n" plus indentation with
 * indent), non-ASCII written raw, the key order as given, a float as
 * Python's repr. So the JSON is re-printed from its text (not from parsed
 * doubles, which would lose the difference between 1 and 1.0).
 */
#include "worker/engine/sb_chat.h"
#include "worker/engine/chat_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------- json.dumps */

typedef struct { const char *p, *end; sb_jw *w; int indent; } pyj;

static void skip_ws(pyj *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static void put_cp(sb_jw *w, unsigned cp) {
    static const char *const esc[32] = { [8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r" };
    char b[8];
    size_t n = 0;
    if (cp == '"') { sb_jw_raw(w, "\\\"", 2); return; }
    if (cp == '\\') { sb_jw_raw(w, "\\\\", 2); return; }
    if (cp < 0x20) {
        if (esc[cp]) sb_jw_raw(w, esc[cp], 2);
        else sb_jw_rawf(w, "\\u%04x", cp);
        return;
    }
    if (cp < 0x80) b[n++] = (char)cp;
    else if (cp < 0x800) { b[n++] = (char)(0xC0 | cp >> 6); b[n++] = (char)(0x80 | (cp & 63)); }
    else if (cp < 0x10000) {
        b[n++] = (char)(0xE0 | cp >> 12); b[n++] = (char)(0x80 | (cp >> 6 & 63)); b[n++] = (char)(0x80 | (cp & 63));
    } else {
        b[n++] = (char)(0xF0 | cp >> 18); b[n++] = (char)(0x80 | (cp >> 12 & 63));
        b[n++] = (char)(0x80 | (cp >> 6 & 63)); b[n++] = (char)(0x80 | (cp & 63));
    }
    sb_jw_raw(w, b, n);
}

static unsigned hex4(const char *p) {
    char h[5] = { p[0], p[1], p[2], p[3], 0 };
    return (unsigned)strtoul(h, NULL, 16);
}

/* A JSON string literal at j->p (valid: the parser checked it). */
static void py_string(pyj *j) {
    const char *p = j->p + 1;
    sb_jw_raw(j->w, "\"", 1);
    while (*p != '"') {
        if (*p != '\\') {
            if ((unsigned char)*p < 0x80) put_cp(j->w, (unsigned char)*p);
            else sb_jw_raw(j->w, p, 1);         /* UTF-8 as it is */
            p++;
            continue;
        }
        char c = p[1];
        unsigned cp = (unsigned char)c;
        p += 2;
        if (c == 'b') cp = 8; else if (c == 'f') cp = 12; else if (c == 'n') cp = 10;
        else if (c == 'r') cp = 13; else if (c == 't') cp = 9;
        else if (c == 'u') {
            cp = hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(p + 2) - 0xDC00);
                p += 6;
            }
        }
        put_cp(j->w, cp);
    }
    sb_jw_raw(j->w, "\"", 1);
    j->p = p + 1;
}

/* Python's repr of a float: the shortest digits that read back the same,
 * fixed notation for decimal exponents -4..15 (".0" when integral), else
 * d.ddde+XX. */
static void py_float(sb_jw *w, double v) {
    if (isinf(v)) { sb_jw_rawf(w, "%sInfinity", v < 0 ? "-" : ""); return; }
    if (v == 0) { sb_jw_rawf(w, "%s0.0", signbit(v) ? "-" : ""); return; }
    char buf[40], digits[24];
    int prec;
    for (prec = 1; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    const char *s = buf + (buf[0] == '-');
    int nd = 0;
    for (; *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp = atoi(s + 1);
    if (v < 0) sb_jw_raw(w, "-", 1);
    if (exp < -4 || exp >= 16) {
        sb_jw_raw(w, digits, 1);
        if (nd > 1) { sb_jw_raw(w, ".", 1); sb_jw_raw(w, digits + 1, (size_t)nd - 1); }
        sb_jw_rawf(w, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        sb_jw_raw(w, "0.", 2);
        for (int i = 0; i < -exp - 1; i++) sb_jw_raw(w, "0", 1);
        sb_jw_raw(w, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) sb_jw_raw(w, i < nd ? &digits[i] : "0", 1);
        sb_jw_raw(w, ".", 1);
        if (nd > exp + 1) sb_jw_raw(w, digits + exp + 1, (size_t)(nd - exp - 1));
        else sb_jw_raw(w, "0", 1);
    }
}

static void py_number(pyj *j) {
    const char *s = j->p;
    int is_float = 0;
    while (j->p < j->end && strchr("-+0123456789.eE", *j->p)) is_float |= strchr(".eE", *j->p++) != NULL;
    if (is_float) py_float(j->w, strtod(s, NULL));
    else if (j->p - s == 2 && s[0] == '-' && s[1] == '0') sb_jw_raw(j->w, "0", 1);     /* Python's int(-0) */
    else sb_jw_raw(j->w, s, (size_t)(j->p - s));
}

static void py_newline(pyj *j, int level) {
    sb_jw_raw(j->w, "\n", 1);
    for (int i = 0; i < level * j->indent; i++) sb_jw_raw(j->w, " ", 1);
}

static void py_value(pyj *j, int level);

static void py_container(pyj *j, int level) {
    const char close = *j->p == '{' ? '}' : ']';
    const int obj = close == '}';
    sb_jw_raw(j->w, j->p++, 1);
    skip_ws(j);
    if (*j->p == close) { sb_jw_raw(j->w, &close, 1); j->p++; return; }
    for (int first = 1;; first = 0) {
        if (!first) sb_jw_raw(j->w, j->indent < 0 ? ", " : ",", j->indent < 0 ? 2 : 1);
        if (j->indent >= 0) py_newline(j, level + 1);
        if (obj) {
            skip_ws(j);
            py_string(j);
            skip_ws(j);
            j->p++;                                 /* ':' */
            sb_jw_raw(j->w, ": ", 2);
        }
        py_value(j, level + 1);
        skip_ws(j);
        if (*j->p++ != ',') break;
    }
    if (j->indent >= 0) py_newline(j, level);
    sb_jw_raw(j->w, &close, 1);
}

static void py_value(pyj *j, int level) {
    skip_ws(j);
    char c = *j->p;
    if (c == '"') py_string(j);
    else if (c == '{' || c == '[') py_container(j, level);
    else if (c == '-' || (c >= '0' && c <= '9')) py_number(j);
    else {
        size_t n = c == 'f' ? 5 : 4;                /* true, null / false */
        sb_jw_raw(j->w, j->p, n);
        j->p += n;
    }
}

int sb_chat_py_json(sb_jw *w, const char *json, size_t len, int indent) {
    sb_json_doc *d;
    int rc = sb_json_parse(json, len, &d, NULL);
    if (rc) return rc == SB_ENOMEM ? rc : SB_EINVAL;
    sb_json_doc_free(d);
    pyj j = { json, json + len, w, indent };
    py_value(&j, 0);
    return w->oom ? SB_ENOMEM : 0;
}

/* The inside of tojson of a string: bytes as they are (valid UTF-8),
 * escaped as Python does. */
static void py_escape(sb_jw *w, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '\\') put_cp(w, c);
        else sb_jw_raw(w, &s[i], 1);
    }
}

/* ------------------------------------------------------ templates */

static int has(const char *t, size_t n, const char *needle) {
    return t && memmem(t, n, needle, strlen(needle)) != NULL;
}

const char *sb_chat_tools_name(int tools) {
    return tools == SB_TOOLS_HERMES ? "hermes" : tools == SB_TOOLS_LLAMA31 ? "llama31" : "generic";
}

/* Llama-3.1 sets date_string = "26 Jul 2024" unless the caller gives one;
 * 3.2's templates take today's date (strftime_now("%d %b %Y")). */
static void llama_date(sb_chat_tmpl *t, const char *tmpl, size_t len) {
    static const char key[] = "set date_string = \"";
    const char *p = memmem(tmpl, len, key, sizeof key - 1);
    if (p) {
        p += sizeof key - 1;
        const char *q = memchr(p, '"', len - (size_t)(p - tmpl));
        if (q && (size_t)(q - p) < sizeof t->date) {
            memcpy(t->date, p, (size_t)(q - p));
            t->date[q - p] = 0;
            return;
        }
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(t->date, sizeof t->date, "%d %b %Y", &tm);
}

int sb_chat_tmpl_init(sb_chat_tmpl *t, const char *tmpl, size_t len) {
    memset(t, 0, sizeof *t);
    t->kind = tmpl ? sb_chat_detect(tmpl, len) : SB_CHAT_UNKNOWN;
    const char *sys;
    size_t sys_len;
    if (t->kind == SB_CHAT_CHATML && has(tmpl, len, "<tool_call>") && has(tmpl, len, "<tools>") &&
        sb_chat_default_system(tmpl, len, &sys, &sys_len)) {
        if (!(t->default_system = sb_malloc(sys_len + 1))) return SB_ENOMEM;
        memcpy(t->default_system, sys, sys_len);
        t->default_system[sys_len] = 0;
        t->tools = SB_TOOLS_HERMES;
        t->hermes_braces = has(tmpl, len, "{{\\\"name\\\": <function-name>") ? 2 : 1;
    } else if (t->kind == SB_CHAT_LLAMA3 && has(tmpl, len, "Environment: ipython")) {
        t->tools = SB_TOOLS_LLAMA31;
        llama_date(t, tmpl, len);
    }
    return 0;
}

void sb_chat_tmpl_free(sb_chat_tmpl *t) {
    sb_free(t->default_system);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------ rendering */

static void put(sb_prompt *b, const char *s) { sb_prompt_add(b, s, strlen(s), 1); }
static void put_plain(sb_prompt *b, const char *s, size_t n) { sb_prompt_add(b, s, n, 0); }

static void put_jw(sb_prompt *b, sb_jw *w) {
    if (w->oom) b->failed = 1;
    else put_plain(b, w->p, w->len);
    sb_jw_free(w);
}

/* The caller's JSON value, re-printed as tojson does. */
static int put_json(sb_prompt *b, const char *json, size_t n, int indent) {
    sb_jw w;
    sb_jw_init(&w);
    int rc = sb_chat_py_json(&w, json, n, indent);
    if (rc == SB_EINVAL) { sb_jw_free(&w); return rc; }
    if (rc) w.oom = 1;
    put_jw(b, &w);
    return 0;
}

/* A call's arguments: the object they spell (what the template expects),
 * or, when they are not JSON, the string itself as tojson writes it. */
static void put_args(sb_prompt *b, const sb_chat_call *c) {
    const char *a = c->arguments ? c->arguments : "{}";
    size_t n = c->arguments ? c->arguments_len : 2;
    if (put_json(b, a, n, -1) == 0) return;
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_raw(&w, "\"", 1);
    py_escape(&w, a, n);
    sb_jw_raw(&w, "\"", 1);
    put_jw(b, &w);
}

static int has_content(const sb_chat_msg *m) {
    if (m->parts) {
        for (size_t i = 0; i < m->n_parts; i++)
            if (m->parts[i].len) return 1;
        return 0;
    }
    return m->content && *m->content;
}

static void put_msg_content(sb_prompt *b, const sb_chat_msg *m, int trim) {
    if (m->content || m->parts) chat_put_content(b, m, trim);
}

static int is_role(const sb_chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* One past the JSON value starting at p, or end (never beyond it, whatever
 * the text: a model's answer is not checked first). */
const char *chat_json_skip(const char *p, const char *end) {
    int depth = 0, in_str = 0;
    const char *start = p;
    for (; p < end; p++) {
        char c = *p;
        if (in_str) {
            if (c == '\\') p++;
            else if (c == '"' && (in_str = 0, depth == 0)) return p + 1;
        } else if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') { if (--depth <= 0) return depth < 0 ? p : p + 1; }
        else if (depth == 0 && p > start && strchr(",: \t\r\n", c)) return p;
    }
    return end;                     /* also after a trailing backslash */
}

/* The elements of the JSON array text one by one: [*at, *at + *len). */
static int next_item(const char **p, const char *end, const char **at, size_t *len) {
    pyj j = { *p, end, NULL, -1 };
    skip_ws(&j);
    if (j.p < end && (*j.p == '[' || *j.p == ',')) j.p++;
    skip_ws(&j);
    if (j.p >= end || *j.p == ']') return 0;
    *at = j.p;
    *p = chat_json_skip(j.p, end);
    *len = (size_t)(*p - *at);
    return 1;
}

int sb_chat_json_member(const char *obj, size_t len, const char *key, const char **at, size_t *n) {
    sb_json_doc *d;
    int rc = sb_json_parse(obj, len, &d, NULL);
    if (rc) return rc == SB_ENOMEM ? rc : SB_EINVAL;
    int is_obj = sb_json_type_of(sb_json_root(d)) == SB_JSON_OBJECT;
    sb_json_doc_free(d);
    if (!is_obj) return SB_EINVAL;
    const char *p = obj, *end = obj + len, *k;
    size_t kn, want = strlen(key);
    pyj j = { p, end, NULL, -1 };
    skip_ws(&j);
    j.p++;                                          /* '{' */
    for (;;) {
        skip_ws(&j);
        if (j.p >= end || *j.p != '"') return SB_ENOTFOUND;
        k = j.p;
        j.p = chat_json_skip(j.p, end);
        kn = (size_t)(j.p - k);
        skip_ws(&j);
        j.p++;                                      /* ':' */
        skip_ws(&j);
        const char *v = j.p;
        j.p = chat_json_skip(j.p, end);
        /* keys compared as written: an escaped spelling of key is not found */
        if (kn == want + 2 && !memcmp(k + 1, key, want)) { *at = v; *n = (size_t)(j.p - v); return 0; }
        skip_ws(&j);
        if (j.p >= end || *j.p++ != ',') return SB_ENOTFOUND;
    }
}

/* Each tool as tojson(indent) writes it, with before/after around each. */
static void put_tools(sb_prompt *b, const char *tools, size_t n, int indent, const char *before, const char *after) {
    const char *p = tools, *at;
    size_t len;
    while (next_item(&p, tools + n, &at, &len)) {
        put(b, before);
        put_json(b, at, len, indent);
        put(b, after);
    }
}

static const char HERMES_TOOLS_HEAD[] =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char HERMES_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";
static const char HERMES_TOOLS_TAIL_BRACES2[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}}\n</tool_call>";

/* first_newline 0: the first call opens the text (generic, no content). */
static void put_hermes_calls(sb_prompt *b, const sb_chat_msg *m, int first_newline) {
    for (size_t k = 0; k < m->n_calls; k++) {
        put(b, k || first_newline ? "\n<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"");
        put_plain(b, m->calls[k].name, strlen(m->calls[k].name));
        put(b, "\", \"arguments\": ");
        put_args(b, &m->calls[k]);
        put(b, "}\n</tool_call>");
    }
}

/* Qwen2.5's template, statement by statement. */
static void apply_hermes(const sb_chat_tmpl *t, sb_prompt *b, const sb_chat_msg *m, size_t n, const char *tools,
                         size_t tools_len) {
    const int sys0 = n > 0 && is_role(&m[0], "system");
    const char *p = tools, *at;
    size_t at_len;
    if (tools && !next_item(&p, tools + tools_len, &at, &at_len)) tools = NULL;   /* `if tools`: [] is false */
    put(b, "<|im_start|>system\n");
    if (sys0) put_msg_content(b, &m[0], 0);
    else put(b, t->default_system);
    if (tools) {
        put(b, HERMES_TOOLS_HEAD);
        put_tools(b, tools, tools_len, -1, "\n", "");
        put(b, t->hermes_braces == 2 ? HERMES_TOOLS_TAIL_BRACES2 : HERMES_TOOLS_TAIL);
    }
    put(b, "<|im_end|>\n");
    for (size_t i = 0; i < n; i++) {
        if (is_role(&m[i], "tool")) {
            if (i == 0 || !is_role(&m[i - 1], "tool")) put(b, "<|im_start|>user");
            put(b, "\n<tool_response>\n");
            put_msg_content(b, &m[i], 0);
            put(b, "\n</tool_response>");
            if (i + 1 == n || !is_role(&m[i + 1], "tool")) put(b, "<|im_end|>\n");
        } else if (is_role(&m[i], "assistant") && m[i].n_calls) {
            put(b, "<|im_start|>assistant");
            if (has_content(&m[i])) { put(b, "\n"); put_msg_content(b, &m[i], 0); }
            put_hermes_calls(b, &m[i], 1);
            put(b, "<|im_end|>\n");
        } else if (!(i == 0 && sys0)) {
            put(b, "<|im_start|>");
            put(b, m[i].role);
            put(b, "\n");
            put_msg_content(b, &m[i], 0);
            put(b, "<|im_end|>\n");
        }
    }
}

static const char LLAMA_TOOLS_HEAD[] =
    "Given the following functions, please respond with a JSON for a function call with its proper arguments "
    "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}.Do not use variables.\n\n";

static void llama_header(sb_prompt *b, const char *role) {
    put(b, "<|start_header_id|>");
    put(b, role);
    put(b, "<|end_header_id|>\n\n");
}

/* Llama-3.1's template with tools_in_user_message (its default). */
static int apply_llama31(const sb_chat_tmpl *t, sb_prompt *b, const sb_chat_msg *m, size_t n, const char *tools,
                         size_t tools_len, char *err) {
    size_t i = 0;
    llama_header(b, "system");
    if (tools) put(b, "Environment: ipython\n");
    put(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
    put(b, t->date);
    put(b, "\n\n");
    if (n > 0 && is_role(&m[0], "system")) put_msg_content(b, &m[i++], 1);
    put(b, "<|eot_id|>");
    if (tools) {
        if (i == n)
            return sb_seterr(err, SB_EINVAL, "chat template (llama31): the tools go into the first user message, "
                             "and there is none");
        llama_header(b, "user");
        put(b, LLAMA_TOOLS_HEAD);
        put_tools(b, tools, tools_len, 4, "", "\n\n");
        put_msg_content(b, &m[i++], 1);
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (is_role(&m[i], "tool")) {
            llama_header(b, "ipython");
            /* the template's `content is iterable` holds for a string: tojson */
            sb_jw w;
            sb_jw_init(&w);
            sb_jw_raw(&w, "\"", 1);
            if (m[i].parts)
                for (size_t k = 0; k < m[i].n_parts; k++) py_escape(&w, m[i].parts[k].text, m[i].parts[k].len);
            else if (m[i].content) py_escape(&w, m[i].content, strlen(m[i].content));
            sb_jw_raw(&w, "\"", 1);
            put_jw(b, &w);
        } else if (m[i].n_calls) {
            if (m[i].n_calls != 1)
                return sb_seterr(err, SB_EINVAL, "chat message %zu: this model's template (llama31) takes one tool "
                                 "call per assistant message, not %zu", i, m[i].n_calls);
            llama_header(b, "assistant");
            put(b, "{\"name\": \"");
            put_plain(b, m[i].calls[0].name, strlen(m[i].calls[0].name));
            put(b, "\", \"parameters\": ");
            put_args(b, &m[i].calls[0]);
            put(b, "}");
        } else {
            llama_header(b, m[i].role);
            put_msg_content(b, &m[i], 1);
        }
        put(b, "<|eot_id|>");
    }
    return 0;
}

/* ---- generic: the hermes text inside the template's own messages ---- */

typedef struct { sb_prompt *texts; sb_text_seg *segs; sb_chat_msg *msgs; size_t n; } generic_conv;

static void generic_free(generic_conv *g) {
    for (size_t i = 0; g->texts && i < g->n; i++) sb_prompt_free(&g->texts[i]);
    sb_free(g->texts);
    sb_free(g->segs);
    sb_free(g->msgs);
}

/* The messages as plain ones, each content an sb_prompt; then their parts. */
static int generic_convert(generic_conv *g, const sb_chat_msg *m, size_t n, const char *tools, size_t tools_len) {
    memset(g, 0, sizeof *g);
    g->texts = sb_calloc(n + 1, sizeof *g->texts);
    g->msgs = sb_calloc(n + 1, sizeof *g->msgs);
    if (!g->texts || !g->msgs) return SB_ENOMEM;
    size_t i = 0;
    if (tools) {
        g->msgs[g->n].role = "system";
        if (n > 0 && is_role(&m[0], "system")) {
            put_msg_content(&g->texts[g->n], &m[i++], 0);
            put(&g->texts[g->n], "\n\n");
        }
        put(&g->texts[g->n], HERMES_TOOLS_HEAD + 2);
        put_tools(&g->texts[g->n], tools, tools_len, -1, "\n", "");
        put(&g->texts[g->n], HERMES_TOOLS_TAIL);
        g->n++;
    }
    for (; i < n; i++) {
        sb_prompt *b = &g->texts[g->n];
        if (is_role(&m[i], "tool")) {
            g->msgs[g->n].role = "user";
            for (;; i++) {
                put(b, "<tool_response>\n");
                put_msg_content(b, &m[i], 0);
                put(b, "\n</tool_response>");
                if (i + 1 == n || !is_role(&m[i + 1], "tool")) break;
                put(b, "\n");
            }
        } else {
            g->msgs[g->n].role = m[i].role;
            put_msg_content(b, &m[i], 0);
            put_hermes_calls(b, &m[i], has_content(&m[i]));
        }
        g->n++;
    }
    size_t total = 0;
    for (size_t k = 0; k < g->n; k++) total += 2 * g->texts[k].n_plain + 1;
    if (!(g->segs = sb_calloc(total, sizeof *g->segs))) return SB_ENOMEM;
    size_t used = 0;
    for (size_t k = 0; k < g->n; k++) {
        const sb_prompt *t = &g->texts[k];
        if (t->failed) return SB_ENOMEM;
        g->msgs[k].parts = g->segs + used;
        size_t off = 0;
        for (size_t s = 0; s <= t->n_plain; s++) {
            size_t end = s < t->n_plain ? t->plain[s].off : t->len;
            if (end > off) g->segs[used++] = (sb_text_seg){ t->text + off, end - off, 1 };
            if (s < t->n_plain) {
                g->segs[used++] = (sb_text_seg){ t->text + t->plain[s].off, t->plain[s].len, 0 };
                off = t->plain[s].off + t->plain[s].len;
            }
        }
        g->msgs[k].n_parts = (size_t)(g->segs + used - g->msgs[k].parts);
        if (!g->msgs[k].n_parts) g->msgs[k].content = "";
    }
    return 0;
}

static int apply_generic(const sb_chat_tmpl *t, sb_prompt *b, const sb_chat_msg *m, size_t n, const char *tools,
                         size_t tools_len, int gen, char *err) {
    generic_conv g;
    int rc = generic_convert(&g, m, n, tools, tools_len);
    if (!rc) rc = sb_chat_apply_prompt(t->kind != SB_CHAT_UNKNOWN ? t->kind : SB_CHAT_CHATML, g.msgs, g.n, gen, b, err);
    else sb_seterr(err, rc, "chat template: out of memory");
    generic_free(&g);
    return rc;
}

static int check_messages(const sb_chat_msg *m, size_t n, char *err) {
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !chat_valid_role(m[i].role))
            return sb_seterr(err, SB_EINVAL, "chat message %zu: role must be 1-32 characters of A-Z a-z 0-9 _ -", i);
        if (!m[i].content && !m[i].parts && !m[i].n_calls)
            return sb_seterr(err, SB_EINVAL, "chat message %zu: no content and no tool calls", i);
        for (size_t k = 0; k < m[i].n_calls; k++)
            if (!m[i].calls[k].name || !*m[i].calls[k].name)
                return sb_seterr(err, SB_EINVAL, "chat message %zu: tool call %zu has no function name", i, k);
    }
    return 0;
}

int sb_chat_apply_tools(const sb_chat_tmpl *t, const sb_chat_msg *msgs, size_t n, const char *tools,
                        size_t tools_len, int add_generation_prompt, sb_prompt *b, char *err) {
    int rc = check_messages(msgs, n, err);
    if (rc) return rc;
    if (tools) {
        sb_json_doc *d;
        char why[SB_ERR_LEN];
        if ((rc = sb_json_parse(tools, tools_len, &d, why)))
            return rc == SB_ENOMEM ? sb_seterr(err, rc, "chat template: out of memory")
                                   : sb_seterr(err, SB_EINVAL, "tools: %s", why);
        int is_array = sb_json_type_of(sb_json_root(d)) == SB_JSON_ARRAY;
        sb_json_doc_free(d);
        if (!is_array) return sb_seterr(err, SB_EINVAL, "tools: expected a JSON array");
    }
    put(b, "");
    if (t->tools == SB_TOOLS_GENERIC) return apply_generic(t, b, msgs, n, tools, tools_len, add_generation_prompt, err);
    if (t->tools == SB_TOOLS_HERMES) {
        apply_hermes(t, b, msgs, n, tools, tools_len);
        if (add_generation_prompt) put(b, "<|im_start|>assistant\n");
    } else {
        if ((rc = apply_llama31(t, b, msgs, n, tools, tools_len, err))) return rc;
        if (add_generation_prompt) llama_header(b, "assistant");
    }
    return b->failed ? sb_seterr(err, SB_ENOMEM, "chat template: out of memory") : 0;
}
