/* engine_impl.h - what engine.c (one request at a time) and batch.c (many
 * tasks per forward pass) share: the engine's state, the grammar cache, and
 * one code path for "choose the next token and hand it to the caller"
 * (sampling, grammar masks, stop strings, UTF-8-safe pieces, limits), so a
 * batched task and sb_engine_generate emit the same text for the same tokens.
 * Internal to the worker module. */
#ifndef SB_ENGINE_IMPL_H
#define SB_ENGINE_IMPL_H

#include "worker/engine/sb_engine.h"
#include "worker/engine/sb_grammar.h"
#include "worker/engine/sb_spec.h"

/* Compiled schemas kept per engine: a pipeline stage or a client repeats its
 * schema, and its masks are the expensive part to rebuild. */
#define GRAMMAR_CACHE 4

typedef struct {
    char       *schema;         /* a JSON Schema, or a tool-call grammar's spec (tools) */
    size_t      len;
    int         tools;
    sb_grammar *g;
    sb_gmatch  *m;              /* the slot's matcher, lent to one user at a time */
    uint64_t    used;           /* LRU clock */
    int         users;          /* generations using g now: the slot is not evicted */
    int         lent;           /* m is in use */
} gram_slot;

typedef struct sb_sched sb_sched;   /* batch.c: tasks, prefix LRU, counters */

struct sb_engine {
    sb_model *model;
    sb_vocab *vocab;
    sb_ctx   *ctx;
    int       chat_kind;
    sb_chat_tmpl tmpl;          /* the template's tool format (chat_tools.c) */
    int       n_batch;          /* tokens per forward pass (the step budget) */
    int32_t  *hist;             /* the tokens sequence 0's KV cache holds, in order */
    int       n_hist;
    float    *logits;           /* one row: the last evaluated token's */
    sb_tok_trie *trie;          /* built on the first constrained request */
    gram_slot gram[GRAMMAR_CACHE];
    uint64_t  gram_clock;
    sb_sched *sched;
    uint64_t  spec_drafted, spec_accepted;  /* speculative tokens, all generations (health, /metrics) */
};

/* One generation's choose-and-emit state. */
typedef struct {
    sb_engine *e;
    const sb_gen_opts *o;
    sb_gen_result *res;
    sb_sampler *smp;
    sb_stop_matcher *stop;
    sb_gmatch *gm;              /* NULL: unconstrained */
    int gslot;                  /* gram[] slot gm's grammar belongs to; -1: own_g (or none) */
    sb_grammar *own_g;          /* compiled for this generation alone (every slot busy) */
    int max_tokens;
    uint64_t mc0, mr0;          /* mask cache figures at the start */
    /* on_logprob: the last sampled token's figures, given out when it is emitted */
    int32_t lp_tok;
    float lp, top_lp[SB_MAX_TOP_LOGPROBS];
    int32_t top_id[SB_MAX_TOP_LOGPROBS];
    int n_top;
} gen_core;

/* Sampler, stop matcher and grammar matcher for o; the prompt's last
 * repeat_last_n tokens enter the penalty history (as llama.cpp's do).
 * res is zeroed. On error gen_core_free still must be called. */
int  gen_core_init(gen_core *c, sb_engine *e, const sb_gen_opts *o, sb_gen_result *res, const int32_t *prompt,
                   int n_prompt, char *err);
/* The next token from one row of logits: sampled freely or among those the
 * grammar allows; -1 when the grammar allows none. */
int  gen_core_next(gen_core *c, const float *logits, int32_t *tok, char *err);
/* Hand tok to the caller. 1 when the generation ends with it (res->finish
 * says why; an end-of-generation token is not emitted). */
int  gen_core_emit(gen_core *c, int32_t tok);
/* gen_core_emit plus the checks that end a generation after a token:
 * tok < 0, a complete document nothing can extend, a full context (n_past:
 * positions the sequence holds). 0: evaluate tok next. */
int  gen_core_take(gen_core *c, int32_t tok, int n_past, int n_ctx);
/* Generation over: release what the stop matcher still holds. */
void gen_core_flush(gen_core *c);
void gen_core_free(gen_core *c);

/* Make sequence 0 hold exactly prompt[0..n) and e->logits its last row,
 * evaluating only what follows the longest prefix it already holds. */
int  engine_prefill(sb_engine *e, const int32_t *prompt, int n, int *reused, char *err);

/* speculate.c: one generation's speculative state (docs/SPECULATIVE.md). */
typedef struct {
    gen_core *c;                /* the generation it drafts for */
    int max_draft;              /* tokens per draft at most; 0: off (no drafts, a schema, or a draft model backed off) */
    int n_vocab;
    int win_drafted, win_accepted;          /* sb_spec_backoff's window (draft model) */
    sb_spec_policy pol;                     /* prompt lookup's drafting policy */
    double t_ret;               /* when spec_step last returned 2 (a plain step follows), 0: not timing */
    int32_t draft[SB_SPEC_MAX_DRAFT + 1];   /* [0] the token verified after, then the drafts */
    float *rows;                /* (max_draft + 1) × n_vocab verification logits */
    int32_t *ids;               /* n_vocab: one position's distribution */
    float *probs;
    sb_sampler *dsmp;           /* the draft model's sampler */
    float *q;                   /* max_draft × n_vocab: its distributions (temp > 0) */
} spec_state;

/* Drafting for c's options (lookup, or a draft model); max_draft 0 when
 * there is nothing to draft with. spec_free must follow, also on error. */
int  spec_init(spec_state *s, gen_core *c, char *err);
void spec_free(spec_state *s);
/* One speculative step after the chosen token *tok, on sequence seq of
 * c->e's context, which holds hist[0..*n_hist) (room for n_ctx + 1):
 * draft, verify [*tok, drafts] in one pass, emit *tok's successors that
 * the acceptance rule keeps, truncate the sequence past the rejected ones
 * and leave in *tok the next token to emit (*tok itself is emitted by the
 * caller, before the call). 1: the generation ended; 0: go on; 2: nothing
 * drafted, nothing changed (take a plain step); < 0: error (the sequence
 * may hold a partial pass). */
int  spec_step(spec_state *s, int seq, int32_t *hist, int *n_hist, int32_t *tok, char *err);

/* log P(tok) from one row of logits. */
double engine_row_logprob(const float *row, int n_vocab, int32_t tok);
/* A score request's checks (sb_engine_score's errors): the longest
 * candidate and how many have more than one token. */
int  engine_score_check(const sb_engine *e, int n_prompt, const int32_t *const *cands, const int *cand_lens,
                        int n_cands, int *longest, int *n_long, char *err);

/* batch.c. Context sequences an engine running max_tasks tasks needs:
 * sequence 0 (sb_engine_generate/score), the tasks', the cached prefixes'
 * and the score tasks' candidate forks. */
int  sb_sched_ctx_seqs(int max_tasks);
int  sb_sched_new(sb_engine *e, int max_tasks, char *err);
void sb_sched_free(sb_engine *e);

#endif
