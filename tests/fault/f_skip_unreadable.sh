#!/usr/bin/env bash
# Fault: an operator's skip while Kafka's committed offsets cannot be read at assignment (the
# group coordinator moving: OffsetFetch, Kafka ApiKey 9, answers NOT_COORDINATOR; the errors are
# pushed through the mock's control socket).
#
# idemd applies payments on 8 partitions and stops (SIGTERM) with everything committed. 700 more
# per partition arrive while it is stopped, and the operator moves the group's offsets ahead on
# purpose with Kafka's tools (idem-kafkatool reset: offsets WITHOUT idemd metadata), skipping the
# first 500 of them on every partition. Then idemd starts while the committed offsets are
# unreadable:
#  1. for a few seconds (3 errors): the partitions wait (STARTING) until the offsets can be read
#     (idemd reads them again every 2 s), then the skip is honoured. A stream produced after the
#     restart follows.
#  2. for as long as the test keeps them unreadable (50 errors, which the test uses up itself
#     once idemd has held every partition for a while). 100 payments, a poison payment (its
#     account is blocked: routes[].on_poison: halt would stop the partition there) and 300
#     payments arrive per partition while idemd is stopped; the operator skips from the
#     database's position to the middle of the last 300. idemd starts no partition and commits
#     nothing while the offsets cannot be read; once they can, it honours the whole skip: none of
#     the 100, the poison or what follows it up to the operator's offset is applied.
# Verdicts from the database, after each phase, against every message of the topic (partition,
# offset, payment): no skipped payment has a claim or a ledger row; every other payment (before
# the skip, after it, re-sent duplicates once) has exactly one claim and one ledger row; balances match; the counters add
# up; Kafka's committed offsets (idem-kafkatool offsets) and idem.partition_progress both end at
# the high watermarks.
# The fault is asserted to have taken effect. Phase 1: between pushing the errors and idemd's
# assignment nothing else asks for offsets, so the errors the test's own reads find left over
# are those idemd's reads did not use: fewer than 3 means idemd's first read failed (and none
# left: it read again until it could). Phase 2: idemd logged every partition as waiting for the
# committed offset, started none, and errors are still queued when the test reads them.
#
# On 2f415a8 phase 1 fails ("skipped payments applied"): idemd read the committed offsets once;
# that read failing, it started every partition at the database's position, committed that with
# its own metadata (overwriting the operator's offsets) and applied the 500 skipped payments of
# every partition. On 871f977 phase 2 fails ("payments applied while the committed offsets could
# not be read"): past a 30 s bound idemd started at the database's position and applied the 100
# payments the operator meant to skip.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-skip-unread
parts=8
# Errors pushed for OffsetFetch (Kafka ApiKey 9). NOT_COORDINATOR fails one read at once
# (librdkafka re-queries the coordinator and does not retry the request itself), so each read
# of idemd's (about one a second within its 30 s bound, one every 2 s after it) uses one up:
# the fault is counted, not timed. (COORDINATOR_LOAD_IN_PROGRESS is retried by librdkafka inside
# one read, every retry.backoff.ms, until the read's 10 s timeout: it uses up ~10 errors a second
# for as long as any read waits, so how long the offsets stay unreadable would depend on timing.)
fault_err=NOT_COORDINATOR
short_errors=3  # phase 1: used up by idemd's first reads, within a few seconds
long_errors=50  # phase 2: more than idemd's reads within the bound (at most ~31) use up

# Small batches and a short retry: a halted partition is retried (and idle in between) every
# second.
idem_fixture --topics "payments:$parts" --config idemd.yaml "$group" payments \
	--sql "$IDEM_FN_SQL" --mode row --route on_poison=halt --retry max_ms=1000 --max 100
idem_create_apply_fn
idem_psql -c "INSERT INTO blocked_accounts VALUES ('acct-poison')"

# payments FILE SEED PER_PARTITION DUP_EVERY: idem_payments_file for this test's partitions.
payments() {
	idem_payments_file "$1" "$2" "$3" "$4" "$parts"
}

# produce FILE: write the messages of FILE (see payments) to topic payments.
produce() {
	local out
	out=$("$IDEM_BIN/idem-kafkatool" produce-file --brokers "$IDEM_BROKERS" --topic payments \
		--input "$1") || idem_fail "producing $1 failed"
	idem_log "produced $(basename "$1"): $out"
}

# offsets_read: the group's committed offsets and the high watermarks into committed[] and
# high[]; false (and nothing set) if they cannot be read (each failed read uses up one of the
# errors pushed for OffsetFetch).
declare -a committed high
offsets_read() {
	local out line p
	out=$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" \
		--topic payments 2>/dev/null) || return 1
	while read -r line; do
		case $line in partition=*) ;; *) continue ;; esac
		p=$(sed -n 's/^partition=\([0-9]*\) .*/\1/p' <<<"$line")
		committed[p]=$(sed -n 's/.* committed=\([0-9-]*\) .*/\1/p' <<<"$line")
		high[p]=$(sed -n 's/.* high=\([0-9-]*\) .*/\1/p' <<<"$line")
	done <<<"$out"
	[ "${#high[@]}" = "$parts" ] || idem_fail "unexpected offsets output: $out"
}

# offsets_drain MAX: read the offsets until they can be read (at most MAX failed reads); sets
# drained to the number of failed reads (errors that were still queued).
offsets_drain() {
	drained=0
	until offsets_read; do
		drained=$((drained + 1))
		[ "$drained" -le "$1" ] || idem_fail "the committed offsets are still unreadable after $1 reads"
	done
}

# skip_all OFFSET: the operator's skip (idemd stopped): every partition's committed offset set to
# OFFSET without idemd metadata; then check that it is there.
skip_all() {
	local p
	"$IDEM_BIN/idem-kafkatool" reset --brokers "$IDEM_BROKERS" --group "$group" \
		--topic payments --to-offset "$1" >/dev/null || idem_fail "idem-kafkatool reset failed"
	offsets_read || idem_fail "cannot read the offsets after the reset"
	for ((p = 0; p < parts; p++)); do
		idem_assert_eq "committed offset of partition $p after the operator's reset" "$1" \
			"${committed[p]}"
	done
}

# at_end: every partition's committed offset is at its high watermark, all partitions at the same
# offset (which it prints).
at_end() {
	local p
	offsets_read || idem_fail "cannot read the offsets"
	for ((p = 0; p < parts; p++)); do
		[ "${committed[p]}" = "${high[p]}" ] ||
			idem_fail "partition $p: committed ${committed[p]}, high watermark ${high[p]}"
		[ "${high[p]}" = "${high[0]}" ] ||
			idem_fail "partition $p: high watermark ${high[p]}, partition 0's ${high[0]}"
	done
	echo "${high[0]}"
}

# assigned_all NAME: idemd NAME logged the start of every partition.
assigned_all() {
	local n
	n=$(grep -cs 'assigned topic=payments partition=' "$IDEM_TMP/idemd-$1.log") || true
	[ "${n:-0}" -ge "$parts" ]
}

# load_messages: every message of the topic into table msgs (partition, offset, payment id,
# account, amount) and the ranges that must not be applied into table skipped (created by the
# caller).
load_messages() {
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments \
		--timeout 60 >"$IDEM_TMP/messages.tsv" || idem_fail "cannot read topic payments"
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS msgs_raw, msgs; CREATE TABLE msgs_raw (p int, o bigint, k text, v text, h text)"
	idem_psql -c "\\copy msgs_raw FROM '$IDEM_TMP/messages.tsv'"
	idem_psql -c "CREATE TABLE msgs AS SELECT p, o, v::jsonb->>'payment_id' AS payment_id, v::jsonb->>'account' AS account, (v::jsonb->>'amount')::bigint AS amount FROM msgs_raw"
}

# check_verdict WHAT: from the database, against msgs and skipped (p, lo, hi: offsets lo..hi-1
# of partition p must not be applied; every other message must be, once).
check_verdict() {
	local what=$1 n p
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS m_skip, m_keep"
	idem_psql -c "CREATE TABLE m_skip AS SELECT DISTINCT m.payment_id FROM msgs m JOIN skipped s ON m.p = s.p AND m.o >= s.lo AND m.o < s.hi"
	idem_psql -c "CREATE TABLE m_keep AS SELECT payment_id, min(account) AS account, min(amount) AS amount, count(DISTINCT (account, amount)) AS variants FROM msgs m WHERE NOT EXISTS (SELECT 1 FROM skipped s WHERE m.p = s.p AND m.o >= s.lo AND m.o < s.hi) GROUP BY payment_id"
	# The workload's own consistency: a skipped payment appears nowhere else.
	idem_assert_eq "$what: payments both in and out of the skipped ranges (test workload)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM m_skip JOIN m_keep USING (payment_id)')"
	idem_assert_eq "$what: duplicates with another payload (test workload)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM m_keep WHERE variants <> 1')"
	n=$(idem_psql -c 'SELECT count(*) FROM m_skip')
	[ "$n" -gt 0 ] || idem_fail "$what: no skipped payments: the test proves nothing"
	idem_assert_eq "$what: skipped payments applied (ledger rows)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN m_skip USING (payment_id)')"
	idem_assert_eq "$what: skipped payments claimed" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named c JOIN m_skip s ON s.payment_id = c.business_key WHERE c.consumer = 'payments'")"
	idem_assert_eq "$what: ledger rows" "$(idem_psql -c 'SELECT count(*) FROM m_keep')" \
		"$(idem_psql -c 'SELECT count(*) FROM ledger')"
	idem_assert_eq "$what: payments applied twice" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
	idem_assert_eq "$what: payments missing" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM m_keep k WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = k.payment_id AND l.account = k.account AND l.amount = k.amount)')"
	idem_assert_eq "$what: claims" "$(idem_psql -c 'SELECT count(*) FROM m_keep')" \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments'")"
	idem_assert_eq "$what: claims of payments that are not to be applied" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named c WHERE consumer = 'payments' AND NOT EXISTS (SELECT 1 FROM m_keep k WHERE k.payment_id = c.business_key)")"
	idem_assert_eq "$what: accounts with a wrong balance" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM m_keep GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
	idem_check_accounting payments
	idem_assert_eq "$what: quarantined" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
	# Kafka's committed offsets and the database's positions both at the end of every partition.
	offsets_read || idem_fail "$what: cannot read the committed offsets"
	for ((p = 0; p < parts; p++)); do
		idem_assert_eq "$what: Kafka committed offset of partition $p (high watermark)" \
			"${high[p]}" "${committed[p]}"
	done
	idem_check_progress_at_end payments "$group"
	idem_log "$what: $(idem_psql -c 'SELECT count(*) FROM m_keep') payments applied once, $n skipped payments never applied"
}

# skipped_add LO HI: offsets LO..HI-1 of every partition must not be applied.
skipped_add() {
	local p
	for ((p = 0; p < parts; p++)); do
		idem_psql -c "INSERT INTO skipped VALUES ($p, $1, $2)"
	done
}
idem_psql -c "CREATE TABLE skipped (p int, lo bigint, hi bigint)"

# ---- before: payments applied and committed, idemd stopped --------------------------------------
payments "$IDEM_TMP/a.txt" 1 250 10 # 2,000 messages, 10% of them re-sent payments
produce "$IDEM_TMP/a.txt"
idemd_start a "$IDEM_CFG"
idem_wait_done "$group" 120
idemd_stop a
pos1=$(at_end)
idem_assert_eq "database positions" "$parts $pos1" \
	"$(idem_psql -c "SELECT count(*) || ' ' || min(next_offset) FROM idem.partition_progress WHERE consumer = 'payments' AND next_offset = $pos1")"

# ---- phase 1: the operator skips 500 payments a partition; the first reads fail -----------------
# 700 a partition arrive while idemd is stopped; the operator skips the first 500 of each.
payments "$IDEM_TMP/b.txt" 2 700 0
produce "$IDEM_TMP/b.txt"
skip1=$((pos1 + 500))
skip_all "$skip1"
skipped_add "$pos1" "$skip1"
idem_log "phase 1: the operator moved every partition from $pos1 to $skip1 (high ${high[0]})"

idem_kafka_ctl push_errors OffsetFetch "$short_errors" "$fault_err" >/dev/null
idemd_start b "$IDEM_CFG"
idem_wait_until 90 "idemd b to start every partition" assigned_all b
# Nothing but idemd's reads at assignment asked for offsets since the errors were pushed: what is
# left of them is what those reads did not use.
offsets_drain "$short_errors"
idem_log "phase 1: $((short_errors - drained)) of $short_errors OffsetFetch errors used by idemd's reads at assignment"
[ "$drained" -lt "$short_errors" ] ||
	idem_fail "idemd's reads at assignment used none of the $short_errors OffsetFetch errors: the fault did not take effect"
# A stream produced after the restart.
payments "$IDEM_TMP/c.txt" 3 200 10
produce "$IDEM_TMP/c.txt"
idem_wait_done "$group" 120
idemd_stop b
load_messages
check_verdict "phase 1"
# idemd read the offsets again within its bound until it could.
idem_assert_eq "phase 1: OffsetFetch errors left after idemd's assignment" 0 "$drained"
idem_assert_eq "phase 1: partitions started at the operator's offset (log: case=skip)" "$parts" \
	"$(grep -c "assigned topic=payments partition=[0-9]* start=$skip1 .* case=skip " "$IDEM_TMP/idemd-b.log")"
pos2=$(at_end)

# ---- phase 2: unreadable for as long as the test says ---------------------------------------------
# Per partition: 100 payments, a poison payment (its account is blocked: on_poison: halt would
# stop the partition there), 300 payments. The operator skips from pos2 to the middle of the last
# 300. idemd cannot read that: it starts no partition (STARTING) and commits nothing while the
# offsets cannot be read, however long; once they can, it honours the whole skip: nothing from
# pos2 to the operator's offset is applied, the poison included.
payments "$IDEM_TMP/d.txt" 4 100 0
hex() { printf %s "$1" | od -An -tx1 -v | tr -d ' \n'; }
for ((p = 0; p < parts; p++)); do
	printf '%s\t%s\t%d\n' "$(hex "poison-$p")" \
		"$(hex "{\"payment_id\":\"poison-$p\",\"account\":\"acct-poison\",\"amount\":1}")" "$p"
done >"$IDEM_TMP/poison.txt"
payments "$IDEM_TMP/e.txt" 5 300 0
produce "$IDEM_TMP/d.txt"
produce "$IDEM_TMP/poison.txt"
produce "$IDEM_TMP/e.txt"
poison=$((pos2 + 100))
skip2=$((poison + 1 + 150))
skip_all "$skip2"
skipped_add "$pos2" "$skip2"
idem_log "phase 2: the operator moved every partition from $pos2 to $skip2 (poison at $poison, high ${high[0]})"

idem_kafka_ctl push_errors OffsetFetch "$long_errors" "$fault_err" >/dev/null
idemd_start c "$IDEM_CFG"
all_waiting() {
	local n
	n=$(grep -cs "not starting topic=payments partition=[0-9]* yet: the group's committed offset cannot be read" \
		"$IDEM_TMP/idemd-c.log") || true
	[ "${n:-0}" -ge "$parts" ]
}
idem_wait_until 90 "idemd c to hold every partition while the offsets cannot be read" all_waiting
# Held for a while: idemd reads them again every 2 s, one error each time.
sleep 6
idem_assert_eq "phase 2: payments applied while the committed offsets could not be read" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ledger WHERE payment_id LIKE 'pay-4-%' OR payment_id LIKE 'pay-5-%' OR payment_id LIKE 'poison-%'")"
idem_assert_eq "phase 2: partitions started while the committed offsets could not be read" 0 \
	"$(grep -c "assigned topic=payments" "$IDEM_TMP/idemd-c.log" || true)"
# Read them until they can be read: the operator's offsets are still there.
offsets_drain "$long_errors"
idem_log "phase 2: $drained OffsetFetch errors still queued after idemd held the partitions"
[ "$drained" -gt 0 ] ||
	idem_fail "the committed offsets were readable again before the test looked: the fault ended too early, the test proves less than it should"
for ((p = 0; p < parts; p++)); do
	[ "${committed[p]}" = "$skip2" ] ||
		idem_fail "partition $p: Kafka's committed offset is ${committed[p]}, not the operator's $skip2: idemd committed while the committed offset could not be read"
done
idem_wait_done "$group" 120
idemd_stop c
load_messages
check_verdict "phase 2"
idem_assert_eq "phase 2: partitions started at the operator's offset once it could be read (log: case=skip)" "$parts" \
	"$(grep -c "assigned topic=payments partition=[0-9]* start=$skip2 .* case=skip " "$IDEM_TMP/idemd-c.log")"
idem_assert_eq "phase 2: halted_offset (the poison was skipped)" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.partition_progress WHERE halted_offset IS NOT NULL")"

echo "ok: operator's skip with unreadable offsets: phase 1 ($short_errors $fault_err for OffsetFetch, used up at assignment): skip $pos1..$((skip1 - 1)) honoured; phase 2 ($long_errors; $drained still queued after idemd held every partition): nothing started meanwhile, then the skip $pos2..$((skip2 - 1)) honoured, the poison with it; $(idem_counts_full payments)"
