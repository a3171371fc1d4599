/*
 * Unit tests for idem_url: the one reader of schema_registry.url. Above all, that user
 * information is found wherever any reader of the URL could take it for a password, and that no
 * message ever shows it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs <setjmp.h>, <stdarg.h>, <stddef.h> and <stdint.h> first. */
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "idem_url.h"

static void test_accepted(void **state)
{
	static const struct {
		const char *url, *base, *host, *path;
		int port;
		bool https;
	} cases[] = {
		{ "http://registry:8081", "http://registry:8081", "registry", "", 8081, false },
		{ "http://host:8081/base/", "http://host:8081/base", "host", "/base", 8081, false },
		{ "https://registry.example.com/", "https://registry.example.com",
		  "registry.example.com", "", 0, true },
		{ "HTTP://registry:8081/base//", "http://registry:8081/base", "registry", "/base",
		  8081, false },
		{ "http://[::1]:8081", "http://[::1]:8081", "[::1]", "", 8081, false },
		{ "https://[2001:db8::7]/sr/v1", "https://[2001:db8::7]/sr/v1", "[2001:db8::7]",
		  "/sr/v1", 0, true },
		{ "http://10.0.0.1:65535", "http://10.0.0.1:65535", "10.0.0.1", "", 65535, false },
		{ "http://h:1", "http://h:1", "h", "", 1, false },
	};

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		struct idem_url u = { 0 };
		char why[256] = "";

		if (idem_url_parse(cases[i].url, &u, why, sizeof(why)) != IDEM_OK)
			fail_msg("'%s' refused: %s", cases[i].url, why);
		assert_string_equal(u.base, cases[i].base);
		assert_string_equal(u.host, cases[i].host);
		assert_string_equal(u.path, cases[i].path);
		assert_int_equal(u.port, cases[i].port);
		assert_int_equal(u.https, cases[i].https);
		assert_false(idem_url_has_credentials(cases[i].url));
		idem_url_done(&u);
		idem_url_done(&u); /* twice is fine */
	}
}

static void test_refused(void **state)
{
	static const struct {
		const char *url, *why;
	} cases[] = {
		{ "ftp://x", "'ftp://x' must start with http:// or https://" },
		{ "registry:8081", "'registry:8081' must start with http:// or https://" },
		{ "http://", "'http://' has no host" },
		{ "http:///base", "'http:///base' has no host" },
		{ "http://:8081", "'http://:8081' has no host" },
		{ "http://h:0", "'http://h:0' has an invalid port" },
		{ "http://h:65536", "'http://h:65536' has an invalid port" },
		{ "http://h:99999", "'http://h:99999' has an invalid port" },
		{ "http://h:123456", "'http://h:123456' has an invalid port" },
		{ "http://h:80x", "'http://h:80x' has an invalid port" },
		{ "http://h:", "'http://h:' has an invalid port" },
		{ "http://h:-1", "'http://h:-1' has an invalid port" },
		{ "http://[::1", "'http://[::1' has an invalid host" },
		{ "http://[]:80", "'http://[]:80' has an invalid host" },
		{ "http://[::1]x", "'http://[::1]x' has an invalid port" },
		{ "http://h!x", "'http://h!x' has an invalid host" },
		{ "http://h /x", "'http://h /x' must not contain spaces or control characters" },
		{ "http://h/x\ny", "'http://h/x?y' must not contain spaces or control characters" },
		{ "http://h/x?y=1", "'http://h/x?y=1' must not have a query or a fragment" },
		{ "http://h/x#top", "'http://h/x#top' must not have a query or a fragment" },
		{ "http://h?y", "'http://h?y' must not have a query or a fragment" },
	};

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		struct idem_url u = { .port = -7 };
		char why[256] = "";

		assert_int_equal(idem_url_parse(cases[i].url, &u, why, sizeof(why)),
		                 IDEM_ERR_CONFIG);
		assert_string_equal(why, cases[i].why);
		assert_int_equal(u.port, -7); /* untouched */
		assert_null(u.base);
	}
}

/*
 * Credentials, whichever delimiter a reader would end the authority at: all are refused, and
 * the password is in no message, however it is split.
 */
static void test_credentials(void **state)
{
	static const struct {
		const char *url, *password, *why;
	} cases[] = {
		{ "https://u:p@host", "u:p", "'https://***@host' must not contain credentials" },
		{ "https://u:p#w@host", "p#w", "'https://***@host' must not contain credentials" },
		{ "https://u:p/w@host", "p/w", "'https://***@host' must not contain credentials" },
		{ "https://u:p?w@host", "p?w", "'https://***@host' must not contain credentials" },
		{ "https://u:p@ss@host:8081/sr", "p@ss",
		  "'https://***@host:8081/sr' must not contain credentials" },
		{ "http://alice@host", "alice", "'http://***@host' must not contain credentials" },
		{ "http://host/x@y", "host/x", "'http://***@y' must not contain credentials" },
		{ "https://u:p w@host", "p w", "'https://***@host' must not contain credentials" },
		{ "https://u:p\n@host", "p\n", "'https://***@host' must not contain credentials" },
		/* Found before anything else is wrong. */
		{ "ftp://alice:s3cret-pw@x/y", "s3cret",
		  "'ftp://***@x/y' must not contain credentials" },
		{ "u:pw@host", "pw", "'***@host' must not contain credentials" },
		{ "https://alice:s3cret-pw@/x", "s3cret",
		  "'https://***@/x' must not contain credentials" },
	};

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		struct idem_url u = { 0 };
		char why[256] = "", shown[256];

		assert_int_equal(idem_url_parse(cases[i].url, &u, why, sizeof(why)),
		                 IDEM_ERR_CONFIG);
		assert_string_equal(why, cases[i].why);
		if (strstr(why, cases[i].password) != NULL)
			fail_msg("'%s' shows the password '%s'", why, cases[i].password);
		assert_true(idem_url_has_credentials(cases[i].url));
		idem_url_redact(cases[i].url, shown, sizeof(shown));
		assert_null(strstr(shown, cases[i].password));
		assert_non_null(strstr(shown, "***@"));
	}
}

static void test_redact(void **state)
{
	static const char *const cases[][2] = {
		{ "https://u:p@host", "https://***@host" },
		{ "http://alice:s3cret@host:8081/x", "http://***@host:8081/x" },
		{ "http://a@b:c@host/", "http://***@host/" },
		{ "http://host/p", "http://host/p" },
		{ "http://h/\x1b[31mred\r\n", "http://h/?[31mred??" },
		{ "u:p@host", "***@host" },
		{ "", "" },
	};
	char out[8];

	(void)state;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(cases); i++) {
		char shown[128];

		idem_url_redact(cases[i][0], shown, sizeof(shown));
		assert_string_equal(shown, cases[i][1]);
	}
	/* Cut to fit, never past the buffer, and never the password. */
	idem_url_redact("https://u:pw@host", out, sizeof(out));
	assert_string_equal(out, "https:/");
	idem_url_redact("http://u:pw@host", out, sizeof(out));
	assert_string_equal(out, "http://");
	idem_url_redact("ab://u:pw@host", out, sizeof(out));
	assert_string_equal(out, "ab://**");
}

static void test_short_why(void **state)
{
	struct idem_url u = { 0 };
	char why[6];

	(void)state;
	assert_int_equal(idem_url_parse("https://u:secret@h", &u, why, sizeof(why)),
	                 IDEM_ERR_CONFIG);
	assert_string_equal(why, "'http");
	assert_int_equal(idem_url_parse("ftp://x", &u, NULL, 0), IDEM_ERR_CONFIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepted),    cmocka_unit_test(test_refused),
		cmocka_unit_test(test_credentials), cmocka_unit_test(test_redact),
		cmocka_unit_test(test_short_why),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
