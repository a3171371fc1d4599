#!/usr/bin/env bash
# JSON Schema values, as idemd.yaml(5) JSON SCHEMA VALUES says: a route with value_format:
# json-schema reads Confluent-framed JSON documents (byte 0, the 4-byte schema id, the document)
# through the schema registry. Payments under two schema versions on one topic are each applied
# once, and a v2 re-send of a v1 payment is a duplicate (an upstream re-send whose payload
# differs); bad frames (too short, a wrong magic byte, an id the registry does not know, an AVRO
# id, a document that is not JSON) are each quarantined once with their bytes and their reason,
# while their neighbours are applied; a registry that does not answer makes the partitions that
# need a new id wait, nothing quarantined, and they apply once it is back. --check-config refuses
# the route without a schema_registry section.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4
idem_registry_start
cat >"$IDEM_TMP/v1.json" <<'JSON'
{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Payment", "type": "object",
 "properties": {"payment_id": {"type": "string"}, "account": {"type": "string"},
  "amount": {"type": "integer"}},
 "required": ["payment_id", "account", "amount"]}
JSON
sed 's/"amount": {"type": "integer"}}/"amount": {"type": "integer"}, "currency": {"type": "string"}}/' \
	"$IDEM_TMP/v1.json" >"$IDEM_TMP/v2.json"
sed 's/"Payment"/"Payment v3"/' "$IDEM_TMP/v2.json" >"$IDEM_TMP/v3.json"
idem_avro_encode payments-schema >"$IDEM_TMP/p.avsc"
id1=$(idem_registry_register payments-value "$IDEM_TMP/v1.json" --schema-type JSON)
id2=$(idem_registry_register payments-value "$IDEM_TMP/v2.json" --schema-type JSON)
id3=$(idem_registry_register payments-value "$IDEM_TMP/v3.json" --schema-type JSON)
ida=$(idem_registry_register payments_avro-value "$IDEM_TMP/p.avsc")
[ "$(printf '%s\n' "$id1" "$id2" "$id3" "$ida" | sort -u | wc -l)" = 4 ] || idem_fail "ids not distinct"

metrics_port=$(idem_free_port)
idem_write_config "$IDEM_TMP/idemd.yaml" g-js payments --route value_format=json-schema \
	--metrics "127.0.0.1:$metrics_port" --registry "url=\"$IDEM_REGISTRY_URL\"" \
	--registry "timeout_ms=1000"
idem_setup_db "$IDEM_TMP/idemd.yaml"
# Without the registry the route is refused, naming the key's place.
idem_write_config "$IDEM_TMP/noreg.yaml" g-js payments --route value_format=json-schema
if "$IDEM_BIN/idemd" --check-config -c "$IDEM_TMP/noreg.yaml" >"$IDEM_TMP/noreg.out" 2>&1; then
	idem_fail "--check-config accepted value_format json-schema without a schema_registry section"
fi
grep -q "noreg.yaml:[0-9]*:[0-9]*: error: route 'payments' has value_format 'json-schema' but there is no 'schema_registry' section" \
	"$IDEM_TMP/noreg.out" || idem_fail "unexpected --check-config output: $(cat "$IDEM_TMP/noreg.out")"

# payments FROM TO VERSION: payment documents FROM..TO of schema version 1 or 2 (v2 adds the
# currency; the account and amount of a payment are the same in both).
payments() {
	local i
	for ((i = $1; i <= $2; i++)); do
		if [ "$3" = 1 ]; then
			printf '{"payment_id":"pay-%d","account":"acct-%d","amount":%d}\n' "$i" $((i % 17)) $((i * 37 % 1000 + 1))
		else
			printf '{"payment_id": "pay-%d", "currency": "EUR", "account": "acct-%d", "amount": %d}\n' "$i" $((i % 17)) $((i * 37 % 1000 + 1))
		fi
	done
}
manifest() { # FROM TO: the expected rows (payment_id,account,amount)
	local i
	for ((i = $1; i <= $2; i++)); do printf 'pay-%d,acct-%d,%d\n' "$i" $((i % 17)) $((i * 37 % 1000 + 1)); done
}
frame() { idem_json_frame --key-field payment_id --schema-id "$@"; }
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
h() { printf '00%08x' "$1"; } # the Confluent header of schema id $1
claims_in() { idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments' AND business_key IN (SELECT 'pay-' || g FROM generate_series($1, $2) g)"; }
claims_in_are() { test "$(claims_in "$1" "$2")" = "$3"; }
quarantined() { idem_psql -c 'SELECT count(*) FROM idem.quarantine'; }
quarantined_is() { test "$(quarantined)" = "$1"; }
waits() { curl -fsS "http://127.0.0.1:$metrics_port/metrics" | sed -n 's/^idemd_schema_registry_waits_total //p'; }
waits_over() { test "$(waits)" -gt "$1"; }

# 1. v1 payments 1..300, with bad frames among them (each keyed by its name; reason as a LIKE
#    pattern, after "business key: json:/payment_id: ").
payments 1 300 1 | frame "$id1" >"$IDEM_TMP/v1.txt"
doc='{"payment_id":"bad","account":"acct-1","amount":1}'
bad=(
	"bad-short|000000|value is not JSON Schema this route can read: value is 3 bytes, shorter than the 5-byte Confluent header"
	"bad-magic|$(hex "$doc")|value is not JSON Schema this route can read: value starts with byte 123, not the Confluent magic byte 0"
	"bad-unknown|$(h 999)$(hex "$doc")|value is not JSON Schema this route can read: schema id 999: %404%"
	"bad-avro|$(h "$ida")$(hex "$doc")|value is not JSON Schema this route can read: schema id $ida is AVRO, not JSON"
	"bad-json|$(h "$id1")$(hex '{"payment_id":"bad","account":')|value is not valid JSON: unexpected end of data at byte 35"
)
: >"$IDEM_TMP/bad.txt"
for c in "${bad[@]}"; do
	IFS='|' read -r name value reason <<<"$c"
	printf '%s\t%s\n' "$(hex "$name")" "$value" >>"$IDEM_TMP/bad.txt"
done
# A bad frame after every 60th payment.
awk -v bad="$IDEM_TMP/bad.txt" 'NR % 60 == 0 && (getline b < bad) > 0 { print; print b; next } { print }' \
	"$IDEM_TMP/v1.txt" >"$IDEM_TMP/s1.txt"
[ "$(wc -l <"$IDEM_TMP/s1.txt")" = 305 ] || idem_fail "expected 305 messages in s1.txt"
idem_avro_produce payments "$IDEM_TMP/s1.txt"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "v1 payments applied" claims_in_are 1 300 300
idem_wait_until 30 "bad frames quarantined" quarantined_is 5

# 2. v2 (schema id 2): new payments 301..500, and payments 1..100 sent again in v2, interleaved.
payments 301 500 2 | frame "$id2" >"$IDEM_TMP/v2new.txt"
payments 1 100 2 | frame "$id2" >"$IDEM_TMP/v2again.txt"
paste -d '\n' "$IDEM_TMP/v2again.txt" <(head -100 "$IDEM_TMP/v2new.txt") >"$IDEM_TMP/s2.txt"
tail -n +101 "$IDEM_TMP/v2new.txt" >>"$IDEM_TMP/s2.txt"
idem_avro_produce payments "$IDEM_TMP/s2.txt"
idem_wait_until 60 "v2 payments applied" claims_in_are 301 500 200
consumed_is() { test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'payments'")" = "$1"; }
idem_wait_until 60 "v2 re-sends consumed" consumed_is 605

# 3. Registry down: payments 501..700 framed with id 3, which idemd has not seen. Their
#    partitions wait; nothing is quarantined, nothing of them applied. Back: all applied.
idem_registry_stop
payments 501 700 2 | frame "$id3" >"$IDEM_TMP/s3.txt"
idem_avro_produce payments "$IDEM_TMP/s3.txt"
idem_wait_until 30 "partitions wait for the registry" waits_over 0
sleep 3
idem_assert_eq "id $id3 payments applied while the registry is down" 0 "$(claims_in 501 700)"
idem_assert_eq "quarantined while the registry is down" 5 "$(quarantined)"
grep -q "partition waits for the schema registry.*schema id $id3" "$IDEM_TMP/idemd-a.log" ||
	idem_fail "no log line says a partition waits for schema id $id3"
idem_registry_start
idem_wait_until 60 "id $id3 payments applied once the registry is back" claims_in_are 501 700 200
idem_wait_until 30 "everything consumed" consumed_is 805
idemd_stop a

# Each bad frame quarantined once, with its bytes and its reason.
idem_assert_eq "quarantined" 5 "$(quarantined)"
for c in "${bad[@]}"; do
	IFS='|' read -r name value reason <<<"$c"
	idem_assert_eq "$name: quarantined once, with its reason ($(idem_psql -c "SELECT reason FROM idem.quarantine WHERE msg_key = '\\x$(hex "$name")'::bytea"))" 1 \
		"$(idem_psql -v "pat=business key: json:/payment_id: $reason" <<<"SELECT count(*) FROM idem.quarantine WHERE msg_key = '\\x$(hex "$name")'::bytea AND reason LIKE :'pat'")"
	idem_assert_eq "$name: bytes kept" "$value" \
		"$(idem_psql -c "SELECT encode(msg_value, 'hex') FROM idem.quarantine WHERE msg_key = '\\x$(hex "$name")'::bytea")"
done
# Every payment exactly once: one claim and one ledger row each, balances right. The v2
# re-sends of payments 1..100 are upstream duplicates whose payload differs from the claim's.
manifest 1 700 >"$IDEM_TMP/manifest.csv"
idem_psql -c "CREATE TABLE expected (payment_id text PRIMARY KEY, account text, amount bigint)"
idem_psql -c "\\copy expected FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)"
idem_assert_eq "claims" 700 "$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments'")"
idem_assert_eq "ledger rows not expected once" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id, account, amount, count(*) FROM ledger GROUP BY 1, 2, 3) l FULL JOIN expected e USING (payment_id, account, amount) WHERE l.count IS DISTINCT FROM 1 OR e.payment_id IS NULL')"
idem_assert_eq "accounts with wrong balance" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM expected GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
idem_assert_eq "claims of payments 1..100 made by their v1 message" 100 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named p WHERE consumer = 'payments' AND business_key IN (SELECT 'pay-' || g FROM generate_series(1, 100) g) AND p.\"offset\" < (SELECT min(\"offset\") FROM idem.claims_named q WHERE q.consumer = 'payments' AND q.partition = p.partition AND q.business_key IN (SELECT 'pay-' || g FROM generate_series(301, 500) g))")"
idem_assert_eq "consumed, applied, duplicates (upstream, payload differs), quarantined" "805|700|100|100|100|5" \
	"$(idem_psql -c "SELECT sum(consumed) || '|' || sum(applied) || '|' || sum(duplicates) || '|' || sum(dup_upstream) || '|' || sum(payload_mismatches) || '|' || sum(quarantined) FROM idem.partition_progress WHERE consumer = 'payments'")"
echo "ok: JSON Schema payments of ids $id1 and $id2 applied once (v2 re-sends duplicates), 5 bad frames quarantined with their reasons, waited through a registry outage for id $id3; $(idem_counts payments)"
