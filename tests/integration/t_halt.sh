#!/usr/bin/env bash
# routes[].on_poison: halt. A message that cannot be applied stops its partition there: what
# precedes it commits, it and everything after it wait (not quarantined, not skipped, offset not
# moved past it), idem.partition_progress says where and why, and the partition is retried every
# retry.max_ms until the cause is fixed (three retries seen in the database, each halted again,
# before the checks). A message that can never go through (invalid JSON) keeps
# the partition halted until the operator switches the route to quarantine.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

cfg_opts=(--sql "$IDEM_FN_SQL" --retry max_ms=1000)
idem_fixture --brokers 1 --topics payments:1 \
	--config halt.yaml g-halt payments "${cfg_opts[@]}" --route on_poison=halt
idem_write_config "$IDEM_TMP/quarantine.yaml" g-halt payments "${cfg_opts[@]}" \
	--route on_poison=quarantine
idem_create_apply_fn
idem_psql -c "INSERT INTO blocked_accounts VALUES ('acct-blocked')"

pay() { # ID ACCOUNT AMOUNT
	idem_produce_one --header tenant=t1 \
		--value "{\"payment_id\":\"$1\",\"account\":\"$2\",\"amount\":$3}"
}
progress() {
	idem_psql -c "SELECT next_offset || ' ' || coalesce(halted_offset::text, '-') FROM idem.partition_progress"
}
halted_at() { [ "$(progress)" = "$1 $1" ]; }
# Each attempt that halts rewrites the progress row (updated_at: its transaction's start).
# Polled every 0.2 s, retries retry.max_ms (1 s) apart: each shows as a new value.
attempt_time() { idem_psql -c "SELECT updated_at FROM idem.partition_progress"; }
attempts=0 last_attempt=
retried_halted() { # N: true once N attempts after the first halt were seen, each halted at 10
	local t
	t=$(attempt_time)
	if [ "$t" != "$last_attempt" ]; then
		idem_assert_eq "progress after attempt $((attempts + 1))" "10 10" "$(progress)"
		attempts=$((attempts + 1))
		last_attempt=$t
	fi
	[ "$attempts" -ge "$1" ]
}

for i in $(seq 0 9); do pay "p-$i" acct-1 1; done
pay p-10 acct-blocked 100 # offset 10
for i in $(seq 11 20); do pay "p-$i" acct-1 1; done

idemd_start a "$IDEM_TMP/halt.yaml"
idem_wait_until 60 "partition halted at offset 10" halted_at 10
last_attempt=$(attempt_time)
idem_wait_until 60 "three retries of the halted partition" retried_halted 3
idem_assert_eq "still halted at 10" "10 10" "$(progress)"
idem_assert_eq "halt reason" "handler failed: account acct-blocked is blocked" \
	"$(idem_psql -c 'SELECT halt_reason FROM idem.partition_progress')"
idem_assert_eq "applied before the poison" "10 10" \
	"$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger")"
idem_assert_eq "applied after the poison" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ledger WHERE substr(payment_id, 3)::int >= 10")"
idem_assert_eq "quarantined" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_assert_eq "counters while halted" "10 10 0 0" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
"$IDEM_BIN/idemctl" -c "$IDEM_TMP/halt.yaml" status | tee "$IDEM_TMP/status.txt"
grep -q "HALTED at offset 10: handler failed: account acct-blocked is blocked" "$IDEM_TMP/status.txt" ||
	idem_fail "idemctl status does not say the partition is halted"
idem_assert_eq "kafka offset at the poison" "partition=0 committed=10" \
	"$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-halt --topic payments | grep '^partition=0 ' | cut -d' ' -f1-2)"

# The cause is fixed: the next retry goes through, in order.
idem_psql -c "DELETE FROM blocked_accounts"
idem_wait_done g-halt 30
idem_assert_eq "resumed" "21 -" "$(progress)"
idem_assert_eq "all applied" "21 120" "$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger")"
idem_assert_eq "applied in offset order" t \
	"$(idem_psql -c "SELECT bool_and(ok) FROM (SELECT id > lag(id, 1, 0::bigint) OVER (ORDER BY substr(payment_id, 3)::int) AS ok FROM ledger) x")"

# A poison message that no retry can fix: halted until the operator chooses quarantine.
idem_produce_one --header tenant=t1 --value '{"payment_id": "broken'
for i in $(seq 22 25); do pay "p-$i" acct-1 1; done
idem_wait_until 30 "partition halted at offset 21" halted_at 21
idem_assert_eq "halt reason (undecodable)" t \
	"$(idem_psql -c "SELECT halt_reason LIKE 'business key: json:/payment_id: value is not valid JSON%' FROM idem.partition_progress")"
idemd_stop a # a halted partition does not keep idemd from stopping cleanly
idem_assert_eq "ledger while halted" 21 "$(idem_psql -c 'SELECT count(*) FROM ledger')"

idemd_start b "$IDEM_TMP/quarantine.yaml"
idem_wait_done g-halt 60
idemd_stop b
idem_assert_eq "progress" "26 -" "$(progress)"
idem_assert_eq "ledger" 25 "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "quarantined" "21|true" \
	"$(idem_psql -c "SELECT \"offset\" || '|' || (reason LIKE 'business key: json:/payment_id: value is not valid JSON%') FROM idem.quarantine")"
idem_check_accounting payments
idem_assert_eq "counters" "26 25 0 1" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
echo "ok: halted at 10 until fixed ($attempts retries refused meanwhile), at 21 until switched to quarantine; $(idem_counts_full payments)"
