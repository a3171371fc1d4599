#!/usr/bin/env bash
# The batch transaction's lookups by business key stay index probes on a table the planner knows
# nothing about: 200,000 claims already there and never analyzed (autovacuum off on the claims
# table, as before autovacuum first gets to a fresh install), then a stream with upstream
# duplicates (their claims are looked up) and a handler whose results are stored. Postgres's own
# counters must show the primary key read a few entries per message, not every claim of the
# consumer per transaction (which the planner chose for a plain join on such a table:
# sql/0005_key_lookups.sql). Counts, not times, read once idemd's sessions are gone (a backend
# adds what it counted as it exits) and at least what was certainly read (each stored result,
# each duplicate looked up), so that counts not yet in cannot pass. Exactly once, as always.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

history=200000
idem_fixture --topics payments:2 --config idemd.yaml g-lookups payments
cfg=$IDEM_CFG
idem_psql -c "ALTER TABLE idem.processed_messages SET (autovacuum_enabled = false)"
idem_psql -c "INSERT INTO idem.processed_messages (consumer, business_key, topic, partition, \"offset\", payload_hash) SELECT 'payments', 'hist-' || g, 'history', 0, g, sha256(g::text::bytea) FROM generate_series(1, $history) g"
idem_assert_eq "claims table never analyzed" "-1" \
	"$(idem_psql -c "SELECT reltuples FROM pg_class WHERE oid = 'idem.processed_messages'::regclass")"
# The statistics of idemd's sessions are all in once none of them is left (a backend adds what
# it counted as it exits, before it leaves pg_stat_activity; idemd's sessions are named idemd,
# idemd-retention, idemd-relay), the claims they inserted are all counted (n_tup_ins, counted
# by the sessions that read the index), and two reads of the counter agree.
idemd_sessions() {
	idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'idemd%'"
}
claims_inserted() {
	idem_psql -c "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = 'idem.processed_messages'::regclass"
}
settled=
reads_settled() {
	local cur
	[ "$(idemd_sessions)" = 0 ] || return 1
	[ $(($(claims_inserted) - inserted_before)) -ge "$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE topic = 'payments'")" ] ||
		return 1
	cur=$(idem_pkey_reads)
	[ "$cur" = "$settled" ] && return 0
	settled=$cur
	return 1
}
# looked_up: the duplicates whose claims idemd certainly looked up, into table looked (p, o, k, x:
# partition, offset, key, transaction). Every message's key comes from Kafka; a message with no
# claim at its offset is a duplicate (nothing is quarantined), and its transaction is certain
# when the claims before and after it in its partition have the same xmin (a batch is a run of
# consecutive offsets of one partition, one batch per partition in a transaction). Unless its
# key's claim is in the same transaction and partition (a repeat within its batch, settled in
# memory), its claim was there before it: the claim INSERT ... ON CONFLICT read that claim's
# primary key entry, and idem.claims_of() looked the key up.
looked_up() {
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments |
		cut -f1-3 >"$IDEM_TMP/messages.tsv" || idem_fail "cannot read the messages back from Kafka"
	idem_psql -c "CREATE TABLE messages (p int, o bigint, k text)"
	idem_psql -c "\\copy messages FROM '$IDEM_TMP/messages.tsv'"
	idem_psql >/dev/null <<'SQL'
CREATE TABLE claims AS SELECT partition p, "offset" o, business_key k, xmin::text x
	FROM idem.processed_messages WHERE consumer = 'payments' AND topic = 'payments';
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
before=$(idem_pkey_reads)
inserted_before=$(claims_inserted)

idemd_start a "$cfg"
idem_produce --count 3000 --dup-ratio 0.3 --seed 5
idem_wait_done g-lookups 120
idemd_stop a
idem_wait_until 60 "idemd's sessions gone and their statistics counted" reads_settled
after=$settled
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages WHERE topic = 'payments'")
read_n=$((after - before))
echo "primary key entries read: $read_n for $IDEM_PRODUCED messages in about $tx transactions ($history claims already there)"
# Lower bound, or the upper one proves nothing (statistics not counted read low): each stored
# result is written through a probe of its claim (idem.store_results()), and each duplicate
# looked up (looked_up) read its claim's entry twice, claiming and in idem.claims_of() (once per
# key and transaction).
looked_up
results=$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE topic = 'payments' AND result IS NOT NULL")
read -r looked probes < <(idem_psql -F ' ' -c "SELECT count(*), count(DISTINCT (x, k)) FROM looked")
least=$((results + looked + probes))
echo "at least $least of them: $results stored results, $looked duplicates claimed again, $probes lookups"
[ "$looked" -gt 0 ] && [ "$results" -gt 0 ] ||
	idem_fail "no duplicate looked up ($looked) or no stored result ($results): the test proves nothing"
[ "$read_n" -ge "$least" ] ||
	idem_fail "read $read_n primary key entries, fewer than the $least certain: statistics missing"
# An index probe per key reads about one entry per lookup; a scan of the consumer's claims reads
# all $history of them at least once per transaction that has duplicates or results. One such
# scan is allowed: the retention thread's oldest-claim gauge (min(processed_at) of the consumer)
# reads them once at start.
[ "$read_n" -lt $((history + 20 * IDEM_PRODUCED)) ] ||
	idem_fail "read $read_n primary key entries for $IDEM_PRODUCED messages: the lookups scan the consumer's claims"

idem_psql -c "DELETE FROM idem.processed_messages WHERE topic = 'history'"
idem_check_exactly_once payments
echo "ok: key lookups stayed index probes: $(idem_counts payments)"
