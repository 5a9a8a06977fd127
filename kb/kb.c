/* kb.c - a knowledge base: the store plus its embedder; ingest (read,
 * chunk, embed, replace) and search (BM25, vector scan, fusion).
 */
#include "kb/kb_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/sb_cache.h"           /* sb_sha256 */
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_lora.h"

#define DEFAULT_CHUNK_TOKENS 200
#define DEFAULT_OVERLAP      32
#define DEFAULT_CANDIDATES   50 /* per list before fusion: deep enough that a chunk ranked low by one list can rise */

struct sb_kb {
    kb_store *store;
    sb_encoder *enc;
    struct sb_lora *qlora;      /* applied to questions only (sb_kb_opts.query_adapter) */
    sb_kb_embed_fn embed;
    sb_kb_count_fn count;
    void *ud;
    int dim;                    /* the embedder's; 0 = none */
    char embed_id[160];
    int meta_dim;               /* the base's; 0 = no embedder recorded yet */
    int64_t meta_seen;          /* data_version the meta was read at (a pulled snapshot replaces it) */
    char meta_id[160];
    sb_kb_fts fts;
    int chunk_tokens, overlap;
    bool follow_symlinks;       /* sb_kb_opts' */
    float *qvec;                /* dim floats */
};

/* ------------------------------------------------------------ the encoder */

static size_t enc_count(void *ud, const char *s, size_t n) {
    int32_t *ids = NULL;
    size_t k = 0;
    if (sb_encoder_tokenize(((sb_kb *)ud)->enc, SB_EMBED_RAW, s, n, &ids, &k, NULL)) return n;   /* only on OOM: bytes bound it */
    sb_free(ids);
    return k >= 2 ? k - 2 : 0;                  /* <s> and </s> */
}

/* The question through the adapter, a passage without: the stored vectors
 * are the plain embedder's, whatever adapter a reader uses. */
static int enc_embed(void *ud, int kind, const char *text, size_t len, float *out, char *err) {
    sb_kb *kb = ud;
    int rc = sb_encoder_set_adapter(kb->enc, kind == SB_EMBED_QUERY ? kb->qlora : NULL, err);
    return rc ? rc : sb_encoder_embed(kb->enc, (sb_embed_kind)kind, text, len, out, NULL, err);
}

static int open_embedder(sb_kb *kb, const sb_kb_opts *o, char *err) {
    if (o->encoder_gguf) {
        int rc = sb_encoder_open(o->encoder_gguf, o->threads > 0 ? o->threads : 1, -1, &kb->enc, err);
        if (rc) return rc;
        if (o->query_adapter && (rc = sb_encoder_adapter_load(kb->enc, o->query_adapter, &kb->qlora, err)))
            return rc;
        kb->embed = enc_embed;
        kb->count = enc_count;
        kb->ud = kb;
        kb->dim = sb_encoder_dim(kb->enc);
        struct stat st;
        const char *base = strrchr(o->encoder_gguf, '/');
        if (o->embed_id) snprintf(kb->embed_id, sizeof kb->embed_id, "%s", o->embed_id);
        else snprintf(kb->embed_id, sizeof kb->embed_id, "%s %lld", base ? base + 1 : o->encoder_gguf,
                      stat(o->encoder_gguf, &st) ? 0LL : (long long)st.st_size);
    } else if (o->embed) {
        if (o->dim < 1 || !o->count || !o->embed_id)
            return sb_seterr(err, SB_EINVAL, "kb: an embed callback needs dim, count and embed_id");
        kb->embed = o->embed;
        kb->count = o->count;
        kb->ud = o->ud;
        kb->dim = o->dim;
        snprintf(kb->embed_id, sizeof kb->embed_id, "%s", o->embed_id);
    }
    if (kb->dim && !(kb->qvec = sb_malloc((size_t)kb->dim * sizeof(float))))
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    return 0;
}

int sb_kb_open(const sb_kb_opts *o, sb_kb **out, char *err) {
    *out = NULL;
    sb_kb *kb = sb_calloc(1, sizeof *kb);
    if (!kb) return sb_seterr(err, SB_ENOMEM, "out of memory");
    kb->chunk_tokens = o->chunk_tokens > 0 ? o->chunk_tokens : DEFAULT_CHUNK_TOKENS;
    kb->overlap = o->chunk_tokens > 0 ? o->overlap : DEFAULT_OVERLAP;
    kb->fts = o->fts;
    kb->follow_symlinks = o->follow_symlinks;
    /* the embedder first: a wrong model must not leave an empty base behind */
    int rc = open_embedder(kb, o, err);
    if (!rc) rc = kb_store_open(o->path, o->create, o->readonly, &kb->store, err);
    if (!rc) {
        rc = kb_store_get_meta(kb->store, &kb->meta_dim, kb->meta_id, sizeof kb->meta_id, &kb->fts, err);
        if (rc == SB_ENOTFOUND) {               /* a new base takes this embedder */
            kb->meta_dim = 0;
            rc = 0;
            if (kb->dim && !o->readonly && !(rc = kb_store_set_meta(kb->store, kb->dim, kb->embed_id, kb->fts, err))) {
                kb->meta_dim = kb->dim;
                snprintf(kb->meta_id, sizeof kb->meta_id, "%s", kb->embed_id);
            }
        }
    }
    if (rc) { sb_kb_close(kb); return rc; }
    kb->meta_seen = kb_store_data_version(kb->store);
    *out = kb;
    return 0;
}

/* The meta rows again when another process replaced the content (`kb
 * pull` restores a whole snapshot: its embedder and tokenizer come with it). */
static int refresh_meta(sb_kb *kb, char *err) {
    int64_t v = kb_store_data_version(kb->store);
    if (v >= 0 && v == kb->meta_seen) return 0;
    int dim = 0;
    char id[sizeof kb->meta_id];
    sb_kb_fts fts = kb->fts;
    int rc = kb_store_get_meta(kb->store, &dim, id, sizeof id, &fts, err);
    if (rc && rc != SB_ENOTFOUND) return rc;
    if (!rc) {
        kb->meta_dim = dim;
        memcpy(kb->meta_id, id, sizeof id);
        kb->fts = fts;
    }
    kb->meta_seen = v;
    return 0;
}

void sb_kb_close(sb_kb *kb) {
    if (!kb) return;
    kb_store_close(kb->store);
    sb_encoder_free(kb->enc);
    sb_lora_free(kb->qlora);
    sb_free(kb->qvec);
    sb_free(kb);
}

/* Vectors of two models do not compare: the base keeps the one it was
 * built with. */
static int check_embedder(sb_kb *kb, char *err) {
    if (!kb->dim) return sb_seterr(err, SB_EINVAL, "kb: no embedding model given");
    if (!kb->meta_dim) return sb_seterr(err, SB_ENOTFOUND, "kb: empty knowledge base (nothing added yet)");
    if (kb->meta_dim != kb->dim || strcmp(kb->meta_id, kb->embed_id))
        return sb_seterr(err, SB_EINVAL, "kb: this base was built with embedder '%s' (%d dimensions), not '%s' "
                         "(%d): re-create it (delete the file and `kb add` again) or set embed_model back",
                         kb->meta_id, kb->meta_dim, kb->embed_id, kb->dim);
    return 0;
}

/* ------------------------------------------------------------ ingest */

static void hex(const uint8_t *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* What the encoder sees of a chunk: its heading path, then its text. */
static int embed_chunk(sb_kb *kb, const sb_kb_chunk *c, sb_bytes *tmp, float *out, char *err) {
    tmp->n = 0;
    if (*c->section && (sb_bytes_put(tmp, c->section, strlen(c->section)) || sb_bytes_put(tmp, "\n", 1)))
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    if (sb_bytes_put(tmp, c->text, strlen(c->text))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    return kb->embed(kb->ud, SB_EMBED_PASSAGE, tmp->p, tmp->n, out, err);
}

int sb_kb_add_text(sb_kb *kb, const char *source, const char *text, size_t len, sb_kb_format fmt,
                   sb_kb_progress_fn progress, void *pud, sb_kb_add_result *res, char *err) {
    *res = (sb_kb_add_result){ 0 };
    int rc = check_embedder(kb, err);
    if (rc) return rc;
    if (!source || !*source) return sb_seterr(err, SB_EINVAL, "kb: empty source name");
    uint8_t digest[SB_SHA256_LEN];
    char sha[2 * SB_SHA256_LEN + 1], old_sha[65], chunking[32], old_chunking[32];
    sb_sha256(text, len, digest);
    hex(digest, sizeof digest, sha);
    snprintf(chunking, sizeof chunking, "%d/%d/%d", kb->chunk_tokens, kb->overlap, (int)fmt);
    int found;
    if ((rc = kb_store_doc_state(kb->store, source, old_sha, old_chunking, &found, err))) return rc;
    if (found && !strcmp(sha, old_sha) && !strcmp(chunking, old_chunking)) {
        res->unchanged = 1;
        return 0;
    }
    sb_kb_chunk *c;
    size_t n;
    if ((rc = sb_kb_chunk_text(text, len, fmt, kb->chunk_tokens, kb->overlap, kb->count, kb->ud, &c, &n, err)))
        return rc;
    float *vecs = sb_malloc((n ? n : 1) * (size_t)kb->dim * sizeof(float));
    sb_bytes tmp = { 0 };
    if (!vecs) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    double t0 = sb_now_s();
    for (size_t i = 0; i < n && !rc; i++) {
        rc = embed_chunk(kb, &c[i], &tmp, vecs + i * (size_t)kb->dim, err);
        res->n_tokens += (size_t)c[i].n_tokens;
        if (progress && !rc) progress(pud, source, i + 1, n);
    }
    res->embed_s = sb_now_s() - t0;
    t0 = sb_now_s();
    if (!rc) rc = kb_store_replace(kb->store, source, sha, (int64_t)len, chunking, c, n, vecs, kb->dim, kb->fts,
                                   &res->replaced, err);
    res->store_s = sb_now_s() - t0;
    res->n_chunks = n;
    sb_free(tmp.p);
    sb_free(vecs);
    sb_kb_chunks_free(c, n);
    return rc;
}

int sb_kb_add_file(sb_kb *kb, const char *path, const char *source, sb_kb_progress_fn progress, void *pud,
                   sb_kb_add_result *res, char *err) {
    *res = (sb_kb_add_result){ 0 };
    int fmt = sb_kb_format_of(path);
    char *text;
    size_t len;
    int rc = sb_kb_read_file(path, (sb_kb_format)fmt, kb->follow_symlinks, &text, &len, err);
    if (rc) return rc;
    if (!source) {
        const char *slash = strrchr(path, '/');
        source = slash ? slash + 1 : path;
    }
    /* pdftotext gives plain text: chunk it as such */
    rc = sb_kb_add_text(kb, source, text, len, fmt == SB_KB_PDF ? SB_KB_TEXT : (sb_kb_format)fmt, progress, pud, res,
                        err);
    if (rc && err && strncmp(err, path, strlen(path))) {   /* name the file once */
        char tmp[SB_ERR_LEN];
        snprintf(tmp, sizeof tmp, "%s", err);
        sb_seterr(err, rc, "%s: %s", path, tmp);
    }
    sb_free(text);
    return rc;
}

const char *sb_kb_embed_id(const sb_kb *kb, int *dim) {
    if (dim) *dim = kb->meta_dim;
    return kb->meta_dim ? kb->meta_id : NULL;
}

int sb_kb_remove(sb_kb *kb, const char *source, char *err) { return kb_store_remove(kb->store, source, err); }
int sb_kb_list(sb_kb *kb, sb_kb_doc **out, size_t *n, char *err) { return kb_store_list(kb->store, out, n, err); }

void sb_kb_docs_free(sb_kb_doc *d, size_t n) {
    for (size_t i = 0; d && i < n; i++) {
        sb_free(d[i].source);
        sb_free(d[i].sha256);
    }
    sb_free(d);
}

int sb_kb_stats_get(sb_kb *kb, sb_kb_stats *st, char *err) {
    *st = (sb_kb_stats){ .dim = kb->meta_dim };
    snprintf(st->fts, sizeof st->fts, "%s", kb->meta_dim ? kb_fts_name(kb->fts) : "");
    snprintf(st->embed_id, sizeof st->embed_id, "%s", kb->meta_id);
    return kb->meta_dim ? kb_store_stats(kb->store, st, err) : 0;
}

/* ------------------------------------------------------------ search */

static const char *const mode_names[] = { "bm25", "vector", "hybrid" };
const char *sb_kb_mode_name(sb_kb_mode m) { return (unsigned)m < 3 ? mode_names[m] : "?"; }
int sb_kb_mode_parse(const char *s) {
    for (int i = 0; i < 3; i++) if (!strcmp(s, mode_names[i])) return i;
    return -1;
}

typedef struct { int64_t id; double score; } scored;

/* Keep the `k` best of a stream in top[0..*n), best first (k is small). */
static void keep_top(scored *top, size_t *n, size_t k, int64_t id, double score) {
    if (*n == k && score <= top[k - 1].score) return;
    size_t i = *n < k ? (*n)++ : k - 1;
    while (i > 0 && top[i - 1].score < score) { top[i] = top[i - 1]; i--; }
    top[i] = (scored){ id, score };
}

static int vector_list(sb_kb *kb, const float *q, scored *top, size_t *n, size_t k, char *err) {
    const int64_t *ids;
    const float *vecs;
    size_t total;
    *n = 0;
    const int dim = kb->meta_dim;               /* a caller's query vector has the base's length */
    int rc = kb_store_vectors(kb->store, dim, &ids, &vecs, &total, err);
    for (size_t i = 0; !rc && i < total; i++) {
        const float *v = vecs + i * (size_t)dim;
        float dot = 0;
        for (int d = 0; d < dim; d++) dot += q[d] * v[d];
        keep_top(top, n, k, ids[i], dot);
    }
    return rc;
}

static int bm25_list(sb_kb *kb, const char *query, size_t len, scored *top, size_t *n, size_t k, char *err) {
    char *match = kb_fts_query(kb->fts, query, len);
    int64_t *ids = sb_malloc(k * sizeof *ids);
    double *sc = sb_malloc(k * sizeof *sc);
    int rc = match && ids && sc ? kb_store_bm25(kb->store, match, (int)k, ids, sc, n, err)
                                : sb_seterr(err, SB_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < *n; i++) top[i] = (scored){ ids[i], sc[i] };
    sb_free(match);
    sb_free(ids);
    sb_free(sc);
    return rc;
}

typedef struct { int64_t id; double score; int ra, rb; double cos; } fused;

static int by_score(const void *a, const void *b) {
    double x = ((const fused *)a)->score, y = ((const fused *)b)->score;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A list's scores mapped onto [0, 1] over its candidates: 1 for its best,
 * 0 for its last (all 1 when they are equal). Cosines and BM25 scores have
 * unrelated scales; what is comparable is where a chunk stands between a
 * list's best and its worst candidate. */
static double spread_pos(const scored *l, size_t n, size_t i) {
    double hi = l[0].score, lo = l[n - 1].score;
    return hi > lo ? (l[i].score - lo) / (hi - lo) : 1.0;
}

/* Hybrid: the vectors lead, BM25 breaks near-ties. A chunk scores
 * (1 - w)·v + w·b, v and b its places in each list's spread (spread_pos;
 * 0 when not in the list). So BM25 can move a chunk past another only when
 * their cosines are within w/(1-w) of the vector list's spread: it decides
 * among passages the vectors cannot tell apart, and adds exact matches
 * (names, numbers) that the vectors rank close, but a weak BM25 list cannot
 * outvote a clear vector winner. Reciprocal rank fusion did exactly that:
 * it gives each list an equal vote whatever its quality, and a first place
 * in BM25's list with a second in the vectors' beat the vectors' clear
 * first (docs/KNOWLEDGE.md, "Hybrid fusion"). With one list (the other
 * empty, or bm25/vector mode) that list's own score is kept, so bm25 and
 * vector modes report BM25 and cosine. */
static size_t fuse(const scored *a, size_t na, const scored *b, size_t nb, double w, bool hybrid, fused *out) {
    size_t n = 0;
    if (hybrid && (!na || !nb)) w = na ? 1.0 : 0.0;
    for (size_t i = 0; i < na; i++)
        out[n++] = (fused){ a[i].id, hybrid ? w * spread_pos(a, na, i) : a[i].score, (int)i + 1, 0, 0 };
    for (size_t j = 0; j < nb; j++) {
        size_t i = 0;
        while (i < n && out[i].id != b[j].id) i++;
        if (i == n) out[n++] = (fused){ b[j].id, 0, 0, 0, 0 };
        out[i].score += hybrid ? (1 - w) * spread_pos(b, nb, j) : b[j].score;
        out[i].rb = (int)j + 1;
        out[i].cos = b[j].score;
    }
    qsort(out, n, sizeof *out, by_score);
    return n;
}

static int search_lists(sb_kb *kb, const char *query, size_t len, const sb_kb_search_opts *o, size_t cand,
                        scored *bm, size_t *nb, scored *vec, size_t *nv, char *err) {
    int rc = 0;
    *nb = *nv = 0;
    if (o->mode != SB_KB_VECTOR) rc = bm25_list(kb, query, len, bm, nb, cand, err);
    if (rc || o->mode == SB_KB_BM25) return rc;
    const float *q = o->qvec;
    if (!q) {
        if ((rc = check_embedder(kb, err)) || (rc = kb->embed(kb->ud, SB_EMBED_QUERY, query, len, kb->qvec, err)))
            return rc;
        q = kb->qvec;
    }
    return vector_list(kb, q, vec, nv, cand, err);
}

/* The hits' text from the store; a chunk removed between the two reads
 * (another process replaced its source) is skipped. */
static int fetch_hits(sb_kb *kb, const fused *f, size_t nf, int top_k, sb_kb_hit **out, size_t *n, char *err) {
    sb_kb_hit *hits = sb_calloc((size_t)top_k, sizeof *hits);
    if (!hits) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; !rc && i < nf && *n < (size_t)top_k; i++) {
        sb_kb_hit *h = &hits[*n];
        *h = (sb_kb_hit){ .id = f[i].id, .score = f[i].score, .bm25_rank = f[i].ra, .vec_rank = f[i].rb,
                          .cosine = f[i].cos, .rerank = -1 };
        rc = kb_store_fetch(kb->store, h, err);
        if (rc == SB_ENOTFOUND) rc = 0;
        else if (!rc) (*n)++;
    }
    if (rc) {
        sb_kb_hits_free(hits, *n + 1);
        *n = 0;
        return rc;
    }
    *out = hits;
    return 0;
}

int sb_kb_search(sb_kb *kb, const char *query, size_t len, const sb_kb_search_opts *o, sb_kb_hit **out, size_t *n,
                 char *err) {
    *out = NULL;
    *n = 0;
    if (o->top_k < 1 || o->top_k > SB_KB_MAX_TOP_K || (unsigned)o->mode > SB_KB_HYBRID)
        return sb_seterr(err, SB_EINVAL, "kb search: top_k must be in [1, %d]", SB_KB_MAX_TOP_K);
    if (!(o->bm25_weight >= 0 && o->bm25_weight <= 1))
        return sb_seterr(err, SB_EINVAL, "kb search: bm25_weight must be in [0, 1]");
    int rc0 = refresh_meta(kb, err);
    if (rc0) return rc0;
    if (!kb->meta_dim) return 0;                /* nothing added yet: no hits */
    if (!kb->dim && !o->qvec && o->mode != SB_KB_BM25)
        return sb_seterr(err, SB_EINVAL, "kb search: no embedding model and no query vector for %s search",
                         sb_kb_mode_name(o->mode));
    bool hybrid = o->mode == SB_KB_HYBRID;
    size_t cand = (size_t)SB_MAX(o->top_k, hybrid ? (o->candidates > 0 ? o->candidates : DEFAULT_CANDIDATES) : 0);
    scored *bm = sb_malloc(cand * sizeof *bm), *vec = sb_malloc(cand * sizeof *vec);
    fused *f = sb_malloc(2 * cand * sizeof *f);
    size_t nb = 0, nv = 0;
    int rc = bm && vec && f ? search_lists(kb, query, len, o, cand, bm, &nb, vec, &nv, err)
                            : sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!rc) {
        size_t nf = fuse(bm, nb, vec, nv, o->bm25_weight > 0 ? o->bm25_weight : SB_KB_BM25_WEIGHT, hybrid, f);
        rc = fetch_hits(kb, f, nf, o->top_k, out, n, err);
    }
    sb_free(bm);
    sb_free(vec);
    sb_free(f);
    return rc;
}

int sb_kb_passages(sb_kb *kb, sb_kb_passage **out, size_t *n, char *err) {
    *out = NULL;
    *n = 0;
    int rc = refresh_meta(kb, err);
    if (rc) return rc;
    if (!kb->meta_dim) return sb_seterr(err, SB_ENOTFOUND, "kb: empty knowledge base (nothing added yet)");
    const int64_t *ids;
    const float *vecs;
    size_t total;
    const size_t dim = (size_t)kb->meta_dim;
    if ((rc = kb_store_vectors(kb->store, kb->meta_dim, &ids, &vecs, &total, err))) return rc;
    sb_kb_passage *p = sb_calloc(total ? total : 1, sizeof *p);
    if (!p) return sb_seterr(err, SB_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < total && !rc; i++) {
        sb_kb_hit h = { .id = ids[i] };
        /* the cached vectors stay valid: fetching reads rows, it does not reload them */
        if ((rc = kb_store_fetch(kb->store, &h, err)) == SB_ENOTFOUND) { rc = 0; continue; }
        if (rc) { sb_free(h.source), sb_free(h.section), sb_free(h.text); break; }
        p[k] = (sb_kb_passage){ .id = h.id, .source = h.source, .section = h.section, .text = h.text,
                                .position = h.position, .vec = sb_malloc(dim * sizeof(float)) };
        if (!p[k].vec) { k++; rc = sb_seterr(err, SB_ENOMEM, "out of memory"); break; }
        memcpy(p[k++].vec, vecs + i * dim, dim * sizeof(float));
    }
    if (rc) { sb_kb_passages_free(p, k); return rc; }
    *out = p;
    *n = k;
    return 0;
}

void sb_kb_passages_free(sb_kb_passage *p, size_t n) {
    for (size_t i = 0; p && i < n; i++) {
        sb_free(p[i].source);
        sb_free(p[i].section);
        sb_free(p[i].text);
        sb_free(p[i].vec);
    }
    sb_free(p);
}

kb_store *kb_store_of(sb_kb *kb) {
    return kb->store;
}

int sb_kb_version(sb_kb *kb, char out[65], char *err) {
    int rc = refresh_meta(kb, err);
    return rc ? rc : kb_store_version(kb->store, out, err);
}

void sb_kb_hits_free(sb_kb_hit *h, size_t n) {
    for (size_t i = 0; h && i < n; i++) {
        sb_free(h[i].source);
        sb_free(h[i].section);
        sb_free(h[i].text);
    }
    sb_free(h);
}
