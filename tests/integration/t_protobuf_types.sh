#!/usr/bin/env bash
# Protobuf values (Confluent wire format, schemas from a registry), written by python3-protobuf's
# pure-Python implementation, not by the library idemd decodes with: every type's text as idemd
# binds it, checked in the database, exactly as idemd.yaml(5) PROTOBUF VALUES says; well-known types;
# a message type imported through a schema reference (fetched from the registry by subject and
# version); nested messages, repeated fields and maps by pointer and as JSON; presence (proto3
# defaults, optional, oneof, unset messages); a message that is not the file's first; a
# Protobuf Kafka key; two schema versions on one topic (v2 adds a field: the v2 re-send of a v1
# order is a duplicate, and a v2 order gives v1's text for every field v1 has).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics orders:3
idem_registry_start

mkdir -p "$IDEM_TMP/proto/common"
cat >"$IDEM_TMP/proto/common/money.proto" <<'PROTO'
syntax = "proto3";
package common;
message Money {
  string currency = 1;
  int64 units = 2;
}
PROTO
cat >"$IDEM_TMP/proto/order.proto" <<'PROTO'
syntax = "proto3";
package t;
import "common/money.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";

enum Color {
  RED = 0;
  GREEN = 1;
}
// The file's first message: orders are its second (message indexes [1]).
message Header {
  string source = 1;
}
message Order {
  string order_id = 1;
  bool flag = 2;
  int32 i32 = 3;
  int64 i64 = 4;
  uint32 u32 = 5;
  uint64 u64 = 6;
  sint32 s32 = 7;
  sint64 s64 = 8;
  fixed32 f32 = 9;
  fixed64 f64 = 10;
  sfixed32 sf32 = 11;
  sfixed64 sf64 = 12;
  float fl = 13;
  double db = 14;
  bytes b = 15;
  Color color = 16;
  google.protobuf.Timestamp at = 17;
  google.protobuf.Duration took = 18;
  google.protobuf.Int64Value maybe = 19;
  google.protobuf.StringValue note = 20;
  google.protobuf.Struct meta = 21;
  common.Money total = 22;
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  repeated Line lines = 23;
  map<string, int64> tags = 24;
  optional string opt = 25;
  oneof pay {
    string card = 26;
    string iban = 27;
  }
  repeated int32 nums = 28;
}
PROTO
cat >"$IDEM_TMP/proto/key.proto" <<'PROTO'
syntax = "proto3";
package t;
message OrderKey {
  string order_id = 1;
}
PROTO
# v2: a field added (a compatible evolution).
sed 's/^  repeated int32 nums = 28;$/&\n  string channel = 29;/' "$IDEM_TMP/proto/order.proto" >"$IDEM_TMP/proto/order2.proto"
grep -q channel "$IDEM_TMP/proto/order2.proto" || idem_fail "v2 schema not made"

# The import is registered under its own subject and named by a reference, as Confluent's
# serializers do; the well-known types need none.
m=$(idem_registry_register common/money.proto "$IDEM_TMP/proto/common/money.proto" --schema-type PROTOBUF)
v1=$(idem_registry_register orders-value "$IDEM_TMP/proto/order.proto" --schema-type PROTOBUF \
	--reference "common/money.proto=common/money.proto:1")
v2=$(idem_registry_register orders-value "$IDEM_TMP/proto/order2.proto" --schema-type PROTOBUF \
	--reference "common/money.proto=common/money.proto:1")
k=$(idem_registry_register orders-key "$IDEM_TMP/proto/key.proto" --schema-type PROTOBUF)
[ "$v1" != "$v2" ] || idem_fail "v1 and v2 got one id"

fields=(protobuf:/flag protobuf:/i32 protobuf:/i64 protobuf:/u32 protobuf:/u64 protobuf:/s32
	protobuf:/s64 protobuf:/f32 protobuf:/f64 protobuf:/sf32 protobuf:/sf64 protobuf:/fl
	protobuf:/db protobuf:/b protobuf:/color protobuf:/at protobuf:/took protobuf:/maybe
	protobuf:/note protobuf:/meta/k protobuf:/total/units protobuf:/lines/1/sku protobuf:/tags/b
	protobuf:/nums/1 protobuf:/opt protobuf:/card protobuf:/iban protobuf:/total
	protobuf:/lines protobuf:/tags protobuf:/meta protobuf:/nums protobuf:/nothing
	protobuf:/lines/9)
params='[business_key, "protobuf-key:/order_id"'
arr=
for i in "${!fields[@]}"; do
	params+=", \"${fields[$i]}\""
	arr+="${arr:+, }\$$((i + 3))"
done
params+=']'
idem_psql -c "CREATE TABLE pb_seen (order_id text PRIMARY KEY, kafka_key text, vals text[])"
idem_write_config "$IDEM_TMP/idemd.yaml" g-pb orders --topic orders --key 'protobuf:/order_id' \
	--mode row --sql "INSERT INTO pb_seen VALUES (\$1, \$2, ARRAY[$arr])" --params "$params" \
	--registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$IDEM_TMP/idemd.yaml"

enc() { # enc SCHEMA_ID PROTO < records: orders keyed by a Protobuf OrderKey
	idem_proto_encode encode --proto "$2" -I "$IDEM_TMP/proto" --message t.Order --schema-id "$1" \
		--key-message t.OrderKey --key-schema-id "$k" --key-proto "$IDEM_TMP/proto/key.proto"
}
rec1='{"order_id": "o-1", "flag": true, "i32": -7, "i64": "9007199254740993", "u32": 4294967295,
 "u64": "18446744073709551615", "s32": -2147483648, "s64": "-9223372036854775808", "f32": 7,
 "f64": "42", "sf32": -3, "sf64": "-4", "fl": 0.1, "db": 1e300, "b": "AP8Q", "color": "GREEN",
 "at": "2024-05-01T12:34:56.789Z", "took": "1.000340012s", "maybe": "5", "note": "h\u00e9 \"q\"",
 "meta": {"k": "v", "n": 1.5, "z": null}, "total": {"currency": "EUR", "units": "12"},
 "lines": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 2}], "tags": {"b": "2", "a": "1"},
 "opt": "", "card": "4111", "nums": [3, -1, 7]}'
# o-2: every proto3 scalar at its default (not on the wire), no optional, no oneof, no messages.
rec2='{"order_id": "o-2"}'
# o-3: enum by a number the enum does not name, NaN, the least subnormal double, a Timestamp
# before 1970, a oneof's other member, a wrapper holding its default.
rec3='{"order_id": "o-3", "color": 7, "fl": "NaN", "db": 5e-324, "at": "1969-12-31T23:59:59Z",
 "iban": "DE44", "maybe": "0"}'
{
	tr -d '\n' <<<"$rec1" && echo
	tr -d '\n' <<<"$rec2" && echo
	tr -d '\n' <<<"$rec3" && echo
} | enc "$v1" "$IDEM_TMP/proto/order.proto" >"$IDEM_TMP/v1.txt"
# v2: o-1 again (the same order re-sent by a producer that moved to v2), and o-4 (o-1's fields).
{
	tr -d '\n' <<<"$rec1" | sed 's/}$/, "channel": "app"}/' && echo
	tr -d '\n' <<<"$rec1" | sed -e 's/"o-1"/"o-4"/' -e 's/}$/, "channel": "web"}/' && echo
} | enc "$v2" "$IDEM_TMP/proto/order2.proto" >"$IDEM_TMP/v2.txt"
idem_avro_produce orders "$IDEM_TMP/v1.txt"
idem_avro_produce orders "$IDEM_TMP/v2.txt"

# The registry is down when idemd first sees the ids: the partitions wait, nothing is quarantined;
# once it is back (SIGHUP: ask again now), everything is applied.
idem_registry_stop
idemd_start a "$IDEM_TMP/idemd.yaml"
seen_is() { test "$(idem_psql -c 'SELECT count(*) FROM pb_seen')" = "$1"; }
consumed_is() { test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'orders'")" = "$1"; }
waits_logged() { grep -q "partition waits for the schema registry.*schema id $v1" "$IDEM_TMP/idemd-a.log"; }
idem_wait_until 30 "a partition waits for the registry" waits_logged
sleep 2
idem_assert_eq "applied while the registry is down" 0 "$(idem_psql -c 'SELECT count(*) FROM pb_seen')"
idem_assert_eq "quarantined while the registry is down" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_registry_start
kill -HUP "$(idemd_pid a)"
idem_wait_until 60 "4 orders applied" seen_is 4
idem_wait_until 60 "5 messages consumed" consumed_is 5
idemd_stop a

row() { idem_psql -c "SELECT kafka_key || ' ' || array_to_string(vals, ' | ', '<NULL>') FROM pb_seen WHERE order_id = '$1'"; }
idem_assert_eq "o-1" 'o-1 true | -7 | 9007199254740993 | 4294967295 | 18446744073709551615 | -2147483648 | -9223372036854775808 | 7 | 42 | -3 | -4 | 0.1 | 1e+300 | \x00ff10 | GREEN | 2024-05-01T12:34:56.789Z | 1.000340012s | 5 | hé "q" | v | 12 | B-2 | 2 | -1 |  | 4111 | <NULL> | {"currency":"EUR","units":"12"} | [{"sku":"A-1","qty":1},{"sku":"B-2","qty":2}] | {"a":"1","b":"2"} | {"k":"v","n":1.5,"z":null} | [3,-1,7] | <NULL> | <NULL>' "$(row o-1)"
idem_assert_eq "o-2" 'o-2 false | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | \x | RED | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | <NULL> | [] | {} | <NULL> | [] | <NULL> | <NULL>' "$(row o-2)"
idem_assert_eq "o-3" 'o-3 7 | NaN | 5e-324 | 1969-12-31T23:59:59Z | 0 | <NULL> | DE44' \
	"$(idem_psql -c "SELECT kafka_key || ' ' || array_to_string(ARRAY[vals[15], vals[12], vals[13], vals[16], vals[18], vals[26], vals[27]], ' | ', '<NULL>') FROM pb_seen WHERE order_id = 'o-3'")"
# v2 wrote o-4: the same text for every field v1 has.
idem_assert_eq "o-4 as o-1" "$(row o-1 | sed 's/^o-1/o-4/')" "$(row o-4)"
# The whole messages bind as JSON that Postgres reads as jsonb.
idem_assert_eq "jsonb" 'B-2' \
	"$(idem_psql -c "SELECT (vals[29])::jsonb #>> '{1,sku}' FROM pb_seen WHERE order_id = 'o-1'")"
# o-1 re-sent in v2 is a duplicate of v1's o-1: one claim, the row v1 wrote, one duplicate.
idem_assert_eq "claims" 4 "$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'orders'")"
idem_assert_eq "duplicates" 1 "$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress WHERE consumer = 'orders'")"
idem_assert_eq "quarantined" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
# Each schema id was fetched once after the outage, however many messages used it; the import
# once per schema that names it, by subject and version (the log is the restarted registry's).
for id in "$v1" "$v2" "$k"; do
	idem_assert_eq "fetches of schema id $id" 1 "$(grep -c "^GET /schemas/ids/$id " "$IDEM_REGISTRY_LOG")"
done
idem_assert_eq "fetches of the import" 2 "$(grep -c "^GET /subjects/common%2Fmoney.proto/versions/1 200" "$IDEM_REGISTRY_LOG")"
[ "$m" -gt 0 ] || idem_fail "the import has no id"
echo "ok: every Protobuf type's text, well-known types, an import by reference, presence, v1 and v2, a Protobuf key"
