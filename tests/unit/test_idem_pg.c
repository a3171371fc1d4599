/*
 * Unit tests for idem_pg's SQLSTATE policy at connection time: the code a refused connection's
 * message carries, which codes stop idemd and idemctl with exit 78 (a login or database the
 * operator must fix) and which are waited for (a server starting, full, or not answering), and
 * what the operator is told to do.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "idem_pg.h"

static void test_message_sqlstate(void **state)
{
	static const struct {
		const char *msg, *want; /* want NULL: no code */
	} cases[] = {
		/* libpq 15 at PQERRORS_SQLSTATE verbosity, as servers answer a refused login */
		{ "connection to server on socket \"/tmp/pg/.s.PGSQL.5432\" failed: FATAL:  3D000\n",
		  "3D000" },
		{ "connection to server on socket \"/tmp/pg/.s.PGSQL.5432\" failed: FATAL:  28000\n",
		  "28000" },
		{ "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  28P01\n",
		  "28P01" },
		{ "connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL:  42501\n",
		  "42501" },
		{ "connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL:  57P03\n",
		  "57P03" },
		{ "connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL:  53300\n",
		  "53300" },
		/* no final newline; a translated severity */
		{ "failed: FATAL:  3D000", "3D000" },
		{ "Verbindung zum Server auf Socket fehlgeschlagen: FATAL:  28P01\n", "28P01" },
		{ "échec : FATAL:  3D000\n", "3D000" },
		/* no server answered */
		{ "connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n",
		  NULL },
		{ "connection to server at \"127.0.0.1\", port 5432 failed: fe_sendauth: no password supplied\n",
		  NULL },
		{ "connection to server at \"10.0.0.9\", port 5432 failed: timeout expired\n",
		  NULL },
		{ "", NULL },
		/* several hosts: the last server that answered */
		{ "connection to server at \"a\" (10.0.0.1), port 5432 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\nconnection to server at \"b\" (10.0.0.2), port 5432 failed: FATAL:  3D000\n",
		  "3D000" },
		{ "connection to server at \"a\" (10.0.0.1), port 5432 failed: FATAL:  57P03\nconnection to server at \"b\" (10.0.0.2), port 5432 failed: FATAL:  28P01\n",
		  "28P01" },
		{ "connection to server at \"a\" (10.0.0.1), port 5432 failed: FATAL:  28P01\nconnection to server at \"b\" (10.0.0.2), port 5432 failed: Connection refused\n",
		  "28P01" },
		/* not a code: too short, too long, lower case, followed by text (other verbosities)
		 */
		{ "failed: FATAL:  3D00\n", NULL },
		{ "failed: FATAL:  3D0000\n", NULL },
		{ "failed: FATAL:  3d000\n", NULL },
		{ "failed: FATAL:  42501: permission denied for database \"idem\"\n", NULL },
		{ "failed: FATAL:  database \"nope\" does not exist\n", NULL },
		{ "failed: FATAL: 3D000\n", NULL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char got[6] = "xxxxx";
		bool found = idem_pg_message_sqlstate(cases[i].msg, got);

		if (cases[i].want == NULL) {
			if (found)
				fail_msg("case %zu: found '%s' in '%s'", i, got, cases[i].msg);
			assert_string_equal(got, "xxxxx"); /* untouched */
		} else {
			if (!found)
				fail_msg("case %zu: no code in '%s'", i, cases[i].msg);
			assert_string_equal(got, cases[i].want);
		}
	}
	assert_false(idem_pg_message_sqlstate(NULL, (char[6]){ 0 }));
}

static idem_error pg_error(const char *sqlstate)
{
	idem_error err = { 0 };

	err.code = IDEM_ERR_PG;
	snprintf(err.sqlstate, sizeof(err.sqlstate), "%s", sqlstate);
	return err;
}

static void test_needs_operator(void **state)
{
	static const struct {
		const char *sqlstate;
		bool stop, hint;
	} cases[] = {
		{ "3D000", true, true },   /* database does not exist */
		{ "28000", true, true },   /* role does not exist, pg_hba.conf refuses it */
		{ "28P01", true, true },   /* password refused, or none given */
		{ "42501", true, true },   /* no CONNECT privilege, a grant missing */
		{ "42P01", true, false },  /* schema not migrated */
		{ "42601", true, false },  /* handler SQL that does not prepare */
		{ "57P03", false, false }, /* the database system is starting up */
		{ "53300", false, false }, /* too many connections */
		{ "57P01", false, false }, /* terminated by an administrator */
		{ "08006", false, false }, /* connection failure */
		{ "", false, false },      /* no server answered: refused, unreachable, timed out */
	};
	idem_error other = { 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		idem_error err = pg_error(cases[i].sqlstate);

		if (idem_pg_needs_operator(&err) != cases[i].stop)
			fail_msg("'%s': needs the operator: expected %d", cases[i].sqlstate,
			         cases[i].stop);
		if ((idem_pg_operator_hint(&err) != NULL) != cases[i].hint)
			fail_msg("'%s': hint: expected %d", cases[i].sqlstate, cases[i].hint);
	}
	assert_non_null(strstr(
	        idem_pg_operator_hint(&(idem_error){ .code = IDEM_ERR_PG, .sqlstate = "3D000" }),
	        "create it"));
	other.code = IDEM_ERR_CONFIG;
	assert_true(idem_pg_needs_operator(&other));
	assert_null(idem_pg_operator_hint(&other));
	other.code = IDEM_ERR_NOMEM;
	assert_false(idem_pg_needs_operator(&other));
}

/* While idemd runs, a reconnect the server refuses is retried like a lost connection. */
static void test_classify_at_runtime(void **state)
{
	static const char *const transient[] = { "57P03", "53300", "08006", "28P01",
		                                 "28000", "3D000", "" };

	(void)state;
	for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
		assert_int_equal(idem_pg_classify(transient[i]), IDEM_PG_TRANSIENT);
	assert_int_equal(idem_pg_classify(NULL), IDEM_PG_TRANSIENT);
	assert_int_equal(idem_pg_classify("42P01"), IDEM_PG_BROKEN);
	assert_int_equal(idem_pg_classify("23505"), IDEM_PG_MESSAGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_message_sqlstate),
		cmocka_unit_test(test_needs_operator),
		cmocka_unit_test(test_classify_at_runtime),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
