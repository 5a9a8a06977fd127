/* cache_config.c - the configuration's `cache` section (docs/config.md),
 * declared beside the cache it configures; `cache.sync`, the cloud tier,
 * is the sync client's (cache/sync/sync_config.c). The core in
 * common/config.c runs it through supervisor/config_sections.c.
 */
#include "cache/sb_cache.h"

#include <stddef.h>

#define CA(f) offsetof(sb_config, cache.f)
static const sb_cfg_key cache_keys[] = {
    { "path", SB_KEY_PATH, 0, 0, CA(path), NULL },
    { "max_mb", SB_KEY_INT, 1, 1 << 20, CA(max_mb), NULL },
    { "ttl_s", SB_KEY_INT, 0, 10 * 366 * 86400, CA(ttl_s), NULL },
    { "sync", SB_KEY_OTHER, 0, 0, 0, NULL },                /* its own section */
    SB_CFG_KEYS_END
};

/* The cache is on when the section is there, even empty. */
static int cache_defaults(sb_config *cfg, const sb_config_node *cs) {
    if (!cs) return 0;
    cfg->cache.enabled = true;
    cfg->cache.node = cs;
    cfg->cache.max_mb = 256;
    cfg->cache.ttl_s = 86400;
    return (cfg->cache.path = sb_cfg_resolve(cfg->runtime.dir, "cache.sqlite")) ? 0 : SB_ENOMEM;
}

const sb_cfg_section sb_cache_section = { .name = "cache", .keys = cache_keys, .init = cache_defaults };
