/* sb_router.h - what the front doors (router/) show the modules above
 * them: the configuration sections they own. The router itself runs as
 * `switchboard router` (common/sb_cmd.h); its insides are
 * router_internal.h, private to router/.
 */
#ifndef SB_ROUTER_H
#define SB_ROUTER_H

#include "common/sb_config.h"

/* The configuration's `console` section (console_config.c; sb_config.h,
 * "sections"): call traces, the operator console, feedback, OTLP export. */
extern const sb_cfg_section sb_console_section;
/* The configuration's `sessions` section (sessions_config.c): where
 * conversations keep their state. */
extern const sb_cfg_section sb_sessions_section;

#endif
