#!/usr/bin/env bash
# Retention: idemd purges claims older than retention.keep in the background, leaves every
# younger claim, records the horizon, and keeps applying meanwhile; idemctl purge does the
# same on demand.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config idemd.yaml g-ret payments \
	--retention keep=1h --retention interval=1s --retention batch=100
cfg=$IDEM_CFG
idem_produce --count 3000 --dup-ratio 0.2 --seed 13
idemd_start a "$cfg"
idem_wait_done g-ret 120
total=$(idem_psql -c "SELECT count(*) FROM idem.processed_messages")
idem_assert_eq "claims before aging" "$IDEM_UNIQUE" "$total"

# Age 1000 claims past keep (two hours), and 200 to just under it (59 minutes).
idem_psql -c "UPDATE idem.processed_messages SET processed_at = now() - interval '2 hours' WHERE business_key IN (SELECT business_key FROM idem.processed_messages ORDER BY business_key LIMIT 1000)"
idem_psql -c "UPDATE idem.processed_messages SET processed_at = now() - interval '59 minutes' WHERE business_key IN (SELECT business_key FROM idem.processed_messages ORDER BY business_key DESC LIMIT 200)"
claims_are() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')" -eq "$1" ]; }
idem_wait_until 30 "the background purge" claims_are $((total - 1000))
idem_assert_eq "claims older than keep" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE processed_at < now() - interval '1 hour'")"
idem_assert_eq "young claims kept" 200 \
	"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE processed_at < now() - interval '58 minutes'")"
idem_assert_eq "horizon recorded" t \
	"$(idem_psql -c "SELECT purged_before BETWEEN now() - interval '61 minutes' AND now() - interval '59 minutes' FROM idem.retention_horizon WHERE consumer = 'payments'")"

# The pipeline goes on applying while the purge runs.
idem_produce --count 500 --dup-ratio 0 --seed 14
idem_wait_done g-ret 60
idem_assert_eq "claims after more messages" $((total - 1000 + IDEM_UNIQUE)) \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idemd_stop a

# On demand: everything older than 30 minutes.
out=$("$IDEM_BIN/idemctl" -c "$cfg" purge --older-than 30m)
idem_assert_eq "idemctl purge output" "consumer=payments purged=200 older_than_s=1800" "$out"
idem_assert_eq "claims older than 30 minutes" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE processed_at < now() - interval '30 minutes'")"
echo "ok: purged 1000 + 200 old claims, kept the rest"
