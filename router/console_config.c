/* console_config.c - the configuration's `console` section
 * (docs/config.md): the call traces, the operator console and its
 * feedback, the OTLP export (trace.c, console.c, otel.c), declared beside
 * them. The core in common/config.c runs it through
 * supervisor/config_sections.c.
 */
#include "router/sb_router.h"

#include <stddef.h>

#define CO(f) offsetof(sb_config, console.f)
static const sb_cfg_key console_keys[] = {
    { "traces", SB_KEY_INT, 0, 100000, CO(traces), NULL },
    { "show_caller_text", SB_KEY_OTHER, 0, 0, 0, NULL },   /* false | true, into a bool */
    { "feedback_path", SB_KEY_PATH, 0, 0, CO(feedback_path), NULL },
    { "otel_file", SB_KEY_PATH, 0, 0, CO(otel_file), NULL },
    SB_CFG_KEYS_END
};

/* Traces are on, and feedback has a file, without the section too. */
static int console_defaults(sb_config *cfg, const sb_config_node *cn) {
    cfg->console.traces = 200;
    return (cfg->console.feedback_path = sb_cfg_resolve(cfg->runtime.dir, "feedback.sqlite")) ? 0 : SB_ENOMEM;
}

static int load_console(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *cn) {
    const sb_config_node *v = cn ? sb_config_node_get(cn, "show_caller_text") : NULL;
    int rc, show = 0;
    if (v && (rc = sb_cfg_enum(c, v, "show_caller_text", sb_cfg_false_true, &show))) return rc;
    cfg->console.show_caller_text = show;
    return 0;
}

const sb_cfg_section sb_console_section = {
    .name = "console", .keys = console_keys, .init = console_defaults, .load = load_console,
};
