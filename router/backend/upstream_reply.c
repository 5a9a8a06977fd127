/* upstream_reply.c - the parts of an OpenAI answer beyond its text, read
 * into the typed reply: choices[0].logprobs (chat's {"content": [...]} or
 * the legacy completions' parallel arrays) and message.tool_calls, whole or
 * as a stream's delta fragments. upstream.c owns the calls; this file only
 * decodes. Every entry is copied into memory the caller frees, because a
 * stream's chunks are parsed and freed one by one.
 */
#include <stdio.h>
#include <string.h>

#include "router/backend/backend_internal.h"

#define BADF(...) (snprintf(why, why_len, __VA_ARGS__), SB_EINVAL)

/* --------------------------------------------------------- logprobs */

/* The sizes one pass over the entries adds up, then the memory they fill. */
typedef struct {
    size_t n_top, n_bytes;
    rt_token_prob *top;             /* the next free top entry */
    char *bytes;                    /* the next free byte */
    bool fill;                      /* false: count only */
} lp_pass;

/* A token's bytes: its `bytes` array when the upstream sent one (a token
 * may be part of a UTF-8 character, which its text cannot hold), else its
 * text. */
static int put_bytes(lp_pass *p, const sb_json *text, const sb_json *bytes, rt_token_prob *out, char *why,
                     size_t why_len) {
    size_t n = sb_json_type_of(bytes) == SB_JSON_ARRAY ? sb_json_len(bytes) : sb_json_len(text);
    if (sb_json_type_of(bytes) != SB_JSON_ARRAY && sb_json_type_of(text) != SB_JSON_STRING)
        return BADF("a token has neither a string 'token' nor a 'bytes' array");
    if (!p->fill) { p->n_bytes += n; return 0; }
    out->bytes = p->bytes;
    out->len = n;
    for (size_t i = 0; i < n; i++) {
        if (sb_json_type_of(bytes) != SB_JSON_ARRAY) { p->bytes[i] = sb_json_str(text)[i]; continue; }
        if (!sb_json_is_int(sb_json_at(bytes, i), 0, 255)) return BADF("a token's 'bytes' holds a non-byte");
        p->bytes[i] = (char)(int)sb_json_num(sb_json_at(bytes, i));
    }
    p->bytes += n;
    return 0;
}

/* One {"token", "logprob", "bytes"} object. */
static int chat_prob(lp_pass *p, const sb_json *o, rt_token_prob *out, char *why, size_t why_len) {
    const sb_json *lp = sb_json_get(o, "logprob");
    if (sb_json_type_of(lp) != SB_JSON_NUMBER) return BADF("a token has no numeric 'logprob'");
    if (p->fill) out->logprob = sb_json_num(lp);
    return put_bytes(p, sb_json_get(o, "token"), sb_json_get(o, "bytes"), out, why, why_len);
}

static int chat_entries(lp_pass *p, const sb_json *content, rt_logprob *e, char *why, size_t why_len) {
    for (size_t i = 0; i < sb_json_len(content); i++) {
        const sb_json *o = sb_json_at(content, i), *top = sb_json_get(o, "top_logprobs");
        if (sb_json_type_of(top) != SB_JSON_ARRAY && sb_json_type_of(top) != SB_JSON_NULL)
            return BADF("content[%zu].top_logprobs: expected an array", i);
        if (chat_prob(p, o, p->fill ? &e[i].tok : NULL, why, why_len)) return SB_EINVAL;
        size_t k = sb_json_len(top);
        rt_token_prob *t = p->top;
        if (p->fill) {
            e[i].top = t;
            e[i].n_top = k;
            p->top += k;
        } else {
            p->n_top += k;
        }
        for (size_t j = 0; j < k; j++)
            if (chat_prob(p, sb_json_at(top, j), p->fill ? &t[j] : NULL, why, why_len)) return SB_EINVAL;
    }
    return 0;
}

/* The legacy shape: tokens[i], token_logprobs[i], top_logprobs[i] as
 * {token text: logprob}. */
static int legacy_entries(lp_pass *p, const sb_json *lp, rt_logprob *e, char *why, size_t why_len) {
    const sb_json *toks = sb_json_get(lp, "tokens"), *lps = sb_json_get(lp, "token_logprobs");
    const sb_json *tops = sb_json_get(lp, "top_logprobs");
    for (size_t i = 0; i < sb_json_len(toks); i++) {
        const sb_json *v = sb_json_at(lps, i), *top = sb_json_at(tops, i);
        if (sb_json_type_of(v) != SB_JSON_NUMBER && sb_json_type_of(v) != SB_JSON_NULL)
            return BADF("token_logprobs[%zu]: expected a number", i);
        if (put_bytes(p, sb_json_at(toks, i), NULL, p->fill ? &e[i].tok : NULL, why, why_len)) return SB_EINVAL;
        size_t k = sb_json_type_of(top) == SB_JSON_OBJECT ? sb_json_len(top) : 0;
        if (!p->fill) {
            p->n_top += k;
            for (size_t j = 0; j < k; j++) p->n_bytes += strlen(sb_json_key_at(top, j));
            continue;
        }
        e[i].tok.logprob = sb_json_num(v);
        rt_token_prob *dst = p->top;
        e[i].top = dst;
        e[i].n_top = k;
        p->top += k;
        for (size_t j = 0; j < k; j++) {
            rt_token_prob *t = &dst[j];
            const char *key = sb_json_key_at(top, j);
            t->logprob = sb_json_num(sb_json_val_at(top, j));
            t->bytes = p->bytes;
            t->len = strlen(key);
            memcpy(p->bytes, key, t->len);
            p->bytes += t->len;
        }
    }
    return 0;
}

static int entries(lp_pass *p, const sb_json *lp, bool chat, rt_logprob *e, char *why, size_t why_len) {
    return chat ? chat_entries(p, sb_json_get(lp, "content"), e, why, why_len) : legacy_entries(p, lp, e, why, why_len);
}

int rt_up_logprobs(const sb_json *lp, bool chat, rt_logprob **out, size_t *n, void **store, char *why,
                   size_t why_len) {
    *out = NULL;
    *n = 0;
    *store = NULL;
    if (sb_json_type_of(lp) == SB_JSON_NULL) return 0;
    const sb_json *list = chat ? sb_json_get(lp, "content") : sb_json_get(lp, "tokens");
    if (sb_json_type_of(lp) != SB_JSON_OBJECT ||
        (sb_json_type_of(list) != SB_JSON_ARRAY && sb_json_type_of(list) != SB_JSON_NULL))
        return BADF("expected {\"%s\": [...]}", chat ? "content" : "tokens");
    lp_pass p = { 0 };
    if (entries(&p, lp, chat, NULL, why, why_len)) return SB_EINVAL;
    size_t k = sb_json_len(list);
    size_t size = k * sizeof(rt_logprob) + p.n_top * sizeof(rt_token_prob) + p.n_bytes + 1;
    rt_logprob *e = sb_calloc(1, size);
    if (!e) return SB_ENOMEM;
    p = (lp_pass){ .fill = true, .top = (rt_token_prob *)(e + k), .bytes = (char *)((rt_token_prob *)(e + k) + p.n_top) };
    if (entries(&p, lp, chat, e, why, why_len)) { sb_free(e); return SB_EINVAL; }
    *out = e;
    *n = k;
    *store = e;
    return 0;
}

/* ------------------------------------------------------- tool calls */

int rt_up_tool_calls(const sb_json *calls, rt_tool_call **out, size_t *n, char *why, size_t why_len) {
    *out = NULL;
    *n = 0;
    if (sb_json_type_of(calls) == SB_JSON_NULL) return 0;
    if (sb_json_type_of(calls) != SB_JSON_ARRAY) return BADF("message.tool_calls: expected an array");
    size_t k = sb_json_len(calls);
    rt_tool_call *v = k ? sb_calloc(k, sizeof *v) : NULL;
    if (k && !v) return SB_ENOMEM;
    for (size_t i = 0; i < k; i++) {
        const sb_json *c = sb_json_at(calls, i), *f = sb_json_get(c, "function"), *id = sb_json_get(c, "id");
        const sb_json *name = sb_json_get(f, "name"), *args = sb_json_get(f, "arguments");
        if (sb_json_type_of(name) != SB_JSON_STRING || sb_json_type_of(args) != SB_JSON_STRING ||
            (id && sb_json_type_of(id) != SB_JSON_STRING)) {
            sb_free(v);
            return BADF("message.tool_calls[%zu]: expected {\"id\", \"function\": {\"name\", \"arguments\"}} strings", i);
        }
        v[i] = (rt_tool_call){ .name = sb_json_str(name), .name_len = sb_json_len(name),
                               .arguments = sb_json_str(args), .arguments_len = sb_json_len(args),
                               .id = id ? sb_json_str(id) : NULL, .id_len = sb_json_len(id) };
    }
    *out = v;
    *n = k;
    return 0;
}

/* A stream's calls arrive as fragments: the first delta of a call carries
 * its index, id and name, later ones more of its arguments. */
int rt_up_calls_add(rt_up_calls *acc, const sb_json *deltas, char *why, size_t why_len) {
    for (size_t i = 0; i < sb_json_len(deltas); i++) {
        const sb_json *d = sb_json_at(deltas, i), *f = sb_json_get(d, "function");
        const sb_json *idx = sb_json_get(d, "index"), *id = sb_json_get(d, "id");
        const sb_json *name = sb_json_get(f, "name"), *args = sb_json_get(f, "arguments");
        size_t k = idx ? (size_t)sb_json_num(idx) : acc->n ? acc->n - 1 : 0;
        if (idx && !sb_json_is_int(idx, 0, RT_UP_MAX_CALLS - 1))
            return BADF("a tool_calls delta's index is not in [0, %d]", RT_UP_MAX_CALLS - 1);
        if (k > acc->n) return BADF("a tool_calls delta skips index %zu", acc->n);
        if (k == acc->n) {
            for (int j = 0; j < 3; j++) sb_jw_init(&acc->part[k][j]);
            acc->n++;
        }
        if (sb_json_type_of(id) == SB_JSON_STRING) sb_jw_raw(&acc->part[k][0], sb_json_str(id), sb_json_len(id));
        if (sb_json_type_of(name) == SB_JSON_STRING) sb_jw_raw(&acc->part[k][1], sb_json_str(name), sb_json_len(name));
        if (sb_json_type_of(args) == SB_JSON_STRING) sb_jw_raw(&acc->part[k][2], sb_json_str(args), sb_json_len(args));
        for (int j = 0; j < 3; j++)
            if (acc->part[k][j].oom) return SB_ENOMEM;
    }
    return 0;
}

void rt_up_calls_view(const rt_up_calls *acc, rt_tool_call *out) {
    for (size_t k = 0; k < acc->n; k++) {
        const sb_jw *p = acc->part[k];
        out[k] = (rt_tool_call){ .id = p[0].len ? p[0].p : NULL, .id_len = p[0].len,
                                 .name = p[1].p ? p[1].p : "", .name_len = p[1].len,
                                 .arguments = p[2].p ? p[2].p : "", .arguments_len = p[2].len };
    }
}

void rt_up_calls_free(rt_up_calls *acc) {
    for (size_t k = 0; k < acc->n; k++)
        for (int j = 0; j < 3; j++) sb_jw_free(&acc->part[k][j]);
    acc->n = 0;
}
