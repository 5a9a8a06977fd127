/* pipeline_internal.h - what pipeline.c (the pipelines section),
 * pipeline_stage.c (what every stage has) and the stage kinds share: the
 * validation context, whose mistakes the typed-key readers of common/
 * (sb_config.h) report as FILE:LINE:COL with the key path. Private to
 * router/run/.
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
/* c as the typed-key context (sb_config.h, the one validator): pipelines
 * show a quoted value as its text in messages, as they always have. */
#define PL(c) (&(sb_cfg_ctx){ (c)->cfg, (c)->err, (c)->path, true })
#define RT_KEYS_END { NULL, SB_KEY_OTHER, 0, 0, 0, NULL }
/* A key the section reads itself (templates, lists, names of other things). */
#define RT_KEY(name) { name, SB_KEY_OTHER, 0, 0, 0, NULL }

/* p->stages[idx] from node n (pipeline_stage.c); the stages before it are
 * loaded. */
int rt_pl_load_stage(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx);

#endif
