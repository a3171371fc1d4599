#!/usr/bin/env bash
# idemctl replay checks every option before it touches anything, and reads a message as idemd
# does:
# - a number that is not one (--partition x, --to-offset 12abc, '', -3) is refused with its
#   option named, exit 2, and neither Kafka's offsets nor the database move (strtoll once read
#   "x" as partition 0 and reset it);
# - --to-time without --partition is refused before any broker is asked (once it asked the
#   broker about partition 0 first: with no broker, a 10 s wait and exit 1);
# - a message with more than 64 headers, its business key in the last one, is planned with the
#   key idemd claimed (once the planner read only 64 headers and counted it undecodable).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:2 --config idemd.yaml g-args payments \
	--key '${header:order}'

# 20 payments, each with 70 headers: h0..h68, then the business key's header.
n=20
for ((i = 1; i <= n; i++)); do
	hdrs=()
	for ((h = 0; h < 69; h++)); do
		hdrs+=(--header "h$h=v$h")
	done
	idem_produce_one --partition $((i % 2)) "${hdrs[@]}" --header "order=pay-$i" \
		--value "{\"payment_id\":\"pay-$i\",\"account\":\"acct-$((i % 3))\",\"amount\":$i}"
done
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done g-args 60
idemd_stop a
idem_assert_eq "payments applied under the key of their 70th header" \
	"$n $(seq -s, 1 $n | tr , '\n' | sed 's/^/pay-/' | sort | paste -sd,)" \
	"$(idem_psql -c "SELECT count(*) || ' ' || string_agg(business_key, ',' ORDER BY business_key) FROM idem.processed_messages")"

offsets() {
	"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-args --topic payments |
		grep '^total'
}
positions() {
	idem_psql -c "SELECT string_agg(partition || ':' || next_offset || ':' || coalesce(replay_to::text, '-'), ' ' ORDER BY partition) FROM idem.partition_progress"
}
kafka0=$(offsets)
db0=$(positions)

# ctl EXPECTED_RC PATTERN ARGS...: idemctl replay ARGS exits with EXPECTED_RC and says PATTERN.
ctl() {
	local want=$1 pattern=$2 rc=0
	shift 2
	"$IDEM_BIN/idemctl" -c "$IDEM_TMP/idemd.yaml" replay "$@" >"$IDEM_TMP/out.txt" 2>&1 || rc=$?
	idem_assert_eq "exit status of replay $*" "$want" "$rc"
	grep -q -- "$pattern" "$IDEM_TMP/out.txt" ||
		idem_fail "replay $*: expected '$pattern' in: $(cat "$IDEM_TMP/out.txt")"
}

ctl 2 "replay --partition: 'x' is not a whole number" --topic payments --partition x --to-offset 0
ctl 2 "replay --partition: '1x' is not a whole number" --topic payments --partition 1x --to-offset 0
ctl 2 "replay --partition: '-3' is not a whole number" --topic payments --partition -3 --to-offset 0
ctl 2 "replay --partition: '' is not a whole number" --topic payments --partition '' --to-offset 0
ctl 2 "replay --partition: '2147483648' is not a whole number" --topic payments \
	--partition 2147483648 --to-offset 0
ctl 2 "replay --to-offset: '12abc' is not a whole number" --topic payments --to-offset 12abc
ctl 2 "replay --to-offset: '-1' is not a whole number" --topic payments --partition 0 --to-offset -1
ctl 2 "replay --to-time: cannot read '2026-13-01T00:00:00Z'" --topic payments --partition 0 \
	--to-time 2026-13-01T00:00:00Z
ctl 2 "replay --to-time: cannot read '2026-01-01T00:00:00Zjunk'" --topic payments --partition 0 \
	--to-time 2026-01-01T00:00:00Zjunk
idem_assert_eq "Kafka's offsets after the refusals" "$kafka0" "$(offsets)"
idem_assert_eq "database positions after the refusals" "$db0" "$(positions)"

# --to-time without --partition: refused before any broker or database is asked, so even a
# configuration whose broker and database are gone is refused as a usage error (exit 2), not as
# a failure to reach them (exit 1, what asking first gives).
sed -e "s|^  brokers: .*|  brokers: \"127.0.0.1:$(idem_free_port)\"|" \
	-e "s|^  conninfo: .*|  conninfo: \"host=127.0.0.1 port=$(idem_free_port) dbname=idem user=idem\"|" \
	"$IDEM_TMP/idemd.yaml" >"$IDEM_TMP/gone.yaml"
! grep -q "$IDEM_BROKERS" "$IDEM_TMP/gone.yaml" || idem_fail "gone.yaml still names the broker"
rc=0
"$IDEM_BIN/idemctl" -c "$IDEM_TMP/gone.yaml" replay --topic payments \
	--to-time 2026-01-01T00:00:00Z >"$IDEM_TMP/out.txt" 2>&1 || rc=$?
idem_assert_eq "exit status of --to-time without --partition" 2 "$rc"
grep -q -- "--to-time needs --partition" "$IDEM_TMP/out.txt" ||
	idem_fail "--to-time without --partition: $(cat "$IDEM_TMP/out.txt")"

# The plan reads every header, as idemd did: all 20 already claimed, none undecodable.
ctl 0 "^total: messages=$n would_apply=0 already_claimed=$n repeated_in_range=0 undecodable=0" \
	--topic payments --to-offset 0 --dry-run
idem_assert_eq "Kafka's offsets after the dry run" "$kafka0" "$(offsets)"
echo "ok: numbers checked strictly and before anything is asked; $n messages of 70 headers planned as idemd claimed them"
