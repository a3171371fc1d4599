#!/usr/bin/env bash
# Fault: exactly once in effect along a chain of two idemd through the outbox. idemd A consumes
# payments and emits a "payment-applied" event per payment with idem.emit(); its relay publishes
# them. idemd B consumes those events with business key header:idem-outbox-id into a second
# table. Both run the relay on the one database (one publishes at a time). A and B are
# SIGKILLed several times each and Postgres is crash-restarted once while a live stream goes
# on. In the end each payment is applied once in A's tables and once in B's, every row of the
# outbox is published, and B applied the events of each account in outbox order.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

kills=${IDEM_CHAIN_KILLS:-4}
common=(--max 20 --kafka-prop session.timeout.ms=4000 --retry max_ms=1000
	--outbox enabled=true --outbox poll_interval_ms=20 --outbox batch=200)
idem_fixture --durable-commits --topics "payments:8 payment-applied:8" \
	--config a.yaml g-chain-a payments "${common[@]}" --route-name pay \
	--sql "$IDEM_EMIT_SQL" --mode row
idem_write_downstream_config "$IDEM_TMP/b.yaml" g-chain-b "${common[@]}"
idem_create_downstream_table
idem_create_emit_fn
# The stream runs until 3 s after the last kill (idem_produce_stop), at most 10 minutes.
idem_produce_bg --count 120000 --dup-ratio 0.2 --seed 131 --rate 200

count() { idem_psql -c "SELECT count(*) FROM $1"; }
# kill9_when_busy NAME CONFIG TABLE N: once NAME has its partitions and TABLE grows (NAME is
# applying), SIGKILL it a moment later (mid-batch, mid-relay round, between commit and offset
# store), keep its log and start it again.
kill9_when_busy() {
	local before
	idem_wait_until 60 "idemd $1 gets partitions" grep -q "assigned topic=" "$IDEM_TMP/idemd-$1.log"
	before=$(count "$3")
	grows() { [ "$(count "$3")" -gt "$before" ]; }
	idem_wait_until 60 "idemd $1 applies" grows "$@"
	sleep "0.$((RANDOM % 5))"
	idemd_kill9 "$1"
	mv "$IDEM_TMP/idemd-$1.log" "$IDEM_TMP/idemd-$1.$4.log"
	idemd_start "$1" "$2"
}
idemd_start a "$IDEM_TMP/a.yaml"
idemd_start b "$IDEM_TMP/b.yaml"
b_applied() { [ "$(count applied_b)" -gt 0 ]; }
idem_wait_until 60 "B applies something" b_applied
for i in $(seq 1 "$kills"); do
	kill9_when_busy a "$IDEM_TMP/a.yaml" ledger "$i"
	kill9_when_busy b "$IDEM_TMP/b.yaml" applied_b "$i"
	idem_log "kill $i: ledger=$(count ledger) outbox=$(count idem.outbox) pending=$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL') applied_b=$(count applied_b)"
	if [ "$i" = 2 ]; then
		idem_log "postgres restart (-m immediate)"
		idem_pg_restart_immediate
	fi
done
idem_producer_running || idem_fail "the stream ended before the last kill"
sleep 3
idem_produce_stop 180
idem_wait_done g-chain-a 240
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
idem_wait_until 120 "outbox drained" drained
"$IDEM_BIN/idem-kafkatool" wait-committed --brokers "$IDEM_BROKERS" --group g-chain-b \
	--topic payment-applied --timeout 240 >/dev/null ||
	idem_fail "group g-chain-b did not commit to the end"
idemd_stop a
idemd_stop b

# A: every payment once (claims, ledger, balances, progress).
idem_check_exactly_once payments
idem_check_accounting payments
# The outbox: one row per applied payment, all published.
emitted=$(count idem.outbox)
idem_assert_eq "outbox rows" "$IDEM_UNIQUE" "$emitted"
idem_assert_eq "outbox rows not of a ledger payment" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.outbox o WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = convert_from(o.value, 'UTF8')::jsonb->>'payment_id')")"
idem_assert_eq "outbox rows pending" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')"
# Kafka: every row at least once (more where a relay died between acknowledgement and mark).
sent=$("$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payment-applied \
	--timeout 60 | wc -l)
[ "$sent" -ge "$IDEM_UNIQUE" ] || idem_fail "only $sent events in Kafka for $IDEM_UNIQUE rows"
# B: every event once, and so every payment once.
applied_b=$(count applied_b)
idem_assert_eq "B rows" "$IDEM_UNIQUE" "$applied_b"
idem_assert_eq "B events applied twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT outbox_id FROM applied_b GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "B payments applied twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM applied_b GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "payments missing in B" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM ledger l WHERE NOT EXISTS (SELECT 1 FROM applied_b b WHERE b.payment_id = l.payment_id AND b.account = l.account AND b.amount = l.amount)')"
idem_assert_eq "B claims" "$IDEM_UNIQUE" \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'events'")"
idem_check_accounting events
# Per account (the events' key), B applied them in outbox order: the order in which A's
# transactions took the account's row lock and emitted, i.e. the order of its balance changes.
idem_assert_eq "B rows out of outbox order within an account" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT o.id < lag(o.id) OVER (PARTITION BY b.account ORDER BY b.id) AS bad FROM applied_b b JOIN idem.outbox o ON o.event_id = b.outbox_id) x WHERE bad')"
echo "ok: outbox chain: produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE applied_a=$(count ledger) emitted=$emitted kafka_events=$sent (re-sent=$((sent - IDEM_UNIQUE))) applied_b=$applied_b B: $(idem_counts events) kills while applying: A=$kills B=$kills postgres_restarts=1"
