/*
 * idem_migrate.h - the schema migrations compiled into the binaries, and their application.
 */
#ifndef IDEM_MIGRATE_H
#define IDEM_MIGRATE_H

#include <libpq-fe.h>

#include "idem_common.h"

struct idem_migration {
	int version;      /* NNNN of sql/NNNN_name.sql */
	const char *name; /* "NNNN_name" */
	const char *sql;
};

/* Generated from sql/ at build time, sorted by version. */
extern const struct idem_migration idem_migrations[];
extern const size_t idem_migrations_count;

/* @brief The highest version this build knows. */
int idem_migrate_latest(void);

/*
 * @brief Check that the database's schema is at idem_migrate_latest(); if not, fail with
 * IDEM_ERR_PG and SQLSTATE 42P01 (so idemd takes it for an operator's job) and a message
 * saying to run 'idemctl migrate'.
 */
IDEM_NODISCARD idem_status idem_migrate_check(PGconn *conn, idem_error *err);

/*
 * @brief Bring the schema to the latest version, in one transaction, serialised against
 * concurrent runs with an advisory lock. Re-running it is a no-op.
 * @param ret_from the version found (0: none), @param ret_to the version left.
 */
IDEM_NODISCARD idem_status idem_migrate_apply(PGconn *conn, int *ret_from, int *ret_to,
                                              idem_error *err);

#endif
