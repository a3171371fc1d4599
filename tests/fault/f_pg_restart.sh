#!/usr/bin/env bash
# Fault: Postgres crash-restarted (pg_ctl restart -m immediate) three times while idemd consumes
# a live stream. Transactions in flight are lost or committed without idemd knowing which;
# idemd backs off, reconnects and retries the same messages. In the end every payment is applied
# exactly once and every message is accounted for.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --durable-commits --topics payments:8 \
	--config idemd.yaml g-pgrestart payments --max 100 --retry max_ms=1000
# The stream runs until 3 s after the last restart (idem_produce_stop), at most 5 minutes: each
# restart waits for progress after the one before, which takes longer on a slower machine.
idem_produce_bg --count 600000 --dup-ratio 0.3 --seed 61 --rate 2000

idemd_start a "$IDEM_TMP/idemd.yaml"
for i in 1 2 3; do
	before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	idem_wait_until 60 "progress before restart $i" idem_claims_above "$before"
	sleep "1.$((RANDOM % 10))"
	idem_log "restart $i (claims: $(idem_psql -c 'SELECT count(*) FROM idem.processed_messages'))"
	idem_pg_restart_immediate
done
idem_producer_running || idem_fail "the stream ended before the last restart"
sleep 3
idem_produce_stop 120
idem_wait_done g-pgrestart 180
idemd_stop a

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "postgres restarted 3 times (-m immediate)" payments
