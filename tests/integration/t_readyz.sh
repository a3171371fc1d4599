#!/usr/bin/env bash
# /readyz is exact: ready when connected to Postgres, assigned partitions and none halted, and
# only then. Polled every 50 ms through a whole run (a backlog consumed from the moment the
# partitions are assigned, idle, another stream, idle), it never answers 503 while the instance
# is assigned and connected; with Postgres stopped while idemd is idle it says "not connected to
# postgres" until Postgres is back, then ready again. (Halted partitions: t_halt_sighup.)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-readyz payments --workers 3 --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
url=http://127.0.0.1:$port

# One line per poll: milliseconds since the epoch (taken before the request), HTTP status, what
# /readyz says.
poll_log=$IDEM_TMP/readyz.log
: >"$poll_log"
(
	while :; do
		t=$(date +%s%3N)
		out=$(curl -s -m 2 -w '|%{http_code}' "$url/readyz" 2>/dev/null) || out='unreachable|000'
		out=${out//$'\n'/}
		printf '%s %s %s\n' "$t" "${out##*|}" "${out%|*}" >>"$poll_log"
		sleep 0.05
	done
) &
poller=$!
IDEM_CLEANUP_HOOKS+=("kill $poller 2>/dev/null")
now_ms() { date +%s%3N; }
# polls FROM TO [AWK CONDITION]: the polls taken in [FROM, TO) that match.
polls() { awk -v a="$1" -v b="$2" "\$1 >= a && \$1 < b ${3:+&& ($3)}" "$poll_log"; }
answers() { [ "$(tail -n 1 "$poll_log" | cut -d' ' -f2-)" = "$1" ]; }
consumed_is() { [ "$(idem_psql -c 'SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress')" = "$1" ]; }

# A backlog waits before idemd starts: it is consumed from the moment the partitions are
# assigned, so the first claim's transaction marks a time they were assigned by.
idem_produce --count 4000 --dup-ratio 0.3 --seed 5
total=$IDEM_PRODUCED
idemd_start a "$cfg"
idem_wait_until 60 "the backlog consumed" consumed_is "$total"
t_assigned=$(idem_psql -c "SELECT (extract(epoch FROM min(processed_at)) * 1000)::bigint FROM idem.processed_messages")
sleep 3 # idle
idem_produce --count 4000 --dup-ratio 0.3 --seed 6
total=$((total + IDEM_PRODUCED))
idem_wait_until 60 "the second stream consumed" consumed_is "$total"
sleep 3 # idle
# At least 60 polls in the window, however slowly a busy machine runs the poller.
polled_enough() { [ "$(polls "$t_assigned" "$(now_ms)" | wc -l)" -ge 60 ]; }
idem_wait_until 120 "60 polls of /readyz while assigned and connected" polled_enough
t_stop=$(now_ms)
n=$(polls "$t_assigned" "$t_stop" | wc -l)
bad=$(polls "$t_assigned" "$t_stop" '$2 != 200')
[ -z "$bad" ] || idem_fail "/readyz not ready while assigned and connected (assigned by $t_assigned): $(head -5 <<<"$bad")"
[ "$n" -ge 60 ] || idem_fail "only $n polls of /readyz while assigned and connected"
idem_log "/readyz: 200 on all $n polls while assigned and connected"

# Only then: Postgres goes away while idemd is idle, and comes back.
idem_pg_stop fast
idem_wait_until 10 "/readyz says not connected" answers "503 not connected to postgres"
t_noticed=$(now_ms)
sleep 2
t_start=$(now_ms)
bad=$(polls "$t_noticed" "$t_start" '$2 != 503')
[ -z "$bad" ] || idem_fail "/readyz ready while Postgres was down: $(head -3 <<<"$bad")"
idem_pg_start_again
idem_wait_until 10 "/readyz ready again" answers "200 ready"
t_back=$(now_ms)
# Still applying: a few more payments after the outage.
idem_produce --count 500 --dup-ratio 0 --seed 7
total=$((total + IDEM_PRODUCED))
idem_wait_until 60 "payments after the outage consumed" consumed_is "$total"
t_end=$(now_ms)
kill $poller
wait $poller 2>/dev/null || true
idemd_stop a
bad=$(polls "$t_back" "$t_end" '$2 != 200')
[ -z "$bad" ] || idem_fail "/readyz not ready after Postgres came back: $(head -3 <<<"$bad")"
idem_check_accounting payments
echo "ok: /readyz exact over $(wc -l <"$poll_log") polls: ready while assigned and connected ($n polls), not while Postgres was down ($(polls "$t_noticed" "$t_start" | wc -l) polls); $(idem_counts payments)"
