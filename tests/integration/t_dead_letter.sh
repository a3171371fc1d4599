#!/usr/bin/env bash
# The dead-letter topic (routes[].dead_letter_topic): a bad-input corpus in one partition (invalid
# JSON with duplicate headers, a missing header, an empty key, NUL bytes and invalid UTF-8, a
# handler failure with its SQLSTATE, a tombstone, a message carrying an upstream outbox's
# idem-outbox-id header) between good payments. Each bad message is quarantined and reaches the
# dead-letter topic once, with its key and value bytes exactly as received, its own headers in
# order and idem-dlt-reason/-sqlstate/-topic/-partition/-offset. After a SIGKILL the whole
# partition is read again (a redelivery): the quarantine rows are reopened, no new dead letter is
# written, and the dead-letter topic holds each bad message under one idem-outbox-id. Then
# `idemctl quarantine retry` still works from the table.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics "payments:1 payments-dlt:1 payments-replies:1"
cfg=$IDEM_TMP/idemd.yaml
# No offset reaches Kafka before the SIGKILL (its first automatic commit would be in 10 min).
write_cfg() {
	idem_write_config "$cfg" g-dlt payments --key '${header:tenant}${json:/payment_id}' \
		--wait 200 --kafka-prop auto.commit.interval.ms=600000 --retry max_ms=200 \
		--route dead_letter_topic=payments-dlt --route 'reply={topic: payments-replies}' \
		--outbox enabled=true --outbox poll_interval_ms=20 "$@"
}
idem_write_config "$cfg" g-x payments --route dead_letter_topic=payments-dlt
if out=$("$IDEM_BIN/idemd" -c "$cfg" --check-config 2>&1); then
	idem_fail "a route with a dead_letter_topic and no outbox was accepted"
fi
grep -q "route 'payments' has 'dead_letter_topic' but outbox.enabled is false" <<<"$out" ||
	idem_fail "unexpected error for a dead_letter_topic without outbox: $out"
idem_write_config "$cfg" g-x payments --route 'dead_letter_topic=bad/topic' --outbox enabled=true
if "$IDEM_BIN/idemd" -c "$cfg" --check-config >/dev/null 2>&1; then
	idem_fail "an invalid dead_letter_topic was accepted"
fi
write_cfg
idem_setup_db "$cfg"

produced=0 good=0 bad=0
produce() {
	"$IDEM_BIN/idem-kafkatool" produce-one --brokers "$IDEM_BROKERS" --topic payments "$@" \
		>/dev/null || idem_fail "produce-one $* failed"
	produced=$((produced + 1))
}
pay() { # ID AMOUNT
	produce --key "$1" --header tenant=t1- \
		--value "{\"payment_id\":\"$1\",\"account\":\"acct-1\",\"amount\":$2}"
	good=$((good + 1))
}
hex() {
	printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n'
}

pay g-1 1
produce --key k1 --header tenant=t1- --header x=1 --header x=2 \
	--value '{"payment_id":"bad-json","account":'
pay g-2 2
produce --key k2 --value '{"payment_id":"no-headers","account":"acct-1","amount":5}'
produce --header tenant= --value '{"payment_id":"","account":"acct-1","amount":5}'
pay g-3 3
produce --key-hex 6b00ff79 --header tenant=t1- --header "bin=$(printf 'a\tb')" \
	--value-hex "$(hex '{"payment_id":"utf8","account":"acct-')fffe00$(hex '","amount":1}')"
produce --key "'; DROP TABLE ledger; --" --header tenant=t1- \
	--value '{"payment_id":"sql","account":"acct-1","amount":"1; DROP TABLE ledger"}'
pay g-4 4
produce --key tomb --header tenant=t1- --no-value
produce --key chained --header idem-outbox-id=42 --header tenant=t1- \
	--value '{"payment_id":"chained","account":"acct-1","amount":"x"}'
pay g-5 5
bad=$((produced - good))

idemd_start a "$cfg"
consumed_is() { [ "$(idem_psql -c 'SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress')" = "$1" ]; }
idem_wait_until 60 "first delivery committed" consumed_is "$produced"
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
idem_wait_until 60 "outbox drained" drained
idem_assert_eq "quarantine rows" "$bad" "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_assert_eq "dead letters in the outbox" "$bad" \
	"$(idem_psql -c "SELECT count(*) FROM idem.outbox WHERE topic = 'payments-dlt'")"
idem_assert_eq "replies in the outbox" "$good" \
	"$(idem_psql -c "SELECT count(*) FROM idem.outbox WHERE topic = 'payments-replies'")"
idemd_kill9 a

# Everything again: the database position goes back to the start, as after a crash that lost
# it (Kafka has no committed offset either), so every message is delivered again.
idem_psql -c 'UPDATE idem.partition_progress SET next_offset = 0' >/dev/null
idemd_start b "$cfg"
idem_wait_until 60 "redelivery committed" consumed_is $((2 * produced))
idem_wait_until 60 "outbox drained" drained
idemd_stop b
idem_assert_eq "counters: consumed applied quarantined redeliveries" \
	"$((2 * produced)) $good $bad $produced" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || quarantined || ' ' || dup_redelivery FROM idem.partition_progress")"
idem_assert_eq "dead letters and replies in the outbox after the redelivery" "$bad $good" \
	"$(idem_psql -c "SELECT count(*) FILTER (WHERE topic = 'payments-dlt') || ' ' || count(*) FILTER (WHERE topic = 'payments-replies') FROM idem.outbox")"

# The dead-letter topic, compared byte for byte with the quarantine rows.
"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments-dlt \
	--timeout 60 >"$IDEM_TMP/dlt.tsv" || idem_fail "cannot read topic payments-dlt"
idem_psql >"$IDEM_TMP/q.txt" <<'SQL'
SELECT "offset", coalesce(encode(msg_key, 'hex'), '\N'), coalesce(encode(msg_value, 'hex'), '\N'),
	array_to_string(ARRAY(SELECT encode(convert_to(n, 'UTF8'), 'hex') FROM unnest(header_names) n), ','),
	array_to_string(ARRAY(SELECT coalesce('x' || encode(v, 'hex'), '\N') FROM unnest(header_values) v), ','),
	encode(convert_to(reason, 'UTF8'), 'hex'), coalesce(sqlstate, '')
FROM idem.quarantine ORDER BY "offset"
SQL
python3 - "$IDEM_TMP/dlt.tsv" "$IDEM_TMP/q.txt" <<'PY' || idem_fail "dead-letter topic does not match the quarantine"
import re, sys

def unescape(s):
    if s == '\\N':
        return None
    return re.sub(rb'\\x([0-9a-f]{2})', lambda m: bytes([int(m.group(1), 16)]), s.encode())

def hx(b):
    return '\\N' if b is None else b.hex()

letters = {}   # idem-dlt-offset -> {outbox id: (key, value, headers)}
for line in open(sys.argv[1], encoding='ascii'):
    part, off, key, value, headers = line.rstrip('\n').split('\t')
    hdrs = []
    for h in headers.split(',') if headers else []:
        n, v = h.split('=', 1)
        hdrs.append((unescape(n).decode(), unescape(v)))
    oid = [v for n, v in hdrs if n == 'idem-outbox-id']
    assert len(oid) == 1, f'{off}: idem-outbox-id {oid}'
    hdrs = [(n, v) for n, v in hdrs if n != 'idem-outbox-id']
    doff = int(dict(hdrs)['idem-dlt-offset'])
    letters.setdefault(doff, {})[oid[0]] = (hx(unescape(key)), hx(unescape(value)), hdrs)

errors = 0
rows = [l.rstrip('\n').split('|') for l in open(sys.argv[2]) if l.strip()]
for off, khex, vhex, names, values, reason, state in rows:
    off = int(off)
    got = letters.pop(off, {})
    if len(got) != 1:
        print(f'offset {off}: {len(got)} dead letters (distinct idem-outbox-id), expected 1')
        errors += 1
        continue
    (k, v, hdrs), = got.values()
    names = [bytes.fromhex(n).decode() for n in names.split(',')] if names else []
    values = [None if x == '\\N' else bytes.fromhex(x[1:]) for x in values.split(',')] if values else []
    names = ['idem-dlt-outbox-id' if n == 'idem-outbox-id' else n for n in names]
    want = list(zip(names, values)) + [
        ('idem-dlt-reason', bytes.fromhex(reason)), ('idem-dlt-sqlstate', state.encode()),
        ('idem-dlt-topic', b'payments'), ('idem-dlt-partition', b'0'),
        ('idem-dlt-offset', str(off).encode())]
    for what, a, b in (('key', k, khex), ('value', v, vhex), ('headers', hdrs, want)):
        if a != b:
            print(f'offset {off}: {what}: topic has {a!r}, quarantine {b!r}')
            errors += 1
for off in letters:
    print(f'dead letter for offset {off}, which is not in quarantine')
    errors += 1
print(f'{len(rows)} quarantine rows checked against the dead-letter topic')
sys.exit(1 if errors else 0)
PY
idem_assert_eq "dead-letter topic holds an empty sqlstate for undecodable ones, 22P02 for the handler's" \
	"22P02 2" \
	"$(idem_psql -c "SELECT max(sqlstate) || ' ' || count(sqlstate) FROM idem.quarantine")"

# `idemctl quarantine retry` still works from the table: the handler failure of 'chained' is
# fixed (a handler that takes a non-numeric amount as NULL) and retried; it is applied, and its
# reply (the new handler's result, 1) written with it. No dead letter is written again.
chained=$(idem_psql -c "SELECT id FROM idem.quarantine WHERE business_key = 't1-chained'")
[ -n "$chained" ] || idem_fail "no quarantine row for t1-chained"
idem_psql -c 'ALTER TABLE ledger ALTER COLUMN amount DROP NOT NULL' >/dev/null
write_cfg --sql "WITH l AS (INSERT INTO ledger (payment_id, account, amount) VALUES (\$1, \$2, CASE WHEN \$3 ~ '^[0-9]+\$' THEN \$3::bigint END)) SELECT 1" --mode row
"$IDEM_BIN/idemctl" -c "$cfg" quarantine retry "$chained" >/dev/null ||
	idem_fail "idemctl quarantine retry $chained failed"
idem_assert_eq "retried message applied" 1 \
	"$(idem_psql -c "SELECT count(*) FROM ledger WHERE payment_id = 't1-chained'")"
idem_assert_eq "reply of the retried message" "1 1" \
	"$(idem_psql -c "SELECT count(*) || ' ' || string_agg(convert_from(value, 'UTF8'), ',') FROM idem.outbox WHERE topic = 'payments-replies' AND key = convert_to('t1-chained', 'UTF8')")"
idem_assert_eq "retried quarantine row resolved" t \
	"$(idem_psql -c "SELECT resolved_at IS NOT NULL FROM idem.quarantine WHERE id = $chained")"
idem_assert_eq "dead letters after the retry" "$bad" \
	"$(idem_psql -c "SELECT count(*) FROM idem.outbox WHERE topic = 'payments-dlt'")"
echo "ok: dead letters: $produced messages, $bad quarantined and on the dead-letter topic once each, with their bytes and headers, none again after a redelivery"
