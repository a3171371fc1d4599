/*
 * idem_sql.c - the statement table.
 */
#include "idem_sql.h"

#include <stdio.h>

#include "idem_pg.h"

/*
 * The claims' arrays come in binary (idem_bind_claim()), the hashes as bytea; each returns the
 * offset of every key it newly claimed (with its partition, and its topic when the batches'
 * topics differ), which names the message: a number, cheaper to return and to look up than the
 * key (measured in tests/bench/README.md, "Where each message's cost goes"). A claim names its
 * topic and its consumer by their numbers in idem.claim_topics and idem.claim_consumers
 * (sql/0011_claim_layout.sql, sql/0013_claim_consumers.sql): idem.claim_topic_id() and
 * idem.claim_consumer_id() once per statement (uncorrelated subqueries, evaluated once), never
 * per key; a worker gave the configured topics and consumers theirs when its connection was set
 * up (IDEM_SQL_NAMES_NUMBER).
 */
static const char sql_claim[] =
        "INSERT INTO idem.processed_messages"
        " (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash)"
        " SELECT (SELECT idem.claim_consumer_id($1)), u.k, (SELECT idem.claim_topic_id($2)), $3,"
        " u.o, u.h"
        " FROM unnest($4::text[], $5::bigint[], $6::bytea[]) AS u(k, o, h)"
        " ON CONFLICT DO NOTHING RETURNING \"offset\"";

/*
 * The claim of several partitions' keys at once (idem_flush_many()): each row carries its own
 * consumer and partition, and the rows returned say whose they are. A key given twice for one
 * consumer is inserted once, for the row that comes first; the other finds it claimed. The
 * topics' and the consumers' numbers are looked up once per name (t and c, one row each) and
 * picked per key from an array, so the rows keep the arrays' order (the claims' global order:
 * ARCHITECTURE.md "The transaction"); the rows returned name their topic again.
 */
static const char sql_claim_many[] =
        "WITH t AS MATERIALIZED (SELECT array_agg(d.n) AS names,"
        " array_agg(idem.claim_topic_id(d.n)) AS ids"
        " FROM (SELECT DISTINCT n FROM unnest($3::text[]) AS n) AS d(n)),"
        " c AS MATERIALIZED (SELECT array_agg(d.n) AS names,"
        " array_agg(idem.claim_consumer_id(d.n)) AS ids"
        " FROM (SELECT DISTINCT n FROM unnest($1::text[]) AS n) AS d(n)),"
        " i AS (INSERT INTO idem.processed_messages"
        " (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash)"
        " SELECT c.ids[array_position(c.names, u.c)], u.k, t.ids[array_position(t.names, u.tp)],"
        " u.p, u.o, u.h"
        " FROM t, c, unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[],"
        " $6::bytea[]) AS u(c, k, tp, p, o, h)"
        " ON CONFLICT DO NOTHING RETURNING partition, \"offset\", topic_id)"
        " SELECT i.partition, i.\"offset\", t.names[array_position(t.ids, i.topic_id)] AS topic"
        " FROM i, t";

/*
 * The same when the batches share one consumer and one topic (the common case: one route's
 * partitions), with both given once rather than once per key: the parameters are in
 * sql_claim_many's order, so one binding serves both (less to parse per claim row: measured
 * in tests/bench/README.md). Its rows have no topic: it is the batches' one.
 */
static const char sql_claim_parts[] =
        "INSERT INTO idem.processed_messages"
        " (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash)"
        " SELECT (SELECT idem.claim_consumer_id($1)), u.k, (SELECT idem.claim_topic_id($3)), u.p,"
        " u.o, u.h"
        " FROM unnest($2::text[], $4::int[], $5::bigint[], $6::bytea[]) AS u(k, p, o, h)"
        " ON CONFLICT DO NOTHING RETURNING partition, \"offset\"";

/*
 * Results and the claims of duplicates go through functions that pin an index probe per key
 * (sql/0005_key_lookups.sql, sql/0006_claims_probe.sql): planned from the statistics, a fresh
 * table's claims are all read.
 */
static const char sql_results[] = "SELECT idem.store_results($1, $2::text[], $3::text[])";

/*
 * The recorded progress of several partitions at once: one row per element of the arrays, in
 * their order (n), next_offset NULL for a partition that has none yet, replay_to (NULL unless a
 * replay is pending) and reapply_to (NULL unless a gap left by a database that went back is
 * being read again). Read by the batch transaction (classification, and the check that the
 * database still holds what this process committed: ARCHITECTURE.md "When the database goes
 * back") and, on the consumer thread, when partitions are assigned or a worker reconnected
 * (idem_resume).
 */
static const char sql_progress_get[] =
        "SELECT pp.next_offset, pp.replay_to, pp.reapply_to"
        " FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY"
        " AS u(c, t, p, n) LEFT JOIN idem.partition_progress pp"
        " ON pp.consumer = u.c AND pp.topic = u.t AND pp.partition = u.p ORDER BY u.n";

/* Sent only when a batch has duplicates; sees the claims this transaction made, too. */
static const char sql_claims_get[] =
        "SELECT business_key, topic, partition, \"offset\", payload_hash"
        " FROM idem.claims_of($1, $2::text[])";

/*
 * Advance several partitions' progress and counters at once, one row per element (distinct
 * partitions, sorted, so that the rows are locked in one order). next_offset never moves back
 * here within one log (only `idemctl replay` lowers it); a pending replay ends (replay_to NULL)
 * once next_offset reaches its end, and so does a gap being read again (reapply_to: $15 is NULL
 * unless the batch ends below the gap's end as idemd knows it). $17 is the Kafka cluster the
 * offsets are in (NULL: unknown): a row that names another one holds a position in another log
 * (its start was not recorded at assignment: the database could not be read then), which this
 * batch's position replaces (ARCHITECTURE.md "Where a partition starts"). $18 and $19 (where the
 * consumer's first start on the log began, the group) fill a row's first_offset and group_id
 * where it has none, so that a row this statement inserts names them too.
 */
static const char sql_progress[] =
        "INSERT INTO idem.partition_progress AS p"
        " (consumer, topic, partition, next_offset, consumed, applied, duplicates, quarantined,"
        " dup_redelivery, dup_replay, dup_upstream, payload_mismatches, halted_offset,"
        " halt_reason, reapply_to, reapplied, kafka_cluster, first_offset, group_id, log_epoch)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[],"
        " $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],"
        " $12::bigint[], $13::bigint[], $14::text[], $15::bigint[], $16::bigint[], $17::text[],"
        " $18::bigint[], $19::text[], $20::int[])"
        " ON CONFLICT (consumer, topic, partition) DO UPDATE SET"
        " next_offset = CASE WHEN p.kafka_cluster <> excluded.kafka_cluster"
        " THEN excluded.next_offset ELSE greatest(p.next_offset, excluded.next_offset) END,"
        " log_epoch = CASE WHEN p.kafka_cluster <> excluded.kafka_cluster"
        " THEN p.log_epoch + 1 ELSE p.log_epoch END,"
        " first_offset = CASE WHEN p.kafka_cluster <> excluded.kafka_cluster"
        " THEN excluded.first_offset ELSE coalesce(p.first_offset, excluded.first_offset) END,"
        " group_id = coalesce(p.group_id, excluded.group_id),"
        " kafka_cluster = coalesce(excluded.kafka_cluster, p.kafka_cluster),"
        " replay_to = CASE WHEN greatest(p.next_offset, excluded.next_offset) >= p.replay_to"
        " THEN NULL ELSE p.replay_to END,"
        " reapply_to = CASE WHEN greatest(p.next_offset, excluded.next_offset)"
        " >= greatest(p.reapply_to, excluded.reapply_to) THEN NULL"
        " ELSE greatest(p.reapply_to, excluded.reapply_to) END,"
        " reapplied = p.reapplied + excluded.reapplied,"
        " consumed = p.consumed + excluded.consumed, applied = p.applied + excluded.applied,"
        " duplicates = p.duplicates + excluded.duplicates,"
        " quarantined = p.quarantined + excluded.quarantined,"
        " dup_redelivery = p.dup_redelivery + excluded.dup_redelivery,"
        " dup_replay = p.dup_replay + excluded.dup_replay,"
        " dup_upstream = p.dup_upstream + excluded.dup_upstream,"
        " payload_mismatches = p.payload_mismatches + excluded.payload_mismatches,"
        " halted_offset = excluded.halted_offset, halt_reason = excluded.halt_reason,"
        " updated_at = now()";

/*
 * Idempotent per offset: a message quarantined again (a redelivery, a replay) reopens its row.
 * It returns whether the row is new: a row this statement inserted has no xmax, one it updated
 * has the updating transaction's (the usual test of INSERT ... ON CONFLICT DO UPDATE). Decided
 * by the insert itself, so two transactions quarantining the same offset at once count it once:
 * the second waits for the first and updates its row.
 */
static const char sql_quarantine[] =
        "INSERT INTO idem.quarantine (consumer, topic, partition, \"offset\", business_key,"
        " msg_key, msg_value, header_names, header_values, msg_timestamp, reason, sqlstate,"
        " attempts)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text[], $9::bytea[],"
        " to_timestamp($10::bigint / 1000.0), $11, nullif($12, ''), $13)"
        " ON CONFLICT (consumer, topic, partition, \"offset\") DO UPDATE SET"
        " attempts = idem.quarantine.attempts + excluded.attempts, reason = excluded.reason,"
        " sqlstate = excluded.sqlstate,"
        " business_key = coalesce(excluded.business_key, idem.quarantine.business_key),"
        " last_failed_at = now(), resolved_at = NULL, resolution = NULL"
        " RETURNING xmax = 0";

/*
 * IDEM_SQL_QUARANTINE for a route with a dead_letter_topic ($14): the same insert, and, when its
 * row is new, the message on the dead-letter topic through the outbox, in the same transaction
 * (ARCHITECTURE.md "Replies and dead letters"). Key and value are the bytes received; headers
 * are the message's own (an idem-outbox-id of an upstream outbox renamed idem-dlt-outbox-id, as
 * the relay adds its own) and idem-dlt-reason, -sqlstate (empty when there is none), -topic,
 * -partition, -offset. A redelivered message already in quarantine is no new dead letter. Its
 * event id is named after the message (sql/0007_restore.sql): quarantined again after a
 * restore, it is the same dead letter.
 */
static const char sql_quarantine_dlt[] =
        "WITH q AS (INSERT INTO idem.quarantine (consumer, topic, partition, \"offset\","
        " business_key, msg_key, msg_value, header_names, header_values, msg_timestamp, reason,"
        " sqlstate, attempts)"
        " VALUES ($1, $2, $3::int, $4::bigint, $5, $6::bytea, $7::bytea, $8::text[],"
        " $9::bytea[], to_timestamp($10::bigint / 1000.0), $11::text, nullif($12::text, ''),"
        " $13::int)"
        " ON CONFLICT (consumer, topic, partition, \"offset\") DO UPDATE SET"
        " attempts = idem.quarantine.attempts + excluded.attempts, reason = excluded.reason,"
        " sqlstate = excluded.sqlstate,"
        " business_key = coalesce(excluded.business_key, idem.quarantine.business_key),"
        " last_failed_at = now(), resolved_at = NULL, resolution = NULL"
        " RETURNING xmax = 0 AS new),"
        " h AS (SELECT coalesce(array_agg(u.n ORDER BY u.i), '{}') AS names,"
        " coalesce(array_agg(u.v ORDER BY u.i), '{}') AS vals"
        " FROM unnest($8::text[], $9::bytea[]) WITH ORDINALITY AS u(n, v, i)"
        " WHERE $15::text IS NULL OR u.n NOT IN ('traceparent', 'tracestate')),"
        " d AS (INSERT INTO idem.outbox (topic, key, value, header_names, header_values,"
        " event_id)"
        " SELECT $14::text, $6::bytea, $7::bytea,"
        " array_replace(h.names, 'idem-outbox-id', 'idem-dlt-outbox-id')"
        " || ARRAY['idem-dlt-reason', 'idem-dlt-sqlstate', 'idem-dlt-topic',"
        " 'idem-dlt-partition', 'idem-dlt-offset']"
        " || CASE WHEN $15::text IS NULL THEN '{}' ELSE ARRAY['traceparent'] END"
        " || CASE WHEN $16::text IS NULL THEN '{}' ELSE ARRAY['tracestate'] END,"
        " h.vals || ARRAY[convert_to(coalesce($11::text, ''), 'UTF8'),"
        " convert_to(coalesce($12::text, ''), 'UTF8'), convert_to($2::text, 'UTF8'),"
        " convert_to($3::int::text, 'UTF8'), convert_to($4::bigint::text, 'UTF8')]"
        " || CASE WHEN $15::text IS NULL THEN '{}' ELSE ARRAY[convert_to($15, 'UTF8')] END"
        " || CASE WHEN $16::text IS NULL THEN '{}' ELSE ARRAY[convert_to($16, 'UTF8')] END,"
        " idem.event_id('dead-letter', $1::text, idem.log_of($1, $2, $3::int), $2::text,"
        " $3::int::text, $4::bigint::text)"
        " FROM q, h WHERE q.new ON CONFLICT (event_id) DO NOTHING)"
        " SELECT new FROM q";

/*
 * Replies of one batch (routes[].reply), after its results are stored in the same transaction:
 * one outbox row per element, in the arrays' order, its value the result stored with the
 * message's claim (read from the claim, so a duplicate whose original was applied earlier in
 * this very transaction gets that result too). A claim that is gone (purged) gives no reply.
 * $1 reply topic, $2 consumer, $3 source topic, $4 partition, then per reply: business key,
 * reply key (bytea), source offset, repeat. A reply's event id is named after the message it
 * answers (sql/0007_restore.sql), so the reply written again after a restore is the same event.
 */
static const char sql_replies[] =
        "INSERT INTO idem.outbox (topic, key, value, header_names, header_values, event_id)"
        " SELECT $1, u.k, convert_to(p.result, 'UTF8'),"
        " ARRAY['idem-business-key', 'idem-source-topic', 'idem-source-partition',"
        " 'idem-source-offset', 'idem-repeat']"
        " || CASE WHEN u.tp IS NULL THEN '{}' ELSE ARRAY['traceparent'] END"
        " || CASE WHEN u.ts IS NULL THEN '{}' ELSE ARRAY['tracestate'] END,"
        " ARRAY[convert_to(u.b, 'UTF8'), convert_to($3::text, 'UTF8'),"
        " convert_to($4::int::text, 'UTF8'), convert_to(u.o::text, 'UTF8'),"
        " convert_to(u.r::text, 'UTF8')]"
        " || CASE WHEN u.tp IS NULL THEN '{}' ELSE ARRAY[convert_to(u.tp, 'UTF8')] END"
        " || CASE WHEN u.ts IS NULL THEN '{}' ELSE ARRAY[convert_to(u.ts, 'UTF8')] END,"
        " idem.event_id('reply', $2::text, idem.log_of($2, $3, $4::int), $3::text,"
        " $4::int::text, u.o::text)"
        " FROM unnest($5::text[], $6::bytea[], $7::bigint[], $8::bool[], $9::text[],"
        " $10::text[]) WITH ORDINALITY AS u(b, k, o, r, tp, ts, n)"
        " JOIN idem.claims_of($2, $5::text[]) p ON p.business_key = u.b"
        " ORDER BY u.n ON CONFLICT (event_id) DO NOTHING";

/*
 * The message a handler is about to apply, for idem.emit() (sql/0007_restore.sql): settings of
 * the transaction, gone at its end. Sent before each row-mode handler and each set statement,
 * only where the outbox is enabled.
 */
static const char sql_context[] = "SELECT set_config('idem.consumer', $1, true),"
                                  " set_config('idem.message', $2, true)";

/*
 * `idemctl replay` (idem_inspect_replay_mark()): make the next start read the partition again
 * from $4. next_offset goes back to $4 (idemd starts at the database's position:
 * idem_resume_decide()); replay_to keeps the highest offset reached so far, the end of the range
 * read again, for the classification of its duplicates (sql/0004_replay_resume.sql). A partition
 * already at or below $4 is left as it is.
 */
static const char sql_replay_mark[] =
        "UPDATE idem.partition_progress SET"
        " replay_to = greatest(next_offset, coalesce(replay_to, next_offset)),"
        " next_offset = $4, updated_at = now()"
        " WHERE consumer = $1 AND topic = $2 AND partition = $3 AND next_offset > $4";

/*
 * One partition as `idemctl status` shows it: always one row (the RIGHT JOIN), NULL progress if
 * the partition has none yet.
 */
static const char sql_part_status[] =
        "SELECT next_offset, consumed, applied, duplicates, quarantined,"
        " (SELECT count(*) FROM idem.quarantine q WHERE q.consumer = $1"
        " AND q.topic = $2 AND q.partition = $3 AND q.resolved_at IS NULL),"
        " halted_offset, halt_reason"
        " FROM idem.partition_progress RIGHT JOIN (SELECT 1) one"
        " ON consumer = $1 AND topic = $2 AND partition = $3";

/* A consumer's number (sql/0013_claim_consumers.sql), NULL for a name that has none. */
#define CONSUMER_ID(name) "(SELECT n.id FROM idem.claim_consumers AS n WHERE n.name = " name ")"

static const char sql_claimed_count[] =
        "SELECT count(*) FROM idem.processed_messages"
        " WHERE consumer_id = " CONSUMER_ID("$1") " AND business_key = ANY($2::text[])";

static const char sql_horizon_get[] = "SELECT (extract(epoch FROM purged_before) * 1000)::bigint"
                                      " FROM idem.retention_horizon WHERE consumer = $1";

#define TS_UTC(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* The consumer and the topic by their names (sql/0011_claim_layout.sql, 0013). */
#define LOOKUP_AT TS_UTC("m.processed_at")

static const char sql_lookup[] =
        "SELECT k.name, (SELECT t.name FROM idem.claim_topics t WHERE t.id = m.topic_id),"
        " m.partition, m.\"offset\", " LOOKUP_AT ", m.result, encode(m.payload_hash, 'hex')"
        " FROM idem.claim_consumers k JOIN idem.processed_messages m ON m.consumer_id = k.id"
        " WHERE m.business_key = $1 AND k.name = ANY($2::text[]) ORDER BY k.name";

/* Columns 0..12 of a quarantine entry, the same for list and get. */
#define QUARANTINE_COLUMNS                                                                          \
	"id, consumer, topic, partition, \"offset\", business_key, reason, coalesce(sqlstate, '')," \
	" attempts, " TS_UTC("first_failed_at") ", " TS_UTC("last_failed_at") ", " TS_UTC(          \
	        "resolved_at") ", resolution"

static const char sql_quarantine_list[] = "SELECT " QUARANTINE_COLUMNS " FROM idem.quarantine"
                                          " WHERE ($1::text IS NULL OR consumer = $1)"
                                          " AND ($2::text IS NULL OR topic = $2)"
                                          " AND ($3::boolean OR resolved_at IS NULL)"
                                          " ORDER BY id LIMIT $4::bigint";

/* Columns 13..15 after the entry's. */
#define SQL_QUARANTINE_GET                                                                         \
	"SELECT " QUARANTINE_COLUMNS ", encode(msg_key, 'hex'), encode(msg_value, 'hex'),"         \
	" (extract(epoch FROM msg_timestamp) * 1000)::bigint"                                      \
	" FROM idem.quarantine WHERE id = $1"

static const char sql_quarantine_get[] = SQL_QUARANTINE_GET;
static const char sql_quarantine_get_locked[] = SQL_QUARANTINE_GET " FOR UPDATE";

static const char sql_quarantine_headers[] =
        "SELECT h.n, encode(h.v, 'hex') FROM idem.quarantine q,"
        " unnest(q.header_names, q.header_values) WITH ORDINALITY AS h(n, v, i)"
        " WHERE q.id = $1 ORDER BY h.i";

static const char sql_quarantine_discard[] =
        "UPDATE idem.quarantine SET resolved_at = now(), resolution = 'discarded'"
        " WHERE id = $1 AND resolved_at IS NULL RETURNING id";

static const char sql_quarantine_resolve[] =
        "UPDATE idem.quarantine SET resolved_at = now(), resolution = $2,"
        " attempts = attempts + $3 WHERE id = $1";

static const char sql_quarantine_failed[] =
        "UPDATE idem.quarantine SET attempts = attempts + $2, reason = $3,"
        " sqlstate = nullif($4, ''), business_key = coalesce($5, business_key),"
        " last_failed_at = now() WHERE id = $1";

/* The message is no longer quarantined: count it where it ended. */
static const char sql_quarantine_move_count[] =
        "UPDATE idem.partition_progress SET quarantined = quarantined - 1,"
        " applied = applied + $4, duplicates = duplicates + $5,"
        " dup_redelivery = dup_redelivery + $6, dup_replay = dup_replay + $7,"
        " dup_upstream = dup_upstream + $8, updated_at = now()"
        " WHERE consumer = $1 AND topic = $2 AND partition = $3";

/*
 * Retention sweeps the claims table in block order (sql/0012_claims_swept.sql: it has no index
 * on processed_at). One cutoff for a whole sweep, so that the horizon says exactly what was
 * removed; with it the server's clock (epoch) and the table's size in blocks, where the sweep
 * ends (claims added meanwhile are younger than the cutoff).
 */
static const char sql_retention_cutoff[] =
        "SELECT now() - make_interval(secs => $1::bigint), extract(epoch FROM now()),"
        " pg_relation_size('idem.processed_messages') / current_setting('block_size')::bigint";

/*
 * One step of a sweep, one short transaction: delete the first $5 claims of consumer $1 older
 * than the cutoff $4 from ctid $2 up to block $3 (a TID range scan; ORDER BY ctid, as neither a
 * parallel nor a synchronized scan returns rows in block order), and record the
 * cutoff as the consumer's horizon in the same transaction when anything was deleted, so that no
 * claim is gone without `idemctl replay` knowing. Returns how many were deleted, the last one's
 * ctid (where the next step starts when the limit was reached) and the oldest time of the claims
 * kept in the part of the range this step passed, as epoch seconds (NULL: none there).
 */
static const char sql_retention_purge[] =
        "WITH d AS (DELETE FROM idem.processed_messages WHERE ctid = ANY (ARRAY(SELECT ctid"
        " FROM idem.processed_messages WHERE ctid >= $2::tid"
        " AND ctid < ('(' || $3::bigint || ',0)')::tid AND consumer_id = " CONSUMER_ID(
                "$1") " AND processed_at < $4::timestamptz"
                      " ORDER BY ctid LIMIT $5::int)) RETURNING ctid),"
                      " s AS (SELECT count(*) AS n, max(ctid) AS last FROM d),"
                      " h AS (INSERT INTO idem.retention_horizon AS r (consumer, purged_before)"
                      " SELECT $1, $4::timestamptz FROM s WHERE s.n > 0 ON CONFLICT (consumer) DO UPDATE"
                      " SET purged_before = greatest(r.purged_before, excluded.purged_before))"
                      " SELECT s.n, s.last, extract(epoch FROM (SELECT min(m.processed_at)"
                      " FROM idem.processed_messages AS m WHERE m.ctid >= $2::tid AND m.ctid < CASE"
                      " WHEN s.n < $5::int THEN ('(' || $3::bigint || ',0)')::tid ELSE s.last END"
                      " AND m.consumer_id = " CONSUMER_ID(
                              "$1") " AND m.processed_at >= $4::timestamptz))"
                                    " FROM s";

/*
 * idemctl rename (idem_rename.c): every table that names a consumer, in the order a batch
 * transaction writes them (claims, quarantine, progress), so that the rename waits for the
 * batches under way rather than deadlocking with one, and batches and other renames wait for it.
 * SHARE ROW EXCLUSIVE lets readers be.
 */
static const char sql_rename_lock[] =
        "LOCK TABLE idem.processed_messages, idem.quarantine, idem.partition_progress,"
        " idem.retention_horizon IN SHARE ROW EXCLUSIVE MODE";

/*
 * What the old name holds, and how long ago a batch last advanced one of its partitions (by the
 * server's clock, which wrote updated_at).
 */
static const char sql_rename_old[] =
        "SELECT EXISTS (SELECT 1 FROM idem.processed_messages WHERE consumer_id = " CONSUMER_ID(
                "$1") "),"
                      " EXISTS (SELECT 1 FROM idem.partition_progress WHERE consumer = $1),"
                      " EXISTS (SELECT 1 FROM idem.quarantine WHERE consumer = $1),"
                      " (SELECT floor(extract(epoch FROM clock_timestamp() - max(updated_at)))::bigint"
                      " FROM idem.partition_progress WHERE consumer = $1)";

/*
 * A key both names claimed keeps the new name's claim (what the new name applied stays its own);
 * the old one's is deleted after.
 */
static const char sql_rename_claims[] =
        "UPDATE idem.processed_messages o SET consumer_id = (SELECT idem.claim_consumer_id($2))"
        " WHERE o.consumer_id = " CONSUMER_ID(
                "$1") " AND NOT EXISTS (SELECT 1"
                      " FROM idem.processed_messages x WHERE x.consumer_id = " CONSUMER_ID(
                              "$2") " AND x.business_key = o.business_key)";

static const char sql_rename_claims_drop[] =
        "DELETE FROM idem.processed_messages WHERE consumer_id = " CONSUMER_ID("$1");

/*
 * Both names have a row for a partition: one row of the new name, whose position is the
 * further one of the same log (the old row's wins only when it is further on, in the same Kafka
 * cluster as far as both rows know); rows of two clusters keep the new name's position. The
 * position's companions come with it (its epoch, a pending replay's or gap's end, a halt), the
 * first start is the earlier one of the same log, the group the winner's (else the other's),
 * the counters are the sums (each still adds up), updated_at the later one.
 */
static const char sql_rename_progress_merge[] =
        "UPDATE idem.partition_progress n SET"
        " next_offset = CASE WHEN o.ahead THEN o.next_offset ELSE n.next_offset END,"
        " log_epoch = CASE WHEN o.ahead THEN o.log_epoch ELSE n.log_epoch END,"
        " replay_to = CASE WHEN o.ahead THEN o.replay_to ELSE n.replay_to END,"
        " reapply_to = CASE WHEN o.ahead THEN o.reapply_to ELSE n.reapply_to END,"
        " halted_offset = CASE WHEN o.ahead THEN o.halted_offset ELSE n.halted_offset END,"
        " halt_reason = CASE WHEN o.ahead THEN o.halt_reason ELSE n.halt_reason END,"
        " kafka_cluster = coalesce(n.kafka_cluster, o.kafka_cluster),"
        " first_offset = CASE WHEN o.same_log THEN least(n.first_offset, o.first_offset)"
        " ELSE n.first_offset END,"
        " group_id = CASE WHEN o.ahead THEN coalesce(o.group_id, n.group_id)"
        " ELSE coalesce(n.group_id, o.group_id) END,"
        " consumed = n.consumed + o.consumed, applied = n.applied + o.applied,"
        " duplicates = n.duplicates + o.duplicates,"
        " quarantined = n.quarantined + o.quarantined,"
        " dup_redelivery = n.dup_redelivery + o.dup_redelivery,"
        " dup_replay = n.dup_replay + o.dup_replay,"
        " dup_upstream = n.dup_upstream + o.dup_upstream,"
        " payload_mismatches = n.payload_mismatches + o.payload_mismatches,"
        " reapplied = n.reapplied + o.reapplied,"
        " updated_at = greatest(n.updated_at, o.updated_at)"
        " FROM (SELECT p.*, s.same_log, s.same_log AND p.next_offset > x.next_offset AS ahead"
        " FROM idem.partition_progress p JOIN idem.partition_progress x"
        " ON x.consumer = $2 AND x.topic = p.topic AND x.partition = p.partition"
        " CROSS JOIN LATERAL (SELECT coalesce(x.kafka_cluster = p.kafka_cluster, true)"
        " AS same_log) s WHERE p.consumer = $1) o"
        " WHERE n.consumer = $2 AND n.topic = o.topic AND n.partition = o.partition";

/* The rows of partitions the new name has none of keep everything but the name. */
static const char sql_rename_progress[] =
        "UPDATE idem.partition_progress o SET consumer = $2"
        " WHERE o.consumer = $1 AND NOT EXISTS (SELECT 1 FROM idem.partition_progress n"
        " WHERE n.consumer = $2 AND n.topic = o.topic AND n.partition = o.partition)";

static const char sql_rename_progress_drop[] =
        "DELETE FROM idem.partition_progress WHERE consumer = $1";

/*
 * A message both names quarantined keeps the new name's row (its latest failure or resolution).
 */
static const char sql_rename_quarantine[] =
        "UPDATE idem.quarantine o SET consumer = $2"
        " WHERE o.consumer = $1 AND NOT EXISTS (SELECT 1 FROM idem.quarantine n"
        " WHERE n.consumer = $2 AND n.topic = o.topic AND n.partition = o.partition"
        " AND n.\"offset\" = o.\"offset\")";

/*
 * The old name's row of such a message goes; the merged counters had it twice (consumed and
 * quarantined, each summed), so they lose it where it still counted as quarantined (open or
 * discarded: a retry moved the others to applied or duplicates), and quarantined stays the
 * number of such rows.
 */
static const char sql_rename_quarantine_drop[] =
        "WITH d AS (DELETE FROM idem.quarantine WHERE consumer = $1"
        " RETURNING topic, partition, resolution),"
        " c AS (SELECT topic, partition, count(*) AS dropped, count(*) FILTER (WHERE"
        " resolution IS DISTINCT FROM 'applied' AND resolution IS DISTINCT FROM 'duplicate')"
        " AS counted FROM d GROUP BY topic, partition),"
        " u AS (UPDATE idem.partition_progress p SET quarantined = p.quarantined - c.counted,"
        " consumed = p.consumed - c.counted FROM c WHERE p.consumer = $2 AND p.topic = c.topic"
        " AND p.partition = c.partition AND c.counted > 0)"
        " SELECT coalesce(sum(dropped), 0)::bigint FROM c";

/* What retention purged under the old name is gone under the new one too: the later horizon. */
static const char sql_rename_horizon[] =
        "WITH o AS (DELETE FROM idem.retention_horizon WHERE consumer = $1"
        " RETURNING purged_before)"
        " INSERT INTO idem.retention_horizon AS h (consumer, purged_before)"
        " SELECT $2::text, o.purged_before FROM o ON CONFLICT (consumer) DO UPDATE"
        " SET purged_before = greatest(h.purged_before, excluded.purged_before)";

static const char sql_schema_table[] =
        "CREATE TABLE IF NOT EXISTS idem.schema_migrations (version integer PRIMARY KEY,"
        " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";

static const char sql_schema_version[] =
        "SELECT coalesce(max(version), 0) FROM idem.schema_migrations";

/*
 * Each topic's number in idem.claim_topics (sql/0011_claim_layout.sql), given on a worker's
 * connection as it is set up, in a transaction of its own: the claim statements then only read
 * it. A batch transaction that gave a new topic its number would hold that row until its
 * commit, and every other transaction claiming keys of the topic would wait for it at the
 * number, before claiming anything (the late keys of ARCHITECTURE.md "The transaction" rely on
 * claiming everything else first). The topics in the configuration's order, so that workers
 * setting up at once take them in one order.
 */
static const char sql_names_number[] =
        "SELECT (SELECT count(idem.claim_topic_id(t)) FROM unnest($1::text[]) AS t)"
        " + (SELECT count(idem.claim_consumer_id(c)) FROM unnest($2::text[]) AS c)";

/* One row, made by sql/0007_restore.sql, carried by every copy of the database. */
static const char sql_database_id[] = "SELECT id::text FROM idem.database_identity";

/*
 * What idem_resume decides an assigned partition's start from (ARCHITECTURE.md "Where a
 * partition starts"): each partition's row for its consumer, and the furthest position and the
 * earliest first start of the other consumers of the same group ($4) on the partition in the
 * same Kafka cluster ($5; NULL: any), and the name of the furthest one (in any cluster if
 * none is in this one): a consumer renamed in the configuration only, which holds the
 * partition until `idemctl rename` moves the namespace.
 */
static const char sql_resume_get[] =
        "SELECT pp.next_offset, pp.kafka_cluster, pp.log_epoch, pp.first_offset,"
        " g.next_offset, g.first_offset, g.consumer, pp.replay_to IS NOT NULL"
        " FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS u(c, t, p, n)"
        " LEFT JOIN idem.partition_progress pp"
        " ON pp.consumer = u.c AND pp.topic = u.t AND pp.partition = u.p"
        " LEFT JOIN LATERAL (SELECT max(o.next_offset) FILTER (WHERE o.here) AS next_offset,"
        " min(o.first_offset) FILTER (WHERE o.here) AS first_offset,"
        " (array_agg(o.consumer ORDER BY o.here DESC, o.next_offset DESC))[1] AS consumer"
        " FROM (SELECT x.*, coalesce(x.kafka_cluster = $5, true) AS here"
        " FROM idem.partition_progress x WHERE x.group_id = $4 AND x.topic = u.t"
        " AND x.partition = u.p AND x.consumer <> u.c) o) g ON true"
        " ORDER BY u.n";

/*
 * A start decided at assignment, recorded before anything is fetched: a first start (where it
 * began), a database that lost the partition, a replaced log (the old log's position set aside,
 * a new epoch). In the same log a position never moves back here: a batch of another owner
 * committed since the row was read stays (the start is below it, and the claims make that a
 * no-op). Pending replays and gaps belong to the position replaced.
 */
static const char sql_progress_base[] =
        "INSERT INTO idem.partition_progress AS p"
        " (consumer, topic, partition, next_offset, kafka_cluster, log_epoch, first_offset,"
        " group_id)"
        " SELECT u.*, $8 FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[],"
        " $5::text[], $6::int[], $7::bigint[]) AS u"
        " ON CONFLICT (consumer, topic, partition) DO UPDATE SET"
        " next_offset = CASE WHEN p.log_epoch = excluded.log_epoch"
        " AND coalesce(p.kafka_cluster = excluded.kafka_cluster, true)"
        " THEN greatest(p.next_offset, excluded.next_offset) ELSE excluded.next_offset END,"
        " group_id = excluded.group_id,"
        " kafka_cluster = coalesce(excluded.kafka_cluster, p.kafka_cluster),"
        " log_epoch = excluded.log_epoch,"
        " first_offset = coalesce(excluded.first_offset, p.first_offset),"
        " replay_to = CASE WHEN p.next_offset = excluded.next_offset THEN p.replay_to END,"
        " reapply_to = CASE WHEN p.next_offset = excluded.next_offset THEN p.reapply_to END,"
        " updated_at = now()";

static const char sql_schema_record[] =
        "INSERT INTO idem.schema_migrations (version, name) VALUES ($1, $2)";

/*
 * One relay publishes at a time (ARCHITECTURE.md "The outbox"): the lock lives as long as the
 * transaction that reads, publishes and marks a chunk. The two-key form, so that it can never be
 * the migration's lock ("idem" in ASCII, then "obox").
 */
static const char sql_outbox_lock[] = "SELECT pg_try_advisory_xact_lock(1768187245, 1868722040)";

/*
 * The oldest pending rows in id order, one result row per header (a message without headers
 * gives one row with a NULL name): id, topic, key, value, header name, header value, event id
 * (the header idem-outbox-id). Read in binary, so bytes need no decoding.
 */
static const char sql_outbox_pending[] =
        "SELECT o.id, o.topic, o.key, o.value, h.name, h.value, o.event_id"
        " FROM (SELECT * FROM idem.outbox WHERE published_at IS NULL ORDER BY id"
        " LIMIT $1::int) AS o"
        " LEFT JOIN LATERAL unnest(o.header_names, o.header_values) WITH ORDINALITY"
        " AS h(name, value, n) ON true ORDER BY o.id, h.n";

static const char sql_outbox_mark[] = "UPDATE idem.outbox SET published_at = now()"
                                      " WHERE id = ANY($1::bigint[]) AND published_at IS NULL";

static const char sql_outbox_purge[] =
        "DELETE FROM idem.outbox WHERE ctid = ANY (ARRAY(SELECT ctid FROM idem.outbox"
        " WHERE published_at < now() - make_interval(secs => $1::bigint) LIMIT $2::int))";

static const char sql_outbox_stats[] =
        "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)"
        " FROM idem.outbox WHERE published_at IS NULL";

static const char sql_try_outbox_last[] = "SELECT coalesce(max(id), 0) FROM idem.outbox";

/*
 * The rows of idem.outbox this transaction added (its subtransactions' too, whose xids are not
 * the top one's): a row visible here whose inserting transaction is still in progress can only
 * be this one's. xmin is 32 bits; it is widened to the xid8 pg_xact_status() takes by its
 * distance to the current xid, which is less than 2^31 either way.
 */
static const char sql_try_events[] =
        "SELECT o.id, o.event_id, o.topic, encode(o.key, 'hex'), encode(o.value, 'hex'),"
        " h.name, encode(h.value, 'hex')"
        " FROM idem.outbox o CROSS JOIN (SELECT pg_current_xact_id()::text::bigint AS cur) c"
        " LEFT JOIN LATERAL unnest(o.header_names, o.header_values) WITH ORDINALITY"
        " AS h(name, value, n) ON true"
        " WHERE o.id > $1::bigint AND pg_xact_status((c.cur + (o.xmin::text::bigint"
        " - (c.cur & 4294967295) + 6442450944) % 4294967296 - 2147483648)::text::xid8)"
        " = 'in progress' ORDER BY o.id, h.n";

/*
 * Trace context for idem.emit() (sql/0009_trace_context.sql): a table of the connection, emptied
 * at every commit, naming the trace context of the messages being applied that have one; and
 * the statement that fills it, which also tells idem.emit_event() that there is something to
 * read in this transaction (idem.traced).
 */
static const char sql_trace_table[] =
        "CREATE TEMPORARY TABLE IF NOT EXISTS idem_trace (consumer text, business_key text,"
        " traceparent text NOT NULL, tracestate text, PRIMARY KEY (consumer, business_key))"
        " ON COMMIT DELETE ROWS";

static const char sql_traces[] =
        "WITH t AS (INSERT INTO pg_temp.idem_trace (consumer, business_key, traceparent,"
        " tracestate)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])"
        " ON CONFLICT (consumer, business_key) DO UPDATE SET traceparent = excluded.traceparent,"
        " tracestate = excluded.tracestate)"
        " SELECT set_config('idem.traced', 'on', true)";

static const struct idem_sql_stmt stmts[IDEM_SQL_N] = {
	[IDEM_SQL_CLAIM] = { "idem_claim", 6, sql_claim },
	[IDEM_SQL_CLAIM_MANY] = { "idem_claim_many", 6, sql_claim_many },
	[IDEM_SQL_CLAIM_PARTS] = { "idem_claim_parts", 6, sql_claim_parts },
	[IDEM_SQL_RESULTS] = { "idem_results", 3, sql_results },
	[IDEM_SQL_PROGRESS_GET] = { "idem_progress_get", 3, sql_progress_get },
	[IDEM_SQL_CLAIMS_GET] = { "idem_claims_get", 2, sql_claims_get },
	[IDEM_SQL_PROGRESS] = { "idem_progress", 20, sql_progress },
	[IDEM_SQL_QUARANTINE] = { "idem_quarantine", 13, sql_quarantine },
	[IDEM_SQL_QUARANTINE_DLT] = { "idem_quarantine_dlt", 16, sql_quarantine_dlt },
	[IDEM_SQL_REPLIES] = { "idem_replies", 10, sql_replies, true },
	[IDEM_SQL_CONTEXT] = { "idem_context", 2, sql_context },
	[IDEM_SQL_REPLAY_MARK] = { "idem_replay_mark", 4, sql_replay_mark },
	[IDEM_SQL_PART_STATUS] = { "idem_part_status", 3, sql_part_status },
	[IDEM_SQL_CLAIMED_COUNT] = { "idem_claimed_count", 2, sql_claimed_count },
	[IDEM_SQL_HORIZON_GET] = { "idem_horizon_get", 1, sql_horizon_get },
	[IDEM_SQL_LOOKUP] = { "idem_lookup", 2, sql_lookup },
	[IDEM_SQL_QUARANTINE_LIST] = { "idem_quarantine_list", 4, sql_quarantine_list },
	[IDEM_SQL_QUARANTINE_GET] = { "idem_quarantine_get", 1, sql_quarantine_get },
	[IDEM_SQL_QUARANTINE_GET_LOCKED] = { "idem_quarantine_get_locked", 1,
	                                     sql_quarantine_get_locked },
	[IDEM_SQL_QUARANTINE_HEADERS] = { "idem_quarantine_headers", 1, sql_quarantine_headers },
	[IDEM_SQL_QUARANTINE_DISCARD] = { "idem_quarantine_discard", 1, sql_quarantine_discard },
	[IDEM_SQL_QUARANTINE_RESOLVE] = { "idem_quarantine_resolve", 3, sql_quarantine_resolve },
	[IDEM_SQL_QUARANTINE_FAILED] = { "idem_quarantine_failed", 5, sql_quarantine_failed },
	[IDEM_SQL_QUARANTINE_MOVE_COUNT] = { "idem_quarantine_move_count", 8,
	                                     sql_quarantine_move_count },
	[IDEM_SQL_RETENTION_CUTOFF] = { "idem_retention_cutoff", 1, sql_retention_cutoff },
	[IDEM_SQL_RETENTION_PURGE] = { "idem_retention_purge", 5, sql_retention_purge },
	[IDEM_SQL_RENAME_LOCK] = { "idem_rename_lock", 0, sql_rename_lock },
	[IDEM_SQL_RENAME_OLD] = { "idem_rename_old", 1, sql_rename_old },
	[IDEM_SQL_RENAME_CLAIMS] = { "idem_rename_claims", 2, sql_rename_claims },
	[IDEM_SQL_RENAME_CLAIMS_DROP] = { "idem_rename_claims_drop", 1, sql_rename_claims_drop },
	[IDEM_SQL_RENAME_PROGRESS_MERGE] = { "idem_rename_progress_merge", 2,
	                                     sql_rename_progress_merge },
	[IDEM_SQL_RENAME_PROGRESS] = { "idem_rename_progress", 2, sql_rename_progress },
	[IDEM_SQL_RENAME_PROGRESS_DROP] = { "idem_rename_progress_drop", 1,
	                                    sql_rename_progress_drop },
	[IDEM_SQL_RENAME_QUARANTINE] = { "idem_rename_quarantine", 2, sql_rename_quarantine },
	[IDEM_SQL_RENAME_QUARANTINE_DROP] = { "idem_rename_quarantine_drop", 2,
	                                      sql_rename_quarantine_drop },
	[IDEM_SQL_RENAME_HORIZON] = { "idem_rename_horizon", 2, sql_rename_horizon },
	[IDEM_SQL_RESUME_GET] = { "idem_resume_get", 5, sql_resume_get },
	[IDEM_SQL_PROGRESS_BASE] = { "idem_progress_base", 8, sql_progress_base },
	[IDEM_SQL_SCHEMA_TABLE] = { "idem_schema_table", 0, sql_schema_table },
	[IDEM_SQL_SCHEMA_VERSION] = { "idem_schema_version", 0, sql_schema_version },
	[IDEM_SQL_DATABASE_ID] = { "idem_database_id", 0, sql_database_id },
	[IDEM_SQL_NAMES_NUMBER] = { "idem_names_number", 2, sql_names_number },
	[IDEM_SQL_SCHEMA_RECORD] = { "idem_schema_record", 2, sql_schema_record },
	[IDEM_SQL_OUTBOX_LOCK] = { "idem_outbox_lock", 0, sql_outbox_lock },
	[IDEM_SQL_OUTBOX_PENDING] = { "idem_outbox_pending", 1, sql_outbox_pending },
	[IDEM_SQL_OUTBOX_MARK] = { "idem_outbox_mark", 1, sql_outbox_mark },
	[IDEM_SQL_OUTBOX_PURGE] = { "idem_outbox_purge", 2, sql_outbox_purge },
	[IDEM_SQL_OUTBOX_STATS] = { "idem_outbox_stats", 0, sql_outbox_stats },
	[IDEM_SQL_TRY_OUTBOX_LAST] = { "idem_try_outbox_last", 0, sql_try_outbox_last },
	[IDEM_SQL_TRY_EVENTS] = { "idem_try_events", 1, sql_try_events },
	[IDEM_SQL_TRACE_TABLE] = { "idem_trace_table", 0, sql_trace_table },
	[IDEM_SQL_TRACES] = { "idem_traces", 4, sql_traces },
};

const struct idem_sql_stmt *idem_sql(enum idem_sql_id id)
{
	return &stmts[id];
}

idem_status idem_sql_prepare(PGconn *conn, enum idem_sql_id id, idem_error *err)
{
	const struct idem_sql_stmt *s = &stmts[id];
	char what[64];

	snprintf(what, sizeof(what), "prepare %s", s->name);
	return idem_pg_prepare(conn, s->name, s->text, s->n_params, what, err);
}

idem_status idem_sql_prepare_batch(PGconn *conn, idem_error *err)
{
	idem_status r;

	for (int id = 0; id < IDEM_SQL_N_BATCH; id++) {
		if ((r = idem_sql_prepare(conn, (enum idem_sql_id)id, err)) != IDEM_OK)
			return r;
	}
	return IDEM_OK;
}

int idem_sql_send(PGconn *conn, enum idem_sql_id id, const char *const *vals, const int *lens,
                  const int *fmts)
{
	const struct idem_sql_stmt *s = &stmts[id];

	if (s->custom_plan)
		return PQsendQueryParams(conn, s->text, s->n_params, NULL, vals, lens, fmts, 0);
	return PQsendQueryPrepared(conn, s->name, s->n_params, vals, lens, fmts, 0);
}

idem_status idem_sql_exec(PGconn *conn, enum idem_sql_id id, const char *const *vals,
                          const char *what, PGresult **ret_res, idem_error *err)
{
	return idem_sql_exec_bin(conn, id, vals, NULL, NULL, what, ret_res, err);
}

idem_status idem_sql_exec_bin(PGconn *conn, enum idem_sql_id id, const char *const *vals,
                              const int *lens, const int *fmts, const char *what,
                              PGresult **ret_res, idem_error *err)
{
	const struct idem_sql_stmt *s = &stmts[id];

	return idem_pg_result(conn,
	                      PQexecParams(conn, s->text, s->n_params, NULL, vals, lens, fmts, 0),
	                      what, ret_res, err);
}

idem_status idem_sql_exec_prepared(PGconn *conn, enum idem_sql_id id, const char *const *vals,
                                   const int *lens, const int *fmts, const char *what,
                                   PGresult **ret_res, idem_error *err)
{
	const struct idem_sql_stmt *s = &stmts[id];

	PGresult *res =
	        s->custom_plan ? PQexecParams(conn, s->text, s->n_params, NULL, vals, lens, fmts, 0)
	                       : PQexecPrepared(conn, s->name, s->n_params, vals, lens, fmts, 0);

	return idem_pg_result(conn, res, what, ret_res, err);
}
