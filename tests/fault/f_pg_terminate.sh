#!/usr/bin/env bash
# Fault: idemd's Postgres backend killed with pg_terminate_backend() 25 times at random moments
# while it consumes a live stream (57P01 or a lost connection, mid-claim, mid-handler or
# mid-commit). idemd reconnects and retries the same messages: every payment applied exactly
# once, every message accounted for.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:8 \
	--config idemd.yaml g-terminate payments --max 50 --retry max_ms=500
# The last termination must come while payments still arrive, and the 25 (with idemd's first
# batch) take 15 to 30 s: the stream runs until 3 s after the last (idem_produce_stop), at most
# 10 minutes.
idem_produce_bg --count 600000 --dup-ratio 0.3 --seed 71 --rate 1000

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "first payments applied" idem_claims_above 0
killed=0
for _ in $(seq 1 25); do
	sleep "0.$((3 + RANDOM % 5))"
	n=$(idem_psql -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'idemd'")
	killed=$((killed + n))
done
idem_log "terminated $killed backends"
[ "$killed" -ge 20 ] || idem_fail "only $killed backends terminated"
idem_producer_running || idem_fail "the stream ended before the last termination"
sleep 3
idem_produce_stop 120
idem_wait_done g-terminate 180
idemd_stop a

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "backend terminated $killed times" payments
