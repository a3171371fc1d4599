/*
 * idem_quarantine.c - reading and resolving idem.quarantine.
 *
 * Bytes travel as hex text (encode()/decode()) so that every query is plain text format; rows
 * are few and read by an operator, not on the hot path.
 */
#include "idem_quarantine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_batch.h"
#include "idem_esc.h"
#include "idem_schemas.h"
#include "idem_sql.h"

static char *dup_text(PGresult *res, int row, int col, bool *nomem)
{
	char *s;

	if (PQgetisnull(res, row, col))
		return NULL;
	s = strdup(PQgetvalue(res, row, col));
	if (s == NULL)
		*nomem = true;
	return s;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decode the hex text in @res(@row, @col) into a malloc'ed buffer (+ a NUL); NULL for NULL. */
static char *dup_hex(PGresult *res, int row, int col, size_t *ret_len, bool *nomem)
{
	const char *h;
	size_t n;
	char *out;

	*ret_len = 0;
	if (PQgetisnull(res, row, col))
		return NULL;
	h = PQgetvalue(res, row, col);
	n = (size_t)PQgetlength(res, row, col) / 2;
	out = malloc(n + 1);
	if (out == NULL) {
		*nomem = true;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = (char)(hexval(h[2 * i]) * 16 + hexval(h[2 * i + 1]));
	out[n] = '\0';
	*ret_len = n;
	return out;
}

static bool read_entry(PGresult *res, int row, struct idem_quarantine_entry *e)
{
	bool nomem = false;

	memset(e, 0, sizeof(*e));
	e->timestamp_ms = -1;
	e->id = strtoll(PQgetvalue(res, row, 0), NULL, 10);
	e->consumer = dup_text(res, row, 1, &nomem);
	e->topic = dup_text(res, row, 2, &nomem);
	e->partition = (int32_t)strtol(PQgetvalue(res, row, 3), NULL, 10);
	e->offset = strtoll(PQgetvalue(res, row, 4), NULL, 10);
	e->business_key = dup_text(res, row, 5, &nomem);
	e->reason = dup_text(res, row, 6, &nomem);
	snprintf(e->sqlstate, sizeof(e->sqlstate), "%s", PQgetvalue(res, row, 7));
	e->attempts = atoi(PQgetvalue(res, row, 8));
	e->first_failed_at = dup_text(res, row, 9, &nomem);
	e->last_failed_at = dup_text(res, row, 10, &nomem);
	e->resolved_at = dup_text(res, row, 11, &nomem);
	e->resolution = dup_text(res, row, 12, &nomem);
	return !nomem;
}

void idem_quarantine_entry_done(struct idem_quarantine_entry *e)
{
	if (e == NULL)
		return;
	free(e->consumer);
	free(e->topic);
	free(e->business_key);
	free(e->key);
	free(e->value);
	for (size_t i = 0; e->headers != NULL && i < e->n_headers; i++) {
		free(e->headers[i].name);
		free(e->headers[i].value);
	}
	free(e->headers);
	free(e->reason);
	free(e->first_failed_at);
	free(e->last_failed_at);
	free(e->resolved_at);
	free(e->resolution);
	memset(e, 0, sizeof(*e));
}

void idem_quarantine_entries_free(struct idem_quarantine_entry *v, size_t n)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		idem_quarantine_entry_done(&v[i]);
	free(v);
}

bool idem_quarantine_in_scope(const struct idem_cfg *cfg, const struct idem_quarantine_entry *e)
{
	const struct idem_route *route = idem_cfg_route_for(cfg, e->topic);

	return route != NULL && strcmp(route->consumer, e->consumer) == 0;
}

idem_status idem_quarantine_list(PGconn *conn, const struct idem_quarantine_filter *f,
                                 struct idem_quarantine_entry **ret_entries, size_t *ret_n,
                                 idem_error *err)
{
	struct idem_quarantine_entry *v;
	char limit[24];
	const char *pv[4];
	PGresult *res;
	idem_status r = IDEM_OK;
	size_t k = 0;
	int n;

	snprintf(limit, sizeof(limit), "%zu", f->limit);
	pv[0] = f->consumer;
	pv[1] = f->topic;
	pv[2] = f->all ? "true" : "false";
	/* The scope is applied to the rows read, so the limit is too. */
	pv[3] = f->limit > 0 && f->scope == NULL ? limit : NULL;
	if ((r = idem_sql_exec(conn, IDEM_SQL_QUARANTINE_LIST, pv, "list quarantine", &res, err)) !=
	    IDEM_OK)
		goto out_clear;
	n = PQntuples(res);
	v = calloc(n > 0 ? (size_t)n : 1, sizeof(*v));
	if (v == NULL) {
		r = idem_error_nomem(err);
		goto out_clear;
	}
	for (int row = 0; row < n && (f->limit == 0 || k < f->limit); row++) {
		if (!read_entry(res, row, &v[k])) {
			idem_quarantine_entries_free(v, k + 1);
			r = idem_error_nomem(err);
			goto out_clear;
		}
		if (f->scope != NULL && !idem_quarantine_in_scope(f->scope, &v[k]))
			idem_quarantine_entry_done(&v[k]);
		else
			k++;
	}
	*ret_entries = v;
	*ret_n = k;
out_clear:
	PQclear(res);
	return r;
}

static idem_status read_headers(PGconn *conn, const char *id, struct idem_quarantine_entry *e,
                                idem_error *err)
{
	PGresult *res;
	bool nomem = false;
	idem_status r;
	int n;

	if ((r = idem_sql_exec(conn, IDEM_SQL_QUARANTINE_HEADERS, &id, "read quarantined headers",
	                       &res, err)) != IDEM_OK)
		goto out_clear;
	n = PQntuples(res);
	if (n > 0) {
		e->headers = calloc((size_t)n, sizeof(*e->headers));
		if (e->headers == NULL) {
			r = idem_error_nomem(err);
			goto out_clear;
		}
		e->n_headers = (size_t)n;
	}
	for (int row = 0; row < n; row++) {
		e->headers[row].name = dup_text(res, row, 0, &nomem);
		if (e->headers[row].name == NULL)
			nomem = true;
		e->headers[row].value = dup_hex(res, row, 1, &e->headers[row].value_len, &nomem);
	}
	if (nomem)
		r = idem_error_nomem(err);
out_clear:
	PQclear(res);
	return r;
}

/* Row @id into @e, locking it when @lock (inside a transaction). */
static idem_status get_entry(PGconn *conn, int64_t id, bool lock, struct idem_quarantine_entry *e,
                             idem_error *err)
{
	char ids[24];
	const char *pv[1] = { ids };
	bool nomem = false;
	PGresult *res;
	idem_status r;

	snprintf(ids, sizeof(ids), "%" PRId64, id);
	if ((r = idem_sql_exec(conn,
	                       lock ? IDEM_SQL_QUARANTINE_GET_LOCKED : IDEM_SQL_QUARANTINE_GET, pv,
	                       "read quarantine", &res, err)) != IDEM_OK) {
		PQclear(res);
		return r;
	}
	if (PQntuples(res) == 0) {
		PQclear(res);
		return idem_error_set(err, IDEM_ERR_NOT_FOUND, "no quarantine entry %" PRId64, id);
	}
	if (!read_entry(res, 0, e))
		nomem = true;
	e->key = dup_hex(res, 0, 13, &e->key_len, &nomem);
	e->value = dup_hex(res, 0, 14, &e->value_len, &nomem);
	if (!PQgetisnull(res, 0, 15))
		e->timestamp_ms = strtoll(PQgetvalue(res, 0, 15), NULL, 10);
	PQclear(res);
	if (nomem) {
		idem_quarantine_entry_done(e);
		return idem_error_nomem(err);
	}
	if ((r = read_headers(conn, ids, e, err)) != IDEM_OK)
		idem_quarantine_entry_done(e);
	return r;
}

/* Retry and discard act only on what a route of @cfg serves, as idemd would have applied it. */
static idem_status scope_error(const struct idem_cfg *cfg, const struct idem_quarantine_entry *e,
                               idem_error *err)
{
	return idem_error_set(err, IDEM_ERR_INVALID,
	                      "quarantine entry %" PRId64
	                      " belongs to consumer '%s' topic '%s', which no route of '%s' serves",
	                      e->id, e->consumer, e->topic, cfg->path);
}

idem_status idem_quarantine_get(PGconn *conn, int64_t id, struct idem_quarantine_entry *ret_entry,
                                idem_error *err)
{
	struct idem_quarantine_entry e;
	idem_status r = get_entry(conn, id, false, &e, err);

	if (r == IDEM_OK)
		*ret_entry = e;
	return r;
}

idem_status idem_quarantine_discard(PGconn *conn, const struct idem_cfg *cfg, int64_t id,
                                    idem_error *err)
{
	struct idem_quarantine_entry e;
	char ids[24];
	const char *pv[1] = { ids };
	PGresult *res = NULL;
	idem_status r = IDEM_OK;

	/* A row's consumer and topic never change: checked once, they hold for the update. */
	if ((r = get_entry(conn, id, false, &e, err)) != IDEM_OK)
		return r;
	if (!idem_quarantine_in_scope(cfg, &e))
		r = scope_error(cfg, &e, err);
	idem_quarantine_entry_done(&e);
	if (r != IDEM_OK)
		return r;
	snprintf(ids, sizeof(ids), "%" PRId64, id);
	if ((r = idem_sql_exec(conn, IDEM_SQL_QUARANTINE_DISCARD, pv, "discard", &res, err)) !=
	    IDEM_OK)
		goto out_clear;
	if (PQntuples(res) == 1)
		goto out_clear;
	/* Nothing updated: no such row, or resolved already. */
	r = get_entry(conn, id, false, &e, err);
	if (r == IDEM_OK) {
		r = idem_error_set(err, IDEM_ERR_INVALID,
		                   "quarantine entry %" PRId64 " is resolved already (%s at %s)",
		                   id, e.resolution, e.resolved_at);
		idem_quarantine_entry_done(&e);
	}
out_clear:
	PQclear(res);
	return r;
}

const char *idem_quarantine_outcome_str(enum idem_quarantine_outcome o)
{
	switch (o) {
	case IDEM_QUARANTINE_APPLIED:
		return "applied";
	case IDEM_QUARANTINE_DUPLICATE:
		return "duplicate";
	case IDEM_QUARANTINE_FAILED:
		return "failed";
	}
	return "unknown";
}

/* The stored message as idemd saw it. @hdrs must hold e->n_headers entries. */
static void entry_view(const struct idem_quarantine_entry *e, struct idem_header *hdrs,
                       struct idem_msgview *m)
{
	memset(m, 0, sizeof(*m));
	m->topic = e->topic;
	m->partition = e->partition;
	m->offset = e->offset;
	m->timestamp_ms = e->timestamp_ms;
	m->key = e->key;
	m->key_len = e->key_len;
	m->value = e->value;
	m->value_len = e->value_len;
	for (size_t i = 0; i < e->n_headers; i++)
		hdrs[i] = (struct idem_header){ e->headers[i].name, e->headers[i].value,
			                        e->headers[i].value_len };
	m->headers = hdrs;
	m->n_headers = e->n_headers;
}

/* Resolve row @e as @how and count its message as applied or as a duplicate of kind @dup. */
static idem_status resolve(PGconn *conn, const struct idem_quarantine_entry *e, const char *how,
                           int attempts, enum idem_dup_kind dup, idem_error *err)
{
	char ids[24], att[16], part[16];
	const char *rv[3] = { ids, how, att };
	const char *mv[8];
	bool applied = dup == IDEM_DUP_NONE;
	idem_status r;

	snprintf(ids, sizeof(ids), "%" PRId64, e->id);
	snprintf(att, sizeof(att), "%d", attempts);
	snprintf(part, sizeof(part), "%" PRId32, e->partition);
	if ((r = idem_sql_exec(conn, IDEM_SQL_QUARANTINE_RESOLVE, rv, "resolve", NULL, err)) !=
	    IDEM_OK)
		return r;
	mv[0] = e->consumer;
	mv[1] = e->topic;
	mv[2] = part;
	mv[3] = applied ? "1" : "0";
	mv[4] = applied ? "0" : "1";
	mv[5] = dup == IDEM_DUP_REDELIVERY ? "1" : "0";
	mv[6] = dup == IDEM_DUP_REPLAY ? "1" : "0";
	mv[7] = dup == IDEM_DUP_UPSTREAM ? "1" : "0";
	return idem_sql_exec(conn, IDEM_SQL_QUARANTINE_MOVE_COUNT, mv, "count", NULL, err);
}

static idem_status failed_again(PGconn *conn, const struct idem_batch *b, int64_t id,
                                idem_error *err)
{
	const struct idem_batch_msg *m = &b->msgs[0];
	char ids[24], att[16];
	const char *pv[5];

	snprintf(ids, sizeof(ids), "%" PRId64, id);
	snprintf(att, sizeof(att), "%d", m->attempts > 0 ? m->attempts : 1);
	pv[0] = ids;
	pv[1] = att;
	pv[2] = m->reason.null ? "unknown" : idem_batch_ptr(b, m->reason);
	pv[3] = m->sqlstate;
	pv[4] = idem_batch_ptr(b, m->bkey);
	return idem_sql_exec(conn, IDEM_SQL_QUARANTINE_FAILED, pv, "record failure", NULL, err);
}

/* Inside the open transaction: decode and apply the message of @e, update the row. */
static idem_status retry_locked(idem_flush *pg, const struct idem_cfg *cfg,
                                const struct idem_quarantine_entry *e,
                                enum idem_quarantine_outcome *ret_outcome, char *detail,
                                size_t detail_len, idem_error *err)
{
	PGconn *conn = idem_flush_conn(pg);
	const struct idem_route *route = idem_cfg_route_for(cfg, e->topic);
	struct idem_header *hdrs = NULL;
	struct idem_batch_msg *m;
	struct idem_msgview view;
	struct idem_batch b;
	idem_schemas *schemas = NULL;
	enum idem_dup_kind kind;
	char key[1024]; /* the business key as the detail quotes it */
	idem_status r;

	if (e->resolved_at != NULL)
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "quarantine entry %" PRId64 " is resolved already (%s at %s)",
		                      e->id, e->resolution, e->resolved_at);
	if (route == NULL || strcmp(route->consumer, e->consumer) != 0)
		return scope_error(cfg, e, err);
	if (idem_batch_init(&b, route, e->topic, e->partition) != IDEM_OK)
		return idem_error_nomem(err);
	hdrs = calloc(e->n_headers ? e->n_headers : 1, sizeof(*hdrs));
	if (hdrs == NULL) {
		r = idem_error_nomem(err);
		goto out_done;
	}
	if ((r = idem_schemas_open(cfg, NULL, NULL, &schemas, err)) != IDEM_OK)
		goto out_done;
	idem_schemas_attach(schemas, &b.doc);
	entry_view(e, hdrs, &view);
	r = idem_batch_add(&b, &view, cfg, 0);
	if (r == IDEM_ERR_UNAVAILABLE) {
		r = idem_error_set(err, r, "quarantine entry %" PRId64 " cannot be read now: %s",
		                   e->id, b.wait_reason);
		goto out_done;
	}
	if (r != IDEM_OK) {
		r = idem_error_nomem(err);
		goto out_done;
	}
	m = &b.msgs[0];
	if (!m->undecodable && (r = idem_flush_apply_one(pg, &b, 0, err)) != IDEM_OK)
		goto out_done;
	switch (m->state) {
	case IDEM_MSG_APPLIED:
		*ret_outcome = IDEM_QUARANTINE_APPLIED;
		snprintf(
		        detail, detail_len, "business key '%s' applied%s%s",
		        idem_esc_str(key, sizeof(key), idem_batch_ptr(&b, m->bkey), IDEM_ESC_QUOTE),
		        m->result.null ? "" : ", result ",
		        m->result.null ? "" : idem_batch_ptr(&b, m->result));
		r = resolve(conn, e, "applied", m->attempts, IDEM_DUP_NONE, err);
		break;
	case IDEM_MSG_DUPLICATE:
		/* It was consumed long ago; if another message took its key, that one is the
		 * upstream duplicate's original. */
		kind = idem_batch_dup_kind(e->partition, e->offset, &m->claim, -1);
		*ret_outcome = IDEM_QUARANTINE_DUPLICATE;
		if (m->claim.found)
			snprintf(
			        detail, detail_len,
			        "business key '%s' was applied already, from topic '%s' partition %" PRId32
			        " offset %" PRId64,
			        idem_esc_str(key, sizeof(key), idem_batch_ptr(&b, m->bkey),
			                     IDEM_ESC_QUOTE),
			        m->claim.same_topic ? e->topic : idem_batch_ptr(&b, m->claim.topic),
			        m->claim.partition, m->claim.offset);
		else
			snprintf(detail, detail_len, "business key '%s' was applied already",
			         idem_esc_str(key, sizeof(key), idem_batch_ptr(&b, m->bkey),
			                      IDEM_ESC_QUOTE));
		r = resolve(conn, e, "duplicate", m->attempts, kind, err);
		break;
	default:
		*ret_outcome = IDEM_QUARANTINE_FAILED;
		snprintf(detail, detail_len, "%s",
		         m->reason.null ? "unknown" : idem_batch_ptr(&b, m->reason));
		r = failed_again(conn, &b, e->id, err);
		break;
	}
out_done:
	free(hdrs);
	idem_batch_done(&b);
	idem_schemas_close(schemas);
	return r;
}

idem_status idem_quarantine_retry(idem_flush *pg, const struct idem_cfg *cfg, int64_t id,
                                  enum idem_quarantine_outcome *ret_outcome, char *detail,
                                  size_t detail_len, idem_error *err)
{
	PGconn *conn = idem_flush_conn(pg);
	struct idem_quarantine_entry e;
	enum idem_quarantine_outcome outcome = IDEM_QUARANTINE_FAILED;
	idem_status r;

	if (conn == NULL)
		return idem_error_set(err, IDEM_ERR_PG, "not connected");
	if ((r = idem_pg_exec(conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	if ((r = get_entry(conn, id, true, &e, err)) != IDEM_OK)
		goto out_rollback;
	r = retry_locked(pg, cfg, &e, &outcome, detail, detail_len, err);
	idem_quarantine_entry_done(&e);
	if (r != IDEM_OK)
		goto out_rollback;
	if ((r = idem_pg_exec(conn, "COMMIT", "commit", err)) != IDEM_OK)
		return r;
	*ret_outcome = outcome;
	return IDEM_OK;

out_rollback:
	idem_pg_rollback(conn);
	return r;
}
