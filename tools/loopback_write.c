/*
 * loopback_write - what one write to a loopback TCP socket costs the
 * writer, in its own thread's CPU time, with a reader blocked in poll()
 * on the other end (as a browser's SSE connection to the router is).
 *
 * Why: the console's live feed is a write per batch to each open page;
 * that write, with the loopback delivery and the reader's wake-up the
 * kernel does in the sender's context, is most of what the feed costs
 * the router (docs/router.md, "What the console costs"). Writes far apart
 * (a batch a second) find cold caches, so the gap is a parameter.
 * Not part of the library:
 *
 *   cc -O2 -pthread tools/loopback_write.c -o build/loopback_write
 *   build/loopback_write [WRITES [BYTES [GAP_MS]]]     (default 50 1500 500)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void *reader(void *arg) {
    int fd = *(int *)arg;
    char buf[65536];
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, -1) < 0 || read(fd, buf, sizeof buf) <= 0) return NULL;
    }
}

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50, size = argc > 2 ? atoi(argv[2]) : 1500;
    int gap_ms = argc > 3 ? atoi(argv[3]) : 500;
    if (n < 1 || size < 1 || gap_ms < 0) {
        fprintf(stderr, "usage: loopback_write [WRITES [BYTES [GAP_MS]]]\n");
        return 2;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0), w = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (ls < 0 || w < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || getsockname(ls, (struct sockaddr *)&a, &len) ||
        listen(ls, 1) || connect(w, (struct sockaddr *)&a, sizeof a)) {
        perror("loopback_write: socket");
        return 1;
    }
    int r = accept(ls, NULL, NULL);
    setsockopt(w, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  /* as libevent's HTTP server */
    pthread_t th;
    if (r < 0 || pthread_create(&th, NULL, reader, &r)) {
        perror("loopback_write: reader");
        return 1;
    }
    char *buf = malloc((size_t)size);
    double *us = malloc((size_t)n * sizeof *us);
    if (!buf || !us) return 1;
    memset(buf, 'x', (size_t)size);
    for (int i = 0; i < n; i++) {
        usleep((useconds_t)gap_ms * 1000);
        double t0 = thread_cpu_s();
        if (write(w, buf, (size_t)size) != size) { perror("loopback_write: write"); return 1; }
        us[i] = (thread_cpu_s() - t0) * 1e6;
    }
    qsort(us, (size_t)n, sizeof *us, cmp);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += us[i];
    printf("%d writes of %d bytes, %d ms apart: writer CPU per write mean %.1f us, median %.1f, p90 %.1f\n",
           n, size, gap_ms, sum / n, us[n / 2], us[n * 9 / 10]);
    return 0;
}
