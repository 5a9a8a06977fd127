/* pipeline_internal.h - what pipeline.c (the pipelines section) and
 * pipeline_stage.c (one stage's keys) share: the validation context and the
 * typed readers of config nodes, each of which reports a mistake as
 * FILE:LINE:COL with the key path. Private to router/pipeline*.c.
 */
#ifndef SB_PIPELINE_INTERNAL_H
#define SB_PIPELINE_INTERNAL_H

#include "router/run/sb_run.h"

typedef struct {
    const sb_config *cfg;
    char *err;
    char path[160];             /* "pipelines.NAME.stages[I]" for messages */
} vctx;

#define FAIL(c, node, ...) sb_config_node_error((c)->cfg, (node), (c)->err, __VA_ARGS__)
/* What a node is, for messages ("null", "a list", "a mapping"...). */
const char *rt_pl_what(const sb_config_node *n);
/* n's value as the type asked for, in [lo, hi]; a mistake is reported as
 * c->path.key. */
int rt_pl_get_str(vctx *c, const sb_config_node *n, const char *key, char **out);
int rt_pl_get_num(vctx *c, const sb_config_node *n, const char *key, double lo, double hi, double *out);
int rt_pl_get_int(vctx *c, const sb_config_node *n, const char *key, long long lo, long long hi, long long *out);
int rt_pl_get_bool(vctx *c, const sb_config_node *n, const char *key, bool *out);
/* A string or a list of up to max strings. */
int rt_pl_get_strs(vctx *c, const sb_config_node *n, const char *key, size_t max, char ***out, size_t *count);
/* A stage or label name: [A-Za-z0-9_-], 1..SB_CONFIG_MAX_NAME. */
bool rt_pl_valid_name(const char *s);
/* Every key of map is one of allowed (NULL-terminated). */
int rt_pl_check_keys(vctx *c, const sb_config_node *map, const char *const *allowed);

/* p->stages[idx] from node n (pipeline_stage.c); the stages before it are
 * loaded. */
int rt_pl_load_stage(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx);

#endif
