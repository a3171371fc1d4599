#!/usr/bin/env bash
# Parallel workers and combined transactions, checked in the database:
#  1. batch.workers: 2 commits on two connections at once (transactions of two backends
#     overlap in time), while each partition's messages are still applied in offset order, and
#     as the partitions fill faster than the slow handler drains them, a partition's next batch
#     grows while it waits, beyond twice batch.max_messages but never beyond four times that
#     (transaction size follows the load; then the partition's queue is not read);
#  2. batch.workers: 1 with small batches of many partitions ready at once commits them in
#     one transaction, and the same business key arriving on two partitions in that
#     transaction is applied once and counted once as an upstream duplicate.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics "payments:8 burst:8"

# The payments handler, logging which backend and transaction applied what, and when; it
# sleeps 2 ms per message so that transactions last long enough to overlap.
# shellcheck disable=SC2016 # $n are SQL parameters
cfg_opts=(--sql 'SELECT apply_logged($1, $2, $3::bigint, $4::int, $5::bigint)'
	--params '[business_key, "json:/account", "json:/amount", partition, offset]')
create_fn() {
	idem_psql >/dev/null <<'SQL'
CREATE TABLE work_log (id bigserial PRIMARY KEY, payment_id text NOT NULL, part int NOT NULL,
	off bigint NOT NULL, pid int NOT NULL, xid bigint NOT NULL, at timestamptz NOT NULL);
CREATE FUNCTION apply_logged(p_id text, p_account text, p_amount bigint, p_part int, p_off bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	b bigint;
BEGIN
	PERFORM pg_sleep(0.002);
	INSERT INTO work_log (payment_id, part, off, pid, xid, at)
		VALUES (p_id, p_part, p_off, pg_backend_pid(), txid_current(), clock_timestamp());
	INSERT INTO ledger (payment_id, account, amount) VALUES (p_id, p_account, p_amount);
	INSERT INTO accounts (id, balance) VALUES (p_account, p_amount)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance
		RETURNING balance INTO b;
	RETURN b;
END $$;
SQL
}

# ---- 1. two workers ----------------------------------------------------------------------------
idem_write_config "$IDEM_TMP/two.yaml" g-two payments "${cfg_opts[@]}" --workers 2 --max 40
idem_setup_db "$IDEM_TMP/two.yaml"
create_fn
idem_produce --count 3000 --dup-ratio 0.1 --seed 21
idemd_start a "$IDEM_TMP/two.yaml"
idem_wait_done g-two 120
idemd_stop a
idem_check_exactly_once payments
idem_assert_eq "backends that applied messages" 2 "$(idem_psql -c 'SELECT count(DISTINCT pid) FROM work_log')"
overlaps=$(idem_psql -c "WITH t AS (SELECT pid, xid, min(at) s, max(at) e FROM work_log GROUP BY 1, 2)
	SELECT count(*) FROM t a JOIN t b ON a.pid < b.pid AND a.s < b.e AND b.s < a.e")
[ "$overlaps" -gt 0 ] || idem_fail "no two transactions of the two workers overlapped in time"
idem_assert_eq "messages applied out of offset order within a partition" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY part ORDER BY off) AS prev FROM work_log) x WHERE prev > id')"
largest=$(idem_psql -c 'SELECT max(n) FROM (SELECT count(*) n FROM idem.processed_messages GROUP BY processed_at, partition) x')
[ "$largest" -gt 80 ] && [ "$largest" -le 160 ] ||
	idem_fail "largest batch of one partition in one transaction: $largest, expected 81..160 (a waiting batch grows up to four times batch.max_messages, 40)"
echo "ok: 2 workers: $overlaps overlapping transaction pair(s), per-partition order kept, batches grew to $largest (<= 160)"

# ---- 2. one worker, many partitions in one transaction -----------------------------------------
idem_psql -c 'TRUNCATE work_log, ledger, accounts, idem.processed_messages, idem.partition_progress' >/dev/null
idem_write_config "$IDEM_TMP/one.yaml" g-one payments2 "${cfg_opts[@]}" --workers 1 --max 500 \
	--topic burst
# The same payment on partitions 2 and 5, then a few payments on every partition.
pay='{"payment_id":"pay-twice","account":"acct-x","amount":7}'
idem_produce_one --topic burst --partition 2 --key pay-twice --value "$pay"
idem_produce_one --topic burst --partition 5 --key pay-twice --value "$pay"
for p in 0 1 2 3 4 5 6 7; do
	for i in 1 2 3; do
		idem_produce_one --topic burst --partition "$p" --key "p$p-$i" \
			--value "{\"payment_id\":\"one-$p-$i\",\"account\":\"acct-$p\",\"amount\":$i}"
	done
done
idemd_start b "$IDEM_TMP/one.yaml"
"$IDEM_BIN/idem-kafkatool" wait-committed --brokers "$IDEM_BROKERS" --group g-one --topic burst \
	--timeout 60 >/dev/null || idem_fail "group g-one did not commit to the end of topic burst"
idemd_stop b
idem_assert_eq "pay-twice applied once" "1 7" \
	"$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger WHERE payment_id = 'pay-twice'")"
idem_assert_eq "claims" 25 "$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments2'")"
idem_assert_eq "counters: consumed applied duplicates upstream quarantined" "26 25 1 1 0" \
	"$(idem_psql -c "SELECT sum(consumed) || ' ' || sum(applied) || ' ' || sum(duplicates) || ' ' || sum(dup_upstream) || ' ' || sum(quarantined) FROM idem.partition_progress WHERE consumer = 'payments2'")"
most=$(idem_psql -c "SELECT max(n) FROM (SELECT count(DISTINCT part) n FROM work_log GROUP BY xid) x")
[ "$most" -ge 2 ] || idem_fail "every transaction carried a single partition (most: $most)"
echo "ok: 1 worker: up to $most partitions in one transaction; a key on two partitions applied once"
