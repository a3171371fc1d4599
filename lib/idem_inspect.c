/*
 * idem_inspect.c - status, verify and replay planning for idemctl.
 */
#include "idem_inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_consumer.h"
#include "idem_pg.h"
#include "idem_resume.h"
#include "idem_schemas.h"
#include "idem_sql.h"

#define KAFKA_TIMEOUT_MS 10000

void idem_status_report_done(struct idem_status_report *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n_parts; i++) {
		free(r->parts[i].topic);
		free(r->parts[i].halt_reason);
	}
	free(r->parts);
	free(r->missing);
	memset(r, 0, sizeof(*r));
}

static idem_status add_part(struct idem_status_report *r, const char *topic,
                            const struct idem_route *route, int32_t partition, idem_error *err)
{
	struct idem_part_status *np = realloc(r->parts, (r->n_parts + 1) * sizeof(*np));
	struct idem_part_status *p;

	if (np == NULL)
		return idem_error_nomem(err);
	r->parts = np;
	p = &r->parts[r->n_parts];
	memset(p, 0, sizeof(*p));
	p->topic = strdup(topic);
	if (p->topic == NULL)
		return idem_error_nomem(err);
	r->n_parts++;
	p->route = route;
	p->partition = partition;
	p->committed = p->db_next = p->low = p->high = p->halted_offset = -1;
	return IDEM_OK;
}

static idem_status db_progress(PGconn *conn, struct idem_part_status *p, idem_error *err)
{
	char part[16];
	const char *vals[3] = { p->route->consumer, p->topic, part };
	PGresult *res;
	idem_status r = IDEM_OK;

	snprintf(part, sizeof(part), "%" PRId32, p->partition);
	r = idem_sql_exec(conn, IDEM_SQL_PART_STATUS, vals, "read idem.partition_progress", &res,
	                  err);
	if (r == IDEM_OK && PQntuples(res) == 1) {
		p->db_next = PQgetisnull(res, 0, 0) ? -1 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		p->consumed = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
		p->applied = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
		p->duplicates = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
		p->quarantined = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
		p->quarantine_rows = strtoll(PQgetvalue(res, 0, 5), NULL, 10);
		if (!PQgetisnull(res, 0, 6)) {
			p->halted_offset = strtoll(PQgetvalue(res, 0, 6), NULL, 10);
			p->halt_reason =
			        strdup(PQgetisnull(res, 0, 7) ? "" : PQgetvalue(res, 0, 7));
			if (p->halt_reason == NULL)
				r = idem_error_nomem(err);
		}
	}
	PQclear(res);
	return r;
}

/* The log the partition's row is a position in, and how far the group's other consumers (earlier
 * names of the route's) got on it in the cluster @cluster ("" unknown). */
static idem_status db_log(PGconn *conn, const char *group, const char *cluster,
                          struct idem_part_status *p, idem_error *err)
{
	char consumers[IDEM_CONSUMER_NAME_MAX + 8], topics[512], parts[24];
	const char *vals[5] = { consumers, topics, parts, group, cluster[0] ? cluster : NULL };
	PGresult *res;
	idem_status r;

	/* Names are checked (letters, digits, '.', '_', '-'): no escaping needed in the literals.
	 */
	snprintf(consumers, sizeof(consumers), "{\"%s\"}", p->route->consumer);
	snprintf(topics, sizeof(topics), "{\"%s\"}", p->topic);
	snprintf(parts, sizeof(parts), "{%" PRId32 "}", p->partition);
	p->db_first = p->other_db = p->other_first = -1;
	r = idem_sql_exec(conn, IDEM_SQL_RESUME_GET, vals, "read idem.partition_progress", &res,
	                  err);
	if (r == IDEM_OK && PQntuples(res) == 1) {
		struct idem_resume_in in = { 0 };

		idem_resume_row(res, 0, &in);
		memcpy(p->db_cluster, in.db_cluster, sizeof(p->db_cluster));
		p->db_epoch = in.db_epoch;
		p->db_first = in.db_first;
		p->other_db = in.other_db;
		p->other_first = in.other_first;
		memcpy(p->other_consumer, in.other_consumer, sizeof(p->other_consumer));
	}
	PQclear(res);
	return r;
}

idem_status idem_inspect_lookup(const struct idem_cfg *cfg, PGconn *conn, const char *key,
                                PGresult **ret_res, idem_error *err)
{
	struct idem_buf consumers = { 0 };
	const char *vals[2];
	idem_status r;

	*ret_res = NULL;
	if ((r = idem_pgarray_open(&consumers)) != IDEM_OK)
		goto out;
	for (size_t i = 0; i < cfg->n_routes && r == IDEM_OK; i++)
		r = idem_pgarray_add(&consumers, cfg->routes[i].consumer,
		                     strlen(cfg->routes[i].consumer), false);
	if (r == IDEM_OK)
		r = idem_pgarray_close(&consumers);
	if (r != IDEM_OK) {
		r = idem_error_nomem(err);
		goto out;
	}
	vals[0] = key;
	vals[1] = consumers.data;
	if ((r = idem_sql_exec(conn, IDEM_SQL_LOOKUP, vals, "lookup", ret_res, err)) != IDEM_OK) {
		PQclear(*ret_res);
		*ret_res = NULL;
	}
out:
	idem_buf_done(&consumers);
	return r;
}

idem_status idem_inspect_status(const struct idem_cfg *cfg, rd_kafka_t *rk, PGconn *conn,
                                struct idem_status_report *ret, idem_error *err)
{
	struct idem_status_report rep = { 0 };
	rd_kafka_topic_partition_list_t *list = NULL;
	rd_kafka_resp_err_t e;
	idem_status r = IDEM_OK;

	for (size_t t = 0; t < cfg->n_topics; t++) {
		const struct idem_route *route = idem_cfg_route_for(cfg, cfg->topics[t]);
		int n = 0;

		r = idem_consumer_partition_count(rk, cfg->topics[t], &n, err);
		if (r == IDEM_ERR_NOT_FOUND) {
			if (rep.missing == NULL &&
			    (rep.missing = calloc(cfg->n_topics, sizeof(*rep.missing))) == NULL) {
				r = idem_error_nomem(err);
				goto out_fail;
			}
			rep.missing[rep.n_missing++] = cfg->topics[t];
			continue;
		}
		if (r != IDEM_OK)
			goto out_fail;
		for (int p = 0; p < n; p++) {
			if ((r = add_part(&rep, cfg->topics[t], route, p, err)) != IDEM_OK)
				goto out_fail;
		}
	}
	{
		char *id = rd_kafka_clusterid(rk, KAFKA_TIMEOUT_MS);

		if (id != NULL && strlen(id) < sizeof(rep.cluster))
			snprintf(rep.cluster, sizeof(rep.cluster), "%s", id);
		rd_kafka_mem_free(rk, id);
	}
	list = rd_kafka_topic_partition_list_new((int)rep.n_parts + 1);
	for (size_t i = 0; i < rep.n_parts; i++)
		rd_kafka_topic_partition_list_add(list, rep.parts[i].topic, rep.parts[i].partition);
	e = rd_kafka_committed(rk, list, KAFKA_TIMEOUT_MS);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		r = idem_error_set(err, IDEM_ERR_KAFKA, "read committed offsets of group '%s': %s",
		                   cfg->group_id, rd_kafka_err2str(e));
		goto out_fail;
	}
	for (size_t i = 0; i < rep.n_parts; i++) {
		struct idem_part_status *p = &rep.parts[i];
		int64_t c = list->elems[i].offset;

		p->committed = c >= 0 ? c : -1;
		p->committed_idemd = idem_resume_md_parse(list->elems[i].metadata,
		                                          list->elems[i].metadata_size, &p->md) &&
		                     p->md.next == p->committed;
		e = rd_kafka_query_watermark_offsets(rk, p->topic, p->partition, &p->low, &p->high,
		                                     KAFKA_TIMEOUT_MS);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
			r = idem_error_set(err, IDEM_ERR_KAFKA, "watermarks of %s/%" PRId32 ": %s",
			                   p->topic, p->partition, rd_kafka_err2str(e));
			goto out_fail;
		}
		if ((r = db_progress(conn, p, err)) != IDEM_OK ||
		    (r = db_log(conn, cfg->group_id, rep.cluster, p, err)) != IDEM_OK)
			goto out_fail;
	}
	rd_kafka_topic_partition_list_destroy(list);
	*ret = rep;
	return IDEM_OK;

out_fail:
	if (list != NULL)
		rd_kafka_topic_partition_list_destroy(list);
	idem_status_report_done(&rep);
	return r;
}

enum idem_verify_state idem_inspect_verify_state(const struct idem_status_report *rep,
                                                 const struct idem_part_status *p)
{
	struct idem_resume_in in = {
		.consumer = p->route->consumer,
		.cluster = rep->cluster,
		.reset = RD_KAFKA_OFFSET_BEGINNING,
		.low = p->low,
		.high = p->high,
		.db_read = true,
		.db = p->db_next,
		.db_epoch = p->db_epoch,
		.db_first = p->db_first,
		.other_db = p->other_db,
		.other_first = p->other_first,
		.committed_read = true,
		.committed = p->committed,
		.md_idemd = p->committed_idemd,
		.md = p->md,
	};
	struct idem_resume_out o;

	memcpy(in.db_cluster, p->db_cluster, sizeof(in.db_cluster));
	memcpy(in.other_consumer, p->other_consumer, sizeof(in.other_consumer));
	o = idem_resume_decide(&in);
	if (o.log == IDEM_LOG_CLUSTER)
		return IDEM_VERIFY_OTHER_CLUSTER;
	if (o.log == IDEM_LOG_TRUNCATED)
		return IDEM_VERIFY_LOG_REPLACED;
	if (p->committed < 0)
		return IDEM_VERIFY_NO_COMMIT;
	if (p->high >= 0 && p->committed > p->high)
		return IDEM_VERIFY_BEYOND_END;
	switch (o.why) {
	case IDEM_RESUME_BEHIND:
		return IDEM_VERIFY_DB_BEHIND;
	case IDEM_RESUME_SKIP:
		return IDEM_VERIFY_KAFKA_AHEAD;
	case IDEM_RESUME_HOLD:
		return o.wait == IDEM_WAIT_RENAMED ? IDEM_VERIFY_RENAMED : IDEM_VERIFY_UNKNOWN;
	case IDEM_RESUME_KAFKA:
		/* No progress row, an offset idemd did not commit: what lies below was never
		 * applied here. */
		return p->committed > 0 ? IDEM_VERIFY_KAFKA_AHEAD : IDEM_VERIFY_OK;
	default:
		return p->committed < p->db_next ? IDEM_VERIFY_DB_AHEAD : IDEM_VERIFY_OK;
	}
}

bool idem_verify_state_moved(enum idem_verify_state s)
{
	return s == IDEM_VERIFY_RENAMED || s == IDEM_VERIFY_OTHER_CLUSTER ||
	       s == IDEM_VERIFY_LOG_REPLACED || s == IDEM_VERIFY_BEYOND_END ||
	       s == IDEM_VERIFY_UNKNOWN;
}

const char *idem_verify_state_name(enum idem_verify_state s)
{
	switch (s) {
	case IDEM_VERIFY_OK:
		return "ok";
	case IDEM_VERIFY_DB_AHEAD:
		return "database_ahead";
	case IDEM_VERIFY_DB_BEHIND:
		return "database_behind";
	case IDEM_VERIFY_KAFKA_AHEAD:
		return "kafka_ahead";
	case IDEM_VERIFY_NO_COMMIT:
		return "no_commit";
	case IDEM_VERIFY_RENAMED:
		return "consumer_renamed";
	case IDEM_VERIFY_OTHER_CLUSTER:
		return "other_cluster";
	case IDEM_VERIFY_LOG_REPLACED:
		return "log_replaced";
	case IDEM_VERIFY_BEYOND_END:
		return "committed_beyond_end";
	case IDEM_VERIFY_UNKNOWN:
		return "not_known";
	}
	return "?";
}

const char *idem_verify_state_str(enum idem_verify_state s)
{
	switch (s) {
	case IDEM_VERIFY_OK:
		return "ok";
	case IDEM_VERIFY_DB_AHEAD:
		return "database ahead (harmless: idemd resumes from the database position; from "
		       "Kafka's offset where another client moved it back, a no-op for what was "
		       "applied)";
	case IDEM_VERIFY_DB_BEHIND:
		return "DATABASE BEHIND what idemd committed (restored or failed over): idemd "
		       "re-applies the gap at the next assignment";
	case IDEM_VERIFY_KAFKA_AHEAD:
		return "OFFSETS MOVED AHEAD by another client: messages were skipped without being "
		       "applied (loss alarm, unless the skip was meant)";
	case IDEM_VERIFY_NO_COMMIT:
		return "no committed offset yet";
	case IDEM_VERIFY_RENAMED:
		return "CONSUMER RENAMED in the configuration only: another consumer of the group "
		       "got further on this partition; idemd does not start it (its claims are not "
		       "this consumer's) until `idemctl rename OLD NEW` moves them";
	case IDEM_VERIFY_OTHER_CLUSTER:
		return "ANOTHER CLUSTER: the database's position is an offset in another Kafka "
		       "cluster's log (disaster recovery, migration); idemd starts at the group's "
		       "offset in this cluster, the claims make what is read again a no-op";
	case IDEM_VERIFY_LOG_REPLACED:
		return "LOG REPLACED: the database's position is beyond the end of this log (a "
		       "topic created again); idemd starts at the group's offset, or where a first "
		       "start would";
	case IDEM_VERIFY_BEYOND_END:
		return "COMMITTED BEYOND THE LOG'S END: Kafka's committed offset is not an offset of "
		       "this log (a topic created again, or offsets set past the end); idemd starts "
		       "at the database's position";
	case IDEM_VERIFY_UNKNOWN:
		return "NOT KNOWN: the Kafka cluster's id could not be read, so whether the database's "
		       "position is an offset of this log is not known; idemd starts no partition "
		       "until it can be read";
	}
	return "unknown";
}

void idem_replay_report_done(struct idem_replay_report *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n_plans; i++)
		free(r->plans[i].topic);
	free(r->plans);
	memset(r, 0, sizeof(*r));
}

/* Text array literal of @n keys. */
static idem_status array_literal(struct idem_buf *a, char **keys, size_t n)
{
	if (idem_pgarray_open(a) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		if (idem_pgarray_add(a, keys[i], strlen(keys[i]), false) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return idem_pgarray_close(a);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Count how many of the (sorted, distinct) @keys are claimed by @consumer. */
static idem_status count_claimed(PGconn *conn, const char *consumer, char **keys, size_t n,
                                 int64_t *ret, idem_error *err)
{
	struct idem_buf a = { 0 };
	idem_status r = IDEM_OK;

	*ret = 0;
	for (size_t from = 0; from < n; from += 1000) {
		size_t k = n - from < 1000 ? n - from : 1000;
		const char *vals[2];
		PGresult *res;

		if (array_literal(&a, keys + from, k) != IDEM_OK) {
			r = idem_error_nomem(err);
			break;
		}
		vals[0] = consumer;
		vals[1] = a.data;
		if ((r = idem_sql_exec(conn, IDEM_SQL_CLAIMED_COUNT, vals, "count claims", &res,
		                       err)) != IDEM_OK) {
			PQclear(res);
			break;
		}
		*ret += strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
	}
	idem_buf_done(&a);
	return r;
}

/* The partition's database position (plan->db_next) and the end of a pending replay. */
static idem_status db_position(PGconn *conn, const char *consumer, struct idem_replay_plan *plan,
                               int64_t *ret_replay_to, idem_error *err)
{
	struct idem_buf arr[3] = { { 0 } };
	const char *one[3] = { consumer, plan->topic, NULL }, *vals[3];
	char part[16];
	PGresult *res = NULL;
	idem_status r = IDEM_OK;

	snprintf(part, sizeof(part), "%" PRId32, plan->partition);
	one[2] = part;
	plan->db_next = -1;
	*ret_replay_to = -1;
	for (size_t k = 0; k < 3 && r == IDEM_OK; k++) {
		if (idem_pgarray_open(&arr[k]) != IDEM_OK ||
		    idem_pgarray_add(&arr[k], one[k], strlen(one[k]), false) != IDEM_OK ||
		    idem_pgarray_close(&arr[k]) != IDEM_OK)
			r = idem_error_nomem(err);
		vals[k] = arr[k].data;
	}
	if (r == IDEM_OK)
		r = idem_sql_exec(conn, IDEM_SQL_PROGRESS_GET, vals, "read idem.partition_progress",
		                  &res, err);
	if (r == IDEM_OK && PQntuples(res) == 1) {
		if (!PQgetisnull(res, 0, 0))
			plan->db_next = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		if (!PQgetisnull(res, 0, 1))
			*ret_replay_to = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	}
	PQclear(res);
	for (size_t k = 0; k < 3; k++)
		idem_buf_done(&arr[k]);
	return r;
}

/* The business keys of a range, collected to count the distinct ones. */
struct keyset {
	char **v;
	size_t n, cap;
};

static idem_status keyset_add(struct keyset *ks, const char *key, idem_error *err)
{
	if (ks->n == ks->cap) {
		size_t nc = ks->cap ? ks->cap * 2 : 1024;
		char **nv = realloc(ks->v, nc * sizeof(*nv));

		if (nv == NULL)
			return idem_error_nomem(err);
		ks->v = nv;
		ks->cap = nc;
	}
	if ((ks->v[ks->n] = strdup(key)) == NULL)
		return idem_error_nomem(err);
	ks->n++;
	return IDEM_OK;
}

/* Sort the keys and drop the repeats; returns how many were dropped. */
static int64_t keyset_unique(struct keyset *ks)
{
	size_t w = 0;
	int64_t dropped = 0;

	if (ks->n > 0)
		qsort(ks->v, ks->n, sizeof(*ks->v), str_cmp);
	for (size_t i = 0; i < ks->n; i++) {
		if (w > 0 && strcmp(ks->v[w - 1], ks->v[i]) == 0) {
			free(ks->v[i]);
			dropped++;
			continue;
		}
		ks->v[w++] = ks->v[i];
	}
	ks->n = w;
	return dropped;
}

static void keyset_done(struct keyset *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		free(ks->v[i]);
	free(ks->v);
	*ks = (struct keyset){ 0 };
}

/* What reading one message's business key as idemd does takes, reused message after message. */
struct key_scratch {
	struct idem_jsondoc doc;
	struct idem_consumer_headers hdrs;
	struct idem_buf key;
};

/* Count message @rkm of the range in @plan, and keep its business key in @ks. */
static idem_status plan_message(const struct idem_cfg *cfg, const struct idem_route *route,
                                const rd_kafka_message_t *rkm, struct key_scratch *s,
                                struct idem_replay_plan *plan, struct keyset *ks, idem_error *err)
{
	struct idem_msgview m;
	idem_error kerr;
	idem_status r;

	plan->messages++;
	if (idem_consumer_view(rkm, &s->hdrs, &m) != IDEM_OK)
		return idem_error_nomem(err);
	if (m.timestamp_ms >= 0 && (plan->oldest_ts_ms < 0 || m.timestamp_ms < plan->oldest_ts_ms))
		plan->oldest_ts_ms = m.timestamp_ms;
	idem_jsondoc_reset(&s->doc);
	r = idem_key_build(&route->key, &m, &s->doc, cfg->max_key_bytes, &s->key, &kerr);
	if (r == IDEM_ERR_UNAVAILABLE || r == IDEM_ERR_NOMEM)
		return idem_error_set(err, r, "%s/%" PRId32 " offset %" PRId64 ": %s", plan->topic,
		                      plan->partition, m.offset, kerr.msg);
	if (r != IDEM_OK) {
		plan->undecodable++;
		return IDEM_OK;
	}
	return keyset_add(ks, s->key.data, err);
}

/* Read [plan->from, plan->to) of one partition and fill in the counts. */
static idem_status plan_partition(rd_kafka_t *rk, PGconn *conn, const struct idem_cfg *cfg,
                                  const struct idem_route *route, struct idem_replay_plan *plan,
                                  idem_error *err)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	struct key_scratch scratch = { 0 };
	struct keyset keys = { 0 };
	idem_schemas *schemas = NULL;
	int64_t next = plan->from, deadline = idem_mono_ms() + 60000;
	idem_status r = IDEM_OK;
	rd_kafka_resp_err_t e;

	idem_jsondoc_init(&scratch.doc);
	scratch.doc.framed = route->value_format == IDEM_CFG_VALUE_JSON_SCHEMA;
	scratch.doc.validate = scratch.doc.framed && route->validate;
	if ((r = idem_schemas_open(cfg, NULL, NULL, &schemas, err)) != IDEM_OK)
		goto out;
	idem_schemas_attach(schemas, &scratch.doc);
	rd_kafka_topic_partition_list_add(list, plan->topic, plan->partition)->offset = plan->from;
	e = rd_kafka_assign(rk, list);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		r = idem_error_set(err, IDEM_ERR_KAFKA, "assign %s/%" PRId32 ": %s", plan->topic,
		                   plan->partition, rd_kafka_err2str(e));
		goto out;
	}
	while (next < plan->to && r == IDEM_OK) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 500);

		if (rkm == NULL) {
			if (idem_mono_ms() > deadline)
				r = idem_error_set(err, IDEM_ERR_KAFKA,
				                   "reading %s/%" PRId32
				                   " stalled at offset %" PRId64
				                   " (range ends at %" PRId64 ")",
				                   plan->topic, plan->partition, next, plan->to);
			continue;
		}
		if (rkm->err == RD_KAFKA_RESP_ERR_NO_ERROR && rkm->offset >= next) {
			next = rkm->offset + 1;
			if (rkm->offset < plan->to)
				r = plan_message(cfg, route, rkm, &scratch, plan, &keys, err);
		}
		rd_kafka_message_destroy(rkm);
	}
	if (r != IDEM_OK)
		goto out;
	plan->in_range_dups = keyset_unique(&keys);
	if ((r = count_claimed(conn, route->consumer, keys.v, keys.n, &plan->already_claimed,
	                       err)) == IDEM_OK)
		plan->would_apply = (int64_t)keys.n - plan->already_claimed;
out:
	rd_kafka_assign(rk, NULL);
	rd_kafka_topic_partition_list_destroy(list);
	keyset_done(&keys);
	idem_buf_done(&scratch.key);
	idem_jsondoc_done(&scratch.doc);
	idem_schemas_close(schemas);
	idem_consumer_headers_free(&scratch.hdrs);
	return r;
}

idem_status idem_inspect_replay_plan(const struct idem_cfg *cfg, rd_kafka_t *rk, PGconn *conn,
                                     const char *topic, int32_t partition, int64_t from,
                                     struct idem_replay_report *ret, idem_error *err)
{
	const struct idem_route *route = idem_cfg_route_for(cfg, topic);
	struct idem_replay_report rep = { 0 };
	rd_kafka_topic_partition_list_t *list = NULL;
	const char *vals[1];
	PGresult *res;
	rd_kafka_resp_err_t e;
	idem_status r;
	int n = 0;

	if (route == NULL)
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "topic '%s' is not served by any route of the configuration",
		                      topic);
	if ((r = idem_consumer_partition_count(rk, topic, &n, err)) != IDEM_OK)
		return r;
	if (partition >= n)
		return idem_error_set(err, IDEM_ERR_INVALID,
		                      "topic '%s' has no partition %" PRId32 " (it has %d)", topic,
		                      partition, n);
	rep.horizon_ms = -1;
	vals[0] = route->consumer;
	if ((r = idem_sql_exec(conn, IDEM_SQL_HORIZON_GET, vals, "read idem.retention_horizon",
	                       &res, err)) != IDEM_OK) {
		PQclear(res);
		return r;
	}
	if (PQntuples(res) == 1)
		rep.horizon_ms = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);

	rep.plans = calloc((size_t)n, sizeof(*rep.plans));
	list = rd_kafka_topic_partition_list_new(n);
	if (rep.plans == NULL || list == NULL) {
		r = idem_error_nomem(err);
		goto out_fail;
	}
	for (int p = 0; p < n; p++) {
		if (partition < 0 || p == partition)
			rd_kafka_topic_partition_list_add(list, topic, p);
	}
	e = rd_kafka_committed(rk, list, KAFKA_TIMEOUT_MS);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		r = idem_error_set(err, IDEM_ERR_KAFKA, "read committed offsets of group '%s': %s",
		                   cfg->group_id, rd_kafka_err2str(e));
		goto out_fail;
	}
	for (int i = 0; i < list->cnt; i++) {
		struct idem_replay_plan *plan = &rep.plans[rep.n_plans];
		int64_t low = 0, high = 0, replay_to = -1;

		plan->topic = strdup(topic);
		if (plan->topic == NULL) {
			r = idem_error_nomem(err);
			goto out_fail;
		}
		rep.n_plans++;
		plan->partition = list->elems[i].partition;
		plan->committed = list->elems[i].offset >= 0 ? list->elems[i].offset : -1;
		plan->oldest_ts_ms = -1;
		e = rd_kafka_query_watermark_offsets(rk, topic, plan->partition, &low, &high,
		                                     KAFKA_TIMEOUT_MS);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
			r = idem_error_set(err, IDEM_ERR_KAFKA, "watermarks of %s/%" PRId32 ": %s",
			                   topic, plan->partition, rd_kafka_err2str(e));
			goto out_fail;
		}
		plan->from = from;
		if (plan->from < low) {
			plan->from = low;
			plan->clamped = true;
		}
		/* Without the replay, idemd would start at the database's position, or at Kafka's
		 * offset where that is ahead (a skip: idem_resume_decide()),
		 * and a replay still pending reads on to its end: the range read again ends at the
		 * highest of them. */
		if ((r = db_position(conn, route->consumer, plan, &replay_to, err)) != IDEM_OK)
			goto out_fail;
		plan->to = plan->committed;
		if (plan->db_next > plan->to)
			plan->to = plan->db_next;
		if (replay_to > plan->to)
			plan->to = replay_to;
		if (plan->to < 0 || plan->to > high)
			plan->to = high;
		if (plan->from < plan->to &&
		    (r = plan_partition(rk, conn, cfg, route, plan, err)) != IDEM_OK)
			goto out_fail;
		if (rep.horizon_ms >= 0 && plan->oldest_ts_ms >= 0 &&
		    plan->oldest_ts_ms < rep.horizon_ms)
			rep.past_horizon = true;
	}
	rd_kafka_topic_partition_list_destroy(list);
	*ret = rep;
	return IDEM_OK;

out_fail:
	if (list != NULL)
		rd_kafka_topic_partition_list_destroy(list);
	idem_replay_report_done(&rep);
	return r;
}

/* Join the group, wait until this member holds all @n partitions of @topic, commit @offs. */
static rd_kafka_resp_err_t commit_as_member(const struct idem_cfg *cfg, const char *topic, int n,
                                            rd_kafka_topic_partition_list_t *offs, int timeout_ms)
{
	rd_kafka_topic_partition_list_t *sub, *assigned = NULL;
	int64_t deadline = idem_mono_ms() + timeout_ms;
	rd_kafka_resp_err_t e;
	rd_kafka_t *rk;

	if (idem_consumer_new(cfg, NULL, &rk, NULL) != IDEM_OK)
		return RD_KAFKA_RESP_ERR__FAIL;
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
	e = rd_kafka_subscribe(rk, sub);
	rd_kafka_topic_partition_list_destroy(sub);
	while (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);

		if (rkm != NULL)
			rd_kafka_message_destroy(rkm);
		if (assigned != NULL)
			rd_kafka_topic_partition_list_destroy(assigned);
		assigned = NULL;
		e = rd_kafka_assignment(rk, &assigned);
		if (e == RD_KAFKA_RESP_ERR_NO_ERROR && assigned->cnt == n)
			break;
		if (idem_mono_ms() > deadline)
			e = RD_KAFKA_RESP_ERR__TIMED_OUT;
	}
	if (assigned != NULL)
		rd_kafka_topic_partition_list_destroy(assigned);
	if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
		e = rd_kafka_commit(rk, offs, 0);
	for (int i = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && i < offs->cnt; i++)
		e = offs->elems[i].err;
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return e;
}

idem_status idem_inspect_reset(const struct idem_cfg *cfg, const struct idem_replay_report *plan,
                               int timeout_ms, idem_error *err)
{
	rd_kafka_topic_partition_list_t *offs;
	rd_kafka_resp_err_t e;
	idem_status r = IDEM_OK;
	rd_kafka_t *rk;
	int n = 0;

	if (plan->n_plans == 0)
		return IDEM_OK;
	if ((r = idem_consumer_new(cfg, NULL, &rk, err)) != IDEM_OK)
		return r;
	if ((r = idem_consumer_partition_count(rk, plan->plans[0].topic, &n, err)) != IDEM_OK)
		goto out_destroy;
	offs = rd_kafka_topic_partition_list_new((int)plan->n_plans);
	for (size_t i = 0; i < plan->n_plans; i++)
		rd_kafka_topic_partition_list_add(offs, plan->plans[i].topic,
		                                  plan->plans[i].partition)
		        ->offset = plan->plans[i].from;
	/* Reading the committed offsets first waits for the coordinator connection. */
	e = rd_kafka_committed(rk, offs, KAFKA_TIMEOUT_MS);
	/* The replay's offsets are committed without metadata: what rd_kafka_committed() read
	 * there is idemd's of another offset, and a replay's start is no position the database
	 * held (ARCHITECTURE.md "Where a partition starts": an offset moved back is read again). */
	rd_kafka_topic_partition_list_destroy(offs);
	offs = rd_kafka_topic_partition_list_new((int)plan->n_plans);
	for (size_t i = 0; i < plan->n_plans; i++)
		rd_kafka_topic_partition_list_add(offs, plan->plans[i].topic,
		                                  plan->plans[i].partition)
		        ->offset = plan->plans[i].from;
	if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
		e = rd_kafka_commit(rk, offs, 0);
	for (int i = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && i < offs->cnt; i++)
		e = offs->elems[i].err;
	if (e == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID || e == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION) {
		for (int i = 0; i < offs->cnt; i++)
			offs->elems[i].err = RD_KAFKA_RESP_ERR_NO_ERROR;
		e = commit_as_member(cfg, plan->plans[0].topic, n, offs, timeout_ms);
		if (e == RD_KAFKA_RESP_ERR__TIMED_OUT)
			r = idem_error_set(
			        err, IDEM_ERR_KAFKA,
			        "group '%s' still has active members: stop every idemd of the group before a replay",
			        cfg->group_id);
	}
	if (r == IDEM_OK && e != RD_KAFKA_RESP_ERR_NO_ERROR)
		r = idem_error_set(err, IDEM_ERR_KAFKA, "commit offsets for group '%s': %s",
		                   cfg->group_id, rd_kafka_err2str(e));
	rd_kafka_topic_partition_list_destroy(offs);
out_destroy:
	rd_kafka_destroy(rk);
	return r;
}

idem_status idem_inspect_replay_mark(const struct idem_cfg *cfg, PGconn *conn,
                                     const struct idem_replay_report *plan, idem_error *err)
{
	idem_status r;

	if (plan->n_plans == 0)
		return IDEM_OK;
	if ((r = idem_pg_exec(conn, "BEGIN", "begin", err)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < plan->n_plans; i++) {
		const struct idem_replay_plan *p = &plan->plans[i];
		const struct idem_route *route = idem_cfg_route_for(cfg, p->topic);
		char part[16], from[24];
		const char *vals[4] = { route != NULL ? route->consumer : "", p->topic, part,
			                from };

		snprintf(part, sizeof(part), "%" PRId32, p->partition);
		snprintf(from, sizeof(from), "%" PRId64, p->from);
		if ((r = idem_sql_exec(conn, IDEM_SQL_REPLAY_MARK, vals,
		                       "lower idem.partition_progress.next_offset", NULL, err)) !=
		    IDEM_OK)
			goto out_rollback;
	}
	return idem_pg_exec(conn, "COMMIT", "commit", err);

out_rollback:
	idem_pg_rollback(conn);
	return r;
}
