#!/usr/bin/env bash
# Fault: the embedded Kafka's brokers go down and come back while idemd consumes a live stream:
# all three at once (fetches, group coordinator and offset commits fail), then one at a time,
# four rounds. Uncommitted offsets mean redeliveries, which the claims absorb: every payment
# applied exactly once, every message accounted for. A round waits for progress after the last
# one (a group rejoin after all brokers were down takes seconds), and all four rounds must land
# while payments still arrive: the stream runs until 3 s after the last (idem_produce_stop), at
# most 10 minutes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 3 --topics payments:8 --config idemd.yaml g-flap payments --max 100
idem_produce_bg --count 600000 --dup-ratio 0.3 --seed 81 --rate 1000

idemd_start a "$IDEM_TMP/idemd.yaml"
for round in 1 2 3 4; do
	before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	idem_wait_until 60 "progress before round $round" idem_claims_above "$before"
	idem_log "round $round: all brokers down (claims: $before)"
	for b in 1 2 3; do idem_kafka_ctl broker_down $b >/dev/null; done
	sleep "1.$((RANDOM % 10))"
	for b in 1 2 3; do idem_kafka_ctl broker_up $b >/dev/null; done
	sleep 1
	b=$((1 + RANDOM % 3))
	idem_log "round $round: broker $b down"
	idem_kafka_ctl broker_down $b >/dev/null
	sleep "0.$((5 + RANDOM % 5))"
	idem_kafka_ctl broker_up $b >/dev/null
done
idem_producer_running || idem_fail "the stream ended before the last round"
sleep 3
idem_produce_stop 180
idem_wait_done g-flap 180
idemd_stop a

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "brokers down and up, 4 rounds" payments
