/*
 * idemctl_common.c - connections, numbers and JSON output shared by the idemctl subcommands.
 */
#include "idemctl_common.h"

#include <inttypes.h>
#include <stdio.h>

#include "idem_consumer.h"
#include "idem_pg.h"

int idemctl_pg_open(const struct idem_cfg *cfg, PGconn **ret_conn)
{
	idem_error err = { 0 };

	if (idem_pg_conn_open(cfg, "idemctl", ret_conn, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	return IDEM_EXIT_OK;
}

int idemctl_open_both(const struct idem_cfg *cfg, PGconn **ret_conn, rd_kafka_t **ret_rk)
{
	idem_error err = { 0 };
	PGconn *conn;

	if (idemctl_pg_open(cfg, &conn) != IDEM_EXIT_OK)
		return IDEM_EXIT_FAILURE;
	if (idem_consumer_new(cfg, NULL, ret_rk, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		PQfinish(conn);
		return IDEM_EXIT_FAILURE;
	}
	*ret_conn = conn;
	return IDEM_EXIT_OK;
}

void idemctl_close_both(PGconn *conn, rd_kafka_t *rk)
{
	if (rk != NULL)
		rd_kafka_destroy(rk);
	PQfinish(conn);
}

bool idemctl_number(const char *what, const char *s, int64_t min, int64_t max, int64_t *ret_v)
{
	if (idem_int_parse(s, min, max, ret_v))
		return true;
	fprintf(stderr, "idemctl: %s: '%s' is not a whole number from %" PRId64 " to %" PRId64 "\n",
	        what, s, min, max);
	return false;
}

void idemctl_print_json(json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
	                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
}
