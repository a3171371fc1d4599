#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../integration
# tests/bench/run.sh - the idemd benchmark (tests/bench/README.md). Not a pass/fail test.
#
#   tests/bench/run.sh [--messages N] [--runs R] [--partitions P] [--dup-ratio D]
#                      [--batch B] [--workers W] [--max-wait-ms MS] [--latency-max-wait-ms MS]
#                      [--history H] [--naive-max M] [--naive-seconds S]
#                      [--latency-seconds S] [--latency-rate R] [--kafka-prop NAME=VALUE]...
#                      [--pg-setting NAME=VALUE]... [--profile] [--skip-latency]
#                      [--build-dir DIR] [--out DIR]
#
# Defaults: 1,000,000 messages, 3 runs, 16 partitions, 10% duplicates, batch 500, workers as
# idemd sizes them by default (one per CPU, at most 8; A uses as many connections), max wait
# 20 ms (5 ms in the latency run), 100,000 claims of history, naive consumer timed on 20,000
# messages or 20 s, latency run 20 s. Quick mode: --messages 100000 --runs 1.
#
# One Postgres (fsync on, default synchronous_commit, track_commit_timestamp on) and one
# embedded Kafka for everything. N payment messages are produced once; then each run measures,
# on freshly truncated tables:
#   A  bench_raw: idemd's batch SQL straight through libpq, no Kafka in the timed loop;
#   B  bench_naive: one transaction and one synchronous offset commit per message (a subset);
#   C  idemd consuming all N messages (a backlog of N messages before it starts), then the
#      exactly-once check on the database;
#   K  bench_klat: Kafka alone at the latency run's rate (the latency floor);
#   L  idemd fed at half of C's rate: end-to-end latency, producer timestamp to the commit of
#      the transaction that applied the message.
# --profile adds one more idemd pass over the N messages under `perf record -a` and prints
# where the CPU goes. Results (report, raw lines, profile) are also written to --out.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)

messages=1000000
runs=3
partitions=16
# Payments are keyed (partitioned) by account; 10,000 accounts spread them evenly.
export IDEM_ACCOUNTS=10000
dup_ratio=0.1
batch=500
workers=$(nproc)
[ "$workers" -le 8 ] || workers=8
max_wait_ms=20
lat_max_wait_ms=5
latency_rate=0
history=100000
naive_max=20000
naive_seconds=20
latency_seconds=20
profile=0
skip_latency=0
build_dir=$src/build-bench
out_dir=
kafka_props=()
pg_settings=()

usage() {
	sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case $1 in
	--messages) messages=$2 && shift 2 ;;
	--runs) runs=$2 && shift 2 ;;
	--partitions) partitions=$2 && shift 2 ;;
	--dup-ratio) dup_ratio=$2 && shift 2 ;;
	--batch) batch=$2 && shift 2 ;;
	--workers) workers=$2 && shift 2 ;;
	--max-wait-ms) max_wait_ms=$2 && shift 2 ;;
	--latency-max-wait-ms) lat_max_wait_ms=$2 && shift 2 ;;
	--history) history=$2 && shift 2 ;;
	--naive-max) naive_max=$2 && shift 2 ;;
	--naive-seconds) naive_seconds=$2 && shift 2 ;;
	--latency-seconds) latency_seconds=$2 && shift 2 ;;
	--latency-rate) latency_rate=$2 && shift 2 ;;
	--kafka-prop) kafka_props+=("$2") && shift 2 ;;
	--pg-setting) pg_settings+=("$2") && shift 2 ;;
	--profile) profile=1 && shift ;;
	--skip-latency) skip_latency=1 && shift ;;
	--build-dir) build_dir=$2 && shift 2 ;;
	--out) out_dir=$2 && shift 2 ;;
	-h | --help) usage && exit 0 ;;
	*) echo "run.sh: unknown option '$1' (see --help)" >&2 && exit 2 ;;
	esac
done
for v in messages runs partitions batch workers naive_max naive_seconds latency_seconds; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --${v//_/-} must be a positive integer" >&2 && exit 2; }
done
for v in max_wait_ms lat_max_wait_ms history latency_rate; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "run.sh: --${v//_/-} must be a non-negative integer" >&2 && exit 2; }
done
: "${out_dir:=$build_dir/bench-out/$(date +%Y%m%d-%H%M%S)}"

# ---- build (Release) ---------------------------------------------------------------------------
echo "building in $build_dir (Release)" >&2
cmake -S "$src" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build_dir" -j2 --target idemd idemctl idem-mock-kafka idem-kafkatool \
	bench_raw bench_naive bench_watch bench_klat >/dev/null

export IDEM_BIN=$build_dir IDEM_SRC=$src IDEM_PG_FSYNC=1
BENCH_BIN=$build_dir/tests/bench
# shellcheck source=lib.sh
. "$src/tests/integration/lib.sh"
# shellcheck source=common.sh
. "$src/tests/integration/common.sh"
# shellcheck disable=SC2034 # read by lib.sh
IDEM_TEST_NAME=bench
mkdir -p "$out_dir"
results=$out_dir/results.txt
: >"$results"

# rec KEY VALUE: remember one measurement (also appended to $out_dir/values.tsv).
declare -A V
rec() {
	V[$1]=$2
	printf '%s\t%s\n' "$1" "$2" >>"$out_dir/values.tsv"
}

# kv LINE KEY: the value of KEY=VALUE in LINE.
kv() {
	sed -n "s/.*\\b$2=\\([^ ]*\\).*/\\1/p" <<<"$1"
}

# calc EXPR: floating point arithmetic with awk.
calc() {
	awk "BEGIN { printf \"%.6g\", $1 }"
}

median() {
	sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# ---- fixture ---------------------------------------------------------------------------------
idem_tmp_init
idem_pg_start
# The latency is measured to the commit of the transaction: pg_xact_commit_timestamp().
idem_psql -d postgres -c "ALTER SYSTEM SET track_commit_timestamp = on"
for s in "${pg_settings[@]}"; do
	idem_psql -d postgres -c "ALTER SYSTEM SET ${s%%=*} = '${s#*=}'"
done
idem_pg_restart_immediate
[ "$(idem_psql -c 'SHOW track_commit_timestamp')" = on ] || idem_fail "track_commit_timestamp is off"
[ "$(idem_psql -c 'SHOW fsync')" = on ] || idem_fail "fsync is off"
PM=$(head -n 1 "$IDEM_PGDATA/postmaster.pid")

topics=("payments:$partitions")
for ((r = 1; r <= runs; r++)); do
	topics+=("lat$r:$partitions" "klat$r:$partitions")
done
idem_kafka_start "${topics[@]}"

# bench_config FILE GROUP CONSUMER TOPIC HANDLER_SQL PARAMS MAX_WAIT_MS: the tests' config
# writer with route 'bench', --batch, --workers, fetch.wait.max.ms 10 then --kafka-prop (a later
# NAME=VALUE replaces an earlier one), and idemd's own retry defaults.
bench_config() {
	local p props=()
	for p in "${kafka_props[@]}"; do
		props+=(--kafka-prop "$p")
	done
	idem_write_config "$1" "$2" "$3" --topic "$4" --route-name bench --sql "$5" --params "$6" \
		--max "$batch" --wait "$7" --workers "$workers" --kafka-prop fetch.wait.max.ms=10 \
		"${props[@]}" --no-retry --log-level info
}

# The latency handler: the payments handler, plus one row with the message's Kafka timestamp
# (set by the producer when it produced the message) in the same transaction.
# shellcheck disable=SC2016 # $n are SQL parameters
LATENCY_SQL='WITH l AS (INSERT INTO ledger (payment_id, account, amount) VALUES ($1, $2, $3::bigint)), t AS (INSERT INTO bench_latency (payment_id, produced_at) VALUES ($1, $4::timestamptz)) INSERT INTO accounts (id, balance) VALUES ($2, $3::bigint) ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance RETURNING balance'

bench_config "$IDEM_TMP/c.yaml" bench-setup payments payments "$IDEM_PAYMENTS_SQL" \
	'[business_key, "json:/account", "json:/amount"]' "$max_wait_ms"
idem_setup_db "$IDEM_TMP/c.yaml"
idem_psql -c "CREATE TABLE bench_latency (payment_id text NOT NULL, produced_at timestamptz NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"

# reset_db: empty tables for the next phase. Then, unless --history 0, the claims table gets
# $history older claims of the same consumers (topic 'history', keys that never collide) and
# fresh statistics, as in a deployment that has been running: on an empty, just-truncated
# table the planner picks plans that scan every claim of the consumer (see README.md).
reset_db() {
	idem_psql -c "TRUNCATE idem.processed_messages, idem.partition_progress, idem.quarantine, ledger, accounts, bench_latency RESTART IDENTITY"
	if [ "$history" -gt 0 ]; then
		idem_psql -c "INSERT INTO idem.processed_messages (consumer, business_key, topic, partition, \"offset\", payload_hash, result) SELECT c, 'hist-' || g, 'history', 0, g, sha256(g::text::bytea), '0' FROM generate_series(1, $history) g, (VALUES ('payments'), ('lat')) v(c)"
	fi
	idem_psql -c "VACUUM ANALYZE idem.processed_messages"
	idem_psql -c "CHECKPOINT"
}

# drop_history: remove the seeded claims before the exactly-once check counts claims.
drop_history() {
	idem_psql -c "DELETE FROM idem.processed_messages WHERE topic = 'history'"
}

# ---- the messages ------------------------------------------------------------------------------
idem_log "producing $messages payments over $partitions partitions, dup-ratio $dup_ratio"
idem_produce "$messages" "$dup_ratio" 1
while read -r line; do
	case $line in
	partition=*)
		[ "$(kv "$line" low)" = 0 ] || idem_fail "the embedded Kafka dropped messages ($line): use more --partitions"
		;;
	total*)
		[ "$(kv "$line" high)" = "$messages" ] || idem_fail "topic holds $(kv "$line" high) messages, expected $messages"
		;;
	esac
done < <("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group none --topic payments)
idem_log "produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE"

# ---- phases ------------------------------------------------------------------------------------
phase_a() {
	local r=$1 line
	reset_db
	# idemd's workers commit up to two full batches per transaction under a backlog: A gets
	# as many messages per transaction.
	idem_log "run $r: A raw postgres (bench_raw, batch $((2 * batch)), $workers connection(s))"
	line=$("$BENCH_BIN/bench_raw" --conninfo "$IDEM_CONNINFO" --brokers "$IDEM_BROKERS" \
		--topic payments --consumer payments --batch $((2 * batch)) --connections "$workers" \
		--postmaster "$PM")
	echo "run $r A: $line" >>"$results"
	[ "$(kv "$line" applied)" = "$IDEM_UNIQUE" ] ||
		idem_fail "bench_raw applied $(kv "$line" applied) payments, expected $IDEM_UNIQUE"
	rec "$r.A.msgs" "$(kv "$line" messages)"
	rec "$r.A.secs" "$(kv "$line" seconds)"
	rec "$r.A.rate" "$(kv "$line" rate)"
	rec "$r.A.cpu" "$(kv "$line" cpu_self)"
	rec "$r.A.pg" "$(kv "$line" pg_cpu)"
	rec "$r.A.tx" "$(kv "$line" batches)"
}

phase_b() {
	local r=$1 line
	reset_db
	idem_log "run $r: B naive consumer (first $naive_max messages or $naive_seconds s)"
	line=$("$BENCH_BIN/bench_naive" --conninfo "$IDEM_CONNINFO" --brokers "$IDEM_BROKERS" \
		--topic payments --group "bench-naive-$r" --consumer payments --max "$naive_max" \
		--seconds "$naive_seconds" --postmaster "$PM")
	echo "run $r B: $line" >>"$results"
	rec "$r.B.msgs" "$(kv "$line" messages)"
	rec "$r.B.secs" "$(kv "$line" seconds)"
	rec "$r.B.rate" "$(kv "$line" rate)"
	rec "$r.B.cpu" "$(kv "$line" cpu_self)"
	rec "$r.B.pg" "$(kv "$line" pg_cpu)"
	rec "$r.B.tx" "$(kv "$line" messages)"
}

# idemd_pid NAME
idemd_pid() {
	eval "echo \$IDEMD_PID_$1"
}

phase_c() {
	local r=$1 line pg0 pid
	reset_db
	idem_log "run $r: C idemd over a backlog of $messages messages"
	bench_config "$IDEM_TMP/c$r.yaml" "bench-c-$r" payments payments "$IDEM_PAYMENTS_SQL" \
		'[business_key, "json:/account", "json:/amount"]' "$max_wait_ms"
	pg0=$(kv "$("$BENCH_BIN/bench_watch" pgcpu --postmaster "$PM")" pg_cpu)
	idemd_start "c$r" "$IDEM_TMP/c$r.yaml"
	pid=$(idemd_pid "c$r")
	line=$("$BENCH_BIN/bench_watch" wait --conninfo "$IDEM_CONNINFO" --consumer payments \
		--topic payments --target "$messages" --pid "$pid" --postmaster "$PM") ||
		idem_fail "idemd did not process the topic"
	idemd_stop "c$r"
	cp "$IDEM_TMP/idemd-c$r.log" "$out_dir/"
	echo "run $r C: $line" >>"$results"
	rec "$r.C.msgs" "$messages"
	rec "$r.C.secs" "$(kv "$line" seconds)"
	rec "$r.C.rate" "$(calc "$messages / $(kv "$line" seconds)")"
	rec "$r.C.cpu" "$(kv "$line" cpu)"
	rec "$r.C.pg" "$(calc "$(kv "$line" pg_cpu) - $pg0")"
	rec "$r.C.rss" "$(calc "$(kv "$line" hwm_kib) / 1024")"
	rec "$r.C.tx" "$(kv "$line" transactions)"
	idem_log "run $r: exactly-once check of idemd's run"
	drop_history
	idem_check_exactly_once payments
	rec "$r.C.exactly_once" OK
	echo "run $r C: exactly-once check OK (unique=$IDEM_UNIQUE produced=$IDEM_PRODUCED)" >>"$results"
}

# klat_assigned RUN: true once bench_klat of that run has its partitions.
klat_assigned() {
	grep -q "assigned" "$IDEM_TMP/klat$1.log"
}

# phase_k RUN RATE COUNT: the Kafka-only latency floor: bench_klat consumes while
# idem-kafkatool produces exactly as in the latency run.
phase_k() {
	local r=$1 rate=$2 count=$3 pid line
	idem_log "run $r: K Kafka-only latency at $rate msg/s"
	: >"$IDEM_TMP/klat$r.log"
	"$BENCH_BIN/bench_klat" --brokers "$IDEM_BROKERS" --topic "klat$r" --group "bench-klat-$r" \
		--count "$count" >"$IDEM_TMP/klat$r.out" 2>"$IDEM_TMP/klat$r.log" &
	pid=$!
	idem_wait_until 60 "bench_klat to be assigned klat$r" klat_assigned "$r"
	"$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic "klat$r" \
		--count "$count" --dup-ratio "$dup_ratio" --seed $((100 + r)) --rate "$rate" \
		--accounts "$IDEM_ACCOUNTS" >/dev/null 2>>"$IDEM_TMP/produce-lat.log"
	wait "$pid" || idem_fail "bench_klat failed: $(cat "$IDEM_TMP/klat$r.log")"
	line=$(cat "$IDEM_TMP/klat$r.out")
	echo "run $r K: $line" >>"$results"
	rec "$r.K.p50" "$(kv "$line" p50_ms)"
	rec "$r.K.p99" "$(kv "$line" p99_ms)"
	rec "$r.K.max" "$(kv "$line" max_ms)"
}

# lat_assigned RUN: true once idemd logged the assignment of every partition of lat$RUN.
lat_assigned() {
	[ "$(grep -c "assigned topic=lat$1 " "$IDEM_TMP/idemd-l$1.log")" -ge "$partitions" ]
}

phase_l() {
	local r=$1 rate count line pid t0 t1 lat n p50 p99 max pg0
	rate=$(awk "BEGIN { printf \"%d\", ${V[$r.C.rate]} / 2 }")
	if [ "$latency_rate" -gt 0 ]; then
		rate=$latency_rate
	fi
	count=$((rate * latency_seconds))
	# Truncating first also ends autovacuum's work on C's million rows, which would otherwise
	# compete with the embedded Kafka for the CPU while K measures it.
	reset_db
	phase_k "$r" "$rate" "$count"
	idem_log "run $r: L latency at $rate msg/s for ${latency_seconds}s"
	bench_config "$IDEM_TMP/l$r.yaml" "bench-lat-$r" lat "lat$r" "$LATENCY_SQL" \
		'[business_key, "json:/account", "json:/amount", timestamp]' "$lat_max_wait_ms"
	pg0=$(kv "$("$BENCH_BIN/bench_watch" pgcpu --postmaster "$PM")" pg_cpu)
	idemd_start "l$r" "$IDEM_TMP/l$r.yaml"
	pid=$(idemd_pid "l$r")
	# Produce only once every partition is assigned: the group join is not latency.
	idem_wait_until 60 "idemd to be assigned lat$r" lat_assigned "$r"
	t0=${EPOCHREALTIME}
	"$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic "lat$r" \
		--count "$count" --dup-ratio "$dup_ratio" --seed $((100 + r)) --rate "$rate" \
		--accounts "$IDEM_ACCOUNTS" >/dev/null 2>>"$IDEM_TMP/produce-lat.log"
	t1=${EPOCHREALTIME}
	line=$("$BENCH_BIN/bench_watch" wait --conninfo "$IDEM_CONNINFO" --consumer lat \
		--topic "lat$r" --target "$count" --pid "$pid" --postmaster "$PM") ||
		idem_fail "idemd did not process topic lat$r"
	idemd_stop "l$r"
	cp "$IDEM_TMP/idemd-l$r.log" "$out_dir/"
	lat=$(idem_psql -F ' ' -c "SELECT count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(max(ms)::numeric, 2) FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms FROM bench_latency) s")
	read -r n p50 p99 max <<<"$lat"
	# Where the time goes: to the handler's statement (applied_at) vs to the commit, and how
	# the 99th percentile moves second by second (a rise means idemd falls behind).
	{
		echo "run $r L: to the handler p50/p99 ms, then per second of production: second messages p99_ms"
		idem_psql -F ' ' -c "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM (SELECT extract(epoch FROM applied_at - produced_at) * 1000 AS ms FROM bench_latency) s"
		idem_psql -F ' ' -c "SELECT extract(epoch FROM date_trunc('second', produced_at) - (SELECT date_trunc('second', min(produced_at)) FROM bench_latency))::int, count(*), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000)::numeric, 1) FROM bench_latency GROUP BY 1 ORDER BY 1" | tr '\n' ';'
		echo
	} >>"$results"
	echo "run $r L: rate=$rate produced=$count in $(calc "$t1 - $t0")s assignments=$(grep -c "info kafka: assigned" "$IDEM_TMP/idemd-l$r.log") revocations=$(grep -c "info kafka: revoked" "$IDEM_TMP/idemd-l$r.log") applied=$n p50_ms=$p50 p99_ms=$p99 max_ms=$max $line" >>"$results"
	rec "$r.L.rate" "$rate"
	rec "$r.L.achieved" "$(calc "$count / ($t1 - $t0)")"
	rec "$r.L.p50" "$p50"
	rec "$r.L.p99" "$p99"
	rec "$r.L.max" "$max"
	rec "$r.L.rss" "$(calc "$(kv "$line" hwm_kib) / 1024")"
	rec "$r.L.cpu" "$(kv "$line" cpu)"
	rec "$r.L.pg" "$(calc "$(kv "$line" pg_cpu) - $pg0")"
	rec "$r.L.secs" "$(kv "$line" seconds)"
	rec "$r.L.tx" "$(kv "$line" transactions)"
	rec "$r.L.claims" "$(kv "$line" claims)"
}

phase_profile() {
	local line pid perf_pid
	reset_db
	idem_log "profile: idemd over the $messages messages under perf record -a"
	bench_config "$IDEM_TMP/prof.yaml" bench-prof payments payments "$IDEM_PAYMENTS_SQL" \
		'[business_key, "json:/account", "json:/amount"]' "$max_wait_ms"
	idemd_start prof "$IDEM_TMP/prof.yaml"
	pid=$(idemd_pid prof)
	idem_spawn perf perf record -a -F 999 -e cpu-clock -o "$out_dir/perf.data"
	perf_pid=$IDEM_LAST_PID
	line=$("$BENCH_BIN/bench_watch" wait --conninfo "$IDEM_CONNINFO" --consumer payments \
		--topic payments --target "$messages" --pid "$pid") ||
		idem_fail "idemd did not process the topic"
	kill -INT "$perf_pid"
	idem__wait_gone "$perf_pid" 60 || idem_fail "perf did not stop"
	idemd_stop prof
	# perf report output goes to files first: head(1) closing a pipe must not fail the script.
	perf_rep() {
		perf report -i "$out_dir/perf.data" --stdio -q "$@" >"$IDEM_TMP/perf.txt" 2>/dev/null || true
	}
	{
		echo "== profile: idemd over $messages messages ($line)"
		echo "== CPU by process (comm), share of all samples of the whole machine, 2 CPUs = 100%"
		perf_rep --sort comm
		head -n 12 "$IDEM_TMP/perf.txt"
		echo "== postgres by process: the backend serving idemd is the top one"
		perf_rep --comm postgres --sort pid
		head -n 5 "$IDEM_TMP/perf.txt"
		echo "== idemd (pid $pid): by thread and shared object, relative to idemd's own samples"
		perf_rep --pid "$pid" --sort comm,dso --percentage relative
		head -n 14 "$IDEM_TMP/perf.txt"
		echo "== idemd: top symbols"
		perf_rep --pid "$pid" --sort dso,sym --percentage relative
		head -n 40 "$IDEM_TMP/perf.txt"
		echo "== postgres (all processes): top symbols"
		perf_rep --comm postgres --sort dso,sym --percentage relative
		head -n 30 "$IDEM_TMP/perf.txt"
	} >"$out_dir/profile.txt"
}

for ((r = 1; r <= runs; r++)); do
	phase_a "$r"
	phase_b "$r"
	phase_c "$r"
	rec "$r.CA" "$(calc "${V[$r.C.rate]} / ${V[$r.A.rate]}")"
	rec "$r.CB" "$(calc "${V[$r.C.rate]} / ${V[$r.B.rate]}")"
	if [ "$skip_latency" = 0 ]; then
		phase_l "$r"
	fi
done
if [ "$profile" = 1 ]; then
	phase_profile
fi

# ---- report --------------------------------------------------------------------------------------
per1k() { # CPU seconds per 1,000 messages
	calc "$1 * 1000 / $2"
}

report() {
	local r ph what
	echo
	echo "idemd benchmark: $messages messages ($IDEM_UNIQUE unique) over $partitions partitions," \
		"dup-ratio $dup_ratio, batch $batch, $workers worker(s) and A connection(s), $runs run(s); Postgres $("$IDEM_PG_BINDIR/postgres" --version | awk '{ print $3 }')" \
		"fsync=on synchronous_commit=on; $(nproc) CPUs"
	echo "A = raw Postgres (idemd's batch SQL via libpq, no Kafka), B = naive consumer (1 tx + 1 sync"
	echo "offset commit per message; timed on the first $naive_max messages or ${naive_seconds}s), C = idemd (backlog of all $messages)."
	echo "cpu/1k = CPU seconds per 1,000 messages: 'consumer' = the consuming process, 'postgres' = whole cluster."
	echo
	printf '%-7s %-5s %9s %8s %10s %13s %13s %9s %10s\n' run phase messages seconds msg/s \
		cpu/1k_cons cpu/1k_pg msgs/tx rss_MiB
	for ((r = 1; r <= runs; r++)); do
		for ph in A B C; do
			printf '%-7s %-5s %9s %8s %10.0f %13.4f %13.4f %9.1f %10s\n' "$r" "$ph" \
				"${V[$r.$ph.msgs]}" "${V[$r.$ph.secs]}" "${V[$r.$ph.rate]}" \
				"$(per1k "${V[$r.$ph.cpu]}" "${V[$r.$ph.msgs]}")" \
				"$(per1k "${V[$r.$ph.pg]}" "${V[$r.$ph.msgs]}")" \
				"$(calc "${V[$r.$ph.msgs]} / ${V[$r.$ph.tx]}")" "${V[$r.$ph.rss]:--}"
		done
	done
	for ph in A B C; do
		printf '%-7s %-5s %9s %8s %10.0f %13.4f %13.4f %9s %10s\n' median "$ph" - - \
			"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.$ph.rate]}"; done | median)" \
			"$(for ((r = 1; r <= runs; r++)); do per1k "${V[$r.$ph.cpu]}" "${V[$r.$ph.msgs]}"; echo; done | median)" \
			"$(for ((r = 1; r <= runs; r++)); do per1k "${V[$r.$ph.pg]}" "${V[$r.$ph.msgs]}"; echo; done | median)" \
			- "$(if [ "$ph" = C ]; then for ((r = 1; r <= runs; r++)); do echo "${V[$r.C.rss]}"; done | median; else echo -; fi)"
	done
	echo
	echo "(msgs/tx: messages per transaction; for C, transactions are counted as distinct xmin of the claims.)"
	echo
	printf '%-7s %8s %8s\n' run C/A C/B
	for ((r = 1; r <= runs; r++)); do
		printf '%-7s %8.3f %8.1f\n' "$r" "${V[$r.CA]}" "${V[$r.CB]}"
	done
	printf '%-7s %8.3f %8.1f   (targets: C/A >= 0.85, C/B >= 15)\n' median \
		"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.CA]}"; done | median)" \
		"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.CB]}"; done | median)"
	echo
	echo "idemd peak RSS (VmHWM) with a backlog of $messages messages: median $(for ((r = 1; r <= runs; r++)); do echo "${V[$r.C.rss]}"; done | median) MiB (target <= 64 MiB for 1,000,000)"
	if [ "$skip_latency" = 0 ]; then
		echo
		echo "End-to-end latency (producer timestamp -> commit of the applying transaction), idemd at $(if [ "$latency_rate" -gt 0 ]; then echo "$latency_rate msg/s (--latency-rate)"; else echo "half of C's rate"; fi), ${latency_seconds}s each:"
		printf '%-7s %7s %8s %8s %8s %8s %8s %8s %9s %10s %10s %8s\n' run msg/s achieved \
			p50_ms p99_ms max_ms kafka_p50 kafka_p99 claims/tx cpu/1k_cons cpu/1k_pg rss_MiB
		for ((r = 1; r <= runs; r++)); do
			printf '%-7s %7s %8.0f %8s %8s %8s %8s %8s %9.1f %10.4f %10.4f %8s\n' "$r" \
				"${V[$r.L.rate]}" "${V[$r.L.achieved]}" "${V[$r.L.p50]}" "${V[$r.L.p99]}" \
				"${V[$r.L.max]}" "${V[$r.K.p50]}" "${V[$r.K.p99]}" \
				"$(calc "${V[$r.L.claims]} / ${V[$r.L.tx]}")" \
				"$(per1k "${V[$r.L.cpu]}" "$((${V[$r.L.rate]} * latency_seconds))")" \
				"$(per1k "${V[$r.L.pg]}" "$((${V[$r.L.rate]} * latency_seconds))")" "${V[$r.L.rss]}"
		done
		printf '%-7s %7s %8s %8s %8s %8s %8s %8s   (target: p99 <= 25 ms)\n' median - - \
			"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.L.p50]}"; done | median)" \
			"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.L.p99]}"; done | median)" \
			"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.L.max]}"; done | median)" \
			"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.K.p50]}"; done | median)" \
			"$(for ((r = 1; r <= runs; r++)); do echo "${V[$r.K.p99]}"; done | median)"
		echo "(kafka_*: the same production consumed by bench_klat, which only reads: the share of Kafka"
		echo " itself, producer linger.ms=5 and the embedded Kafka's fetch wait included. The per-second"
		echo " p99 of each run is in the raw lines: a steady rise means idemd fell behind the rate.)"
	fi
	echo
	for ((r = 1; r <= runs; r++)); do
		what="${what:-}${what:+, }run $r ${V[$r.C.exactly_once]}"
	done
	echo "exactly-once check of idemd's runs (idem_check_exactly_once): $what"
}

report | tee "$out_dir/report.txt"
if [ "$profile" = 1 ]; then
	echo
	cat "$out_dir/profile.txt"
fi
echo
echo "raw lines: $results; report: $out_dir/report.txt"
