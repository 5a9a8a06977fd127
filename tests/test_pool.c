/* test_pool.c - the thread pool runs every task of every run exactly once,
 * and never lets a run end before all its tasks finished. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "common/sb_common.h"
#include "worker/engine/sb_pool.h"

typedef struct {
    atomic_int *hits;
    atomic_int running;     /* tasks in progress: must be 0 when run returns */
    int slow_every;
} job;

static void task(void *arg, int t, int thread) {
    job *j = arg;
    atomic_fetch_add(&j->running, 1);
    if (j->slow_every && t % j->slow_every == 0)
        for (volatile int i = 0; i < 2000; i++) {}
    atomic_fetch_add(&j->hits[t], 1);
    atomic_fetch_sub(&j->running, 1);
}

static void test_every_task_once(void **state) {
    (void)state;
    srand(7);
    for (int nt = 1; nt <= 4; nt++) {
        sb_pool *p;
        assert_int_equal(sb_pool_new(nt, &p), 0);
        assert_int_equal(sb_pool_size(p), nt);
        for (int run = 0; run < 3000; run++) {
            int n = 1 + rand() % 300;
            atomic_int *hits = calloc((size_t)n, sizeof *hits);
            job j = { hits, 0, run % 3 ? 0 : 7 };
            sb_pool_run(p, task, &j, n);
            assert_int_equal(atomic_load(&j.running), 0);
            for (int t = 0; t < n; t++)
                if (atomic_load(&hits[t]) != 1) fail_msg("threads %d run %d task %d ran %d times", nt, run, t, hits[t]);
            free(hits);
        }
        sb_pool_free(p);
    }
}

/* Threads that went to sleep (idle longer than the spin) must wake up. */
static void test_wakes_after_sleep(void **state) {
    (void)state;
    sb_pool *p;
    assert_int_equal(sb_pool_new(3, &p), 0);
    for (int k = 0; k < 5; k++) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        atomic_int hits[64] = {0};
        job j = { hits, 0, 1 };
        sb_pool_run(p, task, &j, 64);
        for (int t = 0; t < 64; t++) assert_int_equal(atomic_load(&hits[t]), 1);
    }
    sb_pool_free(p);
}

/* A thread stuck in a task must not hold up the rest of its range: the
 * others steal it. Thread 1's first task waits until every other task of
 * the run has finished (or 2 s pass, which fails the test); that can only
 * happen if another thread runs the rest of thread 1's range. */
typedef struct {
    atomic_int finished;
    atomic_int timed_out;
    atomic_int blocked_once;
    int n;
} steal_job;

static void steal_task(void *arg, int t, int thread) {
    (void)t;
    steal_job *j = arg;
    if (thread == 1 && !atomic_exchange(&j->blocked_once, 1)) {
        const uint64_t t0 = sb_now_ns();
        while (atomic_load(&j->finished) < j->n - 1) {
            if (sb_now_ns() - t0 > 2000000000ull) {
                atomic_store(&j->timed_out, 1);
                break;
            }
            struct timespec ts = { 0, 100 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    /* ~20 µs of work, so a run lasts long enough for thread 1 to wake up */
    const uint64_t t1 = sb_now_ns();
    while (sb_now_ns() - t1 < 20000) {}
    atomic_fetch_add(&j->finished, 1);
}

static void test_steals_from_a_stuck_thread(void **state) {
    (void)state;
    sb_pool *p;
    assert_int_equal(sb_pool_new(2, &p), 0);
    int blocked_runs = 0;
    const uint64_t t0 = sb_now_ns();
    for (int run = 0; blocked_runs < 5 && sb_now_ns() - t0 < 10000000000ull; run++) {
        steal_job j = { 0, 0, 0, 64 };
        sb_pool_run(p, steal_task, &j, j.n);
        assert_int_equal(atomic_load(&j.finished), j.n);
        if (atomic_load(&j.timed_out)) fail_msg("run %d: a stuck thread's range was not stolen", run);
        blocked_runs += atomic_load(&j.blocked_once);
    }
    /* Thread 1 may miss a run entirely (asleep while thread 0 does it all),
     * but within 10 s of runs it joins some. */
    assert_true(blocked_runs > 0);
    sb_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_wakes_after_sleep),
        cmocka_unit_test(test_steals_from_a_stuck_thread),
    };
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
