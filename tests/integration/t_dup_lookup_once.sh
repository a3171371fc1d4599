#!/usr/bin/env bash
# The duplicates' claims are looked up once per transaction and consumer, not once per batch: a
# backlog on four partitions with upstream duplicates in every batch and one worker, so that
# transactions carry several partitions' batches (ARCHITECTURE.md, "The transaction", 2).
# Postgres's own function counters (track_functions) must count one idem.claims_of() call per
# transaction (one per batch before): at most one per transaction, and at least one per
# transaction that certainly had a duplicate (once idemd's sessions are gone, so that all they
# counted is in), and the payments are applied exactly once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-dup-lookup payments --workers 1 --max 200 --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
idem_psql -c "ALTER SYSTEM SET track_functions = 'all'" >/dev/null
idem_psql -c "SELECT pg_reload_conf()" >/dev/null

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
idem_produce --count 20000 --dup-ratio 0.3 --seed 11 # all of it waiting before idemd starts
idemd_start a "$cfg"
idem_wait_done g-dup-lookup 180
batches=$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '$1 == "idemd_batches_total" { print $2 }')
idemd_stop a
# A backend adds what it counted as it exits, before it leaves pg_stat_activity (idemd's
# sessions are named idemd, idemd-retention, idemd-relay): the counts are all in once none is
# left, the claims they inserted are all counted (n_tup_ins, counted by the same sessions as the
# calls), and two reads agree.
claims_of_calls() {
	idem_psql -c "SELECT pg_stat_force_next_flush()" >/dev/null
	idem_psql -c "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = 'idem' AND funcname = 'claims_of'"
}
calls=
calls_settled() {
	local cur
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'idemd%'")" = 0 ] ||
		return 1
	[ "$(idem_psql -c "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = 'idem.processed_messages'::regclass")" -ge \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages")" ] || return 1
	cur=$(claims_of_calls)
	[ "$cur" = "$calls" ] && return 0
	calls=$cur
	return 1
}
idem_wait_until 60 "idemd's sessions gone and their statistics counted" calls_settled
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages WHERE topic = 'payments'")
# Lower bound: each transaction with a duplicate it certainly looked up (looked_up) called it.
looked_up
tx_dup=$(idem_psql -c "SELECT count(DISTINCT x) FROM looked")
echo "idem.claims_of() calls: $calls for $batches batches in about $tx transactions, $tx_dup of them certainly with a lookup"
[ -n "$batches" ] && [ "$batches" -gt 0 ] || idem_fail "no idemd_batches_total in /metrics"
[ "$tx_dup" -gt 0 ] || idem_fail "no transaction certainly looked a duplicate up: the test proves nothing"
[ "$calls" -ge "$tx_dup" ] ||
	idem_fail "$calls claims lookups counted, fewer than the $tx_dup transactions that made one: statistics missing"
# Transactions that carried several batches, or the test proves nothing.
[ $((batches * 4)) -ge $((tx * 5)) ] ||
	idem_fail "$batches batches in $tx transactions: too few carried several batches"
# One lookup per transaction (a transaction without a new claim has no xmin here: the last
# ones may be all duplicates, hence the two spare).
[ "$calls" -le $((tx + 2)) ] ||
	idem_fail "$calls claims lookups for $batches batches in $tx transactions: not one per transaction"
idem_check_exactly_once payments
echo "ok: duplicates looked up once per transaction: $(idem_counts payments)"
