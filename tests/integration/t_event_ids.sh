#!/usr/bin/env bash
# Event ids (idem.outbox.event_id, the header idem-outbox-id) are named after the message that
# emitted them, so that a message applied again after the database went back emits the same ids
# (sql/0007_restore.sql; ARCHITECTURE.md "The outbox"):
#  - row mode, idem.emit() twice per payment: ids idem.event_id('emit', consumer, key, 0 and 1);
#  - set mode, idem.emit_for(business_key, ...) twice per payment, the second events emitted
#    after all the first ones (interleaved across messages): the same naming;
#  - the database loses everything idemd applied (claims, effects, outbox, progress: as a restore
#    from an empty backup would) and idemd, restarted, re-applies every payment by itself: the
#    events come back under exactly the ids they had;
#  - without outbox.enabled nothing names the messages: ids are random UUIDs.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --brokers 1 --topics payments:2
# shellcheck disable=SC2016 # $n are SQL parameters
row_sql='SELECT apply_twice($1, $2, $3::bigint)'
# shellcheck disable=SC2016
set_sql='WITH p AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(id, account, amount, n)), l AS (INSERT INTO ledger (payment_id, account, amount) SELECT id, account, amount FROM p ORDER BY n), e1 AS (SELECT idem.emit_for(id, '"'"'ev'"'"', account, '"'"'first '"'"' || id) FROM p), e2 AS (SELECT idem.emit_for(id, '"'"'ev'"'"', account, '"'"'second '"'"' || id) FROM p, (SELECT count(*) FROM e1) w) SELECT count(*) FROM e2'
write_cfg() { # GROUP CONSUMER MODE OUTBOX(true|false)
	local sql=$row_sql
	[ "$3" = row ] || sql=$set_sql
	idem_write_config "$IDEM_TMP/$1.yaml" "$1" "$2" --sql "$sql" --mode "$3" --max 50 \
		--outbox "enabled=$4" --outbox poll_interval_ms=50
}
write_cfg g-row c-row row true
write_cfg g-set c-set set true
write_cfg g-off c-off row false
idem_setup_db "$IDEM_TMP/g-row.yaml"
idem_psql >/dev/null <<'SQL'
CREATE FUNCTION apply_twice(p_id text, p_account text, p_amount bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ledger (payment_id, account, amount) VALUES (p_id, p_account, p_amount);
	PERFORM idem.emit('ev', p_account, 'first ' || p_id);
	PERFORM idem.emit('ev', p_account, 'second ' || p_id);
	RETURN 0;
END $$;
-- Each event with the payment it names and which of its two it is.
CREATE VIEW ev AS
SELECT o.id, o.event_id, split_part(convert_from(o.value, 'UTF8'), ' ', 2) AS payment_id,
       CASE split_part(convert_from(o.value, 'UTF8'), ' ', 1) WHEN 'first' THEN 0 ELSE 1 END
           AS ordinal
FROM idem.outbox o;
SQL
idem_produce --count 300 --dup-ratio 0.2 --seed 91

# not_named CONSUMER: events whose id is not named after their payment (and ordinal).
not_named() {
	idem_psql -c "SELECT count(*) FROM ev WHERE event_id IS DISTINCT FROM idem.event_id('emit', '$1', payment_id, ordinal::text)"
}
# run NAME: one idemd on config NAME until every payment is in the ledger and the database's
# progress reached the end of the topic, then stopped.
done_all() {
	[ "$(idem_psql -c "SELECT (SELECT count(*) FROM ledger) || ' ' || (SELECT coalesce(sum(next_offset), 0) FROM idem.partition_progress)")" = "$IDEM_UNIQUE $IDEM_PRODUCED" ]
}
run() {
	idemd_start "${1//-/_}" "$IDEM_TMP/$1.yaml"
	idem_wait_until 60 "$1: every payment applied" done_all
	idemd_stop "${1//-/_}"
}
# once CONSUMER: every payment in the ledger and claimed once.
once() {
	idem_assert_eq "$1: payments applied twice" 0 \
		"$(idem_psql -c 'SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY 1 HAVING count(*) > 1) d')"
	idem_assert_eq "$1: claims" "$IDEM_UNIQUE" \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = '$1'")"
}
# forget: the database loses everything idemd applied, as a restore from a backup taken before
# the first message would; Kafka's committed offsets (idemd's) stay.
forget() {
	idem_psql -c "TRUNCATE ledger, accounts, idem.outbox, idem.processed_messages, idem.partition_progress" >/dev/null
}

for mode in row set; do
	run "g-$mode"
	once "c-$mode"
	idem_assert_eq "$mode: events" $((2 * IDEM_UNIQUE)) "$(idem_psql -c 'SELECT count(*) FROM ev')"
	idem_assert_eq "$mode: events not named after their payment" 0 "$(not_named "c-$mode")"
	idem_psql -c "CREATE TABLE ids_$mode AS SELECT payment_id, ordinal, event_id FROM ev" >/dev/null
	forget
	run "g-$mode"
	once "c-$mode"
	idem_assert_eq "$mode: messages re-applied" "$IDEM_PRODUCED" \
		"$(idem_psql -c "SELECT sum(reapplied) FROM idem.partition_progress WHERE consumer = 'c-$mode'")"
	idem_assert_eq "$mode: events after the re-apply whose id changed" 0 \
		"$(idem_psql -c "SELECT count(*) FROM (SELECT payment_id, ordinal, event_id FROM ev EXCEPT SELECT * FROM ids_$mode) d")"
	idem_assert_eq "$mode: events after the re-apply" $((2 * IDEM_UNIQUE)) "$(idem_psql -c 'SELECT count(*) FROM ev')"
	forget
done

run g-off
idem_assert_eq "no outbox: events named after their payment" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ev WHERE event_id = idem.event_id('emit', 'c-off', payment_id, ordinal::text)")"
idem_assert_eq "no outbox: distinct random ids" $((2 * IDEM_UNIQUE)) \
	"$(idem_psql -c "SELECT count(DISTINCT event_id) FROM ev WHERE event_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4'")"
echo "ok: event ids named after their payment in row and set mode ($((2 * IDEM_UNIQUE)) each), the same after a re-apply; random without the outbox"
