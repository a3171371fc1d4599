#!/usr/bin/env bash
# Fault: one of idemd's Postgres backends stops answering (SIGSTOP) while idemd consumes a live
# stream, as a hung server or a connection that silently went dead would. No timeout of
# Postgres's can end the worker's wait, so:
#  - the other workers go on: payments keep being applied while it is frozen;
#  - idemd says in its log which batch is stuck, once it has been in flight for 30 s;
#  - stopped (SIGTERM) while it is still stuck, the drain waits for it and says so again every
#    30 s (on 871f977 the drain waited without a word);
#  - once the backend answers again (SIGCONT), the drain ends, idemd exits 0, and after a
#    restart everything is applied exactly once.
# The stream has no duplicates: a payment sent again to another partition would wait for the
# frozen transaction's claim at the unique index, which is the claim's business, not this test's.
# idemd starts on a backlog, and the backend is frozen while it lasts: batches are then full, and
# a transaction holds at most IDEM_BATCH_GROW (4) times batch.max_messages, so the frozen worker
# holds at most half of the 8 partitions and the other workers have the rest to apply.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:8 --config idemd.yaml g-frozen payments --max 100
idem_produce_bg --count 600000 --dup-ratio 0 --seed 67 --rate 2000
sleep 4

idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 60 "payments applied" idem_claims_above 2000
backend=$(idem_psql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'idemd' ORDER BY pid LIMIT 1")
[ -n "$backend" ] || idem_fail "no backend of idemd's workers in pg_stat_activity"
trap_cont() { kill -CONT "$backend" 2>/dev/null || true; }
IDEM_CLEANUP_HOOKS+=(trap_cont)
# Frozen where a hung server or a dead connection leaves a worker: waiting for the client's next
# message (wait_event ClientRead), holding no lock of Postgres's own. Stopped at a random
# instruction instead, it could hold a lightweight lock (a WAL insertion slot, a buffer of the
# progress table's one page) that every other backend then waits for, with no timeout either:
# the whole server hangs, which no client can help. So: stop it, and if it was not reading from
# its client, let it go and try again. (The statement timeout bounds the read of its
# pg_stat_activity entry, should it have stopped in the middle of updating it.)
frozen=0
for _ in $(seq 1 300); do
	kill -STOP "$backend"
	if [ "$(idem_psql -c "SET statement_timeout = '2s'" -c "SELECT wait_event FROM pg_stat_activity WHERE pid = $backend" 2>/dev/null | tail -n 1)" = ClientRead ]; then
		frozen=1
		break
	fi
	kill -CONT "$backend"
	sleep "0.0$((RANDOM % 10))"
done
[ "$frozen" = 1 ] || idem_fail "backend $backend was never caught waiting for its client"
idem_log "froze backend $backend"

# The worker on it is stuck once it sends its next statement (the frozen backend's own row in
# pg_stat_activity cannot show that); the others are not.
sleep 2
before=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
sleep 5
after=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
[ "$after" -gt "$before" ] ||
	idem_fail "nothing applied in 5 s while one backend was frozen ($before claims)"
idem_log "applied while frozen: $((after - before)) in 5 s"

stalled() { grep -E 'batch in flight for [0-9]+s topic=payments partition=[0-7] offsets=[0-9]+\.\.[0-9]+: its worker still waits for postgres' "$IDEM_TMP/idemd-a.log"; }
idem_wait_until 45 "the log naming the stuck batch" stalled
idem_log "idemd said: $(stalled | head -1 | sed 's/.*warn batch: //')"

# The shutdown's drain waits for the stuck batch too, and says so (before, it waited without a
# word): SIGTERM while the backend is still frozen, then the next warning comes from the drain.
pid=$(idemd_pid a)
idem_kill "$pid" TERM
drain_stalled() {
	sed -n '/stopping: draining open batches/,$p' "$IDEM_TMP/idemd-a.log" |
		grep -E 'batch in flight for [0-9]+s topic=payments partition=[0-7] offsets=[0-9]+\.\.[0-9]+: its worker still waits for postgres'
}
idem_wait_until 45 "the shutdown's drain naming the stuck batch" drain_stalled
idem_log "while draining, idemd said: $(drain_stalled | head -1 | sed 's/.*warn batch: //')"

kill -CONT "$backend"
idem_log "thawed backend $backend"
idem_wait_exit "$pid" 60
idem_assert_eq "idemd's exit status after the drain" 0 "$IDEM_EXIT_STATUS"
idemd_start b "$IDEM_TMP/idemd.yaml"
idem_produce_stop 120
idem_wait_done g-frozen 180
idemd_stop b

idem_check_exactly_once payments
idem_check_accounting payments
idem_fault_report "a backend frozen for over 30 s" payments
