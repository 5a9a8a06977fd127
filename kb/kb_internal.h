/* kb_internal.h - what the files of kb/ share (not a public header). */
#ifndef SB_KB_INTERNAL_H
#define SB_KB_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/sb_common.h"

#include "kb/sb_kb.h"
#include "common/sb_utf8.h"

/* A block of a document after extraction: a heading (level 1-6) or a
 * paragraph / list item / table row (level 0), as clean UTF-8 text. */
typedef struct {
    int level;
    char *text;
    size_t len;
} kb_block;

typedef struct {
    kb_block *v;
    size_t n, cap;
} kb_blocks;

/* extract.c: markup -> blocks. SB_ENOMEM only (input was validated). */
int  kb_extract(const char *text, size_t len, sb_kb_format fmt, kb_blocks *out);
void kb_blocks_free(kb_blocks *b);
/* Append `len` bytes as one block (whitespace trimmed; empty text dropped). */
int  kb_blocks_push(kb_blocks *b, int level, const char *text, size_t len);

/* CJK ideographs, kana, Hangul and the CJK punctuation / full-width forms:
 * text written without spaces between words. */
static inline bool kb_is_cjk(uint32_t cp) {
    return (cp >= 0x2E80 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7AF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
           (cp >= 0xFF00 && cp <= 0xFFEF) || (cp >= 0x20000 && cp <= 0x3FFFF);
}

/* The code point at s[i] (U+FFFD and 1 byte for an invalid sequence). */
static inline uint32_t kb_cp_at(const char *s, size_t n, size_t i, size_t *used) {
    uint32_t cp = 0xFFFD;
    *used = sb_utf8_decode((const uint8_t *)s + i, n - i, &cp);
    if (!*used) { *used = 1; cp = 0xFFFD; }
    return cp;
}

/* The code point that ends at s[end) (end > 0). */
uint32_t kb_cp_before(const char *s, size_t end);

/* fts.c: the text FTS5 indexes and the MATCH expression for a query, for a
 * given tokenizer choice. *out sb_malloc'ed, NUL-terminated; NULL if OOM.
 * The query is NULL-free "" (matches nothing) when it has no terms. */
char *kb_fts_index_text(sb_kb_fts fts, const char *s, size_t n);
char *kb_fts_query(sb_kb_fts fts, const char *s, size_t n);
const char *kb_fts_tokenizer(sb_kb_fts fts);          /* the fts5 tokenize= argument */
const char *kb_fts_name(sb_kb_fts fts);
int kb_fts_parse(const char *name);                    /* -1 if unknown */

/* store.c: the SQLite file. Only store.c includes sqlite3.h. */
typedef struct kb_store kb_store;

int  kb_store_open(const char *path, int create, int readonly, kb_store **out, char *err);
void kb_store_close(kb_store *s);
/* meta rows: "dim", "embed_id", "fts". SB_ENOTFOUND on a base not yet
 * given its embedder; kb_store_set_meta sets all three once. */
int  kb_store_get_meta(kb_store *s, int *dim, char *embed_id, size_t cap, sb_kb_fts *fts, char *err);
int  kb_store_set_meta(kb_store *s, int dim, const char *embed_id, sb_kb_fts fts, char *err);
/* A source's recorded SHA-256 (hex) and chunking ("200/32"); *found 0 if none. */
int  kb_store_doc_state(kb_store *s, const char *source, char sha[65], char chunking[32], int *found, char *err);
/* Replace the source's chunks by these (vecs: n x dim floats), one
 * transaction. *replaced: the source existed. */
int  kb_store_replace(kb_store *s, const char *source, const char *sha, int64_t bytes, const char *chunking,
                      const sb_kb_chunk *c, size_t n, const float *vecs, int dim, sb_kb_fts fts, int *replaced,
                      char *err);
int  kb_store_remove(kb_store *s, const char *source, char *err);
int  kb_store_list(kb_store *s, sb_kb_doc **out, size_t *n, char *err);
int  kb_store_stats(kb_store *s, sb_kb_stats *st, char *err);
/* The best `limit` chunks for an FTS5 MATCH expression: ids and -bm25. */
int  kb_store_bm25(kb_store *s, const char *match, int limit, int64_t *ids, double *scores, size_t *n, char *err);
/* Every chunk's id and vector, cached; reloaded when the file changed
 * (PRAGMA data_version, or our own write). Valid until the next call. */
int  kb_store_vectors(kb_store *s, int dim, const int64_t **ids, const float **vecs, size_t *n, char *err);
/* PRAGMA data_version: changes when another connection commits. */
int64_t kb_store_data_version(kb_store *s);
/* A consistent, compact copy of the base into a new file (VACUUM INTO). */
int  kb_store_snapshot(kb_store *s, const char *path, char *err);
/* Replace the whole base by the SQLite file src, in one transaction. */
int  kb_store_restore(kb_store *s, const char *src, char *err);
/* sb_kb_version of the file (cached until it changes). */
int  kb_store_version(kb_store *s, char out[65], char *err);
/* Fill source, section, text and position of h->id. */
int  kb_store_fetch(kb_store *s, sb_kb_hit *h, char *err);

/* kb.c: the base's store (sync.c snapshots it). */
kb_store *kb_store_of(sb_kb *kb);

/* kb_eval.c: `kb eval` on an open base; returns a process exit code.
 * With a reranker, more modes: hybrid (and vector) with their top rerank_n
 * reranked. Every list is max(10, rerank_n) deep. */
typedef struct {
    int misses;
    sb_kb_reranker *reranker;   /* NULL: hybrid + rerank is not measured */
    const char *rerank_prompt;  /* NULL: SB_KB_RERANK_PROMPT */
    int rerank_n;
    int rerank_vectors;         /* also vectors + rerank (shared passages judged once) */
    FILE *dump;                 /* NULL, or one JSON line per question and mode */
} kb_eval_opts;
int  kb_eval_run(sb_kb *kb, const char *tsv, const kb_eval_opts *eo);

/* kb_questions.c: questions for a chunk from the writer (sb_kb.h), in the
 * chunk's language (the prompts are in docs/KNOWLEDGE.md): n distinct
 * questions or so (sb_kb_writer_lines); salt varies the sampling seed per
 * chunk. *out: sb_kb_lines_free. */
int  kb_qgen_ask(sb_kb_writer *g, const char *section, const char *text, int n, uint64_t salt, char ***out,
                 size_t *n_out, char *err);

/* kb_adapt.c: `kb adapt` (argv[0] is "adapt"); a process exit code. */
int  kb_cmd_adapt(int argc, char **argv);

#endif
