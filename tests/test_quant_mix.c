/* test_quant_mix.c - the per-tensor type mix on real model shapes, and the
 * GGUF writer.
 *
 *  1. tests/data/quant/synthetic.txt describes the tensor tables of real
 *     models (Qwen2.5-0.5B, Qwen2-7B, SmolLM2-135M, TinyLlama, Phi-3-mini,
 *     Llama-3-8B, a Llama-2-70B, Mixtral-8x7B: real row lengths, layer
 *     counts, GQA ratios and expert counts). For each we build that F16 file
 *     (zero data, sparse) and check that sb_quant_plan gives, for every TYPE,
 *     llama-quantize's output order and per-tensor types from
 *     expected-mix.txt - which exercises use_more_bits over 22..80 layers,
 *     the GQA, 70B and 8-expert rules, tied embeddings and the fallbacks of
 *     896-, 576- and 3584-wide rows, none of which the 2-layer fixtures reach;
 *  2. the writer: keys keep their order and a set moves a key to the end
 *     (gguf_set_val's behaviour), every metadata type round-trips through
 *     the reader, tensor offsets follow the alignment, bad tensors are
 *     refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "worker/gguf/sb_gguf.h"
#include "worker/gguf/sb_gguf_write.h"
#include "worker/kernels/sb_kq.h"
#include "worker/quantize/sb_quantize.h"

#define SYNTHETIC "tests/data/quant/synthetic.txt"
#define EXPECTED  "tests/data/quant/expected-mix.txt"
#define MAX_TEMPLATES 32

typedef struct { char name[64]; int n_dims; int64_t ne[3]; } tensor_template;

typedef struct {
    char name[48], arch[32];
    int layers, head, head_kv, expert;
    tensor_template t[MAX_TEMPLATES];
    int n_t;
} model_spec;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

static int read_specs(model_spec *m, int max) {
    FILE *f = fopen(SYNTHETIC, "r");
    assert_non_null(f);
    char line[512];
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        if (!strncmp(line, "model ", 6)) {
            assert_true(++n < max);
            memset(&m[n], 0, sizeof m[n]);
            assert_int_equal(sscanf(line, "model %47s %31s layers=%d head=%d head_kv=%d expert=%d", m[n].name,
                                    m[n].arch, &m[n].layers, &m[n].head, &m[n].head_kv, &m[n].expert), 6);
        } else if (!strncmp(line, "t ", 2)) {
            assert_true(n >= 0 && m[n].n_t < MAX_TEMPLATES);
            tensor_template *t = &m[n].t[m[n].n_t++];
            long long a = 0, b = 0, c = 0;
            const int k = sscanf(line, "t %63s %lld %lld %lld", t->name, &a, &b, &c);
            assert_true(k >= 2);
            t->n_dims = k - 1;
            t->ne[0] = a; t->ne[1] = b; t->ne[2] = c;
        }
    }
    fclose(f);
    return n + 1;
}

/* The F16 file of a spec: F16 for 2-D+ tensors, F32 for 1-D, zero data
 * (the tail is a hole made by ftruncate). Same as tools/quant_expected.py. */
static void build_model(const model_spec *m, const char *path) {
    sb_gguf_writer *w;
    char err[SB_ERR_LEN], key[96];
    assert_int_equal(sb_gguf_writer_new(&w), 0);
    assert_int_equal(sb_gguf_writer_set_str(w, "general.architecture", m->arch), 0);
    snprintf(key, sizeof key, "%s.block_count", m->arch);
    assert_int_equal(sb_gguf_writer_set_u32(w, key, (uint32_t)m->layers), 0);
    snprintf(key, sizeof key, "%s.attention.head_count", m->arch);
    assert_int_equal(sb_gguf_writer_set_u32(w, key, (uint32_t)m->head), 0);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    assert_int_equal(sb_gguf_writer_set_u32(w, key, (uint32_t)m->head_kv), 0);
    if (m->expert) {
        snprintf(key, sizeof key, "%s.expert_count", m->arch);
        assert_int_equal(sb_gguf_writer_set_u32(w, key, (uint32_t)m->expert), 0);
    }
    for (int i = 0; i < m->n_t; i++) {
        const tensor_template *t = &m->t[i];
        const int per_layer = strstr(t->name, "%d") != NULL;
        for (int il = 0; il < (per_layer ? m->layers : 1); il++) {
            char name[64];
            snprintf(name, sizeof name, t->name, il);
            const int type = t->n_dims > 1 ? SB_TYPE_F16 : SB_TYPE_F32;
            if (sb_gguf_writer_add_tensor(w, name, strlen(name), (uint32_t)t->n_dims, t->ne, (uint32_t)type, err))
                fail_msg("%s: %s", m->name, err);
        }
    }
    uint8_t *hdr;
    size_t len;
    assert_int_equal(sb_gguf_writer_header(w, &hdr, &len, err), 0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(hdr, 1, len, f), len);
    assert_int_equal(ftruncate(fileno(f), (off_t)(len + sb_gguf_writer_data_size(w))), 0);
    fclose(f);
    sb_free(hdr);
    sb_gguf_writer_free(w);
}

/* Check every "mix" line of one model; returns the number of cases that differ. */
static int check_model(const model_spec *m, char *expected, int *n_cases) {
    char path[64], err[SB_ERR_LEN];
    snprintf(path, sizeof path, "/tmp/sb-test-mix-%d.gguf", (int)getpid());
    build_model(m, path);
    sb_gguf *g;
    if (sb_gguf_open(path, &g, err)) fail_msg("%s: %s", m->name, err);
    sb_quant_hparams hp;
    assert_int_equal(sb_quant_hparams_read(g, &hp, err), 0);
    const size_t n = sb_gguf_n_tensors(g);
    sb_quant_plan_entry *plan = calloc(n, sizeof *plan);
    int bad = 0;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "order %s ", m->name);
    char *order = strstr(expected, prefix);
    assert_non_null(order);
    for (char *line = expected; (line = strstr(line, "\nmix ")); line++) {
        char model[48], type[16], flags[16];
        int used = 0;
        if (sscanf(line + 1, "mix %47s %15s %15s %n", model, type, flags, &used) != 3 || strcmp(model, m->name))
            continue;
        (*n_cases)++;
        const sb_ftype_info *ft = sb_ftype_by_name(type);
        assert_non_null(ft);
        sb_quant_mix_params mp = { .ftype = ft->ftype, .has_imatrix = !strcmp(flags, "imatrix") };
        assert_int_equal(sb_quant_plan(g, &hp, &mp, plan, err), 0);
        const char *types = line + 1 + used, *names = order + strlen(prefix);
        int diffs = 0;
        for (size_t i = 0; i < n; i++) {
            const sb_gguf_tensor *t = sb_gguf_tensor_at(g, plan[i].src_index);
            char want_name[80], want_type[16];
            int a, b;
            if (sscanf(names, "%79s%n", want_name, &a) != 1 || sscanf(types, "%15s%n", want_type, &b) != 1) {
                print_error("%s %s %s: expected list ends at tensor %zu\n", m->name, type, flags, i);
                diffs++;
                break;
            }
            names += a;
            types += b;
            const char *our_type = sb_kq_table(SB_KQ_REF)[plan[i].type].name;
            if (!sb_str_eq(t->name, want_name) || strcmp(our_type, want_type)) {
                if (diffs < 5)
                    print_error("%s %s %s: tensor %zu: ours %.*s %s, llama-quantize's %s %s\n", m->name, type, flags, i,
                                (int)t->name.len, t->name.ptr, our_type, want_name, want_type);
                diffs++;
            }
        }
        bad += diffs > 0;
    }
    free(plan);
    sb_gguf_close(g);
    unlink(path);
    return bad;
}

static void test_real_model_mixes(void **state) {
    (void)state;
    model_spec *m = calloc(16, sizeof *m);
    const int n_models = read_specs(m, 16);
    char *expected = slurp(EXPECTED);
    assert_non_null(expected);
    int cases = 0, bad = 0;
    for (int i = 0; i < n_models; i++) bad += check_model(&m[i], expected, &cases);
    print_message("%d models, %d TYPE cases, %d differ from llama-quantize\n", n_models, cases, bad);
    assert_true(n_models >= 8 && cases >= 8 * 17);
    assert_int_equal(bad, 0);
    free(expected);
    free(m);
}

/* ---- writer ------------------------------------------------------------------ */

/* Copy every key of a real file (strings, string arrays, f32/i32 arrays,
 * bools, ints), add tensors, and read the result back. */
static void test_writer_round_trip(void **state) {
    (void)state;
    sb_gguf *src;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_gguf_open("tests/data/tiny-llama3-f16.gguf", &src, err), 0);
    sb_gguf_writer *w;
    assert_int_equal(sb_gguf_writer_new(&w), 0);
    for (size_t i = 0; i < sb_gguf_n_kv(src); i++)
        assert_int_equal(sb_gguf_writer_copy_kv(w, src, sb_gguf_kv_at(src, i), err), 0);
    /* replacing a key moves it to the end, like gguf_set_val_u32 */
    assert_int_equal(sb_gguf_writer_set_u32(w, "general.file_type", 15), 0);
    assert_int_equal(sb_gguf_writer_set_u32(w, "general.alignment", 64), 0);
    assert_int_equal(sb_gguf_writer_alignment(w), 64);
    sb_gguf_writer_remove(w, "llama.vocab_size");
    sb_gguf_writer_remove(w, "no.such.key");
    const int64_t ne_a[2] = { 256, 3 }, ne_b[1] = { 100 }, ne_c[3] = { 512, 1, 1 };
    assert_int_equal(sb_gguf_writer_add_tensor(w, "a", 1, 2, ne_a, SB_TYPE_Q4_K, err), 0);
    assert_int_equal(sb_gguf_writer_add_tensor(w, "b", 1, 1, ne_b, SB_TYPE_F32, err), 0);
    assert_int_equal(sb_gguf_writer_add_tensor(w, "c", 1, 3, ne_c, SB_TYPE_Q8_0, err), 0);
    assert_true(sb_gguf_writer_add_tensor(w, "a", 1, 2, ne_a, SB_TYPE_F16, err) < 0);     /* duplicate */
    assert_true(sb_gguf_writer_add_tensor(w, "d", 1, 1, ne_b, SB_TYPE_Q4_0, err) < 0);    /* 100 % 32 */
    assert_true(sb_gguf_writer_add_tensor(w, "e", 1, 1, ne_b, 16, err) < 0);              /* IQ2_XXS */
    /* 3 rows of Q4_K = 432 bytes, padded to 64; 100 floats = 400 bytes */
    assert_int_equal(sb_gguf_writer_tensor_offset(w, 1), 448);
    assert_int_equal(sb_gguf_writer_tensor_offset(w, 2), 896);
    uint8_t *hdr;
    size_t len;
    assert_int_equal(sb_gguf_writer_header(w, &hdr, &len, err), 0);
    assert_int_equal(len % 64, 0);
    const size_t total = len + (size_t)sb_gguf_writer_data_size(w);
    uint8_t *file = calloc(1, total);
    memcpy(file, hdr, len);
    sb_gguf *g;
    if (sb_gguf_open_mem(file, total, "written", &g, err)) fail_msg("%s", err);
    assert_int_equal(sb_gguf_alignment(g), 64);
    assert_int_equal(sb_gguf_n_kv(g), sb_gguf_n_kv(src));   /* + general.alignment - llama.vocab_size */
    /* the last two keys are the ones set last, in that order */
    assert_true(sb_str_eq(sb_gguf_kv_at(g, sb_gguf_n_kv(g) - 2)->key, "general.file_type"));
    assert_true(sb_str_eq(sb_gguf_kv_at(g, sb_gguf_n_kv(g) - 1)->key, "general.alignment"));
    uint32_t ft;
    assert_int_equal(sb_gguf_get_u32(g, "general.file_type", &ft), 0);
    assert_int_equal(ft, 15);
    /* every copied key has the same bytes as in the source */
    for (size_t i = 0; i < sb_gguf_n_kv(src); i++) {
        const sb_gguf_kv *a = sb_gguf_kv_at(src, i);
        if (sb_str_eq(a->key, "general.file_type") || sb_str_eq(a->key, "llama.vocab_size")) continue;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)a->key.len, a->key.ptr);
        const sb_gguf_kv *b = sb_gguf_find(g, key);
        assert_non_null(b);
        assert_int_equal(a->type, b->type);
        /* raw bytes: from the key to the next key (or the end of the metadata) */
        if (i + 1 < sb_gguf_n_kv(src)) {
            const size_t na = sb_gguf_kv_at(src, i + 1)->offset - a->offset;
            assert_memory_equal((const uint8_t *)sb_gguf_base(src) + a->offset, file + b->offset, na);
        }
    }
    /* tensors: trailing 1s dropped from the dims, offsets as computed */
    assert_int_equal(sb_gguf_n_tensors(g), 3);
    assert_int_equal(sb_gguf_tensor_at(g, 2)->n_dims, 1);
    assert_int_equal(sb_gguf_tensor_at(g, 0)->type, SB_TYPE_Q4_K);
    assert_int_equal(sb_gguf_tensor_at(g, 1)->offset, 448);
    sb_gguf_close(g);
    free(file);
    sb_free(hdr);
    sb_gguf_writer_free(w);
    sb_gguf_close(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_model_mixes),
        cmocka_unit_test(test_writer_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
