#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../integration
# tests/bench/run.sh - the idemd benchmark (tests/bench/README.md). Not a pass/fail test.
#
#   tests/bench/run.sh [--messages N] [--runs R] [--partitions P] [--dup-ratio D]
#                      [--batch B] [--workers W] [--max-wait-ms MS] [--tuned]
#                      [--latency-max-wait-ms MS] [--latency-fetch-wait-ms MS]
#                      [--history H] [--history-purge H] [--naive-max M] [--naive-seconds S]
#                      [--latency-seconds S] [--latency-rate R] [--latency-rates R1,R2,...]
#                      [--latency-beside]
#                      [--kafka-prop NAME=VALUE]... [--pg-setting NAME=VALUE]...
#                      [--peer-batch N] [--peer-connections K] [--peer-arg ARG]...
#                      [--modes row,set] [--avro] [--protobuf] [--json-schema] [--profile]
#                      [--statements] [--wal-stats]
#                      [--skip-latency] [--build-dir DIR] [--out DIR]
#                      [--partition-phases P1,P2,...] [--only-partitions]
#                      [--partition-latency-rate R] [--partition-latency-seconds S]
#
# Defaults: 1,000,000 messages, 3 runs, 16 partitions, 10% duplicates, no claims history (a
# fresh install), naive consumer timed on 20,000 messages or 20 s, latency run 20 s, both
# handler modes. Quick mode: --messages 100000 --runs 1.
#
# idemd runs as a new user runs it: in C, C_set (and the profile) every setting at its default
# (batch.max_messages, batch.max_wait_ms, batch.workers, every Kafka property; only
# session.timeout.ms 6000 and heartbeat.interval.ms 500, which make the group form faster),
# plus what --batch, --workers, --max-wait-ms and --kafka-prop set explicitly. --tuned restores
# the tuned settings of before: batch.max_messages --batch (500), batch.workers --workers (one per
# CPU, at most 8), batch.max_wait_ms --max-wait-ms (20), fetch.wait.max.ms 10,
# queued.min.messages 1000000. A uses 2 x --batch messages per transaction on --workers
# connections either way. The latency run at half of the backlog rate keeps its tuned settings:
# batch.max_wait_ms --latency-max-wait-ms (5), fetch.wait.max.ms --latency-fetch-wait-ms (1: the
# embedded Kafka holds an empty fetch for all of it, where a real broker answers as soon as data
# arrives).
#
# One Postgres (fsync on, default synchronous_commit, track_commit_timestamp on) and one
# embedded Kafka for everything. N payment messages are produced once (topic payments, JSON); with
# --avro the same N payments once more in Avro (topic payments_avro: Confluent-framed, encoded by
# tests/tools/avro_encode.py with python3-avro, the schema in a Schema Registry,
# tests/tools/registry.py; the same ids, accounts, amounts, duplicates and partitions: the
# manifests and the partitions' high watermarks are compared). Then each run measures, on freshly
# truncated tables:
#   A  bench_raw: idemd's batch SQL straight through libpq, no Kafka in the timed loop, the
#      payments handler once per message (row mode);
#   As bench_raw --mode set: the same with the set handler once per transaction (A_set);
#   B  bench_naive: one transaction and one synchronous offset commit per message (a subset);
#   C  idemd consuming all N messages (a backlog of N messages before it starts), handler.mode
#      row, then the exactly-once check on the database;
#   Ps bench_peer (P_set): the honest peer, a hand-written consumer of the same backlog that
#      applies each batch in one statement (claim in its own narrow table + the set handler's
#      work, one round trip, one implicit transaction), tuned (--peer-batch messages per
#      transaction, default 5000, on --peer-connections connections, default 4; --peer-arg
#      passes more to bench_peer, e.g. --idemd-claim for the earlier peer that claims with
#      idemd's statement and table), then the ledger, balances and claims checked;
#   Cs idemd the same as C with handler.mode set (C_set), and its exactly-once check; then the
#      bytes per claim (the claims table and its indexes over its rows, vacuumed);
#   Vs with --avro: C_set over payments_avro, idemd reading avro: fields through the registry
#      (V_set: business_key ${avro:/payment_id}, params avro:/account and avro:/amount), and the
#      same exactly-once check; V_set/C_set is the cost of Avro against JSON (target >= 0.9);
#   Gs with --protobuf: the same over payments_protobuf, the same payments as Confluent-framed
#      Protobuf (tests/tools/proto_encode.py, python3-protobuf), idemd reading protobuf: fields
#      (PB_set); PB_set/C_set is the cost of Protobuf against JSON (target >= 0.9);
#   Js, Jv with --json-schema: the same over payments_json, the same JSON text behind the
#      Confluent header (tests/tools/json_frame.py payments), value_format json-schema, idemd
#      reading json: fields; Js (JS_set) with validate: false (the default: the schema id is
#      looked up, the document not checked), Jv (JV_set) with validate: true (each document
#      checked against json_frame.py payments-schema: types, required members, an enum, a
#      pattern, bounds); JV_set/JS_set is what validation costs;
#   Hs with --history-purge H: C_set over a claims table that holds H claims older than
#      retention.keep, which idemd's retention purges while it applies the backlog (H_set):
#      its rate against C_set's, and the purge's rate (claims deleted per second of the run)
#      against the ingest rate;
#   K  bench_klat: Kafka alone at the latency run's rate (the latency floor), configured from
#      idemd's own configuration file of that run, before each L;
#   L  idemd fed at half of C's rate: end-to-end latency, producer timestamp to the commit of
#      the transaction that applied the message; Ls the same in set mode at half of C_set's rate.
# --latency-rates R1,R2,... replaces L and Ls: Ls (set mode) and its floor Ks at each fixed rate
# in turn, idemd at its defaults as in C_set (--tuned: the latency run's tuned settings), with
# p99 - Kafka-alone p99 reported against the target (<= 25 ms at 5,000 msg/s).
# --latency-beside also runs bench_klat beside idemd in every latency run (the same topic, its own
# group, while idemd applies it): Kafka's share under the same load (Postgres, idemd and the
# embedded Kafka on the same CPUs), so that p99 - beside p99 is what idemd itself adds. The reader
# beside adds its own load, so idemd's figures of such a run are not those of a run without it.
# Headline ratio: C_set/P_set; with --avro also V_set/C_set, with idemd's CPU per 1,000 messages
# of both. --modes row or --modes set runs only that mode's phases (A/C/L or As/Ps/Cs/Vs/Ls;
# --avro needs set mode).
# --statements loads pg_stat_statements (planning tracked too) and reports, for each latency run,
# every statement's calls and mean planning and execution time: where the commit stage goes.
# --wal-stats keeps the WAL (wal_keep_size 4GB) and writes, for every P_set and idemd phase,
# pg_waldump --stats=record over the WAL it wrote to --out (walstats-NAME.txt): the records and
# bytes of each kind (heap insert, B-tree insert, commit, full-page images), theirs and idemd's.
# Every run reports the WAL records and full-page images per message (pg_stat_wal).
# --db-locale L creates the database idemd, the peer and the handler use with that collation
# (a libc locale such as C.UTF-8, or icu:en-US for an ICU one) instead of the fixture's "C"
# (initdb --no-locale): what text comparisons (claims' primary keys, the accounts) cost on a
# database created with a language's rules, as most are.
# --profile adds one more idemd pass over the N messages under `perf record -a` and prints
# where the CPU goes. Results (report, raw lines, profile) are also written to --out.
# --partition-phases 16,64,256 adds, in every run after the phases above, for each partition
# count P in turn (the first is the baseline), on a topic of P partitions in an embedded Kafka of
# its own holding the same N payments (the same generator and seed, keyed by account):
#   PT idemd as in C_set over the backlog: msg/s and the ratio to the baseline's rate of the same
#      run, the least and the most advanced partition (offsets applied, partition_progress) when
#      a third of the backlog is applied, and the exactly-once check;
#   PL idemd as in Ls, fed at --partition-latency-rate R msg/s (default: half of the baseline's
#      PT rate of the same run) for --partition-latency-seconds (15): p99 per partition, the
#      median partition's and the worst one's, worst/median.
# They run only when asked. --only-partitions runs them and nothing else (no other phase, nor
# the topic payments), at 16,64,256 unless --partition-phases says otherwise.
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
workers=$((2 * $(nproc))) # as idemd sizes them by default: two per CPU, at most 8
[ "$workers" -le 8 ] || workers=8
max_wait_ms=20
lat_max_wait_ms=5
lat_fetch_wait_ms=1
latency_rate=0
latency_rates=
beside=0
tuned=0
history=0
history_purge=0
modes=row,set
naive_max=20000
naive_seconds=20
latency_seconds=20
profile=0
wal_stats=0
skip_latency=0
statements=0
avro=0
protobuf=0
jsonschema=0
build_dir=$src/build-bench
out_dir=
db_locale=
kafka_props=()
pg_settings=()
# What --batch, --workers, --max-wait-ms, --latency-max-wait-ms and --latency-fetch-wait-ms set
# explicitly: idemd runs with these even at its defaults.
given=()
given_lat=()
# The peer (bench_peer): the tuning that won (README, "The peer").
peer_batch=5000
peer_connections=4
peer_args=()
# The partition phases (README, "Partition phases"); empty: none.
partition_phases=
only_partitions=0
partition_latency_rate=0
partition_latency_seconds=15

usage() {
	sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case $1 in
	--messages) messages=$2 && shift 2 ;;
	--runs) runs=$2 && shift 2 ;;
	--partitions) partitions=$2 && shift 2 ;;
	--dup-ratio) dup_ratio=$2 && shift 2 ;;
	--batch) batch=$2 && given+=(--max "$2") && shift 2 ;;
	--workers) workers=$2 && given+=(--workers "$2") && shift 2 ;;
	--max-wait-ms) max_wait_ms=$2 && given+=(--wait "$2") && shift 2 ;;
	--tuned) tuned=1 && shift ;;
	--latency-max-wait-ms) lat_max_wait_ms=$2 && given_lat+=(--wait "$2") && shift 2 ;;
	--latency-fetch-wait-ms)
		lat_fetch_wait_ms=$2 && given_lat+=(--kafka-prop "fetch.wait.max.ms=$2") && shift 2
		;;
	--history) history=$2 && shift 2 ;;
	--history-purge) history_purge=$2 && shift 2 ;;
	--naive-max) naive_max=$2 && shift 2 ;;
	--naive-seconds) naive_seconds=$2 && shift 2 ;;
	--latency-seconds) latency_seconds=$2 && shift 2 ;;
	--latency-rate) latency_rate=$2 && shift 2 ;;
	--latency-rates) latency_rates=$2 && shift 2 ;;
	--latency-beside) beside=1 && shift ;;
	--peer-batch) peer_batch=$2 && shift 2 ;;
	--peer-connections) peer_connections=$2 && shift 2 ;;
	--peer-arg) peer_args+=("$2") && shift 2 ;;
	--kafka-prop) kafka_props+=("$2") && shift 2 ;;
	--pg-setting) pg_settings+=("$2") && shift 2 ;;
	--modes) modes=$2 && shift 2 ;;
	--avro) avro=1 && shift ;;
	--protobuf) protobuf=1 && shift ;;
	--json-schema) jsonschema=1 && shift ;;
	--profile) profile=1 && shift ;;
	--wal-stats) wal_stats=1 && shift ;;
	--skip-latency) skip_latency=1 && shift ;;
	--statements) statements=1 && shift ;;
	--db-locale) db_locale=$2 && shift 2 ;;
	--build-dir) build_dir=$2 && shift 2 ;;
	--out) out_dir=$2 && shift 2 ;;
	--partition-phases) partition_phases=$2 && shift 2 ;;
	--only-partitions) only_partitions=1 && shift ;;
	--partition-latency-rate) partition_latency_rate=$2 && shift 2 ;;
	--partition-latency-seconds) partition_latency_seconds=$2 && shift 2 ;;
	-h | --help) usage && exit 0 ;;
	*) echo "run.sh: unknown option '$1' (see --help)" >&2 && exit 2 ;;
	esac
done
for v in messages runs partitions batch workers naive_max naive_seconds latency_seconds \
	peer_batch peer_connections partition_latency_seconds; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --${v//_/-} must be a positive integer" >&2 && exit 2; }
done
for v in max_wait_ms lat_max_wait_ms lat_fetch_wait_ms history history_purge latency_rate \
	partition_latency_rate; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "run.sh: --${v//_/-} must be a non-negative integer" >&2 && exit 2; }
done
case $modes in
row | set | row,set | set,row) ;;
*) echo "run.sh: --modes must be row, set or row,set" >&2 && exit 2 ;;
esac
rates=()
if [ -n "$latency_rates" ]; then
	IFS=, read -r -a rates <<<"$latency_rates"
	for v in "${rates[@]}"; do
		[[ $v =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --latency-rates takes positive integers separated by commas" >&2 && exit 2; }
	done
	[[ $modes == *set* ]] || { echo "run.sh: --latency-rates runs set mode: it needs --modes set or row,set" >&2 && exit 2; }
	[ "$latency_rate" = 0 ] || { echo "run.sh: --latency-rate and --latency-rates exclude each other" >&2 && exit 2; }
fi
run_row=0 run_set=0
[[ $modes != *row* ]] || run_row=1
[[ $modes != *set* ]] || run_set=1
[ "$avro" = 0 ] && [ "$protobuf" = 0 ] && [ "$jsonschema" = 0 ] || [ "$run_set" = 1 ] ||
	{ echo "run.sh: --avro, --protobuf and --json-schema run set mode: they need --modes set or row,set" >&2 && exit 2; }
pparts=()
[ "$only_partitions" = 0 ] || [ -n "$partition_phases" ] || partition_phases=16,64,256
if [ -n "$partition_phases" ]; then
	IFS=, read -r -a pparts <<<"$partition_phases"
	for v in "${pparts[@]}"; do
		[[ $v =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --partition-phases takes positive integers separated by commas" >&2 && exit 2; }
	done
	[ "$(printf '%s\n' "${pparts[@]}" | sort -u | wc -l)" = ${#pparts[@]} ] ||
		{ echo "run.sh: --partition-phases names a partition count twice" >&2 && exit 2; }
fi
if [ "$only_partitions" = 1 ] && { [ "$avro" = 1 ] || [ "$protobuf" = 1 ] || [ "$jsonschema" = 1 ] || [ "$profile" = 1 ]; }; then
	echo "run.sh: --only-partitions runs no other phase: drop --avro, --protobuf, --json-schema and --profile" >&2 && exit 2
fi
: "${out_dir:=$build_dir/bench-out/$(date +%Y%m%d-%H%M%S)}"

# ---- build (Release) ---------------------------------------------------------------------------
echo "building in $build_dir (Release)" >&2
cmake -S "$src" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build_dir" -j2 --target idemd idemctl idem-mock-kafka idem-kafkatool \
	bench_raw bench_naive bench_watch bench_klat bench_peer >/dev/null

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
if [ "$statements" = 1 ]; then
	pg_settings=("shared_preload_libraries=pg_stat_statements" "${pg_settings[@]}")
fi
[ "$wal_stats" = 0 ] || pg_settings=("wal_keep_size=4GB" "${pg_settings[@]}")
for s in "${pg_settings[@]}"; do
	idem_psql -d postgres -c "ALTER SYSTEM SET ${s%%=*} = '${s#*=}'"
done
idem_pg_restart_immediate
[ "$(idem_psql -c 'SHOW track_commit_timestamp')" = on ] || idem_fail "track_commit_timestamp is off"
[ "$(idem_psql -c 'SHOW fsync')" = on ] || idem_fail "fsync is off"
PM=$(head -n 1 "$IDEM_PGDATA/postmaster.pid")
if [ -n "$db_locale" ]; then
	case $db_locale in
	icu:*) db_loc="LOCALE_PROVIDER icu ICU_LOCALE '${db_locale#icu:}' LOCALE 'C.UTF-8'" ;;
	*) db_loc="LOCALE '$db_locale'" ;;
	esac
	idem_psql -d postgres -c "DROP DATABASE idem"
	idem_psql -d postgres -c "CREATE DATABASE idem TEMPLATE template0 ENCODING 'UTF8' $db_loc"
fi

topics=("payments:$partitions")
[ "$avro" = 0 ] || topics+=("payments_avro:$partitions")
[ "$protobuf" = 0 ] || topics+=("payments_protobuf:$partitions")
[ "$jsonschema" = 0 ] || topics+=("payments_json:$partitions")
for ((r = 1; r <= runs && only_partitions == 0; r++)); do
	topics+=("lat$r:$partitions" "klat$r:$partitions" "lats$r:$partitions" "klats$r:$partitions")
	for ((i = 0; i < ${#rates[@]}; i++)); do
		topics+=("latr$r-$i:$partitions" "klatr$r-$i:$partitions")
	done
done
idem_kafka_start "${topics[@]}"
# The partition phases: one embedded Kafka per partition count P (named pP), its backlog in
# topic payments (so that idem_check_exactly_once, which reads topic payments, checks it as it
# checks C_set) and a latency topic platR per run, all of P partitions.
for v in "${pparts[@]}"; do
	ptopics=("payments:$v")
	for ((r = 1; r <= runs; r++)); do
		ptopics+=("plat$r:$v")
	done
	idem_kafka_start_other "p$v" "${ptopics[@]}"
done

# bench_config FILE GROUP CONSUMER TOPIC HANDLER_SQL PARAMS MODE SETTINGS [OPTION...]: the tests'
# config writer with route 'bench', handler.mode MODE, idemd's retry defaults, and SETTINGS:
#   backlog  C, C_set and the profile: idemd's defaults (--kafka-defaults, --batch-defaults) plus
#            what --batch, --workers, --max-wait-ms set; with --tuned the settings of before
#            (--batch, --workers, --max-wait-ms, fetch.wait.max.ms 10, queued.min.messages 1000000)
#   latency  L and Ls at half of the backlog rate: --batch, --workers, --latency-max-wait-ms,
#            fetch.wait.max.ms --latency-fetch-wait-ms, queued.min.messages 1000000
#   rates    Ls at the --latency-rates: as backlog, plus what --latency-max-wait-ms and
#            --latency-fetch-wait-ms set; with --tuned as latency
# then --kafka-prop (a later NAME=VALUE replaces an earlier one), then OPTIONs (idem_write_config's,
# e.g. --key and --registry for Avro).
bench_config() {
	local p props=() cfg=()
	local tuned_backlog=(--max "$batch" --wait "$max_wait_ms" --workers "$workers"
		--kafka-prop fetch.wait.max.ms=10)
	local tuned_latency=(--max "$batch" --wait "$lat_max_wait_ms" --workers "$workers"
		--kafka-prop "fetch.wait.max.ms=$lat_fetch_wait_ms")
	case $8 in
	backlog)
		if [ "$tuned" = 1 ]; then
			cfg=("${tuned_backlog[@]}")
		else
			cfg=(--kafka-defaults --batch-defaults "${given[@]}")
		fi
		;;
	latency) cfg=("${tuned_latency[@]}") ;;
	rates)
		if [ "$tuned" = 1 ]; then
			cfg=("${tuned_latency[@]}")
		else
			cfg=(--kafka-defaults --batch-defaults "${given[@]}" "${given_lat[@]}")
		fi
		;;
	*) idem_fail "bench_config: unknown settings '$8'" ;;
	esac
	for p in "${kafka_props[@]}"; do
		props+=(--kafka-prop "$p")
	done
	idem_write_config "$1" "$2" "$3" --topic "$4" --route-name bench --sql "$5" --params "$6" \
		--mode "$7" "${cfg[@]}" "${props[@]}" --no-retry --log-level info "${@:9}"
}

# settings_text SETTINGS: what bench_config SETTINGS gives idemd, for the report.
settings_text() {
	local t
	case $1 in
	backlog) [ "$tuned" = 0 ] || t="tuned (--tuned): batch.max_messages $batch, batch.max_wait_ms $max_wait_ms, batch.workers $workers, fetch.wait.max.ms 10, queued.min.messages 1000000" ;;
	latency) t="batch.max_messages $batch, batch.max_wait_ms $lat_max_wait_ms, batch.workers $workers, fetch.wait.max.ms $lat_fetch_wait_ms, queued.min.messages 1000000" ;;
	rates) [ "$tuned" = 0 ] || t="tuned (--tuned): $(settings_text latency)" ;;
	esac
	if [ -z "${t:-}" ]; then
		t="every setting at its default"
		[ "$1" = backlog ] || [ ${#given_lat[@]} = 0 ] || t="$t except ${given_lat[*]}"
		[ ${#given[@]} = 0 ] || t="$t except ${given[*]}"
	fi
	[ ${#kafka_props[@]} = 0 ] || t="$t; --kafka-prop ${kafka_props[*]}"
	echo "$t"
}

# handler_sql MODE: the payments handler of that mode (sql/examples/payments_MODE.sql).
handler_sql() {
	if [ "$1" = set ]; then echo "$IDEM_PAYMENTS_SET_SQL"; else echo "$IDEM_PAYMENTS_SQL"; fi
}

# The latency handler: the payments handler, plus one row with the message's Kafka timestamp
# (set by the producer when it produced the message) in the same transaction.
# shellcheck disable=SC2016 # $n are SQL parameters
LATENCY_SQL='WITH l AS (INSERT INTO ledger (payment_id, account, amount) VALUES ($1, $2, $3::bigint)), t AS (INSERT INTO bench_latency (payment_id, produced_at) VALUES ($1, $4::timestamptz)) INSERT INTO accounts (id, balance) VALUES ($2, $3::bigint) ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance RETURNING balance'
# shellcheck disable=SC2016 # $n are SQL parameters
LATENCY_SET_SQL='WITH p AS (SELECT u.id, u.account, u.amount::bigint AS amount, u.ts, u.n FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(id, account, amount, ts, n)), l AS (INSERT INTO ledger (payment_id, account, amount) SELECT id, account, amount FROM p ORDER BY n), t AS (INSERT INTO bench_latency (payment_id, produced_at) SELECT id, ts::timestamptz FROM p) INSERT INTO accounts (id, balance) SELECT account, sum(amount) FROM p GROUP BY account ORDER BY account ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance'

bench_config "$IDEM_TMP/c.yaml" bench-setup payments payments "$IDEM_PAYMENTS_SQL" \
	'[business_key, "json:/account", "json:/amount"]' row backlog
idem_setup_db "$IDEM_TMP/c.yaml"
idem_psql -c "CREATE TABLE bench_latency (payment_id text NOT NULL, produced_at timestamptz NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
if [ "$statements" = 1 ]; then
	idem_psql -d postgres -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on"
	idem_psql -c "SELECT pg_reload_conf()" >/dev/null
	idem_psql -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
fi

# statements_dump NAME: pg_stat_statements since its last reset (--statements), the costliest
# first: calls, mean planning and execution ms per call, totals, and the statement's start.
statements_dump() {
	[ "$statements" = 1 ] || return 0
	{
		echo "statements of $1: calls plan_ms/call exec_ms/call plan_ms_total exec_ms_total statement"
		idem_psql -F ' ' -c "SELECT calls, round((total_plan_time / calls)::numeric, 3), round((total_exec_time / calls)::numeric, 3), round(total_plan_time::numeric), round(total_exec_time::numeric), left(regexp_replace(query, '\\s+', ' ', 'g'), 60) FROM pg_stat_statements WHERE calls >= 10 AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_plan_time + total_exec_time DESC LIMIT 10"
		idem_psql -F ' ' -c "SELECT 'all statements: calls', sum(calls), 'plan_ms', round(sum(total_plan_time)::numeric), 'exec_ms', round(sum(total_exec_time)::numeric) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'"
	} >"$out_dir/statements-$1.txt"
}

# reset_db: empty tables for the next phase, as on a fresh install (no statistics). With
# --history H, the claims table gets H older claims of the same consumers (topic 'history', keys
# that never collide) and fresh statistics, as in a deployment that has been running.
reset_db() {
	idem_psql -c "TRUNCATE idem.processed_messages, idem.partition_progress, idem.quarantine, ledger, accounts, bench_latency RESTART IDENTITY"
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS peer_claims" # bench_peer creates its own
	if [ "$history" -gt 0 ]; then
		idem_psql -c "INSERT INTO idem.processed_messages (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash, result) SELECT idem.claim_consumer_id(c), 'hist-' || g, idem.claim_topic_id('history'), 0, g, sha256(g::text::bytea), '0' FROM generate_series(1, $history) g, (VALUES ('payments'), ('lat')) v(c)"
		idem_psql -c "VACUUM ANALYZE idem.processed_messages"
	fi
	idem_psql -c "CHECKPOINT"
}

# drop_history: remove the seeded claims before the exactly-once check counts claims.
drop_history() {
	idem_psql -c "DELETE FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'history')"
}

# wal_lsn: the cluster's WAL position in bytes; the difference over a phase is the WAL it wrote
# (every process's, exact at once, unlike pg_stat_wal, which backends flush when they go idle).
wal_lsn() {
	idem_psql -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
}

# wal_kinds_reset; ... ; wal_kinds RUN PHASE: the WAL records and full-page images the phase
# wrote (pg_stat_wal, reset before it). Read once the consumer's connections are closed, so that
# their backends have flushed their counts (they do as they exit; the second's wait lets them).
wal_kinds_reset() {
	idem_psql -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
	wal_start=$(idem_psql -c "SELECT pg_current_wal_lsn()")
}
wal_kinds() {
	local line end
	if [ "$wal_stats" = 1 ]; then
		end=$(idem_psql -c "SELECT pg_current_wal_insert_lsn()")
		idem_psql -c "SELECT pg_switch_wal()" >/dev/null
		"$IDEM_PG_BINDIR/pg_waldump" --stats=record -p "$IDEM_PGDATA/pg_wal" -s "$wal_start" -e "$end" \
			>"$out_dir/walstats-$2-$1.txt" 2>&1 ||
			echo "pg_waldump failed for run $1 $2: $(tail -1 "$out_dir/walstats-$2-$1.txt")" >>"$results"
	fi
	sleep 1
	line=$(idem_psql -c "SELECT 'wal_records=' || wal_records || ' wal_fpi=' || wal_fpi || ' wal_bytes=' || wal_bytes FROM pg_stat_wal")
	echo "run $1 $2: $line" >>"$results"
	rec "$1.$2.walrec" "$(kv "$line" wal_records)"
	rec "$1.$2.fpi" "$(kv "$line" wal_fpi)"
}

# ---- the messages ------------------------------------------------------------------------------
# check_topic TOPIC: TOPIC holds all N messages from offset 0 of each partition; prints each
# partition's high watermark ("partition=P high=H" lines).
check_topic() {
	local line
	while read -r line; do
		case $line in
		partition=*)
			[ "$(kv "$line" low)" = 0 ] || idem_fail "the embedded Kafka dropped messages of $1 ($line): use more --partitions"
			echo "partition=$(kv "$line" partition) high=$(kv "$line" high)"
			;;
		total*)
			[ "$(kv "$line" high)" = "$messages" ] || idem_fail "topic $1 holds $(kv "$line" high) messages, expected $messages"
			;;
		esac
	done < <("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group none --topic "$1")
}

# pt_brokers P: the bootstrap list of the partition phases' Kafka of P partitions.
pt_brokers() {
	local var=IDEM_BROKERS_p$1
	echo "${!var}"
}

if [ "$only_partitions" = 0 ]; then
	idem_log "producing $messages payments over $partitions partitions, dup-ratio $dup_ratio"
	idem_produce --count "$messages" --dup-ratio "$dup_ratio" --seed 1
	check_topic payments >"$IDEM_TMP/payments.highs"
	idem_log "produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE"
	# The partition phases' checks borrow manifest.csv (pt_check): this is the one to restore.
	cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/manifest-main.csv"
fi
# produce_framed FORMAT: the same payments in Avro, Protobuf or JSON Schema (json) to topic
# payments_FORMAT: avro_encode.py (proto_encode.py, json_frame.py) draws them as idem_produce's idem-kafkatool produce does (the
# same --count, --dup-ratio, --seed 1, --accounts, and the topic's partition count), each line
# naming its partition; the manifest and each partition's count are checked to be those of
# payments. Sets framed_id[FORMAT] (the schema id).
declare -A framed_id
produce_framed() {
	local fmt=$1 line json_produced
	idem_log "producing the same payments in $fmt to payments_$fmt"
	[ -n "${IDEM_REGISTRY_URL:-}" ] || idem_registry_start
	if [ "$fmt" = avro ]; then
		idem_avro_encode payments-schema >"$IDEM_TMP/payments.avsc"
		framed_id[$fmt]=$(idem_registry_register payments-value "$IDEM_TMP/payments.avsc")
	elif [ "$fmt" = protobuf ]; then
		idem_proto_encode payments-schema >"$IDEM_TMP/payments.proto"
		framed_id[$fmt]=$(idem_registry_register payments-protobuf-value "$IDEM_TMP/payments.proto" --schema-type PROTOBUF)
	else
		idem_json_frame payments-schema >"$IDEM_TMP/payments.schema.json"
		framed_id[$fmt]=$(idem_registry_register payments-json-value "$IDEM_TMP/payments.schema.json" --schema-type JSON)
	fi
	line=$("idem_$(case $fmt in avro) echo avro_encode ;; protobuf) echo proto_encode ;; *) echo json_frame ;; esac)" payments --count "$messages" --dup-ratio "$dup_ratio" --seed 1 \
		--accounts "$IDEM_ACCOUNTS" --partitions "$partitions" --schema-id "${framed_id[$fmt]}" \
		--manifest "$IDEM_TMP/manifest-$fmt.csv" --output "$IDEM_TMP/payments-$fmt.txt")
	[ "$line" = "produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE duplicates=$((IDEM_PRODUCED - IDEM_UNIQUE))" ] ||
		idem_fail "the $fmt encoder made other payments ($line) than idem-kafkatool (produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE)"
	cmp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/manifest-$fmt.csv" ||
		idem_fail "the $fmt payments differ from the JSON ones: manifest.csv and manifest-$fmt.csv in $IDEM_TMP"
	json_produced=$IDEM_PRODUCED
	idem_avro_produce "payments_$fmt" "$IDEM_TMP/payments-$fmt.txt"
	[ "$IDEM_PRODUCED" = "$json_produced" ] ||
		idem_fail "produce-file wrote $IDEM_PRODUCED $fmt messages, expected $json_produced"
	check_topic "payments_$fmt" >"$IDEM_TMP/payments_$fmt.highs"
	cmp "$IDEM_TMP/payments.highs" "$IDEM_TMP/payments_$fmt.highs" ||
		idem_fail "payments_$fmt's partitions hold other counts than payments': $(paste -d ' ' "$IDEM_TMP/payments.highs" "$IDEM_TMP/payments_$fmt.highs" | tr '\n' ';')"
	line="produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE schema_id=${framed_id[$fmt]} value_bytes_mean=$(awk -F '\t' '{ n += length($2) / 2 } END { printf "%.1f", n / NR }' "$IDEM_TMP/payments-$fmt.txt")"
	idem_log "payments_$fmt: $line"
	echo "payments_$fmt: $line; the manifest and each partition's count are those of payments" >>"$results"
}
[ "$avro" = 0 ] || produce_framed avro
[ "$protobuf" = 0 ] || produce_framed protobuf
[ "$jsonschema" = 0 ] || produce_framed json

# The partition phases' backlogs: the same N payments as topic payments (idem-kafkatool produce,
# seed 1, --dup-ratio, the same accounts), each in its Kafka pP over P partitions. Which
# duplicates cross to another partition depends on P, so each has its own manifest and counts.
declare -A PT_PRODUCED PT_UNIQUE
for v in "${pparts[@]}"; do
	idem_log "producing $messages payments over $v partitions (Kafka p$v), dup-ratio $dup_ratio"
	line=$("$IDEM_BIN/idem-kafkatool" produce --brokers "$(pt_brokers "$v")" \
		--topic payments --count "$messages" --dup-ratio "$dup_ratio" --seed 1 \
		--accounts "$IDEM_ACCOUNTS" --manifest "$IDEM_TMP/manifest-p$v.csv" \
		2>>"$IDEM_TMP/produce-partitions.log") || idem_fail "producing to Kafka p$v failed"
	PT_PRODUCED[$v]=$(kv "$line" produced)
	PT_UNIQUE[$v]=$(kv "$line" unique)
	idem_with_kafka "p$v" check_topic payments >"$IDEM_TMP/payments-p$v.highs"
	# Each partition's depth: the account hash does not spread the payments evenly.
	line="produced=${PT_PRODUCED[$v]} unique=${PT_UNIQUE[$v]} $(awk -F 'high=' '{ d = $2 + 0; if (NR == 1 || d < lo) lo = d; if (d > hi) hi = d; n += d } END { printf "depth_min=%d depth_mean=%.0f depth_max=%d", lo, n / NR, hi }' "$IDEM_TMP/payments-p$v.highs")"
	idem_log "p$v: $line"
	echo "partitions $v: $line" >>"$results"
	rec "p$v.depth_min" "$(kv "$line" depth_min)"
	rec "p$v.depth_max" "$(kv "$line" depth_max)"
	rec "p$v.depth_mean" "$(kv "$line" depth_mean)"
done

# ---- phases ------------------------------------------------------------------------------------
# phase_a RUN MODE: A (row) or As (set).
phase_a() {
	local r=$1 mode=$2 ph=A line
	[ "$mode" = row ] || ph=As
	reset_db
	# idemd's workers commit up to two full batches per transaction under a backlog: A gets
	# as many messages per transaction.
	idem_log "run $r: $ph raw postgres (bench_raw --mode $mode, batch $((2 * batch)), $workers connection(s))"
	line=$("$BENCH_BIN/bench_raw" --conninfo "$IDEM_CONNINFO" --brokers "$IDEM_BROKERS" \
		--topic payments --consumer payments --batch $((2 * batch)) --connections "$workers" \
		--postmaster "$PM" --mode "$mode")
	echo "run $r $ph: $line" >>"$results"
	[ "$(kv "$line" applied)" = "$IDEM_UNIQUE" ] ||
		idem_fail "bench_raw applied $(kv "$line" applied) payments, expected $IDEM_UNIQUE"
	check_balances "$ph"
	rec "$r.$ph.msgs" "$(kv "$line" messages)"
	rec "$r.$ph.secs" "$(kv "$line" seconds)"
	rec "$r.$ph.rate" "$(kv "$line" rate)"
	rec "$r.$ph.cpu" "$(kv "$line" cpu_self)"
	rec "$r.$ph.pg" "$(kv "$line" pg_cpu)"
	rec "$r.$ph.tx" "$(kv "$line" batches)"
}

# check_balances PHASE: the ledger and the balances a phase left are the manifest's.
check_balances() {
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS expected; CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
	idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
	[ "$(idem_psql -c 'SELECT count(*) FROM ledger')" = "$IDEM_UNIQUE" ] ||
		idem_fail "$1: ledger has $(idem_psql -c 'SELECT count(*) FROM ledger') rows, expected $IDEM_UNIQUE"
	[ "$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')" = 0 ] ||
		idem_fail "$1: balances differ from the manifest"
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

# phase_p RUN: Ps (P_set), the hand-written peer over the same backlog, in a group of its own;
# then the database it left: every unique payment applied once, claimed once.
phase_p() {
	local r=$1 line claims wal0
	reset_db
	[ "$statements" = 0 ] || idem_psql -c "SELECT pg_stat_statements_reset()" >/dev/null
	wal0=$(wal_lsn)
	wal_kinds_reset
	idem_log "run $r: Ps hand-written peer (bench_peer, up to $peer_batch messages per transaction, $peer_connections connection(s)${peer_args[*]:+, ${peer_args[*]}})"
	line=$("$BENCH_BIN/bench_peer" --conninfo "$IDEM_CONNINFO" --brokers "$IDEM_BROKERS" \
		--topic payments --group "bench-peer-$r" --consumer payments --batch "$peer_batch" \
		--connections "$peer_connections" --postmaster "$PM" "${peer_args[@]}" \
		2>>"$out_dir/peer.log") || idem_fail "bench_peer failed: $(tail -3 "$out_dir/peer.log")"
	rec "$r.Ps.wal" "$(($(wal_lsn) - wal0))"
	wal_kinds "$r" Ps
	if [[ " ${peer_args[*]} " != *" --idemd-claim "* ]]; then
		idem_psql -c "VACUUM peer_claims"
		rec "$r.Ps.bpc" "$(idem_psql -c "SELECT round(pg_total_relation_size('peer_claims')::numeric / greatest(count(*), 1), 1) FROM peer_claims")"
	fi
	statements_dump "peer_$r"
	echo "run $r Ps: $line" >>"$results"
	[ "$(kv "$line" messages)" = "$messages" ] ||
		idem_fail "bench_peer consumed $(kv "$line" messages) messages, expected $messages"
	[ "$(kv "$line" applied)" = "$IDEM_UNIQUE" ] ||
		idem_fail "bench_peer applied $(kv "$line" applied) payments, expected $IDEM_UNIQUE"
	check_balances Ps
	claims="SELECT count(*) FROM peer_claims WHERE consumer = 'payments'"
	[[ " ${peer_args[*]} " != *" --idemd-claim "* ]] ||
		claims="SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments' AND topic = 'payments'"
	[ "$(idem_psql -c "$claims")" = "$IDEM_UNIQUE" ] ||
		idem_fail "Ps: claims differ from the unique payments"
	rec "$r.Ps.msgs" "$(kv "$line" messages)"
	rec "$r.Ps.secs" "$(kv "$line" seconds)"
	rec "$r.Ps.rate" "$(kv "$line" rate)"
	rec "$r.Ps.cpu" "$(kv "$line" cpu_self)"
	rec "$r.Ps.pg" "$(kv "$line" pg_cpu)"
	rec "$r.Ps.tx" "$(kv "$line" batches)"
	rec "$r.Ps.rss" "$(calc "$(kv "$line" hwm_kib) / 1024")"
}

# phase_c RUN MODE PAYLOAD [PURGE]: C (row) or Cs (set) over topic payments (PAYLOAD json);
# with PAYLOAD avro, Vs: set mode over topic payments_avro, the same payments in Avro, read
# with avro: fields through the schema registry (protobuf: Gs; json-schema and json-validate:
# Js and Jv over payments_json, validate false and true); with PURGE > 0, Hs: set mode (json) over a
# claims table that holds PURGE claims older than retention.keep (30 days, idemd's default),
# which idemd's retention purges while it applies the backlog (it starts at once,
# retention.batch rows per transaction, and has work the whole run if PURGE is large enough).
phase_c() {
	local r=$1 mode=$2 payload=$3 purge=${4:-0} ph=C name line pg0 pid left wal0
	local topic=payments params='[business_key, "json:/account", "json:/amount"]' opts=()
	[ "$mode" = row ] || ph=Cs
	[ "$purge" = 0 ] || ph=Hs
	if [ "$payload" != json ]; then
		[ "$ph" = Cs ] || idem_fail "phase_c: $payload runs in set mode without a purge only"
		case $payload in
		avro | protobuf)
			ph=Vs
			[ "$payload" = avro ] || ph=Gs
			topic=payments_$payload params="[business_key, \"$payload:/account\", \"$payload:/amount\"]"
			opts=(--key "\${$payload:/payment_id}")
			;;
		json-schema | json-validate)
			ph=Js topic=payments_json
			opts=(--key "\${json:/payment_id}" --route value_format=json-schema)
			[ "$payload" = json-schema ] || ph=Jv opts+=(--route validate=true)
			;;
		*) idem_fail "phase_c: unknown payload '$payload'" ;;
		esac
		opts+=(--registry "url=\"$IDEM_REGISTRY_URL\"")
	fi
	name=${ph,,}$r
	reset_db
	if [ "$purge" -gt 0 ]; then
		idem_log "run $r: $ph: $purge claims older than retention.keep"
		idem_psql -c "INSERT INTO idem.processed_messages (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash, processed_at) SELECT idem.claim_consumer_id('payments'), 'old-' || g, idem.claim_topic_id('history'), 0, g, substring(sha256(g::text::bytea) FROM 1 FOR 16), now() - interval '31 days' - make_interval(secs => g / 1000.0) FROM generate_series(1, $purge) g"
		idem_psql -c "VACUUM ANALYZE idem.processed_messages"
		idem_psql -c "CHECKPOINT"
	fi
	idem_log "run $r: $ph idemd (handler.mode $mode, $payload) over a backlog of $messages messages"
	bench_config "$IDEM_TMP/$name.yaml" "bench-$name" payments "$topic" "$(handler_sql "$mode")" \
		"$params" "$mode" backlog "${opts[@]}"
	cp "$IDEM_TMP/$name.yaml" "$out_dir/"
	pg0=$(kv "$("$BENCH_BIN/bench_watch" pgcpu --postmaster "$PM")" pg_cpu)
	[ "$statements" = 0 ] || idem_psql -c "SELECT pg_stat_statements_reset()" >/dev/null
	wal0=$(wal_lsn)
	wal_kinds_reset
	idemd_start "$name" "$IDEM_TMP/$name.yaml"
	pid=$(idemd_pid "$name")
	line=$("$BENCH_BIN/bench_watch" wait --conninfo "$IDEM_CONNINFO" --consumer payments \
		--topic "$topic" --target "$messages" --pid "$pid" --postmaster "$PM") ||
		idem_fail "idemd did not process topic $topic"
	idemd_stop "$name"
	rec "$r.$ph.wal" "$(($(wal_lsn) - wal0))"
	wal_kinds "$r" "$ph"
	statements_dump "$name"
	cp "$IDEM_TMP/idemd-$name.log" "$out_dir/"
	echo "run $r $ph: $line" >>"$results"
	rec "$r.$ph.msgs" "$messages"
	rec "$r.$ph.secs" "$(kv "$line" seconds)"
	rec "$r.$ph.rate" "$(calc "$messages / $(kv "$line" seconds)")"
	rec "$r.$ph.cpu" "$(kv "$line" cpu)"
	rec "$r.$ph.pg" "$(calc "$(kv "$line" pg_cpu) - $pg0")"
	rec "$r.$ph.rss" "$(calc "$(kv "$line" hwm_kib) / 1024")"
	rec "$r.$ph.tx" "$(kv "$line" transactions)"
	if [ "$purge" -gt 0 ]; then
		# What the purge deleted while idemd applied the backlog, per second of that.
		left=$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE topic = 'history'")
		rec "$r.$ph.purged" "$((purge - left))"
		rec "$r.$ph.purge_rate" "$(calc "($purge - $left) / $(kv "$line" seconds)")"
		echo "run $r $ph: purged $((purge - left)) of $purge older claims while applying ($left left)" >>"$results"
		idem_psql -c "DELETE FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'history')"
	fi
	idem_log "run $r: exactly-once check of idemd's $ph run"
	drop_history
	# Bytes per claim: the claims table with its indexes over its rows, vacuumed.
	idem_psql -c "VACUUM idem.processed_messages"
	rec "$r.$ph.bpc" "$(idem_psql -c "SELECT round(pg_total_relation_size('idem.processed_messages')::numeric / greatest(count(*), 1), 1) FROM idem.processed_messages")"
	if [ "$topic" != payments ]; then
		# The check compares the progress rows of topic payments with that topic's high
		# watermarks; payments_avro holds as many messages in each partition (checked when
		# produced), so its rows are checked as those of payments.
		idem_psql -c "UPDATE idem.partition_progress SET topic = 'payments' WHERE consumer = 'payments' AND topic = '$topic'"
	fi
	IDEM_HANDLER_MODE=$mode idem_check_exactly_once payments
	rec "$r.$ph.exactly_once" OK
	echo "run $r $ph: exactly-once check OK (unique=$IDEM_UNIQUE produced=$IDEM_PRODUCED)" >>"$results"
}

# klat_assigned TOPIC: true once bench_klat reading TOPIC has its partitions.
klat_assigned() {
	grep -q "assigned" "$IDEM_TMP/$1.log"
}

# phase_k RUN PHASE TOPIC RATE COUNT CONFIG: the Kafka-only latency floor: bench_klat consumes
# TOPIC while idem-kafkatool produces exactly as in the latency run PHASE (K before L, Ks before
# Ls), its consumer configured as idemd's from CONFIG, the latency run's idemd configuration.
phase_k() {
	local r=$1 ph=$2 topic=$3 rate=$4 count=$5 config=$6 pid line
	idem_log "run $r: $ph Kafka-only latency at $rate msg/s"
	: >"$IDEM_TMP/$topic.log"
	"$BENCH_BIN/bench_klat" --brokers "$IDEM_BROKERS" --topic "$topic" --group "bench-$topic" \
		--count "$count" --config "$config" >"$IDEM_TMP/$topic.out" 2>"$IDEM_TMP/$topic.log" &
	pid=$!
	idem_wait_until 60 "bench_klat to be assigned $topic" klat_assigned "$topic"
	"$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic "$topic" \
		--count "$count" --dup-ratio "$dup_ratio" --seed $((100 + r)) --rate "$rate" \
		--accounts "$IDEM_ACCOUNTS" >/dev/null 2>>"$IDEM_TMP/produce-lat.log"
	wait "$pid" || idem_fail "bench_klat failed: $(cat "$IDEM_TMP/$topic.log")"
	line=$(cat "$IDEM_TMP/$topic.out")
	echo "run $r $ph: $line" >>"$results"
	rec "$r.$ph.p50" "$(kv "$line" p50_ms)"
	rec "$r.$ph.p99" "$(kv "$line" p99_ms)"
	rec "$r.$ph.max" "$(kv "$line" max_ms)"
}

# lat_assigned NAME TOPIC [PARTITIONS]: true once idemd NAME logged the assignment of every
# partition of TOPIC (of --partitions partitions unless PARTITIONS says otherwise).
lat_assigned() {
	[ "$(grep -c "assigned topic=$2 " "$IDEM_TMP/idemd-$1.log")" -ge "${3:-$partitions}" ]
}

# stage_stats RUN PHASE METRICS_FILE: per stage of idemd_stage_seconds (measured on each
# committed batch's first message), the mean and the bucket bound under which 99% fell.
stage_stats() {
	local r=$1 ph=$2 st line
	for st in fetch batch queue commit; do
		line=$(awk -v st="$st" '
			$1 ~ "^idemd_stage_seconds_bucket\\{stage=\"" st "\"" {
				match($1, /le="[^"]*"/); le = substr($1, RSTART + 4, RLENGTH - 5)
				n++; bound[n] = le; cum[n] = $2 }
			$1 == "idemd_stage_seconds_sum{stage=\"" st "\"}" { sum = $2 }
			$1 == "idemd_stage_seconds_count{stage=\"" st "\"}" { cnt = $2 }
			END {
				p99 = "-"
				for (i = 1; i <= n; i++) if (cum[i] >= 0.99 * cnt) { p99 = bound[i]; break }
				if (p99 != "-" && p99 != "+Inf") p99 = p99 * 1000
				printf "mean_ms=%.2f p99_le_ms=%s batches=%d", cnt ? sum * 1000 / cnt : 0, p99, cnt
			}' "$3")
		echo "run $r $ph stage $st: $line" >>"$results"
		rec "$r.$ph.$st.mean" "$(kv "$line" mean_ms)"
		rec "$r.$ph.$st.p99" "$(kv "$line" p99_le_ms)"
	done
}

# phase_l RUN MODE PHASE KPHASE TOPIC RATE SETTINGS [PARTITIONS SECONDS]: the latency run PHASE
# of handler.mode MODE on TOPIC at RATE msg/s, idemd configured with bench_config SETTINGS, after
# its Kafka-only floor KPHASE (on topic kTOPIC, the consumer configured as idemd; none if KPHASE
# is -). L (row) and Ls (set) at half of C's and C_set's rate, with SETTINGS latency; Ls<R> at
# each of --latency-rates, with rates; PL<P> (the partition phases) with TOPIC of PARTITIONS
# partitions (default --partitions), for SECONDS (default --latency-seconds).
phase_l() {
	local r=$1 mode=$2 ph=$3 kph=$4 topic=$5 rate=$6 settings=$7 parts=${8:-$partitions}
	local seconds=${9:-$latency_seconds}
	local name count line pid t0 t1 lat n p50 p99 max pg0 port bline bpid=""
	local sql=$LATENCY_SQL
	[ "$mode" = row ] || sql=$LATENCY_SET_SQL
	name=${ph,,}_$r
	count=$((rate * seconds))
	bench_config "$IDEM_TMP/$name.yaml" "bench-$name" lat "$topic" "$sql" \
		'[business_key, "json:/account", "json:/amount", timestamp]' "$mode" "$settings"
	# /metrics gives where the time goes, stage by stage (idemd_stage_seconds).
	port=$(idem_free_port)
	printf 'metrics:\n  listen: "127.0.0.1:%s"\n' "$port" >>"$IDEM_TMP/$name.yaml"
	cp "$IDEM_TMP/$name.yaml" "$out_dir/"
	# Truncating first also ends autovacuum's work on C's million rows, which would otherwise
	# compete with the embedded Kafka for the CPU while K measures it.
	reset_db
	[ "$kph" = - ] || phase_k "$r" "$kph" "k$topic" "$rate" "$count" "$IDEM_TMP/$name.yaml"
	idem_log "run $r: $ph latency (handler.mode $mode) at $rate msg/s for ${seconds}s over $parts partitions"
	pg0=$(kv "$("$BENCH_BIN/bench_watch" pgcpu --postmaster "$PM")" pg_cpu)
	[ "$statements" = 0 ] || idem_psql -c "SELECT pg_stat_statements_reset()" >/dev/null
	idemd_start "$name" "$IDEM_TMP/$name.yaml"
	pid=$(idemd_pid "$name")
	# Produce only once every partition is assigned: the group join is not latency.
	idem_wait_until 60 "idemd to be assigned $topic" lat_assigned "$name" "$topic" "$parts"
	if [ "$beside" = 1 ]; then
		# Kafka's share under the same load: a reader in its own group, configured as idemd.
		: >"$IDEM_TMP/$topic.log"
		"$BENCH_BIN/bench_klat" --brokers "$IDEM_BROKERS" --topic "$topic" \
			--group "beside-$topic" --count "$count" --config "$IDEM_TMP/$name.yaml" \
			>"$IDEM_TMP/beside-$topic.out" 2>"$IDEM_TMP/$topic.log" &
		bpid=$!
		idem_wait_until 60 "bench_klat to be assigned $topic" klat_assigned "$topic"
	fi
	t0=${EPOCHREALTIME}
	"$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic "$topic" \
		--count "$count" --dup-ratio "$dup_ratio" --seed $((100 + r)) --rate "$rate" \
		--accounts "$IDEM_ACCOUNTS" >/dev/null 2>>"$IDEM_TMP/produce-lat.log"
	t1=${EPOCHREALTIME}
	line=$("$BENCH_BIN/bench_watch" wait --conninfo "$IDEM_CONNINFO" --consumer lat \
		--topic "$topic" --target "$count" --pid "$pid" --postmaster "$PM") ||
		idem_fail "idemd did not process topic $topic"
	if [ -n "$bpid" ]; then
		wait "$bpid" || idem_fail "bench_klat beside idemd failed: $(cat "$IDEM_TMP/$topic.log")"
		bline=$(cat "$IDEM_TMP/beside-$topic.out")
		echo "run $r $ph beside: $bline" >>"$results"
		rec "$r.B$ph.p50" "$(kv "$bline" p50_ms)"
		rec "$r.B$ph.p99" "$(kv "$bline" p99_ms)"
		rec "$r.B$ph.max" "$(kv "$bline" max_ms)"
	fi
	curl -fsS "http://127.0.0.1:$port/metrics" >"$out_dir/metrics-$name.txt" ||
		idem_fail "cannot scrape idemd's /metrics"
	idemd_stop "$name"
	statements_dump "$name"
	cp "$IDEM_TMP/idemd-$name.log" "$out_dir/"
	stage_stats "$r" "$ph" "$out_dir/metrics-$name.txt"
	lat=$(idem_psql -F ' ' -c "SELECT count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(max(ms)::numeric, 2) FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms FROM bench_latency) s")
	read -r n p50 p99 max <<<"$lat"
	# Where the time goes: to the handler's statement (applied_at) vs to the commit, and how
	# the 99th percentile moves second by second (a rise means idemd falls behind).
	{
		echo "run $r $ph: to the handler p50/p99 ms, then per second of production: second messages p99_ms"
		idem_psql -F ' ' -c "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM (SELECT extract(epoch FROM applied_at - produced_at) * 1000 AS ms FROM bench_latency) s"
		idem_psql -F ' ' -c "SELECT extract(epoch FROM date_trunc('second', produced_at) - (SELECT date_trunc('second', min(produced_at)) FROM bench_latency))::int, count(*), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000)::numeric, 1) FROM bench_latency GROUP BY 1 ORDER BY 1" | tr '\n' ';'
		echo
	} >>"$results"
	echo "run $r $ph: rate=$rate produced=$count in $(calc "$t1 - $t0")s assignments=$(grep -c "info kafka: assigned" "$IDEM_TMP/idemd-$name.log") revocations=$(grep -c "info kafka: revoked" "$IDEM_TMP/idemd-$name.log") applied=$n p50_ms=$p50 p99_ms=$p99 max_ms=$max $line" >>"$results"
	rec "$r.$ph.rate" "$rate"
	rec "$r.$ph.achieved" "$(calc "$count / ($t1 - $t0)")"
	rec "$r.$ph.p50" "$p50"
	rec "$r.$ph.p99" "$p99"
	rec "$r.$ph.max" "$max"
	rec "$r.$ph.rss" "$(calc "$(kv "$line" hwm_kib) / 1024")"
	rec "$r.$ph.cpu" "$(kv "$line" cpu)"
	rec "$r.$ph.pg" "$(calc "$(kv "$line" pg_cpu) - $pg0")"
	rec "$r.$ph.secs" "$(kv "$line" seconds)"
	rec "$r.$ph.tx" "$(kv "$line" transactions)"
	rec "$r.$ph.claims" "$(kv "$line" claims)"
}

# lat_rate RUN PHASE: the rate of the latency run after backlog run PHASE: --latency-rate, or
# half of PHASE's rate.
lat_rate() {
	if [ "$latency_rate" -gt 0 ]; then
		echo "$latency_rate"
	else
		awk "BEGIN { printf \"%d\", ${V[$1.$2.rate]} / 2 }"
	fi
}

# ---- partition phases (--partition-phases) ------------------------------------------------------
# pt_check P: idem_check_exactly_once on the run over Kafka pP, against that backlog's manifest
# and counts (the check reads $IDEM_TMP/manifest.csv: the main one is put back after).
pt_check() {
	cp "$IDEM_TMP/manifest-p$1.csv" "$IDEM_TMP/manifest.csv"
	IDEM_UNIQUE=${PT_UNIQUE[$1]} IDEM_PRODUCED=${PT_PRODUCED[$1]} IDEM_HANDLER_MODE=set \
		idem_with_kafka "p$1" idem_check_exactly_once payments
	[ ! -e "$IDEM_TMP/manifest-main.csv" ] || cp "$IDEM_TMP/manifest-main.csv" "$IDEM_TMP/manifest.csv"
}

# phase_pt RUN P: PT<P>, idemd as in C_set (handler.mode set, the set handler, bench_config
# backlog) over the backlog of P partitions; bench_watch takes the least and the most advanced
# partition when a third of it is applied; then the exactly-once check.
phase_pt() {
	local r=$1 P=$2 ph=PT$2 name line pg0 pid
	name=${ph,,}_$r
	reset_db
	idem_log "run $r: $ph idemd (handler.mode set) over a backlog of $messages messages in $P partitions"
	idem_with_kafka "p$P" bench_config "$IDEM_TMP/$name.yaml" "bench-$name" payments payments \
		"$(handler_sql set)" '[business_key, "json:/account", "json:/amount"]' set backlog
	cp "$IDEM_TMP/$name.yaml" "$out_dir/"
	pg0=$(kv "$("$BENCH_BIN/bench_watch" pgcpu --postmaster "$PM")" pg_cpu)
	idemd_start "$name" "$IDEM_TMP/$name.yaml"
	pid=$(idemd_pid "$name")
	line=$("$BENCH_BIN/bench_watch" wait --conninfo "$IDEM_CONNINFO" --consumer payments \
		--topic payments --target "$messages" --pid "$pid" --postmaster "$PM" \
		--fair-at 0.333333333 --partitions "$P") ||
		idem_fail "idemd did not process the backlog of $P partitions"
	idemd_stop "$name"
	cp "$IDEM_TMP/idemd-$name.log" "$out_dir/"
	echo "run $r $ph: $line" >>"$results"
	rec "$r.$ph.msgs" "$messages"
	rec "$r.$ph.secs" "$(kv "$line" seconds)"
	rec "$r.$ph.rate" "$(calc "$messages / $(kv "$line" seconds)")"
	rec "$r.$ph.cpu" "$(kv "$line" cpu)"
	rec "$r.$ph.pg" "$(calc "$(kv "$line" pg_cpu) - $pg0")"
	rec "$r.$ph.rss" "$(calc "$(kv "$line" hwm_kib) / 1024")"
	rec "$r.$ph.tx" "$(kv "$line" transactions)"
	rec "$r.$ph.least" "$(kv "$line" fair_least)"
	rec "$r.$ph.most" "$(kv "$line" fair_most)"
	rec "$r.$ph.fair" "$(kv "$line" fair_ratio)"
	rec "$r.$ph.fair_total" "$(kv "$line" fair_total)"
	# Whether the most advanced partition had applied all of its messages by then.
	rec "$r.$ph.most_done" "$(awk -v p="$(kv "$line" fair_most_partition)" -v n="$(kv "$line" fair_most)" \
		'$1 == "partition=" p { print ($2 == "high=" n) ? 1 : 0 }' "$IDEM_TMP/payments-p$P.highs")"
	rec "$r.$ph.vs" "$(calc "${V[$r.$ph.rate]} / ${V[$r.PT${pparts[0]}.rate]}")"
	idem_log "run $r: exactly-once check of idemd's $ph run"
	drop_history
	pt_check "$P"
	rec "$r.$ph.exactly_once" OK
	echo "run $r $ph: exactly-once check OK (unique=${PT_UNIQUE[$P]} produced=${PT_PRODUCED[$P]})" >>"$results"
}

# pt_lat_rate RUN: the partition phases' latency rate: --partition-latency-rate, or half of the
# baseline's (the first of --partition-phases) PT rate of the same run.
pt_lat_rate() {
	if [ "$partition_latency_rate" -gt 0 ]; then
		echo "$partition_latency_rate"
	else
		awk "BEGIN { printf \"%d\", ${V[$1.PT${pparts[0]}.rate]} / 2 }"
	fi
}

# phase_pl RUN P: PL<P>, the latency run of Ls (set mode, its latency handler and settings, no
# Kafka-only floor) on topic platRUN of Kafka pP; then each partition's p50 and p99 (a message's
# partition is its claim's), the median partition's p99, the worst one's, and worst/median.
phase_pl() {
	local r=$1 P=$2 ph=PL$2 file line
	idem_with_kafka "p$P" phase_l "$r" set "$ph" - "plat$r" "$(pt_lat_rate "$r")" latency "$P" \
		"$partition_latency_seconds"
	file=$out_dir/latency-partitions-${ph,,}_$r.txt
	{
		echo "partition messages p50_ms p99_ms"
		idem_psql -F ' ' -c "SELECT m.partition, count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s.ms)::numeric, 2), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY s.ms)::numeric, 2) FROM (SELECT payment_id, extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms FROM bench_latency) s JOIN idem.claims_named m ON m.consumer = 'lat' AND m.topic = 'plat$r' AND m.business_key = s.payment_id GROUP BY 1 ORDER BY 1"
	} >"$file"
	line="partitions=$(($(wc -l <"$file") - 1)) median_p99_ms=$(awk 'NR > 1 { print $4 }' "$file" | median) $(awk 'NR > 1 && (w == "" || $4 > w) { w = $4; p = $1 } NR > 1 && (n == "" || $2 < n) { n = $2 } END { printf "worst_p99_ms=%s worst_partition=%s least_messages=%s", w, p, n }' "$file")"
	[ "$(kv "$line" partitions)" = "$P" ] ||
		idem_fail "$ph: latency messages in $(kv "$line" partitions) partitions, expected $P"
	echo "run $r $ph per partition: $line (each partition: $file)" >>"$results"
	rec "$r.$ph.med_p99" "$(kv "$line" median_p99_ms)"
	rec "$r.$ph.worst_p99" "$(kv "$line" worst_p99_ms)"
	rec "$r.$ph.worst_med" "$(calc "$(kv "$line" worst_p99_ms) / $(kv "$line" median_p99_ms)")"
}

phase_profile() {
	local line pid perf_pid
	reset_db
	idem_log "profile: idemd over the $messages messages under perf record -a"
	# The mode measured last: set if it runs, else row.
	local prof_mode=row
	[ "$run_set" = 0 ] || prof_mode="set"
	bench_config "$IDEM_TMP/prof.yaml" bench-prof payments payments "$(handler_sql "$prof_mode")" \
		'[business_key, "json:/account", "json:/amount"]' "$prof_mode" backlog
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

# main_phases RUN: the phases of one run before the partition phases.
main_phases() {
	local r=$1 i
	if [ "$run_row" = 1 ]; then
		phase_a "$r" row
	fi
	if [ "$run_set" = 1 ]; then
		phase_a "$r" set
	fi
	phase_b "$r"
	if [ "$run_row" = 1 ]; then
		phase_c "$r" row json
		rec "$r.CA" "$(calc "${V[$r.C.rate]} / ${V[$r.A.rate]}")"
		rec "$r.CB" "$(calc "${V[$r.C.rate]} / ${V[$r.B.rate]}")"
	fi
	if [ "$run_set" = 1 ]; then
		phase_p "$r"
		phase_c "$r" set json
		rec "$r.CsPs" "$(calc "${V[$r.Cs.rate]} / ${V[$r.Ps.rate]}")"
		rec "$r.CsAs" "$(calc "${V[$r.Cs.rate]} / ${V[$r.As.rate]}")"
		rec "$r.CsB" "$(calc "${V[$r.Cs.rate]} / ${V[$r.B.rate]}")"
		if [ "$avro" = 1 ]; then
			phase_c "$r" set avro
			rec "$r.VsCs" "$(calc "${V[$r.Vs.rate]} / ${V[$r.Cs.rate]}")"
		fi
		if [ "$protobuf" = 1 ]; then
			phase_c "$r" set protobuf
			rec "$r.GsCs" "$(calc "${V[$r.Gs.rate]} / ${V[$r.Cs.rate]}")"
		fi
		if [ "$jsonschema" = 1 ]; then
			phase_c "$r" set json-schema
			phase_c "$r" set json-validate
			rec "$r.JsCs" "$(calc "${V[$r.Js.rate]} / ${V[$r.Cs.rate]}")"
			rec "$r.JvJs" "$(calc "${V[$r.Jv.rate]} / ${V[$r.Js.rate]}")"
		fi
	fi
	if [ "$run_row" = 1 ] && [ "$run_set" = 1 ]; then
		rec "$r.CsC" "$(calc "${V[$r.Cs.rate]} / ${V[$r.C.rate]}")"
	fi
	if [ "$run_set" = 1 ] && [ "$history_purge" -gt 0 ]; then
		phase_c "$r" set json "$history_purge"
		rec "$r.HsCs" "$(calc "${V[$r.Hs.rate]} / ${V[$r.Cs.rate]}")"
		rec "$r.PurgeIngest" "$(calc "${V[$r.Hs.purge_rate]} / ${V[$r.Hs.rate]}")"
	fi
	if [ "$skip_latency" = 1 ]; then
		return 0
	fi
	if [ ${#rates[@]} -gt 0 ]; then
		for ((i = 0; i < ${#rates[@]}; i++)); do
			phase_l "$r" set "Ls${rates[i]}" "Ks${rates[i]}" "latr$r-$i" "${rates[i]}" rates
		done
		return 0
	fi
	if [ "$run_row" = 1 ]; then
		phase_l "$r" row L K "lat$r" "$(lat_rate "$r" C)" latency
	fi
	if [ "$run_set" = 1 ]; then
		phase_l "$r" set Ls Ks "lats$r" "$(lat_rate "$r" Cs)" latency
	fi
}

for ((r = 1; r <= runs; r++)); do
	[ "$only_partitions" = 1 ] || main_phases "$r"
	for v in "${pparts[@]}"; do
		phase_pt "$r" "$v"
		phase_pl "$r" "$v"
	done
done
if [ "$profile" = 1 ]; then
	phase_profile
fi

# ---- report --------------------------------------------------------------------------------------
per1k() { # CPU seconds per 1,000 messages
	calc "$1 * 1000 / $2"
}

# medof KEY: the median over the runs of V[RUN.KEY].
medof() {
	local r
	for ((r = 1; r <= runs; r++)); do
		[ -z "${V[$r.$1]:-}" ] || echo "${V[$r.$1]}"
	done | median
}

# phase_name PHASE: the report's name of a phase.
phase_name() {
	case $1 in
	As) echo A_set ;;
	Ps) echo P_set ;;
	Cs) echo C_set ;;
	Vs) echo V_set ;;
	Gs) echo PB_set ;;
	Js) echo JS_set ;;
	Jv) echo JV_set ;;
	Hs) echo H_set ;;
	*) echo "$1" ;;
	esac
}

# walk_rec RUN PHASE, walk_fpi RUN PHASE: WAL records and full-page images per message.
walk_rec() {
	calc "${V[$1.$2.walrec]} / ${V[$1.$2.msgs]}"
}
walk_fpi() {
	calc "${V[$1.$2.fpi]} / ${V[$1.$2.msgs]}"
}

# per_run EXPR_FN PHASE: EXPR_FN RUN PHASE for each run, one per line (for median).
per_run() {
	local r
	for ((r = 1; r <= runs; r++)); do
		"$1" "$r" "$2"
		echo
	done
}
cpu1k() { per1k "${V[$1.$2.cpu]}" "${V[$1.$2.msgs]}"; }
pg1k() { per1k "${V[$1.$2.pg]}" "${V[$1.$2.msgs]}"; }
per_tx() { calc "${V[$1.$2.msgs]} / ${V[$1.$2.tx]}"; }
wal_pm() { if [ -n "${V[$1.$2.wal]:-}" ]; then calc "${V[$1.$2.wal]} / ${V[$1.$2.msgs]}"; fi; }
lat_msgs() { echo $((${V[$1.$2.rate]} * latency_seconds)); }
# p99 minus the Kafka-alone p99 of latency phase L... (its floor K...).
over_kafka() { calc "${V[$1.$2.p99]} - ${V[$1.K${2#L}.p99]}"; }
# over_beside RUN PHASE: idemd's p99 minus that of the Kafka reader beside it (--latency-beside).
over_beside() { calc "${V[$1.$2.p99]} - ${V[$1.B$2.p99]}"; }
# fmt FORMAT VALUE: VALUE printed with FORMAT, or '-' when there is none.
# shellcheck disable=SC2059 # the format is the caller's
fmt() {
	if [ -z "$2" ] || [ "$2" = - ]; then echo -; else printf "$1" "$2"; fi
}

report() {
	local r ph st what='' over k rate phases=() lphases=()
	[ "$run_row" = 0 ] || phases+=(A)
	[ "$run_set" = 0 ] || phases+=(As)
	phases+=(B)
	[ "$run_row" = 0 ] || phases+=(C)
	[ "$run_set" = 0 ] || phases+=(Ps Cs)
	[ "$run_set" = 0 ] || [ "$avro" = 0 ] || phases+=(Vs)
	[ "$run_set" = 0 ] || [ "$protobuf" = 0 ] || phases+=(Gs)
	[ "$run_set" = 0 ] || [ "$jsonschema" = 0 ] || phases+=(Js Jv)
	[ "$run_set" = 0 ] || [ "$history_purge" = 0 ] || phases+=(Hs)
	if [ ${#rates[@]} -gt 0 ]; then
		for rate in "${rates[@]}"; do
			lphases+=("Ls$rate")
		done
	else
		[ "$run_row" = 0 ] || lphases+=(L)
		[ "$run_set" = 0 ] || lphases+=(Ls)
	fi
	echo
	echo "idemd benchmark: $messages messages ($IDEM_UNIQUE unique) over $partitions partitions," \
		"dup-ratio $dup_ratio, $runs run(s); Postgres $("$IDEM_PG_BINDIR/postgres" --version | awk '{ print $3 }')" \
		"fsync=on synchronous_commit=on; database collation ${db_locale:-C}; $(nproc) CPUs;" \
		"claims history $history"
	echo "idemd in C and C_set: $(settings_text backlog)."
	echo "A = raw Postgres (idemd's batch SQL via libpq, no Kafka; $((2 * batch)) messages per transaction, $workers"
	echo "connection(s)), row handler; A_set = the same with the set handler once per transaction; B = naive consumer"
	echo "(1 tx + 1 sync offset commit per message; timed on the first $naive_max messages or ${naive_seconds}s); C = idemd,"
	echo "handler.mode row; P_set = the hand-written peer (bench_peer: claim + set handler + COMMIT, then the"
	echo "offsets; up to $peer_batch messages per transaction, $peer_connections connection(s)${peer_args[*]:+, ${peer_args[*]}}); C_set = idemd, handler.mode"
	echo "set. C, P_set and C_set consume a backlog of all $messages from Kafka."
	if [ "$avro" = 1 ]; then
		echo "V_set = C_set over topic payments_avro: the same payments as Confluent-framed Avro, idemd reading"
		echo "avro:/payment_id, avro:/account and avro:/amount with the schema from the registry (registry.py)."
	fi
	if [ "$protobuf" = 1 ]; then
		echo "PB_set = C_set over topic payments_protobuf: the same payments as Confluent-framed Protobuf (written by"
		echo "python3-protobuf), idemd reading protobuf:/payment_id, /account and /amount with the schema from the registry."
	fi
	if [ "$jsonschema" = 1 ]; then
		echo "JS_set, JV_set = C_set over topic payments_json: the same JSON text behind the Confluent header, value_format"
		echo "json-schema, validate false (JS_set) and true (JV_set: each document checked against json_frame.py payments-schema)."
	fi
	echo "cpu/1k = CPU seconds per 1,000 messages: 'consumer' = the consuming process, 'postgres' = whole cluster."
	echo
	printf '%-7s %-6s %9s %8s %10s %13s %13s %9s %10s %10s\n' run phase messages seconds msg/s \
		cpu/1k_cons cpu/1k_pg msgs/tx wal_B/msg rss_MiB
	for ((r = 1; r <= runs; r++)); do
		for ph in "${phases[@]}"; do
			printf '%-7s %-6s %9s %8s %10.0f %13.4f %13.4f %9.1f %10s %10s\n' "$r" "$(phase_name "$ph")" \
				"${V[$r.$ph.msgs]}" "${V[$r.$ph.secs]}" "${V[$r.$ph.rate]}" \
				"$(cpu1k "$r" "$ph")" "$(pg1k "$r" "$ph")" "$(per_tx "$r" "$ph")" \
				"$(fmt %.0f "$(wal_pm "$r" "$ph")")" "$(fmt %.0f "${V[$r.$ph.rss]:-}")"
		done
	done
	for ph in "${phases[@]}"; do
		printf '%-7s %-6s %9s %8s %10.0f %13.4f %13.4f %9.1f %10s %10s\n' median "$(phase_name "$ph")" - - \
			"$(medof "$ph.rate")" "$(per_run cpu1k "$ph" | median)" \
			"$(per_run pg1k "$ph" | median)" "$(per_run per_tx "$ph" | median)" \
			"$(if [ -n "${V[1.$ph.wal]:-}" ]; then fmt %.0f "$(per_run wal_pm "$ph" | median)"; else echo -; fi)" \
			"$(if [ -n "${V[1.$ph.rss]:-}" ]; then fmt %.0f "$(medof "$ph.rss")"; else echo -; fi)"
	done
	echo
	echo "(msgs/tx: messages per transaction; for C and C_set, transactions are counted as distinct xmin of the"
	echo " claims. wal_B/msg: WAL the whole cluster wrote during the phase (pg_current_wal_lsn() before and"
	echo " after), per message. rss: peak RSS (VmHWM) of idemd or of bench_peer.)"
	if [ "$statements" = 1 ]; then
		for k in "peer_$runs" "cs$runs"; do
			[ ! -f "$out_dir/statements-$k.txt" ] || { echo && cat "$out_dir/statements-$k.txt"; }
		done
	fi
	echo
	printf '%-7s %12s %12s %8s %8s %8s %8s\n' run C_set/P_set C_set/A_set C/A C_set/C C/B C_set/B
	for ((r = 1; r <= runs; r++)); do
		printf '%-7s %12s %12s %8s %8s %8s %8s\n' "$r" "$(fmt %.3f "${V[$r.CsPs]:-}")" \
			"$(fmt %.3f "${V[$r.CsAs]:-}")" "$(fmt %.3f "${V[$r.CA]:-}")" \
			"$(fmt %.3f "${V[$r.CsC]:-}")" "$(fmt %.1f "${V[$r.CB]:-}")" "$(fmt %.1f "${V[$r.CsB]:-}")"
	done
	printf '%-7s %12s %12s %8s %8s %8s %8s\n' median "$(fmt %.3f "$(medof CsPs)")" \
		"$(fmt %.3f "$(medof CsAs)")" "$(fmt %.3f "$(medof CA)")" "$(fmt %.3f "$(medof CsC)")" \
		"$(fmt %.1f "$(medof CB)")" "$(fmt %.1f "$(medof CsB)")"
	if [ "$run_set" = 1 ]; then
		echo "headline: C_set/P_set = $(fmt %.3f "$(medof CsPs)") (median of $runs run(s)): idemd in set mode, $(settings_text backlog),"
		echo "against the hand-written peer on the same backlog."
	fi
	if [ "$run_set" = 1 ] && [ "$avro" = 1 ]; then
		echo "V_set/C_set (Avro against JSON, target >= 0.9): $(fmt %.3f "$(medof VsCs)") ($(for ((r = 1; r <= runs; r++)); do fmt %.3f "${V[$r.VsCs]}" && echo; done | paste -sd ' ' | sed 's/ /, /g'))"
		echo "idemd CPU per 1,000 messages: V_set $(fmt %.4f "$(per_run cpu1k Vs | median)") s, C_set $(fmt %.4f "$(per_run cpu1k Cs | median)") s" \
			"(Postgres: $(fmt %.4f "$(per_run pg1k Vs | median)") s, $(fmt %.4f "$(per_run pg1k Cs | median)") s; medians)"
	fi
	if [ "$run_set" = 1 ] && [ "$protobuf" = 1 ]; then
		echo "PB_set/C_set (Protobuf against JSON, target >= 0.9): $(fmt %.3f "$(medof GsCs)") ($(for ((r = 1; r <= runs; r++)); do fmt %.3f "${V[$r.GsCs]}" && echo; done | paste -sd ' ' | sed 's/ /, /g'))"
		echo "idemd CPU per 1,000 messages: PB_set $(fmt %.4f "$(per_run cpu1k Gs | median)") s, C_set $(fmt %.4f "$(per_run cpu1k Cs | median)") s" \
			"(Postgres: $(fmt %.4f "$(per_run pg1k Gs | median)") s, $(fmt %.4f "$(per_run pg1k Cs | median)") s; medians)"
	fi
	if [ "$run_set" = 1 ] && [ "$jsonschema" = 1 ]; then
		echo "JS_set/C_set (the Confluent header and the schema id's lookup): $(fmt %.3f "$(medof JsCs)") ($(for ((r = 1; r <= runs; r++)); do fmt %.3f "${V[$r.JsCs]}" && echo; done | paste -sd ' ' | sed 's/ /, /g'))"
		echo "JV_set/JS_set (what validate: true costs): $(fmt %.3f "$(medof JvJs)") ($(for ((r = 1; r <= runs; r++)); do fmt %.3f "${V[$r.JvJs]}" && echo; done | paste -sd ' ' | sed 's/ /, /g'))"
		echo "idemd CPU per 1,000 messages: JV_set $(fmt %.4f "$(per_run cpu1k Jv | median)") s, JS_set $(fmt %.4f "$(per_run cpu1k Js | median)") s, C_set $(fmt %.4f "$(per_run cpu1k Cs | median)") s (medians)"
	fi
	echo "(targets: C/A >= 0.85, C/B >= 15, C_set/A_set >= 0.9, C_set/C >= 3)"
	echo
	for ph in C Cs Vs Gs Js Jv; do
		[ -n "${V[1.$ph.rss]:-}" ] || continue
		echo "idemd peak RSS (VmHWM) in $(phase_name "$ph") with a backlog of $messages messages: median $(fmt %.0f "$(medof "$ph.rss")") MiB (the prefetch holds up to 160,000 messages: idemd.yaml(5), MEMORY)"
	done
	for ph in C Cs Vs Gs; do
		[ -n "${V[1.$ph.bpc]:-}" ] || continue
		echo "bytes per claim after $(phase_name "$ph") (idem.processed_messages with its indexes over its rows, vacuumed): median $(medof "$ph.bpc")"
	done
	[ -z "${V[1.Ps.bpc]:-}" ] ||
		echo "bytes per claim of the peer (peer_claims: consumer, business_key, processed_at, with its two indexes, vacuumed): median $(medof Ps.bpc)"
	for ph in Ps C Cs Vs Gs Js Jv; do
		[ -n "${V[1.$ph.fpi]:-}" ] || continue
		echo "WAL of $(phase_name "$ph") per message (pg_stat_wal, medians): $(fmt %.2f "$(per_run walk_rec "$ph" | median)") records, $(fmt %.4f "$(per_run walk_fpi "$ph" | median)") full-page images"
	done
	if [ "$history_purge" -gt 0 ] && [ -n "${V[1.Hs.rate]:-}" ]; then
		echo
		echo "Claims history with retention purging: H_set = C_set over a claims table holding $history_purge claims older"
		echo "than retention.keep, purged by idemd's retention (retention.batch rows per transaction) while it applies."
		printf '%-7s %10s %10s %10s %12s %12s %14s
' run H_set C_set H_set/C_set purged purge/s purge/ingest
		for ((r = 1; r <= runs; r++)); do
			printf '%-7s %10.0f %10.0f %10s %12s %12.0f %14s
' "$r" "${V[$r.Hs.rate]}" "${V[$r.Cs.rate]}" \
				"$(fmt %.3f "${V[$r.HsCs]}")" "${V[$r.Hs.purged]}" "${V[$r.Hs.purge_rate]}" \
				"$(fmt %.2f "${V[$r.PurgeIngest]}")"
		done
		printf '%-7s %10.0f %10.0f %10s %12s %12.0f %14s
' median "$(medof Hs.rate)" "$(medof Cs.rate)" \
			"$(fmt %.3f "$(medof HsCs)")" "$(medof Hs.purged)" "$(medof Hs.purge_rate)" \
			"$(fmt %.2f "$(medof PurgeIngest)")"
		echo "(targets: H_set/C_set >= 0.8 with >= 5,000,000 older claims, purge/ingest >= 1)"
	fi
	if [ "$skip_latency" = 0 ] && [ ${#rates[@]} -gt 0 ]; then
		echo
		echo "End-to-end latency at fixed rates, set mode (producer timestamp -> commit of the applying transaction),"
		echo "${latency_seconds}s each; idemd: $(settings_text rates). Kafka alone: bench_klat, configured as idemd."
		printf '%-7s %7s %8s %8s %8s %8s %9s %9s %9s %13s %9s %11s %10s %8s\n' run msg/s achieved \
			p50_ms p99_ms max_ms kafka_p50 kafka_p99 kafka_max p99-kafka_p99 claims/tx \
			cpu/1k_cons cpu/1k_pg rss_MiB
		for ((r = 1; r <= runs; r++)); do
			for ph in "${lphases[@]}"; do
				k=K${ph#L}
				printf '%-7s %7s %8.0f %8s %8s %8s %9s %9s %9s %13.2f %9.1f %11.4f %10.4f %8s\n' "$r" \
					"${V[$r.$ph.rate]}" "${V[$r.$ph.achieved]}" "${V[$r.$ph.p50]}" \
					"${V[$r.$ph.p99]}" "${V[$r.$ph.max]}" "${V[$r.$k.p50]}" "${V[$r.$k.p99]}" \
					"${V[$r.$k.max]}" "$(over_kafka "$r" "$ph")" \
					"$(calc "${V[$r.$ph.claims]} / ${V[$r.$ph.tx]}")" \
					"$(per1k "${V[$r.$ph.cpu]}" "$(lat_msgs "$r" "$ph")")" \
					"$(per1k "${V[$r.$ph.pg]}" "$(lat_msgs "$r" "$ph")")" "$(fmt %.0f "${V[$r.$ph.rss]}")"
			done
		done
		for ph in "${lphases[@]}"; do
			k=K${ph#L}
			printf '%-7s %7s %8s %8.2f %8.2f %8.2f %9.2f %9.2f %9.2f %13.2f\n' median "${ph#Ls}" - \
				"$(medof "$ph.p50")" "$(medof "$ph.p99")" "$(medof "$ph.max")" \
				"$(medof "$k.p50")" "$(medof "$k.p99")" "$(medof "$k.max")" \
				"$(per_run over_kafka "$ph" | median)"
		done
		if [ -n "${V[1.Ls5000.p99]:-}" ]; then
			over=$(per_run over_kafka Ls5000 | median)
			echo "target: at 5,000 msg/s in set mode, p99 - Kafka-alone p99 <= 25 ms: median $(fmt %.2f "$over") ms," \
				"$(awk "BEGIN { print ($over <= 25) ? \"met\" : \"missed\" }")"
		else
			echo "(target: at 5,000 msg/s in set mode, p99 - Kafka-alone p99 <= 25 ms; 5000 is not among --latency-rates)"
		fi
		if [ "$beside" = 1 ]; then
			echo
			echo "Beside idemd (--latency-beside): bench_klat reading the same production in its own group while"
			echo "idemd applies it, on the same CPUs: Kafka's share under the same load. p99-beside_p99 is what idemd adds."
			printf '%-7s %7s %8s %8s %10s %10s %10s %15s
' run msg/s p50_ms p99_ms beside_p50 beside_p99 \
				beside_max p99-beside_p99
			for ((r = 1; r <= runs; r++)); do
				for ph in "${lphases[@]}"; do
					printf '%-7s %7s %8s %8s %10s %10s %10s %15.2f\n' "$r" "${V[$r.$ph.rate]}" \
						"${V[$r.$ph.p50]}" "${V[$r.$ph.p99]}" "${V[$r.B$ph.p50]}" "${V[$r.B$ph.p99]}" \
						"${V[$r.B$ph.max]}" "$(over_beside "$r" "$ph")"
				done
			done
			for ph in "${lphases[@]}"; do
				printf '%-7s %7s %8.2f %8.2f %10.2f %10.2f %10.2f %15.2f\n' median "${ph#Ls}" \
					"$(medof "$ph.p50")" "$(medof "$ph.p99")" "$(medof "B$ph.p50")" \
					"$(medof "B$ph.p99")" "$(medof "B$ph.max")" "$(per_run over_beside "$ph" | median)"
			done
		fi
	elif [ "$skip_latency" = 0 ]; then
		echo
		echo "End-to-end latency (producer timestamp -> commit of the applying transaction), idemd at $(if [ "$latency_rate" -gt 0 ]; then echo "$latency_rate msg/s (--latency-rate)"; else echo "half of its own mode's backlog rate (L: C's, Ls: C_set's)"; fi), ${latency_seconds}s each:"
		echo "idemd: $(settings_text latency)."
		printf '%-7s %-5s %7s %8s %8s %8s %8s %8s %8s %9s %10s %10s %8s\n' run phase msg/s achieved \
			p50_ms p99_ms max_ms kafka_p50 kafka_p99 claims/tx cpu/1k_cons cpu/1k_pg rss_MiB
		for ((r = 1; r <= runs; r++)); do
			for ph in "${lphases[@]}"; do
				k=K${ph#L}
				printf '%-7s %-5s %7s %8.0f %8s %8s %8s %8s %8s %9.1f %10.4f %10.4f %8s\n' "$r" "$ph" \
					"${V[$r.$ph.rate]}" "${V[$r.$ph.achieved]}" "${V[$r.$ph.p50]}" "${V[$r.$ph.p99]}" \
					"${V[$r.$ph.max]}" "${V[$r.$k.p50]}" "${V[$r.$k.p99]}" \
					"$(calc "${V[$r.$ph.claims]} / ${V[$r.$ph.tx]}")" \
					"$(per1k "${V[$r.$ph.cpu]}" "$(lat_msgs "$r" "$ph")")" \
					"$(per1k "${V[$r.$ph.pg]}" "$(lat_msgs "$r" "$ph")")" "$(fmt %.0f "${V[$r.$ph.rss]}")"
			done
		done
		for ph in "${lphases[@]}"; do
			k=K${ph#L}
			printf '%-7s %-5s %7s %8s %8s %8s %8s %8s %8s   (target: p99 <= 25 ms)\n' median "$ph" - - \
				"$(medof "$ph.p50")" "$(medof "$ph.p99")" "$(medof "$ph.max")" \
				"$(medof "$k.p50")" "$(medof "$k.p99")"
		done
	fi
	if [ "$skip_latency" = 0 ]; then
		echo
		echo "Where the time goes (idemd_stage_seconds, each committed batch's first message): mean ms / bucket bound under which 99% fell (ms)"
		printf '%-7s %-7s %14s %14s %14s %14s\n' run phase fetch batch queue commit
		for ((r = 1; r <= runs; r++)); do
			for ph in "${lphases[@]}"; do
				printf '%-7s %-7s' "$r" "$ph"
				for st in fetch batch queue commit; do
					printf ' %14s' "${V[$r.$ph.$st.mean]} / ${V[$r.$ph.$st.p99]}"
				done
				echo
			done
		done
		echo "(fetch: producer timestamp to idemd's poll; batch: poll to hand-over to the workers; queue: to a"
		echo " worker's BEGIN; commit: BEGIN to COMMIT.)"
		if [ "$statements" = 1 ]; then
			for ph in "${lphases[@]}"; do
				echo
				cat "$out_dir/statements-${ph,,}_$runs.txt"
			done
		fi
		echo "(kafka_*: the same production consumed by bench_klat, which only reads, with idemd's Kafka"
		echo " properties: the share of Kafka itself, producer linger.ms=5 and the embedded Kafka's fetch wait"
		echo " (fetch.wait.max.ms: it holds an empty fetch for all of it) included. The per-second p99 of each"
		echo " run is in the raw lines: a steady rise means idemd fell behind the rate.)"
	fi
	echo
	for ((r = 1; r <= runs; r++)); do
		for ph in C Cs Vs Gs Js Jv; do
			[ -z "${V[$r.$ph.exactly_once]:-}" ] ||
				what="${what:-}${what:+, }run $r $(phase_name "$ph") ${V[$r.$ph.exactly_once]}"
		done
		[ -z "${V[$r.Ps.msgs]:-}" ] || what="${what:-}${what:+, }run $r P_set OK (ledger, balances, claims)"
	done
	echo "exactly-once check of idemd's runs (idem_check_exactly_once) and the peer's: $what"
}

# report_partitions: the partition phases' table.
report_partitions() {
	local r v b=${pparts[0]} what=''
	echo
	echo "Partition phases: the same $messages payments (dup-ratio $dup_ratio, keyed by account over $IDEM_ACCOUNTS accounts) over"
	echo "P partitions, each P in an embedded Kafka of its own; $runs run(s), $(nproc) CPUs. Depth per partition (min/mean/max):"
	echo "  $(for v in "${pparts[@]}"; do printf 'P=%s %s/%s/%s; ' "$v" "${V[p$v.depth_min]}" "${V[p$v.depth_mean]}" "${V[p$v.depth_max]}"; done | sed 's/; $//')"
	echo "PT: idemd in set mode over the backlog, $(settings_text backlog) (as C_set); vs_$b = msg/s over"
	echo "P=$b's of the same run; least/most = offsets applied by the least and the most advanced partition when a third"
	echo "of the backlog was applied (partition_progress.next_offset, polled every 50 ms)."
	echo "PL: idemd as in L_set ($(settings_text latency)), fed at $(if [ "$partition_latency_rate" -gt 0 ]; then echo "$partition_latency_rate msg/s"; else echo "half of P=$b's PT rate of the same run"; fi) for ${partition_latency_seconds}s;"
	echo "latency = commit of the applying transaction - producer timestamp; p99 per partition, the median partition's"
	echo "and the worst partition's; worst/med = their ratio (1 = every partition alike)."
	echo
	printf '%-7s %5s %9s %7s %9s %9s %10s %9s %9s %11s %11s %9s\n' run P msg/s "vs_$b" least@1/3 most@1/3 \
		least/most lat_msg/s p99_ms med_part_p99 worst_p99 worst/med
	for ((r = 1; r <= runs; r++)); do
		for v in "${pparts[@]}"; do
			printf '%-7s %5s %9.0f %7.3f %9s %9s %10.3f %9s %9.2f %11.2f %11.2f %9.2f\n' "$r" "$v" \
				"${V[$r.PT$v.rate]}" "${V[$r.PT$v.vs]}" "${V[$r.PT$v.least]}" \
				"${V[$r.PT$v.most]}$([ "${V[$r.PT$v.most_done]}" = 0 ] || echo '*')" \
				"${V[$r.PT$v.fair]}" "${V[$r.PL$v.rate]}" "${V[$r.PL$v.p99]}" \
				"${V[$r.PL$v.med_p99]}" "${V[$r.PL$v.worst_p99]}" "${V[$r.PL$v.worst_med]}"
		done
	done
	for v in "${pparts[@]}"; do
		printf '%-7s %5s %9.0f %7.3f %9s %9s %10.3f %9s %9.2f %11.2f %11.2f %9.2f\n' median "$v" \
			"$(medof "PT$v.rate")" "$(medof "PT$v.vs")" "$(medof "PT$v.least")" \
			"$(medof "PT$v.most")" "$(medof "PT$v.fair")" "$(medof "PL$v.rate")" \
			"$(medof "PL$v.p99")" "$(medof "PL$v.med_p99")" "$(medof "PL$v.worst_p99")" \
			"$(medof "PL$v.worst_med")"
	done
	echo "(*: the most advanced partition had applied all its messages. Each partition's p50 and p99:"
	echo " latency-partitions-pl<P>_<run>.txt in $out_dir)"
	for ((r = 1; r <= runs; r++)); do
		for v in "${pparts[@]}"; do
			what="${what:-}${what:+, }run $r P=$v ${V[$r.PT$v.exactly_once]}"
		done
	done
	echo "exactly-once check of the partition phases' backlog runs (idem_check_exactly_once): $what"
}

{
	[ "$only_partitions" = 1 ] || report
	[ ${#pparts[@]} = 0 ] || report_partitions
} | tee "$out_dir/report.txt"
if [ "$profile" = 1 ]; then
	echo
	cat "$out_dir/profile.txt"
fi
echo
echo "raw lines: $results; report: $out_dir/report.txt"
