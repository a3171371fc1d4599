#!/usr/bin/env bash
# Fault: SIGKILL of idemd at random moments, 30 restarts in a row, while a live stream goes on:
# during start-up, while joining the group, mid-batch, between the database commit and the
# offset commit. Every payment applied exactly once, every message accounted for.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

restarts=${IDEM_RESTARTS:-30}
# Small batches: many transactions, so the kills land between claim, commit and offset store.
# A short session lets a new instance take over from a killed one sooner: 4 s, the shortest
# with which the embedded Kafka forms groups reliably (at 2.5 s, with other tests side by side
# on a busy machine, an instance once got no partitions within 60 s: the coordinator waits
# session.timeout.ms - 1 s for the members' joins before it ends a rebalance without them).
idem_fixture --topics payments:8 --config idemd.yaml g-kill9 payments --max 20 \
	--kafka-prop session.timeout.ms=4000
idem_produce_bg --count 55000 --dup-ratio 0.3 --seed 101 --rate 500

claims() { idem_psql -c 'SELECT count(*) FROM idem.processed_messages'; }
landed=0
for i in $(seq 1 "$restarts"); do
	before=$(claims)
	idemd_start a "$IDEM_TMP/idemd.yaml"
	# Every fifth one early (start-up, joining the group); the others at a random moment
	# within 1.5 s of getting their partitions: mid-batch, between commit and offset store.
	if ((i % 5 == 0)); then
		sleep "$((RANDOM % 2)).$((RANDOM % 10))"
	else
		idem_wait_until 60 "instance $i gets partitions" \
			grep -q "assigned topic=" "$IDEM_TMP/idemd-a.log"
		sleep "$((RANDOM % 2)).$((RANDOM % 5))"
	fi
	idemd_kill9 a
	mv "$IDEM_TMP/idemd-a.log" "$IDEM_TMP/idemd-a.$i.log"
	after=$(claims)
	[ "$after" -gt "$before" ] && landed=$((landed + 1))
	idem_log "kill $i: claims $before -> $after"
done
idem_log "$landed of $restarts kills landed while applying"
[ "$landed" -ge $((restarts / 2)) ] || idem_fail "only $landed kills landed while applying"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_produce_wait 180
idem_wait_done g-kill9 180
idemd_stop a

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "SIGKILLed $restarts times ($landed while applying)" payments
