#!/usr/bin/env bash
# idemctl replay refuses while idemd runs in the group: exit status 1, a message saying to stop
# every idemd of the group, and nothing changed (the group's committed offsets, the database
# positions). Where the brokers describe groups (ListGroups/DescribeGroups) this is known
# without joining the group; librdkafka's mock cluster cannot describe them, so here idemctl
# finds out by joining, which makes idemd take its partitions again (counted below, not
# asserted). Everything stays applied exactly once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

port=$(idem_free_port)
idem_fixture --topics payments:4 --config idemd.yaml g-live payments --metrics "127.0.0.1:$port"
idem_produce --count 2000 --dup-ratio 0.2 --seed 31
idemd_start a "$IDEM_CFG"
idem_wait_done g-live 120
starts() {
	curl -fsS "http://127.0.0.1:$port/metrics" |
		awk '/^idemd_partition_starts_total/ { n += $2 } END { print n + 0 }'
}
positions() { idem_psql -c "SELECT string_agg(partition || ':' || next_offset || ':' || coalesce(replay_to::text, '-'), ' ' ORDER BY partition) FROM idem.partition_progress"; }
committed() { "$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-live --topic payments | grep '^total'; }
starts0=$(starts)
pos0=$(positions)
com0=$(committed)

rc=0
"$IDEM_BIN/idemctl" -c "$IDEM_CFG" replay --topic payments --to-offset 0 >"$IDEM_TMP/replay.out" \
	2>"$IDEM_TMP/replay.err" || rc=$?
idem_assert_eq "exit status of a replay of a live group" 1 "$rc"
grep -Eq "group 'g-live' (has [0-9]+ active member\(s\)|still has active members): stop every idemd of the group before a replay" \
	"$IDEM_TMP/replay.err" || idem_fail "replay: $(cat "$IDEM_TMP/replay.err")"
grep -q "reset: start idemd" "$IDEM_TMP/replay.out" && idem_fail "replay said it reset the group"
idem_assert_eq "database positions after the refusal" "$pos0" "$(positions)"
idem_assert_eq "committed offsets after the refusal" "$com0" "$(committed)"

# idemd still runs the group, and everything stays applied exactly once.
idem_wait_done g-live 120
starts1=$(starts)
idemd_stop a
idem_check_exactly_once payments
echo "ok: replay of a live group refused, nothing changed; partition starts in idemd: $starts0 before, $starts1 after (the mock cluster cannot describe groups: idemctl joined)"
