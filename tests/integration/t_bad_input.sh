#!/usr/bin/env bash
# Bad input through the real pipeline, in one partition so bad and good messages share batches:
# invalid JSON, no key field, empty key, a key over the limit, invalid UTF-8, NUL bytes in key
# and value, a 1 MiB value, SQL text in every field, duplicate and missing headers, a tombstone,
# a non-scalar key and a handler that fails on a NULL. Each bad one is quarantined with a precise
# reason and its bytes, its good neighbours are applied, nothing is dropped
# (consumed = applied + duplicates + quarantined), and idemd exits cleanly (ASan/UBSan clean).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

# The key combines a header and a JSON field, so missing and duplicate headers matter.
idem_fixture --brokers 1 --topics payments:1 --config idemd.yaml g-bad payments \
	--key '${header:tenant}${json:/payment_id}' \
	--wait 500 --limits max_key_bytes=64 --limits max_message_bytes=524288

GOOD=()    # business keys that must be applied, with their amounts: "key|amount"
BAD=()     # "offset|reason LIKE pattern|sqlstate|attempts"
produced=0
last_offset=

produce() {
	local out
	out=$("$IDEM_BIN/idem-kafkatool" produce-one --brokers "$IDEM_BROKERS" --topic payments \
		-X message.max.bytes=4000000 "$@") || idem_fail "produce-one $* failed"
	last_offset=$(sed -n 's/.*offset=\([0-9]*\).*/\1/p' <<<"$out")
	produced=$((produced + 1))
}

# good ID AMOUNT [ARGS...]: a payment that must be applied, key t1-ID.
good() {
	local id=$1 amount=$2
	shift 2
	produce --key "$id" --header tenant=t1- \
		--value "{\"payment_id\":\"$id\",\"account\":\"acct-1\",\"amount\":$amount}" "$@"
	GOOD+=("t1-$id|$amount")
}

# bad PATTERN SQLSTATE ATTEMPTS ARGS...: a message that must be quarantined with a reason
# matching PATTERN (SQL LIKE).
bad() {
	local pattern=$1 state=$2 attempts=$3
	shift 3
	produce "$@"
	BAD+=("$last_offset|$pattern|$state|$attempts")
}

hex() {
	printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n'
}

g=0
next_good() {
	g=$((g + 1))
	good "good-$g" "$g"
}

next_good
bad 'business key: json:/payment_id: value is not valid JSON: %' '' 1 \
	--header tenant=t1- --header x=1 --header x=2 --value '{"payment_id":"bad-json","account":'
off_dup_headers=$last_offset
next_good
bad 'business key: json:/payment_id: not found in value' '' 1 \
	--header tenant=t1- --value '{"account":"acct-1","amount":5}'
next_good
bad 'business key: business key is empty' '' 1 \
	--header tenant= --value '{"payment_id":"","account":"acct-1","amount":5}'
next_good
long=$(printf 'k%.0s' $(seq 1 100))
bad 'business key: business key is 103 bytes, longer than the limit of 64' '' 1 \
	--header tenant=t1- --value "{\"payment_id\":\"$long\",\"account\":\"acct-1\",\"amount\":5}"
next_good
bad 'business key: json:/payment_id: value is not valid JSON: %' '' 1 \
	--header tenant=t1- --value-hex "$(hex '{"payment_id":"utf8","account":"acct-')fffe$(hex '","amount":1}')"
next_good
bad 'parameter $2 contains a NUL byte' '' 1 --key-hex 6b0079 \
	--header tenant=t1- --value '{"payment_id":"nul-param","account":"acct\u0000x","amount":1}'
off_nul=$last_offset
next_good
bad 'business key: json:/payment_id: value is not valid JSON: %' '' 1 \
	--header tenant=t1- --value-hex "$(hex '{"payment_id":"nul-raw",')00$(hex '"amount":1}')"
next_good
python3 -c 'import sys; sys.stdout.write("{\"payment_id\":\"huge\",\"account\":\"acct-1\",\"amount\":1,\"pad\":\"" + "x" * (1 << 20) + "\"}")' >"$IDEM_TMP/huge.json"
bad 'message is % bytes, larger than limits.max_message_bytes 524288' '' 1 \
	--header tenant=t1- --value-file "$IDEM_TMP/huge.json"
off_huge=$last_offset
next_good
# SQL text in every field; the amount makes the handler's ::bigint fail (22P02).
bad 'handler failed: invalid input syntax for type bigint: %' 22P02 3 \
	--key "'; DROP TABLE ledger; --" --header tenant=t1- \
	--header "sql='); DROP TABLE idem.quarantine; --" \
	--value '{"payment_id":"x\u0027); DROP TABLE ledger; --","account":"\u0027; DROP TABLE accounts; --","amount":"1; DROP TABLE idem.processed_messages"}'
next_good
bad 'business key: header:tenant: no such header' '' 1 \
	--value '{"payment_id":"no-headers","account":"acct-1","amount":5}'
next_good
bad 'business key: json:/payment_id: message has no value' '' 1 --header tenant=t1- --no-value
next_good
bad 'business key: json:/payment_id: is an object, not a scalar' '' 1 \
	--header tenant=t1- --value '{"payment_id":{"a":1},"account":"acct-1","amount":5}'
next_good
bad 'handler failed: null value in column "balance" of relation "accounts" violates not-null constraint%' 23502 3 \
	--header tenant=t1- --value '{"payment_id":"null-amount","account":"acct-1","amount":null}'

# Good ones that look odd: SQL text in key and account, duplicate headers (the last wins), a NUL
# inside the business key (stored hex-encoded), a 300 KiB value, and one upstream duplicate.
produce --key "g'; DROP TABLE ledger; --" --header tenant=t1- \
	--value '{"payment_id":"g\u0027; DROP TABLE ledger; --","account":"acct-\u0027); DROP TABLE accounts; --","amount":7}'
GOOD+=("t1-g'; DROP TABLE ledger; --|7")
produce --header tenant=t1- --header tenant=t2- \
	--value '{"payment_id":"dup-headers","account":"acct-2","amount":11}'
GOOD+=("t2-dup-headers|11")
produce --header tenant=t1- --value '{"payment_id":"nul\u0000key","account":"acct-2","amount":13}'
GOOD+=("\\x$(hex 't1-nul')00$(hex 'key')|13")
python3 -c 'import sys; sys.stdout.write("{\"payment_id\":\"big\",\"account\":\"acct-2\",\"amount\":17,\"pad\":\"" + "y" * (300 << 10) + "\"}")' >"$IDEM_TMP/big.json"
produce --header tenant=t1- --value-file "$IDEM_TMP/big.json"
GOOD+=("t1-big|17")
good good-1 1 # the same payment again: a duplicate, not applied twice
unset 'GOOD[${#GOOD[@]}-1]'
next_good

idem_log "produced $produced messages: ${#GOOD[@]} to apply, ${#BAD[@]} to quarantine, 1 duplicate"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-bad 120
idemd_stop a # exit status 0: no crash, no sanitizer report

# Every message accounted for.
idem_assert_eq "consumed" "$produced" "$(idem_psql -c "SELECT sum(consumed) FROM idem.partition_progress")"
idem_assert_eq "applied" "${#GOOD[@]}" "$(idem_psql -c "SELECT sum(applied) FROM idem.partition_progress")"
idem_assert_eq "duplicates" 1 "$(idem_psql -c "SELECT sum(duplicates) || '/' || sum(dup_upstream) FROM idem.partition_progress" | cut -d/ -f2)"
idem_assert_eq "quarantined" "${#BAD[@]}" "$(idem_psql -c "SELECT sum(quarantined) FROM idem.partition_progress")"
idem_assert_eq "quarantine rows" "${#BAD[@]}" "$(idem_psql -c "SELECT count(*) FROM idem.quarantine")"
idem_check_accounting payments
idem_check_progress_at_end payments g-bad

# Each bad message quarantined at its offset with its precise reason, SQLSTATE and attempts, and
# no claim left behind by it.
for b in "${BAD[@]}"; do
	IFS='|' read -r off pattern state attempts <<<"$b"
	v=$(idem_psql -v pat="$pattern" -v st="$state" <<<"SELECT reason LIKE :'pat' AND coalesce(sqlstate, '') = :'st' AND attempts = $attempts AND resolved_at IS NULL FROM idem.quarantine WHERE partition = 0 AND \"offset\" = $off")
	[ "$v" = t ] || idem_fail "offset $off: expected reason like '$pattern' sqlstate '$state' attempts $attempts, got: $(idem_psql -c "SELECT reason, sqlstate, attempts FROM idem.quarantine WHERE \"offset\" = $off")"
	idem_assert_eq "claims of quarantined offset $off" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages WHERE partition = 0 AND \"offset\" = $off")"
done
# Their bytes are kept: the 1 MiB value, the NUL bytes in key and value, duplicate headers.
idem_assert_eq "1 MiB value stored" "$(stat -c %s "$IDEM_TMP/huge.json")" \
	"$(idem_psql -c "SELECT octet_length(msg_value) FROM idem.quarantine WHERE \"offset\" = $off_huge")"
idem_assert_eq "NUL key stored" '\x6b0079' \
	"$(idem_psql -c "SELECT msg_key FROM idem.quarantine WHERE \"offset\" = $off_nul")"
idem_assert_eq "NUL value stored" t \
	"$(idem_psql -c "SELECT position('\\x5c7530303030'::bytea IN msg_value) > 0 FROM idem.quarantine WHERE \"offset\" = $off_nul")"
idem_assert_eq "duplicate headers stored in order" '{tenant,x,x}' \
	"$(idem_psql -c "SELECT header_names::text FROM idem.quarantine WHERE \"offset\" = $off_dup_headers")"
idem_assert_eq "duplicate header values" '1,2' \
	"$(idem_psql -c "SELECT convert_from(header_values[2], 'UTF8') || ',' || convert_from(header_values[3], 'UTF8') FROM idem.quarantine WHERE \"offset\" = $off_dup_headers")"

# Each good message applied once, with its amount, under its exact key; in row mode with the
# balance the handler returned as its result, in set mode (whose handler returns none) without.
has_result='IS NOT NULL'
[ "$IDEM_HANDLER_MODE" = row ] || has_result='IS NULL'
for gd in "${GOOD[@]}"; do
	key=${gd%|*}
	amount=${gd##*|}
	idem_assert_eq "ledger for '$key'" "1 $amount" \
		"$(idem_psql -v k="$key" <<<"SELECT count(*) || ' ' || coalesce(sum(amount), 0) FROM ledger WHERE payment_id = :'k'")"
	idem_assert_eq "claim for '$key'" 1 \
		"$(idem_psql -v k="$key" <<<"SELECT count(*) FROM idem.processed_messages WHERE business_key = :'k' AND result $has_result")"
done
idem_assert_eq "ledger rows" "${#GOOD[@]}" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "claims" "${#GOOD[@]}" "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
# SQL text stayed text: every table is still there.
idem_assert_eq "tables intact" 5 \
	"$(idem_psql -c "SELECT count(to_regclass(t)) FROM unnest(ARRAY['ledger', 'accounts', 'idem.processed_messages', 'idem.quarantine', 'idem.partition_progress']) t")"
echo "ok: $produced messages: $(idem_counts_full payments)"
