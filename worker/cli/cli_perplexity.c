/* cli_perplexity.c - `switchboard perplexity`: llama-perplexity's method.
 *
 * The text is tokenized once (with BOS when the model wants it) and cut into
 * chunks of CTX tokens. Each chunk is evaluated from an empty cache, with its
 * first token replaced by BOS, and only the second half of its positions is
 * scored: those have at least CTX/2 tokens of context, so the figure does not
 * depend on how the chunk boundaries fall. This is what llama.cpp prints as
 * its final estimate, so the two can be compared on the same file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/engine/sb_model.h"
#include "worker/engine/sb_sampler.h"
#include "worker/tokenizer/sb_vocab.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard perplexity -m MODEL.gguf -f TEXT.txt [-c 512] [--chunks N] [-t T] [--json]\n\n"
            "Perplexity of a text, computed as llama-perplexity does: chunks of CTX\n"
            "tokens, each starting from BOS, the second half of each chunk scored.\n\n"
            "  -c CTX       chunk size in tokens (default 512)\n"
            "  --chunks N   score at most N chunks (default: all)\n"
            "  -t T         threads (default 2)\n"
            "  --json       print {\"ppl\":…, \"chunks\":…, \"tokens\":…} instead of text\n");
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = sb_malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = sb_realloc(buf, cap *= 2);
        if (!nb) { sb_free(buf); buf = NULL; }
        else buf = nb;
    }
    fclose(f);
    if (buf) *len = n;
    return buf;
}

/* One chunk of n_ctx tokens from an empty context (its first token replaced
 * by bos when bos >= 0): the negative log-likelihood of each token of its
 * second half, given all before it, added to *nll and counted in *count, as
 * llama.cpp's perplexity does. -1 on failure (logged). */
static int score_chunk(sb_ctx *c, const int32_t *toks, int n_ctx, int32_t bos, int32_t *chunk, float *logits,
                       int n_vocab, double *nll, long *count) {
    char err[SB_ERR_LEN];
    memcpy(chunk, toks, (size_t)n_ctx * sizeof *chunk);
    if (bos >= 0) chunk[0] = bos;
    sb_ctx_truncate(c, 0);
    if (sb_ctx_eval(c, chunk, n_ctx, logits, 1, err)) {
        fprintf(stderr, "perplexity: %s\n", err);
        return -1;
    }
    for (int j = n_ctx / 2; j < n_ctx - 1; j++) {
        const float *row = logits + (size_t)j * (size_t)n_vocab;
        *nll += sb_logsumexp(row, n_vocab) - (double)row[toks[j + 1]];
        (*count)++;
    }
    return 0;
}

/* perplexity's command line. */
typedef struct {
    const char *model, *file;
    long n_ctx, max_chunks, threads;
    int json;
} ppl_args;

/* argv into o. -1: go on; else the exit code. */
static int parse_args(int argc, char **argv, ppl_args *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *target = NULL, lo = 1, hi = 1 << 20;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "-m") && v) { o->model = v; i++; continue; }
        else if (!strcmp(a, "-f") && v) { o->file = v; i++; continue; }
        else if (!strcmp(a, "--json")) { o->json = 1; continue; }
        else if (!strcmp(a, "-c")) { target = &o->n_ctx; lo = 8; }
        else if (!strcmp(a, "--chunks")) target = &o->max_chunks;
        else if (!strcmp(a, "-t")) { target = &o->threads; hi = 256; }
        if (!target) { fprintf(stderr, "perplexity: unknown or incomplete option '%s'\n", a); usage(stderr); return SB_EXIT_CONFIG; }
        char *end;
        errno = 0;
        *target = v ? strtol(v, &end, 10) : 0;
        if (!v || errno || *end || *target < lo || *target > hi) {
            fprintf(stderr, "perplexity: %s expects an integer in [%ld, %ld]\n", a, lo, hi);
            return SB_EXIT_CONFIG;
        }
        i++;
    }
    if (!o->model || !o->file) { usage(stderr); return SB_EXIT_CONFIG; }
    return -1;
}

int sb_cmd_perplexity(int argc, char **argv) {
    ppl_args o = { .n_ctx = 512, .max_chunks = -1, .threads = 2 };
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    const char *model = o.model, *file = o.file;
    const long n_ctx = o.n_ctx, max_chunks = o.max_chunks;
    const int json = o.json;
    size_t text_len;
    char *text = read_file(file, &text_len);
    if (!text) { fprintf(stderr, "perplexity: cannot read %s: %s\n", file, strerror(errno)); return SB_EXIT_FAIL; }
    char err[SB_ERR_LEN];
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = (int)o.threads;
    cp.n_ctx = (int)n_ctx;
    cp.n_batch = (int)n_ctx;
    sb_model *m = NULL;
    sb_vocab *voc = NULL;
    sb_ctx *c = NULL;
    int32_t *toks = NULL, *chunk = NULL;
    float *logits = NULL;
    size_t n_tok = 0;
    rc = SB_EXIT_FAIL;
    if (sb_model_load(model, &m, err) || sb_vocab_load(sb_model_gguf(m), &voc, err) ||
        sb_tokenize(voc, text, text_len, 1, 0, &toks, &n_tok, err) || sb_ctx_new(m, &cp, &c, err)) {
        fprintf(stderr, "perplexity: %s\n", err);
        goto out;
    }
    const int n_vocab = sb_model_hparams(m)->n_vocab;
    const int add_bos = sb_vocab_add_bos(voc) && sb_vocab_bos(voc) >= 0;
    long n_chunks = (long)(n_tok / (size_t)n_ctx);
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "perplexity: %s has %zu tokens, fewer than one chunk of %ld\n", file, n_tok, n_ctx);
        goto out;
    }
    logits = sb_malloc((size_t)n_ctx * (size_t)n_vocab * sizeof(float));
    chunk = sb_malloc((size_t)n_ctx * sizeof *chunk);
    if (!logits || !chunk) { fprintf(stderr, "perplexity: out of memory\n"); goto out; }
    if (!json) fprintf(stderr, "perplexity: %zu tokens, %ld chunks of %ld\n", n_tok, n_chunks, n_ctx);
    double nll = 0;
    long count = 0;
    double t0 = sb_now_s();
    for (long k = 0; k < n_chunks; k++) {
        if (score_chunk(c, toks + (size_t)k * (size_t)n_ctx, (int)n_ctx, add_bos ? sb_vocab_bos(voc) : -1, chunk,
                        logits, n_vocab, &nll, &count))
            goto out;
        if (!json) fprintf(stderr, "[%ld]%.4f ", k + 1, exp(nll / (double)count));
    }
    double ppl = exp(nll / (double)count);
    if (json)
        printf("{\"ppl\":%.6f,\"chunks\":%ld,\"ctx\":%ld,\"tokens\":%zu,\"scored\":%ld,\"seconds\":%.2f}\n", ppl, n_chunks,
               n_ctx, n_tok, count, sb_now_s() - t0);
    else
        printf("\nFinal estimate: PPL = %.4f (%ld chunks of %ld, %.1f s)\n", ppl, n_chunks, n_ctx, sb_now_s() - t0);
    rc = SB_EXIT_OK;
out:
    sb_free(logits);
    sb_free(chunk);
    sb_free(toks);
    sb_free(text);
    sb_ctx_free(c);
    sb_vocab_free(voc);
    sb_model_free(m);
    return rc;
}
