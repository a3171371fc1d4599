#!/usr/bin/env bash
# SIGHUP retries a halted partition at once: with retry.max_ms at 60 s, a partition halted at a
# poison message (routes[].on_poison: halt) whose cause the operator fixed goes through after
# SIGHUP instead of a minute later, in order, as the database shows: the transaction that goes
# through begins less than 60 s after the last one that halted (both recorded in the progress
# row), before the scheduled retry, which comes 60 s after that one ended. A SIGHUP before
# the fix retries it too (the database records the new attempt) and it stays halted. /readyz
# says "a partition is halted" the whole time it is, retries included, and ready once it is not.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:1
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-hup payments --sql "$IDEM_FN_SQL" --route on_poison=halt \
	--retry max_ms=60000 --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
idem_create_apply_fn
idem_psql -c "INSERT INTO blocked_accounts VALUES ('acct-blocked')"
url=http://127.0.0.1:$port

pay() { # ID ACCOUNT AMOUNT
	idem_produce_one --value "{\"payment_id\":\"$1\",\"account\":\"$2\",\"amount\":$3}"
}
progress() {
	idem_psql -c "SELECT next_offset || ' ' || coalesce(halted_offset::text, '-') FROM idem.partition_progress"
}
progress_is() { [ "$(progress)" = "$1" ]; }
# The progress row is rewritten by each attempt that halts: its time says a retry happened.
attempt_time() { idem_psql -c "SELECT updated_at FROM idem.partition_progress"; }
attempt_after() { [ "$(attempt_time)" != "$1" ]; }
readyz() { curl -s -m 2 "$url/readyz" -w ' %{http_code}' | tr -d '\n'; }
readyz_is() { [ "$(readyz)" = "$1" ]; }

for i in $(seq 0 9); do pay "p-$i" acct-1 1; done
pay p-10 acct-blocked 100 # offset 10
for i in $(seq 11 15); do pay "p-$i" acct-1 1; done

idemd_start a "$cfg"
idem_wait_until 60 "partition halted at offset 10" progress_is "10 10"
idem_wait_until 10 "/readyz says halted" readyz_is "a partition is halted 503"

# SIGHUP before the fix: retried at once, halted again at the same message.
t=$(attempt_time)
kill -HUP "$IDEMD_PID_a"
idem_wait_until 10 "a retry after SIGHUP" attempt_after "$t"
last_halt=$(attempt_time)
idem_assert_eq "still halted after the retry" "10 10" "$(progress)"
idem_assert_eq "/readyz after the retry" "a partition is halted 503" "$(readyz)"

# The fix alone does nothing for a minute (the next scheduled retry)...
idem_psql -c "DELETE FROM blocked_accounts"
sleep 2
idem_assert_eq "halted until the next scheduled retry" "10 10" "$(progress)"
idem_assert_eq "/readyz while halted" "a partition is halted 503" "$(readyz)"
# ...SIGHUP retries it now.
idem_assert_eq "no attempt since the last one halted" "$last_halt" "$(attempt_time)"
kill -HUP "$IDEMD_PID_a"
idem_wait_until 50 "resumed after SIGHUP" progress_is "16 -"
# The scheduled retry would begin no sooner than 60 s after the last halting transaction ended;
# the one that went through began less than that after the halting one began.
after_s=$(idem_psql -c "SELECT round(extract(epoch FROM updated_at - '$last_halt'::timestamptz), 3) FROM idem.partition_progress")
[ "$(idem_psql -c "SELECT $after_s < 60")" = t ] ||
	idem_fail "went through ${after_s} s after the last halt: the scheduled retry, not SIGHUP"
idem_wait_until 5 "/readyz ready" readyz_is "ready 200"
idemd_stop a

idem_assert_eq "all applied" "16 115" "$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger")"
idem_assert_eq "applied in offset order" t \
	"$(idem_psql -c "SELECT bool_and(ok) FROM (SELECT id > lag(id, 1, 0::bigint) OVER (ORDER BY substr(payment_id, 3)::int) AS ok FROM ledger) x")"
idem_assert_eq "halt reason cleared" "" "$(idem_psql -c 'SELECT halt_reason FROM idem.partition_progress')"
idem_check_accounting payments
echo "ok: halted partition resumed after SIGHUP, ${after_s} s after its last halt (retry.max_ms 60000); $(idem_counts_full payments)"
