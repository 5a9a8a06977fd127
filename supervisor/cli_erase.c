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
#include "common/sb_cmd.h"
#include "common/sb_json.h"

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
        "Prints what was erased, per store, as JSON. The value is never logged.\n"
        "Exit: 0 erased (counts may be 0), 1 the router refused or is not running, 2 usage.\n");
}

static int erase_main(int argc, char **argv) {
    static const struct option opts[] = {
        {"session", 1, 0, 's'}, {"call", 1, 0, 'k'}, {"value", 1, 0, 'v'}, {"config", 1, 0, 'c'},
        {"api-key-env", 1, 0, 'e'}, {"timeout-ms", 1, 0, 't'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *kind = NULL, *arg = NULL, *config = NULL, *key_env = NULL;
    int timeout_ms = 60000, c, n_kinds = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': kind = "session"; arg = optarg; n_kinds++; break;
        case 'k': kind = "call"; arg = optarg; n_kinds++; break;
        case 'v': kind = "value"; arg = optarg; n_kinds++; break;
        case 'c': config = optarg; break;
        case 'e': key_env = optarg; break;
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
        printf("%s\n", rep.body);
        rc = SB_EXIT_OK;
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
