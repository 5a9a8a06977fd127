/* serve_embed.c - `embed` and `info` of a worker that serves an encoder
 * model (docs/ipc.md, "embed"). serve.c queues embed jobs on its compute
 * thread like generate and score: the encoder is one caller at a time and a
 * long text takes seconds, so it must not run on the loop that answers
 * health probes. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/sb_common.h"
#include "worker/kernels/sb_kq.h"
#include "worker/serve_embed.h"

int sb_serve_is_encoder_file(const char *path) {
    sb_gguf *g;
    char err[SB_ERR_LEN];
    if (sb_gguf_open(path, &g, err)) return 0;
    int yes = sb_encoder_file_is_encoder(g);
    sb_gguf_close(g);
    return yes;
}

static int parse_kind(const sb_mp_obj *p, sb_embed_kind *kind, char *err) {
    const char *k = "query";
    size_t n;
    if (sb_mp_get_str(p, "kind", SB_MP_OPTIONAL, &k, &n, err)) return SB_EINVAL;
    if (!strcmp(k, "query")) *kind = SB_EMBED_QUERY;
    else if (!strcmp(k, "passage")) *kind = SB_EMBED_PASSAGE;
    else if (!strcmp(k, "raw")) *kind = SB_EMBED_RAW;
    else return sb_seterr(err, SB_EINVAL, "'kind': expected query, passage or raw, got '%.40s'", k);
    return 0;
}

/* "adapter": "none" (the frozen encoder) or one of the worker's named
 * adapters, for this request; absent: the worker's own. *pick = 1 and
 * *lora set when the request names one. */
static int parse_adapter(const sb_mp_obj *p, const sb_serve_adapters *ads, int *pick, const struct sb_lora **lora,
                         char *err) {
    const char *a = NULL;
    size_t n;
    *pick = 0, *lora = NULL;
    if (sb_mp_get_str(p, "adapter", SB_MP_OPTIONAL, &a, &n, err)) return SB_EINVAL;
    if (!a) return 0;
    *pick = 1;
    if (!strcmp(a, "none")) return 0;
    for (int i = 0; ads && i < ads->n; i++)
        if (!strcmp(a, ads->names[i])) { *lora = ads->loras[i]; return 0; }
    char known[256] = "";
    for (int i = 0; ads && i < ads->n; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", ads->names[i]);
    return sb_seterr(err, SB_EINVAL, "'adapter': '%.40s' is not one of this worker's: none%s", a, known);
}

/* The request's texts: exactly one of "text" (str) and "texts" ([str]). */
static int parse_texts(const sb_mp_obj *p, const sb_mp_obj **list, const sb_mp_obj **one, uint32_t *n, char *err) {
    *list = NULL;
    *one = sb_mp_map_get(p, "text");
    if (sb_mp_get_container(p, "texts", SB_MP_OPTIONAL, SB_MP_ARRAY, list, err)) return SB_EINVAL;
    if (!*one == !*list) return sb_seterr(err, SB_EINVAL, "expected exactly one of 'text' and 'texts'");
    const char *t;
    if (*one && sb_mp_as_str(*one, &t, NULL))
        return sb_seterr(err, SB_EINVAL, "'text': expected a string, got %s", sb_mp_type_name(sb_mp_type_of(*one)));
    *n = *one ? 1 : sb_mp_count(*list);
    if (*n == 0 || *n > SB_EMBED_MAX_TEXTS)
        return sb_seterr(err, SB_EINVAL, "'texts': expected 1..%d strings, got %u", SB_EMBED_MAX_TEXTS, *n);
    for (uint32_t i = 0; *list && i < *n; i++)
        if (sb_mp_as_str(sb_mp_array_at(*list, i), &t, NULL))
            return sb_seterr(err, SB_EINVAL, "'texts'[%u]: expected a string", i);
    return 0;
}

typedef struct {
    int32_t *pieces[SB_EMBED_MAX_TEXTS];
    size_t n_pieces[SB_EMBED_MAX_TEXTS];
} text_pieces;

static void pieces_free(text_pieces *tp, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) sb_free(tp->pieces[i]);
}

/* Every text's pieces, checked against the caps before anything is
 * encoded: tokenizing is cheap next to the forward pass, so a text over the
 * cap costs its tokenizing and nothing more. On failure r is answered. */
static int tokenize_all(sb_encoder *e, sb_embed_kind kind, const sb_mp_obj *list, const sb_mp_obj *one, uint32_t n,
                        text_pieces *tp, sb_ipc_reply *r) {
    char err[SB_ERR_LEN];
    int64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *t;
        size_t len;
        sb_mp_as_str(one ? one : sb_mp_array_at(list, i), &t, &len);
        int rc = sb_encoder_pieces(e, kind, t, len, &tp->pieces[i], &tp->n_pieces[i], err);
        if (rc) {
            pieces_free(tp, i);
            sb_ipc_reply_error(r, rc == SB_ENOMEM ? SB_IPC_INTERNAL : SB_IPC_INVALID_REQUEST, "texts[%u]: %s", i, err);
            return rc;
        }
        const size_t tokens = tp->n_pieces[i] + 2;                 /* <s> and </s> */
        total += (int64_t)tokens;
        if (tokens > SB_EMBED_MAX_TEXT_TOKENS || total > SB_EMBED_MAX_REQUEST_TOKENS) {
            pieces_free(tp, i + 1);
            if (tokens > SB_EMBED_MAX_TEXT_TOKENS)
                sb_ipc_reply_error(r, SB_IPC_INPUT_TOO_LONG, "texts[%u]: %zu tokens, over the cap of %d a text", i,
                                   tokens, SB_EMBED_MAX_TEXT_TOKENS);
            else
                sb_ipc_reply_error(r, SB_IPC_INPUT_TOO_LONG, "texts[0..%u]: %lld tokens, over the cap of %d a request",
                                   i, (long long)total, SB_EMBED_MAX_REQUEST_TOKENS);
            return SB_ERANGE;
        }
    }
    return 0;
}

void sb_serve_embed(sb_encoder *e, const sb_serve_adapters *ads, sb_ipc_reply *r, const sb_mp_obj *params,
                    const atomic_int *cancel, sb_mp_writer *wr) {
    static const char *const allowed[] = { "text", "texts", "kind", "adapter", NULL };
    char err[SB_ERR_LEN];
    sb_embed_kind kind = SB_EMBED_QUERY;
    const sb_mp_obj *list, *one;
    uint32_t n = 0;
    int pick = 0;
    const struct sb_lora *picked = NULL, *own = sb_encoder_adapter(e);
    if (sb_mp_check_keys(params, allowed, err) || parse_kind(params, &kind, err) ||
        parse_adapter(params, ads, &pick, &picked, err) || parse_texts(params, &list, &one, &n, err)) {
        sb_ipc_reply_error(r, SB_IPC_INVALID_REQUEST, "%s", err);
        return;
    }
    const double t0 = sb_now_s();
    text_pieces *tp = sb_malloc(sizeof *tp);
    if (!tp) { sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
    if (tokenize_all(e, kind, list, one, n, tp, r)) { sb_free(tp); return; }
    const int dim = sb_encoder_dim(e);
    float *vec = sb_malloc((size_t)dim * sizeof *vec);
    int tokens[SB_EMBED_MAX_TEXTS];
    int64_t total = 0;
    int rc = vec ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    uint32_t i = 0;
    /* The request's adapter for its texts only: set after every early
     * return, put back before the reply. */
    char ignored[SB_ERR_LEN];
    if (pick) sb_encoder_set_adapter(e, picked, ignored);   /* loaded for this encoder: it fits */
    sb_mp_writer_reset(wr);
    sb_mp_map(wr, 5);
    sb_mp_str(wr, "embeddings");
    sb_mp_array(wr, n);
    for (; !rc && i < n; i++) {
        if ((rc = sb_encoder_embed_pieces(e, tp->pieces[i], tp->n_pieces[i], cancel, vec, &tokens[i], err))) break;
        total += tokens[i];
        sb_mp_array(wr, (uint32_t)dim);
        for (int k = 0; k < dim; k++) sb_mp_f64(wr, vec[k]);
    }
    sb_free(vec);
    pieces_free(tp, n);
    sb_free(tp);
    if (pick) sb_encoder_set_adapter(e, own, ignored);      /* the worker's own again */
    /* Cancelled: the caller hung up (or the worker is stopping) - the
     * encoder stopped inside the text, within a third of a layer. */
    if (rc == SB_ECANCEL) {
        sb_ipc_reply_error(r, SB_IPC_CANCELLED, "cancelled in text %u of %u", i + 1, n);
        return;
    }
    if (rc) {
        sb_ipc_reply_error(r, rc == SB_ENOMEM ? SB_IPC_INTERNAL : SB_IPC_INVALID_REQUEST, "texts[%u]: %s", i, err);
        return;
    }
    sb_mp_str(wr, "tokens");
    sb_mp_array(wr, n);
    for (uint32_t k = 0; k < n; k++) sb_mp_i64(wr, tokens[k]);
    sb_mp_kv_i64(wr, "n_tokens", total);
    sb_mp_kv_i64(wr, "dim", dim);
    sb_mp_kv_f64(wr, "embed_ms", (sb_now_s() - t0) * 1e3);
    if (sb_mp_writer_status(wr)) sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory");
    else sb_ipc_reply_ok(r, wr);
}

static int64_t gguf_int(const sb_gguf *g, const char *key) {
    uint64_t v = 0;
    sb_gguf_get_u64(g, key, &v);
    return (int64_t)v;
}

void sb_serve_encoder_info(const sb_encoder *e, const char *name, const char *path, sb_mp_writer *wr) {
    const sb_gguf *g = sb_encoder_gguf(e);
    sb_str gname = { "", 0 }, arch = { "bert", 4 };
    sb_gguf_get_str(g, "general.name", &gname);
    sb_gguf_get_str(g, "general.architecture", &arch);
    char key[96];
    sb_mp_map(wr, 15);
    sb_mp_kv_str(wr, "name", name);
    sb_mp_kv_str(wr, "model", path);
    sb_mp_kv_str(wr, "kind", "encoder");
    sb_mp_str(wr, "model_name");
    sb_mp_strn(wr, gname.ptr, gname.len);
    sb_mp_str(wr, "architecture");
    sb_mp_strn(wr, arch.ptr, arch.len);
    sb_mp_kv_u64(wr, "file_size", sb_gguf_file_size(g));
    sb_mp_kv_i64(wr, "file_type", gguf_int(g, "general.file_type"));
    sb_mp_kv_i64(wr, "n_vocab", sb_ugm_n_tokens(sb_encoder_tokenizer(e)));
    sb_mp_kv_i64(wr, "n_ctx", sb_encoder_n_ctx(e));
    sb_mp_kv_i64(wr, "n_embd", sb_encoder_dim(e));
    snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
    sb_mp_kv_i64(wr, "n_layer", gguf_int(g, key));
    snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.ptr);
    sb_mp_kv_i64(wr, "n_head", gguf_int(g, key));
    sb_mp_kv_str(wr, "pooling", "mean");
    sb_mp_kv_str(wr, "kernels", sb_kq_level_name(sb_kq_best_level()));
    sb_mp_kv_i64(wr, "pid", getpid());
}
