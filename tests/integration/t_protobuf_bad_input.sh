#!/usr/bin/env bash
# Bad Protobuf input, each message quarantined once with its bytes and a reason that names what
# is wrong and where, while its neighbours are applied and idemd keeps running: an id the
# registry does not know, an id of an Avro schema, a schema that does not parse, a schema whose
# reference the registry does not know, message indexes naming no message or cut short, a varint
# of 11 bytes, a length past the end, a group wire type, a wire type that is not the field's,
# invalid UTF-8 in a proto3 string, messages nested 100 deep, and a NUL byte in a parameter.
# SQL-looking text is only ever data.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics events:1
idem_registry_start
cat >"$IDEM_TMP/node.proto" <<'PROTO'
syntax = "proto3";
package ev;
message Node {
  string id = 1;
  string note = 2;
  Node next = 3;
}
PROTO
printf 'syntax = "proto3";\nmessage Broken {\n  string id = 1\n}\n' >"$IDEM_TMP/broken.proto"
printf 'syntax = "proto3";\nimport "missing.proto";\nmessage M {\n  string id = 1;\n}\n' >"$IDEM_TMP/refd.proto"
echo '{"type": "record", "name": "A", "fields": [{"name": "id", "type": "string"}]}' >"$IDEM_TMP/a.avsc"
id=$(idem_registry_register events-value "$IDEM_TMP/node.proto" --schema-type PROTOBUF)
broken=$(idem_registry_register broken-value "$IDEM_TMP/broken.proto" --schema-type PROTOBUF)
refd=$(idem_registry_register refd-value "$IDEM_TMP/refd.proto" --schema-type PROTOBUF \
	--reference "missing.proto=no-such-subject:1")
avro=$(idem_registry_register a-value "$IDEM_TMP/a.avsc")
idem_psql -c "CREATE TABLE ev_seen (id text PRIMARY KEY, note text)"
idem_write_config "$IDEM_TMP/idemd.yaml" g-bad events --topic events --key 'protobuf:/id' --mode row \
	--sql 'INSERT INTO ev_seen VALUES ($1, $2)' --params '[business_key, "protobuf:/note"]' \
	--registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$IDEM_TMP/idemd.yaml"

hdr() { printf '00%08x' "$1"; }
h=$(hdr "$id")00 # the Confluent header of schema $id and the message indexes [0]
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
str() { printf '%s%02x%s' "$1" $((${#2})) "$(hex "$2")"; } # str TAG TEXT: a short string field (TAG in hex)
sql="x'); DROP TABLE ev_seen; --"
# 100 nested Nodes: next { next { ... } }, each with an id.
deep=$(/usr/bin/python3 - <<'PY'
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | 0x80]) if n else bytes([b])
        if not n:
            return out
m = b"\x0a\x01d"
for _ in range(100):
    m = b"\x0a\x01d" + b"\x1a" + varint(len(m)) + m
print(m.hex())
PY
)
# name, value (hex), reason (a LIKE pattern; '' for a message that must be applied)
cases=(
	"good-1|$h$(str 0a e-1)|"
	"unknown-id|$(hdr 999)00$(str 0a e-x)|schema id 999: %404%"
	"avro-id|$(hdr "$avro")00$(str 0a e-x)|schema id $avro is AVRO, not PROTOBUF"
	"no-parse|$(hdr "$broken")00$(str 0a e-x)|schema id $broken: line 4:1: Expected \";\"."
	"unknown-reference|$(hdr "$refd")00$(str 0a e-x)|schema id $refd: reference 'missing.proto' (subject 'no-such-subject' version 1): registry % answered 404%"
	"no-message|$(hdr "$id")020a$(str 0a e-x)|schema id $id: message indexes [5] name no message: the file has 1"
	"indexes-cut|$(hdr "$id")ff|schema id $id: at byte 5: message indexes run past the end of the value (6 bytes)"
	"varint-11|$h$(str 0a e-x)28ffffffffffffffffffff01|schema id $id: at byte 12: varint is longer than 10 bytes"
	"past-end|$h$(str 0a e-x)12e807616263|schema id $id: at byte 12 (/note): length 1000 runs past the end of the value (17 bytes)"
	"group|$h$(str 0a e-x)1b|schema id $id: at byte 11: group wire type (field 3), which idemd does not read"
	"wire-type|${h}0801|schema id $id: at byte 6 (/id): wire type 0 is not that of a string field (2)"
	"bad-utf8|$h$(str 0a e-y)1202e9ff|schema id $id: at byte 13 (/note): string is not valid UTF-8"
	"nested-100|$h$deep|schema id $id: at byte % (/next/next/%): nested deeper than 64 levels"
	"good-2|$h$(str 0a e-2)$(str 12 "$sql")|"
	"nul|$h$(str 0a e-4)1203610062|parameter \$2 contains a NUL byte"
	"good-3|$h$(str 0a e-5)|"
)
: >"$IDEM_TMP/bad.txt"
for c in "${cases[@]}"; do
	IFS='|' read -r name hex reason <<<"$c"
	printf -- '-\t%s\n' "$hex" >>"$IDEM_TMP/bad.txt"
done
idem_avro_produce events "$IDEM_TMP/bad.txt" --partition 0

idemd_start a "$IDEM_TMP/idemd.yaml"
consumed_is() { test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'events'")" = "$1"; }
idem_wait_until 60 "all ${#cases[@]} consumed" consumed_is "${#cases[@]}"
idem__alive "$(idemd_pid a)" || idem_fail "idemd died on bad input"
idemd_stop a

offset=0
bad=0
for c in "${cases[@]}"; do
	IFS='|' read -r name hex reason <<<"$c"
	if [ -z "$reason" ]; then
		idem_assert_eq "$name quarantined" 0 "$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE \"offset\" = $offset")"
	else
		idem_assert_eq "$name: reason ($(idem_psql -c "SELECT reason FROM idem.quarantine WHERE \"offset\" = $offset"))" 1 \
			"$(idem_psql -v "pat=%$reason%" <<<"SELECT count(*) FROM idem.quarantine WHERE \"offset\" = $offset AND reason LIKE :'pat'")"
		idem_assert_eq "$name: bytes kept" "$hex" "$(idem_psql -c "SELECT encode(msg_value, 'hex') FROM idem.quarantine WHERE \"offset\" = $offset")"
		bad=$((bad + 1))
	fi
	offset=$((offset + 1))
done
idem_assert_eq "applied" "e-1|
e-2|$sql
e-5|" "$(idem_psql -c "SELECT id || '|' || coalesce(note, '') FROM ev_seen ORDER BY id")"
idem_assert_eq "quarantined" "$bad" "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_psql -c "SELECT \"offset\" || ': ' || reason FROM idem.quarantine ORDER BY 1"
echo "ok: $bad bad Protobuf messages quarantined with their reasons, 3 applied, idemd kept running"
