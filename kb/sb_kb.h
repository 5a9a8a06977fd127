/* sb_kb.h - knowledge bases: the agency's documents, chunked and indexed
 * twice in one SQLite file, for retrieval (docs/KNOWLEDGE.md).
 *
 * A base is a SQLite file (WAL, mode 0600: it holds agency text) with
 *   docs    one row per source (the file's base name), its SHA-256 and the
 *           chunking it was cut with;
 *   chunks  source, section heading path ("Housing fund > Withdrawal"),
 *           position (0-based chunk index in the source), text, token count
 *           and the encoder's L2-normalised "passage: " vector (float32 BLOB);
 *   fts     an FTS5 table over the same chunks (BM25).
 * Only kb/ includes sqlite3.h. Adding a source replaces its previous chunks
 * in one transaction, so a reader (or a kill -9) sees the old version or
 * the new one, never a mix.
 *
 * Search: BM25 (FTS5), vector (brute-force dot product over every chunk,
 * vectors cached in memory and reloaded when another connection changes the
 * file), or hybrid: both lists fused, the vectors leading and BM25
 * breaking their near-ties (SB_KB_BM25_WEIGHT).
 *
 * The embedder is pluggable: sb_kb_open() with an encoder GGUF uses
 * sb_encoder (worker/engine/sb_encoder.h) in-process; a caller that embeds
 * elsewhere (the router, through a worker's embed method) passes a query
 * vector to sb_kb_search() instead and opens the base without an encoder.
 *
 * Not thread-safe: one caller at a time per sb_kb (open one per thread).
 */
#ifndef SB_KB_H
#define SB_KB_H

#include <stddef.h>
#include <stdint.h>

#include "cache/sync/sb_sync.h"       /* sb_cloud_peer: the sync's transport */
#include "common/sb_config.h"

#define SB_KB_MAX_FILE_BYTES (64u << 20)   /* one policy document; refuse junk early */
#define SB_KB_MAX_TOP_K      100

typedef struct sb_kb sb_kb;

typedef enum { SB_KB_BM25 = 0, SB_KB_VECTOR = 1, SB_KB_HYBRID = 2 } sb_kb_mode;
typedef enum { SB_KB_TEXT = 0, SB_KB_MARKDOWN = 1, SB_KB_HTML = 2, SB_KB_PDF = 3 } sb_kb_format;

/* ------------------------------------------------------------ chunking */

/* Tokens in s[0..n) (without <s>, </s> or a prefix). */
typedef size_t (*sb_kb_count_fn)(void *ud, const char *s, size_t n);

typedef struct {
    char *section;      /* heading path, " > "-joined; "" before any heading */
    char *text;         /* the chunk, whole sentences (or words) only */
    int n_tokens;       /* count_fn of text */
    int position;       /* 0-based index in the document */
} sb_kb_chunk;

/* Cut a document (UTF-8; SB_KB_PDF is not accepted here, see
 * sb_kb_read_file) into chunks of at most chunk_tokens tokens: a chunk never
 * spans two sections; it holds whole sentences (ended by . ! ? followed by a
 * space, or by 。！？；), repeating up to `overlap` tokens of whole sentences
 * from the previous chunk of its section; a sentence longer than a chunk is
 * cut between words (at ， 、 ： or between characters for Chinese). Only a
 * single word longer than chunk_tokens is cut inside (at a UTF-8 boundary).
 * 0, SB_EINVAL (invalid UTF-8: err names the byte offset), SB_ENOMEM. */
int  sb_kb_chunk_text(const char *text, size_t len, sb_kb_format fmt, int chunk_tokens, int overlap,
                      sb_kb_count_fn count, void *ud, sb_kb_chunk **out, size_t *n_out, char *err);
void sb_kb_chunks_free(sb_kb_chunk *c, size_t n);

/* The format from the file name's extension: .md .markdown, .html .htm,
 * .pdf, .txt .text. -1 for anything else, and for no extension. */
int  sb_kb_format_of(const char *path);
/* Read a document as UTF-8 text. PDF goes through `pdftotext` (poppler-utils);
 * without it: SB_EUNSUP, err names the tool and the package. Only a regular
 * file is read: a FIFO, device, directory or socket is SB_EINVAL at once
 * (never waited on), and so is a symbolic link unless follow_symlinks.
 * *out is sb_malloc'ed and NUL-terminated. SB_EIO, SB_ERANGE (over
 * SB_KB_MAX_FILE_BYTES), SB_EUNSUP (no or unknown extension). */
int  sb_kb_read_file(const char *path, sb_kb_format fmt, bool follow_symlinks, char **out, size_t *len, char *err);

/* ---------------------------------------------------------------- store */

/* Embed text (kind: SB_EMBED_QUERY 1 or SB_EMBED_PASSAGE 2 of sb_encoder.h)
 * into out[0..dim), L2-normalised. 0 or a negative SB_E* code. */
typedef int (*sb_kb_embed_fn)(void *ud, int kind, const char *text, size_t len, float *out, char *err);

typedef enum { SB_KB_FTS_BIGRAM = 0, SB_KB_FTS_TRIGRAM = 1, SB_KB_FTS_UNICODE61 = 2 } sb_kb_fts;

typedef struct {
    const char *path;           /* the SQLite file */
    int create;                 /* create it (0600) if missing; else SB_ENOTFOUND */
    int readonly;
    /* The embedder: an encoder GGUF (opened here with `threads`), or a
     * callback with its dimension, or neither (BM25 only; adding fails). */
    const char *encoder_gguf;
    int threads;
    sb_kb_embed_fn embed;
    sb_kb_count_fn count;       /* with embed: token counter for chunking */
    void *ud;
    int dim;
    /* Identity of the embedder (e.g. "e5 multilingual-e5-small.Q4_0.gguf
     * 73400320"): recorded when the base is created; adding or vector search
     * with another one fails, since vectors of two models don't compare.
     * NULL with encoder_gguf: derived from the file's name and size. */
    const char *embed_id;
    int chunk_tokens, overlap;  /* for sb_kb_add_*; 0: 200 and 32 */
    sb_kb_fts fts;              /* the FTS tokenizer of a new base */
    /* With encoder_gguf: a LoRA adapter (sb_lora.h, `kb adapt`'s output)
     * applied to questions only. Passages are always embedded without
     * one, so the stored vectors stay those of the base's embedder. */
    const char *query_adapter;
    int follow_symlinks;        /* sb_kb_add_file reads through a symbolic link (else refuses it) */
} sb_kb_opts;

int  sb_kb_open(const sb_kb_opts *o, sb_kb **out, char *err);
void sb_kb_close(sb_kb *kb);                          /* NULL ok */

/* Progress of one add: called after each chunk is embedded (done, total),
 * and once more with done == total when it is stored. */
typedef void (*sb_kb_progress_fn)(void *ud, const char *source, size_t done, size_t total);

typedef struct {
    int unchanged;              /* same bytes and chunking: nothing written */
    int replaced;               /* the source existed and was replaced */
    size_t n_chunks, n_tokens;
    double embed_s, store_s;
} sb_kb_add_result;

/* Chunk, embed and store one document under `source` (replacing what that
 * source had, in one transaction). sb_kb_add_file reads and converts the
 * file; source NULL = its base name. */
int  sb_kb_add_text(sb_kb *kb, const char *source, const char *text, size_t len, sb_kb_format fmt,
                    sb_kb_progress_fn progress, void *pud, sb_kb_add_result *res, char *err);
int  sb_kb_add_file(sb_kb *kb, const char *path, const char *source, sb_kb_progress_fn progress, void *pud,
                    sb_kb_add_result *res, char *err);
/* Remove a source and its chunks. SB_ENOTFOUND if it is not in the base. */
int  sb_kb_remove(sb_kb *kb, const char *source, char *err);

typedef struct {
    char *source;
    int n_chunks, n_tokens;
    int64_t bytes, added_s;     /* the document's size; when it was added (Unix time) */
    char *sha256;               /* hex */
} sb_kb_doc;
int  sb_kb_list(sb_kb *kb, sb_kb_doc **out, size_t *n, char *err);
void sb_kb_docs_free(sb_kb_doc *d, size_t n);

typedef struct {
    int64_t n_docs, n_chunks, n_tokens, file_bytes;
    int dim;
    char fts[16];               /* "bigram", "trigram", "unicode61" */
    char embed_id[160];
} sb_kb_stats;
int  sb_kb_stats_get(sb_kb *kb, sb_kb_stats *st, char *err);

/* The base's content version (64 hex digits + NUL): a SHA-256 of its
 * embedder, tokenizer and every source's name, SHA-256 and chunking. Any
 * add or remove that changes what a search can return changes it; the same
 * content gives the same version (a base deleted and re-added from the same
 * files, or a copy pulled from the cloud). Cheap: recomputed only after the
 * file changed. A cached answer that used the base keys on it. */
int  sb_kb_version(sb_kb *kb, char out[65], char *err);

/* --------------------------------------------------------------- search */

typedef struct {
    int64_t id;                 /* chunk id */
    char *source, *section, *text;
    int position;
    /* BM25: -bm25() (higher is better); vector: cosine; hybrid: the fused
     * score in [0, 1] (comparable within one query only). */
    double score;
    int bm25_rank, vec_rank;    /* 1-based rank in each list; 0 = not in it */
    double cosine;              /* vector, hybrid: cosine with the query (0 when vec_rank is 0) */
    double rerank;              /* the reranker's P(yes) in [0, 1]; -1: not reranked */
} sb_kb_hit;

/* Hybrid's fusion: a chunk scores (1 - w)·v + w·b, v and b where it stands
 * between the best (1) and the last (0) of the vector and BM25 candidates.
 * Small on purpose: BM25 reorders only passages whose cosines lie within
 * w/(1-w) of the candidates' spread, so a weak BM25 list (paraphrased
 * questions, Chinese bigrams) cannot outvote the vectors, while their ties
 * are broken by the exact words. Measured in docs/KNOWLEDGE.md ("Hybrid
 * fusion"): every w in [0.02, 0.1] keeps hybrid at or above both lists on
 * both eval sets; 0.05 is inside that range, not its best point. */
#define SB_KB_BM25_WEIGHT 0.05

typedef struct {
    sb_kb_mode mode;
    int top_k;                  /* [1, SB_KB_MAX_TOP_K] */
    int candidates;             /* per list before fusion; 0 = 50 */
    double bm25_weight;         /* hybrid: BM25's share w in [0, 1]; 0 = SB_KB_BM25_WEIGHT */
    /* The query's L2-normalised "query: " vector from the base's embedder
     * (sb_kb_embed_id: compare it with the model that made the vector),
     * sb_kb_embed_id's dim floats; or NULL: embedded here with the encoder
     * given to sb_kb_open. Only read by vector and hybrid modes. */
    const float *qvec;
} sb_kb_search_opts;

/* The embedder the base was built with ("multilingual-e5-small.Q4_0.gguf
 * 73637376") and its dimension, or NULL before anything was added. */
const char *sb_kb_embed_id(const sb_kb *kb, int *dim);

/* Every chunk of the base with its stored vector (the embedder's dim
 * floats), in id order: what `kb adapt` trains questions against. */
typedef struct {
    int64_t id;
    char *source, *section, *text;
    int position;
    float *vec;
} sb_kb_passage;
int  sb_kb_passages(sb_kb *kb, sb_kb_passage **out, size_t *n, char *err);
void sb_kb_passages_free(sb_kb_passage *p, size_t n);

/* The top_k chunks for `query`. *out is sb_malloc'ed (sb_kb_hits_free);
 * fewer hits than top_k when fewer chunks match (BM25) or exist. */
int  sb_kb_search(sb_kb *kb, const char *query, size_t len, const sb_kb_search_opts *o, sb_kb_hit **out,
                  size_t *n, char *err);
void sb_kb_hits_free(sb_kb_hit *h, size_t n);

/* --------------------------------------------------------------- rerank
 *
 * A decoder model judges each candidate passage: the prompt asks whether the
 * passage answers the question, and the passage's score is the model's
 * P(" yes") / (P(" yes") + P(" no")) after it - label likelihood, as the
 * intent stage's `method: score` (the worker's `score` method gives the
 * same number as probs[0] for candidates {" yes", " no"}). A probability in
 * [0, 1], comparable across questions, unlike the RRF sum. */

/* The passage first: measured better than the question first on the demo
 * base (docs/KNOWLEDGE.md, "Evaluation"). */
#define SB_KB_RERANK_PROMPT \
    "Passage: {{passage}}\nQuestion: {{query}}\nDoes the passage answer the question? Answer:"
#define SB_KB_RERANK_YES " yes"
#define SB_KB_RERANK_NO  " no"

/* tmpl (NULL: SB_KB_RERANK_PROMPT) with {{query}} replaced by the query and
 * {{passage}} by the hit's "SECTION\nTEXT". sb_malloc'ed, NUL-terminated;
 * NULL if out of memory. */
char  *sb_kb_rerank_prompt(const char *tmpl, const char *query, size_t qlen, const sb_kb_hit *h, size_t *len);
/* P(yes) of the two candidates' log-probabilities. */
double sb_kb_rerank_prob(double lp_yes, double lp_no);
/* Reorder h[0..n) by rerank, best first (stable: ties keep their order). */
void   sb_kb_rerank_sort(sb_kb_hit *h, size_t n);
/* Reorder h[0..n), given in the search's order with .rerank set, by
 * reciprocal rank fusion of the two ranks (k = SB_KB_RERANK_RRF_K): the
 * reranker moves a passage up or down, not from last to first on its own. */
#define SB_KB_RERANK_RRF_K 60
void   sb_kb_rerank_fuse(sb_kb_hit *h, size_t n);

/* In-process reranker (kb eval): a decoder GGUF run by worker/sb_engine.h. */
typedef struct sb_kb_reranker sb_kb_reranker;
/* chat: the prompt goes in as a user message of the model's chat template
 * and the candidates are "yes" / "no" (the answer's first words). */
int  sb_kb_reranker_open(const char *gguf, int threads, int chat, sb_kb_reranker **out, char *err);
void sb_kb_reranker_close(sb_kb_reranker *r);           /* NULL ok */
/* Score h[0..n) (sets .rerank; the order is left to sb_kb_rerank_sort or
 * sb_kb_rerank_fuse). */
int  sb_kb_rerank(sb_kb_reranker *r, const char *tmpl, const char *query, size_t qlen, sb_kb_hit *h, size_t n,
                  char *err);

/* ----------------------------------------------------------------- sync
 *
 * The cloud tier publishes a base, edges pull it (docs/KNOWLEDGE.md, "Sync"):
 * versioned by sb_kb_version, the manifest MAC'ed per edge by the cloud
 * (sb_cloud_file_mac), the snapshot checked against the manifest's SHA-256
 * and content version, and swapped in atomically. */

typedef struct {
    char version[65];           /* sb_kb_version of the snapshot */
    char sha256[65];            /* of the snapshot file */
    int64_t bytes;
} sb_kb_published;

/* Write a consistent snapshot of kb to DIR/NAME.sqlite and its manifest to
 * DIR/NAME.json ({name, version, sha256, bytes, published_s}), each through
 * a temporary file, fsync and rename: the cloud serves either the old pair
 * or the new one (an edge that fetched the manifest just before a publish
 * gets a snapshot that fails the manifest's SHA-256, refuses it and takes the
 * new version at its next pull). */
int sb_kb_publish(sb_kb *kb, const char *dir, const char *name, sb_kb_published *out, char *err);

typedef struct {
    int unchanged;              /* the base already had the published version */
    sb_kb_published got;        /* the cloud's manifest */
    double fetch_s, swap_s;
} sb_kb_pull_result;

/* Bring the base at `path` (created if missing) to the version the cloud
 * publishes under `name`: check the manifest's MAC with the edge's secret,
 * download the snapshot to PATH.pull (0600, fsync'ed), check its size,
 * SHA-256 and content version against the manifest, then copy it over the
 * base in one SQLite transaction (the backup API): open readers - a running
 * router - see the old base or the new one, and a kill -9 at any point
 * leaves the old one. Anything that does not match is refused (SB_EINVAL,
 * the message says what) and the base is not touched. */
int sb_kb_pull(const char *path, const char *name, const sb_cloud_peer *peer, sb_kb_pull_result *res, char *err);

const char *sb_kb_mode_name(sb_kb_mode m);
int         sb_kb_mode_parse(const char *s);          /* -1 if unknown */

/* The configuration's `knowledge` section (kb_config.c; sb_config.h,
 * "sections"): the bases, each its file, encoder and chunking. */
extern const sb_cfg_section sb_kb_section;

/* The writer: a local generative model that writes a few short texts a
 * prompt asks for, one a line (kb adapt's questions, route train's
 * paraphrases). Its lines are cleaned of numbering, bullets and quotes, and
 * kept when they are 4..400 bytes, not a list's heading and in the asked
 * language; repeats are dropped. Seeded sampling (temperature 0.7, top-p
 * 0.9), so a run repeats. */
typedef struct sb_kb_writer sb_kb_writer;
int  sb_kb_writer_open(const char *gguf, int threads, uint64_t seed, sb_kb_writer **out, char *err);
void sb_kb_writer_close(sb_kb_writer *g);                /* NULL ok */
/* Distinct lines, Chinese if zh, else English: asked for n, up to three
 * times while fewer came back; an answer's usable lines are all kept, so
 * there may be more than n. salt varies the sampling seed per call.
 * *out: sb_kb_lines_free. */
int  sb_kb_writer_lines(sb_kb_writer *g, const char *prompt, int zh, int n, uint64_t salt, char ***out,
                        size_t *n_out, char *err);
void sb_kb_lines_free(char **q, size_t n);
/* The writer's model: `name`, or the config's first local model whose GGUF
 * is not an encoder. file_opt: the option that reads written texts instead,
 * for the error when there is none. */
int  sb_kb_writer_pick(const sb_config *cfg, const char *name, const char *file_opt, const sb_config_model **out,
                       char *err);
/* The writer's progress line on stderr: "CMD: [done/total] ITEM: got NOUNs
 * (fewer than asked)  elapsed  ETA left", the ETA from the mean so far. */
void sb_kb_writer_progress(const char *cmd, size_t done, size_t total, const char *item, size_t got, int asked,
                           const char *noun, double t0);
/* A file of a writer's texts, saved to be read again: A<TAB>B<TAB>TEXT
 * rows (CR LF or LF), # comments and blank lines skipped. fn gets each
 * row's three fields, none empty, as NUL-terminated UTF-8, and the line's
 * number; its nonzero return stops the read. A malformed row: SB_EINVAL,
 * "PATH:LINE: expected LAYOUT" (or "not UTF-8 text"); no file: SB_EIO. */
typedef int (*sb_kb_row_fn)(void *ud, char *fields[3], size_t lineno, char *err);
int  sb_kb_writer_read(const char *path, const char *layout, sb_kb_row_fn fn, void *ud, char *err);
/* 1 if the text is Chinese (CJK characters at least a fifth of its letters). */
int  sb_kb_text_is_zh(const char *s);

#endif
