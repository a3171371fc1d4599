#!/usr/bin/env bash
# The alert rules (etc/prometheus/idemd-alerts.yml): promtool accepts them, every alert has an
# expression, for:, a severity, a summary and a description, and promtool's unit tests
# (tests/prometheus/idemd-alerts.test.yml: series that must fire each alert and series that must
# not) pass. No Postgres nor Kafka. Which metrics the rules use is checked against a real scrape
# by t_dashboard.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"

command -v promtool >/dev/null || idem_fail "promtool (Debian package prometheus) is not installed"
command -v python3 >/dev/null || idem_fail "python3 is not installed"
rules=$IDEM_SRC/etc/prometheus/idemd-alerts.yml
tests=$IDEM_SRC/tests/prometheus/idemd-alerts.test.yml

promtool check rules "$rules" || idem_fail "promtool check rules refuses $rules"
python3 "$IDEM_SRC/tests/prometheus/promql_names.py" rules "$rules" ||
	idem_fail "an alert of $rules lacks a part"
promtool test rules "$tests" || idem_fail "promtool test rules: $tests"

# The unit tests are sharp: with a threshold changed, they fail.
idem_tmp_init
mkdir -p "$IDEM_TMP/etc/prometheus" "$IDEM_TMP/tests/prometheus"
sed 's/idemd_outbox_oldest_pending_seconds > 300/idemd_outbox_oldest_pending_seconds > 3000/' \
	"$rules" >"$IDEM_TMP/etc/prometheus/idemd-alerts.yml"
cp "$tests" "$IDEM_TMP/tests/prometheus/"
if promtool test rules "$IDEM_TMP/tests/prometheus/idemd-alerts.test.yml" >/dev/null 2>&1; then
	idem_fail "promtool test rules passes with IdemdOutboxStuck's threshold changed"
fi
echo "ok: alert rules checked and unit-tested"
