/*
 * idem_sql.h - every SQL statement idemd runs on its own tables, in one table: name, text and
 * number of parameters. The batch transaction, the tools and the benchmarks all take their
 * statements from here, so no copy can drift (ARCHITECTURE.md "Adding a setting, a statement
 * or a test").
 *
 * A statement is prepared under its name on a connection with idem_sql_prepare(); sending it
 * with another number of parameters is a bug that idem_sql_send() and idem_sql_exec() catch.
 */
#ifndef IDEM_SQL_H
#define IDEM_SQL_H

#include <libpq-fe.h>

#include "idem_common.h"

enum idem_sql_id {
	/* The batch transaction (idem_flush.c), prepared on every worker connection. */
	IDEM_SQL_CLAIM,          /* claim one partition's keys: consumer, topic, partition, keys[],
	                            offsets[], hashes[] -> the keys newly claimed */
	IDEM_SQL_CLAIM_MANY,     /* claim several partitions' keys: consumers[], keys[], topics[],
	                            partitions[], offsets[], hashes[] -> key, topic, partition */
	IDEM_SQL_RESULTS,        /* store handler results: consumer, keys[], results[] */
	IDEM_SQL_PROGRESS_GET,   /* partitions' next_offset, replay_to, reapply_to: consumers[],
	                            topics[], partitions[] (also read by idem_resume) */
	IDEM_SQL_CLAIMS_GET,     /* where keys were claimed: consumer, keys[] */
	IDEM_SQL_PROGRESS,       /* advance partitions' progress and counters (16 arrays) */
	IDEM_SQL_QUARANTINE,     /* quarantine one message (13 parameters) */
	IDEM_SQL_QUARANTINE_DLT, /* the same and its dead letter: 13 parameters, DLT topic */
	IDEM_SQL_REPLIES,        /* replies of one batch's messages (8 parameters) */
	IDEM_SQL_CONTEXT,        /* name the message being applied, for idem.emit(): consumer,
	                            business key ('' in set mode) */
	IDEM_SQL_N_BATCH,        /* the number of the above */

	/* idemctl replay (idem_inspect.c). */
	IDEM_SQL_REPLAY_MARK = IDEM_SQL_N_BATCH, /* lower a partition's next_offset for a replay:
	                                            consumer, topic, partition, from */

	/* The schema (idem_migrate.c). */
	IDEM_SQL_SCHEMA_VERSION, /* the version migrated to, 0 if none */
	IDEM_SQL_DATABASE_ID,    /* the database's identity (idem_resume, idemctl verify) */
	IDEM_SQL_SCHEMA_RECORD,  /* record a migration: version, name */

	/* The outbox relay (idem_relay.c). */
	IDEM_SQL_OUTBOX_LOCK,    /* one relay at a time: true if this transaction got the lock */
	IDEM_SQL_OUTBOX_PENDING, /* the oldest pending rows: limit -> one row per header */
	IDEM_SQL_OUTBOX_MARK,    /* mark rows published: ids[] */
	IDEM_SQL_OUTBOX_PURGE,   /* delete published rows: keep seconds, limit */
	IDEM_SQL_OUTBOX_STATS,   /* pending rows and the age of the oldest in seconds */
	IDEM_SQL_N,
};

struct idem_sql_stmt {
	const char *name; /* the prepared statement's name */
	int n_params;
	const char *text;
	/* Sent with its text, so that it is planned for its parameters each time: its best plan
	 * depends on how large the tables are, and a generic plan made while they were small
	 * (a fresh install) would stay until autovacuum analyzes them. */
	bool custom_plan;
};

/* @brief The statement @id. */
const struct idem_sql_stmt *idem_sql(enum idem_sql_id id);

/* @brief PREPARE statement @id on @conn under its name. */
IDEM_NODISCARD idem_status idem_sql_prepare(PGconn *conn, enum idem_sql_id id, idem_error *err);

/* @brief PREPARE every statement of the batch transaction (ids below IDEM_SQL_N_BATCH). */
IDEM_NODISCARD idem_status idem_sql_prepare_batch(PGconn *conn, idem_error *err);

/*
 * @brief Send statement @id in pipeline or async mode, with its number of parameters (@lens and
 * @fmts may be NULL: all text): the prepared one, or its text if it wants a custom plan.
 * @returns PQsendQueryPrepared()'s or PQsendQueryParams()'s result.
 */
int idem_sql_send(PGconn *conn, enum idem_sql_id id, const char *const *vals, const int *lens,
                  const int *fmts);

/*
 * @brief Run statement @id (unprepared, with its text) and check it succeeded; the result goes
 * to *ret_res if not NULL (the caller clears it, on failure too). @what names it in @err.
 */
IDEM_NODISCARD idem_status idem_sql_exec(PGconn *conn, enum idem_sql_id id, const char *const *vals,
                                         const char *what, PGresult **ret_res, idem_error *err);

/*
 * @brief Run statement @id as idem_sql_send() sends it and check it succeeded, as
 * idem_sql_exec() (@lens and @fmts may be NULL).
 */
IDEM_NODISCARD idem_status idem_sql_exec_prepared(PGconn *conn, enum idem_sql_id id,
                                                  const char *const *vals, const int *lens,
                                                  const int *fmts, const char *what,
                                                  PGresult **ret_res, idem_error *err);

#endif
