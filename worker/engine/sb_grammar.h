/* sb_grammar.h - constrained decoding: a byte-level grammar compiled from a
 * JSON Schema, and a token mask that lets the sampler write only documents
 * the schema accepts (docs/GRAMMAR.md).
 *
 * Three objects:
 *  - sb_grammar: a context-free grammar over bytes (rules of alternatives of
 *    byte sets and rule references), immutable once built. Built by
 *    sb_json_schema_compile, or by hand with the builder below (tests).
 *  - sb_tok_trie: the vocabulary's token pieces (the bytes each token writes,
 *    sb_token_to_piece) in a byte trie; one per vocabulary, immutable.
 *  - sb_gmatch: a position in a grammar (a set of parse stacks, a pushdown
 *    automaton run nondeterministically) plus a cache of token masks per
 *    position. Masks depend only on the position, so a matcher reused over
 *    many generations of one schema computes each mask once.
 *
 * Bounds: a parse stack is at most SB_GRAMMAR_MAX_DEPTH deep (deeper nesting
 * is rejected), a position holds at most SB_GRAMMAR_MAX_STACKS stacks.
 */
#ifndef SB_GRAMMAR_H
#define SB_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/sb_common.h"
#include "worker/tokenizer/sb_vocab.h"

#define SB_GRAMMAR_MAX_DEPTH  128    /* nested JSON containers + rule nesting per container */
#define SB_GRAMMAR_MAX_STACKS 256    /* ambiguity bound: anyOf / pattern alternatives alive at once */

typedef struct sb_grammar sb_grammar;
typedef struct sb_tok_trie sb_tok_trie;
typedef struct sb_gmatch sb_gmatch;
struct sb_pool;

/* ---- JSON Schema -> grammar ----
 * Compile a JSON Schema (the subset in docs/GRAMMAR.md) into a grammar whose
 * language is compact-or-lightly-indented JSON documents valid against it.
 * SB_EINVAL with err naming the keyword and its JSON path for anything
 * outside the subset, e.g. "$.properties.n: unsupported keyword 'minimum'". */
int sb_json_schema_compile(const char *schema, size_t len, sb_grammar **out, char *err);
/* The same into g, which is being built: *root is the rule of a document
 * valid against the schema (a piece of a larger grammar, e.g. a tool call's
 * arguments between the template's tags). Errors as above. */
int sb_json_schema_rule(sb_grammar *g, const char *schema, size_t len, int *root, char *err);
/* A schema given on a command line or in a config: inline JSON when arg
 * starts with '{' (after spaces), else the path of a file holding it.
 * *text is sb_malloc'ed, NUL-terminated; only read, not compiled. */
int sb_json_schema_load(const char *arg, char **text, size_t *len, char *err);

/* A JSON string ("...", quotes included) whose decoded text matches the
 * regular expression pat (JSON Schema semantics: unanchored unless ^/$).
 * chr: any string character (as written, escapes included); u8: any
 * non-ASCII UTF-8 character. SB_EINVAL with msg naming the unsupported
 * construct. Used by the schema compiler. */
int sb_pattern_compile(sb_grammar *g, const char *pat, int chr, int u8, int *out, char *msg, size_t msg_len);

/* ---- Grammar builder ----
 * Rules are ids from sb_gram_rule; an alternative is a sequence of elements
 * (byte sets and rule references) given as an sb_gseq. A rule may be
 * referenced before its alternatives are added (recursion), but must not be
 * left-recursive. */
typedef struct { uint8_t kind; int32_t arg; } sb_gel;
typedef struct { sb_gel *e; int n, cap; int failed; } sb_gseq;

int  sb_gram_new(sb_grammar **out);
void sb_grammar_free(sb_grammar *g);
int  sb_gram_rule(sb_grammar *g);                         /* new empty rule: its id, or -1 (out of memory) */
void sb_gseq_byte(sb_gseq *s, unsigned char c);
void sb_gseq_range(sb_gseq *s, unsigned char lo, unsigned char hi);
void sb_gseq_set(sb_grammar *g, sb_gseq *s, const uint8_t set[32]);   /* bitmap: bit c of set[c/8] */
void sb_gseq_lit(sb_gseq *s, const char *bytes, size_t n);
void sb_gseq_ref(sb_gseq *s, int rule);
/* Add s as an alternative of rule and empty s (kept for reuse). An empty
 * sequence is the empty alternative. */
void sb_gram_alt(sb_grammar *g, int rule, sb_gseq *s);
void sb_gseq_free(sb_gseq *s);
/* A new rule whose one alternative is s (emptied). */
int  sb_gram_rule_seq(sb_grammar *g, sb_gseq *s);
/* r ::= "" | sep item r', at most k items (k < 0: no bound); sep is a rule
 * written before each item, or -1. */
int  sb_gram_repeat(sb_grammar *g, int item, int sep, int k);
/* Finish: `root` is the start rule. SB_ENOMEM if any step ran out of memory,
 * SB_EINVAL if a referenced rule has no alternative. */
int  sb_gram_finish(sb_grammar *g, int root, char *err);
int  sb_grammar_n_rules(const sb_grammar *g);

/* ---- Token trie ---- */
/* Every token that writes bytes (control tokens and empty pieces left out);
 * end-of-generation tokens are remembered apart: the mask allows them only
 * where the document is complete. n_vocab may exceed the vocab (padded
 * output layer): the extra ids are never allowed. */
int  sb_tok_trie_new(const sb_vocab *v, int32_t n_vocab, sb_tok_trie **out, char *err);
void sb_tok_trie_free(sb_tok_trie *t);
int32_t sb_tok_trie_n_vocab(const sb_tok_trie *t);

/* ---- Matcher ---- */
/* g and t must outlive the matcher. Starts at the beginning of a document. */
int  sb_gmatch_new(const sb_grammar *g, const sb_tok_trie *t, sb_gmatch **out, char *err);
/* Another matcher on peer's grammar and trie, at the start of a document,
 * sharing peer's mask cache: a mask either computes serves both (a mask
 * depends only on the position). The cache lives while any of its matchers
 * does; matchers sharing one must be used from one thread, and a mask is
 * then valid until the next sb_gmatch_mask call on any of them. */
int  sb_gmatch_new_sharing(sb_gmatch *peer, sb_gmatch **out, char *err);
void sb_gmatch_free(sb_gmatch *m);
void sb_gmatch_reset(sb_gmatch *m);
/* Advance over bytes. 0, or SB_EINVAL when the grammar rejects them (the
 * position is then unchanged), SB_ENOMEM. */
int  sb_gmatch_bytes(sb_gmatch *m, const char *bytes, size_t n);
/* Advance over one token's piece; an end-of-generation token is accepted
 * only at a complete document and leaves the position as is. */
int  sb_gmatch_token(sb_gmatch *m, int32_t tok);
/* 1 when the bytes so far form a whole document. */
int  sb_gmatch_complete(const sb_gmatch *m);
/* 1 when the document can still grow (some byte is accepted). */
int  sb_gmatch_can_continue(const sb_gmatch *m);
/* The tokens allowed next: bit t of mask[t/32]. Owned by the matcher, valid
 * until its next call. NULL on out of memory. Cached per position. */
const uint32_t *sb_gmatch_mask(sb_gmatch *m);
/* Compute the masks of ms[0..n)'s positions that their caches lack, each
 * position once, on the pool's threads (a position first seen costs a walk
 * over the whole trie, 30-60 ms on a 151k vocabulary): the next
 * sb_gmatch_mask of each is then a cache hit. The masks are those
 * sb_gmatch_mask computes alone. A position it cannot compute (out of
 * memory) is left to sb_gmatch_mask, which reports it. The matchers must
 * not be used elsewhere meanwhile; with a pool of one thread it does nothing. */
void sb_gmatch_prefetch(sb_gmatch *const *ms, int n, struct sb_pool *pool);
/* Cache figures for measurements: this matcher's masks computed (misses)
 * and reused (hits), whichever matcher filled the shared cache. */
void sb_gmatch_stats(const sb_gmatch *m, uint64_t *computed, uint64_t *reused);

static inline int sb_mask_has(const uint32_t *mask, int32_t t) { return (mask[t >> 5] >> (t & 31)) & 1; }

#endif
