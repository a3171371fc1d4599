#!/usr/bin/env bash
# Memory bounded in bytes (batch.max_bytes, batch.max_bytes_total): a backlog of 128 payments of
# 512 KiB each (64 MiB) over 16 partitions, 8 per partition (the embedded Kafka keeps 5 MiB per
# partition), is applied exactly once by an idemd whose batches may hold 8 MiB in all, and its
# peak RSS (VmHWM) stays under that budget plus a stated constant: idemd's own footprint,
# librdkafka's prefetch (queued.max.messages.kbytes, fetch.max.bytes) and one message per
# partition beyond the budget (a partition with nothing in flight always takes one); the test
# prints both. Before the byte bound, the
# batches took the whole backlog while the first ones waited for a lock (500 messages per
# batch): 64 MiB of copies. Then, with a budget of 2 KiB (smaller than one message), small
# payments and four more of 512 KiB are applied exactly once too: nothing is ever stuck.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

PARTS=16
PER_PART=8
VALUE_BYTES=${IDEM_MEM_VALUE_BYTES:-524288}
BUDGET=$((8 * 1024 * 1024))
MAX_BYTES=$((1024 * 1024))
# The stated constant: what idemd holds besides its batches (KiB), measured with this test's
# settings. Its own footprint (this test with 2 KiB values: 14 MiB, 26 MiB under ASan), taken as
# 16 MiB (28 under ASan); librdkafka's prefetch, per partition (each has its own queue)
# queued.max.messages.kbytes (512 KiB, passed by up to one message: 16 x 1 MiB) plus one fetch
# in progress (fetch.max.bytes, 2 MiB); one message per partition beyond the budget (a
# partition with nothing in flight always takes one: 16 x 512 KiB); 10 MiB of slack (arenas
# kept for reuse, allocator). Measured: 33 to 42 MiB peak against a bound of 60.
FOOTPRINT_KIB=$((16 * 1024))
if grep -q '^CMAKE_BUILD_TYPE:STRING=Asan$' "$IDEM_BIN/CMakeCache.txt" 2>/dev/null; then
	FOOTPRINT_KIB=$((28 * 1024))
fi
CONSTANT_KIB=${IDEM_MEM_CONSTANT_KIB:-$((FOOTPRINT_KIB + PARTS * 1024 + 2 * 1024 + PARTS * VALUE_BYTES / 1024 + 10 * 1024))}

idem_fixture --brokers 1 --topics payments:$PARTS \
	--config idemd.yaml g-mem payments --max 500 --wait 20 \
	--batch max_bytes=$MAX_BYTES --batch max_bytes_total=$BUDGET \
	--limits max_message_bytes=$((2 * VALUE_BYTES)) --postgres lock_timeout_ms=60000 \
	--kafka-prop queued.max.messages.kbytes=512 --kafka-prop fetch.max.bytes=2097152

# Values: payments JSON padded to VALUE_BYTES; manifest for idem_check_exactly_once.
python3 - "$IDEM_TMP" "$PARTS" "$PER_PART" "$VALUE_BYTES" <<'PY'
import json, os, sys
tmp, parts, per, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(f"{tmp}/values", exist_ok=True)
with open(f"{tmp}/manifest.csv", "w") as man:
    for p in range(parts):
        for i in range(per + 1):  # one more, for the second part
            pid, acct, amount = f"big-{p}-{i}", f"acct-{(p + i) % 7}", p * 100 + i + 1
            v = {"payment_id": pid, "account": acct, "amount": amount, "pad": ""}
            v["pad"] = "x" * (size - len(json.dumps(v)))
            with open(f"{tmp}/values/{p}-{i}", "w") as f:
                f.write(json.dumps(v))
            if i < per:
                man.write(f"{pid},{acct},{amount}\n")
PY
# Four partitions at a time: one producer process per message is slow.
for ((p = 0; p < PARTS; p++)); do
	(
		for ((i = 0; i < PER_PART; i++)); do
			idem_produce_one --partition "$p" --key "big-$p-$i" \
				--value-file "$IDEM_TMP/values/$p-$i" -X message.max.bytes=4000000
		done
	) &
	if (((p + 1) % 4 == 0)); then
		for _ in 1 2 3 4; do
			wait -n || idem_fail "producing failed"
		done
	fi
done
IDEM_PRODUCED=$((PARTS * PER_PART))
IDEM_UNIQUE=$IDEM_PRODUCED
idem_log "produced $IDEM_PRODUCED messages of $VALUE_BYTES bytes over $PARTS partitions"

# The ledger is locked for the first seconds: the first batches wait in their transactions
# while the rest of the backlog arrives, which is when memory would grow.
idem_spawn lock psql -X -q -At -v ON_ERROR_STOP=1 \
	-c "BEGIN; LOCK TABLE ledger IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(8); COMMIT;"
lock_pid=$IDEM_LAST_PID
# Under ASan freed memory waits in a quarantine (256 MiB by default) before it is reused: kept
# small here, so that RSS follows what idemd holds. No effect on other builds.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4
idemd_start a "$IDEM_TMP/idemd.yaml"
pid=$(idemd_pid a)
idem_wait_exit "$lock_pid" 30
idem_wait_done g-mem 300
hwm_kib=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status")
[ -n "$hwm_kib" ] || idem_fail "cannot read VmHWM of idemd ($pid)"
idemd_stop a
idem_check_exactly_once payments
idem_log "$(idem_counts payments)"

bound_kib=$((BUDGET / 1024 + CONSTANT_KIB))
echo "peak RSS (VmHWM) $((hwm_kib / 1024)) MiB ($hwm_kib KiB); bound: budget $((BUDGET / 1048576)) MiB + constant $((CONSTANT_KIB / 1024)) MiB = $((bound_kib / 1024)) MiB; backlog $((IDEM_PRODUCED * VALUE_BYTES / 1048576)) MiB"
[ "$hwm_kib" -le "$bound_kib" ] ||
	idem_fail "peak RSS $hwm_kib KiB is over the bound $bound_kib KiB (budget $BUDGET bytes + $CONSTANT_KIB KiB)"

# A budget smaller than one message: every partition is pressed all the time, and a message
# larger than batch.max_bytes and the whole budget still goes, alone. Small payments (with
# duplicates) and one more 512 KiB payment in each of four partitions, on top of the first
# backlog (checked again with it).
cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/big.csv"
big=$IDEM_PRODUCED
idem_produce --count 1500 --dup-ratio 0.1 --seed 7
cat "$IDEM_TMP/big.csv" >>"$IDEM_TMP/manifest.csv"
for ((p = 0; p < 4; p++)); do
	idem_produce_one --partition "$p" --key "big-$p-$PER_PART" \
		--value-file "$IDEM_TMP/values/$p-$PER_PART" -X message.max.bytes=4000000
	echo "big-$p-$PER_PART,acct-$(((p + PER_PART) % 7)),$((p * 100 + PER_PART + 1))" >>"$IDEM_TMP/manifest.csv"
done
IDEM_UNIQUE=$((IDEM_UNIQUE + big + 4))
IDEM_PRODUCED=$((IDEM_PRODUCED + big + 4))
idem_write_config "$IDEM_TMP/tiny.yaml" g-mem payments --max 500 --wait 20 \
	--batch max_bytes=1024 --batch max_bytes_total=2048 \
	--limits max_message_bytes=$((2 * VALUE_BYTES)) --postgres lock_timeout_ms=60000
idemd_start b "$IDEM_TMP/tiny.yaml"
idem_wait_done g-mem 300
idemd_stop b
idem_check_exactly_once payments
idem_log "budget of 2 KiB: $(idem_counts payments)"
idem_log "ok"
