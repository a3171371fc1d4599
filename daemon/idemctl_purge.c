/*
 * idemctl_purge.c - idemctl purge: delete old claims and record the retention horizon.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "idem_retention.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

void idemctl_purge_usage(FILE *f)
{
	fprintf(f,
	        "  purge [--older-than DURATION [--force]]\n"
	        "                      delete the claims older than DURATION (default: the\n"
	        "                      configured retention.keep) of this configuration's routes\n"
	        "                      and record the retention horizon, as idemd does itself;\n"
	        "                      a DURATION under retention.keep is refused unless --force:\n"
	        "                      a message redelivered after its claim is gone applies again\n");
}

static void purge_synopsis(FILE *f)
{
	fprintf(f, "usage: idemctl purge [--older-than DURATION [--force]]\n");
}

/* The options; @ret_keep is retention.keep unless --older-than names another age. */
static int purge_parse(const struct idem_cfg *cfg, int argc, char **argv, int64_t *ret_keep)
{
	enum { OPT_OLDER = 256, OPT_FORCE };
	static const struct option opts[] = {
		{ "older-than", required_argument, NULL, OPT_OLDER },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ NULL, 0, NULL, 0 },
	};
	int64_t keep = cfg->retention_keep_s;
	bool force = false;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case OPT_OLDER:
			if (!idem_duration_parse(optarg, &keep)) {
				fprintf(stderr,
				        "idemctl: purge: '%s' is not a duration (e.g. 30d, 12h, 90m, 3600s)\n",
				        optarg);
				return IDEM_EXIT_USAGE;
			}
			break;
		case OPT_FORCE:
			force = true;
			break;
		default:
			purge_synopsis(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		purge_synopsis(stderr);
		return IDEM_EXIT_USAGE;
	}
	/*
	 * The floor is retention.keep, which idemd's own purge keeps to; retention cannot be
	 * turned off, and the configuration never lets it under its minimum. A claim younger
	 * than that is what makes a redelivery (a consumer crash, a rebalance) a no-op.
	 */
	if (keep < cfg->retention_keep_s && !force) {
		fprintf(stderr,
		        "idemctl: purge: refused: claims younger than %" PRId64
		        "s (retention.keep of '%s') protect against redeliveries; purging them lets a redelivered message be applied again; use --force to purge them anyway\n",
		        cfg->retention_keep_s, cfg->path);
		return IDEM_EXIT_FAILURE;
	}
	*ret_keep = keep;
	return IDEM_EXIT_OK;
}

int idemctl_purge(const struct idem_cfg *cfg, int argc, char **argv)
{
	int64_t keep = 0;
	idem_error err = { 0 };
	PGconn *conn;
	int rc;

	if ((rc = purge_parse(cfg, argc, argv, &keep)) != IDEM_EXIT_OK)
		return rc;
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
	for (size_t i = 0; i < cfg->n_routes; i++) {
		int64_t deleted = 0;

		/* Two routes may share a consumer: purge each namespace once. */
		bool seen = false;

		for (size_t j = 0; j < i; j++)
			seen |= strcmp(cfg->routes[j].consumer, cfg->routes[i].consumer) == 0;
		if (seen)
			continue;
		if (idem_retention_purge(conn, cfg->routes[i].consumer, keep, cfg->retention_batch,
		                         NULL, &deleted, NULL, &err) != IDEM_OK) {
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
