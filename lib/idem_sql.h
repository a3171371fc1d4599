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
	/* The batch transaction (idem_flush.c), prepared on every worker connection
	   (idem_session.c). */
	IDEM_SQL_CLAIM,          /* claim one partition's keys: consumer, topic, partition, keys[],
	                            offsets[], hashes[] (binary arrays: idem_bind_claim) -> the
	                            offsets newly claimed */
	IDEM_SQL_CLAIM_MANY,     /* claim several partitions' keys: consumers[], keys[], topics[],
	                            partitions[], offsets[], hashes[] -> partition, offset, topic */
	IDEM_SQL_CLAIM_PARTS,    /* the same for one consumer and topic: consumer, keys[], topic,
	                            partitions[], offsets[], hashes[] -> partition, offset */
	IDEM_SQL_RESULTS,        /* store handler results: consumer, keys[], results[] */
	IDEM_SQL_PROGRESS_GET,   /* partitions' next_offset, replay_to, reapply_to: consumers[],
	                            topics[], partitions[] (also read by idem_resume) */
	IDEM_SQL_CLAIMS_GET,     /* where keys were claimed: consumer, keys[] */
	IDEM_SQL_PROGRESS,       /* advance partitions' progress and counters (20 arrays) */
	IDEM_SQL_QUARANTINE,     /* quarantine one message (13 parameters) */
	IDEM_SQL_QUARANTINE_DLT, /* the same and its dead letter: 13 parameters, DLT topic,
	                            traceparent and tracestate to pass on */
	IDEM_SQL_REPLIES,        /* replies of one batch's messages (10 parameters) */
	IDEM_SQL_CONTEXT,        /* name the message being applied, for idem.emit(): consumer,
	                            business key ('' in set mode) */
	IDEM_SQL_N_BATCH,        /* the number of the above */

	/* idemctl status, verify, lookup and replay (idem_inspect.c). */
	IDEM_SQL_REPLAY_MARK = IDEM_SQL_N_BATCH, /* lower a partition's next_offset for a replay:
	                                            consumer, topic, partition, from */
	IDEM_SQL_PART_STATUS,   /* one partition's progress, counters and open quarantine rows:
	                           consumer, topic, partition -> one row (NULLs if none) */
	IDEM_SQL_CLAIMED_COUNT, /* how many of keys[] a consumer has claimed: consumer, keys[] */
	IDEM_SQL_HORIZON_GET,   /* the retention horizon in ms since the epoch: consumer */
	IDEM_SQL_LOOKUP,        /* a key's claims: key, consumers[] -> consumer, topic, partition,
	                           offset, applied_at (ISO 8601 UTC), result, payload hash (hex) */

	/* The quarantine (idem_quarantine.c). Columns 0..12 of an entry are the same in LIST, GET
	 * and GET_LOCKED (idem_quarantine.c reads them in one place). */
	IDEM_SQL_QUARANTINE_LIST,       /* consumer|NULL, topic|NULL, all, limit */
	IDEM_SQL_QUARANTINE_GET,        /* id -> the entry, then key, value (hex), timestamp ms */
	IDEM_SQL_QUARANTINE_GET_LOCKED, /* the same, FOR UPDATE (a retry) */
	IDEM_SQL_QUARANTINE_HEADERS,    /* id -> name, value (hex), in order */
	IDEM_SQL_QUARANTINE_DISCARD,    /* id -> id if it was open */
	IDEM_SQL_QUARANTINE_RESOLVE,    /* id, resolution, attempts added */
	IDEM_SQL_QUARANTINE_FAILED,     /* id, attempts added, reason, sqlstate, business key */
	IDEM_SQL_QUARANTINE_MOVE_COUNT, /* count a retried message where it ended: consumer, topic,
	                                   partition, applied, duplicates, redelivery, replay,
	                                   upstream (each 0 or 1) */

	/* Retention (idem_retention.c), each its own short transaction. */
	IDEM_SQL_RETENTION_CUTOFF, /* now() - keep seconds, now as epoch, the claims' blocks: keep
	                            */
	IDEM_SQL_RETENTION_PURGE,  /* one step of a sweep: consumer, from ctid, to block, cutoff,
	                              limit */

	/* idemctl rename (idem_rename.c), in its one transaction: old, new unless said. */
	IDEM_SQL_RENAME_LOCK,            /* lock the consumer-keyed tables against writers and
	                                    other renames */
	IDEM_SQL_RENAME_OLD,             /* what old holds: old -> has claims, progress rows,
	                                    quarantine rows (booleans), seconds since its last
	                                    progress (NULL: none) */
	IDEM_SQL_RENAME_CLAIMS,          /* move the claims of keys new has not claimed */
	IDEM_SQL_RENAME_CLAIMS_DROP,     /* delete old's other claims: old */
	IDEM_SQL_RENAME_PROGRESS_MERGE,  /* merge old's progress rows into new's of the same
	                                    partition */
	IDEM_SQL_RENAME_PROGRESS,        /* move old's other progress rows */
	IDEM_SQL_RENAME_PROGRESS_DROP,   /* delete old's merged progress rows: old */
	IDEM_SQL_RENAME_QUARANTINE,      /* move old's quarantine rows of offsets new has none of */
	IDEM_SQL_RENAME_QUARANTINE_DROP, /* delete old's other quarantine rows, uncounting them
	                                    from new's counters -> rows deleted */
	IDEM_SQL_RENAME_HORIZON,         /* move old's retention horizon (the later one kept) */

	/* Where an assigned partition starts (idem_resume.c). */
	IDEM_SQL_RESUME_GET,    /* partitions' rows: consumers[], topics[], partitions[], group,
	                           cluster -> next_offset, kafka_cluster, log_epoch, first_offset,
	                           the group's other consumers' furthest next_offset, earliest
	                           first_offset in that cluster, the furthest one's name (any
	                           cluster's if none is in this one; NULL: none), whether a
	                           replay is under way (replay_to set) */
	IDEM_SQL_PROGRESS_BASE, /* record partitions' start: consumers[], topics[], partitions[],
	                           next_offsets[], clusters[], epochs[], firsts[], group */

	/* The schema (idem_migrate.c). */
	IDEM_SQL_SCHEMA_TABLE,   /* create idem.schema_migrations if missing (the schema exists) */
	IDEM_SQL_SCHEMA_VERSION, /* the version migrated to, 0 if none */
	IDEM_SQL_DATABASE_ID,    /* the database's identity (idem_resume, idemctl verify) */
	IDEM_SQL_SCHEMA_RECORD,  /* record a migration: version, name */
	IDEM_SQL_NAMES_NUMBER,   /* give each of topics[] and consumers[] its number in
	                            idem.claim_topics and idem.claim_consumers if it has none,
	                            outside any batch (idem_session.c) */

	/* The outbox relay (idem_relay.c). */
	IDEM_SQL_OUTBOX_LOCK,    /* one relay at a time: true if this transaction got the lock */
	IDEM_SQL_OUTBOX_PENDING, /* the oldest pending rows: limit -> one row per header */
	IDEM_SQL_OUTBOX_MARK,    /* mark rows published: ids[] */
	IDEM_SQL_OUTBOX_PURGE,   /* delete published rows: keep seconds, limit */
	IDEM_SQL_OUTBOX_STATS,   /* pending rows and the age of the oldest in seconds */

	/* idemctl try (idem_try.c), inside its rolled-back transaction. */
	IDEM_SQL_TRY_OUTBOX_LAST, /* the highest id of idem.outbox (0: none) */
	IDEM_SQL_TRY_EVENTS,      /* the rows this transaction added to idem.outbox above id $1:
	                             id, event_id, topic, key hex, value hex, header name, header
	                             value hex (one row per header, NULLs without) */

	/* Trace context for idem.emit() (sql/0009_trace_context.sql), on connections that
	 * name messages for it (the outbox enabled): the table first, then the statement. */
	IDEM_SQL_TRACE_TABLE, /* create this connection's pg_temp.idem_trace if missing */
	IDEM_SQL_TRACES,      /* name applied messages' trace context: consumers[], keys[],
	                         traceparents[], tracestates[] */
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

/* @brief idem_sql_exec() with parameters' @lens and @fmts (binary ones: idem_bind_claim()). */
IDEM_NODISCARD idem_status idem_sql_exec_bin(PGconn *conn, enum idem_sql_id id,
                                             const char *const *vals, const int *lens,
                                             const int *fmts, const char *what, PGresult **ret_res,
                                             idem_error *err);

/*
 * @brief Run statement @id as idem_sql_send() sends it and check it succeeded, as
 * idem_sql_exec() (@lens and @fmts may be NULL).
 */
IDEM_NODISCARD idem_status idem_sql_exec_prepared(PGconn *conn, enum idem_sql_id id,
                                                  const char *const *vals, const int *lens,
                                                  const int *fmts, const char *what,
                                                  PGresult **ret_res, idem_error *err);

#endif
