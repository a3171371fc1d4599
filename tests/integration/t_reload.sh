#!/usr/bin/env bash
# SIGHUP: a valid file changes log.level at once and names each restart-only change; a broken
# file is refused and the running configuration kept (idemd goes on applying).
# batch.max_messages (500 -> 7, restart-only) is checked in the database, not only in the log:
# the rows of one transaction share xmin, and with 7 a transaction claims at most 28 keys (a
# batch grows to twice max_messages while its partition's batch is in flight, a transaction
# carries at most 4 x max_messages: idem_daemon.c, idem_pool.c). The same burst of payments
# (one record batch per partition) makes a larger transaction after the reload, so 500 is still
# in effect, and none after a restart, so the measurement sees the setting.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config idemd.yaml g-reload payments --log-level info
cfg=$IDEM_CFG
log=$IDEM_TMP/idemd-a.log
# burst SEED: 200 payments pay-SEED-* in one record batch per partition (linger), so that idemd
# fetches each partition's share at once and a batch can take all of it.
burst() {
	local out
	out=$("$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic payments \
		--count 200 --seed "$1" -X linger.ms=1000 -X batch.num.messages=10000)
	idem_assert_eq "producer (seed $1)" "produced=200 unique=200 duplicates=0" "$out"
}
# largest_tx SEED: the most keys of pay-SEED-* that one transaction claimed.
largest_tx() {
	idem_psql -c "SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM idem.processed_messages WHERE business_key LIKE 'pay-$1-%' GROUP BY xmin::text) x"
}
tx_max_at_7=$((4 * 7))
idemd_start a "$cfg"
idem_produce --count 200 --dup-ratio 0 --seed 1
idem_wait_done g-reload 60
grep -q ' debug batch: committed' "$log" && idem_fail "debug lines at level info"

# log.level (applied at once) together with batch.max_messages (restart-only): the first is
# applied and said so, the second named as waiting for a restart, neither silently.
consumed=$(idem_psql -c 'SELECT sum(consumed) FROM idem.partition_progress')
sed -i -e 's/^  level: info$/  level: debug/' -e 's/^  max_messages: 500$/  max_messages: 7/' "$cfg"
grep -q '^  max_messages: 7$' "$cfg" || idem_fail "the test did not change batch.max_messages"
kill -HUP "$IDEMD_PID_a"
idem_wait_until 10 "the reload" grep -q "reloaded '.*idemd.yaml': 2 settings changed, 1 applied, 1 need a restart" "$log"
grep -q " info config: 'log.level' changed to 'debug'" "$log" || idem_fail "the reload does not say log.level was applied"
grep -q " warn config: 'batch.max_messages' changed; restart to apply" "$log" ||
	idem_fail "the reload does not name batch.max_messages as needing a restart"
grep -q "config: 'batch.max_messages' changed to" "$log" && idem_fail "batch.max_messages reported as applied"
burst 2
idem_wait_done g-reload 60
grep -q ' debug batch: committed' "$log" || idem_fail "no debug lines after reloading level debug"
largest=$(largest_tx 2)
idem_log "after the reload: at most $largest claims of the burst in one transaction"
[ "$largest" -gt "$tx_max_at_7" ] ||
	idem_fail "no transaction claimed more than $tx_max_at_7 keys of the burst (largest $largest): batch.max_messages 7 applied without a restart, or the burst did not make large batches"
after=$(idem_psql -c 'SELECT sum(consumed) FROM idem.partition_progress')
[ "$after" -ge $((consumed + 200)) ] || idem_fail "consumed did not advance after the reload: $consumed -> $after"

# The same file again: log.level is in effect already; batch.max_messages is still pending.
n_warn=$(grep -c "'batch.max_messages' changed; restart to apply" "$log")
kill -HUP "$IDEMD_PID_a"
idem_wait_until 10 "the second reload" grep -q "reloaded '.*idemd.yaml': 1 setting changed, 0 applied, 1 need a restart" "$log"
[ "$(grep -c "'batch.max_messages' changed; restart to apply" "$log")" -gt "$n_warn" ] ||
	idem_fail "the second reload does not repeat the pending restart-only change"
[ "$(grep -c "'log.level' changed to" "$log")" = 1 ] || idem_fail "log.level reported as changed twice"

# A broken file: refused with its errors, the running configuration kept.
echo "nonsense_key: 1" >>"$cfg"
kill -HUP "$IDEMD_PID_a"
idem_wait_until 10 "the refused reload" grep -q "reload failed, keeping the running configuration" "$log"
grep -Eq "idemd.yaml:[0-9]+:1: error: unknown section 'nonsense_key'" "$log" || idem_fail "the refused reload does not say why"
idem_produce --count 200 --dup-ratio 0 --seed 3
idem_wait_done g-reload 60
idem_assert_eq "claims after the refused reload" 600 "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idemd_stop a

# The restart applies batch.max_messages 7: the same burst now makes small transactions only.
sed -i '/^nonsense_key: 1$/d' "$cfg"
idemd_start a "$cfg"
burst 4
idem_wait_done g-reload 60
idem_assert_eq "claims after the restart" 800 "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
largest_after=$(largest_tx 4)
idem_log "after the restart: at most $largest_after claims of the burst in one transaction"
[ "$largest_after" -le "$tx_max_at_7" ] ||
	idem_fail "a transaction claimed $largest_after keys after the restart with batch.max_messages 7 (at most $tx_max_at_7)"
idemd_stop a
echo "ok: SIGHUP applied log.level, named batch.max_messages for a restart (largest transaction $largest claims before it, $largest_after after), refused a broken file and kept running"
