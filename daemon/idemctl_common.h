/*
 * idemctl_common.h - helpers shared by the idemctl subcommand files.
 *
 * They print their own failures to stderr as "idemctl: ..." and return an exit status
 * (enum idem_exit), as the subcommands do.
 */
#ifndef IDEMCTL_COMMON_H
#define IDEMCTL_COMMON_H

#include <json-c/json.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"

/*
 * @brief Connect to the configured Postgres as application "idemctl".
 * @returns IDEM_EXIT_OK and *@ret_conn (the caller PQfinish()es it), or IDEM_EXIT_FAILURE.
 */
int idemctl_pg_open(const struct idem_cfg *cfg, PGconn **ret_conn);

/*
 * @brief Postgres and a consumer of the group that commits nothing (for reading offsets).
 * @returns IDEM_EXIT_OK and both handles (release them with idemctl_close_both()), or
 *          IDEM_EXIT_FAILURE with neither open.
 */
int idemctl_open_both(const struct idem_cfg *cfg, PGconn **ret_conn, rd_kafka_t **ret_rk);
void idemctl_close_both(PGconn *conn, rd_kafka_t *rk);

/*
 * @brief Read option or argument @what's value @s as a whole decimal number within [@min, @max]
 * (idem_int_parse()); if it is not one, say so naming @what, @s and the range.
 * @returns true and *@ret_v, or false (the caller exits with IDEM_EXIT_USAGE).
 */
bool idemctl_number(const char *what, const char *s, int64_t min, int64_t max, int64_t *ret_v);

/* @brief Print @o as pretty JSON and a newline on stdout; @o stays the caller's. */
void idemctl_print_json(json_object *o);

#endif
