/*
 * idem_migrate.c - what the embedded migrations know about themselves.
 */
#include "idem_migrate.h"

#include <stdio.h>
#include <stdlib.h>

#include "idem_pg.h"
#include "idem_sql.h"

int idem_migrate_latest(void)
{
	return idem_migrations_count > 0 ? idem_migrations[idem_migrations_count - 1].version : 0;
}

/* The version the schema is at (0 if none), from the open transaction or session. */
static idem_status schema_version(PGconn *conn, const char *what, int *ret_version, idem_error *err)
{
	PGresult *res;
	idem_status r;

	if ((r = idem_sql_exec(conn, IDEM_SQL_SCHEMA_VERSION, NULL, what, &res, err)) == IDEM_OK)
		*ret_version = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return r;
}

idem_status idem_migrate_check(PGconn *conn, idem_error *err)
{
	int have;
	idem_status r;

	r = schema_version(conn, "schema check failed (run 'idemctl migrate')", &have, err);
	if (r != IDEM_OK)
		return r;
	if (have < idem_migrate_latest()) {
		r = idem_error_set(
		        err, IDEM_ERR_PG,
		        "database schema is at version %d, idemd needs %d: run 'idemctl migrate'",
		        have, idem_migrate_latest());
		if (err != NULL)
			snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", "42P01");
	}
	return r;
}

idem_status idem_migrate_apply(PGconn *conn, int *ret_from, int *ret_to, idem_error *err)
{
	char what[128];
	int have = 0;
	idem_status r;

	if ((r = idem_pg_exec(conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	/* One migrator at a time; the key is an arbitrary constant ("idem" in ASCII). */
	if ((r = idem_pg_exec(conn, "SELECT pg_advisory_xact_lock(1768187245)", "lock", err)) !=
	            IDEM_OK ||
	    (r = idem_pg_exec(conn, "SET LOCAL client_min_messages = warning", "set", err)) !=
	            IDEM_OK ||
	    (r = idem_pg_exec(conn, "CREATE SCHEMA IF NOT EXISTS idem", "create schema idem",
	                      err)) != IDEM_OK ||
	    (r = idem_sql_exec(conn, IDEM_SQL_SCHEMA_TABLE, NULL, "create idem.schema_migrations",
	                       NULL, err)) != IDEM_OK)
		goto out_rollback;
	if ((r = schema_version(conn, "read schema version", &have, err)) != IDEM_OK)
		goto out_rollback;
	*ret_from = have;
	for (size_t i = 0; i < idem_migrations_count; i++) {
		const struct idem_migration *m = &idem_migrations[i];
		const char *vals[2];
		char ver[16];

		if (m->version <= have)
			continue;
		snprintf(what, sizeof(what), "migration %s", m->name);
		if ((r = idem_pg_exec(conn, m->sql, what, err)) != IDEM_OK)
			goto out_rollback;
		snprintf(ver, sizeof(ver), "%d", m->version);
		vals[0] = ver;
		vals[1] = m->name;
		if ((r = idem_sql_exec(conn, IDEM_SQL_SCHEMA_RECORD, vals, what, NULL, err)) !=
		    IDEM_OK)
			goto out_rollback;
		have = m->version;
	}
	if ((r = idem_pg_exec(conn, "COMMIT", "commit", err)) != IDEM_OK)
		return r;
	*ret_to = have;
	return IDEM_OK;

out_rollback:
	idem_pg_rollback(conn);
	return r;
}
