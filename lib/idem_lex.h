/*
 * idem_lex.h - reading the Postgres-side text in the configuration.
 *
 * The configuration checks two strings meant for Postgres without a server: the conninfo (does
 * it carry a password?) and each handler statement (which $N does it use, is it one statement,
 * is anything left open?). Both answers must match what libpq and the backend's lexer would
 * see: the conninfo is read by libpq itself (PQconninfoParse()), the statement by a lexer
 * following the backend's. Both live here, apart from the YAML schema that asks the questions.
 */
#ifndef IDEM_LEX_H
#define IDEM_LEX_H

#include "idem_common.h"

/*
 * @brief Does libpq conninfo @conninfo (keyword=value or URI form) carry a password?
 * Asks libpq's own parser (PQconninfoParse(), no defaults from the environment): a non-empty
 * password keyword (quoted and escaped values included), the user info of a postgres:// or
 * postgresql:// URI, its percent-encoded ?password= query key, and a dbname that is itself a
 * conninfo string or a URI (expanded once, as libpq does).
 * @param ret_has_password on success, the answer.
 * @returns IDEM_OK, IDEM_ERR_INVALID if libpq cannot read it (the string, or the dbname it
 *          expands: it would refuse to connect), or IDEM_ERR_NOMEM.
 */
IDEM_NODISCARD idem_status idem_lex_conninfo_has_password(const char *conninfo,
                                                          bool *ret_has_password);

/*
 * @brief The highest $N in @sql (at most 1000000), 0 if none.
 * Skips what Postgres's lexer skips: '...' strings (E'...' with backslash escapes), "..."
 * identifiers, -- comments, nested C-style comments and $tag$...$tag$ strings. A '$' inside an
 * identifier (a$1) is part of the identifier.
 * @param ret_multi set true when more SQL follows a ';' (more than one statement).
 * @param ret_unterminated set to what is left open at the end ("string literal", ...) or NULL.
 */
unsigned long idem_lex_sql_params(const char *sql, bool *ret_multi, const char **ret_unterminated);

#endif
