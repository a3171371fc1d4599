/*
 * idem_migrate.c - what the embedded migrations know about themselves.
 */
#include "idem_migrate.h"

#include <stdio.h>
#include <stdlib.h>

#include "idem_pg.h"

int idem_migrate_latest(void)
{
	return idem_migrations_count > 0 ? idem_migrations[idem_migrations_count - 1].version : 0;
}

static idem_status run(PGconn *conn, const char *sql, const char *what, idem_error *err)
{
	PGresult *res = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(res);
	idem_status r = IDEM_OK;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		r = idem_pg_error(err, conn, res, what);
	PQclear(res);
	return r;
}

idem_status idem_migrate_apply(PGconn *conn, int *ret_from, int *ret_to, idem_error *err)
{
	char what[128];
	int have = 0;
	PGresult *res;
	idem_status r;

	if ((r = run(conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	/* One migrator at a time; the key is an arbitrary constant ("idem" in ASCII). */
	if ((r = run(conn, "SELECT pg_advisory_xact_lock(1768187245)", "lock", err)) != IDEM_OK ||
	    (r = run(conn, "SET LOCAL client_min_messages = warning", "set", err)) != IDEM_OK ||
	    (r = run(conn, "CREATE SCHEMA IF NOT EXISTS idem", "create schema idem", err)) !=
	            IDEM_OK ||
	    (r = run(conn,
	             "CREATE TABLE IF NOT EXISTS idem.schema_migrations (version integer PRIMARY KEY,"
	             " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
	             "create idem.schema_migrations", err)) != IDEM_OK)
		goto out_rollback;
	res = PQexec(conn, "SELECT coalesce(max(version), 0) FROM idem.schema_migrations");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = idem_pg_error(err, conn, res, "read schema version");
		PQclear(res);
		goto out_rollback;
	}
	have = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	*ret_from = have;
	for (size_t i = 0; i < idem_migrations_count; i++) {
		const struct idem_migration *m = &idem_migrations[i];
		const char *vals[2];
		char ver[16];

		if (m->version <= have)
			continue;
		snprintf(what, sizeof(what), "migration %s", m->name);
		if ((r = run(conn, m->sql, what, err)) != IDEM_OK)
			goto out_rollback;
		snprintf(ver, sizeof(ver), "%d", m->version);
		vals[0] = ver;
		vals[1] = m->name;
		res = PQexecParams(
		        conn, "INSERT INTO idem.schema_migrations (version, name) VALUES ($1, $2)",
		        2, NULL, vals, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			r = idem_pg_error(err, conn, res, what);
			PQclear(res);
			goto out_rollback;
		}
		PQclear(res);
		have = m->version;
	}
	if ((r = run(conn, "COMMIT", "commit", err)) != IDEM_OK)
		return r;
	*ret_to = have;
	return IDEM_OK;

out_rollback:
	res = PQexec(conn, "ROLLBACK");
	PQclear(res);
	return r;
}
