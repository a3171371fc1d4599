#!/usr/bin/env bash
# Fault: the partitions are assigned while Postgres is down; Postgres comes back; idemd is
# SIGKILLed while it applies a live stream; then the route's consumer is renamed (same group).
#
# Eight partitions, 3 brokers, JSON payments with 30% upstream re-sends (same key, same payload),
# the payments handler (a ledger row per payment, no unique constraint: one applied twice is two
# rows; a balance per account), batches of 50. pay-1 first applies 1,000 messages and stops (so
# Kafka holds offsets idemd committed). Then twice:
#   - idemd starts and Postgres stops just after its start-up, before the group assigns it the
#     partitions (idemd_start_db_down: JoinGroup refused until Postgres is down); a stream of
#     1,000 messages a second begins; Postgres comes back; once 1,500 payments more are applied,
#     and the ledger still grows, idemd is SIGKILLed (Kafka's committed offsets trail the
#     database: they are committed every 500 ms, after the work);
#   - phase 1: the operator runs `idemctl rename pay-1 pay-2` (refused without --force: pay-1
#     advanced less than 60 s ago; then --force, idemd being dead) and starts idemd as pay-2;
#   - phase 2: the operator only edits the configuration (pay-2 to pay-3) and starts idemd: it
#     must hold every partition ("consumer renamed in the configuration only", naming `idemctl
#     rename pay-2 pay-3`) through two more decisions of its start (idemd-resume connections in
#     Postgres's log), claiming and applying nothing, until `idemctl rename pay-2 pay-3 --force`
#     is run while it runs; then it starts every partition within 30 s, without a restart.
#   The stream goes on through the kill and the rename, and ends once the new name applies.
# Verdict after each phase, from the database (idem_check_topic_once, against every message of
# the topic): each payment applied exactly once (one ledger row with its amount, one claim, of
# the current name), balances the sums, counters adding up, progress at the high watermarks.
# Then what idemd did: while the database was down it held every partition and started none;
# the new name started every partition at the database positions the old name had when it was
# killed (case=database); in phase 2 the claims and the ledger stayed as they were while held.
#
# Why it fails on the old code (871f977), checked with its binaries and the rename made in the
# configuration only (it has no `idemctl rename`: exit 2): the partitions assigned while the
# database was down were started at Kafka's committed offset (case=no-database) instead of
# held; after the kill, pay-2 started each partition where pay-1's database position was
# (case=renamed) but with none of pay-1's claims, so every later upstream re-send of a payment
# pay-1 had applied was applied again: 769 payments applied twice in phase 1 (the issue's run:
# 20,579 of 62,000).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-nodb-kill
parts=8
idem_fixture --topics "payments:$parts" --config idemd.yaml "$group" pay-1 --max 50 \
	--retry max_ms=1000 --kafka-prop session.timeout.ms=3000
cfg=$IDEM_CFG
# Every connection in Postgres's log with its application name: idemd decides a held
# partition's start again on a connection of its own (idemd-resume).
idem_psql -c 'ALTER SYSTEM SET log_connections = on' >/dev/null
idem_psql -c 'SELECT pg_reload_conf()' >/dev/null

rows() { idem_psql -c "SELECT count(*) FROM $1"; }
ledger_at_least() { [ "$(rows ledger)" -ge "$1" ]; }

# config CONSUMER: the route's consumer is CONSUMER (the operator's edit; the same group).
config() {
	idem_write_config "$cfg" "$group" "$1" --max 50 --retry max_ms=1000 \
		--kafka-prop session.timeout.ms=3000
}

# positions CONSUMER: "partition next_offset" of CONSUMER's progress rows, by partition.
positions() {
	idem_psql -F ' ' -c "SELECT partition, next_offset FROM idem.partition_progress WHERE consumer = '$1' AND topic = 'payments' ORDER BY partition"
}

# starts NAME: "partition start" of the starts in idemd NAME's log, by partition.
starts() {
	sed -n 's/.*assigned topic=payments partition=\([0-9]*\) start=\([0-9-]*\) .*/\1 \2/p' \
		"$IDEM_TMP/idemd-$1.log" | sort -n
}

# assigned NAME: idemd NAME has logged the start of every partition.
assigned() {
	[ "$(starts "$1" | cut -d' ' -f1 | sort -u | wc -l)" = "$parts" ]
}

# claims_digest: every claim (consumer, key, partition, offset), as one md5.
claims_digest() {
	idem_psql -c "SELECT count(*) || ' ' || coalesce(md5(string_agg(consumer || ' ' || business_key || ' ' || partition || ' ' || \"offset\", ',' ORDER BY consumer, business_key)), '-') FROM idem.claims_named"
}

# resume_connections: idemd's connections to decide starts so far (Postgres's log).
resume_connections() {
	grep -c 'connection authorized: .*application_name=idemd-resume' "$IDEM_PG_LOG" || true
}

# kill_while_applying NAME SEED: idemd NAME (to be started, under the configuration's consumer)
# is given its partitions while Postgres is down; a live stream begins (seed SEED); Postgres
# comes back; once 1,500 payments more are applied, idemd NAME is SIGKILLed while the ledger
# grows. Sets held and started (what it did with the partitions while Postgres was down).
kill_while_applying() {
	local name=$1 start before
	idemd_start_db_down "$name" "$cfg"
	held=$(idemd_holding "$name" " yet: the database's progress rows cannot be read")
	started=$(grep -c 'assigned topic=payments' "$IDEM_TMP/idemd-$name.log" || true)
	idem_produce_bg --count 600000 --dup-ratio 0.3 --seed "$2" --rate 1000
	idem_pg_start_again
	idem_wait_until 60 "idemd $name to start every partition once Postgres is back" assigned "$name"
	start=$(rows ledger)
	idem_wait_until 120 "1,500 payments more applied by idemd $name" ledger_at_least $((start + 1500))
	before=$(rows ledger)
	idem_wait_until 30 "idemd $name to apply more (the kill lands while it applies)" \
		ledger_at_least $((before + 1))
	idemd_kill9 "$name"
	idem_producer_running || idem_fail "the stream ended before the kill"
	idem_log "SIGKILLed idemd $name while it applied (ledger $before -> $(rows ledger) rows in the moment before)"
}

# rename OLD NEW: the operator's `idemctl rename OLD NEW` just after the kill: refused (OLD
# advanced less than 60 s ago), then with --force.
rename() {
	local rc=0
	"$IDEM_BIN/idemctl" -q -c "$cfg" rename "$1" "$2" >"$IDEM_TMP/rename.out" 2>&1 || rc=$?
	idem_assert_eq "exit status of idemctl rename $1 $2 just after the kill (output: $(cat "$IDEM_TMP/rename.out"))" 1 "$rc"
	grep -q "refused: an idemd instance may still be running under '$1': last progress [0-9]* s ago" \
		"$IDEM_TMP/rename.out" || idem_fail "idemctl rename $1 $2: not the refusal expected: $(cat "$IDEM_TMP/rename.out")"
	rc=0
	"$IDEM_BIN/idemctl" -q -c "$cfg" rename "$1" "$2" --force >"$IDEM_TMP/rename.out" 2>&1 || rc=$?
	idem_assert_eq "exit status of idemctl rename $1 $2 --force (output: $(cat "$IDEM_TMP/rename.out"))" 0 "$rc"
	idem_log "$(grep '^renamed consumer' "$IDEM_TMP/rename.out")"
}

# finish NAME CONSUMER: the stream ends once idemd NAME applies under CONSUMER; every partition
# applied to its end; idemd NAME stops; the verdict.
finish() {
	local start
	start=$(rows ledger)
	idem_wait_until 120 "idemd $1 to apply under $2" ledger_at_least $((start + 500))
	idem_produce_stop 120
	idem_wait_until 120 "$2's positions at the end of every partition" \
		idem_progress_at_end "$2" "$group"
	idemd_stop "$1"
	idem_check_topic_once "$2" "$group"
}

# ---- pay-1 applies 1,000 messages (Kafka's offsets committed by idemd) ---------------------------
idem_produce --count 1000 --dup-ratio 0.3 --seed 521
idemd_start a "$cfg"
idem_wait_until 60 "pay-1's positions at the end of every partition" \
	idem_progress_at_end pay-1 "$group"
idemd_stop a

# ---- phase 1: assigned without the database, SIGKILL, idemctl rename pay-1 pay-2 ----------------
kill_while_applying a1 522
held1=$held started1=$started
positions pay-1 >"$IDEM_TMP/pay-1.killed"
rename pay-1 pay-2
config pay-2
idemd_start b "$cfg"
finish b pay-2
idem_assert_eq "a1: partitions held while the database could not be read" "$parts" "$held1"
idem_assert_eq "a1: partitions started while the database could not be read" 0 "$started1"
idem_assert_eq "pay-2's starts: pay-1's positions when it was killed" \
	"$(cat "$IDEM_TMP/pay-1.killed")" "$(starts b)"
idem_assert_eq "pay-2's starts at the database's position (case=database)" "$parts" \
	"$(grep -c 'assigned topic=payments .* case=database ' "$IDEM_TMP/idemd-b.log" || true)"
phase1="messages=$IDEM_PRODUCED payments=$IDEM_UNIQUE"

# ---- phase 2: assigned without the database, SIGKILL, renamed in the configuration only ---------
kill_while_applying c 523
held2=$held started2=$started
positions pay-2 >"$IDEM_TMP/pay-2.killed"
digest=$(claims_digest)
ledger=$(rows ledger)
config pay-3
idemd_start d "$cfg"
idem_wait_until 90 "idemd d to be given every partition" \
	idemd_holds d ": consumer renamed in the configuration only" assigned
seen=$(resume_connections)
more_decisions() { [ "$(resume_connections)" -ge $((seen + 2)) ]; }
idem_wait_until 30 "idemd d to decide its starts again twice" more_decisions
# What idemd did before the rename (asserted after the verdict).
held3=$(idemd_holding d ": consumer renamed in the configuration only: consumer pay-2 of group $group .* then run: idemctl rename pay-2 pay-3 ")
started3=$(grep -c 'assigned topic=payments' "$IDEM_TMP/idemd-d.log" || true)
digest_held=$(claims_digest)
ledger_held=$(rows ledger)
renamed_at=$SECONDS
rename pay-2 pay-3
idem_wait_until 30 "idemd d to start every partition after idemctl rename" assigned d
idem_log "idemd d started every partition $((SECONDS - renamed_at)) s after idemctl rename"
finish d pay-3
idem_assert_eq "c: partitions held while the database could not be read" "$parts" "$held2"
idem_assert_eq "c: partitions started while the database could not be read" 0 "$started2"
idem_assert_eq "d: partitions held, naming idemctl rename pay-2 pay-3" "$parts" "$held3"
idem_assert_eq "d: partitions started under pay-3 before idemctl rename" 0 "$started3"
idem_assert_eq "d: claims while held (as pay-2 left them)" "$digest" "$digest_held"
idem_assert_eq "d: ledger rows while held" "$ledger" "$ledger_held"
idem_assert_eq "pay-3's starts: pay-2's positions when it was killed" \
	"$(cat "$IDEM_TMP/pay-2.killed")" "$(starts d)"
idem_assert_eq "pay-3's starts at the database's position (case=database)" "$parts" \
	"$(grep -c 'assigned topic=payments .* case=database ' "$IDEM_TMP/idemd-d.log" || true)"

echo "ok: assigned without the database, SIGKILLed while applying, renamed: phase 1 (idemctl rename) $phase1; phase 2 (configuration only, held until idemctl rename) messages=$IDEM_PRODUCED payments=$IDEM_UNIQUE; each applied exactly once; $(idem_counts_full pay-3)"
