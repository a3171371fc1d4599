#!/usr/bin/env bash
# A handler that raises (P0001) for one message in a batch of 500: the batch goes to the slow
# path, the failing message is retried retry.max_attempts times and quarantined, and the other
# 499 are applied in the same transaction (one processed_at), in the same run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:1 --config idemd.yaml g-raise payments \
	--sql "$IDEM_FN_SQL" --max 500 --wait 2000
idem_create_apply_fn
idem_produce_victim 500

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-raise 60
idemd_stop a

idem_assert_eq "applied" 499 "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "victim not applied" 0 "$(idem_psql -c "SELECT count(*) FROM ledger WHERE payment_id = '$victim_id'")"
idem_assert_eq "claims" 499 "$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE business_key <> '$victim_id'")"
idem_assert_eq "no claim left by the victim" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE business_key = '$victim_id'")"
idem_assert_eq "quarantined" "$victim_id|P0001|3|handler failed: account $victim_acct is blocked" \
	"$(idem_psql -c "SELECT business_key || '|' || sqlstate || '|' || attempts || '|' || reason FROM idem.quarantine")"
idem_assert_eq "counters" "500 499 0 1" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
# One transaction: every claim and the quarantine row carry the same transaction timestamp.
idem_assert_eq "transactions" 1 \
	"$(idem_psql -c "SELECT count(DISTINCT t) FROM (SELECT processed_at AS t FROM idem.processed_messages UNION ALL SELECT first_failed_at FROM idem.quarantine) x")"
# The neighbours kept their order: balances equal their payments.
idem_assert_eq "wrong balances" 0 \
	"$(idem_psql -c "SELECT count(*) FROM accounts a JOIN (SELECT account, sum(amount) s FROM ledger GROUP BY 1) l ON l.account = a.id WHERE a.balance <> l.s")"
echo "ok: 499 applied, 1 quarantined, one batch transaction; $(idem_counts_full payments)"
