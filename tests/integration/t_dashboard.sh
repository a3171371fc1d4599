#!/usr/bin/env bash
# The Grafana dashboard (etc/grafana/idemd-dashboard.json) and the alert rules
# (etc/prometheus/idemd-alerts.yml) use only metrics idemd exports: idemd runs with the outbox
# relay and a short retention interval (so that the metrics shown only with them are there),
# applies payments whose handler emits an event each, and every metric name of every dashboard
# expression and every alert expression must be in its real /metrics (a histogram's _bucket,
# _sum and _count series by its family). The dashboard has a data source variable and no fixed
# data source uid.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

command -v promtool >/dev/null || idem_fail "promtool (Debian package prometheus) is not installed"
command -v python3 >/dev/null || idem_fail "python3 is not installed"
idem_fixture --topics "payments:4 payment-applied:4"
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-dashboard payments --max 50 --route-name pay \
	--sql "$IDEM_EMIT_SQL" --mode row \
	--outbox enabled=true --outbox poll_interval_ms=20 --outbox batch=100 --metrics "127.0.0.1:$port" --retention interval=1s
idem_setup_db "$cfg"
idem_create_emit_fn

idem_produce --count 1000 --dup-ratio 0.2 --seed 23
idemd_start a "$cfg"
idem_wait_done g-dashboard 120
url=http://127.0.0.1:$port/metrics
metric() { curl -fsS "$url" | awk -v m="$1" '$1 == m { print $2 }'; }
published_all() { [ "$(metric idemd_outbox_published_total)" = "$IDEM_UNIQUE" ]; }
idem_wait_until 60 "idemd_outbox_published_total reaches $IDEM_UNIQUE" published_all
claim_age() { [ -n "$(metric idemd_oldest_claim_age_seconds)" ]; }
idem_wait_until 30 "idemd_oldest_claim_age_seconds (retention.interval 1s)" claim_age
sleep 1.5 # one publication interval, for the per-partition gauges
curl -fsS "$url" >"$IDEM_TMP/scrape.prom"
promtool check metrics <"$IDEM_TMP/scrape.prom" || idem_fail "promtool refuses /metrics"
idem_assert_eq "applied" "$IDEM_UNIQUE" "$(awk '$1 == "idemd_messages_applied_total" {print $2}' "$IDEM_TMP/scrape.prom")"

python3 "$IDEM_SRC/tests/prometheus/promql_names.py" names "$IDEM_TMP/scrape.prom" \
	"$IDEM_SRC/etc/grafana/idemd-dashboard.json" "$IDEM_SRC/etc/prometheus/idemd-alerts.yml" ||
	idem_fail "the dashboard or the alert rules use a metric idemd does not export (above)"
idemd_stop a
echo "ok: every dashboard and alert expression uses metrics of a real scrape: $(idem_counts payments)"
