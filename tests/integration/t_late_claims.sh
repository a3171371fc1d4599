#!/usr/bin/env bash
# A key that another of idemd's transactions has in flight is claimed after the transaction's
# other keys (ARCHITECTURE.md, "The transaction", 1): the claim waits for that transaction at
# the unique index only once it has claimed everything else, not before.
#
# Partition 0 carries a-dup and 200 keys b-*; its transaction sleeps 6 s in the handler, holding
# a-dup. Partition 1 then gets a-dup and 200 keys c-*, all sorting after a-dup: in key order
# alone its claim would wait at a-dup before writing anything. The backend that waits on
# a-dup's transaction must already have a transaction id (Postgres assigns one at the first
# write): it claimed its c-* keys first. Then every payment is applied once, a-dup once, and
# idemd_claims_late_total counts the late key.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
# shellcheck disable=SC2016 # $1 is the set handler's parameter
sql='WITH s AS (SELECT pg_sleep(6) WHERE $1::text[] @> ARRAY['"'a-dup'"']) INSERT INTO ledger (payment_id, account, amount) SELECT u.k, '"'acct-1'"', 1 FROM unnest($1::text[]) AS u(k), (SELECT count(*) FROM s) AS z'
# shellcheck disable=SC2016 # ${key} is idemd's
idem_write_config "$cfg" g-late payments --workers 2 --mode set --key '${key}' \
	--params '[business_key]' --sql "$sql" --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"

hex() { printf %s "$1" | od -An -tx1 | tr -d ' \n'; }
# messages PARTITION PREFIX: the file of a-dup, then PREFIX-000 .. PREFIX-199 (written ahead:
# the second one must go while the first transaction sleeps).
messages() {
	local i
	{
		printf '%s\t%s\n' "$(hex a-dup)" "$(hex v)"
		for i in $(seq -w 0 199); do
			printf '%s\t%s\n' "$(hex "$2-$i")" "$(hex v)"
		done
	} >"$IDEM_TMP/p$1.txt"
}
produce() { # PARTITION
	"$IDEM_BIN/idem-kafkatool" produce-file --brokers "$IDEM_BROKERS" --topic payments \
		--partition "$1" --input "$IDEM_TMP/p$1.txt" >/dev/null || idem_fail "produce-file failed"
}
messages 0 b
messages 1 c
produce 0
idemd_start a "$cfg"
sleeping() {
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemd' AND wait_event = 'PgSleep'")" = 1 ]
}
idem_wait_until 60 "partition 0's transaction holds a-dup (in its handler)" sleeping
produce 1
waiting=
waits() {
	waiting=$(idem_psql -c "SELECT coalesce(backend_xid::text, 'none') FROM pg_stat_activity WHERE application_name = 'idemd' AND wait_event = 'transactionid'")
	[ -n "$waiting" ]
}
idem_wait_until 30 "partition 1's claim waits for a-dup's transaction" waits
echo "the waiting claim's transaction id: $waiting"
[ "$waiting" != none ] ||
	idem_fail "the claim waits for a-dup before it wrote anything: the key in flight was not claimed last"
idem_wait_done g-late 60
late=$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '$1 == "idemd_claims_late_total" { print $2 }')
idemd_stop a

idem_assert_eq "ledger rows" 401 "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "payments applied twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "claims" 401 "$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'payments'")"
idem_assert_eq "consumed, applied, duplicates" "402 401 1" \
	"$(idem_psql -F ' ' -c "SELECT sum(consumed), sum(applied), sum(duplicates) FROM idem.partition_progress WHERE consumer = 'payments'")"
[ -n "$late" ] && [ "$late" -ge 1 ] || idem_fail "idemd_claims_late_total is '$late', not at least 1"
echo "ok: the key in flight elsewhere claimed last ($late late), every payment applied once"
