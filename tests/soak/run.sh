#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../integration
# tests/soak/run.sh - the soak: idemd under a steady storm of faults for a set time. Not part of
# the default test run (tests/README.md).
#
#   tests/soak/run.sh [--minutes M] [--rate R] [--partitions P] [--instances N]
#                     [--kill-every S] [--pg-restart-every S] [--terminate-every S]
#                     [--build-dir DIR]
#
# Defaults: 10 minutes, 400 payments/s with 20% upstream duplicates over 16 partitions, three
# instances in one group. Meanwhile a driver SIGKILLs a random instance every 3-6 s (--kill-every
# 4.5: the mean; at least 100 kills in 10 minutes) and starts it again a moment later, restarts
# Postgres with `-m immediate` every 150 s and terminates every idemd backend every 45 s.
# After each fault it measures the time until every partition commits again (recovery); a
# fault that comes before that counts as "not recovered before the next fault".
#
# At the end, with the faults stopped: the stream is applied to its end, every payment exactly
# once (claims, ledger, balances), nothing missing, the counters balanced, `idemctl verify`
# clean, and every instance running and ready (/readyz). It prints the figures: kills,
# restarts, terminations, messages produced and consumed (re-read = consumed - produced), and
# recovery times (median and max). Exit status 0 only if every check holds.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)

minutes=10
rate=400
partitions=16
instances=3
kill_every=4.5
pg_every=150
term_every=45
build_dir=$src/build

usage() {
	sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case $1 in
	--minutes) minutes=$2 && shift 2 ;;
	--rate) rate=$2 && shift 2 ;;
	--partitions) partitions=$2 && shift 2 ;;
	--instances) instances=$2 && shift 2 ;;
	--kill-every) kill_every=$2 && shift 2 ;;
	--pg-restart-every) pg_every=$2 && shift 2 ;;
	--terminate-every) term_every=$2 && shift 2 ;;
	--build-dir) build_dir=$2 && shift 2 ;;
	-h | --help) usage && exit 0 ;;
	*) echo "soak: unknown option '$1' (see --help)" >&2 && exit 2 ;;
	esac
done
for v in minutes rate partitions instances pg_every term_every; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "soak: --${v//_/-} must be a positive integer" >&2 && exit 2; }
done
[[ $kill_every =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "soak: --kill-every must be a number of seconds" >&2 && exit 2; }

if [ ! -x "$build_dir/idemd" ]; then
	echo "soak: building in $build_dir" >&2
	cmake -S "$src" -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build "$build_dir" -j"$(nproc)" >/dev/null
fi
export IDEM_BIN=$build_dir IDEM_SRC=$src
. "$src/tests/integration/lib.sh"
. "$src/tests/integration/common.sh"

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }

idem_tmp_init
idem_pg_start
# A crash restart may only lose what was never acknowledged: commits wait for the WAL flush.
idem_pg_durable_commits
[ "$(idem_psql -c 'SHOW synchronous_commit')" = on ] || idem_fail "synchronous_commit is not on"
idem_kafka_start "payments:$partitions"
seconds=$((minutes * 60))
count=$((rate * seconds))
cfg=$IDEM_TMP/idemd.yaml
# Small batches and a short session: many transactions for the faults to land in, and a killed
# member's partitions move on sooner (4 s: the embedded Kafka waits session.timeout.ms - 1 s for
# members to rejoin, and with less a loaded machine can keep the group from forming).
idem_write_config "$cfg" g-soak payments --max 50 --kafka-prop session.timeout.ms=4000
idem_setup_db "$cfg"
ports=()
for ((i = 1; i <= instances; i++)); do
	ports[i]=$(idem_free_port)
	cp "$cfg" "$IDEM_TMP/i$i.yaml"
	printf 'metrics:\n  listen: "127.0.0.1:%s"\n' "${ports[i]}" >>"$IDEM_TMP/i$i.yaml"
	idemd_start "i$i" "$IDEM_TMP/i$i.yaml"
done
idem_log "soak: $minutes min, $count payments at $rate/s over $partitions partitions, $instances instances"
idem_produce_bg --count "$count" --dup-ratio 0.2 --seed 4242 --rate "$rate"

# progress: every partition's committed next offset, "p:offset" space-separated.
progress() {
	idem_psql -c "SELECT string_agg(partition || ':' || next_offset, ' ' ORDER BY partition) FROM idem.partition_progress WHERE consumer = 'payments'" 2>/dev/null || true
}
# advanced SNAPSHOT: how many partitions committed past their offset in SNAPSHOT.
advanced() {
	local now_p=$1 snap=$2
	awk -v a="$now_p" -v b="$snap" 'BEGIN {
		n = split(b, x, " "); for (i = 1; i <= n; i++) { split(x[i], kv, ":"); base[kv[1]] = kv[2] }
		m = split(a, y, " "); c = 0
		for (i = 1; i <= m; i++) { split(y[i], kv, ":"); if (!(kv[1] in base) || kv[2] > base[kv[1]]) c++ }
		print c }'
}

kills=0 pg_restarts=0 terms=0 term_backends=0
recov=() unrecovered=0
t_start=$(now)
next_pg=$(calc "$t_start + $pg_every")
next_term=$(calc "$t_start + $term_every")
end=$(calc "$t_start + $seconds")
# The driver: one fault, then watch for recovery until the next one is due.
while awk "BEGIN { exit !($(now) < $end) }"; do
	t=$(now)
	if awk "BEGIN { exit !($t >= $next_pg) }"; then
		what=pg-restart
		idem_pg_restart_immediate
		pg_restarts=$((pg_restarts + 1))
		next_pg=$(calc "$next_pg + $pg_every")
	elif awk "BEGIN { exit !($t >= $next_term) }"; then
		what=terminate
		n=$(idem_psql -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'idemd'" || echo 0)
		term_backends=$((term_backends + n))
		terms=$((terms + 1))
		next_term=$(calc "$next_term + $term_every")
	else
		what=kill
		i=$((RANDOM % instances + 1))
		idemd_kill9 "i$i"
		kills=$((kills + 1))
		sleep "0.$((RANDOM % 10))"
		idemd_start "i$i" "$IDEM_TMP/i$i.yaml"
	fi
	snap=$(progress)
	t_fault=$(now)
	# The next fault 3 to 6 s later around --kill-every (4.5 s: 1.5 either side).
	gap=$(awk -v m="$kill_every" -v r="$RANDOM" 'BEGIN { printf "%.2f", m - m / 3 + (r / 32767) * (2 * m / 3) }')
	due=$(calc "$t_fault + $gap")
	recovered=
	while awk "BEGIN { exit !($(now) < $due) }"; do
		if [ -z "$recovered" ] && [ -n "$snap" ] &&
			[ "$(advanced "$(progress)" "$snap")" -ge "$partitions" ]; then
			recovered=$(calc "$(now) - $t_fault")
			recov+=("$recovered")
		fi
		sleep 0.2
	done
	[ -n "$recovered" ] || unrecovered=$((unrecovered + 1))
	idem_log "fault $((kills + pg_restarts + terms)) ($what): recovered in ${recovered:-> ${gap}}s"
done
idem_log "faults stopped: $kills kills, $pg_restarts Postgres restarts, $terms terminations"

# The end: the rest of the stream is applied, by every instance still standing.
idem_produce_wait $((seconds + 600))
idem_wait_done g-soak 600
for ((i = 1; i <= instances; i++)); do
	idem__alive "$(idemd_pid "i$i")" || idem_fail "instance i$i is not running at the end"
	# Ready once the last rebalance has settled: connected, assigned, nothing halted.
	idem_wait_until 60 "instance i$i to be ready" \
		curl -fs -o /dev/null --max-time 2 "http://127.0.0.1:${ports[i]}/readyz"
done
idem_check_exactly_once payments
idem_check_accounting payments
"$IDEM_BIN/idemctl" -c "$cfg" verify >"$IDEM_TMP/verify.txt" ||
	idem_fail "idemctl verify: $(cat "$IDEM_TMP/verify.txt")"
for ((i = 1; i <= instances; i++)); do
	idemd_stop "i$i"
done

consumed=$(idem_psql -c "SELECT sum(consumed) FROM idem.partition_progress WHERE consumer = 'payments'")
stats=$(printf '%s\n' "${recov[@]}" | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) { print "- -"; exit } m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m, a[NR] }')
read -r rmed rmax <<<"$stats"
cat <<EOF
soak: $minutes min, $instances instances, $partitions partitions, $rate payments/s produced
  faults: $kills SIGKILLs, $pg_restarts Postgres restarts (-m immediate), $terms backend terminations ($term_backends backends)
  messages: produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE consumed=$consumed re-read=$((consumed - IDEM_PRODUCED))
  recovery (every partition committing again): median ${rmed}s, max ${rmax}s over ${#recov[@]} faults; $unrecovered faults came before recovery
  checks: exactly once, nothing missing, counters balanced, idemctl verify clean, every instance running and ready: OK
EOF
