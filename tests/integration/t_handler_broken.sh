#!/usr/bin/env bash
# A handler that breaks while idemd runs (its function dropped: 42883) is not turned into a flood
# of quarantined messages: the partitions pause and retry with backoff, nothing is claimed or
# quarantined meanwhile (while idemd's own counter shows at least three more failed attempts
# retried: idemd_batch_retries_total), and once the function is back every payment is applied
# exactly once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

port=$(idem_free_port)
idem_fixture --topics payments:4 --config idemd.yaml g-broken payments --sql "$IDEM_FN_SQL" \
	--max 100 --retry max_ms=500 --metrics "127.0.0.1:$port"
# retries: failed batch attempts that were retried, all classes.
retries() {
	curl -fsS "http://127.0.0.1:$port/metrics" |
		awk '$1 ~ /^idemd_batch_retries_total[{]/ { n += $2; f = 1 } END { if (!f) exit 1; print n }'
}
idem_create_apply_fn
idem_produce_bg --count 6000 --dup-ratio 0.2 --seed 31 --rate 1500

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "first payments applied" idem_claims_above 200
idem_psql -c 'DROP FUNCTION apply_payment(text, text, bigint)'
# A transaction that ran its handler before the drop still commits: count from when none of
# those is left.
dropped=$(idem_psql -c 'SELECT clock_timestamp()')
old_tx() {
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemd' AND xact_start <= '$dropped'")" = 0 ]
}
idem_wait_until 30 "the transactions begun before the drop to end" old_tx
before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
r0=$(retries) || idem_fail "no idemd_batch_retries_total in /metrics"
retried_3() { [ "$(retries)" -ge $((r0 + 3)) ]; }
idem_wait_until 60 "three more attempts failed and retried" retried_3
r1=$(retries)
idem_assert_eq "claims while broken" "$before" "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idem_assert_eq "quarantined while broken" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem__alive "$IDEMD_PID_a" || idem_fail "idemd exited while the handler was broken"
idem_create_apply_fn

idem_produce_wait 60
idem_wait_done g-broken 120
idemd_stop a
idem_check_exactly_once payments
idem_check_accounting payments
echo "ok: $((r1 - r0)) attempts failed and retried with $before claims and 0 quarantined; then $(idem_counts_full payments)"
