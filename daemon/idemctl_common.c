/*
 * idemctl_common.c - connections and JSON output shared by the idemctl subcommands.
 */
#include "idemctl_common.h"

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

void idemctl_print_json(json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
	                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
}
