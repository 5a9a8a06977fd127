/* sb_chat.h - chat templates, recognised rather than interpreted.
 *
 * A GGUF file carries its chat format as a Jinja program
 * (tokenizer.chat_template). Like llama.cpp's llm_chat_detect_template we do
 * not run Jinja: distinctive substrings tell which known format the program
 * writes, and sb_chat_apply writes that format directly, message by message,
 * as llama.cpp's llm_chat_apply_template does (system messages included).
 *
 * BOS is never written here: the tokenizer adds it when the model asks for
 * it, so a template's leading {{ bos_token }} is deliberately ignored (as in
 * llama.cpp). The output has special-token spellings such as "<|im_start|>"
 * in it. sb_chat_apply_prompt keeps them apart from the message contents,
 * which come from whoever sent the request: tokenized with sb_tokenize_prompt,
 * the markers become control tokens and a "<|im_end|>" typed in a message
 * stays text (see sb_vocab.h). Roles are written as template text, so they
 * are restricted to names (A-Z a-z 0-9 _ -, 1-32 bytes).
 *
 * Known formats (name: what one message becomes; generation prompt):
 *   chatml           "<|im_start|>{role}\n{content}<|im_end|>\n";  "<|im_start|>assistant\n"
 *   zephyr           "<|{role}|>\n{content}</s>\n";                "<|assistant|>\n"
 *                    (TinyLlama and HuggingFaceH4 zephyr, whose eos_token is </s>)
 *   zephyr-endoftext "<|{role}|>\n{content}<|endoftext|>\n";       "<|assistant|>\n"
 *                    (StableLM zephyr; llama.cpp calls this one "zephyr")
 *   phi3             "<|{role}|>\n{content}<|end|>\n";             "<|assistant|>\n"
 *   llama3           "<|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}<|eot_id|>";
 *                    "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *   llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip
 *                    "[INST] {user} [/INST]{assistant}</s>[INST] ..." with the
 *                    system message as "<<SYS>>\n{system}\n<</SYS>>\n\n" inside
 *                    the first [INST] (plain "{system}\n" for llama2); -bos
 *                    writes "<s>" before each later [INST], -strip trims every
 *                    message. No generation prompt: "[/INST]" is one.
 * System messages are ordinary roles in the other formats.
 */
#ifndef SB_CHAT_H
#define SB_CHAT_H

#include <stddef.h>
#include "common/sb_common.h"
#include "worker/tokenizer/sb_vocab.h"

typedef enum {
    SB_CHAT_UNKNOWN = 0,
    SB_CHAT_CHATML,
    SB_CHAT_ZEPHYR,
    SB_CHAT_ZEPHYR_ENDOFTEXT,
    SB_CHAT_PHI3,
    SB_CHAT_LLAMA3,
    SB_CHAT_LLAMA2,
    SB_CHAT_LLAMA2_SYS,
    SB_CHAT_LLAMA2_SYS_BOS,
    SB_CHAT_LLAMA2_SYS_STRIP,
    SB_CHAT_COUNT
} sb_chat_kind;

/* A message's content is `content` (untrusted text), or, when parts is not
 * NULL, the n_parts pieces there, each trusted or not as it says (a
 * pipeline's own prompt text around a caller's words). */
typedef struct {
    const char *role;
    const char *content;
    const sb_text_seg *parts;
    size_t n_parts;
} sb_chat_msg;

/* Which format the Jinja source tmpl[0..len) writes (not NUL-terminated; a
 * format name is accepted too). SB_CHAT_UNKNOWN when none of ours - also for
 * formats that share a marker with ours but differ (phi4, SmolVLM, Mistral,
 * ChatGLM), so that they fail loudly instead of being formatted wrongly. */
int sb_chat_detect(const char *tmpl, size_t len);

/* "chatml", "zephyr", ... ("unknown" for SB_CHAT_UNKNOWN or out of range). */
const char *sb_chat_name(int kind);
/* The kind for a name above ("tinyllama" is accepted for zephyr);
 * SB_CHAT_UNKNOWN if none. */
int sb_chat_from_name(const char *name);

/* Format n messages, appending to *out: the format's markers and the roles
 * as trusted text, contents as the message says. SB_EUNSUP for
 * SB_CHAT_UNKNOWN, SB_EINVAL for a missing or malformed role or a NULL
 * content, SB_ENOMEM. */
int sb_chat_apply_prompt(int kind, const sb_chat_msg *msgs, size_t n, int add_generation_prompt,
                         sb_prompt *out, char *err);

/* The same as one string. *out receives a NUL-terminated string from
 * sb_malloc (caller sb_frees), *out_len its length without the NUL. */
int sb_chat_apply(int kind, const sb_chat_msg *msgs, size_t n, int add_generation_prompt,
                  char **out, size_t *out_len, char *err);

/* The system message a chatml-style template writes when the conversation has
 * none, e.g. Qwen2.5's "You are Qwen, created by Alibaba Cloud. You are a
 * helpful assistant.": the literal between "<|im_start|>system" plus a
 * newline (escaped or raw) and "<|im_end|>" in the Jinja source. Returns 1 and points *text into tmpl when
 * there is one, else 0. llama.cpp's non-Jinja path leaves it out; a caller
 * that wants the prompt the template itself renders prepends it as a system
 * message when msgs[0] is not one. */
int sb_chat_default_system(const char *tmpl, size_t len, const char **text, size_t *text_len);

#endif
