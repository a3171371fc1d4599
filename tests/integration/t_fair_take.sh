#!/usr/bin/env bash
# A fair take (ARCHITECTURE.md "Fair take"): under a backlog on 64 partitions, every partition
# progresses at its share. idemd at its defaults but for batches of 50 messages (so that each
# partition's backlog is about twenty of them: a partition progresses a batch at a time) starts on
# a backlog of 64,000 payments spread over 64 partitions; the database is read until a third of
# them are applied, and then the
# least advanced partition (the share of its own backlog applied, from
# idem.partition_progress) must have at least half the progress of the most advanced one.
# Before, each turn of the loop began with the first partition and its budget ran out before
# the last ones were offered anything: at a third of the backlog the high-numbered partitions
# had next to nothing applied. Then everything is applied exactly once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

PARTS=64
COUNT=64000
export IDEM_ACCOUNTS=6400 # an account's payments go to one partition: spread them over all 64
idem_fixture --brokers 1 --topics "payments:$PARTS" \
	--config idemd.yaml g-fair payments --kafka-defaults --batch-defaults --max 50 --no-retry
idem_produce --count "$COUNT" --dup-ratio 0 --seed 5
per_part=$IDEM_TMP/per_part.csv
"$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-fair --topic payments |
	sed -n 's/.*partition=\([0-9]*\).*high=\([0-9]*\).*/\1,\2/p' >"$per_part"
[ "$(wc -l <"$per_part")" = "$PARTS" ] || idem_fail "cannot read the $PARTS partitions' ends"
idem_psql -c "CREATE TABLE part_size (partition int PRIMARY KEY, size bigint)"
idem_psql -c "\\copy part_size FROM '$per_part' WITH (FORMAT csv)"
idem_assert_eq "partitions with no payment" 0 "$(idem_psql -c 'SELECT count(*) FROM part_size WHERE size = 0')"

applied() { idem_psql -c "SELECT coalesce(sum(applied), 0) FROM idem.partition_progress WHERE consumer = 'payments'"; }
idemd_start a "$IDEM_CFG"
third=$((COUNT / 3))
deadline=$((SECONDS + 120))
until [ "$(applied)" -ge "$third" ]; do
	[ "$SECONDS" -lt "$deadline" ] || idem_fail "a third of the backlog not applied in 120 s"
	sleep 0.05
done
# Each partition's share of its own backlog applied, least and most (no row yet: nothing).
read -r least most total < <(idem_psql -F ' ' -c "
	SELECT min(coalesce(p.applied, 0)::float8 / s.size), max(coalesce(p.applied, 0)::float8 / s.size),
	       sum(coalesce(p.applied, 0))
	FROM part_size s LEFT JOIN idem.partition_progress p
	     ON p.consumer = 'payments' AND p.topic = 'payments' AND p.partition = s.partition")
idem_log "at $total of $COUNT applied: least advanced partition $least, most $most of its backlog"
python3 -c "import sys; sys.exit(0 if float('$least') >= 0.5 * float('$most') else 1)" ||
	idem_fail "unfair: the least advanced partition has $least of its backlog applied, under half of the most advanced one's $most"

idem_wait_done g-fair 180
idemd_stop a
IDEM_PRODUCED=$COUNT
idem_check_exactly_once payments
idem_log "ok: $(idem_counts payments)"
