/* sync.c - knowledge bases published by the cloud tier and pulled by edges
 * (docs/KNOWLEDGE.md "Sync"). The transport, the edge's
 * credentials and the MAC are the cache sync's (cache/sb_cache.h:
 * sb_cloud_get, sb_cloud_file_mac); the cloud serves what publish wrote
 * (cache/cloud/cloud.c, GET /v1/kb/NAME/...). */
#include "kb/kb_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sb_json.h"
#include "cache/sb_cache_wire.h"     /* sb_cloud_file_mac */

/* ------------------------------------------------------------- files */

/* snprintf a path; SB_ERANGE when it does not fit. */
#define PATHF(buf, err, ...) \
    (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf ? sb_seterr(err, SB_ERANGE, "path too long") : 0)

static int fsync_path(const char *path, int dir, char *err) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0 || fsync(fd)) {
        int e = errno;
        if (fd >= 0) close(fd);
        return sb_seterr(err, SB_EIO, "%s: fsync: %s", path, strerror(e));
    }
    close(fd);
    return 0;
}

static int fsync_dir_of(const char *path, char *err) {
    char tmp[4096];
    int rc = PATHF(tmp, err, "%s", path);
    return rc ? rc : fsync_path(dirname(tmp), 1, err);
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write a small file through tmp + fsync + rename + fsync of the directory. */
static int write_atomic(const char *path, const char *text, size_t len, char *err) {
    char tmp[4096];
    if (PATHF(tmp, err, "%s.tmp", path)) return SB_ERANGE;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: %s", tmp, strerror(errno));
    int bad = write_all(fd, text, len) || fsync(fd);
    int e = errno;
    close(fd);
    if (bad || rename(tmp, path)) {
        if (!bad) e = errno;
        unlink(tmp);
        return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(e));
    }
    return fsync_dir_of(path, err);
}

static void sha256_hex(const void *p, size_t n, char out[65]) {
    uint8_t d[SB_SHA256_LEN];
    sb_sha256(p, n, d);
    sb_hex_encode(d, sizeof d, out);
}

/* ----------------------------------------------------------- publish */

int sb_kb_publish(sb_kb *kb, const char *dir, const char *name, sb_kb_published *out, char *err) {
    char snap[4096], tmp[4096], man[4096];
    memset(out, 0, sizeof *out);
    int rc = PATHF(snap, err, "%s/%s.sqlite", dir, name);
    if (!rc) rc = PATHF(tmp, err, "%s/.%s.sqlite.tmp", dir, name);
    if (!rc) rc = PATHF(man, err, "%s/%s.json", dir, name);
    if (!rc) rc = sb_kb_version(kb, out->version, err);
    if (rc) return rc;
    unlink(tmp);                                /* VACUUM INTO wants a new file; a leftover is ours */
    char *bytes = NULL;
    size_t n = 0;
    if (!(rc = kb_store_snapshot(kb_store_of(kb), tmp, err)) && !(rc = fsync_path(tmp, 0, err)) &&
        !(rc = sb_read_file(tmp, (size_t)1 << 34, &bytes, &n, err))) {
        sha256_hex(bytes, n, out->sha256);
        out->bytes = (int64_t)n;
        if (chmod(tmp, 0600) || rename(tmp, snap)) rc = sb_seterr(err, SB_EIO, "%s: %s", snap, strerror(errno));
    }
    sb_free(bytes);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    char json[512];
    int len = snprintf(json, sizeof json,
                       "{\"name\":\"%s\",\"version\":\"%s\",\"sha256\":\"%s\",\"bytes\":%lld,\"published_s\":%lld}\n",
                       name, out->version, out->sha256, (long long)out->bytes, (long long)time(NULL));
    return write_atomic(man, json, (size_t)len, err);
}

/* -------------------------------------------------------------- pull */

/* The cloud's manifest, trusted only once its MAC checks out. */
static int get_manifest(const char *name, const sb_cloud_peer *peer, sb_kb_published *m, char *err) {
    char path[128], *body = NULL;
    size_t len;
    snprintf(path, sizeof path, "/v1/kb/%s/manifest", name);
    int rc = sb_cloud_get(peer, path, &body, &len, err);
    if (rc) return rc;
    sb_json_doc *d = NULL;
    const sb_json *r = sb_json_parse(body, len, &d, NULL) ? NULL : sb_json_root(d);
    const char *v = sb_json_str(sb_json_get(r, "version")), *sha = sb_json_str(sb_json_get(r, "sha256")),
               *mac = sb_json_str(sb_json_get(r, "mac"));
    const sb_json *b = sb_json_get(r, "bytes");
    char want[SB_CACHE_KEY_HEX];
    if (!v || !sha || !mac || !b || strlen(v) != 64 || strlen(sha) != 64 || strlen(mac) != 64) {
        rc = sb_seterr(err, SB_EINVAL, "kb pull %s: the cloud's manifest is malformed: %.120s", name, body);
    } else {
        m->bytes = (int64_t)sb_json_num(b);
        sb_cloud_file_mac(peer->secret, name, v, sha, m->bytes, want);
        if (!sb_ct_equal(mac, want, 64))
            rc = sb_seterr(err, SB_EINVAL, "kb pull %s: the manifest's MAC does not match this edge's secret: "
                           "refused (tampered in transit, or another cloud)", name);
        memcpy(m->version, v, 65);
        memcpy(m->sha256, sha, 65);
    }
    sb_json_doc_free(d);
    sb_free(body);
    return rc;
}

/* Download the snapshot into tmp (0600, fsync'ed) and check it against the
 * manifest: size, SHA-256, and the content version of what it holds. */
static int fetch_snapshot(const char *name, const sb_cloud_peer *peer, const sb_kb_published *m, int fd,
                          const char *tmp, char *err) {
    char path[128], *body = NULL, sha[65], ver[65];
    size_t len;
    snprintf(path, sizeof path, "/v1/kb/%s/snapshot", name);
    int rc = sb_cloud_get(peer, path, &body, &len, err);
    if (rc) return rc;
    sha256_hex(body, len, sha);
    if ((int64_t)len != m->bytes || strcmp(sha, m->sha256))
        rc = sb_seterr(err, SB_EINVAL, "kb pull %s: the snapshot (%zu bytes, SHA-256 %.12s...) is not the one the "
                       "manifest names (%lld bytes, %.12s...): refused", name, len, sha, (long long)m->bytes, m->sha256);
    else if (ftruncate(fd, 0) || lseek(fd, 0, SEEK_SET) || write_all(fd, body, len) || fsync(fd))
        rc = sb_seterr(err, SB_EIO, "%s: %s", tmp, strerror(errno));
    sb_free(body);
    kb_store *s = NULL;
    if (!rc && !(rc = kb_store_open(tmp, 0, 1, &s, err)) && !(rc = kb_store_version(s, ver, err)) &&
        strcmp(ver, m->version))
        rc = sb_seterr(err, SB_EINVAL, "kb pull %s: the snapshot holds version %.12s..., not %.12s...: refused",
                       name, ver, m->version);
    kb_store_close(s);
    return rc;
}

int sb_kb_pull(const char *path, const char *name, const sb_cloud_peer *peer, sb_kb_pull_result *res, char *err) {
    memset(res, 0, sizeof *res);
    double t0 = sb_now_s();
    int rc = get_manifest(name, peer, &res->got, err);
    if (rc) return rc;
    kb_store *s = NULL;
    char have[65];
    if ((rc = kb_store_open(path, 1, 0, &s, err)) || (rc = kb_store_version(s, have, err))) {
        kb_store_close(s);
        return rc;
    }
    if (!strcmp(have, res->got.version)) {
        res->unchanged = 1;
        kb_store_close(s);
        return 0;
    }
    /* PATH.pull, next to the base; the lock keeps two pulls from writing it
     * at once, and a kill -9 leaves only this file (overwritten next time). */
    char tmp[4096];
    if (PATHF(tmp, err, "%s.pull", path)) {
        kb_store_close(s);
        return SB_ERANGE;
    }
    int fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX)) {
        rc = sb_seterr(err, SB_EIO, "%s: %s", tmp, strerror(errno));
    } else {
        rc = fetch_snapshot(name, peer, &res->got, fd, tmp, err);
        res->fetch_s = sb_now_s() - t0;
        double t1 = sb_now_s();
        if (!rc) rc = kb_store_restore(s, tmp, err);
        res->swap_s = sb_now_s() - t1;
        unlink(tmp);
    }
    if (fd >= 0) close(fd);
    kb_store_close(s);
    return rc;
}
