/* upstream_config.c - a remote model's keys (models.NAME with `upstream:`,
 * docs/config.md "Remote model"): declared here, beside the backend that
 * calls the endpoint (upstream.c), and loaded for the models section
 * (supervisor/sup_config.c) through rt_upstream_model_load.
 */
#include "router/backend/sb_backend.h"
#include "common/sb_net.h"

#include <stddef.h>

#define M(f) offsetof(sb_config_model, f)
static const sb_cfg_key remote_keys[] = {
    { "upstream", SB_KEY_STR, 1, 0, M(upstream), NULL },
    { "model", SB_KEY_STR, 1, 0, M(upstream_model), NULL },
    { "api_key_env", SB_KEY_STR, 1, 0, M(api_key_env), NULL },
    { "timeout_ms", SB_KEY_INT, 1, 3600000, M(timeout_ms), NULL },
    { "parallel", SB_KEY_INT, 1, SB_CONFIG_MAX_PARALLEL, M(parallel), NULL },
    { "max_queue", SB_KEY_INT, 0, 65536, M(max_queue), NULL },
    { "max_tokens", SB_KEY_INT, 1, SB_CONFIG_MAX_CTX, M(max_tokens), NULL },
    { "deadline_ms", SB_KEY_INT, 100, 3600000, M(deadline_ms), NULL },
    SB_CFG_KEYS_END
};

int rt_upstream_model_load(const sb_cfg_ctx *c, const sb_config_node *v, sb_config_model *m) {
    int rc = sb_cfg_read_map(c, v, remote_keys, m);
    if (rc) return rc;
    if (sb_net_url_parse(m->upstream, &(sb_net_url){ 0 }, NULL))
        return SB_CFG_FAIL(c, sb_config_node_get(v, "upstream"),
                           "%s.upstream: expected http(s)://HOST[:PORT][/PATH], got '%s'", c->path, m->upstream);
    if (m->api_key_env && !sb_cfg_valid_env_name(m->api_key_env))
        return SB_CFG_FAIL(c, sb_config_node_get(v, "api_key_env"),
                           "%s.api_key_env: expected an environment variable name, got '%s'",
                           c->path, m->api_key_env);
    if (!m->upstream_model && !(m->upstream_model = sb_strdup(m->name))) return SB_ENOMEM;
    return 0;
}
