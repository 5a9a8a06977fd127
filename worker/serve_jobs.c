/* serve_jobs.c - a worker's generate and score requests: the prompt in any
 * of its three forms (docs/ipc.md "Prompts"), the request's parameters, and
 * the reply - shared by the one-at-a-time compute thread (serve.c) and the
 * batched one (serve_batch.c), so both answer with the same fields. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/sb_spec.h"
#include "worker/serve_impl.h"

#define MAX_MESSAGES 256

void sb_serve_reply_invalid(sb_ipc_reply *r, const char *err) { sb_ipc_reply_error(r, SB_IPC_INVALID_REQUEST, "%s", err); }

/* ---- prompts -------------------------------------------------------------- */

/* Segments in one request (the top-level list, or all messages' parts). */
#define MAX_SEGMENTS 65536

/* [{"text": str, "special": bool = false}, ...] appended to p, or to parts
 * (when p is NULL; *n_parts counts them). `what` names the list in errors. */
static int read_segments(const sb_mp_obj *arr, const char *what, sb_prompt *p, sb_text_seg *parts, size_t *n_parts,
                         char *err) {
    static const char *const keys[] = { "text", "special", NULL };
    uint32_t n = sb_mp_count(arr);
    for (uint32_t i = 0; i < n; i++) {
        const sb_mp_obj *o = sb_mp_array_at(arr, i);
        const char *t;
        size_t l;
        bool special = false;
        char why[SB_ERR_LEN];
        if (sb_mp_type_of(o) != SB_MP_MAP || sb_mp_check_keys(o, keys, why) ||
            sb_mp_get_str(o, "text", SB_MP_REQUIRED, &t, &l, why) ||
            sb_mp_get_bool(o, "special", SB_MP_OPTIONAL, &special, why))
            return sb_seterr(err, SB_EINVAL, "%s[%u]: expected {\"text\": str, \"special\": bool}", what, i);
        if (p) sb_prompt_add(p, t, l, special);
        else parts[(*n_parts)++] = (sb_text_seg){ t, l, special };
    }
    return 0;
}

/* An assistant message's "tool_calls": [{"id": str, "name": str, "arguments":
 * str}] into out (which has room for them all). */
static int read_calls(const sb_mp_obj *arr, uint32_t msg, sb_chat_call *out, size_t *n, char *err) {
    static const char *const keys[] = { "id", "name", "arguments", NULL };
    for (uint32_t k = 0; k < sb_mp_count(arr); k++) {
        const sb_mp_obj *o = sb_mp_array_at(arr, k);
        sb_chat_call *c = &out[(*n)++];
        char why[SB_ERR_LEN];
        *c = (sb_chat_call){ 0 };
        if (sb_mp_type_of(o) != SB_MP_MAP || sb_mp_check_keys(o, keys, why) ||
            sb_mp_get_str(o, "id", SB_MP_OPTIONAL, &c->id, NULL, why) ||
            sb_mp_get_str(o, "name", SB_MP_REQUIRED, &c->name, NULL, why) ||
            sb_mp_get_str(o, "arguments", SB_MP_REQUIRED, &c->arguments, &c->arguments_len, why))
            return sb_seterr(err, SB_EINVAL, "'messages'[%u].tool_calls[%u]: expected {\"id\": str, \"name\": str, "
                             "\"arguments\": str}", msg, k);
    }
    return 0;
}

/* "messages": [{"role": str, "content": str | segments, "tool_calls": [...],
 * "tool_call_id": str}] in the model's chat template, with `tools` (JSON
 * text or NULL) when given. A string content is the sender's text and never
 * holds control tokens; the template's markers are trusted unless `special`
 * is off. Calls, results and tools are written in the template's tool format
 * (sb_chat.h), and only when there are any, so other prompts stay as they were. */
static int chat_prompt(worker *w, const sb_mp_obj *msgs, const char *tools, size_t tools_len, bool special, sb_prompt *p,
                       char *err) {
    uint32_t n = sb_mp_count(msgs);
    if (n == 0 || n > MAX_MESSAGES) return sb_seterr(err, SB_EINVAL, "'messages': expected 1..%d messages", MAX_MESSAGES);
    sb_chat_msg m[MAX_MESSAGES];
    size_t total = 0, used = 0, total_calls = 0, n_calls = 0;
    for (uint32_t i = 0; i < n; i++) {
        const sb_mp_obj *c = sb_mp_map_get(sb_mp_array_at(msgs, i), "content");
        const sb_mp_obj *tc = sb_mp_map_get(sb_mp_array_at(msgs, i), "tool_calls");
        if (sb_mp_type_of(c) == SB_MP_ARRAY) total += sb_mp_count(c);
        if (sb_mp_type_of(tc) == SB_MP_ARRAY) total_calls += sb_mp_count(tc);
    }
    if (total > MAX_SEGMENTS) return sb_seterr(err, SB_EINVAL, "'messages': at most %d content segments", MAX_SEGMENTS);
    if (total_calls > MAX_SEGMENTS) return sb_seterr(err, SB_EINVAL, "'messages': at most %d tool calls", MAX_SEGMENTS);
    sb_text_seg *parts = total ? sb_malloc(total * sizeof *parts) : NULL;
    sb_chat_call *calls = total_calls ? sb_malloc(total_calls * sizeof *calls) : NULL;
    int rc = (total && !parts) || (total_calls && !calls) ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    bool with_tools = tools != NULL;
    for (uint32_t i = 0; i < n && !rc; i++) {
        const sb_mp_obj *o = sb_mp_array_at(msgs, i), *c = sb_mp_map_get(o, "content"), *tc = NULL;
        size_t l;
        char why[SB_ERR_LEN], what[48];
        m[i] = (sb_chat_msg){ 0 };
        if (sb_mp_type_of(o) != SB_MP_MAP || sb_mp_get_str(o, "role", SB_MP_REQUIRED, &m[i].role, &l, why) ||
            sb_mp_get_container(o, "tool_calls", SB_MP_OPTIONAL, SB_MP_ARRAY, &tc, why) ||
            sb_mp_get_str(o, "tool_call_id", SB_MP_OPTIONAL, &m[i].tool_call_id, NULL, why) ||
            (sb_mp_type_of(c) != SB_MP_ARRAY && sb_mp_get_str(o, "content", tc ? SB_MP_OPTIONAL : SB_MP_REQUIRED,
                                                               &m[i].content, &l, why))) {
            rc = sb_seterr(err, SB_EINVAL, "'messages'[%u]: expected a map with string 'role' and 'content' "
                           "(a string or [{text, special}]; optional with 'tool_calls')", i);
            break;
        }
        if (sb_mp_type_of(c) == SB_MP_ARRAY) {
            snprintf(what, sizeof what, "'messages'[%u].content", i);
            m[i].parts = parts + used;
            rc = read_segments(c, what, NULL, parts, &used, err);
            m[i].n_parts = (size_t)(parts + used - m[i].parts);
        }
        if (!rc && tc) {
            m[i].calls = calls + n_calls;
            rc = read_calls(tc, i, calls, &n_calls, err);
            m[i].n_calls = (size_t)(calls + n_calls - m[i].calls);
        }
        with_tools |= m[i].n_calls > 0 || !strcmp(m[i].role, "tool");
    }
    if (!rc) rc = with_tools ? sb_engine_chat_prompt_tools(w->engine, m, n, tools, tools_len, p, err)
                             : sb_engine_chat_prompt(w->engine, m, n, p, err);
    if (!rc && !special) sb_prompt_all_plain(p);
    sb_free(parts);
    sb_free(calls);
    return rc;
}

/* The prompt of a request as token ids, BOS added when add_bos and the
 * model asks for it. Exactly one of: `key` ("prompt", or "text" for
 * tokenize: one string, special tokens parsed when `special`), "segments"
 * (each piece with its own special flag: a pipeline's template text and the
 * caller's words spliced into it) or "messages". */
int sb_serve_request_tokens(worker *w, const sb_mp_obj *params, const char *key, bool special, bool add_bos,
                          int32_t **ids, size_t *n_ids, char *err) {
    *ids = NULL;
    *n_ids = 0;
    const sb_mp_obj *msgs = NULL, *segs = NULL;
    if (sb_mp_get_container(params, "messages", SB_MP_OPTIONAL, SB_MP_ARRAY, &msgs, err) ||
        sb_mp_get_container(params, "segments", SB_MP_OPTIONAL, SB_MP_ARRAY, &segs, err))
        return SB_EINVAL;
    int given = !!msgs + !!segs + (sb_mp_map_get(params, key) != NULL);
    if (given != 1)
        return sb_seterr(err, SB_EINVAL, "expected exactly one of '%s', 'segments' and 'messages', got %d", key, given);
    const sb_vocab *v = sb_engine_vocab(w->engine);
    if (!msgs && !segs) {
        const char *text;
        size_t len;
        if (sb_mp_get_str(params, key, SB_MP_REQUIRED, &text, &len, err)) return SB_EINVAL;
        return sb_tokenize(v, text, len, add_bos, special, ids, n_ids, err);
    }
    sb_prompt p = { 0 };
    int rc = 0;
    if (segs) {
        /* Each segment says what it is; a global switch would only blur that. */
        if (sb_mp_map_get(params, "special"))
            rc = sb_seterr(err, SB_EINVAL, "'special' does not apply to 'segments' (each segment has its own)");
        else if (sb_mp_count(segs) > MAX_SEGMENTS)
            rc = sb_seterr(err, SB_EINVAL, "'segments': at most %d", MAX_SEGMENTS);
        else
            rc = read_segments(segs, "'segments'", &p, NULL, NULL, err);
    } else {
        const char *tools = NULL;
        size_t tools_len = 0;
        rc = sb_mp_get_str(params, "tools", SB_MP_OPTIONAL, &tools, &tools_len, err);
        if (!rc) rc = chat_prompt(w, msgs, tools, tools_len, special, &p, err);
    }
    if (!rc) rc = sb_tokenize_prompt(v, &p, add_bos, ids, n_ids, err);
    sb_prompt_free(&p);
    return rc;
}

/* ---- generate and score requests -------------------------------------------- */

/* A token's bytes as its piece renders them (may be part of a UTF-8
 * character, hence bin). */
static void put_token(sb_mp_writer *wr, const sb_vocab *v, int32_t tok, float lp) {
    char piece[256];
    int n = sb_token_to_piece(v, tok, piece, sizeof piece, 0);
    if (n < 0) n = 0;
    sb_mp_kv_i64(wr, "token", tok);
    sb_mp_str(wr, "bytes");
    sb_mp_bin(wr, piece, (size_t)SB_MIN(n, (int)sizeof piece));
    sb_mp_kv_f64(wr, "logprob", lp);
}

/* "logprobs": [{token, bytes, logprob, top: [{token, bytes, logprob}]}] for
 * the entries [from, to). */
static void put_logprobs(sb_mp_writer *wr, const gen_sink *g, size_t from, size_t to) {
    sb_mp_str(wr, "logprobs");
    sb_mp_array(wr, (uint32_t)(to - from));
    for (size_t i = from; i < to; i++) {
        const lp_entry *e = &g->lps[i];
        sb_mp_map(wr, 4);
        put_token(wr, g->vocab, e->tok, e->lp);
        sb_mp_str(wr, "top");
        sb_mp_array(wr, (uint32_t)e->n_top);
        for (int k = 0; k < e->n_top; k++) {
            sb_mp_map(wr, 3);
            put_token(wr, g->vocab, e->top[k], e->top_lp[k]);
        }
    }
}

static int on_piece(gen_sink *g, const char *text, size_t len, int32_t token) {
    stream_ctx *s = &g->s;
    sb_mp_writer_reset(s->wr);
    sb_mp_map(s->wr, 2 + (g->vocab != NULL));
    sb_mp_str(s->wr, "text");
    sb_mp_strn(s->wr, text, len);
    sb_mp_kv_i64(s->wr, "token", token);
    if (g->vocab) {
        put_logprobs(s->wr, g, g->lps_sent, g->n_lps);
        g->lps_sent = g->n_lps;
    }
    return sb_ipc_reply_event(s->j->reply, "token", s->wr) == SB_ECANCEL;
}

static void sink_logprob(void *ud, int32_t tok, float lp, const int32_t *top, const float *top_lp, int n_top) {
    gen_sink *g = ud;
    char *p = (char *)g->lps;
    if (sb_grow(&p, &g->cap_lps, (g->n_lps + 1) * sizeof *g->lps)) { g->lps_failed = 1; return; }
    g->lps = (lp_entry *)p;
    lp_entry *e = &g->lps[g->n_lps++];
    e->tok = tok;
    e->lp = lp;
    e->n_top = n_top;
    memcpy(e->top, top, (size_t)n_top * sizeof *top);
    memcpy(e->top_lp, top_lp, (size_t)n_top * sizeof *top_lp);
}

static int sink_piece(void *ud, const char *text, size_t len, int32_t token) {
    gen_sink *g = ud;
    if (g->len + len + 1 > g->cap) {
        size_t cap = (g->len + len + 1) * 2;
        char *nb = sb_realloc(g->buf, cap);
        if (!nb) return 1;
        g->buf = nb;
        g->cap = cap;
    }
    memcpy(g->buf + g->len, text, len);
    g->len += len;
    /* The grammar lets a call open only at the first byte: a call is held
     * back whole (the reply carries it as tool_calls), text streams. */
    if (g->call_opener && !g->decided && len) g->decided = text[0] == g->call_opener ? 2 : 1;
    return g->stream && (!g->call_opener || g->decided == 1) ? on_piece(g, text, len, token) : 0;
}

/* tools, tool_choice ("none" | "auto" | "required"), tool_name (a function:
 * required), parallel_tool_calls: the grammar of the answer (sb_chat.h). */
static int tools_params(worker *w, const sb_mp_obj *p, gen_req *g, char *err) {
    const char *tools = NULL, *choice_s = NULL, *name = NULL;
    size_t tools_len = 0;
    bool parallel = true;
    if (sb_mp_get_str(p, "tools", SB_MP_OPTIONAL, &tools, &tools_len, err) ||
        sb_mp_get_str(p, "tool_choice", SB_MP_OPTIONAL, &choice_s, NULL, err) ||
        sb_mp_get_str(p, "tool_name", SB_MP_OPTIONAL, &name, NULL, err) ||
        sb_mp_get_bool(p, "parallel_tool_calls", SB_MP_OPTIONAL, &parallel, err))
        return SB_EINVAL;
    int choice = name ? SB_TOOL_CHOICE_REQUIRED : SB_TOOL_CHOICE_AUTO;
    if (choice_s) {
        for (choice = SB_TOOL_CHOICE_REQUIRED; choice > 0 && strcmp(choice_s, sb_tool_choice_name(choice)); choice--) {}
        if (strcmp(choice_s, sb_tool_choice_name(choice)))
            return sb_seterr(err, SB_EINVAL, "'tool_choice': expected none, auto or required");
    }
    if ((choice_s || name) && !tools) return sb_seterr(err, SB_EINVAL, "'tool_choice'/'tool_name' need 'tools'");
    if (name && choice != SB_TOOL_CHOICE_REQUIRED) return sb_seterr(err, SB_EINVAL, "'tool_name' goes with tool_choice required");
    if (!tools || choice == SB_TOOL_CHOICE_NONE) return 0;
    if (g->o.json_schema) return sb_seterr(err, SB_EINVAL, "'json_schema' and 'tools' cannot constrain one answer together");
    g->tools_format = sb_engine_tools_format(w->engine);
    int rc = sb_chat_tools_spec(g->tools_format, tools, tools_len, choice, name, parallel, &g->tools_spec, err);
    if (rc) return rc;
    g->o.tools_grammar = g->tools_spec.p;
    g->o.tools_grammar_len = g->tools_spec.len;
    g->sink.call_opener = g->tools_format == SB_TOOLS_LLAMA31 ? '{' : '<';
    return 0;
}

/* 'priority' is read at enqueue (the queue is ordered by it); here it is
 * only validated. */
static int get_priority(const sb_mp_obj *p, char *err) {
    int64_t prio = 0;
    return sb_mp_get_int(p, "priority", SB_MP_OPTIONAL, -1000, 1000, &prio, err);
}

int sb_serve_gen_prepare(worker *w, job *j, sb_mp_writer *wr, gen_req *g) {
    char err[SB_ERR_LEN];
    const sb_mp_obj *p = j->params;
    memset(g, 0, sizeof *g);
    sb_jw_init(&g->tools_spec);
    sb_gen_opts *o = &g->o;
    sb_gen_opts_default(o);
    int64_t max_tokens = o->max_tokens, top_k = o->sampling.top_k, last_n = o->sampling.repeat_last_n,
            deadline_ms = w->deadline_ms, lookup = w->lookup;
    double temp = o->sampling.temp, top_p = o->sampling.top_p, min_p = o->sampling.min_p, rp = o->sampling.repeat_penalty;
    uint64_t seed = o->sampling.seed;
    bool stream = false, special = true, logprobs = false;
    int64_t top_logprobs = 0;
    const sb_mp_obj *stops = NULL;
    static const char *const allowed[] = { "prompt", "segments", "messages", "max_tokens", "temperature", "top_k",
                                           "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed", "stop",
                                           "stream", "deadline_ms", "special", "json_schema", "lookup", "priority",
                                           "tools", "tool_choice", "tool_name", "parallel_tool_calls", "logprobs",
                                           "top_logprobs", NULL };
    if (sb_mp_check_keys(p, allowed, err) ||
        sb_mp_get_int(p, "max_tokens", SB_MP_OPTIONAL, 1, w->max_tokens_cap, &max_tokens, err) ||
        sb_mp_get_num(p, "temperature", SB_MP_OPTIONAL, 0, 100, &temp, err) ||
        sb_mp_get_int(p, "top_k", SB_MP_OPTIONAL, 0, 1 << 20, &top_k, err) ||
        sb_mp_get_num(p, "top_p", SB_MP_OPTIONAL, 0, 1, &top_p, err) ||
        sb_mp_get_num(p, "min_p", SB_MP_OPTIONAL, 0, 1, &min_p, err) ||
        sb_mp_get_num(p, "repeat_penalty", SB_MP_OPTIONAL, 0.01, 100, &rp, err) ||
        sb_mp_get_int(p, "repeat_last_n", SB_MP_OPTIONAL, 0, 1 << 20, &last_n, err) ||
        sb_mp_get_u64(p, "seed", SB_MP_OPTIONAL, &seed, err) ||
        sb_mp_get_bool(p, "stream", SB_MP_OPTIONAL, &stream, err) ||
        sb_mp_get_bool(p, "special", SB_MP_OPTIONAL, &special, err) ||
        sb_mp_get_int(p, "deadline_ms", SB_MP_OPTIONAL, 0, 86400000, &deadline_ms, err) ||
        sb_mp_get_int(p, "lookup", SB_MP_OPTIONAL, 0, SB_SPEC_MAX_DRAFT, &lookup, err) ||
        sb_mp_get_bool(p, "logprobs", SB_MP_OPTIONAL, &logprobs, err) ||
        sb_mp_get_int(p, "top_logprobs", SB_MP_OPTIONAL, 0, SB_MAX_TOP_LOGPROBS, &top_logprobs, err) ||
        get_priority(p, err) ||
        sb_mp_get_container(p, "stop", SB_MP_OPTIONAL, SB_MP_ARRAY, &stops, err) ||
        sb_mp_get_str(p, "json_schema", SB_MP_OPTIONAL, &o->json_schema, &o->json_schema_len, err)) {
        sb_serve_reply_invalid(j->reply, err);
        return -1;
    }
    size_t n_stops = stops ? sb_mp_count(stops) : 0;
    if (n_stops > MAX_STOPS) { sb_serve_reply_invalid(j->reply, "'stop': at most 16 strings"); return -1; }
    for (size_t i = 0; i < n_stops; i++)
        if (sb_mp_as_str(sb_mp_array_at(stops, (uint32_t)i), &g->stop_v[i], NULL)) {
            sb_serve_reply_invalid(j->reply, "'stop': expected an array of strings");
            return -1;
        }
    int rc = tools_params(w, p, g, err);
    if (!rc) rc = sb_serve_request_tokens(w, p, "prompt", special, true, &g->ids, &g->n_ids, err);
    if (rc) {
        sb_ipc_reply_error(j->reply, rc == SB_ENOMEM ? SB_IPC_INTERNAL : SB_IPC_INVALID_REQUEST, "%s", err);
        sb_serve_gen_free(g);
        return -1;
    }
    o->max_tokens = (int)max_tokens;
    o->sampling.temp = (float)temp;
    o->sampling.top_k = (int)top_k;
    o->sampling.top_p = (float)top_p;
    o->sampling.min_p = (float)min_p;
    o->sampling.repeat_penalty = (float)rp;
    o->sampling.repeat_last_n = (int)last_n;
    o->sampling.seed = seed;
    o->lookup = (int)lookup;
    o->draft = w->draft;
    o->n_draft = w->n_draft;
    /* Verified through the one-token kernels: greedy text is plain decoding's,
     * token for token (docs/SPECULATIVE.md). */
    o->spec_exact = 1;
    o->stops = g->stop_v;
    o->n_stops = n_stops;
    o->cancel = &j->cancel;
    o->deadline = deadline_ms > 0 ? sb_now_s() + (double)deadline_ms / 1000.0 : 0;
    g->sink = (gen_sink){ { j, wr }, stream, NULL, 0, 0, g->sink.call_opener, 0, NULL, NULL, 0, 0, 0, 0 };
    o->on_piece = sink_piece;
    o->ud = &g->sink;
    if (logprobs) {
        g->sink.vocab = sb_engine_vocab(w->engine);
        o->on_logprob = sink_logprob;
        o->top_logprobs = (int)top_logprobs;
    }
    return 0;
}

void sb_serve_gen_reply(job *j, gen_req *g, int rc, const sb_gen_result *res, const char *err, sb_mp_writer *wr) {
    if (rc) {
        sb_ipc_reply_error(j->reply, rc == SB_ERANGE || rc == SB_EINVAL ? SB_IPC_INVALID_REQUEST : SB_IPC_INTERNAL, "%s", err);
    } else if (!strcmp(res->finish, "cancelled") && sb_ipc_reply_cancelled(j->reply)) {
        sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled after %d tokens", res->n_gen);
    } else {
        sb_chat_call *calls = NULL;
        size_t n_calls = 0;
        if (g->o.tools_grammar && sb_chat_parse_calls(g->tools_format, g->sink.buf ? g->sink.buf : "", g->sink.len,
                                                      &calls, &n_calls)) {
            sb_ipc_reply_error(j->reply, SB_IPC_INTERNAL, "out of memory");
            return;
        }
        if (g->sink.lps_failed) {
            sb_chat_calls_free(calls, n_calls);
            sb_ipc_reply_error(j->reply, SB_IPC_INTERNAL, "out of memory for logprobs");
            return;
        }
        sb_mp_writer_reset(wr);
        sb_mp_map(wr, 9 + (n_calls > 0) + (g->sink.vocab != NULL));
        if (g->sink.vocab) put_logprobs(wr, &g->sink, 0, g->sink.n_lps);
        sb_mp_str(wr, "text");
        if (n_calls) sb_mp_str(wr, "");
        else sb_mp_strn(wr, g->sink.buf ? g->sink.buf : "", g->sink.len);
        sb_mp_kv_str(wr, "finish_reason", n_calls ? "tool_calls" : res->finish);
        if (n_calls) {
            sb_mp_str(wr, "tool_calls");
            sb_mp_array(wr, (uint32_t)n_calls);
            for (size_t i = 0; i < n_calls; i++) {
                sb_mp_map(wr, 2);
                sb_mp_kv_str(wr, "name", calls[i].name);
                sb_mp_str(wr, "arguments");
                sb_mp_strn(wr, calls[i].arguments, calls[i].arguments_len);
            }
        }
        sb_chat_calls_free(calls, n_calls);
        sb_mp_kv_i64(wr, "prompt_tokens", res->n_prompt);
        sb_mp_kv_i64(wr, "reused_tokens", res->n_reused);
        sb_mp_kv_i64(wr, "completion_tokens", res->n_gen);
        sb_mp_kv_f64(wr, "prompt_ms", res->t_prompt * 1e3);
        sb_mp_kv_f64(wr, "gen_ms", res->t_gen * 1e3);
        sb_mp_kv_i64(wr, "drafted_tokens", res->n_drafted);
        sb_mp_kv_i64(wr, "accepted_tokens", res->n_accepted);
        sb_ipc_reply_ok(j->reply, wr);
    }
}

void sb_serve_gen_free(gen_req *g) {
    sb_jw_free(&g->tools_spec);
    sb_free(g->ids);
    sb_free(g->sink.buf);
    sb_free(g->sink.lps);
    g->sink.lps = NULL;
    g->ids = NULL;
    g->sink.buf = NULL;
}

void sb_serve_run_generate(worker *w, job *j, sb_mp_writer *wr) {
    gen_req g;
    if (sb_serve_gen_prepare(w, j, wr, &g)) return;
    char err[SB_ERR_LEN];
    sb_gen_result res;
    int rc = sb_engine_generate(w->engine, g.ids, (int)g.n_ids, &g.o, &res, err);
    sb_serve_gen_reply(j, &g, rc, &res, err, wr);
    sb_serve_gen_free(&g);
}

int sb_serve_score_prepare(worker *w, job *j, score_req *s) {
    char err[SB_ERR_LEN];
    const sb_mp_obj *p = j->params, *cands = NULL;
    static const char *const allowed[] = { "prompt", "segments", "messages", "candidates", "special", "priority", NULL };
    bool special = true;
    memset(s, 0, sizeof *s);
    if (sb_mp_check_keys(p, allowed, err) || get_priority(p, err) ||
        sb_mp_get_container(p, "candidates", SB_MP_REQUIRED, SB_MP_ARRAY, &cands, err) ||
        sb_mp_get_bool(p, "special", SB_MP_OPTIONAL, &special, err)) {
        sb_serve_reply_invalid(j->reply, err);
        return -1;
    }
    uint32_t nc = sb_mp_count(cands);
    if (nc == 0 || nc > MAX_CANDIDATES) { sb_serve_reply_invalid(j->reply, "'candidates': expected 1..256 strings"); return -1; }
    s->nc = nc;
    int rc = sb_serve_request_tokens(w, p, "prompt", special, true, &s->ids, &s->n_ids, err);
    for (uint32_t i = 0; i < nc && !rc; i++) {
        const char *cs;
        size_t cl, n;
        if (sb_mp_as_str(sb_mp_array_at(cands, i), &cs, &cl)) { rc = sb_seterr(err, SB_EINVAL, "'candidates'[%u]: expected a string", i); break; }
        /* A continuation: no BOS, no special tokens. */
        rc = sb_tokenize(sb_engine_vocab(w->engine), cs, cl, 0, 0, &s->ctoks[i], &n, err);
        s->clen[i] = (int)n;
        if (!rc && n == 0) rc = sb_seterr(err, SB_EINVAL, "'candidates'[%u] is empty", i);
    }
    if (rc) {
        sb_serve_score_reply(j, s, rc, err, NULL);
        sb_serve_score_free(s);
        return -1;
    }
    return 0;
}

void sb_serve_score_reply(job *j, const score_req *s, int rc, const char *err, sb_mp_writer *wr) {
    if (rc) {
        sb_ipc_reply_error(j->reply, rc == SB_EINVAL || rc == SB_ERANGE ? SB_IPC_INVALID_REQUEST : SB_IPC_INTERNAL, "%s", err);
        return;
    }
    /* probs: softmax over the candidates' total log-probabilities, i.e.
     * P(candidate | prompt, one of these candidates). */
    const uint32_t nc = s->nc;
    const double *lp = s->lp;
    double mx = lp[0], sum = 0;
    for (uint32_t i = 1; i < nc; i++) mx = lp[i] > mx ? lp[i] : mx;
    for (uint32_t i = 0; i < nc; i++) sum += exp(lp[i] - mx);
    sb_mp_writer_reset(wr);
    sb_mp_map(wr, 4);
    sb_mp_str(wr, "logprobs");
    sb_mp_array(wr, nc);
    for (uint32_t i = 0; i < nc; i++) sb_mp_f64(wr, lp[i]);
    sb_mp_str(wr, "probs");
    sb_mp_array(wr, nc);
    for (uint32_t i = 0; i < nc; i++) sb_mp_f64(wr, exp(lp[i] - mx) / sum);
    sb_mp_str(wr, "tokens");
    sb_mp_array(wr, nc);
    for (uint32_t i = 0; i < nc; i++) sb_mp_i64(wr, s->clen[i]);
    sb_mp_kv_i64(wr, "prompt_tokens", (int64_t)s->n_ids);
    sb_ipc_reply_ok(j->reply, wr);
}

void sb_serve_score_free(score_req *s) {
    sb_free(s->ids);
    s->ids = NULL;
    for (uint32_t i = 0; i < s->nc; i++) {
        sb_free(s->ctoks[i]);
        s->ctoks[i] = NULL;
    }
}

void sb_serve_run_score(worker *w, job *j, sb_mp_writer *wr) {
    score_req *s = sb_malloc(sizeof *s);
    if (!s) { sb_ipc_reply_error(j->reply, SB_IPC_INTERNAL, "out of memory"); return; }
    if (sb_serve_score_prepare(w, j, s) == 0) {
        char err[SB_ERR_LEN];
        int rc = sb_engine_score(w->engine, s->ids, (int)s->n_ids, (const int32_t *const *)s->ctoks, s->clen,
                                 (int)s->nc, s->lp, err);
        sb_serve_score_reply(j, s, rc, err, wr);
        sb_serve_score_free(s);
    }
    sb_free(s);
}
