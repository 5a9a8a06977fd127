/* test_runtime_mem.c - memory of the real runtime: three workers of the
 * same GGUF, started by the supervisor (`$SB_BIN run`), share its pages, so
 * each adds less than 64 MiB of private memory beyond its KV cache
 * (/proc/PID/smaps_rollup), and each is charged about a third of the mapping.
 *
 * SB_BIN names the binary (make test sets it; default bin/switchboard).
 * SB_MEM_GGUF=FILE runs the test on another model (e.g. a real one) instead
 * of the fixture.
 */
#include "tests/runtime_testlib.h"

static char g_bin[4096];
static char g_dir[64];
static pid_t g_sup;             /* the supervisor, stopped by teardown if the test failed */

static int setup(void **state) {
    return runtime_test_env("test_runtime_mem", g_bin, sizeof g_bin, g_dir, sizeof g_dir);
}

static int teardown(void **state) {
    if (g_sup > 0) stop(g_sup, 10000);
    return runtime_test_rmdir(g_dir);
}

typedef struct { long rss, pss, anon, shared; } mem_kb;

static long field_kb(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void read_rollup(pid_t pid, mem_kb *m) {
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    m->rss = field_kb(buf, "\nRss:");
    m->pss = field_kb(buf, "\nPss:");
    /* What the worker allocated itself (heap, KV, buffers): file pages, the
     * GGUF mapping included, belong to the page cache that all share. */
    m->anon = field_kb(buf, "\nAnonymous:");
    m->shared = field_kb(buf, "\nShared_Clean:") + field_kb(buf, "\nShared_Dirty:");
}

/* Rss and Pss (kB) of the mappings of `file` in pid. */
static void read_file_mapping(pid_t pid, const char *file, long *rss, long *pss) {
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    bool in = false;
    *rss = *pss = 0;
    size_t fl = strlen(file);
    while (fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        if (l && line[l - 1] == '\n') line[--l] = '\0';
        /* Mapping headers start with a lowercase hex address; fields ("Rss:") with a capital. */
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f'))
            in = l >= fl && !strcmp(line + l - fl, file);
        else if (in && !strncmp(line, "Rss:", 4)) *rss += strtol(line + 4, NULL, 10);
        else if (in && !strncmp(line, "Pss:", 4)) *pss += strtol(line + 4, NULL, 10);
    }
    fclose(f);
}

static int64_t info_int(const sb_ipc_result *res, const char *key) {
    int64_t v = -1;
    sb_mp_get_int(res->result, key, SB_MP_REQUIRED, 0, INT64_MAX, &v, NULL);
    return v;
}

static void test_memory_three_workers(void **state) {
    const char *model = getenv("SB_MEM_GGUF");
    char gguf[4096];
    if (!realpath(model && *model ? model : FIXTURE, gguf)) fail_msg("no model %s", model ? model : FIXTURE);
    char dir[160], cfg[200];
    snprintf(dir, sizeof dir, "%s/mem", g_dir);
    snprintf(cfg, sizeof cfg, "%s/mem.yaml", g_dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "runtime: { dir: %s, drain_ms: 500 }\nmodels:\n", dir);
    for (int i = 0; i < 3; i++) fprintf(f, "  m%d: { gguf: %s, threads: 1, ctx: 2048 }\n", i, gguf);
    fclose(f);
    char *argv[] = { g_bin, "run", "-c", cfg, "--no-router", NULL };
    pid_t sup = g_sup = spawn(argv);
    assert_true(sup > 0);
    pid_t pids[3];
    int64_t kv_bytes[3];
    for (int i = 0; i < 3; i++) {
        char sock[200];
        snprintf(sock, sizeof sock, "%s/m%d.sock", dir, i);
        sb_ipc_client *c = connect_or_fail(sock, 60000);
        sb_ipc_result res;
        assert_int_equal(sb_ipc_call(c, "info", NULL, 10000, NULL, NULL, &res, NULL), 0);
        assert_true(res.ok);
        pids[i] = (pid_t)info_int(&res, "pid");
        int64_t n_layer = info_int(&res, "n_layer"), n_ctx = info_int(&res, "n_ctx"),
                n_embd = info_int(&res, "n_embd"), n_head = info_int(&res, "n_head"),
                n_head_kv = info_int(&res, "n_head_kv");
        /* K and V, F16, per layer: n_ctx x (head_dim * n_head_kv). */
        kv_bytes[i] = 2 * n_layer * n_ctx * (n_embd / n_head * n_head_kv) * 2;
        sb_ipc_result_free(&res);
        /* One generation, so the worker has touched every weight page. */
        sb_mp_writer *p;
        sb_mp_writer_new(&p);
        sb_mp_map(p, 2);
        sb_mp_kv_str(p, "prompt", "Hello");
        sb_mp_kv_i64(p, "max_tokens", 8);
        assert_int_equal(sb_ipc_call(c, "generate", p, 60000, NULL, NULL, &res, NULL), 0);
        assert_true(res.ok);
        sb_ipc_result_free(&res);
        sb_mp_writer_free(p);
        sb_ipc_client_close(c);
    }
    double beyond[3];
    long map_rss[3], map_pss[3];
    for (int i = 0; i < 3; i++) {
        mem_kb m;
        read_rollup(pids[i], &m);
        read_file_mapping(pids[i], gguf, &map_rss[i], &map_pss[i]);
        beyond[i] = (double)m.anon / 1024.0 - (double)kv_bytes[i] / (1 << 20);
        printf("# worker m%d (pid %d): Rss %.1f MiB, Pss %.1f MiB, anonymous %.1f MiB, KV %.1f MiB -> "
               "%.1f MiB beyond the KV cache; GGUF mapping Rss %.1f MiB, Pss %.1f MiB\n",
               i, (int)pids[i], m.rss / 1024.0, m.pss / 1024.0, m.anon / 1024.0,
               (double)kv_bytes[i] / (1 << 20), beyond[i], map_rss[i] / 1024.0, map_pss[i] / 1024.0);
    }
    for (int i = 0; i < 3; i++) {      /* all three printed first: the numbers are the report */
        assert_true(beyond[i] < 64.0);
        assert_true(map_rss[i] > 0);
        /* Three processes share the mapped pages: each is charged about a third. */
        assert_true(map_pss[i] * 2 < map_rss[i]);
    }
    int status = stop(sup, 10000);
    g_sup = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(kill(pids[i], 0), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_three_workers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
