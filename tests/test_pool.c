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

#include "sb_common.h"
#include "sb_pool.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_wakes_after_sleep),
    };
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
