/* config_sections.c - the configuration's sections, listed at the top of
 * the build (sb_config.h, "sections"). The supervisor is the module above
 * every one that owns a section, so the list is here; common/config.c, the
 * core that runs them, knows it by its extern declaration only - the way
 * nginx's core walks the module list its build generates.
 *
 * The order is the top-level keys' order in the "unknown key" message and
 * the order the sections load in (pipelines last): a section may look at
 * what an earlier one loaded - the caches' paths are in runtime.dir, a
 * knowledge base names a local model and pulls from cache.sync.
 */
#include "supervisor/sb_supervisor.h"
#include "cache/sb_cache.h"
#include "cache/sync/sb_sync.h"
#include "kb/sb_kb.h"
#include "router/run/sb_run.h"
#include "router/sb_router.h"

const sb_cfg_section *const sb_config_sections[] = {
    &sb_runtime_section,
    &sb_retention_section,
    &sb_models_section,
    &sb_cache_section,
    &sb_sync_section,
    &sb_kb_section,
    &sb_pipelines_section,
    &sb_console_section,
    &sb_sessions_section,
    NULL,
};
