/* cli_feedback.c - `switchboard feedback export`: operators' corrections as
 * the TSV an intent stage's examples_file (and tools/eval_routing.py) reads.
 */
#include <stdio.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_config.h"
#include "cache/sb_feedback.h"

static void usage(FILE *f) {
    fprintf(f, "usage: switchboard feedback export (-c CONFIG | --db PATH) [--pipeline NAME]\n\n"
               "Print the intents operators marked on calls (POST /v1/calls/ID/feedback) as\n"
               "label<TAB>utterance lines, oldest first: the format of an intent stage's\n"
               "examples_file. -c reads console.feedback_path (default RUNTIME_DIR/feedback.sqlite).\n");
}

static int to_stdout(void *arg, const char *line, size_t len) {
    return fwrite(line, 1, len, stdout) == len ? 0 : SB_EIO;
}

int sb_cmd_feedback(int argc, char **argv) {
    const char *config = NULL, *db = NULL, *pipeline = NULL;
    if (argc < 2 || strcmp(argv[1], "export")) {
        if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) { usage(stdout); return SB_EXIT_OK; }
        usage(stderr);
        return SB_EXIT_CONFIG;
    }
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) && v) config = argv[++i];
        else if (!strcmp(argv[i], "--db") && v) db = argv[++i];
        else if (!strcmp(argv[i], "--pipeline") && v) pipeline = argv[++i];
        else { usage(stderr); return SB_EXIT_CONFIG; }
    }
    char err[SB_ERR_LEN];
    sb_config *cfg = NULL;
    if (!db && config) {
        if (sb_config_load(config, &cfg, err)) { fprintf(stderr, "feedback: %s\n", err); return SB_EXIT_CONFIG; }
        db = cfg->console.feedback_path;
    }
    if (!db) { usage(stderr); return SB_EXIT_CONFIG; }
    sb_feedback *f;
    int rc = sb_feedback_open(db, false, &f, err);
    if (rc == SB_ENOTFOUND) {
        sb_config_free(cfg);
        return SB_EXIT_OK;                  /* nobody marked a call yet: no lines */
    }
    if (!rc) rc = sb_feedback_tsv(f, pipeline, to_stdout, NULL, err);
    if (rc) fprintf(stderr, "feedback: %s\n", err);
    sb_feedback_close(f);
    sb_config_free(cfg);
    return rc ? SB_EXIT_FAIL : SB_EXIT_OK;
}
