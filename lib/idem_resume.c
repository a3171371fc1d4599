/*
 * idem_resume.c - where an assigned partition starts (see idem_resume.h).
 */
#include "idem_resume.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_pg.h"
#include "idem_sql.h"

/* The rebalance waits for this: keep it short (seconds; milliseconds). */
#define CONNECT_TIMEOUT_S    5
#define STATEMENT_TIMEOUT_MS 5000
#define COMMITTED_TIMEOUT_MS 10000

/* Version 1 of the commit metadata; a later idemd that changes it writes another prefix. */
#define MD_PREFIX "idemd/1 db="

struct idem_resume {
	const struct idem_cfg *cfg;
	PGconn *conn;
	struct idem_buf arr[3]; /* consumers[], topics[], partitions[] */
};

int idem_resume_md_format(char *buf, size_t len, const char *db_id, int64_t next)
{
	return snprintf(buf, len, MD_PREFIX "%s next=%" PRId64,
	                db_id != NULL && db_id[0] != '\0' ? db_id : "-", next);
}

bool idem_resume_md_parse(const void *md, size_t len, char ret_db_id[IDEM_DB_ID_LEN],
                          int64_t *ret_next)
{
	char text[128], *p, *sp, *end;
	size_t plen = strlen(MD_PREFIX), idlen;
	long long next;

	ret_db_id[0] = '\0';
	*ret_next = -1;
	if (md == NULL || len <= plen || len >= sizeof(text))
		return false;
	memcpy(text, md, len);
	text[len] = '\0';
	if (strlen(text) != len || strncmp(text, MD_PREFIX, plen) != 0)
		return false;
	p = text + plen;
	sp = strchr(p, ' ');
	if (sp == NULL || strncmp(sp, " next=", 6) != 0)
		return false;
	idlen = (size_t)(sp - p);
	if (idlen == 0 || idlen >= IDEM_DB_ID_LEN)
		return false;
	if (sp[6] < '0' || sp[6] > '9')
		return false;
	next = strtoll(sp + 6, &end, 10);
	if (*end != '\0' || next < 0)
		return false;
	if (!(idlen == 1 && p[0] == '-')) {
		memcpy(ret_db_id, p, idlen);
		ret_db_id[idlen] = '\0';
	}
	*ret_next = next;
	return true;
}

const char *idem_resume_case_str(enum idem_resume_case why)
{
	switch (why) {
	case IDEM_RESUME_FIRST:
		return "first";
	case IDEM_RESUME_DATABASE:
		return "database";
	case IDEM_RESUME_BEHIND:
		return "behind";
	case IDEM_RESUME_SKIP:
		return "skip";
	case IDEM_RESUME_KAFKA:
		return "kafka";
	case IDEM_RESUME_NO_KAFKA:
		return "no-kafka";
	case IDEM_RESUME_NO_DB:
		return "no-database";
	}
	return "?";
}

/* Did idemd commit this very offset (its metadata names it)? */
static bool committed_by_idemd(const struct idem_resume_in *in)
{
	return in->committed_read && in->committed >= 0 && in->md_idemd &&
	       in->md_next == in->committed;
}

struct idem_resume_out idem_resume_decide(const struct idem_resume_in *in)
{
	struct idem_resume_out o = { IDEM_RESUME_FIRST, RD_KAFKA_OFFSET_INVALID, -1, -1 };

	if (!in->db_read) {
		if (!in->committed_read)
			return o;
		o.why = IDEM_RESUME_NO_DB;
		/* idemd committed it only once the database held it: the first transaction
		 * checks that the database still does. */
		if (committed_by_idemd(in))
			o.floor = in->committed;
		return o;
	}
	if (in->db < 0) {
		if (!in->committed_read || in->committed < 0)
			return o;
		if (committed_by_idemd(in)) {
			/* The database lost everything of this partition: from where a first
			 * start would have begun. */
			o.why = IDEM_RESUME_BEHIND;
			o.start = in->reset;
			o.reapply_to = in->committed;
			return o;
		}
		o.why = IDEM_RESUME_KAFKA;
		return o;
	}
	o.start = in->db;
	o.floor = in->db;
	if (!in->committed_read) {
		o.why = IDEM_RESUME_NO_KAFKA;
	} else if (in->committed <= in->db) {
		o.why = IDEM_RESUME_DATABASE;
	} else if (committed_by_idemd(in)) {
		o.why = IDEM_RESUME_BEHIND;
		o.reapply_to = in->committed;
	} else {
		o.why = IDEM_RESUME_SKIP;
		o.start = in->committed;
	}
	return o;
}

idem_resume *idem_resume_new(const struct idem_cfg *cfg)
{
	idem_resume *rs = calloc(1, sizeof(*rs));

	if (rs == NULL)
		return NULL;
	rs->cfg = cfg;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(rs->arr); i++)
		idem_buf_init(&rs->arr[i]);
	return rs;
}

void idem_resume_free(idem_resume *rs)
{
	if (rs == NULL)
		return;
	PQfinish(rs->conn);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(rs->arr); i++)
		idem_buf_done(&rs->arr[i]);
	free(rs);
}

/*
 * A connection for one call, closed after it: rebalances are rare, and an idle connection
 * kept for them would only take a slot (and go stale). Its own application name keeps it apart
 * from the workers' in pg_stat_activity.
 */
static idem_status connect_db(idem_resume *rs, idem_error *err)
{
	char set[64];
	idem_status r;

	PQfinish(rs->conn);
	rs->conn = NULL;
	if ((r = idem_pg_conn_open_timeout(rs->cfg, "idemd-resume", CONNECT_TIMEOUT_S, &rs->conn,
	                                   err)) != IDEM_OK)
		return r;
	snprintf(set, sizeof(set), "SET statement_timeout = %d", STATEMENT_TIMEOUT_MS);
	return idem_pg_exec(rs->conn, set, "set statement_timeout", err);
}

/* Each partition's next_offset into db[] (-1: no row, or no route for its topic). */
static idem_status read_db(idem_resume *rs, const rd_kafka_topic_partition_list_t *list,
                           int64_t *db, char db_id[IDEM_DB_ID_LEN], idem_error *err)
{
	const char *vals[3];
	PGresult *res = NULL;
	idem_status r;

	for (size_t k = 0; k < 3; k++) {
		if (idem_pgarray_open(&rs->arr[k]) != IDEM_OK)
			return idem_error_nomem(err);
	}
	for (int i = 0; i < list->cnt; i++) {
		const struct idem_route *route = idem_cfg_route_for(rs->cfg, list->elems[i].topic);
		const char *consumer = route != NULL ? route->consumer : "";
		char part[16];
		int len = snprintf(part, sizeof(part), "%" PRId32, list->elems[i].partition);

		if (idem_pgarray_add(&rs->arr[0], consumer, strlen(consumer), false) != IDEM_OK ||
		    idem_pgarray_add(&rs->arr[1], list->elems[i].topic,
		                     strlen(list->elems[i].topic), false) != IDEM_OK ||
		    idem_pgarray_add(&rs->arr[2], part, (size_t)len, false) != IDEM_OK)
			return idem_error_nomem(err);
	}
	for (size_t k = 0; k < 3; k++) {
		if (idem_pgarray_close(&rs->arr[k]) != IDEM_OK)
			return idem_error_nomem(err);
		vals[k] = rs->arr[k].data;
	}
	r = idem_sql_exec(rs->conn, IDEM_SQL_DATABASE_ID, NULL, "read idem.database_identity", &res,
	                  err);
	if (r == IDEM_OK && PQntuples(res) == 1)
		snprintf(db_id, IDEM_DB_ID_LEN, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (r != IDEM_OK)
		return r;
	r = idem_sql_exec(rs->conn, IDEM_SQL_PROGRESS_GET, vals, "read idem.partition_progress",
	                  &res, err);
	if (r == IDEM_OK && PQntuples(res) != list->cnt)
		r = idem_error_set(err, IDEM_ERR_PG, "read idem.partition_progress: %d rows for %d",
		                   PQntuples(res), list->cnt);
	for (int i = 0; r == IDEM_OK && i < list->cnt; i++) {
		const struct idem_route *route = idem_cfg_route_for(rs->cfg, list->elems[i].topic);

		db[i] = route == NULL || PQgetisnull(res, i, 0)
		                ? -1
		                : strtoll(PQgetvalue(res, i, 0), NULL, 10);
	}
	PQclear(res);
	return r;
}

idem_status idem_resume_read_db(idem_resume *rs, const rd_kafka_topic_partition_list_t *list,
                                int64_t *ret_db, char ret_db_id[IDEM_DB_ID_LEN], idem_error *err)
{
	idem_status r;

	ret_db_id[0] = '\0';
	if ((r = connect_db(rs, err)) == IDEM_OK)
		r = read_db(rs, list, ret_db, ret_db_id, err);
	PQfinish(rs->conn);
	rs->conn = NULL;
	return r;
}

/* The group's committed offsets and their metadata into pos[].in. */
static void read_committed(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *pos, const char *db_id)
{
	rd_kafka_topic_partition_list_t *committed = rd_kafka_topic_partition_list_copy(list);
	rd_kafka_resp_err_t e;

	if (committed == NULL)
		return;
	for (int i = 0; i < committed->cnt; i++)
		committed->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
	e = rd_kafka_committed(rk, committed, COMMITTED_TIMEOUT_MS);
	for (int i = 0; i < list->cnt; i++) {
		const rd_kafka_topic_partition_t *c = &committed->elems[i];
		struct idem_resume_in *in = &pos[i].in;

		if (e != RD_KAFKA_RESP_ERR_NO_ERROR || c->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			snprintf(pos[i].kafka_err, sizeof(pos[i].kafka_err), "%s",
			         rd_kafka_err2str(e != RD_KAFKA_RESP_ERR_NO_ERROR ? e : c->err));
			continue;
		}
		in->committed_read = true;
		in->committed = c->offset >= 0 ? c->offset : -1;
		in->md_idemd = idem_resume_md_parse(c->metadata, c->metadata_size, pos[i].md_db_id,
		                                    &in->md_next);
		in->md_same_db =
		        in->md_idemd && db_id[0] != '\0' && strcmp(pos[i].md_db_id, db_id) == 0;
	}
	rd_kafka_topic_partition_list_destroy(committed);
}

void idem_resume_positions(idem_resume *rs, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *ret_pos, char ret_db_id[IDEM_DB_ID_LEN],
                           idem_error *db_err)
{
	int64_t *db;
	bool db_read;

	ret_db_id[0] = '\0';
	for (int i = 0; i < list->cnt; i++) {
		memset(&ret_pos[i], 0, sizeof(ret_pos[i]));
		ret_pos[i].in.db = -1;
		ret_pos[i].in.committed = -1;
		ret_pos[i].in.md_next = -1;
		ret_pos[i].in.reset = idem_consumer_reset_offset(rs->cfg);
	}
	if (list->cnt == 0)
		return;
	db = calloc((size_t)list->cnt, sizeof(*db));
	db_read = db != NULL && idem_resume_read_db(rs, list, db, ret_db_id, db_err) == IDEM_OK;
	if (db == NULL)
		idem_error_nomem(db_err);
	for (int i = 0; i < list->cnt; i++) {
		ret_pos[i].in.db_read = db_read;
		ret_pos[i].in.db = db_read ? db[i] : -1;
	}
	free(db);
	read_committed(rk, list, ret_pos, ret_db_id);
	for (int i = 0; i < list->cnt; i++) {
		ret_pos[i].out = idem_resume_decide(&ret_pos[i].in);
		list->elems[i].offset = ret_pos[i].out.start;
	}
}
