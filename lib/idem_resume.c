/*
 * idem_resume.c - where an assigned partition starts (see idem_resume.h).
 */
#include "idem_resume.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_log.h"
#include "idem_pg.h"
#include "idem_sql.h"

/* The rebalance waits for this: keep it short (seconds; milliseconds). */
#define CONNECT_TIMEOUT_S    5
#define STATEMENT_TIMEOUT_MS 5000
#define COMMITTED_TIMEOUT_MS 10000

struct idem_resume {
	const struct idem_cfg *cfg;
	PGconn *conn;
	struct idem_buf arr[3]; /* consumers[], topics[], partitions[] */
};

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

int64_t idem_resume_start(int64_t committed, int64_t db)
{
	if (db < 0)
		return RD_KAFKA_OFFSET_INVALID;
	return committed > db ? committed : db;
}

/*
 * A connection for one assignment, closed after it: rebalances are rare, and an idle connection
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
                           int64_t *db, idem_error *err)
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

void idem_resume_positions(idem_resume *rs, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *ret_pos)
{
	rd_kafka_topic_partition_list_t *committed;
	idem_error err = { 0 };
	rd_kafka_resp_err_t e;
	int64_t *db;
	bool any = false;

	for (int i = 0; i < list->cnt; i++)
		ret_pos[i] = (struct idem_resume_pos){ -1, -1 };
	if (list->cnt == 0)
		return;
	db = calloc((size_t)list->cnt, sizeof(*db));
	if (db == NULL) {
		idem_log_warn("kafka",
		              "out of memory reading where the partitions stopped: starting "
		              "them from Kafka's committed offsets");
		return;
	}
	/* Postgres down or slow: start from Kafka's committed offsets, which is safe, as the
	 * claims make what is read again harmless (ARCHITECTURE.md "Failures"); only slower. */
	if (connect_db(rs, &err) != IDEM_OK || read_db(rs, list, db, &err) != IDEM_OK) {
		idem_log_warn(
		        "kafka",
		        "cannot read where the partitions stopped in the database (%s): "
		        "starting them from Kafka's committed offsets (what was applied since "
		        "is read again and skipped)",
		        err.msg);
		goto out;
	}
	for (int i = 0; i < list->cnt; i++) {
		ret_pos[i].db = db[i];
		any |= db[i] >= 0;
	}
	if (!any)
		goto out; /* first start: librdkafka reads the committed offsets itself */
	committed = rd_kafka_topic_partition_list_copy(list);
	if (committed == NULL)
		goto out;
	for (int i = 0; i < committed->cnt; i++)
		committed->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
	/* Kafka's committed offset wins when it is ahead (messages skipped on purpose): without
	 * it, leave the start to librdkafka (the committed offset), which is always safe. */
	e = rd_kafka_committed(rk, committed, COMMITTED_TIMEOUT_MS);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		idem_log_warn(
		        "kafka",
		        "cannot read the group's committed offsets (%s): starting the partitions "
		        "from them as librdkafka reads them",
		        rd_kafka_err2str(e));
	} else {
		for (int i = 0; i < list->cnt; i++) {
			const rd_kafka_topic_partition_t *c = &committed->elems[i];

			if (c->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
				idem_log_warn("kafka",
				              "cannot read the committed offset of topic=%s "
				              "partition=%" PRId32
				              " (%s): starting it from there as "
				              "librdkafka reads it",
				              c->topic, c->partition, rd_kafka_err2str(c->err));
				continue;
			}
			ret_pos[i].committed = c->offset >= 0 ? c->offset : -1;
			if (db[i] >= 0)
				list->elems[i].offset = idem_resume_start(c->offset, db[i]);
		}
	}
	rd_kafka_topic_partition_list_destroy(committed);
out:
	PQfinish(rs->conn);
	rs->conn = NULL;
	free(db);
}
