#!/usr/bin/env bash
# SIGHUP: a valid file changes log.level at once; a broken file is refused and the running
# configuration kept (idemd goes on applying).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_tmp_init
idem_pg_start
idem_kafka_start payments:2
cfg=$IDEM_TMP/idemd.yaml
idem_write_config "$cfg" g-reload payments --log-level info
idem_setup_db "$cfg"
log=$IDEM_TMP/idemd-a.log
idemd_start a "$cfg"
idem_produce 200 0 1
idem_wait_done g-reload 60
grep -q ' debug batch: committed' "$log" && idem_fail "debug lines at level info"

sed -i 's/^  level: info$/  level: debug/' "$cfg"
kill -HUP "$IDEMD_PID_a"
idem_wait_until 10 "the reload" grep -q 'reloaded log.level=debug' "$log"
idem_produce 200 0 2
idem_wait_done g-reload 60
grep -q ' debug batch: committed' "$log" || idem_fail "no debug lines after reloading level debug"

# A broken file: refused with its errors, the running configuration kept.
echo "nonsense_key: 1" >>"$cfg"
kill -HUP "$IDEMD_PID_a"
idem_wait_until 10 "the refused reload" grep -q "reload failed, keeping the running configuration" "$log"
grep -Eq "idemd.yaml:[0-9]+:1: error: unknown section 'nonsense_key'" "$log" || idem_fail "the refused reload does not say why"
idem_produce 200 0 3
idem_wait_done g-reload 60
idem_assert_eq "claims after the refused reload" 600 "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idemd_stop a
echo "ok: SIGHUP applied log.level, refused a broken file and kept running"
