/* sessions_config.c - the configuration's `sessions` section
 * (docs/config.md): where conversations keep their state (sessions.c),
 * declared beside it. The core in common/config.c runs it through
 * supervisor/config_sections.c.
 */
#include "router/sb_router.h"

#include <stddef.h>

#define SE(f) offsetof(sb_config, sessions.f)
static const sb_cfg_key sessions_keys[] = {
    { "store", SB_KEY_PATH, 0, 0, SE(store), NULL },
    { "sweep_s", SB_KEY_INT, 1, 86400, SE(sweep_s), NULL },
    SB_CFG_KEYS_END
};

/* The default store sits beside the cache's, in the runtime directory. */
static int sessions_defaults(sb_config *cfg, const sb_config_node *sn) {
    cfg->sessions.sweep_s = 60;
    return 0;
}

static int load_sessions(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *sn) {
    if (!cfg->sessions.store && !(cfg->sessions.store = sb_cfg_resolve(cfg->runtime.dir, "sessions.sqlite")))
        return SB_ENOMEM;
    return 0;
}

const sb_cfg_section sb_sessions_section = {
    .name = "sessions", .keys = sessions_keys, .init = sessions_defaults, .load = load_sessions,
};
