/*
 * idem_lex.c - the Postgres-side text in the configuration: libpq conninfo strings, read by
 * libpq itself (PQconninfoParse()), and handler SQL, read by a lexer that follows the backend's
 * scan.l only as far as its one question needs. Neither connects nor prepares.
 */
#include "idem_lex.h"

#include <libpq-fe.h>
#include <string.h>

/* As libpq's recognized_connection_string(): a URI, or anything holding '='. */
static bool lex_is_conninfo(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0 ||
	       strchr(s, '=') != NULL;
}

/*
 * libpq's own parser reads @s (without defaults from the environment or a service file); a
 * dbname that is itself a conninfo string or a URI is read too, once (@depth), as libpq
 * expands it.
 */
static idem_status lex_conninfo_password(const char *s, int depth, bool *ret)
{
	PQconninfoOption *opts;
	char *errmsg = NULL;
	idem_status r = IDEM_OK;

	*ret = false;
	opts = PQconninfoParse(s, &errmsg);
	if (opts == NULL) {
		if (errmsg == NULL)
			return IDEM_ERR_NOMEM;
		/* libpq would refuse to connect with it. Its message is not kept: it may quote the
		 * very part that holds a password (a bad percent-encoding of one, say). */
		PQfreemem(errmsg);
		return IDEM_ERR_INVALID;
	}
	for (const PQconninfoOption *o = opts; o->keyword != NULL && !*ret; o++) {
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "password") == 0 && o->val[0] != '\0')
			*ret = true;
		else if (strcmp(o->keyword, "dbname") == 0 && depth == 0 && lex_is_conninfo(o->val))
			r = lex_conninfo_password(o->val, depth + 1, ret);
		if (r != IDEM_OK)
			break;
	}
	PQconninfoFree(opts);
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

static bool lex_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
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
