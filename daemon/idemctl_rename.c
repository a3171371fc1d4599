/*
 * idemctl_rename.c - idemctl rename: move a claims namespace (routes[].consumer) to a new name.
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "idem_rename.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

void idemctl_rename_usage(FILE *f)
{
	fprintf(f,
	        "  rename OLD NEW [--force] [--json]\n"
	        "                      make consumer OLD's claims, positions, quarantine and\n"
	        "                      retention horizon NEW's, merged with NEW's, in one\n"
	        "                      transaction; every idemd running under OLD stopped first:\n"
	        "                      refused if OLD advanced in the last 60 s, unless --force\n");
}

static void rename_synopsis(FILE *f)
{
	fprintf(f, "usage: idemctl rename OLD NEW [--force] [--json]\n");
}

/* What the command line asked for. */
struct rename_opts {
	const char *old_name, *new_name;
	bool force, json;
};

/*
 * Read and check the arguments, before anything is opened or asked.
 * @returns -1 to go on, or the exit status to end with (a usage error, or --help answered).
 */
static int rename_parse(int argc, char **argv, struct rename_opts *o)
{
	enum { OPT_FORCE = 256, OPT_JSON };
	static const struct option opts[] = {
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	idem_error err = { 0 };
	int c;

	*o = (struct rename_opts){ 0 };
	optind = 0; /* glibc: start over, with the default (permuting) scan: OLD NEW --force */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_FORCE:
			o->force = true;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case 'h':
			rename_synopsis(stdout);
			return IDEM_EXIT_OK;
		default:
			rename_synopsis(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (argc - optind != 2) {
		rename_synopsis(stderr);
		return IDEM_EXIT_USAGE;
	}
	o->old_name = argv[optind];
	o->new_name = argv[optind + 1];
	if (idem_rename_check(o->old_name, o->new_name, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: rename: refused: %s (nothing changed)\n", err.msg);
		return IDEM_EXIT_USAGE;
	}
	return -1;
}

static bool cfg_has_consumer(const struct idem_cfg *cfg, const char *consumer)
{
	for (size_t i = 0; i < cfg->n_routes; i++) {
		if (strcmp(cfg->routes[i].consumer, consumer) == 0)
			return true;
	}
	return false;
}

static void print_result(const struct rename_opts *o, const struct idem_rename_result *rr)
{
	json_object *top;

	if (!o->json) {
		printf("renamed consumer %s to %s: claims_moved=%" PRId64
		       " claims_held_by_new=%" PRId64 " positions_moved=%" PRId64
		       " positions_merged=%" PRId64 " quarantine_moved=%" PRId64
		       " quarantine_held_by_new=%" PRId64 " horizon_moved=%s\n",
		       o->old_name, o->new_name, rr->claims_moved, rr->claims_held,
		       rr->positions_moved, rr->positions_merged, rr->quarantine_moved,
		       rr->quarantine_held, rr->horizon_moved ? "yes" : "no");
		printf("next: set routes[].consumer to %s in the configuration (if not yet) and start idemd\n",
		       o->new_name);
		return;
	}
	top = json_object_new_object();
	json_object_object_add(top, "old", json_object_new_string(o->old_name));
	json_object_object_add(top, "new", json_object_new_string(o->new_name));
	json_object_object_add(top, "claims_moved", json_object_new_int64(rr->claims_moved));
	json_object_object_add(top, "claims_held_by_new", json_object_new_int64(rr->claims_held));
	json_object_object_add(top, "positions_moved", json_object_new_int64(rr->positions_moved));
	json_object_object_add(top, "positions_merged",
	                       json_object_new_int64(rr->positions_merged));
	json_object_object_add(top, "quarantine_moved",
	                       json_object_new_int64(rr->quarantine_moved));
	json_object_object_add(top, "quarantine_held_by_new",
	                       json_object_new_int64(rr->quarantine_held));
	json_object_object_add(top, "horizon_moved", json_object_new_boolean(rr->horizon_moved));
	json_object_object_add(
	        top, "last_progress_s",
	        rr->last_progress_s < 0 ? NULL : json_object_new_int64(rr->last_progress_s));
	idemctl_print_json(top);
	json_object_put(top);
}

int idemctl_rename(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct idem_rename_result rr = { 0 };
	struct rename_opts o;
	idem_error err = { 0 };
	PGconn *conn;
	int rc;

	if ((rc = rename_parse(argc, argv, &o)) >= 0)
		return rc;
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
	if (idem_rename_consumer(conn, o.old_name, o.new_name, o.force, &rr, &err) != IDEM_OK) {
		/* A refusal is decided before anything is written; a failure rolls back. */
		if (err.code == IDEM_ERR_PG)
			fprintf(stderr, "idemctl: rename: %s\n", err.msg);
		else
			fprintf(stderr, "idemctl: rename: refused: %s (nothing changed)\n",
			        err.msg);
		PQfinish(conn);
		return IDEM_EXIT_FAILURE;
	}
	PQfinish(conn);
	print_result(&o, &rr);
	/* Not errors: the configuration may be edited after the rename. */
	for (size_t i = 0; i < cfg->n_routes; i++) {
		if (strcmp(cfg->routes[i].consumer, o.old_name) == 0)
			fprintf(stderr,
			        "idemctl: rename: warning: route '%s' of '%s' still has consumer '%s': set it to '%s' before starting idemd (under '%s' it would find no claims and no positions)\n",
			        cfg->routes[i].name, cfg->path, o.old_name, o.new_name, o.old_name);
	}
	if (!cfg_has_consumer(cfg, o.new_name))
		fprintf(stderr,
		        "idemctl: rename: warning: no route of '%s' has consumer '%s': set routes[].consumer to it before starting idemd\n",
		        cfg->path, o.new_name);
	return IDEM_EXIT_OK;
}
