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
		--count "$1" --dup-ratio "$2" --seed "$3" --accounts "${IDEM_ACCOUNTS:-50}" \
		--manifest "$IDEM_TMP/manifest.csv")
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

# ---- failure handling (issue 3) -----------------------------------------------------------------

# idem_write_config_ext FILE GROUP CONSUMER: like idem_write_config, with every part settable
# through the environment (defaults in brackets):
#   IDEM_CFG_TOPIC [payments]  IDEM_CFG_KEY [${json:/payment_id}]  IDEM_CFG_SQL [$IDEM_PAYMENTS_SQL]
#   IDEM_CFG_PARAMS [business_key, json:/account, json:/amount]  IDEM_CFG_MAX [500]
#   IDEM_CFG_WAIT [20]  IDEM_CFG_WORKERS [0]  IDEM_CFG_SESSION_MS [6000]
#   IDEM_CFG_RETRY_MAX_MS [2000]
#   IDEM_CFG_ROUTE_EXTRA (route keys, e.g. "on_poison: halt")
#   IDEM_CFG_PG_EXTRA (postgres keys)  IDEM_CFG_RETRY_EXTRA (retry keys)
#   IDEM_CFG_LIMITS (limits keys)  IDEM_CFG_KAFKA_PROPS (more "name: value" properties)
# Multi-line extras are one "key: value" per line.
idem_write_config_ext() {
	local file=$1 group=$2 consumer=$3
	local sql=${IDEM_CFG_SQL:-$IDEM_PAYMENTS_SQL}
	local key=${IDEM_CFG_KEY:-'${json:/payment_id}'}
	local q="'" line
	local esc=${sql//$q/$q$q}
	{
		cat <<YAML
kafka:
  brokers: "$IDEM_BROKERS"
  group_id: "$group"
  properties:
    session.timeout.ms: ${IDEM_CFG_SESSION_MS:-6000}
    heartbeat.interval.ms: 500
    fetch.wait.max.ms: 50
    queued.min.messages: 1000000
YAML
		while IFS= read -r line; do
			[ -n "$line" ] && printf '    %s\n' "$line"
		done <<<"${IDEM_CFG_KAFKA_PROPS:-}"
		cat <<YAML
postgres:
  conninfo: "$IDEM_CONNINFO"
YAML
		while IFS= read -r line; do
			[ -n "$line" ] && printf '  %s\n' "$line"
		done <<<"${IDEM_CFG_PG_EXTRA:-}"
		cat <<YAML
routes:
  - name: payments
    topics: [${IDEM_CFG_TOPIC:-payments}]
    consumer: "$consumer"
    business_key: '$key'
    handler:
      sql: '$esc'
      params: ${IDEM_CFG_PARAMS:-[business_key, "json:/account", "json:/amount"]}
YAML
		while IFS= read -r line; do
			[ -n "$line" ] && printf '    %s\n' "$line"
		done <<<"${IDEM_CFG_ROUTE_EXTRA:-}"
		cat <<YAML
batch:
  max_messages: ${IDEM_CFG_MAX:-500}
  max_wait_ms: ${IDEM_CFG_WAIT:-20}
  workers: ${IDEM_CFG_WORKERS:-0}
retry:
  initial_ms: 50
  max_ms: ${IDEM_CFG_RETRY_MAX_MS:-2000}
YAML
		while IFS= read -r line; do
			[ -n "$line" ] && printf '  %s\n' "$line"
		done <<<"${IDEM_CFG_RETRY_EXTRA:-}"
		if [ -n "${IDEM_CFG_LIMITS:-}" ]; then
			echo "limits:"
			while IFS= read -r line; do
				[ -n "$line" ] && printf '  %s\n' "$line"
			done <<<"$IDEM_CFG_LIMITS"
		fi
		cat <<YAML
log:
  level: ${IDEM_LOG_LEVEL:-info}
YAML
	} >"$file"
}

# idem_produce_one ARGS... : one message to topic payments (or IDEM_CFG_TOPIC), partition 0
# unless ARGS say otherwise; see "idem-kafkatool produce-one --help". Prints nothing.
idem_produce_one() {
	"$IDEM_BIN/idem-kafkatool" produce-one --brokers "$IDEM_BROKERS" \
		--topic "${IDEM_CFG_TOPIC:-payments}" "$@" >/dev/null ||
		idem_fail "produce-one $* failed"
}

# idem_produce_bg COUNT DUP_RATIO SEED RATE: produce in the background at RATE messages/s (a
# live stream for fault tests); idem_produce_wait collects it like idem_produce.
idem_produce_bg() {
	rm -f "$IDEM_TMP/producer.out"
	idem_spawn producer "$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" \
		--topic payments --count "$1" --dup-ratio "$2" --seed "$3" --rate "$4" \
		--accounts "${IDEM_ACCOUNTS:-50}" --manifest "$IDEM_TMP/manifest.csv"
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

# idem_pg_durable_commits: make COMMIT wait until its WAL is written (synchronous_commit = on),
# for tests that crash Postgres. The fixture runs with synchronous_commit = off for speed, and
# then an immediate shutdown loses commits that clients were already told about - a database
# that forgets acknowledged commits defeats any exactly-once scheme. fsync stays off: what is
# written survives the process crash (not an OS crash), which is all these tests do.
idem_pg_durable_commits() {
	idem_psql -c 'ALTER SYSTEM SET synchronous_commit = on' >/dev/null
	idem_psql -c 'SELECT pg_reload_conf()' >/dev/null
}
