#!/usr/bin/env bash
# Fault: Postgres crash-restarted (pg_ctl restart -m immediate) ten times while idemd consumes a
# live stream, each after 0 to 2 s of progress. Transactions in flight are lost or committed
# without idemd knowing which; idemd backs off, reconnects and retries the same messages. In the
# end every payment is applied exactly once and every message is accounted for.
# A restart can land while a worker writes a transaction's last round trip: libpq then reports
# the lost connection as the statement's error with the connection still "ok", and no sync ever
# comes (idem__flush_pipeline_abort(), lib/idem_session.c; unit.flush reproduces it every
# time). Before that was handled, a worker then spun for ever: once in a CI run with three
# restarts, once in four runs here with 25.
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
for i in $(seq 1 10); do
	before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
	idem_wait_until 60 "progress before restart $i" idem_claims_above "$before"
	sleep "$((RANDOM % 2)).$((RANDOM % 10))"
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
idem_fault_report "postgres restarted 10 times (-m immediate)" payments
