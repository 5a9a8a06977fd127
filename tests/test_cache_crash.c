/* test_cache_crash.c - kill -9 safety. 16 writer processes put entries into
 * one cache file and report each acknowledged key through a pipe; the parent
 * SIGKILLs them at random moments and restarts them, round after round.
 * Afterwards PRAGMA integrity_check must say "ok" and every entry whose put
 * returned success must be there with the right bytes.
 */
#include "tests/cache_testlib.h"

#include <poll.h>
#include <signal.h>
#include <time.h>

enum { WRITERS = 16, ROUNDS = 40, MAX_ACKS = 1 << 20 };

static void answer_for(uint32_t id, char *out, size_t n) {
    snprintf(out, n, "answer %u: %0*u", id, (int)(id % 300) + 1, id);
}

/* A writer never returns: it puts until killed. ids are writer << 24 | n. */
static void writer(const char *path, int fd, uint32_t writer_id, uint32_t start) {
    sb_cache *c = NULL;
    sb_cache_opts o = { .max_bytes = 1ull << 30, .busy_timeout_ms = 10000 };
    if (sb_cache_open(path, &o, &c, NULL)) _exit(3);
    char q[64], a[400];
    for (uint32_t n = start;; n++) {
        uint32_t id = writer_id << 24 | n;
        snprintf(q, sizeof q, "question %u", id);
        answer_for(id, a, sizeof a);
        if (tl_put(c, "crash", q, a, 0, NULL) == 0) {
            /* Acknowledged only after the commit returned: this is the promise. */
            if (write(fd, &id, sizeof id) != sizeof id) _exit(4);
        }
    }
}

static pid_t spawn(const char *path, int wfd, int rfd, uint32_t writer_id, uint32_t start) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(rfd);
        writer(path, wfd, writer_id, start);
    }
    return pid;
}

static void drain(int rfd, uint32_t *acks, size_t *n_acks, uint32_t *next) {
    for (;;) {
        struct pollfd p = { .fd = rfd, .events = POLLIN };
        if (poll(&p, 1, 0) <= 0) return;
        uint32_t buf[1024];
        ssize_t r = read(rfd, buf, sizeof buf);
        if (r <= 0) return;
        /* 4-byte writes to a pipe are atomic, so reads split on id boundaries. */
        assert_int_equal(r % 4, 0);
        for (ssize_t i = 0; i < r / 4 && *n_acks < MAX_ACKS; i++) {
            acks[(*n_acks)++] = buf[i];
            uint32_t w = buf[i] >> 24, n = buf[i] & 0xffffff;
            if (n + 1 > next[w]) next[w] = n + 1;
        }
    }
}

static void test_kill9_writers(void **state) {
    char *dir = tl_tmpdir(), *path = tl_path(dir, "crash.sqlite");
    /* Create the schema first so the writers race on data, not on migration. */
    sb_cache *c = NULL;
    assert_int_equal(sb_cache_open(path, NULL, &c, NULL), 0);
    sb_cache_close(c);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    uint32_t *acks = malloc(MAX_ACKS * sizeof *acks), next[WRITERS] = { 0 };
    size_t n_acks = 0;
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) pids[w] = spawn(path, fds[1], fds[0], (uint32_t)w, 0);
    srand((unsigned)time(NULL));
    int kills = 0;
    for (int round = 0; round < ROUNDS; round++) {
        usleep(10000 + (useconds_t)(rand() % 40000));
        drain(fds[0], acks, &n_acks, next);
        /* Kill a random half of the writers mid-whatever, then restart them
         * past the ids they acknowledged (a re-put of an id is fine too). */
        for (int w = 0; w < WRITERS; w++) {
            if (rand() % 2) continue;
            kill(pids[w], SIGKILL);
            waitpid(pids[w], NULL, 0);
            kills++;
            drain(fds[0], acks, &n_acks, next);
            pids[w] = spawn(path, fds[1], fds[0], (uint32_t)w, next[w] + 1000);
            next[w] += 1000;
        }
    }
    for (int w = 0; w < WRITERS; w++) kill(pids[w], SIGKILL);
    for (int w = 0; w < WRITERS; w++) waitpid(pids[w], NULL, 0);
    close(fds[1]);
    drain(fds[0], acks, &n_acks, next);
    close(fds[0]);
    fprintf(stderr, "# %d kills, %zu acknowledged puts\n", kills, n_acks);
    assert_true(n_acks > 100);

    char err[SB_ERR_LEN] = "";
    assert_int_equal(sb_cache_open(path, NULL, &c, err), 0);
    assert_int_equal(sb_cache_check(c, err), 0);
    size_t missing = 0;
    char q[64], a[400];
    for (size_t i = 0; i < n_acks; i++) {
        snprintf(q, sizeof q, "question %u", acks[i]);
        answer_for(acks[i], a, sizeof a);
        sb_cache_query k;
        sb_cache_make_key(c, "crash", "fp-test", q, "temp=0", &k, NULL);
        sb_cache_entry e;
        int rc = sb_cache_peek(c, k.key, &e, NULL);
        sb_free(k.input);
        if (rc) { if (missing++ < 5) fprintf(stderr, "acknowledged id %u missing\n", acks[i]); continue; }
        assert_int_equal(e.response_len, strlen(a));
        assert_memory_equal(e.response, a, e.response_len);
        sb_cache_entry_free(&e);
    }
    assert_int_equal(missing, 0);
    sb_cache_stats_t s;
    assert_int_equal(sb_cache_stats(c, &s, NULL), 0);
    assert_true(s.entries >= (int64_t)n_acks / 2);     /* ids are unique per writer run */
    sb_cache_close(c);
    free(acks);
    free(path);
    tl_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_writers),
    };
    return cmocka_run_group_tests_name("cache_crash", tests, NULL, NULL);
}
