/* sb_pool.h - persistent thread pool for the forward pass.
 *
 * One pool per model context. sb_pool_run() hands out task indices
 * 0..n_tasks-1 to the pool's threads and the calling thread (thread 0), each
 * thread first taking a contiguous range of them in order, then stealing
 * what others have left, and returns when all are done. Idle threads spin briefly
 * before sleeping, so back-to-back runs in the decode loop cost no syscall;
 * a pool left idle sleeps on a condition variable and burns no CPU.
 */
#ifndef SB_POOL_H
#define SB_POOL_H

#include <stdint.h>

typedef void (*sb_pool_fn)(void *arg, int task, int thread);
typedef struct sb_pool sb_pool;

/* n_threads counts the caller: 1 means no extra threads. */
int  sb_pool_new(int n_threads, sb_pool **out);
void sb_pool_free(sb_pool *p);
int  sb_pool_size(const sb_pool *p);
/* Run fn(arg, task, thread) for every task; blocks until all have finished.
 * Not re-entrant: fn must not call sb_pool_run on the same pool. */
void sb_pool_run(sb_pool *p, sb_pool_fn fn, void *arg, int n_tasks);
/* With ns non-NULL, every run adds the nanoseconds the caller spent waiting
 * for other threads' tasks after finishing its own to *ns (profiling). */
void sb_pool_set_wait_counter(sb_pool *p, uint64_t *ns);

#endif
