/*
 * idemctl_migrate.c - idemctl migrate: create or upgrade the idem schema.
 */
#include <stdio.h>

#include "idem_migrate.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

void idemctl_migrate_usage(FILE *f)
{
	fprintf(f,
	        "  migrate   create or upgrade the idem schema to this version's (the SQL is built\n"
	        "            into idemctl); safe to re-run, and to run concurrently\n");
}

int idemctl_migrate(const struct idem_cfg *cfg, int argc, char **argv)
{
	idem_error err = { 0 };
	PGconn *conn = NULL;
	int from = 0, to = 0, rc;

	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "idemctl: migrate takes no arguments\n");
		return IDEM_EXIT_USAGE;
	}

	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
	if (idem_migrate_apply(conn, &from, &to, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: migrate failed: %s\n", err.msg);
		PQfinish(conn);
		return IDEM_EXIT_FAILURE;
	}
	if (from == to)
		printf("schema is up to date (version %d)\n", to);
	else
		printf("schema migrated from version %d to %d\n", from, to);
	PQfinish(conn);
	return IDEM_EXIT_OK;
}
