#!/usr/bin/env bash
# idemctl quarantine list|show|retry|discard. Payments of a blocked account are quarantined (both
# copies of a duplicated one: the first copy's failure leaves no claim behind). Once unblocked:
# retry applies one, a second retry of it is refused, retrying the other copy of a payment finds
# its key applied (a duplicate), discard drops one for good, retry --all applies the rest. In the
# end every payment but the discarded one is applied exactly once, and the counters still add up.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config idemd.yaml g-qctl payments --sql "$IDEM_FN_SQL"
idem_create_apply_fn
ctl() { "$IDEM_BIN/idemctl" -c "$IDEM_TMP/idemd.yaml" quarantine "$@"; }
idem_psql -c "INSERT INTO blocked_accounts VALUES ('acct-7')"
idem_produce --count 2000 --dup-ratio 0.3 --seed 51
blocked=$(grep -c ',acct-7,' "$IDEM_TMP/manifest.csv")

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-qctl 60
q=$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')
idem_assert_eq "quarantined payments" "$blocked" \
	"$(idem_psql -c 'SELECT count(DISTINCT business_key) FROM idem.quarantine')"
idem_assert_eq "all acct-7, P0001, 3 attempts" "$q" \
	"$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE reason = 'handler failed: account acct-7 is blocked' AND sqlstate = 'P0001' AND attempts = 3")"
idem_check_accounting payments

# list and show, as JSON and as text.
ctl list --json >"$IDEM_TMP/list.json"
idem_assert_eq "list --json entries" "$q" "$(jq length "$IDEM_TMP/list.json")"
idem_assert_eq "list --json ids" "$(idem_psql -c 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM idem.quarantine')" \
	"$(jq -r '[.[].id] | map(tostring) | join(",")' "$IDEM_TMP/list.json")"
idem_assert_eq "list --limit" 2 "$(ctl list --json --limit 2 | jq length)"
idem_assert_eq "list --topic" 0 "$(ctl list --json --topic other | jq length)"
[ "$(ctl list | wc -l)" -eq $((q + 1)) ] || idem_fail "list: expected a header and $q rows"
id1=$(jq '.[0].id' "$IDEM_TMP/list.json")
ctl show "$id1" --json >"$IDEM_TMP/show.json"
idem_assert_eq "show: value is the payment" \
	"$(idem_psql -c "SELECT business_key FROM idem.quarantine WHERE id = $id1")" \
	"$(jq -r '.value | fromjson | .payment_id' "$IDEM_TMP/show.json")"
idem_assert_eq "show: headers" "tenant=t1,source=idemd-demo" \
	"$(jq -r '[.headers[] | .name + "=" + .value] | join(",")' "$IDEM_TMP/show.json")"
idem_assert_eq "show: position" "$(idem_psql -c "SELECT partition || ' ' || \"offset\" FROM idem.quarantine WHERE id = $id1")" \
	"$(jq -r '"\(.partition) \(.offset)"' "$IDEM_TMP/show.json")"
ctl show "$id1" | grep -q '^reason: *handler failed: account acct-7 is blocked$' ||
	idem_fail "show: no reason line"
if ctl show 999999 2>/dev/null; then idem_fail "show of a missing id succeeded"; fi

# Still blocked: a retry fails again and stays open, its attempts counted.
if ctl retry "$id1" >/dev/null; then idem_fail "retry of a still failing message succeeded"; fi
idem_assert_eq "failed retry (3 more attempts)" "6|" \
	"$(idem_psql -c "SELECT attempts || '|' || coalesce(resolution, '') FROM idem.quarantine WHERE id = $id1")"

idem_psql -c "DELETE FROM blocked_accounts"
# A payment quarantined twice (an upstream duplicate): retry both copies.
dup_key=$(idem_psql -c 'SELECT business_key FROM idem.quarantine GROUP BY 1 HAVING count(*) > 1 ORDER BY 1 LIMIT 1')
[ -n "$dup_key" ] || idem_fail "no payment quarantined twice"
read -r c1 c2 <<<"$(idem_psql -c "SELECT string_agg(id::text, ' ' ORDER BY id) FROM idem.quarantine WHERE business_key = '$dup_key'")"
ctl retry "$c1" | grep -q "^$c1: applied: " || idem_fail "retry $c1 did not apply"
if ctl retry "$c1" 2>"$IDEM_TMP/again.err"; then idem_fail "second retry of $c1 succeeded"; fi
grep -q 'resolved already' "$IDEM_TMP/again.err" || idem_fail "second retry: $(cat "$IDEM_TMP/again.err")"
ctl retry "$c2" | grep -q "^$c2: duplicate: " || idem_fail "retry $c2 was not a duplicate"
idem_assert_eq "ledger rows for $dup_key" 1 "$(idem_psql -c "SELECT count(*) FROM ledger WHERE payment_id = '$dup_key'")"

# Discard a payment quarantined once; it can no longer be retried.
single=$(idem_psql -c "SELECT min(id) FROM idem.quarantine WHERE resolved_at IS NULL AND business_key IN (SELECT business_key FROM idem.quarantine GROUP BY 1 HAVING count(*) = 1)")
discarded_key=$(idem_psql -c "SELECT business_key FROM idem.quarantine WHERE id = $single")
ctl discard "$single" | grep -q "^$single: discarded$" || idem_fail "discard failed"
if ctl retry "$single" 2>/dev/null; then idem_fail "retry of a discarded entry succeeded"; fi
if ctl discard "$single" 2>/dev/null; then idem_fail "second discard succeeded"; fi

# The rest, while idemd still runs: each applied once (copies of one payment: a duplicate).
ctl retry --all >"$IDEM_TMP/all.out"
idem_log "retry --all: $(tail -1 "$IDEM_TMP/all.out")"
idem_assert_eq "open entries left" 0 "$(ctl list --json | jq length)"
idemd_stop a

idem_assert_eq "entries by resolution" "$(idem_psql -c "SELECT count(*) FROM idem.quarantine") 1" \
	"$(idem_psql -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE resolution = 'discarded') FROM idem.quarantine WHERE resolution IS NOT NULL")"
# Every payment of the manifest applied exactly once, except the discarded one.
idem_psql -c "CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
idem_assert_eq "payments missing" "$discarded_key" \
	"$(idem_psql -c 'SELECT string_agg(payment_id, $$,$$) FROM expected e WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = e.payment_id)')"
idem_assert_eq "applied twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "ledger rows" $((IDEM_UNIQUE - 1)) "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "claims" $((IDEM_UNIQUE - 1)) "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idem_assert_eq "wrong balances" 0 \
	"$(idem_psql -c "SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected WHERE payment_id <> '$discarded_key' GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s")"
idem_assert_eq "counters" "$IDEM_PRODUCED $((IDEM_UNIQUE - 1)) 1" \
	"$(idem_psql -c "SELECT sum(consumed) || ' ' || sum(applied) || ' ' || sum(quarantined) FROM idem.partition_progress")"
idem_check_accounting payments
echo "ok: $q quarantined, retried and discarded; $(idem_counts_full payments)"
