#!/usr/bin/env bash
# Fault: the database is restored to a backup that holds nothing applied, on a route that starts
# at the end of the log (kafka auto.offset.reset: latest). idemd's first start finds an empty
# topic: the end of the log is offset 0 of every partition, and that is where the consumer's
# first start began (recorded in the database and named first= in the metadata of every offset
# idemd commits). Two base backups are taken, neither holding any payment: A right after the
# schema is set up, before idemd's first start; B after that first start (the partitions'
# starts recorded), before any message. Then:
#   1. 5,000 messages (JSON payments, 30% upstream re-sends) are applied; Kafka's committed
#      offsets reach the end; SIGTERM.
#   2. The database is restored to A; 2,000 more messages are produced while idemd is down;
#      idemd starts with the same config: the database has no position for any partition,
#      Kafka's committed offsets are idemd's own: the database went back, and everything from
#      where the first start began (offset 0) is applied again - not from the end of the log
#      now, which would lose all 7,000.
#   3. The same with B (progress rows at offset 0, Kafka's offsets at the end): restored,
#      1,000 more, started again.
# After 2 and 3, from the database: every payment applied exactly once (ledger, claims,
# balances, counters, progress at the high watermarks), and partition_progress.reapplied counts
# exactly the messages Kafka's committed offsets were ahead of the database by. The restore
# must lose something (every ledger row), or the test fails: it would prove nothing.
#
# IDEM_LATEST_PRE=N (default 0): N messages are already in the topic at the first start; latest
# skips them, and they must stay unapplied after each restore (the re-apply begins where the
# first start began, the end of the log then, not the log's start).
#
# Why it fails on the previous code (2f415a8): a partition without a progress row whose Kafka
# offset idemd had committed started from auto.offset.reset itself, which for latest is the end
# of the log now: after restore A it applied none of the 7,000 messages (4,980 payments; the
# 2,000 produced while it was down included), and step 2 fails ("applied 0 of 4980 payments").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-latest
skipped=${IDEM_LATEST_PRE:-0}
dups=0.3
idem_fixture --topics payments:8 --config idemd.yaml "$group" payments \
	--kafka-prop auto.offset.reset=latest
cfg=$IDEM_CFG

rows() { idem_psql -c "SELECT count(*) FROM $1"; }

# The manifests of the rounds applied so far (concatenated into manifest.csv for
# idem_check_exactly_once, with the totals in IDEM_PRODUCED and IDEM_UNIQUE).
manifests=()
produced=0
unique=0
# round SEED COUNT: produce a round of payments (new payment ids) and keep its manifest.
round() {
	idem_produce --count "$2" --dup-ratio "$dups" --seed "$1"
	cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/manifest-$1.csv"
	manifests+=("$IDEM_TMP/manifest-$1.csv")
	produced=$((produced + IDEM_PRODUCED))
	unique=$((unique + IDEM_UNIQUE))
	idem_log "round (seed $1): produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE; in all produced=$produced unique=$unique"
}

# assigned NAME: idemd NAME has logged the assignment of all 8 partitions.
assigned() {
	[ "$(sed -n 's/.*assigned topic=payments partition=\([0-9]*\) .*/\1/p' "$IDEM_TMP/idemd-$1.log" 2>/dev/null | sort -u | wc -l)" = 8 ]
}

# committed_at_end: Kafka's committed offsets of the group are at the high watermarks.
committed_at_end() {
	"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" --topic payments |
		awk '/^total/ { split($2, c, "="); split($3, h, "="); exit !(c[2] == h[2]) }'
}

# kafka_committed: the sum of the group's committed offsets.
kafka_committed() {
	"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" --topic payments |
		sed -n 's/^total committed=\([0-9-]*\).*/\1/p'
}

# applied_all NAME TIMEOUT: wait until idemd NAME has applied every payment produced (the
# ledger complete, Kafka's offsets committed to the end); fails as soon as Kafka's offsets
# reach the end with payments missing (idemd went past them), or after TIMEOUT seconds.
applied_all() {
	local deadline=$((SECONDS + $2)) n
	while :; do
		n=$(rows ledger)
		if [ "$n" -ge "$unique" ] && committed_at_end; then
			return 0
		fi
		if [ "$n" -lt "$unique" ] && committed_at_end && [ "$(rows ledger)" -lt "$unique" ]; then
			# Kafka's offsets follow the database's commits: give idemd a last look.
			sleep 2
			n=$(rows ledger)
			[ "$n" -ge "$unique" ] ||
				idem_fail "idemd $1 committed Kafka's offsets to the end with $((unique - n)) of $unique payments not applied (ledger $n rows): they were skipped"
		fi
		((SECONDS < deadline)) ||
			idem_fail "idemd $1 applied $(rows ledger) of $unique payments in $2 s ($((unique - $(rows ledger))) missing; Kafka committed $(kafka_committed))"
		sleep 0.2
	done
}

# check NAME REAPPLIED: the database holds every payment of the rounds so far exactly once, and
# idemd NAME's run re-applied (partition_progress.reapplied) exactly REAPPLIED messages.
check() {
	cat "${manifests[@]}" >"$IDEM_TMP/manifest.csv"
	IDEM_PRODUCED=$produced
	IDEM_UNIQUE=$unique
	idem_check_exactly_once payments "$group"
	idem_check_accounting payments
	idem_assert_eq "messages re-applied (sum(reapplied))" "$2" \
		"$(idem_psql -c "SELECT coalesce(sum(reapplied), 0) FROM idem.partition_progress WHERE consumer = 'payments'")"
	idem_log "after idemd $1: ledger=$(rows ledger) $(idem_counts_full payments)"
}

# restore BACKUP: the operator's restore; it must lose every ledger row (it holds none).
restore() {
	local before
	before=$(rows ledger)
	idem_pg_restore "$1"
	[ "$(rows ledger)" -lt "$before" ] ||
		idem_fail "the database restored from $1 holds all $before ledger rows: the backup lost nothing, the test proves nothing"
	idem_assert_eq "ledger rows in the restored database ($1)" 0 "$(rows ledger)"
	idem_assert_eq "claims in the restored database ($1)" 0 "$(rows idem.processed_messages)"
	idem_log "restored $1: ledger $before -> 0 rows; Kafka committed $(kafka_committed)"
}

# ---- backup A, the first start (latest), backup B -------------------------------------------------
if [ "$skipped" -gt 0 ]; then
	# Messages from before the first start: latest skips them; never part of the manifests.
	"$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic payments --count "$skipped" \
		--seed 279 --accounts "${IDEM_ACCOUNTS:-50}" >/dev/null
fi
idem_pg_basebackup "$IDEM_TMP/backup-a"
idemd_start a "$cfg"
idem_wait_until 60 "idemd a assigned all 8 partitions" assigned a
idem_assert_eq "ledger rows before any message" 0 "$(rows ledger)"
# Where the first start began: the end of each partition's log then ("partition offset").
"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" --topic payments |
	sed -n 's/^partition=\([0-9]*\) .* high=\([0-9]*\) .*/\1 \2/p' | sort -n >"$IDEM_TMP/first-start"
idem_pg_basebackup "$IDEM_TMP/backup-b"
idem_log "first start: $(sed -n 's/.*assigned topic=payments partition=0 \(start=.*\)/partition 0 \1/p' "$IDEM_TMP/idemd-a.log")"

# ---- 1. 5,000 messages applied ----------------------------------------------------------------
round 281 5000
applied_all a 120
idemd_stop a
check a 0
ahead=$(kafka_committed)

# ---- 2. restore A (before the first start); 2,000 more; idemd again ------------------------------
restore "$IDEM_TMP/backup-a"
round 282 2000
idemd_start a2 "$cfg"
applied_all a2 120
idemd_stop a2
check a2 $((ahead - skipped))
idem_assert_eq "'database behind' lines of idemd a2 (one per partition)" 8 \
	"$(grep -c 'database behind: topic=payments' "$IDEM_TMP/idemd-a2.log" || true)"
ahead=$(kafka_committed)

# ---- 3. restore B (after the first start, before any message); 1,000 more; idemd again ----------
restore "$IDEM_TMP/backup-b"
# B differs from A by the first start's record, a progress row per partition at the end of the
# log then (else B would be A again, and a database that kept its first position is not tested).
idem_assert_eq "progress rows in backup B (partition next_offset first_offset)" \
	"$(awk '{ print $1, $2, $2 }' "$IDEM_TMP/first-start")" \
	"$(idem_psql -F ' ' -c "SELECT partition, next_offset, first_offset FROM idem.partition_progress WHERE consumer = 'payments' ORDER BY partition")"
round 283 1000
idemd_start a3 "$cfg"
applied_all a3 120
idemd_stop a3
check a3 $((ahead - skipped))
idem_assert_eq "'database behind' lines of idemd a3 (one per partition)" 8 \
	"$(grep -c 'database behind: topic=payments' "$IDEM_TMP/idemd-a3.log" || true)"
echo "ok: latest, restored to a backup from before the first start and to one from after it: produced=$produced unique=$unique (pre-existing messages skipped: $skipped); every payment applied exactly once after each restore"
