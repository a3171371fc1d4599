#!/usr/bin/env bash
# README.md's quickstart, run as written: the shell blocks after "<!-- quickstart -->" run in
# order, in one shell, in the test's temp dir, against the test's own Postgres and embedded Kafka
# (the sandbox.env that tests/sandbox.sh would write, written by the same idem_sandbox_env; the
# blocks of building and of starting the sandbox are the test's own). Then:
# - the order is in public.orders once, with one claim, 1 applied and 1 duplicate counted;
# - the block after "<!-- quickstart-grants -->" (its SQL, for the sandbox's database): idemd
#   runs as that least-privileged role with the outbox, a reply, a dead-letter topic and a
#   quarantined message, and idemctl status, verify and quarantine list work as that role.
# A README command that breaks fails this test. IDEM_QUICKSTART_README reads another file.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"
readme=${IDEM_QUICKSTART_README:-$IDEM_SRC/README.md}

# blocks MARK: the fenced blocks that follow a line "<!-- MARK -->", in order.
blocks() {
	awk -v mark="<!-- $1 -->" '
		$0 == mark { want = 1; next }
		want && /^```/ && !on { on = 1; next }
		on && /^```/ { on = 0; want = 0; print "# ---- end of block"; next }
		on' "$readme"
}

idem_tmp_init
idem_pg_start
idem_kafka_start --brokers 1 orders:1 order-events:1
idem_sandbox_env "$IDEM_TMP/sandbox.env"
blocks quickstart >"$IDEM_TMP/quickstart.sh"
[ "$(grep -c '^# ---- end of block' "$IDEM_TMP/quickstart.sh")" -ge 4 ] ||
	idem_fail "fewer than 4 quickstart blocks in $readme"
grep -q '^idemd ' "$IDEM_TMP/quickstart.sh" || idem_fail "no quickstart block runs idemd"

# The quickstart as written, but that the test waits, after the block that starts idemd, for it
# to have committed what was produced (a person reads the log; a test must not race it).
awk '{ print } /^idemd .*&$/ { started = 1 } /^# ---- end of block/ && started == 1 {
	print "idem-kafkatool wait-committed --brokers \"$IDEM_BROKERS\" --group quickstart --topic orders --timeout 60 >/dev/null"
	started = 2 }' "$IDEM_TMP/quickstart.sh" >"$IDEM_TMP/run.sh"
idem_log "running README's quickstart ($(grep -c '^# ---- end of block' "$IDEM_TMP/run.sh") blocks)"
(cd "$IDEM_TMP" && PATH=$IDEM_BIN:$PATH bash -euo pipefail "$IDEM_TMP/run.sh") \
	>"$IDEM_TMP/quickstart.log" 2>&1 ||
	idem_fail "README's quickstart failed: $(tail -20 "$IDEM_TMP/quickstart.log")"

idem_assert_eq "orders applied" "o-1|c-7|12.50" "$(idem_psql -c 'TABLE public.orders')"
idem_assert_eq "claims" "quickstart|o-1" \
	"$(idem_psql -c 'SELECT consumer, business_key FROM idem.claims_named')"
idem_assert_eq "progress (consumed applied duplicates quarantined)" "2 1 1 0" \
	"$(idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || quarantined FROM idem.partition_progress")"
grep -q "o-1 *| c-7 *| 12.50" "$IDEM_TMP/quickstart.log" || idem_fail "psql did not show the order"
grep -qE '^orders +0 +2 +2 +2 +0 +1 +1 +0 +orders$' "$IDEM_TMP/quickstart.log" ||
	idem_fail "idemctl status did not show 1 applied, 1 duplicate: $(grep -A2 TOPIC "$IDEM_TMP/quickstart.log")"

# The least-privileged role of "As a service", its grants as the README gives them.
blocks quickstart-grants | sed -n "/<<'EOF'$/,/^EOF$/p" | sed '1d;$d' |
	sed 's/ ON DATABASE idemd / ON DATABASE idem /' >"$IDEM_TMP/grants.sql"
grep -q 'CREATE ROLE idemd' "$IDEM_TMP/grants.sql" || idem_fail "no grants block in $readme"
idem_psql -f "$IDEM_TMP/grants.sql"
sed -e 's/user=idem"/user=idemd"/' -e 's/group_id: quickstart/group_id: service/' -e 's/^routes:/outbox:\n  enabled: true\nretention:\n  interval: 1s\nroutes:/' \
	-e 's/^    topics: \[orders\]/&\n    consumer: quickstart\n    reply: {topic: order-events}\n    dead_letter_topic: order-events/' \
	"$IDEM_TMP/quickstart/orders.yaml" >"$IDEM_TMP/service.yaml"
grep -q 'user=idemd' "$IDEM_TMP/service.yaml" || idem_fail "the quickstart's conninfo changed: $(cat "$IDEM_TMP/service.yaml")"
idem_kafkatool produce-one --brokers "$IDEM_BROKERS" --topic orders \
	--value '{"order_id": "o-2", "customer": "c-8", "total": 3}' >/dev/null
idem_kafkatool produce-one --brokers "$IDEM_BROKERS" --topic orders \
	--value '{"order_id": "o-3", "customer": "c-8", "total": "three"}' >/dev/null
outbox_published() {
	[ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]
}
idemd_start svc "$IDEM_TMP/service.yaml"
idem_kafkatool wait-committed --brokers "$IDEM_BROKERS" --group service --topic orders \
	--timeout 60 >/dev/null
idem_wait_until 30 "the outbox published" outbox_published
idemd_stop svc
! grep -E ' (error|warn) ' "$IDEM_TMP/idemd-svc.log" | grep -v 'quarantined 1 message' ||
	idem_fail "idemd as the role idemd logged errors"
idem_assert_eq "orders applied as the role idemd" "o-1 o-2" \
	"$(idem_psql -c "SELECT string_agg(order_id, ' ' ORDER BY order_id) FROM public.orders")"
idem_assert_eq "quarantined as the role idemd" "o-3" \
	"$(idem_psql -c "SELECT business_key FROM idem.quarantine")"
idem_assert_eq "outbox rows (replies, dead letter) published" "2 2" \
	"$(idem_psql -c "SELECT count(*) || ' ' || count(published_at) FROM idem.outbox")"
for c in status verify "quarantine list"; do
	# shellcheck disable=SC2086 # $c is a command and its arguments
	"$IDEM_BIN/idemctl" -q -c "$IDEM_TMP/service.yaml" $c >/dev/null 2>"$IDEM_TMP/err.txt" ||
		idem_fail "idemctl $c as the role idemd failed: $(cat "$IDEM_TMP/err.txt")"
done
idem_log "ok"
