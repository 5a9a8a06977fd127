/* convtest.h - what `switchboard test`'s parts share (cli_test.c: options,
 * the runtime, the report; convtest_script.c: the script files;
 * convtest_run.c: the conversations over HTTP). Not part of the module's
 * API. The script format is in docs/TESTING.md ("Conversation scripts").
 */
#ifndef SB_CONVTEST_H
#define SB_CONVTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/sb_config.h"

/* One turn: the caller's words or a hang-up, and what the answer must
 * show. The expectations are the script's own nodes, validated when the
 * file is read; NULL: not checked. */
typedef struct {
    int line;
    const char *say;            /* NULL on a hang-up */
    bool hangup;
    const sb_config_node *intent, *slots, *awaiting, *reply_contains, *handoff, *done, *fallback;
} ct_turn;

typedef struct {
    const char *name;
    const char *pipeline;       /* resolved: the conversation's, the file's or the config's only one */
    const char *language;       /* a tag for the report, or NULL */
    int line;
    ct_turn *turns;
    size_t n_turns;
} ct_conv;

typedef struct {
    const char *path;
    sb_config_node *root;       /* the parsed file: every string above points into it */
    ct_conv *convs;
    size_t n_convs;
} ct_script;

/* Read and validate a script. pipelines: the config's (a map NAME ->
 * pipeline) to check names against and to default to, or NULL (then
 * every conversation must name its pipeline). 0, SB_EIO, SB_EINVAL with
 * "FILE:LINE:COL: key: what is wrong" in err, SB_ENOMEM. */
int  ct_script_load(const char *path, const sb_config_node *pipelines, ct_script *out, char *err);
void ct_script_free(ct_script *s);

/* What one conversation did: its first failed expectation, if any. */
typedef struct {
    bool passed;
    bool unreachable;           /* the runtime did not answer at all */
    size_t turns_run;
    int failed_turn;            /* 1-based; 0 when passed */
    int failed_line;            /* the turn's line in the script */
    bool http_error;            /* the failure is an HTTP error status (a lost turn under load) */
    char failure[1024];         /* "intent: expected billing, got complaint" */
    double *latency_ms;         /* one per turn run */
    bool *generated;            /* per turn run: whether a model generated tokens for it */
} ct_result;

typedef struct {
    const char *url;
    const char *api_key;        /* or NULL */
    int timeout_ms;             /* per request */
} ct_target;

/* Run one conversation turn by turn, stopping at the first failed
 * expectation. res->latency_ms and res->generated are the caller's to
 * sb_free. Safe to call from several threads at once. */
void ct_run_conv(const ct_target *t, const ct_conv *conv, ct_result *res);

#endif
