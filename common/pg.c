/* pg.c - the libpq plumbing the PostgreSQL stores share (sb_pg.h). */
#include "common/sb_pg.h"

#include "common/sb_common.h"

int sb_pg_connect(const char *conninfo, PGconn **out, char *err) {
    *out = NULL;
    PGconn *pg = PQconnectdb(conninfo);
    if (!pg) return sb_seterr(err, SB_ENOMEM, "postgres: out of memory");
    if (PQstatus(pg) != CONNECTION_OK) {
        int rc = sb_seterr(err, SB_EIO, "postgres: connect: %.200s", PQerrorMessage(pg));
        PQfinish(pg);
        return rc;
    }
    /* Schema creation's NOTICEs ("relation already exists, skipping") are
     * not news on every start. */
    PQclear(PQexec(pg, "SET client_min_messages = warning"));
    *out = pg;
    return 0;
}

int sb_pg_fail(PGconn *pg, PGresult *r, char *err, const char *what) {
    const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(pg);
    int rc = sb_seterr(err, SB_EIO, "postgres: %s: %.200s", what, msg && *msg ? msg : "failed");
    if (r) PQclear(r);
    /* A broken connection is re-established for the next request. */
    if (PQstatus(pg) != CONNECTION_OK) PQreset(pg);
    return rc;
}

PGresult *sb_pg_run(PGconn *pg, const char *sql, int n, const char *const *params, char *err, const char *what) {
    PGresult *r = n ? PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0) : PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    sb_pg_fail(pg, r, err, what);
    return NULL;
}

int sb_pg_exec(PGconn *pg, const char *sql, char *err) {
    PGresult *r = sb_pg_run(pg, sql, 0, NULL, err, sql);
    if (!r) return SB_EIO;
    PQclear(r);
    return 0;
}

void sb_pg_rollback(PGconn *pg) { PQclear(PQexec(pg, "ROLLBACK")); }
