#!/usr/bin/env bash
# idemctl rename OLD NEW moves a claims namespace in one transaction:
# 1. idemd applies payments under consumer pay (a share re-sent upstream, one undecodable message
#    quarantined); stopped, pay is given a retention horizon.
# 2. Refused, with the database unchanged (a digest of every consumer-keyed table before and
#    after): within 60 s of pay's last progress (exit 1, the seconds named); the same name, an
#    invalid name (exit 2); an old name with nothing (exit 1).
# 3. With pay's progress backdated, the rename moves everything: no row of pay is left, and the
#    tables are exactly what they were with pay written pay2 (every column of every claim,
#    progress row, quarantine row and the horizon); the counts printed; warnings for a
#    configuration still naming pay.
# 4. idemd under pay2 starts every partition at the database's position (case=database), applies
#    new payments and finds every re-sent old payment claimed: each payment applied exactly once,
#    nothing claimed under pay.
# 5. Merge: a consumer legacy with rows of its own (keys pay2 claimed and others, a partition
#    further on, one behind, one pay2 has none of, one in another Kafka cluster, a quarantined
#    message pay2 has too, a later horizon) renamed into pay2 (--json): the counts, the further
#    position of the same log kept with its pending replay, the other cluster's not, the earlier
#    first start, counters summed and still adding up, pay2's claims and quarantine row kept. One
#    of legacy's partitions advanced just now: refused, then done with --force.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-ren
idem_fixture --brokers 1 --topics payments:4 --config idemd.yaml "$group" pay
cfg=$IDEM_CFG

# ctl EXPECTED_RC PATTERN ARGS...: idemctl rename ARGS exits EXPECTED_RC and says PATTERN
# (stdout and stderr in $IDEM_TMP/out.txt).
ctl() {
	local want=$1 pattern=$2 rc=0
	shift 2
	"$IDEM_BIN/idemctl" -q -c "$cfg" rename "$@" >"$IDEM_TMP/out.txt" 2>&1 || rc=$?
	idem_assert_eq "exit status of rename $*" "$want" "$rc"
	grep -q -- "$pattern" "$IDEM_TMP/out.txt" ||
		idem_fail "rename $*: expected '$pattern' in: $(cat "$IDEM_TMP/out.txt")"
}

# digest [FROM TO]: md5 of every row of the consumer-keyed tables, all columns, consumer FROM
# written as TO.
digest() {
	idem_psql -c "SELECT md5(string_agg(r, E'\\n' ORDER BY r)) FROM (SELECT tb || ' ' || jsonb_set(j, '{consumer}', to_jsonb(CASE WHEN j->>'consumer' = '${1:-}' THEN '${2:-}' ELSE j->>'consumer' END))::text AS r FROM (SELECT 'c' AS tb, to_jsonb(t) AS j FROM idem.claims_named t UNION ALL SELECT 'p', to_jsonb(t) FROM idem.partition_progress t UNION ALL SELECT 'q', to_jsonb(t) FROM idem.quarantine t UNION ALL SELECT 'h', to_jsonb(t) FROM idem.retention_horizon t) s) x"
}

# rows CONSUMER: "claims progress_rows quarantine_rows horizons" of CONSUMER.
rows() {
	idem_psql -c "SELECT (SELECT count(*) FROM idem.claims_named WHERE consumer = '$1') || ' ' || (SELECT count(*) FROM idem.partition_progress WHERE consumer = '$1') || ' ' || (SELECT count(*) FROM idem.quarantine WHERE consumer = '$1') || ' ' || (SELECT count(*) FROM idem.retention_horizon WHERE consumer = '$1')"
}

# positions CONSUMER: "partition:next_offset" of CONSUMER's progress rows.
positions() {
	idem_psql -c "SELECT string_agg(partition || ':' || next_offset, ' ' ORDER BY partition) FROM idem.partition_progress WHERE consumer = '$1' AND topic = 'payments'"
}

# ---- 1. pay applies round 1 ---------------------------------------------------------------------
idem_produce --count 600 --dup-ratio 0.3 --seed 71
cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/round-1.csv"
p1=$IDEM_PRODUCED
idem_produce_one --partition 0 --value 'not json'
idemd_start a "$cfg"
idem_wait_done "$group" 60
idemd_stop a
u1=$(wc -l <"$IDEM_TMP/round-1.csv")
idem_assert_eq "pay: claims, progress rows, quarantine rows, horizons" "$u1 4 1 0" "$(rows pay)"
idem_psql -c "INSERT INTO idem.retention_horizon VALUES ('pay', now() - interval '40 days')"
pay_positions=$(positions pay)

# ---- 2. refusals leave the database as it was ---------------------------------------------------
d0=$(digest)
ctl 1 "refused: an idemd instance may still be running under 'pay': last progress [0-9]* s ago; stop every instance that runs the old name, then run this again, or --force" pay pay2
idem_assert_eq "tables after the refusal within 60 s" "$d0" "$(digest)"
ctl 2 "refused: the old and the new name are both 'pay'" pay pay
ctl 2 "refused: invalid consumer name 'pay 2'" pay 'pay 2'
ctl 2 "refused: invalid consumer name 'p/y'" 'p/y' pay2
ctl 2 "usage: idemctl rename OLD NEW" pay
ctl 1 "refused: nothing to rename: consumer 'ghost' has no claims, no progress rows and no quarantine rows" ghost pay2
idem_assert_eq "tables after the refusals" "$d0" "$(digest)"

# ---- 3. the rename, pay's last progress two minutes ago -----------------------------------------
idem_psql -c "UPDATE idem.partition_progress SET updated_at = updated_at - interval '2 minutes' WHERE consumer = 'pay'"
d1=$(digest)
ctl 0 "^renamed consumer pay to pay2: claims_moved=$u1 claims_held_by_new=0 positions_moved=4 positions_merged=0 quarantine_moved=1 quarantine_held_by_new=0 horizon_moved=yes$" pay pay2
grep -q "^next: set routes\[\].consumer to pay2 in the configuration (if not yet) and start idemd$" "$IDEM_TMP/out.txt" ||
	idem_fail "no next step in: $(cat "$IDEM_TMP/out.txt")"
grep -q "warning: route 'payments' of '$cfg' still has consumer 'pay': set it to 'pay2'" "$IDEM_TMP/out.txt" ||
	idem_fail "no warning for the route still named pay: $(cat "$IDEM_TMP/out.txt")"
grep -q "warning: no route of '$cfg' has consumer 'pay2'" "$IDEM_TMP/out.txt" ||
	idem_fail "no warning for pay2 missing: $(cat "$IDEM_TMP/out.txt")"
idem_assert_eq "pay after the rename" "0 0 0 0" "$(rows pay)"
idem_assert_eq "pay2 after the rename" "$u1 4 1 1" "$(rows pay2)"
idem_assert_eq "pay2's positions (pay's)" "$pay_positions" "$(positions pay2)"
idem_assert_eq "every row as it was, pay written pay2" "$d1" "$(digest pay2 pay)"
ctl 1 "nothing to rename: consumer 'pay'" pay pay2

# ---- 4. idemd under pay2: new payments and every old one re-sent --------------------------------
idem_write_config "$cfg" "$group" pay2
idem_produce --count 600 --dup-ratio 0.3 --seed 71
cmp -s "$IDEM_TMP/manifest.csv" "$IDEM_TMP/round-1.csv" || idem_fail "seed 71 did not re-send round 1"
resent=$IDEM_PRODUCED
idem_produce --count 400 --dup-ratio 0.3 --seed 72
cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/round-2.csv"
p2=$IDEM_PRODUCED
u2=$(wc -l <"$IDEM_TMP/round-2.csv")
idemd_start b "$cfg"
idem_wait_done "$group" 60
idemd_stop b
idem_assert_eq "partitions started at the database's position (case=database)" 4 \
	"$(grep -c 'assigned topic=payments .* case=database ' "$IDEM_TMP/idemd-b.log" || true)"
cat "$IDEM_TMP/round-1.csv" "$IDEM_TMP/round-2.csv" >"$IDEM_TMP/expected.csv"
idem_psql -c "CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
idem_psql -c "\\copy expected FROM '$IDEM_TMP/expected.csv' WITH (FORMAT csv)"
idem_assert_eq "ledger rows (each payment once)" "$((u1 + u2))" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "payments applied twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "payments missing" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')"
idem_assert_eq "accounts with a wrong balance" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
idem_assert_eq "claims under pay" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'pay'")"
idem_assert_eq "progress and quarantine rows under pay" 0 \
	"$(idem_psql -c "SELECT (SELECT count(*) FROM idem.partition_progress WHERE consumer = 'pay') + (SELECT count(*) FROM idem.quarantine WHERE consumer = 'pay')")"
idem_assert_eq "claims under pay2" "$((u1 + u2))" \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'pay2'")"
idem_assert_eq "pay2: applied, consumed (both names' counters)" \
	"$((u1 + u2)) $((p1 + 1 + resent + p2))" \
	"$(idem_psql -c "SELECT sum(applied) || ' ' || sum(consumed) FROM idem.partition_progress WHERE consumer = 'pay2'")"
[ "$(idem_psql -c "SELECT sum(dup_upstream) FROM idem.partition_progress WHERE consumer = 'pay2'")" -ge "$resent" ] ||
	idem_fail "fewer upstream duplicates than old payments re-sent: $(idem_counts_full pay2)"
idem_check_accounting pay2
idem_check_progress_at_end pay2 "$group"

# ---- 5. merge: legacy into pay2, which has rows of its own --------------------------------------
read -r n0 n1 n2 cluster <<<"$(idem_psql -F ' ' -c "SELECT max(next_offset) FILTER (WHERE partition = 0), max(next_offset) FILTER (WHERE partition = 1), max(next_offset) FILTER (WHERE partition = 2), max(kafka_cluster) FROM idem.partition_progress WHERE consumer = 'pay2'")"
[ -n "$cluster" ] || idem_fail "pay2's progress rows name no Kafka cluster"
bad_offset=$(idem_psql -c "SELECT \"offset\" FROM idem.quarantine WHERE consumer = 'pay2'")
held=$(idem_psql -c "SELECT string_agg(business_key, ' ' ORDER BY business_key) FROM (SELECT business_key FROM idem.claims_named WHERE consumer = 'pay2' ORDER BY business_key LIMIT 3) k")
held_before=$(idem_psql -c "SELECT string_agg(business_key || ':' || partition || ':' || \"offset\", ' ' ORDER BY business_key) FROM idem.claims_named WHERE consumer = 'pay2' AND business_key = ANY (string_to_array('$held', ' '))")
q_id=$(idem_psql -c "SELECT id FROM idem.quarantine WHERE consumer = 'pay2'")
idem_psql -c "UPDATE idem.partition_progress SET first_offset = 5 WHERE consumer = 'pay2' AND partition = 0"
read -r consumed0 quarantined0 <<<"$(idem_psql -F ' ' -c "SELECT sum(consumed), sum(quarantined) FROM idem.partition_progress WHERE consumer = 'pay2'")"
idem_psql <<SQL
INSERT INTO idem.processed_messages (consumer_id, business_key, topic_id, partition, "offset")
SELECT idem.claim_consumer_id('legacy'), k, idem.claim_topic_id('payments'), 3, 1
FROM unnest(string_to_array('$held', ' ')) AS k
UNION ALL VALUES (idem.claim_consumer_id('legacy'), 'legacy-1', idem.claim_topic_id('payments'), 0, 7),
    (idem.claim_consumer_id('legacy'), 'legacy-2', idem.claim_topic_id('payments'), 0, 8);
INSERT INTO idem.partition_progress (consumer, topic, partition, next_offset, consumed, applied,
    duplicates, dup_upstream, quarantined, kafka_cluster, first_offset, group_id, replay_to,
    updated_at) VALUES
    ('legacy', 'payments', 0, $n0 + 100, 10, 7, 2, 2, 1, '$cluster', 2, 'g-legacy', $n0 + 150, now()),
    ('legacy', 'payments', 1, $n1 - 1, 5, 4, 0, 0, 1, '$cluster', 0, 'g-legacy', 999999, now() - interval '1 hour'),
    ('legacy', 'payments', 2, $n2 + 1000, 0, 0, 0, 0, 0, 'other-cluster', 0, 'g-legacy', NULL, now() - interval '1 hour'),
    ('legacy', 'payments', 9, 42, 3, 3, 0, 0, 0, '$cluster', 0, 'g-legacy', NULL, now() - interval '1 hour');
INSERT INTO idem.quarantine (consumer, topic, partition, "offset", reason) VALUES
    ('legacy', 'payments', 0, $bad_offset, 'legacy failure'),
    ('legacy', 'payments', 1, $n1 - 2, 'legacy failure');
INSERT INTO idem.retention_horizon VALUES ('legacy', now() - interval '1 day');
SQL
idem_check_accounting legacy
# One of legacy's partitions advanced just now: refused, unless --force.
d2=$(digest)
ctl 1 "refused: an idemd instance may still be running under 'legacy': last progress [0-9]* s ago" legacy pay2
idem_assert_eq "tables after the refusal within 60 s" "$d2" "$(digest)"
"$IDEM_BIN/idemctl" -q -c "$cfg" rename legacy pay2 --json --force >"$IDEM_TMP/merge.json"
idem_assert_eq "merge counts (--json)" "2 3 1 3 1 1 true" \
	"$(jq -r '"\(.claims_moved) \(.claims_held_by_new) \(.positions_moved) \(.positions_merged) \(.quarantine_moved) \(.quarantine_held_by_new) \(.horizon_moved)"' "$IDEM_TMP/merge.json")"
idem_assert_eq "legacy after the merge" "0 0 0 0" "$(rows legacy)"
idem_assert_eq "pay2 after the merge: claims, progress rows, quarantine rows, horizons" \
	"$((u1 + u2 + 2)) 5 2 1" "$(rows pay2)"
idem_assert_eq "partition 0: legacy's further position, its pending replay, the earlier first start, its group" \
	"$((n0 + 100)) $((n0 + 150)) 2 g-legacy $cluster" \
	"$(idem_psql -F ' ' -c "SELECT next_offset, replay_to, first_offset, group_id, kafka_cluster FROM idem.partition_progress WHERE consumer = 'pay2' AND partition = 0")"
idem_assert_eq "partition 1: pay2's further position, no replay of legacy's" "$n1 -" \
	"$(idem_psql -F ' ' -c "SELECT next_offset, coalesce(replay_to::text, '-') FROM idem.partition_progress WHERE consumer = 'pay2' AND partition = 1")"
idem_assert_eq "partition 2: pay2's position and cluster (legacy's was another cluster's)" "$n2 $cluster" \
	"$(idem_psql -F ' ' -c "SELECT next_offset, kafka_cluster FROM idem.partition_progress WHERE consumer = 'pay2' AND partition = 2")"
idem_assert_eq "partition 9: legacy's row moved" "42 3 g-legacy" \
	"$(idem_psql -F ' ' -c "SELECT next_offset, consumed, group_id FROM idem.partition_progress WHERE consumer = 'pay2' AND partition = 9")"
idem_assert_eq "pay2: consumed and quarantined summed, the message both quarantined counted once" \
	"$((consumed0 + 18 - 1)) $((quarantined0 + 2 - 1))" \
	"$(idem_psql -F ' ' -c "SELECT sum(consumed), sum(quarantined) FROM idem.partition_progress WHERE consumer = 'pay2'")"
idem_check_accounting pay2
idem_assert_eq "claims pay2 held: pay2's kept" "$held_before" \
	"$(idem_psql -c "SELECT string_agg(business_key || ':' || partition || ':' || \"offset\", ' ' ORDER BY business_key) FROM idem.claims_named WHERE consumer = 'pay2' AND business_key = ANY (string_to_array('$held', ' '))")"
idem_assert_eq "legacy's own claims moved" "legacy-1:7 legacy-2:8" \
	"$(idem_psql -c "SELECT string_agg(business_key || ':' || \"offset\", ' ' ORDER BY business_key) FROM idem.claims_named WHERE consumer = 'pay2' AND business_key LIKE 'legacy-%'")"
idem_assert_eq "quarantine: pay2's row of the message both have kept, legacy's other moved" \
	"$q_id|not-legacy 1|legacy failure" \
	"$(idem_psql -c "SELECT string_agg(CASE WHEN partition = 0 THEN id::text || '|' || CASE WHEN reason = 'legacy failure' THEN 'legacy' ELSE 'not-legacy' END ELSE partition || '|' || reason END, ' ' ORDER BY partition) FROM idem.quarantine WHERE consumer = 'pay2'")"
idem_assert_eq "pay2's horizon: legacy's, the later" t \
	"$(idem_psql -c "SELECT purged_before > now() - interval '2 days' FROM idem.retention_horizon WHERE consumer = 'pay2'")"
echo "ok: rename refused within 60 s and for bad names with nothing changed; pay -> pay2 moved $u1 claims, 4 positions, 1 quarantined message and the horizon exactly; pay2 then applied $u2 new payments and found $resent re-sends claimed; legacy merged into pay2 by the merge rules"
