#!/usr/bin/env bash
# Duplicates by kind, and key reuse with a different payload.
#  1. First pass: every duplicate the producer made is an upstream duplicate.
#  2. Replay from the beginning (idemctl replay): every message read again is a replay, the ones
#     that made a claim included (the operator asked for the range to be read again); nothing
#     applied again.
#  3. A payment id reused with a different amount: counted as a payload mismatch and logged
#     (on_payload_mismatch: log, the default), not applied; an identical copy is a plain duplicate.
#  4. With on_payload_mismatch: quarantine it is quarantined with the claim's position; retrying
#     it resolves it as a duplicate (its key was applied), never applying it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config log.yaml g-dups payments
idem_write_config "$IDEM_TMP/quarantine.yaml" g-dups payments \
	--route on_payload_mismatch=quarantine
idem_produce --count 3000 --dup-ratio 0.3 --seed 41
dups=$((IDEM_PRODUCED - IDEM_UNIQUE))

kinds() {
	idem_psql -c "SELECT sum(dup_redelivery) || ' ' || sum(dup_replay) || ' ' || sum(dup_upstream) || ' ' || sum(payload_mismatches) FROM idem.partition_progress"
}

idemd_start a "$IDEM_TMP/log.yaml"
idem_wait_done g-dups 60
idemd_stop a
idem_check_exactly_once payments
idem_assert_eq "first pass: redelivery replay upstream mismatches" "0 0 $dups 0" "$(kinds)"

"$IDEM_BIN/idemctl" -c "$IDEM_TMP/log.yaml" replay --topic payments --to-offset 0 >/dev/null
idemd_start b "$IDEM_TMP/log.yaml"
idem_wait_done g-dups 60
idemd_stop b
idem_check_accounting payments
idem_assert_eq "after the replay" "0 $IDEM_PRODUCED $dups 0" "$(kinds)"
idem_assert_eq "ledger after the replay" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ledger')"

# A reused payment id: the first unique payment of the manifest, with another amount.
first=$(head -1 "$IDEM_TMP/manifest.csv")
IFS=, read -r pid acct amount <<<"$first"
orig=$(idem_psql -c "SELECT encode(payload_hash, 'hex') FROM idem.processed_messages WHERE business_key = '$pid'")
claim=$(idem_psql -c "SELECT partition || ' ' || \"offset\" FROM idem.processed_messages WHERE business_key = '$pid'")
read -r cpart coff <<<"$claim"
# The identical payload, as the producer wrote it, and a different one, both on partition 0.
value=$("$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments \
	--partition "$cpart" | awk -F'\t' -v o="$coff" '$2 == o { print $4 }')
[ -n "$value" ] || idem_fail "cannot read the claimed message back"
idem_produce_one --partition 0 --header tenant=t1 --value "$value"
idem_produce_one --partition 0 --header tenant=t1 \
	--value "{\"payment_id\":\"$pid\",\"account\":\"$acct\",\"amount\":$((amount + 1))}"
idemd_start c "$IDEM_TMP/log.yaml"
idem_wait_done g-dups 60
idemd_stop c
idem_assert_eq "log policy" "0 $IDEM_PRODUCED $((dups + 2)) 1" "$(kinds)"
idem_assert_eq "quarantined (log policy)" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_assert_eq "ledger for $pid" "1 $amount" \
	"$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger WHERE payment_id = '$pid'")"
idem_assert_eq "claim untouched" "$orig" \
	"$(idem_psql -c "SELECT encode(payload_hash, 'hex') FROM idem.processed_messages WHERE business_key = '$pid'")"

idem_produce_one --partition 1 --header tenant=t1 \
	--value "{\"payment_id\":\"$pid\",\"account\":\"$acct\",\"amount\":$((amount + 2))}"
idemd_start d "$IDEM_TMP/quarantine.yaml"
idem_wait_done g-dups 60
idemd_stop d
idem_assert_eq "quarantine policy" "0 $IDEM_PRODUCED $((dups + 2)) 2" "$(kinds)"
idem_assert_eq "quarantined (quarantine policy)" "1|$pid|1|true" \
	"$(idem_psql -c "SELECT partition || '|' || business_key || '|' || attempts || '|' || (reason LIKE 'payload mismatch: business key already applied from topic ''payments'' partition $cpart offset $coff with a different payload (sha256 ${orig:0:12}..., this message %') FROM idem.quarantine")"
idem_check_accounting payments
qid=$(idem_psql -c 'SELECT id FROM idem.quarantine')
out=$("$IDEM_BIN/idemctl" -c "$IDEM_TMP/quarantine.yaml" quarantine retry "$qid")
idem_log "retry: $out"
idem_assert_eq "retried mismatch" "duplicate|0" \
	"$(idem_psql -c "SELECT resolution || '|' || (SELECT sum(quarantined) FROM idem.partition_progress) FROM idem.quarantine")"
idem_assert_eq "ledger for $pid after the retry" "1 $amount" \
	"$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger WHERE payment_id = '$pid'")"
idem_assert_eq "upstream after the retry" "0 $IDEM_PRODUCED $((dups + 3)) 2" "$(kinds)"
idem_check_accounting payments
echo "ok: $(idem_counts_full payments)"
