/* cli_ask.c - `switchboard ask`: one request from the shell, to a worker or
 * router socket (msgpack, docs/ipc.md) or to the HTTP gateway (--url,
 * ask_http.c). Tokens are printed as they stream in, so the command doubles
 * as a quick end-to-end check of a running runtime.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/ask_internal.h"
#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_json.h"
#include "ipc/sb_ipc.h"

#define MAX_STDIN_TEXT (16u << 20)      /* the frame limit: a larger prompt could not be sent */
#define DEFAULT_WAIT_MS 1000            /* ride over a worker restart (100 ms backoff + load) */

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard ask (--socket DIR/NAME.sock | --url URL) [options] TEXT...\n\n"
            "Send TEXT (the words joined by spaces; '-' reads stdin) as one user message\n"
            "and print the answer as it streams in.\n\n"
            "  --socket PATH       a worker's (or the router's) Unix socket\n"
            "  --url URL           the OpenAI-compatible gateway, e.g. http://127.0.0.1:8080\n"
            "  --pipeline P        run pipeline P: the router socket's \"pipeline\" method, or\n"
            "                      with --url the model \"pipeline:P\"\n"
            "  --model M           with --url: the \"model\" field\n"
            "  --system TEXT       a system message first\n"
            "  --raw               send TEXT as a plain prompt, without the chat template\n"
            "  --max-tokens N      generation cap (default: the server's)\n"
            "  --temp T            temperature (0 = greedy; default: the server's)\n"
            "  --seed S            sampling seed\n"
            "  --stream / --no-stream   token by token (default) or all at the end\n"
            "  --json              print the final result as one JSON object instead of text\n"
            "  --timeout-ms N      give up (and cancel) after N ms (default: no limit)\n"
            "  --wait-ms N         socket: retry connecting for N ms (default %d)\n"
            "  --api-key-env VAR   with --url: send $VAR as the bearer token\n"
            "  -v                  timings and finish reason on stderr\n\n"
            "Exit status: 0 on an answer, 1 on an error answer or a broken connection\n"
            "(the message is on stderr), 2 on bad usage.\n",
            DEFAULT_WAIT_MS);
}

/* ------------------------------------------------------------ JSON out */

void sb_ask_json_string(FILE *f, const char *str, size_t n) {
    sb_jw w = { 0 };
    sb_jw_strn(&w, str, n);
    if (w.oom) fputs("null", f);    /* out of memory: still valid JSON */
    else fwrite(w.p, 1, w.len, f);
    sb_jw_free(&w);
}

static void mp_to_json(FILE *f, const sb_mp_obj *o) {
    const char *s;
    size_t len;
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    switch (sb_mp_type_of(o)) {
    case SB_MP_BOOL: sb_mp_as_bool(o, &b); fputs(b ? "true" : "false", f); break;
    case SB_MP_UINT: sb_mp_as_u64(o, &u); fprintf(f, "%llu", (unsigned long long)u); break;
    case SB_MP_INT: sb_mp_as_i64(o, &i); fprintf(f, "%lld", (long long)i); break;
    case SB_MP_FLOAT: sb_mp_as_f64(o, &d); fprintf(f, "%.17g", d); break;
    case SB_MP_STR: sb_mp_as_str(o, &s, &len); sb_ask_json_string(f, s, len); break;
    case SB_MP_ARRAY:
        fputc('[', f);
        for (uint32_t k = 0; k < sb_mp_count(o); k++) {
            if (k) fputs(", ", f);
            mp_to_json(f, sb_mp_array_at(o, k));
        }
        fputc(']', f);
        break;
    case SB_MP_MAP:
        fputc('{', f);
        for (uint32_t k = 0; k < sb_mp_count(o); k++) {
            if (k) fputs(", ", f);
            const sb_mp_obj *key = sb_mp_map_key_at(o, k);
            if (sb_mp_as_str(key, &s, &len)) fputs("\"?\"", f);
            else sb_ask_json_string(f, s, len);
            fputs(": ", f);
            mp_to_json(f, sb_mp_map_val_at(o, k));
        }
        fputc('}', f);
        break;
    default: fputs("null", f); break;      /* nil, bin, ext: nothing a reply carries */
    }
}

/* -------------------------------------------------------- socket path */

typedef struct {
    const sb_ask_req *req;
    int32_t *ids;
    size_t n_ids, cap_ids;
    bool printed_any;
    char last;                  /* last byte printed, for the tty newline */
} ask_stream;

static int on_event(void *arg, const char *event, const sb_mp_obj *data) {
    ask_stream *st = arg;
    if (strcmp(event, "token")) return 0;
    const char *text;
    size_t len;
    int64_t tok;
    if (!sb_mp_get_int(data, "token", SB_MP_REQUIRED, INT32_MIN, INT32_MAX, &tok, NULL)) {
        if (st->n_ids == st->cap_ids) {
            size_t cap = st->cap_ids ? st->cap_ids * 2 : 256;
            int32_t *n = sb_realloc(st->ids, cap * sizeof *n);
            if (!n) return 1;           /* cancel: we cannot keep up honestly */
            st->ids = n;
            st->cap_ids = cap;
        }
        st->ids[st->n_ids++] = (int32_t)tok;
    }
    if (st->req->json || sb_mp_get_str(data, "text", SB_MP_REQUIRED, &text, &len, NULL) || !len) return 0;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    st->printed_any = true;
    st->last = text[len - 1];
    return 0;
}

static void build_params(const sb_ask_req *q, sb_mp_writer *p) {
    uint32_t n = 2 + (q->max_tokens > 0) + (q->temp >= 0) + (q->seed >= 0);
    sb_mp_map(p, n);
    if (q->raw) {
        sb_mp_kv_str(p, "prompt", q->text);
    } else {
        sb_mp_str(p, "messages");
        sb_mp_array(p, q->system ? 2 : 1);
        if (q->system) {
            sb_mp_map(p, 2);
            sb_mp_kv_str(p, "role", "system");
            sb_mp_kv_str(p, "content", q->system);
        }
        sb_mp_map(p, 2);
        sb_mp_kv_str(p, "role", "user");
        sb_mp_kv_str(p, "content", q->text);
    }
    sb_mp_kv_bool(p, "stream", q->stream);
    if (q->max_tokens > 0) sb_mp_kv_i64(p, "max_tokens", q->max_tokens);
    if (q->temp >= 0) sb_mp_kv_f64(p, "temperature", q->temp);
    if (q->seed >= 0) sb_mp_kv_u64(p, "seed", (uint64_t)q->seed);
}

/* The router socket's "pipeline" method: {"name", "input"} -> {"output":
 * str, "json": str (the whole run: intent, probabilities, stages)}. */
static int print_pipeline_result(const sb_ask_req *q, const sb_mp_obj *result) {
    const char *s;
    size_t len;
    if (q->json) {
        if (!sb_mp_get_str(result, "json", SB_MP_REQUIRED, &s, &len, NULL)) fwrite(s, 1, len, stdout);
        else mp_to_json(stdout, result);
        fputc('\n', stdout);
        return SB_EXIT_OK;
    }
    if (sb_mp_get_str(result, "output", SB_MP_REQUIRED, &s, &len, NULL)) {
        fprintf(stderr, "ask: the pipeline result has no 'output' string\n");
        return SB_EXIT_FAIL;
    }
    fwrite(s, 1, len, stdout);
    if (isatty(STDOUT_FILENO) && (!len || s[len - 1] != '\n')) fputc('\n', stdout);
    return SB_EXIT_OK;
}

static int ask_socket(const sb_ask_req *q) {
    char err[SB_ERR_LEN];
    sb_ipc_client *c = NULL;
    sb_mp_writer *p = NULL;
    ask_stream st = { .req = q };
    sb_ipc_result res = { 0 };
    int code = SB_EXIT_FAIL;
    if (sb_ipc_client_connect(q->socket_path, q->wait_ms, &c, err)) {
        fprintf(stderr, "ask: %s\n", err);
        return SB_EXIT_FAIL;
    }
    if (sb_mp_writer_new(&p)) { fprintf(stderr, "ask: out of memory\n"); goto out; }
    if (q->pipeline) {
        sb_mp_map(p, 2);
        sb_mp_kv_str(p, "name", q->pipeline);
        sb_mp_kv_str(p, "input", q->text);
    } else {
        build_params(q, p);
    }
    if (sb_mp_writer_status(p)) { fprintf(stderr, "ask: the request does not fit in a frame\n"); goto out; }
    int rc = sb_ipc_call(c, q->pipeline ? "pipeline" : "generate", p, q->timeout_ms, on_event, &st, &res, err);
    if (st.printed_any && isatty(STDOUT_FILENO) && st.last != '\n') fputc('\n', stdout);
    if (rc) {
        fprintf(stderr, "ask: %s: %s\n", q->socket_path, err);
        goto out;
    }
    if (!res.ok) {
        fprintf(stderr, "ask: %s: %s\n", res.code ? res.code : "error", res.message ? res.message : "");
        if (q->json) {
            printf("{\"ok\": false, \"error\": {\"code\": ");
            sb_ask_json_string(stdout, res.code ? res.code : "", res.code ? strlen(res.code) : 0);
            printf(", \"message\": ");
            sb_ask_json_string(stdout, res.message ? res.message : "", res.message ? strlen(res.message) : 0);
            printf("}}\n");
        }
        goto out;
    }
    const char *text;
    size_t len;
    if (q->pipeline) {
        code = print_pipeline_result(q, res.result);
        goto out;
    }
    if (q->json) {
        printf("{\"ok\": true, \"result\": ");
        mp_to_json(stdout, res.result);
        printf(", \"token_ids\": [");
        for (size_t i = 0; i < st.n_ids; i++) printf("%s%d", i ? ", " : "", (int)st.ids[i]);
        printf("]}\n");
    } else if (!q->stream && !sb_mp_get_str(res.result, "text", SB_MP_REQUIRED, &text, &len, NULL)) {
        fwrite(text, 1, len, stdout);
        if (isatty(STDOUT_FILENO) && (!len || text[len - 1] != '\n')) fputc('\n', stdout);
    }
    if (q->verbose) {
        int64_t pt = 0, ct = 0;
        double pms = 0, gms = 0;
        const char *fin = "?";
        sb_mp_get_int(res.result, "prompt_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &pt, NULL);
        sb_mp_get_int(res.result, "completion_tokens", SB_MP_OPTIONAL, 0, INT64_MAX, &ct, NULL);
        sb_mp_get_num(res.result, "prompt_ms", SB_MP_OPTIONAL, 0, 1e12, &pms, NULL);
        sb_mp_get_num(res.result, "gen_ms", SB_MP_OPTIONAL, 0, 1e12, &gms, NULL);
        sb_mp_get_str(res.result, "finish_reason", SB_MP_OPTIONAL, &fin, NULL, NULL);
        fprintf(stderr, "ask: prompt %lld tokens in %.0f ms, %lld generated in %.0f ms, finish: %s\n",
                (long long)pt, pms, (long long)ct, gms, fin);
    }
    code = SB_EXIT_OK;
out:
    fflush(stdout);
    sb_ipc_result_free(&res);
    sb_mp_writer_free(p);
    sb_ipc_client_close(c);
    sb_free(st.ids);
    return code;
}

/* ------------------------------------------------------------ options */

static int parse_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    return sb_opt_int("ask", opt, v, lo, hi, out);
}

static char *read_stdin(void) {
    char *text, err[SB_ERR_LEN];
    size_t len;
    if (sb_read_stream(stdin, "stdin", MAX_STDIN_TEXT, &text, &len, err)) {
        fprintf(stderr, "ask: %s\n", err);
        return NULL;
    }
    return text;
}

static char *join_words(int argc, char **argv) {
    size_t n = 1;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 1;
    char *t = sb_malloc(n), *p = t;
    if (!t) return NULL;
    for (int i = 0; i < argc; i++) p += sprintf(p, "%s%s", i ? " " : "", argv[i]);
    *p = '\0';
    return t;
}

int sb_cmd_ask(int argc, char **argv) {
    sb_ask_req q = { .stream = true, .temp = -1, .seed = -1, .wait_ms = DEFAULT_WAIT_MS };
    int64_t v;
    int first_word = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        if (!strcmp(a, "--")) { first_word = i + 1; break; }
        if (a[0] != '-' || !strcmp(a, "-")) { first_word = i; break; }
        bool needs = true;
        if (!strcmp(a, "--socket") && val) q.socket_path = val;
        else if (!strcmp(a, "--url") && val) q.url = val;
        else if (!strcmp(a, "--pipeline") && val) q.pipeline = val;
        else if (!strcmp(a, "--model") && val) q.model = val;
        else if (!strcmp(a, "--system") && val) q.system = val;
        else if (!strcmp(a, "--api-key-env") && val) {
            if (!(q.api_key = getenv(val))) { fprintf(stderr, "ask: $%s is not set\n", val); return SB_EXIT_CONFIG; }
        } else if (!strcmp(a, "--max-tokens")) {
            if (parse_int(a, val, 1, 1 << 20, &q.max_tokens)) return SB_EXIT_CONFIG;
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(a, val, 0, INT64_MAX, &q.seed)) return SB_EXIT_CONFIG;
        } else if (!strcmp(a, "--timeout-ms")) {
            if (parse_int(a, val, 0, 86400000, &v)) return SB_EXIT_CONFIG;
            q.timeout_ms = (int)v;
        } else if (!strcmp(a, "--wait-ms")) {
            if (parse_int(a, val, 0, 3600000, &v)) return SB_EXIT_CONFIG;
            q.wait_ms = (int)v;
        } else if (!strcmp(a, "--temp") && val) {
            char *end;
            q.temp = strtod(val, &end);
            if (*end || end == val || !(q.temp >= 0 && q.temp <= 100)) {
                fprintf(stderr, "ask: --temp expects a number in [0, 100]\n");
                return SB_EXIT_CONFIG;
            }
        } else {
            needs = false;
            if (!strcmp(a, "--raw")) q.raw = true;
            else if (!strcmp(a, "--stream")) q.stream = true;
            else if (!strcmp(a, "--no-stream")) q.stream = false;
            else if (!strcmp(a, "--json")) q.json = true;
            else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) q.verbose = true;
            else {
                fprintf(stderr, "ask: unknown or incomplete option '%s'\n", a);
                usage(stderr);
                return SB_EXIT_CONFIG;
            }
        }
        if (needs) i++;
    }
    if (!q.socket_path == !q.url) {
        fprintf(stderr, "ask: give exactly one of --socket and --url\n");
        usage(stderr);
        return SB_EXIT_CONFIG;
    }
    if (first_word >= argc) { fprintf(stderr, "ask: no TEXT\n"); usage(stderr); return SB_EXIT_CONFIG; }
    bool from_stdin = first_word == argc - 1 && !strcmp(argv[first_word], "-");
    q.text = from_stdin ? read_stdin() : join_words(argc - first_word, argv + first_word);
    if (!q.text) { fprintf(stderr, "ask: cannot read TEXT\n"); return SB_EXIT_FAIL; }
    int code = q.url ? sb_ask_http(&q) : ask_socket(&q);
    sb_free(q.text);
    return code;
}
