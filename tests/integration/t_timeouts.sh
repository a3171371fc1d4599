#!/usr/bin/env bash
# Limits as quarantine reasons, not crashes or endless retries:
#  - a handler slower than postgres.statement_timeout_ms (57014);
#  - a handler waiting on a row lock longer than postgres.lock_timeout_ms (55P03);
#  - a claim whose business key another transaction keeps locked: the batch is retried
#    retry.max_attempts times, then only that message is quarantined;
# each after retry.max_attempts, with a reason naming the limit, while the neighbours are applied.
# Once the lock is released, idemctl quarantine retry applies the locked message.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:1 --config idemd.yaml g-timeouts payments \
	--sql "$IDEM_FN_SQL" --max 50 --retry max_ms=300 --retry max_attempts=2 \
	--postgres lock_timeout_ms=300 --postgres statement_timeout_ms=600
idem_create_apply_fn
idem_psql -c "INSERT INTO slow_accounts VALUES ('acct-slow', 5)"
idem_psql -c "INSERT INTO accounts VALUES ('acct-locked', 0)"

# Two sessions that hold locks until they are terminated.
hold() { # NAME SQL
	idem_spawn "$1" env PGAPPNAME="$1" psql -X -q -c "BEGIN; $2; SELECT pg_sleep(600)"
}
holding() {
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1' AND query LIKE '%pg_sleep%' AND wait_event = 'PgSleep'")" = 1 ]
}
hold holder-row "SELECT * FROM accounts WHERE id = 'acct-locked' FOR UPDATE"
# The consumer's number given first, in a transaction of its own: the holder holds only the key.
idem_psql -c "SELECT idem.claim_consumer_id('payments')" >/dev/null
hold holder-claim "INSERT INTO idem.processed_messages (consumer_id, business_key, topic_id, partition, \"offset\") VALUES (idem.claim_consumer_id('payments'), 'pay-claimed', idem.claim_topic_id('elsewhere'), 0, 0)"
idem_wait_until 30 "row lock held" holding holder-row
idem_wait_until 30 "claim held" holding holder-claim

pay() { # ID ACCOUNT
	idem_produce_one --header tenant=t1 --value "{\"payment_id\":\"$1\",\"account\":\"$2\",\"amount\":1}"
}
for i in $(seq 1 30); do
	pay "pay-$i" acct-1
	case $i in
	10) pay pay-slow acct-slow ;;
	20) pay pay-locked acct-locked ;;
	25) pay pay-claimed acct-2 ;;
	esac
done

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-timeouts 90
reason() {
	idem_psql -c "SELECT sqlstate || '|' || attempts || '|' || reason FROM idem.quarantine WHERE business_key = '$1'"
}
idem_assert_eq "statement timeout" "57014|2|handler timed out (postgres.statement_timeout_ms is 600): canceling statement due to statement timeout" \
	"$(reason pay-slow)"
idem_assert_eq "handler lock timeout" "55P03|2|handler waited for a lock longer than postgres.lock_timeout_ms (300): canceling statement due to lock timeout" \
	"$(reason pay-locked)"
idem_assert_eq "claim lock timeout" "55P03|2|claim: the business key stayed locked by another transaction longer than postgres.lock_timeout_ms (300) in 2 attempts: canceling statement due to lock timeout" \
	"$(reason pay-claimed)"
idem_assert_eq "neighbours applied" 30 "$(idem_psql -c "SELECT count(*) FROM ledger WHERE account = 'acct-1'")"
idem_assert_eq "counters" "33 30 0 3" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
idem_check_accounting payments

# The claim's holder goes away (its insert rolls back): the message can be applied now.
idem_psql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder-claim'" >/dev/null
qid=$(idem_psql -c "SELECT id FROM idem.quarantine WHERE business_key = 'pay-claimed'")
idem_wait_until 10 "holder gone" eval '! holding holder-claim'
"$IDEM_BIN/idemctl" -c "$IDEM_TMP/idemd.yaml" quarantine retry "$qid" | grep -q ": applied: " ||
	idem_fail "retry of pay-claimed did not apply"
idemd_stop a
idem_assert_eq "pay-claimed applied once" 1 "$(idem_psql -c "SELECT count(*) FROM ledger WHERE payment_id = 'pay-claimed'")"
idem_assert_eq "counters after the retry" "33 31 0 2" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
idem_check_accounting payments
idem_psql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'holder-%'" >/dev/null
echo "ok: 3 limits quarantined with their reason, neighbours applied; $(idem_counts_full payments)"
