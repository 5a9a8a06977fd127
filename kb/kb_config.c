/* kb_config.c - the configuration's `knowledge` section (docs/config.md,
 * docs/KNOWLEDGE.md): the knowledge bases, declared beside the code that
 * builds and searches them. The core in common/config.c runs it, after
 * `models` and `cache.sync`, which it names, through
 * supervisor/config_sections.c.
 */
#include "kb/sb_kb.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define FAIL SB_CFG_FAIL

/* knowledge.NAME: the model must be a local one of this config; whether its
 * GGUF is an encoder is checked by `kb` when it opens it (the loader does
 * not read model files). */
#define KB(f) offsetof(sb_config_kb, f)
static const sb_cfg_key kb_keys[] = {
    { "path", SB_KEY_PATH, 0, 0, KB(path), NULL },
    { "embed_model", SB_KEY_STR, 1, 0, KB(embed_model), NULL },
    { "chunk_tokens", SB_KEY_INT, 64, 510, KB(chunk_tokens), NULL },
    { "overlap", SB_KEY_INT, 0, 128, KB(overlap), NULL },
    { "pull", SB_KEY_OTHER, 0, 0, 0, NULL },               /* false | true, into a bool */
    { "adapter", SB_KEY_STR, 1, 0, KB(adapter), NULL },
    SB_CFG_KEYS_END
};

static int load_kb(const sb_cfg_ctx *knowledge, const sb_config_node *key, const sb_config_node *v, sb_config_kb *k) {
    char what[SB_CONFIG_MAX_NAME + 16];
    snprintf(what, sizeof what, "knowledge.%s", key->value);
    sb_cfg_ctx kc = { knowledge->cfg, knowledge->err, what, false };
    *k = (sb_config_kb){ .line = key->line, .col = key->col, .chunk_tokens = 200, .overlap = 32 };
    if (!(k->name = sb_strdup(key->value))) return SB_ENOMEM;
    if (!sb_cfg_valid_name(key->value, SB_CONFIG_MAX_NAME))
        return FAIL(&kc, key, "knowledge: name '%s' must be 1-%d characters of A-Z a-z 0-9 _ -",
                    key->value, SB_CONFIG_MAX_NAME);
    const sb_config_node *pv;
    int rc, pull = 0;
    if ((rc = sb_cfg_read_map(&kc, v, kb_keys, k)) ||
        ((pv = sb_config_node_get(v, "pull")) && (rc = sb_cfg_enum(&kc, pv, "pull", sb_cfg_false_true, &pull))))
        return rc;
    if (!k->path || !k->embed_model)
        return FAIL(&kc, v, "%s: expected 'path' (the SQLite file) and 'embed_model' (an encoder of models:)", what);
    const sb_config_model *m = sb_config_find_model(kc.cfg, k->embed_model);
    if (!m || !m->gguf)
        return FAIL(&kc, sb_config_node_get(v, "embed_model"), "%s.embed_model: '%s' is not a local (gguf) model "
                    "of models:", what, k->embed_model);
    /* kb add embeds the passages with the GGUF alone; a question embedded
     * through an adapter would not compare with them, silently. */
    if (m->adapter)
        return FAIL(&kc, sb_config_node_get(v, "embed_model"), "%s.embed_model: model '%s' has an adapter, and a "
                    "knowledge base's passages are embedded without one: name an entry of the same gguf without "
                    "'adapter'", what, k->embed_model);
    /* Questions only: the passages stay the plain encoder's, so the base
     * need not be re-embedded when the adapter changes (`kb adapt`). */
    if (k->adapter) {
        for (size_t i = 0; i < m->n_adapters && !k->adapter_path; i++)
            if (!strcmp(m->adapter_names[i], k->adapter)) k->adapter_path = m->adapter_paths[i];
        if (!k->adapter_path)
            return FAIL(&kc, sb_config_node_get(v, "adapter"), "%s.adapter: '%s' is not one of model '%s''s "
                        "adapters (models.%s.adapters: {%s: FILE}, the file `kb adapt` wrote)", what, k->adapter,
                        k->embed_model, k->embed_model, k->adapter);
    }
    if (k->overlap >= k->chunk_tokens)
        return FAIL(&kc, sb_config_node_get(v, "overlap"), "%s.overlap: %d must be less than chunk_tokens (%d)",
                    what, k->overlap, k->chunk_tokens);
    /* pulled from the cloud of cache.sync (loaded before this section) */
    if ((k->pull = pull) && !kc.cfg->cache.sync.url)
        return FAIL(&kc, sb_config_node_get(v, "pull"), "%s.pull: needs cache.sync (the cloud to pull from)", what);
    return 0;
}

static int load_knowledge(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *ks) {
    if (!ks) return 0;
    int rc = sb_cfg_want_map(c, ks);
    if (rc) return rc;
    if (ks->n_pairs && !(cfg->kbs = sb_calloc(ks->n_pairs, sizeof *cfg->kbs))) return SB_ENOMEM;
    for (size_t i = 0; i < ks->n_pairs; i++) {
        cfg->n_kbs = i + 1;                     /* so free sees partial entries */
        if ((rc = load_kb(c, ks->pairs[i].key, ks->pairs[i].value, &cfg->kbs[i]))) return rc;
    }
    return 0;
}

const sb_cfg_section sb_kb_section = { .name = "knowledge", .load = load_knowledge };
