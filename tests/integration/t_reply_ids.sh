#!/usr/bin/env bash
# Reply ids across logs: a reply's event id (the header idem-outbox-id downstream consumers
# deduplicate on, and the unique key of idem.outbox) is named after the message it answers, by
# its offset. An offset is unique only in one log: after idemd moves to another Kafka cluster (a
# disaster recovery to a mirror, a migration), the new cluster's messages sit at the same
# offsets as old ones. idemd applies payments on cluster A, each with a reply; then it is pointed
# at cluster B, whose payments (other keys) sit at offsets A's already used. Verdict from the
# database: every payment of both clusters has exactly one reply row in idem.outbox, the ids of
# B's replies differ from A's at the same offsets, and the progress rows name B's cluster with
# the log epoch moved on. Before schema version 8 a reply's id was (consumer, topic, partition,
# offset) alone: B's replies collided with A's and were dropped by the outbox's unique index
# (ON CONFLICT DO NOTHING), so their producers never got an answer.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics "payments:4 replies:2"
cfg=$IDEM_TMP/a.yaml
write_cfg() { # FILE
	idem_write_config "$1" g-ids c-ids --max 50 --mode row --sql "$IDEM_PAYMENTS_SQL" \
		--route "reply={topic: replies}" --outbox enabled=true --outbox poll_interval_ms=20
}
write_cfg "$cfg"
idem_setup_db "$cfg"
replies() { idem_psql -c "SELECT count(*) FROM idem.outbox WHERE topic = 'replies'"; }
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }

# ---- cluster A ---------------------------------------------------------------------------------
IDEM_ACCOUNTS=10 idem_produce --count 400 --dup-ratio 0 --seed 31
unique_a=$IDEM_UNIQUE
idemd_start a "$cfg"
idem_wait_done g-ids 120
idem_wait_until 60 "outbox drained" drained
idemd_stop a
idem_assert_eq "replies after cluster A" "$unique_a" "$(replies)"
cluster_a=$(idem_kafka_cluster_id)

# ---- cluster B: other payments at the same offsets ---------------------------------------------
idem_kafka_start_other B "payments:4" "replies:2"
idem_with_kafka B write_cfg "$IDEM_TMP/b.yaml"
IDEM_ACCOUNTS=10 idem_with_kafka B idem_produce --count 400 --dup-ratio 0 --seed 32
unique_b=$IDEM_UNIQUE
idemd_start b "$IDEM_TMP/b.yaml"
idem_with_kafka B idem_wait_done g-ids 120
idem_wait_until 60 "outbox drained" drained
idemd_stop b

claims=$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'c-ids'")
idem_assert_eq "payments claimed on both clusters (the seeds give distinct keys)" \
	$((unique_a + unique_b)) "$claims"
# The fault did something: B's payments took offsets A's had used.
reused=$(idem_psql -c "SELECT count(*) FROM idem.processed_messages a JOIN idem.processed_messages b
	ON a.consumer_id = b.consumer_id AND a.topic_id = b.topic_id AND a.partition = b.partition
	AND a.\"offset\" = b.\"offset\" AND a.business_key < b.business_key
	WHERE a.consumer_id = (SELECT id FROM idem.claim_consumers WHERE name = 'c-ids')")
[ "$reused" -gt 0 ] || idem_fail "no offset of B's payments was one of A's: the test proves nothing"
idem_log "$reused offsets answered on both clusters"
idem_assert_eq "one reply per payment of both clusters" $((unique_a + unique_b)) "$(replies)"
idem_assert_eq "each payment answered once (replies by business key)" 0 "$(idem_psql -c "
	SELECT count(*) FROM (SELECT header_values[1] FROM idem.outbox WHERE topic = 'replies'
	GROUP BY 1 HAVING count(*) <> 1) d")"
cluster_b=$(idem_with_kafka B idem_kafka_cluster_id)
[ "$cluster_a" != "$cluster_b" ] || idem_fail "clusters A and B share the id $cluster_a"
idem_assert_eq "progress rows name cluster B, epoch 1" "4 $cluster_b 1" \
	"$(idem_psql -c "SELECT count(*) || ' ' || min(kafka_cluster) || ' ' || min(log_epoch)
		FROM idem.partition_progress WHERE consumer = 'c-ids' AND kafka_cluster = '$cluster_b'
		AND log_epoch = 1")"
idem_log "ok: $unique_a replies on A, $unique_b on B, no id taken twice"
