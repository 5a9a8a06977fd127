/* chat.c - detect a chat template by its markers and write its format.
 *
 * The detection order follows llama.cpp's llm_chat_detect_template where the
 * formats overlap: chatml's <|im_start|> first, then [INST], then phi3's
 * <|end|> before the zephyr family, which phi3 would otherwise match too.
 */
#include "sb_chat.h"

#include <string.h>

static const char *const NAMES[SB_CHAT_COUNT] = {
    [SB_CHAT_UNKNOWN]          = "unknown",
    [SB_CHAT_CHATML]           = "chatml",
    [SB_CHAT_ZEPHYR]           = "zephyr",
    [SB_CHAT_ZEPHYR_ENDOFTEXT] = "zephyr-endoftext",
    [SB_CHAT_PHI3]             = "phi3",
    [SB_CHAT_LLAMA3]           = "llama3",
    [SB_CHAT_LLAMA2]           = "llama2",
    [SB_CHAT_LLAMA2_SYS]       = "llama2-sys",
    [SB_CHAT_LLAMA2_SYS_BOS]   = "llama2-sys-bos",
    [SB_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
};

const char *sb_chat_name(int kind) {
    return kind > SB_CHAT_UNKNOWN && kind < SB_CHAT_COUNT ? NAMES[kind] : NAMES[SB_CHAT_UNKNOWN];
}

int sb_chat_from_name(const char *name) {
    if (!name) return SB_CHAT_UNKNOWN;
    for (int k = SB_CHAT_UNKNOWN + 1; k < SB_CHAT_COUNT; k++)
        if (strcmp(name, NAMES[k]) == 0) return k;
    if (strcmp(name, "tinyllama") == 0) return SB_CHAT_ZEPHYR;
    return SB_CHAT_UNKNOWN;
}

typedef struct { const char *p; size_t n; } span;

static int has(span t, const char *needle) {
    return memmem(t.p, t.n, needle, strlen(needle)) != NULL;
}

int sb_chat_detect(const char *tmpl, size_t len) {
    if (!tmpl) return SB_CHAT_UNKNOWN;
    /* A bare name, as llama.cpp accepts in place of a template. */
    for (int k = SB_CHAT_UNKNOWN + 1; k < SB_CHAT_COUNT; k++)
        if (strlen(NAMES[k]) == len && memcmp(tmpl, NAMES[k], len) == 0) return k;
    span t = { tmpl, len };

    if (has(t, "<|im_start|>")) {
        /* phi4 and SmolVLM use <|im_start|> but are not chatml. */
        if (has(t, "<|im_sep|>") || has(t, "<end_of_utterance>")) return SB_CHAT_UNKNOWN;
        return SB_CHAT_CHATML;
    }
    if ((len >= 7 && memcmp(tmpl, "mistral", 7) == 0) || has(t, "[INST]")) {
        /* Mistral's official v1/v3/v7 templates space [INST] differently. */
        if (has(t, "[SYSTEM_PROMPT]") || has(t, "' [INST] ' + system_message") ||
            has(t, "[AVAILABLE_TOOLS]"))
            return SB_CHAT_UNKNOWN;
        if (has(t, "content.strip()")) return SB_CHAT_LLAMA2_SYS_STRIP;
        if (has(t, "bos_token + '[INST]")) return SB_CHAT_LLAMA2_SYS_BOS;
        if (has(t, "<<SYS>>")) return SB_CHAT_LLAMA2_SYS;
        return SB_CHAT_LLAMA2;
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return SB_CHAT_PHI3;
    if (has(t, "[gMASK]")) return SB_CHAT_UNKNOWN;             /* ChatGLM 3/4 */
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return SB_CHAT_LLAMA3;
    /* The zephyr family writes the role between <| and |>, either spelled out
     * ('<|user|>\n' + ...) or from the message (<|{{ message['role'] }}|>),
     * and ends every message with the EOS text. Without an end marker it is
     * something else (GLM-Edge ends messages with nothing). */
    if (has(t, "<|assistant|>") &&
        (has(t, "<|user|>") || has(t, "<|{{ message['role'] }}|>") ||
         has(t, "<|{{ message.role }}|>") || has(t, "'<|' + message['role'] + '|>")) &&
        (has(t, "eos_token") || has(t, "</s>") || has(t, "<|endoftext|>")))
        return has(t, "<|endoftext|>") ? SB_CHAT_ZEPHYR_ENDOFTEXT : SB_CHAT_ZEPHYR;
    return SB_CHAT_UNKNOWN;
}

/* ---- Output ---- */

typedef struct { char *p; size_t n, cap; int failed; } strbuf;

static void put_n(strbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = SB_MAX(b->cap * 2, b->n + n + 1);
        char *q = sb_realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void put(strbuf *b, const char *s) { put_n(b, s, strlen(s)); }

/* llama.cpp's trim(): isspace() in the C locale, both ends. */
static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void put_trimmed(strbuf *b, const char *s) {
    size_t start = 0, end = strlen(s);
    while (start < end && is_space(s[start])) start++;
    while (end > start && is_space(s[end - 1])) end--;
    put_n(b, s + start, end - start);
}

static void apply_llama2(strbuf *b, int kind, const sb_chat_msg *msgs, size_t n) {
    const int system_tags = kind != SB_CHAT_LLAMA2;
    const int bos_inside = kind == SB_CHAT_LLAMA2_SYS_BOS;
    const int strip = kind == SB_CHAT_LLAMA2_SYS_STRIP;
    int inside_turn = 1;            /* the first [INST] follows the tokenizer's BOS */
    put(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside_turn) {
            inside_turn = 1;
            put(b, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        const char *role = msgs[i].role;
        void (*content)(strbuf *, const char *) = strip ? put_trimmed : put;
        if (strcmp(role, "system") == 0) {
            /* A model without <<SYS>> still gets the system text, untagged. */
            if (system_tags) put(b, "<<SYS>>\n");
            content(b, msgs[i].content);
            put(b, system_tags ? "\n<</SYS>>\n\n" : "\n");
        } else if (strcmp(role, "user") == 0) {
            content(b, msgs[i].content);
            put(b, " [/INST]");
        } else {
            content(b, msgs[i].content);
            put(b, "</s>");
            inside_turn = 0;
        }
    }
}

int sb_chat_apply(int kind, const sb_chat_msg *msgs, size_t n, int add_generation_prompt,
                  char **out, size_t *out_len, char *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (kind <= SB_CHAT_UNKNOWN || kind >= SB_CHAT_COUNT)
        return sb_seterr(err, SB_EUNSUP, "chat template: unknown format (%d)", kind);
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return sb_seterr(err, SB_EINVAL, "chat message %zu: %s is NULL", i,
                             msgs[i].role ? "content" : "role");
    strbuf b = { 0 };
    put_n(&b, "", 0);               /* an empty conversation is still a string */
    switch (kind) {
    case SB_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|im_start|>");
            put(&b, msgs[i].role);
            put(&b, "\n");
            put(&b, msgs[i].content);
            put(&b, "<|im_end|>\n");
        }
        if (add_generation_prompt) put(&b, "<|im_start|>assistant\n");
        break;
    case SB_CHAT_ZEPHYR:
    case SB_CHAT_ZEPHYR_ENDOFTEXT:
    case SB_CHAT_PHI3: {
        const char *end = kind == SB_CHAT_ZEPHYR ? "</s>\n"
                        : kind == SB_CHAT_PHI3 ? "<|end|>\n" : "<|endoftext|>\n";
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|");
            put(&b, msgs[i].role);
            put(&b, "|>\n");
            put(&b, msgs[i].content);
            put(&b, end);
        }
        if (add_generation_prompt) put(&b, "<|assistant|>\n");
        break;
    }
    case SB_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|start_header_id|>");
            put(&b, msgs[i].role);
            put(&b, "<|end_header_id|>\n\n");
            put_trimmed(&b, msgs[i].content);
            put(&b, "<|eot_id|>");
        }
        if (add_generation_prompt) put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    default:
        apply_llama2(&b, kind, msgs, n);
        break;
    }
    if (b.failed) {
        sb_free(b.p);
        return sb_seterr(err, SB_ENOMEM, "chat template: out of memory");
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}

/* "<|im_start|>system" then a newline, spelled as the escape \n (Qwen) or as
 * a raw newline inside the string literal (SmolLM2). */
static const char *after_system_open(const char *p, const char *end) {
    static const char open[] = "<|im_start|>system";
    size_t n = sizeof open - 1;
    if ((size_t)(end - p) < n || memcmp(p, open, n) != 0) return NULL;
    p += n;
    if (end - p >= 2 && p[0] == '\\' && p[1] == 'n') return p + 2;
    if (end - p >= 1 && p[0] == '\n') return p + 1;
    return NULL;
}

int sb_chat_default_system(const char *tmpl, size_t len, const char **text, size_t *text_len) {
    static const char open[] = "<|im_start|>system";
    static const char close[] = "<|im_end|>";
    *text = NULL;
    *text_len = 0;
    const char *p = tmpl, *end = tmpl + len;
    while (p < end) {
        const char *hit = memmem(p, (size_t)(end - p), open, sizeof open - 1);
        if (!hit) return 0;
        p = hit + 1;
        const char *s = after_system_open(hit, end);
        if (!s) continue;
        const char *stop = memmem(s, (size_t)(end - s), close, sizeof close - 1);
        if (!stop) return 0;
        /* A literal: nothing that would make it an expression or an escape. */
        size_t n = (size_t)(stop - s);
        if (n > 0 && !memchr(s, '\'', n) && !memchr(s, '"', n) && !memchr(s, '\\', n) &&
            !memchr(s, '{', n) && !memchr(s, '}', n) && !memchr(s, '+', n) && !memchr(s, '\n', n)) {
            *text = s;
            *text_len = n;
            return 1;
        }
    }
    return 0;
}
