/* sup_rules.c - the supervisor's decisions that need no processes: the
 * restart policy, the runtime directory rules and the extra config checks
 * (sb_supervisor.h). Kept apart from the event loop so tests drive them
 * directly.
 */
#include "supervisor/sb_supervisor.h"
#include "cache/sb_cache.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------- restart policy */

void sb_restart_init(sb_restart_policy *p) {
    memset(p, 0, sizeof *p);
    p->next_ms = SB_SUP_BACKOFF_MIN_MS;
}

int sb_restart_on_crash(sb_restart_policy *p, double now, double healthy_s) {
    if (p->next_ms <= 0 || healthy_s >= SB_SUP_HEALTHY_RESET_S) p->next_ms = SB_SUP_BACKOFF_MIN_MS;
    /* Forget crashes that left the window, oldest first. */
    int keep = 0;
    for (int i = 0; i < p->n_crashes; i++)
        if (now - p->crash_at[i] < SB_SUP_CRASH_WINDOW_S) p->crash_at[keep++] = p->crash_at[i];
    p->n_crashes = keep;
    if (p->n_crashes == (int)SB_ARRAY_LEN(p->crash_at)) {     /* called again after giving up */
        memmove(p->crash_at, p->crash_at + 1, sizeof p->crash_at - sizeof p->crash_at[0]);
        p->n_crashes--;
    }
    p->crash_at[p->n_crashes++] = now;
    if (p->n_crashes > SB_SUP_CRASH_LIMIT) return -1;
    int delay = p->next_ms;
    p->next_ms = SB_MIN(delay * 2, SB_SUP_BACKOFF_MAX_MS);
    return delay;
}

/* ---------------------------------------------------- runtime directory */

static int check_existing(const char *dir, const struct stat *st, char *err) {
    if (S_ISLNK(st->st_mode))
        return sb_seterr(err, SB_EINVAL, "runtime.dir %s is a symlink; give the real directory", dir);
    if (!S_ISDIR(st->st_mode))
        return sb_seterr(err, SB_EINVAL, "runtime.dir %s exists and is not a directory", dir);
    if (st->st_uid != geteuid())
        return sb_seterr(err, SB_EINVAL, "runtime.dir %s is owned by uid %u, not by us (uid %u)",
                         dir, (unsigned)st->st_uid, (unsigned)geteuid());
    if (st->st_mode & 077)
        return sb_seterr(err, SB_EINVAL,
                         "runtime.dir %s has mode %04o: other users could reach the sockets; "
                         "want 0700 (chmod 700 %s)", dir, (unsigned)(st->st_mode & 07777), dir);
    return 0;
}

int sb_runtime_dir_check(const char *dir, char *err) {
    struct stat st;
    if (lstat(dir, &st) == 0) return check_existing(dir, &st, err);
    if (errno == ENOENT) return 0;
    return sb_seterr(err, SB_EIO, "runtime.dir %s: %s", dir, strerror(errno));
}

int sb_runtime_dir_prepare(const char *dir, char *err) {
    char path[4096];
    if (!dir || !*dir || strlen(dir) >= sizeof path)
        return sb_seterr(err, SB_EINVAL, "runtime.dir: missing or too long");
    snprintf(path, sizeof path, "%s", dir);
    /* Parents like `mkdir -p`, 0700 like every directory the runtime
     * creates (an existing parent's mode is the operator's business); the
     * directory itself is the trust boundary and is checked. */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0700) && errno != EEXIST) {
            int e = errno;
            *p = '/';
            return sb_seterr(err, SB_EIO, "runtime.dir %s: cannot create %.*s: %s", dir,
                             (int)(p - path), path, strerror(e));
        }
        *p = '/';
    }
    if (mkdir(dir, 0700) == 0) {
        /* The umask may have taken owner bits; it cannot have added any. */
        if (chmod(dir, 0700)) return sb_seterr(err, SB_EIO, "chmod %s: %s", dir, strerror(errno));
        return 0;
    }
    if (errno != EEXIST) return sb_seterr(err, SB_EIO, "runtime.dir %s: mkdir: %s", dir, strerror(errno));
    struct stat st;
    if (lstat(dir, &st)) return sb_seterr(err, SB_EIO, "runtime.dir %s: %s", dir, strerror(errno));
    return check_existing(dir, &st, err);
}

/* ----------------------------------------------- the files it writes */

/* An existing file the runtime writes (callers' text, answers, traces)
 * must be ours and no one else's to read or write: it is refused rather
 * than used, as runtime.dir is. Missing is fine: the runtime creates it
 * 0600. A symlink is judged by what it points to. A device or a FIFO
 * (otel_file: /dev/stdout, a pipe to a collector) keeps nothing at rest. */
static int check_private_file(const char *key, const char *path, char *err) {
    struct stat st;
    if (stat(path, &st)) {
        if (errno == ENOENT) return 0;
        return sb_seterr(err, SB_EIO, "%s %s: %s", key, path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return sb_seterr(err, SB_EINVAL, "%s %s is a directory; give a file", key, path);
    if (!S_ISREG(st.st_mode)) return 0;
    if (st.st_uid != geteuid())
        return sb_seterr(err, SB_EINVAL, "%s %s is owned by uid %u, not by us (uid %u)", key, path,
                         (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return sb_seterr(err, SB_EINVAL, "%s %s has mode %04o: other users could read what it holds; want 0600 "
                         "(chmod 600 %s)", key, path, (unsigned)(st.st_mode & 07777), path);
    return 0;
}

/* A SQLite database and the files SQLite keeps beside it. */
static int check_private_db(const char *key, const char *path, char *err) {
    static const char *const suffixes[] = { "", "-wal", "-shm", "-journal" };
    char p[4096];
    int rc = 0;
    for (size_t i = 0; !rc && i < SB_ARRAY_LEN(suffixes); i++) {
        if ((size_t)snprintf(p, sizeof p, "%s%s", path, suffixes[i]) >= sizeof p)
            return sb_seterr(err, SB_EINVAL, "%s: path too long", key);
        rc = check_private_file(key, p, err);
    }
    return rc;
}

int sb_runtime_paths_check(const sb_config *cfg, char *err) {
    char def[4096];
    int rc = 0;
    if (cfg->cache.enabled) {
        const char *p = cfg->cache.path;
        if (!p) snprintf(def, sizeof def, "%s/cache.sqlite", cfg->runtime.dir);
        rc = check_private_db("cache.path", p ? p : def, err);
    }
    if (!rc) {
        const char *p = cfg->console.feedback_path;
        if (!p) snprintf(def, sizeof def, "%s/feedback.sqlite", cfg->runtime.dir);
        rc = check_private_db("console.feedback_path", p ? p : def, err);
    }
    if (!rc && cfg->console.otel_file) rc = check_private_file("console.otel_file", cfg->console.otel_file, err);
    for (size_t i = 0; !rc && i < cfg->n_kbs; i++) {
        char key[96];
        snprintf(key, sizeof key, "knowledge.%s.path", cfg->kbs[i].name);
        rc = check_private_db(key, cfg->kbs[i].path, err);
    }
    return rc;
}

/* ------------------------------------------------------- config checks */

bool sb_supervisor_reserved_name(const char *name) {
    return !strcmp(name, "router");
}

int sb_supervisor_validate(const sb_config *cfg, char *err) {
    for (size_t i = 0; i < cfg->n_models; i++) {
        const sb_config_model *m = &cfg->models[i];
        if (sb_supervisor_reserved_name(m->name))
            return sb_seterr(err, SB_EINVAL,
                             "%s:%d:%d: models.%s: the name '%s' is reserved (DIR/%s.sock is the "
                             "router's socket); rename the model", cfg->path, m->line, m->col,
                             m->name, m->name, m->name);
    }
    int rc = sb_runtime_paths_check(cfg, err);
    /* The sealing key is read now, so a bad one stops the start rather
     * than the first value to be sealed. */
    uint8_t key[SB_SEAL_KEY_LEN];
    if (!rc && cfg->runtime.secret_key_file) rc = sb_seal_key_load(cfg->runtime.secret_key_file, key, err);
    memset(key, 0, sizeof key);
    return rc;
}
