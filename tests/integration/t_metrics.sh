#!/usr/bin/env bash
# Metrics and health over HTTP: /healthz, /readyz, and /metrics in the Prometheus text format
# (checked by promtool), scraped before and after a run, with the counters matching the
# database's own.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

command -v promtool >/dev/null || idem_fail "promtool (Debian package prometheus) is not installed"
idem_fixture --topics payments:4
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-metrics payments --workers 3 --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
url=http://127.0.0.1:$port

idemd_start a "$cfg"
idem_wait_until 20 "/healthz" curl -fsS "$url/healthz" -o /dev/null
idem_assert_eq "/healthz" "ok" "$(curl -fsS "$url/healthz")"
idem_wait_until 30 "/readyz" curl -fsS "$url/readyz" -o /dev/null
idem_assert_eq "/readyz" "ready" "$(curl -fsS "$url/readyz")"
idem_assert_eq "unknown path" 404 "$(curl -s -o /dev/null -w '%{http_code}' "$url/nope")"

curl -fsS "$url/metrics" >"$IDEM_TMP/before.prom"
promtool check metrics <"$IDEM_TMP/before.prom"
metric() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
idem_assert_eq "consumed before" 0 "$(metric idemd_messages_consumed_total "$IDEM_TMP/before.prom")"

idem_produce --count 5000 --dup-ratio 0.3 --seed 9
idem_wait_done g-metrics 120
sleep 1.5 # one publication interval, for the gauges
curl -fsS "$url/metrics" >"$IDEM_TMP/after.prom"
promtool check metrics <"$IDEM_TMP/after.prom"
db() { idem_psql -c "SELECT sum($1) FROM idem.partition_progress WHERE consumer = 'payments'"; }
idem_assert_eq "consumed" "$(db consumed)" "$(metric idemd_messages_consumed_total "$IDEM_TMP/after.prom")"
idem_assert_eq "applied" "$(db applied)" "$(metric idemd_messages_applied_total "$IDEM_TMP/after.prom")"
idem_assert_eq "applied = unique" "$IDEM_UNIQUE" "$(metric idemd_messages_applied_total "$IDEM_TMP/after.prom")"
idem_assert_eq "quarantined" "$(db quarantined)" "$(metric idemd_messages_quarantined_total "$IDEM_TMP/after.prom")"
idem_assert_eq "upstream duplicates" "$(db dup_upstream)" "$(metric 'idemd_duplicates_total{kind="upstream"}' "$IDEM_TMP/after.prom")"
idem_assert_eq "replay duplicates" "$(db dup_replay)" "$(metric 'idemd_duplicates_total{kind="replay"}' "$IDEM_TMP/after.prom")"
idem_assert_eq "redelivery duplicates" "$(db dup_redelivery)" "$(metric 'idemd_duplicates_total{kind="redelivery"}' "$IDEM_TMP/after.prom")"
idem_assert_eq "batch count" "$(metric idemd_batches_total "$IDEM_TMP/after.prom")" \
	"$(metric idemd_batch_size_messages_count "$IDEM_TMP/after.prom")"
idem_assert_eq "pool gauges: workers, in flight, held" "3 0 0" \
	"$(metric idemd_workers "$IDEM_TMP/after.prom") $(metric idemd_batches_in_flight "$IDEM_TMP/after.prom") $(metric idemd_partitions_held "$IDEM_TMP/after.prom")"
idem_assert_eq "batch bytes: budget (batch.max_bytes_total's default), held once idle" "268435456 0" \
	"$(metric idemd_batch_bytes_budget "$IDEM_TMP/after.prom") $(metric idemd_batch_bytes_held "$IDEM_TMP/after.prom")"
idem_assert_eq "worker connections" 3 \
	"$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemd'")"
idem_assert_eq "lag gauges all zero" "0 4" "$(awk '/^idemd_partition_lag_messages\{/ {s += $2; n++} END {print s + 0, n + 0}' "$IDEM_TMP/after.prom")"
for p in 0 1 2 3; do
	idem_assert_eq "progress gauge of partition $p" \
		"$(idem_psql -c "SELECT next_offset FROM idem.partition_progress WHERE consumer = 'payments' AND partition = $p")" \
		"$(metric "idemd_partition_database_progress{topic=\"payments\",partition=\"$p\"}" "$IDEM_TMP/after.prom")"
done
grep -q '^idemd_build_info{version="' "$IDEM_TMP/after.prom" || idem_fail "no build info"
idemd_stop a
echo "ok: metrics match the database: $(idem_counts payments)"
