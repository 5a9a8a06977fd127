/* sb_pg.h - the one PostgreSQL connection helper, for the stores that keep
 * their rows in a PostgreSQL (the cloud tier's cache, a fleet's sessions):
 * connect, run a statement, report a failure and recover the connection.
 * Each store keeps its own schema and SQL; only the libpq plumbing is here.
 */
#ifndef SB_PG_H
#define SB_PG_H

#include <libpq-fe.h>

/* Connect with a libpq conninfo ("postgresql://..." or "host=... dbname=...";
 * sslmode, sslrootcert, passfile... pass through to libpq). 0 with *out, or
 * SB_EIO with err naming what failed (never the password). */
int sb_pg_connect(const char *conninfo, PGconn **out, char *err);
/* Set err from r (or from the connection when r is NULL), clear r and
 * reset a connection that broke, so the next statement reconnects.
 * Returns SB_EIO. */
int sb_pg_fail(PGconn *pg, PGresult *r, char *err, const char *what);
/* Run sql with n text parameters (n 0: a plain PQexec, several statements
 * allowed): the result when it is ok or has rows, else NULL and err set. */
PGresult *sb_pg_run(PGconn *pg, const char *sql, int n, const char *const *params, char *err, const char *what);
/* Run sql, discard its result: 0 or SB_EIO. */
int sb_pg_exec(PGconn *pg, const char *sql, char *err);
/* End a failed transaction; nothing to report (the connection may be gone). */
void sb_pg_rollback(PGconn *pg);

#endif
