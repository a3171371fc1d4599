/*
 * idemd - consume Kafka topics and apply every message exactly once in effect, in Postgres.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "idem_cfg.h"
#include "idem_daemon.h"
#include "idem_log.h"
#include "idem_notify.h"
#include "idem_pg.h"

/* The configuration directory idemd was configured to install into (CMakeLists.txt). */
#ifndef IDEM_CONFDIR
#error "IDEM_CONFDIR (the configuration directory) is defined by CMakeLists.txt"
#endif
#define DEFAULT_CONFIG IDEM_CONFDIR "/idemd.yaml"

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;

static void on_stop_signal(int sig)
{
	/* The second signal means "now": skip the drain. Whatever was not committed is
	 * redelivered and the claims make that harmless. _exit is async-signal-safe. */
	if (stop_requested)
		_exit(128 + sig);
	stop_requested = 1;
}

static void on_hup(int sig)
{
	(void)sig;
	reload_requested = 1;
}

static bool should_stop(void)
{
	return stop_requested != 0;
}

static void install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = on_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = on_hup;
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: idemd [-c FILE] [--check-config] [FILE]\n"
	        "\n"
	        "Consume the Kafka topics of the configuration and apply each message exactly once\n"
	        "in effect: its business key is claimed in Postgres in the same transaction as its\n"
	        "side effect, and its offset is committed only after that transaction.\n"
	        "\n"
	        "  -c, --config FILE   configuration file (default " DEFAULT_CONFIG ");\n"
	        "                      a FILE argument means the same\n"
	        "  -n, --check-config  validate the configuration without connecting, print\n"
	        "                      'configuration OK' or every error, and exit\n"
	        "  -V, --version       print the version and exit\n"
	        "  -h, --help          print this help and exit\n"
	        "\n"
	        "Signals: SIGTERM/SIGINT drain the open batches, commit offsets, leave the consumer\n"
	        "group and exit 0; a second one exits at once. SIGHUP reads FILE again: a file\n"
	        "with errors is refused whole and the running configuration kept; otherwise\n"
	        "log.level is applied at once and every other changed setting is logged as\n"
	        "\"'KEY' changed; restart to apply\" and keeps its running value. SIGHUP also\n"
	        "retries at once every partition halted at a poison message or paused after a\n"
	        "failed batch, instead of at its next scheduled retry (up to retry.max_ms).\n"
	        "\n"
	        "Exit status: 0 stopped cleanly; 1 runtime failure; 2 usage error;\n"
	        "78 configuration error (invalid file, schema not migrated, handler SQL that does\n"
	        "not prepare, login refused: no such database or role, a wrong or missing\n"
	        "password, no CONNECT privilege): restarting will not help. A Postgres that is\n"
	        "not up yet, or has too many connections, is waited for.\n"
	        "\n"
	        "The manual: idemd(8), idemd.yaml(5), idemctl(8).\n");
}

/*
 * Tell systemd how it goes: STATUS= with the counters about once a second, and WATCHDOG=1 at
 * half the watchdog interval, but only while no batch has been in a worker's hands for longer
 * than that: a Postgres call that hangs stops the pings and lets the watchdog restart the
 * service, although the consumer thread keeps turning.
 */
static void notify_alive(idem_daemon *d, uint64_t wd_usec)
{
	static uint64_t last_status, last_ping;
	struct idem_daemon_stats st;
	uint64_t now = (uint64_t)idem_mono_us();

	if (wd_usec > 0 && now - last_ping >= wd_usec / 2 &&
	    (uint64_t)idem_daemon_stalled_ms(d) * 1000u < wd_usec / 2) {
		idem_notify("WATCHDOG=1");
		last_ping = now;
	}
	if (now - last_status < 1000000u)
		return;
	last_status = now;
	idem_daemon_stats(d, &st);
	idem_notify(
	        "STATUS=consumed=%llu applied=%llu duplicates=%llu quarantined=%llu retries=%llu partitions=%zu halted=%zu",
	        (unsigned long long)st.consumed, (unsigned long long)st.applied,
	        (unsigned long long)st.duplicates, (unsigned long long)st.quarantined,
	        (unsigned long long)st.retries, st.partitions, st.halted);
}

/* What one reload did, for its summary line. */
struct reload_state {
	struct idem_cfg *cfg;        /* the running configuration */
	const struct idem_cfg *ncfg; /* the file as just loaded */
	size_t applied, restart;
};

/*
 * Applies reloadable setting @path from the new file to the running daemon and to the running
 * configuration, which thus always says what is in effect. One branch per setting marked
 * .reload in lib/idem_cfg.c; false for any other (it then needs a restart, and is logged so).
 */
static bool reload_apply(struct reload_state *st, const char *path)
{
	if (strcmp(path, "log.level") == 0) {
		st->cfg->log_level = st->ncfg->log_level;
		idem_log_set_level(st->cfg->log_level);
		return true;
	}
	return false;
}

static void reload_change(const struct idem_cfg_change *change, void *arg)
{
	struct reload_state *st = arg;
	enum idem_log_level before = idem_log_get_level();

	if (change->reload && reload_apply(st, change->path)) {
		/* Said at the more verbose of the two levels, so that lowering it is seen too. */
		if (idem_log_get_level() < before)
			idem_log_set_level(before);
		if (change->value != NULL)
			idem_log_info("config", "'%s' changed to '%s'", change->path,
			              change->value);
		else
			idem_log_info("config", "'%s' changed", change->path);
		idem_log_set_level(st->cfg->log_level);
		st->applied++;
		return;
	}
	idem_log_warn("config", "'%s' changed; restart to apply", change->path);
	st->restart++;
}

/*
 * SIGHUP: load the file again; refuse it whole if it has any error. Otherwise apply each
 * changed reloadable setting and name each changed restart-only one; those stay as they were
 * in the running configuration (and are named again on the next reload) until a restart.
 */
static void reload(const char *path, struct idem_cfg *cfg)
{
	struct reload_state st = { cfg, NULL, 0, 0 };
	struct idem_cfg *ncfg = NULL;
	char *errors = NULL;
	size_t changes;

	reload_requested = 0;
	idem_notify("RELOADING=1");
	if (idem_cfg_load(path, &ncfg, &errors) != IDEM_OK) {
		idem_log_error("config", "reload failed, keeping the running configuration: %s",
		               errors ? errors : "out of memory");
		free(errors);
		idem_notify("READY=1");
		return;
	}
	st.ncfg = ncfg;
	changes = idem_cfg_diff(cfg, ncfg, reload_change, &st);
	if (changes == 0)
		idem_log_info("config", "reloaded '%s': nothing changed", path);
	else
		idem_log_info(
		        "config",
		        "reloaded '%s': %zu setting%s changed, %zu applied, %zu need a restart",
		        path, changes, changes == 1 ? "" : "s", st.applied, st.restart);
	idem_cfg_free(ncfg);
	idem_notify("READY=1");
}

static void print_key(const char *path, void *arg)
{
	fprintf(arg, "%s\n", path);
}

static void warn_check(const char *msg, void *arg)
{
	fprintf(stderr, "%s: warning: %s\n", (const char *)arg, msg);
}

static void warn_start(const char *msg, void *arg)
{
	(void)arg;
	idem_log_warn("config", "%s", msg);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'n' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		/* Not in --help: every key the file accepts, for tests/check_docs.sh. */
		{ "dump-keys", no_argument, NULL, 'K' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = DEFAULT_CONFIG;
	struct idem_daemon_stats st;
	struct idem_cfg *cfg = NULL;
	bool check_only = false;
	idem_daemon *d = NULL;
	char *errors = NULL;
	idem_error err = { 0 };
	uint64_t wd_usec = 0;
	int c, rc = IDEM_EXIT_FAILURE;
	unsigned int seed;

	while ((c = getopt_long(argc, argv, "c:nVh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			path = optarg;
			break;
		case 'n':
			check_only = true;
			break;
		case 'V':
			printf("idemd %s\n", IDEM_VERSION);
			return IDEM_EXIT_OK;
		case 'h':
			usage(stdout);
			return IDEM_EXIT_OK;
		case 'K':
			idem_cfg_keys(print_key, stdout);
			return IDEM_EXIT_OK;
		default:
			usage(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (optind < argc)
		path = argv[optind++];
	if (optind < argc) {
		usage(stderr);
		return IDEM_EXIT_USAGE;
	}

	if (idem_cfg_load(path, &cfg, &errors) != IDEM_OK) {
		fprintf(stderr, "%s", errors ? errors : "idemd: out of memory\n");
		if (errors != NULL && errors[0] != '\0' && errors[strlen(errors) - 1] != '\n')
			fputc('\n', stderr);
		free(errors);
		return IDEM_EXIT_CONFIG;
	}
	if (check_only) {
		idem_cfg_secret_warnings(cfg, warn_check, cfg->path);
		printf("configuration OK\n");
		idem_cfg_free(cfg);
		return IDEM_EXIT_OK;
	}

	idem_log_auto_journal();
	idem_log_set_level(cfg->log_level);
	install_signals();
	idem_log_info("main", "starting idemd %s config=%s group=%s routes=%zu", IDEM_VERSION, path,
	              cfg->group_id, cfg->n_routes);
	idem_cfg_secret_warnings(cfg, warn_start, NULL);
	/* Every secret now, before any thread: a missing or unsafe one is the operator's to fix
	 * (exit 78, no restart), and the variables leave the environment. */
	if (idem_cfg_secrets_check(cfg, &err) != IDEM_OK) {
		idem_log_error("main", "%s", err.msg);
		rc = err.code == IDEM_ERR_NOMEM ? IDEM_EXIT_FAILURE : IDEM_EXIT_CONFIG;
		goto out_free_cfg;
	}

	/* Postgres may still be starting: wait for it, but not for a mistake in the setup. */
	seed = (unsigned int)getpid() ^ (unsigned int)(uint64_t)idem_mono_us();
	for (int attempt = 1; !should_stop(); attempt++) {
		int wait;

		if (idem_daemon_new(cfg, should_stop, &d, &err) == IDEM_OK)
			break;
		if (idem_pg_needs_operator(&err)) {
			const char *hint = idem_pg_operator_hint(&err);

			if (hint != NULL)
				idem_log_error(
				        "main",
				        "cannot start: %s (sqlstate %s): %s; exiting, a restart cannot fix it",
				        err.msg, err.sqlstate, hint);
			else
				idem_log_error("main", "%s", err.msg);
			rc = IDEM_EXIT_CONFIG;
			goto out_free_cfg;
		}
		wait = idem_backoff_ms(cfg->retry_initial_ms, cfg->retry_max_ms, attempt, &seed);
		idem_log_warn("main", "cannot start: %s, retrying in %dms", err.msg, wait);
		for (int slept = 0; slept < wait && !should_stop(); slept += 100) {
			struct timespec ts = { 0, 100 * 1000000L };

			nanosleep(&ts, NULL);
		}
	}
	if (d == NULL) {
		rc = IDEM_EXIT_OK;
		goto out_free_cfg;
	}
	/* A handler's unqualified table is whichever the search path finds first: say which. */
	for (size_t i = 0; i < cfg->n_routes; i++)
		idem_log_info("main",
		              "route '%s': unqualified names in its handler resolve through "
		              "search_path '%s', schemas: %s (qualify them: schema.table)",
		              cfg->routes[i].name, idem_daemon_search_path(d)->setting,
		              idem_daemon_search_path(d)->schemas);
	idem_log_info("main", "ready: consuming topics of group '%s'", cfg->group_id);
	idem_notify("READY=1\nSTATUS=connected to postgres, subscribed as group %s", cfg->group_id);
	wd_usec = idem_notify_watchdog_usec();

	while (!should_stop()) {
		if (reload_requested) {
			reload(path, cfg);
			/* The operator may have fixed what a halted or paused partition waits
			 * for (the data, the handler, the database): try it now, not up to
			 * retry.max_ms later. */
			idem_daemon_retry_now(d);
		}
		if (idem_daemon_tick(d, &err) != IDEM_OK) {
			idem_log_error("main", "%s", err.msg);
			goto out_free_daemon;
		}
		notify_alive(d, wd_usec);
	}
	idem_log_info("main", "stopping: draining open batches");
	idem_notify("STOPPING=1\nSTATUS=draining open batches");
	if (idem_daemon_shutdown(d, &err) != IDEM_OK) {
		idem_log_error("main", "shutdown: %s", err.msg);
		goto out_free_daemon;
	}
	idem_daemon_stats(d, &st);
	idem_log_info("main", "stopped consumed=%llu applied=%llu duplicates=%llu quarantined=%llu",
	              (unsigned long long)st.consumed, (unsigned long long)st.applied,
	              (unsigned long long)st.duplicates, (unsigned long long)st.quarantined);
	rc = IDEM_EXIT_OK;
out_free_daemon:
	idem_daemon_free(d);
out_free_cfg:
	idem_cfg_free(cfg);
	return rc;
}
