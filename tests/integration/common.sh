# common.sh - idemd-specific helpers for the integration tests, on top of lib.sh (the generic
# fixture): the one config writer (idem_write_config), the payments workload and its checks.
# Sourced after lib.sh; the helpers assume idem_tmp_init, idem_pg_start and idem_kafka_start
# have run, which is what idem_fixture, a test's usual opening, does:
#
#   idem_fixture --topics payments:8 --config idemd.yaml g-once payments --max 100

# The payments handlers, from their one copy in sql/examples/ (see payments.sql there): row mode
# (once per payment, returns the balance, stored as the claim's result) and set mode (once per
# transaction over text[] parameters, returns nothing).
IDEM_PAYMENTS_SQL=$(<"$IDEM_SRC/sql/examples/payments_row.sql")
IDEM_PAYMENTS_SET_SQL=$(<"$IDEM_SRC/sql/examples/payments_set.sql")

# IDEM_HANDLER_MODE (row or set, default row) is the mode the payments handler runs in: CTest
# runs the payments tests once in each (their .set variants). A test that gives its own --sql
# runs it in row mode unless it says --mode.
: "${IDEM_HANDLER_MODE:=row}"
case $IDEM_HANDLER_MODE in
row | set) ;;
*) idem_fail "IDEM_HANDLER_MODE must be row or set, not '$IDEM_HANDLER_MODE'" ;;
esac
export IDEM_HANDLER_MODE

# IDEM_PAYLOAD (json, avro, protobuf or json-schema, default json) is how the payments are
# written: with avro (protobuf), idem_fixture starts a schema registry (tests/tools/registry.py)
# and registers the payments schema, idem_write_config reads avro: (protobuf:) fields through it,
# and idem_produce writes the same payments Confluent-framed, encoded by python3-avro
# (python3-protobuf); with json-schema, the same JSON text behind the Confluent header
# (json_frame.py), read by a route with value_format: json-schema and validate: true against
# json_frame.py's payments schema. CTest runs t_kill9 once more each way.
: "${IDEM_PAYLOAD:=json}"
case $IDEM_PAYLOAD in
json | avro | protobuf | json-schema) ;;
*) idem_fail "IDEM_PAYLOAD must be json, avro, protobuf or json-schema, not '$IDEM_PAYLOAD'" ;;
esac
export IDEM_PAYLOAD IDEM_BIN IDEM_SRC

# idem__kv_set MAP ORDER NAME=VALUE: MAP[NAME]=VALUE; ORDER lists the names in first-set order.
idem__kv_set() {
	local -n map=$1 order=$2
	[ -n "${map[${3%%=*}]+x}" ] || order+=("${3%%=*}")
	map[${3%%=*}]=${3#*=}
}

# idem_write_config FILE GROUP CONSUMER [OPTION...]: the one configuration writer of the tests:
# one route from topic payments, the payments handler in $IDEM_HANDLER_MODE, consumer group
# GROUP, claims namespace CONSUMER. Options (defaults in brackets):
#   --topic T [payments]        --route-name N [payments]
#   --key TEMPLATE [${json:/payment_id}]
#   --sql SQL [the payments handler of $IDEM_HANDLER_MODE]  --mode row|set [see IDEM_HANDLER_MODE]
#   --params YAML_LIST [[business_key, "json:/account", "json:/amount"]]
#   --max N [500] (batch.max_messages)      --wait MS [20] (batch.max_wait_ms)
#   --workers N (batch.workers; idemd's default unless given)
#   --batch NAME=VALUE       another batch key (e.g. max_bytes=1048576)
#   --log-level L [$IDEM_LOG_LEVEL or info]
#   --kafka-prop NAME=VALUE  a librdkafka property; replaces a default of the same name
#                            [session.timeout.ms=6000 heartbeat.interval.ms=500
#                            fetch.wait.max.ms=50 queued.min.messages=1000000]
#   --kafka-defaults         leave out the defaults fetch.wait.max.ms and queued.min.messages
#                            (idemd's and librdkafka's own apply; session.timeout.ms and
#                            heartbeat.interval.ms stay: they only make the group form faster);
#                            a --kafka-prop of the same name is still written
#   --batch-defaults         write max_messages and max_wait_ms only if --max / --wait give them
#                            (workers only if --workers does, as always): idemd's own defaults
#   --retry NAME=VALUE       a retry key; replaces a default of the same name
#                            [initial_ms=50 max_ms=2000]
#   --no-retry               no retry section at all: idemd's own defaults
#   --route NAME=VALUE       another key of the route (e.g. on_poison=halt)
#   --postgres NAME=VALUE    another postgres key (e.g. lock_timeout_ms=300)
#   --limits NAME=VALUE      a limits key (the section is written only if one is given)
#   --outbox NAME=VALUE      an outbox key (the section is written only if one is given)
#   --retention NAME=VALUE   a retention key (the section is written only if one is given)
#   --metrics ADDR           metrics.listen: serve /metrics on ADDR (host:port; none if not given)
#   --registry NAME=VALUE    a schema_registry key (e.g. url=http://127.0.0.1:8081; the section
#                            is written only if one is given)
# Every option taking a value may be repeated where that makes sense (the last --max wins).
idem_write_config() {
	local file=$1 group=$2 consumer=$3
	shift 3
	local topic=payments route_name=payments key='${json:/payment_id}' sql= mode=
	local params='[business_key, "json:/account", "json:/amount"]' max=500 wait=20 workers=
	local level=${IDEM_LOG_LEVEL:-info} with_retry=1 q="'" name
	local kafka_defaults=0 batch_defaults=0 max_given=0 wait_given=0
	local -A kafka=() retry=() kafka_given=()
	local kafka_order=() retry_order=() route=() pg=() limits=() outbox=() batch=() retention=()
	local metrics= registry=()
	if [ "$IDEM_PAYLOAD" = json-schema ]; then
		route=(value_format=json-schema validate=true)
		registry=("url=\"$IDEM_REGISTRY_URL\"")
	elif [ "$IDEM_PAYLOAD" != json ]; then
		key="\${$IDEM_PAYLOAD:/payment_id}"
		params="[business_key, \"$IDEM_PAYLOAD:/account\", \"$IDEM_PAYLOAD:/amount\"]"
		registry=("url=\"$IDEM_REGISTRY_URL\"")
	fi
	for name in session.timeout.ms=6000 heartbeat.interval.ms=500 fetch.wait.max.ms=50 \
		queued.min.messages=1000000; do
		idem__kv_set kafka kafka_order "$name"
	done
	idem__kv_set retry retry_order initial_ms=50
	idem__kv_set retry retry_order max_ms=2000
	while [ $# -gt 0 ]; do
		case $1 in
		--no-retry) with_retry=0; shift; continue ;;
		--kafka-defaults) kafka_defaults=1; shift; continue ;;
		--batch-defaults) batch_defaults=1; shift; continue ;;
		--topic | --route-name | --key | --sql | --mode | --params | --max | --wait | --workers | \
			--log-level | --kafka-prop | --retry | --route | --postgres | --limits | --outbox | --batch | \
			--retention | --metrics | --registry)
			[ $# -ge 2 ] || idem_fail "idem_write_config: $1 needs a value" ;;
		*) idem_fail "idem_write_config: unknown option '$1'" ;;
		esac
		case $1 in
		--topic) topic=$2 ;;
		--route-name) route_name=$2 ;;
		--key) key=$2 ;;
		--sql) sql=$2 ;;
		--mode) mode=$2 ;;
		--params) params=$2 ;;
		--max) max=$2 max_given=1 ;;
		--wait) wait=$2 wait_given=1 ;;
		--workers) workers=$2 ;;
		--log-level) level=$2 ;;
		--kafka-prop) idem__kv_set kafka kafka_order "$2" && kafka_given[${2%%=*}]=1 ;;
		--retry) idem__kv_set retry retry_order "$2" ;;
		--route) route+=("$2") ;;
		--postgres) pg+=("$2") ;;
		--limits) limits+=("$2") ;;
		--outbox) outbox+=("$2") ;;
		--batch) batch+=("$2") ;;
		--retention) retention+=("$2") ;;
		--metrics) metrics=$2 ;;
		--registry) registry+=("$2") ;;
		esac
		shift 2
	done
	if [ -z "$sql" ]; then
		: "${mode:=$IDEM_HANDLER_MODE}"
		if [ "$mode" = set ]; then sql=$IDEM_PAYMENTS_SET_SQL; else sql=$IDEM_PAYMENTS_SQL; fi
	fi
	: "${mode:=row}"
	if [ "$kafka_defaults" = 1 ]; then
		for name in fetch.wait.max.ms queued.min.messages; do
			[ -n "${kafka_given[$name]:-}" ] || unset "kafka[$name]"
		done
	fi
	if [ "$batch_defaults" = 1 ]; then
		[ "$max_given" = 1 ] || max=
		[ "$wait_given" = 1 ] || wait=
	fi
	{
		printf 'kafka:\n  brokers: "%s"\n  group_id: "%s"\n  properties:\n' "$IDEM_BROKERS" "$group"
		for name in "${kafka_order[@]}"; do
			[ -z "${kafka[$name]+x}" ] || printf '    %s: "%s"\n' "$name" "${kafka[$name]}"
		done
		printf 'postgres:\n  conninfo: "%s"\n' "$IDEM_CONNINFO"
		for name in "${pg[@]}"; do
			printf '  %s: %s\n' "${name%%=*}" "${name#*=}"
		done
		printf 'routes:\n  - name: %s\n    topics: [%s]\n    consumer: "%s"\n' \
			"$route_name" "$topic" "$consumer"
		printf "    business_key: '%s'\n" "${key//$q/$q$q}"
		printf "    handler:\n      sql: '%s'\n      params: %s\n      mode: %s\n" \
			"${sql//$q/$q$q}" "$params" "$mode"
		for name in "${route[@]}"; do
			printf '    %s: %s\n' "${name%%=*}" "${name#*=}"
		done
		if [ -n "$max$wait$workers" ] || [ ${#batch[@]} -gt 0 ]; then
			echo "batch:"
			[ -z "$max" ] || printf '  max_messages: %s\n' "$max"
			[ -z "$wait" ] || printf '  max_wait_ms: %s\n' "$wait"
			[ -z "$workers" ] || printf '  workers: %s\n' "$workers"
			for name in "${batch[@]}"; do
				printf '  %s: %s\n' "${name%%=*}" "${name#*=}"
			done
		fi
		if [ "$with_retry" = 1 ]; then
			echo "retry:"
			for name in "${retry_order[@]}"; do
				printf '  %s: %s\n' "$name" "${retry[$name]}"
			done
		fi
		if [ ${#limits[@]} -gt 0 ]; then
			echo "limits:"
			for name in "${limits[@]}"; do
				printf '  %s: %s\n' "${name%%=*}" "${name#*=}"
			done
		fi
		if [ ${#outbox[@]} -gt 0 ]; then
			echo "outbox:"
			for name in "${outbox[@]}"; do
				printf '  %s: %s\n' "${name%%=*}" "${name#*=}"
			done
		fi
		if [ ${#retention[@]} -gt 0 ]; then
			echo "retention:"
			for name in "${retention[@]}"; do
				printf '  %s: %s\n' "${name%%=*}" "${name#*=}"
			done
		fi
		if [ ${#registry[@]} -gt 0 ]; then
			echo "schema_registry:"
			for name in "${registry[@]}"; do
				printf '  %s: %s\n' "${name%%=*}" "${name#*=}"
			done
		fi
		[ -z "$metrics" ] || printf 'metrics:\n  listen: "%s"\n' "$metrics"
		printf 'log:\n  level: %s\n' "$level"
	} >"$file"
}

# idem_setup_db CONFIG: migrate the idem schema and create the example tables.
idem_setup_db() {
	"$IDEM_BIN/idemctl" -c "$1" migrate >/dev/null
	idem_psql -f "$IDEM_SRC/sql/examples/payments.sql" >/dev/null
}

# idem_fixture [--durable-commits] [--brokers N] --topics "TOPIC:PARTITIONS..."
#              [--config NAME GROUP CONSUMER [OPTION...]]
# The opening most tests share: idem_tmp_init, idem_pg_start and idem_kafka_start.
#   --durable-commits   idem_pg_durable_commits once Postgres runs (tests that crash it)
#   --brokers N         the embedded Kafka's brokers [3]
#   --topics LIST       the topics, space-separated in one word ("payments:4 payment-applied:4");
#                       may be repeated
#   --config NAME GROUP CONSUMER [OPTION...]
#                       then idem_write_config "$IDEM_TMP/NAME" GROUP CONSUMER OPTION... and
#                       idem_setup_db on that file; exports IDEM_CFG ($IDEM_TMP/NAME). Comes
#                       last: everything after it is idem_write_config's.
idem_fixture() {
	local durable=0 kafka_args=() topic_list=() words=() t
	IDEM_AVRO_PAYMENTS_ID= IDEM_PAYMENTS_PARTITIONS=1
	while [ $# -gt 0 ]; do
		case $1 in
		--durable-commits) durable=1; shift; continue ;;
		--config) break ;;
		--brokers | --topics) [ $# -ge 2 ] || idem_fail "idem_fixture: $1 needs a value" ;;
		*) idem_fail "idem_fixture: unknown option '$1'" ;;
		esac
		case $1 in
		--brokers) kafka_args+=(--brokers "$2") ;;
		--topics)
			read -ra words <<<"$2"
			topic_list+=("${words[@]}")
			;;
		esac
		shift 2
	done
	[ ${#topic_list[@]} -gt 0 ] || idem_fail "idem_fixture: --topics is required"
	if [ $# -gt 0 ]; then
		[ $# -ge 4 ] || idem_fail "idem_fixture: --config needs NAME GROUP CONSUMER"
		[[ $2 != */* ]] || idem_fail "idem_fixture: --config takes a file name in \$IDEM_TMP, not '$2'"
	fi
	idem_tmp_init
	idem_pg_start
	[ "$durable" = 0 ] || idem_pg_durable_commits
	idem_kafka_start "${kafka_args[@]}" "${topic_list[@]}"
	for t in "${topic_list[@]}"; do
		[ "${t%%:*}" != payments ] || IDEM_PAYMENTS_PARTITIONS=${t#*:}
	done
	if [ "$IDEM_PAYLOAD" = avro ]; then
		idem_registry_start
		idem_avro_encode payments-schema >"$IDEM_TMP/payments.avsc"
		IDEM_AVRO_PAYMENTS_ID=$(idem_registry_register payments-value "$IDEM_TMP/payments.avsc")
	elif [ "$IDEM_PAYLOAD" = protobuf ]; then
		idem_registry_start
		idem_proto_encode payments-schema >"$IDEM_TMP/payments.proto"
		IDEM_AVRO_PAYMENTS_ID=$(idem_registry_register payments-value "$IDEM_TMP/payments.proto" \
			--schema-type PROTOBUF)
	elif [ "$IDEM_PAYLOAD" = json-schema ]; then
		idem_registry_start
		idem_json_frame payments-schema >"$IDEM_TMP/payments.schema.json"
		IDEM_AVRO_PAYMENTS_ID=$(idem_registry_register payments-value "$IDEM_TMP/payments.schema.json" \
			--schema-type JSON)
	fi
	export IDEM_AVRO_PAYMENTS_ID IDEM_PAYMENTS_PARTITIONS
	[ $# -gt 0 ] || return 0
	IDEM_CFG=$IDEM_TMP/$2
	export IDEM_CFG
	shift 2
	idem_write_config "$IDEM_CFG" "$@"
	idem_setup_db "$IDEM_CFG"
}

# idem_claims_inserted: rows inserted into idem.processed_messages so far, as the statistics
# count them (pg_stat_user_tables.n_tup_ins).
idem_claims_inserted() {
	idem_psql -c "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = 'idem.processed_messages'::regclass"
}

# idem_stats_settled COUNTER INSERTED_BEFORE: for idem_wait_until after idemd stopped: true once
# the statistics of idemd's sessions are all in. A backend adds what it counted as it exits,
# before it leaves pg_stat_activity (idemd's sessions are named idemd, idemd-retention,
# idemd-relay), so: none of them is left, the claims of topic payments are all counted as
# inserted (idem_claims_inserted() less INSERTED_BEFORE, counted by the same sessions), and two
# reads of COUNTER (a command printing a number) agree; the last read is in IDEM_STATS_SETTLED.
IDEM_STATS_SETTLED=
idem_stats_settled() {
	local cur
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'idemd%'")" = 0 ] ||
		return 1
	[ $(($(idem_claims_inserted) - $2)) -ge "$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'payments')")" ] ||
		return 1
	cur=$("$1")
	[ "$cur" = "$IDEM_STATS_SETTLED" ] && return 0
	IDEM_STATS_SETTLED=$cur
	return 1
}

# idem_dups_looked_up: the duplicates of topic payments (consumer payments) whose claims idemd
# certainly looked up, into a new table looked (p, o, k, x: partition, offset, key,
# transaction). Every message's key comes from Kafka; a message with no claim at its offset is
# a duplicate (nothing is quarantined), and its transaction is certain when the claims before
# and after it in its partition have the same xmin (a batch is a run of consecutive offsets of
# one partition, one batch per partition in a transaction). Unless its key's claim is in the
# same transaction and partition (a repeat within its batch, settled in memory), its claim was
# there before it: the claim INSERT ... ON CONFLICT read that claim's primary key entry, and
# idem.claims_of() looked the key up.
idem_dups_looked_up() {
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments |
		cut -f1-3 >"$IDEM_TMP/messages.tsv" || idem_fail "cannot read the messages back from Kafka"
	idem_psql -c "CREATE TABLE messages (p int, o bigint, k text)"
	idem_psql -c "\\copy messages FROM '$IDEM_TMP/messages.tsv'"
	idem_psql >/dev/null <<'SQL'
CREATE TABLE claims AS SELECT partition p, "offset" o, business_key k, xmin::text x
	FROM idem.processed_messages
	WHERE consumer_id = (SELECT id FROM idem.claim_consumers WHERE name = 'payments')
	AND topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'payments');
CREATE TABLE looked AS
WITH m AS (
	SELECT m.p, m.o, m.k, c.x,
		max(c.o) OVER (PARTITION BY m.p ORDER BY m.o) prev_o,
		min(c.o) OVER (PARTITION BY m.p ORDER BY m.o DESC) next_o
	FROM messages m LEFT JOIN claims c ON c.p = m.p AND c.o = m.o),
d AS (
	SELECT m.p, m.o, m.k, a.x FROM m
	JOIN claims a ON a.p = m.p AND a.o = m.prev_o
	JOIN claims b ON b.p = m.p AND b.o = m.next_o
	WHERE m.x IS NULL AND a.x = b.x)
SELECT d.* FROM d JOIN claims c ON c.k = d.k WHERE NOT (c.x = d.x AND c.p = d.p);
SQL
}

# idem_pkey_reads: primary key entries of idem.processed_messages read so far by index scans
# (pg_stat_user_indexes.idx_tup_read; the calling session's own counts flushed first).
idem_pkey_reads() {
	idem_psql -c "SELECT pg_stat_force_next_flush()" >/dev/null
	idem_psql -c "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'idem.processed_messages_pkey'::regclass"
}

# idemd_start NAME CONFIG: start idemd in the background (log: $IDEM_TMP/idemd-NAME.log);
# its pid in IDEMD_PID_<NAME> (NAME: letters, digits, _), also printed by idemd_pid NAME.
idemd_start() {
	[[ $1 =~ ^[A-Za-z0-9_]+$ ]] || idem_fail "idemd_start: bad name '$1'"
	idem_spawn "idemd-$1" "$IDEM_BIN/idemd" -c "$2"
	printf -v "IDEMD_PID_$1" %s "$IDEM_LAST_PID"
}

# idemd_pid NAME: the pid of the idemd started as NAME.
idemd_pid() {
	local var=IDEMD_PID_$1
	[ -n "${!var:-}" ] || idem_fail "no idemd started as '$1'"
	echo "${!var}"
}

# idemd_stop NAME: SIGTERM and wait (drain, commit, leave the group); fails unless it exits 0.
idemd_stop() {
	local var=IDEMD_PID_$1 pid
	pid=${!var:-}
	[ -n "$pid" ] || idem_fail "no idemd started as '$1'"
	idem_stop "$pid" 60
	[ "$IDEM_EXIT_STATUS" = 0 ] ||
		idem_fail "idemd $1 exited $IDEM_EXIT_STATUS after SIGTERM (log: $(tail -5 "$IDEM_TMP/idemd-$1.log"))"
}

# idemd_kill9 NAME: SIGKILL, no chance to drain or commit anything.
idemd_kill9() {
	local var=IDEMD_PID_$1 pid
	pid=${!var:-}
	[ -n "$pid" ] || idem_fail "no idemd started as '$1'"
	idem_kill "$pid" KILL
	idem_wait_exit "$pid" 10
}

# idem__produce_cmd CALLER NEED_RATE OPTION...: the idem-kafkatool command of idem_produce and
# idem_produce_bg (CALLER, named in errors) into the array IDEM__PRODUCE_CMD: topic payments,
# --count, --dup-ratio and --seed (all three required), --rate (required if NEED_RATE is 1),
# accounts $IDEM_ACCOUNTS (default 50), manifest $IDEM_TMP/manifest.csv.
idem__produce_cmd() {
	local caller=$1 need_rate=$2 count='' dup_ratio='' seed='' rate_opt=()
	shift 2
	while [ $# -gt 0 ]; do
		case $1 in
		--count | --dup-ratio | --seed | --rate)
			[ $# -ge 2 ] || idem_fail "$caller: $1 needs a value" ;;
		*) idem_fail "$caller: unknown option '$1'" ;;
		esac
		case $1 in
		--count) count=$2 ;;
		--dup-ratio) dup_ratio=$2 ;;
		--seed) seed=$2 ;;
		--rate) rate_opt=(--rate "$2") ;;
		esac
		shift 2
	done
	if [ -z "$count" ] || [ -z "$dup_ratio" ] || [ -z "$seed" ]; then
		idem_fail "$caller: --count, --dup-ratio and --seed are required"
	fi
	if [ "$need_rate" = 1 ] && [ ${#rate_opt[@]} -eq 0 ]; then
		idem_fail "$caller: --rate is required"
	fi
	if [ "$IDEM_PAYLOAD" != json ]; then
		# The same payments (ids, accounts, amounts, partitions, duplicates) in Avro (Protobuf,
		# framed JSON), encoded by python3-avro (python3-protobuf, json_frame.py), then produced
		# in order; prints what idem-kafkatool produce prints.
		local tool=avro_encode.py
		[ "$IDEM_PAYLOAD" != protobuf ] || tool=proto_encode.py
		[ "$IDEM_PAYLOAD" != json-schema ] || tool=json_frame.py
		IDEM__PRODUCE_CMD=(env IDEM_ENCODER="$tool" bash -c 'set -euo pipefail
			stats=$("$IDEM_AVRO_PYTHON" "$IDEM_SRC/tests/tools/$IDEM_ENCODER" payments \
				--schema-id "$IDEM_AVRO_PAYMENTS_ID" --count "$1" --dup-ratio "$2" --seed "$3" \
				--accounts "$4" --partitions "$IDEM_PAYMENTS_PARTITIONS" \
				--manifest "$IDEM_TMP/manifest.csv" --output "$IDEM_TMP/payments-$3.avro.txt")
			"$IDEM_BIN/idem-kafkatool" produce-file --brokers "$IDEM_BROKERS" --topic payments \
				--input "$IDEM_TMP/payments-$3.avro.txt" "${@:5}" >/dev/null
			echo "$stats"' avro-payments "$count" "$dup_ratio" "$seed" "${IDEM_ACCOUNTS:-50}"
			"${rate_opt[@]}")
		return 0
	fi
	IDEM__PRODUCE_CMD=("$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS"
		--topic payments --count "$count" --dup-ratio "$dup_ratio" --seed "$seed"
		"${rate_opt[@]}" --accounts "${IDEM_ACCOUNTS:-50}" --manifest "$IDEM_TMP/manifest.csv")
}

# idem_produce --count N --dup-ratio R --seed S [--rate MSGS_PER_SEC]: produce N payments, a
# share R of them duplicates, from seed S (the same options give the same messages), at most
# MSGS_PER_SEC a second if given; manifest in $IDEM_TMP/manifest.csv. Sets IDEM_PRODUCED,
# IDEM_UNIQUE.
idem_produce() {
	local out
	idem__produce_cmd idem_produce 0 "$@"
	out=$("${IDEM__PRODUCE_CMD[@]}")
	IDEM_PRODUCED=$(sed -n 's/.*produced=\([0-9]*\).*/\1/p' <<<"$out")
	IDEM_UNIQUE=$(sed -n 's/.*unique=\([0-9]*\).*/\1/p' <<<"$out")
	[ -n "$IDEM_PRODUCED" ] && [ -n "$IDEM_UNIQUE" ] || idem_fail "unexpected producer output: $out"
}

# idem_wait_done GROUP TIMEOUT: until Kafka's committed offsets reach the end of every partition.
idem_wait_done() {
	"$IDEM_BIN/idem-kafkatool" wait-committed --brokers "$IDEM_BROKERS" --group "$1" \
		--topic payments --timeout "$2" ||
		idem_fail "group $1 did not commit to the end within $2 s"
}

# idem_check_exactly_once CONSUMER: the database holds every unique payment exactly once.
#  - one claim per unique payment id of the manifest, no claim for anything else;
#  - the ledger has one row per payment (it has no unique constraint: a double apply shows);
#  - every account balance equals the sum of its unique payments;
#  - progress counters add up, and every partition's progress reached its high watermark.
idem_check_exactly_once() {
	local consumer=$1 v
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS expected; CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
	idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
	# Statistics first: planned on a claims table that autovacuum has not analyzed since it was
	# emptied, the anti joins below are nested loops over every pair of rows (hours at 300,000
	# payments).
	idem_psql -c "ANALYZE expected, idem.processed_messages, ledger, accounts" >/dev/null
	idem_assert_eq "manifest rows" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM expected')"
	idem_assert_eq "claims" "$IDEM_UNIQUE" \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$consumer'")"
	idem_assert_eq "claims not in manifest" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named p WHERE consumer = '$consumer' AND NOT EXISTS (SELECT 1 FROM expected e WHERE e.payment_id = p.business_key)")"
	idem_assert_eq "ledger rows" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
	idem_assert_eq "payments applied twice" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
	idem_assert_eq "payments missing" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')"
	idem_assert_eq "wrong ledger amounts" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN expected e USING (payment_id) WHERE l.amount <> e.amount OR l.account <> e.account')"
	idem_assert_eq "accounts with wrong balance" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
	# Row mode's handler returns the balance, stored with every claim; set mode's returns
	# nothing, and then no claim row is rewritten to store one.
	if [ "$IDEM_HANDLER_MODE" = set ]; then
		idem_assert_eq "claims with a stored result (set mode stores none)" 0 \
			"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$consumer' AND result IS NOT NULL")"
	else
		idem_assert_eq "claims without a stored result" 0 \
			"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$consumer' AND result IS NULL")"
	fi
	v=$(idem_psql -c "SELECT sum(applied) = $IDEM_UNIQUE AND sum(consumed) = sum(applied) + sum(duplicates) + sum(quarantined) AND sum(quarantined) = 0 AND sum(consumed) >= $IDEM_PRODUCED FROM idem.partition_progress WHERE consumer = '$consumer'")
	[ "$v" = t ] || idem_fail "progress counters do not add up: $(idem_psql -c "SELECT sum(consumed), sum(applied), sum(duplicates), sum(quarantined) FROM idem.partition_progress WHERE consumer = '$consumer'")"
	idem_check_progress_at_end "$consumer"
}

# idem_check_progress_at_end CONSUMER: idem.partition_progress.next_offset == high watermark.
idem_check_progress_at_end() {
	local line p high db
	while read -r line; do
		case $line in partition=*) ;; *) continue ;; esac
		p=$(sed -n 's/.*partition=\([0-9]*\).*/\1/p' <<<"$line")
		high=$(sed -n 's/.*high=\([0-9-]*\).*/\1/p' <<<"$line")
		db=$(idem_psql -c "SELECT coalesce(max(next_offset), 0) FROM idem.partition_progress WHERE consumer = '$1' AND topic = 'payments' AND partition = $p")
		idem_assert_eq "database progress of partition $p" "$high" "$db"
	done < <("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "${2:-$1}" --topic payments)
}

# idem_counts CONSUMER: one line for the test log.
idem_counts() {
	idem_psql -c "SELECT 'consumed=' || sum(consumed) || ' applied=' || sum(applied) || ' duplicates=' || sum(duplicates) || ' quarantined=' || sum(quarantined) FROM idem.partition_progress WHERE consumer = '$1'"
}

# idem_claims_above N: true once more than N keys are claimed (for idem_wait_until).
idem_claims_above() {
	[ "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')" -gt "$1" ]
}

# ---- failure handling ---------------------------------------------------------------------------

# idem_produce_one ARGS... : one message to topic payments (unless ARGS hold --topic),
# partition 0 unless ARGS say otherwise; see "idem-kafkatool produce-one --help". Prints nothing.
idem_produce_one() {
	local topic=(--topic payments) a
	for a in "$@"; do
		[ "$a" != --topic ] || topic=()
	done
	"$IDEM_BIN/idem-kafkatool" produce-one --brokers "$IDEM_BROKERS" "${topic[@]}" "$@" \
		>/dev/null || idem_fail "produce-one $* failed"
}

# idem_produce_bg --count N --dup-ratio R --seed S --rate MSGS_PER_SEC: idem_produce in the
# background at MSGS_PER_SEC (required: a live stream for fault tests); idem_produce_wait
# collects it like idem_produce.
idem_produce_bg() {
	idem__produce_cmd idem_produce_bg 1 "$@"
	rm -f "$IDEM_TMP/producer.out"
	idem_spawn producer "${IDEM__PRODUCE_CMD[@]}"
	IDEM_PRODUCER_PID=$IDEM_LAST_PID
}

# idem_produce_wait TIMEOUT: wait for the background producer; sets IDEM_PRODUCED, IDEM_UNIQUE.
idem_produce_wait() {
	local out
	idem_wait_exit "$IDEM_PRODUCER_PID" "$1"
	[ "$IDEM_EXIT_STATUS" = 0 ] || idem_fail "producer exited $IDEM_EXIT_STATUS"
	out=$(cat "$IDEM_TMP/producer.out")
	IDEM_PRODUCED=$(sed -n 's/.*produced=\([0-9]*\).*/\1/p' <<<"$out")
	IDEM_UNIQUE=$(sed -n 's/.*unique=\([0-9]*\).*/\1/p' <<<"$out")
	[ -n "$IDEM_PRODUCED" ] && [ -n "$IDEM_UNIQUE" ] || idem_fail "unexpected producer output: $out"
}

# idem_produce_stop TIMEOUT: end the background producer's stream now (it writes no more and
# waits for what it wrote), then as idem_produce_wait. For a stream started with a count larger
# than any test needs, so that it outlasts the faults however slow the machine is.
idem_produce_stop() {
	kill -TERM "$IDEM_PRODUCER_PID" 2>/dev/null || true
	idem_produce_wait "$1"
}

# idem_producer_running: true while the background producer runs.
idem_producer_running() {
	idem__alive "$IDEM_PRODUCER_PID"
}

# idem_check_accounting CONSUMER: every consumed message is applied, a duplicate or quarantined;
# the duplicates add up by kind; nothing is claimed twice (the primary key) or left without
# its quarantine row.
idem_check_accounting() {
	local v
	v=$(idem_psql -c "SELECT sum(consumed) = sum(applied) + sum(duplicates) + sum(quarantined) AND sum(duplicates) = sum(dup_redelivery) + sum(dup_replay) + sum(dup_upstream) FROM idem.partition_progress WHERE consumer = '$1'")
	[ "$v" = t ] || idem_fail "counters do not add up: $(idem_counts_full "$1")"
	idem_assert_eq "quarantined counted vs quarantine rows" \
		"$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE consumer = '$1' AND resolution IS DISTINCT FROM 'applied' AND resolution IS DISTINCT FROM 'duplicate'")" \
		"$(idem_psql -c "SELECT coalesce(sum(quarantined), 0) FROM idem.partition_progress WHERE consumer = '$1'")"
}

# idem_counts_full CONSUMER: every counter, one line.
idem_counts_full() {
	idem_psql -c "SELECT 'consumed=' || sum(consumed) || ' applied=' || sum(applied) || ' duplicates=' || sum(duplicates) || ' (redelivery=' || sum(dup_redelivery) || ' replay=' || sum(dup_replay) || ' upstream=' || sum(dup_upstream) || ') payload_mismatches=' || sum(payload_mismatches) || ' quarantined=' || sum(quarantined) FROM idem.partition_progress WHERE consumer = '$1'"
}

# idem_fault_report NAME CONSUMER: after idem_check_exactly_once, the scenario's final counts
# from the database: messages produced, applied, duplicates, quarantined, lost (unique payments
# with no ledger row) and applied twice (payments with more than one ledger row).
idem_fault_report() {
	local lost twice
	lost=$(idem_psql -c 'SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')
	twice=$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')
	idem_assert_eq "lost" 0 "$lost"
	idem_assert_eq "applied twice" 0 "$twice"
	# Each duplicate the producer made is an upstream duplicate the first time it commits
	# (more only if a zombie commits a batch its partition's new owner also has in hand).
	[ "$(idem_psql -c "SELECT sum(dup_upstream) FROM idem.partition_progress WHERE consumer = '$2'")" -ge $((IDEM_PRODUCED - IDEM_UNIQUE)) ] ||
		idem_fail "fewer upstream duplicates than the producer made: $(idem_counts_full "$2")"
	echo "ok: $1: messages=$IDEM_PRODUCED unique=$IDEM_UNIQUE $(idem_counts_full "$2") lost=$lost applied_twice=$twice"
}

# idem_check_topic_once CONSUMER GROUP [FIRST_STARTS]: the verdict of a fault test whose payments
# come from several streams (so no one manifest), from the database only, against every message
# of topic payments read back from Kafka (JSON payments; from each partition's offset in file
# FIRST_STARTS on, "PARTITION OFFSET" lines, if given: where the route's first start began).
# Each distinct payment must be applied exactly once: one ledger row with its account and
# amount, one claim, of CONSUMER; nothing else in the ledger or claimed (under any consumer);
# every balance the sum of its payments; sum(applied) of CONSUMER's progress rows the number of
# payments, nothing quarantined, the counters adding up (idem_check_accounting) and every
# progress row at the high watermark (GROUP's offsets: idem_check_progress_at_end). Lost and
# applied twice are logged before anything is asserted. Sets IDEM_PRODUCED (messages from the
# first starts on) and IDEM_UNIQUE (payments).
idem_check_topic_once() {
	local consumer=$1 group=$2 first=${3:-} lost twice
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments \
		--timeout 60 >"$IDEM_TMP/topic.tsv" || idem_fail "cannot read topic payments back"
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS topic_msgs, topic_first, expected; CREATE TABLE topic_msgs (p int, o bigint, k text, v text, h text); CREATE TABLE topic_first (p int PRIMARY KEY, o bigint NOT NULL)"
	idem_psql -c "\\copy topic_msgs FROM '$IDEM_TMP/topic.tsv'"
	[ -z "$first" ] || idem_psql -c "\\copy topic_first FROM '$first' WITH (DELIMITER ' ')"
	idem_psql -c "CREATE TABLE expected AS SELECT v::jsonb->>'payment_id' AS payment_id, min(v::jsonb->>'account') AS account, min((v::jsonb->>'amount')::bigint) AS amount, count(DISTINCT v) AS variants, count(*) AS messages FROM topic_msgs m WHERE NOT EXISTS (SELECT 1 FROM topic_first f WHERE f.p = m.p AND m.o < f.o) GROUP BY 1"
	idem_psql -c "ANALYZE expected, idem.processed_messages, ledger, accounts" >/dev/null
	IDEM_PRODUCED=$(idem_psql -c 'SELECT coalesce(sum(messages), 0) FROM expected')
	IDEM_UNIQUE=$(idem_psql -c 'SELECT count(*) FROM expected')
	lost=$(idem_psql -c 'SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')
	twice=$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')
	idem_log "topic payments from the first start on: messages=$IDEM_PRODUCED payments=$IDEM_UNIQUE; in the database: ledger=$(idem_psql -c 'SELECT count(*) FROM ledger') lost=$lost applied_twice=$twice; $consumer: $(idem_counts_full "$consumer")"
	[ "$IDEM_UNIQUE" -gt 0 ] || idem_fail "no payments in topic payments: the test proves nothing"
	idem_assert_eq "re-sent payments with another payload (test workload)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM expected WHERE variants <> 1')"
	idem_assert_eq "payments lost (no ledger row)" 0 "$lost"
	idem_assert_eq "payments applied twice (two ledger rows or more)" 0 "$twice"
	idem_assert_eq "ledger rows" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
	idem_assert_eq "ledger rows with a wrong account or amount" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN expected e USING (payment_id) WHERE l.amount <> e.amount OR l.account <> e.account')"
	idem_assert_eq "ledger rows of payments not in the topic from the first start on" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE e.payment_id = l.payment_id)')"
	idem_assert_eq "accounts with a wrong balance" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
	idem_assert_eq "claims of $consumer" "$IDEM_UNIQUE" \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$consumer'")"
	idem_assert_eq "claims of another consumer than $consumer" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer <> '$consumer'")"
	idem_assert_eq "claims of keys that are no payment of the topic from the first start on" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages c WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE e.payment_id = c.business_key)')"
	idem_assert_eq "$consumer: applied, quarantined (its progress rows' counters)" "$IDEM_UNIQUE 0" \
		"$(idem_psql -c "SELECT coalesce(sum(applied), 0) || ' ' || coalesce(sum(quarantined), 0) FROM idem.partition_progress WHERE consumer = '$consumer'")"
	idem_check_accounting "$consumer"
	idem_check_progress_at_end "$consumer" "$group"
}

# idem_progress_at_end CONSUMER GROUP: true once CONSUMER's progress row of every partition of
# topic payments is at the partition's high watermark (GROUP: any group, for the watermarks). For
# idem_wait_until where the database went back: Kafka's committed offsets may be at the end
# already (idem_wait_done would return at once), the database's positions are not.
idem_progress_at_end() {
	local high
	high=$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$2" --topic payments |
		sed -n 's/^partition=\([0-9]*\) .* high=\([0-9-]*\).*/\1 \2/p' | sort -n)
	[ -n "$high" ] && [ "$high" = "$(idem_psql -F ' ' -c "SELECT partition, next_offset FROM idem.partition_progress WHERE consumer = '$1' AND topic = 'payments' ORDER BY partition")" ]
}

# idemd_start_db_down NAME CONFIG: start idemd NAME so that the group assigns it its partitions
# while Postgres is down. Its start-up needs the database (the schema's version, the handlers
# prepared) and waits for it, so: the group's JoinGroup requests are refused
# (COORDINATOR_LOAD_IN_PROGRESS pushed through the mock's control socket; librdkafka joins again
# a second later), idemd starts, Postgres is stopped (fast) once idemd's start-up is over (its
# "route '...'" line), and only then may it join. Returns once idemd NAME was given each of the
# $IDEM_PAYMENTS_PARTITIONS partitions of topic payments: it logged either that it does not start
# it yet (idemd_holds NAME " yet: the database's progress rows cannot be read", what the caller
# asserts, after its verdict) or where it started it. Postgres stays down (idem_pg_start_again
# or idem_pg_restore brings it back).
idemd_start_db_down() {
	local log=$IDEM_TMP/idemd-$1.log
	idem_kafka_ctl push_errors JoinGroup 1000000 COORDINATOR_LOAD_IN_PROGRESS >/dev/null
	idemd_start "$1" "$2"
	idem_wait_until 60 "idemd $1's start-up (its route line)" \
		grep -qs "route '[^']*': unqualified names" "$log"
	idem_assert_eq "partitions given to idemd $1 before Postgres went down" 0 \
		"$(grep -cs 'assigned topic=payments\|not starting topic=payments' "$log" || true)"
	idem_pg_stop fast
	idem_kafka_ctl clear_errors JoinGroup >/dev/null
	idem_wait_until 90 "idemd $1 to be given its $IDEM_PAYMENTS_PARTITIONS partitions while the database is down" \
		idemd_holds "$1" '' 'assigned'
	idem_log "idemd $1 was given every partition while Postgres is down: held $(idemd_holding "$1" " yet: the database's progress rows cannot be read"), started $(grep -c 'assigned topic=payments' "$log" || true)"
}

# idemd_holding NAME WHY [WHAT]: how many partitions of topic payments idemd NAME logged "not
# starting topic=payments partition=P" followed by WHY for (a basic regular expression: ":
# consumer renamed in the configuration only", " yet: ..."); with WHAT (assigned), "WHAT
# topic=payments partition=P" lines too.
idemd_holding() {
	local e=(-e "s/.*not starting topic=payments partition=\([0-9]*\)$2.*/\1/p")
	[ -z "${3:-}" ] || e+=(-e "s/.* $3 topic=payments partition=\([0-9]*\) .*/\1/p")
	sed -n "${e[@]}" "$IDEM_TMP/idemd-$1.log" 2>/dev/null | sort -u | wc -l
}

# idemd_holds NAME WHY [WHAT]: true once idemd_holding NAME WHY [WHAT] counts all
# $IDEM_PAYMENTS_PARTITIONS partitions.
idemd_holds() {
	[ "$(idemd_holding "$@")" = "$IDEM_PAYMENTS_PARTITIONS" ]
}

# The payments handler that also tells the rest of the system, through the outbox:
# apply_and_emit(id, account, amount) applies the payment and emits a "payment-applied" event
# (topic payment-applied, key the account, the payment as JSON); returns the new balance.
IDEM_EMIT_SQL='SELECT apply_and_emit($1, $2, $3::bigint)'

# idem_create_emit_fn: create apply_and_emit().
idem_create_emit_fn() {
	idem_psql >/dev/null <<'SQL'
CREATE FUNCTION apply_and_emit(p_id text, p_account text, p_amount bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	b bigint;
BEGIN
	INSERT INTO ledger (payment_id, account, amount) VALUES (p_id, p_account, p_amount);
	INSERT INTO accounts (id, balance) VALUES (p_account, p_amount)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance
		RETURNING balance INTO b;
	PERFORM idem.emit('payment-applied', p_account,
		jsonb_build_object('payment_id', p_id, 'account', p_account, 'amount', p_amount));
	RETURN b;
END $$;
SQL
}

# The downstream consumer of those events: another idemd (consumer "events", topic
# payment-applied) that deduplicates on the header idem-outbox-id and inserts each event into
# applied_b (idem_create_downstream_table), so that an event applied twice shows as two rows.
# idem_write_downstream_config FILE GROUP [OPTION...]: its configuration (OPTIONs as for
# idem_write_config).
idem_write_downstream_config() {
	local file=$1 group=$2
	shift 2
	# shellcheck disable=SC2016 # $n are SQL parameters
	idem_write_config "$file" "$group" events --route-name events --topic payment-applied \
		--key '${header:idem-outbox-id}' --mode row \
		--params '[business_key, "json:/payment_id", "json:/account", "json:/amount"]' \
		--sql 'INSERT INTO applied_b (outbox_id, payment_id, account, amount) VALUES ($1, $2, $3, $4::bigint)' \
		"$@"
}

# idem_create_downstream_table: applied_b, in the order B applied the events (id).
idem_create_downstream_table() {
	idem_psql >/dev/null <<'SQL'
CREATE TABLE applied_b (
	id bigserial PRIMARY KEY,
	outbox_id text NOT NULL,
	payment_id text NOT NULL,
	account text NOT NULL,
	amount bigint NOT NULL
);
SQL
}

# The payments handler as a function, so tests can make it refuse, sleep or disappear:
# apply_payment(id, account, amount) refuses (P0001) accounts listed in blocked_accounts and
# sleeps pg_sleep(slow_accounts.seconds) for those listed there.
IDEM_FN_SQL='SELECT apply_payment($1, $2, $3::bigint)'

# idem_create_apply_fn: create blocked_accounts, slow_accounts and apply_payment().
idem_create_apply_fn() {
	idem_psql >/dev/null <<'SQL'
CREATE TABLE IF NOT EXISTS blocked_accounts (id text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS slow_accounts (id text PRIMARY KEY, seconds float8 NOT NULL);
CREATE OR REPLACE FUNCTION apply_payment(p_id text, p_account text, p_amount bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	b bigint;
	s float8;
BEGIN
	IF EXISTS (SELECT 1 FROM blocked_accounts WHERE id = p_account) THEN
		RAISE EXCEPTION 'account % is blocked', p_account;
	END IF;
	SELECT seconds INTO s FROM slow_accounts WHERE id = p_account;
	IF s IS NOT NULL THEN
		PERFORM pg_sleep(s);
	END IF;
	INSERT INTO ledger (payment_id, account, amount) VALUES (p_id, p_account, p_amount);
	INSERT INTO accounts (id, balance) VALUES (p_account, p_amount)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance
		RETURNING balance INTO b;
	RETURN b;
END $$;
SQL
}

# idem_produce_victim SEED: 500 payments over distinct accounts in one record batch (linger), so
# the consumer sees them at once, manifest in $IDEM_TMP/manifest.csv; then the account of one
# payment in the middle, used by no other payment, is blocked (apply_payment() refuses it:
# P0001). Sets victim_id and victim_acct.
idem_produce_victim() {
	local out victim
	out=$("$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic payments \
		--count 500 --seed "$1" --accounts 100000 --manifest "$IDEM_TMP/manifest.csv" \
		-X linger.ms=1000 -X batch.num.messages=10000)
	idem_assert_eq "producer" "produced=500 unique=500 duplicates=0" "$out"
	victim=$(awk -F, 'NR == FNR { n[$2]++; next } FNR >= 250 && n[$2] == 1 { print; exit }' \
		"$IDEM_TMP/manifest.csv" "$IDEM_TMP/manifest.csv")
	victim_id=${victim%%,*}
	victim_acct=$(cut -d, -f2 <<<"$victim")
	idem_assert_eq "victim account unique" 1 "$(grep -c ",$victim_acct," "$IDEM_TMP/manifest.csv")"
	idem_psql -c "INSERT INTO blocked_accounts VALUES ('$victim_acct')" >/dev/null
}

# idem_pg_durable_commits: make COMMIT wait until its WAL is written (synchronous_commit = on),
# for tests that crash Postgres. The fixture runs with synchronous_commit = off for speed, and
# then an immediate shutdown loses commits that clients were already told about - a database
# that forgets acknowledged commits defeats any exactly-once scheme. fsync stays off: what is
# written survives the process crash (not an OS crash), which is all these tests do.
idem_pg_durable_commits() {
	idem_psql -c 'ALTER SYSTEM SET synchronous_commit = on' >/dev/null
	idem_psql -c 'SELECT pg_reload_conf()' >/dev/null
}

# idem_payments_file FILE SEED PER_PARTITION DUP_EVERY PARTS: PER_PARTITION payments for each of
# PARTS partitions, in idem-kafkatool produce-file's format (key hex, value hex, partition),
# interleaved over the partitions and named explicitly, so every partition gets the same number
# and their offsets stay equal (one reset moves them all). Payment n of partition p: key and
# payment_id pay-SEED-p-n, account acct-p-(n % 5), an amount from n, p and SEED. If DUP_EVERY >
# 0, every DUP_EVERY-th message of a partition (j % DUP_EVERY = DUP_EVERY - 1) re-sends
# (identical key and value) the payment sent three messages before it.
idem_payments_file() {
	awk -v seed="$2" -v per="$3" -v every="$4" -v parts="$5" 'BEGIN {
		for (i = 32; i < 127; i++)
			hex[sprintf("%c", i)] = sprintf("%02x", i)
		for (j = 0; j < per; j++) {
			for (p = 0; p < parts; p++) {
				if (every > 0 && j % every == every - 1)
					n = sent[p, j - 3]
				else
					n = next_n[p]++
				sent[p, j] = n
				id = "pay-" seed "-" p "-" n
				v = sprintf("{\"payment_id\":\"%s\",\"account\":\"acct-%d-%d\",\"amount\":%d}",
					id, p, n % 5, (n * 7919 + p * 104729 + seed * 13) % 10000 + 1)
				printf "%s\t%s\t%d\n", enc(id), enc(v), p
			}
		}
	}
	function enc(s,   r, i) {
		r = ""
		for (i = 1; i <= length(s); i++)
			r = r hex[substr(s, i, 1)]
		return r
	}' >"$1"
}

# idem_claims_before_v11: idem.processed_messages as schema versions 1 to 10 made it (version 1's
# column order, each claim's topic and consumer by their names), with the claims it holds, and
# none of the objects of versions 11 to 13 (sql/0011_claim_layout.sql, 0012, 0013);
# idem.claims_of() as version 6 made it, idem.store_results() as version 5 did. The caller
# forgets version 11 (and whatever else it undoes) in idem.schema_migrations.
idem_claims_before_v11() {
	idem_psql -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE idem.processed_messages_v10 (
	consumer text COLLATE "C" NOT NULL, business_key text COLLATE "C" NOT NULL,
	topic text NOT NULL, partition integer NOT NULL, "offset" bigint NOT NULL,
	payload_hash bytea, result text, processed_at timestamptz NOT NULL DEFAULT now());
INSERT INTO idem.processed_messages_v10 SELECT consumer, business_key, topic, partition,
	"offset", payload_hash, result, processed_at FROM idem.claims_named;
DROP VIEW idem.claims_named;
DROP TABLE idem.processed_messages;
DROP FUNCTION idem.claim_topic_id(text);
DROP TABLE idem.claim_topics;
DROP FUNCTION idem.claim_consumer_id(text);
DROP TABLE idem.claim_consumers;
ALTER TABLE idem.processed_messages_v10 RENAME TO processed_messages;
ALTER TABLE idem.processed_messages ADD PRIMARY KEY (consumer, business_key);
CREATE INDEX processed_messages_processed_at ON idem.processed_messages (processed_at);
SQL
	idem_psql -v ON_ERROR_STOP=1 -f "$IDEM_SRC/sql/0006_claims_probe.sql" >/dev/null
	# Version 5's idem.store_results(), from its migration (version 13 made it map the name).
	sed -n '/^CREATE FUNCTION idem.store_results/,/^\$\$;/p' "$IDEM_SRC/sql/0005_key_lookups.sql" |
		sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/' |
		idem_psql -v ON_ERROR_STOP=1 >/dev/null
}
