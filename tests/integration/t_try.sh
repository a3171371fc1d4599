#!/usr/bin/env bash
# idemctl try runs messages through their route as idemd would, in a transaction that is always
# rolled back, and says what would happen (idemctl(8) TRYING A ROUTE):
# - a new key: exit 0, the business key, each parameter, the handler's returned row, its table
#   changes (1 ledger row, 1 account row) and its outbox event, from a file and from stdin;
# - a duplicate of a key idemd applied: exit 10, the claim's topic/partition/offset, when, and
#   its stored result (upstream re-send; at the very position, a redelivery);
# - a key template that fails: exit 11, would be quarantined, the reason;
# - a handler that raises: exit 12, the SQLSTATE and the error, and what idemd would do;
# - set mode, three messages from two files: one statement with text[] arrays, 3 ledger rows;
# - messages read from Kafka by --topic/--partition/--offset (--count 2, --json);
# - bad input (an unknown field) is a usage error naming the file, the line and the field;
# - the search path the handler's unqualified names resolve through, in try's output and in
#   idemd's log at start.
# After every one: idem.processed_messages, the handler's tables, idem.outbox,
# idem.partition_progress and idem.quarantine byte for byte as before, no lock held by another
# session and no session of idemctl left, and the group's committed offsets unchanged.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

# Row mode: the payments handler, which also emits an event (the outbox is enabled).
emit_sql="WITH l AS (INSERT INTO ledger (payment_id, account, amount) VALUES (\$1, \$2, \$3::bigint)),
e AS (SELECT idem.emit('payment-applied', \$2::text, jsonb_build_object('payment_id', \$1::text, 'amount', \$3::bigint)) AS id)
INSERT INTO accounts (id, balance) SELECT \$2, \$3::bigint FROM e
ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance RETURNING balance"
idem_fixture --brokers 1 --topics "payments:2 payment-applied:1" --config idemd.yaml g-try payments \
	--sql "$emit_sql" --mode row --outbox enabled=true

for i in 1 2 3; do
	idem_produce_one --partition 0 --value "{\"payment_id\":\"p-$i\",\"account\":\"acct-1\",\"amount\":$i}"
done
idemd_start a "$IDEM_CFG"
idem_wait_done g-try 60
idemd_stop a
# The fixture's role is idem, so "$user" finds the schema idem first: its unqualified ledger is
# idem.ledger, and idemd says so at start.
grep -qF "info main: route 'payments': unqualified names in its handler resolve through search_path '\"\$user\", public', schemas: pg_catalog, idem, public (qualify them: schema.table)" \
	"$IDEM_TMP/idemd-a.log" || idem_fail "idemd did not log the route's search path: $(grep -F search_path "$IDEM_TMP/idemd-a.log")"
idem_assert_eq "payments applied by idemd" "3 6" \
	"$(idem_psql -c "SELECT count(*) || ' ' || sum(amount) FROM ledger")"

# The same database in a handler that raises, and in set mode (same consumer: same claims).
idem_psql -c "CREATE FUNCTION try_boom(k text) RETURNS bigint LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO ledger (payment_id, account, amount) VALUES (k, 'boom', 1);
RAISE EXCEPTION 'boom for %', k; END \$\$" >/dev/null
idem_write_config "$IDEM_TMP/boom.yaml" g-try payments --sql 'SELECT try_boom($1)' \
	--params '[business_key]' --mode row
idem_write_config "$IDEM_TMP/set.yaml" g-try payments --sql "$IDEM_PAYMENTS_SET_SQL" --mode set

state() {
	local t
	for t in idem.processed_messages ledger accounts idem.outbox idem.partition_progress \
		idem.quarantine; do
		printf '%s %s\n' "$t" "$(idem_psql -c "SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '-') FROM $t x")"
	done
	"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-try --topic payments
}
before=$(state)

# after NAME: the database and the group's offsets as before, nothing locked, no session left.
after() {
	idem_assert_eq "$1: database and committed offsets unchanged" "$before" "$(state)"
	idem_assert_eq "$1: locks held by other sessions" 0 \
		"$(idem_psql -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.pid <> pg_backend_pid() AND a.backend_type = 'client backend'")"
	idem_assert_eq "$1: idemctl sessions left" 0 \
		"$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemctl'")"
}

# try WANT_RC NAME [--config FILE] ARGS...: idemctl try ARGS, output in $IDEM_TMP/out.txt.
try() {
	local want=$1 name=$2 cfg=$IDEM_CFG rc=0
	shift 2
	if [ "${1:-}" = --config ]; then
		cfg=$2
		shift 2
	fi
	"$IDEM_BIN/idemctl" -q -c "$cfg" try "$@" >"$IDEM_TMP/out.txt" 2>"$IDEM_TMP/err.txt" || rc=$?
	idem_assert_eq "$name: exit status (out: $(cat "$IDEM_TMP/out.txt" "$IDEM_TMP/err.txt"))" \
		"$want" "$rc"
	after "$name"
}
says() {
	grep -qF -- "$1" "$IDEM_TMP/out.txt" ||
		idem_fail "expected '$1' in: $(cat "$IDEM_TMP/out.txt" "$IDEM_TMP/err.txt")"
}

# A new key, from a file.
cat >"$IDEM_TMP/new.msg" <<'EOF'
# a payment idemd has not seen
topic: payments
key: acct-9
header: tenant=t1
value: {"payment_id": "p-new", "account": "acct-9", "amount": 7}
EOF
try 0 "new key" "$IDEM_TMP/new.msg"
says "route 'payments' (topic 'payments' partition 0"
says "partition progress: next_offset 3"
says "search path: '\"\$user\", public', schemas: pg_catalog, idem, public (an unqualified table in the handler is the first of these that has it; qualify names: schema.table)"
says "message 1 ($IDEM_TMP/new.msg:2), offset 3: would apply"
says "business key: 'p-new'"
says "\$1 business_key = 'p-new'"
says "\$2 json:/account = 'acct-9'"
says "\$3 json:/amount = '7'"
says "handler returned 1 row(s):"
says "balance='7'"
says "table idem.ledger: 1 inserted, 0 updated, 0 deleted"
says "table idem.accounts: 1 inserted, 0 updated, 0 deleted"
says "table idem.outbox: 1 inserted"
says "event: topic 'payment-applied' key 'acct-9' value '{\\\"amount\\\": 7, \\\"payment_id\\\": \\\"p-new\\\"}' event_id "
says "result stored with the claim: '7'"
says "would apply (exit 0); rolled back: nothing was committed"
! grep -q 'processed_messages' "$IDEM_TMP/out.txt" || idem_fail "the claim counted as the handler's"

# Trace context: the event carries the traceparent idemd passes on (the message's trace, idemd's
# span) and the tracestate, as the worker's events would.
cat >"$IDEM_TMP/traced.msg" <<'EOF'
topic: payments
key: acct-9
header: traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
header: tracestate=rojo=1
value: {"payment_id": "p-traced", "account": "acct-9", "amount": 7}
EOF
try 0 "traced" "$IDEM_TMP/traced.msg"
says "header 'traceparent' = '00-4bf92f3577b34da6a3ce929d0e0e4736-"
says "header 'tracestate' = 'rojo=1'"
! grep -q "00f067aa0ba902b7-01'" "$IDEM_TMP/out.txt" || idem_fail "the event carries the producer's span"

# The same from standard input, topic from --topic; an existing account is updated.
printf 'value: {"payment_id": "p-new", "account": "acct-1", "amount": 1}\n' >"$IDEM_TMP/stdin.msg"
rc=0
"$IDEM_BIN/idemctl" -q -c "$IDEM_CFG" try --topic payments - <"$IDEM_TMP/stdin.msg" \
	>"$IDEM_TMP/out.txt" 2>&1 || rc=$?
idem_assert_eq "stdin: exit status" 0 "$rc"
after stdin
says "table idem.accounts: 0 inserted, 1 updated, 0 deleted"
says "balance='7'"

# A duplicate: the key idemd applied from offset 1.
printf 'topic: payments\nvalue: {"payment_id": "p-2", "account": "acct-1", "amount": 2}\n' \
	>"$IDEM_TMP/dup.msg"
try 10 duplicate "$IDEM_TMP/dup.msg"
claim=$(idem_psql -c "SELECT topic || ' partition ' || partition || ' offset ' || \"offset\" FROM idem.claims_named WHERE business_key = 'p-2'")
idem_assert_eq "p-2's claim" "payments partition 0 offset 1" "$claim"
says "offset 3: duplicate (upstream)"
says "claimed by topic 'payments' partition 0 offset 1 at 20"
says ", result '3'"
says "duplicate (exit 10)"
! grep -q "handler returned" "$IDEM_TMP/out.txt" || idem_fail "a duplicate's handler ran"
# At the claim's very position: Kafka delivering it again.
printf 'offset: 1\n' >>"$IDEM_TMP/dup.msg"
try 10 redelivery "$IDEM_TMP/dup.msg"
says "offset 1: duplicate (redelivery)"

# A key template that fails: would be quarantined, with the reason.
printf 'topic: payments\nvalue: {"account": "acct-1", "amount": 2}\n' >"$IDEM_TMP/nokey.msg"
try 11 "key template fails" "$IDEM_TMP/nokey.msg"
says "would be quarantined"
says "business key: none"
says "reason: business key: json:/payment_id"
says "would be quarantined (exit 11)"

# A handler that raises.
printf 'topic: payments\nvalue: {"payment_id": "p-boom"}\n' >"$IDEM_TMP/boom.msg"
try 12 "handler raises" --config "$IDEM_TMP/boom.yaml" "$IDEM_TMP/boom.msg"
says "handler failed (SQLSTATE P0001)"
says "reason: handler failed: boom for p-boom"
says "idemd would retry the message, then quarantine it"
says "handler failed (exit 12)"

# Set mode: three messages (two files), one statement with one element per message.
cat >"$IDEM_TMP/set1.msg" <<'EOF'
topic: payments
partition: 1
value: {"payment_id": "s-1", "account": "acct-7", "amount": 10}
---
topic: payments
partition: 1
value: <<END
{"payment_id": "s-2",
 "account": "acct-8", "amount": 20}
END
EOF
printf 'topic: payments\npartition: 1\nvalue: {"payment_id": "s-3", "account": "acct-7", "amount": 30}\n' \
	>"$IDEM_TMP/set2.msg"
try 0 "set mode" --config "$IDEM_TMP/set.yaml" "$IDEM_TMP/set1.msg" "$IDEM_TMP/set2.msg"
says "handler mode set"
says "partition progress: next_offset 0"
says "message 2 ($IDEM_TMP/set1.msg:5), offset 1: would apply"
says "message 3 ($IDEM_TMP/set2.msg:1), offset 2: would apply"
says "\$1 business_key text[] = '{\\\"s-1\\\",\\\"s-2\\\",\\\"s-3\\\"}'"
says "\$2 json:/account text[] = '{\\\"acct-7\\\",\\\"acct-8\\\",\\\"acct-7\\\"}'"
says "table idem.ledger: 3 inserted, 0 updated, 0 deleted"
says "table idem.accounts: 2 inserted, 0 updated, 0 deleted"
# The same with a key idemd applied among them: two apply, one duplicate.
printf 'topic: payments\npartition: 1\nvalue: {"payment_id": "p-1", "account": "acct-1", "amount": 1}\n' \
	>"$IDEM_TMP/set3.msg"
try 10 "set mode, a duplicate" --config "$IDEM_TMP/set.yaml" "$IDEM_TMP/set1.msg" "$IDEM_TMP/set3.msg"
says "\$1 business_key text[] = '{\\\"s-1\\\",\\\"s-2\\\"}'"
says "table idem.ledger: 2 inserted"

# From Kafka: the message at partition 0 offset 1 (p-2, its own claim: a redelivery), then two.
try 10 kafka --topic payments --partition 0 --offset 1
says "offset 1: duplicate (redelivery)"
says "business key: 'p-2'"
try 10 "kafka, two, as JSON" --json --topic payments --partition 0 --offset 1 --count 2
idem_assert_eq "JSON: messages, outcome, exit" "p-2 p-3 duplicate 10 false" \
	"$(jq -r '[.messages[].business_key, .outcome, .exit, .committed] | join(" ")' "$IDEM_TMP/out.txt")"
idem_assert_eq "JSON: the claim" "payments 0 2" \
	"$(jq -r '.messages[1].claim | [.topic, .partition, .offset] | join(" ")' "$IDEM_TMP/out.txt")"
try 1 "kafka, past the end" --topic payments --partition 0 --offset 2 --count 5
grep -q "holds offsets 0..2, not 2..6" "$IDEM_TMP/err.txt" || idem_fail "past the end: $(cat "$IDEM_TMP/err.txt")"

# JSON of a new key: parameters and effects.
try 0 "new key, JSON" --json "$IDEM_TMP/new.msg"
idem_assert_eq "JSON: new key" "apply p-new acct-9 7 1 1" \
	"$(jq -r '.messages[0] | [.outcome, .business_key, .params[1].value, .result, (.effects.tables[] | select(.table == "idem.ledger") | .inserted), (.effects.events | length)] | join(" ")' "$IDEM_TMP/out.txt")"

# Bad input: refused before anything is opened, naming file, line and field.
printf 'topic: payments\nvaule: {}\n' >"$IDEM_TMP/bad.msg"
try 2 "bad input" "$IDEM_TMP/bad.msg"
grep -qF "$IDEM_TMP/bad.msg:2: error: unknown field 'vaule'" "$IDEM_TMP/err.txt" ||
	idem_fail "bad input: $(cat "$IDEM_TMP/err.txt")"

idem_log "t_try: ok"
