/*
 * idem_resume.c - where an assigned partition starts (see idem_resume.h).
 */
#include "idem_resume.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_consumer.h"
#include "idem_pg.h"
#include "idem_sql.h"

/* The rebalance waits for this: keep it short (seconds; milliseconds). */
#define CONNECT_TIMEOUT_S     5
#define STATEMENT_TIMEOUT_MS  5000
#define COMMITTED_TIMEOUT_MS  10000 /* one read of the committed offsets */
#define COMMITTED_BOUND_MS    30000 /* all reads of them, retried in this time */
#define COMMITTED_PAUSE_MS    1000  /* between two reads */
#define CLUSTER_TIMEOUT_MS    5000
#define WATERMARKS_TIMEOUT_MS 5000
#define WATERMARKS_BOUND_MS   10000 /* all partitions' watermarks */

/* The commit metadata's versions; a later idemd that changes it writes another prefix. */
#define MD_PREFIX_V1 "idemd/1 "
#define MD_PREFIX_V2 "idemd/2 "
#define MD_MAX       512

struct idem_resume {
	const struct idem_cfg *cfg;
	PGconn *conn;
	struct idem_buf arr[7]; /* the statements' array parameters */
};

int idem_resume_md_format(char *buf, size_t len, const struct idem_resume_md *md)
{
	char first[24];

	if (md->first >= 0)
		snprintf(first, sizeof(first), "%" PRId64, md->first);
	else
		snprintf(first, sizeof(first), "-");
	return snprintf(buf, len,
	                MD_PREFIX_V2 "db=%s log=%s:%" PRId32 " consumer=%s first=%s next=%" PRId64,
	                md->db_id[0] != '\0' ? md->db_id : "-",
	                md->cluster[0] != '\0' ? md->cluster : "-", md->epoch, md->consumer, first,
	                md->next);
}

/* "key=" at *p: the value up to the next space (or the end if @last) into @out. */
static bool md_field(char **p, const char *key, bool last, char *out, size_t outlen)
{
	size_t klen = strlen(key), vlen;
	char *end;

	if (strncmp(*p, key, klen) != 0)
		return false;
	*p += klen;
	end = strchr(*p, ' ');
	if (last != (end == NULL))
		return false;
	vlen = end != NULL ? (size_t)(end - *p) : strlen(*p);
	if (vlen == 0 || vlen >= outlen)
		return false;
	memcpy(out, *p, vlen);
	out[vlen] = '\0';
	*p += vlen + (end != NULL ? 1 : 0);
	return true;
}

/* A non-negative decimal (no sign, no spaces) into *ret. */
static bool md_number(const char *s, int64_t *ret)
{
	char *end;
	long long v;

	if (s[0] < '0' || s[0] > '9')
		return false;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0' || errno != 0)
		return false;
	*ret = v;
	return true;
}

static bool md_parse_v1(char *p, struct idem_resume_md *md)
{
	char id[IDEM_DB_ID_LEN], next[24];

	if (!md_field(&p, "db=", false, id, sizeof(id)) ||
	    !md_field(&p, "next=", true, next, sizeof(next)) || !md_number(next, &md->next))
		return false;
	if (strcmp(id, "-") != 0)
		memcpy(md->db_id, id, sizeof(id));
	md->version = 1;
	return true;
}

static bool md_parse_v2(char *p, struct idem_resume_md *md)
{
	char id[IDEM_DB_ID_LEN], log[IDEM_CLUSTER_ID_LEN + 16], first[24], next[24], *colon;
	int64_t epoch;

	if (!md_field(&p, "db=", false, id, sizeof(id)) ||
	    !md_field(&p, "log=", false, log, sizeof(log)) ||
	    !md_field(&p, "consumer=", false, md->consumer, sizeof(md->consumer)) ||
	    !md_field(&p, "first=", false, first, sizeof(first)) ||
	    !md_field(&p, "next=", true, next, sizeof(next)) || !md_number(next, &md->next))
		return false;
	if (!idem_cfg_consumer_valid(md->consumer))
		return false;
	if (strcmp(first, "-") != 0 && !md_number(first, &md->first))
		return false;
	colon = strrchr(log, ':');
	if (colon == NULL || colon == log || (size_t)(colon - log) >= IDEM_CLUSTER_ID_LEN ||
	    !md_number(colon + 1, &epoch) || epoch > INT32_MAX)
		return false;
	*colon = '\0';
	if (strcmp(log, "-") != 0)
		memcpy(md->cluster, log, (size_t)(colon - log) + 1);
	md->epoch = (int32_t)epoch;
	if (strcmp(id, "-") != 0)
		memcpy(md->db_id, id, sizeof(id));
	md->version = 2;
	return true;
}

bool idem_resume_md_parse(const void *md, size_t len, struct idem_resume_md *ret)
{
	char text[MD_MAX];
	bool ok = false;

	memset(ret, 0, sizeof(*ret));
	ret->first = -1;
	ret->next = -1;
	if (md != NULL && len > 0 && len < sizeof(text)) {
		memcpy(text, md, len);
		text[len] = '\0';
		if (strlen(text) == len) {
			if (strncmp(text, MD_PREFIX_V1, strlen(MD_PREFIX_V1)) == 0)
				ok = md_parse_v1(text + strlen(MD_PREFIX_V1), ret);
			else if (strncmp(text, MD_PREFIX_V2, strlen(MD_PREFIX_V2)) == 0)
				ok = md_parse_v2(text + strlen(MD_PREFIX_V2), ret);
		}
	}
	if (!ok) {
		memset(ret, 0, sizeof(*ret));
		ret->first = -1;
		ret->next = -1;
	}
	return ok;
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
	case IDEM_RESUME_RENAMED:
		return "renamed";
	case IDEM_RESUME_NO_KAFKA:
		return "no-kafka";
	case IDEM_RESUME_NO_DB:
		return "no-database";
	}
	return "?";
}

const char *idem_resume_log_str(enum idem_resume_log log)
{
	switch (log) {
	case IDEM_LOG_SAME:
		return "same";
	case IDEM_LOG_CLUSTER:
		return "cluster";
	case IDEM_LOG_TRUNCATED:
		return "truncated";
	}
	return "?";
}

/* Two cluster ids that may be the same log's: equal, or one of them unknown. */
static bool same_cluster(const char *a, const char *b)
{
	return a[0] == '\0' || b[0] == '\0' || strcmp(a, b) == 0;
}

/* The row's position is in another log than the partition's now, and why. */
static enum idem_resume_log row_log(const struct idem_resume_in *in)
{
	if (in->db < 0)
		return IDEM_LOG_SAME;
	if (!same_cluster(in->db_cluster, in->cluster))
		return IDEM_LOG_CLUSTER;
	if (in->high >= 0 && in->db > in->high)
		return IDEM_LOG_TRUNCATED;
	return IDEM_LOG_SAME;
}

/* Where a first start begins: made explicit from the watermarks where they are known. */
static int64_t first_start(const struct idem_resume_in *in)
{
	if (in->reset == RD_KAFKA_OFFSET_END)
		return in->high >= 0 ? in->high : RD_KAFKA_OFFSET_END;
	return in->low >= 0 ? in->low : RD_KAFKA_OFFSET_BEGINNING;
}

struct idem_resume_out idem_resume_decide(const struct idem_resume_in *in)
{
	struct idem_resume_out o = {
		IDEM_RESUME_FIRST, IDEM_LOG_SAME, RD_KAFKA_OFFSET_INVALID, -1, -1, false, -1, 0
	};
	/* Kafka's offset is an offset of this log (a committed offset lives in the cluster it
	 * is read from) unless it lies beyond the log's end. */
	bool k = in->committed_read && in->committed >= 0 &&
	         !(in->high >= 0 && in->committed > in->high);
	/* idemd committed that very offset in this cluster: for this consumer, or another. */
	bool here = k && in->md_idemd && in->md.next == in->committed &&
	            same_cluster(in->md.cluster, in->cluster);
	bool ours =
	        here && (in->md.consumer[0] == '\0' || strcmp(in->md.consumer, in->consumer) == 0);
	/* An earlier name's offset is read again under this name only where both cluster ids are
	 * known: with one unknown, the offset may be another log's, and what the earlier name
	 * applied would be applied again under this one. */
	bool earlier = here && !ours && in->md.cluster[0] != '\0' && in->cluster[0] != '\0';
	int64_t db = in->db, other = in->other_db, g;

	if (!in->db_read) {
		if (!in->committed_read)
			return o;
		o.why = IDEM_RESUME_NO_DB;
		/* Made explicit, so that every commit names where the first start began (a
		 * `latest` start is the end of the log now, not after a later restore). */
		o.start = k ? in->committed : first_start(in);
		if (here && in->md.first >= 0 && in->md.first <= in->committed)
			o.first = in->md.first;
		else if (!k && o.start >= 0)
			o.first = o.start;
		/* idemd committed it only once the database held it: the first transaction
		 * checks that the database still does. */
		if (ours)
			o.floor = in->committed;
		return o;
	}
	o.epoch = in->db_epoch;
	o.first = in->db_first;
	o.log = row_log(in);
	if (o.log != IDEM_LOG_SAME) {
		/* Another log: its position says nothing here. The epoch moves on, so that event
		 * ids named after offsets of the new log differ from the old one's. */
		db = -1;
		o.epoch = in->db_epoch + 1;
		o.first = -1;
	}
	if (in->high >= 0 && other > in->high)
		other = -1;
	g = db > other ? db : other;
	if (g >= 0) {
		o.start = g;
		o.floor = db;
		if (db < 0 || other > db) {
			/* An earlier name of this consumer got further: go on from there, and
			 * record it as this consumer's position, its first start the group's. */
			o.why = IDEM_RESUME_RENAMED;
			o.record = true;
			if (o.first < 0 || (in->other_first >= 0 && in->other_first < o.first))
				o.first = in->other_first >= 0 ? in->other_first : g;
		} else {
			o.why = IDEM_RESUME_DATABASE;
			/* A row from before the log was recorded: record it now (same position). */
			o.record = in->db_cluster[0] == '\0' && in->cluster[0] != '\0';
		}
		if (!in->committed_read) {
			o.why = IDEM_RESUME_NO_KAFKA;
		} else if (!k || in->committed <= g) {
			/* As decided above; but a row whose log is not known to be this one (a
			 * cluster id unknown on either side) may be another cluster's position, and
			 * a lower offset idemd did not commit this log's (a mirror's translated
			 * offset): read again from there, which the claims make safe, rather than
			 * skip. (idemd's own offset below the row is Kafka trailing.) */
			if (k && !ours && in->committed < g && db == g &&
			    (in->db_cluster[0] == '\0' || in->cluster[0] == '\0')) {
				o.start = in->committed;
			}
		} else if (ours || earlier) {
			/* idemd committed it, for this consumer or an earlier name of the group,
			 * once the database held it: the database went back. Re-applied under
			 * this name: the database has none of it. */
			o.why = IDEM_RESUME_BEHIND;
			o.reapply_to = in->committed;
		} else if (here) {
			/* An earlier name's, in a log not known to be this one: never re-apply
			 * under this name what the group applied. */
			o.why = IDEM_RESUME_RENAMED;
			o.start = in->committed;
			o.record = true;
		} else {
			o.why = IDEM_RESUME_SKIP;
			o.start = in->committed;
			o.record = false;
		}
		return o;
	}
	if (!in->committed_read) {
		/* librdkafka reads the committed offset itself, and starts there or at reset. */
		o.why = IDEM_RESUME_FIRST;
		return o;
	}
	if (!k) {
		o.why = IDEM_RESUME_FIRST;
		o.start = first_start(in);
		o.first = o.start >= 0 ? o.start : -1;
	} else if (ours || earlier) {
		/* The database lost everything of this partition (in this log), under this name
		 * and the group's earlier ones: from where the first start began; without it
		 * (metadata of version 1, or a start that did not know it), from the log's start
		 * (reading again is safe; a `latest` start's end now is past what was lost). */
		o.why = IDEM_RESUME_BEHIND;
		o.start = in->md.first >= 0 && in->md.first <= in->committed
		                  ? in->md.first
		                  : (in->low >= 0 ? in->low : RD_KAFKA_OFFSET_BEGINNING);
		o.first = o.start >= 0 ? o.start : -1;
		o.reapply_to = in->committed;
		if (in->md.version >= 2)
			o.epoch = in->md.epoch > o.epoch ? in->md.epoch : o.epoch;
	} else if (here) {
		/* An earlier name's, in a log not known to be this one (as above). */
		o.why = IDEM_RESUME_RENAMED;
		o.start = in->committed;
		o.first = in->md.first >= 0 && in->md.first <= o.start ? in->md.first : o.start;
	} else {
		o.why = IDEM_RESUME_KAFKA;
		o.start = in->committed;
		o.first = o.start;
	}
	o.record = o.start >= 0;
	return o;
}

struct idem_resume_out idem_resume_decide_late(struct idem_resume_in *in, const char *consumer,
                                               const char *cluster, int32_t epoch, int64_t first,
                                               int64_t at)
{
	in->consumer = consumer;
	in->cluster = cluster;
	in->low = in->high = -1;
	in->db_read = true;
	in->db = at;
	snprintf(in->db_cluster, sizeof(in->db_cluster), "%s", cluster);
	in->db_epoch = epoch;
	in->db_first = first;
	in->other_db = in->other_first = -1;
	return idem_resume_decide(in);
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

/* Open the statement's first @n array parameters. */
static idem_status arrays_open(idem_resume *rs, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (idem_pgarray_open(&rs->arr[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

static idem_status arrays_close(idem_resume *rs, size_t n, const char **vals)
{
	for (size_t k = 0; k < n; k++) {
		if (idem_pgarray_close(&rs->arr[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		vals[k] = rs->arr[k].data;
	}
	return IDEM_OK;
}

/* Append one text (NULL: SQL NULL) to array @k. */
static idem_status array_add(idem_resume *rs, size_t k, const char *v)
{
	return idem_pgarray_add(&rs->arr[k], v != NULL ? v : "", v != NULL ? strlen(v) : 0,
	                        v == NULL)
	               ? IDEM_ERR_NOMEM
	               : IDEM_OK;
}

static idem_status array_add_int(idem_resume *rs, size_t k, int64_t v)
{
	char text[24];

	snprintf(text, sizeof(text), "%" PRId64, v);
	return array_add(rs, k, text);
}

/* The route's consumer of @topic ("" if no route reads it). */
static const char *consumer_of(const idem_resume *rs, const char *topic)
{
	const struct idem_route *route = idem_cfg_route_for(rs->cfg, topic);

	return route != NULL ? route->consumer : "";
}

/* The database's identity into @db_id (left "" if there is none). */
static idem_status read_db_id(idem_resume *rs, char db_id[IDEM_DB_ID_LEN], idem_error *err)
{
	PGresult *res = NULL;
	idem_status r;

	r = idem_sql_exec(rs->conn, IDEM_SQL_DATABASE_ID, NULL, "read idem.database_identity", &res,
	                  err);
	if (r == IDEM_OK && PQntuples(res) == 1)
		snprintf(db_id, IDEM_DB_ID_LEN, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return r;
}

/* Each partition's next_offset into db[] (-1: no row, or no route for its topic). */
static idem_status read_db(idem_resume *rs, const rd_kafka_topic_partition_list_t *list,
                           int64_t *db, char db_id[IDEM_DB_ID_LEN], idem_error *err)
{
	const char *vals[3];
	PGresult *res = NULL;
	idem_status r;

	if (arrays_open(rs, 3) != IDEM_OK)
		return idem_error_nomem(err);
	for (int i = 0; i < list->cnt; i++) {
		if (array_add(rs, 0, consumer_of(rs, list->elems[i].topic)) != IDEM_OK ||
		    array_add(rs, 1, list->elems[i].topic) != IDEM_OK ||
		    array_add_int(rs, 2, list->elems[i].partition) != IDEM_OK)
			return idem_error_nomem(err);
	}
	if (arrays_close(rs, 3, vals) != IDEM_OK)
		return idem_error_nomem(err);
	if ((r = read_db_id(rs, db_id, err)) != IDEM_OK)
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

/* A text column into @out ("" if NULL). */
static void column_text(const PGresult *res, int row, int col, char *out, size_t len)
{
	snprintf(out, len, "%s", PQgetisnull(res, row, col) ? "" : PQgetvalue(res, row, col));
}

static int64_t column_int(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? -1 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

void idem_resume_row(const PGresult *res, int row, struct idem_resume_in *in)
{
	in->db = column_int(res, row, 0);
	column_text(res, row, 1, in->db_cluster, sizeof(in->db_cluster));
	in->db_epoch = PQgetisnull(res, row, 2) ? 0 : (int32_t)column_int(res, row, 2);
	in->db_first = column_int(res, row, 3);
	in->other_db = column_int(res, row, 4);
	in->other_first = column_int(res, row, 5);
}

/*
 * Each partition's progress row, and the furthest position of the group's other consumers on
 * it in this cluster, into pos[].in, and the database's identity.
 */
static idem_status read_rows(idem_resume *rs, const rd_kafka_topic_partition_list_t *list,
                             struct idem_resume_pos *pos, const char *cluster,
                             char db_id[IDEM_DB_ID_LEN], idem_error *err)
{
	const char *vals[5];
	PGresult *res = NULL;
	idem_status r;

	if (arrays_open(rs, 3) != IDEM_OK)
		return idem_error_nomem(err);
	for (int i = 0; i < list->cnt; i++) {
		if (array_add(rs, 0, pos[i].in.consumer) != IDEM_OK ||
		    array_add(rs, 1, list->elems[i].topic) != IDEM_OK ||
		    array_add_int(rs, 2, list->elems[i].partition) != IDEM_OK)
			return idem_error_nomem(err);
	}
	if (arrays_close(rs, 3, vals) != IDEM_OK)
		return idem_error_nomem(err);
	vals[3] = rs->cfg->group_id;
	vals[4] = cluster[0] != '\0' ? cluster : NULL;
	if ((r = read_db_id(rs, db_id, err)) != IDEM_OK)
		return r;
	r = idem_sql_exec(rs->conn, IDEM_SQL_RESUME_GET, vals, "read idem.partition_progress", &res,
	                  err);
	if (r == IDEM_OK && PQntuples(res) != list->cnt)
		r = idem_error_set(err, IDEM_ERR_PG, "read idem.partition_progress: %d rows for %d",
		                   PQntuples(res), list->cnt);
	for (int i = 0; r == IDEM_OK && i < list->cnt; i++) {
		/* A partition no route reads has no position. */
		if (pos[i].in.consumer[0] != '\0')
			idem_resume_row(res, i, &pos[i].in);
	}
	PQclear(res);
	return r;
}

/* Write the progress rows decided at assignment (out.record), in one statement. */
static idem_status record_rows(idem_resume *rs, const rd_kafka_topic_partition_list_t *list,
                               const struct idem_resume_pos *pos, const char *cluster,
                               idem_error *err)
{
	const char *vals[8];
	int n = 0;

	if (arrays_open(rs, 7) != IDEM_OK)
		return idem_error_nomem(err);
	for (int i = 0; i < list->cnt; i++) {
		const struct idem_resume_out *o = &pos[i].out;

		if (!o->record)
			continue;
		n++;
		if (array_add(rs, 0, pos[i].in.consumer) != IDEM_OK ||
		    array_add(rs, 1, list->elems[i].topic) != IDEM_OK ||
		    array_add_int(rs, 2, list->elems[i].partition) != IDEM_OK ||
		    array_add_int(rs, 3, o->start) != IDEM_OK ||
		    array_add(rs, 4, cluster[0] != '\0' ? cluster : NULL) != IDEM_OK ||
		    array_add_int(rs, 5, o->epoch) != IDEM_OK ||
		    (o->first >= 0 ? array_add_int(rs, 6, o->first) : array_add(rs, 6, NULL)) !=
		            IDEM_OK)
			return idem_error_nomem(err);
	}
	if (n == 0)
		return IDEM_OK;
	if (arrays_close(rs, 7, vals) != IDEM_OK)
		return idem_error_nomem(err);
	vals[7] = rs->cfg->group_id;
	return idem_sql_exec(rs->conn, IDEM_SQL_PROGRESS_BASE, vals, "record the partitions' start",
	                     NULL, err);
}

bool idem_resume_read_committed(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *list,
                                struct idem_resume_pos *pos, int timeout_ms)
{
	rd_kafka_topic_partition_list_t *committed = rd_kafka_topic_partition_list_copy(list);
	rd_kafka_resp_err_t e;
	bool all = true;

	if (committed == NULL)
		return false;
	for (int i = 0; i < committed->cnt; i++)
		committed->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
	e = rd_kafka_committed(rk, committed, timeout_ms);
	for (int i = 0; i < list->cnt; i++) {
		const rd_kafka_topic_partition_t *c = &committed->elems[i];
		struct idem_resume_in *in = &pos[i].in;

		if (in->committed_read)
			continue;
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR || c->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			snprintf(pos[i].kafka_err, sizeof(pos[i].kafka_err), "%s",
			         rd_kafka_err2str(e != RD_KAFKA_RESP_ERR_NO_ERROR ? e : c->err));
			pos[i].kafka_failed++;
			all = false;
			continue;
		}
		in->committed_read = true;
		in->committed = c->offset >= 0 ? c->offset : -1;
		in->md_idemd = idem_resume_md_parse(c->metadata, c->metadata_size, &in->md) &&
		               in->md.next == in->committed;
	}
	rd_kafka_topic_partition_list_destroy(committed);
	return all;
}

/*
 * The committed offsets, tried again within a bound (a coordinator that moves answers again in
 * seconds): an offset that could not be read is never overwritten, so a partition without it
 * starts at the database's position and commits nothing until it is read (NO_KAFKA).
 */
static void read_committed(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *pos)
{
	int64_t deadline = idem_mono_ms() + COMMITTED_BOUND_MS;

	for (int attempt = 0;; attempt++) {
		int64_t left = deadline - idem_mono_ms();

		if (idem_resume_read_committed(
		            rk, list, pos,
		            (int)(left < COMMITTED_TIMEOUT_MS ? left : COMMITTED_TIMEOUT_MS)))
			return;
		left = deadline - idem_mono_ms();
		if (left <= COMMITTED_PAUSE_MS)
			return;
		nanosleep(&(struct timespec){ COMMITTED_PAUSE_MS / 1000,
		                              (COMMITTED_PAUSE_MS % 1000) * 1000000L },
		          NULL);
		(void)attempt;
	}
}

/* The cluster's id into @ret ("" if it cannot be had within @timeout_ms). */
static void read_cluster(rd_kafka_t *rk, char ret[IDEM_CLUSTER_ID_LEN], int timeout_ms)
{
	char *id = rd_kafka_clusterid(rk, timeout_ms);

	ret[0] = '\0';
	if (id != NULL && strlen(id) < IDEM_CLUSTER_ID_LEN && strchr(id, ' ') == NULL &&
	    strchr(id, ':') == NULL)
		snprintf(ret, IDEM_CLUSTER_ID_LEN, "%s", id);
	rd_kafka_mem_free(rk, id);
}

/* The partitions' watermarks into pos[].in (-1 where they cannot be had in time). */
static void read_watermarks(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *list,
                            struct idem_resume_pos *pos)
{
	int64_t deadline = idem_mono_ms() + WATERMARKS_BOUND_MS;

	for (int i = 0; i < list->cnt; i++) {
		int64_t lo = -1, hi = -1, left = deadline - idem_mono_ms();
		rd_kafka_resp_err_t e;

		if (left <= 0)
			break;
		e = rd_kafka_query_watermark_offsets(
		        rk, list->elems[i].topic, list->elems[i].partition, &lo, &hi,
		        (int)(left < WATERMARKS_TIMEOUT_MS ? left : WATERMARKS_TIMEOUT_MS));
		if (e == RD_KAFKA_RESP_ERR_NO_ERROR && lo >= 0 && hi >= lo) {
			pos[i].in.low = lo;
			pos[i].in.high = hi;
		}
	}
}

void idem_resume_positions(idem_resume *rs, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *ret_pos, char ret_db_id[IDEM_DB_ID_LEN],
                           char ret_cluster[IDEM_CLUSTER_ID_LEN], idem_error *db_err)
{
	int64_t reset = idem_consumer_reset_offset(rs->cfg);
	bool db_read = false;
	idem_error rec_err = { 0 };

	ret_db_id[0] = '\0';
	ret_cluster[0] = '\0';
	for (int i = 0; i < list->cnt; i++) {
		struct idem_resume_in *in = &ret_pos[i].in;

		memset(&ret_pos[i], 0, sizeof(ret_pos[i]));
		in->consumer = consumer_of(rs, list->elems[i].topic);
		in->cluster = ret_cluster;
		in->reset = reset;
		in->low = in->high = -1;
		in->db = in->db_first = in->other_db = in->other_first = -1;
		in->committed = -1;
		in->md.first = in->md.next = -1;
	}
	if (list->cnt == 0)
		return;
	read_cluster(rk, ret_cluster, CLUSTER_TIMEOUT_MS);
	read_committed(rk, list, ret_pos);
	read_watermarks(rk, list, ret_pos);
	if (connect_db(rs, db_err) == IDEM_OK &&
	    read_rows(rs, list, ret_pos, ret_cluster, ret_db_id, db_err) == IDEM_OK)
		db_read = true;
	for (int i = 0; i < list->cnt; i++) {
		ret_pos[i].in.db_read = db_read;
		ret_pos[i].out = idem_resume_decide(&ret_pos[i].in);
	}
	if (db_read && record_rows(rs, list, ret_pos, ret_cluster, &rec_err) != IDEM_OK) {
		/* Started without the row: nothing known to be held there. */
		for (int i = 0; i < list->cnt; i++) {
			if (!ret_pos[i].out.record)
				continue;
			ret_pos[i].out.record = false;
			ret_pos[i].out.floor = -1;
			snprintf(ret_pos[i].record_err, sizeof(ret_pos[i].record_err), "%.*s",
			         (int)sizeof(ret_pos[i].record_err) - 1, rec_err.msg);
		}
	}
	PQfinish(rs->conn);
	rs->conn = NULL;
	for (int i = 0; i < list->cnt; i++) {
		/* A recorded start is held by the database now. */
		if (ret_pos[i].out.record)
			ret_pos[i].out.floor = ret_pos[i].out.start;
		list->elems[i].offset = ret_pos[i].out.start;
	}
}
