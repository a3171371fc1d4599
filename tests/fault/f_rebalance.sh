#!/usr/bin/env bash
# Fault: rebalances while batches are in flight. One idemd consumes a live stream; a second and a
# third join the group (partitions move while batches are open, commits are rejected during the
# rebalance), then the second is SIGKILLed mid-batch and its partitions move again once its
# session expires. Every payment applied exactly once, every message accounted for.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:8 --config idemd.yaml g-rebalance payments --max 50
# The stream runs until 3 s after b's death is survived (idem_produce_stop), at most 5 minutes.
idem_produce_bg --count 450000 --dup-ratio 0.3 --seed 91 --rate 1500

# owns NAME: true once instance NAME was assigned a partition (to pace the test only).
owns() {
	grep -q "assigned topic=payments" "$IDEM_TMP/idemd-$1.log" 2>/dev/null
}
progress() {
	local before
	before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	idem_wait_until 60 "$1" idem_claims_above "$before"
}

idemd_start a "$IDEM_TMP/idemd.yaml"
progress "a applies payments"
idemd_start b "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "b joins the group" owns b
progress "a and b apply payments"
idemd_start c "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "c joins the group" owns c
progress "a, b and c apply payments"
sleep "0.$((RANDOM % 10))"
idem_log "SIGKILL b (claims: $(idem_psql -c 'SELECT count(*) FROM idem.processed_messages'))"
idemd_kill9 b
progress "a and c go on after b died"
idem_producer_running || idem_fail "the stream ended before b was killed"
sleep 3
idem_produce_stop 120
idem_wait_done g-rebalance 180
idemd_stop a
idemd_stop c

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "2 instances joined, 1 SIGKILLed" payments
