/* grammar.c - byte grammars run as a nondeterministic pushdown automaton,
 * and the token mask computed from them (see sb_grammar.h, docs/GRAMMAR.md).
 *
 * A grammar is a flat array of elements: every alternative of every rule is
 * a run of terminals (a byte range or a 256-bit byte set) and rule references,
 * closed by an END element. A parse stack is a list of element positions:
 * the top one is always a terminal (the next byte must be in it), the ones
 * below are where to resume when the rule above completes. A position in a
 * document is the set of stacks still alive (the grammar may be ambiguous:
 * anyOf, optional whitespace, patterns); the empty stack means "complete".
 *
 * A reference whose successor is END pushes nothing (a tail call), so the
 * right-recursive loops the schema compiler writes (chars ::= "" | char
 * chars) run in constant stack depth.
 *
 * The mask walks the vocabulary's byte trie against the position: a subtree
 * is left as soon as no stack survives its prefix, so the walk costs about
 * the number of trie nodes that are valid prefixes. Masks are cached per
 * position (the stack set is the whole state, so the mask is a function of
 * it), which makes repeated positions - the same property, the same count
 * of characters left - cost one hash lookup. Matchers on one grammar may
 * share the cache (sb_gmatch_new_sharing).
 */
#include "worker/engine/sb_grammar.h"
#include "worker/engine/sb_pool.h"

#include <stdlib.h>
#include <string.h>

enum { GE_END = 0, GE_RANGE = 1, GE_SET = 2, GE_REF = 3 };

struct sb_grammar {
    sb_gel  *el;                    /* every alternative, END-terminated */
    int      n_el, cap_el;
    uint8_t (*sets)[32];
    int      n_sets, cap_sets;
    int      n_rules;
    struct alt { int rule, start; } *alts;
    int      n_alts, cap_alts;
    int     *rule_first, *rule_n;   /* after finish: rule -> range of alt_start */
    int     *alt_start;
    int      root;
    int      failed;                /* sticky out of memory */
};

/* ---- dynamic arrays ---- */

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = sb_realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* ---- builder ---- */

int sb_gram_new(sb_grammar **out) {
    *out = sb_calloc(1, sizeof **out);
    return *out ? 0 : SB_ENOMEM;
}

void sb_grammar_free(sb_grammar *g) {
    if (!g) return;
    sb_free(g->el);
    sb_free(g->sets);
    sb_free(g->alts);
    sb_free(g->rule_first);
    sb_free(g->rule_n);
    sb_free(g->alt_start);
    sb_free(g);
}

int sb_gram_rule(sb_grammar *g) { return g->n_rules++; }
int sb_grammar_n_rules(const sb_grammar *g) { return g->n_rules; }

static void seq_push(sb_gseq *s, uint8_t kind, int32_t arg) {
    if (grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) { s->failed = 1; return; }
    s->e[s->n++] = (sb_gel){ kind, arg };
}

void sb_gseq_range(sb_gseq *s, unsigned char lo, unsigned char hi) { seq_push(s, GE_RANGE, lo | (hi << 8)); }
void sb_gseq_byte(sb_gseq *s, unsigned char c) { sb_gseq_range(s, c, c); }
void sb_gseq_lit(sb_gseq *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) sb_gseq_byte(s, (unsigned char)bytes[i]);
}
void sb_gseq_ref(sb_gseq *s, int rule) { seq_push(s, GE_REF, rule); }

void sb_gseq_set(sb_grammar *g, sb_gseq *s, const uint8_t set[32]) {
    for (int i = 0; i < g->n_sets; i++)
        if (!memcmp(g->sets[i], set, 32)) { seq_push(s, GE_SET, i); return; }
    if (grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1, sizeof *g->sets)) { g->failed = 1; return; }
    memcpy(g->sets[g->n_sets], set, 32);
    seq_push(s, GE_SET, g->n_sets++);
}

void sb_gseq_free(sb_gseq *s) {
    sb_free(s->e);
    memset(s, 0, sizeof *s);
}

void sb_gram_alt(sb_grammar *g, int rule, sb_gseq *s) {
    if (s->failed) g->failed = 1;
    if (rule < 0 || g->failed || grow((void **)&g->el, &g->cap_el, g->n_el + s->n + 1, sizeof *g->el) ||
        grow((void **)&g->alts, &g->cap_alts, g->n_alts + 1, sizeof *g->alts)) {
        g->failed = 1;
        s->n = 0;
        return;
    }
    g->alts[g->n_alts++] = (struct alt){ rule, g->n_el };
    if (s->n) memcpy(g->el + g->n_el, s->e, (size_t)s->n * sizeof *s->e);
    g->n_el += s->n;
    g->el[g->n_el++] = (sb_gel){ GE_END, 0 };
    s->n = 0;
    s->failed = 0;
}

int sb_gram_rule_seq(sb_grammar *g, sb_gseq *s) {
    int r = sb_gram_rule(g);
    sb_gram_alt(g, r, s);
    return r;
}

int sb_gram_repeat(sb_grammar *g, int item, int sep, int k) {
    sb_gseq s = { 0 };
    int r = sb_gram_rule_seq(g, &s);                    /* no more items */
    if (k < 0) {                                        /* r ::= "" | sep item r */
        if (sep >= 0) sb_gseq_ref(&s, sep);
        sb_gseq_ref(&s, item);
        sb_gseq_ref(&s, r);
        sb_gram_alt(g, r, &s);
    }
    for (int i = 1; i <= k; i++) {                      /* r_i ::= "" | sep item r_{i-1} */
        int n = sb_gram_rule(g);
        sb_gram_alt(g, n, &s);
        if (sep >= 0) sb_gseq_ref(&s, sep);
        sb_gseq_ref(&s, item);
        sb_gseq_ref(&s, r);
        sb_gram_alt(g, n, &s);
        r = n;
    }
    sb_gseq_free(&s);
    return r;
}

int sb_gram_finish(sb_grammar *g, int root, char *err) {
    if (g->failed) return sb_seterr(err, SB_ENOMEM, "grammar: out of memory");
    g->rule_first = sb_calloc((size_t)g->n_rules + 1, sizeof *g->rule_first);
    g->rule_n = sb_calloc((size_t)g->n_rules + 1, sizeof *g->rule_n);
    g->alt_start = sb_malloc(((size_t)g->n_alts + 1) * sizeof *g->alt_start);
    if (!g->rule_first || !g->rule_n || !g->alt_start) return sb_seterr(err, SB_ENOMEM, "grammar: out of memory");
    for (int i = 0; i < g->n_alts; i++) g->rule_n[g->alts[i].rule]++;
    for (int r = 1; r < g->n_rules; r++) g->rule_first[r] = g->rule_first[r - 1] + g->rule_n[r - 1];
    int *fill = sb_calloc((size_t)g->n_rules + 1, sizeof *fill);
    if (!fill) return sb_seterr(err, SB_ENOMEM, "grammar: out of memory");
    for (int i = 0; i < g->n_alts; i++) {
        int r = g->alts[i].rule;
        g->alt_start[g->rule_first[r] + fill[r]++] = g->alts[i].start;
    }
    sb_free(fill);
    for (int i = 0; i < g->n_el; i++)
        if (g->el[i].kind == GE_REF && (g->el[i].arg >= g->n_rules || g->rule_n[g->el[i].arg] == 0))
            return sb_seterr(err, SB_EINVAL, "grammar: rule %d is referenced but has no alternative", g->el[i].arg);
    if (root < 0 || root >= g->n_rules || g->rule_n[root] == 0)
        return sb_seterr(err, SB_EINVAL, "grammar: root rule %d has no alternative", root);
    g->root = root;
    return 0;
}

static inline int el_has(const sb_grammar *g, sb_gel e, unsigned c) {
    if (e.kind == GE_RANGE) return c >= (unsigned)(e.arg & 255) && c <= (unsigned)(e.arg >> 8);
    return (g->sets[e.arg][c >> 3] >> (c & 7)) & 1;
}

/* ---- stack sets ----
 * A set is stored flat: for each stack its length, then its positions from
 * the bottom up. h[] holds one hash per stack to find duplicates cheaply. */
typedef struct {
    int32_t  *v;
    int       n, cap;
    uint64_t *h;
    int       ns, cap_h;
    int       oom;
} sset;

static void sset_clear(sset *s) { s->n = s->ns = 0; s->oom = 0; }
static void sset_free(sset *s) { sb_free(s->v); sb_free(s->h); memset(s, 0, sizeof *s); }

static uint64_t hash_ints(const int32_t *p, int n, uint64_t h) {
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)p[i];
        h *= 0x100000001B3ull;
        h ^= h >> 29;
    }
    return h;
}

static void sset_emit(sset *s, const int32_t *below, int nb, int32_t top, int has_top) {
    if (s->ns >= SB_GRAMMAR_MAX_STACKS) return;    /* ambiguity bound: drop the rest */
    int len = nb + (has_top ? 1 : 0);
    uint64_t h = hash_ints(below, nb, 0xCBF29CE484222325ull ^ (uint64_t)len);
    if (has_top) h = hash_ints(&top, 1, h);
    for (int i = 0, off = 0; i < s->ns; off += 1 + s->v[off], i++)
        if (s->h[i] == h && s->v[off] == len && !memcmp(s->v + off + 1, below, (size_t)nb * sizeof *below) &&
            (!has_top || s->v[off + 1 + nb] == top))
            return;
    if (grow((void **)&s->v, &s->cap, s->n + len + 1, sizeof *s->v) ||
        grow((void **)&s->h, &s->cap_h, s->ns + 1, sizeof *s->h)) {
        s->oom = 1;
        return;
    }
    s->v[s->n++] = len;
    memcpy(s->v + s->n, below, (size_t)nb * sizeof *below);
    s->n += nb;
    if (has_top) s->v[s->n++] = top;
    s->h[s->ns++] = h;
}

/* Every stack reachable from "at element pos, resuming at below[nb-1], ...
 * below[0] after that": references are expanded and completed rules popped
 * until a terminal is on top. `below` is only read, so the alternatives of
 * one reference share it; a push copies it into this frame. `guard` bounds
 * the reference chain (the compiler writes no left recursion; a hand-built
 * grammar that does loses those stacks instead of looping). */
static void expand(const sb_grammar *g, const int32_t *below, int nb, int32_t pos, sset *out, int guard) {
    for (;;) {
        sb_gel e = g->el[pos];
        if (e.kind == GE_RANGE || e.kind == GE_SET) { sset_emit(out, below, nb, pos, 1); return; }
        if (e.kind == GE_END) {
            if (nb == 0) { sset_emit(out, below, 0, 0, 0); return; }
            pos = below[--nb];
            continue;
        }
        if (guard <= 0) return;
        int32_t cont = pos + 1;
        const int *alts = g->alt_start + g->rule_first[e.arg];
        const int n_alts = g->rule_n[e.arg];
        if (g->el[cont].kind == GE_END) {           /* tail call: nothing to resume here */
            for (int a = 0; a < n_alts; a++) expand(g, below, nb, alts[a], out, guard - 1);
            return;
        }
        if (nb + 1 >= SB_GRAMMAR_MAX_DEPTH) return; /* too deep: this parse dies */
        int32_t pushed[SB_GRAMMAR_MAX_DEPTH];
        memcpy(pushed, below, (size_t)nb * sizeof *below);
        pushed[nb] = cont;
        for (int a = 0; a < n_alts; a++) expand(g, pushed, nb + 1, alts[a], out, guard - 1);
        return;
    }
}

#define EXPAND_GUARD 64

static void sset_start(const sb_grammar *g, sset *out) {
    static const int32_t none[1] = { 0 };   /* memcpy/memcmp want a pointer even for 0 bytes */
    sset_clear(out);
    int r = g->root;
    for (int a = 0; a < g->rule_n[r]; a++) expand(g, none, 0, g->alt_start[g->rule_first[r] + a], out, EXPAND_GUARD);
}

/* out = the stacks of in that survive byte c. */
static void sset_advance(const sb_grammar *g, const sset *in, unsigned c, sset *out) {
    sset_clear(out);
    for (int i = 0, off = 0; i < in->ns; off += 1 + in->v[off], i++) {
        int len = in->v[off];
        if (len == 0) continue;
        const int32_t *st = in->v + off + 1;
        int32_t top = st[len - 1];
        if (el_has(g, g->el[top], c)) expand(g, st, len - 1, top + 1, out, EXPAND_GUARD);
    }
}

static int sset_complete(const sset *s) {
    for (int i = 0, off = 0; i < s->ns; off += 1 + s->v[off], i++)
        if (s->v[off] == 0) return 1;
    return 0;
}

static int sset_copy(sset *dst, const sset *src) {
    if (grow((void **)&dst->v, &dst->cap, src->n, sizeof *dst->v) ||
        grow((void **)&dst->h, &dst->cap_h, src->ns, sizeof *dst->h))
        return SB_ENOMEM;
    if (src->n) memcpy(dst->v, src->v, (size_t)src->n * sizeof *src->v);
    if (src->ns) memcpy(dst->h, src->h, (size_t)src->ns * sizeof *src->h);
    dst->n = src->n;
    dst->ns = src->ns;
    return 0;
}

/* ---- token trie ---- */

typedef struct { int32_t first_edge, n_edge, first_tok, n_tok; } tnode;

struct sb_tok_trie {
    int32_t   n_vocab;
    tnode    *nodes;
    int32_t   n_nodes;
    uint8_t  *edge_b;
    int32_t  *edge_child;
    int32_t   n_edges;
    int32_t  *toks;             /* ids ending at each node, grouped per node */
    int32_t   n_toks;
    int32_t  *eog;              /* end-of-generation ids */
    int32_t   n_eog;
    uint32_t *eog_bits;
    char     *bytes;            /* every piece back to back */
    int32_t  *piece_off, *piece_len;    /* per id; len -1: never allowed */
    int       max_depth;
};

typedef struct { const char *bytes; const int32_t *off, *len; } piece_ctx;

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const piece_ctx *p = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int32_t lx = p->len[x], ly = p->len[y];
    int c = memcmp(p->bytes + p->off[x], p->bytes + p->off[y], (size_t)SB_MIN(lx, ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

/* Build the node for ids[lo..hi), which share their first d bytes. Nodes are
 * numbered in depth-first order; each node's edges are contiguous. */
static int32_t trie_build(sb_tok_trie *t, const int32_t *ids, int lo, int hi, int d) {
    int32_t me = t->n_nodes++;
    tnode *n = &t->nodes[me];
    n->first_tok = t->n_toks;
    while (lo < hi && t->piece_len[ids[lo]] == d) t->toks[t->n_toks++] = ids[lo++];
    n->n_tok = t->n_toks - n->first_tok;
    if (d > t->max_depth) t->max_depth = d;
    int groups = 0;
    for (int i = lo; i < hi;) {
        unsigned char b = (unsigned char)t->bytes[t->piece_off[ids[i]] + d];
        while (i < hi && (unsigned char)t->bytes[t->piece_off[ids[i]] + d] == b) i++;
        groups++;
    }
    int32_t first = t->n_edges;
    t->n_edges += groups;
    t->nodes[me].first_edge = first;
    t->nodes[me].n_edge = groups;
    for (int i = lo, k = 0; i < hi; k++) {
        int j = i;
        unsigned char b = (unsigned char)t->bytes[t->piece_off[ids[i]] + d];
        while (j < hi && (unsigned char)t->bytes[t->piece_off[ids[j]] + d] == b) j++;
        t->edge_b[first + k] = b;
        t->edge_child[first + k] = trie_build(t, ids, i, j, d + 1);
        i = j;
    }
    return me;
}

#define MAX_PIECE 256           /* longer pieces (none in real vocabularies) are never allowed */

int sb_tok_trie_new(const sb_vocab *v, int32_t n_vocab, sb_tok_trie **out, char *err) {
    *out = NULL;
    sb_tok_trie *t = sb_calloc(1, sizeof *t);
    int32_t *ids = NULL;
    if (!t) goto nomem;
    t->n_vocab = n_vocab;
    const int32_t nv = SB_MIN(n_vocab, sb_vocab_n_tokens(v));
    t->piece_off = sb_malloc((size_t)n_vocab * sizeof *t->piece_off);
    t->piece_len = sb_malloc((size_t)n_vocab * sizeof *t->piece_len);
    t->eog_bits = sb_calloc(((size_t)n_vocab + 31) / 32, sizeof *t->eog_bits);
    t->eog = sb_malloc((size_t)n_vocab * sizeof *t->eog);
    ids = sb_malloc((size_t)n_vocab * sizeof *ids);
    size_t cap = 1 << 20, used = 0;
    t->bytes = sb_malloc(cap);
    if (!t->piece_off || !t->piece_len || !t->eog_bits || !t->eog || !ids || !t->bytes) goto nomem;
    int n_ids = 0;
    char buf[MAX_PIECE];
    for (int32_t id = 0; id < n_vocab; id++) {
        t->piece_len[id] = -1;
        t->piece_off[id] = 0;
        if (id >= nv) continue;
        if (sb_vocab_is_eog(v, id)) {
            t->eog[t->n_eog++] = id;
            t->eog_bits[id >> 5] |= 1u << (id & 31);
            continue;
        }
        if (sb_vocab_is_control(v, id)) continue;
        int len = sb_token_to_piece(v, id, buf, sizeof buf, 0);
        if (len <= 0 || len > (int)sizeof buf) continue;
        if (used + (size_t)len > cap) {
            char *nb = sb_realloc(t->bytes, cap * 2);
            if (!nb) goto nomem;
            t->bytes = nb;
            cap *= 2;
        }
        memcpy(t->bytes + used, buf, (size_t)len);
        t->piece_off[id] = (int32_t)used;
        t->piece_len[id] = len;
        used += (size_t)len;
        ids[n_ids++] = id;
    }
    piece_ctx pc = { t->bytes, t->piece_off, t->piece_len };
    qsort_r(ids, (size_t)n_ids, sizeof *ids, cmp_piece, &pc);
    /* At most one node per piece byte plus the root; one edge per non-root node. */
    t->nodes = sb_malloc((used + 1) * sizeof *t->nodes);
    t->edge_b = sb_malloc(used + 1);
    t->edge_child = sb_malloc((used + 1) * sizeof *t->edge_child);
    t->toks = sb_malloc(((size_t)n_ids + 1) * sizeof *t->toks);
    if (!t->nodes || !t->edge_b || !t->edge_child || !t->toks) goto nomem;
    trie_build(t, ids, 0, n_ids, 0);
    sb_free(ids);
    *out = t;
    return 0;
nomem:
    sb_free(ids);
    sb_tok_trie_free(t);
    return sb_seterr(err, SB_ENOMEM, "token trie: out of memory for %d tokens", (int)n_vocab);
}

void sb_tok_trie_free(sb_tok_trie *t) {
    if (!t) return;
    sb_free(t->nodes);
    sb_free(t->edge_b);
    sb_free(t->edge_child);
    sb_free(t->toks);
    sb_free(t->eog);
    sb_free(t->eog_bits);
    sb_free(t->bytes);
    sb_free(t->piece_off);
    sb_free(t->piece_len);
    sb_free(t);
}

int32_t sb_tok_trie_n_vocab(const sb_tok_trie *t) { return t->n_vocab; }

/* ---- matcher ---- */

typedef struct { uint64_t h; int32_t *key; int n; uint32_t *mask; } centry;

/* A mask is n_vocab bits (19 KB for a 151k vocabulary); past this many bytes
 * of masks the cache starts over rather than growing without bound. */
#define CACHE_MAX_BYTES (48u << 20)

/* Masks by position. A mask is a function of the stack set alone (for one
 * grammar and trie), so every matcher on the grammar can share one cache:
 * several generations with one schema at once (a batch of a pipeline
 * stage's calls) then compute each position's mask once, not once each. */
typedef struct {
    centry  *tab;               /* open addressing, power-of-two size */
    int      cap, n;
    size_t   bytes;
    int      refs;              /* matchers sharing it */
} mcache;

struct sb_gmatch {
    const sb_grammar  *g;
    const sb_tok_trie *t;
    sset     cur;
    sset     tmp;
    sset    *walk;              /* one per trie depth */
    int      n_walk;
    int      n_words;
    mcache  *cache;
    uint64_t computed, reused;  /* this matcher's lookups */
    int      prefetched;        /* sb_gmatch_prefetch computed this position's mask for it */
};

static void cache_clear(mcache *c) {
    for (int i = 0; i < c->cap; i++) {
        sb_free(c->tab[i].key);
        sb_free(c->tab[i].mask);
    }
    memset(c->tab, 0, (size_t)c->cap * sizeof *c->tab);
    c->n = 0;
    c->bytes = 0;
}

static void cache_unref(mcache *c) {
    if (!c || --c->refs > 0) return;
    if (c->tab) cache_clear(c);
    sb_free(c->tab);
    sb_free(c);
}

static int matcher_new(const sb_grammar *g, const sb_tok_trie *t, mcache *share, sb_gmatch **out, char *err) {
    *out = NULL;
    sb_gmatch *m = sb_calloc(1, sizeof *m);
    if (!m) return sb_seterr(err, SB_ENOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->t = t;
    m->n_words = (t->n_vocab + 31) / 32;
    m->n_walk = t->max_depth + 2;
    m->walk = sb_calloc((size_t)m->n_walk, sizeof *m->walk);
    if (share) {
        share->refs++;
        m->cache = share;
    } else if ((m->cache = sb_calloc(1, sizeof *m->cache))) {
        m->cache->refs = 1;
        m->cache->cap = 256;
        m->cache->tab = sb_calloc((size_t)m->cache->cap, sizeof *m->cache->tab);
    }
    if (!m->walk || !m->cache || !m->cache->tab) {
        sb_gmatch_free(m);
        return sb_seterr(err, SB_ENOMEM, "grammar matcher: out of memory");
    }
    sb_gmatch_reset(m);
    if (m->cur.oom) {
        sb_gmatch_free(m);
        return sb_seterr(err, SB_ENOMEM, "grammar matcher: out of memory");
    }
    *out = m;
    return 0;
}

int sb_gmatch_new(const sb_grammar *g, const sb_tok_trie *t, sb_gmatch **out, char *err) {
    return matcher_new(g, t, NULL, out, err);
}

int sb_gmatch_new_sharing(sb_gmatch *peer, sb_gmatch **out, char *err) {
    return matcher_new(peer->g, peer->t, peer->cache, out, err);
}

void sb_gmatch_free(sb_gmatch *m) {
    if (!m) return;
    cache_unref(m->cache);
    sset_free(&m->cur);
    sset_free(&m->tmp);
    for (int i = 0; m->walk && i < m->n_walk; i++) sset_free(&m->walk[i]);
    sb_free(m->walk);
    sb_free(m);
}

void sb_gmatch_reset(sb_gmatch *m) {
    sset_start(m->g, &m->cur);
    m->prefetched = 0;
}

int sb_gmatch_bytes(sb_gmatch *m, const char *bytes, size_t n) {
    if (sset_copy(&m->tmp, &m->cur)) return SB_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        sset_advance(m->g, &m->tmp, (unsigned char)bytes[i], &m->walk[0]);
        if (m->walk[0].oom) return SB_ENOMEM;
        if (m->walk[0].ns == 0) return SB_EINVAL;
        sset t = m->tmp;            /* swap buffers */
        m->tmp = m->walk[0];
        m->walk[0] = t;
    }
    sset t = m->cur;
    m->cur = m->tmp;
    m->tmp = t;
    m->prefetched = 0;
    return 0;
}

int sb_gmatch_token(sb_gmatch *m, int32_t tok) {
    const sb_tok_trie *t = m->t;
    if (tok < 0 || tok >= t->n_vocab) return SB_EINVAL;
    if (sb_mask_has(t->eog_bits, tok)) return sset_complete(&m->cur) ? 0 : SB_EINVAL;
    if (t->piece_len[tok] < 0) return SB_EINVAL;
    return sb_gmatch_bytes(m, t->bytes + t->piece_off[tok], (size_t)t->piece_len[tok]);
}

int sb_gmatch_complete(const sb_gmatch *m) { return sset_complete(&m->cur); }

int sb_gmatch_can_continue(const sb_gmatch *m) {
    for (int i = 0, off = 0; i < m->cur.ns; off += 1 + m->cur.v[off], i++)
        if (m->cur.v[off] > 0) return 1;
    return 0;
}

void sb_gmatch_stats(const sb_gmatch *m, uint64_t *computed, uint64_t *reused) {
    *computed = m->computed;
    *reused = m->reused;
}

/* A trie walk: the grammar, the trie, one stack set per depth, and whether
 * a set ran out of memory (the mask is then incomplete). */
typedef struct {
    const sb_grammar  *g;
    const sb_tok_trie *t;
    sset              *walk;
    int                oom;
} walker;

/* Allow every token whose piece runs from `node` on and keeps some stack of
 * walk[d] alive. At the root only edges k with k % n_parts == part: the
 * parts of one mask can be walked on different threads and OR-ed. */
static void walk_trie(walker *w, int32_t node, int d, int part, int n_parts, uint32_t *mask) {
    const sb_tok_trie *t = w->t;
    const tnode *n = &t->nodes[node];
    sset *next = &w->walk[d + 1];
    for (int32_t k = d ? 0 : part; k < n->n_edge; k += d ? 1 : n_parts) {
        int32_t child = t->edge_child[n->first_edge + k];
        sset_advance(w->g, &w->walk[d], t->edge_b[n->first_edge + k], next);
        w->oom |= next->oom;
        if (next->ns == 0) continue;
        const tnode *c = &t->nodes[child];
        for (int32_t j = 0; j < c->n_tok; j++) {
            int32_t id = t->toks[c->first_tok + j];
            mask[id >> 5] |= 1u << (id & 31);
        }
        if (c->n_edge) walk_trie(w, child, d + 1, 0, 1, mask);
    }
}

static void add_eog(const sb_gmatch *m, uint32_t *mask) {
    if (sset_complete(&m->cur))
        for (int32_t i = 0; i < m->t->n_eog; i++) mask[m->t->eog[i] >> 5] |= 1u << (m->t->eog[i] & 31);
}

static int compute_mask(sb_gmatch *m, uint32_t *mask) {
    memset(mask, 0, (size_t)m->n_words * sizeof *mask);
    if (sset_copy(&m->walk[0], &m->cur)) return SB_ENOMEM;
    walker w = { m->g, m->t, m->walk, 0 };
    walk_trie(&w, 0, 0, 0, 1, mask);
    if (w.oom) return SB_ENOMEM;
    add_eog(m, mask);
    m->computed++;
    return 0;
}

static int cache_grow(mcache *c) {
    int nc = c->cap * 2;
    centry *n = sb_calloc((size_t)nc, sizeof *n);
    if (!n) return SB_ENOMEM;
    for (int i = 0; i < c->cap; i++) {
        if (!c->tab[i].key) continue;
        int j = (int)(c->tab[i].h & (uint64_t)(nc - 1));
        while (n[j].key) j = (j + 1) & (nc - 1);
        n[j] = c->tab[i];
    }
    sb_free(c->tab);
    c->tab = n;
    c->cap = nc;
    return 0;
}

static uint64_t pos_hash(const sset *s) { return hash_ints(s->v, s->n, 0x9E3779B97F4A7C15ull) | 1; }

/* The cached mask of position s (hash h), or NULL. */
static const uint32_t *cache_find(const mcache *c, const sset *s, uint64_t h) {
    for (int j = (int)(h & (uint64_t)(c->cap - 1)); c->tab[j].key; j = (j + 1) & (c->cap - 1))
        if (c->tab[j].h == h && c->tab[j].n == s->n && !memcmp(c->tab[j].key, s->v, (size_t)s->n * sizeof *s->v))
            return c->tab[j].mask;
    return NULL;
}

/* Room for one more mask of mask_bytes (clearing the cache past its bound). */
static int cache_room(mcache *c, size_t mask_bytes) {
    if (c->bytes + mask_bytes > CACHE_MAX_BYTES) cache_clear(c);
    return 2 * (c->n + 1) > c->cap ? cache_grow(c) : 0;
}

/* Store mask for position s: key (room for s's ints) and mask are
 * sb_malloc'ed and owned by the cache from here. */
static void cache_put(mcache *c, const sset *s, uint64_t h, int32_t *key, uint32_t *mask, size_t mask_bytes) {
    memcpy(key, s->v, (size_t)s->n * sizeof *s->v);
    int j = (int)(h & (uint64_t)(c->cap - 1));
    while (c->tab[j].key) j = (j + 1) & (c->cap - 1);
    c->tab[j] = (centry){ h, key, s->n, mask };
    c->n++;
    c->bytes += mask_bytes + (size_t)s->n * sizeof *s->v;
}

const uint32_t *sb_gmatch_mask(sb_gmatch *m) {
    const sset *s = &m->cur;
    mcache *c = m->cache;
    const uint64_t h = pos_hash(s);
    const uint32_t *hit = cache_find(c, s, h);
    if (hit) {
        /* A mask prefetched for this matcher counts as its own computing:
         * the figures stay those of lookups one at a time. */
        if (m->prefetched) m->computed++;
        else m->reused++;
        m->prefetched = 0;
        return hit;
    }
    const size_t mask_bytes = (size_t)m->n_words * sizeof(uint32_t);
    if (cache_room(c, mask_bytes)) return NULL;
    int32_t *key = sb_malloc((size_t)SB_MAX(s->n, 1) * sizeof *s->v);
    uint32_t *mask = sb_malloc(mask_bytes);
    if (!key || !mask || compute_mask(m, mask)) {
        sb_free(key);
        sb_free(mask);
        return NULL;
    }
    cache_put(c, s, h, key, mask, mask_bytes);
    return mask;
}

/* ---- masks of several positions on a pool ---- */

#define PREFETCH_MAX_PARTS 16

typedef struct {
    sb_gmatch **miss;           /* the positions to compute */
    uint32_t  **mask;           /* task = miss · n_parts + part: its zeroed partial mask */
    sset      **walk;           /* per pool thread: walk buffers, n_walk deep */
    int        *oom;            /* per task */
    int         n_parts;
} prefetch_job;

static void prefetch_task(void *arg, int task, int thread) {
    prefetch_job *j = arg;
    const sb_gmatch *m = j->miss[task / j->n_parts];
    walker w = { m->g, m->t, j->walk[thread], 0 };
    if (sset_copy(&w.walk[0], &m->cur)) {
        j->oom[task] = 1;
        return;
    }
    walk_trie(&w, 0, 0, task % j->n_parts, j->n_parts, j->mask[task]);
    j->oom[task] = w.oom;
}

void sb_gmatch_prefetch(sb_gmatch *const *ms, int n, sb_pool *pool) {
    const int n_threads = pool ? sb_pool_size(pool) : 1;
    if (n <= 0 || n_threads < 2) return;
    sb_gmatch **miss = sb_malloc((size_t)n * sizeof *miss);
    if (!miss) return;
    int n_miss = 0, n_walk = 0;
    for (int i = 0; i < n; i++) {
        sb_gmatch *m = ms[i];
        if (cache_find(m->cache, &m->cur, pos_hash(&m->cur))) continue;
        int dup = 0;
        for (int k = 0; k < n_miss && !dup; k++)
            dup = miss[k]->cache == m->cache && miss[k]->cur.n == m->cur.n &&
                  !memcmp(miss[k]->cur.v, m->cur.v, (size_t)m->cur.n * sizeof *m->cur.v);
        if (dup) continue;
        miss[n_miss++] = m;
        n_walk = SB_MAX(n_walk, m->n_walk);
    }
    /* Enough tasks that both threads stay busy although root subtrees differ
     * widely in size (work stealing evens them out). */
    const int n_parts = n_miss ? SB_MIN(PREFETCH_MAX_PARTS, (4 * n_threads + n_miss - 1) / n_miss) : 1;
    const int n_tasks = n_miss * n_parts;
    prefetch_job j = { miss, NULL, NULL, NULL, n_parts };
    if (!n_miss || !(j.mask = sb_calloc((size_t)n_tasks, sizeof *j.mask)) ||
        !(j.oom = sb_calloc((size_t)n_tasks, sizeof *j.oom)) || !(j.walk = sb_calloc((size_t)n_threads, sizeof *j.walk)))
        goto out;
    for (int k = 0; k < n_tasks; k++)
        if (!(j.mask[k] = sb_calloc((size_t)miss[k / n_parts]->n_words, sizeof(uint32_t)))) goto out;
    for (int k = 0; k < n_threads; k++)
        if (!(j.walk[k] = sb_calloc((size_t)n_walk, sizeof(sset)))) goto out;
    sb_pool_run(pool, prefetch_task, &j, n_tasks);
    for (int i = 0; i < n_miss; i++) {
        sb_gmatch *m = miss[i];
        uint32_t *mask = j.mask[i * n_parts];
        int oom = 0;
        for (int p = 0; p < n_parts; p++) oom |= j.oom[i * n_parts + p];
        const size_t mask_bytes = (size_t)m->n_words * sizeof(uint32_t);
        int32_t *key = NULL;
        /* Out of memory: left to sb_gmatch_mask, which reports it. */
        if (oom || cache_room(m->cache, mask_bytes) || !(key = sb_malloc((size_t)SB_MAX(m->cur.n, 1) * sizeof *key)))
            continue;
        for (int p = 1; p < n_parts; p++)
            for (int w = 0; w < m->n_words; w++) mask[w] |= j.mask[i * n_parts + p][w];
        add_eog(m, mask);
        cache_put(m->cache, &m->cur, pos_hash(&m->cur), key, mask, mask_bytes);
        j.mask[i * n_parts] = NULL;     /* the cache's now */
        m->prefetched = 1;
    }
out:
    for (int k = 0; j.mask && k < n_tasks; k++) sb_free(j.mask[k]);
    for (int k = 0; j.walk && k < n_threads; k++) {
        for (int d = 0; j.walk[k] && d < n_walk; d++) sset_free(&j.walk[k][d]);
        sb_free(j.walk[k]);
    }
    sb_free(j.mask);
    sb_free(j.oom);
    sb_free(j.walk);
    sb_free(miss);
}
