/*
 * idem_pg.c - the batch transaction.
 *
 * Fast path, in libpq pipeline mode (three round trips per batch whatever its size):
 *   1. BEGIN; claim every unique key of the batch with one INSERT ... ON CONFLICT DO NOTHING
 *      RETURNING over unnest()ed arrays, keys in sorted order;
 *   2. the handler once per newly claimed message, in offset order;
 *   3. store the handlers' results; quarantine undecodable messages; advance
 *      idem.partition_progress with the batch's counters; COMMIT.
 * Slow path, only after a message-specific handler failure: the same work with a SAVEPOINT
 * around each message's claim and handler, so a failing message takes its claim with it.
 */
#include "idem_pg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_log.h"
#include "idem_migrate.h"

struct idem_pg {
	const struct idem_cfg *cfg;
	PGconn *conn;
	struct idem_buf keys, offs, hashes; /* array literals for the claim */
	struct idem_buf rkeys, rvals;       /* array literals for the results */
	struct idem_buf hnames, hvals;      /* array literals for quarantined headers */
	const char **vals;                  /* parameter pointers, reused */
	int *lens, *fmts;
	size_t cap_vals;
	size_t *applied; /* indices of messages whose handler must run, in offset order */
	size_t cap_applied;
};

static const char SQL_CLAIM[] =
        "INSERT INTO idem.processed_messages"
        " (consumer, business_key, topic, partition, \"offset\", payload_hash)"
        " SELECT $1, u.k, $2, $3, u.o, decode(u.h, 'hex')"
        " FROM unnest($4::text[], $5::bigint[], $6::text[]) AS u(k, o, h)"
        " ON CONFLICT DO NOTHING RETURNING business_key";

static const char SQL_RESULTS[] = "UPDATE idem.processed_messages AS p SET result = u.r"
                                  " FROM unnest($2::text[], $3::text[]) AS u(k, r)"
                                  " WHERE p.consumer = $1 AND p.business_key = u.k";

static const char SQL_PROGRESS[] =
        "INSERT INTO idem.partition_progress AS p"
        " (consumer, topic, partition, next_offset, consumed, applied, duplicates, quarantined)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        " ON CONFLICT (consumer, topic, partition) DO UPDATE SET"
        " next_offset = greatest(p.next_offset, excluded.next_offset),"
        " consumed = p.consumed + excluded.consumed, applied = p.applied + excluded.applied,"
        " duplicates = p.duplicates + excluded.duplicates,"
        " quarantined = p.quarantined + excluded.quarantined, updated_at = now()";

static const char SQL_QUARANTINE[] =
        "INSERT INTO idem.quarantine (consumer, topic, partition, \"offset\", business_key,"
        " msg_key, msg_value, header_names, header_values, msg_timestamp, reason, sqlstate,"
        " attempts)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text[], $9::bytea[],"
        " to_timestamp($10::bigint / 1000.0), $11, nullif($12, ''), $13)"
        " ON CONFLICT (consumer, topic, partition, \"offset\") DO UPDATE SET"
        " attempts = idem.quarantine.attempts + excluded.attempts, reason = excluded.reason,"
        " sqlstate = excluded.sqlstate, last_failed_at = now()";

enum idem_pg_class idem_pg_classify(const char *s)
{
	if (s == NULL || s[0] == '\0')
		return IDEM_PG_TRANSIENT; /* no answer from the server: the connection failed */
	if (strncmp(s, "08", 2) == 0 || strncmp(s, "53", 2) == 0 || strncmp(s, "57P0", 4) == 0 ||
	    strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0 || strcmp(s, "55P03") == 0 ||
	    strcmp(s, "57014") == 0 || strncmp(s, "58", 2) == 0)
		return IDEM_PG_TRANSIENT;
	if (strncmp(s, "22", 2) == 0 || strncmp(s, "23", 2) == 0 || strncmp(s, "P0", 2) == 0 ||
	    strncmp(s, "54", 2) == 0)
		return IDEM_PG_MESSAGE;
	/* 42 (undefined object, syntax, privileges) and everything unexpected: do not turn a
	 * broken handler or schema into a flood of quarantined messages. */
	return IDEM_PG_BROKEN;
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

static idem_status read_password(const struct idem_cfg *cfg, char *buf, size_t len, bool *ret_set,
                                 idem_error *err)
{
	*ret_set = false;
	if (cfg->password_env != NULL) {
		const char *v = getenv(cfg->password_env);

		if (v == NULL)
			return idem_error_set(
			        err, IDEM_ERR_CONFIG,
			        "postgres.password_env: environment variable '%s' is not set",
			        cfg->password_env);
		snprintf(buf, len, "%s", v);
		*ret_set = true;
	} else if (cfg->password_file != NULL) {
		FILE *f = fopen(cfg->password_file, "r");

		if (f == NULL)
			return idem_error_set(err, IDEM_ERR_CONFIG,
			                      "postgres.password_file: cannot open '%s': %s",
			                      cfg->password_file, strerror(errno));
		if (fgets(buf, (int)len, f) == NULL)
			buf[0] = '\0';
		fclose(f);
		buf[strcspn(buf, "\r\n")] = '\0';
		*ret_set = true;
	}
	return IDEM_OK;
}

/* Overwrite a secret; the volatile pointer keeps the compiler from dropping the stores. */
static void wipe(char *p, size_t n)
{
	volatile char *v = p;

	while (n-- > 0)
		*v++ = 0;
}

idem_status idem_pg_conn_open(const struct idem_cfg *cfg, const char *app_name, PGconn **ret_conn,
                              idem_error *err)
{
	const char *kw[4] = { "dbname", "fallback_application_name", NULL, NULL };
	const char *vals[4] = { cfg->conninfo, app_name, NULL, NULL };
	char password[1024];
	bool have_pw;
	PGconn *conn;
	idem_status r;

	r = read_password(cfg, password, sizeof(password), &have_pw, err);
	if (r != IDEM_OK)
		return r;
	if (have_pw) {
		kw[2] = "password";
		vals[2] = password;
	}
	conn = PQconnectdbParams(kw, vals, 1);
	wipe(password, sizeof(password));
	if (conn == NULL)
		return idem_error_set(err, IDEM_ERR_NOMEM, "cannot allocate a connection");
	if (PQstatus(conn) != CONNECTION_OK) {
		idem_pg_error(err, conn, NULL, "cannot connect to postgres");
		PQfinish(conn);
		return IDEM_ERR_PG;
	}
	*ret_conn = conn;
	return IDEM_OK;
}

static idem_status exec_ok(PGconn *conn, const char *sql, const char *what, idem_error *err)
{
	PGresult *res = PQexec(conn, sql);
	idem_status r = IDEM_OK;

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		r = idem_pg_error(err, conn, res, what);
	PQclear(res);
	return r;
}

static idem_status prepare(PGconn *conn, const char *name, const char *sql, int nparams,
                           const char *what, idem_error *err)
{
	PGresult *res = PQprepare(conn, name, sql, nparams, NULL);
	idem_status r = IDEM_OK;

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		r = idem_pg_error(err, conn, res, what);
	PQclear(res);
	return r;
}

static idem_status check_schema(PGconn *conn, idem_error *err)
{
	PGresult *res =
	        PQexec(conn, "SELECT coalesce(max(version), 0) FROM idem.schema_migrations");
	idem_status r = IDEM_OK;
	int have;

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = idem_pg_error(err, conn, res, "schema check failed (run 'idemctl migrate')");
		goto out_clear;
	}
	have = atoi(PQgetvalue(res, 0, 0));
	if (have < idem_migrate_latest()) {
		r = idem_error_set(
		        err, IDEM_ERR_PG,
		        "database schema is at version %d, idemd needs %d: run 'idemctl migrate'",
		        have, idem_migrate_latest());
		if (err != NULL)
			snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", "42P01");
	}
out_clear:
	PQclear(res);
	return r;
}

static idem_status setup(idem_pg *pg, idem_error *err)
{
	char name[32], what[256];
	idem_status r;

	r = idem_pg_conn_open(pg->cfg, "idemd", &pg->conn, err);
	if (r != IDEM_OK)
		return r;
	if ((r = check_schema(pg->conn, err)) != IDEM_OK)
		return r;
	if ((r = prepare(pg->conn, "idem_claim", SQL_CLAIM, 6, "prepare claim", err)) != IDEM_OK ||
	    (r = prepare(pg->conn, "idem_results", SQL_RESULTS, 3, "prepare results", err)) !=
	            IDEM_OK ||
	    (r = prepare(pg->conn, "idem_progress", SQL_PROGRESS, 8, "prepare progress", err)) !=
	            IDEM_OK ||
	    (r = prepare(pg->conn, "idem_quarantine", SQL_QUARANTINE, 13, "prepare quarantine",
	                 err)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < pg->cfg->n_routes; i++) {
		const struct idem_route *rt = &pg->cfg->routes[i];

		snprintf(name, sizeof(name), "idem_h%zu", i);
		snprintf(what, sizeof(what), "route '%s': handler sql does not prepare", rt->name);
		r = prepare(pg->conn, name, rt->handler_sql, (int)rt->n_params, what, err);
		if (r != IDEM_OK)
			return r;
	}
	return IDEM_OK;
}

idem_status idem_pg_new(const struct idem_cfg *cfg, idem_pg **ret_pg, idem_error *err)
{
	idem_pg *pg = calloc(1, sizeof(*pg));
	idem_status r;

	if (pg == NULL)
		return idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
	pg->cfg = cfg;
	r = setup(pg, err);
	if (r != IDEM_OK) {
		idem_pg_free(pg);
		return r;
	}
	*ret_pg = pg;
	return IDEM_OK;
}

void idem_pg_free(idem_pg *pg)
{
	if (pg == NULL)
		return;
	if (pg->conn != NULL)
		PQfinish(pg->conn);
	idem_buf_done(&pg->keys);
	idem_buf_done(&pg->offs);
	idem_buf_done(&pg->hashes);
	idem_buf_done(&pg->rkeys);
	idem_buf_done(&pg->rvals);
	idem_buf_done(&pg->hnames);
	idem_buf_done(&pg->hvals);
	free(pg->vals);
	free(pg->lens);
	free(pg->fmts);
	free(pg->applied);
	free(pg);
}

idem_status idem_pg_reconnect(idem_pg *pg, idem_error *err)
{
	if (pg->conn != NULL)
		PQfinish(pg->conn);
	pg->conn = NULL;
	return setup(pg, err);
}

bool idem_pg_connected(const idem_pg *pg)
{
	return pg->conn != NULL && PQstatus(pg->conn) == CONNECTION_OK;
}

/* Append one element to a text-format array literal ("{...}" built by the caller). */
static idem_status arr_add(struct idem_buf *a, const char *s, size_t n, bool null)
{
	if (a->len > 1 && idem_buf_append(a, ",", 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (null)
		return idem_buf_append(a, "NULL", 4);
	if (idem_buf_reserve(a, 2 * n + 2) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	a->data[a->len++] = '"';
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			a->data[a->len++] = '\\';
		a->data[a->len++] = s[i];
	}
	a->data[a->len++] = '"';
	a->data[a->len] = '\0';
	return IDEM_OK;
}

static idem_status arr_open(struct idem_buf *a)
{
	idem_buf_reset(a);
	return idem_buf_append(a, "{", 1);
}

static idem_status arr_close(struct idem_buf *a)
{
	return idem_buf_append(a, "}", 1);
}

static idem_status need_vals(idem_pg *pg, size_t n)
{
	if (n <= pg->cap_vals)
		return IDEM_OK;
	free(pg->vals);
	free(pg->lens);
	free(pg->fmts);
	pg->vals = calloc(n, sizeof(*pg->vals));
	pg->lens = calloc(n, sizeof(*pg->lens));
	pg->fmts = calloc(n, sizeof(*pg->fmts));
	pg->cap_vals = n;
	if (pg->vals == NULL || pg->lens == NULL || pg->fmts == NULL) {
		pg->cap_vals = 0;
		return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

/* Parameters for the claim of the keys b->order[from..to). */
static idem_status claim_params(idem_pg *pg, const struct idem_batch *b, size_t from, size_t to,
                                char *part, const char **vals)
{
	if (arr_open(&pg->keys) || arr_open(&pg->offs) || arr_open(&pg->hashes))
		return IDEM_ERR_NOMEM;
	for (size_t k = from; k < to; k++) {
		const struct idem_batch_msg *m = &b->msgs[b->order[k]];
		char off[24];
		int n = snprintf(off, sizeof(off), "%" PRId64, m->offset);

		if (arr_add(&pg->keys, idem_batch_ptr(b, m->bkey), m->bkey.len, false) ||
		    arr_add(&pg->offs, off, (size_t)n, false) ||
		    arr_add(&pg->hashes, idem_batch_ptr(b, m->hash), m->hash.len, m->hash.null))
			return IDEM_ERR_NOMEM;
	}
	if (arr_close(&pg->keys) || arr_close(&pg->offs) || arr_close(&pg->hashes))
		return IDEM_ERR_NOMEM;
	snprintf(part, 16, "%" PRId32, b->partition);
	vals[0] = b->route->consumer;
	vals[1] = b->topic;
	vals[2] = part;
	vals[3] = pg->keys.data;
	vals[4] = pg->offs.data;
	vals[5] = pg->hashes.data;
	return IDEM_OK;
}

/* Bind the handler parameters of message @i into pg->vals. */
static idem_status handler_params(idem_pg *pg, const struct idem_batch *b, size_t i)
{
	const struct idem_batch_msg *m = &b->msgs[i];
	size_t np = b->route->n_params;

	if (need_vals(pg, np + 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t p = 0; p < np; p++)
		pg->vals[p] = idem_batch_ptr(b, b->params[m->param_first + p]);
	return IDEM_OK;
}

static void count(const struct idem_batch *b, struct idem_flush_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->consumed = b->n_msgs;
	for (size_t i = 0; i < b->n_msgs; i++) {
		switch (b->msgs[i].state) {
		case IDEM_MSG_APPLIED:
			st->applied++;
			break;
		case IDEM_MSG_DUPLICATE:
		case IDEM_MSG_DUP_IN_BATCH:
			st->duplicates++;
			break;
		case IDEM_MSG_BAD:
		case IDEM_MSG_QUARANTINED:
			st->quarantined++;
			break;
		case IDEM_MSG_PENDING:
			break;
		}
	}
}

static int send_prepared(PGconn *conn, const char *name, int n, const char *const *vals,
                         const int *lens, const int *fmts)
{
	return PQsendQueryPrepared(conn, name, n, vals, lens, fmts, 0);
}

static idem_status results_params(idem_pg *pg, const struct idem_batch *b, bool *ret_any)
{
	*ret_any = false;
	if (arr_open(&pg->rkeys) || arr_open(&pg->rvals))
		return IDEM_ERR_NOMEM;
	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];

		if (m->state != IDEM_MSG_APPLIED || m->result.null)
			continue;
		if (arr_add(&pg->rkeys, idem_batch_ptr(b, m->bkey), m->bkey.len, false) ||
		    arr_add(&pg->rvals, idem_batch_ptr(b, m->result), m->result.len, false))
			return IDEM_ERR_NOMEM;
		*ret_any = true;
	}
	if (arr_close(&pg->rkeys) || arr_close(&pg->rvals))
		return IDEM_ERR_NOMEM;
	return IDEM_OK;
}

static idem_status hex_elem(struct idem_buf *a, const char *p, size_t n, bool null)
{
	static const char hex[] = "0123456789abcdef";

	if (a->len > 1 && idem_buf_append(a, ",", 1) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (null)
		return idem_buf_append(a, "NULL", 4);
	/* "\\x..." inside a quoted array element is the bytea hex input "\x...". */
	if (idem_buf_reserve(a, 2 * n + 6) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	memcpy(a->data + a->len, "\"\\\\x", 4);
	a->len += 4;
	for (size_t i = 0; i < n; i++) {
		a->data[a->len++] = hex[(unsigned char)p[i] >> 4];
		a->data[a->len++] = hex[(unsigned char)p[i] & 15];
	}
	a->data[a->len++] = '"';
	a->data[a->len] = '\0';
	return IDEM_OK;
}

/* Parameters for quarantining message @i. key and value are bound as binary bytea. */
static idem_status quarantine_params(idem_pg *pg, const struct idem_batch *b, size_t i, char *part,
                                     char *off, char *ts, char *att)
{
	const struct idem_batch_msg *m = &b->msgs[i];

	if (need_vals(pg, 13) != IDEM_OK || arr_open(&pg->hnames) || arr_open(&pg->hvals))
		return IDEM_ERR_NOMEM;
	for (size_t h = 0; h < m->n_hdrs; h++) {
		const struct idem_batch_hdr *hd = &b->hdrs[m->hdr_first + h];
		const char *name = idem_batch_ptr(b, hd->name);

		/* Header names are stored as text; a name that is not UTF-8 is stored as hex. */
		if (idem_utf8_valid(name, hd->name.len)) {
			if (arr_add(&pg->hnames, name, hd->name.len, false))
				return IDEM_ERR_NOMEM;
		} else if (hex_elem(&pg->hnames, name, hd->name.len, false)) {
			return IDEM_ERR_NOMEM;
		}
		if (hex_elem(&pg->hvals, idem_batch_ptr(b, hd->value), hd->value.len,
		             hd->value.null))
			return IDEM_ERR_NOMEM;
	}
	if (arr_close(&pg->hnames) || arr_close(&pg->hvals))
		return IDEM_ERR_NOMEM;
	snprintf(part, 16, "%" PRId32, b->partition);
	snprintf(off, 24, "%" PRId64, m->offset);
	snprintf(ts, 24, "%" PRId64, m->timestamp_ms);
	snprintf(att, 16, "%d", m->attempts > 0 ? m->attempts : 1);
	memset(pg->fmts, 0, 13 * sizeof(*pg->fmts));
	memset(pg->lens, 0, 13 * sizeof(*pg->lens));
	pg->vals[0] = b->route->consumer;
	pg->vals[1] = b->topic;
	pg->vals[2] = part;
	pg->vals[3] = off;
	pg->vals[4] = idem_batch_ptr(b, m->bkey);
	pg->vals[5] = idem_batch_ptr(b, m->key);
	pg->lens[5] = (int)m->key.len;
	pg->fmts[5] = 1;
	pg->vals[6] = idem_batch_ptr(b, m->value);
	pg->lens[6] = (int)m->value.len;
	pg->fmts[6] = 1;
	pg->vals[7] = pg->hnames.data;
	pg->vals[8] = pg->hvals.data;
	pg->vals[9] = m->timestamp_ms >= 0 ? ts : NULL;
	pg->vals[10] = idem_batch_ptr(b, m->reason);
	pg->vals[11] = m->sqlstate;
	pg->vals[12] = att;
	return IDEM_OK;
}

/* The message of a failed result, for the quarantine reason. */
static void result_reason(const PGresult *res, char *buf, size_t len)
{
	const char *prim = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *det = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

	snprintf(buf, len, "handler failed: %s%s%s", prim ? prim : "unknown error", det ? ": " : "",
	         det ? det : "");
}

/*
 * Send the closing statements in pipeline mode: results (if any), one quarantine insert per
 * bad message, progress, COMMIT. @ret_n counts the statements sent.
 */
static idem_status send_closing(idem_pg *pg, const struct idem_batch *b,
                                const struct idem_flush_stats *st, int *ret_n, idem_error *err)
{
	char part[16], off[24], ts[24], att[16], nx[24], c1[24], c2[24], c3[24], c4[24];
	const char *pv[8];
	bool any;
	int n = 0;

	if (results_params(pg, b, &any) != IDEM_OK)
		return idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
	if (any) {
		const char *rv[3] = { b->route->consumer, pg->rkeys.data, pg->rvals.data };

		if (!send_prepared(pg->conn, "idem_results", 3, rv, NULL, NULL))
			return idem_pg_error(err, pg->conn, NULL, "send results");
		n++;
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_BAD)
			continue;
		if (quarantine_params(pg, b, i, part, off, ts, att) != IDEM_OK)
			return idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
		/* libpq copies parameters at send time, so the buffers may be reused. */
		if (!send_prepared(pg->conn, "idem_quarantine", 13, pg->vals, pg->lens, pg->fmts))
			return idem_pg_error(err, pg->conn, NULL, "send quarantine");
		n++;
	}
	snprintf(part, sizeof(part), "%" PRId32, b->partition);
	snprintf(nx, sizeof(nx), "%" PRId64, b->msgs[b->n_msgs - 1].offset + 1);
	snprintf(c1, sizeof(c1), "%" PRIu64, st->consumed);
	snprintf(c2, sizeof(c2), "%" PRIu64, st->applied);
	snprintf(c3, sizeof(c3), "%" PRIu64, st->duplicates);
	snprintf(c4, sizeof(c4), "%" PRIu64, st->quarantined);
	pv[0] = b->route->consumer;
	pv[1] = b->topic;
	pv[2] = part;
	pv[3] = nx;
	pv[4] = c1;
	pv[5] = c2;
	pv[6] = c3;
	pv[7] = c4;
	if (!send_prepared(pg->conn, "idem_progress", 8, pv, NULL, NULL) ||
	    !PQsendQueryParams(pg->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0))
		return idem_pg_error(err, pg->conn, NULL, "send commit");
	*ret_n = n + 2;
	return IDEM_OK;
}

/*
 * Read the result of the next pipelined statement: one PGresult then NULL. Returns the status
 * and keeps the result in *ret_res (caller clears) when @keep.
 */
static ExecStatusType next_result(PGconn *conn, PGresult **ret_res)
{
	PGresult *res = PQgetResult(conn), *extra;
	ExecStatusType st;

	if (res == NULL) {
		*ret_res = NULL;
		return PGRES_FATAL_ERROR;
	}
	st = PQresultStatus(res);
	if (st != PGRES_PIPELINE_SYNC) {
		/* Each query's results are followed by a NULL. */
		while ((extra = PQgetResult(conn)) != NULL)
			PQclear(extra);
	}
	*ret_res = res;
	return st;
}

/* After a failure in pipeline mode: drain to the sync, leave pipeline mode, roll back. */
static void pipeline_abort(idem_pg *pg, bool sync_sent)
{
	PGresult *res;

	if (PQstatus(pg->conn) != CONNECTION_OK)
		return;
	if (!sync_sent && !PQpipelineSync(pg->conn))
		return;
	for (;;) {
		res = PQgetResult(pg->conn);
		if (res == NULL) {
			if (PQstatus(pg->conn) != CONNECTION_OK)
				return;
			continue;
		}
		if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
			PQclear(res);
			break;
		}
		PQclear(res);
	}
	PQexitPipelineMode(pg->conn);
	res = PQexec(pg->conn, "ROLLBACK");
	PQclear(res);
}

/* Outcome of the fast path: done, or redo on the slow path, or an error to return. */
enum fast_outcome { FAST_DONE, FAST_SLOW, FAST_ERROR };

static enum fast_outcome fast_path(idem_pg *pg, struct idem_batch *b, struct idem_flush_stats *st,
                                   idem_error *err)
{
	char part[16];
	const char *cv[6];
	PGresult *res = NULL;
	size_t n_apply = 0;
	int n_close = 0;
	char hname[32];

	snprintf(hname, sizeof(hname), "idem_h%zu", (size_t)(b->route - pg->cfg->routes));
	if (!PQenterPipelineMode(pg->conn)) {
		idem_pg_error(err, pg->conn, NULL, "enter pipeline mode");
		return FAST_ERROR;
	}

	/* Round trip 1: BEGIN and the claim. */
	if (!PQsendQueryParams(pg->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0))
		goto fail_conn;
	if (b->n_order > 0) {
		if (claim_params(pg, b, 0, b->n_order, part, cv) != IDEM_OK)
			goto fail_nomem;
		if (!send_prepared(pg->conn, "idem_claim", 6, cv, NULL, NULL))
			goto fail_conn;
	}
	if (!PQsendFlushRequest(pg->conn) || PQflush(pg->conn) != 0)
		goto fail_conn;
	if (next_result(pg->conn, &res) != PGRES_COMMAND_OK)
		goto fail_res;
	PQclear(res);
	res = NULL;
	if (b->n_order > 0) {
		if (next_result(pg->conn, &res) != PGRES_TUPLES_OK)
			goto fail_res;
		for (int r = 0; r < PQntuples(res); r++) {
			ssize_t i = idem_batch_find_key(b, PQgetvalue(res, r, 0),
			                                (size_t)PQgetlength(res, r, 0));

			if (i >= 0)
				b->msgs[i].state = IDEM_MSG_APPLIED;
		}
		PQclear(res);
		res = NULL;
	}
	/* Unclaimed keys belong to someone else already: duplicates. The handler runs for the
	 * claimed ones in offset order. */
	if (b->n_msgs > pg->cap_applied) {
		free(pg->applied);
		pg->applied = malloc(b->n_msgs * sizeof(*pg->applied));
		pg->cap_applied = pg->applied ? b->n_msgs : 0;
		if (pg->applied == NULL)
			goto fail_nomem;
	}
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_PENDING)
			b->msgs[i].state = IDEM_MSG_DUPLICATE;
		else if (b->msgs[i].state == IDEM_MSG_APPLIED)
			pg->applied[n_apply++] = i;
	}

	/* Round trip 2: the handlers. */
	for (size_t k = 0; k < n_apply; k++) {
		if (handler_params(pg, b, pg->applied[k]) != IDEM_OK)
			goto fail_nomem;
		if (!PQsendQueryPrepared(pg->conn, hname, (int)b->route->n_params, pg->vals, NULL,
		                         NULL, 0))
			goto fail_conn;
	}
	if (n_apply > 0) {
		if (!PQsendFlushRequest(pg->conn) || PQflush(pg->conn) != 0)
			goto fail_conn;
		for (size_t k = 0; k < n_apply; k++) {
			ExecStatusType s = next_result(pg->conn, &res);
			size_t i = pg->applied[k];

			if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
				const char *state =
				        res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

				if (res != NULL && idem_pg_classify(state) == IDEM_PG_MESSAGE) {
					PQclear(res);
					pipeline_abort(pg, false);
					return FAST_SLOW;
				}
				goto fail_res;
			}
			if (PQntuples(res) > 0 && PQnfields(res) > 0 &&
			    idem_batch_set_result(b, i, PQgetvalue(res, 0, 0),
			                          (size_t)PQgetlength(res, 0, 0),
			                          PQgetisnull(res, 0, 0)) != IDEM_OK)
				goto fail_nomem;
			PQclear(res);
			res = NULL;
		}
	}

	/* Round trip 3: results, quarantine, progress, COMMIT. */
	count(b, st);
	if (send_closing(pg, b, st, &n_close, err) != IDEM_OK) {
		pipeline_abort(pg, false);
		return FAST_ERROR;
	}
	if (!PQpipelineSync(pg->conn))
		goto fail_conn;
	for (int k = 0; k < n_close; k++) {
		ExecStatusType s = next_result(pg->conn, &res);

		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
			idem_pg_error(err, pg->conn, res, "batch commit");
			PQclear(res);
			pipeline_abort(pg, true);
			return FAST_ERROR;
		}
		PQclear(res);
		res = NULL;
	}
	if (next_result(pg->conn, &res) != PGRES_PIPELINE_SYNC) {
		idem_pg_error(err, pg->conn, res, "batch sync");
		PQclear(res);
		return FAST_ERROR;
	}
	PQclear(res);
	PQexitPipelineMode(pg->conn);
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_BAD)
			b->msgs[i].state = IDEM_MSG_QUARANTINED;
	}
	return FAST_DONE;

fail_nomem:
	idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
	pipeline_abort(pg, false);
	return FAST_ERROR;
fail_conn:
	idem_pg_error(err, pg->conn, NULL, "batch send");
	pipeline_abort(pg, false);
	return FAST_ERROR;
fail_res:
	idem_pg_error(err, pg->conn, res, "batch");
	PQclear(res);
	pipeline_abort(pg, false);
	return FAST_ERROR;
}

static idem_status exec_params(idem_pg *pg, const char *name, int n, const char *const *vals,
                               const int *lens, const int *fmts, PGresult **ret_res)
{
	PGresult *res = PQexecPrepared(pg->conn, name, n, vals, lens, fmts, 0);
	ExecStatusType s = PQresultStatus(res);

	*ret_res = res;
	return (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK) ? IDEM_OK : IDEM_ERR_PG;
}

/*
 * One message on the slow path, inside SAVEPOINT m: claim, then handler. A message-specific
 * failure rolls back to the savepoint (taking the claim with it) and is retried up to
 * IDEM_PG_MAX_ATTEMPTS times, then the message becomes BAD. Other failures end the batch.
 */
static idem_status slow_one(idem_pg *pg, struct idem_batch *b, size_t i, const char *hname,
                            idem_error *err)
{
	struct idem_batch_msg *m = &b->msgs[i];
	const char *cv[6];
	char part[16], why[512] = "";
	PGresult *res;
	size_t pos;
	idem_status r;

	/* A one-key claim: reuse the claim statement over a one-element slice of b->order. */
	for (pos = 0; pos < b->n_order && b->order[pos] != i; pos++)
		;
	for (int attempt = 1; attempt <= IDEM_PG_MAX_ATTEMPTS; attempt++) {
		m->attempts = attempt;
		if ((r = exec_ok(pg->conn, "SAVEPOINT idem_msg", "savepoint", err)) != IDEM_OK)
			return r;
		if (claim_params(pg, b, pos, pos + 1, part, cv) != IDEM_OK)
			return idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
		if (exec_params(pg, "idem_claim", 6, cv, NULL, NULL, &res) != IDEM_OK) {
			r = idem_pg_error(err, pg->conn, res, "claim");
			PQclear(res);
			return r;
		}
		if (PQntuples(res) == 0) {
			PQclear(res);
			m->state = IDEM_MSG_DUPLICATE;
			return exec_ok(pg->conn, "RELEASE SAVEPOINT idem_msg", "release", err);
		}
		PQclear(res);
		if (handler_params(pg, b, i) != IDEM_OK)
			return idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
		if (exec_params(pg, hname, (int)b->route->n_params, pg->vals, NULL, NULL, &res) ==
		    IDEM_OK) {
			if (PQntuples(res) > 0 && PQnfields(res) > 0 &&
			    idem_batch_set_result(b, i, PQgetvalue(res, 0, 0),
			                          (size_t)PQgetlength(res, 0, 0),
			                          PQgetisnull(res, 0, 0)) != IDEM_OK) {
				PQclear(res);
				return idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
			}
			PQclear(res);
			m->state = IDEM_MSG_APPLIED;
			return exec_ok(pg->conn, "RELEASE SAVEPOINT idem_msg", "release", err);
		}
		if (idem_pg_classify(PQresultErrorField(res, PG_DIAG_SQLSTATE)) !=
		    IDEM_PG_MESSAGE) {
			r = idem_pg_error(err, pg->conn, res, "handler");
			PQclear(res);
			return r;
		}
		result_reason(res, why, sizeof(why));
		snprintf(m->sqlstate, sizeof(m->sqlstate), "%s",
		         PQresultErrorField(res, PG_DIAG_SQLSTATE));
		PQclear(res);
		if ((r = exec_ok(pg->conn, "ROLLBACK TO SAVEPOINT idem_msg",
		                 "rollback to savepoint", err)) != IDEM_OK)
			return r;
	}
	m->state = IDEM_MSG_BAD;
	return idem_batch_set_reason(b, i, why, m->sqlstate) == IDEM_OK
	               ? IDEM_OK
	               : idem_error_set(err, IDEM_ERR_NOMEM, "out of memory");
}

static idem_status slow_path(idem_pg *pg, struct idem_batch *b, struct idem_flush_stats *st,
                             idem_error *err)
{
	char hname[32];
	PGresult *res;
	int n_close = 0;
	idem_status r;

	snprintf(hname, sizeof(hname), "idem_h%zu", (size_t)(b->route - pg->cfg->routes));
	/* Every decodable message gets its own attempt, in offset order: an in-batch duplicate
	 * whose first copy fails must still be able to claim the key. */
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_BAD)
			b->msgs[i].state = IDEM_MSG_PENDING;
	}
	/* The one-key claims need each message in b->order: list them all, in offset order. */
	b->n_order = 0;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_PENDING)
			b->order[b->n_order++] = i;
	}
	if ((r = exec_ok(pg->conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state != IDEM_MSG_PENDING)
			continue;
		if ((r = slow_one(pg, b, i, hname, err)) != IDEM_OK)
			goto out_rollback;
	}
	count(b, st);
	st->slow_path = true;
	if (!PQenterPipelineMode(pg->conn)) {
		r = idem_pg_error(err, pg->conn, NULL, "enter pipeline mode");
		goto out_rollback;
	}
	if ((r = send_closing(pg, b, st, &n_close, err)) != IDEM_OK) {
		pipeline_abort(pg, false);
		return r;
	}
	if (!PQpipelineSync(pg->conn)) {
		r = idem_pg_error(err, pg->conn, NULL, "sync");
		pipeline_abort(pg, false);
		return r;
	}
	for (int k = 0; k < n_close; k++) {
		ExecStatusType s = next_result(pg->conn, &res);

		if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
			r = idem_pg_error(err, pg->conn, res, "batch commit");
			PQclear(res);
			pipeline_abort(pg, true);
			return r;
		}
		PQclear(res);
	}
	if (next_result(pg->conn, &res) != PGRES_PIPELINE_SYNC) {
		r = idem_pg_error(err, pg->conn, res, "batch sync");
		PQclear(res);
		return r;
	}
	PQclear(res);
	PQexitPipelineMode(pg->conn);
	for (size_t i = 0; i < b->n_msgs; i++) {
		if (b->msgs[i].state == IDEM_MSG_BAD)
			b->msgs[i].state = IDEM_MSG_QUARANTINED;
	}
	return IDEM_OK;

out_rollback:
	if (PQstatus(pg->conn) == CONNECTION_OK) {
		res = PQexec(pg->conn, "ROLLBACK");
		PQclear(res);
	}
	return r;
}

idem_status idem_pg_flush(idem_pg *pg, struct idem_batch *b, struct idem_flush_stats *ret_stats,
                          idem_error *err)
{
	struct idem_flush_stats st;
	idem_status r;

	if (b->n_msgs == 0) {
		memset(ret_stats, 0, sizeof(*ret_stats));
		return IDEM_OK;
	}
	if (!idem_pg_connected(pg) && (r = idem_pg_reconnect(pg, err)) != IDEM_OK)
		return r;
	/* A retry starts from the decoded state: undo what an earlier attempt marked. */
	for (size_t i = 0; i < b->n_msgs; i++) {
		struct idem_batch_msg *m = &b->msgs[i];

		if (m->state == IDEM_MSG_BAD && m->sqlstate[0] != '\0') {
			m->state = IDEM_MSG_PENDING; /* failed a handler earlier: try again */
			m->sqlstate[0] = '\0';
		} else if (m->state != IDEM_MSG_BAD) {
			m->state = IDEM_MSG_PENDING;
		}
		m->result.null = true;
	}
	if ((r = idem_batch_collapse(b)) != IDEM_OK)
		return idem_error_set(err, r, "out of memory");
	switch (fast_path(pg, b, &st, err)) {
	case FAST_DONE:
		*ret_stats = st;
		return IDEM_OK;
	case FAST_ERROR:
		r = err ? err->code : IDEM_ERR_PG;
		goto out_reset;
	case FAST_SLOW:
		break;
	}
	if (!idem_pg_connected(pg)) {
		r = idem_pg_error(err, pg->conn, NULL, "connection lost");
		goto out_reset;
	}
	r = slow_path(pg, b, &st, err);
	if (r == IDEM_OK) {
		*ret_stats = st;
		return IDEM_OK;
	}
out_reset:
	/* A connection left mid-pipeline or mid-transaction by a failure is not worth saving:
	 * drop it, and the next attempt starts on a fresh one. */
	if (pg->conn != NULL &&
	    (PQstatus(pg->conn) != CONNECTION_OK || PQpipelineStatus(pg->conn) != PQ_PIPELINE_OFF ||
	     PQtransactionStatus(pg->conn) != PQTRANS_IDLE)) {
		PQfinish(pg->conn);
		pg->conn = NULL;
	}
	return r;
}
