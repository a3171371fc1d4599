#!/usr/bin/env bash
# Bad Avro input, each message quarantined with its bytes and a reason that names what is wrong
# and where, while its neighbours are applied and idemd keeps running: a magic byte of 1, 3
# bytes in all, a schema id of 2^31, an id the registry does not know, a string length past the
# end, a record nested 10,000 deep, a union index out of range, bytes left after the datum,
# invalid UTF-8 and a NUL byte in a parameter. SQL-looking text is only ever data.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics events:1
idem_registry_start
cat >"$IDEM_TMP/node.avsc" <<'JSON'
{"type": "record", "name": "Node", "fields": [
 {"name": "id", "type": "string"},
 {"name": "note", "type": ["null", "string"]},
 {"name": "next", "type": ["null", "Node"]}]}
JSON
id=$(idem_registry_register events-value "$IDEM_TMP/node.avsc")
idem_psql -c "CREATE TABLE ev_seen (id text PRIMARY KEY, note text)"
idem_write_config "$IDEM_TMP/idemd.yaml" g-bad events --topic events --key 'avro:/id' --mode row \
	--sql 'INSERT INTO ev_seen VALUES ($1, $2)' --params '[business_key, "avro:/note"]' \
	--registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$IDEM_TMP/idemd.yaml"

h=00$(printf '%08x' "$id")                  # the Confluent header of schema $id
str() { printf '%02x%s' $((${#1} * 2)) "$(printf '%s' "$1" | od -An -tx1 | tr -d ' \n')"; }
sql="x'); DROP TABLE ev_seen; --"
d=$(str d)
deep=$h${d}00
for ((i = 0; i < 10000; i++)); do deep+=02${d}00; done
deep+=00
# name, value (hex), reason (a LIKE pattern; '' for a message that must be applied)
cases=(
	"good-1|$h$(str e-1)0000|"
	"magic-1|01${h:2}$(str e-x)0000|value starts with byte 1, not the Confluent magic byte 0"
	"3-bytes|000000|value is 3 bytes, shorter than the 5-byte Confluent header"
	"id-2^31|0080000000$(str e-x)0000|schema id 2147483648 is beyond 2^31-1"
	"unknown-id|00000003e7$(str e-x)0000|schema id 999: %404%"
	"string-past-end|${h}d00f616263|schema id $id: at byte 5 (/id): string length 1000 runs past the end of the value (10 bytes)"
	"nested-10000|$deep|schema id $id: at byte % (/next%): nested deeper than 64 levels"
	"union-index|$h$(str e-x)0a|schema id $id: at byte 9 (/note): union index 5 is out of range (2 branches)"
	"trailing|$h$(str e-x)0000beef|schema id $id: at byte 11: 2 bytes left after the datum"
	"good-2|$h$(str e-2)02$(str "$sql")00|"
	"bad-utf8|$h$(str e-3)0204e9ff00|parameter \$2 is not valid UTF-8"
	"nul|$h$(str e-4)0206610062 00|parameter \$2 contains a NUL byte"
	"good-3|$h$(str e-5)0000|"
)
: >"$IDEM_TMP/bad.txt"
for c in "${cases[@]}"; do
	IFS='|' read -r name hex reason <<<"$c"
	printf -- '-\t%s\n' "${hex// /}" >>"$IDEM_TMP/bad.txt"
done
idem_avro_produce events "$IDEM_TMP/bad.txt" --partition 0

idemd_start a "$IDEM_TMP/idemd.yaml"
consumed_is() { test "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'events'")" = "$1"; }
idem_wait_until 60 "all ${#cases[@]} consumed" consumed_is "${#cases[@]}"
idem__alive "$(idemd_pid a)" || idem_fail "idemd died on bad input"
idemd_stop a

offset=0
for c in "${cases[@]}"; do
	IFS='|' read -r name hex reason <<<"$c"
	if [ -z "$reason" ]; then
		idem_assert_eq "$name quarantined" 0 "$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE \"offset\" = $offset")"
	else
		idem_assert_eq "$name: reason ($(idem_psql -c "SELECT reason FROM idem.quarantine WHERE \"offset\" = $offset"))" 1 \
			"$(idem_psql -v "pat=%$reason" <<<"SELECT count(*) FROM idem.quarantine WHERE \"offset\" = $offset AND reason LIKE :'pat'")"
		idem_assert_eq "$name: bytes kept" "${hex// /}" "$(idem_psql -c "SELECT encode(msg_value, 'hex') FROM idem.quarantine WHERE \"offset\" = $offset")"
	fi
	offset=$((offset + 1))
done
idem_assert_eq "applied" "e-1|
e-2|$sql
e-5|" "$(idem_psql -c "SELECT id || '|' || coalesce(note, '') FROM ev_seen ORDER BY id")"
idem_assert_eq "quarantined" 10 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_psql -c "SELECT \"offset\" || ': ' || reason FROM idem.quarantine ORDER BY 1"
echo "ok: 10 bad Avro messages quarantined with their reasons, 3 applied, idemd kept running"
