/*
 * idem_rename.h - moving a claims namespace (routes[].consumer) to another name, in one
 * transaction (idemctl rename).
 *
 * A consumer's claims, progress rows, quarantine rows and retention horizon all become the new
 * name's, merged with what the new name holds already: a key, a partition or a quarantined
 * message both names have keeps the new name's record (a partition's the further position and
 * both names' counters). Nothing is left under the old name, so an idemd started under the new
 * name continues where the old one stopped and applies nothing twice.
 */
#ifndef IDEM_RENAME_H
#define IDEM_RENAME_H

#include <libpq-fe.h>

#include "idem_common.h"

/*
 * Seconds without progress of the old name before a rename goes ahead without force: a batch
 * that commits under the old name after the rename would claim its keys there again.
 */
#define IDEM_RENAME_QUIET_S 60

/* How long the rename waits for the tables' lock (a batch under way), in milliseconds. */
#define IDEM_RENAME_LOCK_TIMEOUT_MS 10000

/* What a rename moved. */
struct idem_rename_result {
	int64_t claims_moved;     /* old's claims now the new name's */
	int64_t claims_held;      /* old's claims of keys the new name had claimed: deleted */
	int64_t positions_moved;  /* progress rows of partitions the new name had none of */
	int64_t positions_merged; /* progress rows merged into the new name's of their partition */
	int64_t quarantine_moved; /* quarantine rows now the new name's */
	int64_t quarantine_held;  /* old's quarantine rows of messages the new name has one of:
	                             deleted */
	bool horizon_moved;       /* old had a retention horizon (now the new name's, or the
	                             new name's kept where it is later) */
	int64_t last_progress_s;  /* seconds since old's last progress, -1 if it had none */
};

/*
 * @brief Refuse a rename from @old_name to @new_name that can never be done: a name that is not
 * a consumer name (idem_cfg_consumer_valid()), or the same name twice. Asks nothing.
 * @returns IDEM_OK, or IDEM_ERR_INVALID with @err naming the name and why.
 */
IDEM_NODISCARD idem_status idem_rename_check(const char *old_name, const char *new_name,
                                             idem_error *err);

/*
 * @brief Make everything of consumer @old_name consumer @new_name's, in one transaction on
 * @conn (no transaction may be open on it): the claims, progress rows, quarantine rows and
 * retention horizon, merged with the new name's (lib/idem_sql.c, the IDEM_SQL_RENAME_*
 * statements, says how). The tables are locked first (IDEM_SQL_RENAME_LOCK), so batches of
 * running instances and other renames wait for it, for at most IDEM_RENAME_LOCK_TIMEOUT_MS.
 *
 * Refused with nothing changed: what idem_rename_check() refuses (IDEM_ERR_INVALID); an old name
 * with no claims, no progress rows and no quarantine rows (IDEM_ERR_NOT_FOUND); unless @force,
 * an old name whose progress advanced less than IDEM_RENAME_QUIET_S seconds ago, as an instance
 * may still run under it (IDEM_ERR_INVALID, the message naming the seconds).
 * @returns IDEM_OK and *@ret, or an error (IDEM_ERR_PG: the transaction rolled back).
 */
IDEM_NODISCARD idem_status idem_rename_consumer(PGconn *conn, const char *old_name,
                                                const char *new_name, bool force,
                                                struct idem_rename_result *ret, idem_error *err);

#endif
