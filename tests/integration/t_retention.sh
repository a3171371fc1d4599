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

# On demand, under retention.keep: refused without --force (exit status 1, nothing deleted),
# since a redelivery of a message whose claim is gone would apply it again.
claims=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
for age in 0 30m 59m; do
	rc=0
	"$IDEM_BIN/idemctl" -c "$cfg" purge --older-than "$age" >"$IDEM_TMP/purge.out" \
		2>"$IDEM_TMP/purge.err" || rc=$?
	idem_assert_eq "exit status of purge --older-than $age" 1 "$rc"
	grep -q "claims younger than 3600s (retention.keep of '$cfg') protect against redeliveries; purging them lets a redelivered message be applied again" \
		"$IDEM_TMP/purge.err" || idem_fail "purge --older-than $age: $(cat "$IDEM_TMP/purge.err")"
	idem_assert_eq "claims after a refused purge --older-than $age" "$claims" \
		"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
done
# At retention.keep or above, no --force needed.
out=$("$IDEM_BIN/idemctl" -c "$cfg" purge --older-than 1h)
idem_assert_eq "idemctl purge --older-than 1h output" "consumer=payments purged=0 older_than_s=3600" "$out"

# The purge sweeps the table in block order, 128 blocks a step (the claims have no index on
# their age): 30,000 more claims, every third two hours old, spread over about 300 blocks, all
# the old ones purged across the steps, every young one kept.
idem_psql -c "INSERT INTO idem.processed_messages (processed_at, \"offset\", partition, topic_id, consumer_id, business_key) SELECT CASE WHEN g % 3 = 0 THEN now() - interval '2 hours' ELSE now() END, g, 0, (SELECT id FROM idem.claim_topics WHERE name = 'payments'), idem.claim_consumer_id('payments'), 'sweep-' || g FROM generate_series(1, 30000) AS g" >/dev/null
blocks=$(idem_psql -c "SELECT pg_relation_size('idem.processed_messages') / 8192")
[ "$blocks" -gt 260 ] || idem_fail "the sweep's table has only $blocks blocks, under three steps"
out=$("$IDEM_BIN/idemctl" -c "$cfg" purge --older-than 1h)
idem_assert_eq "idemctl purge over $blocks blocks" "consumer=payments purged=10000 older_than_s=3600" "$out"
idem_assert_eq "the sweep's young claims kept, none of the old" "20000 0" \
	"$(idem_psql -F ' ' -c "SELECT count(*) FILTER (WHERE processed_at > now() - interval '1 hour'), count(*) FILTER (WHERE processed_at < now() - interval '1 hour') FROM idem.processed_messages WHERE business_key LIKE 'sweep-%'")"
idem_psql -c "DELETE FROM idem.processed_messages WHERE business_key LIKE 'sweep-%'" >/dev/null

# With --force: everything older than 30 minutes, then everything.
out=$("$IDEM_BIN/idemctl" -c "$cfg" purge --older-than 30m --force)
idem_assert_eq "idemctl purge output" "consumer=payments purged=200 older_than_s=1800" "$out"
idem_assert_eq "claims older than 30 minutes" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE processed_at < now() - interval '30 minutes'")"
out=$("$IDEM_BIN/idemctl" -c "$cfg" purge --force --older-than 0)
idem_assert_eq "idemctl purge --older-than 0 --force output" \
	"consumer=payments purged=$((claims - 200)) older_than_s=0" "$out"
idem_assert_eq "claims after purge --older-than 0 --force" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
echo "ok: purged 1000 + 200 old claims, kept the rest; a purge under retention.keep needs --force"
