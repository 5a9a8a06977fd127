/* charsmap.c - SentencePiece precompiled charsmaps: read and build (see
 * sb_charsmap.h for the format). */
#include <stdlib.h>
#include <string.h>

#include "worker/tokenizer/sb_charsmap.h"
#include "common/sb_common.h"

#define VALUE_BIT   (1u << 31)
#define LEAF_BIT    (1u << 8)
#define MAX_BASE    (1u << 21)      /* bases below this need no bit-9 extension */

static uint32_t unit_base(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

int sb_charsmap_load(const uint8_t *blob, size_t len, sb_charsmap *cm, char *err) {
    memset(cm, 0, sizeof *cm);
    if (len == 0) return 0;
    uint32_t trie_bytes;
    if (len < 4) return sb_seterr(err, SB_EFORMAT, "precompiled charsmap: %zu bytes, shorter than its header", len);
    memcpy(&trie_bytes, blob, 4);
    if (trie_bytes % 4 || trie_bytes == 0 || (size_t)trie_bytes > len - 4)
        return sb_seterr(err, SB_EFORMAT, "precompiled charsmap: trie of %u bytes in a %zu-byte blob", trie_bytes, len);
    cm->n_units = trie_bytes / 4;
    cm->repl_len = len - 4 - trie_bytes;
    cm->units = sb_malloc(trie_bytes);
    cm->repl = sb_malloc(cm->repl_len + 1);
    if (!cm->units || !cm->repl) {
        sb_charsmap_free(cm);
        return sb_seterr(err, SB_ENOMEM, "out of memory for the charsmap");
    }
    memcpy(cm->units, blob + 4, trie_bytes);
    memcpy(cm->repl, blob + 4 + trie_bytes, cm->repl_len);
    cm->repl[cm->repl_len] = 0;
    return 0;
}

void sb_charsmap_free(sb_charsmap *cm) {
    sb_free(cm->units);
    sb_free(cm->repl);
    memset(cm, 0, sizeof *cm);
}

size_t sb_charsmap_match(const sb_charsmap *cm, const char *s, size_t n, const char **out, size_t *out_len) {
    if (!cm->n_units) return 0;
    size_t best = 0;
    uint32_t pos = unit_base(cm->units[0]);
    for (size_t i = 0; i < n; i++) {
        const uint8_t c = (uint8_t)s[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= cm->n_units) break;
        const uint32_t u = cm->units[pos];
        if ((u & (VALUE_BIT | 0xFF)) != c) break;
        pos ^= unit_base(u);
        if (pos >= cm->n_units) break;
        if (u & LEAF_BIT) {
            const uint32_t off = cm->units[pos] & ~VALUE_BIT;
            if (off >= cm->repl_len) break;      /* a corrupt value ends the match */
            best = i + 1;
            *out = cm->repl + off;
            *out_len = strnlen(*out, cm->repl_len - off);
        }
    }
    return best;
}

/* ---- building ---------------------------------------------------------- */

typedef struct {
    int32_t  child, sibling;    /* first child; next sibling (labels ascending) */
    int32_t  value;             /* replacement offset, -1: none */
    uint32_t pos;
    uint8_t  label;
} tnode;

typedef struct {
    tnode    *node;
    size_t    n_node, cap_node;
    uint32_t *unit;
    uint8_t  *used;             /* slot taken */
    uint8_t  *offset_used;      /* pos ^ base taken by some node: see place() */
    size_t    cap_unit, max_pos, scan;
} builder;

static int grow_units(builder *b, size_t need) {
    if (need <= b->cap_unit) return 0;
    size_t cap = b->cap_unit ? b->cap_unit : 1024;
    while (cap < need) cap *= 2;
    uint32_t *u = sb_realloc(b->unit, cap * sizeof *u);
    if (!u) return SB_ENOMEM;
    b->unit = u;
    uint8_t *used = sb_realloc(b->used, cap);
    if (!used) return SB_ENOMEM;
    b->used = used;
    uint8_t *ou = sb_realloc(b->offset_used, cap);
    if (!ou) return SB_ENOMEM;
    b->offset_used = ou;
    memset(b->unit + b->cap_unit, 0, (cap - b->cap_unit) * sizeof *u);
    memset(b->used + b->cap_unit, 0, cap - b->cap_unit);
    memset(b->offset_used + b->cap_unit, 0, cap - b->cap_unit);
    b->cap_unit = cap;
    return 0;
}

static int32_t new_node(builder *b, uint8_t label) {
    if (b->n_node == b->cap_node) {
        size_t cap = b->cap_node ? 2 * b->cap_node : 256;
        tnode *nn = sb_realloc(b->node, cap * sizeof *nn);
        if (!nn) return -1;
        b->node = nn;
        b->cap_node = cap;
    }
    b->node[b->n_node] = (tnode){ -1, -1, -1, 0, label };
    return (int32_t)b->n_node++;
}

/* Keys arrive sorted, so a new child is always the last sibling. */
static int insert(builder *b, const uint8_t *key, size_t len, int32_t value) {
    int32_t cur = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t c = b->node[cur].child, last = -1;
        while (c >= 0 && b->node[c].label != key[i]) { last = c; c = b->node[c].sibling; }
        if (c < 0) {
            if ((c = new_node(b, key[i])) < 0) return SB_ENOMEM;
            if (last >= 0) b->node[last].sibling = c;
            else b->node[cur].child = c;
        }
        cur = c;
    }
    if (b->node[cur].value >= 0) return SB_EINVAL;
    b->node[cur].value = value;
    return 0;
}

/* Place the children (and value slot, label 0) of node `ni`: find a base
 * whose slots pos ^ base ^ label are all free, first fit from the lowest
 * free position. A unit records its label but not its parent, so no two
 * nodes may share an offset pos ^ base: a node looking for a label it
 * lacks would land on the other node's child of that label and match a
 * key that is not there (darts-clone keeps the same "offset used" mark). */
static int place(builder *b, int32_t ni) {
    tnode *nd = &b->node[ni];
    uint8_t labels[257];
    int nl = 0;
    if (nd->value >= 0) labels[nl++] = 0;
    for (int32_t c = nd->child; c >= 0; c = b->node[c].sibling) labels[nl++] = b->node[c].label;
    if (!nl) return 0;
    const uint32_t s = nd->pos;
    while (b->scan < b->cap_unit && b->used[b->scan]) b->scan++;
    for (size_t q = b->scan;; q++) {
        if (grow_units(b, q + 512)) return SB_ENOMEM;
        if (b->used[q]) continue;
        const uint32_t base = s ^ (uint32_t)q ^ labels[0];
        if (base >= MAX_BASE) return SB_ERANGE;
        if (grow_units(b, (size_t)((s ^ base) | 0xFF) + 1)) return SB_ENOMEM;
        int ok = !b->offset_used[s ^ base];
        for (int k = 0; k < nl && ok; k++) ok = !b->used[s ^ base ^ labels[k]];
        if (!ok) continue;
        b->offset_used[s ^ base] = 1;
        b->unit[s] |= base << 10;
        if (nd->value >= 0) {
            b->unit[s] |= LEAF_BIT;
            b->unit[s ^ base] = VALUE_BIT | (uint32_t)nd->value;
            b->used[s ^ base] = 1;
        }
        for (int32_t c = nd->child; c >= 0; c = b->node[c].sibling) {
            const uint32_t p = s ^ base ^ b->node[c].label;
            b->node[c].pos = p;
            b->unit[p] = b->node[c].label;
            b->used[p] = 1;
        }
        b->max_pos = SB_MAX(b->max_pos, (size_t)((s ^ base) | 0xFF));
        return 0;
    }
}

static int cmp_rule(const void *a, const void *b, void *arg) {
    const sb_charsmap_rule *rules = arg;
    const sb_charsmap_rule *x = &rules[*(const size_t *)a], *y = &rules[*(const size_t *)b];
    int c = memcmp(x->key, y->key, SB_MIN(x->key_len, y->key_len));
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

static int build_trie(builder *b, const sb_charsmap_rule *rules, size_t n, const size_t *order,
                      const uint32_t *offs, char *err) {
    if (new_node(b, 0) < 0 || grow_units(b, 1024)) return sb_seterr(err, SB_ENOMEM, "out of memory");
    b->used[0] = 1;
    for (size_t i = 0; i < n; i++) {
        const sb_charsmap_rule *r = &rules[order[i]];
        if (!r->key_len || memchr(r->key, 0, r->key_len))
            return sb_seterr(err, SB_EINVAL, "charsmap rule %zu: empty key or NUL byte in it", order[i]);
        int rc = insert(b, (const uint8_t *)r->key, r->key_len, (int32_t)offs[order[i]]);
        if (rc == SB_EINVAL) return sb_seterr(err, rc, "charsmap rule %zu: duplicate key", order[i]);
        if (rc) return sb_seterr(err, rc, "out of memory");
    }
    /* breadth first: node indices are only appended, so a plain index walk
     * visits parents before children */
    for (size_t ni = 0; ni < b->n_node; ni++) {
        int rc = place(b, (int32_t)ni);
        if (rc == SB_ERANGE) return sb_seterr(err, rc, "charsmap trie too large for 21-bit bases");
        if (rc) return sb_seterr(err, rc, "out of memory");
    }
    return 0;
}

int sb_charsmap_build(const sb_charsmap_rule *rules, size_t n, uint8_t **out, size_t *out_len, char *err) {
    *out = NULL;
    *out_len = 0;
    builder b;
    memset(&b, 0, sizeof b);
    /* replacements: offset 0 is a lone NUL that no rule uses (llama.cpp
     * reads offset 0 as "no match"); then each replacement + NUL */
    size_t repl_len = 1;
    for (size_t i = 0; i < n; i++) {
        if (memchr(rules[i].repl, 0, rules[i].repl_len))
            return sb_seterr(err, SB_EINVAL, "charsmap rule %zu: NUL byte in the replacement", i);
        repl_len += rules[i].repl_len + 1;
    }
    size_t *order = sb_malloc((n + 1) * sizeof *order);
    uint32_t *offs = sb_malloc((n + 1) * sizeof *offs);
    int rc = SB_ENOMEM;
    if (!order || !offs) { sb_seterr(err, rc, "out of memory"); goto done; }
    size_t off = 1;
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
        offs[i] = (uint32_t)off;
        off += rules[i].repl_len + 1;
    }
    qsort_r(order, n, sizeof *order, cmp_rule, (void *)rules);
    if ((rc = build_trie(&b, rules, n, order, offs, err))) goto done;
    const size_t n_units = b.max_pos + 1;
    const size_t trie_bytes = n_units * 4;
    if (!(*out = sb_calloc(1, 4 + trie_bytes + repl_len))) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); goto done; }
    const uint32_t tb = (uint32_t)trie_bytes;
    memcpy(*out, &tb, 4);
    memcpy(*out + 4, b.unit, trie_bytes);
    uint8_t *rp = *out + 4 + trie_bytes + 1;
    for (size_t i = 0; i < n; i++) {
        memcpy(rp, rules[i].repl, rules[i].repl_len);
        rp += rules[i].repl_len + 1;
    }
    *out_len = 4 + trie_bytes + repl_len;
    rc = 0;
done:
    sb_free(order);
    sb_free(offs);
    sb_free(b.node);
    sb_free(b.unit);
    sb_free(b.used);
    sb_free(b.offset_used);
    return rc;
}
