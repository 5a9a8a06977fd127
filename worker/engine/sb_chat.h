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
#include "common/sb_json.h"
#include "worker/engine/sb_grammar.h"
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
    const char *id;             /* the call's id (not written by the templates we render) */
    const char *name;           /* the function's name */
    const char *arguments;      /* its arguments: JSON text as OpenAI sends it (a string) */
    size_t arguments_len;
} sb_chat_call;

typedef struct {
    const char *role;
    const char *content;        /* may be NULL for an assistant message with calls */
    const sb_text_seg *parts;
    size_t n_parts;
    const sb_chat_call *calls;  /* an assistant message's tool calls (chat_tools.c) */
    size_t n_calls;
    const char *tool_call_id;   /* a "tool" message: the call it answers */
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

/* ---- Tools (chat_tools.c) ----
 * OpenAI's function calling, rendered as the model's own template does:
 * the `tools` array, assistant messages carrying calls, and "tool" messages
 * (results) in the history. Three families:
 *   hermes    Qwen2.5's template (it writes "<tools>" and "<tool_call>"):
 *             the tools in its system block, a call as
 *             "<tool_call>\n{"name": N, "arguments": A}\n</tool_call>",
 *             results as "<tool_response>" blocks in one user turn. The
 *             format line of the system block keeps the template's braces
 *             (Qwen2.5-Coder-1.5B's literal doubles them: "{{"name": ...}}").
 *   llama31   Llama-3.1's (it writes "Environment: ipython"): the tools
 *             (JSON, indent 4) in the first user message, a call as the
 *             assistant's whole turn {"name": N, "parameters": A}, results
 *             in an "ipython" turn as a JSON string; one call per turn.
 *   generic   any other template: the hermes text (the tools and how to
 *             call them) appended to the system message, calls as that
 *             text in the assistant message, results as a user message of
 *             "<tool_response>" blocks, all written in the template's own
 *             format (sb_chat_apply_prompt).
 * Byte for byte what the GGUF's Jinja template renders through
 * transformers' environment (tojson = Python's json.dumps, ensure_ascii
 * off), checked by tests/it_chat_tools.sh with jinja2, except that trim
 * strips C-locale whitespace only (Python's str.strip also strips Unicode
 * spaces). The tools' JSON, names, arguments and results are the caller's:
 * tokenized as text, so a "<tool_call>" inside them is never the token. */
enum { SB_TOOLS_GENERIC = 0, SB_TOOLS_HERMES, SB_TOOLS_LLAMA31 };

/* What the renderer needs from a template, copied out of its source. */
typedef struct {
    int kind;                   /* sb_chat_kind (UNKNOWN renders as chatml) */
    int tools;                  /* SB_TOOLS_* */
    char *default_system;       /* hermes: the system text when none is given */
    int hermes_braces;          /* hermes: the format line's braces, 2 where the template's string
                                   literal doubles them (Qwen2.5-Coder 1.5B: Jinja prints "{{" as is) */
    char date[32];              /* llama31: "Today Date: " (its date_string, or today) */
} sb_chat_tmpl;

/* Fill t from the Jinja source (NULL: no template, generic chatml).
 * SB_ENOMEM; sb_chat_tmpl_free releases it. */
int  sb_chat_tmpl_init(sb_chat_tmpl *t, const char *tmpl, size_t len);
void sb_chat_tmpl_free(sb_chat_tmpl *t);
const char *sb_chat_tools_name(int tools);  /* "generic", "hermes", "llama31" */

/* Format msgs with tools (tools_json: OpenAI's `tools` array as JSON text,
 * or NULL for none) into *out. SB_EINVAL with err naming the message or
 * tool for what the template cannot write (no first user message for
 * llama31's tools, two calls in one llama31 turn, a bad role, invalid
 * tools JSON), SB_ENOMEM. */
int sb_chat_apply_tools(const sb_chat_tmpl *t, const sb_chat_msg *msgs, size_t n, const char *tools_json,
                        size_t tools_len, int add_generation_prompt, sb_prompt *out, char *err);

/* Python's json.dumps(json.loads(json), ensure_ascii=False, indent=indent)
 * (indent < 0: None) appended to w (an sb_jw used as a byte buffer; from
 * sb_json.h), for JSON text that sb_json_parse accepts. */
int sb_chat_py_json(sb_jw *w, const char *json, size_t len, int indent);
/* The text of member `key` of the JSON object obj[0..len), as written (so
 * that 1.0 stays 1.0 on its way to a template). SB_EINVAL for text that is
 * not a JSON object, SB_ENOTFOUND. */
int sb_chat_json_member(const char *obj, size_t len, const char *key, const char **at, size_t *n);

/* ---- Tool calls (tool_calls.c) ----
 * What the model may answer with tools, enforced by a grammar (sb_grammar.h):
 *   required   one call (or, when parallel, several separated by "\n") and
 *              nothing else: hermes and generic "<tool_call>\n{"name": N,
 *              "arguments": A}\n</tool_call>", llama31 {"name": N,
 *              "parameters": A}; N one of the functions (the named one when
 *              tool_choice names it), A valid against its `parameters`
 *              schema (the subset of docs/GRAMMAR.md);
 *   auto       those calls, or text that does not open like one (its first
 *              byte is not '<', for llama31 not '{');
 *   none       no grammar (the caller does not ask for one).
 * llama31 takes one call per answer whatever parallel says; the others at
 * most SB_TOOL_MAX_CALLS (a model that would call on and on stops there). */
#define SB_TOOL_MAX_CALLS 8
enum { SB_TOOL_CHOICE_NONE = 0, SB_TOOL_CHOICE_AUTO, SB_TOOL_CHOICE_REQUIRED };
const char *sb_tool_choice_name(int choice);            /* "none", "auto", "required" */

/* The grammar's spec, as JSON text appended to out (the key a compiled
 * grammar is cached under): tools is OpenAI's `tools` array, name the one
 * function tool_choice names (NULL: any). SB_EINVAL naming the tool or the
 * choice that is wrong, SB_ENOMEM. The parameters' schemas are checked when
 * the spec is compiled. */
int sb_chat_tools_spec(int format, const char *tools, size_t len, int choice, const char *name, int parallel,
                       sb_jw *out, char *err);
/* Compile a spec from sb_chat_tools_spec. SB_EINVAL with the schema
 * compiler's message for a `parameters` outside the subset. */
int sb_chat_tools_grammar(const char *spec, size_t len, sb_grammar **out, char *err);

/* The calls of an answer in format: *calls (sb_malloc'ed, names and
 * arguments NUL-terminated, arguments the JSON text as the model wrote
 * it), or none (*n_calls 0) when the answer is not calls and only calls,
 * e.g. text, or a call cut short. 0 or SB_ENOMEM. */
int  sb_chat_parse_calls(int format, const char *text, size_t len, sb_chat_call **calls, size_t *n_calls);
void sb_chat_calls_free(sb_chat_call *calls, size_t n);

#endif
