/* fuzz_tools.c - libFuzzer target for what tool calling reads from callers
 * and models (worker/engine/chat_tools.c, tool_calls.c): a request's `tools`
 * JSON rendered into each family's prompt and re-printed as Python's
 * json.dumps, the grammar spec and its compilation from those tools, and a
 * model's answer read back as calls.
 *
 * The first byte picks the template family and the choice; the rest is the
 * text, used both as the tools array and as a model's answer. Any input
 * must end in a clean error or a result, never a crash, a leak or a hang.
 */
#include <stdint.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/sb_chat.h"

#define MAX_INPUT (64u << 10)

static const char QWEN[] =
    "{%- if tools %}<tools><tool_call>{%- endif %}<|im_start|>system\\nYou are Qwen.<|im_end|>\\n";
static const char LLAMA31[] = "<|start_header_id|>{{ r }}<|end_header_id|>Environment: ipython"
                              "{%- set date_string = \"26 Jul 2024\" %}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size || size > MAX_INPUT) return 0;
    const int format = data[0] % 3, choice = 1 + (data[0] >> 2) % 2, parallel = (data[0] >> 3) & 1;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    sb_chat_tmpl t;
    const char *src = format == 1 ? QWEN : format == 2 ? LLAMA31 : "chatml";
    if (sb_chat_tmpl_init(&t, src, strlen(src))) return 0;
    char err[SB_ERR_LEN];
    const sb_chat_call call = { "c1", "f", text, len };
    const sb_chat_msg msgs[] = {
        { .role = "system", .content = "s" },
        { .role = "user", .content = "u" },
        { .role = "assistant", .calls = &call, .n_calls = 1 },
        { .role = "tool", .content = "r", .tool_call_id = "c1" },
    };
    sb_prompt p = { 0 };
    sb_chat_apply_tools(&t, msgs, SB_ARRAY_LEN(msgs), text, len, 1, &p, err);
    sb_prompt_free(&p);
    sb_jw w;
    sb_jw_init(&w);
    sb_chat_py_json(&w, text, len, data[0] & 1 ? 4 : -1);
    sb_jw_reset(&w);
    if (sb_chat_tools_spec(t.tools, text, len, choice, NULL, parallel, &w, err) == 0) {
        sb_grammar *g = NULL;
        if (sb_chat_tools_grammar(w.p, w.len, &g, err) == 0) sb_grammar_free(g);
    }
    sb_jw_free(&w);
    sb_chat_call *calls;
    size_t n;
    if (sb_chat_parse_calls(t.tools, text, len, &calls, &n) == 0) sb_chat_calls_free(calls, n);
    sb_chat_tmpl_free(&t);
    return 0;
}
