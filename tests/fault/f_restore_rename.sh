#!/usr/bin/env bash
# Fault: the database is restored from a base backup taken mid-stream and, in the same change, the
# route's consumer (routes[].consumer, the claims namespace) is renamed; the group stays.
# Kafka's committed offsets are idemd's, past what the restored database holds, with metadata
# naming the old consumer; the new name has no claims and no positions of its own.
#
# Eight partitions, 3 brokers, JSON payments with 30% upstream re-sends (same key, same payload),
# the payments handler (a ledger row per payment, no unique constraint: one applied twice is two
# rows; a balance per account). Each stream runs at 1,000 messages a second until a base backup
# is taken with 1,500 payments applied since the stream began and 1,500 more after it; then it
# ends, Kafka's committed offsets reach the end, idemd stops and the backup is restored: the
# database lost at least 1,500 payments that Kafka's offsets are past.
#   a. shop-old applies stream 1; restored; the operator runs `idemctl rename shop-old shop-new`
#      (with --force if refused: the restored positions are from the backup, seconds old, and
#      the command refuses an old name that advanced in the last 60 s) and starts idemd as
#      shop-new: every partition behind must start from the database's position ("database
#      behind"), everything the restore lost applied again, nothing twice.
#   b. shop-new applies stream 2; restored; 1,000 more messages; the operator only edits the
#      configuration to shop-newer and starts idemd: it must hold every partition with an
#      error naming `idemctl rename shop-new shop-newer` (idemd_partitions_starting 8, /readyz
#      503), and keep holding (two more decisions of its start, seen as idemd-resume
#      connections in Postgres's log), with nothing applied or claimed (the claims table as it
#      was restored, nothing under shop-newer). Then `idemctl rename shop-new shop-newer`
#      (--force if refused) while idemd runs: it starts every partition within 30 s, without a
#      restart, and applies the gap and the new messages.
# Verdict after a and b, from the database (idem_check_topic_once, against every message of the
# topic): each payment applied exactly once (one ledger row with its amount, one claim, of the
# current name), balances the sums, counters adding up, progress at the high watermarks;
# partition_progress.reapplied counts exactly the messages Kafka's offsets were ahead of the
# restored database by, and the starts logged "database behind" on exactly the partitions that
# were behind.
#
# Why it fails on the old code (871f977), checked with its binaries: (a) it has no `idemctl
# rename` (exit 2, unknown command). With the rename made in the configuration only (all the old
# code offers), shop-new, which has no claims, started every partition at shop-old's restored
# position (case=behind) and applied the gap again under a name that has none of shop-old's
# claims: the upstream re-sends in it of payments applied before the backup were applied a
# second time (400 payments applied twice in that run, 0 lost; the test fails on "payments
# applied twice"). The issue's run (62,000 messages) went the other way, to Kafka's committed
# offset, which another consumer had committed: 34,393 payments never applied. The new code
# holds such a start (b) until `idemctl rename` moves the claims with the positions.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

group=g-restore-rename
parts=8
idem_fixture --topics "payments:$parts" --config idemd.yaml "$group" shop-old --max 100 \
	--retry max_ms=1000
cfg=$IDEM_CFG
# Every connection in Postgres's log with its application name: idemd decides a held
# partition's start again on a connection of its own (idemd-resume). In the backups too.
idem_psql -c 'ALTER SYSTEM SET log_connections = on' >/dev/null
idem_psql -c 'SELECT pg_reload_conf()' >/dev/null

rows() { idem_psql -c "SELECT count(*) FROM $1"; }
ledger_at_least() { [ "$(rows ledger)" -ge "$1" ]; }

# config CONSUMER: the route's consumer is CONSUMER (metrics on a fresh port, $metrics_url).
config() {
	local port
	port=$(idem_free_port)
	idem_write_config "$cfg" "$group" "$1" --max 100 --retry max_ms=1000 \
		--metrics "127.0.0.1:$port"
	metrics_url=http://127.0.0.1:$port
}

# metric NAME: its value in idemd's /metrics.
metric() {
	curl -fsS "$metrics_url/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

# readyz: /readyz's HTTP status.
readyz() {
	curl -s -o /dev/null -w '%{http_code}' "$metrics_url/readyz"
}

# kafka_offsets: "partition committed" of the group, by partition.
kafka_offsets() {
	"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group "$group" --topic payments |
		sed -n 's/^partition=\([0-9]*\) committed=\([0-9-]*\) .*/\1 \2/p' | sort -n
}

# positions CONSUMER: "partition next_offset" of CONSUMER's progress rows, by partition.
positions() {
	idem_psql -F ' ' -c "SELECT partition, next_offset FROM idem.partition_progress WHERE consumer = '$1' AND topic = 'payments' ORDER BY partition"
}

# assigned NAME: idemd NAME has logged the start of every partition.
assigned() {
	[ "$(sed -n 's/.*assigned topic=payments partition=\([0-9]*\) .*/\1/p' "$IDEM_TMP/idemd-$1.log" 2>/dev/null | sort -u | wc -l)" = "$parts" ]
}

# claims_digest: every claim (consumer, key, partition, offset), as one md5.
claims_digest() {
	idem_psql -c "SELECT count(*) || ' ' || coalesce(md5(string_agg(consumer || ' ' || business_key || ' ' || partition || ' ' || \"offset\", ',' ORDER BY consumer, business_key)), '-') FROM idem.claims_named"
}

# resume_connections: idemd's connections to decide starts so far (Postgres's log).
resume_connections() {
	grep -c 'connection authorized: .*application_name=idemd-resume' "$IDEM_PG_LOG" || true
}

# stream NAME SEED: a live stream applied by idemd NAME (running), with a base backup taken in
# its middle ($IDEM_TMP/backup-SEED); then the stream ends, Kafka's committed offsets reach the
# end and idemd NAME stops.
stream() {
	local name=$1 seed=$2 start at_backup
	start=$(rows ledger)
	idem_produce_bg --count 600000 --dup-ratio 0.3 --seed "$seed" --rate 1000
	idem_wait_until 120 "1,500 payments of stream $seed in the ledger" ledger_at_least $((start + 1500))
	idem_producer_running || idem_fail "the stream ended before the backup"
	idem_pg_basebackup "$IDEM_TMP/backup-$seed"
	at_backup=$(rows ledger)
	idem_producer_running || idem_fail "the stream ended during the backup: it would hold everything"
	idem_wait_until 120 "1,500 payments more after the backup" ledger_at_least $((at_backup + 1500))
	idem_produce_stop 120
	idem_wait_done "$group" 120
	idemd_stop "$name"
}

# restore SEED CONSUMER: the operator's restore of backup-SEED; it must lose payments. Sets gap
# (messages Kafka's committed offsets are ahead of CONSUMER's restored positions by) and behind
# (partitions where they are ahead).
restore() {
	local before
	before=$(rows ledger)
	idem_pg_restore "$IDEM_TMP/backup-$1"
	[ "$(rows ledger)" -lt "$before" ] ||
		idem_fail "the database restored from backup-$1 holds all $before ledger rows: the backup lost nothing, the test proves nothing"
	positions "$2" >"$IDEM_TMP/restored-$1"
	kafka_offsets >"$IDEM_TMP/committed-$1"
	idem_assert_eq "partitions with a position of $2 in the restored database" "$parts" \
		"$(wc -l <"$IDEM_TMP/restored-$1")"
	read -r gap behind < <(join "$IDEM_TMP/committed-$1" "$IDEM_TMP/restored-$1" |
		awk '{ g += $2 - $3; if ($2 > $3) b++ } END { print g + 0, b + 0 }')
	idem_log "restored backup-$1: ledger $before -> $(rows ledger) rows; Kafka's committed offsets ahead of $2's positions by $gap messages on $behind partitions"
	[ "$gap" -gt 0 ] || idem_fail "Kafka's committed offsets are not ahead of the restored database: the test proves nothing"
}

# rename OLD NEW: the operator's `idemctl rename OLD NEW`; refused within 60 s of OLD's last
# progress (the restored positions are the backup's), then --force.
rename() {
	local rc=0
	"$IDEM_BIN/idemctl" -q -c "$cfg" rename "$1" "$2" >"$IDEM_TMP/rename.out" 2>&1 || rc=$?
	if [ "$rc" = 1 ] && grep -q 'refused: an idemd instance may still be running under' "$IDEM_TMP/rename.out"; then
		idem_log "idemctl rename $1 $2: $(grep refused "$IDEM_TMP/rename.out"); with --force"
		rc=0
		"$IDEM_BIN/idemctl" -q -c "$cfg" rename "$1" "$2" --force >"$IDEM_TMP/rename.out" 2>&1 || rc=$?
	fi
	idem_assert_eq "exit status of idemctl rename $1 $2 (output: $(cat "$IDEM_TMP/rename.out"))" 0 "$rc"
	idem_log "$(grep '^renamed consumer' "$IDEM_TMP/rename.out")"
}

# check_starts NAME SEED REAPPLIED: idemd NAME started the partitions behind after restore SEED
# as "database behind", and sum(reapplied) is REAPPLIED.
check_starts() {
	idem_assert_eq "$1: 'database behind' lines (the partitions behind after the restore)" "$behind" \
		"$(grep -c 'database behind: topic=payments' "$IDEM_TMP/idemd-$1.log" || true)"
	idem_assert_eq "$1: starts with case=behind" "$behind" \
		"$(grep -c 'assigned topic=payments .* case=behind ' "$IDEM_TMP/idemd-$1.log" || true)"
	idem_assert_eq "$1: messages re-applied (sum(reapplied))" "$3" \
		"$(idem_psql -c "SELECT coalesce(sum(reapplied), 0) FROM idem.partition_progress")"
}

# ---- a. restored, then `idemctl rename` before idemd starts under the new name ------------------
config shop-old
idemd_start a "$cfg"
stream a 331
restore 331 shop-old
gap_a=$gap
rename shop-old shop-new
idem_assert_eq "shop-new's positions after the rename (shop-old's restored ones)" \
	"$(cat "$IDEM_TMP/restored-331")" "$(positions shop-new)"
idem_assert_eq "shop-old's rows after the rename" 0 \
	"$(idem_psql -c "SELECT (SELECT count(*) FROM idem.claims_named WHERE consumer = 'shop-old') + (SELECT count(*) FROM idem.partition_progress WHERE consumer = 'shop-old')")"
config shop-new
idemd_start b "$cfg"
idem_wait_until 60 "idemd b to start every partition" assigned b
idem_wait_until 120 "shop-new's positions at the end of every partition" \
	idem_progress_at_end shop-new "$group"
idemd_stop b
idem_check_topic_once shop-new "$group"
check_starts b 331 "$gap_a"

# ---- b. restored, the consumer renamed in the configuration only; then `idemctl rename` ---------
idemd_start b2 "$cfg"
stream b2 332
restore 332 shop-new
gap_b=$gap
idem_produce --count 1000 --dup-ratio 0.3 --seed 333
digest=$(claims_digest)
ledger=$(rows ledger)
config shop-newer
idemd_start c "$cfg"
idem_wait_until 60 "idemd c to be given every partition" \
	idemd_holds c ": consumer renamed in the configuration only" assigned
idem_wait_until 30 "idemd c's metrics" metric idemd_partitions_starting
# Held on: idemd decides every partition's start again every 2 s, and holds it again.
seen=$(resume_connections)
more_decisions() { [ "$(resume_connections)" -ge $((seen + 2)) ]; }
idem_wait_until 30 "idemd c to decide its starts again twice" more_decisions
# What idemd did before the rename (asserted after the verdict).
held=$(idemd_holding c ": consumer renamed in the configuration only: consumer shop-new of group $group .* then run: idemctl rename shop-new shop-newer ")
started=$(grep -c 'assigned topic=payments' "$IDEM_TMP/idemd-c.log" || true)
starting_held=$(metric idemd_partitions_starting)
readyz_held=$(readyz)
digest_held=$(claims_digest)
ledger_held=$(rows ledger)
newer_rows=$(idem_psql -c "SELECT count(*) FROM idem.partition_progress WHERE consumer = 'shop-newer'")
idem_log "idemd c held $held partitions through $(($(resume_connections) - seen)) more decisions of their start"
# The operator renames while idemd runs; it starts the partitions by itself.
renamed_at=$SECONDS
rename shop-new shop-newer
idem_wait_until 30 "idemd c to start every partition after idemctl rename" assigned c
idem_log "idemd c started every partition $((SECONDS - renamed_at)) s after idemctl rename"
idem_wait_until 120 "shop-newer's positions at the end of every partition" \
	idem_progress_at_end shop-newer "$group"
starting_after=$(metric idemd_partitions_starting)
readyz_after=$(readyz)
idemd_stop c
idem_check_topic_once shop-newer "$group"
check_starts c 332 $((gap_a + gap_b))
idem_assert_eq "c: partitions held, naming idemctl rename shop-new shop-newer" "$parts" "$held"
idem_assert_eq "c: partitions started under shop-newer before idemctl rename" 0 "$started"
idem_assert_eq "c: idemd_partitions_starting while held" "$parts" "$starting_held"
idem_assert_eq "c: /readyz while held" 503 "$readyz_held"
idem_assert_eq "c: claims while held (as restored)" "$digest" "$digest_held"
idem_assert_eq "c: ledger rows while held (as restored)" "$ledger" "$ledger_held"
idem_assert_eq "c: shop-newer's progress rows while held" 0 "$newer_rows"
idem_assert_eq "c: idemd_partitions_starting after the rename" 0 "$starting_after"
idem_assert_eq "c: /readyz after the rename" 200 "$readyz_after"

echo "ok: restored mid-stream and renamed: (a) idemctl rename then idemd under shop-new re-applied $gap_a messages; (b) renamed in the configuration only, idemd held every partition until idemctl rename, then re-applied $gap_b; messages=$IDEM_PRODUCED payments=$IDEM_UNIQUE each applied exactly once; $(idem_counts_full shop-newer)"
