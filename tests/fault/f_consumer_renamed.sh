#!/usr/bin/env bash
# Fault: an operator renames a route's consumer (routes[].consumer, the claims namespace) and
# keeps the consumer group (kafka.group_id). The new name has no claims and no progress rows: the
# only record of what was applied under the old name is Kafka's committed offset, committed by
# idemd with metadata naming the old consumer, and the old consumer's progress rows. idemd must
# continue after what the old name applied and never apply it again under the new one.
#
# Eight partitions, JSON payments with 30% upstream re-sends, the payments handler (its ledger
# has no unique constraint: a payment applied twice is two rows). Four rounds of payments, each
# from its own seed (ids pay-SEED-i: a round's re-sends repeat only that round's payments):
#   1. shop-v1 applies 5,000 messages; Kafka's committed offsets reach the end; SIGTERM.
#   2. Renamed to shop-v2; 2,000 more messages are produced while idemd is down; shop-v2 must
#      start every partition exactly where shop-v1 stopped (case=renamed) and apply only them.
#   3. shop-v2 applies 2,000 more while every OffsetCommit fails (injected in the Kafka mock), so
#      Kafka's committed offsets trail the database by the whole round; once the database holds
#      all of it, SIGKILL.
#   4. Renamed to shop-v3; 1,000 more. Kafka's committed offset (shop-v2's, from round 2) is
#      behind shop-v2's database position: shop-v3 must start at the database position (the
#      greater of the two), not re-apply round 3.
#   5. Renamed to shop-v4 while every OffsetCommit fails from its start: it applies 1,000 more
#      and is SIGKILLed without a single commit in Kafka (which still names shop-v3).
#   6. Renamed to shop-v5; 500 more. Kafka names shop-v3, but the group got further under
#      shop-v4 (its progress rows, recorded with the group): shop-v5 must start at shop-v4's
#      database positions, not re-apply round 5.
# Verdict from the database after rounds 1, 2, 4, 5 and 6: every payment has exactly one ledger row
# and the right balance; each consumer's claims are exactly its rounds' payments (none of an
# earlier name's payments claimed under a later one); each consumer's progress counters consumed
# (exactly the messages of its rounds: nothing was read twice) and applied add up; the renamed
# consumers' progress rows reached the end (shop-v2 after round 2, shop-v3 after round 4); each
# renamed start logged "consumer renamed", was counted in idemd_partition_starts_total{case=
# "renamed"}, and began at the previous consumer's database position.
#
# Why it fails on the previous code (2f415a8): a consumer without progress rows whose group
# offset idemd had committed was taken for a database that lost everything ("database behind"),
# and started from auto.offset.reset (the log's start): after the first rename shop-v2 applied
# the 5,000 messages of round 1 again (all 3,531 of its payments got a second ledger row), and
# the check after round 2 fails ("payments applied twice ...: expected '0', got '3531'").
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

# check_renamed NAME FROM TO POSITIONS_FILE: idemd NAME's run renamed consumer FROM to TO: the
# log says so for each of the 8 partitions, each started at FROM's database position (the lines
# of POSITIONS_FILE, read before the run), and its metrics count 8 renamed starts.
check_renamed() {
	local name=$1 from=$2 to=$3 log=$IDEM_TMP/idemd-$1.log n
	n=$(grep -c "consumer renamed: topic=payments .* by idemd for consumer $from .* not for this route's consumer $to " "$log" || true)
	idem_assert_eq "'consumer renamed' ($from -> $to) lines in idemd $name's log" 8 "$n"
	idem_assert_eq "assignments with case=renamed in idemd $name's log" 8 \
		"$(grep -c 'assigned topic=payments .* case=renamed ' "$log" || true)"
	idem_assert_eq "$to's starts (partition start) = $from's database positions" \
		"$(cat "$4")" "$(starts "$name")"
	n=$(curl -fsS "$metrics_url" | awk '$1 == "idemd_partition_starts_total{case=\"renamed\"}" { print $2 }')
	idem_assert_eq "idemd_partition_starts_total{case=\"renamed\"} of idemd $name" 8 "$n"
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
		n=$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE consumer = '$c'")
		claims=$((claims + n))
		idem_assert_eq "$c: claims of payments of other rounds than $first..$last (applied again under another name)" 0 \
			"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages p JOIN expected e ON e.payment_id = p.business_key WHERE p.consumer = '$c' AND e.round NOT BETWEEN $first AND $last")"
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

# ---- 2. renamed to shop-v2 while stopped; round 2 waits in Kafka --------------------------------
config shop-v2
round 262 2000
idemd_start v2 "$cfg"
idem_wait_done "$group" 120
check_db shop-v1:1-1 shop-v2:2-2
idem_check_progress_at_end shop-v2 "$group"
check_renamed v2 shop-v1 shop-v2 "$IDEM_TMP/v1.positions"
idem_assert_eq "shop-v1's progress rows after the rename (untouched)" "$(cat "$IDEM_TMP/v1.positions")" \
	"$(positions shop-v1)"

# ---- 3. shop-v2 applies round 3 while Kafka refuses every offset commit; then SIGKILL -----------
# A permanent commit error (librdkafka neither retries it nor rejoins the group): the commits
# fail, idemd goes on applying and tries again every interval.
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
idemd_kill9 v2
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
check_db shop-v1:1-1 shop-v2:2-3

# ---- 4. renamed to shop-v3 while Kafka trails the database; round 4 ----------------------------
config shop-v3
round 264 1000
idemd_start v3 "$cfg"
idem_wait_done "$group" 120
check_renamed v3 shop-v2 shop-v3 "$IDEM_TMP/v2.positions"
idemd_stop v3
check_db shop-v1:1-1 shop-v2:2-3 shop-v3:4-4
idem_check_progress_at_end shop-v3 "$group"
idem_assert_eq "shop-v2's progress rows after the second rename (untouched)" \
	"$(cat "$IDEM_TMP/v2.positions")" "$(positions shop-v2)"
positions shop-v3 >"$IDEM_TMP/v3.positions"

# ---- 5. renamed to shop-v4, which never gets a commit into Kafka; SIGKILL ----------------------
config shop-v4
idem_kafka_ctl push_errors OffsetCommit 1000000 OFFSET_METADATA_TOO_LARGE >/dev/null
kafka_offsets >"$IDEM_TMP/before-round5.kafka"
round 265 1000
idemd_start v4 "$cfg"
at_end() { # CONSUMER: its database positions reached every partition's high watermark
	[ "$(kafka_offsets | awk '{ print $1, $3 }')" = "$(positions "$1")" ]
}
idem_wait_until 120 "shop-v4 applied round 5 (database positions at the high watermarks)" at_end shop-v4
check_renamed v4 shop-v3 shop-v4 "$IDEM_TMP/v3.positions"
kafka_offsets >"$IDEM_TMP/round5.kafka"
positions shop-v4 >"$IDEM_TMP/v4.positions"
idemd_kill9 v4
idem_kafka_ctl clear_errors OffsetCommit >/dev/null
idem_assert_eq "Kafka's committed offsets during round 5 (shop-v3's: every commit of shop-v4 refused)" \
	"$(awk '{ print $1, $2 }' "$IDEM_TMP/before-round5.kafka")" \
	"$(awk '{ print $1, $2 }' "$IDEM_TMP/round5.kafka")"
check_db shop-v1:1-1 shop-v2:2-3 shop-v3:4-4 shop-v4:5-5

# ---- 6. renamed to shop-v5: Kafka names shop-v3, the group got further under shop-v4 ------------
config shop-v5
round 266 500
idemd_start v5 "$cfg"
idem_wait_done "$group" 120
check_renamed v5 shop-v3 shop-v5 "$IDEM_TMP/v4.positions"
idemd_stop v5
check_db shop-v1:1-1 shop-v2:2-3 shop-v3:4-4 shop-v4:5-5 shop-v5:6-6
idem_check_progress_at_end shop-v5 "$group"
echo "ok: consumer renamed four times (shop-v1 -> shop-v2 after SIGTERM, shop-v2 -> shop-v3 after SIGKILL with Kafka $trailing partitions behind, shop-v4 never committed in Kafka -> shop-v5): rounds produced=${produced[*]} unique=${unique[*]} (by round); every payment applied once, under the name it arrived under"
