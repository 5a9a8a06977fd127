/* cli_engine.c - `switchboard logits`, `generate` and `bench`.
 *
 * logits prints the schema of the llama.cpp references (golden JSON) so a test can
 * compare our forward pass with llama.cpp's directly; bench prints prompt and
 * decode throughput like llama-bench's pp/tg tests.
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
            "usage: switchboard logits -m MODEL.gguf (--ids CSV | -p TEXT) [-n N] [--top K] [-t T] [-c CTX] [--kv-f32]\n\n"
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
            "  --kv-f32    F32 KV cache instead of F16\n");
}

/* Each position's log-sum-exp and its k largest logits, as JSON lines. */
static void print_positions(const float *logits, int n, size_t nv, int k) {
    int idx[64];
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * nv;
        int got = top_k(row, (int)nv, k, idx);
        printf("{\"lse\":%.6f,\"top\":[", log_sum_exp(row, (int)nv));
        for (int j = 0; j < got; j++) printf("%s[%d,%.6f]", j ? "," : "", idx[j], row[idx[j]]);
        printf("]}%s\n", i + 1 < n ? "," : "");
    }
}

/* Greedy continuation: the last row's argmax, fed back one at a time (its
 * logits land in buf), then each step's top-2 gap. -1 on failure. */
static int print_greedy(sb_ctx *c, const float *row, float *buf, size_t nv, int n_greedy) {
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
    for (int g = 0; g < n_greedy; g++) printf("%s%.4f", g ? "," : "", gaps[g]);
    printf("]}\n");
    sb_free(gaps);
    return 0;
}

int sb_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *prompt = NULL;
    int n_greedy = 24, k = 10, threads = 2, n_ctx = 0, kv_f32 = 0;
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
    print_positions(logits, n, nv, k);
    printf("],\n\"greedy\":[");
    if (print_greedy(c, logits + (size_t)(n - 1) * nv, logits, nv, n_greedy)) goto out;
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
    char *end;
    errno = 0;
    double v = strtod(s ? s : "", &end);
    if (!s || errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", cmd, opt, lo, hi, s ? s : "");
        return -1;
    }
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
        if (system) msgs[nm++] = (sb_chat_msg){ "system", system, NULL, 0 };
        msgs[nm++] = (sb_chat_msg){ "user", prompt, NULL, 0 };
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

/* ---- bench ------------------------------------------------------------------ */

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: switchboard bench -m MODEL.gguf [-p 512] [-n 128] [-t T] [-r RUNS] [--json]\n\n"
            "Prompt processing (pp: one batch of P tokens) and decode (tg: N tokens one\n"
            "at a time from an empty context) throughput, median of RUNS runs after one\n"
            "warm-up, like llama-bench's pp/tg tests.\n\n"
            "  -p P      prompt tokens (default 512; 0 skips)\n"
            "  -n N      decode tokens (default 128; 0 skips)\n"
            "  -t T      threads (default 2)\n"
            "  -r RUNS   repetitions (default 5)\n"
            "  --kv-f32  F32 KV cache\n"
            "  --membw   probe the memory read bandwidth between windows of 16 decode\n"
            "            tokens (outside the tg timing) and report tg as a fraction of it\n"
            "  --profile time per op kind per token (norms, matmuls, attention, barrier\n"
            "            waits...), summed over layers, for pp and tg; tg then also\n"
            "            takes the greedy argmax of each token's logits (sampling)\n"
            "  --json    one JSON object with pp_tps and tg_tps (medians)\n\n"
            "With --lookup N or --draft FILE: speculative against plain decoding on a\n"
            "real prompt (bench --lookup 1 --help). With --parallel 1,2,4,8: several\n"
            "sequences decoding together (bench --parallel 1 --help).\n");
}

/* µs per token of every op kind in the measured runs, pp and tg side by side;
 * wall: the runs' wall time in seconds. */
static void print_profile(const sb_prof *pp, double pp_tok, double pp_wall, const sb_prof *tg, double tg_tok,
                          double tg_wall) {
    const sb_prof *pr[2] = { tg, pp };
    const double tok[2] = { tg_tok, pp_tok }, wall[2] = { tg_wall, pp_wall };
    double sum[2] = { 0, 0 };
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < SB_OP_COUNT; op++) sum[k] += (double)pr[k]->ns[op];
    printf("\nprofile (µs per token, summed over layers; %% of the profiled time)\n");
    printf("%-24s %12s %7s %12s %7s\n", "op", "tg µs/tok", "tg %", "pp µs/tok", "pp %");
    for (int op = 0; op < SB_OP_COUNT; op++) {
        printf("%-24s", sb_op_name(op));
        for (int k = 0; k < 2; k++) {
            const double us = tok[k] > 0 ? (double)pr[k]->ns[op] / 1e3 / tok[k] : 0;
            printf(" %12.1f %6.1f%%", us, sum[k] > 0 ? 100.0 * (double)pr[k]->ns[op] / sum[k] : 0.0);
        }
        printf("\n");
    }
    printf("%-24s", "profiled / wall");
    for (int k = 0; k < 2; k++)
        printf(" %12.1f %6.1f%%", tok[k] > 0 ? sum[k] / 1e3 / tok[k] : 0,
               wall[k] > 0 ? 100.0 * sum[k] / 1e9 / wall[k] : 0.0);
    printf("\n");
}

#define BW_WINDOW 16     /* decode tokens between two bandwidth probes */

/* Bytes of K and V one decode step at position pos reads (F16 or F32 cache). */
static double kv_bytes_at(const sb_hparams *hp, int pos, int kv_f32) {
    const int start = hp->n_swa > 0 ? SB_MAX(0, pos - hp->n_swa + 1) : 0;
    return 2.0 * hp->n_layer * (pos - start + 1) * (double)hp->n_head_kv * hp->head_dim * (kv_f32 ? 4 : 2);
}

/* Interleaved bandwidth windows of the measured tg runs. */
typedef struct {
    double *bw, *frac;          /* per window: probe GB/s, decode bytes/s over it */
    int n;
    double kv_bytes;            /* KV bytes read over all measured tokens */
    long n_tok;
} bw_windows;

/* median, min, max of v[0..n) (sorts v). */
static void spread(double *v, int n, double out[3]);

static void print_bw(const bw_windows *w, size_t weight_bytes, int json) {
    double b[3], f[3];
    spread(w->bw, w->n, b);
    spread(w->frac, w->n, f);
    const double kv = w->n_tok ? w->kv_bytes / (double)w->n_tok : 0;
    if (json)
        printf(",\"bw_windows\":%d,\"bw_gbs\":%.2f,\"bw_gbs_min\":%.2f,\"bw_gbs_max\":%.2f,"
               "\"kv_bytes_per_token\":%.0f,\"bytes_per_token\":%.0f,\"tg_bw_frac\":%.4f,"
               "\"tg_bw_frac_min\":%.4f,\"tg_bw_frac_max\":%.4f", w->n, b[0], b[1], b[2], kv,
               (double)weight_bytes + kv, f[0], f[1], f[2]);
    else
        printf("membw, interleaved (%d windows of %d tokens): median %.1f GB/s (%.1f-%.1f); bytes per token %.1f MB "
               "(weights %.1f + KV %.2f); tg at %.0f%% of the interleaved limit (median of windows; %.0f-%.0f%%)\n",
               w->n, BW_WINDOW, b[0], b[1], b[2], ((double)weight_bytes + kv) / 1e6, (double)weight_bytes / 1e6,
               kv / 1e6, 100 * f[0], 100 * f[1], 100 * f[2]);
}

/* The greedy choice (what the bench's --profile counts as sampling). */
static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void spread(double *v, int n, double out[3]) {
    out[0] = n ? median(v, n) : 0;
    out[1] = n ? v[0] : 0;
    out[2] = n ? v[n - 1] : 0;
}

/* What --profile and --membw collect over the measured runs. */
typedef struct {
    int profile, kv_f32;
    const sb_model *m;
    sb_prof pp, tg;
    double pp_wall, tg_wall;    /* seconds of the measured runs (tg: without the probes) */
    sb_bwprobe *probe;          /* --membw, or NULL */
    bw_windows bw;
} bench_obs;

static int bench_pp(sb_ctx *c, const int32_t *toks, int pp, float *logits, double *pps, bench_obs *o) {
    char err[SB_ERR_LEN];
    sb_ctx_truncate(c, 0);
    if (o && o->profile) sb_ctx_set_profile(c, &o->pp);
    const double t0 = sb_now_s();
    const int rc = sb_ctx_eval(c, toks, pp, logits, 0, err);
    const double dt = sb_now_s() - t0;
    sb_ctx_set_profile(c, NULL);
    if (rc) { fprintf(stderr, "bench: %s\n", err); return -1; }
    *pps = pp / dt;
    if (o) o->pp_wall += dt;
    return 0;
}

/* After decode step i (position i): the window's bytes, and its fraction of
 * the probe taken before it when the window ends. */
static void bw_step(bench_obs *o, int i, int tg, double *w_bytes, double w_t0, double w_gbs) {
    const double kvb = kv_bytes_at(sb_model_hparams(o->m), i, o->kv_f32);
    *w_bytes += (double)sb_model_weight_bytes(o->m) + kvb;
    o->bw.kv_bytes += kvb;
    o->bw.n_tok++;
    if ((i + 1) % BW_WINDOW == 0 || i + 1 == tg) {
        o->bw.bw[o->bw.n] = w_gbs;
        o->bw.frac[o->bw.n++] = *w_bytes / (sb_now_s() - w_t0) / 1e9 / w_gbs;
    }
}

/* --profile's sampling: the greedy argmax of a token's logits, timed. */
static void time_argmax(bench_obs *o, const float *logits) {
    const uint64_t s0 = sb_now_ns();
    volatile int picked = argmax(logits, sb_model_hparams(o->m)->n_vocab);
    (void)picked;
    o->tg.ns[SB_OP_SAMPLE] += sb_now_ns() - s0;
}

static int bench_tg(sb_ctx *c, const int32_t *toks, int n_tok, int tg, float *logits, double *tgs, bench_obs *o) {
    char err[SB_ERR_LEN];
    sb_ctx_truncate(c, 0);
    sb_bwprobe *probe = o ? o->probe : NULL;
    if (o && o->profile) sb_ctx_set_profile(c, &o->tg);
    int32_t t = toks[0];
    double t0 = sb_now_s(), w_t0 = t0, w_gbs = 0, w_bytes = 0, probe_s = 0;
    for (int i = 0; i < tg; i++) {
        if (probe && i % BW_WINDOW == 0) {      /* a window starts: probe, outside the timing */
            const double p0 = sb_now_s();
            w_gbs = sb_bwprobe_window(probe);
            w_t0 = sb_now_s();
            probe_s += w_t0 - p0;
            w_bytes = 0;
        }
        if (sb_ctx_eval(c, &t, 1, logits, 0, err)) {
            sb_ctx_set_profile(c, NULL);
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
        if (probe) bw_step(o, i, tg, &w_bytes, w_t0, w_gbs);
        if (o && o->profile) time_argmax(o, logits);
        t = toks[(i + 1) % n_tok];
    }
    const double dt = sb_now_s() - t0 - probe_s;
    sb_ctx_set_profile(c, NULL);
    *tgs = tg / dt;
    if (o) o->tg_wall += dt;
    return 0;
}

/* One run: pp prompt tokens in one batch, then tg tokens one at a time,
 * each from an empty context; tokens/s of each (0 when skipped). o: what
 * the measured runs collect (NULL for the warm-up). -1 on failure (logged). */
static int bench_run(sb_ctx *c, const int32_t *toks, int n_tok, int pp, int tg, float *logits, double *pps,
                     double *tgs, bench_obs *o) {
    if (pp > 0 && bench_pp(c, toks, pp, logits, pps, o)) return -1;
    if (tg > 0 && bench_tg(c, toks, n_tok, tg, logits, tgs, o)) return -1;
    return 0;
}

/* With membw, a probe on `threads` threads over a 1 GiB buffer (twice the
 * L3 of the machines measured) and room for n_windows windows. */
static int bench_obs_init(bench_obs *o, const sb_model *m, int kv_f32, int membw, int threads, int n_windows) {
    o->m = m;
    o->kv_f32 = kv_f32;
    if (!membw) return 0;
    o->bw.bw = sb_calloc((size_t)n_windows, sizeof(double));
    o->bw.frac = sb_calloc((size_t)n_windows, sizeof(double));
    if (!o->bw.bw || !o->bw.frac) return SB_ENOMEM;
    return sb_bwprobe_new(threads, 1ul << 30, &o->probe);
}

/* The results line (or JSON object), then what --membw and --profile found. */
static void bench_report(const char *model, const sb_model *m, int threads, int pp, int tg, int runs, double pp_med,
                         double tg_med, int json, const bench_obs *o) {
    if (json) {
        printf("{\"model\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"pp\":%d,\"tg\":%d,\"runs\":%d,"
               "\"pp_tps\":%.3f,\"tg_tps\":%.3f,\"weight_bytes\":%zu",
               model, threads, sb_kq_level_name(sb_kq_best_level()), pp, tg, runs, pp_med, tg_med,
               sb_model_weight_bytes(m));
        if (o->probe) print_bw(&o->bw, sb_model_weight_bytes(m), 1);
        printf("}\n");
        return;
    }
    printf("pp%d: %.2f tokens/s   tg%d: %.2f tokens/s   (median of %d, %d threads)\n", pp, pp_med, tg, tg_med, runs,
           threads);
    if (o->probe) print_bw(&o->bw, sb_model_weight_bytes(m), 0);
    if (o->profile) print_profile(&o->pp, (double)pp * runs, o->pp_wall, &o->tg, (double)tg * runs, o->tg_wall);
}

int sb_cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)      /* speculative decoding measures real text: worker/cli/cli_bench_spec.c */
        if (!strcmp(argv[i], "--lookup") || !strcmp(argv[i], "--draft")) return sb_cmd_bench_spec(argc, argv);
    for (int i = 1; i < argc; i++)      /* several sequences at once: worker/cli/cli_bench_batch.c */
        if (!strcmp(argv[i], "--parallel") || !strcmp(argv[i], "-npl")) return sb_cmd_bench_batch(argc, argv);
    const char *model = NULL;
    int pp = 512, tg = 128, threads = 2, runs = 5, json = 0, kv_f32 = 0, membw = 0;
    bench_obs obs = { 0 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bench_usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { model = v; i++; }
        else if (!strcmp(a, "-p")) { if (parse_int("bench", a, v, 0, 1 << 16, &pp)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "-n")) { if (parse_int("bench", a, v, 0, 1 << 16, &tg)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "-t")) { if (parse_int("bench", a, v, 1, 256, &threads)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "-r")) { if (parse_int("bench", a, v, 1, 1000, &runs)) return SB_EXIT_CONFIG; i++; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--kv-f32")) kv_f32 = 1;
        else if (!strcmp(a, "--profile")) obs.profile = 1;
        else if (!strcmp(a, "--membw")) membw = 1;
        else { fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a); bench_usage(stderr); return SB_EXIT_CONFIG; }
    }
    if (!model) { bench_usage(stderr); return SB_EXIT_CONFIG; }
    char err[SB_ERR_LEN];
    sb_model *m;
    if (sb_model_load(model, &m, err)) { fprintf(stderr, "bench: %s\n", err); return SB_EXIT_FAIL; }
    const sb_hparams *hp = sb_model_hparams(m);
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads;
    cp.n_ctx = SB_MAX(pp, tg) + 1;
    cp.n_batch = pp > 0 ? pp : 1;
    cp.kv_f32 = kv_f32;
    sb_ctx *c;
    if (sb_ctx_new(m, &cp, &c, err)) { fprintf(stderr, "bench: %s\n", err); sb_model_free(m); return SB_EXIT_FAIL; }
    int n_tok = SB_MAX(pp, 1);
    int32_t *toks = sb_malloc((size_t)n_tok * sizeof *toks);
    float *logits = sb_malloc((size_t)hp->n_vocab * sizeof(float));
    double *pp_t = sb_calloc((size_t)runs, sizeof(double)), *tg_t = sb_calloc((size_t)runs, sizeof(double));
    int rc = SB_EXIT_FAIL;
    if (!toks || !logits || !pp_t || !tg_t) { fprintf(stderr, "bench: out of memory\n"); goto out; }
    if (bench_obs_init(&obs, m, kv_f32, membw && tg > 0, threads, runs * ((tg + BW_WINDOW - 1) / BW_WINDOW))) {
        fprintf(stderr, "bench: out of memory for the bandwidth probe\n");
        goto out;
    }
    /* Token ids do not change the cost; a fixed LCG keeps runs comparable. */
    uint32_t s = 12345;
    for (int i = 0; i < n_tok; i++) { s = s * 1664525u + 1013904223u; toks[i] = (int32_t)(s % (uint32_t)hp->n_vocab); }
    char desc[256];
    sb_model_describe(m, desc, sizeof desc);
    if (!json) fprintf(stderr, "bench: %s\nbench: %d threads, kernels %s, pp %d, tg %d, %d runs\n", desc, threads,
                       sb_kq_level_name(sb_kq_best_level()), pp, tg, runs);
    for (int r = -1; r < runs; r++) {       /* r = -1: warm-up (page in the weights) */
        double pps = 0, tgs = 0;
        if (bench_run(c, toks, n_tok, pp, tg, logits, &pps, &tgs, r < 0 ? NULL : &obs)) goto out;
        if (r < 0) continue;
        pp_t[r] = pps;
        tg_t[r] = tgs;
        if (!json) fprintf(stderr, "bench: run %d: pp %.2f t/s, tg %.2f t/s\n", r + 1, pps, tgs);
    }
    double pp_med = pp > 0 ? median(pp_t, runs) : 0, tg_med = tg > 0 ? median(tg_t, runs) : 0;
    bench_report(model, m, threads, pp, tg, runs, pp_med, tg_med, json, &obs);
    rc = SB_EXIT_OK;
out:
    sb_free(toks);
    sb_free(logits);
    sb_free(pp_t);
    sb_free(tg_t);
    sb_free(obs.bw.bw);
    sb_free(obs.bw.frac);
    sb_bwprobe_free(obs.probe);
    sb_ctx_free(c);
    sb_model_free(m);
    return rc;
}
