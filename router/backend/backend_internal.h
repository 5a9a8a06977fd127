/* backend_internal.h - what the backend's files share and nothing above
 * them sees: the msgpack encoders of the typed requests (gen_req.c), the
 * decoder of a worker's replies into rt_reply (gen_req.c), and the upstream
 * backend's calls (upstream.c), which answer with rt_reply directly.
 * Private to router/backend/ (and the tests and fuzz targets of its codecs).
 */
#ifndef SB_BACKEND_INTERNAL_H
#define SB_BACKEND_INTERNAL_H

#include "router/backend/sb_backend.h"
#include "ipc/sb_ipc.h"

/* The worker's `generate` params (docs/ipc.md) into p: only what was given,
 * so the worker's defaults apply to the rest; `priority` too unless 0 (a
 * worker that batches takes it, docs/router.md). p's status on failure. */
int rt_gen_encode(const rt_gen_req *g, int priority, sb_mp_writer *p);

/* The `score` and `embed` params into p; a score's `priority` too unless 0
 * (an embed takes none: the router's queue orders it). p's status on
 * failure. rt_score_encode is rt_score_encode_prio with priority 0. */
int rt_score_encode_prio(const rt_score_req *r, int priority, sb_mp_writer *p);
int rt_score_encode(const rt_score_req *r, sb_mp_writer *p);
int rt_embed_encode(const rt_embed_req *r, sb_mp_writer *p);

/* Deep copies that own their text, for a call that waits in the queue;
 * freed with rt_score_free / rt_embed_free (which free the struct too).
 * NULL when out of memory. */
rt_score_req *rt_score_copy(const rt_score_req *r);
void rt_score_free(rt_score_req *r);
rt_embed_req *rt_embed_copy(const rt_embed_req *r);
void rt_embed_free(rt_embed_req *r);

/* A worker's answer to a method (RT_CALL_*) as the typed reply: res's
 * fields are read once here. store keeps the decoded arrays (free both
 * with sb_free after the callback); a reply it cannot hold (out of memory)
 * is a failure with code SB_IPC_INTERNAL. */
void rt_reply_from_worker(int method, const sb_ipc_result *res, rt_reply *out, void *store[2]);
/* A generate's `token` event as the typed token: its text, and its logprobs
 * entries in *store (sb_free after the callback). 0; SB_EINVAL: no text (not
 * a token); SB_ENOMEM (t then has the text without its entries). */
int rt_token_from_worker(const sb_mp_obj *data, rt_token *t, void **store);

/* upstream.c: a remote model's generations. on_done exactly once, from the
 * loop; none after rt_upstream_cancel. The OpenAI API has nothing for
 * `score` or `embed`: those (g NULL) are refused with SB_EUNSUP. g is read
 * during the call only. */
typedef void (*rt_up_done_fn)(void *arg, const rt_reply *r);
int  rt_upstream_call(rt_model *m, int method, const rt_gen_req *g, int timeout_ms, rt_token_fn on_token,
                      rt_up_done_fn on_done, void *arg, uint64_t *id_out, char *err);
int  rt_upstream_cancel(rt_model *m, uint64_t id);     /* SB_ENOTFOUND when finished */
void rt_upstream_free_all(rt_model *m);                 /* no callbacks */
/* The answer parsing of a call without the network: status `code` (0: no
 * answer), the body in pieces of `chunk` bytes (0: one piece), exactly one
 * on_done. For tests/fuzz/fuzz_upstream.c. */
void rt_upstream_feed(bool chat, bool stream, int code, const char *body, size_t len, size_t chunk,
                      rt_token_fn on_token, rt_up_done_fn on_done, void *arg);

/* upstream_reply.c: an OpenAI answer's choices[0].logprobs (chat's shape,
 * or the legacy completions' when !chat) as entries in one allocation
 * (*store, sb_free after the callback; NULL/0 for null), and
 * message.tool_calls as views into the parsed answer (*out, sb_free).
 * 0; SB_EINVAL with what is wrong in why; SB_ENOMEM. */
int rt_up_logprobs(const sb_json *lp, bool chat, rt_logprob **out, size_t *n, void **store, char *why,
                   size_t why_len);
int rt_up_tool_calls(const sb_json *calls, rt_tool_call **out, size_t *n, char *why, size_t why_len);

/* A stream's tool-call deltas put together: per call its id, name and
 * arguments so far. rt_up_calls_view gives views valid until the next add
 * or free. */
#define RT_UP_MAX_CALLS 64
typedef struct {
    sb_jw part[RT_UP_MAX_CALLS][3];
    size_t n;
} rt_up_calls;
int  rt_up_calls_add(rt_up_calls *acc, const sb_json *deltas, char *why, size_t why_len);
void rt_up_calls_view(const rt_up_calls *acc, rt_tool_call *out);
void rt_up_calls_free(rt_up_calls *acc);

#endif
