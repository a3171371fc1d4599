#!/usr/bin/env bash
# JSON Schema validation, as idemd.yaml(5) JSON SCHEMA VALUES says: a route with value_format:
# json-schema and validate: true checks every document against the schema of its id. Documents
# the schema refuses (a wrong type, below a minimum, a required property missing, a pattern not
# matched, a nested item of the wrong type, an extra property where none may be) are each
# quarantined once with their bytes and a reason naming the place in the document and in the
# schema, while their neighbours are applied exactly once; a document under a schema idemd
# cannot check (a keyword it does not implement) is quarantined saying so; a re-send of a valid
# payment under a newer version is a duplicate. --check-config refuses validate: true on a route
# whose values are plain JSON.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2
idem_registry_start
cat >"$IDEM_TMP/v1.json" <<'JSON'
{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Payment", "type": "object",
 "properties": {"payment_id": {"type": "string", "minLength": 1},
  "account": {"type": "string", "pattern": "^acct-\\d+$"},
  "amount": {"type": "integer", "minimum": 1},
  "items": {"type": "array", "items": {"$ref": "#/definitions/item"}}},
 "required": ["payment_id", "account", "amount"],
 "definitions": {"item": {"type": "object", "properties": {"sku": {"type": "string"}},
  "required": ["sku"], "additionalProperties": false}}}
JSON
sed 's/"Payment"/"Payment v2"/' "$IDEM_TMP/v1.json" >"$IDEM_TMP/v2.json"
echo '{"type": "object", "unevaluatedProperties": false}' >"$IDEM_TMP/odd.json"
id1=$(idem_registry_register payments-value "$IDEM_TMP/v1.json" --schema-type JSON)
id2=$(idem_registry_register payments-value "$IDEM_TMP/v2.json" --schema-type JSON)
odd=$(idem_registry_register odd-value "$IDEM_TMP/odd.json" --schema-type JSON)

idem_write_config "$IDEM_TMP/idemd.yaml" g-jsv payments --route value_format=json-schema \
	--route validate=true --registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$IDEM_TMP/idemd.yaml"
# Only JSON Schema values have a schema to check them against.
idem_write_config "$IDEM_TMP/plain.yaml" g-jsv payments --route validate=true
if "$IDEM_BIN/idemd" --check-config -c "$IDEM_TMP/plain.yaml" >"$IDEM_TMP/plain.out" 2>&1; then
	idem_fail "--check-config accepted validate: true on a route of plain JSON values"
fi
grep -q "plain.yaml:[0-9]*:[0-9]*: error: route 'payments' has validate: true but its value_format is not 'json-schema'" \
	"$IDEM_TMP/plain.out" || idem_fail "unexpected --check-config output: $(cat "$IDEM_TMP/plain.out")"

hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
h() { printf '00%08x' "$1"; } # the Confluent header of schema id $1
# name | schema id | document | reason (a LIKE pattern after "business key: "; '' = applied)
cases=(
	"pay-1|$id1|{\"payment_id\":\"pay-1\",\"account\":\"acct-1\",\"amount\":5}|"
	"bad-type|$id1|{\"payment_id\":\"bad-type\",\"account\":\"acct-1\",\"amount\":\"5\"}|value is not JSON Schema this route can read: schema id $id1 refuses the document: at /amount: % is not of type integer%"
	"bad-min|$id1|{\"payment_id\":\"bad-min\",\"account\":\"acct-1\",\"amount\":0}|value is not JSON Schema this route can read: schema id $id1 refuses the document: at /amount: %minimum%"
	"bad-missing|$id1|{\"payment_id\":\"bad-missing\",\"amount\":3}|value is not JSON Schema this route can read: schema id $id1 refuses the document: %'account'%"
	"pay-2|$id1|{\"payment_id\":\"pay-2\",\"account\":\"acct-22\",\"amount\":7,\"items\":[{\"sku\":\"A\"}]}|"
	"bad-pattern|$id1|{\"payment_id\":\"bad-pattern\",\"account\":\"acct-x\",\"amount\":3}|value is not JSON Schema this route can read: schema id $id1 refuses the document: at /account: %pattern%"
	"bad-item|$id1|{\"payment_id\":\"bad-item\",\"account\":\"acct-1\",\"amount\":3,\"items\":[{\"sku\":\"A\"},{\"sku\":9}]}|value is not JSON Schema this route can read: schema id $id1 refuses the document: at /items/1/sku: %string%"
	"bad-extra|$id1|{\"payment_id\":\"bad-extra\",\"account\":\"acct-1\",\"amount\":3,\"items\":[{\"sku\":\"A\",\"qty\":1}]}|value is not JSON Schema this route can read: schema id $id1 refuses the document: at /items/0%qty%"
	"bad-odd|$odd|{\"payment_id\":\"bad-odd\",\"account\":\"acct-1\",\"amount\":3}|value is not JSON Schema this route can read: schema id $odd cannot be checked: %unevaluatedProperties%"
	"pay-1|$id2|{\"payment_id\":\"pay-1\",\"account\":\"acct-1\",\"amount\":5}|"
	"pay-3|$id2|{\"payment_id\":\"pay-3\",\"account\":\"acct-3\",\"amount\":11}|"
)
: >"$IDEM_TMP/s.txt"
for c in "${cases[@]}"; do
	IFS='|' read -r name id doc reason <<<"$c"
	printf '%s\t%s%s\t0\n' "$(hex "$name")" "$(h "$id")" "$(hex "$doc")" >>"$IDEM_TMP/s.txt"
done
idem_avro_produce payments "$IDEM_TMP/s.txt"
idemd_start a "$IDEM_TMP/idemd.yaml"
consumed_is() { test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'payments'")" = "$1"; }
idem_wait_until 60 "all ${#cases[@]} consumed" consumed_is "${#cases[@]}"
idemd_stop a

bad=0
for c in "${cases[@]}"; do
	IFS='|' read -r name id doc reason <<<"$c"
	[ -n "$reason" ] || continue
	bad=$((bad + 1))
	idem_assert_eq "$name: quarantined once, with its reason ($(idem_psql -c "SELECT reason FROM idem.quarantine WHERE msg_key = '\\x$(hex "$name")'::bytea"))" 1 \
		"$(idem_psql -v "pat=business key: $reason" <<<"SELECT count(*) FROM idem.quarantine WHERE msg_key = '\\x$(hex "$name")'::bytea AND reason LIKE :'pat'")"
	idem_assert_eq "$name: bytes kept" "$(h "$id")$(hex "$doc")" \
		"$(idem_psql -c "SELECT encode(msg_value, 'hex') FROM idem.quarantine WHERE msg_key = '\\x$(hex "$name")'::bytea")"
done
idem_assert_eq "quarantined" "$bad" "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
# The valid payments exactly once: pay-1's v2 re-send is a duplicate.
idem_assert_eq "ledger" "pay-1 acct-1 5
pay-2 acct-22 7
pay-3 acct-3 11" "$(idem_psql -c "SELECT payment_id || ' ' || account || ' ' || amount FROM ledger ORDER BY 1")"
idem_assert_eq "claims" 3 "$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments'")"
idem_assert_eq "duplicates" 1 "$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress WHERE consumer = 'payments'")"
echo "ok: $bad documents the schema refuses (or cannot check) quarantined with their reasons, 3 payments applied once"
