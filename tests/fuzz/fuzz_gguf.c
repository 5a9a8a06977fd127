/* fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Parses the input as a GGUF file and, when it is accepted, touches every
 * value and every tensor byte it hands out, so that a pointer outside the
 * buffer is caught by ASan even if parsing itself was fine.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "worker/gguf/sb_gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sb_gguf *g;
    char err[SB_ERR_LEN];
    if (sb_gguf_open_mem(data, size, "fuzz", &g, err) != 0) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < sb_gguf_n_kv(g); i++) {
        const sb_gguf_kv *kv = sb_gguf_kv_at(g, i);
        for (size_t j = 0; j < kv->key.len; j++) sink ^= (uint8_t)kv->key.ptr[j];
        if (kv->type == SB_GGUF_STRING && kv->v.s.len) sink ^= (uint8_t)kv->v.s.ptr[kv->v.s.len - 1];
        if (kv->type == SB_GGUF_ARRAY && kv->arr_type == SB_GGUF_STRING) {
            sb_str *s;
            if (sb_gguf_arr_strings(kv, &s, NULL) == 0) {
                for (uint64_t j = 0; j < kv->arr_n; j++)
                    if (s[j].len) sink ^= (uint8_t)s[j].ptr[s[j].len - 1];
                sb_free(s);
            }
        } else if (kv->type == SB_GGUF_ARRAY && kv->arr_type != SB_GGUF_ARRAY) {
            for (uint64_t j = 0; j < kv->arr_n; j++) sink ^= (uint8_t)sb_gguf_arr_int(kv, j);
        }
    }
    for (size_t i = 0; i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
    }
    (void)sink;
    sb_gguf_close(g);
    return 0;
}
