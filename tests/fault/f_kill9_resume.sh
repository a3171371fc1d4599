#!/usr/bin/env bash
# Fault: a partition resumes where the database stopped, not where Kafka's last
# offset commit was. Two idemd instances share 8 partitions while a live stream goes on; one of
# them, picked at random, is SIGKILLed at a random moment while it applies, and started again,
# 10 times (partitions move from the killed instance to the other and back: eager rebalances,
# or incremental ones with IDEM_ASSIGNOR=cooperative-sticky). Every payment is applied exactly
# once, and the messages read again after all the kills together stay within what can be in
# flight (uncommitted in the database) at each kill: kills x workers x 2 x batch.max_messages.
#
# What "read again" counts, exactly: idem.partition_progress.consumed commits with the work it
# counts, so it counts each message once per transaction that committed it, whichever process
# ran it, and survives SIGKILL. Every produced message commits at least once; so
# sum(consumed) - produced is exactly the number of messages that were applied (or counted as
# duplicates) and then read and counted again: the re-reading that each kill caused. A message
# in flight at a kill was never committed: it is read again too, but committed once in all,
# so it is not in that figure (nor can it be avoided); the bound above is how much of it there
# can be. Before idemd resumed from the database, a restarted or new owner started at Kafka's
# committed offset (stored after the fact, committed every 500 ms), and re-read everything
# applied since.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

kills=${IDEM_KILLS:-10}
assignor=${IDEM_ASSIGNOR:-range}
workers=2
max=20
# A session of 4 s lets the survivor take over a killed instance's partitions soon. The embedded
# Kafka waits session.timeout.ms - 1 s for members to rejoin: with 2.5 s, a loaded machine (four
# ASan tests side by side) can keep the group from forming for a minute.
# Debug logging: each committed batch is logged, which tells whether a kill landed while its
# victim applied.
idem_fixture --topics payments:8 --config idemd.yaml g-resume payments \
	--max $max --workers $workers --kafka-prop session.timeout.ms=4000 \
	--kafka-prop partition.assignment.strategy="$assignor" --log-level debug
# Every kill must land while payments still arrive, and ten kills, each waiting for its victim
# to be assigned again, take from 30 s to over a minute: the stream runs until 5 s after the
# last restart (idem_produce_stop), at most 10 minutes.
idem_produce_bg --count 600000 --dup-ratio 0.3 --seed 111 --rate 1000

# owns NAME: instance NAME (its current run) has been assigned partitions.
owns() {
	grep -q "assigned topic=payments" "$IDEM_TMP/idemd-$1.log" 2>/dev/null
}
# batches NAME: how many batches instance NAME (its current run) committed.
batches() {
	grep -c "committed topic=payments" "$IDEM_TMP/idemd-$1.log" 2>/dev/null || true
}

idemd_start a "$IDEM_TMP/idemd.yaml"
idemd_start b "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "a gets partitions" owns a
idem_wait_until 60 "b gets partitions" owns b
landed=0
for i in $(seq 1 "$kills"); do
	if ((RANDOM % 2)); then victim=a; else victim=b; fi
	idem_wait_until 60 "$victim gets partitions" owns "$victim"
	before=$(batches "$victim")
	# A random moment within 2 s, once it applies.
	sleep "$((RANDOM % 2)).$((RANDOM % 10))"
	after=$(batches "$victim")
	idemd_kill9 "$victim"
	((after > before)) && landed=$((landed + 1))
	idem_log "kill $i: $victim, which committed $((after - before)) batch(es) in the last moment before"
	mv "$IDEM_TMP/idemd-$victim.log" "$IDEM_TMP/idemd-$victim.$i.log"
	idem_producer_running || idem_fail "the stream ended before kill $i"
	idemd_start "$victim" "$IDEM_TMP/idemd.yaml"
done
idem_log "$landed of $kills kills landed while the victim applied"
[ "$landed" -ge $((kills / 2)) ] || idem_fail "only $landed of $kills kills landed while applying"
sleep 5
idem_produce_stop 180
idem_wait_done g-resume 180
idemd_stop a
idemd_stop b

idem_check_exactly_once payments
idem_check_accounting payments
consumed=$(idem_psql -c "SELECT sum(consumed) FROM idem.partition_progress WHERE consumer = 'payments'")
reread=$((consumed - IDEM_PRODUCED))
bound=$((kills * workers * 2 * max))
# How often a partition started from the database ahead of Kafka's committed offset.
ahead=$(cat "$IDEM_TMP"/idemd-*.log | sed -n 's/.* start=\([0-9]*\) (database next_offset=\([0-9]*\), kafka committed=\([0-9-]*\)).*/\1 \3/p' |
	awk '$2 == "-" || $1 > $2 { n++ } END { print n + 0 }')
idem_log "assignments that started from the database, ahead of Kafka's committed offset: $ahead"
echo "re-read after $kills kills ($assignor): $reread messages (consumed=$consumed produced=$IDEM_PRODUCED; bound $kills x $workers workers x 2 x $max = $bound)"
[ "$reread" -le "$bound" ] ||
	idem_fail "$reread messages read again after $kills kills, more than $bound: partitions do not resume where the database stopped"
idem_fault_report "SIGKILLed $kills times ($landed while applying), two instances, $assignor" payments
