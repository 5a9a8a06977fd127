/* apikeys.c - the gateway's API keys: who a request is, and what it may do.
 *
 * A key has a name (what sessions belong to and what an audit names, never
 * the secret itself) and roles: client (the model and pipeline APIs and
 * sessions), console (traces, the console's data, feedback) and admin.
 * Roles do not imply each other: a key holds exactly those it lists.
 *
 * runtime.api_keys_file holds one key a line, `NAME KEY ROLE[,ROLE...]`;
 * `#` starts a comment line. It is a secret: it must be a regular file
 * of ours that no other user can read (0600 or 0400), as the runtime
 * directory must be ours and 0700. The single key of runtime.api_key_env
 * or runtime.api_key_file is the key named "default" with every role, so
 * configs from before named keys keep their meaning.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "router/router_internal.h"

#define KEYS_MAX 4096
#define KEY_LEN_MAX 256

struct rt_keys {
    rt_key *items;
    size_t n;
};

static const char *const role_names[] = { "client", "console", "admin" };

const char *rt_role_name(unsigned role) {
    for (size_t i = 0; i < SB_ARRAY_LEN(role_names); i++)
        if (role == 1u << i) return role_names[i];
    return "?";
}

/* "client,admin" -> RT_ROLE_CLIENT | RT_ROLE_ADMIN; 0 on an unknown role. */
static unsigned parse_roles(const char *s, char *bad, size_t bn) {
    unsigned roles = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        unsigned r = 0;
        for (size_t i = 0; i < SB_ARRAY_LEN(role_names); i++)
            if (n == strlen(role_names[i]) && !strncmp(s, role_names[i], n)) r = 1u << i;
        if (!r) {
            snprintf(bad, bn, "%.*s", (int)(n > 40 ? 40 : n), s);
            return 0;
        }
        roles |= r;
        s += n + (s[n] == ',');
    }
    return roles;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n > RT_KEY_NAME_MAX) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return false;
    return true;
}

static int add_key(rt_keys *k, const char *name, const char *secret, unsigned roles, char *err, const char *where) {
    for (size_t i = 0; i < k->n; i++) {
        if (!strcmp(k->items[i].name, name))
            return sb_seterr(err, SB_EINVAL, "%s: the name '%s' is given twice", where, name);
        if (!strcmp(k->items[i].key, secret))
            return sb_seterr(err, SB_EINVAL, "%s: key '%s' has the same secret as '%s'", where, name,
                             k->items[i].name);
    }
    if (k->n == KEYS_MAX) return sb_seterr(err, SB_ERANGE, "%s: more than %d keys", where, KEYS_MAX);
    rt_key *grown = sb_realloc(k->items, (k->n + 1) * sizeof *grown);
    if (!grown) return sb_seterr(err, SB_ENOMEM, "out of memory");
    k->items = grown;
    rt_key *e = &k->items[k->n];
    snprintf(e->name, sizeof e->name, "%s", name);
    if (!(e->key = sb_strdup(secret))) return sb_seterr(err, SB_ENOMEM, "out of memory");
    e->len = strlen(secret);
    e->roles = roles;
    k->n++;
    return 0;
}

/* One line of the file: NAME KEY ROLES. */
static int parse_line(rt_keys *k, char *line, const char *where, char *err) {
    char *f[4] = { 0 };
    int n = 0;
    for (char *t = strtok(line, " \t"); t && n < 4; t = strtok(NULL, " \t")) f[n++] = t;
    if (n != 3)
        return sb_seterr(err, SB_EINVAL, "%s: expected 'NAME KEY ROLE[,ROLE...]', got %d field(s)", where, n);
    if (!valid_name(f[0]))
        return sb_seterr(err, SB_EINVAL, "%s: name '%.40s': expected 1-%d characters of A-Z a-z 0-9 _ - .", where,
                         f[0], RT_KEY_NAME_MAX);
    if (strlen(f[1]) > KEY_LEN_MAX)
        return sb_seterr(err, SB_EINVAL, "%s: key '%s' is longer than %d bytes", where, f[0], KEY_LEN_MAX);
    char bad[48];
    unsigned roles = parse_roles(f[2], bad, sizeof bad);
    if (!roles)
        return sb_seterr(err, SB_EINVAL, "%s: key '%s': unknown role '%s' (expected client, console, admin, "
                         "comma-separated)", where, f[0], bad);
    return add_key(k, f[0], f[1], roles, err, where);
}

/* The file must be ours and unreadable to others, like every secret the
 * runtime reads: a key file others can read is every key leaked. */
static FILE *open_secret(const char *path, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        sb_seterr(err, SB_EIO, "runtime.api_keys_file: cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *why = NULL;
    char buf[160];
    if (fstat(fd, &st)) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    else if (st.st_uid != geteuid())
        why = (snprintf(buf, sizeof buf, "owned by uid %u, not by us (uid %u)", (unsigned)st.st_uid,
                        (unsigned)geteuid()), buf);
    else if (st.st_mode & 077)
        why = (snprintf(buf, sizeof buf, "mode %04o lets other users read the keys; want 0600 (chmod 600 %s)",
                        (unsigned)(st.st_mode & 07777), path), buf);
    if (why) {
        close(fd);
        sb_seterr(err, SB_EINVAL, "runtime.api_keys_file %s: %s", path, why);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        sb_seterr(err, SB_ENOMEM, "out of memory");
    }
    return f;
}

static int load_file(rt_keys *k, const char *path, char *err) {
    FILE *f = open_secret(path, err);
    if (!f) return SB_EINVAL;
    char line[1024], where[600];
    int rc = 0, lineno = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            rc = sb_seterr(err, SB_EINVAL, "%s: line longer than %zu bytes", where, sizeof line - 2);
            break;
        }
        while (n && isspace((unsigned char)line[n - 1])) line[--n] = '\0';
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        if (!*s || *s == '#') continue;
        rc = parse_line(k, s, where, err);
    }
    fclose(f);
    if (!rc && !k->n) rc = sb_seterr(err, SB_EINVAL, "runtime.api_keys_file %s: no keys in it", path);
    return rc;
}

/* The single key of the older settings, or NULL with *out = NULL when none
 * is configured. A key configured but missing is an error, not "no auth". */
static int legacy_key(const sb_config *cfg, char *buf, size_t bn, const char **out, char *err) {
    *out = NULL;
    if (cfg->runtime.api_key_env) {
        const char *key = getenv(cfg->runtime.api_key_env);
        if (!key || !*key)
            return sb_seterr(err, SB_EINVAL, "runtime.api_key_env: the environment variable %s is not set",
                             cfg->runtime.api_key_env);
        *out = key;
    } else if (cfg->runtime.api_key_file) {
        FILE *f = fopen(cfg->runtime.api_key_file, "r");
        if (!f) return sb_seterr(err, SB_EIO, "runtime.api_key_file: cannot read %s", cfg->runtime.api_key_file);
        size_t n = fread(buf, 1, bn - 1, f);
        fclose(f);
        while (n && isspace((unsigned char)buf[n - 1])) n--;
        buf[n] = '\0';
        if (!n) return sb_seterr(err, SB_EINVAL, "runtime.api_key_file: %s is empty", cfg->runtime.api_key_file);
        *out = buf;
    }
    return 0;
}

int rt_keys_load(const sb_config *cfg, rt_keys **out, char *err) {
    *out = NULL;
    char buf[512];
    const char *single;
    int rc = legacy_key(cfg, buf, sizeof buf, &single, err);
    if (rc || (!single && !cfg->runtime.api_keys_file)) return rc;
    rt_keys *k = sb_calloc(1, sizeof *k);
    if (!k) return sb_seterr(err, SB_ENOMEM, "out of memory");
    if (single) rc = add_key(k, "default", single, RT_ROLE_CLIENT | RT_ROLE_CONSOLE | RT_ROLE_ADMIN, err, "runtime");
    if (!rc && cfg->runtime.api_keys_file) rc = load_file(k, cfg->runtime.api_keys_file, err);
    if (rc) { rt_keys_free(k); return rc; }
    *out = k;
    return 0;
}

void rt_keys_free(rt_keys *k) {
    if (!k) return;
    for (size_t i = 0; i < k->n; i++) {
        explicit_bzero(k->items[i].key, k->items[i].len);
        sb_free(k->items[i].key);
    }
    sb_free(k->items);
    sb_free(k);
}

size_t rt_keys_count(const rt_keys *k) { return k ? k->n : 0; }

/* Every key is compared, whichever matches: the time taken says nothing
 * about which key, or how much of one, a guess got right. */
const rt_key *rt_keys_match(const rt_keys *k, const char *secret, size_t len) {
    const rt_key *hit = NULL;
    for (size_t i = 0; k && i < k->n; i++) {
        const rt_key *e = &k->items[i];
        bool same = e->len == len && sb_ct_equal(secret, e->key, len);
        if (same) hit = e;
    }
    return hit;
}
