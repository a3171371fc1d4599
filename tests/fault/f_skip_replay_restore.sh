#!/usr/bin/env bash
# Fault: the database restored to a backup taken between an operator's move of the group's
# offsets and the first batch after it, both ways: a skip ahead (Kafka's tools), and a move back
# (`idemctl replay`, whose database half the restore loses).
#
# Four partitions; JSON payments written explicitly per partition (the same number on every
# partition, so their offsets stay equal and one move moves them all; 10% re-sent payments:
# same key, same payload, within a stream); the payments handler (a ledger row per payment, no
# unique constraint: one applied twice is two rows; a balance per account). idemd applies a
# first stream and stops.
#  1. A skip's start is recorded. 150 payments a partition arrive while idemd is stopped and the
#     operator skips them all (idem-kafkatool reset to the high watermark: no idemd metadata).
#     idemd starts with nothing beyond the operator's offset: every partition starts there
#     (case=skip), and its progress row must hold that start before any batch (checked, then a
#     base backup taken). 150 more a partition are applied; Kafka's committed offsets (idemd's)
#     reach the end. The backup is restored while idemd runs: it finds the database behind
#     (found at its reconnect), decides every start again and must read from the recorded
#     skip's start (case=behind, database next_offset = the skip's offset), re-applying the 150
#     of each partition the restore lost and none of the skipped ones.
#  2. An offset moved back is honoured (case=rewind). 200 payments a partition arrive while
#     idemd is stopped; the operator skips the first 100 of each; idemd starts (case=skip) and
#     applies the other 100 (the skipped ones checked unapplied). A base backup is taken, idemd
#     stops, and the operator decides to apply the skipped range after all: `idemctl replay
#     --to-offset <the skip's start>` (Kafka's offsets back to it, not idemd's own commit;
#     next_offset lowered to it, replay_to the end; both halves checked). Before idemd runs the replay
#     the database is restored to the backup: next_offset back at the end, no replay_to; Kafka's
#     offsets stay at the replay's start. 50 more a partition arrive; idemd starts and must read
#     from the replay's start (case=rewind): the skipped 100 of each partition applied once, the
#     other 100 read again as duplicates (their claims), the new 50 applied.
# Verdict after each phase, from the database, against every message of the topic read back from
# Kafka (partition, offset, payment): no payment of a range still skipped has a claim or a ledger
# row; every other payment (the replayed range included after 2) has exactly one claim and one
# ledger row with its amount; balances are the sums; sum(applied) is the number of payments;
# the counters add up; Kafka's committed offsets and idem.partition_progress both end at the
# high watermarks. Then, from idemd's log and the database: 1: every partition started at the
# skip (case=skip) and again after the restore from the recorded start (case=behind),
# sum(reapplied) the messages the restore lost; the rows in the backup held the skip's start.
# 2: every partition started at the replay's start (case=rewind).
# IDEM_PHASES (default "1 2") runs only the phases it names (each starts from whatever the ones
# before left): how each was checked on the code before alone.
#
# On the code before (c0a51b5, checked with its binaries), each phase fails alone:
#  1. (IDEM_PHASES=1) the skip's start was not recorded: the rows before the backup were at 150
#     (the position before the skip), not 300. After the restore idemd found every partition
#     behind (at its reconnect) and started it at 150 (case=behind, "300 message(s) to
#     re-apply"): "phase 1: skipped payments applied (ledger rows): expected '0', got '600'",
#     all 600 skipped payments applied (none lost, none twice).
#  2. (IDEM_PHASES=2) every partition started at the restored database's position, "start=350
#     (database next_offset=350, kafka committed=150) case=database": the 100 skipped messages
#     of each partition never read, "phase 2: payments lost (no ledger row): expected '0', got
#     '360'".
# On 24d9c5d, which added case=rewind, phase 1 passed and phase 2 failed the same way (case=
# database, 360 payments lost): `idemctl replay` committed the replay's start with the metadata
# it had read back (idemd's of another offset), and the rule took only an offset without any
# metadata as moved back. Since 24eea2a the replay commits without metadata, and any offset below
# the database's that idemd did not commit there is a move back.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-skip-replay
parts=4
phases=${IDEM_PHASES:-1 2}
idem_fixture --topics "payments:$parts" --config idemd.yaml "$group" payments --max 100 \
	--retry max_ms=1000

# payments FILE SEED PER_PARTITION DUP_EVERY: idem_payments_file for this test's partitions.
payments() {
	idem_payments_file "$1" "$2" "$3" "$4" "$parts"
}

# produce NAME SEED PER_PARTITION DUP_EVERY: write such payments (file $IDEM_TMP/NAME.txt) to
# topic payments.
produce() {
	local out
	payments "$IDEM_TMP/$1.txt" "$2" "$3" "$4"
	out=$("$IDEM_BIN/idem-kafkatool" produce-file --brokers "$IDEM_BROKERS" --topic payments \
		--input "$IDEM_TMP/$1.txt") || idem_fail "producing $1 failed"
	idem_log "produced $1: $out"
}

# offsets_read: the group's committed offsets and the high watermarks into committed[] and
# high[].
declare -a committed high
offsets_read() {
	local out line p
	out=$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" \
		--topic payments) || idem_fail "cannot read the offsets of group $group"
	committed=() high=()
	while read -r line; do
		case $line in partition=*) ;; *) continue ;; esac
		p=$(sed -n 's/^partition=\([0-9]*\) .*/\1/p' <<<"$line")
		committed[p]=$(sed -n 's/.* committed=\([0-9-]*\) .*/\1/p' <<<"$line")
		high[p]=$(sed -n 's/.* high=\([0-9-]*\) .*/\1/p' <<<"$line")
	done <<<"$out"
	[ "${#high[@]}" = "$parts" ] || idem_fail "unexpected offsets output: $out"
}

# committed_all WHAT OFFSET: every partition's committed offset is OFFSET.
committed_all() {
	local p
	offsets_read
	for ((p = 0; p < parts; p++)); do
		idem_assert_eq "$1: Kafka's committed offset of partition $p" "$2" "${committed[p]}"
	done
}

# at_end: every partition's high watermark is partition 0's (which it prints), and so is its
# committed offset.
at_end() {
	local p
	offsets_read
	for ((p = 0; p < parts; p++)); do
		[ "${high[p]}" = "${high[0]}" ] ||
			idem_fail "partition $p: high watermark ${high[p]}, partition 0's ${high[0]}"
	done
	committed_all "at the end" "${high[0]}"
	echo "${high[0]}"
}

# high_end: partition 0's high watermark.
high_end() {
	offsets_read
	echo "${high[0]}"
}

# skip_all OFFSET: the operator's move (idemd stopped): every partition's committed offset set
# to OFFSET with Kafka's tools (no idemd metadata).
skip_all() {
	"$IDEM_BIN/idem-kafkatool" reset --brokers "$IDEM_BROKERS" --group "$group" \
		--topic payments --to-offset "$1" >/dev/null || idem_fail "idem-kafkatool reset failed"
	committed_all "after the operator's reset" "$1"
}

# positions: "partition next_offset replay_to" of the progress rows, by partition.
positions() {
	idem_psql -F ' ' -c "SELECT partition, next_offset, coalesce(replay_to, -1) FROM idem.partition_progress WHERE consumer = 'payments' AND topic = 'payments' ORDER BY partition"
}

# positions_all NEXT [REPLAY_TO]: the positions every partition has ("partition NEXT
# REPLAY_TO" lines; REPLAY_TO -1: none).
positions_all() {
	local p
	for ((p = 0; p < parts; p++)); do
		echo "$p $1 ${2:--1}"
	done
}

# assigned_all NAME: idemd NAME logged the start of every partition.
assigned_all() {
	[ "$(sed -n 's/.*assigned topic=payments partition=\([0-9]*\) .*/\1/p' "$IDEM_TMP/idemd-$1.log" 2>/dev/null | sort -u | wc -l)" = "$parts" ]
}

# starts NAME START CASE: how many partitions idemd NAME logged starting at START with CASE.
starts() {
	grep -c "assigned topic=payments partition=[0-9]* start=$2 .* case=$3 " "$IDEM_TMP/idemd-$1.log" || true
}

# skipped_set LO HI: offsets LO..HI-1 of every partition must not be applied (table skipped).
skipped_set() {
	local p
	for ((p = 0; p < parts; p++)); do
		idem_psql -c "INSERT INTO skipped VALUES ($p, $1, $2)"
	done
}
idem_psql -c "CREATE TABLE skipped (p int, lo bigint, hi bigint)"

# check_verdict WHAT: from the database, against every message of the topic and table skipped:
# offsets lo..hi-1 of partition p never applied, every other message's payment applied once.
check_verdict() {
	local what=$1 keep skip lost twice skip_applied p
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payments \
		--timeout 60 >"$IDEM_TMP/messages.tsv" || idem_fail "cannot read topic payments back"
	idem_psql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS msgs_raw, msgs, m_skip, m_keep; CREATE TABLE msgs_raw (p int, o bigint, k text, v text, h text)"
	idem_psql -c "\\copy msgs_raw FROM '$IDEM_TMP/messages.tsv'"
	idem_psql -c "CREATE TABLE msgs AS SELECT p, o, v::jsonb->>'payment_id' AS payment_id, v::jsonb->>'account' AS account, (v::jsonb->>'amount')::bigint AS amount FROM msgs_raw"
	idem_psql -c "CREATE TABLE m_skip AS SELECT DISTINCT m.payment_id FROM msgs m JOIN skipped s ON m.p = s.p AND m.o >= s.lo AND m.o < s.hi"
	idem_psql -c "CREATE TABLE m_keep AS SELECT payment_id, min(account) AS account, min(amount) AS amount, count(DISTINCT (account, amount)) AS variants FROM msgs m WHERE NOT EXISTS (SELECT 1 FROM skipped s WHERE m.p = s.p AND m.o >= s.lo AND m.o < s.hi) GROUP BY payment_id"
	keep=$(idem_psql -c 'SELECT count(*) FROM m_keep')
	skip=$(idem_psql -c 'SELECT count(*) FROM m_skip')
	lost=$(idem_psql -c 'SELECT count(*) FROM m_keep k WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.payment_id = k.payment_id)')
	twice=$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')
	skip_applied=$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN m_skip USING (payment_id)')
	idem_log "$what: messages=$(idem_psql -c 'SELECT count(*) FROM msgs'): payments to apply $keep, skipped $skip; in the database: ledger=$(idem_psql -c 'SELECT count(*) FROM ledger') lost=$lost applied_twice=$twice skipped_applied=$skip_applied; $(idem_counts_full payments)"
	# The workload's own consistency: a skipped payment appears nowhere else.
	idem_assert_eq "$what: payments both in and out of the skipped ranges (test workload)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM m_skip JOIN m_keep USING (payment_id)')"
	idem_assert_eq "$what: re-sent payments with another payload (test workload)" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM m_keep WHERE variants <> 1')"
	idem_assert_eq "$what: skipped payments applied (ledger rows)" 0 "$skip_applied"
	idem_assert_eq "$what: skipped payments claimed" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages c JOIN m_skip s ON s.payment_id = c.business_key")"
	idem_assert_eq "$what: payments lost (no ledger row)" 0 "$lost"
	idem_assert_eq "$what: payments applied twice (two ledger rows or more)" 0 "$twice"
	idem_assert_eq "$what: ledger rows" "$keep" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
	idem_assert_eq "$what: ledger rows with a wrong account or amount" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM ledger l JOIN m_keep k USING (payment_id) WHERE l.amount <> k.amount OR l.account <> k.account')"
	idem_assert_eq "$what: claims" "$keep" \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments'")"
	idem_assert_eq "$what: claims of payments that are not to be applied" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.processed_messages c WHERE NOT EXISTS (SELECT 1 FROM m_keep k WHERE k.payment_id = c.business_key)")"
	idem_assert_eq "$what: accounts with a wrong balance" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT account, sum(amount) s FROM m_keep GROUP BY 1) x FULL JOIN accounts a ON a.id = x.account WHERE a.balance IS DISTINCT FROM x.s')"
	idem_assert_eq "$what: applied, quarantined (the progress rows' counters)" "$keep 0" \
		"$(idem_psql -c "SELECT coalesce(sum(applied), 0) || ' ' || coalesce(sum(quarantined), 0) FROM idem.partition_progress WHERE consumer = 'payments'")"
	idem_check_accounting payments
	# Kafka's committed offsets and the database's positions both at the end of every partition.
	offsets_read
	for ((p = 0; p < parts; p++)); do
		idem_assert_eq "$what: Kafka's committed offset of partition $p (high watermark)" \
			"${high[p]}" "${committed[p]}"
	done
	idem_check_progress_at_end payments "$group"
}

# ---- before: a first stream applied, idemd stopped ------------------------------------------------
produce a 1 150 10
idemd_start a "$IDEM_CFG"
idem_wait_done "$group" 120
idemd_stop a
pos1=$(at_end)
idem_assert_eq "database positions after the first stream" "$(positions_all "$pos1")" "$(positions)"
summary=()

# ---- 1. a skip's start recorded; restored to before the first batch past it ----------------------
if [[ " $phases " == *" 1 "* ]]; then
	# 150 a partition arrive while idemd is stopped; the operator skips them all.
	produce b 2 150 0
	skip1=$(high_end)
	idem_assert_eq "phase 1: messages a partition to skip" 150 $((skip1 - pos1))
	skip_all "$skip1"
	skipped_set "$pos1" "$skip1"
	idem_log "phase 1: the operator moved every partition from $pos1 to $skip1, the end of the log"
	idemd_start b "$IDEM_CFG"
	idem_wait_until 60 "idemd b to start every partition" assigned_all b
	# Nothing was read since (nothing is beyond the skip): the rows are what the start wrote.
	# The backup holds them (asserted after the verdict).
	backed_up=$(positions)
	idem_pg_basebackup "$IDEM_TMP/backup-1"
	# 150 a partition more, applied; Kafka's committed offsets (idemd's) at the end.
	produce c 3 150 10
	idem_wait_done "$group" 120
	end1=$(at_end)
	idem_wait_until 60 "the database's positions at the end of every partition before the restore" \
		idem_progress_at_end payments "$group"
	ledger_before=$(idem_psql -c 'SELECT count(*) FROM ledger')
	# The restore, while idemd runs.
	idem_pg_restore "$IDEM_TMP/backup-1"
	idem_log "phase 1: restored backup-1 while idemd b runs: ledger $ledger_before -> $(idem_psql -c 'SELECT count(*) FROM ledger') rows, positions $(positions | awk '{ printf "%s%s", sep, $2; sep = "," }'), Kafka's committed offsets $end1"
	idem_wait_until 120 "the database's positions at the end of every partition after the restore" \
		idem_progress_at_end payments "$group"
	idem_wait_done "$group" 60
	idemd_stop b
	check_verdict "phase 1"
	idem_assert_eq "phase 1: progress rows before the backup (the skip's start recorded)" \
		"$(positions_all "$skip1")" "$backed_up"
	idem_assert_eq "phase 1: partitions started at the operator's offset (log: case=skip)" "$parts" \
		"$(starts b "$skip1" skip)"
	idem_assert_eq "phase 1: partitions found behind after the restore (log)" "$parts" \
		"$(grep -c 'database behind: topic=payments partition=[0-9]* next_offset=[0-9]* in the database, [0-9]* committed by this process' "$IDEM_TMP/idemd-b.log" || true)"
	idem_assert_eq "phase 1: partitions started again at the recorded skip's start (log: case=behind)" \
		"$parts" \
		"$(grep -c "assigned topic=payments partition=[0-9]* start=$skip1 (database next_offset=$skip1, kafka committed=$end1) case=behind " "$IDEM_TMP/idemd-b.log" || true)"
	idem_assert_eq "phase 1: messages re-applied (sum(reapplied)): those the restore lost" \
		$(((end1 - skip1) * parts)) \
		"$(idem_psql -c "SELECT coalesce(sum(reapplied), 0) FROM idem.partition_progress WHERE consumer = 'payments'")"
	summary+=("1: skip $pos1..$((skip1 - 1)) recorded at $skip1; restored to it, $(((end1 - skip1) * parts)) messages re-applied, none of the skipped")
fi

# ---- 2. an idemctl replay whose database half a restore lost ---------------------------------------
if [[ " $phases " == *" 2 "* ]]; then
	pos2=$(at_end)
	# 200 a partition arrive while idemd is stopped; the operator skips the first 100 of each.
	produce d 4 200 10
	skip2=$((pos2 + 100))
	skip_all "$skip2"
	skipped_set "$pos2" "$skip2"
	idem_log "phase 2: the operator moved every partition from $pos2 to $skip2"
	idemd_start c "$IDEM_CFG"
	idem_wait_until 60 "idemd c to start every partition" assigned_all c
	idem_wait_done "$group" 120
	idem_wait_until 60 "the database's positions at the end of every partition" \
		idem_progress_at_end payments "$group"
	end2=$(at_end)
	idem_assert_eq "phase 2: partitions started at the operator's offset (log: case=skip)" "$parts" \
		"$(starts c "$skip2" skip)"
	# The skip honoured: the replay below is what applies the skipped range, if anything does.
	check_verdict "phase 2, the skip honoured"
	idem_pg_basebackup "$IDEM_TMP/backup-2"
	idemd_stop c
	# The operator applies the skipped range after all.
	rc=0
	"$IDEM_BIN/idemctl" -c "$IDEM_CFG" replay --topic payments --to-offset "$pos2" \
		>"$IDEM_TMP/replay.out" 2>&1 || rc=$?
	idem_assert_eq "exit status of idemctl replay (output: $(cat "$IDEM_TMP/replay.out"))" 0 "$rc"
	idem_log "idemctl replay: $(tr '\n' ';' <"$IDEM_TMP/replay.out")"
	committed_all "phase 2: after idemctl replay" "$pos2"
	idem_assert_eq "phase 2: database positions after idemctl replay (next_offset, replay_to)" \
		"$(positions_all "$pos2" "$end2")" "$(positions)"
	# Before idemd runs it, the database is restored to the backup: the replay's database half
	# is lost, its Kafka half stays.
	idem_pg_restore "$IDEM_TMP/backup-2"
	idem_assert_eq "phase 2: database positions after the restore" "$(positions_all "$end2")" \
		"$(positions)"
	committed_all "phase 2: after the restore" "$pos2"
	# The replayed range is to be applied now (phase 1's skip stays skipped).
	idem_psql -c "DELETE FROM skipped WHERE lo = $pos2"
	produce e 5 50 10
	idemd_start d "$IDEM_CFG"
	idem_wait_until 60 "idemd d to start every partition" assigned_all d
	idem_wait_done "$group" 120
	idem_wait_until 60 "the database's positions at the end of every partition" \
		idem_progress_at_end payments "$group"
	idemd_stop d
	check_verdict "phase 2"
	idem_assert_eq "phase 2: partitions started at the replay's start (log: case=rewind)" "$parts" \
		"$(grep -c "assigned topic=payments partition=[0-9]* start=$pos2 (database next_offset=$end2, kafka committed=$pos2) case=rewind " "$IDEM_TMP/idemd-d.log" || true)"
	idem_assert_eq "phase 2: 'offsets moved back' warnings (log)" "$parts" \
		"$(grep -c 'offsets moved back by another client: topic=payments' "$IDEM_TMP/idemd-d.log" || true)"
	summary+=("2: skip $pos2..$((skip2 - 1)) honoured, then replayed from $pos2 with the replay's database half restored away: read again from $pos2 (case=rewind), the skipped range applied once")
fi

[ ${#summary[@]} -gt 0 ] || idem_fail "IDEM_PHASES='$phases' names no phase (1, 2)"
echo "ok: $(printf '%s; ' "${summary[@]}")$(idem_counts_full payments)"
