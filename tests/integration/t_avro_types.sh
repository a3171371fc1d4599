#!/usr/bin/env bash
# Avro values (Confluent wire format, schemas from a registry), encoded by python3-avro, not by
# the library idemd decodes with: every type's text as idemd binds it, checked in the database,
# exactly as idemd.yaml(5) AVRO VALUES says; unions, nested records, arrays and maps by pointer and as
# JSON; an Avro Kafka key; two schema versions on one topic (a field added with a default in v2
# leaves v1's keys as they were: a v1 payment re-sent in v2 is a duplicate).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics orders:3
idem_registry_start

cat >"$IDEM_TMP/v1.avsc" <<'JSON'
{"type": "record", "name": "Order", "namespace": "t", "fields": [
 {"name": "order_id", "type": "string"},
 {"name": "flag", "type": "boolean"},
 {"name": "i", "type": "int"},
 {"name": "l", "type": "long"},
 {"name": "f", "type": "float"},
 {"name": "d", "type": "double"},
 {"name": "b", "type": "bytes"},
 {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
 {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
 {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 2}},
 {"name": "decfx", "type": {"type": "fixed", "name": "F8", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 3}},
 {"name": "day", "type": {"type": "int", "logicalType": "date"}},
 {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
 {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
 {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
 {"name": "note", "type": ["null", "string"]},
 {"name": "amount", "type": ["null", "long", "string"]},
 {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
   {"name": "name", "type": "string"},
   {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
     {"name": "city", "type": "string"}]}}]}},
 {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
   {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
 {"name": "tags", "type": {"type": "map", "values": "long"}}
]}
JSON
# v2: a field added at the end with a default (a compatible evolution).
sed 's/^ {"name": "tags", "type": {"type": "map", "values": "long"}}$/&,\n {"name": "channel", "type": "string", "default": "web"}/' \
	"$IDEM_TMP/v1.avsc" >"$IDEM_TMP/v2.avsc"
grep -q channel "$IDEM_TMP/v2.avsc" || idem_fail "v2 schema not made"
echo '"string"' >"$IDEM_TMP/key.avsc"
v1=$(idem_registry_register orders-value "$IDEM_TMP/v1.avsc")
v2=$(idem_registry_register orders-value "$IDEM_TMP/v2.avsc")
k=$(idem_registry_register orders-key "$IDEM_TMP/key.avsc")
[ "$v1" != "$v2" ] || idem_fail "v1 and v2 got one id"

# One row per applied order: the business key, what the Avro key read, and every parameter.
fields=(avro:/flag avro:/i avro:/l avro:/f avro:/d avro:/b avro:/e avro:/fx avro:/dec avro:/decfx
	avro:/day avro:/tsm avro:/tsu avro:/id avro:/note avro:/amount avro:/customer/address/city
	avro:/items/1/sku avro:/tags/b avro:/customer avro:/items avro:/tags avro:/nothing)
params='[business_key, "avro-key:"'
arr=
for i in "${!fields[@]}"; do
	params+=", \"${fields[$i]}\""
	arr+="${arr:+, }\$$((i + 3))"
done
params+=']'
idem_psql -c "CREATE TABLE avro_seen (order_id text PRIMARY KEY, kafka_key text, vals text[])"
idem_write_config "$IDEM_TMP/idemd.yaml" g-avro orders --topic orders --key 'avro:/order_id' \
	--mode row --sql "INSERT INTO avro_seen VALUES (\$1, \$2, ARRAY[$arr])" --params "$params" \
	--registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$IDEM_TMP/idemd.yaml"

enc() { # enc SCHEMA_ID SCHEMA_FILE < records: the messages, keyed by the Avro string order_id
	idem_avro_encode encode --schema-file "$2" --schema-id "$1" --key-schema-file "$IDEM_TMP/key.avsc" \
		--key-schema-id "$k" --key-record-field order_id
}
rec1='{"order_id": "o-1", "flag": true, "i": -7, "l": 9007199254740993, "f": 0.1, "d": 1e300,
 "b": {"$bytes_hex": "00ff10"}, "e": "GREEN", "fx": {"$bytes_hex": "01020304"},
 "dec": {"$decimal": "-123.45"}, "decfx": {"$decimal": "1.5"}, "day": {"$date": "2024-02-29"},
 "tsm": {"$ts": "2024-05-01T12:34:56.789Z"}, "tsu": -1, "id": "6f1c2a0e-3b4d-4e5f-8a9b-0c1d2e3f4a5b",
 "note": null, "amount": {"$union": "long", "value": 42},
 "customer": {"name": "Ann \"A\" Lee", "address": {"city": "Oslo"}},
 "items": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 2}], "tags": {"b": 2, "a": 1}}'
rec2='{"order_id": "o-2", "flag": false, "i": -2147483648, "l": -9223372036854775808, "f": -0.0,
 "d": NaN, "b": {"$bytes_hex": ""}, "e": "RED", "fx": {"$bytes_hex": "ffffffff"},
 "dec": {"$decimal": "0.05"}, "decfx": {"$decimal": "-0.001"}, "day": -1, "tsm": -1,
 "tsu": {"$ts": "2024-05-01T12:34:56.000001Z"}, "id": "00000000-0000-0000-0000-000000000000",
 "note": "h\u00e9 | \"q\"", "amount": {"$union": "string", "value": "12.5"},
 "customer": {"name": "Bo", "address": {"city": "K\u00f8benhavn"}},
 "items": [], "tags": {}}'
# -1.28 written by python-avro as ff80, where Java writes 80: both are valid two's complement.
rec3=$(sed -e 's/"o-2"/"o-3"/' -e 's/"0.05"/"-1.28"/' -e 's/"d": NaN/"d": -Infinity/' <<<"$rec2")
{
	tr -d '\n' <<<"$rec1" && echo
	tr -d '\n' <<<"$rec2" && echo
	tr -d '\n' <<<"$rec3" && echo
} | enc "$v1" "$IDEM_TMP/v1.avsc" >"$IDEM_TMP/v1.txt"
# v2: o-1 again (the same payment re-sent by a producer that has moved to v2), and o-4.
{
	tr -d '\n' <<<"$rec1" | sed 's/}$/, "channel": "app"}/' && echo
	tr -d '\n' <<<"$rec1" | sed -e 's/"o-1"/"o-4"/' -e 's/}$/, "channel": "web"}/' && echo
} | enc "$v2" "$IDEM_TMP/v2.avsc" >"$IDEM_TMP/v2.txt"
idem_avro_produce orders "$IDEM_TMP/v1.txt"
idem_avro_produce orders "$IDEM_TMP/v2.txt"

idemd_start a "$IDEM_TMP/idemd.yaml"
seen_is() { test "$(idem_psql -c 'SELECT count(*) FROM avro_seen')" = "$1"; }
consumed_is() { test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'orders'")" = "$1"; }
idem_wait_until 60 "4 orders applied" seen_is 4
idem_wait_until 60 "5 messages consumed" consumed_is 5
idemd_stop a

row() { idem_psql -c "SELECT kafka_key || ' ' || array_to_string(vals, ' | ', '<NULL>') FROM avro_seen WHERE order_id = '$1'"; }
idem_assert_eq "o-1" 'o-1 true | -7 | 9007199254740993 | 0.1 | 1e+300 | \x00ff10 | GREEN | \x01020304 | -123.45 | 1.500 | 2024-02-29 | 2024-05-01T12:34:56.789Z | 1969-12-31T23:59:59.999999Z | 6f1c2a0e-3b4d-4e5f-8a9b-0c1d2e3f4a5b | <NULL> | 42 | Oslo | B-2 | 2 | {"name":"Ann \"A\" Lee","address":{"city":"Oslo"}} | [{"sku":"A-1","qty":1},{"sku":"B-2","qty":2}] | {"a":1,"b":2} | <NULL>' "$(row o-1)"
idem_assert_eq "o-2" 'o-2 false | -2147483648 | -9223372036854775808 | -0 | NaN | \x | RED | \xffffffff | 0.05 | -0.001 | 1969-12-31 | 1969-12-31T23:59:59.999Z | 2024-05-01T12:34:56.000001Z | 00000000-0000-0000-0000-000000000000 | hé | "q" | 12.5 | København | <NULL> | <NULL> | {"name":"Bo","address":{"city":"København"}} | [] | {} | <NULL>' "$(row o-2)"
idem_assert_eq "o-3 (decimal ff80, -Infinity)" '-1.28 -Infinity' \
	"$(idem_psql -c "SELECT vals[9] || ' ' || vals[5] FROM avro_seen WHERE order_id = 'o-3'")"
# v2 wrote o-4: the same text for every field v1 has.
idem_assert_eq "o-4 as o-1" "$(row o-1 | sed 's/^o-1/o-4/')" "$(row o-4)"
# The whole records bind as JSON that Postgres reads as jsonb.
idem_assert_eq "jsonb" 'Oslo' \
	"$(idem_psql -c "SELECT (vals[20])::jsonb #>> '{address,city}' FROM avro_seen WHERE order_id = 'o-1'")"
# o-1 re-sent in v2 is a duplicate of v1's o-1: one claim, the row v1 wrote, one duplicate.
idem_assert_eq "claims" 4 "$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'orders'")"
idem_assert_eq "duplicates" 1 "$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress WHERE consumer = 'orders'")"
idem_assert_eq "quarantined" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
# Each schema id was fetched once, however many messages used it.
for id in "$v1" "$v2" "$k"; do
	idem_assert_eq "fetches of schema id $id" 1 "$(grep -c "^GET /schemas/ids/$id " "$IDEM_REGISTRY_LOG")"
done
echo "ok: every Avro type's text, unions, nested records, arrays, maps, an Avro key, v1 and v2"
