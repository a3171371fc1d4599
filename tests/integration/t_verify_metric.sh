#!/usr/bin/env bash
# Kafka's committed offset beyond the database, for its two reasons, as idemctl verify and idemd
# tell them apart (ARCHITECTURE.md "When the database goes back"):
#  - partition 1: the database is 7 offsets behind what idemd committed (a database restored
#    from an older backup): verify says DATABASE BEHIND, and idemd re-reads the 7 by itself
#    (they were applied, so they are duplicates now), counts them in partition_progress.reapplied
#    and idemd_reapplied_total;
#  - partition 2: an operator moved the group's offset 7 ahead with Kafka's own tools (no idemd
#    metadata): verify says OFFSETS MOVED AHEAD (the loss alarm, exit 3), idemd honours the skip
#    and logs it, the 7 messages are never applied, and idemd_partition_kafka_ahead_messages
#    (the IdemdVerifyLossAlarm alert) says 7 there and 0 elsewhere, as verify --json did.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

command -v python3 >/dev/null || idem_fail "python3 is not installed"
idem_fixture --topics payments:4
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-verify payments --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
url=http://127.0.0.1:$port
ctl() { "$IDEM_BIN/idemctl" -c "$cfg" "$@"; }
# gauges FILE: "PARTITION VALUE" per line, of idemd_partition_kafka_ahead_messages, sorted.
gauges() {
	sed -n 's/^idemd_partition_kafka_ahead_messages{topic="payments",partition="\([0-9]*\)"} \([0-9]*\)$/\1 \2/p' "$1" | sort
}
# counter FILE NAME: the value of counter NAME.
counter() { sed -n "s/^$2 \([0-9]*\)$/\1/p" "$1"; }
next_offset() {
	idem_psql -c "SELECT next_offset FROM idem.partition_progress WHERE partition = $1"
}

idem_produce --count 2000 --dup-ratio 0.2 --seed 41
idemd_start a "$cfg"
idem_wait_done g-verify 120
curl -fsS "$url/metrics" >"$IDEM_TMP/first.prom"
idem_assert_eq "gauges of a first start" "0 0|1 0|2 0|3 0" "$(gauges "$IDEM_TMP/first.prom" | paste -sd '|')"
idemd_stop a
ctl verify >/dev/null || idem_fail "verify after a clean run"
applied=$(idem_psql -c 'SELECT count(*) FROM ledger')

# 400 more payments, all new, while idemd is stopped.
"$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic payments --count 400 \
	--dup-ratio 0 --seed 42 --accounts 50 --manifest "$IDEM_TMP/more.csv" >/dev/null
p1=$(next_offset 1)
p2=$(next_offset 2)
idem_psql -c "UPDATE idem.partition_progress SET next_offset = next_offset - 7 WHERE partition = 1"
"$IDEM_BIN/idem-kafkatool" reset --brokers "$IDEM_BROKERS" --group g-verify --topic payments \
	--partition 2 --to-offset $((p2 + 7)) >/dev/null
rc=0
ctl verify >"$IDEM_TMP/verify.txt" || rc=$?
cat "$IDEM_TMP/verify.txt" >&2
idem_assert_eq "verify exit status (a skip is a loss alarm, it wins over behind)" 3 "$rc"
grep -q "^payments  *1 .*DATABASE BEHIND.*(7 message(s))" "$IDEM_TMP/verify.txt" ||
	idem_fail "verify did not say partition 1's database is behind"
grep -q "^payments  *2 .*OFFSETS MOVED AHEAD.*(7 message(s))" "$IDEM_TMP/verify.txt" ||
	idem_fail "verify did not say partition 2's offsets were moved ahead"
ctl verify --json >"$IDEM_TMP/verify.json" || true
want=$(python3 -c '
import json, sys
for p in sorted(json.load(open(sys.argv[1])), key=lambda p: p["partition"]):
    ahead = (p["kafka_committed"] or 0) - max(p["database_progress"] or 0, 0)
    print(p["partition"], ahead if p["state"] == "kafka_ahead" else 0, p["state"])
' "$IDEM_TMP/verify.json" | paste -sd '|')
idem_assert_eq "verify --json" "0 0 ok|1 0 database_behind|2 7 kafka_ahead|3 0 ok" "$want"

idemd_start b "$cfg"
idem_wait_done g-verify 120
curl -fsS "$url/metrics" >"$IDEM_TMP/second.prom"
idemd_stop b
idem_assert_eq "gauges: the skip on partition 2 only" "0 0|1 0|2 7|3 0" \
	"$(gauges "$IDEM_TMP/second.prom" | paste -sd '|')"
idem_assert_eq "idemd_database_behind_total" 1 \
	"$(counter "$IDEM_TMP/second.prom" idemd_database_behind_total)"
idem_assert_eq "idemd_reapplied_total" 7 "$(counter "$IDEM_TMP/second.prom" idemd_reapplied_total)"

# Partition 1: the 7 read again (duplicates of their own claims now), counted, gap closed.
idem_assert_eq "partition 1: reapplied, gap closed" "7 true" \
	"$(idem_psql -c "SELECT reapplied || ' ' || (reapply_to IS NULL) FROM idem.partition_progress WHERE partition = 1")"
idem_assert_eq "partition 1: nothing re-read was applied twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
[ "$(next_offset 1)" -gt "$p1" ] || idem_fail "partition 1 did not go past where it was"
# Partition 2: the 7 skipped messages were never applied, everything else was.
"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments --partition 2 |
	awk -F'\t' -v from="$p2" -v to=$((p2 + 7)) '$2 >= from && $2 < to { print $3 }' \
		>"$IDEM_TMP/skipped.txt"
idem_assert_eq "skipped messages" 7 "$(wc -l <"$IDEM_TMP/skipped.txt")"
idem_psql -c "CREATE TABLE skipped (payment_id text)"
idem_psql -c "\\copy skipped FROM '$IDEM_TMP/skipped.txt'"
idem_assert_eq "skipped messages applied" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN skipped USING (payment_id)')"
idem_assert_eq "payments applied" "$((applied + 400 - 7))" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
grep -q "offsets moved ahead by another client: topic=payments partition=2 .*honoured" \
	"$IDEM_TMP/idemd-b.log" || idem_fail "the skip was not logged"
grep -q "database behind: topic=payments partition=1 " "$IDEM_TMP/idemd-b.log" ||
	idem_fail "the database behind was not logged"
ctl verify >/dev/null || idem_fail "verify after idemd caught up"
echo "ok: verify and idemd tell a database behind (re-read 7) from a skip (honoured 7): $want"
