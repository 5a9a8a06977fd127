/* fuzz_upstream.c - libFuzzer target for the router's upstream client
 * (router/backend/upstream.c): what a remote OpenAI-compatible server answers, read
 * as a whole JSON body or as Server-Sent Events arriving in pieces.
 *
 * Input: byte 0 picks chat or completion, streamed or not, and the status
 * (200 mostly; 0 = no answer, 400, 500); byte 1 the piece size (0 = one
 * piece); the rest is the body, as evhttp hands it over after the transfer
 * decoding. rt_upstream_feed runs the parsing a real call runs, and:
 *   - on_done is called exactly once, with an ok typed reply that carries
 *     a text and a finish_reason, or an error with code and message;
 *   - no token comes after on_done, and every token has its text;
 *   - the streamed text is the concatenation of the token events.
 */
#include <stdint.h>
#include <string.h>

#include "router/backend/backend_internal.h"

typedef struct {
    int n_done;
    size_t event_bytes;
} seen;

static void on_token(void *arg, const rt_token *t) {
    seen *s = arg;
    if (s->n_done || !t->text || t->has_logprobs) __builtin_trap();
    s->event_bytes += t->len;
}

static void on_done(void *arg, const rt_reply *res) {
    seen *s = arg;
    if (s->n_done++) __builtin_trap();
    if (!res->ok) {
        if (!res->code || !res->message) __builtin_trap();
        return;
    }
    if (!res->gen.text || !res->gen.finish_reason || !res->gen.finish_reason[0]) __builtin_trap();
    if (s->event_bytes && s->event_bytes != res->gen.len) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const int codes[8] = { 200, 200, 200, 200, 200, 0, 400, 500 };
    bool chat = data[0] & 1, stream = (data[0] & 2) != 0;
    int code = codes[(data[0] >> 2) & 7];
    seen s = { 0, 0 };
    rt_upstream_feed(chat, stream, code, (const char *)data + 2, size - 2, data[1], on_token, on_done, &s);
    if (s.n_done != 1) __builtin_trap();
    return 0;
}
