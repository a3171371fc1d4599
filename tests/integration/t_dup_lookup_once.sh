#!/usr/bin/env bash
# The duplicates' claims are looked up once per transaction and consumer, not once per batch: a
# backlog on four partitions with upstream duplicates in every batch and one worker, so that
# transactions carry several partitions' batches (ARCHITECTURE.md, "The transaction", 2):
# batch.max_bytes closes each batch at about 170 messages, far below what a transaction
# takes (4 x batch.max_messages, 800), so that it does whether or not a batch grew while its
# partition's batch before it was in flight.
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
idem_write_config "$cfg" g-dup-lookup payments --workers 1 --max 200 \
	--batch max_bytes=32768 --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
idem_psql -c "ALTER SYSTEM SET track_functions = 'all'" >/dev/null
idem_psql -c "SELECT pg_reload_conf()" >/dev/null

idem_produce --count 20000 --dup-ratio 0.3 --seed 11 # all of it waiting before idemd starts
inserted_before=$(idem_claims_inserted)
idemd_start a "$cfg"
idem_wait_done g-dup-lookup 180
batches=$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '$1 == "idemd_batches_total" { print $2 }')
idemd_stop a
# Postgres's function counters, read once idemd's statistics are all in (idem_stats_settled).
claims_of_calls() {
	idem_psql -c "SELECT pg_stat_force_next_flush()" >/dev/null
	idem_psql -c "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = 'idem' AND funcname = 'claims_of'"
}
idem_wait_until 60 "idemd's sessions gone and their statistics counted" \
	idem_stats_settled claims_of_calls "$inserted_before"
calls=$IDEM_STATS_SETTLED
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'payments')")
# Lower bound: each transaction with a duplicate it certainly looked up (idem_dups_looked_up) called it.
idem_dups_looked_up
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
