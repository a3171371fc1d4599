/*
 * idem_consumer.c - librdkafka consumer configuration, partition control, offsets, rebalance.
 */
#include "idem_consumer.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idem_log.h"

/* Reading a topic's metadata (its partition count). */
#define METADATA_TIMEOUT_MS 10000

/* The value idemd runs with for librdkafka property @name: kafka.properties, else its default. */
static const char *prop_value(const struct idem_cfg *cfg, const char *name)
{
	const struct idem_cfg_kafka_prop *props;
	const char *v = NULL;
	size_t n;

	/* idemd's own settings: one table with the check of kafka.properties (idem_cfg). */
	props = idem_cfg_kafka_props(&n);
	for (size_t i = 0; i < n; i++) {
		if (props[i].value != NULL && strcmp(props[i].name, name) == 0)
			v = props[i].value;
	}
	for (size_t i = 0; i < cfg->n_kafka_props; i++) {
		if (strcmp(cfg->kafka_props[i].name, name) == 0)
			v = cfg->kafka_props[i].value;
	}
	return v;
}

int idem_consumer_commit_interval_ms(const struct idem_cfg *cfg)
{
	const char *v = prop_value(cfg, "auto.commit.interval.ms");
	int ms = v != NULL ? atoi(v) : 0;

	return ms > 0 ? ms : 500;
}

int64_t idem_consumer_reset_offset(const struct idem_cfg *cfg)
{
	const char *v = prop_value(cfg, "auto.offset.reset");

	if (v != NULL &&
	    (strcmp(v, "latest") == 0 || strcmp(v, "largest") == 0 || strcmp(v, "end") == 0))
		return RD_KAFKA_OFFSET_END;
	return RD_KAFKA_OFFSET_BEGINNING;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (level <= 3)
		idem_log_error("kafka", "%s: %s", fac, buf);
	else if (level <= 4)
		idem_log_warn("kafka", "%s: %s", fac, buf);
	else if (level <= 6)
		idem_log_info("kafka", "%s: %s", fac, buf);
	else
		idem_log_debug("kafka", "%s: %s", fac, buf);
}

static idem_status set(rd_kafka_conf_t *conf, const char *name, const char *value, idem_error *err)
{
	char errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		return idem_error_set(err, IDEM_ERR_CONFIG, "kafka property '%s': %s", name,
		                      errstr);
	return IDEM_OK;
}

/*
 * Sets one kafka.properties entry @kv: as written, or for SECRET_env / SECRET_file
 * (idem_cfg_kafka_secret_ref()), SECRET to what the variable or the file holds. librdkafka
 * keeps its own copy; ours is wiped.
 */
static idem_status set_prop(rd_kafka_conf_t *conf, const struct idem_kv *kv, idem_error *err)
{
	char key[160], prop[64], *secret;
	size_t n;
	idem_status r;
	bool file, have;

	n = idem_cfg_kafka_secret_ref(kv->name, &file);
	if (n == 0)
		return set(conf, kv->name, kv->value, err);
	snprintf(prop, sizeof(prop), "%.*s", (int)n, kv->name);
	snprintf(key, sizeof(key), "kafka.properties.%s", kv->name);
	secret = malloc(IDEM_CFG_SECRET_MAX);
	if (secret == NULL)
		return idem_error_nomem(err);
	r = idem_secret_get(key, file ? NULL : kv->value, file ? kv->value : NULL, secret,
	                    IDEM_CFG_SECRET_MAX, &have, err);
	if (r == IDEM_OK)
		r = set(conf, prop, secret, err);
	idem_secret_wipe(secret, IDEM_CFG_SECRET_MAX);
	free(secret);
	return r;
}

/* Did kafka.properties set @name? */
static bool user_set(const struct idem_cfg *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_kafka_props; i++) {
		if (strcmp(cfg->kafka_props[i].name, name) == 0)
			return true;
	}
	return false;
}

void idem_consumer_prefetch(int partitions, long *ret_messages, long *ret_kbytes)
{
	long n = partitions > 0 ? partitions : 1;
	long m = IDEM_CONSUMER_PREFETCH_MESSAGES / n;
	long k = IDEM_CONSUMER_PREFETCH_KBYTES / n;

	/* Not counted: the least a partition gets, the share of as many as the whole covers at
	 * it, so up to that many hold no more than the whole, and more no more than counted ones
	 * would. */
	if (partitions <= 0)
		m = k = 0;
	*ret_messages = m < IDEM_CONSUMER_PREFETCH_MIN_MESSAGES
	                        ? IDEM_CONSUMER_PREFETCH_MIN_MESSAGES
	                : m > 100000 ? 100000
	                             : m;
	*ret_kbytes = k < IDEM_CONSUMER_PREFETCH_MIN_KBYTES ? IDEM_CONSUMER_PREFETCH_MIN_KBYTES : k;
}

idem_status idem_consumer_conf(const struct idem_cfg *cfg, int partitions,
                               rd_kafka_conf_t **ret_conf, idem_error *err)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	const struct idem_cfg_kafka_prop *props;
	size_t n_props;
	idem_status r;

	if (conf == NULL)
		return idem_error_nomem(err);
	if ((r = set(conf, "bootstrap.servers", cfg->brokers, err)) != IDEM_OK ||
	    (r = set(conf, "group.id", cfg->group_id, err)) != IDEM_OK)
		goto out_destroy;
	/* Then idemd's own settings, as the policy table (idem_cfg) gives them. */
	props = idem_cfg_kafka_props(&n_props);
	for (size_t i = 0; i < n_props; i++) {
		if (props[i].value != NULL &&
		    (r = set(conf, props[i].name, props[i].value, err)) != IDEM_OK)
			goto out_destroy;
	}
	{
		char v[24];
		long m, k;

		idem_consumer_prefetch(partitions, &m, &k);
		snprintf(v, sizeof(v), "%ld", m);
		if (!user_set(cfg, "queued.min.messages") &&
		    (r = set(conf, "queued.min.messages", v, err)) != IDEM_OK)
			goto out_destroy;
		snprintf(v, sizeof(v), "%ld", k);
		if (!user_set(cfg, "queued.max.messages.kbytes") &&
		    (r = set(conf, "queued.max.messages.kbytes", v, err)) != IDEM_OK)
			goto out_destroy;
	}
	for (size_t i = 0; i < cfg->n_kafka_props; i++) {
		if ((r = set_prop(conf, &cfg->kafka_props[i], err)) != IDEM_OK)
			goto out_destroy;
	}
	rd_kafka_conf_set_log_cb(conf, log_cb);
	*ret_conf = conf;
	return IDEM_OK;

out_destroy:
	rd_kafka_conf_destroy(conf);
	return r;
}

idem_status idem_consumer_new(const struct idem_cfg *cfg, const char *group, rd_kafka_t **ret_rk,
                              idem_error *err)
{
	rd_kafka_conf_t *conf;
	char errstr[512];
	rd_kafka_t *rk;
	idem_status r;

	if ((r = idem_consumer_conf(cfg, 0, &conf, err)) != IDEM_OK)
		return r;
	/* A tool must never commit anything on its own: only what it commits explicitly. */
	if ((group != NULL && (r = set(conf, "group.id", group, err)) != IDEM_OK) ||
	    (r = set(conf, "enable.auto.commit", "false", err)) != IDEM_OK) {
		rd_kafka_conf_destroy(conf);
		return r;
	}
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL) {
		rd_kafka_conf_destroy(conf);
		return idem_error_set(err, IDEM_ERR_KAFKA, "cannot create kafka consumer: %s",
		                      errstr);
	}
	*ret_rk = rk;
	return IDEM_OK;
}

rd_kafka_queue_t *idem_consumer_queue_open(rd_kafka_t *rk, const char *topic, int32_t partition,
                                           void (*wake)(rd_kafka_t *rk, void *opaque), void *opaque)
{
	rd_kafka_queue_t *q = rd_kafka_queue_get_partition(rk, topic, partition);

	if (q == NULL)
		return NULL;
	/* Also marks the queue as the application's, so that librdkafka does not forward it to
	 * the consumer queue when fetching starts. */
	rd_kafka_queue_forward(q, NULL);
	rd_kafka_queue_cb_event_enable(q, wake, opaque);
	return q;
}

void idem_consumer_queue_close(rd_kafka_queue_t *q)
{
	if (q == NULL)
		return;
	rd_kafka_queue_cb_event_enable(q, NULL, NULL);
	rd_kafka_queue_destroy(q);
}

idem_status idem_consumer_view(const rd_kafka_message_t *rkm, struct idem_consumer_headers *h,
                               struct idem_msgview *ret_m)
{
	rd_kafka_headers_t *hdrs = NULL;
	rd_kafka_timestamp_type_t tstype;
	size_t n = 0;

	*ret_m = (struct idem_msgview){
		.topic = rd_kafka_topic_name(rkm->rkt),
		.partition = rkm->partition,
		.offset = rkm->offset,
		.timestamp_ms = rd_kafka_message_timestamp(rkm, &tstype),
		.key = rkm->key,
		.key_len = rkm->key_len,
		.value = rkm->payload,
		.value_len = rkm->len,
	};
	if (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE)
		ret_m->timestamp_ms = -1;
	if (rd_kafka_message_headers(rkm, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR || hdrs == NULL)
		return IDEM_OK;
	n = rd_kafka_header_cnt(hdrs);
	if (n > h->cap) {
		struct idem_header *nh = realloc(h->v, n * sizeof(*nh));

		if (nh == NULL)
			return IDEM_ERR_NOMEM;
		h->v = nh;
		h->cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		const void *val;
		size_t len;
		const char *name;

		if (rd_kafka_header_get_all(hdrs, i, &name, &val, &len) !=
		    RD_KAFKA_RESP_ERR_NO_ERROR)
			return IDEM_OK;
		h->v[i] = (struct idem_header){ name, val, len };
	}
	ret_m->headers = h->v;
	ret_m->n_headers = n;
	return IDEM_OK;
}

void idem_consumer_headers_free(struct idem_consumer_headers *h)
{
	free(h->v);
	h->v = NULL;
	h->cap = 0;
}

void idem_consumer_pause(rd_kafka_t *rk, const char *topic, int32_t partition)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_resp_err_t e;

	rd_kafka_topic_partition_list_add(list, topic, partition);
	e = rd_kafka_pause_partitions(rk, list);
	if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
		e = list->elems[0].err;
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		idem_log_warn("kafka",
		              "cannot pause topic=%s partition=%" PRId32
		              ": %s, ignoring (its messages are dropped until it resumes)",
		              topic, partition, rd_kafka_err2str(e));
	rd_kafka_topic_partition_list_destroy(list);
}

/*
 * Messages that arrived while the partition waited were dropped by the daemon, so the position
 * is set explicitly. The partition is resumed first: a seek waits for the fetcher to take the
 * new position, which a paused partition's fetcher does not do. A seek with a timeout also
 * guarantees that nothing fetched before it reaches us afterwards.
 */
void idem_consumer_resume(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_error_t *error;
	rd_kafka_resp_err_t e;

	rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset;
	e = rd_kafka_resume_partitions(rk, list);
	if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
		e = list->elems[0].err;
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		idem_log_error("kafka", "cannot resume topic=%s partition=%" PRId32 ": %s", topic,
		               partition, rd_kafka_err2str(e));
	list->elems[0].offset = offset;
	error = rd_kafka_seek_partitions(rk, list, 5000);
	if (error == NULL && list->elems[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		error = rd_kafka_error_new(list->elems[0].err, "%s",
		                           rd_kafka_err2str(list->elems[0].err));
	if (error != NULL) {
		idem_log_warn("kafka",
		              "cannot seek topic=%s partition=%" PRId32 " to offset=%" PRId64
		              ": %s, ignoring (the seek still applies when it can)",
		              topic, partition, offset, rd_kafka_error_string(error));
		rd_kafka_error_destroy(error);
	}
	rd_kafka_topic_partition_list_destroy(list);
}

bool idem_consumer_commit(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *offsets, bool sync,
                          const char *why)
{
	rd_kafka_resp_err_t e;

	if (offsets->cnt == 0)
		return true;
	e = rd_kafka_commit(rk, offsets, sync ? 0 : 1);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
		idem_log_warn(
		        "kafka",
		        "offset commit (%s) failed: %s, ignoring (the claims make the redelivery harmless)",
		        why, rd_kafka_err2str(e));
	return e == RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* An asynchronous commit is done: the daemon learns which offsets Kafka has. */
static void offset_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                             rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
	const struct idem_consumer_hooks *hooks = opaque;

	(void)rk;
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
		idem_log_debug("kafka", "offset commit failed: %s (committed again later)",
		               rd_kafka_err2str(e));
	if (hooks->committed != NULL && offsets != NULL)
		hooks->committed(hooks->opaque, e, offsets);
}

static void assign(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list, bool incremental)
{
	rd_kafka_error_t *error = NULL;
	rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;

	if (incremental)
		error = rd_kafka_incremental_assign(rk, list);
	else
		e = rd_kafka_assign(rk, list);
	if (error != NULL) {
		idem_log_error("kafka", "assign failed: %s", rd_kafka_error_string(error));
		rd_kafka_error_destroy(error);
	} else if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		idem_log_error("kafka", "assign failed: %s", rd_kafka_err2str(e));
	}
	/* A partition this instance paused (retry, halt) and lost may come back: start it
	 * fetching whatever librdkafka remembers of that. */
	rd_kafka_resume_partitions(rk, list);
}

static void unassign(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list, bool incremental)
{
	rd_kafka_error_t *error = NULL;

	if (incremental)
		error = rd_kafka_incremental_unassign(rk, list);
	else
		rd_kafka_assign(rk, NULL);
	if (error != NULL) {
		idem_log_error("kafka", "unassign failed: %s", rd_kafka_error_string(error));
		rd_kafka_error_destroy(error);
	}
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
	const struct idem_consumer_hooks *hooks = opaque;
	bool incremental = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;

	if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		hooks->assign(hooks->opaque, list);
		assign(rk, list, incremental);
		if (hooks->assigned != NULL)
			hooks->assigned(hooks->opaque, list);
	} else if (e == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
		hooks->revoke(hooks->opaque, list);
		unassign(rk, list, incremental);
	} else {
		idem_log_error("kafka", "rebalance failed: %s", rd_kafka_err2str(e));
		if (!incremental)
			rd_kafka_assign(rk, NULL);
	}
}

static void error_cb(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
	(void)opaque;
	if (e == RD_KAFKA_RESP_ERR__FATAL) {
		char buf[512];

		rd_kafka_fatal_error(rk, buf, sizeof(buf));
		idem_log_error("kafka", "fatal error: %s", buf);
		return;
	}
	idem_log_warn("kafka", "%s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)e), reason);
}

/*
 * Metadata of every topic: never of a named one, which a broker that creates topics on request
 * (auto.create.topics.enable, the embedded Kafka whatever the client asks) would create.
 */
static idem_status all_topics(rd_kafka_t *rk, int timeout_ms,
                              const struct rd_kafka_metadata **ret_md, idem_error *err)
{
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, ret_md, timeout_ms);

	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		return idem_error_set(err, IDEM_ERR_KAFKA, "metadata of the topics: %s",
		                      rd_kafka_err2str(e));
	return IDEM_OK;
}

static const struct rd_kafka_metadata_topic *find_topic(const struct rd_kafka_metadata *md,
                                                        const char *topic)
{
	for (int i = 0; i < md->topic_cnt; i++) {
		if (strcmp(md->topics[i].topic, topic) == 0 &&
		    md->topics[i].err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
			return &md->topics[i];
	}
	return NULL;
}

idem_status idem_consumer_partition_count(rd_kafka_t *rk, const char *topic, int *ret_n,
                                          idem_error *err)
{
	const struct rd_kafka_metadata *md = NULL;
	const struct rd_kafka_metadata_topic *t;
	idem_status r;

	if ((r = all_topics(rk, METADATA_TIMEOUT_MS, &md, err)) != IDEM_OK)
		return r;
	if ((t = find_topic(md, topic)) == NULL)
		r = idem_error_set(err, IDEM_ERR_NOT_FOUND, "topic '%s' does not exist", topic);
	else if (t->err != RD_KAFKA_RESP_ERR_NO_ERROR)
		r = idem_error_set(err, IDEM_ERR_KAFKA, "topic '%s': %s", topic,
		                   rd_kafka_err2str(t->err));
	else
		*ret_n = t->partition_cnt;
	rd_kafka_metadata_destroy(md);
	return r;
}

idem_status idem_consumer_topics_missing(rd_kafka_t *rk, const struct idem_cfg *cfg, int timeout_ms,
                                         bool *ret_missing, int *ret_partitions, idem_error *err)
{
	const struct rd_kafka_metadata *md = NULL;
	int partitions = 0;
	idem_status r;

	if ((r = all_topics(rk, timeout_ms, &md, err)) != IDEM_OK)
		return r;
	for (size_t i = 0; i < cfg->n_topics; i++) {
		const struct rd_kafka_metadata_topic *t = find_topic(md, cfg->topics[i]);

		ret_missing[i] = t == NULL;
		if (t != NULL && partitions >= 0 && t->err == RD_KAFKA_RESP_ERR_NO_ERROR &&
		    t->partition_cnt > 0)
			partitions += t->partition_cnt;
		else
			partitions = -1;
	}
	rd_kafka_metadata_destroy(md);
	if (ret_partitions != NULL)
		*ret_partitions = partitions > 0 ? partitions : 0;
	return IDEM_OK;
}

idem_status idem_consumer_subscribe(rd_kafka_t *rk, const struct idem_cfg *cfg, const bool *missing,
                                    idem_error *err)
{
	rd_kafka_topic_partition_list_t *topics;
	rd_kafka_resp_err_t e;

	topics = rd_kafka_topic_partition_list_new((int)cfg->n_topics);
	for (size_t i = 0; i < cfg->n_topics; i++) {
		if (!missing[i])
			rd_kafka_topic_partition_list_add(topics, cfg->topics[i],
			                                  RD_KAFKA_PARTITION_UA);
	}
	/* No topic yet: no subscription (librdkafka refuses an empty one). */
	e = topics->cnt > 0 ? rd_kafka_subscribe(rk, topics) : rd_kafka_unsubscribe(rk);
	rd_kafka_topic_partition_list_destroy(topics);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		return idem_error_set(err, IDEM_ERR_KAFKA, "cannot subscribe: %s",
		                      rd_kafka_err2str(e));
	return IDEM_OK;
}

idem_status idem_consumer_group_members(rd_kafka_t *rk, const char *group, int timeout_ms,
                                        int *ret_members, idem_error *err)
{
	const struct rd_kafka_group_list *gl = NULL;
	rd_kafka_resp_err_t e = rd_kafka_list_groups(rk, group, &gl, timeout_ms);
	int members = 0;

	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		return idem_error_set(err, IDEM_ERR_UNAVAILABLE,
		                      "the brokers cannot describe group '%s': %s", group,
		                      rd_kafka_err2str(e));
	for (int i = 0; i < gl->group_cnt; i++) {
		const struct rd_kafka_group_info *gi = &gl->groups[i];

		if (gi->err == RD_KAFKA_RESP_ERR_NO_ERROR && strcmp(gi->group, group) == 0)
			members += gi->member_cnt;
	}
	rd_kafka_group_list_destroy(gl);
	*ret_members = members;
	return IDEM_OK;
}

/* Which topics exist, and how many partitions they have in all (0: unknown), asked with a
 * handle of its own, before the consumer is made: its prefetch is divided among them. Topics
 * that could not be asked about count as missing until they are (idem_daemon asks again). */
static int count_partitions(const struct idem_cfg *cfg, bool *missing)
{
	rd_kafka_t *rk;
	int total = 0;

	for (size_t i = 0; i < cfg->n_topics; i++)
		missing[i] = true;
	if (idem_consumer_new(cfg, NULL, &rk, NULL) != IDEM_OK)
		return 0;
	if (idem_consumer_topics_missing(rk, cfg, METADATA_TIMEOUT_MS, missing, &total, NULL) !=
	    IDEM_OK)
		total = 0;
	rd_kafka_destroy(rk);
	return total;
}

idem_status idem_consumer_open(const struct idem_cfg *cfg, const struct idem_consumer_hooks *hooks,
                               bool *ret_missing, rd_kafka_t **ret_rk, idem_error *err)
{
	rd_kafka_conf_t *conf;
	char errstr[512];
	rd_kafka_t *rk;
	idem_status r;
	int partitions = count_partitions(cfg, ret_missing);
	long m, k;
	bool own =
	        user_set(cfg, "queued.min.messages") || user_set(cfg, "queued.max.messages.kbytes");

	idem_consumer_prefetch(partitions, &m, &k);
	if (partitions > 0)
		idem_log_info("kafka",
		              "prefetch per partition: %ld messages, %ld KiB, the topics' %d "
		              "partitions sharing %d messages and %d KiB%s",
		              m, k, partitions, IDEM_CONSUMER_PREFETCH_MESSAGES,
		              IDEM_CONSUMER_PREFETCH_KBYTES,
		              own ? " (kafka.properties sets its own)" : "");
	else
		idem_log_warn("kafka",
		              "cannot count the topics' partitions: prefetch per partition %ld "
		              "messages, %ld KiB, the least, until idemd restarts (%d partitions "
		              "share %d messages and %d KiB)%s",
		              m, k, IDEM_CONSUMER_PREFETCH_FALLBACK_PARTITIONS,
		              IDEM_CONSUMER_PREFETCH_MESSAGES, IDEM_CONSUMER_PREFETCH_KBYTES,
		              own ? " (kafka.properties sets its own)" : "");
	if ((r = idem_consumer_conf(cfg, partitions, &conf, err)) != IDEM_OK)
		return r;
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	rd_kafka_conf_set_offset_commit_cb(conf, offset_commit_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	rd_kafka_conf_set_opaque(conf, (void *)(uintptr_t)hooks);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL) {
		rd_kafka_conf_destroy(conf);
		return idem_error_set(err, IDEM_ERR_KAFKA, "cannot create kafka consumer: %s",
		                      errstr);
	}
	rd_kafka_poll_set_consumer(rk);
	if ((r = idem_consumer_subscribe(rk, cfg, ret_missing, err)) != IDEM_OK) {
		rd_kafka_destroy(rk);
		return r;
	}
	*ret_rk = rk;
	return IDEM_OK;
}
