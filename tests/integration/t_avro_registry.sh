#!/usr/bin/env bash
# The schema registry's failures, as idemd.yaml(5) AVRO VALUES says: a registry that is down (or
# answers 503) makes the partitions that need a schema they have not seen wait, nothing is
# quarantined, and everything is applied once it is back; an id the registry does not know (404)
# quarantines exactly its messages, naming the id, while their neighbours are applied; SIGHUP
# asks the registry again at once instead of after the backoff (15 s here); basic authentication
# with the password from the environment, which no log shows.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

pw='s3cr3t-registry-pw'
idem_fixture --topics payments:4
idem_registry_start --user idemd --password "$pw"
idem_avro_encode payments-schema >"$IDEM_TMP/p.avsc"
# Three more ids for the same encoding: the text differs (a doc), the bytes written do not.
for n in 2 3 4; do
	sed "s/^{/{\"doc\": \"v$n\", /" "$IDEM_TMP/p.avsc" >"$IDEM_TMP/p$n.avsc"
done
id1=$(idem_registry_register payments-value "$IDEM_TMP/p.avsc")
id2=$(idem_registry_register payments-value "$IDEM_TMP/p2.avsc")
id3=$(idem_registry_register payments-value "$IDEM_TMP/p3.avsc")
id4=$(idem_registry_register payments-value "$IDEM_TMP/p4.avsc")
[ "$(printf '%s\n' "$id1" "$id2" "$id3" "$id4" | sort -u | wc -l)" = 4 ] || idem_fail "ids not distinct"

metrics_port=$(idem_free_port)
export IDEMD_TEST_REGISTRY_PW=$pw
idem_write_config "$IDEM_TMP/idemd.yaml" g-reg payments --key 'avro:/payment_id' \
	--params '[business_key, "avro:/account", "avro:/amount"]' --metrics "127.0.0.1:$metrics_port" \
	--registry "url=\"$IDEM_REGISTRY_URL\"" --registry "username=idemd" --registry "allow_insecure_auth=true" \
	--registry "password_env=IDEMD_TEST_REGISTRY_PW" --registry "timeout_ms=1000" \
	--retry initial_ms=15000 --retry max_ms=30000
idem_setup_db "$IDEM_TMP/idemd.yaml"

# payments SEED COUNT ID: payments of seed SEED framed with schema id ID, into $IDEM_TMP/sSEED.*
payments() {
	idem_avro_encode payments --seed "$1" --count "$2" --dup-ratio 0.1 --schema-id "$3" \
		--partitions 4 --manifest "$IDEM_TMP/s$1.csv" --output "$IDEM_TMP/s$1.txt" >/dev/null
}
claims_are() { test "$(claims_of "$1")" = "$2"; }
claims_of() { idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments' AND business_key LIKE 'pay-$1-%'"; }
uniq_of() { wc -l <"$IDEM_TMP/s$1.csv"; }
waits_over() { test "$(waits)" -gt "$1"; }
quarantined_is() { test "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')" = "$1"; }
waits() { curl -fsS "http://127.0.0.1:$metrics_port/metrics" | sed -n 's/^idemd_schema_registry_waits_total //p'; }

# 1. Registry up: seed 1 (id1) applied.
payments 1 3000 "$id1"
idem_avro_produce payments "$IDEM_TMP/s1.txt"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 120 "seed 1 applied" claims_are 1 "$(uniq_of 1)"

# 2. Registry down: seed 2 needs id2, never seen. Its partitions wait; nothing is quarantined.
idem_registry_stop
payments 2 2000 "$id2"
idem_avro_produce payments "$IDEM_TMP/s2.txt"
idem_wait_until 30 "partitions wait for the registry" waits_over 0
sleep 3
idem_assert_eq "seed 2 applied while the registry is down" 0 "$(claims_of 2)"
idem_assert_eq "quarantined while the registry is down" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
grep -q "partition waits for the schema registry.*schema id $id2" "$IDEM_TMP/idemd-a.log" ||
	idem_fail "no log line says a partition waits for schema id $id2"

# 3. Back, answering 503: still waiting, still nothing quarantined.
idem_registry_start --user idemd --password "$pw" --fail-5xx
w=$(waits)
kill -HUP "$(idemd_pid a)"
idem_wait_until 10 "waits go on at once after SIGHUP while the registry answers 503" waits_over "$w"
idem_assert_eq "seed 2 applied while the registry answers 503" 0 "$(claims_of 2)"
idem_assert_eq "quarantined while the registry answers 503" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_registry_stop

# 4. Back for real, with id3 unknown to it (404): seed 2 is applied. Then seed 3 (id3) and
#    seed 4 (id4) interleaved: only seed 3's messages are quarantined, naming the id.
idem_registry_start --user idemd --password "$pw" --hide-ids "$id3"
kill -HUP "$(idemd_pid a)"
idem_wait_until 10 "seed 2 applied at once after SIGHUP" claims_are 2 "$(uniq_of 2)"
payments 3 400 "$id3"
payments 4 1000 "$id4"
paste -d '\n' "$IDEM_TMP/s3.txt" <(head -400 "$IDEM_TMP/s4.txt") >"$IDEM_TMP/s34.txt"
tail -n +401 "$IDEM_TMP/s4.txt" >>"$IDEM_TMP/s34.txt"
idem_avro_produce payments "$IDEM_TMP/s34.txt"
idem_wait_until 60 "seed 4 applied" claims_are 4 "$(uniq_of 4)"
idem_wait_until 60 "seed 3 quarantined" quarantined_is 400
# The client's own account (published about once a second): three schemas held (id3 is not
# one), answers of each kind.
metrics_show_3() {
	curl -fsS "http://127.0.0.1:$metrics_port/metrics" >"$IDEM_TMP/metrics.txt"
	grep -qx 'idemd_schema_registry_schemas 3' "$IDEM_TMP/metrics.txt" &&
		! grep -qx 'idemd_schema_registry_requests_total{answer="unknown"} 0' "$IDEM_TMP/metrics.txt"
}
idem_wait_until 10 "the metrics show 3 schemas held" metrics_show_3
idem_assert_eq "ok answers" 3 "$(sed -n 's/^idemd_schema_registry_requests_total{answer="ok"} //p' "$IDEM_TMP/metrics.txt")"
[ "$(sed -n 's/^idemd_schema_registry_requests_total{answer="unknown"} //p' "$IDEM_TMP/metrics.txt")" -ge 1 ] ||
	idem_fail "no unknown answer counted"
[ "$(sed -n 's/^idemd_schema_registry_requests_total{answer="unavailable"} //p' "$IDEM_TMP/metrics.txt")" -ge 2 ] ||
	idem_fail "the outage and the 503s were not counted"
idemd_stop a

idem_assert_eq "seed 3 applied" 0 "$(claims_of 3)"
idem_assert_eq "quarantine rows not naming id $id3 and its 404" 0 "$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE reason NOT LIKE 'business key: avro:/payment_id: value is not Avro this route can read: schema id $id3: %404%'")"
# Quarantined with their bytes: the Confluent header names id3.
idem_assert_eq "quarantined bytes" "00$(printf '%08x' "$id3")" \
	"$(idem_psql -c "SELECT DISTINCT encode(substr(msg_value, 1, 5), 'hex') FROM idem.quarantine")"
# Everything else exactly once: one claim and one ledger row per unique payment, balances right.
cat "$IDEM_TMP/s1.csv" "$IDEM_TMP/s2.csv" "$IDEM_TMP/s4.csv" >"$IDEM_TMP/manifest.csv"
idem_psql -c "CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
idem_assert_eq "claims" "$(wc -l <"$IDEM_TMP/manifest.csv")" \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments'")"
idem_assert_eq "ledger rows not expected once" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id, count(*) FROM ledger GROUP BY 1) l FULL JOIN expected e USING (payment_id) WHERE l.count IS DISTINCT FROM 1 OR e.payment_id IS NULL')"
idem_assert_eq "accounts with wrong balance" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
# Authenticated, and the password is in no log.
grep -q " 401$" "$IDEM_REGISTRY_LOG" && idem_fail "idemd was refused by the registry (401)"
! grep -rq "$pw" "$IDEM_TMP"/idemd-*.log || idem_fail "the registry password appears in idemd's log"
echo "ok: waited through a registry outage and 503s, quarantined only id $id3's 404s; $(idem_counts payments)"
