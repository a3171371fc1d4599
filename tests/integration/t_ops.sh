#!/usr/bin/env bash
# idemctl status, verify, lookup and replay --dry-run against the truth of a prepared topic,
# and replay refused past the retention horizon.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config idemd.yaml g-ops payments
cfg=$IDEM_CFG
idem_produce --count 3000 --dup-ratio 0.3 --seed 21
idemd_start a "$cfg"
idem_wait_done g-ops 120
idemd_stop a
ctl() { "$IDEM_BIN/idemctl" -c "$cfg" "$@"; }
# jsonq FILE QUERY: run QUERY with the JSON document of FILE as "j" (jsonb).
jsonq() {
	idem_psql -c "DROP TABLE IF EXISTS jdoc; CREATE TABLE jdoc (j jsonb)"
	idem_psql -c "\\copy jdoc FROM program 'tr -d \"\\n\" < $1' WITH (FORMAT text, DELIMITER E'\\x01')"
	idem_psql -c "SELECT ($2) FROM jdoc"
}

# status: every partition committed and applied to its end.
ctl status
ctl status --json >"$IDEM_TMP/status.json"
idem_assert_eq "partitions in status" 4 "$(grep -c '"partition"' "$IDEM_TMP/status.json")"
idem_assert_eq "status totals" "t" "$(jsonq "$IDEM_TMP/status.json" "SELECT sum((e->>'applied')::int) = $IDEM_UNIQUE AND bool_and((e->>'kafka_committed')::bigint = (e->>'high_watermark')::bigint AND (e->>'database_progress')::bigint = (e->>'high_watermark')::bigint AND (e->>'lag')::int = 0) AND sum((e->>'high_watermark')::int) = $IDEM_PRODUCED FROM jsonb_array_elements(j) e")"

# verify: all in step.
ctl verify
# A database behind what idemd committed (restored, failed over): idemd re-applies the gap at
# the next assignment (exit 4), and verify says how much.
idem_psql -c "UPDATE idem.partition_progress SET next_offset = next_offset - 3 WHERE partition = 2"
rc=0
ctl verify >"$IDEM_TMP/verify.txt" || rc=$?
idem_assert_eq "verify exit status with the database behind" 4 "$rc"
grep -q "^payments  *2 .*DATABASE BEHIND.*(3 message(s))" "$IDEM_TMP/verify.txt" ||
	idem_fail "verify did not name the partition: $(cat "$IDEM_TMP/verify.txt")"
idem_psql -c "UPDATE idem.partition_progress SET next_offset = next_offset + 3 WHERE partition = 2"
# Offsets moved ahead by another client (Kafka's own tools commit no idemd metadata): the
# messages between were skipped, a loss alarm (exit 3). The database is taken 5 back first, so
# that the moved offset is one of the log's (the end).
p2=$(idem_psql -c "SELECT next_offset FROM idem.partition_progress WHERE partition = 2")
idem_psql -c "UPDATE idem.partition_progress SET next_offset = next_offset - 5 WHERE partition = 2"
"$IDEM_BIN/idem-kafkatool" reset --brokers "$IDEM_BROKERS" --group g-ops --topic payments \
	--partition 2 --to-offset "$p2" >/dev/null
rc=0
ctl verify >"$IDEM_TMP/verify.txt" || rc=$?
idem_assert_eq "verify exit status with offsets moved ahead" 3 "$rc"
grep -q "^payments  *2 .*OFFSETS MOVED AHEAD.*(5 message(s))" "$IDEM_TMP/verify.txt" ||
	idem_fail "verify did not name the partition: $(cat "$IDEM_TMP/verify.txt")"
idem_psql -c "UPDATE idem.partition_progress SET next_offset = next_offset + 5 WHERE partition = 2"
ctl verify >/dev/null || idem_fail "verify after the database was put back"
# An offset set past the log's end is no offset of this log (a topic created again keeps no
# offsets of the old one): idemd starts at the database's position, and verify says so (exit 5).
"$IDEM_BIN/idem-kafkatool" reset --brokers "$IDEM_BROKERS" --group g-ops --topic payments \
	--partition 2 --to-offset $((p2 + 5)) >/dev/null 2>&1 ||
	idem_fail "idem-kafkatool would not set an offset past the end"
rc=0
ctl verify >"$IDEM_TMP/verify.txt" || rc=$?
idem_assert_eq "verify exit status with an offset past the log's end" 5 "$rc"
grep -q "^payments  *2 .*COMMITTED BEYOND THE LOG'S END" "$IDEM_TMP/verify.txt" ||
	idem_fail "verify did not name the partition: $(cat "$IDEM_TMP/verify.txt")"
"$IDEM_BIN/idem-kafkatool" reset --brokers "$IDEM_BROKERS" --group g-ops --topic payments \
	--partition 2 --to-offset "$p2" >/dev/null
ctl verify >/dev/null || idem_fail "verify after the offsets were put back"

# lookup: where and when a key was applied, and its result (the balance after it).
key=$(head -1 "$IDEM_TMP/manifest.csv" | cut -d, -f1)
ctl lookup "$key"
ctl lookup "$key" --json >"$IDEM_TMP/lookup.json"
want=$(idem_psql -c "SELECT topic || ' ' || partition || ' ' || \"offset\" || ' ' || result FROM idem.claims_named WHERE business_key = '$key'")
got=$(jsonq "$IDEM_TMP/lookup.json" "j->0->>'topic' || ' ' || (j->0->>'partition') || ' ' || (j->0->>'offset') || ' ' || (j->0->>'result')")
idem_assert_eq "lookup" "$want" "$got"
rc=0
ctl lookup "no-such-payment" >/dev/null 2>&1 || rc=$?
idem_assert_eq "lookup exit status of an unknown key" 3 "$rc"

# replay --dry-run: forget 40 claims (as an over-eager purge would), then compare the dry run's
# counts with the truth computed from the topic itself.
idem_psql -c "CREATE TABLE forgotten AS SELECT business_key FROM idem.processed_messages ORDER BY md5(business_key) LIMIT 40"
idem_psql -c "DELETE FROM idem.processed_messages WHERE business_key IN (SELECT business_key FROM forgotten)"
"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments |
	awk -F'\t' '{print $1 "," $3}' >"$IDEM_TMP/topic.csv"
idem_psql -c "CREATE TABLE topic (partition int, key text)"
idem_psql -c "\\copy topic FROM '$IDEM_TMP/topic.csv' WITH (FORMAT csv)"
truth=$(idem_psql -c "SELECT count(*) || ' ' || (SELECT count(*) FROM (SELECT DISTINCT partition, key FROM topic) d WHERE key IN (SELECT business_key FROM forgotten)) || ' ' || (SELECT count(*) FROM (SELECT DISTINCT partition, key FROM topic) d WHERE key NOT IN (SELECT business_key FROM forgotten)) FROM topic")
ctl replay --topic payments --to-offset 0 --dry-run | tee "$IDEM_TMP/dry.txt"
got=$(sed -n 's/^total: messages=\([0-9]*\) would_apply=\([0-9]*\) already_claimed=\([0-9]*\).*/\1 \2 \3/p' "$IDEM_TMP/dry.txt")
idem_assert_eq "dry run: messages, would apply, already claimed" "$truth" "$got"
# The dry run changed nothing in Kafka.
"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-ops --topic payments |
	grep -q "total committed=$IDEM_PRODUCED " || idem_fail "the dry run moved the group's offsets"

# Past the retention horizon: refused, unless --force.
idem_psql -c "INSERT INTO idem.retention_horizon (consumer, purged_before) VALUES ('payments', now() + interval '1 hour')"
rc=0
ctl replay --topic payments --to-offset 0 --dry-run >/dev/null 2>"$IDEM_TMP/refused.txt" || rc=$?
idem_assert_eq "replay past the horizon" 1 "$rc"
grep -q "retention horizon" "$IDEM_TMP/refused.txt" || idem_fail "refusal does not say why"
ctl replay --topic payments --to-offset 0 --dry-run --force >/dev/null
# A partition range after the horizon is fine.
idem_psql -c "UPDATE idem.retention_horizon SET purged_before = now() - interval '1 hour'"
ctl replay --topic payments --partition 1 --to-offset 0 --dry-run >/dev/null
echo "ok: status, verify, lookup, replay dry run ($got), horizon refusal"
