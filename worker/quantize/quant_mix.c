/* quant_mix.c - which type each tensor gets: llama-quantize's mixes.
 *
 * Our own code, written from reading llama.cpp 0c1e57098's
 * src/llama-quant.cpp (tensor_allows_quantization, llama_tensor_get_type,
 * llama_tensor_get_type_impl, tensor_type_fallback) for the file types we
 * write. The rules in short:
 *  - only tensors of >= 2 dimensions whose names end in "weight" are
 *    quantized (never norms, expert gates, position embeddings, …);
 *  - output.weight (and token_embd.weight when the model ties it to the
 *    output) gets Q6_K, or Q8_0 if its rows do not fit the default block;
 *  - attn_v-like tensors (attn_v, attn_qkv, attn_kv_b), ffn_down and
 *    attn_output are raised for some file types, by layer position
 *    ("use_more_bits": the first and last eighth and every third layer in
 *    between), by GQA ratio or expert count;
 *  - a k-quant whose rows are not a multiple of 256 falls back to a 32-block
 *    type (Q4_K -> Q5_0 …), and to F16 if even 32 does not divide the row.
 * The counters advance in the order llama-quantize visits tensors, which is
 * also the order the output is written in: by layer number, then by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/kernels/sb_kq.h"
#include "worker/quantize/sb_quantize.h"

/* ==== file types ============================================================ */

/* Bits per weight of the block types: Q4_0 4.5, Q4_1 5, Q5_0 5.5, Q5_1 6,
 * Q8_0 8.5, Q2_K 2.625, Q3_K 3.4375, Q4_K 4.5, Q5_K 5.5, Q6_K 6.5625. */
static const sb_ftype_info ftypes[] = {
    { "Q4_0",   SB_FTYPE_Q4_0,   SB_TYPE_Q4_0, "Q4_0 (4.5 bpw, 32-blocks), output Q6_K" },
    { "Q4_1",   SB_FTYPE_Q4_1,   SB_TYPE_Q4_1, "Q4_1 (5.0 bpw, 32-blocks with a min), output Q6_K" },
    { "Q5_0",   SB_FTYPE_Q5_0,   SB_TYPE_Q5_0, "Q5_0 (5.5 bpw), output Q6_K" },
    { "Q5_1",   SB_FTYPE_Q5_1,   SB_TYPE_Q5_1, "Q5_1 (6.0 bpw), output Q6_K" },
    { "Q8_0",   SB_FTYPE_Q8_0,   SB_TYPE_Q8_0, "Q8_0 (8.5 bpw) everywhere: nearly lossless" },
    { "Q2_K",   SB_FTYPE_Q2_K,   SB_TYPE_Q2_K, "Q2_K (2.6 bpw) mix: attn_v, ffn_down, attn_output raised" },
    { "Q2_K_S", SB_FTYPE_Q2_K_S, SB_TYPE_Q2_K, "Q2_K almost everywhere; needs --imatrix" },
    { "Q3_K_S", SB_FTYPE_Q3_K_S, SB_TYPE_Q3_K, "Q3_K (3.4 bpw), output Q6_K" },
    { "Q3_K_M", SB_FTYPE_Q3_K_M, SB_TYPE_Q3_K, "Q3_K mix, Q4_K/Q5_K attn_v, ffn_down, attn_output" },
    { "Q3_K_L", SB_FTYPE_Q3_K_L, SB_TYPE_Q3_K, "Q3_K mix, Q5_K attn_v, ffn_down, attn_output" },
    { "Q4_K_S", SB_FTYPE_Q4_K_S, SB_TYPE_Q4_K, "Q4_K (4.5 bpw), first attn_v/ffn_down Q5_K" },
    { "Q4_K_M", SB_FTYPE_Q4_K_M, SB_TYPE_Q4_K, "Q4_K mix, Q6_K in half the attn_v/ffn_down: the usual choice" },
    { "Q5_K_S", SB_FTYPE_Q5_K_S, SB_TYPE_Q5_K, "Q5_K (5.5 bpw), output Q6_K" },
    { "Q5_K_M", SB_FTYPE_Q5_K_M, SB_TYPE_Q5_K, "Q5_K mix, Q6_K in half the attn_v/ffn_down" },
    { "Q6_K",   SB_FTYPE_Q6_K,   SB_TYPE_Q6_K, "Q6_K (6.6 bpw) everywhere" },
    { "F16",    SB_FTYPE_F16,    SB_TYPE_F16,  "F16 (1-D tensors stay F32)" },
    { "BF16",   SB_FTYPE_BF16,   SB_TYPE_BF16, "BF16 (1-D tensors stay F32)" },
    { "F32",    SB_FTYPE_ALL_F32, SB_TYPE_F32, "F32" },
};

const sb_ftype_info *sb_ftype_at(size_t i) { return i < SB_ARRAY_LEN(ftypes) ? &ftypes[i] : NULL; }

const sb_ftype_info *sb_ftype_by_id(int ftype) {
    for (size_t i = 0; i < SB_ARRAY_LEN(ftypes); i++)
        if (ftypes[i].ftype == ftype) return &ftypes[i];
    return NULL;
}

const sb_ftype_info *sb_ftype_by_name(const char *name) {
    /* llama-quantize's aliases: the plain k-quant names mean the _M mix */
    static const struct { const char *alias, *name; } aliases[] = {
        { "Q3_K", "Q3_K_M" }, { "Q4_K", "Q4_K_M" }, { "Q5_K", "Q5_K_M" },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(aliases); i++)
        if (!strcasecmp(name, aliases[i].alias)) name = aliases[i].name;
    for (size_t i = 0; i < SB_ARRAY_LEN(ftypes); i++)
        if (!strcasecmp(name, ftypes[i].name)) return &ftypes[i];
    return NULL;
}

/* ==== model facts =========================================================== */

static int get_count(const sb_gguf *g, const char *arch, const char *suffix, uint32_t *out, int required,
                     char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    if (!kv) {
        if (required) return sb_seterr(err, SB_EFORMAT, "%s: missing metadata key %s", sb_gguf_path(g), key);
        return SB_ENOTFOUND;
    }
    /* per-layer arrays: llama.cpp's n_head(il) for il = 0 is what the rules use */
    if (kv->type == SB_GGUF_ARRAY) {
        if (!kv->arr_n || kv->arr_type == SB_GGUF_STRING || kv->arr_type == SB_GGUF_ARRAY ||
            kv->arr_type == SB_GGUF_F32 || kv->arr_type == SB_GGUF_F64)
            return sb_seterr(err, SB_EFORMAT, "%s: %s is not an integer array", sb_gguf_path(g), key);
        int64_t v = sb_gguf_arr_int(kv, 0);
        if (v < 0 || v > UINT32_MAX) return sb_seterr(err, SB_ERANGE, "%s: %s[0] = %lld", sb_gguf_path(g), key, (long long)v);
        *out = (uint32_t)v;
        return 0;
    }
    int rc = sb_gguf_get_u32(g, key, out);
    return rc ? sb_seterr(err, rc, "%s: %s is not a 32-bit count", sb_gguf_path(g), key) : 0;
}

int sb_quant_hparams_read(const sb_gguf *g, sb_quant_hparams *hp, char *err) {
    memset(hp, 0, sizeof *hp);
    sb_str arch;
    if (sb_gguf_get_str(g, "general.architecture", &arch) || !arch.len || arch.len >= sizeof hp->arch)
        return sb_seterr(err, SB_EFORMAT, "%s: general.architecture is missing or not a short string",
                         sb_gguf_path(g));
    memcpy(hp->arch, arch.ptr, arch.len);
    int rc;
    if ((rc = get_count(g, hp->arch, "block_count", &hp->n_layer, 1, err))) return rc;
    rc = get_count(g, hp->arch, "attention.head_count", &hp->n_head, 0, err);
    if (rc && rc != SB_ENOTFOUND) return rc;
    hp->n_head_kv = hp->n_head;     /* llama.cpp's default: no GQA */
    rc = get_count(g, hp->arch, "attention.head_count_kv", &hp->n_head_kv, 0, err);
    if (rc && rc != SB_ENOTFOUND) return rc;
    rc = get_count(g, hp->arch, "expert_count", &hp->n_expert, 0, err);
    if (rc && rc != SB_ENOTFOUND) return rc;
    /* LLM_TYPE_70B, as each architecture's load_hparams assigns it: only
     * this model size has a rule of its own. */
    const char *a = hp->arch;
    if (!strcmp(a, "llama"))
        hp->is_70b = hp->n_expert != 8 && hp->n_layer == 80 && hp->n_head != hp->n_head_kv;
    else if (!strcmp(a, "qwen2") || !strcmp(a, "deci") || !strcmp(a, "olmo"))
        hp->is_70b = hp->n_layer == 80;
    else if (!strcmp(a, "jais2"))
        hp->is_70b = hp->n_layer == 68;
    return 0;
}

/* ==== what may be quantized ================================================= */

/* ggml_n_dims: trailing dimensions of 1 do not count. */
static int effective_dims(const sb_gguf_tensor *t) {
    int n = 1;
    for (uint32_t d = 1; d < t->n_dims; d++)
        if (t->ne[d] > 1) n = (int)d + 1;
    return n;
}

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* tensor_allows_quantization: names that stay as they are even though they
 * are 2-D weights (small, or used in ways quantization breaks). */
static int allows_quantization(const char *name, int n_dims) {
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
        "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
        "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
        ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    if (n_dims < 2) return 0;
    size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 6, "weight") != 0) return 0;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return 0;
    for (size_t i = 0; i < SB_ARRAY_LEN(never); i++)
        if (contains(name, never[i])) return 0;
    return 1;
}

/* ==== the rules ============================================================= */

enum category {
    CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER
};

/* The first match wins, in llama.cpp's order (attn_qkv before attn_v …). */
static enum category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    static const struct { const char *sub; enum category cat; } by_substring[] = {
        { "attn_qkv.weight", CAT_ATTN_QKV }, { "attn_kv_b.weight", CAT_ATTN_KV_B },
        { "attn_v.weight", CAT_ATTN_V }, { "attn_k.weight", CAT_ATTN_K },
        { "attn_q.weight", CAT_ATTN_Q }, { "attn_output.weight", CAT_ATTN_OUTPUT },
        { "ffn_up", CAT_FFN_UP }, { "ffn_gate", CAT_FFN_GATE }, { "ffn_down", CAT_FFN_DOWN },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(by_substring); i++)
        if (contains(name, by_substring[i].sub)) return by_substring[i].cat;
    return CAT_OTHER;
}

/* attn_v and the tensors that hold it fused are the most sensitive. */
static int is_attn_v_like(enum category c) {
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

typedef struct {
    const sb_quant_hparams *hp;
    int ftype, has_imatrix, tied_embeddings, is_falcon;
    int n_attention_wv, i_attention_wv;
    int n_layer, i_ffn_down;
} mix_state;

/* The first and last eighth of the layers, and every third one between. */
static int use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

static int n_gqa(const sb_quant_hparams *hp) { return hp->n_head_kv ? (int)(hp->n_head / hp->n_head_kv) : 0; }

static int block_of(int type) { return sb_kq_table(SB_KQ_REF)[type].blck_size; }

/* Layer of an ffn_down tensor: the visit count, except in MoE models, where
 * experts of one layer are separate tensors and the name says the layer. */
static int ffn_layer(mix_state *s, const char *name, int *layer, char *err) {
    *layer = s->i_ffn_down;
    if (s->hp->n_expert > 1) {
        if (sscanf(name, "blk.%d.", layer) != 1)
            return sb_seterr(err, SB_EFORMAT, "cannot tell the layer of tensor %s", name);
        if (*layer < 0 || *layer >= s->n_layer)
            return sb_seterr(err, SB_EFORMAT, "bad layer %d for tensor %s (%d layers)", *layer, name, s->n_layer);
    }
    return 0;
}

/* llama_tensor_get_type_impl, for the file types in ftypes[]. */
static int rule_type(mix_state *s, int t, const char *name, int64_t ne0, enum category cat, char *err) {
    const int f = s->ftype;
    const int falcon = s->is_falcon;
    if (cat == CAT_OUTPUT || (s->tied_embeddings && cat == CAT_TOKEN_EMBD)) {
        if (falcon || ne0 % block_of(t) != 0) return SB_TYPE_Q8_0;
        return t != SB_TYPE_Q8_0 ? SB_TYPE_Q6_K : t;
    }
    if (cat == CAT_TOKEN_EMBD) return t;    /* only IQ/TQ file types change it */
    if (is_attn_v_like(cat)) {
        const int i = s->i_attention_wv, n = s->n_attention_wv;
        if (f == SB_FTYPE_Q2_K) t = n_gqa(s->hp) >= 4 ? SB_TYPE_Q4_K : SB_TYPE_Q3_K;
        else if (f == SB_FTYPE_Q2_K_S && n_gqa(s->hp) >= 4) t = SB_TYPE_Q4_K;
        else if (f == SB_FTYPE_Q3_K_M) t = i < 2 ? SB_TYPE_Q5_K : SB_TYPE_Q4_K;
        else if (f == SB_FTYPE_Q3_K_L) t = SB_TYPE_Q5_K;
        else if ((f == SB_FTYPE_Q4_K_M || f == SB_FTYPE_Q5_K_M) && use_more_bits(i, n)) t = SB_TYPE_Q6_K;
        else if (f == SB_FTYPE_Q4_K_S && i < 4) t = SB_TYPE_Q5_K;
        /* 70B: 8 heads share each attn_v, so it is 8x smaller than attn_q
         * and more bits cost almost nothing */
        if (s->hp->is_70b && (t == SB_TYPE_Q3_K || t == SB_TYPE_Q4_K)) t = SB_TYPE_Q5_K;
        if (s->hp->n_expert == 8) t = SB_TYPE_Q8_0;
        s->i_attention_wv++;
        return t;
    }
    if (cat == CAT_ATTN_K) return s->hp->n_expert == 8 ? SB_TYPE_Q8_0 : t;
    if (cat == CAT_FFN_DOWN) {
        int i, rc = ffn_layer(s, name, &i, err);
        const int n = s->n_layer;
        if (rc) return rc;
        if (f == SB_FTYPE_Q2_K) t = SB_TYPE_Q3_K;
        else if (f == SB_FTYPE_Q2_K_S) { if (i < n / 8) t = SB_TYPE_Q4_K; }
        else if (f == SB_FTYPE_Q3_K_M)
            t = i < n / 16 ? SB_TYPE_Q5_K : !falcon || use_more_bits(i, n) ? SB_TYPE_Q4_K : SB_TYPE_Q3_K;
        else if (f == SB_FTYPE_Q3_K_L) t = falcon ? SB_TYPE_Q4_K : SB_TYPE_Q5_K;
        else if (f == SB_FTYPE_Q4_K_M) {
            if (falcon) t = i < n / 16 ? SB_TYPE_Q6_K : use_more_bits(i, n) ? SB_TYPE_Q5_K : SB_TYPE_Q4_K;
            else if (use_more_bits(i, n)) t = SB_TYPE_Q6_K;
        } else if (f == SB_FTYPE_Q5_K_M && use_more_bits(i, n)) t = SB_TYPE_Q6_K;
        else if (f == SB_FTYPE_Q4_K_S && !falcon && i < n / 8) t = SB_TYPE_Q5_K;
        else if ((f == SB_FTYPE_Q4_0 || f == SB_FTYPE_Q5_0) && s->has_imatrix && i < n / 8)
            /* with an imatrix the first ffn_down layers go haywire in Q4_0/Q5_0 */
            t = f == SB_FTYPE_Q4_0 ? SB_TYPE_Q4_1 : SB_TYPE_Q5_1;
        s->i_ffn_down++;
        return t;
    }
    if (cat == CAT_ATTN_OUTPUT) {
        if (!falcon) {
            if (s->hp->n_expert == 8) {
                if (f == SB_FTYPE_Q2_K || f == SB_FTYPE_Q3_K_S || f == SB_FTYPE_Q3_K_M ||
                    f == SB_FTYPE_Q4_K_S || f == SB_FTYPE_Q4_K_M)
                    t = SB_TYPE_Q5_K;
            } else if (f == SB_FTYPE_Q2_K) t = SB_TYPE_Q3_K;
            else if (f == SB_FTYPE_Q3_K_M) t = SB_TYPE_Q4_K;
            else if (f == SB_FTYPE_Q3_K_L) t = SB_TYPE_Q5_K;
        } else if (f == SB_FTYPE_Q3_K_L) t = SB_TYPE_Q4_K;
        return t;
    }
    /* llama.cpp has an attn_qkv branch after this point, but attn_qkv is
     * attn_v-like and took the branch above; ffn_gate/ffn_up rules concern
     * IQ3_XS only. */
    return t;
}

/* tensor_type_fallback: a row that does not split into the type's blocks. */
static int fallback_type(int t, int64_t ne0, int *fell_back) {
    if (ne0 % block_of(t) == 0) return t;
    *fell_back = 1;
    int r;
    switch (t) {
    case SB_TYPE_Q2_K: case SB_TYPE_Q3_K: r = SB_TYPE_Q4_0; break;
    case SB_TYPE_Q4_K: r = SB_TYPE_Q5_0; break;
    case SB_TYPE_Q5_K: r = SB_TYPE_Q5_1; break;
    case SB_TYPE_Q6_K: r = SB_TYPE_Q8_0; break;
    default: r = t; break;          /* already a 32-block type */
    }
    return ne0 % block_of(r) == 0 ? r : SB_TYPE_F16;
}

/* ==== order and plan ======================================================== */

typedef struct { int layer; const char *name; size_t index; } order_key;

static int layer_of(const char *name) {
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1) layer = -1;
    return layer;
}

/* llama_model_loader's weights_map order: layer number, then name bytes. */
static int cmp_order(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

int sb_quant_plan(const sb_gguf *g, const sb_quant_hparams *hp, const sb_quant_mix_params *p,
                  sb_quant_plan_entry *out, char *err) {
    const sb_ftype_info *fi = sb_ftype_by_id(p->ftype);
    if (!fi) return sb_seterr(err, SB_EUNSUP, "unsupported file type %d", p->ftype);
    const size_t n = sb_gguf_n_tensors(g);
    order_key *keys = sb_calloc(n ? n : 1, sizeof *keys);
    char *names = sb_calloc(n ? n : 1, SB_GGUF_MAX_NAME);
    if (!keys || !names) {
        sb_free(keys);
        sb_free(names);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    mix_state s = { .hp = hp, .ftype = p->ftype, .has_imatrix = p->has_imatrix, .tied_embeddings = 1,
                    .is_falcon = !strcmp(hp->arch, "falcon"), .n_layer = (int)hp->n_layer };
    for (size_t i = 0; i < n; i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        char *nm = names + i * SB_GGUF_MAX_NAME;
        memcpy(nm, t->name.ptr, SB_MIN(t->name.len, (size_t)SB_GGUF_MAX_NAME - 1));
        keys[i] = (order_key){ layer_of(nm), nm, i };
        const enum category c = category_of(nm);
        if (is_attn_v_like(c)) s.n_attention_wv++;
        if (c == CAT_OUTPUT) s.tied_embeddings = 0;
    }
    qsort(keys, n, sizeof *keys, cmp_order);
    const int quantized_default = sb_kq_table(SB_KQ_REF)[fi->default_type].is_quantized;
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, keys[k].index);
        const char *nm = keys[k].name;
        sb_quant_plan_entry *e = &out[k];
        memset(e, 0, sizeof *e);
        e->src_index = keys[k].index;
        e->type = (int)t->type;
        if (!allows_quantization(nm, effective_dims(t))) continue;
        int type = fi->default_type;
        if (quantized_default) {
            if (!p->pure) {
                type = rule_type(&s, type, nm, t->ne[0], category_of(nm), err);
                if (type < 0) { rc = type; break; }
            }
            type = fallback_type(type, t->ne[0], &e->fallback);
        }
        e->type = type;
        e->quantize = 1;
        /* Q2_K_S's Q2_K tensors are garbage without an imatrix (the output
         * and embeddings are exempt) */
        e->requires_imatrix = p->ftype == SB_FTYPE_Q2_K_S && type == SB_TYPE_Q2_K &&
                              category_of(nm) != CAT_OUTPUT && strcmp(nm, "token_embd.weight") &&
                              strcmp(nm, "per_layer_token_embd.weight");
    }
    sb_free(keys);
    sb_free(names);
    return rc;
}
