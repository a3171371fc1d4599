#!/usr/bin/env bash
# The lookups by business key stay index probes while a fresh claims table grows from empty:
# a plan made when the table was tiny (a cached generic plan, say) and kept as it grows would
# read every claim of the consumer per transaction (sql/0005_key_lookups.sql,
# ARCHITECTURE.md, "The transaction"). The claims table starts empty and is never analyzed
# (autovacuum off on it), a stream of payments with upstream duplicates (their claims are looked
# up) and a handler whose results are stored; Postgres's own counters must show the primary key
# read a few entries per message. Counts, not times. Exactly once, as always.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config idemd.yaml g-lookups-fresh payments --workers 1
cfg=$IDEM_CFG
idem_psql -c "ALTER TABLE idem.processed_messages SET (autovacuum_enabled = false)"
before=$(idem_pkey_reads)

idemd_start a "$cfg"
idem_produce --count 30000 --dup-ratio 0.3 --seed 13
idem_wait_done g-lookups-fresh 180
idemd_stop a
sleep 1 # the backends' statistics reach shared memory when they exit
after=$(idem_pkey_reads)
tx=$(idem_psql -c "SELECT count(DISTINCT xmin::text) FROM idem.processed_messages")
read_n=$((after - before))
echo "primary key entries read: $read_n for $IDEM_PRODUCED messages in about $tx transactions (table empty at the start)"
idem_assert_eq "claims table never analyzed" "-1" \
	"$(idem_psql -c "SELECT reltuples FROM pg_class WHERE oid = 'idem.processed_messages'::regclass")"
# An index probe per key reads about one entry per claim check, duplicate lookup and stored
# result; reading the consumer's claims in each transaction reads tens per message.
[ "$read_n" -lt $((8 * IDEM_PRODUCED)) ] ||
	idem_fail "read $read_n primary key entries for $IDEM_PRODUCED messages: the lookups scan the consumer's claims"
idem_check_exactly_once payments
echo "ok: key lookups stayed index probes as the table grew: $(idem_counts payments)"
