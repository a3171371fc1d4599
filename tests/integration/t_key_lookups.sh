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
idem_psql -c "INSERT INTO idem.processed_messages (consumer_id, business_key, topic_id, partition, \"offset\", payload_hash) SELECT idem.claim_consumer_id('payments'), 'hist-' || g, idem.claim_topic_id('history'), 0, g, sha256(g::text::bytea) FROM generate_series(1, $history) g"
idem_assert_eq "claims table never analyzed" "-1" \
	"$(idem_psql -c "SELECT reltuples FROM pg_class WHERE oid = 'idem.processed_messages'::regclass")"
before=$(idem_pkey_reads)
inserted_before=$(idem_claims_inserted)

idemd_start a "$cfg"
idem_produce --count 3000 --dup-ratio 0.3 --seed 5
idem_wait_done g-lookups 120
idemd_stop a
idem_wait_until 60 "idemd's sessions gone and their statistics counted" \
	idem_stats_settled idem_pkey_reads "$inserted_before"
after=$IDEM_STATS_SETTLED
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'payments')")
read_n=$((after - before))
echo "primary key entries read: $read_n for $IDEM_PRODUCED messages in about $tx transactions ($history claims already there)"
# Lower bound, or the upper one proves nothing (statistics not counted read low): each stored
# result is written through a probe of its claim (idem.store_results()), and each duplicate
# looked up (idem_dups_looked_up) read its claim's entry twice, claiming and in idem.claims_of() (once per
# key and transaction).
idem_dups_looked_up
results=$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'payments') AND result IS NOT NULL")
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

idem_psql -c "DELETE FROM idem.processed_messages WHERE topic_id = (SELECT id FROM idem.claim_topics WHERE name = 'history')"
idem_check_exactly_once payments
echo "ok: key lookups stayed index probes: $(idem_counts payments)"
