/*
 * start_rule_model.h - the model of what each writer records in idem.partition_progress and
 * idem.processed_messages for one partition, shared by the checker that explores the start rule
 * on it (check_start_rule.c) and the differential run that holds it against the real statements
 * on a real Postgres (tests/integration/diff_start_rule.c). What each function models is the
 * statement named above it (lib/idem_sql.c); a change to one of those statements is a change
 * here, which diff_start_rule then checks.
 *
 * Three consumers of group "g": "pay" and "pay2" (one route's consumer and its other name) read
 * the partition, "ship" (another route) reads another topic. A row's cluster is an index into
 * cl_name[] (-1: NULL), a first start -1 is NULL, a claim the id + 1 of the message that made
 * it (0: none).
 */
#ifndef START_RULE_MODEL_H
#define START_RULE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "idem_resume.h"

#define MAXID 32 /* messages ever produced */
#define NKEYS 8
#define NCONS 3 /* "pay", "pay2" (the same route renamed) and "ship" (another route) */
#define SHIP  2

static const char *const cons_name[NCONS] = { "pay", "pay2", "ship" };
static const char *const cl_name[2] = { "clusterA", "mirrorB" };

/* A row of idem.partition_progress: the columns the start rule reads. */
struct row {
	bool present;
	int64_t next;
	int cluster; /* -1: NULL */
	int32_t epoch;
	int64_t first; /* -1: NULL */
	bool group;    /* group_id is the group's */
};

/*
 * The database: each consumer's row and claims, and the oracle's counts of effects (what the
 * handlers did), kept with it so that a restore takes them back too; no statement of idemd's
 * writes those.
 */
struct db {
	struct row rows[NCONS];
	uint8_t claim[NCONS][NKEYS];  /* the id + 1 of the message that claimed the key; 0: none */
	uint8_t eff_ck[NCONS][NKEYS]; /* effects made under a claims namespace, by key */
	uint8_t eff_msg[MAXID];       /* effects made by each message */
};

/* IDEM_SQL_PROGRESS_BASE: a start decided at assignment. */
static inline void model_write_base(struct row *r, int64_t start, int cluster, int32_t epoch,
                                    int64_t first)
{
	/* A row inserted is what the start says, whatever an earlier row of the name held. */
	if (!r->present) {
		*r = (struct row){ true, start, cluster, epoch, first, true };
		return;
	}
	/* In the same log a position never moves back here (a zombie's batch stays); a cluster
	 * unknown on either side is taken as the same. */
	if (r->epoch == epoch && (r->cluster < 0 || cluster < 0 || r->cluster == cluster))
		r->next = start > r->next ? start : r->next;
	else
		r->next = start;
	r->group = true;
	if (cluster >= 0)
		r->cluster = cluster;
	r->epoch = epoch;
	if (first >= 0)
		r->first = first;
}

/*
 * IDEM_SQL_PROGRESS: a batch's position, in its transaction, with the cluster, epoch and first
 * start of the log the batch read.
 */
static inline void model_write_progress(struct row *r, int64_t next, int cluster, int32_t epoch,
                                        int64_t first)
{
	if (!r->present) {
		*r = (struct row){ true, next, cluster, epoch, first, true };
		return;
	}
	if (r->cluster >= 0 && cluster >= 0 && r->cluster != cluster) {
		r->next = next;
		r->epoch++;
		r->first = first;
	} else {
		if (next > r->next)
			r->next = next;
		if (r->first < 0)
			r->first = first;
	}
	r->group = true;
	if (cluster >= 0)
		r->cluster = cluster;
}

/*
 * IDEM_SQL_CLAIM (ON CONFLICT DO NOTHING): message @id claims @key for consumer @cons unless the
 * key is claimed; whether it did.
 */
static inline bool model_claim(struct db *db, int cons, int key, int id)
{
	if (db->claim[cons][key])
		return false;
	db->claim[cons][key] = (uint8_t)(id + 1);
	return true;
}

/* Retention (IDEM_SQL_RETENTION_PURGE): a claim deleted. Which ones is the caller's bound. */
static inline void model_purge_claim(struct db *db, int cons, int key)
{
	db->claim[cons][key] = 0;
}

/*
 * `idemctl rename` (idem_rename_consumer(), the IDEM_SQL_RENAME_* statements): the claims and
 * positions of @from become @to's, in one transaction (where both hold a key, @to's claim stays).
 * Where both hold a position (IDEM_SQL_RENAME_PROGRESS_MERGE): @from's, with its epoch, only if
 * it is further on in the same cluster as far as both rows know (epochs are each name's own
 * count, not compared); the cluster @to's, else @from's; the first start the earlier of the same
 * cluster; the group either's. The caller moves what else goes with a name.
 */
static inline void model_rename(struct db *db, int from, int to)
{
	struct row *f = &db->rows[from], *t = &db->rows[to];

	if (f->present) {
		if (!t->present) {
			*t = *f;
		} else {
			bool same_log =
			        f->cluster < 0 || t->cluster < 0 || f->cluster == t->cluster;

			if (same_log && f->next > t->next) {
				t->next = f->next;
				t->epoch = f->epoch;
			}
			if (same_log && f->first >= 0 && (t->first < 0 || f->first < t->first))
				t->first = f->first;
			if (t->cluster < 0)
				t->cluster = f->cluster;
			t->group = t->group || f->group;
		}
		f->present = false;
	}
	for (int k = 0; k < NKEYS; k++) {
		if (db->claim[to][k] == 0)
			db->claim[to][k] = db->claim[from][k];
		db->claim[from][k] = 0;
	}
}

/* IDEM_SQL_REPLAY_MARK (`idemctl replay`): a position beyond @from lowered to it. */
static inline void model_replay_mark(struct row *r, int64_t from)
{
	if (r->present && r->next > from)
		r->next = from;
}

/*
 * IDEM_SQL_RESUME_GET, as idem_resume_row() reads it: consumer @cons's row and the group's other
 * consumers on the partition (their furthest position and earliest first start in cluster
 * @cluster, any cluster's if @cluster is -1, unknown; the name of one of them) into @in. "ship"
 * reads another topic.
 */
static inline void model_resume_read(const struct db *db, int cons, int cluster,
                                     struct idem_resume_in *in)
{
	const struct row *r = &db->rows[cons];

	in->db = in->db_first = in->other_db = in->other_first = -1;
	if (r->present) {
		in->db = r->next;
		if (r->cluster >= 0)
			snprintf(in->db_cluster, sizeof(in->db_cluster), "%s", cl_name[r->cluster]);
		in->db_epoch = r->epoch;
		in->db_first = r->first;
	}
	for (int c = 0; c < SHIP; c++) {
		const struct row *o2 = &db->rows[c];

		if (c == cons || !o2->present || !o2->group)
			continue;
		if (in->other_consumer[0] == '\0')
			snprintf(in->other_consumer, sizeof(in->other_consumer), "%s",
			         cons_name[c]);
		if (!(o2->cluster < 0 || cluster < 0 || o2->cluster == cluster))
			continue;
		if (o2->next > in->other_db)
			in->other_db = o2->next;
		if (o2->first >= 0 && (in->other_first < 0 || o2->first < in->other_first))
			in->other_first = o2->first;
	}
}

#endif
