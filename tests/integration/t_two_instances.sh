#!/usr/bin/env bash
# Two idemd instances in one consumer group on the same topic: partitions are shared, a
# rebalance happens while the first is consuming, and still every payment is applied once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:8 --config idemd.yaml g-two payments --max 100
idem_produce --count 20000 --dup-ratio 0.3 --seed 3

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "first instance applies something" idem_claims_above 0
idemd_start b "$IDEM_TMP/idemd.yaml"
idem_wait_done g-two 240
idemd_stop a
idemd_stop b

idem_check_exactly_once payments
grep -q "assigned topic=payments" "$IDEM_TMP/idemd-b.log" ||
	idem_fail "the second instance never got a partition"
echo "ok: two instances; $(idem_counts payments)"
