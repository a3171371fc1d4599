#!/usr/bin/env bash
# Schemas over a bound (lib/idem_limits.h) are invalid, never a crash and never a wait: the
# registry serves .proto schemas whose messages nest 20,000 and 200,000 deep (libprotoc 3.21
# recursed out of a fetcher thread's stack on 20,000: SIGSEGV), one whose 20,000 levels follow a
# NUL byte in a comment (where libprotobuf's tokenizer ends the comment), Avro schemas whose
# types nest 200 deep and whose JSON nests 600 deep, and one that defines a named type twice
# (avro-c answered it as out of memory, so the partition waited for ever, and leaked on every
# fetch of the schema). idemd stays up, quarantines each message written with them, the reason
# naming the bound, its value and the schema id, and applies the good messages after them;
# under ASan (detect_leaks=1) idemd exits 0 on SIGTERM, so nothing leaked.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics "events:1 aevents:1"
idem_registry_start
idem_psql -c "CREATE TABLE ev_seen (id text PRIMARY KEY, note text)"

# ---- Protobuf -----------------------------------------------------------------------------
cat >"$IDEM_TMP/node.proto" <<'PROTO'
syntax = "proto3";
package ev;
message Node {
  string id = 1;
  string note = 2;
}
PROTO
# deep_proto LEVELS [HIDE]: messages A nested LEVELS deep, one a line, the innermost with a
# field; with HIDE, all on the second line after "// " and a NUL byte, which ends a comment for
# libprotobuf's tokenizer (a NUL is \u0000 in the registry's JSON).
deep_proto() {
	/usr/bin/python3 - "$@" <<'PY'
import sys
n = int(sys.argv[1])
if len(sys.argv) > 2:
    text = "// \0" + "message A {" * n + "string id = 1;" + "}" * n + "\n"
else:
    text = "message A {\n" * n + "string id = 1;\n" + "}\n" * n
sys.stdout.write('syntax = "proto3";\n' + text)
PY
}
deep_proto 20000 >"$IDEM_TMP/deep20k.proto"
deep_proto 200000 >"$IDEM_TMP/deep200k.proto"
deep_proto 20000 hide >"$IDEM_TMP/hidden.proto"
id=$(idem_registry_register events-value "$IDEM_TMP/node.proto" --schema-type PROTOBUF)
d20k=$(idem_registry_register deep20k-value "$IDEM_TMP/deep20k.proto" --schema-type PROTOBUF)
d200k=$(idem_registry_register deep200k-value "$IDEM_TMP/deep200k.proto" --schema-type PROTOBUF)
hidden=$(idem_registry_register hidden-value "$IDEM_TMP/hidden.proto" --schema-type PROTOBUF)
idem_write_config "$IDEM_TMP/pb.yaml" g-pb pb --topic events --key 'protobuf:/id' --mode row \
	--sql 'INSERT INTO ev_seen VALUES ($1, $2)' --params '[business_key, "protobuf:/note"]' \
	--registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$IDEM_TMP/pb.yaml"

hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
pstr() { printf '%s%02x%s' "$1" $((${#2})) "$(hex "$2")"; } # pstr TAG TEXT: a string field
ph() { printf '00%08x00' "$1"; }                           # header of schema $1, indexes [0]
bound='nested deeper than the bound of 64 levels'
# name, value (hex), reason (a LIKE pattern; '' for a message that must be applied)
pb_cases=(
	"pb-good-1|$(ph "$id")$(pstr 0a p-1)$(pstr 12 one)|"
	"pb-deep-20000|$(ph "$d20k")$(pstr 0a p-x)|schema id $d20k: line 66:11: $bound"
	"pb-good-2|$(ph "$id")$(pstr 0a p-2)$(pstr 12 two)|"
	"pb-deep-200000|$(ph "$d200k")$(pstr 0a p-y)|schema id $d200k: line 66:11: $bound"
	"pb-deep-20000-again|$(ph "$d20k")$(pstr 0a p-z)|schema id $d20k: line 66:11: $bound"
	"pb-deep-after-nul|$(ph "$hidden")$(pstr 0a p-w)|schema id $hidden: line 2:$((4 + 64 * 11 + 11)): $bound"
	"pb-good-3|$(ph "$id")$(pstr 0a p-3)|"
)

# ---- Avro ---------------------------------------------------------------------------------
cat >"$IDEM_TMP/node.avsc" <<'JSON'
{"type": "record", "name": "Node", "fields": [
 {"name": "id", "type": "string"},
 {"name": "note", "type": ["null", "string"]}]}
JSON
cat >"$IDEM_TMP/twice.avsc" <<'JSON'
{"type": "record", "name": "Node", "fields": [
 {"name": "id", "type": "string"},
 {"name": "a", "type": {"type": "fixed", "name": "F", "size": 1}},
 {"name": "b", "type": {"type": "fixed", "name": "F", "size": 2}}]}
JSON
# Types nested 200 deep, and JSON 600 deep (deeper than the registry's own JSON parser takes).
/usr/bin/python3 - "$IDEM_TMP" <<'PY'
import sys
with open(sys.argv[1] + "/deep.avsc", "w") as f:
    f.write('{"type": "array", "items": ' * 200 + '"string"' + "}" * 200 + "\n")
with open(sys.argv[1] + "/deepjson.avsc", "w") as f:
    f.write("[" * 600 + '"string"' + "]" * 600 + "\n")
PY
aid=$(idem_registry_register aevents-value "$IDEM_TMP/node.avsc")
twice=$(idem_registry_register twice-value "$IDEM_TMP/twice.avsc")
adeep=$(idem_registry_register adeep-value "$IDEM_TMP/deep.avsc")
ajson=$(idem_registry_register ajson-value "$IDEM_TMP/deepjson.avsc")
idem_write_config "$IDEM_TMP/avro.yaml" g-avro avro --topic aevents --key 'avro:/id' --mode row \
	--sql 'INSERT INTO ev_seen VALUES ($1, $2)' --params '[business_key, "avro:/note"]' \
	--registry "url=\"$IDEM_REGISTRY_URL\""

astr() { printf '%02x%s' $((${#1} * 2)) "$(hex "$1")"; } # an Avro string
ah() { printf '00%08x' "$1"; }
avro_cases=(
	"avro-good-1|$(ah "$aid")$(astr a-1)00|"
	"avro-twice|$(ah "$twice")$(astr a-x)0102|schema id $twice: schema: type F is defined twice"
	"avro-good-2|$(ah "$aid")$(astr a-2)02$(astr two)|"
	"avro-deep-200|$(ah "$adeep")00|schema id $adeep: schema: types nested deeper than the bound of 64 levels"
	"avro-json-600|$(ah "$ajson")00|schema id $ajson: schema JSON nested deeper than the bound of 512 levels"
	"avro-twice-again|$(ah "$twice")$(astr a-y)0102|schema id $twice: schema: type F is defined twice"
	"avro-good-3|$(ah "$aid")$(astr a-3)00|"
)

# run CONSUMER TOPIC CONFIG NAME CASES...: produce the cases, run idemd until it consumed them
# all, check that it is alive and exits 0 on SIGTERM, then check the database.
run() {
	local consumer=$1 topic=$2 cfg=$3 name=$4 c cname hexv reason offset=0 bad=0
	shift 4
	: >"$IDEM_TMP/$topic.txt"
	for c in "$@"; do
		IFS='|' read -r cname hexv reason <<<"$c"
		printf -- '-\t%s\n' "$hexv" >>"$IDEM_TMP/$topic.txt"
	done
	idem_avro_produce "$topic" "$IDEM_TMP/$topic.txt" --partition 0
	idemd_start "$name" "$cfg"
	# Until all are consumed or idemd died (it did, with SIGSEGV, before the bounds).
	consumed_or_dead() {
		test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = '$consumer'")" = "$1" ||
			! idem__alive "$(idemd_pid "$name")"
	}
	idem_wait_until 120 "all $# of $topic consumed" consumed_or_dead "$#"
	idem__alive "$(idemd_pid "$name")" || idem_fail "idemd died on a schema over a bound ($topic)"
	idemd_stop "$name"
	for c in "$@"; do
		IFS='|' read -r cname hexv reason <<<"$c"
		if [ -z "$reason" ]; then
			idem_assert_eq "$cname quarantined" 0 "$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE topic = '$topic' AND \"offset\" = $offset")"
		else
			idem_assert_eq "$cname: reason ($(idem_psql -c "SELECT reason FROM idem.quarantine WHERE topic = '$topic' AND \"offset\" = $offset"))" 1 \
				"$(idem_psql -v "pat=%$reason" <<<"SELECT count(*) FROM idem.quarantine WHERE topic = '$topic' AND \"offset\" = $offset AND reason LIKE :'pat'")"
			idem_assert_eq "$cname: bytes kept" "$hexv" "$(idem_psql -c "SELECT encode(msg_value, 'hex') FROM idem.quarantine WHERE topic = '$topic' AND \"offset\" = $offset")"
			bad=$((bad + 1))
		fi
		offset=$((offset + 1))
	done
	idem_assert_eq "$topic quarantined" "$bad" "$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE topic = '$topic'")"
	idem_psql -c "SELECT topic || ' ' || \"offset\" || ': ' || reason FROM idem.quarantine WHERE topic = '$topic' ORDER BY \"offset\""
}

run pb events "$IDEM_TMP/pb.yaml" a "${pb_cases[@]}"
idem_assert_eq "Protobuf applied" "p-1|one
p-2|two
p-3|" "$(idem_psql -c "SELECT id || '|' || coalesce(note, '') FROM ev_seen WHERE id LIKE 'p-%' ORDER BY id")"
run avro aevents "$IDEM_TMP/avro.yaml" b "${avro_cases[@]}"
idem_assert_eq "Avro applied" "a-1|
a-2|two
a-3|" "$(idem_psql -c "SELECT id || '|' || coalesce(note, '') FROM ev_seen WHERE id LIKE 'a-%' ORDER BY id")"
echo "ok: schemas over a bound quarantined with the bound in the reason, the good messages applied, idemd kept running and exited 0"
