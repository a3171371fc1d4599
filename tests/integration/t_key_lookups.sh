#!/usr/bin/env bash
# The batch transaction's lookups by business key stay index probes on a table the planner knows
# nothing about: 200,000 claims already there and never analyzed (autovacuum off on the claims
# table, as before autovacuum first gets to a fresh install), then a stream with upstream
# duplicates (their claims are looked up) and a handler whose results are stored. Postgres's own
# counters must show the primary key read a few entries per message, not every claim of the
# consumer per transaction (which the planner chose for a plain join on such a table:
# sql/0005_key_lookups.sql). Counts, not times. Exactly once, as always.
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
before=$(idem_pkey_reads)

idemd_start a "$cfg"
idem_produce --count 3000 --dup-ratio 0.3 --seed 5
idem_wait_done g-lookups 120
idemd_stop a
sleep 1 # the backends' statistics reach shared memory when they exit
after=$(idem_pkey_reads)
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages WHERE topic = 'payments'")
read_n=$((after - before))
echo "primary key entries read: $read_n for $IDEM_PRODUCED messages in about $tx transactions ($history claims already there)"
# An index probe per key reads about one entry per lookup; a scan of the consumer's claims reads
# all $history of them at least once per transaction that has duplicates or results. One such
# scan is allowed: the retention thread's oldest-claim gauge (min(processed_at) of the consumer)
# reads them once at start.
[ "$read_n" -lt $((history + 20 * IDEM_PRODUCED)) ] ||
	idem_fail "read $read_n primary key entries for $IDEM_PRODUCED messages: the lookups scan the consumer's claims"

idem_psql -c "DELETE FROM idem.processed_messages WHERE topic = 'history'"
idem_check_exactly_once payments
echo "ok: key lookups stayed index probes: $(idem_counts payments)"
