#!/usr/bin/env bash
#
# t_tools: the test rig itself. A throwaway Postgres, the embedded Kafka with fault injection,
# and idem-kafkatool's produce/offsets/reset/wait-committed/consume against it.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=20000
PARTS=8
GROUP="t-tools"

idem_tmp_init

# ---- Postgres ----
idem_pg_start
idem_assert_eq "select 1" 1 "$(idem_psql -c 'select 1')"
idem_assert_eq "current database" idem "$(idem_psql -c 'select current_database()')"
idem_assert_eq "conninfo works" idem "$(psql -X -At -d "$IDEM_CONNINFO" -c 'select current_user')"

# ---- Kafka ----
idem_kafka_start payments:$PARTS
idem_assert_eq "ctl ping" ok "$(idem_kafka_ctl ping)"

summary=$(idem_kafkatool produce --brokers "$IDEM_BROKERS" --topic payments --count $N \
	--dup-ratio 0.3 --seed 42 --manifest "$IDEM_TMP/manifest.csv")
idem_log "produce: $summary"
[[ $summary =~ ^produced=([0-9]+)\ unique=([0-9]+)\ duplicates=([0-9]+)$ ]] ||
	idem_fail "unexpected produce summary '$summary'"
produced=${BASH_REMATCH[1]}
unique=${BASH_REMATCH[2]}
duplicates=${BASH_REMATCH[3]}
idem_assert_eq "produced" $N "$produced"
idem_assert_eq "unique + duplicates" $N $((unique + duplicates))
idem_assert_eq "manifest lines" "$unique" "$(wc -l <"$IDEM_TMP/manifest.csv")"
idem_assert_eq "distinct manifest ids" "$unique" "$(cut -d, -f1 "$IDEM_TMP/manifest.csv" | sort -u | wc -l)"
if ((duplicates < N / 4 || duplicates > N * 35 / 100)); then
	idem_fail "duplicates=$duplicates is far from 30% of $N"
fi

offsets=$(idem_kafkatool offsets --brokers "$IDEM_BROKERS" --group $GROUP --topic payments)
printf '%s\n' "$offsets" >"$IDEM_TMP/offsets.0"
idem_assert_eq "offsets partitions" $PARTS "$(grep -c '^partition=' <<<"$offsets")"
idem_assert_eq "nothing committed yet" $PARTS "$(grep -c ' committed=-1 ' <<<"$offsets")"
idem_assert_eq "total high watermark" $N \
	"$(sed -n 's/^total committed=.* high=\([0-9]*\) lag=.*/\1/p' <<<"$offsets")"
idem_assert_eq "sum of partition high watermarks" $N \
	"$(sed -n 's/^partition=.* high=\([0-9]*\) .*/\1/p' <<<"$offsets" | awk '{ s += $1 } END { print s }')"

# Every message is there, keys are the payment ids, headers as documented, and the values of
# duplicates equal their originals.
idem_kafkatool consume --brokers "$IDEM_BROKERS" --topic payments >"$IDEM_TMP/consumed.tsv"
idem_assert_eq "consumed messages" $N "$(wc -l <"$IDEM_TMP/consumed.tsv")"
idem_assert_eq "distinct keys" "$unique" "$(cut -f3 "$IDEM_TMP/consumed.tsv" | sort -u | wc -l)"
idem_assert_eq "distinct key+value pairs" "$unique" \
	"$(cut -f3,4 "$IDEM_TMP/consumed.tsv" | sort -u | wc -l)"
idem_assert_eq "headers" "tenant=t1,source=idemd-demo" \
	"$(cut -f5 "$IDEM_TMP/consumed.tsv" | sort -u)"
idem_assert_eq "keys on several partitions" yes \
	"$(awk -F'\t' '{ print $3 "\t" $1 }' "$IDEM_TMP/consumed.tsv" | sort -u | cut -f1 | uniq -d |
		awk 'END { print (NR > 0 ? "yes" : "no") }')"

# The manifest loads with \copy and agrees with the stream.
idem_psql <<EOF
CREATE TABLE manifest (payment_id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL);
\copy manifest FROM '$IDEM_TMP/manifest.csv' WITH (FORMAT csv)
EOF
expected_total=$(awk -F, '{ s += $3 } END { print s }' "$IDEM_TMP/manifest.csv")
idem_assert_eq "manifest rows" "$unique" "$(idem_psql -c 'select count(*) from manifest')"
idem_assert_eq "manifest total" "$expected_total" "$(idem_psql -c 'select sum(amount) from manifest')"

# The same options give the same stream, message for message.
for t in det1 det2; do
	idem_assert_eq "topic_create $t" ok "$(idem_kafka_ctl topic_create $t 4)"
	idem_kafkatool produce --brokers "$IDEM_BROKERS" --topic $t --count 3000 --dup-ratio 0.5 \
		--seed 7 --tenant t2 --manifest "$IDEM_TMP/$t.csv" >/dev/null 2>&1
	# consume interleaves partitions as they arrive: order by partition and offset.
	idem_kafkatool consume --brokers "$IDEM_BROKERS" --topic $t | sort -t$'\t' -k1,1n -k2,2n >"$IDEM_TMP/$t.tsv"
done
cmp -s "$IDEM_TMP/det1.tsv" "$IDEM_TMP/det2.tsv" || idem_fail "same seed, different messages"
cmp -s "$IDEM_TMP/det1.csv" "$IDEM_TMP/det2.csv" || idem_fail "same seed, different manifests"
idem_assert_eq "det messages" 3000 "$(wc -l <"$IDEM_TMP/det1.tsv")"

# ---- reset, offsets, wait-committed ----
idem_kafkatool reset --brokers "$IDEM_BROKERS" --group $GROUP --topic payments --to-offset 5 >/dev/null
offsets=$(idem_kafkatool offsets --brokers "$IDEM_BROKERS" --group $GROUP --topic payments)
idem_assert_eq "partitions committed at 5" $PARTS "$(grep -c ' committed=5 ' <<<"$offsets")"
idem_assert_eq "total committed" $((5 * PARTS)) \
	"$(sed -n 's/^total committed=\([0-9]*\) .*/\1/p' <<<"$offsets")"

if idem_kafkatool wait-committed --brokers "$IDEM_BROKERS" --group $GROUP --topic payments \
	--timeout 0.5 2>"$IDEM_TMP/wait.err"; then
	idem_fail "wait-committed succeeded with lag left"
fi
grep -q 'did not commit' "$IDEM_TMP/wait.err" || idem_fail "wait-committed: no timeout message"

# Commit every partition to its end, as a consumer that finished would.
while read -r line; do
	[[ $line =~ ^partition=([0-9]+)\ .*\ high=([0-9]+)\  ]] || continue
	idem_kafkatool reset --brokers "$IDEM_BROKERS" --group $GROUP --topic payments \
		--partition "${BASH_REMATCH[1]}" --to-offset "${BASH_REMATCH[2]}" >/dev/null
done <<<"$offsets"
idem_assert_eq "wait-committed" "total committed=$N high=$N lag=0" \
	"$(idem_kafkatool wait-committed --brokers "$IDEM_BROKERS" --group $GROUP --topic payments --timeout 10)"
idem_kafkatool reset --brokers "$IDEM_BROKERS" --group $GROUP --topic payments --to-beginning \
	--partition 3 >/dev/null
idem_assert_eq "partition 3 reset to its beginning" "partition=3 committed=0 low=0" \
	"$(idem_kafkatool offsets --brokers "$IDEM_BROKERS" --group $GROUP --topic payments |
		grep '^partition=3 ' | cut -d' ' -f1-3)"

# ---- fault injection ----
idem_assert_eq "broker_down 1" ok "$(idem_kafka_ctl broker_down 1)"
idem_assert_eq "broker_up 1" ok "$(idem_kafka_ctl broker_up 1)"
idem_assert_eq "push_errors" ok "$(idem_kafka_ctl push_errors Produce 2 NOT_LEADER_FOR_PARTITION)"
idem_assert_eq "produce-one through errors" "partition=0 offset=$(grep '^partition=0 ' "$IDEM_TMP/offsets.0" | sed 's/.* high=\([0-9]*\) .*/\1/')" \
	"$(idem_kafkatool produce-one --brokers "$IDEM_BROKERS" --topic payments --partition 0 \
		--key-hex 00ff --value-hex c328 --header a=1 --header a=2 2>/dev/null)"
idem_assert_eq "clear_errors" ok "$(idem_kafka_ctl clear_errors Produce)"
if idem_kafka_ctl no_such_command >/dev/null; then
	idem_fail "ctl accepted an unknown command"
fi

# ---- Postgres crash restart ----
idem_pg_restart_immediate
idem_assert_eq "rows after crash restart" "$unique" "$(idem_psql -c 'select count(*) from manifest')"

# ---- clean stop ----
idem_kafka_stop
[ ! -e "$IDEM_KAFKA_CTL" ] || idem_fail "control socket left behind"
[ ! -e "$IDEM_TMP/kafka.bootstrap" ] || idem_fail "bootstrap file left behind"

idem_log "PASS"
