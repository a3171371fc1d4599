#!/usr/bin/env bash
# systemd integration: READY=1 once connected and subscribed, STATUS= with live counters,
# WATCHDOG=1 pings while the main loop turns and none while it is stuck in Postgres (so the
# watchdog would fire), STOPPING=1 on SIGTERM. The notifications go to a socket of the test's.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config idemd.yaml g-notify payments
sock=$IDEM_TMP/notify.sock
out=$IDEM_TMP/sink.out
idem_spawn sink "$IDEM_BIN/idem-notify-sink" "$sock"
idem_wait_until 10 "notify socket" test -S "$sock"

idem_spawn idemd-a env NOTIFY_SOCKET="$sock" WATCHDOG_USEC=1000000 "$IDEM_BIN/idemd" -c "$IDEM_TMP/idemd.yaml"
IDEMD_PID_a=$IDEM_LAST_PID
idem_wait_until 30 "READY=1" grep -q ' READY=1$' "$out"
idem_wait_until 10 "a watchdog ping after READY" \
	awk '/ READY=1$/ {r = 1} r && / WATCHDOG=1$/ {f = 1} END {exit !f}' "$out"

idem_produce --count 2000 --dup-ratio 0.2 --seed 1
unique1=$IDEM_UNIQUE
idem_wait_done g-notify 60
idem_wait_until 10 "STATUS with the applied count" grep -q " STATUS=.*applied=$unique1 " "$out"

# Stall the main loop inside Postgres: the handler waits for a lock held for 4 s.
stall_start=$(awk '{t = $1} END {print t}' "$out")
idem_psql -c "BEGIN; LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(4); COMMIT;" >/dev/null &
locker=$!
sleep 0.5
idem_produce --count 50 --dup-ratio 0 --seed 2
wait "$locker"
idem_wait_done g-notify 60
idem_wait_until 10 "watchdog pings resume" \
	awk -v s="$stall_start" '$1 > s + 4000 && / WATCHDOG=1$/ {f = 1} END {exit !f}' "$out"

# Gaps between pings: at most ~0.6 s while the loop turns, over 2 s during the stall.
gaps=$(awk -v s="$stall_start" '/ WATCHDOG=1$/ {
		if (p) { g = $1 - p; if ($1 <= s) { if (g > before) before = g } else if (g > during) during = g }
		p = $1 }
	END {print before + 0, during + 0}' "$out")
read -r before during <<<"$gaps"
[ "$before" -le 700 ] || idem_fail "watchdog gap of ${before} ms while the loop was turning"
[ "$during" -ge 2000 ] || idem_fail "watchdog kept pinging during a 4 s stall (largest gap ${during} ms)"
idem_assert_eq "claims after the stall" "$((unique1 + IDEM_UNIQUE))" \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"

idemd_stop a
idem_wait_until 5 "STOPPING=1" grep -q ' STOPPING=1$' "$out"
echo "ok: READY, STATUS, WATCHDOG (largest gap ${before} ms turning, ${during} ms stalled), STOPPING"
