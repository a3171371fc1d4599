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
#include "idem_esc.h"

/*
 * @brief Connect to the configured Postgres as application "idemctl".
 * @returns IDEM_EXIT_OK and *@ret_conn (the caller PQfinish()es it), or the exit status of
 * idemctl_pg_failed().
 */
int idemctl_pg_open(const struct idem_cfg *cfg, PGconn **ret_conn);

/*
 * @brief Print @err, failing to connect or to set a connection up, with what to do about it.
 * @returns IDEM_EXIT_CONFIG for what a retry cannot cure (idem_pg_needs_operator(): the login
 * or the database refused, the schema not migrated), else IDEM_EXIT_FAILURE.
 */
int idemctl_pg_failed(const idem_error *err);

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

/*
 * @brief Print @o as pretty JSON and a newline on stdout; @o stays the caller's. json-c escapes
 * the C0 controls in strings; the C1, bidi and invisible format characters, which it writes
 * raw, are written as "\uXXXX" too (idem_esc(), IDEM_ESC_JSON): the same JSON values, nothing
 * a terminal would obey.
 */
void idemctl_print_json(json_object *o);

/*
 * @brief Print message-derived text @s[0..@len) on stdout in idem_esc()'s form with @flags
 * (IDEM_ESC_QUOTE when it stands inside quotes), at most @max bytes of that form: a longer one
 * ends in IDEM_ESC_TRUNC and " (N bytes)".
 */
void idemctl_print_esc(const void *s, size_t len, size_t max, unsigned flags);

/*
 * @brief idem_esc_str() of @s (NULL: "-") into @buf, for printf's arguments: what idemctl
 * prints of text that came from messages (reasons, business keys, header names, results).
 * @returns @buf.
 */
const char *idemctl_esc(char *buf, size_t len, const char *s, unsigned flags);

#endif
