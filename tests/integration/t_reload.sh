#!/usr/bin/env bash
# SIGHUP: a valid file changes log.level at once and names each restart-only change; a broken
# file is refused and the running configuration kept (idemd goes on applying).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config idemd.yaml g-reload payments --log-level info
cfg=$IDEM_CFG
log=$IDEM_TMP/idemd-a.log
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
idem_produce --count 200 --dup-ratio 0 --seed 2
idem_wait_done g-reload 60
grep -q ' debug batch: committed' "$log" || idem_fail "no debug lines after reloading level debug"
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
echo "ok: SIGHUP applied log.level, named batch.max_messages for a restart, refused a broken file and kept running"
