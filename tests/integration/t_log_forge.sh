#!/usr/bin/env bash
# Log lines and idemctl output that a message cannot forge. Business keys holding a quote, a
# newline followed by a fake log line, ESC[2J and U+202E (RIGHT-TO-LEFT OVERRIDE), a header name
# holding ESC and a handler error quoting such text reach idemd's log (a payload-mismatch
# duplicate logs its key, a failing handler its error) and idemctl's output (quarantine list,
# show, show --json, retry; lookup). Neither holds a raw ESC or U+202E, no line starts where a
# key put a newline, a quote in a key cannot close the field it is quoted in, the JSON stays
# valid and decodes to the exact key, and the database holds the exact original bytes.
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
echo "ok: no raw ESC or U+202E and no forged line in idemd's log or idemctl's output; the database holds the exact bytes"
