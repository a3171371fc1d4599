/*
 * idem_lex.c - lexers for the Postgres-side text in the configuration: libpq conninfo strings
 * and handler SQL. Each follows the real lexer (libpq's conninfo parser, the backend's scan.l)
 * only as far as its one question needs, and never connects or prepares.
 */
#include "idem_lex.h"

#include <stdlib.h>
#include <string.h>

/* URI query keys are percent-decoded by libpq before it looks at them. */
static bool lex_uri_key_is(const char *k, size_t n, const char *want)
{
	size_t w = 0;

	for (size_t i = 0; i < n; i++, w++) {
		int c = (unsigned char)k[i];

		if (c == '%' && i + 2 < n && idem_hex_digit(k[i + 1]) >= 0 &&
		    idem_hex_digit(k[i + 2]) >= 0) {
			c = idem_hex_digit(k[i + 1]) * 16 + idem_hex_digit(k[i + 2]);
			i += 2;
		}
		if (want[w] == '\0' || (unsigned char)want[w] != c)
			return false;
	}
	return want[w] == '\0';
}

static bool lex_uri_has_password(const char *s)
{
	const char *p = strstr(s, "://") + 3;
	const char *q;

	/* As libpq: user info is what precedes an '@' that comes before any '/'. */
	for (q = p; *q != '\0' && *q != '@' && *q != '/'; q++)
		;
	if (*q == '@') {
		const char *colon = memchr(p, ':', (size_t)(q - p));

		if (colon != NULL && colon + 1 < q)
			return true;
	}
	q = strchr(p, '?');
	while (q != NULL) {
		const char *k = q + 1, *eq, *end;

		end = strchr(k, '&');
		if (end == NULL)
			end = k + strlen(k);
		eq = memchr(k, '=', (size_t)(end - k));
		if (eq != NULL && eq + 1 < end && lex_uri_key_is(k, (size_t)(eq - k), "password"))
			return true;
		q = *end == '&' ? end : NULL;
	}
	return false;
}

static bool lex_is_uri(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

static bool lex_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static idem_status lex_conninfo_password(const char *s, int depth, bool *ret)
{
	char *val;
	idem_status r = IDEM_OK;

	if (lex_is_uri(s)) {
		*ret = lex_uri_has_password(s);
		return IDEM_OK;
	}
	/* keyword = value pairs, parsed as libpq does; values may be quoted and escaped. */
	val = malloc(strlen(s) + 1);
	if (val == NULL)
		return IDEM_ERR_NOMEM;
	*ret = false;
	while (*s != '\0' && !*ret) {
		const char *name;
		size_t name_len, n = 0;

		while (lex_is_space(*s))
			s++;
		if (*s == '\0')
			break;
		name = s;
		while (*s != '\0' && *s != '=' && !lex_is_space(*s))
			s++;
		name_len = (size_t)(s - name);
		while (lex_is_space(*s))
			s++;
		if (*s != '=')
			break; /* malformed: libpq will say so; nothing more to find */
		s++;
		while (lex_is_space(*s))
			s++;
		if (*s == '\'') {
			for (s++; *s != '\0' && *s != '\''; s++) {
				if (*s == '\\' && s[1] != '\0')
					s++;
				val[n++] = *s;
			}
			if (*s == '\'')
				s++;
		} else {
			for (; *s != '\0' && !lex_is_space(*s); s++) {
				if (*s == '\\' && s[1] != '\0')
					s++;
				val[n++] = *s;
			}
		}
		val[n] = '\0';
		if (name_len == 8 && memcmp(name, "password", 8) == 0 && n > 0)
			*ret = true;
		/* libpq expands a dbname that is itself a URI or a conninfo string. */
		if (name_len == 6 && memcmp(name, "dbname", 6) == 0 && depth == 0 &&
		    (lex_is_uri(val) || strchr(val, '=') != NULL)) {
			r = lex_conninfo_password(val, depth + 1, ret);
			if (r != IDEM_OK)
				break;
		}
	}
	free(val);
	return r;
}

idem_status idem_lex_conninfo_has_password(const char *conninfo, bool *ret_has_password)
{
	bool has = false;
	idem_status r = lex_conninfo_password(conninfo, 0, &has);

	if (r == IDEM_OK)
		*ret_has_password = has;
	return r;
}

static bool lex_sql_ident_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '$' || c >= 0x80;
}

static bool lex_sql_tag_char(unsigned char c)
{
	return lex_sql_ident_char(c) && c != '$';
}

/* Skips what Postgres's lexer skips; see the header. */
unsigned long idem_lex_sql_params(const char *sql, bool *ret_multi, const char **ret_unterminated)
{
	const unsigned char *s = (const unsigned char *)sql;
	const char *open = NULL;
	unsigned long max = 0;
	bool ended = false, multi = false;
	size_t i = 0;

	while (s[i] != '\0' && open == NULL) {
		unsigned char c = s[i];

		if (c == '-' && s[i + 1] == '-') {
			while (s[i] != '\0' && s[i] != '\n')
				i++;
			continue;
		}
		if (c == '/' && s[i + 1] == '*') {
			size_t depth = 1;

			for (i += 2; depth > 0 && s[i] != '\0';) {
				if (s[i] == '/' && s[i + 1] == '*') {
					depth++;
					i += 2;
				} else if (s[i] == '*' && s[i + 1] == '/') {
					depth--;
					i += 2;
				} else {
					i++;
				}
			}
			if (depth > 0)
				open = "comment";
			continue;
		}
		if (lex_is_space((char)c)) {
			i++;
			continue;
		}
		if (c == ';') {
			ended = true;
			i++;
			continue;
		}
		if (ended)
			multi = true;
		if (c == '\'' || c == '"') {
			bool esc = c == '\'' && i > 0 && (s[i - 1] == 'E' || s[i - 1] == 'e') &&
			           (i < 2 || !lex_sql_ident_char(s[i - 2]));

			for (i++;; i++) {
				if (s[i] == '\0') {
					open = c == '\'' ? "string literal" : "quoted identifier";
					break;
				}
				if (esc && s[i] == '\\' && s[i + 1] != '\0') {
					i++;
					continue;
				}
				if (s[i] == c) {
					if (s[i + 1] == c) {
						i++;
						continue;
					}
					i++;
					break;
				}
			}
			continue;
		}
		if (c == '$' && (i == 0 || !lex_sql_ident_char(s[i - 1]))) {
			size_t t = i + 1, taglen, j;

			if (s[t] >= '0' && s[t] <= '9') {
				unsigned long n = 0;

				/* Saturate: anything past Postgres's 65535 parameters is wrong
				 * anyway. */
				for (; s[t] >= '0' && s[t] <= '9'; t++) {
					n = n * 10 + (unsigned long)(s[t] - '0');
					if (n > 1000000)
						n = 1000000;
				}
				if (n > max)
					max = n;
				i = t;
				continue;
			}
			while (lex_sql_tag_char(s[t]))
				t++;
			if (s[t] != '$') {
				i = t;
				continue;
			}
			taglen = t - i + 1;
			for (j = t + 1; s[j] != '\0'; j++) {
				if (s[j] == '$' && strncmp(sql + j, sql + i, taglen) == 0)
					break;
			}
			if (s[j] == '\0') {
				open = "dollar-quoted string";
				break;
			}
			i = j + taglen;
			continue;
		}
		i++;
	}
	*ret_multi = multi;
	*ret_unterminated = open;
	return max;
}
