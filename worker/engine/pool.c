/* pool.c - persistent thread pool (see sb_pool.h). */
#include "worker/engine/sb_pool.h"
#include "common/sb_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <immintrin.h>

/* How an idle thread waits for the next run. First it spins on pause
 * instructions (~30-140 ns each) for about the gap between two matmuls of
 * one token (a few µs); then it keeps polling but calls sched_yield between
 * polls, for about a millisecond; then it sleeps on the condition variable.
 * The yielding phase matters on a loaded machine: a pure spinner burns the
 * time slice that the caller (thread 0, in the same scheduling group) needs
 * to finish its own share of the run, while sched_yield returns at once when
 * nothing else wants the CPU, so an unloaded machine still sees a spinner. */
#define SPIN_PAUSES 256
#define SPIN_YIELDS 2000
/* The caller waiting for a claimed task yields after this many pauses (~10 µs). */
#define YIELD_AFTER 200

/* Work is handed out as one contiguous range of task indices per thread.
 * A thread takes tasks from the front of its own range, in order, then
 * steals from the back of the others' ranges. Why ranges and not one shared
 * counter: in a decode step a run is a few microseconds of work per thread
 * and a token has ~110 runs; with a shared counter every claim moves one
 * cache line between cores (~100 ns each, thousands per token), while the
 * owner of a range claims from a line only it writes until someone steals.
 * Each thread also streams one contiguous stretch of the weight rows.
 *
 * A range is one 64-bit word: run number (24 bits), front (20), back (20);
 * tasks [front, back) are unclaimed. Claims are compare-and-swaps on the
 * whole word, so a thread holding a stale copy from an earlier run can never
 * claim in the current one by mistake (the run number differs). fn/arg
 * cannot change under a claimed task: the caller waits until every task of a
 * run has *finished* (tasks_done), not until every thread has checked in. A
 * thread that is descheduled while idle therefore never delays a run; with
 * more runnable threads than cores (three workers on two cores) that is the
 * difference between microseconds and a scheduler quantum per run. */
#define IDX_BITS 20
#define IDX_MASK ((1u << IDX_BITS) - 1)
#define RUN_SHIFT (2 * IDX_BITS)

typedef struct {
    sb_pool *pool;
    int index;
    pthread_t tid;
} pool_thread;

typedef struct {
    _Alignas(64) _Atomic uint64_t word;     /* one cache line per range */
} pool_range;

struct sb_pool {
    int n_threads;
    pool_thread *threads;
    pool_range *ranges;                     /* [n_threads] */
    _Alignas(64) atomic_int tasks_done;
    _Alignas(64) atomic_uint generation;    /* bumped once per run: wakes threads */
    _Alignas(64) atomic_int n_sleeping;
    atomic_int stop;
    uint32_t run;                           /* caller-only: run number */
    sb_pool_fn fn;
    void *arg;
    uint64_t *wait_ns;                      /* caller-only: profiling counter, or NULL */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static uint32_t range_front(uint64_t w) { return (uint32_t)(w >> IDX_BITS) & IDX_MASK; }
static uint32_t range_back(uint64_t w) { return (uint32_t)w & IDX_MASK; }

/* Claim the first (owner) or last (thief) unclaimed task of a range; -1 if
 * it is empty. */
static int claim(pool_range *r, int from_back) {
    uint64_t w = atomic_load_explicit(&r->word, memory_order_relaxed);
    for (;;) {
        const uint32_t front = range_front(w), back = range_back(w);
        if (front >= back) return -1;
        const uint64_t nw = from_back ? w - 1 : w + ((uint64_t)1 << IDX_BITS);
        if (atomic_compare_exchange_weak_explicit(&r->word, &w, nw, memory_order_acquire, memory_order_relaxed))
            return (int)(from_back ? back - 1 : front);
    }
}

/* Run tasks until every range is empty: this thread's own range first, then
 * the others' from the back. A claim may belong to a run newer than the one
 * that woke this thread (it found nothing to do and the caller moved on);
 * that is fine because fn/arg are read after each claim, and a thread can
 * only reach a newer run with nothing uncounted of the old one (the old run
 * could not have finished otherwise). Finished tasks are counted locally and
 * published once per call. */
static void run_tasks(sb_pool *p, int self) {
    int done = 0, t;
    while ((t = claim(&p->ranges[self], 0)) >= 0) {
        p->fn(p->arg, t, self);
        done++;
    }
    for (int k = 1; k < p->n_threads; k++) {
        pool_range *victim = &p->ranges[(self + k) % p->n_threads];
        while ((t = claim(victim, 1)) >= 0) {
            p->fn(p->arg, t, self);
            done++;
        }
    }
    if (done) atomic_fetch_add_explicit(&p->tasks_done, done, memory_order_release);
}

static void *thread_main(void *arg) {
    pool_thread *self = arg;
    sb_pool *p = self->pool;
    /* Not a load of the current generation: a thread that starts late would
     * then skip the first run and the caller would wait for it forever. */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
            if (++spins < SPIN_PAUSES) { _mm_pause(); continue; }
            if (spins < SPIN_PAUSES + SPIN_YIELDS) { sched_yield(); continue; }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->stop)) return NULL;
        run_tasks(p, self->index);
    }
}

int sb_pool_new(int n_threads, sb_pool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    sb_pool *p = sb_aligned_alloc(sizeof *p);
    if (!p) return SB_ENOMEM;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = sb_calloc((size_t)n_threads, sizeof *p->threads);
    p->ranges = sb_aligned_alloc((size_t)n_threads * sizeof *p->ranges);
    if (!p->threads || !p->ranges) {
        p->n_threads = 1;       /* nothing started: free joins no one */
        goto fail;
    }
    for (int i = 1; i < n_threads; i++) {
        p->threads[i].pool = p;
        p->threads[i].index = i;
        if (pthread_create(&p->threads[i].tid, NULL, thread_main, &p->threads[i]) != 0) {
            p->n_threads = i;   /* free joins the ones that started */
            goto fail;
        }
    }
    *out = p;
    return 0;
fail:
    sb_pool_free(p);
    return SB_ENOMEM;
}

void sb_pool_free(sb_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        if (p->threads) pthread_join(p->threads[i].tid, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    sb_free(p->threads);
    sb_aligned_free(p->ranges);
    sb_aligned_free(p);
}

int sb_pool_size(const sb_pool *p) { return p->n_threads; }

void sb_pool_run(sb_pool *p, sb_pool_fn fn, void *arg, int n_tasks) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1 || n_tasks > (int)IDX_MASK) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->run = (p->run + 1) & 0xFFFFFFu;
    atomic_store_explicit(&p->tasks_done, 0, memory_order_relaxed);
    /* Thread i's range is [i·n/T, (i+1)·n/T). Release: a thread whose claim
     * reads this word also sees fn, arg and the reset count. */
    const int nt = p->n_threads;
    for (int i = 0; i < nt; i++) {
        const uint64_t front = (uint64_t)n_tasks * (uint64_t)i / (uint64_t)nt;
        const uint64_t back = (uint64_t)n_tasks * (uint64_t)(i + 1) / (uint64_t)nt;
        atomic_store_explicit(&p->ranges[i].word, ((uint64_t)p->run << RUN_SHIFT) | (front << IDX_BITS) | back,
                              memory_order_release);
    }
    /* seq_cst: this store and the n_sleeping load below must not reorder
     * (a thread going to sleep does the mirror image under the mutex). */
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, 0);
    /* Only tasks another thread has claimed are left; normally they finish
     * within microseconds. If that thread was preempted mid-task, spinning
     * would burn the slice it needs: yield instead. */
    int spins = 0;
    const uint64_t t0 = p->wait_ns ? sb_now_ns() : 0;
    while (atomic_load_explicit(&p->tasks_done, memory_order_acquire) < n_tasks) {
        if (++spins < YIELD_AFTER) _mm_pause();
        else sched_yield();
    }
    if (p->wait_ns) *p->wait_ns += sb_now_ns() - t0;
}

void sb_pool_set_wait_counter(sb_pool *p, uint64_t *ns) { p->wait_ns = ns; }
