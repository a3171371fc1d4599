#!/usr/bin/env bash
# Fault: Postgres fails over to its standby while idemd applies a live stream. idemd's conninfo
# names the primary and the standby (target_session_attrs=read-write); it is never restarted and
# must follow the promotion by itself. IDEM_FAILOVER_MODE:
#  - async (default): the standby falls behind on purpose at about 25% of the stream (it stops
#    receiving WAL), idemd goes on applying on the primary until about 50%, then the primary
#    crashes (-m immediate) and the standby is promoted without the primary's last commits,
#    which Kafka's committed offsets already cover. idemd must re-apply them: no payment lost.
#  - sync (f_failover_sync.sh): synchronous replication; the standby has every acknowledged
#    commit, so nothing is lost and nothing needs re-applying (sum(reapplied) = 0).
# Measured: seconds from the promotion to the first commit on the promoted standby that
# advances idem.partition_progress, and the messages re-applied.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

mode=${IDEM_FAILOVER_MODE:-async}
case $mode in
async | sync) ;;
*) idem_fail "IDEM_FAILOVER_MODE must be async or sync, not '$mode'" ;;
esac
count=15000
unique_est=$((count * 8 / 10)) # 20% duplicates
idem_fixture --durable-commits --topics payments:8 \
	--config idemd.yaml g-failover payments --retry max_ms=1000
cfg=$IDEM_CFG
if [ "$mode" = sync ]; then
	idem_pg_standby_start --sync
else
	idem_pg_standby_start
fi
# Primary, then standby: libpq takes the first that accepts writes.
sed -i "s|^  conninfo: .*|  conninfo: \"$IDEM_FAILOVER_CONNINFO\"|" "$cfg"
grep -qF "conninfo: \"$IDEM_FAILOVER_CONNINFO\"" "$cfg" || idem_fail "cannot set the conninfo in $cfg"

rows() { idem_psql -c "SELECT count(*) FROM $1"; }
ledger_at_least() { [ "$(rows ledger)" -ge "$1" ]; }

# idemd has its partitions before the stream starts, so that the ledger follows the stream.
idemd_start a "$cfg"
owns() { grep -qs "assigned topic=payments" "$IDEM_TMP/idemd-a.log"; }
idem_wait_until 60 "idemd gets partitions" owns
# The stream runs until 2 s after the first commit on the promoted standby (idem_produce_stop),
# at most 10 minutes, so that the failover lands in it however slow the machine is; $count sets
# where the standby falls behind and the primary crashes.
idem_produce_bg --count $((1500 * 600)) --dup-ratio 0.2 --seed 181 --rate 1500
if [ "$mode" = async ]; then
	idem_wait_until 60 "25% of the payments in the ledger" ledger_at_least $((unique_est / 4))
	idem_pg_standby_pause
	idem_log "the standby fell behind at ledger $(rows ledger)"
fi
idem_wait_until 60 "50% of the payments in the ledger" ledger_at_least $((unique_est / 2))
idem_producer_running || idem_fail "the stream ended before the failover"
# Read just before the crash: the primary has at least this much.
primary_ledger=$(rows ledger)
# Read on the standby once the primary is down and before the promotion (after it, idemd
# writes at once): what the promoted standby starts with.
at_promotion() { promoted_ledger=$(rows ledger); }
idem_pg_failover at_promotion
idem_log "ledger: primary $primary_ledger just before the crash, standby $promoted_ledger at the promotion"
if [ "$mode" = async ]; then
	[ "$promoted_ledger" -lt "$primary_ledger" ] ||
		idem_fail "the promoted standby lacks nothing ($promoted_ledger ledger rows, the primary had $primary_ledger): the test proves nothing"
else
	[ "$promoted_ledger" -ge "$primary_ledger" ] ||
		idem_fail "the synchronous standby lacks commits: $promoted_ledger ledger rows, the primary had $primary_ledger"
fi

# The first commit on the promoted standby that advances partition_progress (idemd, not
# restarted, reconnects through the multi-host conninfo).
new_commit() {
	[ "$(idem_psql -c "SELECT count(*) FROM idem.partition_progress WHERE updated_at > to_timestamp($IDEM_PROMOTED_AT)")" -gt 0 ]
}
deadline=$((SECONDS + 60))
until new_commit; do
	((SECONDS < deadline)) || idem_fail "no commit on the promoted standby within 60 s"
	sleep 0.1
done
recovery_s=$(idem_psql -c "SELECT round((extract(epoch FROM min(updated_at)) - $IDEM_PROMOTED_AT)::numeric, 2) FROM idem.partition_progress WHERE updated_at > to_timestamp($IDEM_PROMOTED_AT)")
idem_log "first commit on the promoted standby ${recovery_s} s after the promotion"
idem__alive "$(idemd_pid a)" || idem_fail "idemd exited during the failover"

sleep 2
idem_produce_stop 180
idem_wait_done g-failover 180
idemd_stop a
lost=$((IDEM_UNIQUE - $(idem_psql -c 'SELECT count(DISTINCT payment_id) FROM ledger')))
idem_log "after the failover: ledger $(rows ledger) of $IDEM_UNIQUE unique payments, $lost lost; $(idem_counts_full payments)"

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "failover to the $mode standby" payments
reapplied=$(idem_psql -c "SELECT coalesce(sum(reapplied), 0) FROM idem.partition_progress WHERE consumer = 'payments'") ||
	idem_fail "cannot read idem.partition_progress.reapplied (is the migration there?)"
if [ "$mode" = sync ]; then
	idem_assert_eq "messages re-applied after a failover to a synchronous standby" 0 "$reapplied"
	! grep -q "database behind" "$IDEM_TMP/idemd-a.log" ||
		idem_fail "idemd found the synchronous standby behind: $(grep "database behind" "$IDEM_TMP/idemd-a.log" | head -1)"
else
	[ "$reapplied" -gt 0 ] || idem_fail "nothing re-applied after a failover to a standby that lacked commits"
	grep -q "database behind: .*found at \(transaction\|reconnect\)" "$IDEM_TMP/idemd-a.log" ||
		idem_fail "idemd did not say it found the database behind"
fi
echo "ok: failover $mode: recovery_s=$recovery_s reapplied=$reapplied lost=$lost produced=$IDEM_PRODUCED unique=$IDEM_UNIQUE ledger: primary_before_crash=$primary_ledger promoted=$promoted_ledger lacked=$((primary_ledger - promoted_ledger))"
