/*
 * idemctl - operate idemd: schema migrations and inspection.
 *
 * This file only reads the global options, loads the configuration and dispatches; each
 * subcommand lives in its own file (idemctl_cmds.h).
 */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg.h"
#include "idemctl_cmds.h"

/* The configuration directory idemd was configured to install into (CMakeLists.txt). */
#ifndef IDEM_CONFDIR
#error "IDEM_CONFDIR (the configuration directory) is defined by CMakeLists.txt"
#endif
#define DEFAULT_DIR  IDEM_CONFDIR
#define DEFAULT_NAME "idemd.yaml"

static void usage(FILE *f)
{
	fprintf(f, "usage: idemctl [-c FILE] [-q] COMMAND\n"
	           "\n"
	           "  -c, --config FILE  configuration file (default " DEFAULT_DIR "/" DEFAULT_NAME
	           ", which\n"
	           "                     is refused when " DEFAULT_DIR
	           " holds several *.yaml: the instances\n"
	           "                     idemd@NAME read " DEFAULT_DIR
	           "/NAME.yaml; IDEM_CONFIG_DIR replaces\n"
	           "                     " DEFAULT_DIR ")\n"
	           "  -q, --quiet        do not name the configuration read on stderr\n"
	           "  -h, --help         print this help and exit\n"
	           "  -V, --version      print the version and exit\n"
	           "\n"
	           "Commands:\n");
	idemctl_migrate_usage(f);
	idemctl_status_usage(f);
	idemctl_replay_usage(f);
	idemctl_purge_usage(f);
	idemctl_rename_usage(f);
	idemctl_quarantine_usage(f);
	idemctl_try_usage(f);
	idemctl_preflight_usage(f);
	fprintf(f,
	        "\nExit status: 0 success; 1 failure; 2 usage error; 3 verify: loss alarm, lookup: not\n"
	        "applied; 4 verify: database behind (idemd re-applies the gap); 5 verify: positions\n"
	        "of another log or consumer; 10 try: a key is claimed already; 11 try: would be\n"
	        "quarantined; 12 try: the handler failed; 78 configuration error, or Postgres\n"
	        "refused the login (no such database or role, a wrong or missing password, no\n"
	        "CONNECT privilege), preflight: a check failed that the operator must fix (1: a\n"
	        "service did not answer). idemctl(8) has the details.\n");
}

static const struct {
	const char *name;
	int (*run)(const struct idem_cfg *cfg, int argc, char **argv);
} commands[] = {
	{ "migrate", idemctl_migrate },       { "status", idemctl_status },
	{ "verify", idemctl_verify },         { "lookup", idemctl_lookup },
	{ "replay", idemctl_replay },         { "purge", idemctl_purge },
	{ "quarantine", idemctl_quarantine }, { "try", idemctl_try },
	{ "preflight", idemctl_preflight },   { "rename", idemctl_rename },
};

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The configuration to read when -c is not given: DIR/idemd.yaml, DIR being IDEM_CONFIG_DIR or
 * DEFAULT_DIR (/etc/idemd for the prefix /usr and the package). A host running several
 * instances (idemd@NAME reads DIR/NAME.yaml) has more than one file there, and idemd.yaml may
 * not be the one meant: refuse and name them all.
 * @returns IDEM_EXIT_OK and *@ret_path (free() it), or the exit status to end with.
 */
static int default_config(char **ret_path)
{
	const char *dir = getenv("IDEM_CONFIG_DIR");
	char **names = NULL, *path;
	size_t n = 0, cap = 0, len;
	struct dirent *de;
	DIR *d;
	int rc = IDEM_EXIT_OK;

	if (dir == NULL || dir[0] == '\0')
		dir = DEFAULT_DIR;
	/* A directory that cannot be read: loading the file says why. */
	if ((d = opendir(dir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			len = strlen(de->d_name);
			if (de->d_name[0] == '.' || len <= 5 ||
			    strcmp(de->d_name + len - 5, ".yaml") != 0)
				continue;
			if (n == cap) {
				char **v = realloc(names, (cap = cap ? 2 * cap : 8) * sizeof(*v));

				if (v == NULL)
					break;
				names = v;
			}
			if ((names[n] = strdup(de->d_name)) == NULL)
				break;
			n++;
		}
		closedir(d);
	}
	if (n > 1) {
		qsort(names, n, sizeof(*names), cmp_names);
		fprintf(stderr, "idemctl: %s holds %zu configurations (", dir, n);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
		fprintf(stderr,
		        "): name the one to use with -c FILE (idemd@NAME reads %s/NAME.yaml)\n",
		        dir);
		rc = IDEM_EXIT_USAGE;
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (rc != IDEM_EXIT_OK)
		return rc;
	len = strlen(dir) + sizeof("/" DEFAULT_NAME);
	if ((path = malloc(len)) == NULL) {
		fprintf(stderr, "idemctl: out of memory\n");
		return IDEM_EXIT_FAILURE;
	}
	snprintf(path, len, "%s/" DEFAULT_NAME, dir);
	*ret_path = path;
	return IDEM_EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	struct idem_cfg *cfg = NULL;
	char *errors = NULL, *default_path = NULL;
	bool quiet = false;
	const char *cmd;
	size_t i;
	int c, rc;

	while ((c = getopt_long(argc, argv, "+c:qVh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			path = optarg;
			break;
		case 'q':
			quiet = true;
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
	if (path == NULL) {
		if ((rc = default_config(&default_path)) != IDEM_EXIT_OK)
			return rc;
		path = default_path;
	}
	/* Said first: a configuration error names the file, a failure of the command may not. */
	if (!quiet)
		fprintf(stderr, "idemctl: configuration %s\n", path);
	if (idem_cfg_load(path, &cfg, &errors) != IDEM_OK) {
		fprintf(stderr, "%s", errors ? errors : "idemctl: out of memory\n");
		free(errors);
		free(default_path);
		return IDEM_EXIT_CONFIG;
	}
	rc = commands[i].run(cfg, argc - optind, argv + optind);
	idem_cfg_free(cfg);
	free(default_path);
	return rc;
}
