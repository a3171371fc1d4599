#!/usr/bin/env bash
# handler.mode: set. One statement per transaction over text[] parameters:
#  - a message whose data makes the set statement fail (a blocked account: P0001) is quarantined
#    alone after retry.max_attempts tries, and its 499 neighbours are applied, in one transaction;
#  - a set handler that returns rows of (business key, result) has the results stored with the
#    claims, and idemctl lookup shows them;
#  - the set statement saw the messages in offset order (ledger ids follow the offsets);
#  - field values that look like SQL or array syntax arrive intact.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

# apply_payment() for each element, in the arrays' order; (payment id, balance after) returned.
# shellcheck disable=SC2016 # $n are SQL parameters
set_sql='SELECT u.id, apply_payment(u.id, u.account, u.amount::bigint)::text FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(id, account, amount, n) ORDER BY u.n'
idem_fixture --brokers 1 --topics payments:1 --config idemd.yaml g-set payments \
	--sql "$set_sql" --mode set --max 500 --wait 2000
grep -q '^      mode: set$' "$IDEM_TMP/idemd.yaml" || idem_fail "configuration is not in set mode"
idem_create_apply_fn
idem_produce_victim 501

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-set 60

idem_assert_eq "applied" 499 "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "victim not applied" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ledger WHERE payment_id = '$victim_id'")"
idem_assert_eq "no claim left by the victim" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE business_key = '$victim_id'")"
idem_assert_eq "quarantined" "$victim_id|P0001|3|handler failed: account $victim_acct is blocked" \
	"$(idem_psql -c "SELECT business_key || '|' || sqlstate || '|' || attempts || '|' || reason FROM idem.quarantine")"
idem_assert_eq "counters" "500 499 0 1" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
idem_assert_eq "transactions" 1 \
	"$(idem_psql -c "SELECT count(DISTINCT t) FROM (SELECT processed_at AS t FROM idem.processed_messages UNION ALL SELECT first_failed_at FROM idem.quarantine) x")"
# Results: every claim holds the balance its payment left, as apply_payment() returned it.
idem_assert_eq "claims without a result" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages WHERE result IS NULL')"
idem_assert_eq "results that are not the balance after the payment" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages p JOIN ledger l ON l.payment_id = p.business_key WHERE p.result::bigint <> (SELECT sum(amount) FROM ledger l2 WHERE l2.account = l.account AND l2.id <= l.id)')"
# Offset order: ledger rows were inserted in the order of the claims' offsets.
idem_assert_eq "ledger out of offset order" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT l.id, p."offset", lag(p."offset") OVER (ORDER BY l.id) AS prev FROM ledger l JOIN idem.processed_messages p ON p.business_key = l.payment_id) x WHERE prev > "offset"')"
key=$(head -1 "$IDEM_TMP/manifest.csv" | cut -d, -f1)
want=$(idem_psql -c "SELECT result FROM idem.processed_messages WHERE business_key = '$key'")
"$IDEM_BIN/idemctl" -c "$IDEM_TMP/idemd.yaml" lookup "$key" >"$IDEM_TMP/lookup.txt"
grep -q -- "$want" "$IDEM_TMP/lookup.txt" ||
	idem_fail "idemctl lookup does not show the result '$want': $(cat "$IDEM_TMP/lookup.txt")"

# Values that look like SQL or like array syntax travel as array elements, intact.
n=0
for odd in "a\"b" 'c\d' '{e,f}' "g'); DROP TABLE ledger; --" 'NULL' ' h '; do
	n=$((n + 1))
	esc=${odd//\\/\\\\}
	esc=${esc//\"/\\\"}
	idem_produce_one --value "$(printf '{"payment_id":"odd-%d","account":"%s","amount":%d}' "$n" "$esc" "$n")"
done
idem_wait_done g-set 60
idemd_stop a
idem_assert_eq "odd accounts" "$(printf '%s\n' "a\"b" 'c\d' '{e,f}' "g'); DROP TABLE ledger; --" 'NULL' ' h ' | LC_ALL=C sort)" \
	"$(idem_psql -c "SELECT account FROM ledger WHERE payment_id LIKE 'odd-%' ORDER BY account COLLATE \"C\"")"
echo "ok: set mode: 499 applied and 1 quarantined in one transaction, results stored; $(idem_counts payments)"
