#!/usr/bin/env bash
# systemd integration: READY=1 once connected and subscribed, STATUS= with live counters,
# WATCHDOG=1 pings while the main loop turns and none while it is stuck in Postgres (so the
# watchdog would fire), STOPPING=1 on SIGTERM. The notifications go to a socket of the test's.
# With WATCHDOG_USEC=1000000 idemd pings every 0.5 s while no batch has been in a worker's hands
# longer than that: idle, no gap between pings may reach the watchdog's 1 s; a handler seen
# waiting for a lock (pg_stat_activity) that is then held 4 s more leaves a gap of at least
# 3.5 s (pings stop once the batch is 0.5 s in flight), asserted as 3 s.
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

# Idle, the loop turning: a few seconds of pings (times are the sink's, from its last line).
now_ms() { awk '{t = $1} END {print t}' "$out"; }
pings_since() { awk -v s="$1" '$1 > s && / WATCHDOG=1$/ {n++} END {print n + 0}' "$out"; }
pings_after() { [ "$(pings_since "$1")" -ge "$2" ]; }
idle_start=$(now_ms)
idem_wait_until 30 "6 watchdog pings while idle" pings_after "$idle_start" 6

# Stall the main loop inside Postgres: the handler waits for a lock, held until it has been seen
# waiting and 4 s more.
stall_start=$(now_ms)
mkfifo "$IDEM_TMP/locker.fifo"
idem_psql <"$IDEM_TMP/locker.fifo" >/dev/null &
locker=$!
exec 3>"$IDEM_TMP/locker.fifo"
echo "BEGIN; LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE;" >&3
lock_held() {
	[ "$(idem_psql -c "SELECT count(*) FROM pg_locks WHERE relation = 'accounts'::regclass AND mode = 'AccessExclusiveLock' AND granted")" = 1 ]
}
idem_wait_until 30 "the lock on accounts" lock_held
idem_produce --count 50 --dup-ratio 0 --seed 2
handler_waits() {
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemd' AND wait_event_type = 'Lock'")" -gt 0 ]
}
idem_wait_until 60 "idemd's handler waiting for the lock" handler_waits
echo "SELECT pg_sleep(4); COMMIT;" >&3
exec 3>&-
wait "$locker" || idem_fail "the locking session failed"
released=$(now_ms)
idem_wait_done g-notify 60
idem_wait_until 10 "watchdog pings resume" pings_after "$released" 1

# Gaps between pings: below the watchdog's 1 s while idle, over 3 s during the stall.
gaps=$(awk -v i="$idle_start" -v s="$stall_start" '/ WATCHDOG=1$/ {
		if (p) { g = $1 - p; if ($1 <= s) { if (p > i && g > before) before = g } else if (g > during) during = g }
		p = $1 }
	END {print before + 0, during + 0}' "$out")
read -r before during <<<"$gaps"
[ "$before" -gt 0 ] || idem_fail "no two watchdog pings while idle"
[ "$before" -lt 1000 ] || idem_fail "watchdog gap of ${before} ms while the loop was turning (the watchdog fires at 1000)"
[ "$during" -ge 3000 ] || idem_fail "watchdog kept pinging while the handler waited 4 s for a lock (largest gap ${during} ms)"
idem_assert_eq "claims after the stall" "$((unique1 + IDEM_UNIQUE))" \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"

idemd_stop a
idem_wait_until 5 "STOPPING=1" grep -q ' STOPPING=1$' "$out"
echo "ok: READY, STATUS, WATCHDOG (largest gap ${before} ms turning, ${during} ms stalled), STOPPING"
