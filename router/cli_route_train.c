/* cli_route_train.c - `switchboard route train`: adapt the encoder of a
 * pipeline's intent stage to the operator's labels, in process, and write
 * the LoRA adapter (sb_lora.h) that the model entry's `adapter:` then
 * names.
 *
 * Frozen e5 vectors are organised by topic; what an operator's labels mean
 * ("the caller wants to report a problem") is not in that geometry, and a
 * classifier on top cannot add it. So the encoder itself moves: the
 * stage's labelled texts (each label's description and at most --shots
 * examples, examples_file lines counted in, and the out_of_scope examples
 * as a class of their own) train a LoRA adapter on the top layers with the
 * supervised in-batch contrastive loss (sb_encoder_train.h), SetFit's idea
 * with every pair of a batch at once: texts of one label are pulled
 * together, all others pushed apart. The head (the stage's classifier)
 * is not stored: the runtime and `route eval` fit it on the adapted
 * vectors of the same texts when they load, as they do without an
 * adapter.
 *
 * The layers below the adapter are frozen, so each text's hidden states
 * entering the lowest adapted layer are computed once; a step runs only the
 * adapted layers. A run is deterministic for its options and --seed: the
 * adapter's initial A and the batches' order come from the seed, and the
 * trainer's bits do not depend on the thread count.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/router_internal.h"
#include "router/classify/sb_classify.h"
#include "kb/sb_kb.h"
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_encoder_train.h"
#include "worker/engine/sb_lora.h"

#define EXIT_WORSE 3            /* the adapted estimate is below the frozen one: nothing written */

typedef struct {
    const char *config, *pipeline, *stage, *out;
    int shots, threads, steps, epochs, batch, rank, layers, max_tokens, warmup;
    int folds, force;           /* the leave-some-out estimate's folds (0: none); write even if worse */
    int phrases;                /* the descriptions' phrases as texts of their label too */
    int norms;                  /* train the adapted layers' LayerNorms too */
    int paraphrases;            /* the writer's paraphrases a training example (0: none) */
    const char *model, *para_in, *para_out;     /* the writer; read / save the paraphrases */
    uint64_t seed;
    double lr, alpha, tau, weight_decay;
} opts;

typedef struct {
    float  *h0;                 /* the states entering the lowest adapted layer, n rows */
    int     n, label;           /* label: the stage's index; n_labels: out_of_scope */
    int     fold;               /* -1: a description (always trained on); else the example's fold */
    int     para;               /* a paraphrase: trained on with its example's fold, never scored */
    const char *text;           /* an example's text (the config's), else NULL */
} sample;

typedef struct {
    sample *s;
    size_t  n, cap;
    int     per_label[SB_CLS_MAX_LABELS + 1];
} samples;

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard route train -c CONFIG --pipeline P [options] -o ADAPTER.gguf\n"
        "\n"
        "Adapt the encoder of the pipeline's intent stage to its labels: a LoRA adapter\n"
        "on the top layers, trained with a supervised contrastive loss on the stage's\n"
        "labelled texts - each label's description, at most --shots examples (its\n"
        "examples, then its examples_file lines) and the out_of_scope examples as a\n"
        "class of their own. Written in llama.cpp's GGUF LoRA layout; name it with\n"
        "'adapter:' in the model entry, or try it first with route eval --adapter FILE.\n"
        "The head (the stage's classifier) is fitted on the adapted vectors where the\n"
        "adapter is loaded. Training starts from the frozen encoder (an adapter the model\n"
        "entry names is not used). Deterministic for the options and --seed, on any -t.\n"
        "\n"
        "  -c, --config FILE       the runtime config\n"
        "  -p, --pipeline NAME     the pipeline\n"
        "      --stage NAME        its intent stage (default: the first)\n"
        "  -o, --out FILE          the adapter to write (atomically)\n"
        "      --shots K           examples per label, 0 = all (default 5)\n"
        "      --seed N            the adapter's initial A and the batch order (default 1)\n"
        "      --epochs N          passes over the texts (default 10)\n"
        "      --steps N           optimizer steps instead of --epochs\n"
        "      --batch N           texts per step, 2..1024 (default 64; all when fewer)\n"
        "      --rank R            LoRA rank (default 8)\n"
        "      --alpha A           LoRA alpha: the update is scaled by alpha/rank (default 16)\n"
        "      --layers N          adapt the top N layers (default 2)\n"
        "      --lr X              AdamW peak learning rate (default 0.001)\n"
        "      --warmup N          steps of linear warm-up (default: a tenth of the steps)\n"
        "      --weight-decay X    AdamW's decoupled weight decay (default 0.01)\n"
        "      --tau X             the loss's temperature (default 0.05)\n"
        "      --max-tokens N      tokens a text is cut to, <s> </s> included (default 64)\n"
        "      --folds N           the leave-some-out estimate's folds, 0 = none (default 3)\n"
        "      --norms             also train the adapted layers' LayerNorms (weight and\n"
        "                          bias, no weight decay); the adapter file carries them\n"
        "      --phrases           also train on each description's phrases (split at , ; :\n"
        "                          and their full-width forms) as texts of its label\n"
        "      --paraphrases N     before training, a local generative model writes N\n"
        "                          paraphrases of each training example (in its language),\n"
        "                          texts of the example's label and fold\n"
        "      --model NAME        the writer (default: the config's first local model\n"
        "                          that is not an encoder)\n"
        "      --save-paraphrases F  write them (LABEL<TAB>EXAMPLE<TAB>PARAPHRASE)\n"
        "      --paraphrases-file F  read them from F instead of writing them (rows for\n"
        "                          examples not trained on are skipped)\n"
        "      --force             write the adapter even when its estimate is below the\n"
        "                          frozen encoder's\n"
        "  -t, --threads N         encoder threads (default 1)\n"
        "  -h, --help              this help\n"
        "\n"
        "Before the final run, a leave-some-out estimate on the training data itself:\n"
        "the examples are dealt into --folds folds; for each, an adapter is trained\n"
        "without it, and the stage's classifier, fitted on the rest, routes the fold's\n"
        "examples with the frozen and with the adapted encoder. The adapter is written\n"
        "only if the adapted estimate is not below the frozen one (else exit 3).\n"
        "Progress goes to stderr: step, loss, learning rate, elapsed time and ETA.\n"
        "Exit: 0, 1 runtime error, 2 usage/config error, 3 adapted estimate below frozen.\n");
}

static int parse_opts(int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"config", 1, 0, 'c'}, {"pipeline", 1, 0, 'p'}, {"stage", 1, 0, 'S'}, {"out", 1, 0, 'o'},
        {"shots", 1, 0, 'K'}, {"seed", 1, 0, 's'}, {"epochs", 1, 0, 'E'}, {"steps", 1, 0, 'N'},
        {"batch", 1, 0, 'B'}, {"rank", 1, 0, 'r'}, {"alpha", 1, 0, 'a'}, {"layers", 1, 0, 'L'},
        {"lr", 1, 0, 'l'}, {"warmup", 1, 0, 'w'}, {"weight-decay", 1, 0, 'd'}, {"tau", 1, 0, 'T'},
        {"max-tokens", 1, 0, 'm'}, {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'}, {"folds", 1, 0, 'F'},
        {"force", 0, 0, 'f'}, {"phrases", 0, 0, 'P'}, {"norms", 0, 0, 'n'}, {"paraphrases", 1, 0, 'G'},
        {"model", 1, 0, 'M'}, {"save-paraphrases", 1, 0, 'W'}, {"paraphrases-file", 1, 0, 'R'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    *o = (opts){ .shots = 5, .threads = 1, .epochs = 10, .batch = 64, .rank = 8, .layers = 2, .max_tokens = 64,
                 .warmup = -1, .seed = 1, .folds = 3, .lr = 1e-3, .alpha = 16, .tau = 0.05, .weight_decay = 0.01 };
    int ch;
    int64_t v;
    const char *cmd = "route train";
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:p:o:t:h", lo, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'c': o->config = optarg; break;
        case 'p': o->pipeline = optarg; break;
        case 'S': o->stage = optarg; break;
        case 'o': o->out = optarg; break;
        case 'K': bad = sb_opt_int(cmd, "--shots", optarg, 0, 100000, &v); o->shots = (int)v; break;
        case 's': bad = sb_opt_int(cmd, "--seed", optarg, 0, INT64_MAX, &v); o->seed = (uint64_t)v; break;
        case 'E': bad = sb_opt_int(cmd, "--epochs", optarg, 1, 100000, &v); o->epochs = (int)v; break;
        case 'N': bad = sb_opt_int(cmd, "--steps", optarg, 1, 1000000, &v); o->steps = (int)v; break;
        case 'B': bad = sb_opt_int(cmd, "--batch", optarg, 2, 1024, &v); o->batch = (int)v; break;
        case 'r': bad = sb_opt_int(cmd, "--rank", optarg, 1, SB_LORA_MAX_RANK, &v); o->rank = (int)v; break;
        case 'L': bad = sb_opt_int(cmd, "--layers", optarg, 1, 1024, &v); o->layers = (int)v; break;
        case 'w': bad = sb_opt_int(cmd, "--warmup", optarg, 0, 1000000, &v); o->warmup = (int)v; break;
        case 'm': bad = sb_opt_int(cmd, "--max-tokens", optarg, 3, 100000, &v); o->max_tokens = (int)v; break;
        case 't': bad = sb_opt_int(cmd, "--threads", optarg, 1, 256, &v); o->threads = (int)v; break;
        case 'F': bad = sb_opt_int(cmd, "--folds", optarg, 0, 100, &v); o->folds = v == 1 ? -1 : (int)v; break;
        case 'f': o->force = 1; break;
        case 'P': o->phrases = 1; break;
        case 'n': o->norms = 1; break;
        case 'G': bad = sb_opt_int(cmd, "--paraphrases", optarg, 1, 50, &v); o->paraphrases = (int)v; break;
        case 'M': o->model = optarg; break;
        case 'W': o->para_out = optarg; break;
        case 'R': o->para_in = optarg; break;
        case 'a': bad = sb_opt_num("route train", "--alpha", optarg, 1e-6, 1e6, &o->alpha); break;
        case 'l': bad = sb_opt_num("route train", "--lr", optarg, 1e-9, 1, &o->lr); break;
        case 'd': bad = sb_opt_num("route train", "--weight-decay", optarg, 0, 1, &o->weight_decay); break;
        case 'T': bad = sb_opt_num("route train", "--tau", optarg, 1e-3, 10, &o->tau); break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        if (bad) return -1;
        if (o->folds < 0) {
            fprintf(stderr, "route train: --folds expects 0 (no estimate) or 2..100\n");
            return -1;
        }
    }
    if (o->para_in && (o->paraphrases || o->para_out || o->model)) {
        fprintf(stderr, "route train: --paraphrases-file reads them: no --paraphrases, --save-paraphrases or --model\n");
        return -1;
    }
    if ((o->para_out || o->model) && !o->paraphrases) {
        fprintf(stderr, "route train: --save-paraphrases and --model go with --paraphrases N\n");
        return -1;
    }
    if (optind != argc || !o->config || !o->pipeline || !o->out) {
        fprintf(stderr, "route train: give -c CONFIG, --pipeline P and -o ADAPTER.gguf (route train --help)\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ the texts */

static int add_text(sb_enc_trainer *tr, const sb_encoder *e, int max_tokens, samples *S, const char *text,
                    int label, int fold, char *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = sb_encoder_tokenize(e, SB_EMBED_QUERY, text, strlen(text), &ids, &n, err);
    if (rc) return rc;
    if (n > (size_t)max_tokens) ids[max_tokens - 1] = ids[n - 1], n = (size_t)max_tokens;   /* keep </s> */
    if (S->n == S->cap) {
        sample *ns = sb_realloc(S->s, (S->cap = S->cap ? 2 * S->cap : 64) * sizeof *ns);
        if (!ns) { sb_free(ids); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
        S->s = ns;
    }
    sample *s = &S->s[S->n];
    s->n = (int)n, s->label = label, s->fold = fold, s->para = 0, s->text = fold >= 0 ? text : NULL;
    s->h0 = sb_malloc(n * (size_t)sb_encoder_dim(e) * sizeof *s->h0);
    rc = s->h0 ? sb_enc_train_prefix(tr, ids, (int)n, s->h0, err) : sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_free(ids);
    if (rc) { sb_free(s->h0); return rc; }
    S->n++;
    S->per_label[label]++;
    return 0;
}

/* The stage's labelled texts, as route eval and the runtime train on them,
 * but at most `shots` examples a label (descriptions and out_of_scope
 * examples apart). */
/* A description's phrases ("noise, illegal construction, rude staff"):
 * the operator's own words for what a label covers, each one a text of the
 * label, so the adapter sees more than one sentence per description. */
static int add_phrases(sb_enc_trainer *tr, const sb_encoder *e, int max_tokens, samples *S, const char *d, int label,
                       char *err) {
    static const char *const seps[] = { ",", ";", ":", "\xEF\xBC\x8C", "\xEF\xBC\x9B", "\xEF\xBC\x9A",
                                        "\xE3\x80\x81" };      /* ， ； ： 、 */
    int rc = 0;
    while (*d && !rc) {
        size_t n = strlen(d), skip = 0;
        for (size_t i = 0; i < SB_ARRAY_LEN(seps); i++) {
            const char *at = strstr(d, seps[i]);
            if (at && (size_t)(at - d) < n) n = (size_t)(at - d), skip = strlen(seps[i]);
        }
        size_t a = 0, b = n;
        while (a < b && (d[a] == ' ' || d[a] == '\t')) a++;
        while (b > a && (d[b - 1] == ' ' || d[b - 1] == '\t')) b--;
        if (b - a >= 2) {
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)SB_MIN(b - a, sizeof buf - 1), d + a);
            rc = add_text(tr, e, max_tokens, S, buf, label, -1, err);
        }
        d += n + skip;
        if (!skip) break;
    }
    return rc;
}

static int collect(sb_enc_trainer *tr, const sb_encoder *e, const sb_stage *st, const opts *o, samples *S,
                   char *err) {
    const int nl = (int)st->n_labels, F = o->folds > 0 ? o->folds : 1;
    int shots[SB_CLS_MAX_LABELS + 1] = {0}, rc = 0;     /* examples taken per class: their folds in turn */
    for (int i = 0; i < nl && !rc; i++) {
        const sb_label *l = &st->labels[i];
        if (l->description) rc = add_text(tr, e, o->max_tokens, S, l->description, i, -1, err);
        if (l->description && o->phrases && !rc) rc = add_phrases(tr, e, o->max_tokens, S, l->description, i, err);
        for (size_t k = 0; k < l->n_examples && !rc && (!o->shots || shots[i] < o->shots); k++, shots[i]++)
            rc = add_text(tr, e, o->max_tokens, S, l->examples[k], i, shots[i] % F, err);
    }
    for (size_t k = 0; k < st->n_extra && !rc; k++) {
        const int label = st->extra_label[k] < 0 ? nl : st->extra_label[k];
        if (label < nl && o->shots && shots[label] >= o->shots) continue;
        rc = add_text(tr, e, o->max_tokens, S, st->extra_text[k], label, shots[label] % F, err);
        shots[label]++;
    }
    return rc;
}

/* --paraphrases: each example's paraphrases, written now or read from
 * --paraphrases-file, as texts of its label in its fold. The fold matters:
 * the estimate holds an example out with its paraphrases, or a fold would
 * train on other words for the very calls it is scored on, and the guard
 * would compare the frozen encoder with one that has seen the answers.
 * Descriptions are not paraphrased: they list a desk's topics, in both
 * languages at once, rather than say what one caller says. */
static int add_paraphrases(sb_enc_trainer *tr, const sb_encoder *e, const sb_stage *st, const sb_config_model *writer,
                           const opts *o, samples *S, char *err) {
    size_t n_ex = 0, *at = sb_malloc((S->n ? S->n : 1) * sizeof *at);
    rt_example *ex = sb_malloc((S->n ? S->n : 1) * sizeof *ex);
    rt_paras P = { 0 };
    int rc = at && ex ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    for (size_t i = 0; i < S->n && !rc; i++)
        if (S->s[i].text) at[n_ex] = i, ex[n_ex++] = (rt_example){ S->s[i].label, S->s[i].text };
    if (!rc && o->para_in) {
        rc = rt_paras_read(o->para_in, st, ex, n_ex, &P, err);
    } else if (!rc) {
        fprintf(stderr, "route train: %zu examples; %d paraphrases each by %s (%s)\n", n_ex, o->paraphrases,
                writer->name, writer->gguf);
        rc = rt_paras_generate(writer->gguf, o->threads, o->seed, o->paraphrases, st, ex, n_ex, &P, err);
    }
    if (!rc && o->para_out) rc = rt_paras_save(o->para_out, st, ex, &P, err);
    for (size_t k = 0; k < P.n && !rc; k++) {
        const sample *src = &S->s[at[P.p[k].example]];
        if (!(rc = add_text(tr, e, o->max_tokens, S, P.p[k].text, src->label, src->fold, err)))
            S->s[S->n - 1].para = 1, S->s[S->n - 1].text = NULL;
    }
    if (!rc) {
        fprintf(stderr, "route train: %zu paraphrases of %zu examples %s", P.n, n_ex, o->para_in ? "read from " : "written");
        if (o->para_in) fprintf(stderr, "%s (%zu rows for examples not trained on skipped)", o->para_in, P.skipped);
        fputc('\n', stderr);
    }
    rt_paras_free(&P);
    sb_free(ex);
    sb_free(at);
    return rc;
}

static void samples_free(samples *S) {
    for (size_t i = 0; i < S->n; i++) sb_free(S->s[i].h0);
    sb_free(S->s);
}

/* ------------------------------------------------------------ training */

#define ALL_FOLDS (-2)

/* Trains on every text but fold `held` (ALL_FOLDS: every text), through the
 * engine's loop (sb_enc_train_fit). what: the progress lines' prefix. */
static int train(sb_enc_trainer *tr, const samples *S, const opts *o, int held, int steps, const char *what,
                 char *err) {
    sb_enc_text *x = sb_malloc((S->n ? S->n : 1) * sizeof *x);
    if (!x) return sb_seterr(err, SB_ENOMEM, "out of memory");
    size_t m = 0;
    for (size_t i = 0; i < S->n; i++)
        if (held == ALL_FOLDS || S->s[i].fold != held) x[m++] = (sb_enc_text){ S->s[i].h0, S->s[i].n, S->s[i].label };
    char prefix[64];
    snprintf(prefix, sizeof prefix, "route train: %s", what);
    if (held != ALL_FOLDS) fprintf(stderr, "%strains on %zu of %zu texts\n", prefix, m, S->n);
    const sb_enc_fit_opts fo = { .steps = steps, .batch = o->batch, .warmup = o->warmup, .lr = o->lr,
                                 .weight_decay = o->weight_decay, .tau = o->tau, .seed = o->seed,
                                 .progress = stderr, .prefix = prefix };
    int rc = sb_enc_train_fit(tr, x, m, &fo, err);
    sb_free(x);
    return rc;
}

/* ------------------------------------------------------------ the estimate */

/* The stage's classifier, as route eval builds it by default, fitted on
 * the vectors V of every text but fold `held`; *right += the held-out
 * examples it routes to their label. */
static int score_fold(const sb_stage *st, const samples *S, const float *V, int dim, int held, int *right,
                      char *err) {
    const char *names[SB_CLS_MAX_LABELS];
    for (size_t i = 0; i < st->n_labels; i++) names[i] = st->labels[i].name;
    sb_cls_opts co;
    sb_cls_opts_default(&co);
    co.method = st->classifier >= 0 ? (sb_cls_method)st->classifier : SB_CLS_CENTROID;
    sb_classifier *cls;
    int rc = sb_cls_new(dim, (int)st->n_labels, names, &co, &cls, err);
    const int nl = (int)st->n_labels;
    for (size_t i = 0; i < S->n && !rc; i++) {
        const sample *s = &S->s[i];
        if (s->fold == held || s->para) continue;       /* the head is fitted on the config's texts, as served */
        const float *v = V + i * (size_t)dim;
        rc = s->fold < 0 ? sb_cls_set_description(cls, s->label, v, err)
                         : sb_cls_add_example(cls, s->label == nl ? SB_CLS_OOS : s->label, v, err);
    }
    if (!rc) rc = sb_cls_train(cls, err);
    for (size_t i = 0; i < S->n && !rc; i++) {
        sb_cls_result r;
        if (S->s[i].fold != held || S->s[i].para || (rc = sb_cls_classify(cls, V + i * (size_t)dim, &r))) continue;
        *right += r.top == S->s[i].label;       /* out_of_scope's index is n_labels, as sample.label */
    }
    sb_cls_free(cls);
    if (rc && rc != SB_ENOMEM) {
        char why[SB_ERR_LEN];
        snprintf(why, sizeof why, "%s", err);
        sb_seterr(err, rc, "the estimate's fold %d: %s (--folds 0 skips the estimate)", held + 1, why);
    }
    return rc;
}

static int embed_all(sb_enc_trainer *tr, const samples *S, int dim, float *V, char *err) {
    int rc = 0;
    for (size_t i = 0; i < S->n && !rc; i++) rc = sb_enc_train_embed_from(tr, S->s[i].h0, S->s[i].n, V + i * (size_t)dim, err);
    return rc;
}

/* For each fold: a fresh adapter (B = 0: the frozen vectors) trained on
 * the other folds, the held-out examples routed before and after. */
/* A fresh adapter (with its own norms under --norms) and its trainer. */
static int new_adapter(sb_encoder *enc, const opts *o, sb_lora **lora, sb_enc_trainer **tr, char *err) {
    int rc = sb_encoder_adapter_new(enc, o->rank, (float)o->alpha, o->layers, o->seed, lora, err);
    if (!rc && o->norms) rc = sb_encoder_adapter_add_norms(enc, *lora, err);
    if (!rc) rc = sb_enc_trainer_new(enc, *lora, o->max_tokens, tr, err);
    if (!rc) rc = sb_enc_trainer_set_fast(*tr, 1, err);
    return rc;
}

static int estimate(sb_encoder *enc, const sb_stage *st, const samples *S, const opts *o, int steps, int *frozen,
                    int *adapted, int *held_n, char *err) {
    const int dim = sb_encoder_dim(enc);
    float *V = sb_malloc(S->n * (size_t)dim * sizeof *V);
    int rc = V ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    *frozen = *adapted = *held_n = 0;
    for (size_t i = 0; i < S->n; i++) *held_n += S->s[i].fold >= 0 && !S->s[i].para;
    for (int f = 0; f < o->folds && !rc; f++) {
        sb_lora *lora = NULL;
        sb_enc_trainer *tr = NULL;
        char what[32];
        snprintf(what, sizeof what, "fold %d/%d: ", f + 1, o->folds);
        if (!(rc = new_adapter(enc, o, &lora, &tr, err)) && !(rc = embed_all(tr, S, dim, V, err)) &&
            !(rc = score_fold(st, S, V, dim, f, frozen, err)) &&
            !(rc = train(tr, S, o, f, steps, what, err)) && !(rc = embed_all(tr, S, dim, V, err)))
            rc = score_fold(st, S, V, dim, f, adapted, err);
        sb_enc_trainer_free(tr);
        sb_lora_free(lora);
    }
    sb_free(V);
    return rc;
}

static const sb_stage *intent_stage(const sb_pipeline *p, const char *name) {
    for (size_t i = 0; i < p->n_stages; i++)
        if (p->stages[i].kind == SB_STAGE_INTENT && (!name || !strcmp(p->stages[i].name, name)))
            return &p->stages[i];
    return NULL;
}

/* The config, pipeline, stage and the stage's encoder. */
static int open_stage(const opts *o, sb_config **cfg, sb_pipelines **ps, const sb_stage **st, sb_encoder **enc,
                      char *err) {
    const sb_pipeline *p;
    const sb_config_model *m;
    int rc = sb_config_load(o->config, cfg, err);
    if (!rc) rc = sb_pipelines_load(*cfg, ps, err);
    if (rc) return rc;
    if (!(p = sb_pipelines_find(*ps, o->pipeline)))
        return sb_seterr(err, SB_ENOTFOUND, "%s: no pipeline '%s'", o->config, o->pipeline);
    if (!(*st = intent_stage(p, o->stage)))
        return sb_seterr(err, SB_ENOTFOUND, "pipeline '%s' has no intent stage%s%s", o->pipeline, o->stage ? " " : "",
                         o->stage ? o->stage : "");
    m = sb_config_find_model(*cfg, (*st)->model);
    if (!m || !m->gguf)
        return sb_seterr(err, SB_EUNSUP, "stage '%s': model '%s' is not a local GGUF", (*st)->name, (*st)->model);
    if ((rc = sb_encoder_open(m->gguf, o->threads, -1, enc, err)) == SB_EUNSUP)
        sb_seterr(err, rc, "stage '%s': model '%s' (%s) is not an encoder model: route train adapts an encoder",
                  (*st)->name, (*st)->model, m->gguf);
    return rc;
}

static int route_train(int argc, char **argv) {
    opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc > 0 ? SB_EXIT_OK : SB_EXIT_CONFIG;
    char err[SB_ERR_LEN] = "";
    sb_config *cfg = NULL;
    sb_pipelines *ps = NULL;
    const sb_stage *st = NULL;
    const sb_config_model *writer = NULL;
    sb_encoder *enc = NULL;
    sb_lora *lora = NULL;
    sb_enc_trainer *tr = NULL;
    samples S = {0};
    int exit_code = SB_EXIT_CONFIG, steps = 0;
    if ((rc = open_stage(&o, &cfg, &ps, &st, &enc, err)) ||
        (o.paraphrases && (rc = sb_kb_writer_pick(cfg, o.model, "--paraphrases-file", &writer, err))))
        goto out;
    if (o.layers > sb_encoder_n_layer(enc)) {
        rc = sb_seterr(err, SB_EINVAL, "--layers %d: the model has %d", o.layers, sb_encoder_n_layer(enc));
        goto out;
    }
    exit_code = SB_EXIT_FAIL;
    o.max_tokens = SB_MIN(o.max_tokens, sb_encoder_n_ctx(enc));     /* longer texts are cut to the window */
    if ((rc = new_adapter(enc, &o, &lora, &tr, err))) goto out;
    const double t0 = sb_now_s();
    if ((rc = collect(tr, enc, st, &o, &S, err))) goto out;
    if ((o.paraphrases || o.para_in) && (rc = add_paraphrases(tr, enc, st, writer, &o, &S, err))) {
        if (rc == SB_EINVAL) exit_code = SB_EXIT_CONFIG;
        goto out;
    }
    int nc = 0;
    for (size_t i = 0; i <= st->n_labels; i++) nc += S.per_label[i] > 0;
    if (S.n < 2 || nc < 2) {
        rc = sb_seterr(err, SB_EINVAL, "stage '%s': %zu texts in %d classes; training needs 2 classes", st->name, S.n,
                       nc);
        exit_code = SB_EXIT_CONFIG;
        goto out;
    }
    const size_t B = SB_MIN((size_t)o.batch, S.n);
    steps = o.steps ? o.steps : o.epochs * (int)((S.n + B - 1) / B);
    fprintf(stderr, "route train: %zu texts (%zu labels + out_of_scope: %d), rank %d, alpha %g, top %d layers, "
            "%s%d steps of %zu, seed %llu, %d thread%s\n", S.n, st->n_labels, S.per_label[st->n_labels], o.rank,
            o.alpha, o.layers, o.norms ? "their LayerNorms, " : "", steps, B, (unsigned long long)o.seed, o.threads,
            o.threads == 1 ? "" : "s");
    if (o.folds) {
        int fz, ad, hn;
        if ((rc = estimate(enc, st, &S, &o, steps, &fz, &ad, &hn, err))) goto out;
        fprintf(stderr, "route train: leave-some-out estimate (%d folds of the %d examples): frozen %.4f (%d/%d), "
                "adapted %.4f (%d/%d)\n", o.folds, hn, hn ? (double)fz / hn : 0, fz, hn, hn ? (double)ad / hn : 0, ad,
                hn);
        if (ad < fz && !o.force) {
            fprintf(stderr, "route train: not writing %s: the adapted encoder's estimate is below the frozen one's "
                    "(--force writes it anyway)\n", o.out);
            exit_code = EXIT_WORSE;
            goto out;
        }
    }
    if ((rc = train(tr, &S, &o, ALL_FOLDS, steps, "", err)) || (rc = sb_lora_save(lora, o.out, err))) goto out;
    printf("route train: wrote %s (%d steps on %zu texts in %.1f s); evaluate it with\n"
           "  switchboard route eval -c %s --pipeline %s --adapter %s TEST.tsv\n",
           o.out, steps, S.n, sb_now_s() - t0, o.config, o.pipeline, o.out);
    exit_code = SB_EXIT_OK;
out:
    if (rc) fprintf(stderr, "route train: %s\n", err[0] ? err : sb_strerror(rc));
    samples_free(&S);
    sb_enc_trainer_free(tr);
    sb_lora_free(lora);
    sb_encoder_free(enc);
    sb_pipelines_free(ps);
    sb_config_free(cfg);
    return exit_code;
}

int sb_route_train(int argc, char **argv) { return route_train(argc, argv); }
