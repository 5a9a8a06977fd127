/* pool.c - persistent thread pool (see sb_pool.h). */
#include "sb_pool.h"
#include "sb_common.h"

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

typedef struct {
    sb_pool *pool;
    int index;
    pthread_t tid;
} pool_thread;

/* Work is handed out through one 64-bit ticket: run number (24 bits), task
 * count (20) and next task index (20). A thread claims a task by a
 * fetch_add on the ticket; fn/arg cannot change under a claimed task: the
 * caller waits until every task of a run has *finished* (tasks_done), not
 * until every thread has checked in. Each thread overshoots the index by
 * one when it finds the run empty, hence the OVERSHOOT headroom.
 * A thread that is descheduled while idle therefore never delays a run;
 * with more runnable threads than cores (three workers on two cores) that
 * is the difference between microseconds and a scheduler quantum per run. */
#define TICKET_BITS 20
#define TICKET_MASK ((1u << TICKET_BITS) - 1)
#define OVERSHOOT 512           /* > threads: index headroom below the count bits */

struct sb_pool {
    int n_threads;
    pool_thread *threads;
    _Alignas(64) _Atomic uint64_t ticket;
    _Alignas(64) atomic_int tasks_done;
    _Alignas(64) atomic_uint generation;    /* bumped once per run: wakes threads */
    _Alignas(64) atomic_int n_sleeping;
    atomic_int stop;
    uint32_t run;                           /* caller-only: run number */
    sb_pool_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* Claim tasks until none is left. A claim is one fetch_add on the ticket
 * (no retry loop under contention); it hands out an index of whichever run
 * is current, which is always the run this thread's claims belong to: a run
 * cannot finish while a thread holds an uncounted task of it. Finished tasks
 * are counted locally and published once, so a run costs each thread two
 * contended atomics plus one per task, not two per task. */
static void run_tasks(sb_pool *p, int thread) {
    int done = 0;
    for (;;) {
        const uint64_t v = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_acq_rel);
        const uint32_t idx = (uint32_t)(v & TICKET_MASK), n = (uint32_t)((v >> TICKET_BITS) & TICKET_MASK);
        if (idx >= n) break;
        p->fn(p->arg, (int)idx, thread);
        done++;
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
    if (!p->threads) goto fail;
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
    sb_aligned_free(p);
}

int sb_pool_size(const sb_pool *p) { return p->n_threads; }

void sb_pool_run(sb_pool *p, sb_pool_fn fn, void *arg, int n_tasks) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1 || n_tasks > (int)TICKET_MASK - OVERSHOOT) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->run = (p->run + 1) & 0xFFFFFFu;
    atomic_store_explicit(&p->tasks_done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->ticket, ((uint64_t)p->run << (2 * TICKET_BITS)) | ((uint64_t)n_tasks << TICKET_BITS),
                          memory_order_release);
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
    while (atomic_load_explicit(&p->tasks_done, memory_order_acquire) < n_tasks) {
        if (++spins < YIELD_AFTER) _mm_pause();
        else sched_yield();
    }
}
