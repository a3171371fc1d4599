/*
 * idem_url.c - reading an HTTP(S) base URL (idem_url.h says which rule finds user information,
 * and why).
 */
#include "idem_url.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Room for a URL in a message; longer ones are cut (the message still names the fault). */
#define IDEM_URL_SHOWN 512

/*
 * Where the authority starts (after "://", or 0 without it) and where user information ends:
 * the last '@' after that point, or NULL.
 */
static const char *idem_url_userinfo_end(const char *url, size_t *ret_start)
{
	const char *sep = strstr(url, "://");

	*ret_start = sep != NULL ? (size_t)(sep - url) + 3 : 0;
	return strrchr(url + *ret_start, '@');
}

bool idem_url_has_credentials(const char *url)
{
	size_t start;

	return idem_url_userinfo_end(url, &start) != NULL;
}

void idem_url_redact(const char *url, char *out, size_t outlen)
{
	size_t start, n = 0;
	const char *at = idem_url_userinfo_end(url, &start);
	const char *p;

	if (outlen == 0)
		return;
	for (p = url; *p != '\0' && n + 1 < outlen; p++) {
		if (at != NULL && p == url + start) {
			/* "***@" in place of the user information, as far as it fits. */
			for (const char *m = "***@"; *m != '\0' && n + 1 < outlen; m++)
				out[n++] = *m;
			p = at;
			continue;
		}
		out[n++] = ((unsigned char)*p < ' ' || *p == 0x7f) ? '?' : *p;
	}
	out[n] = '\0';
}

static idem_status idem_url_fail(char *why, size_t whylen, const char *shown, const char *fault)
{
	if (whylen > 0)
		snprintf(why, whylen, "'%s' %s", shown, fault);
	return IDEM_ERR_CONFIG;
}

/* A host name or IPv4 address: unreserved characters and percent escapes (RFC 3986 reg-name,
 * without the sub-delimiters no registry host needs). */
static bool idem_url_name_ok(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!isalnum((unsigned char)p[i]) && strchr("-._~%", p[i]) == NULL)
			return false;
	}
	return len > 0;
}

/* The inside of "[...]": an IPv6 address (hex digits, ':' and a dotted IPv4 tail). */
static bool idem_url_v6_ok(const char *p, size_t len)
{
	if (len == 0 || memchr(p, ':', len) == NULL)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!isxdigit((unsigned char)p[i]) && p[i] != ':' && p[i] != '.')
			return false;
	}
	return true;
}

idem_status idem_url_parse(const char *url, struct idem_url *ret, char *why, size_t whylen)
{
	char shown[IDEM_URL_SHOWN];
	const char *auth, *host, *colon, *path;
	size_t start, auth_len, host_len, path_len;
	struct idem_url u = { 0 };
	long port = 0;
	bool https;

	idem_url_redact(url, shown, sizeof(shown));
	/* First, so that a caller can tell where credentials belong whatever else is wrong. */
	if (idem_url_userinfo_end(url, &start) != NULL)
		return idem_url_fail(why, whylen, shown, "must not contain credentials");
	if (strncasecmp(url, "http://", 7) == 0)
		https = false;
	else if (strncasecmp(url, "https://", 8) == 0)
		https = true;
	else
		return idem_url_fail(why, whylen, shown, "must start with http:// or https://");
	for (const char *p = url; *p != '\0'; p++) {
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return idem_url_fail(why, whylen, shown,
			                     "must not contain spaces or control characters");
	}
	if (strpbrk(url, "?#") != NULL)
		return idem_url_fail(why, whylen, shown, "must not have a query or a fragment");
	auth = url + start;
	auth_len = strcspn(auth, "/");
	if (auth_len == 0)
		return idem_url_fail(why, whylen, shown, "has no host");
	host = auth;
	if (host[0] == '[') {
		const char *close = memchr(host, ']', auth_len);

		if (close == NULL || !idem_url_v6_ok(host + 1, (size_t)(close - host) - 1))
			return idem_url_fail(why, whylen, shown, "has an invalid host");
		host_len = (size_t)(close - host) + 1;
	} else {
		colon = memchr(host, ':', auth_len);
		host_len = colon != NULL ? (size_t)(colon - host) : auth_len;
		if (host_len == 0)
			return idem_url_fail(why, whylen, shown, "has no host");
		if (!idem_url_name_ok(host, host_len))
			return idem_url_fail(why, whylen, shown, "has an invalid host");
	}
	if (host_len < auth_len) {
		const char *digits = host + host_len + 1;
		size_t n = auth_len - host_len - 1;

		if (host[host_len] != ':' || n == 0 || n > 5 || strspn(digits, "0123456789") < n ||
		    (port = strtol(digits, NULL, 10)) < 1 || port > 65535)
			return idem_url_fail(why, whylen, shown, "has an invalid port");
	}
	path = auth + auth_len;
	for (path_len = strlen(path); path_len > 0 && path[path_len - 1] == '/'; path_len--)
		;
	u.https = https;
	u.port = (int)port;
	u.host = strndup(host, host_len);
	u.path = strndup(path, path_len);
	u.base = malloc(strlen("https://") + auth_len + path_len + 1);
	if (u.host == NULL || u.path == NULL || u.base == NULL) {
		idem_url_done(&u);
		if (whylen > 0)
			snprintf(why, whylen, "out of memory");
		return IDEM_ERR_NOMEM;
	}
	sprintf(u.base, "%s://%.*s%.*s", https ? "https" : "http", (int)auth_len, auth,
	        (int)path_len, path);
	*ret = u;
	return IDEM_OK;
}

void idem_url_done(struct idem_url *u)
{
	if (u == NULL)
		return;
	free(u->base);
	free(u->host);
	free(u->path);
	u->base = u->host = u->path = NULL;
}
