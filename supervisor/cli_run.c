/* cli_run.c - `switchboard run -c FILE [--check] [--no-router]`. */
#include <stdio.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_config.h"
#include "supervisor/sb_supervisor.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard run -c FILE.yaml [--check] [--no-router]\n\n"
            "The runtime: create runtime.dir (0700), start one worker per local model\n"
            "(and the router when this build has one), restart crashed children with\n"
            "backoff, reload on SIGHUP, drain and stop on SIGTERM/SIGINT. Children log\n"
            "to this process's stderr; DIR/state.json holds every child's state. Once\n"
            "every child is up and GET /health answers 200, one line \"ready: ...\" is\n"
            "logged (once per start), for scripts to wait for.\n"
            "See docs/operations.md and docs/config.md.\n\n"
            "  -c, --config FILE  the YAML configuration\n"
            "  --check            validate the file (runtime.dir and the files it writes\n"
            "                     if they exist: owner-only; the pipelines with\n"
            "                     `router --check`), start nothing\n"
            "  --no-router        start the workers only\n\n"
            "Exit status: 0 after a clean stop (or a valid --check), 2 for an invalid\n"
            "config, an unsafe runtime.dir or a data file others could read, 1 for\n"
            "other failures.\n");
}

static int check_only(const char *path, bool no_router) {
    char err[SB_ERR_LEN];
    sb_config *cfg = NULL;
    int rc = sb_config_load(path, &cfg, err);
    if (!rc) rc = sb_supervisor_validate(cfg, err);
    if (!rc) rc = sb_runtime_dir_check(cfg->runtime.dir, err);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        sb_config_free(cfg);
        return SB_EXIT_CONFIG;
    }
    if (!no_router && (rc = sb_supervisor_check_router(path)) != SB_EXIT_OK) {
        sb_config_free(cfg);
        return rc;
    }
    int local = 0, remote = 0;
    for (size_t i = 0; i < cfg->n_models; i++) {
        if (cfg->models[i].gguf) local++;
        else remote++;
    }
    printf("%s: ok: %d local model(s), %d remote, runtime.dir %s\n", path, local, remote, cfg->runtime.dir);
    sb_config_free(cfg);
    return SB_EXIT_OK;
}

int sb_cmd_run(int argc, char **argv) {
    sb_supervisor_opts o = { 0 };
    bool check = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if ((!strcmp(a, "-c") || !strcmp(a, "--config")) && i + 1 < argc) o.config_path = argv[++i];
        else if (!strcmp(a, "--check")) check = true;
        else if (!strcmp(a, "--no-router")) o.no_router = true;
        else {
            fprintf(stderr, "run: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return SB_EXIT_CONFIG;
        }
    }
    if (!o.config_path) { usage(stderr); return SB_EXIT_CONFIG; }
    return check ? check_only(o.config_path, o.no_router) : sb_supervisor_run(&o);
}
