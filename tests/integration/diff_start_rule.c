/*
 * diff_start_rule - the start rule checker's model of each writer (tests/unit/start_rule_model.h)
 * held against the real statements on a real Postgres.
 *
 * check_start_rule explores every sequence of incidents on a model of what the writers record in
 * idem.partition_progress and idem.processed_messages; a model that drifted from the SQL would
 * make its verdict about another program. Here random sequences of writer events are applied both
 * to the model and to a database migrated by idem_migrate_apply() (what `idemctl migrate` runs),
 * through the statements of lib/idem_sql.c with the parameters lib/ builds for them:
 *   - base: IDEM_SQL_PROGRESS_BASE, one row as idem_resume.c record_rows() binds it (group "g",
 *     a start, a cluster or NULL, an epoch, a first start or NULL);
 *   - batch: one transaction as idem_flush.c sends it for one batch: the claim of its collapsed
 *     keys (a real idem_batch: idem_batch_add(), idem_batch_collapse(), idem_bind_claim(),
 *     IDEM_SQL_CLAIM in binary) and IDEM_SQL_PROGRESS (idem_bind_progress(), 20 arrays), the
 *     batch's log (cluster or NULL, epoch, first start or NULL, group "g") varied;
 *   - combined: a batch of "pay" or "pay2" and one of "ship" (another route, another topic) in
 *     one transaction: idem_bind_claim_many(), IDEM_SQL_CLAIM_MANY, IDEM_SQL_PROGRESS of both;
 *   - rename: idem_rename_consumer() between "pay" and "pay2" (with --force), into a name that
 *     holds rows and claims of its own or not;
 *   - replay: IDEM_SQL_REPLAY_MARK to an offset;
 *   - purge: IDEM_SQL_RETENTION_PURGE of one consumer with the cutoff at one of its claims'
 *     processed_at (the claims of earlier transactions go);
 *   - restore: the database re-created from a snapshot of the model's (a state taken after an
 *     earlier event of the sequence), and craft: from a state drawn at random, with rows of no
 *     cluster or no group (a row of before schema version 8).
 * After every event the database is compared with the model: every progress row (present,
 * next_offset, kafka_cluster, log_epoch, first_offset, group_id), every claim (which consumer
 * holds which key, at which offset), and what IDEM_SQL_RESUME_GET answers (through
 * idem_resume_row()) for "pay" and "pay2" with this cluster, the other and an unknown one, against
 * model_resume_read().
 *
 * Only what the model claims to model is compared: the counters, replay_to, reapply_to, halts,
 * updated_at and the retention horizon are written by the same statements but not modelled
 * (the start rule reads none of them). Which claims retention may purge (the checker's bound) is
 * the checker's; here only what a purge does to the claims is compared.
 *
 *   diff_start_rule [--seed N] [--sequences N] [--events N] [--only I] [CONNINFO]
 *     CONNINFO defaults to $IDEM_CONNINFO; the seed to $IDEM_DIFF_SEED, else 4242. Each
 *     sequence has a generator of its own, so --only I runs sequence I of a seed alone.
 *     Exit 0: no difference; 1: a difference (the seed, the sequence and the fields printed);
 *     2: usage or the database failed.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem_batch.h"
#include "idem_bind.h"
#include "idem_cfg.h"
#include "idem_field.h"
#include "idem_migrate.h"
#include "idem_pg.h"
#include "idem_rename.h"
#include "idem_resume.h"
#include "idem_sql.h"
#include "start_rule_model.h"

#define GROUP    "g"
#define MAXOFF   16 /* offsets of each log */
#define MAXSNAP  16
#define MAXEV    64
#define EVTEXT   160
#define MAXBATCH 3

/* The topic each consumer reads: "pay" and "pay2" one route's, "ship" another's. */
static const char *const topic_of[NCONS] = { "payments", "payments", "shipments" };

enum dev { D_BASE, D_BATCH, D_COMBINED, D_RENAME, D_REPLAY, D_PURGE, D_RESTORE, D_CRAFT, D_N };
static const int dev_weight[D_N] = { 4, 5, 2, 2, 1, 1, 1, 1 };

/* The model's database, and when each claim was made (the event, for retention's cutoff). */
struct state {
	struct db db;
	int claim_ev[NCONS][NKEYS];
};

struct run {
	PGconn *conn;
	uint64_t seed, rng;
	int seq;
	int key[NCONS][MAXOFF]; /* each log's keys (pay and pay2 read one log) */
	struct state st;
	struct state snap[MAXSNAP];
	int nsnap;
	int nev;
	char ev[MAXEV][EVTEXT]; /* the sequence so far */
	struct idem_cfg cfg;
	struct idem_route route[NCONS];
	struct idem_bind bd;
	int diffs;
};

static void fatal(const char *fmt, ...) IDEM_PRINTF(1, 2);

static void fatal(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "diff_start_rule: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

/* splitmix64: the same numbers on every machine for a seed. */
static uint64_t next_u64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* A number in [lo, hi]. */
static int rnd(struct run *rn, int lo, int hi)
{
	return lo + (int)(next_u64(&rn->rng) % (uint64_t)(hi - lo + 1));
}

static void event(struct run *rn, const char *fmt, ...) IDEM_PRINTF(2, 3);

static void event(struct run *rn, const char *fmt, ...)
{
	va_list ap;

	if (rn->nev == MAXEV)
		fatal("more than %d events", MAXEV);
	va_start(ap, fmt);
	vsnprintf(rn->ev[rn->nev++], EVTEXT, fmt, ap);
	va_end(ap);
}

static const char *cl_text(int cluster)
{
	return cluster >= 0 ? cl_name[cluster] : "NULL";
}

/* ---- the database ---- */

static PGresult *exec_sql(struct run *rn, enum idem_sql_id id, const char *const *vals,
                          const char *what)
{
	idem_error err = { 0 };
	PGresult *res = NULL;

	if (idem_sql_exec(rn->conn, id, vals, what, &res, &err) != IDEM_OK)
		fatal("%s", err.msg);
	return res;
}

static void exec_plain(struct run *rn, const char *sql)
{
	idem_error err = { 0 };

	if (idem_pg_exec(rn->conn, sql, sql, &err) != IDEM_OK)
		fatal("%s", err.msg);
}

static void exec_params(struct run *rn, const char *sql, int n, const char *const *vals)
{
	PGresult *res = PQexecParams(rn->conn, sql, n, NULL, vals, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		fatal("%s: %s", sql, PQresultErrorMessage(res));
	PQclear(res);
}

static void arr_open(struct idem_buf *a)
{
	if (idem_pgarray_open(a) != IDEM_OK)
		fatal("out of memory");
}

static void arr_add(struct idem_buf *a, const char *v)
{
	if (idem_pgarray_add(a, v != NULL ? v : "", v != NULL ? strlen(v) : 0, v == NULL) !=
	    IDEM_OK)
		fatal("out of memory");
}

static void arr_add_int(struct idem_buf *a, int64_t v)
{
	char text[24];

	snprintf(text, sizeof(text), "%" PRId64, v);
	arr_add(a, text);
}

static void arr_close(struct idem_buf *a)
{
	if (idem_pgarray_close(a) != IDEM_OK)
		fatal("out of memory");
}

/*
 * The database made to hold @st exactly (a restore): the tables emptied, each row and claim
 * inserted, a claim's processed_at ordered as the events that made them.
 */
static void db_load(struct run *rn, const struct state *st)
{
	/* DELETE, not TRUNCATE: a few rows, and a TRUNCATE costs milliseconds of files. */
	exec_plain(rn, "DELETE FROM idem.processed_messages; DELETE FROM idem.partition_progress;"
	               " DELETE FROM idem.quarantine; DELETE FROM idem.retention_horizon");
	for (int c = 0; c < NCONS; c++) {
		const struct row *r = &st->db.rows[c];
		char next[24], epoch[16], first[24];
		const char *v[7];

		if (!r->present)
			continue;
		snprintf(next, sizeof(next), "%" PRId64, r->next);
		snprintf(epoch, sizeof(epoch), "%" PRId32, r->epoch);
		snprintf(first, sizeof(first), "%" PRId64, r->first);
		v[0] = cons_name[c];
		v[1] = topic_of[c];
		v[2] = next;
		v[3] = r->cluster >= 0 ? cl_name[r->cluster] : NULL;
		v[4] = epoch;
		v[5] = r->first >= 0 ? first : NULL;
		v[6] = r->group ? GROUP : NULL;
		exec_params(rn,
		            "INSERT INTO idem.partition_progress (consumer, topic, partition,"
		            " next_offset, kafka_cluster, log_epoch, first_offset, group_id)"
		            " VALUES ($1, $2, 0, $3, $4, $5, $6, $7)",
		            7, v);
	}
	for (int c = 0; c < NCONS; c++) {
		for (int k = 0; k < NKEYS; k++) {
			char key[2] = { (char)('A' + k), '\0' }, off[24], at[24];
			const char *v[5];

			if (st->db.claim[c][k] == 0)
				continue;
			snprintf(off, sizeof(off), "%d", st->db.claim[c][k] - 1);
			snprintf(at, sizeof(at), "%d", st->claim_ev[c][k]);
			v[0] = cons_name[c];
			v[1] = key;
			v[2] = topic_of[c];
			v[3] = off;
			v[4] = at;
			exec_params(
			        rn,
			        "INSERT INTO idem.processed_messages (consumer_id, business_key,"
			        " topic_id, partition, \"offset\", processed_at)"
			        " VALUES (idem.claim_consumer_id($1), $2, idem.claim_topic_id($3), 0, $4,"
			        " to_timestamp($5::bigint))",
			        5, v);
		}
	}
}

/* ---- the events, each applied to the model and to the database ---- */

/* IDEM_SQL_PROGRESS_BASE, bound as idem_resume.c record_rows() binds one partition. */
static void ev_base(struct run *rn)
{
	int c = rnd(rn, 0, NCONS - 1), cluster = rnd(rn, -1, 1);
	int64_t start = rnd(rn, 0, 12), first = rnd(rn, -1, 6);
	int32_t epoch = rnd(rn, 0, 2);
	struct idem_buf a[7] = { 0 };
	const char *vals[8];

	event(rn, "base %s start=%" PRId64 " cluster=%s epoch=%" PRId32 " first=%" PRId64,
	      cons_name[c], start, cl_text(cluster), epoch, first);
	model_write_base(&rn->st.db.rows[c], start, cluster, epoch, first);
	for (int k = 0; k < 7; k++)
		arr_open(&a[k]);
	arr_add(&a[0], cons_name[c]);
	arr_add(&a[1], topic_of[c]);
	arr_add_int(&a[2], 0);
	arr_add_int(&a[3], start);
	arr_add(&a[4], cluster >= 0 ? cl_name[cluster] : NULL);
	arr_add_int(&a[5], epoch);
	if (first >= 0)
		arr_add_int(&a[6], first);
	else
		arr_add(&a[6], NULL);
	for (int k = 0; k < 7; k++) {
		arr_close(&a[k]);
		vals[k] = a[k].data;
	}
	vals[7] = GROUP;
	PQclear(exec_sql(rn, IDEM_SQL_PROGRESS_BASE, vals, "record the start"));
	for (int k = 0; k < 7; k++)
		idem_buf_done(&a[k]);
}

/* One batch of consumer @c: offsets [pos, end) of its log, read in log (@cluster, @epoch). */
struct bspec {
	int c;
	int64_t pos, end;
	int cluster;
	int32_t epoch;
	int64_t first;
	struct idem_batch b;
};

static void batch_draw(struct run *rn, struct bspec *s, int c)
{
	s->c = c;
	s->pos = rnd(rn, 0, MAXOFF - 1 - MAXBATCH);
	s->end = s->pos + rnd(rn, 1, MAXBATCH);
	s->cluster = rnd(rn, -1, 1);
	s->epoch = rnd(rn, 0, 2);
	s->first = rnd(rn, -1, 6);
}

/* The batch's messages in a real idem_batch, collapsed, with its log as the daemon sets it. */
static void batch_build(struct run *rn, struct bspec *s)
{
	if (idem_batch_init(&s->b, &rn->route[s->c], topic_of[s->c], 0) != IDEM_OK)
		fatal("out of memory");
	for (int64_t o = s->pos; o < s->end; o++) {
		char key[2] = { (char)('A' + rn->key[s->c][o]), '\0' };
		struct idem_msgview m = { 0 };

		m.topic = topic_of[s->c];
		m.offset = o;
		m.timestamp_ms = 1000;
		m.key = key;
		m.key_len = 1;
		m.value = "{}";
		m.value_len = 2;
		if (idem_batch_add(&s->b, &m, &rn->cfg, 0) != IDEM_OK)
			fatal("out of memory");
	}
	if (idem_batch_collapse(&s->b) != IDEM_OK)
		fatal("out of memory");
	s->b.kafka_cluster = s->cluster >= 0 ? cl_name[s->cluster] : NULL;
	s->b.log_first = s->first;
	s->b.group_id = GROUP;
	s->b.log_epoch = s->epoch;
}

/* The model: the claim of each message in offset order, then the batch's progress. */
static void batch_model(struct run *rn, const struct bspec *s)
{
	for (int64_t o = s->pos; o < s->end; o++) {
		int k = rn->key[s->c][o];

		if (model_claim(&rn->st.db, s->c, k, (int)o))
			rn->st.claim_ev[s->c][k] = rn->nev;
	}
	model_write_progress(&rn->st.db.rows[s->c], s->end, s->cluster, s->epoch, s->first);
}

static void batch_event(struct run *rn, const struct bspec *s, const char *what)
{
	char keys[MAXBATCH + 1] = { 0 };

	for (int64_t o = s->pos; o < s->end; o++)
		keys[o - s->pos] = (char)('A' + rn->key[s->c][o]);
	event(rn,
	      "%s %s offsets %" PRId64 "..%" PRId64 " keys %s cluster=%s epoch=%" PRId32
	      " first=%" PRId64,
	      what, cons_name[s->c], s->pos, s->end - 1, keys, cl_text(s->cluster), s->epoch,
	      s->first);
}

/*
 * The batch transaction of @n batches (1, or 2 of different consumers and topics), as
 * idem_flush.c sends it: BEGIN, the claim, IDEM_SQL_PROGRESS, COMMIT (the handler, results and
 * quarantine are no writers of the rows or claims modelled).
 */
static void batch_tx(struct run *rn, struct bspec *s, size_t n)
{
	struct idem_bind_progress pr[2] = { 0 };
	const struct idem_batch *bl[2];
	struct idem_bind_claim claim;
	const char *v[IDEM_BIND_PROGRESS_PARAMS];
	size_t n_keys = 0;
	idem_error err = { 0 };
	enum idem_sql_id id = IDEM_SQL_CLAIM;
	bool one = false;

	for (size_t k = 0; k < n; k++) {
		batch_build(rn, &s[k]);
		bl[k] = &s[k].b;
		n_keys += s[k].b.n_order;
		pr[k].b = &s[k].b;
		pr[k].next_offset = s[k].end;
		pr[k].counts[0] = (uint64_t)(s[k].end - s[k].pos); /* consumed */
		pr[k].reapply_to = -1;
	}
	exec_plain(rn, "BEGIN");
	if (n == 1) {
		if (idem_bind_claim(&rn->bd, &s[0].b, s[0].b.order, s[0].b.n_order, &claim) !=
		    IDEM_OK)
			fatal("out of memory");
	} else {
		if (idem_bind_claim_many(&rn->bd, bl, n, n_keys, &claim, &one) != IDEM_OK)
			fatal("out of memory");
		id = one ? IDEM_SQL_CLAIM_PARTS : IDEM_SQL_CLAIM_MANY;
	}
	if (idem_sql_exec_bin(rn->conn, id, claim.vals, claim.lens, claim.fmts, "claim", NULL,
	                      &err) != IDEM_OK)
		fatal("%s", err.msg);
	if (idem_bind_progress(&rn->bd, pr, n, v) != IDEM_OK)
		fatal("out of memory");
	PQclear(exec_sql(rn, IDEM_SQL_PROGRESS, v, "progress"));
	exec_plain(rn, "COMMIT");
	for (size_t k = 0; k < n; k++)
		idem_batch_done(&s[k].b);
}

static void ev_batch(struct run *rn)
{
	struct bspec s[1];

	batch_draw(rn, &s[0], rnd(rn, 0, NCONS - 1));
	batch_event(rn, &s[0], "batch");
	batch_model(rn, &s[0]);
	batch_tx(rn, s, 1);
}

static void ev_combined(struct run *rn)
{
	struct bspec s[2];

	batch_draw(rn, &s[0], rnd(rn, 0, SHIP - 1));
	batch_draw(rn, &s[1], SHIP);
	batch_event(rn, &s[0], "combined batch:");
	batch_event(rn, &s[1], "   with batch");
	batch_model(rn, &s[0]);
	batch_model(rn, &s[1]);
	batch_tx(rn, s, 2);
}

static void ev_rename(struct run *rn)
{
	int from = rnd(rn, 0, 1), to = 1 - from;
	struct idem_rename_result rr;
	idem_error err = { 0 };
	idem_status r;
	bool any = rn->st.db.rows[from].present;

	event(rn, "idemctl rename %s %s%s", cons_name[from], cons_name[to],
	      rn->st.db.rows[to].present ? " (into a row of its own)" : "");
	for (int k = 0; k < NKEYS; k++) {
		any = any || rn->st.db.claim[from][k] != 0;
		if (rn->st.db.claim[to][k] == 0 && rn->st.db.claim[from][k] != 0)
			rn->st.claim_ev[to][k] = rn->st.claim_ev[from][k];
	}
	model_rename(&rn->st.db, from, to);
	r = idem_rename_consumer(rn->conn, cons_name[from], cons_name[to], true, &rr, &err);
	/* An old name with nothing is refused with nothing changed, as the model changes nothing.
	 */
	if (r != IDEM_OK && !(r == IDEM_ERR_NOT_FOUND && !any))
		fatal("rename: %s", err.msg);
}

static void ev_replay(struct run *rn)
{
	int c = rnd(rn, 0, 1);
	int64_t from = rnd(rn, 0, 10);
	char part[] = "0", off[24];
	const char *vals[4] = { cons_name[c], topic_of[c], part, off };

	event(rn, "idemctl replay %s from %" PRId64, cons_name[c], from);
	snprintf(off, sizeof(off), "%" PRId64, from);
	model_replay_mark(&rn->st.db.rows[c], from);
	PQclear(exec_sql(rn, IDEM_SQL_REPLAY_MARK, vals, "replay mark"));
}

/*
 * Retention of consumer c's claims made before one of its claims (by processed_at, as the purge
 * cuts them by age); nothing if it has none.
 */
static void ev_purge(struct run *rn)
{
	int c = rnd(rn, 0, NCONS - 1), k0 = -1, n = 0;
	char key[2] = { 0 };
	const char *vals[5];
	PGresult *res;

	for (int k = 0; k < NKEYS; k++) {
		if (rn->st.db.claim[c][k] != 0 && rnd(rn, 0, n++) == 0)
			k0 = k;
	}
	if (k0 < 0) {
		event(rn, "retention of %s: no claims", cons_name[c]);
		return;
	}
	event(rn, "retention of %s: the claims older than key %c's", cons_name[c], 'A' + k0);
	key[0] = (char)('A' + k0);
	vals[0] = cons_name[c];
	vals[1] = key;
	res = PQexecParams(rn->conn,
	                   "SELECT processed_at FROM idem.claims_named"
	                   " WHERE consumer = $1 AND business_key = $2",
	                   2, NULL, vals, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		fatal("the claim of key %c under %s is not in the database", 'A' + k0,
		      cons_name[c]);
	for (int k = 0; k < NKEYS; k++) {
		if (rn->st.db.claim[c][k] != 0 && rn->st.claim_ev[c][k] < rn->st.claim_ev[c][k0])
			model_purge_claim(&rn->st.db, c, k);
	}
	/* One step of a sweep over blocks 0 to 1,000,000, with a limit of more than the claims
	 * there are: one statement purges them all. */
	vals[1] = "(0,0)";
	vals[2] = "1000000";
	vals[3] = PQgetvalue(res, 0, 0);
	vals[4] = "1000";
	PQclear(exec_sql(rn, IDEM_SQL_RETENTION_PURGE, vals, "purge"));
	PQclear(res);
}

static void ev_restore(struct run *rn)
{
	int to = rnd(rn, 0, rn->nsnap - 1);

	event(rn, "restore to the state after event %d", to);
	rn->st = rn->snap[to];
	db_load(rn, &rn->st);
}

static void ev_craft(struct run *rn)
{
	char text[EVTEXT] = "", *p = text;

	for (int c = 0; c < NCONS; c++) {
		struct row *r = &rn->st.db.rows[c];

		*r = (struct row){ 0 };
		if (rnd(rn, 0, 3) == 0)
			continue;
		*r = (struct row){ true,          rnd(rn, 0, 12), rnd(rn, -1, 1),
			           rnd(rn, 0, 2), rnd(rn, -1, 6), rnd(rn, 0, 1) == 1 };
		p += snprintf(p, sizeof(text) - (size_t)(p - text),
		              " %s:next=%" PRId64 ",%s,epoch=%" PRId32 ",first=%" PRId64 ",%s",
		              cons_name[c], r->next, cl_text(r->cluster), r->epoch, r->first,
		              r->group ? GROUP : "NULL");
	}
	event(rn, "restore crafted rows:%s", text);
	db_load(rn, &rn->st);
}

/* ---- the comparison ---- */

static void diff(struct run *rn, const char *fmt, ...) IDEM_PRINTF(2, 3);

static void diff(struct run *rn, const char *fmt, ...)
{
	va_list ap;

	if (rn->diffs++ == 0) {
		printf("diff_start_rule: the model and the SQL differ: seed %" PRIu64
		       ", sequence %d (--seed %" PRIu64 " --only %d)\n",
		       rn->seed, rn->seq, rn->seed, rn->seq);
		for (int i = 0; i < rn->nev; i++)
			printf("  %d. %s\n", i + 1, rn->ev[i]);
		printf("then:\n");
	}
	printf("  ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static int cons_index(const char *name)
{
	for (int c = 0; c < NCONS; c++) {
		if (strcmp(name, cons_name[c]) == 0)
			return c;
	}
	return -1;
}

/* "NULL" for a NULL column, else its text. */
static const char *col(const PGresult *res, int i, int j)
{
	return PQgetisnull(res, i, j) ? "NULL" : PQgetvalue(res, i, j);
}

static void row_text(const struct row *r, char *out, size_t len)
{
	char first[24] = "NULL";

	if (!r->present) {
		snprintf(out, len, "no row");
		return;
	}
	if (r->first >= 0)
		snprintf(first, sizeof(first), "%" PRId64, r->first);
	snprintf(out, len,
	         "next_offset=%" PRId64 " kafka_cluster=%s log_epoch=%" PRId32
	         " first_offset=%s group_id=%s",
	         r->next, cl_text(r->cluster), r->epoch, first, r->group ? GROUP : "NULL");
}

static void compare_rows(struct run *rn)
{
	PGresult *res =
	        PQexec(rn->conn, "SELECT consumer, topic, partition, next_offset, kafka_cluster,"
	                         " log_epoch, first_offset, group_id FROM idem.partition_progress"
	                         " ORDER BY consumer, topic, partition");
	bool seen[NCONS] = { false };
	char want[200];

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fatal("read idem.partition_progress: %s", PQresultErrorMessage(res));
	for (int i = 0; i < PQntuples(res); i++) {
		int c = cons_index(PQgetvalue(res, i, 0));
		const struct row *r;
		char got[200];

		snprintf(got, sizeof(got),
		         "next_offset=%s kafka_cluster=%s log_epoch=%s first_offset=%s group_id=%s",
		         col(res, i, 3), col(res, i, 4), col(res, i, 5), col(res, i, 6),
		         col(res, i, 7));
		if (c < 0 || strcmp(PQgetvalue(res, i, 1), topic_of[c]) != 0 ||
		    strcmp(PQgetvalue(res, i, 2), "0") != 0) {
			diff(rn, "progress row %s/%s/%s: the model has no such row (%s)",
			     PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
			     got);
			continue;
		}
		seen[c] = true;
		r = &rn->st.db.rows[c];
		row_text(r, want, sizeof(want));
		if (strcmp(want, got) != 0)
			diff(rn, "progress row of %s: model %s; SQL %s", cons_name[c], want, got);
	}
	for (int c = 0; c < NCONS; c++) {
		if (rn->st.db.rows[c].present && !seen[c]) {
			row_text(&rn->st.db.rows[c], want, sizeof(want));
			diff(rn, "progress row of %s: model %s; SQL no row", cons_name[c], want);
		}
	}
	PQclear(res);
}

static void compare_claims(struct run *rn)
{
	PGresult *res =
	        PQexec(rn->conn, "SELECT consumer, business_key, topic, partition, \"offset\""
	                         " FROM idem.claims_named ORDER BY 1, 2");
	bool seen[NCONS][NKEYS] = { { false } };

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fatal("read idem.processed_messages: %s", PQresultErrorMessage(res));
	for (int i = 0; i < PQntuples(res); i++) {
		int c = cons_index(PQgetvalue(res, i, 0));
		const char *key = PQgetvalue(res, i, 1);
		int k = strlen(key) == 1 ? key[0] - 'A' : -1;
		int64_t off = strtoll(PQgetvalue(res, i, 4), NULL, 10);

		if (c < 0 || k < 0 || k >= NKEYS ||
		    strcmp(PQgetvalue(res, i, 2), topic_of[c]) != 0 ||
		    strcmp(PQgetvalue(res, i, 3), "0") != 0) {
			diff(rn, "claim %s/%s at %s/%s/%s: not one the model can hold",
			     PQgetvalue(res, i, 0), key, PQgetvalue(res, i, 2),
			     PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
			continue;
		}
		seen[c][k] = true;
		if (rn->st.db.claim[c][k] == 0)
			diff(rn, "claim of key %c under %s: model none; SQL at offset %" PRId64,
			     'A' + k, cons_name[c], off);
		else if (rn->st.db.claim[c][k] - 1 != off)
			diff(rn,
			     "claim of key %c under %s: model at offset %d; SQL at offset %" PRId64,
			     'A' + k, cons_name[c], rn->st.db.claim[c][k] - 1, off);
	}
	for (int c = 0; c < NCONS; c++) {
		for (int k = 0; k < NKEYS; k++) {
			if (rn->st.db.claim[c][k] != 0 && !seen[c][k])
				diff(rn, "claim of key %c under %s: model at offset %d; SQL none",
				     'A' + k, cons_name[c], rn->st.db.claim[c][k] - 1);
		}
	}
	PQclear(res);
}

/* What idem_resume_positions() reads for "pay" and "pay2" in @cluster (-1: unknown). */
static void compare_resume(struct run *rn, int cluster)
{
	const char *vals[5] = { "{pay,pay2}", "{payments,payments}", "{0,0}", GROUP,
		                cluster >= 0 ? cl_name[cluster] : NULL };
	PGresult *res = exec_sql(rn, IDEM_SQL_RESUME_GET, vals, "read idem.partition_progress");

	if (PQntuples(res) != SHIP)
		fatal("IDEM_SQL_RESUME_GET: %d rows for %d", PQntuples(res), SHIP);
	for (int c = 0; c < SHIP; c++) {
		struct idem_resume_in got = { 0 }, want = { 0 };

		idem_resume_row(res, c, &got);
		model_resume_read(&rn->st.db, c, cluster, &want);
		if (got.db != want.db || strcmp(got.db_cluster, want.db_cluster) != 0 ||
		    got.db_epoch != want.db_epoch || got.db_first != want.db_first ||
		    got.other_db != want.other_db || got.other_first != want.other_first ||
		    strcmp(got.other_consumer, want.other_consumer) != 0)
			diff(rn,
			     "IDEM_SQL_RESUME_GET for %s in cluster %s: model db=%" PRId64
			     " db_cluster='%s' db_epoch=%" PRId32 " db_first=%" PRId64
			     " other_db=%" PRId64 " other_first=%" PRId64
			     " other_consumer='%s'; SQL db=%" PRId64
			     " db_cluster='%s' db_epoch=%" PRId32 " db_first=%" PRId64
			     " other_db=%" PRId64 " other_first=%" PRId64 " other_consumer='%s'",
			     cons_name[c], cl_text(cluster), want.db, want.db_cluster,
			     want.db_epoch, want.db_first, want.other_db, want.other_first,
			     want.other_consumer, got.db, got.db_cluster, got.db_epoch,
			     got.db_first, got.other_db, got.other_first, got.other_consumer);
	}
	PQclear(res);
}

/* ---- the run ---- */

static void snapshot(struct run *rn)
{
	if (rn->nsnap == MAXSNAP) {
		memmove(&rn->snap[0], &rn->snap[1], sizeof(rn->snap[0]) * (MAXSNAP - 1));
		rn->nsnap--;
	}
	rn->snap[rn->nsnap++] = rn->st;
}

/* Sequence @seq: @events events, compared after each; false at the first difference. */
static bool sequence(struct run *rn, int seq, int events)
{
	int total = 0;

	for (int d = 0; d < D_N; d++)
		total += dev_weight[d];
	rn->seq = seq;
	rn->rng = rn->seed ^ (0x5851f42d4c957f2du * (uint64_t)(seq + 1));
	memset(&rn->st, 0, sizeof(rn->st));
	rn->nsnap = rn->nev = 0;
	for (int c = 0; c < NCONS; c++) {
		for (int o = 0; o < MAXOFF; o++)
			rn->key[c][o] = rnd(rn, 0, NKEYS - 1);
	}
	db_load(rn, &rn->st);
	snapshot(rn);
	for (int i = 0, n = rnd(rn, 1, events); i < n; i++) {
		int pick = rnd(rn, 0, total - 1), d = 0;

		while (pick >= dev_weight[d])
			pick -= dev_weight[d++];
		switch ((enum dev)d) {
		case D_BASE:
			ev_base(rn);
			break;
		case D_BATCH:
			ev_batch(rn);
			break;
		case D_COMBINED:
			ev_combined(rn);
			break;
		case D_RENAME:
			ev_rename(rn);
			break;
		case D_REPLAY:
			ev_replay(rn);
			break;
		case D_PURGE:
			ev_purge(rn);
			break;
		case D_RESTORE:
			ev_restore(rn);
			break;
		case D_CRAFT:
			ev_craft(rn);
			break;
		case D_N:
			break;
		}
		snapshot(rn);
		compare_rows(rn);
		compare_claims(rn);
		for (int cluster = -1; cluster <= 1; cluster++)
			compare_resume(rn, cluster);
		if (rn->diffs > 0)
			return false;
	}
	return true;
}

static long arg_num(const char *opt, const char *v, long lo, long hi)
{
	char *end;
	long n = strtol(v, &end, 10);

	if (*v == '\0' || *end != '\0' || n < lo || n > hi)
		fatal("%s: a number from %ld to %ld, not '%s'", opt, lo, hi, v);
	return n;
}

int main(int argc, char **argv)
{
	static struct run rn;
	static char cname[NCONS][8], rname[] = "r";
	const char *conninfo = getenv("IDEM_CONNINFO"), *env_seed = getenv("IDEM_DIFF_SEED");
	int sequences = 300, events = 12, only = -1, from = 0, to, done = 0, nev = 0;
	char errbuf[256];
	idem_error err = { 0 };
	struct timespec t0, t1;
	int v_from, v_to;

	rn.seed = env_seed != NULL ? (uint64_t)arg_num("IDEM_DIFF_SEED", env_seed, 0, LONG_MAX)
	                           : 4242;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			rn.seed = (uint64_t)arg_num("--seed", argv[++i], 0, LONG_MAX);
		else if (strcmp(argv[i], "--sequences") == 0 && i + 1 < argc)
			sequences = (int)arg_num("--sequences", argv[++i], 1, 1000000);
		else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc)
			events = (int)arg_num("--events", argv[++i], 1, MAXEV);
		else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
			only = (int)arg_num("--only", argv[++i], 0, 1000000);
		else if (argv[i][0] != '-')
			conninfo = argv[i];
		else
			fatal("usage: diff_start_rule [--seed N] [--sequences N] [--events N] [--only I] [CONNINFO]");
	}
	if (conninfo == NULL)
		fatal("no database: give a conninfo or set IDEM_CONNINFO");
	rn.conn = PQconnectdb(conninfo);
	if (PQstatus(rn.conn) != CONNECTION_OK)
		fatal("cannot connect: %s", PQerrorMessage(rn.conn));
	if (idem_migrate_apply(rn.conn, &v_from, &v_to, &err) != IDEM_OK)
		fatal("migrate: %s", err.msg);
	rn.cfg.max_key_bytes = 64;
	rn.cfg.max_message_bytes = 1024;
	for (int c = 0; c < NCONS; c++) {
		snprintf(cname[c], sizeof(cname[c]), "%s", cons_name[c]);
		rn.route[c].name = rname;
		rn.route[c].consumer = cname[c];
		if (idem_template_parse("${key}", &rn.route[c].key, errbuf, sizeof(errbuf)) !=
		    IDEM_OK)
			fatal("business key: %s", errbuf);
	}
	idem_bind_init(&rn.bd);
	if (only >= 0) {
		from = only;
		sequences = 1;
	}
	to = from + sequences;
	printf("diff_start_rule: seed %" PRIu64 " (--seed or IDEM_DIFF_SEED), %d sequence(s) of up "
	       "to %d events\n",
	       rn.seed, sequences, events);
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int s = from; s < to && sequence(&rn, s, events); s++) {
		done++;
		nev += rn.nev;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	idem_bind_done(&rn.bd);
	for (int c = 0; c < NCONS; c++)
		idem_template_done(&rn.route[c].key);
	PQfinish(rn.conn);
	if (rn.diffs > 0)
		return 1;
	printf("diff_start_rule: %d sequence(s), %d events, the model and the SQL agree after each "
	       "(%.1f s)\n",
	       done, nev,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
