/* lora.c - LoRA adapters: creation, the forward term, GGUF files (see
 * sb_lora.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/engine/sb_lora.h"
#include "worker/gguf/sb_gguf.h"
#include "worker/gguf/sb_gguf_write.h"
#include "worker/kernels/sb_kq.h"

static const char *const base_suffix[SB_LORA_N_MATS] = {
    "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight",
};

/* The base tensors the norms replace; the file's names add "sb." and ".weight". */
static const char *const norm_base[SB_LORA_N_NORMS] = { "attn_output_norm", "layer_output_norm" };

void sb_lora_base_name(int layer, sb_lora_which w, char *buf, size_t cap) {
    snprintf(buf, cap, "blk.%d.%s", layer, base_suffix[w]);
}

static void mat_shape(int H, int FF, sb_lora_which w, int *in, int *out) {
    *in = w == SB_LORA_DOWN ? FF : H;
    *out = w == SB_LORA_UP ? FF : H;
}

sb_lora_mat *sb_lora_get(const sb_lora *l, int layer, sb_lora_which w) {
    if (!l || layer < 0 || layer >= l->n_layer) return NULL;
    sb_lora_mat *m = &l->mats[(size_t)layer * SB_LORA_N_MATS + w];
    return m->a ? m : NULL;
}

sb_lora_norm *sb_lora_norm_get(const sb_lora *l, int layer, sb_lora_norm_which k) {
    if (!l || layer < 0 || layer >= l->n_layer) return NULL;
    sb_lora_norm *nm = &l->norms[(size_t)layer * SB_LORA_N_NORMS + k];
    return nm->w ? nm : NULL;
}

int sb_lora_set_norm(sb_lora *l, int layer, sb_lora_norm_which k, const float *w, const float *b, char *err) {
    if (layer < 0 || layer >= l->n_layer) return sb_seterr(err, SB_EINVAL, "LoRA: no layer %d", layer);
    sb_lora_norm *nm = &l->norms[(size_t)layer * SB_LORA_N_NORMS + k];
    if (!nm->w && !(nm->w = sb_malloc(2 * (size_t)l->H * sizeof(float))))
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    nm->b = nm->w + l->H;
    memcpy(nm->w, w, (size_t)l->H * sizeof(float));
    memcpy(nm->b, b, (size_t)l->H * sizeof(float));
    return 0;
}

float sb_lora_scale(const sb_lora *l) { return l->alpha / (float)l->rank; }

int sb_lora_first_layer(const sb_lora *l) {
    for (int il = 0; il < l->n_layer; il++) {
        for (int w = 0; w < SB_LORA_N_MATS; w++)
            if (sb_lora_get(l, il, (sb_lora_which)w)) return il;
        for (int k = 0; k < SB_LORA_N_NORMS; k++)
            if (sb_lora_norm_get(l, il, (sb_lora_norm_which)k)) return il;
    }
    return l->n_layer;
}

void sb_lora_free(sb_lora *l) {
    if (!l) return;
    for (size_t i = 0; l->mats && i < (size_t)l->n_layer * SB_LORA_N_MATS; i++) {
        sb_free(l->mats[i].a);
        sb_free(l->mats[i].b);
    }
    for (size_t i = 0; l->norms && i < (size_t)l->n_layer * SB_LORA_N_NORMS; i++) sb_free(l->norms[i].w);
    sb_free(l->mats);
    sb_free(l->norms);
    sb_free(l);
}

static int shell(int n_layer, int H, int FF, int rank, float alpha, sb_lora **out, char *err) {
    if (n_layer < 1 || H < 1 || FF < 1 || rank < 1 || rank > SB_LORA_MAX_RANK || !isfinite(alpha))
        return sb_seterr(err, SB_EINVAL, "LoRA: rank %d (1..%d) or alpha out of range", rank, SB_LORA_MAX_RANK);
    sb_lora *l = sb_calloc(1, sizeof *l);
    if (!l || !(l->mats = sb_calloc((size_t)n_layer * SB_LORA_N_MATS, sizeof *l->mats)) ||
        !(l->norms = sb_calloc((size_t)n_layer * SB_LORA_N_NORMS, sizeof *l->norms))) {
        if (l) sb_free(l->mats);
        sb_free(l);
        return sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    l->n_layer = n_layer, l->H = H, l->FF = FF, l->rank = rank, l->alpha = alpha;
    *out = l;
    return 0;
}

static int alloc_mat(sb_lora *l, int layer, sb_lora_which w, char *err) {
    sb_lora_mat *m = &l->mats[(size_t)layer * SB_LORA_N_MATS + w];
    mat_shape(l->H, l->FF, w, &m->in, &m->out);
    m->a = sb_calloc((size_t)l->rank * (size_t)m->in, sizeof(float));
    m->b = sb_calloc((size_t)m->out * (size_t)l->rank, sizeof(float));
    return m->a && m->b ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
}

/* splitmix64: a fixed, platform-independent stream for a given seed. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int sb_lora_new(int n_layer, int H, int FF, int rank, float alpha, int top_n, uint64_t seed, sb_lora **out,
                char *err) {
    *out = NULL;
    if (top_n < 1 || top_n > n_layer)
        return sb_seterr(err, SB_EINVAL, "LoRA: top layers %d out of range 1..%d", top_n, n_layer);
    sb_lora *l;
    int rc = shell(n_layer, H, FF, rank, alpha, &l, err);
    uint64_t s = seed;
    for (int il = n_layer - top_n; il < n_layer && !rc; il++)
        for (int w = 0; w < SB_LORA_N_MATS && !rc; w++) {
            if ((rc = alloc_mat(l, il, (sb_lora_which)w, err))) break;
            sb_lora_mat *m = sb_lora_get(l, il, (sb_lora_which)w);
            /* PEFT: kaiming_uniform_(A, a=√5) = U(±1/√fan_in); B stays 0 */
            const double bound = 1.0 / sqrt((double)m->in);
            for (size_t i = 0; i < (size_t)rank * (size_t)m->in; i++)
                m->a[i] = (float)(((double)(next_u64(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0) * bound);
        }
    if (rc) { sb_lora_free(l); return rc; }
    *out = l;
    return 0;
}

void sb_lora_apply(const sb_lora_mat *m, int rank, float scale, const float *x, int n, float *y) {
    float ax[SB_LORA_MAX_RANK];
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * m->in;
        for (int r = 0; r < rank; r++) {
            const float *ar = m->a + (size_t)r * m->in;
            float s = 0;
            for (int i = 0; i < m->in; i++) s += ar[i] * xt[i];
            ax[r] = scale * s;
        }
        float *yt = y + (size_t)t * m->out;
        for (int o = 0; o < m->out; o++) {
            const float *bo = m->b + (size_t)o * rank;
            float s = 0;
            for (int r = 0; r < rank; r++) s += bo[r] * ax[r];
            yt[o] += s;
        }
    }
}

/* ---- files ------------------------------------------------------------- */

typedef struct { const float *data; size_t bytes; } blob;

static int put_tensor(sb_gguf_writer *w, int layer, sb_lora_which which, const char *half, int64_t ne0, int64_t ne1,
                      char *err) {
    char name[96], base[80];
    sb_lora_base_name(layer, which, base, sizeof base);
    const int len = snprintf(name, sizeof name, "%s.%s", base, half);
    const int64_t ne[2] = { ne0, ne1 };
    return sb_gguf_writer_add_tensor(w, name, (size_t)len, 2, ne, SB_TYPE_F32, err);
}

int sb_lora_save(const sb_lora *l, const char *path, char *err) {
    sb_gguf_writer *w = NULL;
    uint8_t *header = NULL;
    size_t hl = 0, nb = 0;
    sb_outfile *of = NULL;
    blob *blobs = sb_calloc((size_t)l->n_layer * (SB_LORA_N_MATS * 2 + SB_LORA_N_NORMS), sizeof *blobs);
    int rc = !blobs || sb_gguf_writer_new(&w) ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    if (!rc && (sb_gguf_writer_set_str(w, "general.architecture", "bert") ||
                sb_gguf_writer_set_str(w, "general.type", "adapter") || sb_gguf_writer_set_str(w, "adapter.type", "lora") ||
                sb_gguf_writer_set_raw(w, "adapter.lora.alpha", SB_GGUF_F32, &l->alpha, sizeof l->alpha)))
        rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    for (int il = 0; il < l->n_layer && !rc; il++)
        for (int k = 0; k < SB_LORA_N_MATS && !rc; k++) {
            const sb_lora_mat *m = sb_lora_get(l, il, (sb_lora_which)k);
            if (!m) continue;
            rc = put_tensor(w, il, (sb_lora_which)k, "lora_a", m->in, l->rank, err);
            if (!rc) rc = put_tensor(w, il, (sb_lora_which)k, "lora_b", l->rank, m->out, err);
            blobs[nb++] = (blob){ m->a, (size_t)l->rank * (size_t)m->in * sizeof(float) };
            blobs[nb++] = (blob){ m->b, (size_t)l->rank * (size_t)m->out * sizeof(float) };
        }
    for (int il = 0; il < l->n_layer && !rc; il++)
        for (int k = 0; k < SB_LORA_N_NORMS && !rc; k++) {
            const sb_lora_norm *nm = sb_lora_norm_get(l, il, (sb_lora_norm_which)k);
            if (!nm) continue;
            char name[96];
            const int len = snprintf(name, sizeof name, "sb.blk.%d.%s.weight", il, norm_base[k]);
            const int64_t ne[2] = { l->H, 2 };
            rc = sb_gguf_writer_add_tensor(w, name, (size_t)len, 2, ne, SB_TYPE_F32, err);
            blobs[nb++] = (blob){ nm->w, 2 * (size_t)l->H * sizeof(float) };
        }
    if (!rc) rc = sb_gguf_writer_header(w, &header, &hl, err);
    if (!rc) rc = sb_outfile_open(path, &of, err);
    if (!rc) rc = sb_outfile_write(of, header, hl, err);
    for (size_t i = 0; i < nb && !rc; i++) {
        const uint64_t end = (i + 1 < nb ? sb_gguf_writer_tensor_offset(w, i + 1) : sb_gguf_writer_data_size(w)) + hl;
        rc = sb_outfile_write(of, blobs[i].data, blobs[i].bytes, err);
        if (!rc) rc = sb_outfile_write_zeros(of, (size_t)(end - sb_outfile_offset(of)), err);
    }
    if (!rc) rc = sb_outfile_commit(of, err);
    else sb_outfile_abort(of);
    sb_free(header);
    sb_free(blobs);
    sb_gguf_writer_free(w);
    return rc;
}

/* "blk.N.<suffix>.lora_a" -> layer, matrix, half (0 = a, 1 = b); -1 if not one of ours. */
static int parse_name(sb_str name, int n_layer, int *layer, sb_lora_which *which, int *half) {
    char s[128];
    if (name.len >= sizeof s) return -1;
    memcpy(s, name.ptr, name.len);
    s[name.len] = 0;
    int il, pos = 0;
    if (sscanf(s, "blk.%d.%n", &il, &pos) != 1 || pos == 0 || il < 0 || il >= n_layer) return -1;
    for (int w = 0; w < SB_LORA_N_MATS; w++) {
        const size_t bl = strlen(base_suffix[w]);
        if (strncmp(s + pos, base_suffix[w], bl) != 0) continue;
        const char *tail = s + pos + bl;
        if (strcmp(tail, ".lora_a") && strcmp(tail, ".lora_b")) return -1;
        *layer = il, *which = (sb_lora_which)w, *half = tail[6] == 'b';
        return 0;
    }
    return -1;
}

/* "sb.blk.N.attn_output_norm.weight" -> layer, norm; -1 if not a norm's name. */
static int parse_norm_name(sb_str name, int n_layer, int *layer, sb_lora_norm_which *k) {
    char s[128];
    if (name.len >= sizeof s) return -1;
    memcpy(s, name.ptr, name.len);
    s[name.len] = 0;
    int il, pos = 0;
    if (sscanf(s, "sb.blk.%d.%n", &il, &pos) != 1 || pos == 0 || il < 0 || il >= n_layer) return -1;
    for (int i = 0; i < SB_LORA_N_NORMS; i++) {
        const size_t bl = strlen(norm_base[i]);
        if (strncmp(s + pos, norm_base[i], bl) == 0 && strcmp(s + pos + bl, ".weight") == 0) {
            *layer = il, *k = (sb_lora_norm_which)i;
            return 0;
        }
    }
    return -1;
}

static int check_keys(const sb_gguf *g, const char *path, float *alpha, char *err) {
    static const struct { const char *key, *want; } strs[] = {
        { "general.type", "adapter" }, { "adapter.type", "lora" }, { "general.architecture", "bert" },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(strs); i++) {
        sb_str v;
        if (sb_gguf_get_str(g, strs[i].key, &v) || !sb_str_eq(v, strs[i].want))
            return sb_seterr(err, SB_EFORMAT, "%s: '%s' is not \"%s\": not a LoRA adapter for a bert encoder", path,
                             strs[i].key, strs[i].want);
    }
    if (sb_gguf_get_f32(g, "adapter.lora.alpha", alpha) || !isfinite(*alpha))
        return sb_seterr(err, SB_EFORMAT, "%s: 'adapter.lora.alpha' missing or not finite", path);
    return 0;
}

/* Copy one half into the adapter after checking its shape and values. */
static int take_tensor(sb_lora *l, const sb_gguf_tensor *t, int il, sb_lora_which w, int half, const char *path,
                       char *err) {
    int in, out;
    mat_shape(l->H, l->FF, w, &in, &out);
    const int64_t want0 = half ? l->rank : in, want1 = half ? out : l->rank;
    if (t->type != SB_TYPE_F32 || t->n_dims != 2 || t->ne[0] != want0 || t->ne[1] != want1)
        return sb_seterr(err, SB_EFORMAT, "%s: tensor '%.*s' must be F32 [%lld, %lld] (base shape, rank %d)", path,
                         (int)t->name.len, t->name.ptr, (long long)want0, (long long)want1, l->rank);
    sb_lora_mat *m = &l->mats[(size_t)il * SB_LORA_N_MATS + w];
    if (!m->a && alloc_mat(l, il, w, err)) return SB_ENOMEM;
    float *dst = half ? m->b : m->a;
    memcpy(dst, t->data, (size_t)(want0 * want1) * sizeof(float));
    for (int64_t i = 0; i < want0 * want1; i++)
        if (!isfinite(dst[i]))
            return sb_seterr(err, SB_EFORMAT, "%s: tensor '%.*s' has a non-finite value at element %lld", path,
                             (int)t->name.len, t->name.ptr, (long long)i);
    return 0;
}

/* A trained norm's weight and bias rows after checking shape and values. */
static int take_norm(sb_lora *l, const sb_gguf_tensor *t, int il, sb_lora_norm_which k, const char *path, char *err) {
    if (t->type != SB_TYPE_F32 || t->n_dims != 2 || t->ne[0] != l->H || t->ne[1] != 2)
        return sb_seterr(err, SB_EFORMAT, "%s: tensor '%.*s' must be F32 [%d, 2] (a norm's weight and bias)", path,
                         (int)t->name.len, t->name.ptr, l->H);
    const float *v = t->data;
    for (int64_t i = 0; i < 2 * (int64_t)l->H; i++)
        if (!isfinite(v[i]))
            return sb_seterr(err, SB_EFORMAT, "%s: tensor '%.*s' has a non-finite value at element %lld", path,
                             (int)t->name.len, t->name.ptr, (long long)i);
    return sb_lora_set_norm(l, il, k, v, v + l->H, err);
}

/* The rank: lora_b's ne[0] (as llama.cpp takes it), the same for all. */
static int find_rank(const sb_gguf *g, int n_layer, const char *path, int *rank, char *err) {
    *rank = 0;
    for (size_t i = 0; i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        int il, half;
        sb_lora_which w;
        sb_lora_norm_which k;
        if (!parse_norm_name(t->name, n_layer, &il, &k)) continue;
        if (parse_name(t->name, n_layer, &il, &w, &half))
            return sb_seterr(err, SB_EFORMAT,
                             "%s: tensor '%.*s' is neither a LoRA half of a layer 0..%d matrix nor a trained norm",
                             path, (int)t->name.len, t->name.ptr, n_layer - 1);
        const int r = (int)(half ? t->ne[0] : t->ne[1]);
        if (*rank && r != *rank)
            return sb_seterr(err, SB_EFORMAT, "%s: tensor '%.*s' has rank %d, others %d", path, (int)t->name.len,
                             t->name.ptr, r, *rank);
        *rank = r;
    }
    if (*rank < 1 || *rank > SB_LORA_MAX_RANK)
        return sb_seterr(err, SB_EFORMAT, "%s: no LoRA tensors, or rank %d outside 1..%d", path, *rank,
                         SB_LORA_MAX_RANK);
    return 0;
}

static int check_pairs(const sb_lora *l, const sb_gguf *g, const char *path, char *err) {
    for (int il = 0; il < l->n_layer; il++)
        for (int w = 0; w < SB_LORA_N_MATS; w++) {
            const sb_lora_mat *m = sb_lora_get(l, il, (sb_lora_which)w);
            char base[80], a[96], b[96];
            if (!m) continue;
            sb_lora_base_name(il, (sb_lora_which)w, base, sizeof base);
            snprintf(a, sizeof a, "%s.lora_a", base);
            snprintf(b, sizeof b, "%s.lora_b", base);
            if (!sb_gguf_find_tensor(g, a) || !sb_gguf_find_tensor(g, b))
                return sb_seterr(err, SB_EFORMAT, "%s: LoRA pair for '%s' is missing one half", path, base);
        }
    return 0;
}

int sb_lora_load(const char *path, int n_layer, int H, int FF, sb_lora **out, char *err) {
    *out = NULL;
    sb_gguf *g = NULL;
    sb_lora *l = NULL;
    float alpha = 0;
    int rank = 0;
    int rc = sb_gguf_open(path, &g, err);
    if (!rc) rc = check_keys(g, path, &alpha, err);
    if (!rc) rc = find_rank(g, n_layer, path, &rank, err);
    if (!rc) rc = shell(n_layer, H, FF, rank, alpha, &l, err);
    for (size_t i = 0; !rc && i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        int il, half;
        sb_lora_which w;
        sb_lora_norm_which k;
        if (!parse_norm_name(t->name, n_layer, &il, &k)) rc = take_norm(l, t, il, k, path, err);
        else if (!parse_name(t->name, n_layer, &il, &w, &half)) rc = take_tensor(l, t, il, w, half, path, err);
    }
    if (!rc) rc = check_pairs(l, g, path, err);
    sb_gguf_close(g);
    if (rc) { sb_lora_free(l); return rc; }
    *out = l;
    return 0;
}
