#!/usr/bin/env bash
# Log lines and idemctl output that a message cannot forge. Business keys holding a quote, a
# newline followed by a fake log line, ESC[2J and U+202E (RIGHT-TO-LEFT OVERRIDE), a header name
# holding ESC and a handler error quoting such text reach idemd's log (a payload-mismatch
# duplicate logs its key, a failing handler its error) and idemctl's output (quarantine list,
# show, show --json, retry; lookup). Neither holds a raw ESC or U+202E, no line starts where a
# key put a newline, a quote in a key cannot close the field it is quoted in, the JSON stays
# valid and decodes to the exact key, and the database holds the exact original bytes.
# idemctl try shows a key, a handler's returned row and an emitted event's header holding LF
# and a fake line of its own output, ESC, U+202E, NUL and invalid UTF-8 escaped, line for line
# as expected, and --json gives their exact bytes (text, or null and hex).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:1 --config idemd.yaml g-forge payments --wait 200
idem_write_config "$IDEM_TMP/halt.yaml" g-forge payments --wait 200 --route on_poison=halt

hex() {
	od -An -v -tx1 | tr -d ' \n'
}

# The texts, written by Python so that every byte is exact: the keys inside JSON values as
# JSON escapes, which the payments' JSON decodes to the raw characters.
python3 - "$IDEM_TMP" <<'EOF'
import json, sys
d = sys.argv[1]
k1 = "k'1 kind=fake x='\n1999-01-01T00:00:00.000Z [1] error batch: forged\x1b[2J\u202eend"
k2 = "q'2\n1999-01-01T00:00:00.000Z [1] error batch: forged2\x1b[2J\u202e"
amount = "x\x1b[2J\u202e'\nlate"
files = {
    "k1": k1,
    "k2": k2,
    "v1": json.dumps({"payment_id": k1, "account": "acct-1", "amount": 5}),
    "v2": json.dumps({"payment_id": k1, "account": "acct-1", "amount": 6}),
    "v3": json.dumps({"payment_id": k2, "account": "acct-1", "amount": amount}),
    "v4": json.dumps({"payment_id": "plain-1", "account": "acct-2", "amount": 7}),
    "v5": json.dumps({"payment_id": "halt-1", "account": "acct-2", "amount": amount}),
}
for name, text in files.items():
    with open(f"{d}/{name}", "wb") as f:
        f.write(text.encode())
EOF
hname=$'h\x1b[31mname'
k1_hex=$(hex <"$IDEM_TMP/k1")
k2_hex=$(hex <"$IDEM_TMP/k2")
v3_hex=$(hex <"$IDEM_TMP/v3")
hname_hex=$(printf '%s' "$hname" | hex)
# The amount as the handler's error quotes it, escaped, wherever it is shown.
esc_amount='x\x1b[2J\u{202E}'"'"'\x0alate'

# Applied; the same key with another amount (a payload-mismatch duplicate, logged with its
# key); a payment whose handler fails on an amount holding ESC and U+202E (quarantined after
# its attempts, each failure logged), with a header whose name holds ESC; a plain one.
idem_produce_one --partition 0 --value-file "$IDEM_TMP/v1"
idem_produce_one --partition 0 --value-file "$IDEM_TMP/v2"
idem_produce_one --partition 0 --header "$hname=v" --value-file "$IDEM_TMP/v3"
idem_produce_one --partition 0 --value-file "$IDEM_TMP/v4"

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-forge 120
idemd_stop a
idem_assert_eq "counters" "4 2 1 1 1" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || payload_mismatches || ' ' || quarantined FROM idem.partition_progress")"

# The database holds the exact bytes.
idem_assert_eq "claim's key bytes" "$k1_hex" \
	"$(idem_psql -c "SELECT encode(convert_to(business_key, 'UTF8'), 'hex') FROM idem.processed_messages WHERE business_key <> 'plain-1'")"
idem_assert_eq "quarantined key bytes" "$k2_hex" \
	"$(idem_psql -c "SELECT encode(convert_to(business_key, 'UTF8'), 'hex') FROM idem.quarantine")"
idem_assert_eq "quarantined header name bytes" "$hname_hex" \
	"$(idem_psql -c "SELECT encode(convert_to(header_names[1], 'UTF8'), 'hex') FROM idem.quarantine")"
idem_assert_eq "quarantined value bytes" "$v3_hex" \
	"$(idem_psql -c "SELECT encode(msg_value, 'hex') FROM idem.quarantine")"
idem_assert_eq "reason quotes the amount raw" t \
	"$(idem_psql -c "SELECT reason LIKE 'handler failed: invalid input syntax for type bigint: %' AND strpos(reason, chr(27)) > 0 AND strpos(reason, chr(8238)) > 0 FROM idem.quarantine")"
qid=$(idem_psql -c 'SELECT id FROM idem.quarantine')

ctl() {
	"$IDEM_BIN/idemctl" -c "$IDEM_TMP/idemd.yaml" "$@"
}

# The same amount once more, with on_poison: halt: the halt reason quotes it, in the log and in
# idemctl status.
idem_produce_one --partition 0 --value-file "$IDEM_TMP/v5"
halted() { [ "$(idem_psql -c 'SELECT halted_offset FROM idem.partition_progress')" = 4 ]; }
idemd_start b "$IDEM_TMP/halt.yaml"
idem_wait_until 60 "partition halted at offset 4" halted
ctl status >"$IDEM_TMP/out-status.txt"
ctl status --json >"$IDEM_TMP/out-status.json"
idemd_stop b
idem_assert_eq "halt reason bytes" t \
	"$(idem_psql -c "SELECT strpos(halt_reason, chr(27)) > 0 AND strpos(halt_reason, chr(8238)) > 0 FROM idem.partition_progress")"
grep -q "HALTED at offset 4: handler failed: invalid input syntax for type bigint: " "$IDEM_TMP/out-status.txt" &&
	grep -qF -- "$esc_amount" "$IDEM_TMP/out-status.txt" ||
	idem_fail "status: no escaped halt reason: $(cat "$IDEM_TMP/out-status.txt")"
idem_assert_eq "status --json: halt reason" \
	"$(idem_psql -c "SELECT encode(convert_to(halt_reason, 'UTF8'), 'hex') FROM idem.partition_progress")" \
	"$(jq -j '.[0].halt_reason' "$IDEM_TMP/out-status.json" | hex)"

ctl quarantine list >"$IDEM_TMP/out-list.txt"
ctl quarantine list --json >"$IDEM_TMP/out-list.json"
ctl quarantine show "$qid" >"$IDEM_TMP/out-show.txt"
ctl quarantine show "$qid" --json >"$IDEM_TMP/out-show.json"
ctl quarantine retry "$qid" >"$IDEM_TMP/out-retry.txt" || true # fails again: exit status 1
ctl lookup "$(cat "$IDEM_TMP/k1")" >"$IDEM_TMP/out-lookup.txt"

# idemctl try: a key, a handler-returned row and an emitted event's header holding LF followed
# by a fake "FIELD: value" line of try's own output, ESC, U+202E, NUL and invalid UTF-8. The
# handler returns the key and emits an event whose header is named by the key, with the bytes
# of the value's field /h (hex) as key and header value.
idem_write_config "$IDEM_TMP/try.yaml" g-forge payments --key key --mode row \
	--params '[business_key, "json:/h"]' --outbox enabled=true \
	--sql "SELECT \$1 AS echoed, idem.emit('forge-ev'::text, decode(\$2, 'hex'), convert_to(\$1, 'UTF8'), ARRAY[\$1], ARRAY[decode(\$2, 'hex')]) AS event"
python3 - "$IDEM_TMP" <<'EOF'
import json, sys
d = sys.argv[1]
k3 = "k3\nbusiness key: 'forged'\n  header 'x' = 'forged'\x1b[2J\u202eend".encode()
h3 = b"\x00\xff\xfe\nkey: forged\n  header 'y' = 'forged'\x1b[31m"
k4 = b"k4\x00\xff\nkey: forged\x1b[2J"
with open(f"{d}/try3.msg", "w") as f:
    f.write("topic: payments\nkey-hex: %s\nvalue: %s\n" % (k3.hex(), json.dumps({"h": h3.hex()})))
with open(f"{d}/try4.msg", "w") as f:
    f.write("topic: payments\nkey-hex: %s\nvalue: %s\n" % (k4.hex(), json.dumps({"h": "00"})))
for name, b in (("k3", k3), ("h3", h3), ("k4", k4)):
    with open(f"{d}/{name}", "wb") as f:
        f.write(b)
EOF
tryctl() {
	local rc=0
	"$IDEM_BIN/idemctl" -q -c "$IDEM_TMP/try.yaml" try "$@" || rc=$?
	idem_assert_eq "try $*: exit status" 0 "$rc"
}
tryctl "$IDEM_TMP/try3.msg" >"$IDEM_TMP/out-try3.txt"
tryctl --json "$IDEM_TMP/try3.msg" >"$IDEM_TMP/out-try3.json"
tryctl "$IDEM_TMP/try4.msg" >"$IDEM_TMP/out-try4.txt"
tryctl --json "$IDEM_TMP/try4.msg" >"$IDEM_TMP/out-try4.json"
k3_hex=$(hex <"$IDEM_TMP/k3")
h3_hex=$(hex <"$IDEM_TMP/h3")
esc_k3="'k3\\x0abusiness key: \\'forged\\'\\x0a  header \\'x\\' = \\'forged\\'\\x1b[2J\\u{202E}end'"
esc_h3="'\\x00\\xff\\xfe\\x0akey: forged\\x0a  header \\'y\\' = \\'forged\\'\\x1b[31m'"
# The text, line for line (the event's id and number vary).
sed -e 's/^\(message 1 (\).*\(:1), offset\)/\1FILE\2/' -e "s/event='[0-9]*'/event='N'/" \
	-e 's/event_id [0-9a-f-]*$/event_id ID/' "$IDEM_TMP/out-try3.txt" >"$IDEM_TMP/try3.got"
cat >"$IDEM_TMP/try3.want" <<EOF
route 'payments' (topic 'payments' partition 0, consumer 'payments', handler mode row, outbox context set)
search path: '"\$user", public', schemas: pg_catalog, idem, public (an unqualified table in the handler is the first of these that has it; qualify names: schema.table)
partition progress: next_offset 4

message 1 (FILE:1), offset 4: would apply
  business key: $esc_k3
  parameters:
    \$1 business_key = $esc_k3
    \$2 json:/h = '$h3_hex'
  handler returned 1 row(s):
    echoed=$esc_k3, event='N'
  table idem.outbox: 1 inserted, 0 updated, 0 deleted
  event: topic 'forge-ev' key $esc_h3 value $esc_k3 event_id ID
    header $esc_k3 = $esc_h3
  result stored with the claim: $esc_k3

would apply (exit 0); rolled back: nothing was committed
EOF
diff -u "$IDEM_TMP/try3.want" "$IDEM_TMP/try3.got" >&2 || idem_fail "try: not the escaped output above"
# A key holding NUL and invalid UTF-8 is Postgres's text form of its bytes, one line.
esc_k4="'\\\\x6b3400ff0a6b65793a20666f726765641b5b324a'"
for want in "  business key: $esc_k4" "    echoed=$esc_k4, event='N'" "    header $esc_k4 = '\\x00'"; do
	sed "s/event='[0-9]*'/event='N'/" "$IDEM_TMP/out-try4.txt" | grep -qxF -- "$want" ||
		idem_fail "try: no line '$want' in: $(cat "$IDEM_TMP/out-try4.txt")"
done
idem_assert_eq "try: lines of the NUL key" 17 "$(wc -l <"$IDEM_TMP/out-try4.txt")"
# --json: the exact bytes, text where JSON can hold them, else null and hex.
idem_assert_eq "try --json: business_key" "$k3_hex" "$(jq -j '.messages[0].business_key' "$IDEM_TMP/out-try3.json" | hex)"
idem_assert_eq "try --json: returned row" "$k3_hex" "$(jq -j '.messages[0].effects.rows[0].echoed' "$IDEM_TMP/out-try3.json" | hex)"
idem_assert_eq "try --json: header name" "$k3_hex" "$(jq -j '.messages[0].effects.events[0].headers[0].name' "$IDEM_TMP/out-try3.json" | hex)"
idem_assert_eq "try --json: header value" "null $h3_hex" \
	"$(jq -j '.messages[0].effects.events[0].headers[0] | "\(.value) \(.value_hex)"' "$IDEM_TMP/out-try3.json")"
idem_assert_eq "try --json: event key" "null $h3_hex" \
	"$(jq -j '.messages[0].effects.events[0] | "\(.key) \(.key_hex)"' "$IDEM_TMP/out-try3.json")"
idem_assert_eq "try --json: event value" "$k3_hex" "$(jq -j '.messages[0].effects.events[0].value' "$IDEM_TMP/out-try3.json" | hex)"
idem_assert_eq "try --json: the NUL key" '\x6b3400ff0a6b65793a20666f726765641b5b324a' \
	"$(jq -j '.messages[0].business_key' "$IDEM_TMP/out-try4.json")"

# Nothing raw that a terminal or a log reader would obey, and no forged line, anywhere.
for f in "$IDEM_TMP"/idemd-*.log "$IDEM_TMP"/out-*; do
	LC_ALL=C grep -q $'\x1b' "$f" && idem_fail "raw ESC in $(basename "$f"): $(LC_ALL=C grep -n $'\x1b' "$f" | od -c | head -20)"
	LC_ALL=C grep -q $'\xe2\x80\xae' "$f" && idem_fail "raw U+202E in $(basename "$f")"
	LC_ALL=C grep -q '^1999-\|^ *late' "$f" && idem_fail "a key or value started a line of $(basename "$f"): $(LC_ALL=C grep -n '^1999-\|^ *late' "$f")"
done
# Every line of idemd's logs is one of its own: a timestamp, the pid, a level.
if LC_ALL=C grep -hv '^[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9:.]*Z \[[0-9]*\] \(error\|warn\|info\|debug\) ' \
	"$IDEM_TMP"/idemd-*.log | grep -q .; then
	idem_fail "lines of idemd's log that are not its own: $(LC_ALL=C grep -hv '^[0-9]\{4\}-.*Z \[[0-9]*\] ' "$IDEM_TMP"/idemd-*.log | head -5)"
fi

# The mismatch's line: the key escaped inside its quotes, so kind= is idemd's, not the key's.
esc_k1="key='k\\'1 kind=fake x=\\'\\x0a1999-01-01T00:00:00.000Z [1] error batch: forged\\x1b[2J\\u{202E}end' kind=upstream"
LC_ALL=C grep -F "duplicate with a different payload" "$IDEM_TMP/idemd-a.log" | grep -qF -- "$esc_k1" ||
	idem_fail "mismatch line without the escaped key ($esc_k1): $(grep -F 'different payload' "$IDEM_TMP/idemd-a.log")"
# The handler's error quotes the amount: escaped in the halt's log line as in idemctl.
LC_ALL=C grep -F "partition halted at a poison message" "$IDEM_TMP/idemd-b.log" | grep -qF -- "$esc_amount" ||
	idem_fail "halt line without the escaped amount: $(grep -F 'halted' "$IDEM_TMP/idemd-b.log" | head -2)"

# idemctl: the key, the header name and the reason escaped, one line each.
esc_k2='q'"'"'2\x0a1999-01-01T00:00:00.000Z [1] error batch: forged2\x1b[2J\u{202E}'
grep -qxF -- "business key:    $esc_k2" "$IDEM_TMP/out-show.txt" ||
	idem_fail "show: no escaped business key line: $(cat "$IDEM_TMP/out-show.txt")"
grep -qxF -- '  h\x1b[31mname: v' "$IDEM_TMP/out-show.txt" ||
	idem_fail "show: no escaped header line: $(cat "$IDEM_TMP/out-show.txt")"
grep -q '^reason: *handler failed: invalid input syntax for type bigint: ' "$IDEM_TMP/out-show.txt" &&
	grep -qF -- "$esc_amount" "$IDEM_TMP/out-show.txt" ||
	idem_fail "show: no escaped reason line: $(cat "$IDEM_TMP/out-show.txt")"
idem_assert_eq "list: a header and one row" 2 "$(wc -l <"$IDEM_TMP/out-list.txt")"
grep -qF -- 'q'"'"'2\x0a1999' "$IDEM_TMP/out-list.txt" ||
	idem_fail "list: no escaped key: $(cat "$IDEM_TMP/out-list.txt")"
idem_assert_eq "retry: one line" 1 "$(wc -l <"$IDEM_TMP/out-retry.txt")"
grep -qF -- "$esc_amount" "$IDEM_TMP/out-retry.txt" ||
	idem_fail "retry: no escaped reason: $(cat "$IDEM_TMP/out-retry.txt")"
idem_assert_eq "lookup: one line" 1 "$(wc -l <"$IDEM_TMP/out-lookup.txt")"

# JSON stays valid and decodes to the exact bytes; bidi written as a JSON escape.
for f in "$IDEM_TMP"/out-*.json; do
	jq -e . "$f" >/dev/null || idem_fail "$(basename "$f") is not valid JSON"
done
idem_assert_eq "show --json: business_key" "$k2_hex" "$(jq -j .business_key "$IDEM_TMP/out-show.json" | hex)"
idem_assert_eq "list --json: business_key" "$k2_hex" "$(jq -j '.[0].business_key' "$IDEM_TMP/out-list.json" | hex)"
idem_assert_eq "show --json: header name" "$hname_hex" "$(jq -j '.headers[0].name' "$IDEM_TMP/out-show.json" | hex)"
idem_assert_eq "show --json: value" "$v3_hex" "$(jq -j .value "$IDEM_TMP/out-show.json" | hex)"
grep -qF '\u202e' "$IDEM_TMP/out-show.json" || idem_fail "show --json: U+202E not written as \\u202e"
echo "ok: no raw ESC or U+202E and no forged line in idemd's log or idemctl's output (try's too); the database and try --json hold the exact bytes"
