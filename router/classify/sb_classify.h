/* sb_classify.h - intent classification of sentence vectors.
 *
 * A pure module: no I/O, no engine. The caller embeds the labels'
 * examples (and optionally their descriptions) with an encoder, adds the
 * unit vectors here, trains once, then classifies each call's vector.
 *
 * Methods (all over dot products of L2-normalised vectors = cosines):
 *   centroid  similarity to each label's renormalised mean vector
 *             (the description's vector weighted desc_weight in the mean)
 *   1nn       similarity to the label's closest example
 *   knn       the k closest examples overall vote: score_c is the sum of
 *             the similarities of those in c, divided by k
 *   logreg    multinomial logistic regression on the centred vectors,
 *             full-batch gradient descent from zero (deterministic),
 *             L2-regularised
 *
 * Calibration: p = softmax(score / T) over the labels. T is fitted on the
 * training examples by minimising the negative log-likelihood of their
 * held-out scores: leave-one-out for centroid / 1nn / knn (the example is
 * taken out of its own centroid / neighbour set), 5-fold cross-validation
 * for logreg (retraining per fold). A label whose only example is held out
 * scores -1 for it, so with one example per label and no description the
 * fit is pessimistic (a flat T) - honest: no held-out evidence exists.
 *
 * Out of scope: examples added with label SB_CLS_OOS form one more class,
 * index n_labels, named "out_of_scope", trained like the others. Whether
 * a low probability sends the call to a fallback (min_confidence) is the
 * caller's rule: the module reports, it does not decide.
 *
 * Lexical features (lexical.c): beside the embedding, the call's words
 * hashed into SB_LEX_DIM buckets - CJK character unigrams and bigrams,
 * lowercased Latin words and word bigrams - sublinear counts, unit length.
 * A classifier made with lex_dim > 0 takes vectors [embedding ; lexical]
 * (sb_lex_append builds one) and compares each block on its own: each is
 * centred (when centring) and renormalised apart, and the lexical block
 * scaled by lex_weight, so the weight is the lexical block's length next
 * to the embedding's 1 whatever the blocks' sizes. lex_dim 0 is the
 * embedding alone, exactly as without this feature.
 *
 * Not thread-safe while training; sb_cls_classify on a trained classifier
 * only reads it.
 */
#ifndef SB_CLASSIFY_H
#define SB_CLASSIFY_H

#include <stddef.h>

#define SB_CLS_MAX_LABELS 64     /* a hotline has ~10 intents; bounds the result struct */
#define SB_CLS_MAX_DIM 4096      /* classify keeps one centred vector on the stack */
#define SB_CLS_OOS (-1)          /* label of an out-of-scope (reject-class) example */
#define SB_CLS_OOS_NAME "out_of_scope"

typedef enum { SB_CLS_CENTROID = 0, SB_CLS_1NN, SB_CLS_KNN, SB_CLS_LOGREG } sb_cls_method;

typedef struct {
    sb_cls_method method;
    int   k;             /* knn: neighbours (0 = 5) */
    float desc_weight;   /* description vector's weight: centroid mean weight; for the other methods
                            it is one more example when > 0. 0 = descriptions unused. */
    float l2;            /* logreg: L2 penalty on the weights (0 = 1e-3) */
    int   iters;         /* logreg: gradient steps (0 = 300) */
    int   calibrate;     /* 1: fit T (see above); 0: T = fixed_t */
    float fixed_t;       /* T when not calibrating (0 = 0.05 for similarity methods, 1 for logreg) */
    int   center;        /* 1: subtract the training points' mean from every vector (and the call's),
                            renormalise, then compare (see classify.c centre_points) */
    int   lex_dim;       /* trailing dimensions that are lexical features (0: none; see above) */
    float lex_weight;    /* the lexical block's length beside the embedding's (with lex_dim > 0) */
} sb_cls_opts;

/* Defaults: centroid, k 5, desc_weight 1, l2 1e-3, 300 iterations, calibrated, centred. */
void sb_cls_opts_default(sb_cls_opts *o);
/* "centroid" | "1nn" | "knn" | "logreg" -> method; -1 if unknown. */
int         sb_cls_method_parse(const char *s);
const char *sb_cls_method_name(sb_cls_method m);

typedef struct sb_classifier sb_classifier;

typedef struct {
    int   n;                          /* classes ranked: labels (+ out_of_scope if trained) */
    int   idx[SB_CLS_MAX_LABELS + 1]; /* class indices, best first; n_labels = out_of_scope */
    float score[SB_CLS_MAX_LABELS + 1]; /* the method's raw score, same order */
    float prob[SB_CLS_MAX_LABELS + 1];  /* calibrated probability, same order (sums to 1) */
    int   top;                        /* idx[0] */
    int   rejected;                   /* top is the out_of_scope class */
    float margin;                     /* score[0] - score[1] (0 with one class) */
    float confidence;                 /* prob[0] */
} sb_cls_result;

/* A classifier over n_labels (1..SB_CLS_MAX_LABELS) named labels (names
 * copied) of dim-dimensional vectors. opts NULL = defaults. */
int  sb_cls_new(int dim, int n_labels, const char *const *names, const sb_cls_opts *opts, sb_classifier **out,
                char *err);
void sb_cls_free(sb_classifier *c);

/* Add an example vector (dim floats, unit length: not checked beyond
 * finiteness) of label in [0, n_labels) or SB_CLS_OOS. Copies v. Adding
 * after sb_cls_train needs another sb_cls_train. */
int sb_cls_add_example(sb_classifier *c, int label, const float *v, char *err);
/* Set label's description vector (replaces an earlier one). */
int sb_cls_set_description(sb_classifier *c, int label, const float *v, char *err);

/* Build centroids / weights and fit T. SB_EINVAL if a label has neither an
 * example nor (with desc_weight > 0) a description. */
int sb_cls_train(sb_classifier *c, char *err);

/* Classify unit vector v; the classifier must be trained. */
int sb_cls_classify(const sb_classifier *c, const float *v, sb_cls_result *r);

int         sb_cls_n_labels(const sb_classifier *c);   /* without out_of_scope */
int         sb_cls_n_classes(const sb_classifier *c);  /* with out_of_scope when trained with it */
const char *sb_cls_label_name(const sb_classifier *c, int idx);  /* idx == n_labels: "out_of_scope" */
float       sb_cls_temperature(const sb_classifier *c);
int         sb_cls_n_examples(const sb_classifier *c, int label);

/* Expected calibration error of n predictions: confidence conf[i] in
 * [0,1], correct[i] 0/1, in n_bins equal-width bins:
 * sum_b |B|/n * |acc(B) - conf(B)|. 0 when n is 0. */
double sb_cls_ece(const float *conf, const int *correct, size_t n, int n_bins);

/* ---- lexical features (lexical.c) ---- */

#define SB_LEX_DIM 1024          /* buckets: a stage's examples have a few thousand distinct n-grams */
#define SB_LEX_SUBWORDS 1u       /* also character trigrams inside Latin words (ASR misspellings) */
#define SB_LEX_DEFAULT_FLAGS 0u  /* what stages and route eval use (chosen on the routing dev set) */

/* The n bytes of text as a unit vector of dim (>= 1) hashed lexical
 * features, into out; deterministic. Returns the number of n-grams
 * counted: 0 for empty text or text with no letters, digits or CJK (out is
 * then all zeros, not a unit vector); -1 if dim < 1. Bytes that are not
 * UTF-8 separate words as a space would. */
int sb_lex_features(const char *text, size_t n, unsigned flags, float *out, int dim);
/* out = [emb (emb_dim floats) ; the text's lexical features (SB_LEX_DIM
 * floats, these flags)]: the vector a classifier with lex_dim SB_LEX_DIM
 * takes; out may be emb (with room). Returns what sb_lex_features does. */
int sb_lex_append(const float *emb, int emb_dim, const char *text, size_t n, unsigned flags, float *out);

#endif
