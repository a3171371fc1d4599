#!/usr/bin/env bash
# 20,000 payments over 8 partitions with 30% duplicates (in-batch, cross-batch and
# cross-partition upstream retries): every unique payment applied exactly once, duplicates
# counted, Kafka offsets committed to the end, database progress at every high watermark.
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
# Cross-partition duplicates exist in the input, and each key was claimed by the first copy.
idem_assert_eq "partitions holding claims" 8 \
	"$(idem_psql -c "SELECT count(DISTINCT partition) FROM idem.processed_messages")"
echo "ok: produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE $(idem_counts payments)"
