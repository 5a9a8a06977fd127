/* fuzz_upstream.c - libFuzzer target for the router's upstream client
 * (router/backend/upstream.c): what a remote OpenAI-compatible server answers, read
 * as a whole JSON body or as Server-Sent Events arriving in pieces.
 *
 * Input: byte 0 picks chat or completion, streamed or not, and the status
 * (200 mostly; 0 = no answer, 400, 500); byte 1 the piece size (0 = one
 * piece); the rest is the body, as evhttp hands it over after the transfer
 * decoding. rt_upstream_feed runs the parsing a real call runs, and:
 *   - on_done is called exactly once, with an ok result that carries a
 *     "text" string and a finish_reason, or an error with code and message;
 *   - no "token" event comes after on_done, and every token event's text
 *     is a string;
 *   - the streamed text is the concatenation of the token events.
 */
#include <stdint.h>
#include <string.h>

#include "router/backend/sb_backend.h"

typedef struct {
    int n_done;
    size_t event_bytes;
} seen;

static void on_event(void *arg, uint64_t id, const char *event, const sb_mp_obj *data) {
    seen *s = arg;
    const char *t;
    size_t n;
    if (s->n_done || id != 1 || strcmp(event, "token")) __builtin_trap();
    if (sb_mp_as_str(sb_mp_map_get(data, "text"), &t, &n)) __builtin_trap();
    s->event_bytes += n;
}

static void on_done(void *arg, uint64_t id, const sb_ipc_result *res) {
    seen *s = arg;
    const char *t, *f;
    size_t n, fn;
    if (s->n_done++ || id != 1) __builtin_trap();
    if (!res->ok) {
        if (!res->code || !res->message) __builtin_trap();
        return;
    }
    if (sb_mp_as_str(sb_mp_map_get(res->result, "text"), &t, &n) ||
        sb_mp_as_str(sb_mp_map_get(res->result, "finish_reason"), &f, &fn) || !fn)
        __builtin_trap();
    if (s->event_bytes && s->event_bytes != n) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const int codes[8] = { 200, 200, 200, 200, 200, 0, 400, 500 };
    bool chat = data[0] & 1, stream = (data[0] & 2) != 0;
    int code = codes[(data[0] >> 2) & 7];
    seen s = { 0, 0 };
    rt_upstream_feed(chat, stream, code, (const char *)data + 2, size - 2, data[1], on_event, on_done, &s);
    if (s.n_done != 1) __builtin_trap();
    return 0;
}
