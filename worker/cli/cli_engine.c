/* cli_engine.c - `switchboard logits` and `generate` (bench: cli_bench.c).
 *
 * logits prints the schema of the llama.cpp references (golden JSON) so a test can
 * compare our forward pass with llama.cpp's directly.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/kernels/sb_kq.h"
#include "worker/cli/sb_bwprobe.h"
#include "worker/engine/sb_model.h"
#include "worker/tokenizer/sb_vocab.h"
#include "worker/engine/sb_engine.h"
#include "worker/engine/sb_grammar.h"
#include "common/sb_json.h"       /* sb_jw for --prompts output */
#include "worker/engine/sb_spec.h"

/* ---- shared option parsing ------------------------------------------------ */

static int parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, int *out) {
    int64_t v;
    if (sb_opt_int(cmd, opt, s, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 64, k = 0;
    int32_t *v = sb_malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "logits: --ids: bad token id at '%s'\n", p);
            sb_free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = sb_realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) { sb_free(v); return -1; }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    *ids = v;
    *n = k;
    return 0;
}

/* Indices of the top-k logits, best first; ties go to the lower id, as in
 * llama.cpp's greedy sampler. k is small (≤ 64), so insertion is fine. */
static int top_k(const float *x, int n, int k, int *idx) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && x[i] <= x[idx[m - 1]]) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && x[idx[j - 1]] < x[i]) { idx[j] = idx[j - 1]; j--; }
        idx[j] = i;
    }
    return m;
}

static double log_sum_exp(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

/* ---- logits ---------------------------------------------------------------- */

static void logits_usage(FILE *f) {
    fprintf(f,
            "usage: switchboard logits -m MODEL.gguf (--ids CSV | -p TEXT) [-n N] [--top K] [-t T] [-c CTX] [--kv-f32]\n"
            "                          [--exact]\n\n"
            "Evaluate the tokens in one batched forward pass and print, as JSON, the\n"
            "log-sum-exp and top-K logits after every position, then N greedy tokens\n"
            "decoded one at a time (the schema of llama.cpp references in\n"
            "shared/fixtures/golden).\n\n"
            "  -m FILE     model (GGUF)\n"
            "  --ids CSV   token ids, comma-separated\n"
            "  -p TEXT     text; BOS added when the model asks for it, special tokens parsed\n"
            "  -n N        greedy tokens after the prompt (default 24)\n"
            "  --top K     logits per position (default 10)\n"
            "  -t T        threads (default 2)\n"
            "  -c CTX      context size (default: prompt + N)\n"
            "  --kv-f32    F32 KV cache instead of F16\n"
            "  --exact     every number with all its digits (floats round-trip), and each\n"
            "              greedy step's top logits: two runs print the same bytes only if\n"
            "              they computed the same bits\n");
}

/* One position's log-sum-exp and its k largest logits, as a JSON object;
 * exact: all digits (%.17g / %.9g round-trip a double / a float). */
static void print_position(const float *row, size_t nv, int k, int exact) {
    int idx[64];
    const int got = top_k(row, (int)nv, k, idx);
    printf(exact ? "{\"lse\":%.17g,\"top\":[" : "{\"lse\":%.6f,\"top\":[", log_sum_exp(row, (int)nv));
    for (int j = 0; j < got; j++) printf(exact ? "%s[%d,%.9g]" : "%s[%d,%.6f]", j ? "," : "", idx[j], (double)row[idx[j]]);
    printf("]}");
}

static void print_positions(const float *logits, int n, size_t nv, int k, int exact) {
    for (int i = 0; i < n; i++) {
        print_position(logits + (size_t)i * nv, nv, k, exact);
        printf("%s\n", i + 1 < n ? "," : "");
    }
}

/* Greedy continuation: the last row's argmax, fed back one at a time (its
 * logits land in buf), then each step's top-2 gap. -1 on failure. */
static int print_greedy(sb_ctx *c, const float *row, float *buf, size_t nv, int n_greedy, int k, int exact) {
    char err[SB_ERR_LEN];
    int idx[2];
    float *gaps = sb_malloc(((size_t)n_greedy + 1) * sizeof(float));
    if (!gaps) { fprintf(stderr, "logits: out of memory\n"); return -1; }
    for (int g = 0; g < n_greedy; g++) {
        int got = top_k(row, (int)nv, 2, idx);
        int32_t tok = idx[0];
        gaps[g] = got > 1 ? row[idx[0]] - row[idx[1]] : INFINITY;
        printf("%s%d", g ? "," : "", tok);
        if (g + 1 == n_greedy) break;
        if (sb_ctx_eval(c, &tok, 1, buf, 0, err)) {
            fprintf(stderr, "\nlogits: %s\n", err);
            sb_free(gaps);
            return -1;
        }
        row = buf;
    }
    printf("],\n\"greedy_gap\":[");
    for (int g = 0; g < n_greedy; g++) printf(exact ? "%s%.9g" : "%s%.4f", g ? "," : "", (double)gaps[g]);
    if (exact && n_greedy > 1) {          /* the last decode step's logits (the one-token kernels) */
        printf("],\n\"last_step\":");
        print_position(row, nv, k, 1);
        printf("}\n");
    } else {
        printf("]}\n");
    }
    sb_free(gaps);
    return 0;
}

int sb_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *prompt = NULL;
    int n_greedy = 24, k = 10, threads = 2, n_ctx = 0, kv_f32 = 0, exact = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { logits_usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { model = v; i++; }
        else if (!strcmp(a, "--ids") && v) { ids_s = v; i++; }
        else if (!strcmp(a, "-p") && v) { prompt = v; i++; }
        else if (!strcmp(a, "-n")) { if (parse_int("logits", a, v, 0, 1 << 20, &n_greedy)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "--top")) { if (parse_int("logits", a, v, 1, 64, &k)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "-t")) { if (parse_int("logits", a, v, 1, 256, &threads)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "-c")) { if (parse_int("logits", a, v, 1, 1 << 20, &n_ctx)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "--kv-f32")) kv_f32 = 1;
        else if (!strcmp(a, "--exact")) exact = 1;
        else { fprintf(stderr, "logits: unknown or incomplete option '%s'\n", a); logits_usage(stderr); return SB_EXIT_CONFIG; }
    }
    if (!model || (!ids_s == !prompt)) { logits_usage(stderr); return SB_EXIT_CONFIG; }

    char err[SB_ERR_LEN];
    sb_model *m = NULL;
    sb_vocab *voc = NULL;
    sb_ctx *c = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int n = 0, rc = SB_EXIT_FAIL;
    if (sb_model_load(model, &m, err)) { fprintf(stderr, "logits: %s\n", err); return SB_EXIT_FAIL; }
    const sb_hparams *hp = sb_model_hparams(m);
    if (ids_s) {
        if (parse_ids(ids_s, &ids, &n) || n == 0) { fprintf(stderr, "logits: --ids: no token ids\n"); rc = SB_EXIT_CONFIG; goto out; }
    } else {
        size_t nn;
        if (sb_vocab_load(sb_model_gguf(m), &voc, err) ||
            sb_tokenize(voc, prompt, strlen(prompt), 1, 1, &ids, &nn, err)) {
            fprintf(stderr, "logits: %s\n", err);
            goto out;
        }
        n = (int)nn;
        if (n == 0) { fprintf(stderr, "logits: the prompt tokenizes to nothing\n"); goto out; }
    }
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads;
    cp.n_ctx = n_ctx > 0 ? n_ctx : n + n_greedy + 1;
    cp.kv_f32 = kv_f32;
    cp.n_batch = n;
    if (sb_ctx_new(m, &cp, &c, err)) { fprintf(stderr, "logits: %s\n", err); goto out; }
    const size_t nv = (size_t)hp->n_vocab;
    logits = sb_malloc((size_t)n * nv * sizeof(float));
    if (!logits) { fprintf(stderr, "logits: out of memory\n"); goto out; }
    if (sb_ctx_eval(c, ids, n, logits, 1, err)) { fprintf(stderr, "logits: %s\n", err); goto out; }

    const char *base = strrchr(model, '/');
    printf("{\"model\":\"%s\",\"n_vocab\":%d,\"tokens\":[", base ? base + 1 : model, hp->n_vocab);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("],\n\"positions\":[\n");
    print_positions(logits, n, nv, k, exact);
    printf("],\n\"greedy\":[");
    if (print_greedy(c, logits + (size_t)(n - 1) * nv, logits, nv, n_greedy, k, exact)) goto out;
    rc = SB_EXIT_OK;
out:
    sb_free(logits);
    sb_free(ids);
    sb_ctx_free(c);
    sb_vocab_free(voc);
    sb_model_free(m);
    return rc;
}


/* ---- generate -------------------------------------------------------------- */

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: switchboard generate -m MODEL.gguf -p TEXT [options]\n\n"
            "Stream a completion of TEXT to stdout (timings on stderr).\n\n"
            "  -m FILE              model (GGUF)\n"
            "  -p TEXT              prompt (special tokens parsed; BOS as the model asks)\n"
            "  --chat               wrap TEXT as a user message in the model's chat template\n"
            "                       (then only the template's markers are special tokens: TEXT\n"
            "                       and --system are tokenized as text, as a worker does)\n"
            "  --system TEXT        system message (with --chat)\n"
            "  -n N                 max tokens to generate (default 256)\n"
            "  --temp T             temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K            (default 40; 0 = off)\n"
            "  --top-p P            (default 0.95; 1 = off)\n"
            "  --min-p P            (default 0.05; 0 = off)\n"
            "  --repeat-penalty R   (default 1.0 = off)\n"
            "  --repeat-last-n N    penalty window (default 64)\n"
            "  --seed S             sampling seed (default: random)\n"
            "  --stop S             stop string (repeatable)\n"
            "  --json-schema S      constrain the output to JSON valid against schema S (inline\n"
            "                       JSON, or a file); see docs/GRAMMAR.md\n"
            "  --prompts FILE       one prompt per line instead of -p; prints one JSON line per\n"
            "                       prompt: {\"text\", \"n_gen\", \"t_gen\", \"t_mask\", \"finish\"}\n"
            "  -t T                 threads (default 2)\n"
            "  -c CTX               context size (default min(trained, 4096))\n"
            "  --kv-f32             F32 KV cache\n"
            "  --verbose-prompt     print the prompt's tokens to stderr\n"
            "  --lookup N           speculative: draft up to N tokens by prompt lookup\n"
            "  --draft FILE         speculative: draft with this model (same vocabulary)\n"
            "  --n-draft N          tokens per draft-model step (default 4)\n"
            "  --spec-exact         verify drafts through the one-token kernels (greedy\n"
            "                       output bit-identical to plain decoding; slower)\n");
}

static int print_piece(void *ud, const char *text, size_t len, int32_t token) {
    (void)ud; (void)token;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

static int collect_piece(void *ud, const char *text, size_t len, int32_t token) {
    (void)token;
    sb_jw_raw(ud, text, len);
    return 0;
}

static int parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, float *out) {
    double v;
    if (sb_opt_num(cmd, opt, s, lo, hi, &v)) return -1;
    *out = (float)v;
    return 0;
}

/* Tokenize one prompt (wrapped in the chat template when chat) and
 * generate; with json_lines the text is collected and printed as a JSON
 * line with the timings (--prompts), else streamed. */
static int gen_one(sb_engine *e, const char *prompt, int chat, const char *system, int verbose, sb_gen_opts *go,
                   int json_lines, char *err) {
    sb_prompt chat_prompt = { 0 };
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc;
    if (chat) {
        /* The messages' text stays text, as in a worker's `generate`
         * (docs/ipc.md): only the template's markers are control tokens. */
        sb_chat_msg msgs[2];
        size_t nm = 0;
        if (system) msgs[nm++] = (sb_chat_msg){ .role = "system", .content = system };
        msgs[nm++] = (sb_chat_msg){ .role = "user", .content = prompt };
        if ((rc = sb_engine_chat_prompt(e, msgs, nm, &chat_prompt, err)) ||
            (rc = sb_engine_tokenize_prompt(e, &chat_prompt, &ids, &n_ids, err)))
            goto out;
    } else if ((rc = sb_engine_tokenize(e, prompt, strlen(prompt), 1, &ids, &n_ids, err))) {
        goto out;
    }
    if (verbose) {
        fprintf(stderr, "prompt: %zu tokens:", n_ids);
        for (size_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
        fputc('\n', stderr);
    }
    sb_gen_result res;
    sb_jw text;
    sb_jw_init(&text);
    go->on_piece = json_lines ? collect_piece : print_piece;
    go->ud = &text;
    rc = sb_engine_generate(e, ids, (int)n_ids, go, &res, err);
    if (rc == 0 && json_lines) {
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_obj(&w);
        sb_jw_key(&w, "text");
        sb_jw_strn(&w, text.p ? text.p : "", text.len);
        sb_jw_key(&w, "n_gen");
        sb_jw_int(&w, res.n_gen);
        sb_jw_key(&w, "t_gen");
        sb_jw_num(&w, res.t_gen);
        sb_jw_key(&w, "t_mask");
        sb_jw_num(&w, res.t_mask);
        sb_jw_key(&w, "masks_computed");
        sb_jw_int(&w, (int64_t)res.masks_computed);
        sb_jw_key(&w, "finish");
        sb_jw_str(&w, res.finish);
        sb_jw_obj_end(&w);
        if (!w.oom) printf("%s\n", w.p);
        fflush(stdout);
        sb_jw_free(&w);
    } else if (rc == 0) {
        printf("\n");
        fprintf(stderr, "generate: prompt %d tokens in %.2f s (%.1f t/s), %d generated in %.2f s (%.1f t/s), "
                "finish: %s\n", res.n_prompt, res.t_prompt, res.t_prompt > 0 ? res.n_prompt / res.t_prompt : 0.0,
                res.n_gen, res.t_gen, res.t_gen > 0 ? res.n_gen / res.t_gen : 0.0, res.finish);
        if (go->json_schema)
            fprintf(stderr, "generate: grammar masks %.3f s (%llu computed, %llu cached)\n", res.t_mask,
                    (unsigned long long)res.masks_computed, (unsigned long long)res.masks_reused);
        if (res.n_drafted) fprintf(stderr, "generate: drafted %d, accepted %d\n", res.n_drafted, res.n_accepted);
    }
    sb_jw_free(&text);
out:
    sb_prompt_free(&chat_prompt);
    sb_free(ids);
    return rc;
}

/* Open the draft model for --draft into go->draft (same context size and
 * threads as the target) after checking its vocabulary. 0 or -1 (logged). */
static int open_draft(const char *cmd, const sb_engine *e, const char *path, const sb_ctx_params *cp, sb_gen_opts *go) {
    char err[SB_ERR_LEN];
    if (sb_engine_open(path, cp, &go->draft, err) || sb_engine_check_draft(e, go->draft, err)) {
        fprintf(stderr, "%s: --draft %s: %s\n", cmd, path, err);
        return -1;
    }
    if (go->n_draft <= 0) go->n_draft = 4;
    return 0;
}

/* generate's command line. */
typedef struct {
    const char *model, *prompt, *system, *schema, *prompts, *draft;
    int chat, threads, n_ctx, kv_f32, verbose;
    const char *stops[16];
    size_t n_stops;
} gen_args;

/* argv into ga and go. -1: go on; else the exit code. */
static int parse_generate_args(int argc, char **argv, gen_args *ga, sb_gen_opts *go) {
    sb_sampling_params *sp = &go->sampling;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { generate_usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { ga->model = v; i++; }
        else if (!strcmp(a, "-p") && v) { ga->prompt = v; i++; }
        else if (!strcmp(a, "--system") && v) { ga->system = v; i++; }
        else if (!strcmp(a, "--json-schema") && v) { ga->schema = v; i++; }
        else if (!strcmp(a, "--prompts") && v) { ga->prompts = v; i++; }
        else if (!strcmp(a, "--chat")) ga->chat = 1;
        else if (!strcmp(a, "--kv-f32")) ga->kv_f32 = 1;
        else if (!strcmp(a, "--verbose-prompt")) ga->verbose = 1;
        else if (!strcmp(a, "--draft") && v) { ga->draft = v; i++; }
        else if (!strcmp(a, "--spec-exact")) go->spec_exact = 1;
        else if (!strcmp(a, "--lookup")) { bad = parse_int("generate", a, v, 0, SB_SPEC_MAX_DRAFT, &go->lookup); i++; }
        else if (!strcmp(a, "--n-draft")) { bad = parse_int("generate", a, v, 1, SB_SPEC_MAX_DRAFT, &go->n_draft); i++; }
        else if (!strcmp(a, "--stop") && v) {
            if (ga->n_stops == SB_ARRAY_LEN(ga->stops)) { fprintf(stderr, "generate: at most 16 --stop strings\n"); return SB_EXIT_CONFIG; }
            ga->stops[ga->n_stops++] = v; i++;
        }
        else if (!strcmp(a, "-n")) { bad = parse_int("generate", a, v, 0, 1 << 20, &go->max_tokens); i++; }
        else if (!strcmp(a, "-t")) { bad = parse_int("generate", a, v, 1, 256, &ga->threads); i++; }
        else if (!strcmp(a, "-c")) { bad = parse_int("generate", a, v, 16, 1 << 20, &ga->n_ctx); i++; }
        else if (!strcmp(a, "--temp")) { bad = parse_float("generate", a, v, 0, 100, &sp->temp); i++; }
        else if (!strcmp(a, "--top-k")) { bad = parse_int("generate", a, v, 0, 1 << 20, &sp->top_k); i++; }
        else if (!strcmp(a, "--top-p")) { bad = parse_float("generate", a, v, 0, 1, &sp->top_p); i++; }
        else if (!strcmp(a, "--min-p")) { bad = parse_float("generate", a, v, 0, 1, &sp->min_p); i++; }
        else if (!strcmp(a, "--repeat-penalty")) { bad = parse_float("generate", a, v, 0.01, 100, &sp->repeat_penalty); i++; }
        else if (!strcmp(a, "--repeat-last-n")) { bad = parse_int("generate", a, v, 0, 1 << 20, &sp->repeat_last_n); i++; }
        else if (!strcmp(a, "--seed") && v) {
            char *end;
            sp->seed = strtoull(v, &end, 10);
            bad = *end != 0;
            if (bad) fprintf(stderr, "generate: --seed expects an unsigned integer, got '%s'\n", v);
            i++;
        }
        else { fprintf(stderr, "generate: unknown or incomplete option '%s'\n", a); generate_usage(stderr); return SB_EXIT_CONFIG; }
        if (bad) return SB_EXIT_CONFIG;
    }
    if (!ga->model || !ga->prompt == !ga->prompts) { generate_usage(stderr); return SB_EXIT_CONFIG; }
    return -1;
}

int sb_cmd_generate(int argc, char **argv) {
    gen_args ga = { .threads = 2 };
    sb_gen_opts go;
    sb_gen_opts_default(&go);
    int rc = parse_generate_args(argc, argv, &ga, &go);
    if (rc >= 0) return rc;
    char err[SB_ERR_LEN];
    char *schema_text = NULL, *lines = NULL;
    size_t schema_len = 0, lines_len = 0;
    sb_grammar *check = NULL;
    if (ga.schema && (sb_json_schema_load(ga.schema, &schema_text, &schema_len, err) ||
                      sb_json_schema_compile(schema_text, schema_len, &check, err))) {
        fprintf(stderr, "generate: --json-schema: %s\n", err);
        sb_free(schema_text);
        return SB_EXIT_CONFIG;
    }
    sb_grammar_free(check);     /* compiled again (and cached) by the engine */
    if (ga.prompts && sb_read_file(ga.prompts, 64u << 20, &lines, &lines_len, err)) {
        fprintf(stderr, "generate: --prompts: %s\n", err);
        sb_free(schema_text);
        return SB_EXIT_CONFIG;
    }
    go.json_schema = schema_text;
    go.json_schema_len = schema_len;
    go.stops = ga.stops;
    go.n_stops = ga.n_stops;
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = ga.threads;
    cp.n_ctx = ga.n_ctx;
    cp.kv_f32 = ga.kv_f32;
    sb_engine *e;
    rc = SB_EXIT_FAIL;
    if (sb_engine_open(ga.model, &cp, &e, err)) { fprintf(stderr, "generate: %s\n", err); goto done; }
    if (ga.draft && open_draft("generate", e, ga.draft, &cp, &go) != 0) goto out;
    if (!ga.prompts) {
        if (gen_one(e, ga.prompt, ga.chat, ga.system, ga.verbose, &go, 0, err) == 0) rc = SB_EXIT_OK;
        else fprintf(stderr, "\ngenerate: %s\n", err);
    } else {
        rc = SB_EXIT_OK;
        for (char *line = lines, *nl; rc == SB_EXIT_OK && line && *line; line = nl ? nl + 1 : NULL) {
            if ((nl = strchr(line, '\n'))) *nl = 0;
            if (*line && gen_one(e, line, ga.chat, ga.system, ga.verbose, &go, 1, err)) {
                fprintf(stderr, "generate: %s\n", err);
                rc = SB_EXIT_FAIL;
            }
        }
    }
out:
    sb_engine_free(go.draft);
    sb_engine_free(e);
done:
    sb_free(schema_text);
    sb_free(lines);
    return rc;
}
