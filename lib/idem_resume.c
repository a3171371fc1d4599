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

/*
 * The rebalance callback waits for these, and so does the consumer thread when it decides a
 * waiting partition's start again: what cannot be read in time holds the partition (it is
 * tried again), so each read is short. In all at most IDEM_RESUME_BOUND_MS (idem_resume.h):
 * the cluster's id, one read of the committed offsets, the watermarks, the connection and its
 * three statements (the database's identity, the rows, the record).
 */
#define CLUSTER_TIMEOUT_MS    5000
#define COMMITTED_TIMEOUT_MS  5000
#define WATERMARKS_TIMEOUT_MS 5000
#define WATERMARKS_BOUND_MS   5000 /* all partitions' watermarks */
#define CONNECT_TIMEOUT_S     5
#define STATEMENT_TIMEOUT_MS  3000
_Static_assert(CLUSTER_TIMEOUT_MS + COMMITTED_TIMEOUT_MS + WATERMARKS_BOUND_MS +
                               CONNECT_TIMEOUT_S * 1000 + 3 * STATEMENT_TIMEOUT_MS <=
                       IDEM_RESUME_BOUND_MS,
               "idem_resume_positions() is bounded by IDEM_RESUME_BOUND_MS");

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

int64_t idem_resume_retry_ms(int64_t took_ms)
{
	if (took_ms > IDEM_RESUME_RETRY_MS / 2)
		return 2 * took_ms;
	return IDEM_RESUME_RETRY_MS;
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
	case IDEM_RESUME_REWIND:
		return "rewind";
	case IDEM_RESUME_HOLD:
		return "hold";
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

const char *idem_resume_wait_str(enum idem_resume_wait wait)
{
	switch (wait) {
	case IDEM_WAIT_NONE:
		return "";
	case IDEM_WAIT_DATABASE:
		return "database";
	case IDEM_WAIT_KAFKA:
		return "kafka";
	case IDEM_WAIT_CLUSTER:
		return "cluster";
	case IDEM_WAIT_WATERMARKS:
		return "watermarks";
	case IDEM_WAIT_RENAMED:
		return "renamed";
	}
	return "?";
}

const char *idem_resume_wait_why(enum idem_resume_wait wait)
{
	switch (wait) {
	case IDEM_WAIT_NONE:
		return "";
	case IDEM_WAIT_DATABASE:
		return "the database's progress rows cannot be read";
	case IDEM_WAIT_KAFKA:
		return "the group's committed offset cannot be read";
	case IDEM_WAIT_CLUSTER:
		return "the Kafka cluster's id cannot be read";
	case IDEM_WAIT_WATERMARKS:
		return "the partition's first and last offsets cannot be read";
	case IDEM_WAIT_RENAMED:
		return "another consumer of the group got further on it: the route's consumer was "
		       "renamed in the configuration only";
	}
	return "?";
}

/* The row's position is in another log than the partition's now, and why. A row from before
 * the cluster was recorded (NULL) is taken as this cluster's. */
static enum idem_resume_log row_log(const struct idem_resume_in *in)
{
	if (in->db < 0)
		return IDEM_LOG_SAME;
	if (in->db_cluster[0] != '\0' && strcmp(in->db_cluster, in->cluster) != 0)
		return IDEM_LOG_CLUSTER;
	if (in->db > in->high)
		return IDEM_LOG_TRUNCATED;
	/* idemd committed this offset in a later log of this cluster than the row's (a topic
	 * created again, then the database restored to before that). */
	if (in->md_idemd && in->md.version >= 2 && strcmp(in->md.cluster, in->cluster) == 0 &&
	    in->md.epoch > in->db_epoch)
		return IDEM_LOG_TRUNCATED;
	return IDEM_LOG_SAME;
}

static struct idem_resume_out hold(struct idem_resume_out o, enum idem_resume_wait wait)
{
	o.why = IDEM_RESUME_HOLD;
	o.wait = wait;
	o.log = IDEM_LOG_SAME;
	o.start = o.floor = o.reapply_to = o.first = -1;
	o.epoch = 0;
	o.record = false;
	o.mirror = false;
	return o;
}

struct idem_resume_out idem_resume_decide(const struct idem_resume_in *in)
{
	struct idem_resume_out o = { IDEM_RESUME_FIRST, IDEM_LOG_SAME, -1, -1, -1, false, -1, 0,
		                     IDEM_WAIT_NONE,    false };
	const struct idem_resume_md *md = &in->md;
	int64_t db = in->db, other = in->other_db;
	bool k, ours, mirror;

	/* A start is decided on complete knowledge only: what cannot be read now is read again
	 * (the partition is not fetched meanwhile; nothing it holds is applied without the
	 * database anyway). */
	if (!in->db_read)
		return hold(o, IDEM_WAIT_DATABASE);
	if (!in->committed_read)
		return hold(o, IDEM_WAIT_KAFKA);
	if (in->cluster[0] == '\0')
		return hold(o, IDEM_WAIT_CLUSTER);
	if (in->low < 0 || in->high < in->low)
		return hold(o, IDEM_WAIT_WATERMARKS);
	/* Kafka's offset is an offset of this log unless it lies beyond the log's end. */
	k = in->committed >= 0 && in->committed <= in->high;
	/* idemd committed that very offset in this cluster (for this consumer namespace: within
	 * a group a topic is one route's, and `idemctl rename` moves a namespace whole): the
	 * database held it then. Metadata of version 1, or without a cluster, is this cluster's. */
	ours = k && in->md_idemd &&
	       (md->cluster[0] == '\0' || strcmp(md->cluster, in->cluster) == 0);
	/* idemd's metadata of another cluster, copied with a translated offset (a mirror). */
	mirror = k && md->version >= 2 && md->cluster[0] != '\0' &&
	         strcmp(md->cluster, in->cluster) != 0;
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
	if (other > in->high)
		other = -1;
	/* Another consumer of the group got further on this partition: a rename made in the
	 * configuration only. Its claims are not this consumer's; going on after it skips
	 * what this name never applied, starting before it applies twice what that name did. */
	if ((other >= 0 && other > db) || (in->db < 0 && in->other_consumer[0] != '\0'))
		return hold(o, IDEM_WAIT_RENAMED);
	if (db >= 0) {
		o.why = IDEM_RESUME_DATABASE;
		o.start = o.floor = db;
		/* A row from before the cluster was recorded: record it now (same position). */
		o.record = in->db_cluster[0] == '\0';
		if (k && in->committed < db && !ours && !in->db_replaying) {
			/* Moved back by another client (Kafka's tools, `idemctl replay`; metadata
			 * naming another offset or cluster is a copy, not idemd's commit of this
			 * one): read again from there, as a move ahead is honoured; the claims
			 * make what was applied a no-op. (Where a restore lost a replay's database
			 * half, its Kafka half still says where to read from; a row without a
			 * cluster id may be another cluster's position. While the replay is under
			 * way, replay_to set, the row is where it got to: no move back.) */
			o.why = IDEM_RESUME_REWIND;
			o.start = in->committed;
		} else if (k && in->committed > db) {
			if (ours) {
				/* idemd committed it once the database held it: the database
				 * went back. */
				o.why = IDEM_RESUME_BEHIND;
				o.reapply_to = in->committed;
			} else {
				/* Moved ahead by another client: honoured, and recorded, so that
				 * the database holds the skip (a restore to before the first batch
				 * past it does not read as a database gone back to before it). */
				o.why = IDEM_RESUME_SKIP;
				o.start = in->committed;
			}
		}
	} else if (!k) {
		o.why = IDEM_RESUME_FIRST;
		o.start = in->reset == RD_KAFKA_OFFSET_END ? in->high : in->low;
		o.first = o.start;
	} else if (ours) {
		/* The database lost everything of this partition in this log: from where the
		 * first start began; without it (metadata of version 1, or a first start that did
		 * not know it), from the log's start (a `latest` start's end now is past what was
		 * lost; reading again is safe). */
		o.why = IDEM_RESUME_BEHIND;
		o.start = md->first >= 0 && md->first <= in->committed ? md->first : in->low;
		o.first = o.start;
		o.reapply_to = in->committed;
		if (md->version >= 2 && md->epoch > o.epoch)
			o.epoch = md->epoch;
	} else if (mirror) {
		/* A mirror's offset, translated from one idemd committed in the other cluster
		 * (the metadata copied with it). A mirror's offsets are as dense as the source's
		 * or denser, and a translation errs low: K - (md.next - x) is at or before where
		 * offset x of the other cluster is here. So the first start is that of md.first,
		 * and a database that does not hold md.next there (its row behind, or gone) went
		 * back: the gap is read again from where its position there is here. */
		bool held = in->db >= 0 && strcmp(in->db_cluster, md->cluster) == 0;
		int64_t from = held ? in->db : md->first;

		o.mirror = true;
		o.first = md->first >= 0 && md->first <= md->next
		                  ? in->committed - (md->next - md->first)
		                  : in->low;
		if (held && in->db >= md->next) {
			o.why = IDEM_RESUME_KAFKA;
			o.start = in->committed;
		} else {
			o.why = IDEM_RESUME_BEHIND;
			o.start = from >= 0 && from <= md->next ? in->committed - (md->next - from)
			                                        : in->low;
			o.reapply_to = in->committed;
		}
		if (o.first < in->low)
			o.first = in->low;
	} else {
		o.why = IDEM_RESUME_KAFKA;
		o.start = o.first = in->committed;
	}
	if (o.start < in->low) {
		/* Below the log's first offset (retention deleted it): from there, never a reset.
		 */
		o.start = in->low;
	}
	/* A start without a position in this log is recorded (where it began, in which log), and
	 * so is a skip. */
	if (db < 0 || o.why == IDEM_RESUME_SKIP)
		o.record = true;
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
	column_text(res, row, 6, in->other_consumer, sizeof(in->other_consumer));
	in->db_replaying = PQnfields(res) > 7 && !PQgetisnull(res, row, 7) &&
	                   PQgetvalue(res, row, 7)[0] == 't';
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
	idem_resume_read_committed(rk, list, ret_pos, COMMITTED_TIMEOUT_MS);
	read_watermarks(rk, list, ret_pos);
	if (connect_db(rs, db_err) == IDEM_OK &&
	    read_rows(rs, list, ret_pos, ret_cluster, ret_db_id, db_err) == IDEM_OK)
		db_read = true;
	for (int i = 0; i < list->cnt; i++) {
		ret_pos[i].in.db_read = db_read;
		ret_pos[i].out = idem_resume_decide(&ret_pos[i].in);
	}
	if (db_read && record_rows(rs, list, ret_pos, ret_cluster, &rec_err) != IDEM_OK) {
		/* A start that must be recorded is not made without its row: decided again. */
		for (int i = 0; i < list->cnt; i++) {
			if (!ret_pos[i].out.record)
				continue;
			ret_pos[i].out = hold(ret_pos[i].out, IDEM_WAIT_DATABASE);
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
		/* A held partition is paused once assigned, and sought to its start once that is
		 * decided: given an offset of its own, librdkafka starts its fetcher at once (a
		 * seek needs one), without reading the committed offset, which may be what
		 * cannot be read. */
		list->elems[i].offset = ret_pos[i].out.why == IDEM_RESUME_HOLD
		                                ? RD_KAFKA_OFFSET_BEGINNING
		                                : ret_pos[i].out.start;
	}
}
