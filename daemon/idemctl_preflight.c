/*
 * idemctl_preflight.c - idemctl preflight: check against the real services everything that can
 * be checked before consuming (the login, the schema's version, idemd's grants on it, every
 * route's handler, every topic, the schema registry), one line per check, each failure with
 * what fixes it. Changes nothing: the handlers are prepared in a transaction that is rolled
 * back, and the topics are asked for as metadata of all topics (which creates none).
 */
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_migrate.h"
#include "idem_pg.h"
#include "idem_schemas.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

/* How long the brokers may take to answer the metadata request. */
#define TOPICS_TIMEOUT_MS 10000

void idemctl_preflight_usage(FILE *f)
{
	fprintf(f,
	        "  preflight [--json]  check against the real services what idemd needs before\n"
	        "                      consuming: the login, the schema's version, idemd's grants\n"
	        "                      on schema idem, that every route's handler prepares, that\n"
	        "                      every topic exists, that the schema registry answers; one\n"
	        "                      line per check, each failure with its fix; changes nothing;\n"
	        "                      exit 0 all pass, 78 the operator must fix something, 1 a\n"
	        "                      service did not answer\n");
}

/*
 * The SQL of the grants check: every privilege idemd's role needs on schema idem and what it
 * holds (USAGE on the schema; SELECT, INSERT, UPDATE and DELETE on each table; USAGE on each
 * sequence; EXECUTE on each function), the objects read from the catalog. One row per object
 * lacking any: its kind, its name and the GRANT that gives what it lacks.
 */
static const char grants_sql[] =
        "WITH need(kind, obj, priv, has) AS ("
        " SELECT 'SCHEMA', 'idem', 'USAGE', has_schema_privilege(current_user, n.oid, 'USAGE')"
        "  FROM pg_namespace n WHERE n.nspname = 'idem'"
        " UNION ALL"
        " SELECT 'TABLE', format('idem.%I', c.relname), p.priv,"
        "  has_table_privilege(current_user, c.oid, p.priv)"
        "  FROM pg_class c CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p(priv)"
        "  WHERE c.relnamespace = 'idem'::regnamespace AND c.relkind IN ('r', 'p')"
        " UNION ALL"
        " SELECT 'SEQUENCE', format('idem.%I', c.relname), 'USAGE',"
        "  has_sequence_privilege(current_user, c.oid, 'USAGE')"
        "  FROM pg_class c WHERE c.relnamespace = 'idem'::regnamespace AND c.relkind = 'S'"
        " UNION ALL"
        " SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,"
        "  format('idem.%I(%s)', p.proname, pg_get_function_identity_arguments(p.oid)), 'EXECUTE',"
        "  has_function_privilege(current_user, p.oid, 'EXECUTE')"
        "  FROM pg_proc p WHERE p.pronamespace = 'idem'::regnamespace AND p.prokind IN ('f', 'p')"
        ")"
        " SELECT lower(kind) AS k, obj, format('GRANT %s ON %s %s TO %I', string_agg(priv, ', '), kind, obj,"
        "  current_user)"
        " FROM need WHERE NOT has GROUP BY kind, obj ORDER BY kind <> 'SCHEMA', kind, obj";

struct preflight {
	bool json;
	json_object *checks;
	int rc; /* the worst so far: IDEM_EXIT_CONFIG over IDEM_EXIT_FAILURE over IDEM_EXIT_OK */
};

/*
 * One check's line: "ok   NAME: TEXT", "FAIL NAME: TEXT fix: FIX" or "skip NAME: TEXT".
 * @rc is what the failure calls for (IDEM_EXIT_OK: passed; -1: skipped).
 */
IDEM_PRINTF(5, 6)
static void report(struct preflight *pf, const char *name, int rc, const char *fix, const char *fmt,
                   ...)
{
	const char *status = rc == IDEM_EXIT_OK ? "ok" : rc < 0 ? "skip" : "FAIL";
	char text[2048], esc[4 * sizeof(text)], fesc[4 * 1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (rc > 0 && (pf->rc == IDEM_EXIT_OK || rc == IDEM_EXIT_CONFIG))
		pf->rc = rc;
	if (pf->json) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "check", json_object_new_string(name));
		json_object_object_add(o, "status", json_object_new_string(status));
		json_object_object_add(o, "detail", json_object_new_string(text));
		json_object_object_add(o, "fix", fix ? json_object_new_string(fix) : NULL);
		json_object_array_add(pf->checks, o);
		return;
	}
	/* Postgres's and the brokers' text may hold anything: print it escaped. */
	printf("%-4s %s: %s", status, name, idemctl_esc(esc, sizeof(esc), text, 0));
	if (fix != NULL)
		printf(" fix: %s", idemctl_esc(fesc, sizeof(fesc), fix, 0));
	printf("\n");
}

/* login: connect as idemd does; a refusal needs the operator, no answer may pass. */
static bool check_login(struct preflight *pf, const struct idem_cfg *cfg, PGconn **ret_conn)
{
	idem_error err = { 0 };
	const char *hint;

	if (idem_pg_conn_open(cfg, "idemctl", ret_conn, &err) == IDEM_OK) {
		report(pf, "login", IDEM_EXIT_OK, NULL, "connected as '%s' to database '%s'",
		       PQuser(*ret_conn), PQdb(*ret_conn));
		return true;
	}
	hint = idem_pg_operator_hint(&err);
	if (idem_pg_needs_operator(&err))
		report(pf, "login", IDEM_EXIT_CONFIG, hint ? hint : "correct postgres.conninfo",
		       "%s (sqlstate %s)", err.msg, err.sqlstate);
	else
		report(pf, "login", IDEM_EXIT_FAILURE,
		       "start Postgres or correct postgres.conninfo", "no answer: %s", err.msg);
	return false;
}

/* schema version: the check idemd makes at start. */
static bool check_schema(struct preflight *pf, PGconn *conn)
{
	idem_error err = { 0 };

	if (idem_migrate_check(conn, &err) == IDEM_OK) {
		report(pf, "schema", IDEM_EXIT_OK, NULL, "at version %d", idem_migrate_latest());
		return true;
	}
	if (idem_pg_needs_operator(&err))
		report(pf, "schema", IDEM_EXIT_CONFIG, "run idemctl migrate", "%s", err.msg);
	else
		report(pf, "schema", IDEM_EXIT_FAILURE, NULL, "%s", err.msg);
	return false;
}

static void check_grants(struct preflight *pf, PGconn *conn)
{
	idem_error err = { 0 };
	PGresult *res = NULL;
	int n;

	if (idem_pg_exec_params(conn, grants_sql, 0, NULL, "read the grants", &res, &err) !=
	    IDEM_OK) {
		report(pf, "grants", IDEM_EXIT_FAILURE, NULL, "%s", err.msg);
		PQclear(res);
		return;
	}
	if ((n = PQntuples(res)) == 0)
		report(pf, "grants", IDEM_EXIT_OK, NULL,
		       "'%s' holds every privilege idemd needs on schema idem", PQuser(conn));
	for (int i = 0; i < n; i++)
		report(pf, "grants", IDEM_EXIT_CONFIG, PQgetvalue(res, i, 2),
		       "'%s' lacks privileges on %s %s", PQuser(conn), PQgetvalue(res, i, 0),
		       PQgetvalue(res, i, 1));
	PQclear(res);
}

/* handlers: PREPARE each route's handler as idemd does at start, in a transaction undone. */
static void check_handlers(struct preflight *pf, const struct idem_cfg *cfg, PGconn *conn)
{
	idem_error err = { 0 };
	char name[48], what[256];

	if (idem_pg_exec(conn, "BEGIN", "begin", &err) != IDEM_OK) {
		report(pf, "handlers", IDEM_EXIT_FAILURE, NULL, "%s", err.msg);
		return;
	}
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct idem_route *rt = &cfg->routes[i];

		snprintf(name, sizeof(name), "idem_preflight%zu", i);
		snprintf(what, sizeof(what), "route '%s': handler sql does not prepare", rt->name);
		if (idem_pg_exec(conn, "SAVEPOINT idem_preflight", "savepoint", &err) != IDEM_OK)
			break;
		if (idem_pg_prepare(conn, name, rt->handler_sql, (int)rt->n_params, what, &err) ==
		    IDEM_OK) {
			report(pf, "handlers", IDEM_EXIT_OK, NULL,
			       "route '%s': handler prepares (%zu parameters)", rt->name,
			       rt->n_params);
		} else {
			report(pf, "handlers",
			       idem_pg_needs_operator(&err) ? IDEM_EXIT_CONFIG : IDEM_EXIT_FAILURE,
			       "correct the route's handler.sql, or the tables it names", "%s",
			       err.msg);
			err = (idem_error){ 0 };
		}
		if (idem_pg_exec(conn, "ROLLBACK TO SAVEPOINT idem_preflight", "roll back", &err) !=
		    IDEM_OK)
			break;
	}
	if (err.msg[0] != '\0')
		report(pf, "handlers", IDEM_EXIT_FAILURE, NULL, "%s", err.msg);
	idem_pg_rollback(conn);
}

/* topics: metadata of all topics (never of one named: that could create it). */
static void check_topics(struct preflight *pf, const struct idem_cfg *cfg)
{
	idem_error err = { 0 };
	rd_kafka_t *rk = NULL;
	bool *missing = calloc(cfg->n_topics + 1, sizeof(*missing));
	int partitions = 0;
	size_t n_missing = 0;

	if (missing == NULL) {
		report(pf, "topics", IDEM_EXIT_FAILURE, NULL, "out of memory");
		return;
	}
	if (idem_consumer_new(cfg, NULL, &rk, &err) != IDEM_OK ||
	    idem_consumer_topics_missing(rk, cfg, TOPICS_TIMEOUT_MS, missing, &partitions, &err) !=
	            IDEM_OK) {
		report(pf, "topics", IDEM_EXIT_FAILURE,
		       "start the brokers or correct kafka.brokers",
		       "no answer from the brokers: %s", err.msg);
		goto out;
	}
	for (size_t i = 0; i < cfg->n_topics; i++) {
		int n = 0;

		if (missing[i]) {
			n_missing++;
			report(pf, "topics", IDEM_EXIT_CONFIG,
			       "create the topic, or correct the route's topics",
			       "topic '%s' does not exist", cfg->topics[i]);
			continue;
		}
		if (idem_consumer_partition_count(rk, cfg->topics[i], &n, &err) != IDEM_OK) {
			report(pf, "topics", IDEM_EXIT_FAILURE, NULL, "%s", err.msg);
			continue;
		}
		report(pf, "topics", IDEM_EXIT_OK, NULL, "topic '%s' exists with %d partitions",
		       cfg->topics[i], n);
	}
out:
	if (rk != NULL)
		rd_kafka_destroy(rk);
	free(missing);
}

/* registry: one request of its subjects, with the configured credentials. */
static void check_registry(struct preflight *pf, const struct idem_cfg *cfg)
{
	idem_error err = { 0 };
	idem_schemas *s = NULL;
	long http = 0;

	if (cfg->registry_url == NULL) {
		report(pf, "registry", -1, NULL, "no schema_registry.url configured");
		return;
	}
	if (idem_schemas_open(cfg, NULL, NULL, &s, &err) != IDEM_OK) {
		report(pf, "registry",
		       err.code == IDEM_ERR_NOMEM ? IDEM_EXIT_FAILURE : IDEM_EXIT_CONFIG,
		       "correct schema_registry", "%s", err.msg);
		return;
	}
	if (idem_schemas_ping(s, &http, &err) == IDEM_OK)
		report(pf, "registry", IDEM_EXIT_OK, NULL, "%s answers", cfg->registry_url);
	else if (http == 401 || http == 403)
		report(pf, "registry", IDEM_EXIT_CONFIG,
		       "correct schema_registry.username and its password", "%s", err.msg);
	else if (http == 404)
		report(pf, "registry", IDEM_EXIT_CONFIG, "correct schema_registry.url", "%s",
		       err.msg);
	else
		report(pf, "registry", IDEM_EXIT_FAILURE, NULL, "%s", err.msg);
	idem_schemas_close(s);
}

int idemctl_preflight(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct preflight pf = { 0 };
	PGconn *conn = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") != 0) {
			fprintf(stderr, "usage: idemctl preflight [--json]\n");
			return IDEM_EXIT_USAGE;
		}
		pf.json = true;
	}
	if (pf.json)
		pf.checks = json_object_new_array();
	if (check_login(&pf, cfg, &conn)) {
		if (check_schema(&pf, conn))
			check_grants(&pf, conn);
		else
			report(&pf, "grants", -1, NULL, "not checked: the schema is not current");
		check_handlers(&pf, cfg, conn);
	} else {
		report(&pf, "schema", -1, NULL, "not checked: no connection");
		report(&pf, "grants", -1, NULL, "not checked: no connection");
		report(&pf, "handlers", -1, NULL, "not checked: no connection");
	}
	PQfinish(conn);
	check_topics(&pf, cfg);
	check_registry(&pf, cfg);
	if (pf.json) {
		json_object *top = json_object_new_object();

		json_object_object_add(top, "checks", pf.checks);
		json_object_object_add(top, "exit", json_object_new_int(pf.rc));
		idemctl_print_json(top);
		json_object_put(top);
	} else {
		printf("%s (exit %d)\n",
		       pf.rc == IDEM_EXIT_OK       ? "all checks passed"
		       : pf.rc == IDEM_EXIT_CONFIG ? "the operator must fix what failed"
		                                   : "a service did not answer",
		       pf.rc);
	}
	return pf.rc;
}
