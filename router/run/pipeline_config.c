/* pipeline_config.c - the configuration's `pipelines` section as the
 * loader sees it (docs/config.md): the shape only, so a config with a
 * malformed one is refused by `run --check` like any other section. The
 * stages are loaded and checked against the router's engine by pipeline.c.
 * The core in common/config.c runs it through supervisor/config_sections.c.
 */
#include "router/run/sb_run.h"

#include <stdio.h>

static int load_pipelines(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *ps) {
    if (!ps) return 0;
    int rc = sb_cfg_want_map(c, ps);
    if (rc) return rc;
    for (size_t i = 0; i < ps->n_pairs; i++) {
        const sb_config_node *n = ps->pairs[i].key, *v = ps->pairs[i].value;
        if (!sb_cfg_valid_name(n->value, SB_CONFIG_MAX_NAME))
            return SB_CFG_FAIL(c, n, "pipelines: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                               n->value, SB_CONFIG_MAX_NAME);
        char what[SB_CONFIG_MAX_NAME + 16];
        snprintf(what, sizeof what, "pipelines.%s", n->value);
        sb_cfg_ctx pk = { c->cfg, c->err, what, false };
        if ((rc = sb_cfg_want_map(&pk, v))) return rc;
    }
    cfg->pipelines = ps;
    return 0;
}

const sb_cfg_section sb_pipelines_section = { .name = "pipelines", .load = load_pipelines, .last = true };
