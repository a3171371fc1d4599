/*
 * idem_url.h - the one reader of an HTTP(S) base URL idemd is given (schema_registry.url): the
 * configuration check and the registry client both read it here, so they cannot disagree.
 *
 * Form: http:// or https:// (any case), a host (a name, an IPv4 address or an IPv6 address in
 * brackets), an optional port (1..65535), an optional path. Refused, in this order: user
 * information, another scheme, spaces or control characters, a query or a fragment, no host or
 * a bad one, a bad port.
 *
 * User information. RFC 3986 and libcurl end the authority at the first '/', '?' or '#', so
 * "https://u:p#w@host" is host "u", port "p" and a fragment to them; other readers (browsers,
 * proxies, people) see user "u", password "p#w" and host "host". To find a password wherever any
 * reader could, this reader takes every '@' after "://" as ending user information: the host
 * starts after the LAST '@', and everything from "://" up to it is user information, whatever
 * '/', '?' or '#' it holds. A base URL never needs an '@' in its path, so nothing valid is lost.
 * A URL with user information is refused (credentials go in settings of their own), and no
 * message ever prints it: URLs in messages show "***" in its place.
 */
#ifndef IDEM_URL_H
#define IDEM_URL_H

#include "idem_common.h"

struct idem_url {
	char *base; /* "scheme://host[:port][/path]", the scheme in lower case, without trailing
	               '/': what requests are made to, and what messages show */
	char *host; /* as written; an IPv6 address with its brackets */
	int port;   /* 0 when none is written */
	bool https;
	char *path; /* "" or "/a/b", without trailing '/' */
};

/*
 * @brief Reads @url into *@ret (which the caller releases with idem_url_done()).
 * @returns IDEM_OK; IDEM_ERR_CONFIG with @why naming the URL, user information replaced by
 * "***" and control characters by '?', and the fault: "'ftp://x' must start with http:// or
 * https://", "'http://h:0' has an invalid port", "... must not contain credentials";
 * IDEM_ERR_NOMEM ("out of memory"). *@ret is written only on success. @why may be
 * NULL when @whylen is 0.
 */
IDEM_NODISCARD idem_status idem_url_parse(const char *url, struct idem_url *ret, char *why,
                                          size_t whylen);

/*
 * @brief Whether @url holds user information, found as idem_url_parse() finds it (for callers
 * that add to its message where credentials belong instead).
 */
bool idem_url_has_credentials(const char *url);

/* @brief Frees what idem_url_parse() put in @u (accepts a zeroed struct). */
void idem_url_done(struct idem_url *u);

/*
 * @brief @url as messages may show it, whatever it holds: user information (found as
 * idem_url_parse() finds it) replaced by "***", control characters by '?' (a log line cannot
 * be forged through it), truncated to fit @outlen (> 0). Never fails.
 */
void idem_url_redact(const char *url, char *out, size_t outlen);

#endif
