/* fuzz_config.c - libFuzzer target for the YAML config loader (tools/fuzz.sh).
 *
 * Any text must end in a config or a "FILE:LINE:COL: ..." error, never a
 * crash, a leak or a hang. Relative paths resolve against /nonexistent, so
 * the file checks fail cleanly instead of touching the disk.
 */
#include <stdint.h>
#include <string.h>

#include "common/sb_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sb_config *cfg = NULL;
    char err[SB_ERR_LEN];
    err[0] = '\0';
    int rc = sb_config_parse((const char *)data, size, "/nonexistent/fuzz.yaml", &cfg, err);
    if (rc == 0) {
        if (!cfg || cfg->n_models == 0) __builtin_trap();
        for (size_t i = 0; i < cfg->n_models; i++)
            if (!sb_config_equal_model(&cfg->models[i], &cfg->models[i])) __builtin_trap();
        sb_config_free(cfg);
    } else if (cfg || (rc == SB_EINVAL && strncmp(err, "/nonexistent/fuzz.yaml:", 23))) {
        __builtin_trap();       /* every rejection names the file and position */
    }
    return 0;
}
