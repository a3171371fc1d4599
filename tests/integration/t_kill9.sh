#!/usr/bin/env bash
# SIGKILL idemd at random moments while it consumes, restarting it each time: still every
# payment applied exactly once and none missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

kills=${IDEM_KILLS:-6}
idem_tmp_init
idem_pg_start
idem_kafka_start payments:8
# Small batches: many transactions, so the kills land between claim, commit and offset store.
idem_write_config "$IDEM_TMP/idemd.yaml" g-kill payments "$IDEM_PAYMENTS_SQL" \
	'[business_key, "json:/account", "json:/amount"]' 20
idem_setup_db "$IDEM_TMP/idemd.yaml"
idem_produce 40000 0.3 11

done_kills=0
for i in $(seq 1 "$kills"); do
	before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	idemd_start a "$IDEM_TMP/idemd.yaml"
	# Kill only once this instance is making progress, after a random extra delay.
	idem_wait_until 60 "instance $i makes progress" \
		test "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')" -gt "$before"
	sleep "0.$((RANDOM % 5))$((RANDOM % 10))"
	idemd_kill9 a
	done_kills=$((done_kills + 1))
	n=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	echo "kill $i: $n of $IDEM_UNIQUE applied"
	[ "$n" -lt "$IDEM_UNIQUE" ] || break
done
[ "$done_kills" -ge 5 ] || idem_fail "only $done_kills kills landed while consuming"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-kill 300
idemd_stop a

idem_check_exactly_once payments
echo "ok: $done_kills kills; $(idem_counts payments)"
