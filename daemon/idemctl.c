/*
 * idemctl - operate idemd: schema migrations and inspection.
 *
 * This file only reads the global options, loads the configuration and dispatches; each
 * subcommand lives in its own file (idemctl_cmds.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg.h"
#include "idemctl_cmds.h"

#define DEFAULT_CONFIG "/etc/idemd/idemd.yaml"

static void usage(FILE *f)
{
	fprintf(f, "usage: idemctl [-c FILE] COMMAND\n"
	           "\n"
	           "  -c, --config FILE  configuration file (default " DEFAULT_CONFIG ")\n"
	           "  -h, --help         print this help and exit\n"
	           "  -V, --version      print the version and exit\n"
	           "\n"
	           "Commands:\n");
	idemctl_migrate_usage(f);
	idemctl_status_usage(f);
	idemctl_replay_usage(f);
	idemctl_purge_usage(f);
	idemctl_quarantine_usage(f);
	fprintf(f,
	        "\nExit status: 0 success; 1 failure; 2 usage error; 3 verify: loss alarm, lookup: not\n"
	        "applied; 4 verify: database behind (idemd re-applies the gap); 78 configuration\n"
	        "error.\n");
}

static const struct {
	const char *name;
	int (*run)(const struct idem_cfg *cfg, int argc, char **argv);
} commands[] = {
	{ "migrate", idemctl_migrate },       { "status", idemctl_status },
	{ "verify", idemctl_verify },         { "lookup", idemctl_lookup },
	{ "replay", idemctl_replay },         { "purge", idemctl_purge },
	{ "quarantine", idemctl_quarantine },
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = DEFAULT_CONFIG;
	struct idem_cfg *cfg = NULL;
	char *errors = NULL;
	const char *cmd;
	size_t i;
	int c, rc;

	while ((c = getopt_long(argc, argv, "+c:Vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			path = optarg;
			break;
		case 'V':
			printf("idemctl %s\n", IDEM_VERSION);
			return IDEM_EXIT_OK;
		case 'h':
			usage(stdout);
			return IDEM_EXIT_OK;
		default:
			usage(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return IDEM_EXIT_USAGE;
	}
	cmd = argv[optind];
	for (i = 0; i < IDEM_ARRAY_SIZE(commands); i++) {
		if (strcmp(cmd, commands[i].name) == 0)
			break;
	}
	if (i == IDEM_ARRAY_SIZE(commands)) {
		fprintf(stderr, "idemctl: unknown command '%s'\n", cmd);
		usage(stderr);
		return IDEM_EXIT_USAGE;
	}
	/* "idemctl COMMAND --help" needs no configuration: every command is described here. */
	for (int k = optind + 1; k < argc; k++) {
		if (strcmp(argv[k], "--help") == 0 || strcmp(argv[k], "-h") == 0) {
			usage(stdout);
			return IDEM_EXIT_OK;
		}
	}
	if (idem_cfg_load(path, &cfg, &errors) != IDEM_OK) {
		fprintf(stderr, "%s", errors ? errors : "idemctl: out of memory\n");
		free(errors);
		return IDEM_EXIT_CONFIG;
	}
	rc = commands[i].run(cfg, argc - optind, argv + optind);
	idem_cfg_free(cfg);
	return rc;
}
