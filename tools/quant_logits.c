/* quant_logits.c - how far a quantized model's logits are from the F16
 * model's, through our engine: mean |logit - F16 logit| over every position
 * and every vocabulary entry of one batched pass. Not a test: numbers for
 * tools/quant_quality.py (the logits command prints only the top 64).
 *
 *   make BUILD=build && cc -O2 -std=c11 -D_GNU_SOURCE -I. \
 *       -o build/quant_logits tools/quant_logits.c build/libswitchboard.a -lm -pthread
 *   build/quant_logits F16.gguf IDS_CSV Q1.gguf [Q2.gguf ...]   -> one number per Q file
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/sb_model.h"

/* All logits (n x n_vocab) of the model at `path` for tokens[0..n). */
static float *all_logits(const char *path, const int32_t *tokens, int n, int *n_vocab) {
    char err[SB_ERR_LEN];
    sb_model *m;
    sb_ctx *c;
    if (sb_model_load(path, &m, err)) { fprintf(stderr, "quant_logits: %s\n", err); exit(1); }
    sb_ctx_params p;
    sb_ctx_params_default(&p);
    p.n_threads = 2;
    p.n_ctx = n;
    if (sb_ctx_new(m, &p, &c, err)) { fprintf(stderr, "quant_logits: %s\n", err); exit(1); }
    *n_vocab = sb_model_hparams(m)->n_vocab;
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)*n_vocab);
    if (!out || sb_ctx_eval(c, tokens, n, out, 1, err)) { fprintf(stderr, "quant_logits: %s\n", err); exit(1); }
    sb_ctx_free(c);
    sb_model_free(m);
    return out;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: quant_logits F16.gguf IDS_CSV Q.gguf...\n");
        return 2;
    }
    int32_t tokens[4096];
    int n = 0;
    for (char *s = argv[2], *end; *s && n < 4096; s = *end ? end + 1 : end)
        tokens[n++] = (int32_t)strtol(s, &end, 10);
    int nv, nq;
    float *ref = all_logits(argv[1], tokens, n, &nv);
    for (int k = 3; k < argc; k++) {
        float *q = all_logits(argv[k], tokens, n, &nq);
        if (nq != nv) { fprintf(stderr, "quant_logits: %s: vocab %d vs %d\n", argv[k], nq, nv); return 1; }
        double s = 0;
        for (size_t i = 0; i < (size_t)n * (size_t)nv; i++) s += fabs((double)q[i] - ref[i]);
        printf("%.6f\n", s / ((double)n * nv));
        free(q);
    }
    free(ref);
    return 0;
}
