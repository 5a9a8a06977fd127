/* sync_config.c - the configuration's `cache.sync` section (docs/config.md,
 * docs/cache-sync.md), declared beside the sync client it configures. The
 * core in common/config.c runs it, after `cache`, through
 * supervisor/config_sections.c.
 */
#include "cache/sync/sb_sync.h"

#include <stddef.h>
#include <string.h>
#include <event2/http.h>

#define SY(f) offsetof(sb_config, cache.sync.f)
static const sb_cfg_key sync_keys[] = {
    { "url", SB_KEY_STR, 1, 0, SY(url), NULL },
    { "edge_id", SB_KEY_STR, 1, 0, SY(edge_id), NULL },
    { "secret_file", SB_KEY_PATH, 1, 0, SY(secret_file), NULL },
    { "ca_file", SB_KEY_PATH, 1, 0, SY(ca_file), NULL },
    { "interval_s", SB_KEY_INT, 5, 86400, SY(interval_s), NULL },
    SB_CFG_KEYS_END
};

/* The sync carries callers' text between machines, so it goes over https;
 * plain http is kept for a cloud on this machine (tests, a local TLS
 * terminator in front of `switchboard cloud`). */
static int check_sync_url(const sb_cfg_ctx *c, const sb_config_node *at, const char *url) {
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(url, 0);
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL, *host = u ? evhttp_uri_get_host(u) : NULL;
    int rc = 0;
    if (!scheme || !host || !*host || (strcmp(scheme, "https") && strcmp(scheme, "http")))
        rc = SB_CFG_FAIL(c, at, "cache.sync.url: expected https://HOST[:PORT][/PREFIX], got '%s'", url);
    else if (!strcmp(scheme, "http") && strcmp(host, "localhost") && strncmp(host, "127.", 4) &&
             strcmp(host, "::1") && strcmp(host, "[::1]"))
        rc = SB_CFG_FAIL(c, at, "cache.sync.url: '%s' would send callers' text unencrypted; use https:// "
                                "(http:// is accepted for a loopback host only)", url);
    if (u) evhttp_uri_free(u);
    return rc;
}

static int sync_defaults(sb_config *cfg, const sb_config_node *sy) {
    if (sy) cfg->cache.sync.interval_s = 300;
    return 0;
}

static int load_sync(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *sy) {
    if (!sy) return 0;
    if (!cfg->cache.sync.url || !cfg->cache.sync.edge_id || !cfg->cache.sync.secret_file)
        return SB_CFG_FAIL(c, sy, "cache.sync: expected 'url', 'edge_id' and 'secret_file'");
    return check_sync_url(c, sb_config_node_get(sy, "url"), cfg->cache.sync.url);
}

const sb_cfg_section sb_sync_section = {
    .name = "cache.sync", .keys = sync_keys, .init = sync_defaults, .load = load_sync,
};
