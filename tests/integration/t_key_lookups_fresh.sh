#!/usr/bin/env bash
# The lookups by business key stay index probes while a fresh claims table grows from empty:
# a plan made when the table was tiny (a cached generic plan, say) and kept as it grows would
# read every claim of the consumer per transaction (sql/0005_key_lookups.sql,
# ARCHITECTURE.md, "The transaction"). The claims table starts empty and is never analyzed
# (autovacuum off on it), a stream of payments with upstream duplicates (their claims are looked
# up) and a handler whose results are stored; Postgres's own counters must show the primary key
# read a few entries per message. Counts, not times, read once idemd's sessions are gone (a
# backend adds what it counted as it exits) and at least what was certainly read (each stored
# result, each duplicate looked up), so that counts not yet in cannot pass. Exactly once, as
# always.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config idemd.yaml g-lookups-fresh payments --workers 1
cfg=$IDEM_CFG
idem_psql -c "ALTER TABLE idem.processed_messages SET (autovacuum_enabled = false)"
before=$(idem_pkey_reads)
inserted_before=$(idem_claims_inserted)

idemd_start a "$cfg"
idem_produce --count 30000 --dup-ratio 0.3 --seed 13
idem_wait_done g-lookups-fresh 180
idemd_stop a
idem_wait_until 60 "idemd's sessions gone and their statistics counted" \
	idem_stats_settled idem_pkey_reads "$inserted_before"
after=$IDEM_STATS_SETTLED
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages")
read_n=$((after - before))
echo "primary key entries read: $read_n for $IDEM_PRODUCED messages in about $tx transactions (table empty at the start)"
idem_assert_eq "claims table never analyzed" "-1" \
	"$(idem_psql -c "SELECT reltuples FROM pg_class WHERE oid = 'idem.processed_messages'::regclass")"
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
# An index probe per key reads about one entry per claim check, duplicate lookup and stored
# result; reading the consumer's claims in each transaction reads tens per message.
[ "$read_n" -lt $((8 * IDEM_PRODUCED)) ] ||
	idem_fail "read $read_n primary key entries for $IDEM_PRODUCED messages: the lookups scan the consumer's claims"
idem_check_exactly_once payments
echo "ok: key lookups stayed index probes as the table grew: $(idem_counts payments)"
