/* cli_chat.c - `switchboard chat-prompt`: the prompt a chat request becomes
 * in a model's template, tools included, printed as is. What a worker's
 * `generate` with `messages` (and `tools`) feeds the tokenizer; the check
 * that our renderers write what the template's Jinja does
 * (tests/it_chat_tools.sh) compares this output with jinja2's. */
#include <stdio.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_json.h"
#include "worker/engine/sb_chat.h"
#include "worker/gguf/sb_gguf.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard chat-prompt (-m MODEL.gguf | --template FILE) [-f REQUEST.json] [options]\n"
        "\n"
        "Print the prompt an OpenAI chat request ({\"messages\": [...], \"tools\": [...]})\n"
        "becomes in the model's chat template, byte for byte, as a worker renders it\n"
        "(docs/ipc.md). Messages may carry tool_calls ({function: {name, arguments}})\n"
        "and tool_call_id; tools are rendered as the template's family does\n"
        "(hermes, llama31 or the generic text; sb_chat.h).\n"
        "\n"
        "  -m, --model FILE        take tokenizer.chat_template from this GGUF\n"
        "      --template FILE     take the Jinja template from FILE instead\n"
        "  -f, --file FILE         the request (default: stdin)\n"
        "      --no-generation-prompt  leave out the assistant's opening\n"
        "      --family            print the template's format and tools family only\n"
        "  -h, --help              this help\n"
        "\n"
        "Exit codes: 0 printed, 1 unreadable file, 2 bad arguments or request.\n");
}

typedef struct {
    sb_chat_msg *msgs;
    sb_chat_call *calls;
    size_t n;
} conv;

/* A message's content: a string, null, or text parts joined. */
static int msg_content(const sb_json *c, sb_jw *keep, const char **out) {
    *out = NULL;
    if (!c || sb_json_type_of(c) == SB_JSON_NULL) return 0;
    if (sb_json_type_of(c) == SB_JSON_STRING) { *out = sb_json_str(c); return 0; }
    if (sb_json_type_of(c) != SB_JSON_ARRAY) return -1;
    for (size_t i = 0; i < sb_json_len(c); i++) {
        const sb_json *t = sb_json_get(sb_json_at(c, i), "text");
        if (sb_json_type_of(t) != SB_JSON_STRING) return -1;
        sb_jw_raw(keep, sb_json_str(t), sb_json_len(t));
    }
    *out = keep->p ? keep->p : "";
    return 0;
}

static int read_conv(const sb_json *msgs, conv *c, sb_jw *keep, char *err) {
    size_t n = sb_json_len(msgs), n_calls = 0;
    for (size_t i = 0; i < n; i++) n_calls += sb_json_len(sb_json_get(sb_json_at(msgs, i), "tool_calls"));
    c->msgs = sb_calloc(n ? n : 1, sizeof *c->msgs);
    c->calls = sb_calloc(n_calls ? n_calls : 1, sizeof *c->calls);
    if (!c->msgs || !c->calls) return sb_seterr(err, SB_ENOMEM, "out of memory");
    for (size_t i = 0, k = 0; i < n; i++, c->n++) {
        const sb_json *m = sb_json_at(msgs, i), *tc = sb_json_get(m, "tool_calls");
        sb_chat_msg *cm = &c->msgs[i];
        cm->role = sb_json_str(sb_json_get(m, "role"));
        cm->tool_call_id = sb_json_str(sb_json_get(m, "tool_call_id"));
        if (!cm->role || msg_content(sb_json_get(m, "content"), &keep[i], &cm->content))
            return sb_seterr(err, SB_EINVAL, "messages[%zu]: expected {role: string, content: string, null or parts}", i);
        cm->calls = c->calls + k;
        for (size_t j = 0; j < sb_json_len(tc); j++, k++, cm->n_calls++) {
            const sb_json *call = sb_json_at(tc, j), *fn = sb_json_get(call, "function");
            const sb_json *args = sb_json_get(fn, "arguments");
            c->calls[k] = (sb_chat_call){ sb_json_str(sb_json_get(call, "id")), sb_json_str(sb_json_get(fn, "name")),
                                          sb_json_str(args), sb_json_len(args) };
            if (!c->calls[k].name || !c->calls[k].arguments)
                return sb_seterr(err, SB_EINVAL, "messages[%zu].tool_calls[%zu]: expected {function: {name: string, "
                                 "arguments: string}}", i, j);
        }
    }
    return 0;
}

static int render(const sb_chat_tmpl *t, const char *req, size_t req_len, int gen, char *err) {
    sb_json_doc *d;
    char why[SB_ERR_LEN];
    if (sb_json_parse(req, req_len, &d, why)) return sb_seterr(err, SB_EINVAL, "request: %s", why);
    const sb_json *root = sb_json_root(d), *msgs = sb_json_get(root, "messages"), *tools = sb_json_get(root, "tools");
    conv c = { 0 };
    size_t n = sb_json_len(msgs);
    sb_jw *keep = sb_calloc(n ? n : 1, sizeof *keep);
    sb_prompt p = { 0 };
    int rc = 0;
    if (sb_json_type_of(msgs) != SB_JSON_ARRAY) rc = sb_seterr(err, SB_EINVAL, "request: expected 'messages': [...]");
    else if (!keep) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    for (size_t i = 0; keep && i < n; i++) sb_jw_init(&keep[i]);
    if (!rc) rc = read_conv(msgs, &c, keep, err);
    const char *tools_at = NULL;
    size_t tools_len = 0;
    if (!rc && tools && sb_json_type_of(tools) != SB_JSON_NULL) sb_chat_json_member(req, req_len, "tools", &tools_at, &tools_len);
    if (!rc) rc = sb_chat_apply_tools(t, c.msgs, c.n, tools_at, tools_len, gen, &p, err);
    if (!rc && fwrite(p.text, 1, p.len, stdout) != p.len) rc = sb_seterr(err, SB_EIO, "stdout: write failed");
    sb_prompt_free(&p);
    for (size_t i = 0; keep && i < n; i++) sb_jw_free(&keep[i]);
    sb_free(keep);
    sb_free(c.msgs);
    sb_free(c.calls);
    sb_json_doc_free(d);
    return rc;
}

int sb_cmd_chat_prompt(int argc, char **argv) {
    const char *model = NULL, *tmpl_path = NULL, *req_path = NULL;
    int gen = 1, family = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "--no-generation-prompt")) gen = 0;
        else if (!strcmp(a, "--family")) family = 1;
        else if (v && (!strcmp(a, "-m") || !strcmp(a, "--model"))) { model = v; i++; }
        else if (v && !strcmp(a, "--template")) { tmpl_path = v; i++; }
        else if (v && (!strcmp(a, "-f") || !strcmp(a, "--file"))) { req_path = v; i++; }
        else { fprintf(stderr, "chat-prompt: unknown or incomplete option '%s'\n", a); usage(stderr); return SB_EXIT_CONFIG; }
    }
    if (!model == !tmpl_path) {
        fprintf(stderr, "chat-prompt: give exactly one of -m MODEL.gguf and --template FILE\n");
        return SB_EXIT_CONFIG;
    }
    char err[SB_ERR_LEN] = "", *tmpl = NULL, *req = NULL;
    size_t tmpl_len = 0, req_len = 0;
    sb_gguf *g = NULL;
    sb_chat_tmpl t = { 0 };
    int rc = SB_EXIT_OK;
    if (tmpl_path && sb_read_file(tmpl_path, 1 << 20, &tmpl, &tmpl_len, err)) rc = SB_EXIT_FAIL;
    if (model) {
        sb_str s;
        if (sb_gguf_open(model, &g, err)) rc = SB_EXIT_FAIL;
        else if (sb_gguf_get_str(g, "tokenizer.chat_template", &s) == 0) { tmpl = (char *)s.ptr; tmpl_len = s.len; }
    }
    if (!rc && sb_chat_tmpl_init(&t, tmpl, tmpl_len)) rc = SB_EXIT_FAIL;
    if (!rc && family) printf("%s %s\n", sb_chat_name(t.kind), sb_chat_tools_name(t.tools));
    else if (!rc && sb_read_file(req_path ? req_path : "/dev/stdin", 16 << 20, &req, &req_len, err)) rc = SB_EXIT_FAIL;
    else if (!rc && render(&t, req, req_len, gen, err)) rc = SB_EXIT_CONFIG;
    if (rc) fprintf(stderr, "chat-prompt: %s\n", err);
    sb_chat_tmpl_free(&t);
    if (tmpl_path) sb_free(tmpl);
    sb_free(req);
    sb_gguf_close(g);
    return rc;
}
