/* cli_route.c - `switchboard route eval`: how well a pipeline's intent stage
 * routes a labelled set of calls, in process.
 *
 * The stage's model must be an encoder (sb_encoder.h). Its labels'
 * descriptions and examples, and its out_of_scope examples, are embedded
 * and train a classifier (sb_classify.h); every line of the test file is
 * embedded and classified. The report is what an operator needs to accept
 * a config change: accuracy overall, per language and per style, the
 * confusion matrix, expected calibration error, reject rate and accuracy on
 * accepted calls at min_confidence, latency per call. --min-accuracy turns
 * it into a CI gate (exit 3 below it, so a broken setup - exit 1 or 2 -
 * is told apart from a regression).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/router_internal.h"
#include "router/classify/sb_classify.h"
#include "common/sb_cmd.h"
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_lora.h"

#define EXIT_BELOW 3            /* accuracy below --min-accuracy */
#define MAX_LINE 16384          /* a rambling call fits; longer lines are an error, not cut silently */
#define MAX_TAGS 16             /* distinct languages / styles reported */
#define ECE_BINS 10

typedef struct {
    const char *config, *pipeline, *stage, *file;
    const char *adapter;        /* --adapter FILE; else the model entry's adapter:, if any */
    int no_adapter;
    int method;                 /* sb_cls_method; -1 until resolved: the stage's classifier: key */
    int max_examples;           /* per label; 0 = all */
    int threads, json, verbose, no_desc, no_oos, k, center;
    int dialogue, sweep;        /* --dialogue, --sweep-margins (1) or --sweep-refusal (2) */
    double clarify_margin;      /* < 0: the stage's clarify.margin */
    double refusal_margin;      /* < 0: the stage's clarify.refusal_margin */
    double max_asked;           /* --max-asked; < 0: no gate */
    double desc_weight;         /* < 0: the classifier's default */
    double lexical;             /* --lexical W; < 0: the stage's lexical: */
    int subwords;               /* --subwords 1 / --no-subwords 0; -1: SB_LEX_DEFAULT_FLAGS */
    double min_conf, min_acc;   /* min_conf < 0: the stage's min_confidence */
} opts;

typedef struct {
    int expected, got;          /* class indices; n_labels = out_of_scope */
    int lang, style;            /* tag indices */
    float conf, margin, ms;     /* margin: the method's top-2 score gap, what hybrid_margin compares */
    char *text;
    sb_cls_result r;            /* the whole verdict, for --dialogue */
} call;

typedef struct {
    char *names[MAX_TAGS];
    int n;
} tags;

typedef struct {
    sb_encoder *enc;
    struct sb_lora *lora;       /* the encoder's adapter, or NULL */
    sb_classifier *cls;
    int dim, lex_dim;           /* the classifier's: the encoder's dimension + lex_dim */
    unsigned lex_flags;
    float lex_weight;           /* reported only when lex_dim > 0: without, the report is as before */
    const sb_stage *st;
    int n_labels;
    call *calls;
    size_t n;
    tags langs, styles;
    double train_s;
    int n_train;
} eval;

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard route eval -c CONFIG --pipeline P [options] FILE.tsv\n"
        "\n"
        "Classify every call of FILE.tsv with the pipeline's intent stage, in process,\n"
        "and report accuracy (overall, per language, per style), the confusion matrix,\n"
        "expected calibration error, reject rate and accuracy on accepted calls at\n"
        "min_confidence, and latency per call. The stage's model must be an encoder\n"
        "(multilingual-e5); its labels' descriptions and examples and its out_of_scope\n"
        "examples are the training data.\n"
        "\n"
        "FILE.tsv: '#' comments; label<TAB>utterance, or label<TAB>lang<TAB>utterance\n"
        "[<TAB>style]; label out_of_scope for calls no label takes; \\n \\t \\r \\\\ escapes.\n"
        "\n"
        "  -c, --config FILE       the runtime config\n"
        "  -p, --pipeline NAME     the pipeline\n"
        "      --stage NAME        its intent stage (default: the first)\n"
        "      --adapter FILE      a LoRA adapter for the encoder (route train's output)\n"
        "                          instead of the model entry's adapter:\n"
        "      --no-adapter        the frozen encoder, even if the entry names an adapter\n"
        "      --method M          centroid | 1nn | knn | logreg (default: the stage's\n"
        "                          classifier:, else centroid)\n"
        "      --k N               knn neighbours (default 5)\n"
        "      --examples N        use only the first N examples of each label\n"
        "      --no-desc           leave the labels' descriptions out\n"
        "      --desc-weight N     a description counts as N examples in a centroid (default 1)\n"
        "      --no-center         compare raw vectors (default: the training vectors'\n"
        "                          mean is subtracted first; --center says so explicitly)\n"
        "      --no-oos            leave the out_of_scope examples out\n"
        "      --lexical W         the call's hashed words beside its embedding, weighted W\n"
        "                          (default: the stage's lexical:, else 0 = none)\n"
        "      --subwords, --no-subwords  with --lexical: character trigrams inside Latin\n"
        "                          words too, or not (default: what stages use)\n"
        "      --min-confidence X  reject below X (default: the stage's min_confidence)\n"
        "      --min-accuracy X    exit 3 when overall accuracy is below X (0-1)\n"
        "      --json              one JSON object instead of the text report\n"
        "      --dialogue          play each call as a conversation with a simulated caller\n"
        "                          through the stage's clarify: steps (docs/ROUTING.md,\n"
        "                          \"Dialogue-level routing\"): dialogue accuracy, share of\n"
        "                          calls asked, single-shot accuracy; --min-accuracy then\n"
        "                          gates the dialogue accuracy\n"
        "      --clarify-margin X  with --dialogue: ask below this top-2 margin (default:\n"
        "                          the stage's clarify.margin; 0 never asks)\n"
        "      --max-asked X       with --dialogue: exit 3 when more than this share of\n"
        "                          calls (0-1) is asked\n"
        "      --sweep-margins     with --dialogue: also the same calls at margins 0-0.7\n"
        "                          (to choose clarify.margin on a dev set, never the test set)\n"
        "      --refusal-margin X  with --dialogue: before a refusal, offer the best in-scope\n"
        "                          label when within X of out_of_scope (default: the stage's\n"
        "                          clarify.refusal_margin, else clarify.margin)\n"
        "      --sweep-refusal     with --dialogue: also the same calls at refusal margins\n"
        "                          from clarify.margin to 3 (chosen on a dev set too)\n"
        "  -t, --threads N         encoder threads (default 1)\n"
        "  -v, --verbose           every call, not only the misses (with --json: \"calls\"\n"
        "                          instead of \"misses\", each with its margin and ms)\n"
        "  -h, --help              this help\n"
        "\n"
        "Exit: 0, 1 runtime error, 2 usage/config error, 3 below --min-accuracy.\n");
}

static int parse_opts(int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"config", 1, 0, 'c'}, {"pipeline", 1, 0, 'p'}, {"stage", 1, 0, 'S'}, {"method", 1, 0, 'm'},
        {"k", 1, 0, 'k'}, {"center", 0, 0, 'Z'}, {"no-center", 0, 0, 'N'}, {"desc-weight", 1, 0, 'W'}, {"examples", 1, 0, 'e'}, {"no-desc", 0, 0, 'D'}, {"no-oos", 0, 0, 'O'},
        {"min-confidence", 1, 0, 'C'}, {"min-accuracy", 1, 0, 'A'}, {"json", 0, 0, 'j'},
        {"threads", 1, 0, 't'}, {"verbose", 0, 0, 'v'}, {"help", 0, 0, 'h'},
        {"dialogue", 0, 0, 'G'}, {"clarify-margin", 1, 0, 'M'}, {"sweep-margins", 0, 0, 'w'},
        {"max-asked", 1, 0, 'X'}, {"refusal-margin", 1, 0, 'R'}, {"sweep-refusal", 0, 0, 'F'}, {"adapter", 1, 0, 'a'}, {"no-adapter", 0, 0, 'n'},
        {"lexical", 1, 0, 'L'}, {"subwords", 0, 0, 'U'}, {"no-subwords", 0, 0, 'u'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->method = -1, o->threads = 1, o->min_conf = -1, o->min_acc = -1, o->desc_weight = -1, o->center = 1;
    o->clarify_margin = -1, o->refusal_margin = -1, o->max_asked = -1, o->lexical = -1, o->subwords = -1;
    int ch;
    int64_t v;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:p:t:vh", lo, NULL)) != -1) {
        switch (ch) {
        case 'c': o->config = optarg; break;
        case 'p': o->pipeline = optarg; break;
        case 'S': o->stage = optarg; break;
        case 'a': o->adapter = optarg; break;
        case 'n': o->no_adapter = 1; break;
        case 'm':
            if ((o->method = sb_cls_method_parse(optarg)) < 0) {
                fprintf(stderr, "route eval: --method expects centroid, 1nn, knn or logreg, got '%s'\n", optarg);
                return -1;
            }
            break;
        case 'k':
            if (sb_opt_int("route eval", "--k", optarg, 1, 64, &v)) return -1;
            o->k = (int)v;
            break;
        case 'e':
            if (sb_opt_int("route eval", "--examples", optarg, 1, 10000, &v)) return -1;
            o->max_examples = (int)v;
            break;
        case 't':
            if (sb_opt_int("route eval", "--threads", optarg, 1, 256, &v)) return -1;
            o->threads = (int)v;
            break;
        case 'D': o->no_desc = 1; break;
        case 'Z': o->center = 1; break;
        case 'N': o->center = 0; break;
        case 'W':
            if (sb_opt_int("route eval", "--desc-weight", optarg, 0, 100, &v)) return -1;
            o->desc_weight = (double)v;
            break;
        case 'O': o->no_oos = 1; break;
        case 'C': if (sb_opt_num("route eval", "--min-confidence", optarg, 0, 1, &o->min_conf)) return -1; break;
        case 'A': if (sb_opt_num("route eval", "--min-accuracy", optarg, 0, 1, &o->min_acc)) return -1; break;
        case 'X': if (sb_opt_num("route eval", "--max-asked", optarg, 0, 1, &o->max_asked)) return -1; break;
        case 'j': o->json = 1; break;
        case 'G': o->dialogue = 1; break;
        case 'w': o->sweep = 1; break;
        case 'F': o->sweep = 2; break;
        case 'R': if (sb_opt_num("route eval", "--refusal-margin", optarg, 0, 10, &o->refusal_margin)) return -1; break;
        case 'M': if (sb_opt_num("route eval", "--clarify-margin", optarg, 0, 2, &o->clarify_margin)) return -1; break;
        case 'L': if (sb_opt_num("route eval", "--lexical", optarg, 0, 10, &o->lexical)) return -1; break;
        case 'U': o->subwords = 1; break;
        case 'u': o->subwords = 0; break;
        case 'v': o->verbose = 1; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
    }
    if ((o->sweep || o->clarify_margin >= 0 || o->refusal_margin >= 0 || o->max_asked >= 0) && !o->dialogue) {
        fprintf(stderr, "route eval: --clarify-margin, --refusal-margin, --max-asked and --sweep-margins/--sweep-refusal "
                        "go with --dialogue\n");
        return -1;
    }
    if (optind + 1 != argc || !o->config || !o->pipeline) {
        fprintf(stderr, "route eval: give -c CONFIG, --pipeline P and one FILE.tsv\n");
        return -1;
    }
    o->file = argv[optind];
    return 0;
}

/* ------------------------------------------------------------ training */

static const sb_stage *find_stage(const sb_pipeline *p, const char *name) {
    for (size_t i = 0; i < p->n_stages; i++)
        if (p->stages[i].kind == SB_STAGE_INTENT && (!name || !strcmp(p->stages[i].name, name)))
            return &p->stages[i];
    return NULL;
}

/* The vector the classifier takes for text (ev->dim floats): its
 * embedding, and its words beside it when lexical, as the router's intent
 * stage builds it (router/run/stage_intent.c). */
static int embed(eval *ev, const char *text, float *v, char *err) {
    int rc = sb_encoder_embed(ev->enc, SB_EMBED_QUERY, text, strlen(text), v, NULL, err);
    if (!rc && ev->lex_dim) sb_lex_append(v, ev->dim - ev->lex_dim, text, strlen(text), ev->lex_flags, v);
    return rc;
}

/* Embed the stage's training data into a new classifier. */
static int train(eval *ev, const opts *o, char *err) {
    const sb_stage *st = ev->st;
    const char *names[SB_CLS_MAX_LABELS];
    for (size_t i = 0; i < st->n_labels; i++) names[i] = st->labels[i].name;
    sb_cls_opts co;
    sb_cls_opts_default(&co);
    co.method = (sb_cls_method)o->method;
    if (o->k) co.k = o->k;
    if (o->desc_weight >= 0) co.desc_weight = (float)o->desc_weight;
    if (o->no_desc) co.desc_weight = 0;
    co.center = o->center;
    double lexical = o->lexical >= 0 ? o->lexical : st->lexical;
    if (lexical > 0) co.lex_dim = SB_LEX_DIM, co.lex_weight = (float)lexical;
    ev->lex_dim = co.lex_dim, ev->lex_weight = co.lex_weight;
    ev->lex_flags = o->subwords < 0 ? SB_LEX_DEFAULT_FLAGS : o->subwords ? SB_LEX_SUBWORDS : 0;
    ev->dim = sb_encoder_dim(ev->enc) + co.lex_dim;
    int rc = sb_cls_new(ev->dim, (int)st->n_labels, names, &co, &ev->cls, err);
    if (rc) return rc;
    float *v = sb_malloc((size_t)ev->dim * sizeof *v);
    if (!v) return sb_seterr(err, SB_ENOMEM, "out of memory");
    double t0 = sb_now_s();
    for (size_t i = 0; i < st->n_labels && !rc; i++) {
        const sb_label *l = &st->labels[i];
        if (l->description && !o->no_desc && !(rc = embed(ev, l->description, v, err)))
            rc = sb_cls_set_description(ev->cls, (int)i, v, err);
        for (size_t k = 0; k < l->n_examples && !rc && (!o->max_examples || (int)k < o->max_examples); k++)
            if (!(rc = embed(ev, l->examples[k], v, err))) rc = sb_cls_add_example(ev->cls, (int)i, v, err), ev->n_train++;
    }
    /* examples_file lines (a label) and out_of_scope examples (-1), as the
     * runtime's intent stage trains on them (router/run/intent_embed.c) */
    for (size_t k = 0; k < st->n_extra && !rc; k++) {
        const int label = st->extra_label[k];
        if (label < 0 && o->no_oos) continue;
        if (!(rc = embed(ev, st->extra_text[k], v, err)))
            rc = sb_cls_add_example(ev->cls, label < 0 ? SB_CLS_OOS : label, v, err), ev->n_train++;
    }
    if (!rc) rc = sb_cls_train(ev->cls, err);
    ev->train_s = sb_now_s() - t0;
    sb_free(v);
    return rc;
}

/* ------------------------------------------------------------ test file */

static int tag_index(tags *t, const char *s, size_t n) {
    for (int i = 0; i < t->n; i++)
        if (strlen(t->names[i]) == n && !memcmp(t->names[i], s, n)) return i;
    if (t->n == MAX_TAGS) return MAX_TAGS - 1;   /* folded into the last one; a test set has a handful */
    t->names[t->n] = strndup(s, n);
    return t->names[t->n] ? t->n++ : -1;
}

static void unescape(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '\\' && r[1]) {
            char c = *++r;
            *w++ = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

static int class_of(const eval *ev, const char *s, size_t n) {
    for (int i = 0; i < ev->n_labels; i++)
        if (strlen(ev->st->labels[i].name) == n && !memcmp(ev->st->labels[i].name, s, n)) return i;
    if (n == strlen(SB_CLS_OOS_NAME) && !memcmp(s, SB_CLS_OOS_NAME, n)) return ev->n_labels;
    return -1;
}

/* One line into ev->calls; 0, or SB_EFORMAT with the reason in err. */
static int parse_line(eval *ev, char *line, int lineno, char *err) {
    char *f[4] = {0};
    int nf = 0;
    for (char *p = line; nf < 4; nf++) {
        f[nf] = p;
        if (!(p = strchr(p, '\t'))) { nf++; break; }
        *p++ = 0;
    }
    if (nf < 2) return sb_seterr(err, SB_EFORMAT, "line %d: expected label<TAB>utterance", lineno);
    char *text = nf == 2 ? f[1] : f[2];
    int cls = class_of(ev, f[0], strlen(f[0]));
    if (cls < 0)
        return sb_seterr(err, SB_EFORMAT, "line %d: '%s' is not a label of stage '%s' (nor %s)", lineno, f[0],
                         ev->st->name, SB_CLS_OOS_NAME);
    const char *lang = f[1];
    if (nf == 2) {   /* no language column: Chinese if any CJK ideograph (U+4E00-9FFF: E4-E9 lead bytes) */
        lang = "en";
        for (const unsigned char *p = (const unsigned char *)text; *p; p++)
            if (*p >= 0xE4 && *p <= 0xE9) { lang = "zh"; break; }
    }
    call *c = &ev->calls[ev->n];
    c->expected = cls;
    c->lang = tag_index(&ev->langs, lang, strlen(lang));
    c->style = tag_index(&ev->styles, nf == 4 ? f[3] : "-", nf == 4 ? strlen(f[3]) : 1);
    unescape(text);
    c->text = sb_strdup(text);
    if (c->lang < 0 || c->style < 0 || !c->text) return sb_seterr(err, SB_ENOMEM, "out of memory");
    ev->n++;
    return 0;
}

static int read_calls(eval *ev, const char *path, char *err) {
    FILE *f = fopen(path, "r");
    if (!f) return sb_seterr(err, SB_EIO, "cannot read %s: %m", path);
    char *line = NULL;
    size_t cap = 0, lcap = 0;
    ssize_t got;
    int rc = 0, lineno = 0;
    while (!rc && (got = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        /* A NUL would end the utterance (a C string) there, silently. */
        const char *nul = memchr(line, '\0', n);
        if (nul) {
            rc = sb_seterr(err, SB_EFORMAT, "%s:%d: byte %zu is NUL (\\0): not allowed in a line", path, lineno,
                           (size_t)(nul - line) + 1);
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n > MAX_LINE - 2) {
            rc = sb_seterr(err, SB_EFORMAT, "%s:%d: line longer than %d bytes", path, lineno, MAX_LINE - 2);
            break;
        }
        if (!n || line[0] == '#') continue;
        if (ev->n == cap) {
            call *nc = sb_realloc(ev->calls, (cap = cap ? cap * 2 : 256) * sizeof *nc);
            if (!nc) { rc = SB_ENOMEM; break; }
            ev->calls = nc;
        }
        char lerr[SB_ERR_LEN];
        if ((rc = parse_line(ev, line, lineno, lerr))) sb_seterr(err, rc, "%s: %s", path, lerr);
    }
    if (!rc && ev->n == 0) rc = sb_seterr(err, SB_EFORMAT, "%s: no calls", path);
    free(line);                                 /* getline's */
    fclose(f);
    return rc;
}

static int classify_all(eval *ev, char *err) {
    float *v = sb_malloc((size_t)ev->dim * sizeof *v);
    if (!v) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < ev->n && !rc; i++) {
        call *c = &ev->calls[i];
        double t0 = sb_now_s();
        sb_cls_result r;
        if (!(rc = embed(ev, c->text, v, err))) rc = sb_cls_classify(ev->cls, v, &r);
        c->ms = (float)((sb_now_s() - t0) * 1000.0);
        c->r = r;
        c->got = r.top;
        c->conf = r.confidence;
        c->margin = r.margin;
    }
    sb_free(v);
    return rc;
}

/* ------------------------------------------------------------ report */

typedef struct {
    size_t n_in, rej_in, n_oos, rej_oos, accepted, acc_right;
} gate;

static const char *cls_name(const eval *ev, int idx) { return sb_cls_label_name(ev->cls, idx); }

/* A call is rejected (sent to the fallback) when it lands in out_of_scope
 * or its confidence is below t. */
static gate at_threshold(const eval *ev, double t) {
    gate g = {0};
    for (size_t i = 0; i < ev->n; i++) {
        const call *c = &ev->calls[i];
        int rej = c->got == ev->n_labels || c->conf < t, oos = c->expected == ev->n_labels;
        if (oos) g.n_oos++, g.rej_oos += rej;
        else g.n_in++, g.rej_in += rej;
        if (!rej) g.accepted++, g.acc_right += c->got == c->expected;
    }
    return g;
}

static double ratio(size_t a, size_t b) { return b ? (double)a / (double)b : 0; }

typedef struct {
    size_t right;
    double acc, ece;
    size_t tag_n[2][MAX_TAGS], tag_right[2][MAX_TAGS];
    double p50, p95, pmax;
    double min_conf;
    gate g;
} summary;

static int summarise(const eval *ev, const opts *o, summary *s) {
    memset(s, 0, sizeof *s);
    float *conf = sb_malloc(ev->n * sizeof *conf);
    double *ms = sb_malloc(ev->n * sizeof *ms);
    int *ok = sb_malloc(ev->n * sizeof *ok);
    if (!conf || !ms || !ok) {
        sb_free(conf), sb_free(ms), sb_free(ok);
        return SB_ENOMEM;
    }
    for (size_t i = 0; i < ev->n; i++) {
        const call *c = &ev->calls[i];
        ok[i] = c->got == c->expected;
        conf[i] = c->conf, ms[i] = c->ms;
        s->right += (size_t)ok[i];
        s->tag_n[0][c->lang]++, s->tag_right[0][c->lang] += (size_t)ok[i];
        s->tag_n[1][c->style]++, s->tag_right[1][c->style] += (size_t)ok[i];
    }
    s->acc = ratio(s->right, ev->n);
    s->ece = sb_cls_ece(conf, ok, ev->n, ECE_BINS);
    sb_sort_doubles(ms, ev->n);
    s->p50 = sb_percentile(ms, ev->n, 0.5), s->p95 = sb_percentile(ms, ev->n, 0.95), s->pmax = ms[ev->n - 1];
    s->min_conf = o->min_conf >= 0 ? o->min_conf : ev->st->min_confidence;
    s->g = at_threshold(ev, s->min_conf);
    sb_free(conf), sb_free(ms), sb_free(ok);
    return 0;
}

static const double SWEEP[] = {0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9};
#define N_SWEEP (sizeof SWEEP / sizeof SWEEP[0])

static void print_text(const eval *ev, const opts *o, const summary *s) {
    const tags *tg[2] = {&ev->langs, &ev->styles};
    int nc = sb_cls_n_classes(ev->cls), all = ev->n_labels + 1;
    printf("route eval: %s, pipeline %s, stage %s\n", o->config, o->pipeline, ev->st->name);
    if (ev->lora) printf("adapter %s\n", o->adapter ? o->adapter : "(the model entry's)");
    if (ev->lex_dim) printf("lexical %g%s\n", (double)ev->lex_weight, ev->lex_flags & SB_LEX_SUBWORDS ? ", subwords" : "");
    printf("method %s, temperature %.4f; trained on %d examples%s in %.2f s\n",
           sb_cls_method_name(o->method),
           (double)sb_cls_temperature(ev->cls), ev->n_train, o->no_desc ? "" : " + descriptions", ev->train_s);
    printf("accuracy        %.4f  (%zu/%zu)\n", s->acc, s->right, ev->n);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < tg[t]->n; i++)
            printf("  %-5s %-8s %.4f  (%zu/%zu)\n", t ? "style" : "lang", tg[t]->names[i],
                   ratio(s->tag_right[t][i], s->tag_n[t][i]), s->tag_right[t][i], s->tag_n[t][i]);
    printf("ECE (%d bins)    %.4f\n", ECE_BINS, s->ece);
    printf("min_confidence %.2f: rejected %zu/%zu in-scope calls (%.1f%%), accuracy on accepted %.4f (%zu/%zu), "
           "out_of_scope rejected %zu/%zu\n", s->min_conf, s->g.rej_in, s->g.n_in, 100 * ratio(s->g.rej_in, s->g.n_in),
           ratio(s->g.acc_right, s->g.accepted), s->g.acc_right, s->g.accepted, s->g.rej_oos, s->g.n_oos);
    printf("latency ms/call p50 %.1f  p95 %.1f  max %.1f\n", (double)s->p50, (double)s->p95, (double)s->pmax);
    printf("\nmin_conf  rejected(in-scope)  acc(accepted)  oos rejected\n");
    for (size_t k = 0; k < N_SWEEP; k++) {
        gate g = at_threshold(ev, SWEEP[k]);
        printf("  %.2f    %5.1f%%              %.4f         %zu/%zu\n", SWEEP[k], 100 * ratio(g.rej_in, g.n_in),
               ratio(g.acc_right, g.accepted), g.rej_oos, g.n_oos);
    }
    printf("\nconfusion (rows expected, columns got; labels by number)\n     ");
    for (int j = 0; j < all; j++) printf("%4d", j);
    putchar('\n');
    for (int i = 0; i < all; i++) {
        printf("%3d  ", i);
        for (int j = 0; j < all; j++) {
            int n = 0;
            for (size_t k = 0; k < ev->n; k++) n += ev->calls[k].expected == i && ev->calls[k].got == j;
            printf(n ? "%4d" : "   .", n);
        }
        printf("  %s%s\n", cls_name(ev, i), i == ev->n_labels && nc == ev->n_labels ? " (not trained)" : "");
    }
    printf("\n%s\n", o->verbose ? "calls:" : "misses:");
    for (size_t k = 0; k < ev->n; k++) {
        const call *c = &ev->calls[k];
        if (!o->verbose && c->got == c->expected) continue;
        printf("  %s %s -> %s (%.2f, margin %.3f) %s\n", c->got == c->expected ? "ok  " : "MISS",
               cls_name(ev, c->expected), cls_name(ev, c->got), (double)c->conf, (double)c->margin, c->text);
    }
}

static void json_rate(sb_jw *w, const char *key, size_t a, size_t b) {
    sb_jw_key(w, key);
    sb_jw_obj(w);
    sb_jw_key(w, "n"), sb_jw_int(w, (int64_t)b);
    sb_jw_key(w, "correct"), sb_jw_int(w, (int64_t)a);
    sb_jw_key(w, "accuracy"), sb_jw_num(w, ratio(a, b));
    sb_jw_obj_end(w);
}

static void json_gate(sb_jw *w, const gate *g, double t) {
    sb_jw_obj(w);
    sb_jw_key(w, "min_confidence"), sb_jw_num(w, t);
    sb_jw_key(w, "rejected_in_scope"), sb_jw_int(w, (int64_t)g->rej_in);
    sb_jw_key(w, "in_scope"), sb_jw_int(w, (int64_t)g->n_in);
    sb_jw_key(w, "reject_rate"), sb_jw_num(w, ratio(g->rej_in, g->n_in));
    sb_jw_key(w, "accepted"), sb_jw_int(w, (int64_t)g->accepted);
    sb_jw_key(w, "accepted_accuracy"), sb_jw_num(w, ratio(g->acc_right, g->accepted));
    sb_jw_key(w, "out_of_scope_rejected"), sb_jw_int(w, (int64_t)g->rej_oos);
    sb_jw_key(w, "out_of_scope"), sb_jw_int(w, (int64_t)g->n_oos);
    sb_jw_obj_end(w);
}

static int print_json(const eval *ev, const opts *o, const summary *s) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "pipeline"), sb_jw_str(&w, o->pipeline);
    sb_jw_key(&w, "stage"), sb_jw_str(&w, ev->st->name);
    sb_jw_key(&w, "method"), sb_jw_str(&w, sb_cls_method_name(o->method));
    if (ev->lex_dim) sb_jw_key(&w, "lexical"), sb_jw_num(&w, ev->lex_weight);
    sb_jw_key(&w, "temperature"), sb_jw_num(&w, sb_cls_temperature(ev->cls));
    sb_jw_key(&w, "train_examples"), sb_jw_int(&w, ev->n_train);
    json_rate(&w, "overall", s->right, ev->n);
    const tags *tg[2] = {&ev->langs, &ev->styles};
    for (int t = 0; t < 2; t++) {
        sb_jw_key(&w, t ? "by_style" : "by_lang");
        sb_jw_obj(&w);
        for (int i = 0; i < tg[t]->n; i++) json_rate(&w, tg[t]->names[i], s->tag_right[t][i], s->tag_n[t][i]);
        sb_jw_obj_end(&w);
    }
    sb_jw_key(&w, "accuracy"), sb_jw_num(&w, s->acc);
    sb_jw_key(&w, "ece"), sb_jw_num(&w, s->ece);
    sb_jw_key(&w, "reject"), json_gate(&w, &s->g, s->min_conf);
    sb_jw_key(&w, "sweep");
    sb_jw_arr(&w);
    for (size_t k = 0; k < N_SWEEP; k++) {
        gate g = at_threshold(ev, SWEEP[k]);
        json_gate(&w, &g, SWEEP[k]);
    }
    sb_jw_arr_end(&w);
    sb_jw_key(&w, "latency_ms");
    sb_jw_obj(&w);
    sb_jw_key(&w, "p50"), sb_jw_num(&w, s->p50);
    sb_jw_key(&w, "p95"), sb_jw_num(&w, s->p95);
    sb_jw_key(&w, "max"), sb_jw_num(&w, s->pmax);
    sb_jw_obj_end(&w);
    sb_jw_key(&w, "labels");
    sb_jw_arr(&w);
    for (int i = 0; i <= ev->n_labels; i++) sb_jw_str(&w, cls_name(ev, i));
    sb_jw_arr_end(&w);
    sb_jw_key(&w, "confusion");
    sb_jw_arr(&w);
    for (int i = 0; i <= ev->n_labels; i++) {
        sb_jw_arr(&w);
        for (int j = 0; j <= ev->n_labels; j++) {
            int n = 0;
            for (size_t k = 0; k < ev->n; k++) n += ev->calls[k].expected == i && ev->calls[k].got == j;
            sb_jw_int(&w, n);
        }
        sb_jw_arr_end(&w);
    }
    sb_jw_arr_end(&w);
    sb_jw_key(&w, o->verbose ? "calls" : "misses");
    sb_jw_arr(&w);
    for (size_t k = 0; k < ev->n; k++) {
        const call *c = &ev->calls[k];
        if (c->got == c->expected && !o->verbose) continue;
        sb_jw_obj(&w);
        sb_jw_key(&w, "expected"), sb_jw_str(&w, cls_name(ev, c->expected));
        sb_jw_key(&w, "got"), sb_jw_str(&w, cls_name(ev, c->got));
        sb_jw_key(&w, "confidence"), sb_jw_num(&w, c->conf);
        sb_jw_key(&w, "margin"), sb_jw_num(&w, c->margin);
        sb_jw_key(&w, "ms"), sb_jw_num(&w, c->ms);
        sb_jw_key(&w, "text"), sb_jw_str(&w, c->text);
        sb_jw_obj_end(&w);
    }
    sb_jw_arr_end(&w);
    sb_jw_obj_end(&w);
    int rc = w.oom ? SB_ENOMEM : 0;
    if (!rc) puts(w.p);
    sb_jw_free(&w);
    return rc;
}

/* --dialogue: the calls of the first verdicts are routed again only when
 * they say something else; the encoder is deterministic, so a repeat of
 * the first words gets the first verdict. */
typedef struct {
    eval *ev;
    float *v;
} dialog_ctx;

static int route_again(void *ctx, size_t k, const char *text, sb_cls_result *r, char *err) {
    dialog_ctx *d = ctx;
    if (!strcmp(text, d->ev->calls[k].text)) {
        *r = d->ev->calls[k].r;
        return 0;
    }
    int rc = embed(d->ev, text, d->v, err);
    return rc ? rc : sb_cls_classify(d->ev->cls, d->v, r);
}

static double dialogue(eval *ev, const opts *o, const char *gguf, double *asked, char *err) {
    sb_stage st = *ev->st;
    if (o->clarify_margin >= 0) st.clarify_margin = o->clarify_margin;
    if (o->refusal_margin >= 0) st.clarify_refusal = o->refusal_margin;
    rt_dialog_call *dc = sb_calloc(ev->n, sizeof *dc);
    dialog_ctx ctx = { ev, sb_malloc((size_t)ev->dim * sizeof(float)) };
    double acc = -1;
    if (!dc || !ctx.v) {
        sb_seterr(err, SB_ENOMEM, "out of memory");
        goto out;
    }
    rt_dialog_opts d = { .config = o->config, .pipeline = o->pipeline, .encoder = gguf,
                         .method = sb_cls_method_name(o->method), .st = &st,
                         .min_conf = o->min_conf >= 0 ? o->min_conf : st.min_confidence, .json = o->json,
                         .verbose = o->verbose, .sweep = o->sweep, .langs = (const char *const *)ev->langs.names,
                         .n_langs = ev->langs.n, .calls = dc, .n = ev->n, .route = route_again, .ctx = &ctx };
    for (size_t i = 0; i < ev->n; i++) {
        const call *c = &ev->calls[i];
        dc[i] = (rt_dialog_call){ c->expected, ev->langs.names[c->lang], c->lang, c->text };
        d.single_right += c->got == c->expected;
    }
    acc = rt_dialog_eval(&d, asked, err);
out:
    sb_free(dc);
    sb_free(ctx.v);
    return acc;
}

/* Print the report; the overall accuracy, or -1 when out of memory. */
static double report(const eval *ev, const opts *o) {
    summary s;
    if (summarise(ev, o, &s)) return -1;
    if (o->json) {
        if (print_json(ev, o, &s)) return -1;
    } else {
        print_text(ev, o, &s);
    }
    return s.acc;
}

static void free_eval(eval *ev) {
    for (size_t i = 0; i < ev->n; i++) sb_free(ev->calls[i].text);
    sb_free(ev->calls);
    for (int i = 0; i < ev->langs.n; i++) free(ev->langs.names[i]);
    for (int i = 0; i < ev->styles.n; i++) free(ev->styles.names[i]);
    sb_cls_free(ev->cls);
    sb_encoder_free(ev->enc);
    sb_lora_free(ev->lora);
}

static int route_eval(int argc, char **argv) {
    opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc > 0 ? SB_EXIT_OK : SB_EXIT_CONFIG;
    char err[SB_ERR_LEN] = "";
    sb_config *cfg = NULL;
    sb_pipelines *ps = NULL;
    eval ev = {0};
    int exit_code = SB_EXIT_CONFIG;
    const sb_pipeline *p;
    const sb_config_model *m;
    if ((rc = sb_config_load(o.config, &cfg, err)) || (rc = sb_pipelines_load(cfg, &ps, err))) goto out;
    if (!(p = sb_pipelines_find(ps, o.pipeline))) {
        rc = sb_seterr(err, SB_ENOTFOUND, "%s: no pipeline '%s'", o.config, o.pipeline);
        goto out;
    }
    if (!(ev.st = find_stage(p, o.stage))) {
        rc = sb_seterr(err, SB_ENOTFOUND, "pipeline '%s' has no intent stage%s%s", o.pipeline, o.stage ? " " : "",
                       o.stage ? o.stage : "");
        goto out;
    }
    ev.n_labels = (int)ev.st->n_labels;
    if (o.method < 0) o.method = ev.st->classifier >= 0 ? ev.st->classifier : SB_CLS_CENTROID;
    m = sb_config_find_model(cfg, ev.st->model);
    if (!m || !m->gguf) {
        rc = sb_seterr(err, SB_EUNSUP, "stage '%s': model '%s' is not a local GGUF", ev.st->name, ev.st->model);
        goto out;
    }
    if ((rc = sb_encoder_open(m->gguf, o.threads, -1, &ev.enc, err))) {
        if (rc == SB_EUNSUP)
            sb_seterr(err, rc, "stage '%s': model '%s' (%s) is not an encoder model: route eval classifies by "
                      "embeddings", ev.st->name, ev.st->model, m->gguf);
        goto out;
    }
    if (!o.no_adapter && (o.adapter || m->adapter) &&
        ((rc = sb_encoder_adapter_load(ev.enc, o.adapter ? o.adapter : m->adapter, &ev.lora, err)) ||
         (rc = sb_encoder_set_adapter(ev.enc, ev.lora, err))))
        goto out;
    exit_code = SB_EXIT_FAIL;
    if ((rc = read_calls(&ev, o.file, err))) {
        exit_code = rc == SB_EFORMAT ? SB_EXIT_CONFIG : SB_EXIT_FAIL;
        goto out;
    }
    if ((rc = train(&ev, &o, err)) || (rc = classify_all(&ev, err))) goto out;
    double asked = 0;
    double acc = o.dialogue ? dialogue(&ev, &o, m->gguf, &asked, err) : report(&ev, &o);
    if (acc < 0) {
        rc = err[0] ? SB_EINVAL : SB_ENOMEM;
        goto out;
    }
    exit_code = SB_EXIT_OK;
    if (o.min_acc >= 0 && acc < o.min_acc) {
        fprintf(stderr, "route eval: accuracy %.4f is below --min-accuracy %.4f\n", acc, o.min_acc);
        exit_code = EXIT_BELOW;
    }
    if (o.max_asked >= 0 && asked > o.max_asked) {
        fprintf(stderr, "route eval: %.4f of the calls were asked, above --max-asked %.4f\n", asked, o.max_asked);
        exit_code = EXIT_BELOW;
    }
out:
    if (rc) fprintf(stderr, "route eval: %s\n", err[0] ? err : sb_strerror(rc));
    free_eval(&ev);
    sb_pipelines_free(ps);
    sb_config_free(cfg);
    return exit_code;
}

int sb_cmd_route(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "eval")) return route_eval(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "train")) return sb_route_train(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: switchboard route eval -c CONFIG --pipeline P [options] FILE.tsv\n"
               "       switchboard route train -c CONFIG --pipeline P [options] -o ADAPTER.gguf\n\n"
               "  eval   accuracy of a pipeline's intent stage on labelled calls (route eval --help)\n"
               "  train  adapt its encoder to the labels: a LoRA adapter (route train --help)\n");
        return SB_EXIT_OK;
    }
    fprintf(stderr, "usage: switchboard route eval -c CONFIG --pipeline P FILE.tsv (route eval --help)\n"
                    "       switchboard route train -c CONFIG --pipeline P -o ADAPTER.gguf (route train --help)\n");
    return SB_EXIT_CONFIG;
}
