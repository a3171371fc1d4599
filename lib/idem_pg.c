/*
 * idem_pg.c - connecting to Postgres, errors, the SQLSTATE policy, exec helpers.
 */
#include "idem_pg.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum idem_pg_class idem_pg_classify(const char *s)
{
	if (s == NULL || s[0] == '\0')
		return IDEM_PG_TRANSIENT; /* no answer from the server: the connection failed */
	/* 28 and 3D (a login or database refused) reach here only from a reconnect while idemd
	 * runs (a password rotated, a database renamed): retried like a lost connection, as the
	 * operator may fix it without a restart. At start-up idem_pg_needs_operator() stops. */
	if (strncmp(s, "08", 2) == 0 || strncmp(s, "53", 2) == 0 || strncmp(s, "57P0", 4) == 0 ||
	    strncmp(s, "28", 2) == 0 || strncmp(s, "3D", 2) == 0 || strcmp(s, "40001") == 0 ||
	    strcmp(s, "40P01") == 0 || strcmp(s, "55P03") == 0 || strcmp(s, "57014") == 0 ||
	    strncmp(s, "58", 2) == 0)
		return IDEM_PG_TRANSIENT;
	if (strncmp(s, "22", 2) == 0 || strncmp(s, "23", 2) == 0 || strncmp(s, "P0", 2) == 0 ||
	    strncmp(s, "54", 2) == 0)
		return IDEM_PG_MESSAGE;
	/* 42 (undefined object, syntax, privileges) and everything unexpected: do not turn a
	 * broken handler or schema into a flood of quarantined messages. */
	return IDEM_PG_BROKEN;
}

bool idem_pg_timeout(const char *s)
{
	return s != NULL && (strcmp(s, "55P03") == 0 || strcmp(s, "57014") == 0);
}

const char *idem_pg_class_str(enum idem_pg_class c)
{
	switch (c) {
	case IDEM_PG_TRANSIENT:
		return "transient";
	case IDEM_PG_MESSAGE:
		return "message";
	case IDEM_PG_BROKEN:
		return "broken";
	}
	return "unknown";
}

idem_status idem_pg_error(idem_error *err, PGconn *conn, const PGresult *res, const char *what)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorMessage(res) : NULL;

	if (msg == NULL || msg[0] == '\0')
		msg = conn ? PQerrorMessage(conn) : "no connection";
	if (err == NULL)
		return IDEM_ERR_PG;
	idem_error_set(err, IDEM_ERR_PG, "%s: %s", what, msg);
	/* libpq messages end with a newline; keep one event on one line. */
	for (char *p = err->msg; *p; p++) {
		if (*p == '\n')
			*p = (p[1] == '\0') ? '\0' : ' ';
	}
	snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
	return IDEM_ERR_PG;
}

bool idem_pg_message_sqlstate(const char *msg, char ret_state[6])
{
	const char *found = NULL;

	if (msg == NULL)
		return false;
	/* "SEVERITY:  CODE" ending a line: the severity may be translated, the code never is.
	 * With several hosts each one's failure is a line of its own: the last server that
	 * answered is the one whose answer counts. */
	for (const char *p = strstr(msg, ":  "); p != NULL; p = strstr(p + 1, ":  ")) {
		const char *c = p + 3;
		size_t n = 0;

		while (n < 5 && ((c[n] >= '0' && c[n] <= '9') || (c[n] >= 'A' && c[n] <= 'Z')))
			n++;
		if (n == 5 && (c[5] == '\n' || c[5] == '\0'))
			found = c;
	}
	if (found == NULL)
		return false;
	memcpy(ret_state, found, 5);
	ret_state[5] = '\0';
	return true;
}

/*
 * The SQLSTATE with which a server refuses a connection, asked of the server again: libpq keeps
 * the one of a failed PQconnectdbParams() to itself, and writes it into the error message only
 * at PQERRORS_SQLSTATE verbosity, which can be set on a connection only once it exists
 * (PQconnectStartParams()), before the server's answer is read. This attempt is driven here
 * with a deadline of its own (the caller's connection, which failed, had libpq's own handling
 * of connect_timeout and of several hosts); any failure to learn the code leaves @ret_state
 * empty, which counts as a connection that may succeed later.
 */
static void connect_sqlstate(const char *const *kw, const char *const *vals, int timeout_s,
                             char ret_state[6])
{
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	int64_t deadline = idem_mono_ms() + (int64_t)(timeout_s > 0 ? timeout_s : 10) * 1000;
	PGconn *conn = PQconnectStartParams(kw, vals, 1);

	if (conn == NULL)
		return;
	PQsetErrorVerbosity(conn, PQERRORS_SQLSTATE);
	while (PQstatus(conn) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
	       st != PGRES_POLLING_FAILED) {
		struct pollfd pfd = { .fd = PQsocket(conn),
			              .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT };
		int64_t left = deadline - idem_mono_ms();

		if (left <= 0 || pfd.fd < 0)
			break;
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			break;
		st = PQconnectPoll(conn);
	}
	if (PQstatus(conn) == CONNECTION_BAD)
		(void)idem_pg_message_sqlstate(PQerrorMessage(conn), ret_state);
	PQfinish(conn);
}

idem_status idem_pg_conn_open(const struct idem_cfg *cfg, const char *app_name, PGconn **ret_conn,
                              idem_error *err)
{
	return idem_pg_conn_open_timeout(cfg, app_name, IDEM_PG_CONNECT_TIMEOUT_S, ret_conn, err);
}

idem_status idem_pg_conn_open_timeout(const struct idem_cfg *cfg, const char *app_name,
                                      int connect_timeout_s, PGconn **ret_conn, idem_error *err)
{
	/* Parameters before dbname (the conninfo, expanded) are defaults it may override;
	 * those after it override it. */
	const char *kw[5] = { NULL }, *vals[5] = { NULL };
	char password[IDEM_CFG_PASSWORD_MAX], timeout[16];
	bool have_pw;
	PGconn *conn;
	idem_status r;
	int n = 0;

	r = idem_secret_read("postgres", cfg->password_env, cfg->password_file, password,
	                     sizeof(password), &have_pw, err);
	if (r != IDEM_OK)
		return r;
	if (connect_timeout_s > 0) {
		snprintf(timeout, sizeof(timeout), "%d", connect_timeout_s);
		kw[n] = "connect_timeout";
		vals[n++] = timeout;
	}
	kw[n] = "dbname";
	vals[n++] = cfg->conninfo;
	kw[n] = "fallback_application_name";
	vals[n++] = app_name;
	if (have_pw) {
		kw[n] = "password";
		vals[n++] = password;
	}
	conn = PQconnectdbParams(kw, vals, 1);
	if (conn == NULL) {
		idem_secret_wipe(password, sizeof(password));
		return idem_error_set(err, IDEM_ERR_NOMEM, "cannot allocate a connection");
	}
	if (PQstatus(conn) != CONNECTION_OK) {
		char state[6] = "";

		/* A server that refused the login sent its SQLSTATE, which libpq keeps to itself
		 * (no PGresult to ask): no password to give comes from libpq, the rest from a
		 * second attempt that asks for the code (connect_sqlstate()). Only where a server
		 * answered: libpq writes a server's message after "SEVERITY:  " (two spaces), its
		 * own (refused, unreachable, timed out) after ": ", and a server that never
		 * answered must not hold the attempt up twice as long. */
		if (PQconnectionNeedsPassword(conn))
			memcpy(state, "28P01", sizeof(state));
		else if (strstr(PQerrorMessage(conn), ":  ") != NULL)
			connect_sqlstate(kw, vals, connect_timeout_s, state);
		idem_secret_wipe(password, sizeof(password));
		idem_pg_error(err, conn, NULL, "cannot connect to postgres");
		PQfinish(conn);
		if (err != NULL)
			memcpy(err->sqlstate, state, sizeof(state));
		return IDEM_ERR_PG;
	}
	idem_secret_wipe(password, sizeof(password));
	*ret_conn = conn;
	return IDEM_OK;
}

bool idem_pg_needs_operator(const idem_error *err)
{
	if (err->code == IDEM_ERR_CONFIG)
		return true;
	if (err->code != IDEM_ERR_PG)
		return false;
	return strncmp(err->sqlstate, "42", 2) == 0 || strncmp(err->sqlstate, "28", 2) == 0 ||
	       strncmp(err->sqlstate, "3D", 2) == 0;
}

const char *idem_pg_operator_hint(const idem_error *err)
{
	const char *s = err->sqlstate;

	if (err->code != IDEM_ERR_PG)
		return NULL;
	if (strcmp(s, "3D000") == 0)
		return "the database does not exist: create it, or name another in postgres.conninfo";
	if (strcmp(s, "28P01") == 0)
		return "the password was refused or none was given: set the role's password, or give it by postgres.password_env or postgres.password_file";
	if (strncmp(s, "28", 2) == 0)
		return "the role does not exist or pg_hba.conf refuses it: create the role, name another in postgres.conninfo, or allow it in pg_hba.conf";
	if (strcmp(s, "42501") == 0)
		return "the role lacks a privilege: grant what the message names (CONNECT on the database, USAGE on schema idem, ...)";
	return NULL;
}

idem_status idem_pg_result(PGconn *conn, PGresult *res, const char *what, PGresult **ret_res,
                           idem_error *err)
{
	ExecStatusType s = PQresultStatus(res);
	idem_status r = IDEM_OK;

	if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
		r = idem_pg_error(err, conn, res, what);
	if (ret_res != NULL)
		*ret_res = res;
	else
		PQclear(res);
	return r;
}

void idem_pg_rollback(PGconn *conn)
{
	PQclear(PQexec(conn, "ROLLBACK"));
}

idem_status idem_pg_exec(PGconn *conn, const char *sql, const char *what, idem_error *err)
{
	return idem_pg_result(conn, PQexec(conn, sql), what, NULL, err);
}

idem_status idem_pg_search_path(PGconn *conn, struct idem_pg_search_path *ret, idem_error *err)
{
	static const char sql[] = "SELECT current_setting('search_path'), "
	                          "array_to_string(current_schemas(true), ', ')";
	PGresult *res = NULL;
	idem_status r;

	if ((r = idem_pg_exec_params(conn, sql, 0, NULL, "read the search path", &res, err)) !=
	    IDEM_OK)
		goto out_clear_res;
	if (PQntuples(res) != 1 || PQnfields(res) != 2) {
		r = idem_error_set(err, IDEM_ERR_PG, "read the search path: unexpected result");
		goto out_clear_res;
	}
	snprintf(ret->setting, sizeof(ret->setting), "%s", PQgetvalue(res, 0, 0));
	snprintf(ret->schemas, sizeof(ret->schemas), "%s", PQgetvalue(res, 0, 1));
	r = IDEM_OK;
out_clear_res:
	PQclear(res);
	return r;
}

idem_status idem_pg_exec_params(PGconn *conn, const char *sql, int n, const char *const *pv,
                                const char *what, PGresult **ret_res, idem_error *err)
{
	return idem_pg_result(conn, PQexecParams(conn, sql, n, NULL, pv, NULL, NULL, 0), what,
	                      ret_res, err);
}

idem_status idem_pg_prepare(PGconn *conn, const char *name, const char *sql, int n,
                            const char *what, idem_error *err)
{
	PGresult *res = PQprepare(conn, name, sql, n, NULL);
	idem_status r = IDEM_OK;

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		r = idem_pg_error(err, conn, res, what);
	PQclear(res);
	return r;
}
