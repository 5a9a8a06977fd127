/* batch.c - many tasks in one context: continuous batching (sb_engine.h).
 *
 * A task is one sequence of the context. A generate task reads its prompt in
 * chunks, then takes one token per step; a score task reads its prompt, then
 * evaluates each candidate in a fork of the prompt's sequence. Every step is
 * one sb_ctx_eval_parts pass of at most n_batch tokens: running decodes first
 * (one token each), then prompt chunks and candidates, score tasks and
 * higher priorities first, FIFO among equals.
 *
 * Blocks: admission reserves every block a task can ever take (its prompt,
 * max_tokens more, capped by n_ctx; a score task its prompt and its forks),
 * so free blocks >= the running tasks' unused reservations at all times: a
 * running task always finds its next block, nobody's growth can kill it.
 * Cached prefixes hold blocks outside any reservation; admission evicts them,
 * least recently used first, when it needs their blocks.
 *
 * The choose-and-emit code (sampling, grammar, stops, pieces) is engine.c's
 * gen_core: a task's text is what sb_engine_generate writes for its tokens.
 *
 * Speculation: a generation with drafting on (lookup or a draft model)
 * that is the only running task takes speculative steps (speculate.c, the
 * code sb_engine_generate runs) instead of one-token ones; the step after
 * another task is admitted is a plain batched one again (step_alone).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sb_common.h"
#include "worker/engine/engine_impl.h"

#define PREFIX_SLOTS 8      /* cached prefixes (one sequence each) per engine */
#define FORK_SLOTS   8      /* score candidates evaluated at once, all tasks together */
/* Prompt passes of fewer tokens than this may take other kernel paths
 * (few-token gemv, narrow tiles) whose sums differ in the last bits from a
 * long pass's. Measured: from 8 tokens on, any cut of a prompt gives the
 * numbers of one whole pass (every cut of a 60-token prompt, fixtures);
 * 16 leaves room for a small-batch kernel path up to 16 rows. test_batch
 * checks the end result: together == alone. */
#define MIN_CHUNK    16
#define MULTI_PARTS  32     /* several-token parts one eval_parts pass takes (its SB_MM_MAX_SEGS) */

enum { T_PREFILL, T_DECODE, T_CANDS, T_DONE, T_FAILED };
enum { K_GEN, K_SCORE };

typedef struct {
    int cand, seq;          /* seq < 0: slot unused */
    int done;               /* of the candidate's first len-1 tokens, evaluated */
    int blocks;             /* taken from the pool (given back with the fork) */
    float *rows;            /* len-1 rows of logits */
} fork_t;

struct sb_task {
    int kind, state, priority;
    uint64_t order;         /* admission number: FIFO among equal priorities */
    int seq;                /* -1 once released */
    int32_t *prompt;
    int n_prompt, n_done;   /* prompt tokens in the KV cache */
    int resv;               /* blocks reserved and not yet taken */
    float *logits;          /* the last row: next token (generate), first candidate token (score) */
    double t0, t1;
    int rc;
    char err[SB_ERR_LEN];
    /* generate */
    const sb_gen_opts *o;
    gen_core core;
    sb_gen_result res;
    int32_t pending;        /* the chosen token, evaluated next step */
    spec_state spec;        /* drafting (spec.max_draft > 0 only with hist) */
    int32_t *hist;          /* speculating tasks: the tokens seq holds, room for n_ctx + 1 */
    int n_hist;
    /* score */
    int32_t **cands;
    int *cand_lens, n_cands, cand_next, cands_done, fork_cap;
    double *lp;
    fork_t forks[FORK_SLOTS];
};

typedef struct {
    int seq;                /* < 0: empty slot */
    int32_t *tokens;
    int n;                  /* positions, a multiple of SB_KV_BLOCK */
    uint64_t used;
} prefix_t;

struct sb_sched {
    int max_tasks, n_run, forks_used, max_prefix_blocks;
    int multi;              /* several-token parts planned this step */
    sb_task **run;
    prefix_t pfx[PREFIX_SLOTS];
    uint64_t clock, order;
    uint64_t hits, misses, reused, steps, step_tokens;
    sb_seq_part *parts;     /* one step's parts and, per part, its task and fork */
    sb_task **part_task;
    int *part_fork;
    FILE *trace;            /* SB_STEP_TRACE: one line per step (step_trace) */
};

int sb_sched_ctx_seqs(int max_tasks) { return 1 + max_tasks + PREFIX_SLOTS + FORK_SLOTS; }

static int blocks_for(int positions) { return (positions + SB_KV_BLOCK - 1) / SB_KV_BLOCK; }

/* The small final pass sb_ctx_eval makes of n tokens (n_batch-sized
 * passes, then the rest): its size when under MIN_CHUNK, else 0. */
static int tail_of(int n, int n_batch) {
    const int r = n % n_batch;
    return n > n_batch && r < MIN_CHUNK ? r : 0;
}

int sb_sched_new(sb_engine *e, int max_tasks, char *err) {
    sb_sched *s = sb_calloc(1, sizeof *s);
    if (!s) return sb_seterr(err, SB_ENOMEM, "out of memory");
    e->sched = s;
    const int max_parts = max_tasks + FORK_SLOTS;
    s->max_tasks = max_tasks;
    s->run = sb_calloc((size_t)max_tasks + 1, sizeof *s->run);
    s->parts = sb_calloc((size_t)max_parts, sizeof *s->parts);
    s->part_task = sb_calloc((size_t)max_parts, sizeof *s->part_task);
    s->part_fork = sb_calloc((size_t)max_parts, sizeof *s->part_fork);
    if (!s->run || !s->parts || !s->part_task || !s->part_fork) return sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int i = 0; i < PREFIX_SLOTS; i++) s->pfx[i].seq = -1;
    /* Prefixes may keep half the pool warm; admission takes them back anyway. */
    s->max_prefix_blocks = sb_ctx_kv_blocks_total(e->ctx) / 2;
    const char *tp = getenv("SB_STEP_TRACE");
    if (tp && *tp) {
        char fn[512];
        snprintf(fn, sizeof fn, "%s.%d", tp, (int)getpid());
        if (!(s->trace = fopen(fn, "w"))) sb_warn("engine: SB_STEP_TRACE: cannot write %s: %s", fn, strerror(errno));
    }
    return 0;
}

static void prefix_drop(sb_engine *e, prefix_t *p) {
    sb_ctx_seq_free(e->ctx, p->seq);
    sb_free(p->tokens);
    *p = (prefix_t){ .seq = -1 };
}

void sb_sched_free(sb_engine *e) {
    sb_sched *s = e->sched;
    if (!s) return;
    for (int i = 0; i < PREFIX_SLOTS; i++)
        if (s->pfx[i].seq >= 0) prefix_drop(e, &s->pfx[i]);
    sb_free(s->run);
    sb_free(s->parts);
    sb_free(s->part_task);
    sb_free(s->part_fork);
    if (s->trace) fclose(s->trace);
    sb_free(s);
    e->sched = NULL;
}

/* ---- prefix cache ---------------------------------------------------------- */

/* Positions, in whole blocks, that a and b (up to lim) start with alike. */
static int shared_blocks(const int32_t *a, int n_a, const int32_t *b, int lim) {
    lim = SB_MIN(n_a, lim);
    int k = 0;
    while (k < lim && a[k] == b[k]) k++;
    return k / SB_KV_BLOCK * SB_KV_BLOCK;
}

/* The cached entry sharing the most whole blocks with prompt, and in *n
 * how many positions (a multiple of SB_KV_BLOCK): an entry need not be a
 * prefix of the prompt, only start like it (a stage's system prompt is the
 * start of every entry its calls leave). Enough tokens stay to be
 * evaluated in passes of MIN_CHUNK or more (and the tail sb_ctx_eval
 * would pass alone): the rest then gets the numbers it gets with no cache,
 * so a hit never changes a task's output. */
static prefix_t *prefix_match(sb_sched *s, const int32_t *prompt, int n_prompt, int n_batch, int *n) {
    prefix_t *best = NULL;
    *n = 0;
    /* What is left to evaluate must still be cut as run alone (chunk()). */
    const int room = n_batch < 2 * MIN_CHUNK ? 0 : n_prompt - tail_of(n_prompt, n_batch) - MIN_CHUNK;
    for (int i = 0; i < PREFIX_SLOTS; i++) {
        prefix_t *p = &s->pfx[i];
        if (p->seq < 0) continue;
        const int k = shared_blocks(p->tokens, p->n, prompt, room);
        if (k > *n) {
            best = p;
            *n = k;
        }
    }
    return best;
}

static int prefix_blocks(const sb_sched *s) {
    int b = 0;
    for (int i = 0; i < PREFIX_SLOTS; i++)
        if (s->pfx[i].seq >= 0) b += s->pfx[i].n / SB_KV_BLOCK;
    return b;
}

static prefix_t *prefix_lru(sb_sched *s, const prefix_t *keep) {
    prefix_t *v = NULL;
    for (int i = 0; i < PREFIX_SLOTS; i++) {
        prefix_t *p = &s->pfx[i];
        if (p->seq >= 0 && p != keep && (!v || p->used < v->used)) v = p;
    }
    return v;
}

/* After t's prompt is in the cache: its whole blocks become (or refresh)
 * an entry. Shares blocks, takes none; a failure only loses the entry. */
static void prefix_add(sb_engine *e, sb_task *t) {
    sb_sched *s = e->sched;
    /* Not the small tail pass: its numbers are only right where it is the
     * tail. */
    const int n = (t->n_prompt - tail_of(t->n_prompt, e->n_batch)) / SB_KV_BLOCK * SB_KV_BLOCK;
    if (n < SB_KV_BLOCK || n / SB_KV_BLOCK > s->max_prefix_blocks) return;
    for (int i = 0; i < PREFIX_SLOTS; i++) {
        prefix_t *p = &s->pfx[i];
        if (p->seq >= 0 && p->n == n && !memcmp(p->tokens, t->prompt, (size_t)n * sizeof *t->prompt)) {
            p->used = ++s->clock;
            return;
        }
    }
    prefix_t *slot = NULL;
    for (int i = 0; i < PREFIX_SLOTS && !slot; i++)
        if (s->pfx[i].seq < 0) slot = &s->pfx[i];
    if (!slot) {
        slot = prefix_lru(s, NULL);
        prefix_drop(e, slot);
    }
    while (prefix_blocks(s) + n / SB_KV_BLOCK > s->max_prefix_blocks) prefix_drop(e, prefix_lru(s, NULL));
    char err[SB_ERR_LEN];
    int seq;
    int32_t *copy = sb_malloc((size_t)n * sizeof *copy);
    if (!copy || sb_ctx_seq_new(e->ctx, &seq, err)) { sb_free(copy); return; }
    if (sb_ctx_seq_fork(e->ctx, seq, t->seq, n, err)) {
        sb_ctx_seq_free(e->ctx, seq);
        sb_free(copy);
        return;
    }
    memcpy(copy, t->prompt, (size_t)n * sizeof *copy);
    *slot = (prefix_t){ seq, copy, n, ++s->clock };
}

/* ---- admission ---------------------------------------------------------------- */

static int reserved(const sb_sched *s) {
    int r = 0;
    for (int i = 0; i < s->n_run; i++) r += s->run[i]->resv;
    return r;
}

/* The positions a generation can reach: its prompt and max_tokens, or the
 * whole context. */
static int gen_positions(const sb_task *t) {
    const int n_ctx = sb_ctx_n_ctx(t->core.e->ctx);
    return t->o->max_tokens > 0 ? SB_MIN(t->n_prompt + t->o->max_tokens, n_ctx) : n_ctx;
}

/* A sequence for t holding the longest cached prefix of its prompt, with
 * `need(matched)` blocks reserved: cached prefixes are evicted, LRU first,
 * until free blocks cover every reservation. SB_EBUSY (nothing changed)
 * when no sequence or not enough blocks; SB_ERANGE when the pool can
 * never hold the task. */
static int admit(sb_engine *e, sb_task *t, int (*need)(const sb_task *, int matched), char *err) {
    sb_sched *s = e->sched;
    if (!s->max_tasks)
        return sb_seterr(err, SB_EINVAL, "engine opened for one request at a time (ctx n_seq 0): no tasks");
    if (s->n_run >= s->max_tasks)
        return sb_seterr(err, SB_EBUSY, "all %d sequences are running", s->max_tasks);
    const int total = sb_ctx_kv_blocks_total(e->ctx);
    if (need(t, 0) > total)
        return sb_seterr(err, SB_ERANGE, "the request needs %d KV blocks, the pool has %d", need(t, 0), total);
    int matched;
    prefix_t *hit = prefix_match(s, t->prompt, t->n_prompt, e->n_batch, &matched);
    /* A running task is still reading more of this prompt's start than the
     * cache holds: wait for it (a step or a few) and start from its entry,
     * rather than read the same system prompt N times over. */
    const int room = t->n_prompt - tail_of(t->n_prompt, e->n_batch) - MIN_CHUNK;
    for (int i = 0; i < s->n_run && e->n_batch >= 2 * MIN_CHUNK; i++) {
        const sb_task *r = s->run[i];
        if (r->state == T_PREFILL && shared_blocks(r->prompt, r->n_prompt, t->prompt, room) > matched)
            return sb_seterr(err, SB_EBUSY, "waiting for a running task to finish reading the same prefix");
    }
    int want = need(t, matched);
    while (sb_ctx_kv_blocks_free(e->ctx) - reserved(s) < want) {
        prefix_t *v = prefix_lru(s, hit);
        if (!v && hit) {            /* the match itself must go: start from scratch */
            v = hit;
            hit = NULL;
            matched = 0;
            want = need(t, 0);
        }
        if (!v) break;
        prefix_drop(e, v);
    }
    if (sb_ctx_kv_blocks_free(e->ctx) - reserved(s) < want)
        return sb_seterr(err, SB_EBUSY, "KV pool: %d blocks free, %d reserved by running tasks, %d needed",
                         sb_ctx_kv_blocks_free(e->ctx), reserved(s), want);
    int rc = sb_ctx_seq_new(e->ctx, &t->seq, err);
    if (rc) return rc;
    /* Its blocks in one run with room for all it may take, low in the pool. */
    sb_ctx_seq_expect(e->ctx, t->seq, t->kind == K_GEN ? gen_positions(t) : t->n_prompt);
    /* Sequence 0 is sb_engine_generate's; if the context hands it out, its
     * remembered tokens are gone. */
    if (t->seq == 0) e->n_hist = 0;
    if (hit) {
        if ((rc = sb_ctx_seq_fork(e->ctx, t->seq, hit->seq, matched, err))) {
            sb_ctx_seq_free(e->ctx, t->seq);
            return rc;
        }
        hit->used = ++s->clock;
        t->n_done = matched;
        s->hits++;
        s->reused += (uint64_t)matched;
    } else {
        s->misses++;
    }
    t->resv = want;
    t->order = ++s->order;
    t->t0 = sb_now_s();
    s->run[s->n_run++] = t;
    return 0;
}

static int gen_need(const sb_task *t, int matched) {
    return blocks_for(gen_positions(t)) - matched / SB_KV_BLOCK;
}

/* The prompt, then fork_cap forks at once: each a copy of the prompt's
 * partial last block plus len-1 candidate positions. */
static int score_need(const sb_task *t, int matched) {
    int longest = 0;
    for (int c = 0; c < t->n_cands; c++) longest = SB_MAX(longest, t->cand_lens[c]);
    const int per_fork = blocks_for(t->n_prompt % SB_KV_BLOCK + longest - 1);
    return blocks_for(t->n_prompt) - matched / SB_KV_BLOCK + t->fork_cap * per_fork;
}

static sb_task *task_new(int kind, const int32_t *prompt, int n_prompt, int priority, int n_vocab) {
    sb_task *t = sb_calloc(1, sizeof *t);
    if (!t) return NULL;
    *t = (sb_task){ .kind = kind, .priority = priority, .seq = -1, .n_prompt = n_prompt };
    for (int i = 0; i < FORK_SLOTS; i++) t->forks[i].seq = -1;
    t->prompt = sb_malloc((size_t)n_prompt * sizeof *prompt);
    t->logits = sb_aligned_alloc((size_t)n_vocab * sizeof(float));
    if (!t->prompt || !t->logits) {
        sb_free(t->prompt);
        sb_aligned_free(t->logits);
        sb_free(t);
        return NULL;
    }
    memcpy(t->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    return t;
}

static void task_destroy(sb_task *t) {
    spec_free(&t->spec);
    sb_free(t->hist);
    gen_core_free(&t->core);
    if (t->cands)
        for (int c = 0; c < t->n_cands; c++) sb_free(t->cands[c]);
    sb_free(t->cands);
    sb_free(t->cand_lens);
    sb_free(t->lp);
    sb_free(t->prompt);
    sb_aligned_free(t->logits);
    sb_free(t);
}

/* A speculating task's token history: its prompt now, each evaluated
 * token after. */
static int spec_hist(sb_task *t, int n_ctx, char *err) {
    if (t->spec.max_draft <= 0) return 0;
    if (!(t->hist = sb_malloc(((size_t)n_ctx + 1) * sizeof *t->hist)))
        return sb_seterr(err, SB_ENOMEM, "out of memory for a speculative history");
    memcpy(t->hist, t->prompt, (size_t)t->n_prompt * sizeof *t->hist);
    t->n_hist = t->n_prompt;
    return 0;
}

int sb_engine_submit_generate(sb_engine *e, const int32_t *prompt, int n_prompt, const sb_gen_opts *o,
                              int priority, sb_task **out, char *err) {
    *out = NULL;
    const int n_ctx = sb_ctx_n_ctx(e->ctx), n_vocab = sb_model_hparams(e->model)->n_vocab;
    if (n_prompt <= 0) return sb_seterr(err, SB_EINVAL, "empty prompt");
    if (n_prompt >= n_ctx)
        return sb_seterr(err, SB_ERANGE, "prompt of %d tokens does not fit the context of %d", n_prompt, n_ctx);
    sb_task *t = task_new(K_GEN, prompt, n_prompt, priority, n_vocab);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    t->o = o;
    t->core.e = e;          /* gen_need reads it before gen_core_init */
    t->core.res = &t->res;
    int rc = admit(e, t, gen_need, err);
    if (!rc && ((rc = gen_core_init(&t->core, e, o, &t->res, prompt, n_prompt, err)) ||
                (rc = spec_init(&t->spec, &t->core, err)) || (rc = spec_hist(t, n_ctx, err))))
        sb_task_free(e, t);
    else if (rc) task_destroy(t);
    if (rc) return rc;
    t->res.n_reused = t->n_done;
    *out = t;
    return 0;
}

int sb_engine_submit_score(sb_engine *e, const int32_t *prompt, int n_prompt, const int32_t *const *cands,
                           const int *cand_lens, int n_cands, int priority, sb_task **out, char *err) {
    *out = NULL;
    const int n_vocab = sb_model_hparams(e->model)->n_vocab;
    int longest, n_long;
    int rc = engine_score_check(e, n_prompt, cands, cand_lens, n_cands, &longest, &n_long, err);
    if (rc) return rc;
    sb_task *t = task_new(K_SCORE, prompt, n_prompt, priority, n_vocab);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    t->n_cands = n_cands;
    t->fork_cap = SB_MIN(n_long, FORK_SLOTS);
    t->cands = sb_calloc((size_t)n_cands, sizeof *t->cands);
    t->cand_lens = sb_malloc((size_t)n_cands * sizeof *t->cand_lens);
    t->lp = sb_calloc((size_t)n_cands, sizeof *t->lp);
    rc = !t->cands || !t->cand_lens || !t->lp ? SB_ENOMEM : 0;
    for (int c = 0; c < n_cands && !rc; c++) {
        t->cand_lens[c] = cand_lens[c];
        if (!(t->cands[c] = sb_malloc((size_t)cand_lens[c] * sizeof **cands))) rc = SB_ENOMEM;
        else memcpy(t->cands[c], cands[c], (size_t)cand_lens[c] * sizeof **cands);
    }
    if (rc) sb_seterr(err, rc, "out of memory for %d candidates", n_cands);
    else rc = admit(e, t, score_need, err);
    if (rc) { task_destroy(t); return rc; }
    t->res.n_reused = t->n_done;
    *out = t;
    return 0;
}

/* ---- ending tasks ---------------------------------------------------------- */

static void fork_release(sb_engine *e, sb_task *t, fork_t *f) {
    sb_ctx_seq_free(e->ctx, f->seq);
    sb_aligned_free(f->rows);
    t->resv += f->blocks;   /* the fork's blocks are back: the next fork may take them */
    e->sched->forks_used--;
    *f = (fork_t){ .seq = -1 };
}

/* Leave the running list and give every block back (not t's result). */
static void task_release(sb_engine *e, sb_task *t) {
    sb_sched *s = e->sched;
    for (int i = 0; i < FORK_SLOTS; i++)
        if (t->forks[i].seq >= 0) fork_release(e, t, &t->forks[i]);
    if (t->seq >= 0) sb_ctx_seq_free(e->ctx, t->seq);
    t->seq = -1;
    t->resv = 0;
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i] == t) {
            s->run[i] = s->run[--s->n_run];
            break;
        }
}

static void task_finish(sb_engine *e, sb_task *t) {
    if (t->kind == K_GEN) {
        gen_core_flush(&t->core);
        t->res.t_gen = sb_now_s() - t->t1;
        gen_core_free(&t->core);    /* the grammar slot is free for others now */
        spec_free(&t->spec);
    }
    t->state = T_DONE;
    task_release(e, t);
}

static void task_fail(sb_engine *e, sb_task *t, int rc, const char *err) {
    t->rc = rc;
    snprintf(t->err, sizeof t->err, "%s", err);
    t->state = T_FAILED;
    if (t->kind == K_GEN) {
        gen_core_free(&t->core);
        spec_free(&t->spec);
    }
    task_release(e, t);
}

void sb_task_free(sb_engine *e, sb_task *t) {
    if (!t) return;
    if (t->state != T_DONE && t->state != T_FAILED) task_release(e, t);
    task_destroy(t);
}

int sb_task_poll(const sb_task *t, sb_gen_result *res, double *logprobs, char *err) {
    if (t->state == T_FAILED) return sb_seterr(err, t->rc, "%s", t->err);
    if (t->state != T_DONE) return 0;
    if (res) {
        if (t->kind == K_GEN) {
            *res = t->res;
        } else {
            memset(res, 0, sizeof *res);
            res->n_prompt = t->n_prompt;
            res->n_reused = t->res.n_reused;
            res->t_prompt = t->res.t_prompt;
            res->finish = "stop";
        }
    }
    if (logprobs && t->kind == K_SCORE) memcpy(logprobs, t->lp, (size_t)t->n_cands * sizeof *logprobs);
    return 1;
}

/* ---- one step ----------------------------------------------------------------- */

/* The next piece of a range of n tokens, done of them evaluated, within
 * budget; 0: none this step. A task's numbers must be those it gets alone
 * (sb_ctx_eval in n_batch-sized passes), and a pass of fewer than
 * MIN_CHUNK tokens goes through other kernel paths than a longer one. So:
 * the range's body is cut anywhere as long as every piece has at least
 * MIN_CHUNK tokens (or is the whole of a short body), and the tail that
 * sb_ctx_eval would pass alone is passed alone. With a budget too small
 * for that freedom, the passes are sb_ctx_eval's own. */
static int chunk(int done, int n, int n_batch, int budget) {
    if (n_batch < 2 * MIN_CHUNK) {
        const int take = SB_MIN(n_batch, n - done);
        return take <= budget ? take : 0;
    }
    const int tail = tail_of(n, n_batch), body = n - tail - done;
    if (body <= 0) return tail <= budget ? tail : 0;
    int take = SB_MIN(body, budget);
    if (take < body && body - take < MIN_CHUNK) take = body - MIN_CHUNK;
    return take == body || take >= MIN_CHUNK ? take : 0;
}

static int add_part(sb_sched *s, int *np, sb_task *t, int fork, int seq, const int32_t *tokens, int n,
                    float *logits, int all) {
    s->multi += n > 1;
    s->parts[*np] = (sb_seq_part){ seq, tokens, n, logits, all };
    s->part_task[*np] = t;
    s->part_fork[*np] = fork;
    (*np)++;
    return n;
}

/* Start candidate forks of a score task while sequences, forks and budget
 * last; a one-token candidate needs only the prompt's row. */
static int plan_cands(sb_engine *e, sb_task *t, int *np, int budget) {
    sb_sched *s = e->sched;
    const int n_vocab = sb_model_hparams(e->model)->n_vocab;
    int used = 0;
    for (int i = 0; i < FORK_SLOTS; i++) {      /* candidates already under way */
        fork_t *f = &t->forks[i];
        if (f->seq < 0) continue;
        int take = s->multi < MULTI_PARTS ? chunk(f->done, t->cand_lens[f->cand] - 1, e->n_batch, budget - used) : 0;
        if (take)
            used += add_part(s, np, t, i, f->seq, t->cands[f->cand] + f->done, take,
                             f->rows + (size_t)f->done * n_vocab, 1);
    }
    while (t->cand_next < t->n_cands) {
        const int c = t->cand_next, len = t->cand_lens[c];
        if (len == 1) {
            t->lp[c] = engine_row_logprob(t->logits, n_vocab, t->cands[c][0]);
            t->cand_next++;
            t->cands_done++;
            continue;
        }
        int slot = -1, active = 0;
        for (int i = 0; i < FORK_SLOTS; i++) {
            if (t->forks[i].seq >= 0) active++;
            else if (slot < 0) slot = i;
        }
        int take = s->multi < MULTI_PARTS ? chunk(0, len - 1, e->n_batch, budget - used) : 0;
        if (!take || active >= t->fork_cap || s->forks_used >= FORK_SLOTS) break;
        fork_t *f = &t->forks[slot];
        char err[SB_ERR_LEN];
        const int free0 = sb_ctx_kv_blocks_free(e->ctx);
        if (!(f->rows = sb_aligned_alloc((size_t)(len - 1) * n_vocab * sizeof(float)))) break;
        if (sb_ctx_seq_new(e->ctx, &f->seq, err)) { sb_aligned_free(f->rows); f->rows = NULL; f->seq = -1; break; }
        if (sb_ctx_seq_fork(e->ctx, f->seq, t->seq, t->n_prompt, err)) {
            sb_ctx_seq_free(e->ctx, f->seq);
            sb_aligned_free(f->rows);
            *f = (fork_t){ .seq = -1 };
            break;
        }
        if (f->seq == 0) e->n_hist = 0;
        f->cand = c;
        f->blocks = free0 - sb_ctx_kv_blocks_free(e->ctx);
        t->resv -= f->blocks;
        s->forks_used++;
        t->cand_next++;
        used += add_part(s, np, t, slot, f->seq, t->cands[c], take, f->rows, 1);
    }
    if (t->cands_done == t->n_cands) task_finish(e, t);
    return used;
}

static int by_urgency(const void *a, const void *b) {
    const sb_task *x = *(sb_task *const *)a, *y = *(sb_task *const *)b;
    if (x->kind != y->kind) return x->kind == K_SCORE ? -1 : 1;    /* short scoring jobs at once */
    if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
    return x->order < y->order ? -1 : 1;
}

/* Cancelled and timed-out generations end before the pass, so their
 * blocks are free for it. */
static void reap(sb_engine *e) {
    sb_sched *s = e->sched;
    for (int i = s->n_run - 1; i >= 0; i--) {
        sb_task *t = s->run[i];
        if (t->kind != K_GEN) continue;
        const char *why = t->o->cancel && atomic_load(t->o->cancel) ? "cancelled"
                          : t->o->deadline > 0 && sb_now_s() > t->o->deadline ? "timeout" : NULL;
        if (!why) continue;
        if (t->state == T_PREFILL) t->t1 = sb_now_s();
        t->res.finish = why;
        task_finish(e, t);
    }
}

/* The parts of this step into s->parts; returns their count. */
static int plan(sb_engine *e) {
    sb_sched *s = e->sched;
    sb_task *order[s->max_tasks + 1];
    const int n = s->n_run;
    memcpy(order, s->run, (size_t)n * sizeof *order);
    qsort(order, (size_t)n, sizeof *order, by_urgency);
    int np = 0, budget = e->n_batch;
    s->multi = 0;
    for (int i = 0; i < n && budget > 0; i++)   /* decodes first: one token each */
        if (order[i]->state == T_DECODE)
            budget -= add_part(s, &np, order[i], -1, order[i]->seq, &order[i]->pending, 1, order[i]->logits, 0);
    for (int i = 0; i < n && budget > 0; i++) {
        sb_task *t = order[i];
        if (t->state == T_PREFILL) {
            const int rem = t->n_prompt - t->n_done;
            int take = chunk(t->n_done, t->n_prompt, e->n_batch, budget);
            if (take > 1 && s->multi >= MULTI_PARTS) take = 0;
            if (take)
                budget -= add_part(s, &np, t, -1, t->seq, t->prompt + t->n_done, take,
                                   take == rem ? t->logits : NULL, 0);
        } else if (t->state == T_CANDS) {
            budget -= plan_cands(e, t, &np, budget);
        }
    }
    return np;
}

/* After the pass: one part's result. */
static void part_done(sb_engine *e, sb_task *t, int fork, int n) {
    const int n_vocab = sb_model_hparams(e->model)->n_vocab, n_ctx = sb_ctx_n_ctx(e->ctx);
    char err[SB_ERR_LEN];
    if (fork >= 0) {
        fork_t *f = &t->forks[fork];
        const int c = f->cand, len = t->cand_lens[c];
        if ((f->done += n) < len - 1) return;
        double lp = engine_row_logprob(t->logits, n_vocab, t->cands[c][0]);
        for (int j = 1; j < len; j++) lp += engine_row_logprob(f->rows + (size_t)(j - 1) * n_vocab, n_vocab, t->cands[c][j]);
        t->lp[c] = lp;
        fork_release(e, t, f);
        if (++t->cands_done == t->n_cands) task_finish(e, t);
        return;
    }
    if (t->state == T_DECODE && t->hist) t->hist[t->n_hist++] = t->pending;
    if (t->state == T_PREFILL) {
        if ((t->n_done += n) < t->n_prompt) return;
        t->t1 = sb_now_s();
        t->res.t_prompt = t->t1 - t->t0;
        prefix_add(e, t);
        if (t->kind == K_SCORE) {
            t->state = T_CANDS;
            return;
        }
        t->state = T_DECODE;
    }
    int32_t tok;
    int rc = gen_core_next(&t->core, t->logits, &tok, err);
    if (rc) task_fail(e, t, rc, err);
    else if (gen_core_take(&t->core, tok, sb_ctx_seq_n_past(e->ctx, t->seq), n_ctx)) task_finish(e, t);
    else t->pending = tok;
}

/* The one running task, when it is a generation that drafts: a speculative
 * step for it instead of a one-token pass. 1 when taken; 0: take a plain
 * step (more tasks, nothing drafted, or no pool room for the check). At
 * temperature 0 with spec_exact the tokens are those of plain steps
 * (speculate.c verifies through the one-token kernels a lone decode uses). */
static int step_alone(sb_engine *e) {
    sb_sched *s = e->sched;
    sb_task *t = s->n_run == 1 ? s->run[0] : NULL;
    /* A step shared with other tasks is no plain step of one: not timed. */
    if (!t)
        for (int i = 0; i < s->n_run; i++) s->run[i]->spec.t_ret = 0;
    if (!t || t->kind != K_GEN || t->state != T_DECODE || t->spec.max_draft <= 0) return 0;
    char err[SB_ERR_LEN];
    const int free0 = sb_ctx_kv_blocks_free(e->ctx), drafted0 = t->res.n_drafted;
    int32_t tok = t->pending;
    const int st = spec_step(&t->spec, t->seq, t->hist, &t->n_hist, &tok, err);
    if (st == 2 || st == SB_EBUSY) return 0;   /* EBUSY: refused before anything changed */
    t->resv = SB_MAX(0, t->resv - (free0 - sb_ctx_kv_blocks_free(e->ctx)));
    s->steps++;
    s->step_tokens += (uint64_t)(1 + t->res.n_drafted - drafted0);
    if (st < 0) task_fail(e, t, st, err);
    else if (st == 1 || gen_core_take(&t->core, tok, t->n_hist, sb_ctx_n_ctx(e->ctx))) task_finish(e, t);
    else t->pending = tok;
    return 1;
}

/* The grammar masks this step's samples need, computed together on the
 * pool before they sample one by one: a position first seen costs a walk
 * over the whole trie (30-60 ms on a 151k vocabulary in the burst profile) that would otherwise
 * run on the compute thread alone while the other pool threads wait. */
static void prefetch_masks(sb_engine *e, int np) {
    sb_sched *s = e->sched;
    sb_gmatch *ms[np];
    int n = 0;
    for (int i = 0; i < np; i++) {
        const sb_task *t = s->part_task[i];
        if (s->parts[i].logits && t->kind == K_GEN && t->core.gm && t->state != T_DONE && t->state != T_FAILED)
            ms[n++] = t->core.gm;
    }
    if (n) sb_gmatch_prefetch(ms, n, sb_ctx_pool(e->ctx));
}

/* SB_STEP_TRACE=PATH in the environment writes PATH.PID, one line per
 * batched step: its start (sb_now_s), tasks running, parts, tokens,
 * one-token parts, rows sampled and of them under a grammar mask, and ms in
 * planning, in the forward pass (with the step's mask prefetch) and after
 * it (sampling, emitting). tests/bench/step_trace.py sums it up. Off, it
 * costs a branch per step. */
typedef struct { double t0, t1, t2; int n_run, n_one, n_samp, n_mask; } step_trace;

/* The counts, before part_done changes the tasks. */
static void trace_count(const sb_sched *s, int np, step_trace *tr) {
    tr->t2 = sb_now_s();
    tr->n_run = s->n_run;
    for (int i = 0; i < np; i++) {
        const sb_task *t = s->part_task[i];
        if (t->state == T_DONE || t->state == T_FAILED) continue;
        tr->n_one += s->parts[i].n == 1;
        if (s->parts[i].logits) tr->n_samp++, tr->n_mask += t->kind == K_GEN && t->core.gm;
    }
}

static void trace_write(const sb_sched *s, int np, int tokens, const step_trace *tr) {
    fprintf(s->trace, "%.6f run %d parts %d tok %d dec %d samp %d mask %d plan %.3f pass %.3f post %.3f\n", tr->t0,
            tr->n_run, np, tokens, tr->n_one, tr->n_samp, tr->n_mask, (tr->t1 - tr->t0) * 1e3, (tr->t2 - tr->t1) * 1e3,
            (sb_now_s() - tr->t2) * 1e3);
    fflush(s->trace);
}

int sb_engine_step(sb_engine *e, char *err) {
    sb_sched *s = e->sched;
    reap(e);
    step_trace tr = { 0 };
    if (s->trace) tr.t0 = sb_now_s();
    if (step_alone(e)) return s->n_run;
    const int np = plan(e);
    if (np == 0) return s->n_run;
    if (s->trace) tr.t1 = sb_now_s();
    int tokens = 0;
    for (int i = 0; i < np; i++) {
        sb_task *t = s->part_task[i];
        int need = sb_ctx_kv_blocks_needed(e->ctx, s->parts[i].seq, s->parts[i].n);
        t->resv = SB_MAX(0, t->resv - need);
        tokens += s->parts[i].n;
    }
    int rc = sb_ctx_eval_parts(e->ctx, s->parts, np, err);
    if (rc) {
        /* A failed pass may have written part of the batch: every running
         * task's cache is suspect. */
        while (s->n_run) task_fail(e, s->run[0], rc, err);
        return rc;
    }
    s->steps++;
    s->step_tokens += (uint64_t)tokens;
    prefetch_masks(e, np);
    if (s->trace) trace_count(s, np, &tr);
    for (int i = 0; i < np; i++) {
        sb_task *t = s->part_task[i];
        if (t->state == T_DONE || t->state == T_FAILED) continue;
        part_done(e, t, s->part_fork[i], s->parts[i].n);
    }
    if (s->trace) trace_write(s, np, tokens, &tr);
    return s->n_run;
}

void sb_engine_stats_get(const sb_engine *e, sb_engine_stats *st) {
    const sb_sched *s = e->sched;
    *st = (sb_engine_stats){
        .seqs_max = s->max_tasks, .seqs_running = s->n_run,
        .blocks_total = sb_ctx_kv_blocks_total(e->ctx), .blocks_free = sb_ctx_kv_blocks_free(e->ctx),
        .blocks_cached = prefix_blocks(s),
        .prefix_hits = s->hits, .prefix_misses = s->misses, .prefix_tokens_reused = s->reused,
        .steps = s->steps, .step_tokens = s->step_tokens,
        .spec_drafted = e->spec_drafted, .spec_accepted = e->spec_accepted,
    };
}
