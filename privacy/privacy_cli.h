/* privacy_cli.h - what cli_privacy.c (the command) and cli_eval.c (its
 * eval) share. */
#ifndef PRIVACY_CLI_H
#define PRIVACY_CLI_H

#include <stdbool.h>

#include "privacy/privacy_internal.h"

typedef struct {
    int repeat;                 /* timed pseudonymizations of each line */
    bool misses, json;
    double min_recall, max_fp;  /* bars, or < 0 */
} pii_eval_opts;

/* `privacy eval FILE`: the report on stdout; an SB_EXIT_* code, or 3 when
 * a bar is missed. */
int pii_eval(const sb_privacy *p, const char *path, const pii_eval_opts *o);

#endif
