# common.sh - idemd-specific helpers for the integration tests, on top of lib.sh.
# Sourced after lib.sh; assumes idem_tmp_init, idem_pg_start and idem_kafka_start have run.

# The payments handler of sql/examples/payments.sql.
IDEM_PAYMENTS_SQL='WITH l AS (INSERT INTO ledger (payment_id, account, amount) VALUES ($1, $2, $3::bigint)) INSERT INTO accounts (id, balance) VALUES ($2, $3::bigint) ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance RETURNING balance'

# idem_write_config FILE GROUP CONSUMER [HANDLER_SQL [PARAMS [MAX_MESSAGES]]]
idem_write_config() {
	local file=$1 group=$2 consumer=$3
	local sql=${4:-$IDEM_PAYMENTS_SQL}
	local params=${5:-'[business_key, "json:/account", "json:/amount"]'}
	local max=${6:-500}
	local q="'"
	local esc=${sql//$q/$q$q}
	cat >"$file" <<YAML
kafka:
  brokers: "$IDEM_BROKERS"
  group_id: "$group"
  properties:
    session.timeout.ms: 6000
    heartbeat.interval.ms: 500
    fetch.wait.max.ms: 50
    queued.min.messages: 1000000
postgres:
  conninfo: "$IDEM_CONNINFO"
routes:
  - name: payments
    topics: [payments]
    consumer: "$consumer"
    business_key: "\${json:/payment_id}"
    handler:
      sql: '$esc'
      params: $params
batch:
  max_messages: $max
  max_wait_ms: 20
retry:
  initial_ms: 50
  max_ms: 2000
log:
  level: ${IDEM_LOG_LEVEL:-info}
YAML
}

# idem_setup_db CONFIG: migrate the idem schema and create the example tables.
idem_setup_db() {
	"$IDEM_BIN/idemctl" -c "$1" migrate >/dev/null
	idem_psql -f "$IDEM_SRC/sql/examples/payments.sql" >/dev/null
}

# idemd_start NAME CONFIG: start idemd in the background (log: $IDEM_TMP/idemd-NAME.log);
# its pid in IDEMD_PID_<NAME>.
idemd_start() {
	idem_spawn "idemd-$1" "$IDEM_BIN/idemd" -c "$2"
	eval "IDEMD_PID_$1=$IDEM_LAST_PID"
}

# idemd_stop NAME: SIGTERM and wait (drain, commit, leave the group); fails unless it exits 0.
idemd_stop() {
	local pid
	eval "pid=\$IDEMD_PID_$1"
	idem_stop "$pid" 60
	[ "$IDEM_EXIT_STATUS" = 0 ] ||
		idem_fail "idemd $1 exited $IDEM_EXIT_STATUS after SIGTERM (log: $(tail -5 "$IDEM_TMP/idemd-$1.log"))"
}

# idemd_kill9 NAME: SIGKILL, no chance to drain or commit anything.
idemd_kill9() {
	local pid
	eval "pid=\$IDEMD_PID_$1"
	idem_kill "$pid" KILL
	idem_wait_exit "$pid" 10
}

# idem_produce COUNT DUP_RATIO SEED: produce payments, manifest in $IDEM_TMP/manifest.csv.
# Sets IDEM_PRODUCED, IDEM_UNIQUE.
idem_produce() {
	local out
	out=$("$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic payments \
		--count "$1" --dup-ratio "$2" --seed "$3" --manifest "$IDEM_TMP/manifest.csv")
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
	idem_psql -c "DROP TABLE IF EXISTS expected; CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
	idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
	idem_assert_eq "manifest rows" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM expected')"
	idem_assert_eq "claims" "$IDEM_UNIQUE" \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE consumer = '$consumer'")"
	idem_assert_eq "claims not in manifest" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages p WHERE consumer = '$consumer' AND NOT EXISTS (SELECT 1 FROM expected e WHERE e.payment_id = p.business_key)")"
	idem_assert_eq "ledger rows" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
	idem_assert_eq "payments applied twice" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
	idem_assert_eq "payments missing" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')"
	idem_assert_eq "wrong ledger amounts" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN expected e USING (payment_id) WHERE l.amount <> e.amount OR l.account <> e.account')"
	idem_assert_eq "accounts with wrong balance" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
	idem_assert_eq "claims without a stored result" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE consumer = '$consumer' AND result IS NULL")"
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
