/* cli_cache.c - `switchboard cache SUBCOMMAND`: the operator's view of the
 * response cache (stats, list, get, purge, export, import, vacuum, check,
 * key) and the edge side of the cloud sync (sync).
 */
#include "cache/sync/sync_internal.h"
#include "cache/sb_cache_wire.h"
#include "common/sb_cmd.h"
#include "common/sb_config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *db, *config, *ns, *fingerprint, *match, *output, *url, *edge_id, *secret,
               *secret_file, *model, *params, *admin_token, *cloud, *ca_file;
    int64_t limit, min_asks, timeout_ms;
    int json, all, no_upload, full;
} cli_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard cache COMMAND [--db PATH | -c CONFIG] [OPTIONS]\n\n"
        "The response cache (SQLite). -c reads cache.path, max_mb and ttl_s from the\n"
        "runtime config; --db names the file directly.\n\n"
        "commands:\n"
        "  stats [--json]                     entries, bytes, hits, sync state\n"
        "  list [FILTER] [--limit N] [--json] entries, most recently hit first\n"
        "  get KEY [--json]                   the stored answer (no hit counted)\n"
        "  purge KEY | FILTER | --all         delete entries\n"
        "  purge KEY --cloud URL [--admin-token T]  purge at the cloud: every edge\n"
        "                                     drops it on its next sync (token also\n"
        "                                     from SB_ADMIN_TOKEN)\n"
        "  export [FILTER] [-o FILE]          JSON lines (stdout by default)\n"
        "  import FILE|-                      JSON lines; same keys are replaced\n"
        "  vacuum                             checkpoint and compact the file\n"
        "  check                              PRAGMA integrity_check\n"
        "  key --ns NS (--fingerprint FP | --model GGUF) [--params P] TEXT\n"
        "                                     the key a request would use\n"
        "  sync --url URL --edge-id ID (--secret S | --secret-file F)\n"
        "       [--no-upload] [--min-asks N]  one sync with `switchboard cloud`\n"
        "                                     (secret also from SB_EDGE_SECRET)\n"
        "  --ca-file PEM                      with sync/--cloud: CA bundle for an https://\n"
        "                                     cloud (default: the system's trust store)\n"
        "  --timeout-ms N                     with sync: deadline of each whole request\n"
        "                                     (default 10000)\n\n"
        "FILTER: --ns NS, --fingerprint FP, --match GLOB (over the normalised input)\n");
}

static int open_from(const cli_opts *o, int read_only, sb_cache **c) {
    char err[SB_ERR_LEN] = "";
    sb_cache_opts co = { .read_only = read_only, .no_checkpointer = 1 };
    const char *path = o->db;
    sb_config *cfg = NULL;
    if (!path && o->config) {
        if (sb_config_load(o->config, &cfg, err)) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_CONFIG; }
        if (!cfg->cache.enabled) {
            fprintf(stderr, "cache: %s has no cache section\n", o->config);
            sb_config_free(cfg);
            return SB_EXIT_CONFIG;
        }
        path = cfg->cache.path;
        co.max_bytes = (uint64_t)cfg->cache.max_mb << 20;
        co.default_ttl_s = cfg->cache.ttl_s;
    }
    if (!path) { fprintf(stderr, "cache: give --db PATH or -c CONFIG\n"); return SB_EXIT_CONFIG; }
    int rc = sb_cache_open(path, &co, c, err);
    sb_config_free(cfg);
    if (rc) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    return SB_EXIT_OK;
}

static int cmd_stats(sb_cache *c, const cli_opts *o) {
    sb_cache_stats_t s;
    char err[SB_ERR_LEN];
    if (sb_cache_stats(c, &s, err)) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    if (o->json) {
        printf("{\"entries\":%lld,\"pinned\":%lld,\"cloud_entries\":%lld,\"bytes\":%lld,"
               "\"max_bytes\":%lld,\"file_bytes\":%lld,\"free_bytes\":%lld,\"local_hits\":%lld,"
               "\"dirty_entries\":%lld,\"sync_cursor\":%lld,\"sync_pending\":%lld,"
               "\"schema_version\":%d,\"read_only\":%s}\n",
               (long long)s.entries, (long long)s.pinned, (long long)s.cloud_entries,
               (long long)s.bytes, (long long)s.max_bytes, (long long)s.file_bytes,
               (long long)s.free_bytes, (long long)s.local_hits_total, (long long)s.dirty_entries,
               (long long)s.sync_cursor, (long long)s.sync_pending, s.schema_version,
               s.read_only ? "true" : "false");
        return SB_EXIT_OK;
    }
    printf("entries        %lld (%lld pinned, %lld from the cloud)\n", (long long)s.entries,
           (long long)s.pinned, (long long)s.cloud_entries);
    printf("bytes          %lld of %lld (file %lld, free pages %lld)\n", (long long)s.bytes,
           (long long)s.max_bytes, (long long)s.file_bytes, (long long)s.free_bytes);
    printf("local hits     %lld\n", (long long)s.local_hits_total);
    printf("sync           cursor %lld, %lld entries with unsent asks, %s\n", (long long)s.sync_cursor,
           (long long)s.dirty_entries, s.sync_pending ? "a batch awaits retry" : "nothing pending");
    printf("schema         v%d%s\n", s.schema_version, s.read_only ? " (read-only)" : "");
    return SB_EXIT_OK;
}

static void fmt_time(int64_t ms, char *out, size_t n) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int print_entry(void *arg, const sb_cache_entry *e) {
    const cli_opts *o = arg;
    if (o->json) {
        sb_jw b = { 0 };
        sbc_entry_json(&b, e);
        if (b.p) puts(b.p);
        sb_jw_free(&b);
        return 0;
    }
    char last[32];
    fmt_time(e->last_hit_ms, last, sizeof last);
    printf("%.16s  %-12s hits %4lld/%-5lld %s %-5s %6zu B  %s  %.60s\n", e->key, e->ns,
           (long long)e->local_hits, (long long)e->global_hits, e->pinned ? "P" : "-",
           e->origin == SB_CACHE_ORIGIN_CLOUD ? "cloud" : "local", e->response_len, last, e->input);
    return 0;
}

static sb_cache_filter filter_of(const cli_opts *o) {
    sb_cache_filter f = { .ns = o->ns, .fingerprint = o->fingerprint, .input_glob = o->match,
                          .limit = o->limit };
    return f;
}

/* A full key or an unambiguous prefix of one (list shows 16 digits). */
typedef struct { const char *prefix; char key[SB_CACHE_KEY_HEX]; int n; } prefix_match;

static int match_prefix(void *arg, const sb_cache_entry *e) {
    prefix_match *m = arg;
    if (!strncmp(e->key, m->prefix, strlen(m->prefix))) { strcpy(m->key, e->key); m->n++; }
    return 0;
}

static int resolve_key(sb_cache *c, const char *arg, char key[SB_CACHE_KEY_HEX]) {
    if (strlen(arg) == SB_CACHE_KEY_HEX - 1) { strcpy(key, arg); return 0; }
    prefix_match m = { .prefix = arg };
    if (strlen(arg) < 6 || sb_cache_list(c, NULL, match_prefix, &m, NULL) || m.n != 1) {
        fprintf(stderr, "cache: '%s' is not a key or a unique key prefix (%d matches)\n", arg, m.n);
        return -1;
    }
    strcpy(key, m.key);
    return 0;
}

static int cmd_get(sb_cache *c, const cli_opts *o, const char *arg) {
    char key[SB_CACHE_KEY_HEX], err[SB_ERR_LEN];
    if (resolve_key(c, arg, key)) return SB_EXIT_FAIL;
    sb_cache_entry e;
    int rc = sb_cache_peek(c, key, &e, err);
    if (rc) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    if (o->json) print_entry((void *)o, &e);
    else fwrite(e.response, 1, e.response_len, stdout);
    sb_cache_entry_free(&e);
    return SB_EXIT_OK;
}

static int cloud_purge(const cli_opts *o, const char *key) {
    const char *token = o->admin_token ? o->admin_token : getenv("SB_ADMIN_TOKEN");
    if (!token) { fprintf(stderr, "cache: --cloud needs --admin-token or SB_ADMIN_TOKEN\n"); return SB_EXIT_CONFIG; }
    char headers[512], path[128], err[SB_ERR_LEN];
    snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", token);
    snprintf(path, sizeof path, "/v1/entries/%s", key);
    sbc_http_reply r;
    if (sbc_http_request("DELETE", o->cloud, path, headers, NULL, 0, 10000, o->ca_file, &r, err)) {
        fprintf(stderr, "cache: %s\n", err);
        return SB_EXIT_FAIL;
    }
    int ok = r.status == 200;
    fprintf(ok ? stdout : stderr, "%d %s\n", r.status, r.body.p ? r.body.p : "");
    sb_jw_free(&r.body);
    return ok ? SB_EXIT_OK : SB_EXIT_FAIL;
}

static int cmd_purge(sb_cache *c, const cli_opts *o, const char *arg) {
    char err[SB_ERR_LEN];
    if (arg) {
        char key[SB_CACHE_KEY_HEX];
        if (resolve_key(c, arg, key)) return SB_EXIT_FAIL;
        if (sb_cache_purge_key(c, key, err)) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
        printf("purged %s\n", key);
        return SB_EXIT_OK;
    }
    if (!o->all && !o->ns && !o->fingerprint && !o->match) {
        fprintf(stderr, "cache: purge needs a KEY, a filter, or --all\n");
        return SB_EXIT_CONFIG;
    }
    sb_cache_filter f = filter_of(o);
    int64_t n = 0;
    if (sb_cache_purge(c, &f, &n, err)) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    printf("purged %lld entries\n", (long long)n);
    return SB_EXIT_OK;
}

static int cmd_export(sb_cache *c, const cli_opts *o) {
    int fd = STDOUT_FILENO;
    /* Callers' text: a new file is owner-only, like the cache itself. */
    if (o->output && (fd = open(o->output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        fprintf(stderr, "cache: %s: %s\n", o->output, strerror(errno));
        return SB_EXIT_FAIL;
    }
    sb_cache_filter f = filter_of(o);
    int64_t n = 0;
    char err[SB_ERR_LEN];
    int rc = sb_cache_export(c, &f, fd, &n, err);
    if (fd != STDOUT_FILENO && close(fd) && !rc) rc = sb_seterr(err, SB_EIO, "close: %s", strerror(errno));
    if (rc) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    fprintf(stderr, "exported %lld entries\n", (long long)n);
    return SB_EXIT_OK;
}

static int cmd_import(sb_cache *c, const char *file) {
    int fd = strcmp(file, "-") ? open(file, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
    if (fd < 0) { fprintf(stderr, "cache: %s: %s\n", file, strerror(errno)); return SB_EXIT_FAIL; }
    int64_t in = 0, bad = 0;
    char err[SB_ERR_LEN];
    int rc = sb_cache_import(c, fd, &in, &bad, err);
    if (fd != STDIN_FILENO) close(fd);
    if (rc) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    printf("imported %lld entries, skipped %lld bad lines\n", (long long)in, (long long)bad);
    return bad ? SB_EXIT_FAIL : SB_EXIT_OK;
}

static int cmd_key(const cli_opts *o, const char *text) {
    char fp[SB_CACHE_KEY_HEX], err[SB_ERR_LEN];
    if (!o->ns || (!o->fingerprint && !o->model) || !text) {
        fprintf(stderr, "cache: key needs --ns, --fingerprint or --model, and TEXT\n");
        return SB_EXIT_CONFIG;
    }
    if (o->model) {
        if (sb_cache_fingerprint_file(o->model, o->full ? SB_FP_FULL : 0, fp, err)) {
            fprintf(stderr, "cache: %s\n", err);
            return SB_EXIT_FAIL;
        }
    } else {
        snprintf(fp, sizeof fp, "%s", o->fingerprint);
    }
    sb_cache_query q;
    if (sb_cache_make_key(NULL, o->ns, fp, text, o->params ? o->params : "", &q, err)) {
        fprintf(stderr, "cache: %s\n", err);
        return SB_EXIT_FAIL;
    }
    printf("%s\n", q.key);
    if (o->json) printf("fingerprint %s\ninput %s\n", fp, q.input);
    sb_free(q.input);
    return SB_EXIT_OK;
}

static int read_secret(const cli_opts *o, char *buf, size_t n) {
    if (o->secret) { snprintf(buf, n, "%s", o->secret); return 0; }
    if (o->secret_file) {
        FILE *f = fopen(o->secret_file, "r");
        if (!f || !fgets(buf, (int)n, f)) {
            fprintf(stderr, "cache: %s: cannot read the secret\n", o->secret_file);
            if (f) fclose(f);
            return -1;
        }
        fclose(f);
        buf[strcspn(buf, "\r\n")] = '\0';
        return 0;
    }
    const char *env = getenv("SB_EDGE_SECRET");
    if (env) { snprintf(buf, n, "%s", env); return 0; }
    fprintf(stderr, "cache: sync needs --secret, --secret-file or SB_EDGE_SECRET\n");
    return -1;
}

static int cmd_sync(sb_cache *c, const cli_opts *o) {
    char secret[1024], err[SB_ERR_LEN];
    if (!o->url || !o->edge_id) { fprintf(stderr, "cache: sync needs --url and --edge-id\n"); return SB_EXIT_CONFIG; }
    if (read_secret(o, secret, sizeof secret)) return SB_EXIT_CONFIG;
    sb_cache_sync_opts so = { .url = o->url, .edge_id = o->edge_id, .secret = secret,
                              .no_upload = o->no_upload, .upload_min_asks = o->min_asks,
                              .ca_file = o->ca_file, .timeout_ms = (int)o->timeout_ms };
    sb_cache_sync_result r;
    int rc = sb_cache_sync(c, &so, &r, err);
    if (rc) { fprintf(stderr, "cache: %s\n", err); return SB_EXIT_FAIL; }
    printf("synced: sent %lld deltas and %lld entries, received %lld entries and %lld deletions, "
           "cursor %lld, %d round(s)%s\n", (long long)r.deltas_sent, (long long)r.entries_sent,
           (long long)r.entries_received, (long long)r.deletions_received, (long long)r.cursor,
           r.rounds, r.resumed ? ", resumed an interrupted batch" : "");
    return SB_EXIT_OK;
}

/* The options after SUBCOMMAND into *o; -1 when the command ends here
 * (exit code in *code), else the number of arguments left (at most one,
 * in *arg). */
static int parse_opts(int argc, char **argv, cli_opts *o, const char **arg, int *code) {
    static const struct option longopts[] = {
        { "db", required_argument, NULL, 'D' }, { "config", required_argument, NULL, 'c' },
        { "ns", required_argument, NULL, 'n' }, { "fingerprint", required_argument, NULL, 'f' },
        { "match", required_argument, NULL, 'm' }, { "limit", required_argument, NULL, 'L' },
        { "output", required_argument, NULL, 'o' }, { "json", no_argument, NULL, 'j' },
        { "all", no_argument, NULL, 'a' }, { "url", required_argument, NULL, 'u' },
        { "edge-id", required_argument, NULL, 'e' }, { "secret", required_argument, NULL, 's' },
        { "secret-file", required_argument, NULL, 'S' }, { "no-upload", no_argument, NULL, 'N' },
        { "min-asks", required_argument, NULL, 'M' }, { "model", required_argument, NULL, 'G' },
        { "params", required_argument, NULL, 'P' }, { "full", no_argument, NULL, 'F' },
        { "cloud", required_argument, NULL, 'C' }, { "admin-token", required_argument, NULL, 'T' },
        { "ca-file", required_argument, NULL, 'A' }, { "timeout-ms", required_argument, NULL, 'O' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    int ch;
    *code = SB_EXIT_CONFIG;
    optind = 1;
    while ((ch = getopt_long(argc - 1, argv + 1, "c:o:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'D': o->db = optarg; break;
        case 'c': o->config = optarg; break;
        case 'n': o->ns = optarg; break;
        case 'f': o->fingerprint = optarg; break;
        case 'm': o->match = optarg; break;
        case 'L': if (sb_opt_int("cache", "--limit", optarg, 0, INT64_MAX, &o->limit)) return -1; break;
        case 'o': o->output = optarg; break;
        case 'j': o->json = 1; break;
        case 'a': o->all = 1; break;
        case 'u': o->url = optarg; break;
        case 'e': o->edge_id = optarg; break;
        case 's': o->secret = optarg; break;
        case 'S': o->secret_file = optarg; break;
        case 'N': o->no_upload = 1; break;
        case 'M': if (sb_opt_int("cache", "--min-asks", optarg, 0, INT64_MAX, &o->min_asks)) return -1; break;
        case 'G': o->model = optarg; break;
        case 'P': o->params = optarg; break;
        case 'F': o->full = 1; break;
        case 'C': o->cloud = optarg; break;
        case 'T': o->admin_token = optarg; break;
        case 'A': o->ca_file = optarg; break;
        case 'O':
            if (sb_opt_int("cache", "--timeout-ms", optarg, 1, 3600000, &o->timeout_ms)) return -1;
            break;
        case 'h': usage(stdout); *code = SB_EXIT_OK; return -1;
        default: usage(stderr); return -1;
        }
    }
    int npos = argc - 1 - optind;
    *arg = npos > 0 ? argv[1 + optind] : NULL;
    if (npos > 1) { fprintf(stderr, "cache: too many arguments\n"); return -1; }
    return npos;
}

/* A subcommand on the local database. */
static int run_local(const char *sub, const cli_opts *o, const char *arg) {
    int needs_arg = !strcmp(sub, "get") || !strcmp(sub, "import");
    if (needs_arg && !arg) { fprintf(stderr, "cache: %s needs an argument\n", sub); return SB_EXIT_CONFIG; }
    int read_only = !strcmp(sub, "stats") || !strcmp(sub, "list") || !strcmp(sub, "get") ||
                    !strcmp(sub, "export") || !strcmp(sub, "check");
    sb_cache *c = NULL;
    int rc = open_from(o, read_only, &c);
    if (rc) return rc;
    char err[SB_ERR_LEN];
    if (!strcmp(sub, "stats")) rc = cmd_stats(c, o);
    else if (!strcmp(sub, "list")) {
        sb_cache_filter f = filter_of(o);
        if (sb_cache_list(c, &f, print_entry, (void *)o, err)) { fprintf(stderr, "cache: %s\n", err); rc = SB_EXIT_FAIL; }
    } else if (!strcmp(sub, "get")) rc = cmd_get(c, o, arg);
    else if (!strcmp(sub, "purge")) rc = cmd_purge(c, o, arg);
    else if (!strcmp(sub, "export")) rc = cmd_export(c, o);
    else if (!strcmp(sub, "import")) rc = cmd_import(c, arg);
    else if (!strcmp(sub, "vacuum")) {
        if (sb_cache_vacuum(c, err)) { fprintf(stderr, "cache: %s\n", err); rc = SB_EXIT_FAIL; }
        else printf("vacuumed\n");
    } else if (!strcmp(sub, "check")) {
        if (sb_cache_check(c, err)) { fprintf(stderr, "cache: %s\n", err); rc = SB_EXIT_FAIL; }
        else printf("ok\n");
    } else if (!strcmp(sub, "sync")) rc = cmd_sync(c, o);
    sb_cache_close(c);
    return rc;
}

int sb_cmd_cache(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SB_EXIT_CONFIG : SB_EXIT_OK;
    }
    const char *sub = argv[1], *arg;
    cli_opts o = { 0 };
    int code;
    if (parse_opts(argc, argv, &o, &arg, &code) < 0) return code;
    if (!strcmp(sub, "key")) return cmd_key(&o, arg);
    if (!strcmp(sub, "purge") && o.cloud) {
        if (!arg || strlen(arg) != SB_CACHE_KEY_HEX - 1) { fprintf(stderr, "cache: purge --cloud needs a full 64-digit KEY\n"); return SB_EXIT_CONFIG; }
        return cloud_purge(&o, arg);
    }
    static const char *const subs[] = { "stats", "list", "get", "purge", "export", "import",
                                        "vacuum", "check", "sync", NULL };
    int known = 0;
    for (int i = 0; subs[i]; i++) known |= !strcmp(sub, subs[i]);
    if (!known) { fprintf(stderr, "cache: unknown command '%s'\n\n", sub); usage(stderr); return SB_EXIT_CONFIG; }
    return run_local(sub, &o, arg);
}
