/*
 * check_start_rule - every sequence of incidents, checked against exactly-once in effect.
 *
 * A model of one partition of one topic read by one route of group "g", and of what each writer
 * records: the batch's transaction (claims, the handler's effects, IDEM_SQL_PROGRESS, the floor
 * check), the start recorded at assignment (IDEM_SQL_PROGRESS_BASE), the commits to Kafka with
 * idemd's metadata (idem_daemon_commit.c), the database found behind while running
 * (idem__daemon_went_back(): the partition is held and decided again), and the operator's tools
 * (`idemctl rename`, `idemctl replay`, Kafka's tools). Where a partition starts is decided by the
 * project's own idem_resume_decide(), on what the model's database and Kafka hold, with the
 * metadata going through idem_resume_md_format() and idem_resume_md_parse(). What the writers
 * record in the database is modelled in start_rule_model.h, which the differential run
 * (tests/integration/diff_start_rule.c, integration.t_diff_start_rule) holds against the real
 * statements on a real Postgres.
 *
 * Every sequence of up to --depth events (5 unless told) is explored, depth first; after each
 * event the daemon is run to the end of the log with nothing going wrong (started if it is not
 * running), and the oracle checks the database then:
 *   - lost: a message of the current log from the first start on (and not skipped by an
 *     operator) whose key has no effect in the database (a message whose key was already
 *     claimed is a no-op: applied in effect);
 *   - twice: a message that made two effects (unless `idemctl replay` read it again on purpose:
 *     its claim purged, or under another name), or a key that made two in one claims namespace (a
 * consumer name; a key sent again after retention purged its claim is applied again, by design);
 *   - skip: a message an operator's skip passed over was applied (unless the database was
 *     restored to before the skip was honoured, or a replay read it on purpose).
 * For each kind of failure and each set of incidents, the shortest sequence is kept; those
 * whose set of incidents has no failing subset are printed, with what each start decided.
 *
 *   check_start_rule [--depth N] [--broken] [--quiet] [--table]
 *     exit 0 if exactly the known failures fail (check_start_rule_known.h); with --broken (a
 *     rule that starts at Kafka's committed offset when another consumer committed it, whatever
 *     the database holds), exit 0 if some sequence fails that is not known. --table prints the
 *     failing sets as rows of check_start_rule_known.h.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_resume.h"
#include "start_rule_model.h"

#define MAXOFF   16 /* offsets of one log */
#define MAXSNAP  10
#define MAXDEPTH 8
#define BATCH    2 /* messages a batch takes at most */

static const char key_name[NKEYS] = { 'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H' };
/* The first log's messages (a re-sent key among them), then what each produce appends. */
static const int initial_keys[] = { 0, 1, 0 };
static const int produce_keys[] = { 2, 1, 3, 4, 5, 6, 7, 2 };

enum ev {
	EV_PRODUCE,
	EV_START,
	EV_START_NODB,
	EV_START_NOKAFKA,
	EV_START_NOCLUSTER,
	EV_BATCH,
	EV_CRASH_BEFORE,
	EV_CRASH_AFTER,
	EV_RESTORE,
	EV_FAILOVER,
	EV_LATEST,
	EV_EARLIEST,
	EV_RENAME,
	EV_RENAME_CONFIG,
	EV_OTHER_ROUTE,
	EV_MIRROR,
	EV_RECREATE,
	EV_SKIP,
	EV_REPLAY,
	EV_PURGE,
	EV_N
};

static const char *const ev_name[EV_N] = {
	"produce",
	"start",
	"start(database unreadable)",
	"start(committed offsets unreadable)",
	"start(cluster id unreadable)",
	"batch",
	"SIGKILL before the database commit",
	"SIGKILL between the database commit and Kafka's",
	"restore the database",
	"fail over to a lagging standby",
	"auto.offset.reset: latest, restart",
	"auto.offset.reset: earliest, restart",
	"idemctl rename to the other name, restart under it",
	"rename the consumer in the configuration only, restart",
	"a second route of the group commits",
	"fail over to the mirror cluster (translated offsets)",
	"topic deleted and created again",
	"operator's skip to the log's end (Kafka tools)",
	"idemctl replay from the first start",
	"retention purges the claims",
};

static const char *const ev_sym[EV_N] = {
	"EV_PRODUCE", "EV_START",        "EV_START_NODB",  "EV_START_NOKAFKA", "EV_START_NOCLUSTER",
	"EV_BATCH",   "EV_CRASH_BEFORE", "EV_CRASH_AFTER", "EV_RESTORE",       "EV_FAILOVER",
	"EV_LATEST",  "EV_EARLIEST",     "EV_RENAME",      "EV_RENAME_CONFIG", "EV_OTHER_ROUTE",
	"EV_MIRROR",  "EV_RECREATE",     "EV_SKIP",        "EV_REPLAY",        "EV_PURGE",
};

struct logm {
	int64_t low, high;
	int id[MAXOFF];
	int key[MAXOFF];
};

struct daemon {
	bool running;
	bool held;        /* assigned, its start not decided yet (decided before its next batch) */
	bool held_rename; /* decided: held for a rename made in the configuration only */
	int64_t pos, floor, db_next, stored, acked;
	int64_t first;
	int32_t epoch;
	int cluster;
};

struct world {
	struct logm log;
	int cluster; /* 0: the first cluster, 1: the mirror */
	int ids;     /* messages produced so far */
	int produced;
	bool has_committed;
	int64_t committed;
	char md[200]; /* "" none */
	struct db db;
	struct db snap[MAXSNAP];
	int nsnap;
	bool latest;
	int cons;
	struct daemon d;
	/* the oracle's view */
	int64_t first_start;   /* of the current log; -1: nothing applied or committed yet */
	int64_t run_start;     /* where this run's start would be the first start */
	int64_t first_start_a; /* the first cluster's, for the mirror's */
	bool skipped[MAXOFF];  /* offsets of the current log an operator skipped */
	bool honour[MAXID];    /* messages a skip passed over, not applied then */
	int skip_snap;         /* snapshots when the last skip was made (a restore below: off) */
	bool excused[MAXID];   /* replayed after retention purged their claims */
	bool excused_ck[NCONS][NKEYS];
};

static bool broken_rule;
static bool tracing;

#define TRACE(...)                                                                                 \
	do {                                                                                       \
		if (tracing)                                                                       \
			printf(__VA_ARGS__);                                                       \
	} while (0)

static void snapshot(struct world *w)
{
	if (w->nsnap == MAXSNAP) {
		memmove(&w->snap[0], &w->snap[1], sizeof(w->snap[0]) * (MAXSNAP - 1));
		w->nsnap--;
		w->skip_snap--;
	}
	w->snap[w->nsnap++] = w->db;
}

static void produce(struct world *w, int key)
{
	int64_t o = w->log.high;

	w->log.id[o] = w->ids++;
	w->log.key[o] = key;
	w->log.high++;
}

static void world_init(struct world *w)
{
	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < sizeof(initial_keys) / sizeof(initial_keys[0]); i++)
		produce(w, initial_keys[i]);
	w->first_start = w->first_start_a = -1;
	w->d.cluster = -1;
	snapshot(w); /* the database as migrated, nothing applied */
}

/* ---- Kafka's committed offset and its metadata ---- */

/* The first run that applied or committed anything on a log made the first start. */
static void first_made(struct world *w)
{
	if (w->first_start < 0 && w->d.running)
		w->first_start = w->run_start;
}

static void commit_md(struct world *w, int64_t next)
{
	struct idem_resume_md m = { .version = 2 };

	/* The process read the database's identity at assignment; one copy of it in the model. */
	snprintf(m.db_id, sizeof(m.db_id), "%s", "0b5e0f6e-0000-4000-8000-000000000001");
	if (w->d.cluster >= 0)
		snprintf(m.cluster, sizeof(m.cluster), "%s", cl_name[w->d.cluster]);
	m.epoch = w->d.epoch;
	snprintf(m.consumer, sizeof(m.consumer), "%s", cons_name[w->cons]);
	m.first = w->d.first;
	m.next = next;
	idem_resume_md_format(w->md, sizeof(w->md), &m);
	first_made(w);
	w->has_committed = true;
	w->committed = next;
}

/* idem__daemon_commit_offsets(): the stored offset, unless Kafka has it. */
static void kafka_commit(struct world *w)
{
	struct daemon *d = &w->d;

	if (d->held || d->stored < 0 || d->stored == d->acked)
		return;
	commit_md(w, d->stored);
	d->acked = d->stored;
}

/* ---- the database's writers (start_rule_model.h), on the consumer's row ---- */

/* IDEM_SQL_PROGRESS_BASE: a start decided at assignment. */
static void write_base(struct world *w, int64_t start, int cluster, int32_t epoch, int64_t first)
{
	model_write_base(&w->db.rows[w->cons], start, cluster, epoch, first);
}

/* IDEM_SQL_PROGRESS: a batch's position, in its transaction, in the log the daemon reads. */
static void write_progress(struct world *w, int64_t next)
{
	model_write_progress(&w->db.rows[w->cons], next, w->d.cluster, w->d.epoch, w->d.first);
}

/* ---- the start rule, as idem_resume_positions() and the rebalance callbacks apply it ---- */

static struct idem_resume_out decide(const struct idem_resume_in *in)
{
	struct idem_resume_out o = idem_resume_decide(in);

	/* The broken rule: Kafka's offset committed for another consumer is where it starts. */
	if (broken_rule && in->md_idemd && in->committed >= 0 &&
	    strcmp(in->md.consumer, in->consumer) != 0) {
		o.why = IDEM_RESUME_KAFKA;
		o.wait = IDEM_WAIT_NONE;
		o.start = o.first = in->committed;
		o.record = true;
	}
	return o;
}

/* Where the oracle says a log's first start begins: a committed offset, else the reset. */
static int64_t oracle_first(const struct world *w)
{
	if (w->has_committed && w->committed >= w->log.low && w->committed <= w->log.high)
		return w->committed;
	return w->latest ? w->log.high : w->log.low;
}

/* idem_resume_positions() with everything read: the start decided, recorded and committed. */
static void decide_start(struct world *w)
{
	struct idem_resume_in in = { 0 };
	struct idem_resume_out o;
	struct daemon *d = &w->d;
	int64_t floor;

	if (w->first_start < 0)
		w->run_start = oracle_first(w);
	in.consumer = cons_name[w->cons];
	in.cluster = cl_name[w->cluster];
	in.reset = w->latest ? RD_KAFKA_OFFSET_END : RD_KAFKA_OFFSET_BEGINNING;
	in.low = w->log.low;
	in.high = w->log.high;
	in.db_read = true;
	in.committed = -1;
	in.md.first = in.md.next = -1;
	/* IDEM_SQL_RESUME_GET: the row, and the group's other consumers on this topic's
	 * partition in this cluster. */
	model_resume_read(&w->db, w->cons, w->cluster, &in);
	in.committed_read = true;
	in.committed = w->has_committed ? w->committed : -1;
	in.md_idemd = w->has_committed && w->md[0] != '\0' &&
	              idem_resume_md_parse(w->md, strlen(w->md), &in.md) &&
	              in.md.next == in.committed;
	o = decide(&in);
	TRACE("      start: case=%s%s%s log=%s start=%" PRId64 " floor=%" PRId64 " first=%" PRId64
	      " record=%d [db=%" PRId64 " other=%" PRId64 " committed=%" PRId64 " md=\"%s\"]\n",
	      idem_resume_case_str(o.why), o.why == IDEM_RESUME_HOLD ? ":" : "",
	      idem_resume_wait_str(o.wait), idem_resume_log_str(o.log), o.start, o.floor, o.first,
	      (int)o.record, in.db, in.other_db, in.committed, w->has_committed ? w->md : "");
	if (o.why == IDEM_RESUME_HOLD) {
		/* Everything is read: only a rename made in the configuration holds it now. */
		d->held = true;
		d->held_rename = o.wait == IDEM_WAIT_RENAMED;
		return;
	}
	if (o.record) {
		write_base(w, o.start, w->cluster, o.epoch, o.first);
		first_made(w);
		snapshot(w);
	}
	floor = o.record ? o.start : o.floor;
	*d = (struct daemon){ true, false, false,   o.start, floor,     -1,
		              -1,   -1,    o.first, o.epoch, w->cluster };
	d->acked = w->has_committed ? w->committed : -1;
	/* idem__daemon_on_assigned(): a start the database holds is committed at once. */
	if (o.start >= 0 && o.start == floor) {
		d->db_next = d->stored = o.start;
		kafka_commit(w);
	}
}

/* Assigned: decided now if everything can be read, else held until it can. */
static void start(struct world *w, bool all_read)
{
	w->d = (struct daemon){ true, true, false, -1, -1, -1, -1, -1, -1, 0, w->cluster };
	if (all_read)
		decide_start(w);
	else
		TRACE("      start: held (not everything could be read)\n");
}

/* idem__daemon_went_back(): the partition is held, and its start decided again. */
static void went_back(struct world *w, int64_t db)
{
	w->d.held = true;
	TRACE("      database behind: row next=%" PRId64 ", the start decided again\n", db);
}

/* The row is a position in the log the daemon reads (its cluster and epoch). */
static bool same_log(const struct row *r, const struct daemon *d)
{
	return r->present && r->epoch == d->epoch && (r->cluster < 0 || r->cluster == d->cluster);
}

/* One batch: 0 applied and committed; crash 1 before the database's commit, 2 after it. */
static void batch(struct world *w, int crash)
{
	struct daemon *d = &w->d;
	const struct row *r = &w->db.rows[w->cons];
	int64_t row = r->present ? r->next : -1, end;

	if (d->held) {
		if (crash != 0)
			d->running = false;
		else
			decide_start(w);
		return;
	}
	/* The transaction's floor check (and the check after a reconnect): the row in this
	 * log, at the floor or beyond. */
	if (d->floor >= 0 && (row < d->floor || !same_log(r, d))) {
		went_back(w, row);
		return;
	}
	if (d->pos >= w->log.high)
		return;
	end = d->pos + BATCH < w->log.high ? d->pos + BATCH : w->log.high;
	if (crash == 1) {
		d->running = false;
		return;
	}
	for (int64_t o = d->pos; o < end; o++) {
		int k = w->log.key[o], id = w->log.id[o];

		if (!model_claim(&w->db, w->cons, k, id))
			continue;
		w->db.eff_ck[w->cons][k]++;
		w->db.eff_msg[id]++;
	}
	write_progress(w, end);
	first_made(w);
	snapshot(w);
	TRACE("      batch %" PRId64 "..%" PRId64 " committed\n", d->pos, end - 1);
	d->pos = end;
	if (end > d->db_next)
		d->db_next = end;
	if (end > d->floor)
		d->floor = end;
	if (end > d->stored)
		d->stored = end;
	if (crash == 2) {
		d->running = false;
		return;
	}
	kafka_commit(w);
}

static bool batch_enabled(const struct world *w)
{
	const struct row *r = &w->db.rows[w->cons];
	int64_t row = r->present ? r->next : -1;

	return w->d.running &&
	       (w->d.held || (!w->d.held && w->d.pos < w->log.high) ||
	        (!w->d.held && w->d.floor >= 0 && (row < w->d.floor || !same_log(r, &w->d))));
}

/* A clean stop (a restart follows): what is stored is committed. */
static void stop(struct world *w)
{
	if (w->d.running)
		kafka_commit(w);
	w->d.running = false;
}

/* ---- the events ---- */

static bool purge(struct world *w, bool doit);
static bool purge_any(const struct world *w);

static bool enabled(const struct world *w, enum ev e, int arg)
{
	switch (e) {
	case EV_PRODUCE:
		return w->log.high < MAXOFF && w->ids < MAXID &&
		       w->produced < (int)(sizeof(produce_keys) / sizeof(produce_keys[0]));
	case EV_START:
	case EV_START_NODB:
	case EV_START_NOKAFKA:
	case EV_START_NOCLUSTER:
		return !w->d.running;
	case EV_BATCH:
	case EV_CRASH_BEFORE:
	case EV_CRASH_AFTER:
		return batch_enabled(w);
	case EV_RESTORE:
		return arg < w->nsnap - 2;
	case EV_FAILOVER:
		return w->nsnap >= 2;
	case EV_LATEST:
		return !w->latest;
	case EV_EARLIEST:
		return w->latest;
	case EV_RENAME:
	case EV_RENAME_CONFIG:
	case EV_OTHER_ROUTE:
		return true;
	case EV_MIRROR:
		return w->cluster == 0;
	case EV_RECREATE:
		return w->d.running;
	case EV_SKIP:
		return w->log.high > 0 && (!w->has_committed || w->committed < w->log.high);
	case EV_REPLAY: {
		const struct row *r = &w->db.rows[w->cons];
		int64_t from = w->first_start >= 0 ? w->first_start : w->log.low;

		return r->present && r->next > from;
	}
	case EV_PURGE:
		return purge_any(w);
	case EV_N:
		break;
	}
	return false;
}

static void restore(struct world *w, int to)
{
	w->db = w->snap[to];
	w->nsnap = to + 1;
	if (to < w->skip_snap)
		memset(w->honour, 0, sizeof(w->honour));
}

/* `idemctl rename` (model_rename()), and the oracle's counts by namespace with it. */
static void rename_ns(struct world *w, int from, int to)
{
	model_rename(&w->db, from, to);
	for (int k = 0; k < NKEYS; k++) {
		/* The oracle's count of effects by namespace goes with it. */
		w->db.eff_ck[to][k] += w->db.eff_ck[from][k];
		w->db.eff_ck[from][k] = 0;
		w->excused_ck[to][k] = w->excused_ck[to][k] || w->excused_ck[from][k];
	}
	snapshot(w);
}

/* The offset of message @id in the current log, or -1. */
static int64_t offset_of(const struct world *w, int id)
{
	for (int64_t o = w->log.low; o < w->log.high; o++) {
		if (w->log.id[o] == id)
			return o;
	}
	return -1;
}

static bool purge_any(const struct world *w)
{
	struct world c = *w;

	return purge(&c, false);
}

/*
 * Retention (idemd's, by age): claims of messages that both the database's position and Kafka's
 * committed offset have passed, or of an earlier log. A claim younger than that is never purged
 * by an age that covers the time a position takes to be committed. With @doit, purged (the keys
 * sent again afterwards are applied again, by design); returns whether any claim qualifies.
 */
static bool purge(struct world *w, bool doit)
{
	const struct row *r = &w->db.rows[w->cons];
	int64_t bound;
	bool any = false;

	if (!r->present || !w->has_committed || r->cluster != w->cluster)
		return false;
	bound = r->next < w->committed ? r->next : w->committed;
	for (int k = 0; k < NKEYS; k++) {
		int64_t o;

		if (w->db.claim[w->cons][k] == 0)
			continue;
		o = offset_of(w, w->db.claim[w->cons][k] - 1);
		if (o >= 0 && o >= bound)
			continue;
		any = true;
		if (doit) {
			model_purge_claim(&w->db, w->cons, k);
			w->excused_ck[w->cons][k] = true;
		}
	}
	return any;
}

static void apply(struct world *w, enum ev e, int arg)
{
	switch (e) {
	case EV_PRODUCE:
		produce(w, produce_keys[w->produced++]);
		break;
	case EV_START:
		start(w, true);
		break;
	case EV_START_NODB:
	case EV_START_NOKAFKA:
	case EV_START_NOCLUSTER:
		start(w, false);
		break;
	case EV_BATCH:
		batch(w, 0);
		break;
	case EV_CRASH_BEFORE:
		batch(w, 1);
		break;
	case EV_CRASH_AFTER:
		batch(w, 2);
		break;
	case EV_RESTORE:
		restore(w, arg);
		break;
	case EV_FAILOVER:
		restore(w, w->nsnap - 2);
		break;
	case EV_LATEST:
	case EV_EARLIEST:
		stop(w);
		w->latest = e == EV_LATEST;
		break;
	case EV_RENAME:
		stop(w);
		rename_ns(w, w->cons, 1 - w->cons);
		w->cons = 1 - w->cons;
		break;
	case EV_RENAME_CONFIG:
		stop(w);
		w->cons = 1 - w->cons;
		break;
	case EV_OTHER_ROUTE: {
		/* Another route of the group, on its own topic, records its start and progress. */
		struct row *r = &w->db.rows[SHIP];

		*r = (struct row){ true, r->present ? r->next + 5 : 5, w->cluster, 0, 0, true };
		snapshot(w);
		break;
	}
	case EV_MIRROR: {
		/* The mirror holds the first cluster's messages from offset 1 on, one offset lower;
		 * the group's offset is translated, with its metadata copied. */
		struct logm m = { 0 };
		bool skipped[MAXOFF];

		stop(w);
		memcpy(skipped, w->skipped, sizeof(skipped));
		for (int64_t o = w->log.low > 1 ? w->log.low : 1; o < w->log.high; o++) {
			m.id[o - 1] = w->log.id[o];
			m.key[o - 1] = w->log.key[o];
		}
		m.low = w->log.low > 1 ? w->log.low - 1 : 0;
		m.high = w->log.high > 0 ? w->log.high - 1 : 0;
		w->log = m;
		if (w->has_committed)
			w->committed = w->committed > 0 ? w->committed - 1 : 0;
		memset(w->skipped, 0, sizeof(w->skipped));
		for (int64_t o = 1; o < MAXOFF; o++)
			w->skipped[o - 1] = skipped[o];
		w->first_start_a = w->first_start;
		w->first_start = w->first_start_a >= 0
		                         ? (w->first_start_a > 0 ? w->first_start_a - 1 : 0)
		                         : -1;
		w->cluster = 1;
		break;
	}
	case EV_RECREATE:
		/* A new empty log; the group's offsets go with the old topic. Seen by the running
		 * daemon as the partition assigned again (while the new log is shorter than the
		 * old position: ARCHITECTURE.md, librdkafka exposes no topic id). */
		stop(w);
		memset(&w->log, 0, sizeof(w->log));
		w->has_committed = false;
		w->md[0] = '\0';
		w->first_start = -1;
		memset(w->skipped, 0, sizeof(w->skipped));
		start(w, true);
		break;
	case EV_SKIP: {
		int64_t from = w->has_committed
		                       ? w->committed
		                       : (w->first_start >= 0 ? w->first_start : w->log.low);

		stop(w);
		/* The operator says the log up to its end is done with: nothing before it is
		 * lost; what the skip passes over and was not applied must stay so. */
		for (int64_t o = w->log.low; o < w->log.high; o++)
			w->skipped[o] = true;
		for (int64_t o = from; o < w->log.high; o++) {
			if (w->db.eff_msg[w->log.id[o]] == 0)
				w->honour[w->log.id[o]] = true;
		}
		w->skip_snap = w->nsnap;
		w->has_committed = true;
		w->committed = w->log.high;
		w->md[0] = '\0';
		break;
	}
	case EV_REPLAY: {
		struct row *r = &w->db.rows[w->cons];
		int64_t from = w->first_start >= 0 ? w->first_start : w->log.low;

		stop(w);
		for (int64_t o = from; o < w->log.high; o++) {
			int id = w->log.id[o];

			/* Read again on purpose: under another name, or after a purge, applied
			 * again (idemctl replay's own warning); a skip beyond is undone. */
			if (o < r->next)
				w->excused[id] = true;
			w->honour[id] = false;
			w->skipped[o] = false;
		}
		w->has_committed = true;
		w->committed = from;
		w->md[0] = '\0';
		model_replay_mark(r, from);
		snapshot(w);
		break;
	}
	case EV_PURGE:
		/* Past the retention a key sent again is applied again, by design: only a message
		 * read again counts as twice from here. */
		(void)purge(w, true);
		snapshot(w);
		break;
	case EV_N:
		break;
	}
}

/* ---- the oracle ---- */

enum fail { F_LOST = 1, F_TWICE = 2, F_SKIP = 4 };
enum { K_LOST, K_TWICE, K_SKIP }; /* the failures' bits, as indexes */
static const char *const kind_sym[3] = { "K_LOST", "K_TWICE", "K_SKIP" };
static const char *const fail_name[3] = { "lost", "twice", "skip" };

/* Run to the end of the log with nothing going wrong, then check; the failures' bits. */
static int check(const struct world *w0)
{
	static struct world w;
	int f = 0;

	w = *w0;
	if (!w.d.running)
		start(&w, true);
	for (int i = 0; i < 4 * MAXOFF; i++) {
		/* Held for a rename made in the configuration only: the operator runs the
		 * `idemctl rename` the log names, and the partition is decided again. */
		if (w.d.running && w.d.held_rename) {
			TRACE("      held: renamed in the configuration only; idemctl rename %s %s\n",
			      cons_name[1 - w.cons], cons_name[w.cons]);
			rename_ns(&w, 1 - w.cons, w.cons);
			w.d.held_rename = false;
		}
		if (!batch_enabled(&w))
			break;
		batch(&w, 0);
	}
	for (int64_t o = w.first_start >= 0 ? w.first_start : w.log.high; o < w.log.high; o++) {
		bool any = false;

		if (w.skipped[o])
			continue;
		for (int c = 0; c < NCONS; c++)
			any = any || w.db.eff_ck[c][w.log.key[o]] > 0;
		if (!any) {
			TRACE("      lost: offset %" PRId64 " (key %c)\n", o,
			      key_name[w.log.key[o]]);
			f |= F_LOST;
		}
	}
	for (int id = 0; id < MAXID; id++) {
		if (w.db.eff_msg[id] > 1 && !w.excused[id]) {
			TRACE("      twice: message %d\n", id);
			f |= F_TWICE;
		}
		if (w.honour[id] && w.db.eff_msg[id] > 0) {
			TRACE("      skip not honoured: message %d\n", id);
			f |= F_SKIP;
		}
	}
	for (int c = 0; c < NCONS; c++) {
		for (int k = 0; k < NKEYS; k++) {
			if (w.db.eff_ck[c][k] > 1 && !w.excused_ck[c][k]) {
				TRACE("      twice: key %c under %s\n", key_name[k], cons_name[c]);
				f |= F_TWICE;
			}
		}
	}
	return f;
}

/* ---- the search ---- */

struct step {
	uint8_t ev, arg;
};

struct best {
	uint8_t len; /* 0: none */
	struct step seq[MAXDEPTH];
};

static struct best *best; /* [kind][set of incidents] */

/* Normal operation, not an incident: not counted in a sequence's set of incidents. */
#define NORMAL(e) ((e) == EV_PRODUCE || (e) == EV_START || (e) == EV_BATCH)
static uint64_t explored;
static int max_depth = 5;

static void record(int kind, uint32_t mask, const struct step *seq, int len)
{
	struct best *b = &best[((size_t)kind << EV_N) | mask];

	if (b->len == 0 || len < b->len) {
		b->len = (uint8_t)len;
		memcpy(b->seq, seq, sizeof(*seq) * (size_t)len);
	}
}

static void explore(const struct world *w, struct step *seq, int depth, uint32_t mask)
{
	if (depth == max_depth)
		return;
	for (int e = 0; e < EV_N; e++) {
		int nargs = e == EV_RESTORE ? MAXSNAP : 1;

		for (int a = 0; a < nargs; a++) {
			struct world next;
			uint32_t m = mask | (NORMAL(e) ? 0 : 1u << e);
			int f;

			if (!enabled(w, (enum ev)e, a))
				continue;
			next = *w;
			apply(&next, (enum ev)e, a);
			seq[depth] = (struct step){ (uint8_t)e, (uint8_t)a };
			explored++;
			f = check(&next);
			for (int k = 0; k < 3; k++) {
				if (f & (1 << k))
					record(k, m, seq, depth + 1);
			}
			explore(&next, seq, depth + 1, m);
		}
	}
}

static void print_seq(const struct step *seq, int len)
{
	struct world w;

	world_init(&w);
	tracing = true;
	for (int i = 0; i < len; i++) {
		if (seq[i].ev == EV_RESTORE)
			printf("    %d. %s to snapshot %d\n", i + 1, ev_name[seq[i].ev],
			       seq[i].arg);
		else
			printf("    %d. %s\n", i + 1, ev_name[seq[i].ev]);
		apply(&w, (enum ev)seq[i].ev, seq[i].arg);
	}
	printf("    then: run to the log's end\n");
	(void)check(&w);
	tracing = false;
}

/*
 * Known failures of the rule: a kind of failure and its set of incidents (each one's shortest
 * sequence is printed). The checker passes only if exactly these fail: a fix shows as a known
 * failure that no longer fails, to be taken off this list.
 */
#define B(e) (1u << (e))
static const struct known {
	int kind;
	uint32_t incidents;
} known[] = {
#include "check_start_rule_known.h"
	{ -1, 0 }, /* the end */
};

static bool is_known(int kind, uint32_t m)
{
	for (size_t i = 0; known[i].kind >= 0; i++) {
		if (known[i].kind == kind && known[i].incidents == m)
			return true;
	}
	return false;
}

static void print_table_row(int kind, uint32_t m)
{
	printf("\t{ %s, 0", kind_sym[kind]);
	for (int e = 0; e < EV_N; e++) {
		if (m & B(e))
			printf(" | B(%s)", ev_sym[e]);
	}
	printf(" },\n");
}

/* The sets of incidents that fail with no failing subset, shortest sequence each. */
static int report(bool quiet, bool table, int *ret_unknown, int *ret_fixed)
{
	int n = 0;

	for (int k = 0; k < 3; k++) {
		for (uint32_t m = 0; m < (1u << EV_N); m++) {
			const struct best *b = &best[((size_t)k << EV_N) | m];
			bool minimal = b->len > 0;

			for (uint32_t s = (m - 1) & m; minimal && s != m; s = (s - 1) & m) {
				if (best[((size_t)k << EV_N) | s].len > 0)
					minimal = false;
				if (s == 0)
					break;
			}
			if (!minimal)
				continue;
			n++;
			if (!is_known(k, m))
				(*ret_unknown)++;
			if (table)
				print_table_row(k, m);
			if (quiet || table)
				continue;
			printf("%s %s, %d event(s):\n", is_known(k, m) ? "KNOWN FAILURE" : "FAIL",
			       fail_name[k], b->len);
			print_seq(b->seq, b->len);
		}
	}
	for (size_t i = 0; known[i].kind >= 0; i++) {
		const struct best *b = &best[((size_t)known[i].kind << EV_N) | known[i].incidents];

		if (b->len > 0)
			continue;
		(*ret_fixed)++;
		if (!quiet && !table) {
			printf("FIXED (take it off check_start_rule_known.h): ");
			print_table_row(known[i].kind, known[i].incidents);
		}
	}
	return n;
}

int main(int argc, char **argv)
{
	bool quiet = false, table = false;
	int unknown = 0, fixed = 0;
	struct step seq[MAXDEPTH];
	struct world w;
	struct timespec t0, t1;
	int classes;
	double secs;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--broken") == 0) {
			broken_rule = true;
		} else if (strcmp(argv[i], "--quiet") == 0) {
			quiet = true;
		} else if (strcmp(argv[i], "--table") == 0) {
			table = true;
		} else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc) {
			max_depth = atoi(argv[++i]);
			if (max_depth < 1 || max_depth > MAXDEPTH) {
				fprintf(stderr, "check_start_rule: --depth 1..%d\n", MAXDEPTH);
				return 2;
			}
		} else {
			fprintf(stderr,
			        "usage: check_start_rule [--depth N] [--broken] [--quiet]\n");
			return 2;
		}
	}
	best = calloc((size_t)3 << EV_N, sizeof(*best));
	if (best == NULL)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	world_init(&w);
	explore(&w, seq, 0, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	classes = report(quiet, table, &unknown, &fixed);
	printf("%s rule: %" PRIu64 " sequences of up to %d events explored in %.1f s: %d failing "
	       "set(s) of incidents, %d of them not known; %zu known, %d of them fixed\n",
	       broken_rule ? "broken" : "the", explored, max_depth, secs, classes, unknown,
	       sizeof(known) / sizeof(known[0]) - 1, fixed);
	free(best);
	/* The broken rule must fail in a way the known failures do not. */
	if (broken_rule)
		return unknown > 0 ? 0 : 1;
	return unknown == 0 && fixed == 0 ? 0 : 1;
}
