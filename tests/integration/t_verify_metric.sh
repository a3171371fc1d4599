#!/usr/bin/env bash
# idemd_partition_kafka_ahead_messages is idemctl verify's loss alarm as a metric (the
# IdemdVerifyLossAlarm alert): after a run, the database of partition 2 is set 7 offsets behind
# Kafka's committed offset (a database restored from an older backup); verify exits 3, and when
# idemd takes the partitions again the gauge says 7 for partition 2 and 0 for the others: per
# partition, what verify --json shows as Kafka's committed offset minus the database's progress.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

command -v python3 >/dev/null || idem_fail "python3 is not installed"
idem_tmp_init
idem_pg_start
idem_kafka_start payments:4
cfg=$IDEM_TMP/idemd.yaml
idem_write_config "$cfg" g-verify payments
port=$((20000 + RANDOM % 20000))
printf 'metrics:\n  listen: "127.0.0.1:%s"\n' "$port" >>"$cfg"
idem_setup_db "$cfg"
url=http://127.0.0.1:$port
ctl() { "$IDEM_BIN/idemctl" -c "$cfg" "$@"; }
# gauges FILE: "PARTITION VALUE" per line, of idemd_partition_kafka_ahead_messages, sorted.
gauges() {
	sed -n 's/^idemd_partition_kafka_ahead_messages{topic="payments",partition="\([0-9]*\)"} \([0-9]*\)$/\1 \2/p' "$1" | sort
}

idem_produce 2000 0.2 41
idemd_start a "$cfg"
idem_wait_done g-verify 120
curl -fsS "$url/metrics" >"$IDEM_TMP/first.prom"
idem_assert_eq "gauges of a first start" "0 0|1 0|2 0|3 0" "$(gauges "$IDEM_TMP/first.prom" | paste -sd '|')"
idemd_stop a
ctl verify >/dev/null || idem_fail "verify after a clean run"

idem_psql -c "UPDATE idem.partition_progress SET next_offset = next_offset - 7 WHERE partition = 2"
rc=0
ctl verify >/dev/null || rc=$?
idem_assert_eq "verify exit status with Kafka ahead" 3 "$rc"

idemd_start b "$cfg"
idem_wait_until 30 "/readyz" curl -fsS "$url/readyz" -o /dev/null
curl -fsS "$url/metrics" >"$IDEM_TMP/second.prom"
idem_assert_eq "gauges with Kafka 7 ahead on partition 2" "0 0|1 0|2 7|3 0" \
	"$(gauges "$IDEM_TMP/second.prom" | paste -sd '|')"
rc=0
ctl verify --json >"$IDEM_TMP/verify.json" || rc=$?
idem_assert_eq "verify exit status while idemd runs" 3 "$rc"
want=$(python3 -c '
import json, sys
for p in sorted(json.load(open(sys.argv[1])), key=lambda p: p["partition"]):
    print(p["partition"], max(0, (p["kafka_committed"] or 0) - max(p["database_progress"] or 0, 0)))
' "$IDEM_TMP/verify.json" | paste -sd '|')
idem_assert_eq "gauges = what verify shows" "$want" "$(gauges "$IDEM_TMP/second.prom" | paste -sd '|')"
idemd_stop b
echo "ok: idemd_partition_kafka_ahead_messages agrees with idemctl verify ($want)"
