#!/usr/bin/env bash
# Fault: the outbox relay while Kafka misbehaves. Rows keep arriving in idem.outbox while the
# embedded Kafka's brokers all go down and come back, one broker goes down, and produce requests
# fail (not leader, disconnects, a sequence error for the idempotent producer). In the end every
# row is published and marked, each at least once, and per key the first copies reach Kafka in
# outbox id order.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 3 --topics "payments:1 events:6" \
	--config idemd.yaml g-outbox-broker payments --outbox enabled=true \
	--outbox poll_interval_ms=20 --outbox batch=200 --retry max_ms=500
cfg=$IDEM_CFG
idemd_start a "$cfg"

# 120 inserts of 100 rows, 0.2 s apart, over 30 keys: the stream outlasts the faults below.
(
	for i in $(seq 1 120); do
		idem_psql -c "INSERT INTO idem.outbox (topic, key, value) SELECT 'events', convert_to('k-' || (g % 30), 'UTF8'), convert_to('$i-' || g, 'UTF8') FROM generate_series(1, 100) AS g" >/dev/null
		sleep 0.2
	done
) &
writer=$!
published() { idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NOT NULL'; }
pending() { idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL'; }
# More published than $1, or nothing more to publish (the writer is done, all of it published):
# a fault that comes after the stream still lands on a relay that must recover from it.
above() {
	[ "$(published)" -gt "$1" ] || { ! kill -0 "$writer" 2>/dev/null && [ "$(pending)" = 0 ]; }
}
fault() {
	idem_wait_until 60 "publishing before: $*" above "$(published)"
	idem_log "fault: $*"
}
fault all brokers down for 2 s
for b in 1 2 3; do idem_kafka_ctl broker_down $b >/dev/null; done
sleep 2
for b in 1 2 3; do idem_kafka_ctl broker_up $b >/dev/null; done
fault 5 produce requests fail with NOT_LEADER_FOR_PARTITION
idem_kafka_ctl push_errors Produce 5 NOT_LEADER_FOR_PARTITION >/dev/null
fault 3 produce requests disconnect
idem_kafka_ctl push_errors Produce 3 TRANSPORT >/dev/null
fault broker 2 down for 1 s
idem_kafka_ctl broker_down 2 >/dev/null
sleep 1
idem_kafka_ctl broker_up 2 >/dev/null
fault 2 produce requests fail with OUT_OF_ORDER_SEQUENCE_NUMBER
idem_kafka_ctl push_errors Produce 2 OUT_OF_ORDER_SEQUENCE_NUMBER >/dev/null
wait "$writer" || idem_fail "the writer failed"
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
idem_wait_until 180 "outbox drained" drained
idemd_stop a

"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic events --timeout 60 \
	>"$IDEM_TMP/events.tsv" || idem_fail "cannot read topic events"
idem_psql >/dev/null <<SQL
CREATE TABLE ev (part int, off bigint, key text, value text, headers text);
\\copy ev FROM '$IDEM_TMP/events.tsv'
-- The header names the row's event id; outbox_id is the row it names (NULL: none).
ALTER TABLE ev ADD COLUMN outbox_id bigint;
UPDATE ev SET outbox_id = o.id FROM idem.outbox o
	WHERE o.event_id = substring(ev.headers from 'idem-outbox-id=([^,]+)');
SQL
rows=$(idem_psql -c 'SELECT count(*) FROM idem.outbox')
sent=$(idem_psql -c 'SELECT count(*) FROM ev')
idem_assert_eq "outbox rows" 12000 "$rows"
idem_assert_eq "rows never published" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM idem.outbox o WHERE NOT EXISTS (SELECT 1 FROM ev WHERE ev.outbox_id = o.id)')"
idem_assert_eq "events that are not their row" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ev LEFT JOIN idem.outbox o ON o.id = ev.outbox_id WHERE o.id IS NULL OR convert_from(o.value, 'UTF8') <> ev.value OR convert_from(o.key, 'UTF8') <> ev.key")"
idem_assert_eq "first copies out of outbox order within a key" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT outbox_id < lag(outbox_id) OVER (PARTITION BY key ORDER BY part, off) AS bad FROM (SELECT DISTINCT ON (outbox_id) * FROM ev ORDER BY outbox_id, part, off) f) x WHERE bad')"
echo "ok: outbox relay under broker faults: rows=$rows events=$sent (re-sent=$((sent - rows))), all published, per-key order kept"
