#!/usr/bin/env bash
# SIGKILL idemd at random moments while it consumes, restarting it each time: still every
# payment applied exactly once and none missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

kills=${IDEM_KILLS:-6}
# Small batches: many transactions, so the kills land between claim, commit and offset store.
idem_fixture --topics payments:8 --config idemd.yaml g-kill payments --max 20
# Set mode applies several times faster: a longer stream, so that the kills land while it runs.
count=200000
[ "$IDEM_HANDLER_MODE" != set ] || count=300000
idem_produce --count "$count" --dup-ratio 0.3 --seed 11

landed=0
for i in $(seq 1 $((kills * 2))); do
	before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	idemd_start a "$IDEM_TMP/idemd.yaml"
	# Kill only once this instance is making progress, after a random extra delay.
	idem_wait_until 60 "instance $i makes progress" idem_claims_above "$before"
	sleep "0.$((RANDOM % 4))$((RANDOM % 10))"
	idemd_kill9 a
	n=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	echo "kill $i: $n of $IDEM_UNIQUE applied"
	[ "$n" -lt "$IDEM_UNIQUE" ] || break
	landed=$((landed + 1))
	[ "$landed" -lt "$kills" ] || break
done
[ "$landed" -ge 5 ] || idem_fail "only $landed kills landed while consuming"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-kill 300
idemd_stop a

idem_check_exactly_once payments
echo "ok: $landed kills while consuming; $(idem_counts payments)"
