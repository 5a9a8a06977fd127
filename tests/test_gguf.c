/* test_gguf.c - the GGUF reader against handcrafted defects and truncation.
 *
 * Each defect builds a small file in memory that differs from a valid one
 * in exactly one field, and states what the reader must say about it (the
 * pattern of llama.cpp's test-gguf.cpp). Every prefix of a valid file must be
 * rejected cleanly: under ASan a read past the buffer is a test failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "worker/gguf/sb_gguf.h"
#include "worker/kernels/sb_kq.h"

typedef struct { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }

enum defect {
    D_NONE, D_MAGIC, D_VERSION1, D_VERSION4, D_VERSION_SWAPPED, D_N_TENSORS_HUGE, D_N_KV_HUGE,
    D_KEY_LEN_PAST_EOF, D_KEY_LEN_HUGE, D_KV_TYPE, D_ARRAY_TYPE, D_ARRAY_HUGE, D_NESTED_TOO_DEEP,
    D_DUP_KEY, D_DUP_TENSOR, D_NDIMS_0, D_NDIMS_5, D_NE_0, D_NE_OVERFLOW, D_TENSOR_TYPE_RETIRED,
    D_TENSOR_TYPE_HUGE, D_ROW_NOT_BLOCK, D_DATA_PAST_EOF, D_OFFSET_MISALIGNED, D_ALIGN_NOT_POW2,
    D_ALIGN_WRONG_TYPE, D_BOOL_2, D_NAME_TOO_LONG, D_OFFSET_HUGE, D_OVERLAP, D_KEY_EMPTY, D_BOOL_ARRAY_2,
    D_COUNT
};

/* Must the reader accept the file, and what must its message mention? */
static const struct { const char *name; int ok; const char *says; } expect[D_COUNT] = {
    [D_NONE] = { "valid", 1, NULL },
    [D_MAGIC] = { "bad magic", 0, "magic" },
    [D_VERSION1] = { "version 1", 0, "version" },
    [D_VERSION4] = { "version 4", 0, "version" },
    [D_VERSION_SWAPPED] = { "byte-swapped version", 0, "byte-swapped" },
    [D_N_TENSORS_HUGE] = { "n_tensors huge", 0, "n_tensors" },
    [D_N_KV_HUGE] = { "n_kv huge", 0, "n_kv" },
    [D_KEY_LEN_PAST_EOF] = { "key length past EOF", 0, "truncated" },
    [D_KEY_LEN_HUGE] = { "key length over limit", 0, "exceeds limit" },
    [D_KV_TYPE] = { "invalid value type", 0, "invalid value type" },
    [D_ARRAY_TYPE] = { "invalid array element type", 0, "invalid array element type" },
    [D_ARRAY_HUGE] = { "array count over limit", 0, "exceeds limit" },
    [D_NESTED_TOO_DEEP] = { "arrays nested too deep", 0, "nested" },
    [D_DUP_KEY] = { "duplicate key", 0, "duplicate key" },
    [D_DUP_TENSOR] = { "duplicate tensor", 0, "duplicate name" },
    [D_NDIMS_0] = { "n_dims 0", 0, "n_dims" },
    [D_NDIMS_5] = { "n_dims 5", 0, "n_dims" },
    [D_NE_0] = { "ne 0", 0, "ne[" },
    [D_NE_OVERFLOW] = { "ne product overflow", 0, "overflows" },
    [D_TENSOR_TYPE_RETIRED] = { "retired type id 4", 0, "unsupported tensor type" },
    [D_TENSOR_TYPE_HUGE] = { "type id 1000", 0, "unsupported tensor type" },
    [D_ROW_NOT_BLOCK] = { "row not a multiple of the block", 0, "block size" },
    [D_DATA_PAST_EOF] = { "tensor data past EOF", 0, "past the end" },
    [D_OFFSET_MISALIGNED] = { "misaligned offset", 0, "alignment" },
    [D_ALIGN_NOT_POW2] = { "alignment 48", 0, "power of two" },
    [D_ALIGN_WRONG_TYPE] = { "alignment as string", 0, "power of two" },
    [D_BOOL_2] = { "bool 2", 0, "bool" },
    [D_NAME_TOO_LONG] = { "tensor name 64 bytes", 0, "name" },
    [D_OFFSET_HUGE] = { "offset near 2^64", 0, "past the end" },
    [D_OVERLAP] = { "tensors share bytes", 0, "overlaps tensor 't0'" },
    [D_KEY_EMPTY] = { "empty key", 0, "empty key" },
    [D_BOOL_ARRAY_2] = { "bool 2 in an array", 0, "bool must be 0 or 1" },
};

/* A file with 4 keys (u32, string, bool, [array of i32 arrays]) and two
 * tensors: F32 [8] and Q8_0 [32 x 2], with one defect injected. */
static buf build(enum defect d) {
    buf b = {0};
    put(&b, d == D_MAGIC ? "GGUX" : "GGUF", 4);
    put_u32(&b, d == D_VERSION1 ? 1 : d == D_VERSION4 ? 4 : d == D_VERSION_SWAPPED ? 0x03000000u : 3);
    put_u64(&b, d == D_N_TENSORS_HUGE ? (1ull << 40) : 2);
    put_u64(&b, d == D_N_KV_HUGE ? (1ull << 40) : 5);
    /* kv 0: alignment */
    put_str(&b, "general.alignment");
    if (d == D_ALIGN_WRONG_TYPE) { put_u32(&b, SB_GGUF_STRING); put_str(&b, "32"); }
    else { put_u32(&b, SB_GGUF_U32); put_u32(&b, d == D_ALIGN_NOT_POW2 ? 48 : 32); }
    /* kv 1: string */
    if (d == D_KEY_LEN_PAST_EOF) { put_u64(&b, 1ull << 20); return b; }
    if (d == D_KEY_LEN_HUGE) { put_u64(&b, 1ull << 40); return b; }
    put_str(&b, d == D_KEY_EMPTY ? "" : "general.name");
    put_u32(&b, d == D_KV_TYPE ? 13 : SB_GGUF_STRING);
    put_str(&b, "test model");
    /* kv 2: bool */
    put_str(&b, d == D_DUP_KEY ? "general.name" : "test.flag");
    put_u32(&b, SB_GGUF_BOOL);
    uint8_t bv = d == D_BOOL_2 ? 2 : 1;
    put(&b, &bv, 1);
    /* kv 3: array of 2 arrays of 3 i32 */
    put_str(&b, "test.nested");
    put_u32(&b, SB_GGUF_ARRAY);
    put_u32(&b, d == D_ARRAY_TYPE ? 99 : SB_GGUF_ARRAY);
    put_u64(&b, d == D_ARRAY_HUGE ? (1ull << 40) : 2);
    for (int i = 0; i < 2; i++) {
        put_u32(&b, SB_GGUF_I32);
        put_u64(&b, 3);
        for (int32_t j = 0; j < 3; j++) put(&b, &j, 4);
    }
    /* kv 4: deeply nested array when asked, else a string array */
    put_str(&b, "test.strings");
    put_u32(&b, SB_GGUF_ARRAY);
    if (d == D_NESTED_TOO_DEEP) {
        for (int i = 0; i < SB_GGUF_MAX_DEPTH + 2; i++) { put_u32(&b, SB_GGUF_ARRAY); put_u64(&b, 1); }
        put_u32(&b, SB_GGUF_U8); put_u64(&b, 0);
    } else if (d == D_BOOL_ARRAY_2) {
        put_u32(&b, SB_GGUF_BOOL);
        put_u64(&b, 3);
        put(&b, "\1\0\2", 3);
    } else {
        put_u32(&b, SB_GGUF_STRING);
        put_u64(&b, 3);
        put_str(&b, "a"); put_str(&b, ""); put_str(&b, "ccc");
    }
    /* tensor 0: F32 [8] */
    put_str(&b, d == D_NAME_TOO_LONG ? "t0_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" : "t0");
    put_u32(&b, d == D_NDIMS_0 ? 0 : d == D_NDIMS_5 ? 5 : 1);
    put_u64(&b, d == D_NE_0 ? 0 : 8);
    if (d == D_NDIMS_5) for (int i = 0; i < 4; i++) put_u64(&b, 1);
    put_u32(&b, d == D_TENSOR_TYPE_RETIRED ? 4 : d == D_TENSOR_TYPE_HUGE ? 1000 : SB_TYPE_F32);
    put_u64(&b, 0);
    /* tensor 1: Q8_0 [32 x 2] */
    put_str(&b, d == D_DUP_TENSOR ? "t0" : "t1");
    put_u32(&b, 2);
    put_u64(&b, d == D_ROW_NOT_BLOCK ? 33 : 32);
    put_u64(&b, d == D_NE_OVERFLOW ? (1ull << 62) : 2);
    put_u32(&b, SB_TYPE_Q8_0);
    put_u64(&b, d == D_OFFSET_MISALIGNED ? 40 : d == D_OFFSET_HUGE ? UINT64_MAX - 31 : d == D_OVERLAP ? 0 : 32);
    while (b.n % 32) put(&b, "", 1);
    float f[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    put(&b, f, sizeof f);                   /* t0: 32 bytes at offset 0 */
    uint8_t q[68] = {0};                    /* t1: 2 blocks of 34 bytes at offset 32 */
    put(&b, q, d == D_DATA_PAST_EOF ? 60 : sizeof q);
    return b;
}

static void test_defects(void **state) {
    (void)state;
    for (int d = 0; d < D_COUNT; d++) {
        buf b = build((enum defect)d);
        sb_gguf *g = NULL;
        char err[SB_ERR_LEN] = "";
        int rc = sb_gguf_open_mem(b.p, b.n, "mem.gguf", &g, err);
        if (expect[d].ok) {
            if (rc) fail_msg("%s: rejected: %s", expect[d].name, err);
        } else {
            if (rc == 0) fail_msg("%s: accepted", expect[d].name);
            assert_null(g);
            if (!strstr(err, expect[d].says))
                fail_msg("%s: message '%s' does not mention '%s'", expect[d].name, err, expect[d].says);
            assert_non_null(strstr(err, "mem.gguf"));
        }
        sb_gguf_close(g);
        free(b.p);
    }
}

static void test_valid_contents(void **state) {
    (void)state;
    buf b = build(D_NONE);
    sb_gguf *g;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_gguf_open_mem(b.p, b.n, "mem", &g, err), 0);
    assert_int_equal(sb_gguf_version(g), 3);
    assert_int_equal(sb_gguf_n_kv(g), 5);
    assert_int_equal(sb_gguf_n_tensors(g), 2);
    uint32_t u;
    assert_int_equal(sb_gguf_get_u32(g, "general.alignment", &u), 0);
    assert_int_equal(u, 32);
    sb_str s;
    assert_int_equal(sb_gguf_get_str(g, "general.name", &s), 0);
    assert_true(sb_str_eq(s, "test model"));
    assert_int_equal(sb_gguf_get_str(g, "general.alignment", &s), SB_EFORMAT);
    assert_int_equal(sb_gguf_get_u32(g, "missing", &u), SB_ENOTFOUND);
    int flag;
    assert_int_equal(sb_gguf_get_bool(g, "test.flag", &flag), 0);
    assert_int_equal(flag, 1);
    const sb_gguf_kv *kv = sb_gguf_find(g, "test.nested");
    assert_non_null(kv);
    assert_int_equal(kv->arr_type, SB_GGUF_ARRAY);
    assert_int_equal(kv->arr_n, 2);
    kv = sb_gguf_find(g, "test.strings");
    sb_str *strs;
    assert_int_equal(sb_gguf_arr_strings(kv, &strs, err), 0);
    assert_true(sb_str_eq(strs[0], "a") && sb_str_eq(strs[1], "") && sb_str_eq(strs[2], "ccc"));
    sb_free(strs);
    const sb_gguf_tensor *t = sb_gguf_find_tensor(g, "t0");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 32);
    assert_float_equal(((const float *)t->data)[7], 8.0f, 0);
    t = sb_gguf_find_tensor(g, "t1");
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->ne[0], 32);
    assert_int_equal(t->ne[1], 2);
    assert_ptr_equal(t->data, b.p + sb_gguf_data_offset(g) + 32);
    sb_gguf_close(g);
    free(b.p);
}

/* Every strict prefix of a valid file is an error, never a crash. Each
 * prefix is copied into an exact-size heap block so ASan sees any overread. */
static void test_every_prefix(void **state) {
    (void)state;
    buf b = build(D_NONE);
    for (size_t n = 0; n < b.n; n++) {
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, b.p, n);
        sb_gguf *g = NULL;
        char err[SB_ERR_LEN] = "";
        int rc = sb_gguf_open_mem(p, n, "prefix", &g, err);
        if (rc == 0) fail_msg("prefix of %zu/%zu bytes accepted", n, b.n);
        assert_true(strlen(err) > 0);
        free(p);
    }
    free(b.p);
}

static const char *const fixtures[] = {
    "tests/data/tiny-llama-spm-Q2_K.gguf", "tests/data/tiny-phi3-Q4_K_M.gguf", "tests/data/tiny-llama3-Q5_K_M.gguf",
};

/* The check: a real fixture truncated at 20 random offsets gives a
 * clean error each time (through the file path: open, fstat, mmap). */
static void test_truncated_fixtures(void **state) {
    (void)state;
    srand(20261202);
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        FILE *in = fopen(fixtures[f], "rb");
        if (!in) fail_msg("missing %s", fixtures[f]);
        fseek(in, 0, SEEK_END);
        long size = ftell(in);
        fseek(in, 0, SEEK_SET);
        uint8_t *all = malloc((size_t)size);
        assert_int_equal(fread(all, 1, (size_t)size, in), (size_t)size);
        fclose(in);
        sb_gguf *g;
        char err[SB_ERR_LEN];
        if (sb_gguf_open(fixtures[f], &g, err)) fail_msg("fixture rejected: %s", err);
        sb_gguf_close(g);
        char tmp[] = "/tmp/sb-trunc-XXXXXX";
        for (int i = 0; i < 20; i++) {
            long cut = 1 + rand() % (size - 1);
            int fd = mkstemp(tmp);
            assert_true(fd >= 0);
            FILE *out = fdopen(fd, "wb");
            fwrite(all, 1, (size_t)cut, out);
            fclose(out);
            err[0] = 0;
            int rc = sb_gguf_open(tmp, &g, err);
            unlink(tmp);
            strcpy(tmp, "/tmp/sb-trunc-XXXXXX");
            if (rc == 0) fail_msg("%s cut at %ld accepted", fixtures[f], cut);
            assert_true(strlen(err) > 0);
        }
        free(all);
    }
}

static void test_missing_file(void **state) {
    (void)state;
    sb_gguf *g;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_gguf_open("tests/data/does-not-exist.gguf", &g, err), SB_EIO);
    assert_non_null(strstr(err, "does-not-exist.gguf"));
    assert_int_equal(sb_gguf_open("tests", &g, err), SB_EIO);
}

/* sb_gguf_huge_bytes counts only this handle's own mapping, in whole 2 MiB
 * pages, and only what is mapped: a second mapping of the same file, of
 * which only the header was read, reports at most that page however much
 * of the first is on huge pages. And where a raw mapping advised
 * MADV_HUGEPAGE gets 2 MiB pages, sb_gguf_open's must too (without its
 * advice it got 0 here, the raw one 10-14 MiB). The file: the
 * 4 MiB F16 fixture and 12 MiB of trailing bytes (ignored by the reader),
 * read back through the mapping after its cached pages are dropped. */
static void test_huge_bytes(void **state) {
    (void)state;
    char tmp[] = "/tmp/sb-huge-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    FILE *in = fopen("tests/data/tiny-llama-spm-f16.gguf", "rb");
    assert_non_null(in);
    char chunk[65536];
    size_t n, total = 0;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0) { assert_int_equal(write(fd, chunk, n), (ssize_t)n); total += n; }
    fclose(in);
    memset(chunk, 0, sizeof chunk);
    for (int i = 0; i < 192; i++) { assert_int_equal(write(fd, chunk, sizeof chunk), (ssize_t)sizeof chunk); total += sizeof chunk; }
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    sb_gguf *g1, *g2;
    char err[SB_ERR_LEN];
    if (sb_gguf_open(tmp, &g1, err) || sb_gguf_open(tmp, &g2, err)) fail_msg("%s", err);
    const volatile uint8_t *p = sb_gguf_base(g1);
    unsigned sum = 0;
    for (size_t off = 0; off < total; off += 4096) sum += p[off];
    /* Can this kernel and filesystem map the file with 2 MiB pages? Ask
     * a raw mapping advised MADV_HUGEPAGE, after dropping the pages again.
     * Where it can, sb_gguf_open must get them too (it advises the same). */
    sb_gguf_close(g1);
    fd = open(tmp, O_RDONLY);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const volatile uint8_t *raw = mmap(NULL, total, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(raw != MAP_FAILED);
    madvise((void *)raw, total, MADV_HUGEPAGE);
    for (size_t off = 0; off < total; off += 4096) sum += raw[off];
    FILE *sm = fopen("/proc/self/smaps", "r");
    char line[512];
    long can_kb = 0;
    int in_map = 0;
    while (sm && fgets(line, sizeof line, sm)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' '))
            in_map = a == (uintptr_t)raw;
        else if (in_map && !strncmp(line, "FilePmdMapped:", 14)) can_kb = strtol(line + 14, NULL, 10);
    }
    if (sm) fclose(sm);
    munmap((void *)raw, total);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (sb_gguf_open(tmp, &g1, err)) fail_msg("%s", err);
    p = sb_gguf_base(g1);
    for (size_t off = 0; off < total; off += 4096) sum += p[off];
    const size_t h1 = sb_gguf_huge_bytes(g1), h2 = sb_gguf_huge_bytes(g2);
    print_message("file %zu bytes, %u; on 2 MiB pages: raw advised mapping %ld kB, sb_gguf_open %zu, "
                  "header-only mapping %zu\n", total, sum & 1, can_kb, h1, h2);
    if (can_kb > 0) assert_true(h1 > 0);
    assert_true(h1 <= total);
    assert_int_equal(h1 % (2u << 20), 0);
    assert_true(h2 <= (2u << 20));     /* at most the page its header was read from */
    if (h1 > (2u << 20)) assert_true(h1 > h2);
    sb_gguf_close(g1);
    sb_gguf_close(g2);
    unlink(tmp);
    sb_gguf *m;
    assert_int_equal(sb_gguf_open_mem(chunk, sizeof chunk, "zeros", &m, err) == 0 ? 0 : 1, 1);   /* not a GGUF */
}

/* Whether the page holding p is mapped in this process (/proc/self/pagemap
 * bit 63); -1 when pagemap cannot be read. */
static int page_mapped(const void *p) {
    const long page = sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) return -1;
    uint64_t e = 0;
    const ssize_t r = pread(fd, &e, sizeof e, (off_t)((uintptr_t)p / (uintptr_t)page * sizeof e));
    close(fd);
    return r == (ssize_t)sizeof e ? (int)(e >> 63) : -1;
}

/* sb_gguf_read_at gives a row's bytes without mapping them; a buffer GGUF
 * and an address outside the file get the address back. After
 * sb_gguf_release_header the header's pages are no longer mapped, and a
 * metadata value read afterwards is still the same. */
static void test_read_at_and_release(void **state) {
    (void)state;
    const char *path = "tests/data/tiny-llama-spm-Q4_K_M.gguf";
    char err[SB_ERR_LEN];
    sb_gguf *g;
    if (sb_gguf_open(path, &g, err)) fail_msg("%s", err);
    const sb_gguf_tensor *t = sb_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    const size_t row = t->nbytes / (size_t)t->ne[1];
    const uint8_t *at = (const uint8_t *)t->data + 7 * row;
    uint8_t *dst = malloc(row);
    assert_true(sb_gguf_read_at(g, at, row, dst) == dst);
    const int before = page_mapped(at);
    assert_memory_equal(dst, at, row);
    if (before >= 0) assert_int_equal(before, 0);      /* nothing had touched that row's page */
    const uint8_t *end = (const uint8_t *)sb_gguf_base(g) + sb_gguf_file_size(g);
    assert_true(sb_gguf_read_at(g, end - 4, 8, dst) == end - 4);

    sb_str arch, again;
    assert_int_equal(sb_gguf_get_str(g, "general.architecture", &arch), 0);
    const long page = sysconf(_SC_PAGESIZE);
    assert_true(sb_gguf_data_offset(g) >= (size_t)page);
    const uint8_t *base = sb_gguf_base(g);
    if (page_mapped(base) == 1) {
        sb_gguf_release_header(g);
        assert_int_equal(page_mapped(base), 0);
    }
    assert_int_equal(sb_gguf_get_str(g, "general.architecture", &again), 0);
    assert_int_equal(again.len, arch.len);
    assert_memory_equal(again.ptr, "llama", 5);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *copy = malloc(sb_gguf_file_size(g));
    assert_int_equal(fread(copy, 1, sb_gguf_file_size(g), f), sb_gguf_file_size(g));
    fclose(f);
    sb_gguf *m;
    if (sb_gguf_open_mem(copy, sb_gguf_file_size(g), "copy", &m, err)) fail_msg("%s", err);
    const sb_gguf_tensor *tm = sb_gguf_find_tensor(m, "token_embd.weight");
    const uint8_t *at_m = (const uint8_t *)tm->data + 7 * row;
    assert_true(sb_gguf_read_at(m, at_m, row, dst) == at_m);    /* a buffer: its own bytes */
    sb_gguf_release_header(m);                                  /* nothing to give back */
    sb_gguf_close(m);
    free(copy);
    free(dst);
    sb_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_contents),
        cmocka_unit_test(test_defects),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_truncated_fixtures),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_huge_bytes),
        cmocka_unit_test(test_read_at_and_release),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
