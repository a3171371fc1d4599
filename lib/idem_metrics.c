/*
 * idem_metrics.c - counters, histograms and gauges behind one mutex, served by libmicrohttpd
 * (a well-kept HTTP server library: idemd does not parse HTTP itself).
 */
#include "idem_metrics.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/*
 * The operator endpoints' limits (idemd(8) RUNNING): one event loop (epoll) serves
 * every connection, so idle or byte-at-a-time clients cost a slot each, never the loop. A client
 * address may hold HTTP_PER_CLIENT connections, all clients together HTTP_MAX_CONNECTIONS; a
 * connection with nothing arriving for HTTP_IDLE_SECONDS is closed, and one whose request
 * headers outgrow HTTP_CONN_MEMORY is answered 431 and closed. A probe therefore gets through
 * while another address floods, and while its own address holds fewer than HTTP_PER_CLIENT.
 */
#define HTTP_MAX_CONNECTIONS 1024u
#define HTTP_PER_CLIENT      256u
#define HTTP_IDLE_SECONDS    5u
#define HTTP_CONN_MEMORY     ((size_t)16384)
#define HTTP_FD_RESERVE      256u /* descriptors kept for Kafka, Postgres, logs */

static const double batch_size_bounds[] = { 1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000 };
static const double batch_secs_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	                                    0.1,   0.25,   0.5,   1,    2.5,   5 };
#define N_SIZE IDEM_ARRAY_SIZE(batch_size_bounds)
#define N_SECS IDEM_ARRAY_SIZE(batch_secs_bounds)

static const char *const dup_kind_names[IDEM_METRICS_DUP_KINDS] = { "redelivery", "replay",
	                                                            "upstream" };
static const char *const retry_classes[] = { "transient", "message", "broken" };
/* Room for idem_resume's cases (idem_metrics_partition_start()). */
#define START_CASES 16
static const char *const stage_names[IDEM_METRICS_STAGES] = { "fetch", "batch", "queue", "commit" };

struct part_gauge {
	char *topic;
	int32_t partition;
	int64_t db_next;
	int64_t lag;
	int64_t kafka_ahead; /* at assignment: Kafka's committed offset beyond the database's */
	bool halted;
};

struct idem_metrics {
	pthread_mutex_t lock;
	struct MHD_Daemon *mhd;
	uint64_t consumed, applied, quarantined, batches, mismatches;
	uint64_t reapplied, behind; /* the database went back: messages read again, partitions */
	uint64_t schema_waits;      /* a message waited for the schema registry */
	/* Partitions assigned, by how their start was decided (idem_resume's case names, as
	 * first seen), and those whose database position was in another log. */
	struct {
		const char *name; /* static */
		uint64_t n;
	} starts[START_CASES];
	uint64_t log_replaced;
	bool registry; /* a schema registry is configured: its metrics are shown */
	uint64_t reg_fetches, reg_failures, reg_unknown;
	size_t reg_cached;
	uint64_t dups[IDEM_METRICS_DUP_KINDS];
	uint64_t retries[IDEM_ARRAY_SIZE(retry_classes)];
	uint64_t size_buckets[N_SIZE + 1], secs_buckets[N_SECS + 1];
	double size_sum, secs_sum;
	uint64_t stage_buckets[IDEM_METRICS_STAGES][N_SECS + 1];
	double stage_sum[IDEM_METRICS_STAGES];
	struct part_gauge *parts;
	size_t n_parts, cap_parts;
	bool assigned, halted;
	size_t topics_missing;              /* subscribed topics the brokers do not have */
	size_t starting;                    /* assigned partitions whose start is not decided */
	char starting_why[160];             /* what the first of them waits for */
	char topic_missing[256];            /* the first of them, for /readyz */
	idem_metrics_probe_fn connected_fn; /* asked at each request */
	const void *connected_arg;
	size_t workers, in_flight, held;
	uint64_t late; /* idem_pool_late() */
	size_t bytes_budget, bytes_held, bytes_held_max;
	double oldest_claim_age; /* at oldest_claim_ms: a sweep measures it once per interval */
	int64_t oldest_claim_ms; /* idem_mono_ms() */
	bool outbox;             /* the relay runs: its metrics are shown */
	int64_t outbox_pending;
	double outbox_oldest;
	uint64_t outbox_published, outbox_errors;
};

idem_metrics *idem_metrics_new(void)
{
	idem_metrics *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return NULL;
	pthread_mutex_init(&m->lock, NULL);
	m->oldest_claim_age = -1;
	return m;
}

void idem_metrics_free(idem_metrics *m)
{
	if (m == NULL)
		return;
	if (m->mhd != NULL)
		MHD_stop_daemon(m->mhd);
	for (size_t i = 0; i < m->n_parts; i++)
		free(m->parts[i].topic);
	free(m->parts);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static void observe(uint64_t *buckets, const double *bounds, size_t n, double v)
{
	size_t i = 0;

	while (i < n && v > bounds[i])
		i++;
	buckets[i]++;
}

void idem_metrics_batch(idem_metrics *m, uint64_t consumed, uint64_t applied, uint64_t quarantined,
                        double seconds)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->consumed += consumed;
	m->applied += applied;
	m->quarantined += quarantined;
	m->batches++;
	observe(m->size_buckets, batch_size_bounds, N_SIZE, (double)consumed);
	observe(m->secs_buckets, batch_secs_bounds, N_SECS, seconds);
	m->size_sum += (double)consumed;
	m->secs_sum += seconds;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_stages(idem_metrics *m, const double seconds[IDEM_METRICS_STAGES])
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	for (size_t k = 0; k < IDEM_METRICS_STAGES; k++) {
		if (seconds[k] < 0)
			continue;
		observe(m->stage_buckets[k], batch_secs_bounds, N_SECS, seconds[k]);
		m->stage_sum[k] += seconds[k];
	}
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_duplicates(idem_metrics *m, enum idem_metrics_dup kind, uint64_t n)
{
	if (m == NULL || kind >= IDEM_METRICS_DUP_KINDS)
		return;
	pthread_mutex_lock(&m->lock);
	m->dups[kind] += n;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_mismatches(idem_metrics *m, uint64_t n)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->mismatches += n;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_reapplied(idem_metrics *m, uint64_t n)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->reapplied += n;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_database_behind(idem_metrics *m)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->behind++;
	pthread_mutex_unlock(&m->lock);
}

/* Count @n more starts decided as @why (0: show it, so that its counter exists from the start). */
static void start_add(idem_metrics *m, const char *why, uint64_t n)
{
	for (size_t i = 0; i < START_CASES; i++) {
		if (m->starts[i].name == NULL)
			m->starts[i].name = why;
		if (strcmp(m->starts[i].name, why) == 0) {
			m->starts[i].n += n;
			break;
		}
	}
}

void idem_metrics_partition_case(idem_metrics *m, const char *why)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	start_add(m, why, 0);
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_partition_start(idem_metrics *m, const char *why, bool log_replaced)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	start_add(m, why, 1);
	if (log_replaced)
		m->log_replaced++;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_schema_wait(idem_metrics *m)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->schema_waits++;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_registry(idem_metrics *m, uint64_t fetches, uint64_t failures, uint64_t unknown,
                           size_t cached)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->registry = true;
	m->reg_fetches = fetches;
	m->reg_failures = failures;
	m->reg_unknown = unknown;
	m->reg_cached = cached;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_retry(idem_metrics *m, const char *cls)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(retry_classes); i++) {
		if (strcmp(cls, retry_classes[i]) == 0)
			m->retries[i]++;
	}
	pthread_mutex_unlock(&m->lock);
}

static struct part_gauge *find_part(idem_metrics *m, const char *topic, int32_t partition)
{
	for (size_t i = 0; i < m->n_parts; i++) {
		if (m->parts[i].partition == partition && strcmp(m->parts[i].topic, topic) == 0)
			return &m->parts[i];
	}
	return NULL;
}

/* @topic/@partition's gauges, added when missing (NULL when out of memory), under m->lock. */
static struct part_gauge *get_part(idem_metrics *m, const char *topic, int32_t partition)
{
	struct part_gauge *g = find_part(m, topic, partition);
	char *t;

	if (g != NULL)
		return g;
	if (m->n_parts == m->cap_parts) {
		size_t nc = m->cap_parts ? m->cap_parts * 2 : 16;
		struct part_gauge *np = realloc(m->parts, nc * sizeof(*np));

		if (np == NULL)
			return NULL;
		m->parts = np;
		m->cap_parts = nc;
	}
	t = strdup(topic);
	if (t == NULL)
		return NULL;
	g = &m->parts[m->n_parts++];
	*g = (struct part_gauge){ .topic = t, .partition = partition, .db_next = -1, .lag = -1 };
	return g;
}

void idem_metrics_partition(idem_metrics *m, const char *topic, int32_t partition, int64_t db_next,
                            int64_t lag)
{
	struct part_gauge *g;

	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	g = get_part(m, topic, partition);
	if (g != NULL) {
		g->db_next = db_next;
		g->lag = lag;
	}
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_partition_halted(idem_metrics *m, const char *topic, int32_t partition,
                                   bool halted)
{
	struct part_gauge *g;

	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	g = get_part(m, topic, partition);
	if (g != NULL)
		g->halted = halted;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_partition_assigned(idem_metrics *m, const char *topic, int32_t partition,
                                     int64_t committed, int64_t db_next)
{
	struct part_gauge *g;
	int64_t db = db_next < 0 ? 0 : db_next;

	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	g = get_part(m, topic, partition);
	if (g != NULL)
		g->kafka_ahead = committed > db ? committed - db : 0;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_partition_remove(idem_metrics *m, const char *topic, int32_t partition)
{
	struct part_gauge *g;

	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	g = find_part(m, topic, partition);
	if (g != NULL) {
		free(g->topic);
		*g = m->parts[--m->n_parts];
	}
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_connected_probe(idem_metrics *m, idem_metrics_probe_fn fn, const void *arg)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->connected_fn = fn;
	m->connected_arg = arg;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_ready(idem_metrics *m, bool assigned, bool halted)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->assigned = assigned;
	m->halted = halted;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_starting(idem_metrics *m, size_t n, const char *why)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->starting = n;
	snprintf(m->starting_why, sizeof(m->starting_why), "%s", why != NULL ? why : "");
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_topics_missing(idem_metrics *m, const char *first, size_t n)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->topics_missing = n;
	snprintf(m->topic_missing, sizeof(m->topic_missing), "%s", first ? first : "");
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_workers(idem_metrics *m, size_t workers, size_t in_flight, size_t held,
                          uint64_t late)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->late = late;
	m->workers = workers;
	m->in_flight = in_flight;
	m->held = held;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_bytes(idem_metrics *m, size_t budget, size_t held, size_t held_max)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->bytes_budget = budget;
	m->bytes_held = held;
	m->bytes_held_max = held_max;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_oldest_claim_age(idem_metrics *m, double seconds)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->oldest_claim_age = seconds;
	m->oldest_claim_ms = idem_mono_ms();
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_outbox_pending(idem_metrics *m, int64_t pending, double oldest_seconds)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->outbox = true;
	m->outbox_pending = pending;
	m->outbox_oldest = oldest_seconds;
	pthread_mutex_unlock(&m->lock);
}

void idem_metrics_outbox_published(idem_metrics *m, uint64_t published, uint64_t errors)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->outbox = true;
	m->outbox_published += published;
	m->outbox_errors += errors;
	pthread_mutex_unlock(&m->lock);
}

/* Ready, or why not (@why may be NULL), under m->lock. */
static bool ready_locked(const idem_metrics *m, char *why, size_t len)
{
	bool connected = m->connected_fn != NULL && m->connected_fn(m->connected_arg);

	if (why != NULL && connected && m->topics_missing > 0) {
		char more[48] = "";

		if (m->topics_missing > 1)
			snprintf(more, sizeof(more), " (and %zu more)", m->topics_missing - 1);
		snprintf(why, len, "topic '%s' does not exist%s", m->topic_missing, more);
	} else if (why != NULL) {
		snprintf(why, len, "%s",
		         !connected     ? "not connected to postgres"
		         : !m->assigned ? "no partition assigned"
		         : m->halted    ? "a partition is halted"
		         : m->starting  ? m->starting_why
		                        : "ready");
	}
	return connected && m->topics_missing == 0 && m->assigned && !m->halted && m->starting == 0;
}

bool idem_metrics_is_ready(idem_metrics *m, char *why, size_t len)
{
	bool ok;

	pthread_mutex_lock(&m->lock);
	ok = ready_locked(m, why, len);
	pthread_mutex_unlock(&m->lock);
	return ok;
}

/* Label values are topic names (Kafka allows [a-zA-Z0-9._-]); escape anyway. */
static idem_status label(struct idem_buf *o, const char *v)
{
	for (; *v; v++) {
		if ((*v == '\\' || *v == '"') && idem_buf_append(o, "\\", 1) != IDEM_OK)
			return IDEM_ERR_NOMEM;
		if (*v == '\n') {
			if (idem_buf_append(o, "\\n", 2) != IDEM_OK)
				return IDEM_ERR_NOMEM;
			continue;
		}
		if (idem_buf_append(o, v, 1) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

/* The series of one histogram; @lbl is "" or 'stage="fetch",' (a label, then a comma). */
static idem_status histogram_series(struct idem_buf *o, const char *name, const char *lbl,
                                    const uint64_t *buckets, const double *bounds, size_t n,
                                    double sum)
{
	size_t l = strlen(lbl);
	uint64_t cum = 0;

	for (size_t i = 0; i < n; i++) {
		cum += buckets[i];
		if (idem_buf_printf(o, "%s_bucket{%sle=\"%g\"} %" PRIu64 "\n", name, lbl, bounds[i],
		                    cum))
			return IDEM_ERR_NOMEM;
	}
	cum += buckets[n];
	/* _sum and _count take the label without its comma, in braces, or none. */
	if (idem_buf_printf(o, "%s_bucket{%sle=\"+Inf\"} %" PRIu64 "\n", name, lbl, cum) ||
	    idem_buf_printf(o, "%s_sum%s%.*s%s %.6f\n", name, l ? "{" : "", (int)(l ? l - 1 : 0),
	                    lbl, l ? "}" : "", sum) ||
	    idem_buf_printf(o, "%s_count%s%.*s%s %" PRIu64 "\n", name, l ? "{" : "",
	                    (int)(l ? l - 1 : 0), lbl, l ? "}" : "", cum))
		return IDEM_ERR_NOMEM;
	return IDEM_OK;
}

static idem_status histogram(struct idem_buf *o, const char *name, const char *help,
                             const uint64_t *buckets, const double *bounds, size_t n, double sum)
{
	if (idem_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name))
		return IDEM_ERR_NOMEM;
	return histogram_series(o, name, "", buckets, bounds, n, sum);
}

/* idemd_stage_seconds{stage}: one histogram per stage of a message's way to its commit. */
static idem_status stages(idem_metrics *m, struct idem_buf *o)
{
	static const char name[] = "idemd_stage_seconds";
	char lbl[32];

	if (idem_buf_printf(
	            o,
	            "# HELP %s Time a batch's first message spent in each stage: fetch (producer timestamp to poll), batch (poll to hand-over), queue (hand-over to a worker's BEGIN), commit (BEGIN to COMMIT).\n# TYPE %s histogram\n",
	            name, name))
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < IDEM_METRICS_STAGES; k++) {
		snprintf(lbl, sizeof(lbl), "stage=\"%s\",", stage_names[k]);
		if (histogram_series(o, name, lbl, m->stage_buckets[k], batch_secs_bounds, N_SECS,
		                     m->stage_sum[k]) != IDEM_OK)
			return IDEM_ERR_NOMEM;
	}
	return IDEM_OK;
}

/* A partition's gauge: its value, or false when it has none to show. */
typedef bool part_value_fn(const struct part_gauge *g, int64_t *ret_v);

static bool part_lag(const struct part_gauge *g, int64_t *ret_v)
{
	*ret_v = g->lag;
	return g->lag >= 0;
}

static bool part_db_next(const struct part_gauge *g, int64_t *ret_v)
{
	*ret_v = g->db_next;
	return g->db_next >= 0;
}

static bool part_halted(const struct part_gauge *g, int64_t *ret_v)
{
	*ret_v = g->halted;
	return true;
}

static bool part_kafka_ahead(const struct part_gauge *g, int64_t *ret_v)
{
	*ret_v = g->kafka_ahead;
	return true;
}

/* The per-partition gauges, {topic, partition} each. */
static idem_status partition_gauges(idem_metrics *m, struct idem_buf *o)
{
	static const struct {
		const char *name, *help;
		part_value_fn *value;
	} gauges[] = {
		{ "idemd_partition_lag_messages",
		  "Messages in Kafka after the partition's position (consumer lag).", part_lag },
		{ "idemd_partition_database_progress",
		  "Next offset the database has recorded for the partition.", part_db_next },
		{ "idemd_partition_halted",
		  "Whether the partition is halted at a poison message (routes[].on_poison: halt).",
		  part_halted },
		{ "idemd_partition_kafka_ahead_messages",
		  "When the partition was assigned: how far another client had moved the group's committed offset in Kafka beyond the database's next offset, messages skipped without being applied (what idemctl verify calls a loss alarm; 0 when not).",
		  part_kafka_ahead },
	};

	for (size_t k = 0; k < IDEM_ARRAY_SIZE(gauges); k++) {
		if (idem_buf_printf(o, "# HELP %s %s\n# TYPE %s gauge\n", gauges[k].name,
		                    gauges[k].help, gauges[k].name))
			return IDEM_ERR_NOMEM;
		for (size_t i = 0; i < m->n_parts; i++) {
			int64_t v;

			if (!gauges[k].value(&m->parts[i], &v))
				continue;
			if (idem_buf_printf(o, "%s{topic=\"", gauges[k].name) ||
			    label(o, m->parts[i].topic) ||
			    idem_buf_printf(o, "\",partition=\"%" PRId32 "\"} %" PRId64 "\n",
			                    m->parts[i].partition, v))
				return IDEM_ERR_NOMEM;
		}
	}
	return IDEM_OK;
}

static idem_status render_locked(idem_metrics *m, struct idem_buf *o)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} counters[] = {
		{ "idemd_messages_consumed_total",
		  "Messages taken from Kafka and committed in a batch (redeliveries count again).",
		  offsetof(struct idem_metrics, consumed) },
		{ "idemd_messages_applied_total",
		  "Messages whose business key was newly claimed and whose handler ran.",
		  offsetof(struct idem_metrics, applied) },
		{ "idemd_messages_quarantined_total",
		  "Messages written to idem.quarantine instead of being applied (one already there, delivered again, is a redelivery duplicate).",
		  offsetof(struct idem_metrics, quarantined) },
		{ "idemd_batches_total", "Batches committed.",
		  offsetof(struct idem_metrics, batches) },
		{ "idemd_payload_mismatches_total",
		  "Duplicates whose payload differs from the message that claimed the key.",
		  offsetof(struct idem_metrics, mismatches) },
		{ "idemd_reapplied_total",
		  "Messages read again because the database no longer held what idemd had committed (a restore, a failover to a standby that lacked the last commits); each is also applied, a duplicate or quarantined.",
		  offsetof(struct idem_metrics, reapplied) },
		{ "idemd_database_behind_total",
		  "Times a partition was found behind in the database (it went back in time) and was read again from there.",
		  offsetof(struct idem_metrics, behind) },
		{ "idemd_log_replaced_total",
		  "Partitions assigned whose database position was in another log (another Kafka cluster, a topic created again): set aside, the start decided anew.",
		  offsetof(struct idem_metrics, log_replaced) },
	};

	for (size_t i = 0; i < IDEM_ARRAY_SIZE(counters); i++) {
		uint64_t v = *(const uint64_t *)(const void *)((const char *)m + counters[i].off);

		if (idem_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n",
		                    counters[i].name, counters[i].help, counters[i].name,
		                    counters[i].name, v))
			return IDEM_ERR_NOMEM;
	}
	if (idem_buf_append_str(
	            o,
	            "# HELP idemd_duplicates_total Messages skipped because their business key was already claimed, by kind.\n# TYPE idemd_duplicates_total counter\n"))
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < IDEM_METRICS_DUP_KINDS; k++) {
		if (idem_buf_printf(o, "idemd_duplicates_total{kind=\"%s\"} %" PRIu64 "\n",
		                    dup_kind_names[k], m->dups[k]))
			return IDEM_ERR_NOMEM;
	}
	if (idem_buf_append_str(
	            o,
	            "# HELP idemd_partition_starts_total Partitions assigned, by how their start was decided (ARCHITECTURE.md \"Where a partition starts\").\n# TYPE idemd_partition_starts_total counter\n"))
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < START_CASES && m->starts[k].name != NULL; k++) {
		if (idem_buf_printf(o, "idemd_partition_starts_total{case=\"%s\"} %" PRIu64 "\n",
		                    m->starts[k].name, m->starts[k].n))
			return IDEM_ERR_NOMEM;
	}
	if (idem_buf_append_str(
	            o,
	            "# HELP idemd_batch_retries_total Failed batch attempts that were retried, by error class.\n# TYPE idemd_batch_retries_total counter\n"))
		return IDEM_ERR_NOMEM;
	for (size_t k = 0; k < IDEM_ARRAY_SIZE(retry_classes); k++) {
		if (idem_buf_printf(o, "idemd_batch_retries_total{class=\"%s\"} %" PRIu64 "\n",
		                    retry_classes[k], m->retries[k]))
			return IDEM_ERR_NOMEM;
	}
	if (idem_buf_printf(
	            o,
	            "# HELP idemd_schema_registry_waits_total Times a partition waited because the schema registry could not answer (the message is read again later, never quarantined for it).\n# TYPE idemd_schema_registry_waits_total counter\nidemd_schema_registry_waits_total %" PRIu64
	            "\n",
	            m->schema_waits))
		return IDEM_ERR_NOMEM;
	if (histogram(o, "idemd_batch_size_messages", "Messages per committed batch.",
	              m->size_buckets, batch_size_bounds, N_SIZE, m->size_sum) ||
	    histogram(o, "idemd_batch_duration_seconds", "Time from BEGIN to COMMIT of a batch.",
	              m->secs_buckets, batch_secs_bounds, N_SECS, m->secs_sum) ||
	    stages(m, o))
		return IDEM_ERR_NOMEM;
	if (partition_gauges(m, o) != IDEM_OK)
		return IDEM_ERR_NOMEM;
	if (m->oldest_claim_age >= 0 &&
	    idem_buf_printf(
	            o,
	            "# HELP idemd_oldest_claim_age_seconds Age of the oldest claim kept in idem.processed_messages.\n# TYPE idemd_oldest_claim_age_seconds gauge\nidemd_oldest_claim_age_seconds %.3f\n",
	            m->oldest_claim_age + (double)(idem_mono_ms() - m->oldest_claim_ms) / 1000))
		return IDEM_ERR_NOMEM;
	if (m->registry &&
	    idem_buf_printf(
	            o,
	            "# HELP idemd_schema_registry_requests_total Requests to the schema registry, by answer: ok (a schema), unknown (404, or a schema idemd cannot read: its messages are quarantined), unavailable (no answer, 5xx, 429, 401/403: they wait).\n# TYPE idemd_schema_registry_requests_total counter\n"
	            "idemd_schema_registry_requests_total{answer=\"ok\"} %" PRIu64
	            "\nidemd_schema_registry_requests_total{answer=\"unknown\"} %" PRIu64
	            "\nidemd_schema_registry_requests_total{answer=\"unavailable\"} %" PRIu64
	            "\n# HELP idemd_schema_registry_schemas Schemas held by idemd's cache (at most 1,000).\n# TYPE idemd_schema_registry_schemas gauge\nidemd_schema_registry_schemas %zu\n",
	            m->reg_fetches - m->reg_failures - m->reg_unknown, m->reg_unknown,
	            m->reg_failures, m->reg_cached))
		return IDEM_ERR_NOMEM;
	if (m->outbox &&
	    idem_buf_printf(
	            o,
	            "# HELP idemd_outbox_pending Rows of idem.outbox not yet published.\n# TYPE idemd_outbox_pending gauge\nidemd_outbox_pending %" PRId64
	            "\n"
	            "# HELP idemd_outbox_oldest_pending_seconds Age of the oldest row of idem.outbox not yet published (0 when none).\n# TYPE idemd_outbox_oldest_pending_seconds gauge\nidemd_outbox_oldest_pending_seconds %.3f\n"
	            "# HELP idemd_outbox_published_total Outbox rows this relay published and marked.\n# TYPE idemd_outbox_published_total counter\nidemd_outbox_published_total %" PRIu64
	            "\n"
	            "# HELP idemd_outbox_errors_total Outbox rows the broker refused or did not acknowledge in time, and relay rounds that failed in Postgres.\n# TYPE idemd_outbox_errors_total counter\nidemd_outbox_errors_total %" PRIu64
	            "\n",
	            m->outbox_pending, m->outbox_oldest, m->outbox_published, m->outbox_errors))
		return IDEM_ERR_NOMEM;
	if (idem_buf_printf(
	            o,
	            "# HELP idemd_workers Workers committing batches, one Postgres connection each.\n# TYPE idemd_workers gauge\nidemd_workers %zu\n"
	            "# HELP idemd_batches_in_flight Batches handed to the workers and not yet committed.\n# TYPE idemd_batches_in_flight gauge\nidemd_batches_in_flight %zu\n"
	            "# HELP idemd_partitions_held Partitions paused because their next batch is full while one commits.\n# TYPE idemd_partitions_held gauge\nidemd_partitions_held %zu\n"
	            "# HELP idemd_claims_late_total Keys a transaction claimed after its others because another transaction in flight claimed them too.\n# TYPE idemd_claims_late_total counter\nidemd_claims_late_total %" PRIu64
	            "\n",
	            m->workers, m->in_flight, m->held, m->late) ||
	    idem_buf_printf(
	            o,
	            "# HELP idemd_batch_bytes_budget Bytes all batches may hold before partitions pause (batch.max_bytes_total).\n# TYPE idemd_batch_bytes_budget gauge\nidemd_batch_bytes_budget %zu\n"
	            "# HELP idemd_batch_bytes_held Bytes of messages held in batches, filling or in flight.\n# TYPE idemd_batch_bytes_held gauge\nidemd_batch_bytes_held %zu\n"
	            "# HELP idemd_batch_bytes_held_max The most bytes batches held at once since start: at most the budget plus one message.\n# TYPE idemd_batch_bytes_held_max gauge\nidemd_batch_bytes_held_max %zu\n",
	            m->bytes_budget, m->bytes_held, m->bytes_held_max) ||
	    idem_buf_printf(
	            o,
	            "# HELP idemd_ready Whether idemd is connected to Postgres, every subscribed topic exists, partitions are assigned, none is halted and every one has started (what /readyz answers).\n# TYPE idemd_ready gauge\nidemd_ready %d\n",
	            ready_locked(m, NULL, 0)) ||
	    idem_buf_printf(
	            o,
	            "# HELP idemd_partitions_starting Assigned partitions not started: what their start is decided on cannot be read, or their consumer was renamed in the configuration only (the log says which).\n# TYPE idemd_partitions_starting gauge\nidemd_partitions_starting %zu\n",
	            m->starting) ||
	    idem_buf_printf(
	            o,
	            "# HELP idemd_topics_missing Subscribed topics the brokers do not have (not consumed until they exist).\n# TYPE idemd_topics_missing gauge\nidemd_topics_missing %zu\n",
	            m->topics_missing) ||
	    idem_buf_printf(
	            o,
	            "# HELP idemd_build_info idemd build information.\n# TYPE idemd_build_info gauge\nidemd_build_info{version=\"%s\"} 1\n",
	            IDEM_VERSION))
		return IDEM_ERR_NOMEM;
	return IDEM_OK;
}

idem_status idem_metrics_render(idem_metrics *m, struct idem_buf *out)
{
	idem_status r;

	pthread_mutex_lock(&m->lock);
	r = render_locked(m, out);
	pthread_mutex_unlock(&m->lock);
	return r;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned int code, const char *type,
                               char *body, size_t len)
{
	struct MHD_Response *resp =
	        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result r;

	if (resp == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", type);
	r = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **ctx)
{
	idem_metrics *m = cls;
	struct idem_buf body = { 0 };
	char why[64];
	unsigned int code = MHD_HTTP_OK;
	const char *type = "text/plain; charset=utf-8";

	(void)version;
	(void)upload;
	(void)upload_size;
	(void)ctx;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		if (idem_buf_append_str(&body, "method not allowed\n"))
			return MHD_NO;
	} else if (strcmp(url, "/metrics") == 0) {
		type = "text/plain; version=0.0.4; charset=utf-8";
		if (idem_metrics_render(m, &body) != IDEM_OK) {
			idem_buf_done(&body);
			return MHD_NO;
		}
	} else if (strcmp(url, "/healthz") == 0) {
		if (idem_buf_append_str(&body, "ok\n"))
			return MHD_NO;
	} else if (strcmp(url, "/readyz") == 0) {
		if (!idem_metrics_is_ready(m, why, sizeof(why)))
			code = MHD_HTTP_SERVICE_UNAVAILABLE;
		if (idem_buf_printf(&body, "%s\n", why))
			return MHD_NO;
	} else {
		code = MHD_HTTP_NOT_FOUND;
		if (idem_buf_append_str(&body, "not found: try /metrics, /healthz or /readyz\n"))
			return MHD_NO;
	}
	return respond(conn, code, type, body.data, body.len);
}

/*
 * HTTP_MAX_CONNECTIONS, as far as the descriptor limit allows: the soft limit is raised to the
 * hard one when it is too low (systemd's default soft limit is 1024), and what still does not fit
 * lowers the connection limit rather than starving Kafka and Postgres of descriptors.
 */
static unsigned int http_max_connections(void)
{
	struct rlimit rl;
	rlim_t want = HTTP_MAX_CONNECTIONS + HTTP_FD_RESERVE;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 64;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		rlim_t old = rl.rlim_cur;

		rl.rlim_cur =
		        rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			rl.rlim_cur = old;
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return HTTP_MAX_CONNECTIONS;
	return rl.rlim_cur > 2 * HTTP_FD_RESERVE ? (unsigned int)(rl.rlim_cur - HTTP_FD_RESERVE)
	                                         : (unsigned int)(rl.rlim_cur / 2);
}

idem_status idem_metrics_listen(idem_metrics *m, const char *listen, idem_error *err)
{
	struct sockaddr_in6 a6;
	struct sockaddr_in a4;
	const struct sockaddr *sa;
	unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, max_conns;
	const char *colon = strrchr(listen, ':');
	char host[64];
	size_t hl;
	long port;
	char *end;

	if (colon == NULL)
		return idem_error_set(
		        err, IDEM_ERR_CONFIG,
		        "metrics listen address '%s' has no port (expected HOST:PORT)", listen);
	port = strtol(colon + 1, &end, 10);
	hl = (size_t)(colon - listen);
	if (*end != '\0' || port < 1 || port > 65535 || hl >= sizeof(host))
		return idem_error_set(err, IDEM_ERR_CONFIG, "metrics listen address '%s': bad port",
		                      listen);
	memcpy(host, listen, hl);
	host[hl] = '\0';
	memset(&a4, 0, sizeof(a4));
	memset(&a6, 0, sizeof(a6));
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		host[hl - 1] = '\0';
		a6.sin6_family = AF_INET6;
		a6.sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &a6.sin6_addr) != 1)
			return idem_error_set(err, IDEM_ERR_CONFIG,
			                      "metrics listen address '%s': bad IPv6 address",
			                      listen);
		sa = (const struct sockaddr *)&a6;
		flags |= MHD_USE_IPv6;
	} else {
		a4.sin_family = AF_INET;
		a4.sin_port = htons((uint16_t)port);
		/* Every address is written "0.0.0.0:PORT" or "[::]:PORT", never left implied
		 * (the configuration check says so first). */
		if (host[0] == '\0')
			return idem_error_set(
			        err, IDEM_ERR_CONFIG,
			        "metrics listen address '%s' has no host (write '0.0.0.0%s' or '[::]%s' for every address)",
			        listen, listen, listen);
		if (inet_pton(AF_INET, host, &a4.sin_addr) != 1)
			return idem_error_set(err, IDEM_ERR_CONFIG,
			                      "metrics listen address '%s': bad IPv4 address",
			                      listen);
		sa = (const struct sockaddr *)&a4;
	}
	max_conns = http_max_connections();
	m->mhd = MHD_start_daemon(
	        flags, (uint16_t)port, NULL, NULL, on_request, m, MHD_OPTION_SOCK_ADDR, sa,
	        MHD_OPTION_CONNECTION_LIMIT, max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	        max_conns < HTTP_PER_CLIENT ? max_conns : HTTP_PER_CLIENT,
	        MHD_OPTION_CONNECTION_TIMEOUT, HTTP_IDLE_SECONDS,
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONN_MEMORY, MHD_OPTION_END);
	if (m->mhd == NULL)
		return idem_error_set(err, IDEM_ERR_IO, "cannot listen for metrics on '%s'",
		                      listen);
	return IDEM_OK;
}
