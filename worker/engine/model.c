/* model.c - load hyper-parameters and weights from a GGUF file.
 *
 * Every tensor the forward pass touches is looked up here, once, and checked
 * for shape and type, so that forward.c can trust its pointers; a file that
 * lacks a tensor or has the wrong shape fails at load with the tensor's name.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/engine/model_impl.h"
#include "common/sb_common.h"

/* What differs between architectures, as data. */
typedef struct {
    const char *name;
    int rope_neox;
    int fused_qkv;      /* attn_qkv instead of attn_q/k/v */
    int fused_gate_up;  /* ffn_up holds gate|up; no ffn_gate */
    int qkv_bias;
    int has_swa;        /* reads <arch>.attention.sliding_window */
} arch_traits;

static const arch_traits archs[SB_ARCH_COUNT] = {
    [SB_ARCH_LLAMA] = { "llama", 0, 0, 0, 0, 0 },
    [SB_ARCH_PHI3]  = { "phi3",  1, 1, 1, 0, 1 },
    [SB_ARCH_QWEN2] = { "qwen2", 1, 0, 0, 1, 0 },
};

void sb_ctx_params_default(sb_ctx_params *p) {
    p->n_threads = 1;
    p->n_ctx = 0;
    p->kv_f32 = 0;
    p->kq_level = -1;
    p->n_batch = 0;
    p->n_seq = 0;
    p->kv_blocks = 0;
    p->kernels = NULL;
}

static int get_hp_u32(const sb_gguf *g, const char *arch, const char *suffix, int required,
                      uint32_t def, int32_t *out, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    int rc = sb_gguf_get_u32(g, key, &v);
    if (rc == SB_ENOTFOUND && !required) { *out = (int32_t)def; return 0; }
    if (rc == SB_ENOTFOUND)
        return sb_seterr(err, SB_EFORMAT, "%s: missing metadata key '%s'", sb_gguf_path(g), key);
    if (rc || v > (1u << 30))
        return sb_seterr(err, SB_EFORMAT, "%s: metadata key '%s' must be an integer in [0, 2^30]", sb_gguf_path(g), key);
    *out = (int32_t)v;
    return 0;
}

static int get_hp_f32(const sb_gguf *g, const char *arch, const char *suffix, float def, float *out, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = sb_gguf_get_f32(g, key, out);
    if (rc == SB_ENOTFOUND) { *out = def; return 0; }
    if (rc || !isfinite(*out))
        return sb_seterr(err, SB_EFORMAT, "%s: metadata key '%s' must be a finite number", sb_gguf_path(g), key);
    return 0;
}

static int load_hparams(const sb_gguf *g, sb_hparams *hp, char *err) {
    sb_str a;
    if (sb_gguf_get_str(g, "general.architecture", &a) != 0)
        return sb_seterr(err, SB_EFORMAT, "%s: missing string 'general.architecture'", sb_gguf_path(g));
    hp->arch = -1;
    for (int i = 0; i < SB_ARCH_COUNT; i++)
        if (sb_str_eq(a, archs[i].name)) hp->arch = i;
    if (hp->arch < 0)
        return sb_seterr(err, SB_EUNSUP, "%s: architecture '%.*s' is not supported (llama, phi3, qwen2)",
                         sb_gguf_path(g), (int)SB_MIN(a.len, (size_t)32), a.ptr);
    const char *an = archs[hp->arch].name;
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", an);
    int rc;
    if ((rc = get_hp_u32(g, an, "embedding_length", 1, 0, &hp->n_embd, err)) ||
        (rc = get_hp_u32(g, an, "block_count", 1, 0, &hp->n_layer, err)) ||
        (rc = get_hp_u32(g, an, "feed_forward_length", 1, 0, &hp->n_ff, err)) ||
        (rc = get_hp_u32(g, an, "attention.head_count", 1, 0, &hp->n_head, err)) ||
        (rc = get_hp_u32(g, an, "context_length", 0, 2048, &hp->n_ctx_train, err)))
        return rc;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_ff <= 0 || hp->n_embd % hp->n_head)
        return sb_seterr(err, SB_EFORMAT, "%s: impossible sizes: n_embd %d, n_layer %d, n_head %d, n_ff %d",
                         sb_gguf_path(g), hp->n_embd, hp->n_layer, hp->n_head, hp->n_ff);
    if ((rc = get_hp_u32(g, an, "attention.head_count_kv", 0, (uint32_t)hp->n_head, &hp->n_head_kv, err)) ||
        (rc = get_hp_u32(g, an, "attention.key_length", 0, (uint32_t)(hp->n_embd / hp->n_head), &hp->head_dim, err)))
        return rc;
    if ((rc = get_hp_u32(g, an, "rope.dimension_count", 0, (uint32_t)hp->head_dim, &hp->n_rot, err))) return rc;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || hp->head_dim <= 0 || hp->head_dim % 2 ||
        hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return sb_seterr(err, SB_EFORMAT, "%s: impossible attention shape: %d heads, %d KV heads, head dim %d, rope dims %d",
                         sb_gguf_path(g), hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot);
    if ((rc = get_hp_f32(g, an, "rope.freq_base", 10000.0f, &hp->rope_freq_base, err)) ||
        (rc = get_hp_f32(g, an, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps, err)))
        return rc;
    float scale_factor = 1.0f;
    if ((rc = get_hp_f32(g, an, "rope.scaling.factor", 1.0f, &scale_factor, err))) return rc;
    sb_str stype;
    /* Only linear scaling changes freq_scale; yarn/longrope are not used by
     * the models we target and are refused rather than silently ignored. */
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    if (sb_gguf_get_str(g, key, &stype) == 0 && !sb_str_eq(stype, "none")) {
        if (!sb_str_eq(stype, "linear"))
            return sb_seterr(err, SB_EUNSUP, "%s: rope scaling '%.*s' is not supported", sb_gguf_path(g),
                             (int)SB_MIN(stype.len, (size_t)16), stype.ptr);
        hp->rope_freq_scale = scale_factor > 0 ? 1.0f / scale_factor : 1.0f;
    } else {
        hp->rope_freq_scale = 1.0f;
    }
    hp->rope_neox = archs[hp->arch].rope_neox;
    hp->n_swa = 0;
    if (archs[hp->arch].has_swa &&
        (rc = get_hp_u32(g, an, "attention.sliding_window", 0, 0, &hp->n_swa, err)))
        return rc;
    return 0;
}

int sb_weight_find(const sb_gguf *g, const char *name, int64_t ne0, int64_t ne1, int required,
                   sb_weight *w, char *err) {
    const sb_gguf_tensor *t = sb_gguf_find_tensor(g, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return 0;
        return sb_seterr(err, SB_EFORMAT, "%s: missing tensor '%s'", sb_gguf_path(g), name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return sb_seterr(err, SB_EFORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]",
                         sb_gguf_path(g), name, (long long)t->ne[0], (long long)t->ne[1],
                         (long long)t->ne[2], (long long)ne0, (long long)ne1);
    const sb_kq_traits *tt = &sb_kq_table(SB_KQ_REF)[t->type];
    if (ne1 > 1 && !tt->vec_dot)
        return sb_seterr(err, SB_EUNSUP, "%s: tensor '%s' has type %s, which has no dot-product kernel",
                         sb_gguf_path(g), name, tt->name);
    w->data = t->data;
    w->type = (int)t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = sb_kq_row_size(tt, ne0);
    return 0;
}

static int find_weight(const sb_model *m, const char *name, int64_t ne0, int64_t ne1, int required,
                       sb_weight *w, char *err) {
    return sb_weight_find(m->gguf, name, ne0, ne1, required, w, err);
}

/* Small 1-D tensors (norms, biases) are converted to F32 copies: a few KB,
 * and the forward pass then never cares which type the file used. */
int sb_weight_load_vector(const sb_gguf *g, const char *name, int64_t n, int required, float **out, char *err) {
    sb_weight w;
    *out = NULL;
    int rc = sb_weight_find(g, name, n, 1, required, &w, err);
    if (rc || !w.data) return rc;
    const sb_kq_traits *tt = &sb_kq_table(SB_KQ_REF)[w.type];
    if (!tt->to_float)
        return sb_seterr(err, SB_EUNSUP, "%s: tensor '%s': type %s cannot be converted", sb_gguf_path(g), name, tt->name);
    float *v = sb_aligned_alloc((size_t)n * sizeof(float));
    if (!v) return sb_seterr(err, SB_ENOMEM, "out of memory");
    tt->to_float(w.data, v, n);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            sb_aligned_free(v);
            return sb_seterr(err, SB_EFORMAT, "%s: tensor '%s' element %lld is not finite", sb_gguf_path(g), name, (long long)i);
        }
    *out = v;
    return 0;
}

static int load_vector(const sb_model *m, const char *name, int64_t n, int required, float **out, char *err) {
    return sb_weight_load_vector(m->gguf, name, n, required, out, err);
}

static int load_layer(sb_model *m, int il, char *err) {
    const sb_hparams *hp = &m->hp;
    const arch_traits *at = &archs[hp->arch];
    sb_layer *L = &m->layers[il];
    const int64_t d = hp->n_embd, dq = (int64_t)hp->n_head * hp->head_dim, dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    int rc;
    if ((rc = load_vector(m, NAME("attn_norm.weight"), d, 1, &L->attn_norm, err)) ||
        (rc = load_vector(m, NAME("ffn_norm.weight"), d, 1, &L->ffn_norm, err)))
        return rc;
    if (at->fused_qkv) {
        if ((rc = find_weight(m, NAME("attn_qkv.weight"), d, dq + 2 * dkv, 1, &L->wqkv, err))) return rc;
    } else {
        if ((rc = find_weight(m, NAME("attn_q.weight"), d, dq, 1, &L->wq, err)) ||
            (rc = find_weight(m, NAME("attn_k.weight"), d, dkv, 1, &L->wk, err)) ||
            (rc = find_weight(m, NAME("attn_v.weight"), d, dkv, 1, &L->wv, err)))
            return rc;
    }
    if (at->qkv_bias) {
        if ((rc = load_vector(m, NAME("attn_q.bias"), dq, 1, &L->bq, err)) ||
            (rc = load_vector(m, NAME("attn_k.bias"), dkv, 1, &L->bk, err)) ||
            (rc = load_vector(m, NAME("attn_v.bias"), dkv, 1, &L->bv, err)))
            return rc;
    }
    if ((rc = find_weight(m, NAME("attn_output.weight"), dq, d, 1, &L->wo, err))) return rc;
    if (at->fused_gate_up) {
        if ((rc = find_weight(m, NAME("ffn_up.weight"), d, 2 * (int64_t)hp->n_ff, 1, &L->w_up, err))) return rc;
    } else {
        if ((rc = find_weight(m, NAME("ffn_gate.weight"), d, hp->n_ff, 1, &L->w_gate, err)) ||
            (rc = find_weight(m, NAME("ffn_up.weight"), d, hp->n_ff, 1, &L->w_up, err)))
            return rc;
    }
    if ((rc = find_weight(m, NAME("ffn_down.weight"), hp->n_ff, d, 1, &L->w_down, err))) return rc;
#undef NAME
    return 0;
}

static size_t weight_size(const sb_weight *w) { return w->data ? w->row_bytes * (size_t)w->ne1 : 0; }

/* A layer's weight matrices (absent ones have data == NULL). */
#define LAYER_MATRICES 8
static void layer_matrices(sb_layer *L, sb_weight *ws[LAYER_MATRICES]) {
    sb_weight *all[LAYER_MATRICES] = { &L->wq, &L->wk, &L->wv, &L->wqkv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
    memcpy(ws, all, sizeof all);
}

/* ---- the x8 layout for decode ------------------------------------------------
 * Decode reads every weight byte once per token; on levels with an x8
 * kernel (traits .gemv8), 8 interleaved rows take fewer instructions per
 * byte than one row at a time (docs/KERNELS.md). The interleaved copy is
 * anonymous memory of the same size; the file's pages of that tensor are
 * dropped from our mapping (they stay in the page cache, clean, for the
 * kernel to evict), so resident memory does not grow. The scalar level
 * has x8 kernels too, as twins to test against, but keeps the file layout.
 *
 * Opt-in (SB_REPACK=1): on the 2-core AVX2 machine of docs/PERFORMANCE.md
 * it makes Llama-3-8B decode 7% faster but prompts 10% slower (each
 * prompt unpacks the weights back for the tiled kernels) and loading
 * ~20 s slower (5 GB of fresh pages), a loss for a typical hotline call. */

static int x8_wanted(const sb_weight *w, int level) {
    return w->data && level > SB_KQ_REF && sb_kq_table(level)[w->type].gemv8 && sb_kq_x8_supported(w->type) &&
           w->ne1 % 8 == 0 && w->ne0 % SB_QK_K == 0;
}

static int repack_x8(sb_model *m, sb_weight *w, int level, char *err) {
    if (!x8_wanted(w, level)) return 0;
    const size_t bytes = weight_size(w);
    void *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return sb_seterr(err, SB_ENOMEM, "%s: out of memory for a %.1f MiB weight copy",
                                            sb_gguf_path(m->gguf), (double)bytes / 1048576.0);
    const size_t group = 8 * w->row_bytes;
    for (int64_t g = 0; g < w->ne1 / 8; g++)
        sb_kq_x8_pack(w->type, w->ne0, (const uint8_t *)w->data + (size_t)g * group, w->row_bytes,
                      (uint8_t *)buf + (size_t)g * group);
    const long page = sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)w->data + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    const uintptr_t hi = ((uintptr_t)w->data + bytes) & ~(uintptr_t)(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    mprotect(buf, bytes, PROT_READ);
    w->data = buf;
    w->x8_buf = buf;
    m->x8_row_bytes = SB_MAX(m->x8_row_bytes, w->row_bytes);
    return 0;
}

static void free_x8(sb_weight *w) {
    if (w->x8_buf) munmap(w->x8_buf, weight_size(w));
    w->x8_buf = NULL;
}

static int repack_all(sb_model *m, char *err) {
    const char *env = getenv("SB_REPACK");
    if (!env || strcmp(env, "1") != 0) return 0;
    const int level = sb_kq_best_level();
    int rc = 0;
    for (int il = 0; il < m->hp.n_layer && !rc; il++) {
        sb_weight *ws[LAYER_MATRICES];
        layer_matrices(&m->layers[il], ws);
        for (int i = 0; i < LAYER_MATRICES && !rc; i++) rc = repack_x8(m, ws[i], level, err);
    }
    /* a tied output is the embedding table, whose rows are read one by one */
    if (!rc && m->output.data != m->tok_embd.data) rc = repack_x8(m, &m->output, level, err);
    return rc;
}

int sb_model_load(const char *path, sb_model **out, char *err) {
    *out = NULL;
    sb_model *m = sb_calloc(1, sizeof *m);
    if (!m) return sb_seterr(err, SB_ENOMEM, "out of memory");
    int rc = sb_gguf_open(path, &m->gguf, err);
    if (rc) goto fail;
    if ((rc = load_hparams(m->gguf, &m->hp, err))) goto fail;
    sb_hparams *hp = &m->hp;
    const sb_gguf_tensor *te = sb_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) { rc = sb_seterr(err, SB_EFORMAT, "%s: missing tensor 'token_embd.weight'", path); goto fail; }
    hp->n_vocab = (int32_t)te->ne[1];
    if ((rc = find_weight(m, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, &m->tok_embd, err))) goto fail;
    if (!sb_kq_table(SB_KQ_REF)[m->tok_embd.type].to_float) {
        rc = sb_seterr(err, SB_EUNSUP, "%s: token_embd.weight type cannot be dequantized", path);
        goto fail;
    }
    if ((rc = load_vector(m, "output_norm.weight", hp->n_embd, 1, &m->output_norm, err))) goto fail;
    if ((rc = find_weight(m, "output.weight", hp->n_embd, hp->n_vocab, 0, &m->output, err))) goto fail;
    if (!m->output.data) m->output = m->tok_embd;       /* tied embeddings */
    if ((rc = load_vector(m, "rope_freqs.weight", hp->n_rot / 2, 0, &m->rope_freqs, err))) goto fail;
    m->layers = sb_calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); goto fail; }
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = load_layer(m, il, err))) goto fail;
    m->weight_bytes = weight_size(&m->output) + m->hp.n_embd * sizeof(float);
    for (int il = 0; il < hp->n_layer; il++) {
        sb_weight *ws[LAYER_MATRICES];
        layer_matrices(&m->layers[il], ws);
        for (int i = 0; i < LAYER_MATRICES; i++) m->weight_bytes += weight_size(ws[i]);
    }
    if ((rc = repack_all(m, err))) goto fail;
    *out = m;
    return 0;
fail:
    sb_model_free(m);
    return rc;
}

void sb_model_free(sb_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int il = 0; il < m->hp.n_layer; il++) {
            sb_layer *L = &m->layers[il];
            sb_weight *ws[LAYER_MATRICES];
            layer_matrices(L, ws);
            for (int i = 0; i < LAYER_MATRICES; i++) free_x8(ws[i]);
            sb_aligned_free(L->attn_norm);
            sb_aligned_free(L->ffn_norm);
            sb_aligned_free(L->bq);
            sb_aligned_free(L->bk);
            sb_aligned_free(L->bv);
        }
        sb_free(m->layers);
    }
    free_x8(&m->output);
    sb_aligned_free(m->output_norm);
    sb_aligned_free(m->rope_freqs);
    sb_gguf_close(m->gguf);
    sb_free(m);
}

const sb_hparams *sb_model_hparams(const sb_model *m) { return &m->hp; }
const sb_gguf *sb_model_gguf(const sb_model *m) { return m->gguf; }
size_t sb_model_weight_bytes(const sb_model *m) { return m->weight_bytes; }

void sb_model_describe(const sb_model *m, char *buf, size_t cap) {
    const sb_hparams *hp = &m->hp;
    uint64_t file_type = 0;
    sb_gguf_get_u64(m->gguf, "general.file_type", &file_type);
    snprintf(buf, cap, "%s: %d layers, %d dim, %d/%d heads, ff %d, vocab %d, %.1f MiB of weights",
             hp->arch_name, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_ff, hp->n_vocab,
             (double)m->weight_bytes / (1024.0 * 1024.0));
}
