/*
 * idem_resume.h - where an assigned partition starts: max(Kafka's committed offset, the
 * database's idem.partition_progress.next_offset for the route's consumer).
 *
 * The database is the truth for what has been applied: next_offset commits in the transaction
 * that applies the batch, while Kafka's committed offset follows it by up to
 * auto.commit.interval.ms (and not at all after a SIGKILL). Starting from the database spares a
 * restarted or new owner re-reading what was applied since the last offset commit; Kafka's
 * committed offset still wins when it is ahead (an operator skipped messages with Kafka's
 * tools), and is what a partition without a progress row starts from. `idemctl replay` lowers
 * next_offset along with the committed offset, so a replay is read again
 * (sql/0003_replay_resume.sql).
 *
 * Falling back to Kafka's committed offset is always safe (the claims make the messages read
 * again harmless: ARCHITECTURE.md "Failures"), so any failure here (Postgres down, a timeout,
 * the group coordinator not answering) only logs and leaves the partition to start where
 * librdkafka would have started it.
 *
 * Opens a Postgres connection of its own for each assignment (application name idemd-resume)
 * and closes it before returning. Threading: the consumer thread only (the rebalance callback).
 */
#ifndef IDEM_RESUME_H
#define IDEM_RESUME_H

#include <librdkafka/rdkafka.h>

#include "idem_cfg.h"
#include "idem_common.h"

typedef struct idem_resume idem_resume;

/* Where one partition starts, and why (-1: unknown). */
struct idem_resume_pos {
	int64_t db;        /* idem.partition_progress.next_offset */
	int64_t committed; /* Kafka's committed offset of the group */
};

/* @brief A resolver for @cfg (which must outlive it); NULL when out of memory. */
idem_resume *idem_resume_new(const struct idem_cfg *cfg);
void idem_resume_free(idem_resume *rs);

/*
 * @brief The start of a partition: max(@committed, @db) when the database has a position
 * (@db >= 0), else RD_KAFKA_OFFSET_INVALID (librdkafka then starts at the committed offset, or
 * by auto.offset.reset when there is none). A negative @committed is none.
 */
int64_t idem_resume_start(int64_t committed, int64_t db);

/*
 * @brief Set the .offset of each element of @list (partitions about to be assigned) to where
 * it starts (idem_resume_start()), reading the progress rows and the group's committed offsets;
 * an element whose position cannot be told keeps its offset (librdkafka's default start).
 * @param ret_pos room for list->cnt entries: what was read for each.
 */
void idem_resume_positions(idem_resume *rs, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                           struct idem_resume_pos *ret_pos);

#endif
