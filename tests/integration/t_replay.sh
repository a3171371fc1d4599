#!/usr/bin/env bash
# Replay: after a full run, reset the group's offsets to the beginning (as an operator does in
# incident recovery) and run again: zero new effects, every replayed message a counted duplicate.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config idemd.yaml g-replay payments
idem_produce --count 6000 --dup-ratio 0.2 --seed 7

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-replay 120
idemd_stop a
idem_check_exactly_once payments
before=$(idem_psql -c "SELECT count(*), sum(amount), max(id) FROM ledger")
claims=$(idem_psql -c "SELECT md5(string_agg(business_key || ':' || processed_at, ',' ORDER BY business_key)) FROM idem.processed_messages")
consumed1=$(idem_psql -c "SELECT sum(consumed) FROM idem.partition_progress")
dups1=$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress")

# The operator's replay: idemctl resets the stopped group's offsets to the beginning.
"$IDEM_BIN/idemctl" -c "$IDEM_TMP/idemd.yaml" replay --topic payments --to-offset 0 |
	tee "$IDEM_TMP/replay.txt"
grep -q "^total: messages=$IDEM_PRODUCED would_apply=0 " "$IDEM_TMP/replay.txt" ||
	idem_fail "the replay plan should count $IDEM_PRODUCED messages and nothing to apply"
"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-replay --topic payments |
	grep -q "^total committed=0 " || idem_fail "the group's offsets were not reset"
idemd_start b "$IDEM_TMP/idemd.yaml"
idem_wait_done g-replay 120
idemd_stop b

idem_assert_eq "ledger after replay" "$before" "$(idem_psql -c "SELECT count(*), sum(amount), max(id) FROM ledger")"
idem_assert_eq "claims after replay" "$claims" \
	"$(idem_psql -c "SELECT md5(string_agg(business_key || ':' || processed_at, ',' ORDER BY business_key)) FROM idem.processed_messages")"
idem_check_exactly_once payments
# Every replayed message was consumed again and recognised as a duplicate.
idem_assert_eq "consumed by the replay" "$IDEM_PRODUCED" \
	"$(($(idem_psql -c "SELECT sum(consumed) FROM idem.partition_progress") - consumed1))"
idem_assert_eq "duplicates of the replay" "$IDEM_PRODUCED" \
	"$(($(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress") - dups1))"
echo "ok: replayed $IDEM_PRODUCED messages, 0 new effects; $(idem_counts payments)"
