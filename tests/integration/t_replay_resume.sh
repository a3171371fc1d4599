#!/usr/bin/env bash
# Replay after resume: idemd starts a partition at the database's next_offset, or at Kafka's
# committed offset where another client moved it ahead, so a deliberate replay must move both.
#  1. Two instances (incremental rebalances: cooperative-sticky) apply a topic, with Kafka's
#     offsets committed rarely (auto.commit.interval.ms=600000); once everything is applied,
#     and Kafka's committed offset of every partition is seen to be behind the database's
#     next_offset, one is SIGKILLed: the other takes its partitions from where the database
#     stopped (starting from Kafka's would read again what lies between, and consumed would
#     exceed produced), reads nothing again, and hands those positions to Kafka.
#  2. idemctl replay --dry-run and a replay refused at the retention horizon change nothing,
#     in Kafka or in the database.
#  3. idemctl replay --to-offset 0, restart (SIGKILLed once partway, started again): the whole
#     range is read again exactly once, zero new effects, every duplicate a replay, and the
#     replay is over (replay_to cleared) at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

coop=(--kafka-prop partition.assignment.strategy=cooperative-sticky)
idem_fixture --topics payments:4 --config lazy.yaml g-rr payments "${coop[@]}" \
	--kafka-prop auto.commit.interval.ms=600000
# Small batches, one worker: the replay takes long enough to be killed partway (1,600
# transactions; with 20 messages a transaction, on a loaded machine, one instance once read the
# whole range between two polls of its progress and was killed after it).
idem_write_config "$IDEM_TMP/slow.yaml" g-rr payments "${coop[@]}" --max 5 --workers 1
ctl() { "$IDEM_BIN/idemctl" -c "$IDEM_TMP/lazy.yaml" "$@"; }

sum() { idem_psql -c "SELECT coalesce(sum($1), 0) FROM idem.partition_progress WHERE consumer = 'payments'"; }
positions() { idem_psql -c "SELECT string_agg(partition || ':' || next_offset || ':' || coalesce(replay_to::text, '-'), ' ' ORDER BY partition) FROM idem.partition_progress"; }
committed() { "$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-rr --topic payments | sed -n 's/^total committed=\([0-9]*\) .*/\1/p'; }
applied_all() { [ "$(sum next_offset)" = "$IDEM_PRODUCED" ]; }
owns() { grep -q "assigned topic=payments" "$IDEM_TMP/idemd-$1.log" 2>/dev/null; }

# ---- 1. resume from the database ----
idemd_start a "$IDEM_TMP/lazy.yaml"
idem_wait_until 60 "a gets partitions" owns a
idemd_start b "$IDEM_TMP/lazy.yaml"
idem_wait_until 60 "b gets partitions" owns b
# Produced once both have their partitions: no revoke commits Kafka's offsets meanwhile.
idem_produce --count 8000 --dup-ratio 0.2 --seed 17
idem_wait_until 120 "every message applied in the database" applied_all
idem_log "applied; Kafka's committed offsets total $(committed) of $IDEM_PRODUCED"
# Before the kill, per partition: Kafka's committed offset (-1: none) against the database's
# next_offset. Kafka was last told at the assignments, before the stream was produced, so every
# partition is behind, a's among them: what b takes over, it must take from the database.
behind=0 gap=0
while read -r line; do
	case $line in partition=*) ;; *) continue ;; esac
	p=$(sed -n 's/^partition=\([0-9]*\) .*/\1/p' <<<"$line")
	c=$(sed -n 's/.* committed=\([0-9-]*\) .*/\1/p' <<<"$line")
	db=$(idem_psql -c "SELECT next_offset FROM idem.partition_progress WHERE consumer = 'payments' AND topic = 'payments' AND partition = $p")
	idem_log "partition $p: Kafka committed=$c, database next_offset=$db"
	[ -n "$db" ] && [ "$db" -gt 0 ] || idem_fail "partition $p: nothing applied (next_offset '$db')"
	if [ "$c" -lt "$db" ]; then
		behind=$((behind + 1))
		gap=$((gap + db - (c < 0 ? 0 : c)))
	fi
done < <("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-rr --topic payments)
idem_assert_eq "partitions whose committed offset in Kafka is behind the database" 4 "$behind"
idemd_kill9 a
took_over() { [ "$(grep -c "assigned topic=payments" "$IDEM_TMP/idemd-b.log")" -ge 4 ]; }
idem_wait_until 60 "b takes over a's partitions" took_over
# b stored the database's positions as it took the partitions: stopping commits them.
idemd_stop b
idem_assert_eq "Kafka's committed offsets caught up with the database" "$IDEM_PRODUCED" "$(committed)"
idem_check_exactly_once payments
idem_check_accounting payments
# Every partition b took over was behind in Kafka by some of the $gap messages above: started
# from Kafka's offset, b would have read them again.
idem_assert_eq "consumed (nothing read twice)" "$IDEM_PRODUCED" "$(sum consumed)"
ledger=$(idem_psql -c "SELECT count(*), sum(amount), max(id) FROM ledger")
claims=$(idem_psql -c "SELECT md5(string_agg(business_key || ':' || processed_at, ',' ORDER BY business_key)) FROM idem.processed_messages")
pos=$(positions)

# ---- 2. what must change nothing ----
ctl replay --topic payments --to-offset 0 --dry-run | tee "$IDEM_TMP/dry.txt"
grep -q "^total: messages=$IDEM_PRODUCED would_apply=0 " "$IDEM_TMP/dry.txt" ||
	idem_fail "the dry run should count $IDEM_PRODUCED messages and nothing to apply"
idem_assert_eq "database position after the dry run" "$pos" "$(positions)"
idem_assert_eq "Kafka's offsets after the dry run" "$IDEM_PRODUCED" "$(committed)"
idem_psql -c "INSERT INTO idem.retention_horizon (consumer, purged_before) VALUES ('payments', now() + interval '1 hour')"
rc=0
ctl replay --topic payments --to-offset 0 >/dev/null 2>"$IDEM_TMP/refused.txt" || rc=$?
idem_assert_eq "replay past the horizon" 1 "$rc"
grep -q "retention horizon" "$IDEM_TMP/refused.txt" || idem_fail "the refusal does not say why"
idem_assert_eq "database position after the refusal" "$pos" "$(positions)"
idem_assert_eq "Kafka's offsets after the refusal" "$IDEM_PRODUCED" "$(committed)"
idem_psql -c "DELETE FROM idem.retention_horizon"

# ---- 3. the replay ----
consumed1=$(sum consumed)
kinds1=$(idem_psql -c "SELECT sum(dup_redelivery) || ' ' || sum(dup_replay) || ' ' || sum(dup_upstream) FROM idem.partition_progress")
read -r red1 rep1 up1 <<<"$kinds1"
ctl replay --topic payments --to-offset 0 | tee "$IDEM_TMP/replay.txt"
grep -q "^total: messages=$IDEM_PRODUCED would_apply=0 " "$IDEM_TMP/replay.txt" ||
	idem_fail "the replay plan should count $IDEM_PRODUCED messages and nothing to apply"
idem_assert_eq "Kafka's offsets after the replay" 0 "$(committed)"
idem_assert_eq "database positions after the replay (partition:next_offset:replay_to)" \
	"$(sed -E 's/([0-9]+):([0-9]+):-/\1:0:\2/g' <<<"$pos")" "$(positions)"
replayed() { [ "$(sum consumed)" -gt $((consumed1 + IDEM_PRODUCED / 4)) ]; }
idemd_start c "$IDEM_TMP/slow.yaml"
idem_wait_until 120 "a quarter of the replay applied" replayed
idemd_kill9 c
idem_log "c SIGKILLed after $(($(sum consumed) - consumed1)) of $IDEM_PRODUCED replayed messages; positions $(positions)"
idemd_start d "$IDEM_TMP/slow.yaml"
idem_wait_done g-rr 180
idemd_stop d

idem_assert_eq "ledger after the replay" "$ledger" "$(idem_psql -c "SELECT count(*), sum(amount), max(id) FROM ledger")"
idem_assert_eq "claims after the replay" "$claims" \
	"$(idem_psql -c "SELECT md5(string_agg(business_key || ':' || processed_at, ',' ORDER BY business_key)) FROM idem.processed_messages")"
idem_check_exactly_once payments
idem_check_accounting payments
# Each message of the range read again exactly once (none skipped after the kill, none twice),
# every one of them a duplicate of the kind replay.
idem_assert_eq "consumed by the replay" "$IDEM_PRODUCED" "$(($(sum consumed) - consumed1))"
idem_assert_eq "duplicates by kind after the replay (redelivery replay upstream)" \
	"$red1 $((rep1 + IDEM_PRODUCED)) $up1" \
	"$(idem_psql -c "SELECT sum(dup_redelivery) || ' ' || sum(dup_replay) || ' ' || sum(dup_upstream) FROM idem.partition_progress")"
idem_assert_eq "positions once the replay is over" "$pos" "$(positions)"
echo "ok: resumed from the database ($behind partitions, $gap messages ahead of Kafka), replayed $IDEM_PRODUCED messages (killed once partway), 0 new effects; $(idem_counts_full payments)"
