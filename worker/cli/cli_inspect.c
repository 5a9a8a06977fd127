/* cli_inspect.c - `switchboard inspect FILE`: metadata and tensor table.
 *
 * Exit 0 when the file is valid, 1 when it is not (the message names the
 * field and byte offset), 2 on bad usage. tools/models.sh checks every model
 * it assembles with `inspect --summary`, so this is the project's own model
 * check: the reader validates the layout (header, value types, tensor infos,
 * alignment, every tensor inside the file, no overlaps) and check_known_keys
 * below the types of the keys a loader relies on.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/gguf/sb_gguf.h"
#include "worker/kernels/sb_kq.h"
#include "worker/quantize/sb_quantize.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard inspect [--all | --no-tensors | --summary] FILE.gguf\n\n"
            "Validate a GGUF file and print its metadata and tensor table.\n\n"
            "  --all         print whole arrays and long strings (default: abbreviated)\n"
            "  --no-tensors  metadata only\n"
            "  --summary     a dozen lines: name, architecture, sizes, file type, vocab,\n"
            "                tensor types, chat template (what tools/models.sh shows)\n"
            "  -h, --help    this text\n\n"
            "Exit status: 0 valid, 1 invalid or unreadable file (the error names the\n"
            "file, the field and its byte offset), 2 usage error.\n");
}

/* ---- the keys loaders rely on ----------------------------------------------
 * The reader accepts any value type for any key; a model whose
 * general.architecture is a number or whose token list is not an array of
 * strings is still unusable, so inspect says which key and where. */
enum kind { K_STR, K_INT, K_NUM, K_BOOL, K_STR_ARR, K_NUM_ARR, K_INT_OR_ARR };

static int is_int(uint32_t t) { return t <= SB_GGUF_I32 || t == SB_GGUF_U64 || t == SB_GGUF_I64; }
static int is_num(uint32_t t) { return is_int(t) || t == SB_GGUF_F32 || t == SB_GGUF_F64; }

static int kind_ok(const sb_gguf_kv *kv, enum kind k) {
    int arr = kv->type == SB_GGUF_ARRAY;
    switch (k) {
    case K_STR: return kv->type == SB_GGUF_STRING;
    case K_INT: return is_int(kv->type);
    case K_NUM: return is_num(kv->type);
    case K_BOOL: return kv->type == SB_GGUF_BOOL;
    case K_STR_ARR: return arr && kv->arr_type == SB_GGUF_STRING;
    case K_NUM_ARR: return arr && is_num(kv->arr_type);
    case K_INT_OR_ARR: return is_int(kv->type) || (arr && is_int(kv->arr_type));
    }
    return 0;
}

static const char *const kind_name[] = {
    [K_STR] = "a string", [K_INT] = "an integer", [K_NUM] = "a number", [K_BOOL] = "a bool",
    [K_STR_ARR] = "an array of strings", [K_NUM_ARR] = "an array of numbers",
    [K_INT_OR_ARR] = "an integer or an array of integers",
};

static const struct { const char *key; enum kind kind; } known_keys[] = {
    { "general.architecture", K_STR }, { "general.name", K_STR }, { "general.file_type", K_INT },
    { "general.quantization_version", K_INT },
    { "tokenizer.ggml.model", K_STR }, { "tokenizer.ggml.pre", K_STR },
    { "tokenizer.ggml.tokens", K_STR_ARR }, { "tokenizer.ggml.merges", K_STR_ARR },
    { "tokenizer.ggml.scores", K_NUM_ARR }, { "tokenizer.ggml.token_type", K_NUM_ARR },
    { "tokenizer.ggml.bos_token_id", K_INT }, { "tokenizer.ggml.eos_token_id", K_INT },
    { "tokenizer.ggml.add_bos_token", K_BOOL }, { "tokenizer.ggml.add_eos_token", K_BOOL },
    { "tokenizer.chat_template", K_STR },
    /* {arch}.*: the prefix is matched separately */
    { ".block_count", K_INT }, { ".embedding_length", K_INT }, { ".feed_forward_length", K_INT_OR_ARR },
    { ".context_length", K_INT }, { ".attention.head_count", K_INT_OR_ARR },
    { ".attention.head_count_kv", K_INT_OR_ARR }, { ".rope.freq_base", K_NUM },
    { ".attention.layer_norm_rms_epsilon", K_NUM }, { ".rope.dimension_count", K_INT },
};

static int check_known_keys(const sb_gguf *g, char *err) {
    sb_str arch = { "", 0 };
    sb_gguf_get_str(g, "general.architecture", &arch);
    for (size_t i = 0; i < SB_ARRAY_LEN(known_keys); i++) {
        char key[160];
        const char *k = known_keys[i].key;
        if (k[0] == '.') {
            if (!arch.len) continue;
            snprintf(key, sizeof key, "%.*s%s", (int)SB_MIN(arch.len, (size_t)64), arch.ptr, k);
            k = key;
        }
        const sb_gguf_kv *kv = sb_gguf_find(g, k);
        if (kv && !kind_ok(kv, known_keys[i].kind))
            return sb_seterr(err, SB_EFORMAT, "%s: metadata key '%s' at byte offset %" PRIu64 ": must be %s, found %s%s%s",
                             sb_gguf_path(g), k, kv->offset, kind_name[known_keys[i].kind],
                             sb_gguf_vtype_name(kv->type), kv->type == SB_GGUF_ARRAY ? " of " : "",
                             kv->type == SB_GGUF_ARRAY ? sb_gguf_vtype_name(kv->arr_type) : "");
    }
    /* The tokenizer's parallel arrays index the same tokens. */
    const sb_gguf_kv *tokens = sb_gguf_find(g, "tokenizer.ggml.tokens");
    static const char *const parallel[] = { "tokenizer.ggml.scores", "tokenizer.ggml.token_type" };
    for (size_t i = 0; tokens && i < SB_ARRAY_LEN(parallel); i++) {
        const sb_gguf_kv *kv = sb_gguf_find(g, parallel[i]);
        if (kv && kv->arr_n != tokens->arr_n)
            return sb_seterr(err, SB_EFORMAT, "%s: metadata key '%s' at byte offset %" PRIu64
                             ": %" PRIu64 " entries, but tokenizer.ggml.tokens has %" PRIu64,
                             sb_gguf_path(g), parallel[i], kv->offset, kv->arr_n, tokens->arr_n);
    }
    return 0;
}

/* Print s with control characters escaped, at most max bytes (0 = all). */
static void print_escaped(sb_str s, size_t max) {
    size_t n = (max && s.len > max) ? max : s.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 32 || c == 127) printf("\\x%02x", c);
        else putchar(c);
    }
    if (n < s.len) printf("…(%zu bytes)", s.len);
}

static void print_array(const sb_gguf_kv *kv, int all) {
    uint64_t show = all ? kv->arr_n : SB_MIN(kv->arr_n, (uint64_t)8);
    printf("[%s × %" PRIu64 "] [", sb_gguf_vtype_name(kv->arr_type), kv->arr_n);
    if (kv->arr_type == SB_GGUF_STRING) {
        sb_str *s = NULL;
        if (sb_gguf_arr_strings(kv, &s, NULL) == 0) {
            for (uint64_t i = 0; i < show; i++) {
                printf("%s\"", i ? ", " : "");
                print_escaped(s[i], all ? 0 : 40);
                putchar('"');
            }
            sb_free(s);
        }
    } else if (kv->arr_type == SB_GGUF_ARRAY) {
        printf("nested arrays");
        show = kv->arr_n;
    } else {
        for (uint64_t i = 0; i < show; i++) {
            if (kv->arr_type == SB_GGUF_F32 || kv->arr_type == SB_GGUF_F64)
                printf("%s%g", i ? ", " : "", sb_gguf_arr_float(kv, i));
            else
                printf("%s%" PRId64, i ? ", " : "", sb_gguf_arr_int(kv, i));
        }
    }
    if (show < kv->arr_n) printf(", …");
    putchar(']');
}

static void print_value(const sb_gguf_kv *kv, int all) {
    switch (kv->type) {
    case SB_GGUF_STRING:
        putchar('"');
        print_escaped(kv->v.s, all ? 0 : 120);
        putchar('"');
        break;
    case SB_GGUF_ARRAY: print_array(kv, all); break;
    case SB_GGUF_BOOL: printf("%s", kv->v.u ? "true" : "false"); break;
    case SB_GGUF_F32: case SB_GGUF_F64: printf("%g", kv->v.f); break;
    case SB_GGUF_I8: case SB_GGUF_I16: case SB_GGUF_I32: case SB_GGUF_I64:
        printf("%" PRId64, kv->v.i); break;
    default: printf("%" PRIu64, kv->v.u); break;
    }
}

static void print_kv(const sb_gguf_kv *kv, int all) {
    printf("  %-40.*s ", (int)kv->key.len, kv->key.ptr);
    print_value(kv, all);
    putchar('\n');
}

/* Parameters and bytes per tensor type: what "Q4_K_M" actually contains. */
typedef struct {
    uint64_t n[SB_TYPE_COUNT], bytes[SB_TYPE_COUNT], params, total_bytes;
} type_counts;

static void count_types(const sb_gguf *g, type_counts *tc) {
    memset(tc, 0, sizeof *tc);
    for (size_t i = 0; i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        tc->params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        tc->n[t->type]++;
        tc->bytes[t->type] += t->nbytes;
        tc->total_bytes += t->nbytes;
    }
}

static void print_shape(const sb_gguf_tensor *t) {
    printf("%" PRId64, t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims; d++) printf(" x %" PRId64, t->ne[d]);
}

/* One summary line "label: value" for key, "(absent)" when it is not there. */
static void summary_kv(const sb_gguf *g, const char *label, const char *key) {
    const sb_gguf_kv *kv = sb_gguf_find(g, key);
    printf("%-28s", label);
    if (kv) print_value(kv, 0);
    else fputs("(absent)", stdout);
    putchar('\n');
}

static void print_summary(const sb_gguf *g, const type_counts *tc) {
    const sb_kq_traits *tt = sb_kq_table(SB_KQ_REF);
    printf("%-28s%s (%zu bytes, GGUF v%u, %zu keys, alignment %u, data at byte offset %zu)\n", "file:",
           sb_gguf_path(g), sb_gguf_file_size(g), sb_gguf_version(g), sb_gguf_n_kv(g), sb_gguf_alignment(g),
           sb_gguf_data_offset(g));
    summary_kv(g, "name:", "general.name");
    summary_kv(g, "architecture:", "general.architecture");
    sb_str arch = { "", 0 };
    sb_gguf_get_str(g, "general.architecture", &arch);
    static const char *const hparams[] = {
        "block_count", "embedding_length", "feed_forward_length", "attention.head_count",
        "attention.head_count_kv", "context_length", "rope.freq_base",
    };
    for (size_t i = 0; arch.len && i < SB_ARRAY_LEN(hparams); i++) {
        char key[160], label[160];
        snprintf(key, sizeof key, "%.*s.%s", (int)SB_MIN(arch.len, (size_t)64), arch.ptr, hparams[i]);
        snprintf(label, sizeof label, "  %s:", hparams[i]);
        summary_kv(g, label, key);
    }
    uint64_t ft;
    if (sb_gguf_get_u64(g, "general.file_type", &ft) == 0) {
        const sb_ftype_info *fi = ft <= INT32_MAX ? sb_ftype_by_id((int)ft) : NULL;
        printf("%-28s%" PRIu64 " (%s)\n", "file_type:", ft, fi ? fi->name : "unknown to switchboard");
    } else {
        printf("%-28s(absent)\n", "file_type:");
    }
    const sb_gguf_kv *tokens = sb_gguf_find(g, "tokenizer.ggml.tokens");
    printf("%-28stokens=%" PRIu64, "vocab:", tokens ? tokens->arr_n : 0);
    static const char *const vocab[][2] = {
        { "model", "tokenizer.ggml.model" }, { "pre", "tokenizer.ggml.pre" },
        { "bos", "tokenizer.ggml.bos_token_id" }, { "eos", "tokenizer.ggml.eos_token_id" },
        { "add_bos", "tokenizer.ggml.add_bos_token" },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(vocab); i++) {
        const sb_gguf_kv *kv = sb_gguf_find(g, vocab[i][1]);
        printf(" %s=", vocab[i][0]);
        if (kv) print_value(kv, 0);
        else fputs("-", stdout);
    }
    putchar('\n');
    printf("%-28s%zu, %.1f MiB of data, %.1f M parameters", "tensors:", sb_gguf_n_tensors(g),
           (double)tc->total_bytes / (1 << 20), (double)tc->params / 1e6);
    if (tc->params) printf(", %.2f bits per weight", 8.0 * (double)tc->total_bytes / (double)tc->params);
    printf("\n%-28s", "tensor types:");
    for (int ty = 0, n = 0; ty < SB_TYPE_COUNT; ty++)
        if (tc->n[ty]) printf("%s%s x%" PRIu64, n++ ? ", " : "", tt[ty].name, tc->n[ty]);
    putchar('\n');
    static const char *const shown[] = {
        "token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
        "blk.0.attn_qkv.weight", "blk.0.ffn_down.weight",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(shown); i++) {
        const sb_gguf_tensor *t = sb_gguf_find_tensor(g, shown[i]);
        if (!t) continue;
        printf("  %-24s %-6s [", shown[i], tt[t->type].name);
        print_shape(t);
        puts("]");
    }
    sb_str tpl;
    if (sb_gguf_get_str(g, "tokenizer.chat_template", &tpl) == 0) {
        printf("%-28s%zu bytes: \"", "chat template:", tpl.len);
        print_escaped(tpl, 100);
        puts("\"");
    } else {
        printf("%-28s(absent)\n", "chat template:");
    }
}

static void print_full(const sb_gguf *g, const type_counts *tc, int all, int tensors) {
    const sb_kq_traits *tt = sb_kq_table(SB_KQ_REF);
    printf("file:      %s\n", sb_gguf_path(g));
    printf("version:   %u\n", sb_gguf_version(g));
    printf("size:      %zu bytes\n", sb_gguf_file_size(g));
    printf("alignment: %u, data at byte offset %zu\n", sb_gguf_alignment(g), sb_gguf_data_offset(g));
    printf("metadata:  %zu keys\n", sb_gguf_n_kv(g));
    for (size_t i = 0; i < sb_gguf_n_kv(g); i++) print_kv(sb_gguf_kv_at(g, i), all);
    printf("tensors:   %zu\n", sb_gguf_n_tensors(g));
    for (size_t i = 0; tensors && i < sb_gguf_n_tensors(g); i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(g, i);
        printf("  %4zu %-36.*s %-6s [", i, (int)t->name.len, t->name.ptr, tt[t->type].name);
        print_shape(t);
        printf("] offset %" PRIu64 " size %zu\n", t->offset, t->nbytes);
    }
    printf("parameters: %" PRIu64 "\n", tc->params);
    for (int ty = 0; ty < SB_TYPE_COUNT; ty++)
        if (tc->n[ty])
            printf("  %-6s %4" PRIu64 " tensors %12" PRIu64 " bytes\n", tt[ty].name, tc->n[ty], tc->bytes[ty]);
    if (tc->params) printf("bits per weight: %.2f\n", 8.0 * (double)tc->total_bytes / (double)tc->params);
}

int sb_cmd_inspect(int argc, char **argv) {
    int all = 0, tensors = 1, summary = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--no-tensors")) tensors = 0;
        else if (!strcmp(argv[i], "--summary")) summary = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "inspect: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return SB_EXIT_CONFIG;
        } else if (!path) path = argv[i];
        else { fprintf(stderr, "inspect: more than one FILE given\n"); return SB_EXIT_CONFIG; }
    }
    if (!path) { usage(stderr); return SB_EXIT_CONFIG; }

    char err[SB_ERR_LEN];
    sb_gguf *g;
    if (sb_gguf_open(path, &g, err) != 0 || check_known_keys(g, err) != 0) {
        fprintf(stderr, "inspect: %s\n", err);
        sb_gguf_close(g);
        return SB_EXIT_FAIL;
    }
    type_counts tc;
    count_types(g, &tc);
    if (summary) print_summary(g, &tc);
    else print_full(g, &tc, all, tensors);
    sb_gguf_close(g);
    return SB_EXIT_OK;
}
