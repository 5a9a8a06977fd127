/* sessions_config.c - the configuration's `sessions` section
 * (docs/config.md): where conversations keep their state (sessions.c,
 * sessions_pg.c), declared beside it. The core in common/config.c runs it
 * through supervisor/config_sections.c.
 */
#include "router/sb_router.h"
#include "router/sessions_store.h"

#include <stddef.h>

#define SE(f) offsetof(sb_config, sessions.f)
static const sb_cfg_key sessions_keys[] = {
    { "store", SB_KEY_OTHER, 0, 0, 0, NULL },   /* a file (a path) or a PostgreSQL conninfo (as written) */
    { "sweep_s", SB_KEY_INT, 1, 86400, SE(sweep_s), NULL },
    SB_CFG_KEYS_END
};

static int sessions_defaults(sb_config *cfg, const sb_config_node *sn) {
    cfg->sessions.sweep_s = 60;
    return 0;
}

/* The default store sits beside the cache's, in the runtime directory; a
 * file is made absolute against the config's directory, a database's
 * connection string goes to libpq untouched. */
static int load_sessions(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *sn) {
    const sb_config_node *v = sn ? sb_config_node_get(sn, "store") : NULL;
    if (v) {
        char *raw = NULL;
        int rc = sb_cfg_str(c, v, "store", true, &raw);
        if (rc) return rc;
        sb_free(cfg->sessions.store);
        cfg->sessions.store = rt_sessions_store_is_pg(raw) ? raw : sb_cfg_resolve(c->cfg->base_dir, raw);
        if (cfg->sessions.store != raw) sb_free(raw);
        return cfg->sessions.store ? 0 : SB_ENOMEM;
    }
    if (!cfg->sessions.store && !(cfg->sessions.store = sb_cfg_resolve(cfg->runtime.dir, "sessions.sqlite")))
        return SB_ENOMEM;
    return 0;
}

const sb_cfg_section sb_sessions_section = {
    .name = "sessions", .keys = sessions_keys, .init = sessions_defaults, .load = load_sessions,
};
