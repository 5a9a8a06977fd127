/* chat.c - detect a chat template by its markers and write its format.
 *
 * The detection order follows llama.cpp's llm_chat_detect_template where the
 * formats overlap: chatml's <|im_start|> first, then [INST], then phi3's
 * <|end|> before the zephyr family, which phi3 would otherwise match too.
 */
#include "worker/engine/sb_chat.h"
#include "worker/engine/chat_impl.h"

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

/* The format's own text: markers, and roles (checked to be names). */
static void put(sb_prompt *b, const char *s) { sb_prompt_add(b, s, strlen(s), 1); }

/* llama.cpp's trim(): isspace() in the C locale, both ends. */
static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* A message's content, trimmed at both ends when asked; the trim runs over
 * the parts as one text. */
void chat_put_content(sb_prompt *b, const sb_chat_msg *m, int trim) {
    const sb_text_seg one = { m->content, m->parts ? 0 : strlen(m->content), 0 };
    const sb_text_seg *parts = m->parts ? m->parts : &one;
    const size_t n = m->parts ? m->n_parts : 1;
    size_t total = 0, start = 0, end;
    for (size_t i = 0; i < n; i++) total += parts[i].len;
    end = total;
    if (trim) {
        /* Offsets into the whole content: first and one past last non-space. */
        size_t off = 0;
        int found = 0;
        for (size_t i = 0; i < n && !found; off += parts[i].len, i++)
            for (size_t j = 0; j < parts[i].len; j++)
                if (!is_space(parts[i].text[j])) { start = off + j; found = 1; break; }
        if (!found) return;
        off = total;
        for (size_t i = n; i-- > 0;) {
            off -= parts[i].len;
            size_t j = parts[i].len;
            while (j > 0 && is_space(parts[i].text[j - 1])) j--;
            if (j > 0) { end = off + j; break; }
        }
    }
    size_t off = 0;
    for (size_t i = 0; i < n; off += parts[i].len, i++) {
        size_t lo = SB_MAX(off, start), hi = SB_MIN(off + parts[i].len, end);
        if (lo < hi) sb_prompt_add(b, parts[i].text + (lo - off), hi - lo, parts[i].special);
    }
}

static void apply_llama2(sb_prompt *b, int kind, const sb_chat_msg *msgs, size_t n) {
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
        if (strcmp(role, "system") == 0) {
            /* A model without <<SYS>> still gets the system text, untagged. */
            if (system_tags) put(b, "<<SYS>>\n");
            chat_put_content(b, &msgs[i], strip);
            put(b, system_tags ? "\n<</SYS>>\n\n" : "\n");
        } else if (strcmp(role, "user") == 0) {
            chat_put_content(b, &msgs[i], strip);
            put(b, " [/INST]");
        } else {
            chat_put_content(b, &msgs[i], strip);
            put(b, "</s>");
            inside_turn = 0;
        }
    }
}

/* The formats where every turn is open, role, close, content, end: as the
 * Jinja templates the GGUF files carry write them (trim: llama-3 strips the
 * content). The llama-2 family (no row here) nests the system prompt into
 * the first user turn, see apply_llama2. */
typedef struct { const char *open, *close, *end, *generation; int trim; } turn_format;
static const turn_format turn_formats[SB_CHAT_COUNT] = {
    [SB_CHAT_CHATML] = { "<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n", 0 },
    [SB_CHAT_ZEPHYR] = { "<|", "|>\n", "</s>\n", "<|assistant|>\n", 0 },
    [SB_CHAT_ZEPHYR_ENDOFTEXT] = { "<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n", 0 },
    [SB_CHAT_PHI3] = { "<|", "|>\n", "<|end|>\n", "<|assistant|>\n", 0 },
    [SB_CHAT_LLAMA3] = { "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                         "<|start_header_id|>assistant<|end_header_id|>\n\n", 1 },
};

/* A role is written into the template's own text (where "<|" role "|>" must
 * meet as one control token), so it must not be able to spell a marker. */
int chat_valid_role(const char *r) {
    size_t n = strlen(r);
    if (n == 0 || n > 32) return 0;
    for (; *r; r++)
        if (!((*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') || (*r >= '0' && *r <= '9') || *r == '_' ||
              *r == '-'))
            return 0;
    return 1;
}

int sb_chat_apply_prompt(int kind, const sb_chat_msg *msgs, size_t n, int add_generation_prompt,
                         sb_prompt *b, char *err) {
    if (kind <= SB_CHAT_UNKNOWN || kind >= SB_CHAT_COUNT)
        return sb_seterr(err, SB_EUNSUP, "chat template: unknown format (%d)", kind);
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || (!msgs[i].content && !msgs[i].parts))
            return sb_seterr(err, SB_EINVAL, "chat message %zu: %s is NULL", i, msgs[i].role ? "content" : "role");
        if (!chat_valid_role(msgs[i].role))
            return sb_seterr(err, SB_EINVAL, "chat message %zu: role '%.40s' must be 1-32 characters of A-Z a-z 0-9 _ -",
                             i, msgs[i].role);
    }
    put(b, "");                     /* an empty conversation is still a string */
    const turn_format *f = &turn_formats[kind];
    if (!f->open) {
        apply_llama2(b, kind, msgs, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            put(b, f->open);
            put(b, msgs[i].role);
            put(b, f->close);
            chat_put_content(b, &msgs[i], f->trim);
            put(b, f->end);
        }
        if (add_generation_prompt) put(b, f->generation);
    }
    return b->failed ? sb_seterr(err, SB_ENOMEM, "chat template: out of memory") : 0;
}

int sb_chat_apply(int kind, const sb_chat_msg *msgs, size_t n, int add_generation_prompt,
                  char **out, size_t *out_len, char *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    sb_prompt p = { 0 };
    int rc = sb_chat_apply_prompt(kind, msgs, n, add_generation_prompt, &p, err);
    if (rc) {
        sb_prompt_free(&p);
        return rc;
    }
    *out = p.text;
    if (out_len) *out_len = p.len;
    sb_free(p.plain);
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
