/*
 * idemctl_common.c - connections, numbers and JSON output shared by the idemctl subcommands.
 */
#include "idemctl_common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "idem_consumer.h"
#include "idem_pg.h"

int idemctl_pg_failed(const idem_error *err)
{
	const char *hint = idem_pg_operator_hint(err);

	if (hint != NULL) {
		fprintf(stderr, "idemctl: %s (sqlstate %s): %s\n", err->msg, err->sqlstate, hint);
		return IDEM_EXIT_CONFIG;
	}
	fprintf(stderr, "idemctl: %s\n", err->msg);
	return idem_pg_needs_operator(err) ? IDEM_EXIT_CONFIG : IDEM_EXIT_FAILURE;
}

int idemctl_pg_open(const struct idem_cfg *cfg, PGconn **ret_conn)
{
	idem_error err = { 0 };

	if (idem_pg_conn_open(cfg, "idemctl", ret_conn, &err) != IDEM_OK)
		return idemctl_pg_failed(&err);
	return IDEM_EXIT_OK;
}

int idemctl_open_both(const struct idem_cfg *cfg, PGconn **ret_conn, rd_kafka_t **ret_rk)
{
	idem_error err = { 0 };
	PGconn *conn;
	int rc;

	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
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
	size_t len;
	const char *s = json_object_to_json_string_length(
	        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	char *out;

	/* The whole form is at most 6 bytes for each of @s ("\u00NN", "\ufffd"). */
	if (s == NULL || len > (SIZE_MAX - 1) / 6 || (out = malloc(6 * len + 1)) == NULL) {
		fprintf(stderr, "idemctl: out of memory\n");
		return;
	}
	idem_esc(out, 6 * len + 1, s, len, IDEM_ESC_JSON);
	printf("%s\n", out);
	free(out);
}

void idemctl_print_esc(const void *s, size_t len, size_t max, unsigned flags)
{
	/* The whole form is at most 4 bytes for each of @s. */
	size_t outlen = (len < max / 4 ? 4 * len : max) + 1;
	char *out = malloc(outlen);

	if (out == NULL) {
		printf("(out of memory)");
		return;
	}
	if (idem_esc(out, outlen, s, len, flags) >= outlen)
		printf("%s (%zu bytes)", out, len);
	else
		printf("%s", out);
	free(out);
}

const char *idemctl_esc(char *buf, size_t len, const char *s, unsigned flags)
{
	return idem_esc_str(buf, len, s ? s : "-", flags);
}
