/* cli_erase.c - `switchboard privacy erase`: a caller's data erased from a
 * running runtime, through its router (POST /v1/privacy/erase, the admin
 * role). The other `privacy` subcommands are privacy/'s own
 * (privacy/cli_privacy.c); erase is here because it talks to the router.
 *
 * Why through the router, never on the files directly: the router holds
 * traces in memory and the sessions and cache files open, so an erase on
 * the files behind its back would miss the traces and race its writes. A
 * stopped runtime is erased by starting it: the files are erased then.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/ask_internal.h"
#include "supervisor/sb_supervisor.h"
#include "cache/sync/sb_sync.h"
#include "common/sb_cmd.h"
#include "common/sb_json.h"

#define EXIT_NOT_SENT 3         /* erased here; the cloud did not take it */

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard privacy erase (--session ID | --call ID | --value V) -c CONFIG [options]\n"
        "\n"
        "Delete every local copy of a caller's data from the running runtime of CONFIG:\n"
        "sessions and their transcripts, call traces, cache entries and feedback marks\n"
        "(docs/PRIVACY.md, \"Erasure\"). Needs an API key with the admin role.\n"
        "\n"
        "  --session ID         a session (32 hex digits) and its calls\n"
        "  --call ID            a call (its X-Call-Id) and its cache entries\n"
        "  --value V            an identifier (phone, ID, card, e-mail ...) however it\n"
        "                       was written or spoken: digits, spaced, numerals, words\n"
        "  -c, --config FILE    the runtime's configuration (its runtime.http)\n"
        "  --api-key-env NAME   read the admin key from this variable (default: the\n"
        "                       config's runtime.api_key_env)\n"
        "  --timeout-ms N       the whole request (default 60000)\n"
        "\n"
        "Then, when the config syncs with a cloud tier (cache.sync), the erase goes to the\n"
        "cloud, which purges its copies and sends the erase to every other edge in their\n"
        "next sync. A value travels as a keyed hash, never as itself.\n"
        "  --cloud URL          the cloud (default: cache.sync.url)\n"
        "  --admin-token-env NAME  the cloud's admin token from this variable\n"
        "                       (default SB_ADMIN_TOKEN, as for `cache purge --cloud`)\n"
        "  --ca-file PEM        CA bundle of an https:// cloud (default: cache.sync.ca_file)\n"
        "  --local-only         erase on this edge only\n"
        "\n"
        "Prints what was erased, per store, as JSON (with \"cloud\": the cloud's answer).\n"
        "The value is never logged.\n"
        "Exit: 0 erased (counts may be 0), 1 the router refused or is not running, 2 usage,\n"
        "3 erased on this edge but not sent to the cloud (the message says why; run again).\n");
}

/* The body the cloud takes (POST /v1/erase): the kind, the id or the
 * value's keyed hash, and the cache keys erased here. NULL with a message
 * when the value cannot travel. */
static int cloud_body(const char *kind, const char *arg, const char *token, const sb_json *local, sb_jw *w) {
    sb_jw_obj(w);
    sb_jw_key(w, "kind"); sb_jw_str(w, kind);
    if (!strcmp(kind, "value")) {
        char err[SB_ERR_LEN], norm[SB_PII_VALUE_MAX], key[SB_CACHE_KEY_HEX], mac[SB_CACHE_KEY_HEX];
        sb_privacy *det = NULL;
        sb_pii_spans spans = { 0 };
        if (sb_privacy_new(SB_PII_ALL, &det, err)) { fprintf(stderr, "privacy erase: %s\n", err); return -1; }
        sb_erase_normalise(det, arg, &spans, norm);
        bool portable = sb_erase_value_portable(det, norm, &spans);
        sb_pii_spans_free(&spans);
        sb_privacy_free(det);
        if (!portable) {
            fprintf(stderr, "privacy erase: erased on this edge; not sent to the cloud: the value is neither a "
                    "number nor an identifier the detectors read, so other stores could not find it by its hash\n");
            return -1;
        }
        sb_erase_key(token, key);
        sb_erase_value_mac(key, norm, mac);
        sb_jw_key(w, "mac"); sb_jw_str(w, mac);
        size_t n = strlen(norm);
        sb_jw_key(w, "digits"); sb_jw_int(w, strspn(norm, "0123456789") == n ? (int64_t)n : 0);
    } else {
        sb_jw_key(w, "id"); sb_jw_str(w, arg);
    }
    const sb_json *keys = sb_json_get(local, "cache_keys");
    sb_jw_key(w, "cache_keys"); sb_jw_arr(w);
    for (size_t i = 0; i < sb_json_len(keys); i++)
        if (sb_json_str(sb_json_at(keys, i))) sb_jw_str(w, sb_json_str(sb_json_at(keys, i)));
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    return 0;
}

/* The erase sent to the cloud; the router's reply printed with the
 * cloud's status. The exit code. */
static int send_to_cloud(const char *kind, const char *arg, const char *cloud, const char *token_env,
                         const char *ca_file, const char *local_reply, int timeout_ms) {
    const char *token = getenv(token_env);
    int rc = EXIT_NOT_SENT, status = 0;
    char err[SB_ERR_LEN] = "", url[1024], headers[600];
    sb_json_doc *local = NULL;
    sb_jw body;
    sb_jw_init(&body);
    if (!token || !*token) {
        fprintf(stderr, "privacy erase: erased on this edge; not sent to the cloud %s: set %s to the cloud's "
                "admin_token (or pass --local-only)\n", cloud, token_env);
    } else if (strpbrk(token, "\r\n") || strlen(token) > 400) {
        fprintf(stderr, "privacy erase: %s does not hold a token (a line of at most 400 characters)\n", token_env);
    } else if (sb_json_parse(local_reply, strlen(local_reply), &local, err)) {
        fprintf(stderr, "privacy erase: the router's reply is not JSON: %s\n", err);
    } else if (!cloud_body(kind, arg, token, sb_json_root(local), &body)) {
        size_t base = strlen(cloud);
        while (base && cloud[base - 1] == '/') base--;
        snprintf(url, sizeof url, "%.*s/v1/erase", (int)base, cloud);
        snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", token);
        if (sb_http_post_json(url, headers, body.p, body.len, timeout_ms, ca_file, &status, err))
            fprintf(stderr, "privacy erase: erased on this edge; the cloud %s did not answer: %s\n", cloud, err);
        else if (status != 200)
            fprintf(stderr, "privacy erase: erased on this edge; the cloud %s answered %d (its log says why)\n",
                    cloud, status);
        else
            rc = SB_EXIT_OK;
    }
    /* The router's reply, and what became of the cloud's part. */
    size_t n = strlen(local_reply);
    while (n && local_reply[n - 1] != '}') n--;
    if (n) printf("%.*s,\"cloud\":{\"url\":\"%s\",\"status\":%d}}\n", (int)n - 1, local_reply, cloud, status);
    else printf("%s\n", local_reply);
    sb_jw_free(&body);
    sb_json_doc_free(local);
    return rc;
}

static int erase_main(int argc, char **argv) {
    static const struct option opts[] = {
        {"session", 1, 0, 's'}, {"call", 1, 0, 'k'}, {"value", 1, 0, 'v'}, {"config", 1, 0, 'c'},
        {"api-key-env", 1, 0, 'e'}, {"timeout-ms", 1, 0, 't'}, {"cloud", 1, 0, 'u'},
        {"admin-token-env", 1, 0, 'a'}, {"ca-file", 1, 0, 'f'}, {"local-only", 0, 0, 'l'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *kind = NULL, *arg = NULL, *config = NULL, *key_env = NULL, *cloud = NULL, *ca_file = NULL,
               *token_env = "SB_ADMIN_TOKEN";
    int timeout_ms = 60000, c, n_kinds = 0, local_only = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': kind = "session"; arg = optarg; n_kinds++; break;
        case 'k': kind = "call"; arg = optarg; n_kinds++; break;
        case 'v': kind = "value"; arg = optarg; n_kinds++; break;
        case 'c': config = optarg; break;
        case 'e': key_env = optarg; break;
        case 'u': cloud = optarg; break;
        case 'a': token_env = optarg; break;
        case 'f': ca_file = optarg; break;
        case 'l': local_only = 1; break;
        case 't': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v <= 0 || v > 3600000) {
                fprintf(stderr, "privacy erase: --timeout-ms: expected milliseconds in [1, 3600000], got '%s'\n",
                        optarg);
                return SB_EXIT_CONFIG;
            }
            timeout_ms = (int)v;
            break;
        }
        case 'h': usage(stdout); return SB_EXIT_OK;
        default: usage(stderr); return SB_EXIT_CONFIG;
        }
    }
    if (n_kinds != 1 || !config || optind != argc) {
        fprintf(stderr, "privacy erase: give exactly one of --session, --call, --value, and -c CONFIG\n");
        usage(stderr);
        return SB_EXIT_CONFIG;
    }
    sb_config *cfg = NULL;
    char err[SB_ERR_LEN], url[160];
    if (sb_config_load(config, &cfg, err)) {
        fprintf(stderr, "privacy erase: %s\n", err);
        return SB_EXIT_CONFIG;
    }
    sb_runtime_url(cfg, url, sizeof url);
    if (!key_env) key_env = cfg->runtime.api_key_env;
    const char *key = key_env ? getenv(key_env) : NULL;
    sb_jw body;
    sb_jw_init(&body);
    sb_jw_obj(&body);
    sb_jw_key(&body, kind); sb_jw_str(&body, arg);
    sb_jw_obj_end(&body);
    sb_http_call call = { .url = url, .method = "POST", .path = "/privacy/erase", .api = true, .api_key = key,
                          .body = body.p, .body_len = body.len, .timeout_ms = timeout_ms };
    sb_http_reply rep = { 0 };
    int rc = SB_EXIT_FAIL;
    if (sb_ask_http_call(&call, &rep)) {
        fprintf(stderr, "privacy erase: no answer from the router at %s: is the runtime running? "
                "(a stopped runtime's files are erased by starting it and erasing then)\n", url);
    } else if (rep.status != 200) {
        fprintf(stderr, "privacy erase: the router answered %d: %s\n", rep.status, rep.body ? rep.body : "");
    } else {
        if (!cloud) cloud = cfg->cache.sync.url;
        if (!ca_file) ca_file = cfg->cache.sync.ca_file;
        if (local_only || !cloud || !*cloud) {
            printf("%s\n", rep.body);
            rc = SB_EXIT_OK;
        } else {
            rc = send_to_cloud(kind, arg, cloud, token_env, ca_file, rep.body, timeout_ms);
        }
    }
    sb_free(rep.body);
    sb_jw_free(&body);
    sb_config_free(cfg);
    return rc;
}

int sb_cmd_privacy_all(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "erase")) return erase_main(argc - 1, argv + 1);
    return sb_cmd_privacy(argc, argv);
}
