/* runtime_testlib.h - the process helpers the real-runtime tests share
 * (test_runtime.c, test_runtime_mem.c): start a binary, stop it with a
 * deadline, and connect a client or fail the test.
 */
#ifndef RUNTIME_TESTLIB_H
#define RUNTIME_TESTLIB_H
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/sb_ipc.h"

#define TESTLIB static __attribute__((unused))
#define FIXTURE "tests/data/tiny-llama-spm-Q2_K.gguf"

TESTLIB void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

TESTLIB double now_ms(void) { return (double)sb_now_ns() / 1e6; }

TESTLIB pid_t spawn(char *const argv[]) {
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* SIGTERM, then SIGKILL after timeout_ms; returns the wait status. */
TESTLIB int stop(pid_t pid, int timeout_ms) {
    int status = 0;
    kill(pid, SIGTERM);
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

TESTLIB bool alive(pid_t pid) { return waitpid(pid, NULL, WNOHANG) == 0; }

TESTLIB sb_ipc_client *connect_or_fail(const char *path, int wait_ms) {
    sb_ipc_client *c = NULL;
    char err[SB_ERR_LEN];
    if (sb_ipc_client_connect(path, wait_ms, &c, err)) fail_msg("connect %s: %s", path, err);
    return c;
}

/* SB_BIN (default bin/switchboard) into bin, and a fresh temporary directory
 * into dir; -1 (with a message) when the binary is not there. */
TESTLIB int runtime_test_env(const char *who, char *bin, size_t bin_cap, char *dir, size_t dir_cap) {
    const char *b = getenv("SB_BIN");
    snprintf(bin, bin_cap, "%s", b && *b ? b : "bin/switchboard");
    if (access(bin, X_OK)) {
        fprintf(stderr, "%s: %s is not executable (set SB_BIN)\n", who, bin);
        return -1;
    }
    char tmpl[] = "/tmp/sb-rtc-XXXXXX";
    if (!mkdtemp(tmpl)) return -1;
    snprintf(dir, dir_cap, "%s", tmpl);
    return 0;
}

/* rm -rf dir: the test's temporary directory. */
TESTLIB int runtime_test_rmdir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

#endif
