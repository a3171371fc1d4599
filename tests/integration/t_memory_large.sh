#!/usr/bin/env bash
# The memory bound as documented (ARCHITECTURE.md "Memory bound"): the bytes held in batches
# are at most batch.max_bytes_total plus one message, however many partitions press on it.
# 16 partitions, 3 payments of 16 MiB each (stored compressed: the embedded Kafka keeps 5 MiB
# per partition), a budget of 48 MiB, and the 7 accounts the payments add to held by a
# transaction (it inserts them and waits: idemd's handler, which adds to an account, waits on
# them, while the tables stay unlocked for its start) until idemd holds the budget (at most 110 s,
# however slow the fetch, say under ASan on a busy machine), so that the first batches wait in
# their transactions while the rest of the backlog arrives. The most
# bytes held at once (idemd_batch_bytes_held_max, kept at every message taken) must have
# reached the budget (the bound was pressed) and stayed within it plus one message; every
# payment is applied exactly once. Before the bound was exact, a partition took up to 64
# messages out of librdkafka at a time and each one with nothing in flight took one more over
# the budget: up to 16 messages (256 MiB) beyond it here.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

PARTS=16
PER_PART=3
VALUE_BYTES=$((16 * 1024 * 1024))
BUDGET=$((48 * 1024 * 1024))
# What one message counts for besides its value: key, headers, hashes, the batch's own
# bookkeeping (idem_batch.bytes), far below this.
MSG_OVERHEAD=65536
port=$(idem_free_port)

idem_fixture --brokers 1 --topics payments:$PARTS \
	--config idemd.yaml g-meml payments --max 500 --wait 20 \
	--batch max_bytes_total=$BUDGET --metrics "127.0.0.1:$port" \
	--limits max_message_bytes=$((VALUE_BYTES + 1024 * 1024)) --postgres lock_timeout_ms=60000

# One value file at a time (16 MiB each); the manifest for idem_check_exactly_once.
: >"$IDEM_TMP/manifest.csv"
for ((p = 0; p < PARTS; p++)); do
	for ((i = 0; i < PER_PART; i++)); do
		pid=large-$p-$i acct=acct-$(((p + i) % 7)) amount=$((p * 100 + i + 1))
		python3 - "$IDEM_TMP/value" "$VALUE_BYTES" "$pid" "$acct" "$amount" <<'PY'
import json, sys
path, size, pid, acct, amount = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
v = {"payment_id": pid, "account": acct, "amount": amount, "pad": ""}
v["pad"] = "x" * (size - len(json.dumps(v)))
with open(path, "w") as f:
    f.write(json.dumps(v))
PY
		idem_produce_one --partition "$p" --key "$pid" --value-file "$IDEM_TMP/value" \
			-X message.max.bytes=$((2 * VALUE_BYTES)) -X compression.codec=lz4
		echo "$pid,$acct,$amount" >>"$IDEM_TMP/manifest.csv"
	done
done
rm -f "$IDEM_TMP/value"
IDEM_PRODUCED=$((PARTS * PER_PART))
IDEM_UNIQUE=$IDEM_PRODUCED
idem_log "produced $IDEM_PRODUCED messages of $VALUE_BYTES bytes over $PARTS partitions"

idem_spawn lock env PGAPPNAME=idem-accounts-held psql -X -q -At -v ON_ERROR_STOP=1 \
	-c "BEGIN; INSERT INTO accounts (id, balance) SELECT 'acct-' || g, 0 FROM generate_series(0, 6) g; SELECT pg_sleep(120); COMMIT;"
lock_pid=$IDEM_LAST_PID
lock_held() { test "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idem-accounts-held' AND wait_event = 'PgSleep'")" = 1; }
idem_wait_until 30 "the accounts to be held" lock_held
metric() { curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null | awk -v m="$1" '$1 == m { print $2 }'; }
budget_held() {
	local v
	v=$(metric idemd_batch_bytes_held_max)
	[ -n "$v" ] && [ "$v" -ge "$BUDGET" ]
}
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4
idemd_start a "$IDEM_CFG"
# While the accounts are held nothing commits: idemd must fill its budget and stop there.
idem_wait_until 110 "the bytes held to reach the budget while the accounts are held (the test pressed nothing)" budget_held
idem_psql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'idem-accounts-held'" >/dev/null
idem_wait_exit "$lock_pid" 30
idem_wait_done g-meml 300
sleep 1.5 # one publication interval, for the gauges
held_max=$(metric idemd_batch_bytes_held_max)
budget=$(metric idemd_batch_bytes_budget)
idemd_stop a
idem_check_exactly_once payments
idem_log "$(idem_counts payments)"

bound=$((BUDGET + VALUE_BYTES + MSG_OVERHEAD))
echo "most bytes held at once: $held_max; budget $budget; bound (budget + one message) $bound"
idem_assert_eq "budget" "$BUDGET" "$budget"
[ -n "$held_max" ] || idem_fail "no idemd_batch_bytes_held_max"
[ "$held_max" -ge "$BUDGET" ] ||
	idem_fail "the budget was never reached ($held_max < $BUDGET): the test pressed nothing"
[ "$held_max" -le "$bound" ] ||
	idem_fail "bytes held reached $held_max, over the budget $BUDGET plus one message ($bound)"
idem_log "ok"
