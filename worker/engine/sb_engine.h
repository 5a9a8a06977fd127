/* sb_engine.h - one loaded model ready to serve: weights, vocabulary, chat
 * template and an inference context, with generation and scoring on top.
 *
 * This is what a worker process holds and what the CLI commands use, so
 * `switchboard generate` and a `generate` request over the socket run the
 * same code. Not thread-safe: one caller at a time (the worker's compute
 * thread); the engine's own thread pool parallelises inside a call.
 *
 * KV reuse: the engine remembers which tokens its KV cache holds and, for a
 * new prompt, evaluates only what follows the longest common prefix — a
 * pipeline stage's fixed system prompt is computed once, not per caller.
 */
#ifndef SB_ENGINE_H
#define SB_ENGINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/engine/sb_chat.h"
#include "worker/engine/sb_model.h"
#include "worker/engine/sb_sampler.h"
#include "worker/tokenizer/sb_vocab.h"

typedef struct sb_engine sb_engine;

int  sb_engine_open(const char *path, const sb_ctx_params *p, sb_engine **out, char *err);
/* The same with a KV pool of kv_mb MiB. p->n_seq is the number of tasks that
 * may run at once (sb_engine_submit_*; 0, the default: none, only
 * sb_engine_generate/score). kv_mb 0: p->kv_blocks decides, and
 * when that is 0 too the pool holds one whole context plus 1024 positions
 * per further task (n_seq 1: one context, as before). */
int  sb_engine_open_kv(const char *path, const sb_ctx_params *p, int kv_mb, sb_engine **out, char *err);
/* MiB of KV one full context takes (a pool smaller than this cannot hold
 * one sequence at n_ctx). */
int  sb_engine_kv_mb_min(const sb_engine *e, int kv_f32);
void sb_engine_free(sb_engine *e);
const sb_model *sb_engine_model(const sb_engine *e);
const sb_vocab *sb_engine_vocab(const sb_engine *e);
int  sb_engine_n_ctx(const sb_engine *e);
int  sb_engine_chat_kind(const sb_engine *e);     /* SB_CHAT_*; UNKNOWN falls back to chatml */

/* Append messages in the model's chat template (generation prompt added)
 * to *out: markers trusted, contents untrusted unless given as trusted parts
 * (sb_chat.h). Tokenize the result with sb_engine_tokenize_prompt. */
int sb_engine_chat_prompt(const sb_engine *e, const sb_chat_msg *msgs, size_t n, sb_prompt *out, char *err);
/* The same with tools (OpenAI's `tools` JSON array, or NULL), calls and
 * results in the history, in the template's tool format (sb_chat.h). */
int sb_engine_chat_prompt_tools(const sb_engine *e, const sb_chat_msg *msgs, size_t n, const char *tools,
                                size_t tools_len, sb_prompt *out, char *err);
int sb_engine_tools_format(const sb_engine *e);  /* SB_TOOLS_* of the model's template */
/* Tokenize with the model's BOS rule; special tokens parsed when `special`. */
int sb_engine_tokenize(const sb_engine *e, const char *text, size_t len, int special,
                       int32_t **out, size_t *n, char *err);
/* The same for an assembled prompt: special tokens parsed in its trusted
 * text only. */
int sb_engine_tokenize_prompt(const sb_engine *e, const sb_prompt *p, int32_t **out, size_t *n, char *err);

/* Called with each piece of generated text, already cut at stop strings and
 * never ending inside a UTF-8 sequence. Return nonzero to stop early. */
typedef int (*sb_piece_fn)(void *ud, const char *text, size_t len, int32_t token);

/* A generated token's log-probability and the n_top most likely tokens
 * at its position (highest first), from the logits the sampler saw: the
 * model's log-softmax, over the grammar's allowed tokens only (renormalised)
 * when one is active; before temperature, penalties and top-k/p/min-p. */
typedef void (*sb_logprob_fn)(void *ud, int32_t token, float logprob, const int32_t *top, const float *top_lp,
                              int n_top);
#define SB_MAX_TOP_LOGPROBS 20

typedef struct {
    int max_tokens;                 /* ≤ 0: until the context is full */
    sb_sampling_params sampling;
    const char *const *stops;
    size_t n_stops;
    double deadline;                /* absolute sb_now_s(); 0 = none */
    const atomic_int *cancel;       /* nonzero: stop as soon as possible */
    sb_piece_fn on_piece;
    void *ud;
    /* Called (with ud) for every token emitted, before its piece, when set;
     * top_logprobs in [0, SB_MAX_TOP_LOGPROBS]. Speculative decoding is off
     * for such a generation (drafted tokens are accepted without a sample). */
    sb_logprob_fn on_logprob;
    int top_logprobs;
    /* JSON Schema text (not NUL-terminated): only tokens that continue a
     * document valid against it are sampled, EOS only once it is complete,
     * and generation ends as soon as nothing can follow (docs/GRAMMAR.md).
     * NULL: unconstrained. The compiled grammar and its mask cache are kept
     * for the engine's last few schemas. */
    const char *json_schema;
    size_t json_schema_len;
    /* Or a tool-call grammar's spec (sb_chat_tools_spec): the answer is
     * calls to the tools, or text, as the spec's choice says. Cached like a
     * schema. Ignored when json_schema is set. */
    const char *tools_grammar;
    size_t tools_grammar_len;
    /* Speculative decoding (docs/SPECULATIVE.md): draft up to `lookup`
     * tokens per step by prompt lookup, or up to `n_draft` with the `draft`
     * engine (checked with sb_engine_check_draft; lookup wins when both are
     * set). Drafts are verified in one batched pass; sampled output has the
     * distribution of plain decoding, greedy output its tokens (exactly
     * with spec_exact; else up to the tiled kernels' rounding, which can
     * only flip a near-tie). 0 / NULL: off. At most SB_SPEC_MAX_DRAFT. */
    int lookup;
    sb_engine *draft;
    int n_draft;
    int spec_exact;                 /* verify through the one-token kernels (sb_ctx_seq_verify) */
    /* Prompt lookup's cost model (sb_spec.h): 0: the passes are timed, so
     * the drafts, not the text, vary with the machine's load; > 0: a check
     * of n tokens costs 1 + spec_cost·(n − 1) plain steps (reproducible
     * drafts: tests, `bench --spec-cost`). */
    double spec_cost;
} sb_gen_opts;

typedef struct {
    int n_prompt, n_reused, n_gen;
    int n_drafted, n_accepted;      /* speculative: tokens proposed, and accepted by the model */
    const char *finish;             /* "stop", "length", "cancelled", "timeout" */
    double t_prompt, t_gen;         /* seconds */
    double t_mask;                  /* of t_gen: computing grammar masks */
    uint64_t masks_computed, masks_reused;  /* this call's mask cache misses / hits */
} sb_gen_result;

void sb_gen_opts_default(sb_gen_opts *o);

/* Forget the KV cache, so the next prompt is evaluated whole: runs that
 * must compare outputs start from the same numbers (a reused prefix
 * re-evaluates the last prompt token alone, through other kernels). */
void sb_engine_reset(sb_engine *e);

/* 0 if `draft` can draft for `target`: the same token list (ids and
 * texts). SB_EINVAL with a message naming the first difference otherwise. */
int sb_engine_check_draft(const sb_engine *target, const sb_engine *draft, char *err);

int sb_engine_generate(sb_engine *e, const int32_t *prompt, int n_prompt, const sb_gen_opts *o,
                       sb_gen_result *res, char *err);

/* Log-probability of each candidate continuation after a shared prompt: the
 * prompt is evaluated once (and reused from the KV cache when it can be),
 * every candidate is then evaluated from that state. logprobs[i] is the
 * sum over candidate i's tokens; n_tokens[i] its token count. */
int sb_engine_score(sb_engine *e, const int32_t *prompt, int n_prompt, const int32_t *const *cands,
                    const int *cand_lens, int n_cands, double *logprobs, char *err);

/* ---- many requests at once (continuous batching) ---------------------------
 *
 * With ctx params n_seq > 1 the engine runs several tasks together: each
 * sb_engine_step is one forward pass that advances every running
 * generation by a token, and every prompt still being read by a chunk
 * (chunked prefill), so a new request joins at the next step. A task's
 * output is what it gives run alone (sb_ctx_eval_parts).
 *
 * Prefixes: the engine keeps an LRU of evaluated prompt prefixes (whole
 * KV blocks, shared read-only); a new task starts from the longest one
 * that matches and evaluates only the rest. Cached prefixes are evicted,
 * least recently used first, when admission needs their blocks.
 *
 * Same thread rules as the rest of the engine: one caller at a time.
 * sb_engine_generate/score keep their own path on sequence 0 (token-exact
 * prefix reuse with the previous call, speculative decoding); they share
 * the choose-and-emit code with tasks, so a task's output is theirs, but
 * must not run while tasks do (their sequence 0 is not reserved). Tasks
 * need an engine opened with n_seq >= 1 (SB_EINVAL otherwise). Scheduling,
 * reservations and the prefix cache: docs/BATCHING.md. */

typedef struct sb_task sb_task;

/* Admit a task. SB_EBUSY, nothing changed, when no sequence is free, when
 * the pool (after evicting cached prefixes) cannot reserve every block the
 * task may take (prompt + max_tokens, capped by n_ctx), or while a running
 * task is still reading the start this prompt shares with it (it then
 * starts from that task's cached prefix); the caller keeps it queued.
 * SB_ERANGE when the task could never fit (the prompt, or the whole pool). The prompt and candidates are copied; `o`
 * (callbacks, stops, cancel flag) must stay valid until the task is freed.
 * priority: higher first when the step's token budget is short. */
int sb_engine_submit_generate(sb_engine *e, const int32_t *prompt, int n_prompt, const sb_gen_opts *o,
                              int priority, sb_task **out, char *err);
int sb_engine_submit_score(sb_engine *e, const int32_t *prompt, int n_prompt, const int32_t *const *cands,
                           const int *cand_lens, int n_cands, int priority, sb_task **out, char *err);
/* One batched forward pass over the running tasks. Returns how many are
 * still running (0: idle), or an error that failed every running task. */
int sb_engine_step(sb_engine *e, char *err);
/* 0 while running; 1 when finished (res filled, or for a score task its
 * n_prompt / n_reused / t_prompt and logprobs[0..n_cands)); < 0: the task
 * failed, err says why. */
int sb_task_poll(const sb_task *t, sb_gen_result *res, double *logprobs, char *err);
/* Free a task, finished or not: a running one is dropped and its blocks
 * return to the pool at once. */
void sb_task_free(sb_engine *e, sb_task *t);

typedef struct {
    int seqs_max, seqs_running;
    int blocks_total, blocks_free, blocks_cached;   /* cached: held by the prefix LRU only */
    uint64_t prefix_hits, prefix_misses, prefix_tokens_reused;
    uint64_t steps, step_tokens;                     /* forward passes, tokens they carried */
    uint64_t spec_drafted, spec_accepted;            /* speculative tokens proposed / kept, every generation */
} sb_engine_stats;
void sb_engine_stats_get(const sb_engine *e, sb_engine_stats *s);

#endif
