/*
 * idem_protobuf_scan.c - the check of a .proto text against idem_limits.h's bounds before
 * libprotoc parses it (idem_pb_scan(); ARCHITECTURE.md "Schema bounds").
 *
 * libprotoc's parser recurses once per nested block (a message in a message, an enum, a oneof,
 * a group, the recovery that skips a broken block), and the text format of an aggregate option
 * once per nested { or <, all on the thread that parses: 20,000 nested messages, 240 KB of
 * text, overflowed a fetcher thread's stack. This scanner reads the text as libprotobuf's
 * tokenizer does (// and block comments, string literals in either quote with its escapes, a
 * string ending at a line's end) without recursing, and keeps the open brackets on a stack of
 * its own; a closing bracket pops only the one it matches, so the depth it counts is never
 * below the parser's, however broken the text.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "idem_limits.h"
#include "idem_protobuf.h"

struct scan {
	const char *p;
	size_t len, i;
	int line, col; /* of p[i], 1-based */
};

static void advance(struct scan *s)
{
	if (s->p[s->i] == '\n') {
		s->line++;
		s->col = 1;
	} else {
		s->col++;
	}
	s->i++;
}

static bool at(const struct scan *s, size_t k, char c)
{
	return s->i + k < s->len && s->p[s->i + k] == c;
}

static bool ident_start(unsigned char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool ident_char(unsigned char c)
{
	return ident_start(c) || (c >= '0' && c <= '9');
}

/* A string literal from its opening quote: as the tokenizer, it ends at the same quote, a line's
 * end, a NUL byte or the text's end; a backslash escapes the next character only if it is an
 * escape. */
static void skip_string(struct scan *s)
{
	char q = s->p[s->i];

	advance(s);
	while (s->i < s->len && s->p[s->i] != q && s->p[s->i] != '\n' && s->p[s->i] != '\0') {
		if (s->p[s->i] == '\\' && s->i + 1 < s->len &&
		    strchr("abfnrtv\\?'\"", s->p[s->i + 1]) != NULL && s->p[s->i + 1] != '\0')
			advance(s);
		advance(s);
	}
	if (s->i < s->len && s->p[s->i] == q)
		advance(s);
}

/* Whether @w (@n bytes) is a keyword that starts a definition: message Name, enum Name, ... */
static bool definition_keyword(const char *w, size_t n)
{
	static const char *const kw[] = {
		"message", "enum", "group", "oneof", "service", "extend"
	};

	for (size_t k = 0; k < sizeof(kw) / sizeof(kw[0]); k++) {
		if (strlen(kw[k]) == n && memcmp(kw[k], w, n) == 0)
			return true;
	}
	return false;
}

static char closer_of(char c)
{
	switch (c) {
	case '{':
		return '}';
	case '<':
		return '>';
	case '[':
		return ']';
	default:
		return ')';
	}
}

idem_status idem_pb_scan(const char *text, size_t len, idem_error *err)
{
	struct scan s = { .p = text, .len = len, .line = 1, .col = 1 };
	char open[IDEM_SCHEMA_MAX_DEPTH];
	size_t depth = 0, definitions = 0, imports = 0;
	bool after_keyword = false;  /* the last token was a definition keyword */
	bool statement_start = true; /* the last token ended a statement (or none yet) */
	int kw_line = 0, kw_col = 0;

	while (s.i < s.len) {
		unsigned char c = (unsigned char)s.p[s.i];
		int line = s.line, col = s.col;

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
			advance(&s);
			continue;
		}
		/* Comments end at a NUL byte too, as the tokenizer's do (it skips the NUL). */
		if (c == '/' && at(&s, 1, '/')) {
			while (s.i < s.len && s.p[s.i] != '\n' && s.p[s.i] != '\0')
				advance(&s);
			continue;
		}
		if (c == '/' && at(&s, 1, '*')) {
			advance(&s);
			advance(&s);
			while (s.i < s.len && s.p[s.i] != '\0' &&
			       !(s.p[s.i] == '*' && at(&s, 1, '/')))
				advance(&s);
			if (s.i < s.len && s.p[s.i] == '*') {
				advance(&s);
				advance(&s);
			}
			continue;
		}
		if (ident_start(c)) {
			size_t from = s.i;

			while (s.i < s.len && ident_char((unsigned char)s.p[s.i]))
				advance(&s);
			if (after_keyword && ++definitions > IDEM_SCHEMA_MAX_DEFINITIONS)
				return idem_error_set(
				        err, IDEM_ERR_INVALID,
				        "line %d:%d: more definitions (messages, enums, groups, oneofs, services, extends) than the bound of %d",
				        kw_line, kw_col, IDEM_SCHEMA_MAX_DEFINITIONS);
			if (statement_start && depth == 0 && s.i - from == 6 &&
			    memcmp(s.p + from, "import", 6) == 0 &&
			    ++imports > IDEM_SCHEMA_MAX_IMPORTS)
				return idem_error_set(
				        err, IDEM_ERR_INVALID,
				        "line %d:%d: more imports than the bound of %d", line, col,
				        IDEM_SCHEMA_MAX_IMPORTS);
			after_keyword = definition_keyword(s.p + from, s.i - from);
			kw_line = line;
			kw_col = col;
			statement_start = false;
			continue;
		}
		after_keyword = false;
		statement_start = false;
		if (c == '"' || c == '\'') {
			skip_string(&s);
			continue;
		}
		advance(&s);
		switch (c) {
		case '{':
		case '<':
		case '[':
		case '(':
			if (depth == IDEM_SCHEMA_MAX_DEPTH)
				return idem_error_set(
				        err, IDEM_ERR_INVALID,
				        "line %d:%d: nested deeper than the bound of %d levels",
				        line, col, IDEM_SCHEMA_MAX_DEPTH);
			open[depth++] = (char)c;
			statement_start = c == '{';
			break;
		case '}':
		case '>':
		case ']':
		case ')':
			if (depth > 0 && closer_of(open[depth - 1]) == (char)c)
				depth--;
			statement_start = c == '}';
			break;
		case ';':
			statement_start = true;
			break;
		default:
			break;
		}
	}
	return IDEM_OK;
}
