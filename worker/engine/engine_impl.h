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

/* Compiled schemas kept per engine: a pipeline stage or a client repeats its
 * schema, and its masks are the expensive part to rebuild. */
#define GRAMMAR_CACHE 4

typedef struct {
    char       *schema;
    size_t      len;
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
    int       n_batch;          /* tokens per forward pass (the step budget) */
    int32_t  *hist;             /* the tokens sequence 0's KV cache holds, in order */
    int       n_hist;
    float    *logits;           /* one row: the last evaluated token's */
    sb_tok_trie *trie;          /* built on the first constrained request */
    gram_slot gram[GRAMMAR_CACHE];
    uint64_t  gram_clock;
    sb_sched *sched;
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
