#!/usr/bin/env bash
# Two idemd instances in one consumer group on the same topic share the work, and still every
# payment is applied once.
#  1. A stream of 10 s: the second instance joins while the first is consuming it and the
#     producer still runs (a rebalance under load).
#  2. A live stream, produced only once both instances own partitions (their /metrics list them,
#     together all 8, none twice): both apply part of it, each exactly the payments claimed in
#     the partitions it owns.
# Who applied what is told by the database: each instance connects with its own
# application_name, and the ledger records the application_name of the session that inserted
# each row.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:8 --config idemd.yaml g-two payments --max 100
port_a=$(idem_free_port)
port_b=$(idem_free_port)
IDEM_CONNINFO="$IDEM_CONNINFO application_name=idemd-a" \
	idem_write_config "$IDEM_TMP/a.yaml" g-two payments --max 100 --metrics "127.0.0.1:$port_a"
IDEM_CONNINFO="$IDEM_CONNINFO application_name=idemd-b" \
	idem_write_config "$IDEM_TMP/b.yaml" g-two payments --max 100 --metrics "127.0.0.1:$port_b"
idem_psql -c "ALTER TABLE ledger ADD COLUMN applied_by text DEFAULT current_setting('application_name')"

# owned PORT: the payments partitions the instance serving /metrics on PORT owns, one a line.
owned() {
	curl -fsS --max-time 5 "http://127.0.0.1:$1/metrics" 2>/dev/null |
		sed -n 's/^idemd_partition_halted{topic="payments",partition="\([0-9]*\)"}.*/\1/p' | sort -n
}
# both_own: each instance owns partitions, and together they own all 8, none twice.
both_own() {
	local a b
	a=$(owned "$port_a") b=$(owned "$port_b")
	[ -n "$a" ] && [ -n "$b" ] &&
		[ "$(printf '%s\n%s\n' "$a" "$b" | sort -n | tr '\n' ' ')" = "0 1 2 3 4 5 6 7 " ]
}

# ---- 1. the second instance joining while the first consumes ----------------------------------
# The stream runs until 3 s after both instances own partitions (idem_produce_stop), at most 10
# minutes: the first join takes about 3 s and the second rebalance session.timeout.ms - 1 s on
# the embedded Kafka, more under ASan or on a busy machine (a 10 s stream ran out once in CI).
idem_produce_bg --count $((2000 * 600)) --dup-ratio 0.3 --seed 3 --rate 2000
idemd_start a "$IDEM_TMP/a.yaml"
idem_wait_until 60 "first instance applies something" idem_claims_above 0
idemd_start b "$IDEM_TMP/b.yaml"
idem_wait_until 60 "both instances own partitions" both_own
claims_at_join=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
idem_producer_running ||
	idem_fail "the stream ended before the second instance got partitions: no rebalance under load"
sleep 3
idem_produce_stop 60
cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/manifest-backlog.csv"
p1=$IDEM_PRODUCED u1=$IDEM_UNIQUE
idem_wait_done g-two 240

# ---- 2. a live stream while both own partitions ---------------------------------------------
parts_a=$(owned "$port_a" | tr '\n' ',')
parts_a=${parts_a%,}
parts_b=$(owned "$port_b" | tr '\n' ',')
parts_b=${parts_b%,}
idem_log "idemd a owns partitions $parts_a, idemd b owns $parts_b"
idem_produce_bg --count 6000 --dup-ratio 0.3 --seed 4 --rate 1500
idem_produce_wait 60
idem_wait_done g-two 120
# Still the same owners: the stream was shared as logged above.
idem_assert_eq "partitions of idemd a after the stream" "$parts_a" "$(owned "$port_a" | paste -sd,)"
idem_assert_eq "partitions of idemd b after the stream" "$parts_b" "$(owned "$port_b" | paste -sd,)"
idemd_stop a
idemd_stop b

cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/manifest-live.csv"
cat "$IDEM_TMP/manifest-backlog.csv" >>"$IDEM_TMP/manifest.csv"
IDEM_PRODUCED=$((p1 + IDEM_PRODUCED)) IDEM_UNIQUE=$((u1 + IDEM_UNIQUE))
idem_check_exactly_once payments

# Who applied what: every ledger row by one of the two, both in the first and in the live stream,
# and every payment of the stream by the owner of the partition of its claim.
idem_psql >/dev/null <<SQL
CREATE TABLE live (payment_id text PRIMARY KEY, account text, amount bigint);
\\copy live FROM '$IDEM_TMP/manifest-live.csv' WITH (FORMAT csv)
SQL
idem_assert_eq "ledger rows applied by neither instance" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ledger WHERE applied_by IS DISTINCT FROM 'idemd-a' AND applied_by IS DISTINCT FROM 'idemd-b'")"
backlog_b=$(idem_psql -c "SELECT count(*) FROM ledger l WHERE applied_by = 'idemd-b' AND NOT EXISTS (SELECT 1 FROM live v WHERE v.payment_id = l.payment_id)")
[ "$backlog_b" -gt 0 ] || idem_fail "the second instance applied nothing of the first stream"
live=$(idem_psql -c "SELECT count(*) FILTER (WHERE applied_by = 'idemd-a') || ' ' || count(*) FILTER (WHERE applied_by = 'idemd-b') FROM ledger l JOIN live v USING (payment_id)")
read -r live_a live_b <<<"$live"
if [ "$live_a" = 0 ] || [ "$live_b" = 0 ]; then
	idem_fail "the live stream was not shared: idemd a applied $live_a of its payments, idemd b $live_b"
fi
idem_assert_eq "stream payments applied by an instance not owning their claim's partition" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ledger l JOIN live v USING (payment_id) JOIN idem.claims_named p ON p.consumer = 'payments' AND p.business_key = l.payment_id WHERE l.applied_by <> CASE WHEN p.partition = ANY ('{$parts_a}'::int[]) THEN 'idemd-a' WHEN p.partition = ANY ('{$parts_b}'::int[]) THEN 'idemd-b' END")"
echo "ok: two instances; first stream: $claims_at_join claimed when b joined, b applied $backlog_b of $u1; live stream: a applied $live_a, b $live_b; $(idem_counts payments)"
