#!/usr/bin/env bash
# Fault: an operator renames a route's consumer (routes[].consumer, the claims namespace) and
# keeps the consumer group (kafka.group_id). A rename is a command: `idemctl rename OLD NEW`
# moves OLD's claims and positions to NEW in one transaction. A rename made in the configuration
# only is refused: NEW has no claims, so going on after OLD's position would skip what NEW never
# applied and starting before it would apply again what OLD did; idemd holds every partition,
# says which command to run, and starts them once it has run (decided again every 2 s, no
# restart).
#
# Eight partitions, JSON payments with 30% upstream re-sends, the payments handler (its ledger
# has no unique constraint: a payment applied twice is two rows). Rounds of payments, each from
# its own seed (ids pay-SEED-i: a round's re-sends repeat only that round's payments):
#   1. shop-v1 applies 5,000 messages; Kafka's committed offsets reach the end; SIGTERM.
#   2. The configuration renamed to shop-v2, nothing else; 2,000 more messages. idemd holds every
#      partition (an error naming `idemctl rename shop-v1 shop-v2`, idemd_partitions_starting 8,
#      /readyz not ready) and applies nothing. While it runs, the operator runs the command (60 s
#      after shop-v1's last progress it needs no --force; the test backdates it): every partition
#      starts at shop-v1's database position (case=database) and only round 2 is applied.
#   3. shop-v2 applies 2,000 more while every OffsetCommit fails (injected in the Kafka mock), so
#      Kafka's committed offsets trail the database by the whole round; once the database holds
#      all of it, SIGKILL.
#   4. `idemctl rename shop-v2 shop-v3 --force` (shop-v2 was killed seconds ago) and the
#      configuration; 1,000 more. Kafka's committed offset (idemd's, naming shop-v2) is behind
#      the database: shop-v3 starts at the database position, not re-applying round 3.
#   5. The configuration set back to shop-v2, nothing else: held again (shop-v3 got further);
#      the operator sets it back to shop-v3 and restarts: it goes on, nothing applied twice.
# Verdict from the database after each round: every payment has exactly one ledger row and the
# right balance; the claims are all under the current name and are exactly the payments so far
# (none applied again under a new name); the current consumer's counters add up and consumed is
# exactly the messages produced (nothing read twice); nothing is left under an earlier name.
#
# Why it fails on the previous code (871f977): a rename in the configuration went on after the
# earlier name's position, which after a restore of the database (or a failover, or a kill before
# Kafka's commit) skipped or applied twice what the database no longer knew; here round 2
# starts at once with case=renamed instead of waiting (the check of the held partitions fails:
# "'not starting' lines ...: expected '8', got '0'").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-rename
idem_fixture --topics payments:8 --config idemd.yaml "$group" shop-v1 --route-name shop
cfg=$IDEM_CFG
dups=0.3

# ---- helpers --------------------------------------------------------------------------------------

# The rounds produced so far: manifests $IDEM_TMP/round-R.csv (payment_id,account,amount,R),
# produced and unique counts by round.
produced=() unique=()
rounds=0

# round SEED COUNT: produce a round of payments (all new payment ids) and keep its manifest.
round() {
	idem_produce --count "$2" --dup-ratio "$dups" --seed "$1"
	rounds=$((rounds + 1))
	produced[rounds]=$IDEM_PRODUCED
	unique[rounds]=$IDEM_UNIQUE
	awk -v r="$rounds" '{ print $0 "," r }' "$IDEM_TMP/manifest.csv" >"$IDEM_TMP/round-$rounds.csv"
	idem_log "round $rounds: produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE (seed $1)"
}

# sum_of ARRAY FIRST LAST: the sum of ARRAY[FIRST..LAST].
sum_of() {
	local -n arr=$1
	local r s=0
	for ((r = $2; r <= $3; r++)); do
		s=$((s + arr[r]))
	done
	echo "$s"
}

# config CONSUMER: the operator's edit: the same group, the route's consumer renamed (metrics on
# a fresh port, $metrics_url).
config() {
	local port
	port=$(idem_free_port)
	idem_write_config "$cfg" "$group" "$1" --route-name shop --metrics "127.0.0.1:$port"
	metrics_url=http://127.0.0.1:$port/metrics
}

# positions CONSUMER: "partition next_offset" of CONSUMER's progress rows, by partition.
positions() {
	idem_psql -F ' ' -c "SELECT partition, next_offset FROM idem.partition_progress WHERE consumer = '$1' AND topic = 'payments' ORDER BY partition"
}

# kafka_offsets: "partition committed high" of the group, by partition.
kafka_offsets() {
	"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" --topic payments |
		sed -n 's/^partition=\([0-9]*\) committed=\([0-9-]*\) low=[0-9-]* high=\([0-9-]*\).*/\1 \2 \3/p' |
		sort -n
}

# starts NAME: "partition start" of the assignments in idemd NAME's log, by partition.
starts() {
	sed -n 's/.*assigned topic=payments partition=\([0-9]*\) start=\([0-9-]*\) .*/\1 \2/p' \
		"$IDEM_TMP/idemd-$1.log" | sort -n
}

# check_held NAME FROM TO: idemd NAME holds every partition, its consumer TO renamed from FROM in
# the configuration only: the log names the command for each of the 8 partitions, none started,
# the metrics count 8 partitions not started and /readyz is not ready.
check_held() {
	local name=$1 log=$IDEM_TMP/idemd-$1.log n
	n=$(grep -c "not starting topic=payments partition=[0-9]*: consumer renamed in the configuration only: consumer $2 of group $group .* run: idemctl rename $2 $3 " "$log" || true)
	idem_assert_eq "'not starting' lines ($2 -> $3) in idemd $name's log" 8 "$n"
	idem_assert_eq "partitions started by idemd $name while held" 0 \
		"$(grep -c 'assigned topic=payments' "$log" || true)"
	n=$(curl -fsS "$metrics_url" | awk '$1 == "idemd_partitions_starting" { print $2 }')
	idem_assert_eq "idemd_partitions_starting of idemd $name" 8 "$n"
	n=$(curl -fsS "$metrics_url" | awk '$1 == "idemd_ready" { print $2 }')
	idem_assert_eq "idemd_ready of idemd $name" 0 "$n"
}

# held NAME: idemd NAME logged the hold of every partition.
held() {
	local n
	n=$(grep -c "not starting topic=payments partition=[0-9]*: consumer renamed" "$IDEM_TMP/idemd-$1.log" || true)
	[ "${n:-0}" -ge 8 ]
}

# check_started NAME POSITIONS_FILE: idemd NAME started every partition at the database position
# (case=database) that POSITIONS_FILE (read before) holds.
check_started() {
	idem_assert_eq "assignments with case=database in idemd $1's log" 8 \
		"$(grep -c 'assigned topic=payments .* case=database ' "$IDEM_TMP/idemd-$1.log" || true)"
	idem_assert_eq "idemd $1's starts (partition start) = the database positions before it" \
		"$(cat "$2")" "$(starts "$1")"
}

# ctl ARGS...: idemctl with the configuration.
ctl() {
	"$IDEM_BIN/idemctl" -c "$cfg" "$@"
}

# check_db CONSUMER:FIRST-LAST...: the database after the rounds so far, each consumer owning the
# rounds FIRST..LAST: every payment exactly once in the ledger with the right balances; each
# consumer's claims exactly the payments of its rounds; its counters add up, and consumed is
# exactly the messages of its rounds (nothing read twice).
check_db() {
	local spec c first last total_unique total_produced claims n
	total_unique=$(sum_of unique 1 "$rounds")
	total_produced=$(sum_of produced 1 "$rounds")
	cat "$IDEM_TMP"/round-*.csv >"$IDEM_TMP/expected.csv"
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS expected; CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint, round int)"
	idem_psql -c "\\copy expected FROM '$IDEM_TMP/expected.csv' WITH (FORMAT csv)"
	idem_assert_eq "unique payments in the manifests" "$total_unique" \
		"$(idem_psql -c 'SELECT count(*) FROM expected')"
	idem_assert_eq "payments applied twice (two ledger rows or more)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
	idem_assert_eq "payments missing from the ledger" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')"
	idem_assert_eq "ledger rows" "$total_unique" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
	idem_assert_eq "ledger rows with a wrong account or amount" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN expected e USING (payment_id) WHERE l.amount <> e.amount OR l.account <> e.account')"
	idem_assert_eq "accounts with a wrong balance" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
	claims=0
	for spec in "$@"; do
		c=${spec%%:*}
		first=${spec#*:}
		last=${first#*-}
		first=${first%-*}
		n=$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$c'")
		claims=$((claims + n))
		idem_assert_eq "$c: claims of payments of other rounds than $first..$last (applied again under another name)" 0 \
			"$(idem_psql -c "SELECT count(*) FROM idem.claims_named p JOIN expected e ON e.payment_id = p.business_key WHERE p.consumer = '$c' AND e.round NOT BETWEEN $first AND $last")"
		idem_assert_eq "$c: claims (payments of rounds $first..$last)" "$(sum_of unique "$first" "$last")" "$n"
		idem_assert_eq "$c: applied (sum of its progress rows)" "$(sum_of unique "$first" "$last")" \
			"$(idem_psql -c "SELECT coalesce(sum(applied), 0) FROM idem.partition_progress WHERE consumer = '$c'")"
		idem_assert_eq "$c: consumed (the messages of rounds $first..$last, each once)" \
			"$(sum_of produced "$first" "$last")" \
			"$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = '$c'")"
		idem_check_accounting "$c"
	done
	idem_assert_eq "claims in all" "$total_unique" "$claims"
	idem_assert_eq "claims of payments not produced" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages p WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE e.payment_id = p.business_key)')"
	idem_log "database after round $rounds: $total_unique payments once each ($total_produced messages); $(for spec in "$@"; do printf '%s: %s; ' "${spec%%:*}" "$(idem_counts_full "${spec%%:*}")"; done)"
}

# ---- 1. shop-v1 applies round 1 -----------------------------------------------------------------
config shop-v1
round 261 5000
idemd_start v1 "$cfg"
idem_wait_done "$group" 120
idemd_stop v1
check_db shop-v1:1-1
idem_check_progress_at_end shop-v1 "$group"
positions shop-v1 >"$IDEM_TMP/v1.positions"
idem_assert_eq "shop-v1 progress rows" 8 "$(wc -l <"$IDEM_TMP/v1.positions")"

# ---- 2. renamed in the configuration only: held; then idemctl rename while it runs ---------------
config shop-v2
round 262 2000
idemd_start v2 "$cfg"
idem_wait_until 60 "idemd v2 to hold every partition" held v2
sleep 3 # held for a while (decided again every 2 s): still nothing applied
check_held v2 shop-v1 shop-v2
idem_assert_eq "ledger rows while held (round 1's payments only)" "${unique[1]}" \
	"$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "claims under shop-v2 while held" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'shop-v2'")"
# idemctl verify says the same, for every partition (exit 5: positions of another consumer).
rc=0
ctl verify >"$IDEM_TMP/verify.out" 2>&1 || rc=$?
idem_assert_eq "idemctl verify's exit status while renamed in the configuration only" 5 "$rc"
idem_assert_eq "partitions idemctl verify calls CONSUMER RENAMED" 8 \
	"$(grep -c 'CONSUMER RENAMED in the configuration only' "$IDEM_TMP/verify.out" || true)"
# shop-v1 stopped a few seconds ago: the command wants a minute since its last progress.
rc=0
ctl rename shop-v1 shop-v2 >"$IDEM_TMP/rename.out" 2>&1 || rc=$?
idem_assert_eq "idemctl rename within a minute of shop-v1's last progress (exit status)" 1 "$rc"
grep -q "may still be running under 'shop-v1'" "$IDEM_TMP/rename.out" ||
	idem_fail "idemctl rename: expected the running-instance refusal, got: $(cat "$IDEM_TMP/rename.out")"
idem_psql -c "UPDATE idem.partition_progress SET updated_at = now() - interval '2 minutes' WHERE consumer = 'shop-v1'"
ctl rename shop-v1 shop-v2 >"$IDEM_TMP/rename.out" 2>&1 ||
	idem_fail "idemctl rename shop-v1 shop-v2 failed: $(cat "$IDEM_TMP/rename.out")"
idem_log "idemctl rename: $(head -1 "$IDEM_TMP/rename.out")"
idem_wait_done "$group" 120
check_started v2 "$IDEM_TMP/v1.positions"
idemd_stop v2
check_db shop-v2:1-2
idem_check_progress_at_end shop-v2 "$group"

# ---- 3. shop-v2 applies round 3 while Kafka refuses every offset commit; then SIGKILL -----------
# A permanent commit error (librdkafka neither retries it nor rejoins the group): the commits
# fail, idemd goes on applying and tries again every interval.
config shop-v2
idemd_start v2b "$cfg"
idem_wait_until 60 "idemd v2b to start every partition" grep -q 'assigned topic=payments partition=7' "$IDEM_TMP/idemd-v2b.log"
idem_kafka_ctl push_errors OffsetCommit 1000000 OFFSET_METADATA_TOO_LARGE >/dev/null
kafka_offsets >"$IDEM_TMP/before-round3.kafka"
round 263 2000
# v2_at_end: shop-v2's database positions reached every partition's high watermark.
v2_at_end() {
	[ "$(kafka_offsets | awk '{ print $1, $3 }')" = "$(positions shop-v2)" ]
}
idem_wait_until 120 "shop-v2 applied round 3 (database positions at the high watermarks)" v2_at_end
kafka_offsets >"$IDEM_TMP/round3.kafka"
positions shop-v2 >"$IDEM_TMP/v2.positions"
idemd_kill9 v2b
idem_kafka_ctl clear_errors OffsetCommit >/dev/null
# The fault took effect: Kafka's committed offsets are where round 2 left them, behind shop-v2's
# database positions on every partition that round 3 wrote to.
idem_assert_eq "Kafka's committed offsets during round 3 (every commit refused)" \
	"$(awk '{ print $1, $2 }' "$IDEM_TMP/before-round3.kafka")" \
	"$(awk '{ print $1, $2 }' "$IDEM_TMP/round3.kafka")"
trailing=$(join "$IDEM_TMP/round3.kafka" "$IDEM_TMP/v2.positions" | awk '$2 < $4 { n++ } END { print n + 0 }')
[ "$trailing" -gt 0 ] ||
	idem_fail "Kafka's committed offsets do not trail shop-v2's database positions on any partition: the commit fault did nothing, the test proves nothing"
idem_log "shop-v2 SIGKILLed: Kafka's committed offsets trail its database positions on $trailing of 8 partitions by $(join "$IDEM_TMP/round3.kafka" "$IDEM_TMP/v2.positions" | awk '{ s += $4 - $2 } END { print s }') messages"
check_db shop-v2:1-3

# ---- 4. idemctl rename shop-v2 shop-v3 while Kafka trails the database; round 4 ------------------
ctl rename shop-v2 shop-v3 --force >"$IDEM_TMP/rename.out" 2>&1 ||
	idem_fail "idemctl rename shop-v2 shop-v3 --force failed: $(cat "$IDEM_TMP/rename.out")"
config shop-v3
round 264 1000
idemd_start v3 "$cfg"
idem_wait_done "$group" 120
check_started v3 "$IDEM_TMP/v2.positions"
idemd_stop v3
check_db shop-v3:1-4
idem_check_progress_at_end shop-v3 "$group"
idem_assert_eq "shop-v2's progress rows after the rename (moved)" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.partition_progress WHERE consumer = 'shop-v2'")"
positions shop-v3 >"$IDEM_TMP/v3.positions"

# ---- 5. set back to shop-v2 in the configuration only: held; back to shop-v3: goes on ------------
config shop-v2
round 265 500
idemd_start v4 "$cfg"
idem_wait_until 60 "idemd v4 to hold every partition" held v4
check_held v4 shop-v3 shop-v2
idemd_stop v4
idem_assert_eq "ledger rows while held (rounds 1-4's payments only)" "$(sum_of unique 1 4)" \
	"$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "claims under shop-v2 while held" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'shop-v2'")"
config shop-v3
idemd_start v5 "$cfg"
idem_wait_done "$group" 120
check_started v5 "$IDEM_TMP/v3.positions"
idemd_stop v5
check_db shop-v3:1-5
idem_check_progress_at_end shop-v3 "$group"
echo "ok: consumer renamed in the configuration only (held, then idemctl rename while running), by idemctl rename after a SIGKILL with Kafka $trailing partitions behind, and back in the configuration only (held): rounds produced=${produced[*]} unique=${unique[*]} (by round); every payment applied once"
