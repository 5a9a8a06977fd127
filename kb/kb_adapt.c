/* kb_adapt.c - `switchboard kb adapt`: fine-tune the encoder for one base's
 * questions, and write the LoRA adapter (sb_lora.h) its `adapter:` names.
 *
 * Frozen e5 finds the right desk but often the wrong aspect of it on a base
 * whose notes overlap (docs/KNOWLEDGE.md, "The harder base"). The base has
 * no labelled questions, so a local generative model writes some for each
 * chunk, in the chunk's language. The adapter is trained on them against the
 * base's own stored passage vectors, which stay fixed: questions only are
 * embedded through it (knowledge.NAME.adapter), so the base is not
 * re-embedded and its vectors stay those of its embedder. Each step is the
 * route-train loss and loop (sb_enc_train_fit): the supervised contrastive
 * loss over the batch's questions plus every passage of the base, labelled
 * by chunk - a question is pulled to its passage and pushed from every
 * other passage and from the other chunks' questions in the batch.
 *
 * A slice of the generated questions is held out; the adapter is written
 * only if its MRR there is not below the frozen encoder's.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kb/kb_internal.h"
#include "common/sb_cmd.h"
#include "common/sb_config.h"
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_encoder_train.h"
#include "worker/engine/sb_lora.h"

#define EXIT_WORSE 3            /* the adapted held-out recall is below the frozen one: nothing written */
#define MAX_QUESTIONS_LINE 4096

typedef struct {
    const char *config, *kb, *out, *model, *questions_in, *questions_out;
    int per_chunk, threads, epochs, batch, rank, layers, max_tokens, holdout_pct, force, quiet;
    int norms;                  /* train the adapted layers' LayerNorms too */
    uint64_t seed;
    double lr, alpha, tau, weight_decay;
} adapt_opts;

typedef struct {
    char *text;
    int chunk;                  /* index into the passages */
    int n;                      /* tokens */
    float *h0;                  /* prefix states (sb_enc_train_prefix) */
    int held;                   /* in the held-out slice */
} question;

typedef struct { question *q; size_t n, cap; } questions;

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard kb adapt -c CONFIG [--kb NAME] -o ADAPTER.gguf [options]\n"
        "\n"
        "Fine-tune the knowledge base's encoder for its questions. A local generative\n"
        "model (--model, default: the config's first local model that is not an\n"
        "encoder) writes --per-chunk questions for every chunk, in the chunk's language\n"
        "(the prompts are in docs/KNOWLEDGE.md). A LoRA adapter on the encoder's top\n"
        "layers then learns to embed each question near its own passage's stored\n"
        "vector and away from every other passage (supervised contrastive loss, as\n"
        "route train; passages fixed). Only questions go through the adapter, so the\n"
        "base is not re-embedded: add it to the embed model's adapters and name it on\n"
        "the base (models.E.adapters: {NAME: FILE}, knowledge.K.adapter: NAME).\n"
        "\n"
        "  -c, --config FILE        the runtime config\n"
        "      --kb NAME            the knowledge base (may be left out when there is one)\n"
        "  -o, --out FILE           the adapter to write (atomically)\n"
        "      --model NAME         the question writer, a local generative model of models:\n"
        "      --per-chunk N        questions per chunk (default 3)\n"
        "      --save-questions F   write the questions (SOURCE<TAB>POSITION<TAB>QUESTION)\n"
        "      --questions F        read them from F instead of generating (same format)\n"
        "      --holdout PCT        %% of the questions held out for the guard (default 20)\n"
        "      --seed N             generation, the adapter's initial A, batches, held-out slice (default 1)\n"
        "      --epochs N           passes over the training questions (default 10)\n"
        "      --batch N            questions per step (default 32), with every passage\n"
        "      --rank N --alpha A   LoRA rank and alpha (default 8, 16)\n"
        "      --layers N           adapt the top N layers (default 4)\n"
        "      --lr X --tau X       learning rate (1e-3), loss temperature (0.05)\n"
        "      --weight-decay X     AdamW's (default 0.01)\n"
        "      --max-tokens N       a question's tokens at most (default 64)\n"
        "      --force              write the adapter even if it is worse on the held-out slice\n"
        "      --norms              also train the adapted layers' LayerNorms (weight and bias)\n"
        "      --quiet              no progress lines\n"
        "  -t, --threads N          threads (default: the embed model's)\n"
        "  -h, --help               this help\n"
        "\n"
        "Progress goes to stderr: per chunk while generating, per step while training\n"
        "(loss, learning rate, elapsed time, ETA). Then recall@1/@3 and MRR of the\n"
        "held-out questions against the base's passages, frozen and adapted. Never give\n"
        "it the questions you test with.\n"
        "Exit: 0, 1 runtime error, 2 usage/config error, 3 adapted held-out MRR below\n"
        "the frozen one (nothing written; --force writes it).\n");
}

/* 1: --help, 0: ok, -1: usage error (said). */
static int parse_opts(int argc, char **argv, adapt_opts *o) {
    enum { O_KB = 256, O_MODEL, O_PER, O_SAVE, O_QIN, O_HOLD, O_SEED, O_EPOCHS, O_BATCH, O_RANK, O_ALPHA, O_LAYERS,
           O_LR, O_TAU, O_WD, O_MAXT, O_FORCE, O_QUIET, O_NORMS };
    static const struct option lo[] = {
        {"config", 1, 0, 'c'}, {"kb", 1, 0, O_KB}, {"out", 1, 0, 'o'}, {"model", 1, 0, O_MODEL},
        {"per-chunk", 1, 0, O_PER}, {"save-questions", 1, 0, O_SAVE}, {"questions", 1, 0, O_QIN},
        {"holdout", 1, 0, O_HOLD}, {"seed", 1, 0, O_SEED}, {"epochs", 1, 0, O_EPOCHS}, {"batch", 1, 0, O_BATCH},
        {"rank", 1, 0, O_RANK}, {"alpha", 1, 0, O_ALPHA}, {"layers", 1, 0, O_LAYERS}, {"lr", 1, 0, O_LR},
        {"tau", 1, 0, O_TAU}, {"weight-decay", 1, 0, O_WD}, {"max-tokens", 1, 0, O_MAXT}, {"force", 0, 0, O_FORCE},
        {"quiet", 0, 0, O_QUIET}, {"norms", 0, 0, O_NORMS}, {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *o = (adapt_opts){ .per_chunk = 3, .epochs = 10, .batch = 32, .rank = 8, .layers = 4, .max_tokens = 64,
                       .holdout_pct = 20, .seed = 1, .lr = 1e-3, .alpha = 16, .tau = 0.05, .weight_decay = 0.01 };
    const char *cmd = "kb adapt";
    int64_t v;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:o:t:h", lo, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'c': o->config = optarg; break;
        case O_KB: o->kb = optarg; break;
        case 'o': o->out = optarg; break;
        case O_MODEL: o->model = optarg; break;
        case O_SAVE: o->questions_out = optarg; break;
        case O_QIN: o->questions_in = optarg; break;
        case O_PER: bad = sb_opt_int(cmd, "--per-chunk", optarg, 1, 20, &v); o->per_chunk = (int)v; break;
        case O_HOLD: bad = sb_opt_int(cmd, "--holdout", optarg, 1, 50, &v); o->holdout_pct = (int)v; break;
        case O_SEED: bad = sb_opt_int(cmd, "--seed", optarg, 0, INT64_MAX, &v); o->seed = (uint64_t)v; break;
        case O_EPOCHS: bad = sb_opt_int(cmd, "--epochs", optarg, 1, 10000, &v); o->epochs = (int)v; break;
        case O_BATCH: bad = sb_opt_int(cmd, "--batch", optarg, 1, 1024, &v); o->batch = (int)v; break;
        case O_RANK: bad = sb_opt_int(cmd, "--rank", optarg, 1, SB_LORA_MAX_RANK, &v); o->rank = (int)v; break;
        case O_LAYERS: bad = sb_opt_int(cmd, "--layers", optarg, 1, 1024, &v); o->layers = (int)v; break;
        case O_MAXT: bad = sb_opt_int(cmd, "--max-tokens", optarg, 3, 100000, &v); o->max_tokens = (int)v; break;
        case 't': bad = sb_opt_int(cmd, "--threads", optarg, 1, 256, &v); o->threads = (int)v; break;
        case O_ALPHA: bad = sb_opt_num("kb adapt", "--alpha", optarg, 1e-6, 1e6, &o->alpha); break;
        case O_LR: bad = sb_opt_num("kb adapt", "--lr", optarg, 1e-9, 1, &o->lr); break;
        case O_TAU: bad = sb_opt_num("kb adapt", "--tau", optarg, 1e-4, 10, &o->tau); break;
        case O_WD: bad = sb_opt_num("kb adapt", "--weight-decay", optarg, 0, 10, &o->weight_decay); break;
        case O_FORCE: o->force = 1; break;
        case O_QUIET: o->quiet = 1; break;
        case O_NORMS: o->norms = 1; break;
        case 'h': usage(stdout); return 1;
        default: fprintf(stderr, "(see 'switchboard kb adapt --help')\n"); return -1;
        }
        if (bad) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "kb adapt: unexpected argument '%s' (see 'switchboard kb adapt --help')\n", argv[optind]);
        return -1;
    }
    if (!o->config || !o->out) {
        fprintf(stderr, "kb adapt: give -c CONFIG and -o ADAPTER.gguf (see 'switchboard kb adapt --help')\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ the inputs */

static int push(questions *Q, const char *text, size_t len, int chunk) {
    if (Q->n == Q->cap) {
        question *v = sb_realloc(Q->q, (Q->cap = Q->cap ? 2 * Q->cap : 256) * sizeof *v);
        if (!v) return SB_ENOMEM;
        Q->q = v;
    }
    char *t = sb_malloc(len + 1);
    if (!t) return SB_ENOMEM;
    memcpy(t, text, len);
    t[len] = '\0';
    Q->q[Q->n++] = (question){ .text = t, .chunk = chunk };
    return 0;
}

static void questions_free(questions *Q) {
    for (size_t i = 0; i < Q->n; i++) sb_free(Q->q[i].text), sb_free(Q->q[i].h0);
    sb_free(Q->q);
}

static int find_chunk(const sb_kb_passage *p, size_t np, const char *source, int position) {
    for (size_t i = 0; i < np; i++)
        if (p[i].position == position && !strcmp(p[i].source, source)) return (int)i;
    return -1;
}

typedef struct { const char *path; const sb_kb_passage *p; size_t np; questions *Q; } questions_reader;

static int read_question(void *ud, char *f[3], size_t lineno, char *err) {
    questions_reader *r = ud;
    char *end;
    long pos = strtol(f[1], &end, 10);
    int c = *end ? -1 : find_chunk(r->p, r->np, f[0], (int)pos);
    if (c < 0)
        return sb_seterr(err, SB_EINVAL, "%s:%zu: no chunk %s of '%s' in the base (re-generate the questions "
                         "after kb add changed it)", r->path, lineno, f[1], f[0]);
    return push(r->Q, f[2], strlen(f[2]), c) ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
}

/* --questions FILE: SOURCE<TAB>POSITION<TAB>QUESTION lines, # comments. */
static int read_questions(const char *path, const sb_kb_passage *p, size_t np, questions *Q, char *err) {
    questions_reader r = { path, p, np, Q };
    int rc = sb_kb_writer_read(path, "SOURCE<TAB>POSITION<TAB>QUESTION", read_question, &r, err);
    if (!rc && !Q->n) rc = sb_seterr(err, SB_EINVAL, "%s: no questions", path);
    return rc;
}

static int generate(const adapt_opts *o, const char *gguf, const sb_kb_passage *p, size_t np, questions *Q,
                    char *err) {
    sb_kb_writer *g;
    int rc = sb_kb_writer_open(gguf, o->threads, o->seed, &g, err);
    const double t0 = sb_now_s();
    for (size_t i = 0; i < np && !rc; i++) {
        char **qs = NULL;
        size_t nq = 0;
        if ((rc = kb_qgen_ask(g, p[i].section, p[i].text, o->per_chunk, (uint64_t)i, &qs, &nq, err))) break;
        for (size_t k = 0; k < nq && !rc; k++)
            if (push(Q, qs[k], strlen(qs[k]), (int)i)) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
        sb_kb_lines_free(qs, nq);
        if (!o->quiet) {
            char item[512];
            snprintf(item, sizeof item, "%s #%d", p[i].source, p[i].position);
            sb_kb_writer_progress("kb adapt", i + 1, np, item, nq, o->per_chunk, "question", t0);
        }
    }
    sb_kb_writer_close(g);
    return rc;
}

static int save_questions(const char *path, const sb_kb_passage *p, const questions *Q, char *err) {
    FILE *f = fopen(path, "w");
    if (!f) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    fprintf(f, "# kb adapt's generated questions: SOURCE<TAB>POSITION<TAB>QUESTION\n");
    for (size_t i = 0; i < Q->n; i++)
        fprintf(f, "%s\t%d\t%s\n", p[Q->q[i].chunk].source, p[Q->q[i].chunk].position, Q->q[i].text);
    int bad = ferror(f);
    if (fclose(f) || bad) return sb_seterr(err, SB_EIO, "%s: write failed", path);
    return 0;
}

/* ------------------------------------------------------------ training */

static uint64_t mix(uint64_t x) {             /* splitmix64's finaliser: the held-out slice's order */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

typedef struct { uint64_t h; size_t i; } hashed;

static int by_hash(const void *a, const void *b) {
    const hashed *x = a, *y = b;
    return x->h < y->h ? -1 : x->h > y->h ? 1 : x->i < y->i ? -1 : x->i > y->i;
}

/* Tokenize, cache the prefix states, and deal holdout_pct % to the held-out
 * slice: the questions ranked by a seeded hash, so the slice does not
 * depend on the order they were generated in. */
static int prepare(sb_enc_trainer *tr, const sb_encoder *enc, const adapt_opts *o, questions *Q, char *err) {
    const size_t dim = (size_t)sb_encoder_dim(enc);
    int rc = 0;
    for (size_t i = 0; i < Q->n && !rc; i++) {
        question *q = &Q->q[i];
        int32_t *ids = NULL;
        size_t n = 0;
        if ((rc = sb_encoder_tokenize(enc, SB_EMBED_QUERY, q->text, strlen(q->text), &ids, &n, err))) break;
        if (n > (size_t)o->max_tokens) ids[o->max_tokens - 1] = ids[n - 1], n = (size_t)o->max_tokens;  /* keep </s> */
        q->n = (int)n;
        q->h0 = sb_malloc(n * dim * sizeof *q->h0);
        rc = q->h0 ? sb_enc_train_prefix(tr, ids, (int)n, q->h0, err) : sb_seterr(err, SB_ENOMEM, "out of memory");
        sb_free(ids);
    }
    const size_t held = Q->n * (size_t)o->holdout_pct / 100;
    hashed *order = rc ? NULL : sb_malloc((Q->n ? Q->n : 1) * sizeof *order);
    if (!rc && !order) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    for (size_t i = 0; i < Q->n && !rc; i++) order[i] = (hashed){ mix(o->seed ^ mix(i)), i };
    if (!rc) qsort(order, Q->n, sizeof *order, by_hash);
    for (size_t r = 0; r < held && !rc; r++) Q->q[order[r].i].held = 1;
    sb_free(order);
    return rc;
}

typedef struct { int n, r1, r3; double rr; } recall;

/* The held-out questions embedded with the trainer's current adapter,
 * ranked against every passage: recall@1, @3 and MRR@10. */
static int held_recall(sb_enc_trainer *tr, const questions *Q, const sb_kb_passage *p, size_t np, int dim,
                       recall *r, char *err) {
    float *v = sb_malloc((size_t)dim * sizeof *v);
    int rc = v ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    *r = (recall){ 0 };
    for (size_t i = 0; i < Q->n && !rc; i++) {
        const question *q = &Q->q[i];
        if (!q->held || (rc = sb_enc_train_embed_from(tr, q->h0, q->n, v, err))) continue;
        float mine = 0;
        for (int d = 0; d < dim; d++) mine += v[d] * p[q->chunk].vec[d];
        int above = 0;
        for (size_t c = 0; c < np; c++) {
            float dot = 0;
            for (int d = 0; d < dim; d++) dot += v[d] * p[c].vec[d];
            above += (int)c != q->chunk && dot > mine;
        }
        r->n++, r->r1 += above == 0, r->r3 += above < 3, r->rr += above < 10 ? 1.0 / (above + 1) : 0;
    }
    sb_free(v);
    return rc;
}

static int train(sb_enc_trainer *tr, const adapt_opts *o, const questions *Q, const sb_kb_passage *p, size_t np,
                 int dim, int *steps_out, char *err) {
    sb_enc_text *x = sb_malloc(Q->n * sizeof *x);
    float *fixed = sb_malloc(np * (size_t)dim * sizeof *fixed);
    int *labels = sb_malloc(np * sizeof *labels);
    if (!x || !fixed || !labels) {
        sb_free(x), sb_free(fixed), sb_free(labels);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < Q->n; i++)
        if (!Q->q[i].held) x[m++] = (sb_enc_text){ Q->q[i].h0, Q->q[i].n, Q->q[i].chunk };
    for (size_t c = 0; c < np; c++) {
        memcpy(fixed + c * (size_t)dim, p[c].vec, (size_t)dim * sizeof *fixed);
        labels[c] = (int)c;
    }
    const size_t B = SB_MIN((size_t)o->batch, m);
    const int steps = o->epochs * (int)((m + B - 1) / (B ? B : 1));
    const sb_enc_fit_opts fo = { .steps = steps, .batch = o->batch, .warmup = -1, .lr = o->lr,
                                 .weight_decay = o->weight_decay, .tau = o->tau, .seed = o->seed, .fixed = fixed,
                                 .fixed_labels = labels, .n_fixed = (int)np, .progress = o->quiet ? NULL : stderr,
                                 .prefix = "kb adapt: " };
    fprintf(stderr, "kb adapt: training on %zu questions against %zu passages: rank %d, alpha %g, top %d layers, "
            "%s%d steps of %zu, seed %llu\n", m, np, o->rank, o->alpha, o->layers, o->norms ? "their LayerNorms, " : "",
            steps, B,
            (unsigned long long)o->seed);
    int rc = sb_enc_train_fit(tr, x, m, &fo, err);
    *steps_out = steps;
    sb_free(x), sb_free(fixed), sb_free(labels);
    return rc;
}

/* ------------------------------------------------------------ the command */

/* The base's passages, checked to be embedded by the embed model's file. */
static int load_passages(const sb_config_kb *k, const sb_config_model *m, sb_kb_passage **p, size_t *np, char *err) {
    sb_kb *kb = NULL;
    sb_kb_opts ko = { .path = k->path, .readonly = 1 };
    int rc = sb_kb_open(&ko, &kb, err);
    if (rc) return rc;
    int dim = 0;
    const char *id = sb_kb_embed_id(kb, &dim);
    struct stat st;
    const char *base = strrchr(m->gguf, '/');
    char want[512];
    snprintf(want, sizeof want, "%s %lld", base ? base + 1 : m->gguf, stat(m->gguf, &st) ? 0LL : (long long)st.st_size);
    if (!id) rc = sb_seterr(err, SB_ENOTFOUND, "knowledge base '%s' is empty: kb add its documents first", k->name);
    else if (strcmp(id, want))
        rc = sb_seterr(err, SB_EINVAL, "knowledge base '%s' was embedded by '%s', not by embed_model '%s' (%s)",
                       k->name, id, k->embed_model, want);
    if (!rc) rc = sb_kb_passages(kb, p, np, err);
    if (!rc && *np < 2) rc = sb_seterr(err, SB_EINVAL, "knowledge base '%s' has %zu chunk: adapting needs 2 or more",
                                       k->name, *np);
    sb_kb_close(kb);
    return rc;
}

static const sb_config_kb *pick_kb(const sb_config *cfg, const char *name, char *err) {
    const sb_config_kb *k = name ? sb_config_find_kb(cfg, name) : cfg->n_kbs == 1 ? &cfg->kbs[0] : NULL;
    if (!k) sb_seterr(err, SB_ENOTFOUND, name ? "no knowledge base '%s' in the config" :
                      "%sgive --kb NAME (the config has %zu knowledge bases)", name ? name : "", cfg->n_kbs);
    return k;
}

static int adapt(const adapt_opts *o0, int *exit_code, char *err) {
    adapt_opts o = *o0;
    sb_config *cfg = NULL;
    sb_kb_passage *p = NULL;
    size_t np = 0;
    questions Q = { 0 };
    sb_encoder *enc = NULL;
    sb_lora *lora = NULL;
    sb_enc_trainer *tr = NULL;
    const sb_config_model *writer = NULL;
    const sb_config_kb *k;
    int rc = sb_config_load(o.config, &cfg, err);
    if (rc || !(k = pick_kb(cfg, o.kb, err))) { rc = rc ? rc : SB_ENOTFOUND; goto out; }
    const sb_config_model *m = sb_config_find_model(cfg, k->embed_model);
    if (!o.threads) o.threads = m->threads > 0 ? m->threads : 1;
    if (!o.questions_in && (rc = sb_kb_writer_pick(cfg, o.model, "--questions", &writer, err))) goto out;
    *exit_code = SB_EXIT_FAIL;
    if ((rc = load_passages(k, m, &p, &np, err))) goto out;
    const double t0 = sb_now_s();
    if (o.questions_in) {
        if ((rc = read_questions(o.questions_in, p, np, &Q, err)) == SB_EINVAL) *exit_code = SB_EXIT_CONFIG;
    } else {
        fprintf(stderr, "kb adapt: %s: %zu chunks; %d questions each by %s (%s)\n", k->name, np, o.per_chunk,
                writer->name, writer->gguf);
        rc = generate(&o, writer->gguf, p, np, &Q, err);
    }
    if (!rc && o.questions_out) rc = save_questions(o.questions_out, p, &Q, err);
    if (!rc && Q.n < 2)
        rc = sb_seterr(err, SB_EINVAL, "%zu usable question%s for %zu chunks: too few to train on (is the writer an "
                       "instruct model? try another --model)", Q.n, Q.n == 1 ? "" : "s", np);
    if (rc) goto out;
    const double t_gen = sb_now_s() - t0;
    if ((rc = sb_encoder_open(m->gguf, o.threads, -1, &enc, err))) goto out;
    if (o.layers > sb_encoder_n_layer(enc)) {
        rc = sb_seterr(err, SB_EINVAL, "--layers %d: the model has %d", o.layers, sb_encoder_n_layer(enc));
        *exit_code = SB_EXIT_CONFIG;
        goto out;
    }
    o.max_tokens = SB_MIN(o.max_tokens, sb_encoder_n_ctx(enc));
    const int dim = sb_encoder_dim(enc);
    recall fz, ad;
    int steps = 0;
    const double t1 = sb_now_s();
    if ((rc = sb_encoder_adapter_new(enc, o.rank, (float)o.alpha, o.layers, o.seed, &lora, err)) ||
        (o.norms && (rc = sb_encoder_adapter_add_norms(enc, lora, err))) ||
        (rc = sb_enc_trainer_new(enc, lora, o.max_tokens, &tr, err)) || (rc = sb_enc_trainer_set_fast(tr, 1, err)) ||
        (rc = prepare(tr, enc, &o, &Q, err)) || (rc = held_recall(tr, &Q, p, np, dim, &fz, err)) ||
        (rc = train(tr, &o, &Q, p, np, dim, &steps, err)) || (rc = held_recall(tr, &Q, p, np, dim, &ad, err)))
        goto out;
    const double t_train = sb_now_s() - t1;
    const double d = fz.n ? fz.n : 1;
    fprintf(stderr, "kb adapt: held-out questions (%d of %zu): recall@1 frozen %.3f, adapted %.3f; recall@3 frozen "
            "%.3f, adapted %.3f; MRR@10 frozen %.3f, adapted %.3f\n", fz.n, Q.n, fz.r1 / d, ad.r1 / d, fz.r3 / d,
            ad.r3 / d, fz.rr / d, ad.rr / d);
    /* The whole ranking, not recall@3 alone: on a slice of a few dozen
     * easy generated questions recall@3 moves by one question at a time. */
    if (ad.rr < fz.rr && !o.force) {
        fprintf(stderr, "kb adapt: not writing %s: the adapted encoder's held-out MRR is below the frozen "
                "one's (--force writes it anyway)\n", o.out);
        *exit_code = EXIT_WORSE;
        goto out;
    }
    if ((rc = sb_lora_save(lora, o.out, err))) goto out;
    printf("kb adapt: wrote %s (%zu questions %s in %.1f s; %d steps in %.1f s)\n"
           "use it: models.%s.adapters: {%s: %s} and knowledge.%s.adapter: %s; or try it first with\n"
           "  switchboard kb eval -c %s --kb %s --adapter %s QUESTIONS.tsv\n",
           o.out, Q.n, o.questions_in ? "read" : "generated", t_gen, steps, t_train, k->embed_model, k->name, o.out,
           k->name, k->name, o.config, k->name, o.out);
    *exit_code = SB_EXIT_OK;
out:
    sb_enc_trainer_free(tr);
    sb_lora_free(lora);
    sb_encoder_free(enc);
    questions_free(&Q);
    sb_kb_passages_free(p, np);
    sb_config_free(cfg);
    return rc;
}

int kb_cmd_adapt(int argc, char **argv) {
    adapt_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc > 0 ? SB_EXIT_OK : SB_EXIT_CONFIG;
    char err[SB_ERR_LEN] = "";
    int exit_code = SB_EXIT_CONFIG;
    if ((rc = adapt(&o, &exit_code, err))) fprintf(stderr, "kb adapt: %s\n", err[0] ? err : sb_strerror(rc));
    return rc && exit_code == SB_EXIT_OK ? SB_EXIT_FAIL : exit_code;
}
