#!/usr/bin/env bash
# Nothing on the consumer thread waits on the schema registry (ARCHITECTURE.md "Avro"). One
# idemd, two routes: JSON payments (topic payments, no schema needed) and Avro payments (topic
# payments_avro).
# 1. Brownout: the registry answers every schema request after 25 s (timeout_ms 30000). The
#    JSON route's whole backlog is applied while the registry has not answered yet, and no Avro
#    payment is applied before it has; then every Avro payment is applied, nothing is
#    quarantined. Before fetches left the consumer thread, the JSON route waited the 25 s of
#    every first schema fetch with the rest.
# 2. A proxy in front of the registry answers 404 with an HTML page for the first 10 s after
#    idemd restarts (its schema cache empty): that is no answer about the schema, so the Avro
#    partitions wait (the log says why, with the answer's first bytes), nothing is quarantined,
#    and everything is applied once the registry answers. Before, a 404 was "unknown schema"
#    and every such message was quarantined.
# Both: every payment exactly once, the balances right, per route.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

DELAY_MS=${IDEM_BROWNOUT_DELAY_MS:-25000}
idem_fixture --topics "payments:4 payments_avro:4"
idem_registry_start --delay-ms "$DELAY_MS"
idem_avro_encode payments-schema >"$IDEM_TMP/p.avsc"
id=$(idem_registry_register payments_avro-value "$IDEM_TMP/p.avsc")

# The JSON route from the tests' writer, the Avro route appended to its routes.
idem_write_config "$IDEM_TMP/json.yaml" g-brown payments \
	--registry "url=\"$IDEM_REGISTRY_URL\"" --registry "timeout_ms=30000"
idem_write_config "$IDEM_TMP/avro.yaml" g-brown payments_avro --topic payments_avro \
	--route-name payments_avro --key '${avro:/payment_id}' \
	--params '[business_key, "avro:/account", "avro:/amount"]'
python3 - "$IDEM_TMP/json.yaml" "$IDEM_TMP/avro.yaml" "$IDEM_TMP/idemd.yaml" <<'PY'
import sys
def route_of(text):
    start = text.index("routes:\n") + len("routes:\n")
    end = start
    lines = text[start:].splitlines(keepends=True)
    for line in lines:
        if line and not line.startswith(" "):
            break
        end += len(line)
    return start, end
a, b = open(sys.argv[1]).read(), open(sys.argv[2]).read()
_, end = route_of(a)
bs, be = route_of(b)
open(sys.argv[3], "w").write(a[:end] + b[bs:be] + a[end:])
PY
idem_setup_db "$IDEM_TMP/idemd.yaml"
"$IDEM_BIN/idemd" --check-config -c "$IDEM_TMP/idemd.yaml" >/dev/null ||
	idem_fail "the two-route configuration does not check"

claims_of() { idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$1'"; }
claims_are() { test "$(claims_of "$1")" = "$2"; }
answered() { grep -c "^GET /schemas/ids/.* 200$" "$IDEM_REGISTRY_LOG" || true; }

# 1. Brownout.
idem_produce --count 10000 --dup-ratio 0.1 --seed 1
cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/json.csv"
json_unique=$IDEM_UNIQUE
idem_avro_encode payments --seed 2 --count 2000 --dup-ratio 0.1 --schema-id "$id" \
	--partitions 4 --manifest "$IDEM_TMP/avro.csv" --output "$IDEM_TMP/s2.txt" >/dev/null
idem_avro_produce payments_avro "$IDEM_TMP/s2.txt"
t0=$(date +%s%N)
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 120 "the JSON backlog applied" claims_are payments "$json_unique"
t1=$(date +%s%N)
avro_then=$(claims_of payments_avro)
answered_then=$(answered)
idem_log "JSON backlog of $json_unique payments applied $(((t1 - t0) / 1000000)) ms after idemd started, the registry slow (${DELAY_MS} ms per answer)"
span_ms=$(idem_psql -c "SELECT round(extract(epoch FROM max(processed_at) - min(processed_at)) * 1000) FROM idem.claims_named WHERE consumer = 'payments'")
idem_log "JSON route: first to last claim in $span_ms ms (its rate while the registry is slow)"
idem_assert_eq "schema answers before the JSON backlog was applied" 0 "$answered_then"
idem_assert_eq "Avro payments applied before the registry answered" 0 "$avro_then"
idem_wait_until 120 "the Avro backlog applied" claims_are payments_avro "$(wc -l <"$IDEM_TMP/avro.csv")"
idem_assert_eq "quarantined during the brownout" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idemd_stop a
idem_registry_stop

# 2. A proxy's 404 for 10 s, idemd started again (its cache empty).
idem_registry_start --proxy-404-ms 10000
idem_avro_encode payments --seed 3 --count 2000 --dup-ratio 0.1 --schema-id "$id" \
	--partitions 4 --manifest "$IDEM_TMP/avro3.csv" --output "$IDEM_TMP/s3.txt" >/dev/null
idem_avro_produce payments_avro "$IDEM_TMP/s3.txt"
idemd_start b "$IDEM_TMP/idemd.yaml"
avro_total=$(($(wc -l <"$IDEM_TMP/avro.csv") + $(wc -l <"$IDEM_TMP/avro3.csv")))
idem_wait_until 120 "the Avro payments after the proxy's 404s applied" claims_are payments_avro "$avro_total"
idemd_stop b
grep -q "^GET /schemas/ids/$id 404$" "$IDEM_REGISTRY_LOG" || idem_fail "the proxy never answered 404"
grep -q "partition waits for the schema registry.*schema id $id.*404.*<html>" "$IDEM_TMP/idemd-b.log" ||
	idem_fail "no log line says the partition waits for schema id $id because of a 404 that is not the registry's"
idem_assert_eq "quarantined behind the proxy's 404" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"

# Every payment of both routes exactly once.
cat "$IDEM_TMP/json.csv" "$IDEM_TMP/avro.csv" "$IDEM_TMP/avro3.csv" >"$IDEM_TMP/manifest.csv"
idem_psql -c "CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
idem_assert_eq "JSON claims" "$json_unique" "$(claims_of payments)"
idem_assert_eq "Avro claims" "$avro_total" "$(claims_of payments_avro)"
idem_assert_eq "ledger rows not expected once" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id, count(*) FROM ledger GROUP BY 1) l FULL JOIN expected e USING (payment_id) WHERE l.count IS DISTINCT FROM 1 OR e.payment_id IS NULL')"
idem_assert_eq "accounts with wrong balance" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
echo "ok: JSON route applied while the registry was slow, Avro waited and applied; the proxy's 404s waited, nothing quarantined; $(idem_counts payments)"
