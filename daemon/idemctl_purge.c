/*
 * idemctl_purge.c - idemctl purge: delete old claims and record the retention horizon.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "idem_retention.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

void idemctl_purge_usage(FILE *f)
{
	fprintf(f,
	        "  purge [--older-than DURATION]\n"
	        "                      delete the claims older than DURATION (default: the\n"
	        "                      configured retention.keep) of this configuration's routes\n"
	        "                      and record the retention horizon, as idemd does itself\n");
}

int idemctl_purge(const struct idem_cfg *cfg, int argc, char **argv)
{
	int64_t keep = cfg->retention_keep_s;
	idem_error err = { 0 };
	PGconn *conn;
	int rc = IDEM_EXIT_OK;

	if (argc == 3 && strcmp(argv[1], "--older-than") == 0) {
		if (!idem_duration_parse(argv[2], &keep)) {
			fprintf(stderr,
			        "idemctl: purge: '%s' is not a duration (e.g. 30d, 12h, 90m, 3600s)\n",
			        argv[2]);
			return IDEM_EXIT_USAGE;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: idemctl purge [--older-than DURATION]\n");
		return IDEM_EXIT_USAGE;
	}
	if (idemctl_pg_open(cfg, &conn) != IDEM_EXIT_OK)
		return IDEM_EXIT_FAILURE;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		int64_t deleted = 0;

		/* Two routes may share a consumer: purge each namespace once. */
		bool seen = false;

		for (size_t j = 0; j < i; j++)
			seen |= strcmp(cfg->routes[j].consumer, cfg->routes[i].consumer) == 0;
		if (seen)
			continue;
		if (idem_retention_purge(conn, cfg->routes[i].consumer, keep, cfg->retention_batch,
		                         &deleted, &err) != IDEM_OK) {
			fprintf(stderr, "idemctl: purge: %s\n", err.msg);
			rc = IDEM_EXIT_FAILURE;
			break;
		}
		printf("consumer=%s purged=%" PRId64 " older_than_s=%" PRId64 "\n",
		       cfg->routes[i].consumer, deleted, keep);
	}
	PQfinish(conn);
	return rc;
}
