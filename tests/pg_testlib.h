/* pg_testlib.h - a throwaway PostgreSQL cluster for tests: initdb + pg_ctl
 * from Debian's postgresql package in a temp dir, listening only on a Unix
 * socket in that dir (no TCP port to collide with). As root the server runs
 * as the postgres user via /usr/sbin/runuser, because postgres refuses to run
 * as root.
 * Tests skip with a message when no initdb is installed.
 */
#ifndef PG_TESTLIB_H
#define PG_TESTLIB_H

#include <glob.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char dir[256], bin[256], dsn_base[512], as_user[64];
    int  up;
} pg_cluster;

static inline int pg_find_bin(char *out, size_t n) {
    glob_t g;
    if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) == 0 && g.gl_pathc > 0) {
        snprintf(out, n, "%s", g.gl_pathv[g.gl_pathc - 1]);   /* the newest version */
        globfree(&g);
        *strrchr(out, '/') = '\0';
        return 0;
    }
    globfree(&g);
    FILE *p = popen("command -v initdb 2>/dev/null", "r");
    char line[256] = "";
    if (p) { if (!fgets(line, sizeof line, p)) line[0] = '\0'; pclose(p); }
    line[strcspn(line, "\n")] = '\0';
    if (!line[0]) return -1;
    snprintf(out, n, "%s", line);
    *strrchr(out, '/') = '\0';
    return 0;
}

/* By full path: root's PATH on Debian has /usr/sbin, a test runner's may not. */
#define PG_RUNUSER "/usr/sbin/runuser"

static inline int pg_run(const pg_cluster *pg, const char *cmd) {
    char full[2048];
    if (pg->as_user[0])
        snprintf(full, sizeof full, PG_RUNUSER " -u %s -- %s", pg->as_user, cmd);
    else
        snprintf(full, sizeof full, "%s", cmd);
    return system(full);
}

/* 0 and pg->up = 1 when running; -1 (with a message) when it cannot be. */
static inline int pg_start(pg_cluster *pg) {
    memset(pg, 0, sizeof *pg);
    if (pg_find_bin(pg->bin, sizeof pg->bin)) {
        fprintf(stderr, "# SKIP: PostgreSQL is not installed (no initdb); `make deps` installs it\n");
        return -1;
    }
    char tmpl[] = "/tmp/sbpg.XXXXXX";
    if (!mkdtemp(tmpl)) return -1;
    snprintf(pg->dir, sizeof pg->dir, "%s", tmpl);
    if (getuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw || chown(pg->dir, pw->pw_uid, pw->pw_gid)) {
            fprintf(stderr, "# SKIP: running as root and there is no postgres user to run the server\n");
            return -1;
        }
        if (access(PG_RUNUSER, X_OK)) {
            fprintf(stderr, "# SKIP: running as root, PostgreSQL needs " PG_RUNUSER " (util-linux; "
                            "`make deps` installs it) to run as the postgres user\n");
            return -1;
        }
        snprintf(pg->as_user, sizeof pg->as_user, "postgres");
    }
    char cmd[1536];
    snprintf(cmd, sizeof cmd, "%s/initdb -D %s/data -A trust -U postgres -E UTF8 --no-sync "
             "--no-instructions >%s/initdb.log 2>&1", pg->bin, pg->dir, pg->dir);
    if (pg_run(pg, cmd)) {
        fprintf(stderr, "# initdb failed, see %s/initdb.log\n", pg->dir);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -l %s/server.log -w -t 60 -o \"-k %s "
             "-c listen_addresses='' -c fsync=off -c full_page_writes=off\" start >/dev/null",
             pg->bin, pg->dir, pg->dir, pg->dir);
    if (pg_run(pg, cmd)) {
        fprintf(stderr, "# pg_ctl start failed, see %s/server.log\n", pg->dir);
        return -1;
    }
    snprintf(pg->dsn_base, sizeof pg->dsn_base, "host=%s port=5432 user=postgres", pg->dir);
    pg->up = 1;
    return 0;
}

static inline void pg_stop(pg_cluster *pg) {
    char cmd[1024];
    if (pg->up) {
        snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -m immediate -w stop >/dev/null 2>&1",
                 pg->bin, pg->dir);
        pg_run(pg, cmd);
    }
    if (pg->dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", pg->dir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", pg->dir);
    }
    pg->up = 0;
}

static inline void pg_dsn(const pg_cluster *pg, const char *db, char *out, size_t n) {
    snprintf(out, n, "%s dbname=%s", pg->dsn_base, db);
}

/* Run SQL on database db; 0 if it worked. */
static inline int pg_exec(const pg_cluster *pg, const char *db, const char *sql) {
    char dsn[640];
    pg_dsn(pg, db, dsn, sizeof dsn);
    PGconn *c = PQconnectdb(dsn);
    int ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
        PGresult *r = PQexec(c, sql);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
        if (!ok) fprintf(stderr, "pg: %s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    } else {
        fprintf(stderr, "pg: %s", PQerrorMessage(c));
    }
    PQfinish(c);
    return ok ? 0 : -1;
}

/* Every row of a query, one line each ("a|b|c\n"), into a malloc'd string. */
static inline char *pg_dump(const pg_cluster *pg, const char *db, const char *sql) {
    char dsn[640];
    pg_dsn(pg, db, dsn, sizeof dsn);
    PGconn *c = PQconnectdb(dsn);
    PGresult *r = PQexec(c, sql);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    out[0] = '\0';
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
        for (int i = 0; i < PQntuples(r); i++)
            for (int j = 0; j < PQnfields(r); j++) {
                const char *v = PQgetvalue(r, i, j);
                size_t need = len + strlen(v) + 3;
                if (need > cap) { while (need > cap) cap *= 2; out = realloc(out, cap); }
                len += (size_t)sprintf(out + len, "%s%s", v, j + 1 == PQnfields(r) ? "\n" : "|");
            }
    } else {
        fprintf(stderr, "pg dump: %s", PQresultErrorMessage(r));
    }
    PQclear(r);
    PQfinish(c);
    return out;
}

#endif
