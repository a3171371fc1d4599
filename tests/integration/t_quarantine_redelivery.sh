#!/usr/bin/env bash
# A quarantined message that Kafka delivers again is a redelivery duplicate, not a second
# quarantine: idemd quarantines three messages (undecodable, failing in the handler, a duplicate
# with a different payload) and is SIGKILLed before Kafka heard of any offset; the instance after
# it gets every message again (as when it cannot read the database's position at assignment). The quarantined counter stays where it was, in the database and
# in the new instance's /metrics, every redelivered message counts as a redelivery duplicate, and
# consumed = applied + duplicates + quarantined still holds. The quarantine rows are the same
# three, still open, with the handler failure's attempts added up.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:1
cfg=$IDEM_TMP/idemd.yaml
# No offset reaches Kafka before the SIGKILL (its first automatic commit would be in 10 min):
# the next instance starts from the beginning.
port=$(idem_free_port)
idem_write_config "$cfg" g-qr payments --kafka-prop auto.commit.interval.ms=600000 \
	--route on_payload_mismatch=quarantine --retry max_ms=200 --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"

n=0
pay() { # ID AMOUNT [ACCOUNT]
	idem_produce_one --key "$1" \
		--value "{\"payment_id\":\"$1\",\"account\":\"${3:-acct-1}\",\"amount\":$2}"
	n=$((n + 1))
}
for i in 1 2 3; do pay "p-$i" "$i"; done
idem_produce_one --value '{"payment_id": "broken' # undecodable: quarantined at once
n=$((n + 1))
pay p-4 4
pay p-bad '"x"' # fails in the handler (22P02): retried, then quarantined
pay p-5 5
pay p-1 100 # p-1 again with another payload: quarantined (on_payload_mismatch)
pay p-6 6
good=6 bad=3

db_counts() {
	idem_psql -c "SELECT consumed || ' ' || applied || ' ' || duplicates || ' ' || dup_redelivery || ' ' || quarantined FROM idem.partition_progress"
}
consumed_is() { [ "$(idem_psql -c 'SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress')" = "$1" ]; }

idemd_start a "$cfg"
idem_wait_until 60 "first delivery committed" consumed_is "$n"
idem_assert_eq "counters after the first delivery: consumed applied duplicates redelivery quarantined" \
	"$n $good 0 0 $bad" "$(db_counts)"
idem_assert_eq "quarantine rows" "$bad" "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
attempts_before=$(idem_psql -c "SELECT attempts FROM idem.quarantine WHERE business_key = 'p-bad'")
idemd_kill9 a
committed=$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-qr --topic payments |
	sed -n 's/^partition=0 committed=\([0-9-]*\).*/\1/p')
[ -n "$committed" ] && [ "$committed" -lt "$n" ] ||
	idem_fail "Kafka has committed offset '$committed' before the SIGKILL: nothing would be redelivered"

# Everything again, to a new instance. idemd resumes from the database's position, so a SIGKILL
# alone re-reads only what was in flight; Kafka delivers committed messages again when that
# position cannot be used (Postgres unreachable at the assignment: idemd starts from Kafka's
# committed offset) or when another instance still holds the partition. Put the position back as
# such a start finds it.
idem_psql -c "UPDATE idem.partition_progress SET next_offset = 0"
idemd_start b "$cfg"
idem_wait_until 60 "redelivery committed" consumed_is $((2 * n))
sleep 1.5 # one publication interval of the metrics
curl -fsS "http://127.0.0.1:$port/metrics" >"$IDEM_TMP/b.prom"
idemd_stop b
metric() { awk -v k="$1" '$1 == k {print $2}' "$IDEM_TMP/b.prom"; }
idem_assert_eq "instance b: consumed, quarantined, redelivery duplicates (metrics)" "$n 0 $n" \
	"$(metric idemd_messages_consumed_total) $(metric idemd_messages_quarantined_total) $(metric 'idemd_duplicates_total{kind="redelivery"}')"

idem_assert_eq "counters after the redelivery: consumed applied duplicates redelivery quarantined" \
	"$((2 * n)) $good $n $n $bad" "$(db_counts)"
idem_check_accounting payments
idem_assert_eq "quarantine rows, all open" "$bad $bad" \
	"$(idem_psql -c 'SELECT count(*) || '"' '"' || count(*) FILTER (WHERE resolved_at IS NULL) FROM idem.quarantine')"
idem_assert_eq "attempts of the handler failure, both deliveries" $((2 * attempts_before)) \
	"$(idem_psql -c "SELECT attempts FROM idem.quarantine WHERE business_key = 'p-bad'")"
idem_assert_eq "ledger" "$good 21" "$(idem_psql -c 'SELECT count(*) || '"' '"' || sum(amount) FROM ledger')"
idem_check_progress_at_end payments g-qr
echo "ok: quarantined message redelivered: $(idem_counts_full payments)"
