/* sb_supervisor.h - `switchboard run` (the process supervisor) and the
 * pieces of it that are worth testing on their own: the restart policy, the
 * runtime directory rules, the checks a config must pass before anything
 * starts. docs/operations.md describes the behaviour for operators.
 *
 * The supervisor fork+execs one `switchboard worker` per local model and,
 * when the binary has a `router` command, one `switchboard router`; it
 * watches, restarts and reloads them and never handles a request itself.
 */
#ifndef SB_SUPERVISOR_H
#define SB_SUPERVISOR_H

#include <stdbool.h>
#include "common/sb_common.h"
#include "common/sb_config.h"

/* ------------------------------------------------------- restart policy */

#define SB_SUP_BACKOFF_MIN_MS   100     /* first restart: fast, a crash may be a fluke */
#define SB_SUP_BACKOFF_MAX_MS   5000    /* never leave a model down longer than this per try */
#define SB_SUP_HEALTHY_RESET_S  60      /* ready this long before a crash: start over at MIN */
#define SB_SUP_CRASH_WINDOW_S   60
#define SB_SUP_CRASH_LIMIT      5       /* more crashes than this in the window: give up */

/* Per-child crash history. Plain data: zero-initialise or sb_restart_init. */
typedef struct {
    int next_ms;                        /* delay before the next restart */
    double crash_at[SB_SUP_CRASH_LIMIT + 1];    /* ring of recent crash times (s) */
    int n_crashes;                      /* entries of crash_at in use */
} sb_restart_policy;

void sb_restart_init(sb_restart_policy *p);
/* A child crashed at time `now` (seconds, any monotonic origin) after being
 * ready for `healthy_s` seconds (0 if it never became ready). Returns the
 * delay in ms before restarting it, or -1 when it crashed more than
 * SB_SUP_CRASH_LIMIT times within SB_SUP_CRASH_WINDOW_S: give up. */
int  sb_restart_on_crash(sb_restart_policy *p, double now, double healthy_s);

/* ---------------------------------------------------- runtime directory */

/* Create DIR (and missing parents) with mode 0700, or accept an existing
 * one only if it is a real directory (not a symlink) owned by our euid with
 * no group/other permissions: the sockets inside trust the directory.
 * 0, SB_EINVAL (exists but unsafe: err says why) or SB_EIO. */
int sb_runtime_dir_prepare(const char *dir, char *err);
/* The same checks without creating anything; a missing DIR is fine. */
int sb_runtime_dir_check(const char *dir, char *err);
/* Every file the runtime writes that the config names or implies - the
 * cache and feedback databases (with their -wal, -shm, -journal), the OTel
 * export, the knowledge bases - when it exists as a regular file (also
 * behind a symlink): of our euid with no group/other permission; not a
 * directory. Part of
 * sb_supervisor_validate. 0, SB_EINVAL (err names the key, the path, the
 * mode and the fix) or SB_EIO. */
int sb_runtime_paths_check(const sb_config *cfg, char *err);

/* ------------------------------------------------------- config checks */

/* Model names the supervisor reserves because their socket path belongs
 * to another process: "router" (DIR/router.sock is the router's). */
bool sb_supervisor_reserved_name(const char *name);
/* Everything `run` needs beyond sb_config_load: no reserved model names,
 * the files it writes private (sb_runtime_paths_check), and a
 * runtime.secret_key_file that holds a key (sb_seal_key_load).
 * 0 or SB_EINVAL with "FILE:LINE:COL: ..." in err. */
int  sb_supervisor_validate(const sb_config *cfg, char *err);

/* -------------------------------------------------------------- running */

typedef struct {
    const char *config_path;
    bool no_router;             /* workers only, even if a router is compiled in */
} sb_supervisor_opts;

/* Run until SIGTERM/SIGINT: returns a process exit code (SB_EXIT_*). */
int sb_supervisor_run(const sb_supervisor_opts *opts);

/* True when this binary has a `router` command to start (weak symbol: the
 * router module links in once supervisor/main.c's table references it). */
bool sb_supervisor_has_router(void);
/* Let the router validate what only it understands (pipelines, cache, API
 * key): runs `/proc/self/exe router -c FILE --check`, its messages going to
 * our stderr, and returns its exit code (SB_EXIT_OK when valid; also when
 * this binary has no router). Blocks: call it before the loop runs. */
int  sb_supervisor_check_router(const char *config_path);

/* ------------------------------------------------ its config sections */

/* `runtime` and `models` (sup_config.c; sb_config.h, "sections"): the
 * runtime directory and HTTP door, and the models - a local one's keys
 * here, the workers' argv; a remote one's the backend's. */
extern const sb_cfg_section sb_runtime_section, sb_retention_section, sb_models_section;

#endif
