/* gen_req.c - a generation request: parsed from an OpenAI body or built
 * from a pipeline stage, then encoded for the worker and keyed for the
 * response cache (sb_backend.h); the prompt pieces (sb_segs) it holds; the
 * worker params of the score and embed calls.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "router/backend/backend_internal.h"
#include "worker/engine/sb_chat.h"
#include "worker/engine/sb_grammar.h"

/* ------------------------------------------------------------ segments */

void sb_segs_init(sb_segs *s) {
    memset(s, 0, sizeof *s);
    sb_jw_init(&s->text);
}

void sb_segs_free(sb_segs *s) {
    sb_jw_free(&s->text);
    sb_free(s->v);
    memset(s, 0, sizeof *s);
}

void sb_segs_add(sb_segs *s, const char *p, size_t n, bool special) {
    if (!n || s->oom) return;
    size_t off = s->text.len;
    sb_jw_raw(&s->text, p, n);
    if (s->text.oom) { s->oom = 1; return; }
    if (s->n && s->v[s->n - 1].special == special) {   /* one piece per run of one kind */
        s->v[s->n - 1].len += n;
        return;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        sb_seg *nv = sb_realloc(s->v, cap * sizeof *nv);
        if (!nv) { s->oom = 1; return; }
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = (sb_seg){ off, n, special };
}

void sb_segs_cat(sb_segs *dst, const sb_segs *src) {
    for (size_t i = 0; i < src->n; i++) sb_segs_add(dst, src->text.p + src->v[i].off, src->v[i].len, src->v[i].special);
    if (src->oom) dst->oom = 1;
}

bool sb_segs_any_special(const sb_segs *s) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].special) return true;
    return false;
}

/* ------------------------------------------------------------ requests */

void rt_gen_init(rt_gen_req *g) {
    memset(g, 0, sizeof *g);
    g->sampling = (sb_sampling){ .temperature = -1, .top_p = -1, .min_p = -1, .repeat_penalty = -1, .top_k = -1,
                                 .max_tokens = -1, .seed = -1 };
    sb_segs_init(&g->prompt);
    sb_jw_init(&g->own);
    sb_jw_init(&g->tools_own);
    g->tool_choice = RT_TOOLS_UNSET;
    g->parallel_tool_calls = -1;
}

void rt_gen_free(rt_gen_req *g) {
    for (size_t i = 0; i < g->n_msgs; i++) {
        sb_segs_free(&g->msgs[i].content);
        sb_jw_free(&g->msgs[i].tool);
    }
    sb_free(g->msgs);
    sb_segs_free(&g->prompt);
    sb_jw_free(&g->own);
    sb_jw_free(&g->tools_own);
    g->msgs = NULL;
    g->n_msgs = 0;
}

static bool oom(const rt_gen_req *g) {
    bool o = g->prompt.oom || g->own.oom || g->tools_own.oom;
    for (size_t i = 0; i < g->n_msgs; i++) o |= g->msgs[i].content.oom != 0 || g->msgs[i].tool.oom;
    return o;
}

/* ------------------------------------------------------------- OpenAI */

#define BAD(...) do { snprintf(why, why_len, __VA_ARGS__); return SB_EINVAL; } while (0)

/* The text of a message's content: a string, or an array of parts of which
 * the {type: text} ones count. */
static int content_text(const sb_json *c, sb_segs *out) {
    if (sb_json_type_of(c) == SB_JSON_STRING) { sb_segs_add(out, sb_json_str(c), sb_json_len(c), false); return 0; }
    if (sb_json_type_of(c) != SB_JSON_ARRAY) return -1;
    for (size_t i = 0; i < sb_json_len(c); i++) {
        const sb_json *p = sb_json_at(c, i);
        const char *t = sb_json_str(sb_json_get(p, "type"));
        const sb_json *tx = sb_json_get(p, "text");
        if (!t || strcmp(t, "text") || sb_json_type_of(tx) != SB_JSON_STRING) return -1;
        sb_segs_add(out, sb_json_str(tx), sb_json_len(tx), false);
    }
    return 0;
}

/* messages (chat) or prompt (completions): their shape, then each message. */
static int parse_input(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    if (g->kind != RT_KIND_CHAT) {
        const sb_json *prompt = sb_json_get(body, "prompt");
        if (sb_json_type_of(prompt) == SB_JSON_ARRAY && sb_json_len(prompt) == 1) prompt = sb_json_at(prompt, 0);
        if (sb_json_type_of(prompt) != SB_JSON_STRING) BAD("'prompt': expected a string");
        sb_segs_add(&g->prompt, sb_json_str(prompt), sb_json_len(prompt), false);
        return 0;
    }
    const sb_json *msgs = sb_json_get(body, "messages");
    if (sb_json_type_of(msgs) != SB_JSON_ARRAY || sb_json_len(msgs) == 0)
        BAD("'messages': expected a non-empty array of {role, content}");
    if (sb_json_len(msgs) > RT_GEN_MAX_MSGS) BAD("'messages': at most %d messages", RT_GEN_MAX_MSGS);
    return 0;
}

/* An assistant message's tool_calls, [{"id", "type": "function", "function":
 * {"name", "arguments": string}}], as the worker's [{"id", "name",
 * "arguments"}] after the tool_call_id in gm->tool. */
static int parse_calls(rt_gen_msg *gm, const sb_json *m, size_t i, char *why, size_t why_len) {
    const sb_json *id = sb_json_get(m, "tool_call_id"), *calls = sb_json_get(m, "tool_calls");
    if (id && sb_json_type_of(id) != SB_JSON_STRING) BAD("'messages'[%zu].tool_call_id: expected a string", i);
    if (id) sb_jw_raw(&gm->tool, sb_json_str(id), sb_json_len(id));
    gm->tool_id_len = gm->tool.len;
    if (!calls || sb_json_type_of(calls) == SB_JSON_NULL) return 0;
    if (sb_json_type_of(calls) != SB_JSON_ARRAY) BAD("'messages'[%zu].tool_calls: expected an array", i);
    sb_jw_arr(&gm->tool);
    for (size_t k = 0; k < sb_json_len(calls); k++) {
        const sb_json *c = sb_json_at(calls, k), *fn = sb_json_get(c, "function");
        const sb_json *cid = sb_json_get(c, "id"), *name = sb_json_get(fn, "name"), *args = sb_json_get(fn, "arguments");
        const char *type = sb_json_str(sb_json_get(c, "type"));
        if ((type && strcmp(type, "function")) || sb_json_type_of(name) != SB_JSON_STRING || !sb_json_len(name) ||
            sb_json_type_of(args) != SB_JSON_STRING || (cid && sb_json_type_of(cid) != SB_JSON_STRING))
            BAD("'messages'[%zu].tool_calls[%zu]: expected {\"id\": string, \"type\": \"function\", \"function\": "
                "{\"name\": string, \"arguments\": string}}", i, k);
        sb_jw_obj(&gm->tool);
        sb_jw_key(&gm->tool, "id"); sb_jw_str(&gm->tool, cid ? sb_json_str(cid) : "");
        sb_jw_key(&gm->tool, "name"); sb_jw_strn(&gm->tool, sb_json_str(name), sb_json_len(name));
        sb_jw_key(&gm->tool, "arguments"); sb_jw_strn(&gm->tool, sb_json_str(args), sb_json_len(args));
        sb_jw_obj_end(&gm->tool);
    }
    sb_jw_arr_end(&gm->tool);
    return 0;
}

static int parse_messages(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    const sb_json *msgs = sb_json_get(body, "messages");
    if (g->kind != RT_KIND_CHAT) return 0;
    if (!(g->msgs = sb_calloc(sb_json_len(msgs), sizeof *g->msgs))) return SB_ENOMEM;
    for (size_t i = 0; i < sb_json_len(msgs); i++) {
        const sb_json *m = sb_json_at(msgs, i), *content = sb_json_get(m, "content");
        const char *role = sb_json_str(sb_json_get(m, "role"));
        rt_gen_msg *gm = &g->msgs[g->n_msgs++];
        sb_segs_init(&gm->content);
        sb_jw_init(&gm->tool);
        /* an assistant message that calls tools may have no content */
        bool calls = sb_json_len(sb_json_get(m, "tool_calls")) > 0;
        if (sb_json_type_of(m) != SB_JSON_OBJECT || !role ||
            (!(calls && sb_json_type_of(content) == SB_JSON_NULL) && content_text(content, &gm->content)))
            BAD("'messages'[%zu]: expected {\"role\": string, \"content\": string or text parts}", i);
        int rc = parse_calls(gm, m, i, why, why_len);
        if (rc) return rc;
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "developer") &&
            strcmp(role, "tool"))
            BAD("'messages'[%zu].role: '%.40s' is not one of system, user, assistant, developer, tool", i, role);
        if (!strcmp(role, "user")) g->last_user = sb_json_str(sb_json_get(m, "content"));
        gm->role = !strcmp(role, "developer") ? "system" : role;
    }
    return 0;
}

static bool num_in(const sb_json *v, double lo, double hi) {
    return sb_json_type_of(v) == SB_JSON_NUMBER && sb_json_num(v) >= lo && sb_json_num(v) <= hi;
}

/* body[key], with an explicit null the same as absent. */
static const sb_json *given(const sb_json *body, const char *key) {
    const sb_json *v = sb_json_get(body, key);
    return v && sb_json_type_of(v) == SB_JSON_NULL ? NULL : v;
}

static int parse_sampling(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    sb_sampling *sp = &g->sampling;
    const sb_json *mt = given(body, "max_completion_tokens");
    if (!mt) mt = given(body, "max_tokens");
    const sb_json *temp = given(body, "temperature"), *top_p = given(body, "top_p"), *top_k = given(body, "top_k"),
                  *min_p = given(body, "min_p"), *rp = given(body, "repeat_penalty"), *seed = given(body, "seed");
    if (mt && !sb_json_is_int(mt, 1, 1 << 20)) BAD("'max_tokens': expected a positive integer");
    if (temp && !num_in(temp, 0, 2)) BAD("'temperature': expected a number in [0, 2]");
    if (top_p && !num_in(top_p, 0, 1)) BAD("'top_p': expected a number in [0, 1]");
    if (min_p && !num_in(min_p, 0, 1)) BAD("'min_p': expected a number in [0, 1]");
    if (top_k && !sb_json_is_int(top_k, 0, 1 << 20)) BAD("'top_k': expected a non-negative integer");
    if (rp && !num_in(rp, 0.01, 100)) BAD("'repeat_penalty': expected a number in [0.01, 100]");
    if (seed && !sb_json_is_int(seed, INT64_MIN / 2, INT64_MAX / 2)) BAD("'seed': expected an integer");
    if (mt) sp->max_tokens = (int)sb_json_num(mt);
    if (temp) sp->temperature = sb_json_num(temp);
    if (top_p) sp->top_p = sb_json_num(top_p);
    if (min_p) sp->min_p = sb_json_num(min_p);
    if (top_k) sp->top_k = (int)sb_json_num(top_k);
    if (rp) sp->repeat_penalty = sb_json_num(rp);
    if (seed) sp->seed = (int64_t)sb_json_num(seed);
    g->has_seed = seed != NULL;
    return 0;
}

static int parse_stops(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    const sb_json *stop = given(body, "stop");
    if (!stop) return 0;
    if (sb_json_type_of(stop) == SB_JSON_STRING) {
        g->stops[0] = sb_json_str(stop);
        g->stop_lens[g->n_stops++] = sb_json_len(stop);
        return 0;
    }
    if (sb_json_type_of(stop) != SB_JSON_ARRAY || sb_json_len(stop) > RT_GEN_MAX_STOPS)
        BAD("'stop': expected a string or an array of at most %d strings", RT_GEN_MAX_STOPS);
    for (size_t i = 0; i < sb_json_len(stop); i++) {
        const sb_json *s = sb_json_at(stop, i);
        if (sb_json_type_of(s) != SB_JSON_STRING || !sb_json_len(s)) BAD("'stop': expected non-empty strings");
        g->stops[g->n_stops] = sb_json_str(s);
        g->stop_lens[g->n_stops++] = sb_json_len(s);
    }
    return 0;
}

/* response_format -> the JSON Schema text the worker constrains decoding
 * with (docs/GRAMMAR.md); none for text. json_object is the schema of any
 * object. The schema is compiled here too, so an unsupported keyword is the
 * caller's 400, not a worker error. */
static int parse_response_format(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    const sb_json *rf = sb_json_get(body, "response_format");
    if (!rf || sb_json_type_of(rf) == SB_JSON_NULL) return 0;
    const char *type = sb_json_str(sb_json_get(rf, "type"));
    if (sb_json_type_of(rf) != SB_JSON_OBJECT || !type)
        BAD("'response_format': expected {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
    sb_jw *schema = &g->own;
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        sb_jw_raw(schema, "{\"type\":\"object\"}", 17);
    } else if (!strcmp(type, "json_schema")) {
        const sb_json *s = sb_json_get(sb_json_get(rf, "json_schema"), "schema");
        if (sb_json_type_of(s) != SB_JSON_OBJECT && sb_json_type_of(s) != SB_JSON_BOOL)
            BAD("'response_format.json_schema.schema': expected a JSON Schema object");
        sb_jw_value(schema, s);
    } else {
        BAD("'response_format.type': '%.40s' is not one of text, json_object, json_schema", type);
    }
    sb_grammar *gr = NULL;
    char err[SB_ERR_LEN];
    if (schema->oom) BAD("'response_format': schema too large or too deep");
    if (sb_json_schema_compile(schema->p, schema->len, &gr, err))
        BAD("'response_format.json_schema.schema': %s", err);
    sb_grammar_free(gr);
    g->json_schema = schema->p;
    g->json_schema_len = schema->len;
    return 0;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function",
 * "function": {"name": N}}; the function's name goes into tools_own. */
static int parse_tool_choice(rt_gen_req *g, const sb_json *tc, char *why, size_t why_len) {
    const char *s = sb_json_str(tc), *name = sb_json_str(sb_json_get(sb_json_get(tc, "function"), "name"));
    const char *type = sb_json_str(sb_json_get(tc, "type"));
    if (s && !strcmp(s, "none")) g->tool_choice = RT_TOOLS_NONE;
    else if (s && !strcmp(s, "auto")) g->tool_choice = RT_TOOLS_AUTO;
    else if (s && !strcmp(s, "required")) g->tool_choice = RT_TOOLS_REQUIRED;
    else if (sb_json_type_of(tc) == SB_JSON_OBJECT && type && !strcmp(type, "function") && name && *name) {
        g->tool_choice = RT_TOOLS_REQUIRED;
        sb_jw_raw(&g->tools_own, name, strlen(name));
        g->tool_name_len = strlen(name);
    } else {
        BAD("'tool_choice': expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
            "{\"name\": string}}");
    }
    return 0;
}

/* tools, tool_choice, parallel_tool_calls; the tools are checked as the
 * worker will compile them (sb_chat.h), so a bad `parameters` schema is the
 * caller's 400 naming it. */
static int parse_tools(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    const sb_json *tools = given(body, "tools"), *tc = given(body, "tool_choice"), *ptc = given(body, "parallel_tool_calls");
    if (ptc && sb_json_type_of(ptc) != SB_JSON_BOOL) BAD("'parallel_tool_calls': expected a boolean");
    if (ptc) g->parallel_tool_calls = sb_json_bool(ptc);
    if (!tools) {
        if (tc) BAD("'tool_choice': only allowed when 'tools' are given");
        return 0;
    }
    if (g->kind != RT_KIND_CHAT) BAD("'tools': only on /v1/chat/completions");
    if (sb_json_type_of(tools) != SB_JSON_ARRAY || !sb_json_len(tools)) BAD("'tools': expected a non-empty array");
    if (g->json_schema) BAD("'response_format': not together with 'tools' (both constrain the answer)");
    sb_jw_value(&g->tools_own, tools);
    g->tools_len = g->tools_own.len;
    if (tc && parse_tool_choice(g, tc, why, why_len)) return SB_EINVAL;
    if (g->tools_own.oom) return SB_ENOMEM;
    char name[128] = "", err[SB_ERR_LEN];
    snprintf(name, sizeof name, "%.*s", (int)SB_MIN(g->tool_name_len, sizeof name - 1), g->tools_own.p + g->tools_len);
    sb_jw spec;
    sb_jw_init(&spec);
    sb_grammar *gr = NULL;
    int rc = sb_chat_tools_spec(SB_TOOLS_HERMES, g->tools_own.p, g->tools_len, SB_TOOL_CHOICE_AUTO,
                                g->tool_name_len ? name : NULL, 1, &spec, err);
    if (!rc) rc = sb_chat_tools_grammar(spec.p, spec.len, &gr, err);
    sb_grammar_free(gr);
    sb_jw_free(&spec);
    if (rc == SB_ENOMEM) return rc;
    if (rc) BAD("%s", err);
    return 0;
}

/* logprobs (chat: a boolean; completions: the number of top tokens, 0-5)
 * and top_logprobs (chat, 0-20, with logprobs). */
static int parse_logprobs(rt_gen_req *g, const sb_json *body, char *why, size_t why_len) {
    const sb_json *lp = given(body, "logprobs"), *top = given(body, "top_logprobs");
    if (g->kind != RT_KIND_CHAT) {
        if (top) BAD("'top_logprobs': not on /v1/completions (its 'logprobs' is the number of top tokens)");
        if (lp && !sb_json_is_int(lp, 0, 5)) BAD("'logprobs': expected an integer in [0, 5]");
        g->logprobs = lp != NULL;
        g->top_logprobs = lp ? (int)sb_json_num(lp) : 0;
        return 0;
    }
    if (lp && sb_json_type_of(lp) != SB_JSON_BOOL) BAD("'logprobs': expected a boolean");
    if (top && !sb_json_is_int(top, 0, 20)) BAD("'top_logprobs': expected an integer in [0, 20]");
    g->logprobs = sb_json_bool(lp);
    if (top && !g->logprobs) BAD("'top_logprobs': needs 'logprobs': true");
    g->top_logprobs = top ? (int)sb_json_num(top) : 0;
    return 0;
}

/* The checks run in the order clients have always seen their 400s in. */
int rt_gen_parse_openai(rt_gen_req *g, const sb_json *body, int kind, char *why, size_t why_len) {
    g->kind = kind;
    int rc;
    if ((rc = parse_input(g, body, why, why_len)) || (rc = parse_sampling(g, body, why, why_len)) ||
        (rc = parse_stops(g, body, why, why_len)) || (rc = parse_response_format(g, body, why, why_len)) ||
        (rc = parse_messages(g, body, why, why_len)) || (rc = parse_tools(g, body, why, why_len)) ||
        (rc = parse_logprobs(g, body, why, why_len)))
        return rc;
    return oom(g) ? SB_ENOMEM : 0;
}

/* ---------------------------------------------------------- a stage */

int rt_gen_set_prompt(rt_gen_req *g, bool chat, bool has_system, sb_segs *sys, sb_segs *prompt) {
    bool no_mem = sys->oom || prompt->oom;
    if (!chat) {
        /* A raw prompt: the system text, then the prompt, as segments. */
        g->kind = RT_KIND_COMPLETION;
        g->prompt_segments = true;
        sb_segs_cat(sys, prompt);
        sb_segs_free(prompt);
        sb_segs_free(&g->prompt);
        g->prompt = *sys;
        return no_mem || oom(g) ? SB_ENOMEM : 0;
    }
    g->kind = RT_KIND_CHAT;
    if (!(g->msgs = sb_calloc(2, sizeof *g->msgs))) {
        sb_segs_free(sys);
        sb_segs_free(prompt);
        return SB_ENOMEM;
    }
    if (has_system) g->msgs[g->n_msgs++] = (rt_gen_msg){ .role = "system", .content = *sys };
    else sb_segs_free(sys);
    g->msgs[g->n_msgs++] = (rt_gen_msg){ .role = "user", .content = *prompt };
    return no_mem || oom(g) ? SB_ENOMEM : 0;
}

/* -------------------------------------------------------------- copy */

/* A role as one of the static names parse_messages and rt_gen_set_prompt
 * give (so the copy need not own it). */
static const char *static_role(const char *role) {
    static const char *const roles[] = { "system", "user", "assistant", "tool" };
    for (size_t i = 0; i < SB_ARRAY_LEN(roles); i++)
        if (!strcmp(role, roles[i])) return roles[i];
    return NULL;
}

/* Every field: a new one must be copied here too (the static_assert below
 * points at the cache key; this is the other place that reads them all). */
int rt_gen_copy(rt_gen_req *dst, const rt_gen_req *src) {
    rt_gen_init(dst);
    dst->kind = src->kind;
    dst->stream = src->stream;
    dst->prompt_segments = src->prompt_segments;
    dst->sampling = src->sampling;
    dst->has_seed = src->has_seed;
    dst->priority = src->priority;
    sb_jw_raw(&dst->tools_own, src->tools_own.p, src->tools_own.len);
    dst->tools_len = src->tools_len;
    dst->tool_name_len = src->tool_name_len;
    dst->tool_choice = src->tool_choice;
    dst->parallel_tool_calls = src->parallel_tool_calls;
    dst->logprobs = src->logprobs;
    dst->top_logprobs = src->top_logprobs;
    sb_segs_cat(&dst->prompt, &src->prompt);
    if (src->n_msgs && !(dst->msgs = sb_calloc(src->n_msgs, sizeof *dst->msgs))) return SB_ENOMEM;
    for (size_t i = 0; i < src->n_msgs; i++, dst->n_msgs++) {
        rt_gen_msg *m = &dst->msgs[i];
        sb_segs_init(&m->content);
        sb_segs_cat(&m->content, &src->msgs[i].content);
        sb_jw_init(&m->tool);
        sb_jw_raw(&m->tool, src->msgs[i].tool.p, src->msgs[i].tool.len);
        m->tool_id_len = src->msgs[i].tool_id_len;
        if (!(m->role = static_role(src->msgs[i].role))) { dst->n_msgs++; rt_gen_free(dst); return SB_EINVAL; }
    }
    /* Stops and the schema go into own back to back; the views are set
     * once it has stopped growing. */
    size_t off[RT_GEN_MAX_STOPS + 1];
    for (size_t i = 0; i < src->n_stops; i++) {
        off[i] = dst->own.len;
        sb_jw_raw(&dst->own, src->stops[i], src->stop_lens[i]);
    }
    off[src->n_stops] = dst->own.len;
    if (src->json_schema) sb_jw_raw(&dst->own, src->json_schema, src->json_schema_len);
    if (oom(dst)) { rt_gen_free(dst); return SB_ENOMEM; }
    for (size_t i = 0; i < src->n_stops; i++) {
        dst->stops[i] = dst->own.p + off[i];
        dst->stop_lens[i] = src->stop_lens[i];
    }
    dst->n_stops = src->n_stops;
    if (src->json_schema) {
        dst->json_schema = dst->own.p + off[src->n_stops];
        dst->json_schema_len = src->json_schema_len;
    }
    return 0;
}

/* -------------------------------------------------------- the worker */

/* A prompt as the worker's `segments` (docs/ipc.md). Plain pieces leave
 * `special` out: false is its default. */
static void put_segs(sb_mp_writer *p, const sb_segs *s) {
    sb_mp_array(p, (uint32_t)s->n);
    for (size_t i = 0; i < s->n; i++) {
        sb_mp_map(p, s->v[i].special ? 2 : 1);
        sb_mp_str(p, "text");
        sb_mp_strn(p, s->text.p + s->v[i].off, s->v[i].len);
        if (s->v[i].special) sb_mp_kv_bool(p, "special", true);
    }
}

/* An assistant message's calls, from the JSON parse_calls wrote. */
static void put_calls(sb_mp_writer *p, const char *json, size_t len) {
    sb_json_doc *d;
    if (sb_json_parse(json, len, &d, NULL)) { sb_mp_nil(p); return; }   /* only when out of memory */
    const sb_json *calls = sb_json_root(d);
    sb_mp_array(p, (uint32_t)sb_json_len(calls));
    for (size_t k = 0; k < sb_json_len(calls); k++) {
        const sb_json *c = sb_json_at(calls, k);
        sb_mp_map(p, 3);
        static const char *const keys[] = { "id", "name", "arguments" };
        for (int f = 0; f < 3; f++) {
            const sb_json *v = sb_json_get(c, keys[f]);
            sb_mp_str(p, keys[f]);
            sb_mp_strn(p, sb_json_str(v), sb_json_len(v));
        }
    }
    sb_json_doc_free(d);
}

/* One chat message. Its content is a plain string (which a worker never
 * parses for special tokens) unless part of it is the operator's text. */
static void put_message(sb_mp_writer *p, const rt_gen_msg *m) {
    const sb_segs *content = &m->content;
    const size_t calls_len = m->tool.len - m->tool_id_len;
    sb_mp_map(p, 2 + (m->tool_id_len > 0) + (calls_len > 0));
    sb_mp_kv_str(p, "role", m->role);
    sb_mp_str(p, "content");
    if (sb_segs_any_special(content)) put_segs(p, content);
    else sb_mp_strn(p, content->text.p ? content->text.p : "", content->text.len);
    if (m->tool_id_len) { sb_mp_str(p, "tool_call_id"); sb_mp_strn(p, m->tool.p, m->tool_id_len); }
    if (calls_len) { sb_mp_str(p, "tool_calls"); put_calls(p, m->tool.p + m->tool_id_len, calls_len); }
}

int rt_gen_encode(const rt_gen_req *g, int priority, sb_mp_writer *p) {
    const sb_sampling *sp = &g->sampling;
    uint32_t n = 2 + (sp->temperature >= 0) + (sp->top_p >= 0) + (sp->min_p >= 0) + (sp->repeat_penalty >= 0) +
                 (sp->top_k >= 0) + (sp->max_tokens > 0) + g->has_seed + (g->n_stops > 0) + (g->json_schema != NULL) +
                 (priority != 0) + (g->tools_len > 0) + (g->tool_choice != RT_TOOLS_UNSET) + (g->tool_name_len > 0) +
                 (g->parallel_tool_calls >= 0 && g->tools_len > 0) + 2 * g->logprobs;
    sb_mp_map(p, n);
    sb_mp_kv_bool(p, "stream", g->stream);
    if (g->kind == RT_KIND_CHAT) {
        sb_mp_str(p, "messages");
        sb_mp_array(p, (uint32_t)g->n_msgs);
        for (size_t i = 0; i < g->n_msgs; i++) put_message(p, &g->msgs[i]);
    } else if (g->prompt_segments) {
        sb_mp_str(p, "segments");
        put_segs(p, &g->prompt);
    } else {
        sb_mp_str(p, "prompt");
        sb_mp_strn(p, g->prompt.text.p ? g->prompt.text.p : "", g->prompt.text.len);
    }
    if (sp->max_tokens > 0) sb_mp_kv_i64(p, "max_tokens", sp->max_tokens);
    if (sp->temperature >= 0) sb_mp_kv_f64(p, "temperature", sp->temperature);
    if (sp->top_p >= 0) sb_mp_kv_f64(p, "top_p", sp->top_p);
    if (sp->top_k >= 0) sb_mp_kv_i64(p, "top_k", sp->top_k);
    if (sp->min_p >= 0) sb_mp_kv_f64(p, "min_p", sp->min_p);
    if (sp->repeat_penalty >= 0) sb_mp_kv_f64(p, "repeat_penalty", sp->repeat_penalty);
    if (g->has_seed) sb_mp_kv_u64(p, "seed", (uint64_t)sp->seed);
    if (g->n_stops) {
        sb_mp_str(p, "stop");
        sb_mp_array(p, (uint32_t)g->n_stops);
        for (size_t i = 0; i < g->n_stops; i++) sb_mp_strn(p, g->stops[i], g->stop_lens[i]);
    }
    if (g->json_schema) {
        sb_mp_str(p, "json_schema");
        sb_mp_strn(p, g->json_schema, g->json_schema_len);
    }
    if (priority) sb_mp_kv_i64(p, "priority", priority);
    if (g->tools_len) { sb_mp_str(p, "tools"); sb_mp_strn(p, g->tools_own.p, g->tools_len); }
    if (g->tool_choice != RT_TOOLS_UNSET) {
        static const char *const choices[] = { "none", "auto", "required" };
        sb_mp_kv_str(p, "tool_choice", choices[g->tool_choice]);
    }
    if (g->tool_name_len) { sb_mp_str(p, "tool_name"); sb_mp_strn(p, g->tools_own.p + g->tools_len, g->tool_name_len); }
    if (g->parallel_tool_calls >= 0 && g->tools_len) sb_mp_kv_bool(p, "parallel_tool_calls", g->parallel_tool_calls);
    if (g->logprobs) {
        sb_mp_kv_bool(p, "logprobs", true);
        sb_mp_kv_i64(p, "top_logprobs", g->top_logprobs);
    }
    return sb_mp_writer_status(p);
}

/* -------------------------------------------------- score and embed */

/* The priority goes last, as the worker's batch scheduler reads it (a
 * worker that does not batch refuses it: the dispatcher decides). */
int rt_score_encode_prio(const rt_score_req *r, int priority, sb_mp_writer *p) {
    bool plain = r->kind != RT_KIND_CHAT && !sb_segs_any_special(r->prompt);
    sb_mp_map(p, (plain ? 3 : 2) + (priority != 0));
    if (r->kind == RT_KIND_CHAT) {
        sb_mp_str(p, "messages");
        sb_mp_array(p, (uint32_t)r->n_msgs);
        for (size_t i = 0; i < r->n_msgs; i++) put_message(p, &r->msgs[i]);
    } else if (!plain) {
        sb_mp_str(p, "segments");
        put_segs(p, r->prompt);
    } else {                        /* the caller's (or a document's) text only: as a plain prompt */
        sb_mp_str(p, "prompt");
        sb_mp_strn(p, r->prompt->text.p ? r->prompt->text.p : "", r->prompt->text.len);
        sb_mp_kv_bool(p, "special", false);
    }
    sb_mp_str(p, "candidates");
    sb_mp_array(p, (uint32_t)r->n_candidates);
    for (size_t i = 0; i < r->n_candidates; i++) sb_mp_str(p, r->candidates[i]);
    if (priority) sb_mp_kv_i64(p, "priority", priority);
    return sb_mp_writer_status(p);
}

int rt_score_encode(const rt_score_req *r, sb_mp_writer *p) { return rt_score_encode_prio(r, 0, p); }

int rt_embed_encode(const rt_embed_req *r, sb_mp_writer *p) {
    sb_mp_map(p, r->adapter ? 3 : 2);
    sb_mp_kv_str(p, "kind", r->kind);
    if (r->adapter) sb_mp_kv_str(p, "adapter", r->adapter);
    sb_mp_str(p, "texts");
    sb_mp_array(p, (uint32_t)r->n);
    for (size_t i = 0; i < r->n; i++) sb_mp_strn(p, r->texts[i], r->lens ? r->lens[i] : strlen(r->texts[i]));
    return sb_mp_writer_status(p);
}

/* The copies a queued score or embed call keeps: one allocation for the
 * struct and its arrays, the text in sb_segs (which own theirs). */
typedef struct {
    rt_score_req r;
    rt_gen_msg *msgs;
    sb_segs prompt;
    char **cands;
} score_copy;

static bool segs_copy(sb_segs *dst, const sb_segs *src) {
    sb_segs_init(dst);
    if (src) sb_segs_cat(dst, src);
    return !dst->oom;
}

rt_score_req *rt_score_copy(const rt_score_req *r) {
    score_copy *c = sb_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->r = *r;
    bool ok = segs_copy(&c->prompt, r->prompt);
    c->r.prompt = &c->prompt;
    c->msgs = r->n_msgs ? sb_calloc(r->n_msgs, sizeof *c->msgs) : NULL;
    c->cands = r->n_candidates ? sb_calloc(r->n_candidates, sizeof *c->cands) : NULL;
    ok &= (!r->n_msgs || c->msgs) && (!r->n_candidates || c->cands);
    for (size_t i = 0; ok && i < r->n_msgs; i++) {
        c->r.n_msgs = i + 1;
        ok = segs_copy(&c->msgs[i].content, &r->msgs[i].content) && (c->msgs[i].role = static_role(r->msgs[i].role));
    }
    for (size_t i = 0; ok && i < r->n_candidates; i++) ok = (c->cands[i] = sb_strdup(r->candidates[i])) != NULL;
    c->r.msgs = c->msgs;
    c->r.candidates = (const char *const *)c->cands;
    if (!ok) { rt_score_free(&c->r); return NULL; }
    return &c->r;
}

void rt_score_free(rt_score_req *r) {
    if (!r) return;
    score_copy *c = (score_copy *)r;     /* r is the first member */
    for (size_t i = 0; c->msgs && i < c->r.n_msgs; i++) sb_segs_free(&c->msgs[i].content);
    for (size_t i = 0; c->cands && i < c->r.n_candidates; i++) sb_free(c->cands[i]);
    sb_segs_free(&c->prompt);
    sb_free(c->msgs);
    sb_free(c->cands);
    sb_free(c);
}

typedef struct {
    rt_embed_req r;
    char **texts;
    size_t *lens;
    char kind[16];
    char adapter[SB_CONFIG_MAX_NAME + 1];
} embed_copy;

rt_embed_req *rt_embed_copy(const rt_embed_req *r) {
    embed_copy *c = sb_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->r = *r;
    snprintf(c->kind, sizeof c->kind, "%s", r->kind);
    c->r.kind = c->kind;
    if (r->adapter) snprintf(c->adapter, sizeof c->adapter, "%s", r->adapter), c->r.adapter = c->adapter;
    c->texts = sb_calloc(r->n ? r->n : 1, sizeof *c->texts);
    c->lens = sb_calloc(r->n ? r->n : 1, sizeof *c->lens);
    bool ok = c->texts && c->lens;
    for (size_t i = 0; ok && i < r->n; i++) {
        c->lens[i] = r->lens ? r->lens[i] : strlen(r->texts[i]);
        ok = (c->texts[i] = sb_malloc(c->lens[i] + 1)) != NULL;
        if (ok) { memcpy(c->texts[i], r->texts[i], c->lens[i]); c->texts[i][c->lens[i]] = '\0'; }
    }
    c->r.texts = (const char *const *)c->texts;
    c->r.lens = c->lens;
    if (!ok) { rt_embed_free(&c->r); return NULL; }
    return &c->r;
}

void rt_embed_free(rt_embed_req *r) {
    if (!r) return;
    embed_copy *c = (embed_copy *)r;     /* r is the first member */
    for (size_t i = 0; c->texts && i < c->r.n; i++) sb_free(c->texts[i]);
    sb_free(c->texts);
    sb_free(c->lens);
    sb_free(c);
}

/* --------------------------------------------------------- the cache */

/* A new field changes this size: put it into rt_gen_cache_key below, or add
 * it to the list there of what the key leaves out and why; then update the
 * number. */
static_assert(sizeof(rt_gen_req) == 592, "rt_gen_req changed: is the new field in rt_gen_cache_key?");

/* A message's text in the cache's canonical input: normalised here, one
 * message at a time, because the JSON it goes into escapes line breaks and
 * the normaliser keeps a line's indentation (docs/cache.md). */
static void cache_text(sb_jw *w, const sb_segs *c, bool normalise) {
    const char *s = c->text.p ? c->text.p : "";
    char *t = NULL;
    size_t tn = 0;
    if (normalise && !sb_cache_normalize(SB_NORM_DEFAULT, s, c->text.len, &t, &tn)) sb_jw_strn(w, t, tn);
    else if (normalise) w->oom = true;
    else sb_jw_strn(w, s, c->text.len);
    sb_free(t);
}

static bool any_special(const rt_gen_req *g) {
    bool sp = g->prompt_segments;
    for (size_t i = 0; i < g->n_msgs; i++) sp |= sb_segs_any_special(&g->msgs[i].content);
    return sp;
}

/* Tools anywhere (given, or calls and results in the history), or logprobs:
 * the stored answer (text and finish reason) could not replay them. */
static bool any_tools(const rt_gen_req *g) {
    bool t = g->tools_len > 0 || g->logprobs;
    for (size_t i = 0; i < g->n_msgs; i++) t |= g->msgs[i].tool.len > 0 || !strcmp(g->msgs[i].role, "tool");
    return t;
}

/* Left out of the key, on purpose: temperature (only 0 is cached: the
 * caller checks), top_p, min_p and seed (no effect on greedy decoding),
 * stream (the same answer either way), priority (when, not what), last_user
 * (part of msgs), own (json_schema's storage). A request with the operator's template pieces
 * (a stage's) is not cached here: a pipeline is cached whole (pipeapi.c); nor is one with
 * tools, tool calls or results, or logprobs (any_tools: the tools_own fields and the rest). */
int rt_gen_cache_key(const rt_gen_req *g, bool normalise, sb_jw *input, unsigned *norm, char *params,
                     size_t params_len) {
    if (any_special(g) || any_tools(g)) return -1;
    const sb_sampling *sp = &g->sampling;
    /* A completion's prompt is the client's own, parsed as it always was;
     * chat messages follow the prompt rules. */
    int pl = snprintf(params, params_len, "%s|max=%d|top_k=%d|rp=%g|stop=",
                      g->kind == RT_KIND_CHAT ? "chat|prompt=" RT_PROMPT_RULES : "text",
                      sp->max_tokens > 0 ? sp->max_tokens : -1, sp->top_k, sp->repeat_penalty);
    for (size_t i = 0; i < g->n_stops && pl > 0 && (size_t)pl < params_len; i++)
        pl += snprintf(params + pl, params_len - (size_t)pl, "%zu:%s,", g->stop_lens[i], g->stops[i]);
    if (g->json_schema && pl > 0 && (size_t)pl < params_len) {     /* another schema, another answer */
        uint8_t d[SB_SHA256_LEN];
        char hex[SB_CACHE_KEY_HEX];
        sb_sha256(g->json_schema, g->json_schema_len, d);
        sb_hex_encode(d, sizeof d, hex);
        pl += snprintf(params + pl, params_len - (size_t)pl, "|schema=%s", hex);
    }
    if (pl < 0 || (size_t)pl >= params_len) return -1;
    if (g->kind != RT_KIND_CHAT) {
        /* A completion's prompt is used as sent: NFC only, as its trailing
         * whitespace decides the next token. */
        *norm = SB_NORM_NFC;
        sb_jw_raw(input, g->prompt.text.p ? g->prompt.text.p : "", g->prompt.text.len);
        return input->oom ? -1 : 0;
    }
    *norm = 0;
    sb_jw_arr(input);
    for (size_t i = 0; i < g->n_msgs; i++) {
        sb_jw_obj(input);
        sb_jw_key(input, "role"); sb_jw_str(input, g->msgs[i].role);
        sb_jw_key(input, "content"); cache_text(input, &g->msgs[i].content, normalise);
        sb_jw_obj_end(input);
    }
    sb_jw_arr_end(input);
    return input->oom ? -1 : 0;
}
