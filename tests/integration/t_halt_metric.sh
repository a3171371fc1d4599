#!/usr/bin/env bash
# idemd_partition_halted (the IdemdPartitionHalted alert) follows a halt: with on_poison: halt and
# a message of partition 0 that its handler refuses, the gauge of partition 0 turns 1 once the
# database records the halt, while partition 1 stays 0 and idemd_ready is 0; once the cause is
# fixed and SIGHUP retries the partition, the gauge and idemd_ready return to 0 and 1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:2
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-halt-metric payments --sql "$IDEM_FN_SQL" --retry max_ms=60000 \
	--route on_poison=halt --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
idem_create_apply_fn
idem_psql -c "INSERT INTO blocked_accounts VALUES ('acct-blocked')"
url=http://127.0.0.1:$port/metrics

pay() { # PARTITION ID ACCOUNT
	idem_produce_one --partition "$1" \
		--value "{\"payment_id\":\"$2\",\"account\":\"$3\",\"amount\":1}"
}
for i in 0 1 2; do pay 0 "a-$i" acct-1; done
pay 0 a-3 acct-blocked # offset 3 of partition 0
for i in 0 1 2; do pay 1 "b-$i" acct-2; done

# gauges: "halted(0) halted(1) ready", as /metrics says.
gauges() {
	curl -fsS "$url" | awk '
		$1 == "idemd_partition_halted{topic=\"payments\",partition=\"0\"}" { h0 = $2 }
		$1 == "idemd_partition_halted{topic=\"payments\",partition=\"1\"}" { h1 = $2 }
		$1 == "idemd_ready" { r = $2 }
		END { print h0 " " h1 " " r }'
}
halted_db() {
	[ "$(idem_psql -c "SELECT coalesce(halted_offset::text, '-') FROM idem.partition_progress WHERE partition = 0")" = 3 ]
}
gauges_are() {
	local g
	g=$(gauges)
	[ "$g" = "$1" ] && return 0
	echo "gauges (halted 0, halted 1, ready): $g, want $1" >"$IDEM_TMP/gauges.log" # shown if the test fails
	return 1
}

idemd_start a "$cfg"
idem_wait_until 60 "partition 0 halted at offset 3 in the database" halted_db
idem_wait_until 10 "gauges: partition 0 halted, 1 not, not ready" gauges_are "1 0 0"
idem_assert_eq "partition 1 applied" 3 "$(idem_psql -c "SELECT count(*) FROM ledger WHERE account = 'acct-2'")"

idem_psql -c "DELETE FROM blocked_accounts"
kill -HUP "$IDEMD_PID_a"
applied_all() { [ "$(idem_psql -c 'SELECT count(*) FROM ledger')" = 7 ]; }
idem_wait_until 30 "partition 0 past its poison message" applied_all
idem_wait_until 10 "gauges: nothing halted, ready" gauges_are "0 0 1"
idemd_stop a
echo "ok: idemd_partition_halted follows the halt of partition 0 and its end"
