/* classify.c - intent classification of sentence vectors (sb_classify.h).
 *
 * Everything is small and exact: ≤ 64 labels, tens of examples each, a few
 * hundred dimensions, so scores are plain dot-product loops and training is
 * full-batch. Training points are the examples plus (desc_weight > 0) one
 * point per label description; only examples are held out when fitting
 * the temperature, since descriptions are not calls.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "router/classify/sb_classify.h"
#include "common/sb_common.h"

#define LOGREG_FOLDS 5           /* cross-validation folds for logreg's temperature */
#define LOGREG_LR 1.0f           /* step on standardised features: the CE gradient is 1/2-Lipschitz there */
#define T_MIN 1e-3               /* temperature search range: cosines differ by ~0.01..0.3 */
#define T_MAX 1e2

struct sb_classifier {
    int dim, n_labels, n_classes;     /* n_classes = n_labels + 1 once an OOS example exists */
    char **names;
    sb_cls_opts o;
    float *x;                         /* points, n × dim: examples then (at train) descriptions */
    float *tx, *center;               /* centring: the points minus their mean, renormalised; the mean */
    const float *pts;                 /* what the scores use: x, or tx when centring */
    int *y;                           /* class of each point */
    unsigned char *is_desc;
    size_t n, cap, n_ex;              /* n_ex: points that are examples (held out for T) */
    float *desc;                      /* n_labels × dim */
    unsigned char *has_desc;
    int trained;
    float *csum;                      /* centroid: weighted sums, n_classes × dim */
    float *cnorm;                     /* their norms */
    float *W, *b, *mu;                /* logreg: n_classes × dim, n_classes, dim */
    float zscale;                     /* logreg: 1 / rms norm of the centred points */
    float T;
};

void sb_cls_opts_default(sb_cls_opts *o) {
    memset(o, 0, sizeof *o);
    o->method = SB_CLS_CENTROID;
    o->k = 5;
    o->desc_weight = 1.0f;
    o->l2 = 1e-3f;
    o->iters = 300;
    o->calibrate = 1;
    o->center = 1;              /* +2-3 points for every method on tests/data/routing_corpus.tsv (docs/ROUTING.md) */
}

static const char *const method_names[] = {"centroid", "1nn", "knn", "logreg"};

int sb_cls_method_parse(const char *s) {
    for (int i = 0; i < 4; i++)
        if (s && strcmp(s, method_names[i]) == 0) return i;
    return -1;
}

const char *sb_cls_method_name(sb_cls_method m) {
    return (unsigned)m < 4 ? method_names[m] : "?";
}

static float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- construction ---- */

int sb_cls_new(int dim, int n_labels, const char *const *names, const sb_cls_opts *opts, sb_classifier **out,
               char *err) {
    *out = NULL;
    if (dim < 1 || dim > SB_CLS_MAX_DIM || n_labels < 1 || n_labels > SB_CLS_MAX_LABELS)
        return sb_seterr(err, SB_EINVAL, "classifier: %d labels of dim %d (1..%d labels, 1..%d dims)", n_labels, dim,
                         SB_CLS_MAX_LABELS, SB_CLS_MAX_DIM);
    sb_classifier *c = sb_calloc(1, sizeof *c);
    if (!c) return sb_seterr(err, SB_ENOMEM, "classifier: out of memory");
    c->dim = dim;
    c->n_labels = c->n_classes = n_labels;
    if (opts) c->o = *opts;
    else sb_cls_opts_default(&c->o);
    if (c->o.k <= 0) c->o.k = 5;
    if (c->o.l2 <= 0) c->o.l2 = 1e-3f;
    if (c->o.iters <= 0) c->o.iters = 300;
    if ((unsigned)c->o.method > SB_CLS_LOGREG) {
        sb_free(c);
        return sb_seterr(err, SB_EINVAL, "classifier: unknown method %d", (int)c->o.method);
    }
    if (c->o.lex_dim < 0 || c->o.lex_dim >= dim || !(c->o.lex_weight >= 0 && isfinite(c->o.lex_weight))) {
        sb_seterr(err, SB_EINVAL, "classifier: lexical block of %d dims weighted %g in %d dims (needs "
                  "0 <= lex_dim < dim, a finite weight >= 0)", c->o.lex_dim, (double)c->o.lex_weight, dim);
        sb_free(c);
        return SB_EINVAL;
    }
    c->names = sb_calloc((size_t)n_labels, sizeof *c->names);
    c->desc = sb_calloc((size_t)n_labels * (size_t)dim, sizeof *c->desc);
    c->has_desc = sb_calloc((size_t)n_labels, 1);
    if (!c->names || !c->desc || !c->has_desc) goto fail;
    for (int i = 0; i < n_labels; i++) {
        c->names[i] = sb_strdup(names && names[i] ? names[i] : "");
        if (!c->names[i]) goto fail;
    }
    *out = c;
    return 0;
fail:
    sb_cls_free(c);
    return sb_seterr(err, SB_ENOMEM, "classifier: out of memory");
}

static void free_trained(sb_classifier *c) {
    sb_free(c->csum);
    sb_free(c->cnorm);
    sb_free(c->W);
    sb_free(c->b);
    sb_free(c->mu);
    sb_free(c->tx);
    sb_free(c->center);
    c->csum = c->cnorm = c->W = c->b = c->mu = c->tx = c->center = NULL;
    c->trained = 0;
}

void sb_cls_free(sb_classifier *c) {
    if (!c) return;
    free_trained(c);
    if (c->names)
        for (int i = 0; i < c->n_labels; i++) sb_free(c->names[i]);
    sb_free(c->names);
    sb_free(c->x);
    sb_free(c->y);
    sb_free(c->is_desc);
    sb_free(c->desc);
    sb_free(c->has_desc);
    sb_free(c);
}

static int finite_vec(const float *v, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

static int push_point(sb_classifier *c, int cls, const float *v, int is_desc) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        float *x = sb_realloc(c->x, cap * (size_t)c->dim * sizeof *x);
        if (!x) return SB_ENOMEM;
        c->x = x;
        int *y = sb_realloc(c->y, cap * sizeof *y);
        if (!y) return SB_ENOMEM;
        c->y = y;
        unsigned char *d = sb_realloc(c->is_desc, cap);
        if (!d) return SB_ENOMEM;
        c->is_desc = d;
        c->cap = cap;
    }
    memcpy(c->x + c->n * (size_t)c->dim, v, (size_t)c->dim * sizeof *v);
    c->y[c->n] = cls;
    c->is_desc[c->n] = (unsigned char)is_desc;
    c->n++;
    return 0;
}

/* Drop the description points a previous train appended (they are rebuilt). */
static void drop_desc_points(sb_classifier *c) {
    c->n = c->n_ex;
}

int sb_cls_add_example(sb_classifier *c, int label, const float *v, char *err) {
    if (label != SB_CLS_OOS && (label < 0 || label >= c->n_labels))
        return sb_seterr(err, SB_EINVAL, "classifier: label %d out of range", label);
    if (!finite_vec(v, c->dim)) return sb_seterr(err, SB_EINVAL, "classifier: example vector not finite");
    drop_desc_points(c);
    free_trained(c);
    int cls = label == SB_CLS_OOS ? c->n_labels : label;
    if (push_point(c, cls, v, 0) != 0) return sb_seterr(err, SB_ENOMEM, "classifier: out of memory");
    c->n_ex = c->n;
    if (cls == c->n_labels) c->n_classes = c->n_labels + 1;
    return 0;
}

int sb_cls_set_description(sb_classifier *c, int label, const float *v, char *err) {
    if (label < 0 || label >= c->n_labels)
        return sb_seterr(err, SB_EINVAL, "classifier: label %d out of range", label);
    if (!finite_vec(v, c->dim)) return sb_seterr(err, SB_EINVAL, "classifier: description vector not finite");
    free_trained(c);
    memcpy(c->desc + (size_t)label * c->dim, v, (size_t)c->dim * sizeof *v);
    c->has_desc[label] = 1;
    return 0;
}

/* ---- scores ---- */

static float point_weight(const sb_classifier *c, size_t i) {
    return c->is_desc[i] ? c->o.desc_weight : 1.0f;
}

/* Centroid score of class k, with point `ex` (or none: SIZE_MAX) taken out. */
static float centroid_score(const sb_classifier *c, const float *v, int k, size_t ex) {
    const float *s = c->csum + (size_t)k * c->dim;
    if (ex == SIZE_MAX || c->y[ex] != k) return c->cnorm[k] > 0 ? dot(v, s, c->dim) / c->cnorm[k] : -1.0f;
    const float *xe = c->pts + ex * (size_t)c->dim;
    float w = point_weight(c, ex), num = 0, nn = 0;
    for (int d = 0; d < c->dim; d++) {
        float t = s[d] - w * xe[d];
        num += v[d] * t;
        nn += t * t;
    }
    return nn > 1e-12f ? num / sqrtf(nn) : -1.0f;
}

/* The k best similarities (sorted, descending) among the points, except ex. */
static void knn_scores(const sb_classifier *c, const float *v, size_t ex, float *s) {
    int k = c->o.k, got = 0;
    float best[64];
    int cls[64];
    if (k > 64) k = 64;
    for (size_t i = 0; i < c->n; i++) {
        if (i == ex) continue;
        float sim = dot(v, c->pts + i * (size_t)c->dim, c->dim);
        if (got == k && sim <= best[k - 1]) continue;
        int j = got < k ? got++ : k - 1;
        while (j > 0 && best[j - 1] < sim) {
            best[j] = best[j - 1];
            cls[j] = cls[j - 1];
            j--;
        }
        best[j] = sim;
        cls[j] = c->y[i];
    }
    for (int j = 0; j < c->n_classes; j++) s[j] = 0;
    for (int j = 0; j < got; j++) s[cls[j]] += best[j] / (float)k;
}

static void logreg_logits(const sb_classifier *c, const float *W, const float *b, const float *v, float *s) {
    for (int k = 0; k < c->n_classes; k++) {
        const float *w = W + (size_t)k * c->dim;
        float z = 0;
        for (int d = 0; d < c->dim; d++) z += w[d] * (v[d] - c->mu[d]);
        s[k] = z * c->zscale + b[k];
    }
}

/* Raw scores of every class for v, with training point ex held out
 * (SIZE_MAX: none). Logreg ignores ex: its held-out scores come from folds. */
static void scores(const sb_classifier *c, const float *v, size_t ex, float *s) {
    switch (c->o.method) {
    case SB_CLS_CENTROID:
        for (int k = 0; k < c->n_classes; k++) s[k] = centroid_score(c, v, k, ex);
        break;
    case SB_CLS_1NN:
        for (int k = 0; k < c->n_classes; k++) s[k] = -1.0f;
        for (size_t i = 0; i < c->n; i++) {
            if (i == ex) continue;
            float sim = dot(v, c->pts + i * (size_t)c->dim, c->dim);
            if (sim > s[c->y[i]]) s[c->y[i]] = sim;
        }
        break;
    case SB_CLS_KNN:
        knn_scores(c, v, ex, s);
        break;
    case SB_CLS_LOGREG:
        logreg_logits(c, c->W, c->b, v, s);
        break;
    }
}

/* ---- logistic regression ---- */

/* Full-batch gradient descent on the mean cross-entropy + l2/2 |W|², over
 * the points whose fold differs from skip_fold (-1: all). */
static int logreg_fit(const sb_classifier *c, int skip_fold, float *W, float *b) {
    int C = c->n_classes, D = c->dim;
    float *gW = sb_calloc((size_t)C * D, sizeof *gW), *p = sb_calloc((size_t)C, sizeof *p);
    float *z = sb_calloc((size_t)D, sizeof *z), gb[SB_CLS_MAX_LABELS + 1];
    if (!gW || !p || !z) {
        sb_free(gW), sb_free(p), sb_free(z);
        return SB_ENOMEM;
    }
    memset(W, 0, (size_t)C * D * sizeof *W);
    memset(b, 0, (size_t)C * sizeof *b);
    for (int it = 0; it < c->o.iters; it++) {
        memset(gW, 0, (size_t)C * D * sizeof *gW);
        memset(gb, 0, sizeof gb);
        size_t m = 0;
        for (size_t i = 0; i < c->n; i++) {
            if (skip_fold >= 0 && !c->is_desc[i] && (int)(i % LOGREG_FOLDS) == skip_fold) continue;
            const float *xi = c->pts + i * (size_t)D;
            for (int d = 0; d < D; d++) z[d] = (xi[d] - c->mu[d]) * c->zscale;
            float mx = -INFINITY, sum = 0;
            for (int k = 0; k < C; k++) {
                p[k] = dot(W + (size_t)k * D, z, D) + b[k];
                if (p[k] > mx) mx = p[k];
            }
            for (int k = 0; k < C; k++) sum += (p[k] = expf(p[k] - mx));
            for (int k = 0; k < C; k++) {
                float g = p[k] / sum - (k == c->y[i]);
                float *gw = gW + (size_t)k * D;
                for (int d = 0; d < D; d++) gw[d] += g * z[d];
                gb[k] += g;
            }
            m++;
        }
        if (!m) break;
        for (int k = 0; k < C; k++) {
            float *w = W + (size_t)k * D, *gw = gW + (size_t)k * D;
            for (int d = 0; d < D; d++) w[d] -= LOGREG_LR * (gw[d] / (float)m + c->o.l2 * w[d]);
            b[k] -= LOGREG_LR * gb[k] / (float)m;
        }
    }
    sb_free(gW), sb_free(p), sb_free(z);
    return 0;
}

/* Centre and scale: the features' mean and rms norm, over all points. */
static void logreg_standardise(sb_classifier *c) {
    int D = c->dim;
    memset(c->mu, 0, (size_t)D * sizeof *c->mu);
    for (size_t i = 0; i < c->n; i++)
        for (int d = 0; d < D; d++) c->mu[d] += c->pts[i * (size_t)D + d] / (float)c->n;
    double ss = 0;
    for (size_t i = 0; i < c->n; i++)
        for (int d = 0; d < D; d++) {
            double t = c->pts[i * (size_t)D + d] - c->mu[d];
            ss += t * t;
        }
    ss /= (double)c->n;
    c->zscale = ss > 1e-12 ? (float)(1.0 / sqrt(ss)) : 1.0f;
}

/* ---- temperature ---- */

static double nll_at(const float *S, const int *Y, size_t m, int C, double beta) {
    double nll = 0;
    for (size_t i = 0; i < m; i++) {
        const float *s = S + i * (size_t)C;
        double mx = -INFINITY, sum = 0;
        for (int k = 0; k < C; k++) mx = fmax(mx, beta * s[k]);
        for (int k = 0; k < C; k++) sum += exp(beta * s[k] - mx);
        nll += mx + log(sum) - beta * s[Y[i]];
    }
    return nll;
}

/* argmin over T of the NLL of held-out score rows S (m × C). The NLL is
 * convex in 1/T, so a golden-section search over log T finds it. */
static float fit_temperature(const float *S, const int *Y, size_t m, int C) {
    double lo = log(T_MIN), hi = log(T_MAX), g = (sqrt(5.0) - 1) / 2;
    double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
    double fa = nll_at(S, Y, m, C, exp(-a)), fb = nll_at(S, Y, m, C, exp(-b));
    for (int it = 0; it < 80; it++) {
        if (fa < fb) {
            hi = b, b = a, fb = fa;
            a = hi - g * (hi - lo);
            fa = nll_at(S, Y, m, C, exp(-a));
        } else {
            lo = a, a = b, fa = fb;
            b = lo + g * (hi - lo);
            fb = nll_at(S, Y, m, C, exp(-b));
        }
    }
    return (float)exp((lo + hi) / 2);
}

/* Held-out score rows of every example, into S (n_ex × n_classes). */
static int heldout_scores(sb_classifier *c, float *S) {
    int C = c->n_classes;
    if (c->o.method != SB_CLS_LOGREG) {
        for (size_t i = 0; i < c->n_ex; i++) scores(c, c->pts + i * (size_t)c->dim, i, S + i * (size_t)C);
        return 0;
    }
    float *W = sb_malloc((size_t)C * c->dim * sizeof *W), b[SB_CLS_MAX_LABELS + 1];
    if (!W) return SB_ENOMEM;
    int folds = c->n_ex < LOGREG_FOLDS ? (int)c->n_ex : LOGREG_FOLDS;
    for (int f = 0; f < folds; f++) {
        if (logreg_fit(c, f, W, b) != 0) {
            sb_free(W);
            return SB_ENOMEM;
        }
        for (size_t i = (size_t)f; i < c->n_ex; i += LOGREG_FOLDS)
            logreg_logits(c, W, b, c->pts + i * (size_t)c->dim, S + i * (size_t)C);
    }
    sb_free(W);
    return 0;
}

static int calibrate(sb_classifier *c) {
    c->T = c->o.fixed_t > 0 ? c->o.fixed_t : (c->o.method == SB_CLS_LOGREG ? 1.0f : 0.05f);
    if (!c->o.calibrate || c->n_ex < 2) return 0;
    float *S = sb_malloc(c->n_ex * (size_t)c->n_classes * sizeof *S);
    if (!S) return SB_ENOMEM;
    int rc = heldout_scores(c, S);
    if (rc == 0) c->T = fit_temperature(S, c->y, c->n_ex, c->n_classes);
    sb_free(S);
    return rc;
}

/* ---- training ---- */

static void unit_of(const float *center, const float *v, int dim, float *out) {
    float ss = 0;
    for (int d = 0; d < dim; d++) out[d] = v[d] - center[d], ss += out[d] * out[d];
    float inv = ss > 1e-24f ? 1.0f / sqrtf(ss) : 0.0f;
    for (int d = 0; d < dim; d++) out[d] *= inv;
}

/* What the methods compare for vector v: v minus the centre, renormalised;
 * with a lexical block, each block apart and the lexical one scaled by its
 * weight. Renormalising the whole would let the blocks' sizes after
 * centring, not the weight, decide how much each counts. */
static void features_of(const sb_classifier *c, const float *v, float *out) {
    int L = c->o.lex_dim, E = c->dim - L;
    if (!L) {
        unit_of(c->center, v, c->dim, out);
        return;
    }
    unit_of(c->center, v, E, out);
    unit_of(c->center + E, v + E, L, out + E);
    for (int d = E; d < c->dim; d++) out[d] *= c->o.lex_weight;
}

/* Sentence encoders put every text in a narrow cone (e5's cosines between
 * unrelated calls are ~0.7-0.8): the common direction says nothing about
 * the label. Subtracting the training points' mean (and renormalising)
 * spreads the labels apart before any method compares them. Without
 * centring, a lexical block still needs its blocks weighted: the centre is
 * then zero. */
static int centre_points(sb_classifier *c) {
    int D = c->dim;
    c->pts = c->x;
    if (!c->o.center && !c->o.lex_dim) return 0;
    c->center = sb_calloc((size_t)D, sizeof *c->center);
    c->tx = sb_malloc(c->n * (size_t)D * sizeof *c->tx);
    if (!c->center || !c->tx) return SB_ENOMEM;
    for (size_t i = 0; c->o.center && i < c->n; i++)
        for (int d = 0; d < D; d++) c->center[d] += c->x[i * (size_t)D + d] / (float)c->n;
    for (size_t i = 0; i < c->n; i++) features_of(c, c->x + i * (size_t)D, c->tx + i * (size_t)D);
    c->pts = c->tx;
    return 0;
}

static int build_centroids(sb_classifier *c) {
    int C = c->n_classes, D = c->dim;
    c->csum = sb_calloc((size_t)C * D, sizeof *c->csum);
    c->cnorm = sb_calloc((size_t)C, sizeof *c->cnorm);
    if (!c->csum || !c->cnorm) return SB_ENOMEM;
    for (size_t i = 0; i < c->n; i++) {
        float w = point_weight(c, i), *s = c->csum + (size_t)c->y[i] * D;
        for (int d = 0; d < D; d++) s[d] += w * c->pts[i * (size_t)D + d];
    }
    for (int k = 0; k < C; k++) c->cnorm[k] = sqrtf(dot(c->csum + (size_t)k * D, c->csum + (size_t)k * D, D));
    return 0;
}

int sb_cls_train(sb_classifier *c, char *err) {
    drop_desc_points(c);
    free_trained(c);
    int have[SB_CLS_MAX_LABELS] = {0};
    for (size_t i = 0; i < c->n_ex; i++)
        if (c->y[i] < c->n_labels) have[c->y[i]]++;
    for (int k = 0; k < c->n_labels; k++) {
        if (c->o.desc_weight > 0 && c->has_desc[k]) {
            if (push_point(c, k, c->desc + (size_t)k * c->dim, 1) != 0) goto oom;
            have[k]++;
        }
        if (!have[k]) {
            drop_desc_points(c);
            return sb_seterr(err, SB_EINVAL, "classifier: label '%s' has no example%s", c->names[k],
                             c->o.desc_weight > 0 ? " and no description" : "");
        }
    }
    int rc = centre_points(c);
    if (rc == 0 && c->o.method == SB_CLS_CENTROID) rc = build_centroids(c);
    if (c->o.method == SB_CLS_LOGREG) {
        c->W = sb_malloc((size_t)c->n_classes * c->dim * sizeof *c->W);
        c->b = sb_calloc((size_t)c->n_classes, sizeof *c->b);
        c->mu = sb_calloc((size_t)c->dim, sizeof *c->mu);
        if (!c->W || !c->b || !c->mu) goto oom;
        logreg_standardise(c);
        if (rc == 0) rc = logreg_fit(c, -1, c->W, c->b);
    }
    if (rc == 0) rc = calibrate(c);
    if (rc != 0) goto oom;
    c->trained = 1;
    return 0;
oom:
    free_trained(c);
    drop_desc_points(c);
    return sb_seterr(err, SB_ENOMEM, "classifier: out of memory while training");
}

/* ---- classification ---- */

int sb_cls_classify(const sb_classifier *c, const float *v, sb_cls_result *r) {
    memset(r, 0, sizeof *r);
    if (!c->trained) return SB_EINVAL;
    int C = c->n_classes;
    float s[SB_CLS_MAX_LABELS + 1], p[SB_CLS_MAX_LABELS + 1], mx = -INFINITY, sum = 0, u[SB_CLS_MAX_DIM];
    if (c->center) features_of(c, v, u), v = u;
    scores(c, v, SIZE_MAX, s);
    for (int k = 0; k < C; k++) mx = fmaxf(mx, s[k] / c->T);
    for (int k = 0; k < C; k++) sum += (p[k] = expf(s[k] / c->T - mx));
    /* insertion sort by score, ties to the lower index: C ≤ 65 */
    for (int k = 0; k < C; k++) {
        int j = k;
        while (j > 0 && s[r->idx[j - 1]] < s[k]) {
            r->idx[j] = r->idx[j - 1];
            j--;
        }
        r->idx[j] = k;
    }
    r->n = C;
    for (int j = 0; j < C; j++) {
        r->score[j] = s[r->idx[j]];
        r->prob[j] = p[r->idx[j]] / sum;
    }
    r->top = r->idx[0];
    r->rejected = r->top == c->n_labels;
    r->margin = C > 1 ? r->score[0] - r->score[1] : 0;
    r->confidence = r->prob[0];
    return 0;
}

int sb_cls_n_labels(const sb_classifier *c) { return c->n_labels; }
int sb_cls_n_classes(const sb_classifier *c) { return c->n_classes; }
float sb_cls_temperature(const sb_classifier *c) { return c->T; }

const char *sb_cls_label_name(const sb_classifier *c, int idx) {
    if (idx == c->n_labels) return SB_CLS_OOS_NAME;
    return idx >= 0 && idx < c->n_labels ? c->names[idx] : NULL;
}

int sb_cls_n_examples(const sb_classifier *c, int label) {
    int cls = label == SB_CLS_OOS ? c->n_labels : label, n = 0;
    for (size_t i = 0; i < c->n_ex; i++) n += c->y[i] == cls;
    return n;
}

double sb_cls_ece(const float *conf, const int *correct, size_t n, int n_bins) {
    if (!n || n_bins < 1) return 0;
    double ece = 0;
    for (int b = 0; b < n_bins; b++) {
        double lo = (double)b / n_bins, hi = (double)(b + 1) / n_bins, sc = 0, sa = 0;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            double p = conf[i];
            if (p < lo || (p >= hi && !(b == n_bins - 1 && p <= 1.0))) continue;
            sc += p, sa += correct[i] != 0, m++;
        }
        if (m) ece += (double)m / (double)n * fabs(sa / (double)m - sc / (double)m);
    }
    return ece;
}
