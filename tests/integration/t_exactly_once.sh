#!/usr/bin/env bash
# 20,000 payments over 8 partitions with 30% duplicates (in-batch, cross-batch and
# cross-partition upstream retries): every unique payment applied exactly once, duplicates
# counted, Kafka offsets committed to the end, database progress at every high watermark, and
# each payment claimed by its first copy: the claim's (topic, partition, offset) is the lowest
# offset of that payment in the claim's partition (as the topic holds it), so no later copy in
# a partition ever wins over an earlier one. Between partitions there is no order: a payment
# re-sent to another partition may be claimed there first, but only at its first copy there.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:8 --config idemd.yaml g-once payments
idem_produce --count 20000 --dup-ratio 0.3 --seed 1
[ $((IDEM_PRODUCED - IDEM_UNIQUE)) -ge 5000 ] || idem_fail "producer made too few duplicates"

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-once 180
idemd_stop a

idem_check_exactly_once payments
# Nothing crashed, so nothing was redelivered: every message was consumed once, and every
# duplicate the producer made was recognised as one.
idem_assert_eq "consumed" "$IDEM_PRODUCED" \
	"$(idem_psql -c "SELECT sum(consumed) FROM idem.partition_progress WHERE consumer = 'payments'")"
idem_assert_eq "duplicates" "$((IDEM_PRODUCED - IDEM_UNIQUE))" \
	"$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress WHERE consumer = 'payments'")"
idem_assert_eq "partitions holding claims" 8 \
	"$(idem_psql -c "SELECT count(DISTINCT partition) FROM idem.processed_messages")"

# The stream as the topic holds it (the Kafka key is the payment id), against the claims.
"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments --timeout 60 \
	>"$IDEM_TMP/stream.tsv" || idem_fail "cannot read topic payments"
idem_psql >/dev/null <<SQL
CREATE TABLE stream (part int, off bigint, key text, value text, headers text);
\\copy stream FROM '$IDEM_TMP/stream.tsv'
CREATE INDEX ON stream (key, part, off);
SQL
idem_assert_eq "messages in the topic" "$IDEM_PRODUCED" "$(idem_psql -c 'SELECT count(*) FROM stream')"
# Cross-partition duplicates exist in the input.
cross=$(idem_psql -c 'SELECT count(*) FROM (SELECT key FROM stream GROUP BY 1 HAVING count(DISTINCT part) > 1) d')
[ "$cross" -gt 0 ] || idem_fail "no payment has copies in two partitions: the cross-partition case is not tested"
within=$(idem_psql -c 'SELECT count(*) FROM (SELECT key FROM stream GROUP BY key, part HAVING count(*) > 1) d')
[ "$within" -gt 0 ] || idem_fail "no payment has two copies in one partition: the first-copy check proves nothing"
# Each claim sits on a copy of its payment, and no copy of it in that partition comes earlier.
idem_assert_eq "claims not on a copy of their payment in topic payments" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named p WHERE consumer = 'payments' AND (p.topic <> 'payments' OR NOT EXISTS (SELECT 1 FROM stream s WHERE s.key = p.business_key AND s.part = p.partition AND s.off = p.\"offset\"))")"
idem_assert_eq "claims made by a later copy than their partition's first" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named p WHERE consumer = 'payments' AND EXISTS (SELECT 1 FROM stream s WHERE s.key = p.business_key AND s.part = p.partition AND s.off < p.\"offset\")")"
# A payment with copies in one partition only is claimed at its first copy in the topic.
idem_assert_eq "single-partition payments not claimed by their first copy" 0 \
	"$(idem_psql -c "SELECT count(*) FROM (SELECT key, min(part) part, min(off) off FROM stream GROUP BY key HAVING count(DISTINCT part) = 1) f JOIN idem.claims_named p ON p.consumer = 'payments' AND p.business_key = f.key WHERE (p.partition, p.\"offset\") <> (f.part, f.off)")"
first_elsewhere=$(idem_psql -c "SELECT count(*) FROM idem.claims_named p WHERE consumer = 'payments' AND EXISTS (SELECT 1 FROM stream s WHERE s.key = p.business_key AND s.part <> p.partition)")
idem_log "payments with copies in two partitions: $cross ($first_elsewhere claimed where another partition also held a copy); with two copies in one partition: $within"
echo "ok: produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE $(idem_counts payments)"
