/* fuzz_ask.c - libFuzzer target for what `switchboard ask --url` reads from
 * the gateway (supervisor/ask_http.c): the status line and headers,
 * Content-Length, chunked or close-delimited bodies, Server-Sent Events and
 * the fields picked out of each event by the JSON reader (common/json.c).
 *
 * The first byte sets the request's options (--json, -v), the rest is the
 * server's byte stream: it is written into one end of a socket pair, the
 * write side shut, and sb_ask_http_answer reads the other end exactly as it
 * reads a TCP connection. Any stream must end in exit code 0 or 1, never a
 * crash, a leak or a hang. What ask prints goes to /dev/null: stdout and the
 * stderr FILE are reopened there, while libFuzzer and the sanitizers keep
 * writing to file descriptor 2.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/ask_internal.h"
#include "common/sb_common.h"

#define MAX_INPUT (100u << 10)      /* under the socket buffer: the write never blocks */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (!freopen("/dev/null", "w", stdout)) return 0;
    FILE *null = fopen("/dev/null", "w");
    if (null) stderr = null;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size || size > MAX_INPUT) return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return 0;
    int sndbuf = (int)MAX_INPUT * 2;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    while (n) {
        ssize_t w = write(sv[0], p, n);
        if (w <= 0) break;
        p += w;
        n -= (size_t)w;
    }
    shutdown(sv[0], SHUT_WR);
    sb_ask_req q;
    memset(&q, 0, sizeof q);
    q.url = "http://127.0.0.1:1";
    q.text = (char *)"hello";
    q.stream = true;
    q.json = data[0] & 1;
    q.verbose = (data[0] & 2) != 0;
    q.temp = -1;
    q.seed = -1;
    q.timeout_ms = 5000;    /* a hang is a bug; this turns it into a visible failure */
    int code = sb_ask_http_answer(&q, sv[1]);
    if (code != SB_EXIT_OK && code != SB_EXIT_FAIL) __builtin_trap();
    close(sv[0]);
    close(sv[1]);
    return 0;
}
