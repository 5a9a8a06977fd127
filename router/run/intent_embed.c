/* intent_embed.c - intent stages that classify by sentence embeddings.
 *
 * A stage whose model is an encoder (method embed, hybrid, or auto on an
 * encoder) needs its labels' descriptions and examples as vectors before it
 * can route: its index. The index is built once per configuration
 * generation, as soon as the model's worker is up (router start, SIGHUP, a
 * worker restart) or when a run needs it, through the worker's `embed`
 * method in batches - asynchronously, like every other call, so the loop
 * never waits for the encoder. Runs that arrive meanwhile poll until it is
 * ready (stage_intent.c polls), bounded by their pipeline's timeout.
 *
 * Vectors are cached on disk, DIR/embed-cache.bin (0600), keyed by
 * SHA-256(model fingerprint, kind, text): a restart or reload embeds only
 * what changed. Format: "SBEMB1\n\0", then records of a 32-byte key, a
 * native u32 dimension and that many native floats. A torn last record (a
 * crash mid-write) is cut off at the next load; a file over 64 MiB starts
 * over. It is read and appended with plain blocking I/O on the loop: a few
 * hundred kilobytes, once per build.
 *
 * The classifier itself is h-routeval's sb_classify (nearest centroid by
 * default, calibrated probabilities, an out-of-scope class).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "router/run/sb_run.h"
#include "router/classify/sb_classify.h"

#define CACHE_FILE "embed-cache.bin"
#define CACHE_MAGIC "SBEMB1\n"              /* 8 bytes with its NUL */
#define CACHE_MAX (64u << 20)
#define BATCH 32                            /* texts per embed call: ~0.5 s of e5-small on 2 cores */
#define RETRY_S 2.0                         /* a failed build is retried by the next run after this */
#define MAX_DIM 4096

enum { IX_IDLE, IX_BUILDING, IX_READY, IX_FAILED };

typedef struct {
    const char *text;
    int label;              /* label index, SB_CLS_OOS */
    bool desc;              /* the label's description */
    bool have;
    uint8_t key[SB_SHA256_LEN];
} ix_text;

struct rt_eindex {
    rt_eindex *next;
    rt_exec *ex;
    const sb_stage *s;
    int state;
    double t0, failed_at;
    char err[SB_ERR_LEN];
    int err_rc;
    ix_text *texts;
    size_t n_texts, n_cached;
    float *vecs;            /* n_texts * dim */
    int dim;
    size_t batch[BATCH], n_batch;
    rt_job *job;
    char fp[SB_CACHE_KEY_HEX];
    sb_classifier *cls;
};

/* ------------------------------------------------------------ disk cache */

static void cache_path(const rt_exec *ex, char *out, size_t n) {
    snprintf(out, n, "%s/" CACHE_FILE, ex->conf->cfg->runtime.dir);
}

static void text_key(const char *fp, const char *text, uint8_t key[SB_SHA256_LEN]) {
    sb_sha256_ctx h;
    sb_sha256_init(&h);
    sb_sha256_update(&h, fp, strlen(fp) + 1);
    sb_sha256_update(&h, "query", 6);       /* the prefix the stage embeds with */
    sb_sha256_update(&h, text, strlen(text));
    sb_sha256_final(&h, key);
}

/* Fill the texts the file already has; cut a torn tail, restart a file
 * that is not ours or too large. */
static void cache_load(rt_eindex *ix) {
    char path[600];
    cache_path(ix->ex, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) || st.st_size > CACHE_MAX || st.st_size < 8) {
        if (ftruncate(fd, 0)) sb_warn("%s: cannot reset: %s", path, strerror(errno));
        close(fd);
        return;
    }
    uint8_t *buf = sb_malloc((size_t)st.st_size);
    ssize_t got = buf ? pread(fd, buf, (size_t)st.st_size, 0) : -1;
    if (got != st.st_size || memcmp(buf, CACHE_MAGIC, 8)) {
        if (got == st.st_size && ftruncate(fd, 0)) sb_warn("%s: cannot reset: %s", path, strerror(errno));
        sb_free(buf);
        close(fd);
        return;
    }
    size_t off = 8, rec;
    for (; off + SB_SHA256_LEN + 4 <= (size_t)got; off += rec) {
        uint32_t dim;
        memcpy(&dim, buf + off + SB_SHA256_LEN, 4);
        rec = SB_SHA256_LEN + 4 + (size_t)dim * 4;
        if (dim == 0 || dim > MAX_DIM || off + rec > (size_t)got) break;
        if (ix->dim && (int)dim != ix->dim) continue;
        for (size_t i = 0; i < ix->n_texts; i++) {
            ix_text *t = &ix->texts[i];
            if (t->have || memcmp(t->key, buf + off, SB_SHA256_LEN)) continue;
            if (!ix->vecs && !(ix->vecs = sb_calloc(ix->n_texts * dim, sizeof *ix->vecs))) break;
            ix->dim = (int)dim;
            memcpy(ix->vecs + i * dim, buf + off + SB_SHA256_LEN + 4, (size_t)dim * 4);
            t->have = true;
            ix->n_cached++;
        }
    }
    if (off < (size_t)got && ftruncate(fd, (off_t)off)) sb_warn("%s: cannot cut a torn record: %s", path, strerror(errno));
    sb_free(buf);
    close(fd);
}

static void cache_append(rt_eindex *ix, const size_t *idx, size_t n) {
    if (!ix->fp[0]) return;
    char path[600];
    cache_path(ix->ex, path, sizeof path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        sb_warn("%s: cannot write the embedding cache: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    size_t rec = SB_SHA256_LEN + 4 + (size_t)ix->dim * 4;
    uint8_t *b = sb_malloc(rec);
    bool ok = b && (st.st_size > 0 || write(fd, CACHE_MAGIC, 8) == 8);
    for (size_t k = 0; ok && k < n; k++) {
        uint32_t dim = (uint32_t)ix->dim;
        memcpy(b, ix->texts[idx[k]].key, SB_SHA256_LEN);
        memcpy(b + SB_SHA256_LEN, &dim, 4);
        memcpy(b + SB_SHA256_LEN + 4, ix->vecs + idx[k] * (size_t)ix->dim, (size_t)ix->dim * 4);
        ok = write(fd, b, rec) == (ssize_t)rec;
    }
    if (!ok) sb_warn("%s: cannot write the embedding cache: %s", path, b ? strerror(errno) : "out of memory");
    sb_free(b);
    close(fd);
}

/* --------------------------------------------------------------- build */

static void build_failed(rt_eindex *ix, int rc, const char *fmt, const char *a) {
    ix->state = IX_FAILED;
    ix->failed_at = sb_now_s();
    ix->err_rc = rc;
    snprintf(ix->err, sizeof ix->err, fmt, a);
    sb_warn("intent stage '%s': cannot build its examples index: %s", ix->s->name, ix->err);
}

/* Train the stage's classifier on the texts' vectors: the embeddings, and
 * with `lexical:` each text's words beside its embedding, as the stage
 * gives a call's (stage_intent.c, on_embedded). */
static void build_done(rt_eindex *ix) {
    const sb_stage *s = ix->s;
    const char *names[SB_PIPE_MAX_LABELS];
    for (size_t i = 0; i < s->n_labels; i++) names[i] = s->labels[i].name;
    sb_cls_opts o;
    sb_cls_opts_default(&o);
    if (s->classifier >= 0) o.method = (sb_cls_method)s->classifier;
    if (s->lexical > 0) o.lex_dim = SB_LEX_DIM, o.lex_weight = (float)s->lexical;
    char err[SB_ERR_LEN];
    sb_cls_free(ix->cls);
    ix->cls = NULL;
    float *lv = o.lex_dim ? sb_malloc((size_t)(ix->dim + o.lex_dim) * sizeof *lv) : NULL;
    int rc = o.lex_dim && !lv ? sb_seterr(err, SB_ENOMEM, "out of memory")
                              : sb_cls_new(ix->dim + o.lex_dim, (int)s->n_labels, names, &o, &ix->cls, err);
    for (size_t i = 0; !rc && i < ix->n_texts; i++) {
        const ix_text *t = &ix->texts[i];
        const float *v = ix->vecs + i * (size_t)ix->dim;
        if (lv) sb_lex_append(v, ix->dim, t->text, strlen(t->text), SB_LEX_DEFAULT_FLAGS, lv), v = lv;
        rc = t->desc ? sb_cls_set_description(ix->cls, t->label, v, err) : sb_cls_add_example(ix->cls, t->label, v, err);
    }
    sb_free(lv);
    if (!rc) rc = sb_cls_train(ix->cls, err);
    if (rc) { build_failed(ix, rc, "%s", err); return; }
    ix->state = IX_READY;
    sb_info("intent stage '%s': %zu texts embedded (%zu from %s) in %.0f ms; %s classifier, lexical %g, T %.3g",
            s->name, ix->n_texts, ix->n_cached, CACHE_FILE, (sb_now_s() - ix->t0) * 1e3, sb_cls_method_name(o.method),
            s->lexical, (double)sb_cls_temperature(ix->cls));
}

static void next_batch(rt_eindex *ix);

static void on_batch(void *arg, const rt_reply *res) {
    rt_eindex *ix = arg;
    ix->job = NULL;
    if (!res->ok) {
        build_failed(ix, rt_worker_error_status(res->code, NULL) == 400 ? SB_EINVAL : SB_EIO, "the encoder: %s",
                     res->message ? res->message : "failed");
        return;
    }
    const rt_embed_result *e = &res->embed;
    int64_t dim = e->dim <= MAX_DIM ? e->dim : 0;
    if (e->n != ix->n_batch || dim <= 0 || (ix->dim && dim != ix->dim)) {
        build_failed(ix, SB_EFORMAT, "%s", "the encoder returned vectors of the wrong number or size");
        return;
    }
    if (!ix->vecs && !(ix->vecs = sb_calloc(ix->n_texts * (size_t)dim, sizeof *ix->vecs))) {
        build_failed(ix, SB_ENOMEM, "%s", "out of memory");
        return;
    }
    ix->dim = (int)dim;
    for (size_t k = 0; k < ix->n_batch; k++) {
        memcpy(ix->vecs + ix->batch[k] * (size_t)dim, e->vecs + k * (size_t)dim, (size_t)dim * sizeof *e->vecs);
        ix->texts[ix->batch[k]].have = true;
    }
    cache_append(ix, ix->batch, ix->n_batch);
    next_batch(ix);
}

static void next_batch(rt_eindex *ix) {
    ix->n_batch = 0;
    for (size_t i = 0; i < ix->n_texts && ix->n_batch < BATCH; i++)
        if (!ix->texts[i].have) ix->batch[ix->n_batch++] = i;
    if (!ix->n_batch) { build_done(ix); return; }
    rt_model *m = rt_model_find(&ix->ex->be, ix->s->model);
    char err[SB_ERR_LEN];
    if (!m) { build_failed(ix, SB_EIO, "model '%s' is not configured in this router", ix->s->model); return; }
    const char *texts[BATCH];
    for (size_t k = 0; k < ix->n_batch; k++) texts[k] = ix->texts[ix->batch[k]].text;
    rt_embed_req r = { .kind = "query", .texts = texts, .n = ix->n_batch };
    int rc = rt_model_submit_embed(m, &r, m->deadline_ms, on_batch, ix, &ix->job, err);
    if (rc) build_failed(ix, rc, "%s", err);
}

static int add_text(rt_eindex *ix, const char *text, int label, bool desc) {
    ix_text *t = sb_realloc(ix->texts, (ix->n_texts + 1) * sizeof *t);
    if (!t) return SB_ENOMEM;
    ix->texts = t;
    t += ix->n_texts++;
    *t = (ix_text){ .text = text, .label = label, .desc = desc };
    text_key(ix->fp, text, t->key);
    return 0;
}

/* Every text the stage learns from: each label's description and examples,
 * then the examples_file and out_of_scope lines. */
static void build_start(rt_eindex *ix) {
    const sb_stage *s = ix->s;
    rt_model *m = rt_model_find(&ix->ex->be, s->model);
    sb_free(ix->texts);
    sb_free(ix->vecs);
    ix->texts = NULL;
    ix->vecs = NULL;
    ix->n_texts = ix->n_cached = 0;
    ix->dim = 0;
    ix->t0 = sb_now_s();
    ix->state = IX_BUILDING;
    snprintf(ix->fp, sizeof ix->fp, "%s", m ? m->fingerprint : "");
    int rc = 0;
    for (size_t i = 0; i < s->n_labels && !rc; i++) {
        if (s->labels[i].description) rc = add_text(ix, s->labels[i].description, (int)i, true);
        for (size_t k = 0; k < s->labels[i].n_examples && !rc; k++) rc = add_text(ix, s->labels[i].examples[k], (int)i, false);
    }
    for (size_t i = 0; i < s->n_extra && !rc; i++) rc = add_text(ix, s->extra_text[i], s->extra_label[i], false);
    if (rc) { build_failed(ix, rc, "%s", "out of memory"); return; }
    if (ix->fp[0]) cache_load(ix);
    next_batch(ix);
}

/* --------------------------------------------------------------- API */

bool rt_intent_embeds(rt_exec *ex, const sb_stage *s) {
    if (s->method == SB_INTENT_EMBED || s->method == SB_INTENT_HYBRID) return true;
    if (s->method == SB_INTENT_SCORE) return false;
    rt_model *m = rt_model_find(&ex->be, s->model);
    return m && m->kind_known && m->encoder;
}

static rt_eindex *index_of(rt_exec *ex, rt_conf *c, const sb_stage *s) {
    for (rt_eindex *ix = c->eindex; ix; ix = ix->next)
        if (ix->s == s) return ix;
    rt_eindex *ix = sb_calloc(1, sizeof *ix);
    if (!ix) return NULL;
    *ix = (rt_eindex){ .next = c->eindex, .ex = ex, .s = s };
    c->eindex = ix;
    return ix;
}

int rt_intent_classifier(rt_exec *ex, rt_conf *c, const sb_stage *s, const sb_classifier **out, char *err) {
    *out = NULL;
    rt_eindex *ix = index_of(ex, c, s);
    if (!ix) return sb_seterr(err, SB_ENOMEM, "out of memory");
    if (ix->state == IX_FAILED && sb_now_s() - ix->failed_at < RETRY_S)
        return sb_seterr(err, ix->err_rc, "examples index: %s", ix->err);
    rt_model *m = rt_model_find(&ex->be, s->model);
    if (m && m->kind_known && !m->encoder)
        return sb_seterr(err, SB_EUNSUP, "model '%s' is a generative (decoder) model: classifying by embeddings "
                         "(method %s) needs an encoder model such as multilingual-e5-small", s->model,
                         s->method == SB_INTENT_HYBRID ? "hybrid" : "embed");
    if (ix->state == IX_IDLE || ix->state == IX_FAILED) build_start(ix);
    if (ix->state == IX_READY) { *out = ix->cls; return 0; }
    if (ix->state == IX_FAILED) return sb_seterr(err, ix->err_rc, "examples index: %s", ix->err);
    return 1;
}

void rt_intent_models_changed(rt_exec *ex) {
    rt_conf *c = ex->conf;
    for (size_t i = 0; c && c->pipes && i < c->pipes->n; i++) {
        const sb_pipeline *p = &c->pipes->items[i];
        for (size_t k = 0; k < p->n_stages; k++) {
            const sb_stage *s = &p->stages[k];
            rt_model *m = s->kind == SB_STAGE_INTENT && rt_intent_embeds(ex, s) ? rt_model_find(&ex->be, s->model) : NULL;
            rt_eindex *ix = m && m->up && (!m->kind_known || m->encoder) ? index_of(ex, c, s) : NULL;
            if (ix && (ix->state == IX_IDLE || ix->state == IX_FAILED)) build_start(ix);
        }
    }
}

void rt_intent_cancel_builds(rt_conf *c) {
    for (rt_eindex *ix = c ? c->eindex : NULL; ix; ix = ix->next) {
        rt_job_cancel(ix->job);
        ix->job = NULL;
        if (ix->state == IX_BUILDING) ix->state = IX_IDLE;
    }
}

void rt_intent_free_all(rt_conf *c) {
    rt_intent_cancel_builds(c);
    for (rt_eindex *ix = c->eindex, *n; ix; ix = n) {
        n = ix->next;
        sb_cls_free(ix->cls);
        sb_free(ix->texts);
        sb_free(ix->vecs);
        sb_free(ix);
    }
    c->eindex = NULL;
}
