/* test_config.c - the YAML config loader with real files in a temp dir.
 *
 * Every rejection is checked for its exact FILE:LINE:COLUMN and message,
 * because the position is the contract: an operator fixes the line we name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sb_config.h"

static char g_dir[64];          /* realpath'd temp dir */
static char g_yaml[128];        /* g_dir/c.yaml */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    char tmpl[] = "/tmp/sb-cfg-XXXXXX";
    if (!mkdtemp(tmpl)) return -1;
    char *real = realpath(tmpl, NULL);
    snprintf(g_dir, sizeof g_dir, "%s", real);
    free(real);
    snprintf(g_yaml, sizeof g_yaml, "%s/c.yaml", g_dir);
    char p[160];
    snprintf(p, sizeof p, "%s/m.gguf", g_dir);
    FILE *f = fopen(p, "w");        /* the loader checks existence, not content */
    if (!f) return -1;
    fputs("GGUF", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/key.txt", g_dir);
    f = fopen(p, "w");
    fputs("secret\n", f);
    fclose(f);
    return 0;
}

static int teardown(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd);
}

static int load(const char *yaml, sb_config **cfg, char *err) {
    write_file(g_yaml, yaml);
    err[0] = '\0';
    return sb_config_load(g_yaml, cfg, err);
}

/* The config must be rejected with exactly ":LINE:COL: msg" after the path. */
static void expect_error(const char *yaml, const char *where_and_msg) {
    sb_config *cfg = (sb_config *)1;
    char err[SB_ERR_LEN];
    int rc = load(yaml, &cfg, err);
    if (rc != SB_EINVAL) fail_msg("rc %d (%s) for:\n%s", rc, err, yaml);
    assert_null(cfg);
    size_t n = strlen(g_yaml);
    if (strncmp(err, g_yaml, n) || strcmp(err + n, where_and_msg))
        fail_msg("got  '%s'\nwant '%s%s'", err, g_yaml, where_and_msg);
}

static const char *const M = "models:\n  a:\n    gguf: m.gguf\n";

static void test_good_config(void **state) {
    sb_config *cfg;
    char err[SB_ERR_LEN];
    int rc = load("runtime:\n"
                  "  dir: ./sock\n"
                  "  http: \"[::1]:9090\"\n"
                  "  api_key_file: key.txt\n"
                  "  log_level: debug\n"
                  "models:\n"
                  "  router: { gguf: m.gguf, threads: 2, ctx: 4096, kv_type: f32, max_queue: 0,\n"
                  "            idle: unload-after:300 }\n"
                  "  composer:\n"
                  "    upstream: https://api.example.com:8443/v1\n"
                  "    api_key_env: OPENAI_API_KEY\n"
                  "    timeout_ms: 5000\n"
                  "cache: { max_mb: 16, ttl_s: 0 }\n"
                  "pipelines:\n"
                  "  hotline:\n"
                  "    stages:\n"
                  "      - { intent: router }\n"
                  "      - compose\n", &cfg, err);
    if (rc) fail_msg("%s", err);
    char want[256];
    snprintf(want, sizeof want, "%s/sock", g_dir);
    assert_string_equal(cfg->runtime.dir, want);
    assert_string_equal(cfg->runtime.http_host, "::1");
    assert_int_equal(cfg->runtime.http_port, 9090);
    snprintf(want, sizeof want, "%s/key.txt", g_dir);
    assert_string_equal(cfg->runtime.api_key_file, want);
    assert_null(cfg->runtime.api_key_env);
    assert_int_equal(cfg->runtime.log_level, SB_LOG_DEBUG);
    assert_int_equal(cfg->runtime.drain_ms, 10000);
    assert_int_equal(cfg->n_models, 2);

    const sb_config_model *r = sb_config_find_model(cfg, "router");
    assert_non_null(r);
    snprintf(want, sizeof want, "%s/m.gguf", g_dir);
    assert_string_equal(r->gguf, want);
    assert_int_equal(r->threads, 2);
    assert_int_equal(r->ctx, 4096);
    assert_int_equal(r->kv_type, SB_KV_F32);
    assert_int_equal(r->max_queue, 0);
    assert_int_equal(r->idle_unload_s, 300);
    assert_int_equal(r->max_tokens, 512);
    assert_int_equal(r->line, 7);
    assert_null(r->upstream);
    assert_true(r->gguf_size == 4 && r->gguf_ino != 0);

    const sb_config_model *c = sb_config_find_model(cfg, "composer");
    assert_non_null(c);
    assert_null(c->gguf);
    assert_string_equal(c->upstream, "https://api.example.com:8443/v1");
    assert_string_equal(c->upstream_model, "composer");     /* defaults to the name */
    assert_string_equal(c->api_key_env, "OPENAI_API_KEY");
    assert_int_equal(c->timeout_ms, 5000);
    assert_null(sb_config_find_model(cfg, "tool"));

    assert_true(cfg->cache.enabled);
    snprintf(want, sizeof want, "%s/sock/cache.sqlite", g_dir);   /* default: runtime dir */
    assert_string_equal(cfg->cache.path, want);
    assert_int_equal(cfg->cache.max_mb, 16);
    assert_int_equal(cfg->cache.ttl_s, 0);

    /* Pipelines stay a tree, with positions, for the router to validate. */
    const sb_config_node *h = sb_config_node_get(cfg->pipelines, "hotline");
    const sb_config_node *stages = sb_config_node_get(h, "stages");
    assert_non_null(stages);
    assert_int_equal(stages->kind, SB_CFG_SEQ);
    assert_int_equal(stages->n_items, 2);
    const sb_config_node *intent = sb_config_node_get(stages->items[0], "intent");
    assert_string_equal(intent->value, "router");
    assert_int_equal(intent->line, 17);
    assert_int_equal(intent->col, 19);
    assert_string_equal(stages->items[1]->value, "compose");
    snprintf(err, sizeof err, "x");
    assert_int_equal(sb_config_node_error(cfg, intent, err, "unknown model '%s'", intent->value), SB_EINVAL);
    snprintf(want, sizeof want, "%s:17:19: unknown model 'router'", g_yaml);
    assert_string_equal(err, want);
    sb_config_free(cfg);
}

static void test_defaults_and_shipped_config(void **state) {
    sb_config *cfg;
    char err[SB_ERR_LEN];
    assert_int_equal(load(M, &cfg, err), 0);
    char want[256];
    snprintf(want, sizeof want, "%s/run", g_dir);
    assert_string_equal(cfg->runtime.dir, want);
    assert_string_equal(cfg->runtime.http, "127.0.0.1:8080");
    assert_int_equal(cfg->runtime.http_port, 8080);
    assert_int_equal(cfg->runtime.log_level, SB_LOG_INFO);
    const sb_config_model *m = &cfg->models[0];
    assert_int_equal(m->threads, 1);
    assert_int_equal(m->ctx, 2048);
    assert_int_equal(m->kv_type, SB_KV_F16);
    assert_int_equal(m->max_queue, 8);
    assert_int_equal(m->idle_unload_s, 0);
    assert_false(cfg->cache.enabled);
    assert_null(cfg->pipelines);
    sb_config_free(cfg);

    /* The example we ship must always load (from the repository root). */
    if (sb_config_load("configs/single.yaml", &cfg, err)) fail_msg("%s", err);
    assert_int_equal(cfg->n_models, 1);
    assert_non_null(strstr(cfg->models[0].gguf, "tests/data/tiny-llama-spm-Q4_K_M.gguf"));
    assert_true(cfg->models[0].gguf[0] == '/');
    sb_config_free(cfg);
}

/* The sync carries callers' text: https anywhere, plain http only to this
 * machine; ca_file must exist. */
static void test_cache_sync_url(void **state) {
    char yaml[512], err[SB_ERR_LEN];
    const char *ok[] = { "https://cloud.example:8443/sb", "http://127.0.0.1:9000", "http://localhost:1",
                         "http://[::1]:9", NULL };
    for (int i = 0; ok[i]; i++) {
        snprintf(yaml, sizeof yaml, "%scache:\n  sync: { url: \"%s\", edge_id: e, secret_file: key.txt, "
                 "ca_file: key.txt }\n", M, ok[i]);
        sb_config *cfg = NULL;
        if (load(yaml, &cfg, err)) fail_msg("%s: %s", ok[i], err);
        assert_string_equal(cfg->cache.sync.url, ok[i]);
        assert_non_null(strstr(cfg->cache.sync.ca_file, "/key.txt"));
        sb_config_free(cfg);
    }
    expect_error("models:\n  a: { gguf: m.gguf }\ncache:\n  sync: { url: \"http://10.0.0.5:9000\", edge_id: e, "
                 "secret_file: key.txt }\n",
                 ":4:16: cache.sync.url: 'http://10.0.0.5:9000' would send callers' text unencrypted; use "
                 "https:// (http:// is accepted for a loopback host only)");
    expect_error("models:\n  a: { gguf: m.gguf }\ncache:\n  sync: { url: \"ftp://h/\", edge_id: e, "
                 "secret_file: key.txt }\n",
                 ":4:16: cache.sync.url: expected https://HOST[:PORT][/PREFIX], got 'ftp://h/'");
    snprintf(yaml, sizeof yaml, "%scache:\n  sync: { url: \"https://h\", edge_id: e, secret_file: key.txt, "
             "ca_file: nope.pem }\n", M);
    sb_config *cfg = NULL;
    assert_int_equal(load(yaml, &cfg, err), SB_EINVAL);
    assert_non_null(strstr(err, "cache.sync.ca_file"));
}

static void test_unknown_keys(void **state) {
    expect_error("models:\n  a:\n    gguf: m.gguf\n    thread: 2\n",
                 ":4:5: models.a: unknown key 'thread' (expected one of: gguf, threads, ctx, "
                 "kv_type, idle, parallel, kv_mb, max_queue, max_tokens, deadline_ms, lookup, draft, adapter, adapters)");
    /* draft: another local model, not together with lookup. */
    expect_error("models:\n  a: { gguf: m.gguf, draft: a }\n",
                 ":2:29: models.a.draft: 'a' is not another local (gguf) model of models:");
    expect_error("models:\n  a: { gguf: m.gguf, draft: b, lookup: 4 }\n  b: { gguf: m.gguf }\n",
                 ":2:29: models.a: 'lookup' and 'draft' are alternatives; set one");
    /* A KV pool is a worker's: an upstream sizes its own. */
    expect_error("models:\n  c: { upstream: http://h:1/v1, kv_mb: 4 }\n",
                 ":2:33: models.c: unknown key 'kv_mb' (expected one of: upstream, model, "
                 "api_key_env, timeout_ms, parallel, max_queue, max_tokens, deadline_ms)");
    expect_error("runtime:\n  dir: x\n  htp: 1\nmodels: {}\n",
                 ":3:3: runtime: unknown key 'htp' (expected one of: dir, http, api_key_env, "
                 "api_key_file, api_keys_file, secret_key_file, log_level, drain_ms, retention)");
    expect_error("modles:\n  a: {}\n",
                 ":1:1: configuration: unknown key 'modles' (expected one of: runtime, models, "
                 "cache, knowledge, pipelines, console, sessions)");
    /* gguf-only keys on a remote model */
    expect_error("models:\n  c: { upstream: http://h:1/v1, threads: 2 }\n",
                 ":2:33: models.c: unknown key 'threads' (expected one of: upstream, model, "
                 "api_key_env, timeout_ms, parallel, max_queue, max_tokens, deadline_ms)");
}

static void test_wrong_types(void **state) {
    expect_error("models:\n  a:\n    gguf: m.gguf\n    threads: \"2\"\n",
                 ":4:14: models.a.threads: expected an integer in [1, 256], got the string \"2\"");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    threads: [1]\n",
                 ":4:14: models.a.threads: expected an integer in [1, 256], got a list");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    ctx: lots\n",
                 ":4:10: models.a.ctx: expected an integer in [16, 1048576], got 'lots'");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    ctx:\n",
                 ":4:9: models.a.ctx: expected an integer in [16, 1048576], got null");
    expect_error("models:\n  a:\n    gguf: { path: m.gguf }\n",
                 ":3:11: models.a.gguf: expected a non-empty string, got a mapping");
    expect_error("models: [a, b]\n", ":1:9: models: expected a mapping, got a list");
    expect_error("runtime: 5\nmodels: {}\n", ":1:10: runtime: expected a mapping, got a string");
    expect_error("- a\n- b\n", ":1:1: configuration: expected a mapping, got a list");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    kv_type: q8\n",
                 ":4:14: models.a.kv_type: expected f16|f32, got 'q8'");
    expect_error("runtime:\n  log_level: verbose\nmodels: {}\n",
                 ":2:14: runtime.log_level: expected debug|info|warn|error, got 'verbose'");
}

/* Sequences per worker and its KV pool: unset means "the
 * worker decides", so 0 is not a value one can write. */
static void test_parallel_and_kv_mb(void **state) {
    expect_error("models:\n  a: { gguf: m.gguf, parallel: 0 }\n",
                 ":2:32: models.a.parallel: expected an integer in [1, 64], got '0'");
    expect_error("models:\n  a: { gguf: m.gguf, parallel: 65 }\n",
                 ":2:32: models.a.parallel: expected an integer in [1, 64], got '65'");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    parallel: \"4\"\n",
                 ":4:15: models.a.parallel: expected an integer in [1, 64], got the string \"4\"");
    expect_error("models:\n  a: { gguf: m.gguf, kv_mb: 0 }\n",
                 ":2:29: models.a.kv_mb: expected an integer in [1, 1048576], got '0'");
    expect_error("models:\n  a: { gguf: m.gguf, kv_mb: 1048577 }\n",
                 ":2:29: models.a.kv_mb: expected an integer in [1, 1048576], got '1048577'");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    kv_mb: 1.5\n",
                 ":4:12: models.a.kv_mb: expected an integer in [1, 1048576], got '1.5'");
    sb_config *a, *b;
    char err[SB_ERR_LEN];
    assert_int_equal(load("models:\n  x: { gguf: m.gguf }\n", &a, err), 0);
    assert_int_equal(a->models[0].parallel, 0);
    assert_int_equal(a->models[0].kv_mb, 0);
    assert_int_equal(load("models:\n  x: { gguf: m.gguf, parallel: 64, kv_mb: 256 }\n", &b, err), 0);
    assert_int_equal(b->models[0].parallel, 64);
    assert_int_equal(b->models[0].kv_mb, 256);
    /* Both are on the worker's command line: a change restarts it on reload. */
    assert_false(sb_config_equal_model(&a->models[0], &b->models[0]));
    sb_config_free(a);
    sb_config_free(b);
    /* On an upstream: the requests it gets at once (its slots). */
    assert_int_equal(load("models:\n  u: { upstream: http://h:1/v1, parallel: 4 }\n", &a, err), 0);
    assert_int_equal(a->models[0].parallel, 4);
    sb_config_free(a);
    expect_error("models:\n  u: { upstream: http://h:1/v1, parallel: 65 }\n",
                 ":2:43: models.u.parallel: expected an integer in [1, 64], got '65'");
}

static void test_impossible_values(void **state) {
    expect_error("models:\n  a: { gguf: m.gguf, threads: 0 }\n",
                 ":2:31: models.a.threads: expected an integer in [1, 256], got '0'");
    expect_error("models:\n  a: { gguf: m.gguf, threads: 257 }\n",
                 ":2:31: models.a.threads: expected an integer in [1, 256], got '257'");
    expect_error("models:\n  a: { gguf: m.gguf, ctx: 8 }\n",
                 ":2:27: models.a.ctx: expected an integer in [16, 1048576], got '8'");
    expect_error("models:\n  a: { gguf: m.gguf, ctx: 2097152 }\n",
                 ":2:27: models.a.ctx: expected an integer in [16, 1048576], got '2097152'");
    expect_error("models:\n  a: { gguf: m.gguf, ctx: 99999999999999999999 }\n",
                 ":2:27: models.a.ctx: expected an integer in [16, 1048576], got '99999999999999999999'");
    expect_error("models:\n  a: { gguf: m.gguf, ctx: 64, max_tokens: 100 }\n",
                 ":2:43: models.a.max_tokens: 100 exceeds the context size (ctx: 64)");
    static const char *const bad_http[] = { "localhost", "h:0", "h:99999", ":80", "h:8o", "a b:1",
                                            "[::1]80", "h:" };
    for (size_t i = 0; i < SB_ARRAY_LEN(bad_http); i++) {
        char yaml[128], want[160];
        snprintf(yaml, sizeof yaml, "runtime:\n  http: \"%s\"\n%s", bad_http[i], M);
        snprintf(want, sizeof want, ":2:9: runtime.http: expected HOST:PORT with a port in "
                 "[1, 65535], got '%s'", bad_http[i]);
        expect_error(yaml, want);
    }
    expect_error("models:\n  a:\n    gguf: m.gguf\n    idle: unload-after:x\n",
                 ":4:11: models.a.idle: expected 'keep' or 'unload-after:SECONDS' (SECONDS >= 1), "
                 "got 'unload-after:x'");
    expect_error("models:\n  a:\n    gguf: m.gguf\n    idle: unload-after:0\n",
                 ":4:11: models.a.idle: expected 'keep' or 'unload-after:SECONDS' (SECONDS >= 1), "
                 "got 'unload-after:0'");
    expect_error("models:\n  c: { upstream: ftp://h/v1 }\n",
                 ":2:18: models.c.upstream: expected http(s)://HOST[:PORT][/PATH], got 'ftp://h/v1'");
    expect_error("models:\n  c: { upstream: \"http://h:99999/v1\" }\n",
                 ":2:18: models.c.upstream: expected http(s)://HOST[:PORT][/PATH], got 'http://h:99999/v1'");
    expect_error("runtime:\n  api_key_env: 1BAD\nmodels: {}\n",
                 ":2:16: runtime.api_key_env: expected an environment variable name, got '1BAD'");
    expect_error("models:\n  bad/name: { gguf: m.gguf }\n",
                 ":2:3: models: name 'bad/name' must be 1-64 characters of A-Z a-z 0-9 _ -");
    expect_error("models: {}\n", ":1:9: models: expected at least one model");
    expect_error("runtime: { dir: x }\n", ":1:1: missing 'models': expected a mapping of model names");
    expect_error("models:\n  a: { gguf: m.gguf, upstream: http://h/v1 }\n",
                 ":2:32: models.a: expected exactly one of 'gguf' (a local model file) or "
                 "'upstream' (a remote endpoint)");
    expect_error("models:\n  a: { threads: 2 }\n",
                 ":2:6: models.a: expected exactly one of 'gguf' (a local model file) or "
                 "'upstream' (a remote endpoint)");
    expect_error("runtime:\n  api_key_env: K\n  api_key_file: key.txt\nmodels: {}\n",
                 ":3:17: runtime: give api_key_env or api_key_file, not both");
    char yaml[512], want[512];
    snprintf(yaml, sizeof yaml, "runtime:\n  dir: /tmp/%0100d\n%s", 0, M);
    snprintf(want, sizeof want, ":4:3: models.a: socket path '/tmp/%0100d/a.sock' is 112 bytes; "
             "Unix sockets allow 107 (use a shorter runtime.dir)", 0);
    expect_error(yaml, want);
}

static void test_missing_files(void **state) {
    char want[256];
    snprintf(want, sizeof want, ":3:11: models.a.gguf: cannot read '%s/nope.gguf': "
             "No such file or directory", g_dir);
    expect_error("models:\n  a:\n    gguf: nope.gguf\n", want);
    snprintf(want, sizeof want, ":3:11: models.a.gguf: cannot read '%s/.': not a regular file", g_dir);
    expect_error("models:\n  a:\n    gguf: .\n", want);
    snprintf(want, sizeof want, ":2:17: runtime.api_key_file: cannot read '%s/none': "
             "No such file or directory", g_dir);
    expect_error("runtime:\n  api_key_file: none\nmodels: {}\n", want);
    sb_config *cfg;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_config_load("/nonexistent/c.yaml", &cfg, err), SB_EIO);
    assert_string_equal(err, "/nonexistent/c.yaml: No such file or directory");
    assert_int_equal(sb_config_load("/tmp", &cfg, err), SB_EIO);
}

static void test_yaml_level_errors(void **state) {
    expect_error("models:\n  a:\n    gguf: m.gguf\n    threads: 1\n    threads: 2\n",
                 ":5:5: duplicate key 'threads' (first at line 4)");
    expect_error("models:\n  a: { gguf: m.gguf }\n  a: { gguf: m.gguf }\n",
                 ":3:3: duplicate key 'a' (first at line 2)");
    /* libyaml's own diagnosis, at its position */
    expect_error("models:\n\ta: { gguf: m.gguf }\n",
                 ":2:1: invalid YAML: found character that cannot start any token "
                 "while scanning for the next token");
    expect_error("models:\n  a: { gguf: m.gguf\n",
                 ":3:1: invalid YAML: did not find expected ',' or '}' while parsing a flow mapping");
    expect_error("models: a: b\n", ":1:10: invalid YAML: mapping values are not allowed in this context");
    expect_error("", ":1:1: empty configuration: expected a mapping with 'models'");
    expect_error("# only a comment\n", ":1:1: empty configuration: expected a mapping with 'models'");
    expect_error("---\n...\n", ":1:1: empty configuration: expected a mapping with 'models'");
    expect_error("base: &b { gguf: m.gguf }\nmodels:\n  a: *b\n",
                 ":3:6: aliases (*name) are not supported");
    expect_error("models:\n  a: !!map { gguf: m.gguf }\n", ":2:6: YAML tags (!tag) are not supported");
    expect_error("models:\n  ? [x]\n  : 1\n", ":2:5: mapping keys must be plain strings");
    expect_error("models: { a: { gguf: m.gguf } }\n---\nmodels: {}\n",
                 ":2:1: only one YAML document is allowed");
    char deep[400] = "models:\n  a: { gguf: m.gguf }\npipelines:\n  p: ";
    for (int i = 0; i < 70; i++) strcat(deep, "[");
    for (int i = 0; i < 70; i++) strcat(deep, "]");
    sb_config *cfg;
    char err[SB_ERR_LEN];
    assert_int_equal(load(deep, &cfg, err), SB_EINVAL);
    assert_non_null(strstr(err, "nested deeper than 64"));
}

/* A NUL written as a YAML escape ("\0", "\x00") reached the loader's C
 * strings and cut them there: model "tiny\0zzz" served as "tiny", a tool's
 * argv "safe\x00; rm -rf /" ran as "safe", and `run --check` said ok. The
 * error names the file, the line and column, and the key. (config.c
 * refused NUL in its own top-level strings; pipelines' were not.) */
static void test_nul_in_strings(void **state) {
    expect_error("models:\n  a: { gguf: m.gguf }\npipelines:\n  p:\n    stages:\n"
                 "      - { name: g, kind: generate, model: \"a\\0zzz\", prompt: hi }\n",
                 ":6:43: 'model': the value holds NUL (\\0) after \"a\": not allowed in a config string");
    expect_error("models:\n  a: { gguf: m.gguf }\npipelines:\n  p:\n    stages:\n"
                 "      - name: t\n        kind: tool\n        command: [\"/bin/echo\", \"safe\\x00; rm -rf /\"]\n",
                 ":8:32: 'command': the value holds NUL (\\0) after \"safe\": not allowed in a config string");
    expect_error("models:\n  a: { gguf: \"m.gguf\\0zzz\" }\n",
                 ":2:14: 'gguf': the value holds NUL (\\0) after \"m.gguf\": not allowed in a config string");
    expect_error("models:\n  \"a\\x00b\": { gguf: m.gguf }\n",
                 ":2:3: a key or value holds NUL (\\0) after \"a\": not allowed in a config string");
}

static void test_equal_model_for_reload(void **state) {
    sb_config *a, *b;
    char err[SB_ERR_LEN];
    const char *base = "models:\n  x: { gguf: m.gguf, threads: 1 }\n  y: { gguf: m.gguf }\n";
    assert_int_equal(load(base, &a, err), 0);
    assert_int_equal(load("# moved around, same settings\nmodels:\n"
                          "  y:\n    gguf: ./m.gguf\n  x: { threads: 1, gguf: m.gguf }\n", &b, err), 0);
    assert_true(sb_config_equal_model(sb_config_find_model(a, "x"), sb_config_find_model(b, "x")));
    assert_true(sb_config_equal_model(sb_config_find_model(a, "y"), sb_config_find_model(b, "y")));
    assert_true(sb_config_equal_runtime(a, b));
    sb_config_free(b);
    assert_int_equal(load("models:\n  x: { gguf: m.gguf, threads: 2 }\n  y: { gguf: m.gguf }\n"
                          "runtime: { log_level: warn }\n", &b, err), 0);
    assert_false(sb_config_equal_model(sb_config_find_model(a, "x"), sb_config_find_model(b, "x")));
    assert_true(sb_config_equal_model(sb_config_find_model(a, "y"), sb_config_find_model(b, "y")));
    assert_false(sb_config_equal_runtime(a, b));
    sb_config_free(b);
    /* Speculation settings are on the worker's command line. */
    assert_int_equal(load("models:\n  x: { gguf: m.gguf, threads: 1, draft: y }\n  y: { gguf: m.gguf }\n", &b, err), 0);
    assert_false(sb_config_equal_model(sb_config_find_model(a, "x"), sb_config_find_model(b, "x")));
    sb_config_free(b);
    assert_int_equal(load("models:\n  x: { gguf: m.gguf, threads: 1, lookup: 8 }\n  y: { gguf: m.gguf }\n", &b, err), 0);
    assert_false(sb_config_equal_model(sb_config_find_model(a, "x"), sb_config_find_model(b, "x")));
    sb_config_free(b);
    /* An adapter is on the worker's command line too, and a retrained one
     * (the same path, a new file) restarts the worker. */
    char ap[160];
    snprintf(ap, sizeof ap, "%s/ad.gguf", g_dir);
    write_file(ap, "GGUF1");
    const char *with = "models:\n  x: { gguf: m.gguf, threads: 1, adapter: ad.gguf }\n  y: { gguf: m.gguf }\n";
    sb_config *c;
    assert_int_equal(load(with, &b, err), 0);
    assert_non_null(strstr(sb_config_find_model(b, "x")->adapter, "/ad.gguf"));
    assert_false(sb_config_equal_model(sb_config_find_model(a, "x"), sb_config_find_model(b, "x")));
    assert_int_equal(load(with, &c, err), 0);
    assert_true(sb_config_equal_model(sb_config_find_model(b, "x"), sb_config_find_model(c, "x")));
    sb_config_free(c);
    write_file(ap, "GGUF1 retrained");
    assert_int_equal(load(with, &c, err), 0);
    assert_false(sb_config_equal_model(sb_config_find_model(b, "x"), sb_config_find_model(c, "x")));
    sb_config_free(c);
    sb_config_free(b);
    /* adapters: {NAME: FILE}, named per request; a retrained one restarts the worker too */
    const char *named = "models:\n  x: { gguf: m.gguf, threads: 1, adapters: { a: ad.gguf, b: ad.gguf } }\n"
                        "  y: { gguf: m.gguf }\n";
    assert_int_equal(load(named, &b, err), 0);
    const sb_config_model *xm = sb_config_find_model(b, "x");
    assert_int_equal(xm->n_adapters, 2);
    assert_string_equal(xm->adapter_names[1], "b");
    assert_non_null(strstr(xm->adapter_paths[0], "/ad.gguf"));
    assert_false(sb_config_equal_model(sb_config_find_model(a, "x"), xm));
    write_file(ap, "GGUF1 retrained twice");
    assert_int_equal(load(named, &c, err), 0);
    assert_false(sb_config_equal_model(xm, sb_config_find_model(c, "x")));
    sb_config_free(c);
    sb_config_free(b);
    expect_error("models:\n  x: { gguf: m.gguf, adapters: { none: ad.gguf } }\n",
                 ":2:34: models.x.adapters: name 'none' must be 1-64 characters of A-Z a-z 0-9 _ - and not 'none'");
    assert_int_equal(load("models:\n  x: { gguf: m.gguf, adapter: none.gguf }\n", &b, err), SB_EINVAL);
    if (!strstr(err, ":2:31: models.x.adapter: cannot read '")) fail_msg("%s", err);
    /* The same path, but the file was replaced: that is a different model. */
    char p[160], tmp[170];
    snprintf(p, sizeof p, "%s/m.gguf", g_dir);
    snprintf(tmp, sizeof tmp, "%s.new", p);
    write_file(tmp, "GGUF2");
    assert_int_equal(rename(tmp, p), 0);
    assert_int_equal(load(base, &b, err), 0);
    assert_false(sb_config_equal_model(sb_config_find_model(a, "y"), sb_config_find_model(b, "y")));
    sb_config_free(a);
    sb_config_free(b);
}

static void test_allocation_failures(void **state) {
    const char *yaml = "runtime: { http: \"127.0.0.1:1\" }\n"
                       "models:\n  a: { gguf: m.gguf }\n  c: { upstream: http://h/v1 }\n"
                       "cache: {}\npipelines: { p: { stages: [a, b] } }\n";
    write_file(g_yaml, yaml);
    bool ok = false;
    for (long k = 0; k < 500 && !ok; k++) {
        sb_config *cfg = NULL;
        char err[SB_ERR_LEN];
        sb_malloc_fail_after(k);
        int rc = sb_config_load(g_yaml, &cfg, err);
        sb_malloc_fail_after(-1);
        if (rc != 0 && rc != SB_ENOMEM) fail_msg("fail-after %ld: rc %d: %s", k, rc, err);
        ok = rc == 0;
        sb_config_free(cfg);
    }
    assert_true(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_config),
        cmocka_unit_test(test_defaults_and_shipped_config),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_impossible_values),
        cmocka_unit_test(test_missing_files),
        cmocka_unit_test(test_yaml_level_errors),
        cmocka_unit_test(test_nul_in_strings),
        cmocka_unit_test(test_equal_model_for_reload),
        cmocka_unit_test(test_parallel_and_kv_mb),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_cache_sync_url),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
