/* audit.c - the audit log of reads of callers' words (docs/PRIVACY.md,
 * "Who may see what"): RUNTIME_DIR/audit.jsonl, one JSON line a read,
 *
 *   {"at":"2026-12-05T00:30:00Z","key":"dpo","method":"GET","path":"/v1/feedback.tsv"}
 *
 * who (the API key's name, "-" on an open gateway), what (the route, whose
 * path names the object: a session or call id) and when; never what was
 * read, nor a request body (an erase's value). The file is opened for each
 * line, appended with one write (O_APPEND: lines from one process never
 * interleave), created 0600 and refused when other users could read it -
 * the reads are rare (an operator's, not a caller's), so an open file
 * kept between them buys nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "router/router_internal.h"

int rt_audit(rt_req *q) {
    char path[4096], at[32];
    snprintf(path, sizeof path, "%s/audit.jsonl", q->r->ex.conf->cfg->runtime.dir);
    time_t now = time(NULL);
    struct tm tm;
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_jw_key(&w, "at"); sb_jw_str(&w, at);
    sb_jw_key(&w, "key"); sb_jw_str(&w, q->key_name[0] ? q->key_name : "-");
    sb_jw_key(&w, "method"); sb_jw_str(&w, q->method);
    sb_jw_key(&w, "path"); sb_jw_str(&w, q->path);
    sb_jw_obj_end(&w);
    sb_jw_raw(&w, "\n", 1);
    int rc = -1, fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0)
        sb_error("audit log %s: %s", path, strerror(errno));
    else if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (st.st_mode & 077) || st.st_uid != geteuid())
        sb_error("audit log %s: not a file of ours with mode 0600 (mode %04o): refusing to write to it", path,
                 (unsigned)(st.st_mode & 07777));
    else if (!w.p || write(fd, w.p, w.len) != (ssize_t)w.len)
        sb_error("audit log %s: %s", path, w.p ? strerror(errno) : "out of memory");
    else
        rc = 0;
    if (fd >= 0) close(fd);
    sb_jw_free(&w);
    return rc;
}
