#!/usr/bin/env bash
# Replies (routes[].reply): each applied payment's stored result (the balance the handler
# returned) goes to a reply topic through the outbox, in the transaction of its claim. Payments
# are re-sent upstream (another copy of the same payment, possibly to another partition).
#  - reply.duplicates: false: one reply per payment, none for its re-sends;
#  - reply.duplicates: true: the first application and every re-send get a reply, all with the
#    result stored with the first (the retrying producer gets the original answer), the re-sends'
#    marked idem-repeat=true; redeliveries and replays get none;
#  - the same in set mode, the results being the (business key, result) rows of the statement;
#  - a real redelivery: idemd (reply.duplicates: true) applies everything, is SIGKILLed before
#    any offset reached Kafka, and the next instance is handed every message again; no message
#    gets a second reply: the reply topic holds what it held before, each message answered once.
# Counted on the reply topics with idem-kafkatool; each reply's value is its claim's result.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics "payments:4 replies-once:2 replies-all:2 replies-set:2 replies-red:2"
cfg=$IDEM_TMP/idemd.yaml
write_cfg() { # GROUP CONSUMER REPLY
	idem_write_config "$cfg" "$1" "$2" --max 50 --mode row \
		--sql "$IDEM_PAYMENTS_SQL" --route "reply=$3" \
		--outbox enabled=true --outbox poll_interval_ms=20
}

# A reply needs the relay: refused without outbox.enabled, naming the route.
idem_write_config "$cfg" g-x payments --route 'reply={topic: replies-once}'
if out=$("$IDEM_BIN/idemd" -c "$cfg" --check-config 2>&1); then
	idem_fail "a route with a reply and no outbox was accepted"
fi
grep -q "route 'payments' has 'reply' but outbox.enabled is false" <<<"$out" ||
	idem_fail "unexpected error for a reply without outbox: $out"

write_cfg g-once c-once '{topic: replies-once}'
idem_setup_db "$cfg"
IDEM_ACCOUNTS=10 idem_produce --count 1200 --dup-ratio 0.25 --seed 17
idem_log "produced $IDEM_PRODUCED payments, $IDEM_UNIQUE unique"

# reply.duplicates: false.
idemd_start a "$cfg"
idem_wait_done g-once 120
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
idem_wait_until 60 "outbox drained" drained
idemd_stop a
idem_check_exactly_once c-once

# What reached a reply topic, loaded into table $1: partition, offset, key, value, headers.
load_topic() { # TABLE TOPIC
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic "$2" \
		--timeout 60 >"$IDEM_TMP/$1.tsv" || idem_fail "cannot read topic $2"
	idem_psql >/dev/null <<SQL
CREATE TABLE $1 (part int, off bigint, key text, value text, headers text);
\\copy $1 FROM '$IDEM_TMP/$1.tsv'
ALTER TABLE $1 ADD COLUMN outbox_id text, ADD COLUMN bkey text, ADD COLUMN repeat text,
	ADD COLUMN src text, ADD COLUMN row_id bigint;
UPDATE $1 SET outbox_id = substring(headers from 'idem-outbox-id=([^,]+)'),
	bkey = substring(headers from '(?:^|,)idem-business-key=([^,]*)'),
	repeat = substring(headers from '(?:^|,)idem-repeat=([^,]*)'),
	src = substring(headers from '(?:^|,)idem-source-topic=([^,]*)') || '/' ||
		substring(headers from '(?:^|,)idem-source-partition=([^,]*)') || '/' ||
		substring(headers from '(?:^|,)idem-source-offset=([^,]*)');
UPDATE $1 SET row_id = o.id FROM idem.outbox o WHERE o.event_id = $1.outbox_id;
SQL
}
# check_replies TABLE CONSUMER: every reply is one of the consumer's claims, keyed by the business
# key, with the claim's result as value, the source header naming a message of that payment.
check_replies() {
	idem_assert_eq "$1: replies published twice" 0 \
		"$(idem_psql -c "SELECT count(*) FROM (SELECT outbox_id FROM $1 GROUP BY 1 HAVING count(*) > 1) d")"
	# Named after the message answered (its log, topic, partition and offset), so the same reply
	# after a restore has the same id.
	idem_assert_eq "$1: replies whose idem-outbox-id is not named after their message" 0 \
		"$(idem_psql -c "SELECT count(*) FROM $1 r WHERE r.row_id IS NULL OR r.outbox_id IS DISTINCT FROM idem.event_id('reply', '$2', idem.log_of('$2', split_part(r.src, '/', 1), split_part(r.src, '/', 2)::int), split_part(r.src, '/', 1), split_part(r.src, '/', 2), split_part(r.src, '/', 3))")"
	idem_assert_eq "$1: replies whose key, value or header is not their claim's" 0 \
		"$(idem_psql -c "SELECT count(*) FROM $1 r LEFT JOIN idem.claims_named p ON p.consumer = '$2' AND p.business_key = r.bkey WHERE p.business_key IS NULL OR r.key <> r.bkey OR r.value IS DISTINCT FROM p.result OR r.src IS NULL")"
	idem_assert_eq "$1: replies whose source is not that payment" 0 \
		"$(idem_psql -c "SELECT count(*) FROM $1 r WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE e.payment_id = r.bkey)")"
	idem_assert_eq "$1: payments without a first reply" 0 \
		"$(idem_psql -c "SELECT count(*) FROM idem.claims_named p WHERE p.consumer = '$2' AND NOT EXISTS (SELECT 1 FROM $1 r WHERE r.bkey = p.business_key AND r.repeat = 'false')")"
	idem_assert_eq "$1: first replies" "$IDEM_UNIQUE" \
		"$(idem_psql -c "SELECT count(*) FROM $1 WHERE repeat = 'false'")"
	idem_assert_eq "$1: payments with two first replies" 0 \
		"$(idem_psql -c "SELECT count(*) FROM (SELECT bkey FROM $1 WHERE repeat = 'false' GROUP BY 1 HAVING count(*) > 1) d")"
}
load_topic once replies-once
check_replies once c-once
upstream=$(idem_psql -c "SELECT sum(dup_upstream) FROM idem.partition_progress WHERE consumer = 'c-once'")
[ "$upstream" -gt 0 ] || idem_fail "no upstream re-sends: nothing tested"
idem_assert_eq "once: replies (one per payment, none for $upstream re-sends)" "$IDEM_UNIQUE" \
	"$(idem_psql -c 'SELECT count(*) FROM once')"

# reply.duplicates: true, the same payments read again by another consumer from scratch (the
# example tables emptied: the handler inserts each payment once).
idem_psql -c 'TRUNCATE ledger, accounts' >/dev/null
write_cfg g-all c-all '{topic: replies-all, duplicates: true}'
idemd_start b "$cfg"
idem_wait_done g-all 120
idem_wait_until 60 "outbox drained" drained
idemd_stop b
idem_check_exactly_once c-all
load_topic allr replies-all
check_replies allr c-all
upstream=$(idem_psql -c "SELECT sum(dup_upstream) FROM idem.partition_progress WHERE consumer = 'c-all'")
dups=$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress WHERE consumer = 'c-all'")
idem_assert_eq "all: duplicates are all upstream re-sends" "$dups" "$upstream"
idem_assert_eq "all: replies (first + repeats)" "$IDEM_UNIQUE + $upstream" \
	"$(idem_psql -c "SELECT count(*) FILTER (WHERE repeat = 'false') || ' + ' || count(*) FILTER (WHERE repeat = 'true') FROM allr")"
idem_assert_eq "all: payments whose replies differ" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT bkey FROM allr GROUP BY 1 HAVING count(DISTINCT value) > 1) d')"
# A repeat comes from a later message than the first reply's.
idem_assert_eq "all: repeats not after their first" 0 \
	"$(idem_psql -c "SELECT count(*) FROM allr r JOIN allr f ON f.bkey = r.bkey AND f.repeat = 'false' WHERE r.repeat = 'true' AND r.row_id < f.row_id")"

# Set mode: results are the (business key, result) rows the set statement returns, and the
# replies carry them; re-sends get the stored one again.
idem_psql -c 'TRUNCATE ledger, accounts' >/dev/null
set_sql='WITH p AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(id, account, amount)), l AS (INSERT INTO ledger (payment_id, account, amount) SELECT id, account, amount::bigint FROM p) SELECT id, '"'"'paid '"'"' || amount FROM p'
idem_write_config "$cfg" g-set c-set --max 50 --mode set --sql "$set_sql" \
	--route 'reply={topic: replies-set, duplicates: true}' \
	--outbox enabled=true --outbox poll_interval_ms=20
idemd_start s "$cfg"
idem_wait_done g-set 120
idem_wait_until 60 "outbox drained" drained
idemd_stop s
load_topic setr replies-set
check_replies setr c-set
set_up=$(idem_psql -c "SELECT sum(dup_upstream) FROM idem.partition_progress WHERE consumer = 'c-set'")
idem_assert_eq "set: replies (first + repeats)" "$IDEM_UNIQUE + $set_up" \
	"$(idem_psql -c "SELECT count(*) FILTER (WHERE repeat = 'false') || ' + ' || count(*) FILTER (WHERE repeat = 'true') FROM setr")"
idem_assert_eq "set: replies without the set statement's result" 0 \
	"$(idem_psql -c "SELECT count(*) FROM setr WHERE value NOT LIKE 'paid %'")"
write_cfg g-all c-all '{topic: replies-all, duplicates: true}'

# A replay reads the payments again: duplicates of the replay kind get no reply.
before=$(idem_psql -c 'SELECT count(*) FROM idem.outbox')
"$IDEM_BIN/idemctl" -c "$cfg" replay --topic payments --to-offset 0 >/dev/null ||
	idem_fail "idemctl replay failed"
idemd_start c "$cfg"
replayed() { [ "$(idem_psql -c "SELECT sum(dup_replay) FROM idem.partition_progress WHERE consumer = 'c-all'")" -gt 0 ]; }
idem_wait_until 120 "replay read" replayed
idem_wait_done g-all 120
idemd_stop c
idem_assert_eq "replies of the replay" "$before" "$(idem_psql -c 'SELECT count(*) FROM idem.outbox')"

# A redelivery: Kafka delivers again messages whose transactions committed. No offset reaches
# Kafka before the SIGKILL (the first automatic commit would be in 10 min).
idem_psql -c 'TRUNCATE ledger, accounts' >/dev/null
idem_write_config "$cfg" g-red c-red --max 50 --mode row --sql "$IDEM_PAYMENTS_SQL" \
	--route 'reply={topic: replies-red, duplicates: true}' \
	--outbox enabled=true --outbox poll_interval_ms=20 --kafka-prop auto.commit.interval.ms=600000
consumed_is() { [ "$(idem_psql -c "SELECT coalesce(sum(consumed), 0) FROM idem.partition_progress WHERE consumer = 'c-red'")" = "$1" ]; }
idemd_start r1 "$cfg"
idem_wait_until 120 "first delivery committed" consumed_is "$IDEM_PRODUCED"
idem_wait_until 60 "outbox drained" drained
idemd_kill9 r1
committed=$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-red \
	--topic payments | sed -n 's/^total committed=\([0-9-]*\).*/\1/p')
[ -n "$committed" ] && [ "$committed" -le 0 ] ||
	idem_fail "Kafka has offsets committed for g-red ($committed) before the SIGKILL: nothing would be redelivered"
load_topic red1 replies-red
check_replies red1 c-red
replies1=$(idem_psql -c 'SELECT count(*) FROM red1')
outbox1=$(idem_psql -c "SELECT count(*) FROM idem.outbox WHERE topic = 'replies-red'")
up1=$(idem_psql -c "SELECT sum(dup_upstream) FROM idem.partition_progress WHERE consumer = 'c-red'")
idem_assert_eq "red: replies of the first delivery (first + repeats)" "$((IDEM_UNIQUE + up1))" "$replies1"
# idemd resumes from the database's position, so a SIGKILL alone re-reads only what was in
# flight; Kafka delivers committed messages again when that position cannot be used (Postgres
# unreachable at the assignment: idemd starts from Kafka's committed offset, here none) or when
# another instance still holds the partition. Put the position back as such a start finds it.
idem_psql -c "UPDATE idem.partition_progress SET next_offset = 0 WHERE consumer = 'c-red'" >/dev/null
idemd_start r2 "$cfg"
# (Kafka's commit stays behind for 10 min: the database's counters tell when it is done.)
idem_wait_until 120 "redelivery committed" consumed_is $((2 * IDEM_PRODUCED))
idem_wait_until 60 "outbox drained" drained
idemd_stop r2
idem_check_accounting c-red
idem_assert_eq "red: redelivery duplicates (each claimed message delivered again)" "$IDEM_UNIQUE" \
	"$(idem_psql -c "SELECT sum(dup_redelivery) FROM idem.partition_progress WHERE consumer = 'c-red'")"
idem_assert_eq "red: ledger rows after the redelivery" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
load_topic red2 replies-red
check_replies red2 c-red
idem_assert_eq "red: outbox rows after the redelivery" "$outbox1" \
	"$(idem_psql -c "SELECT count(*) FROM idem.outbox WHERE topic = 'replies-red'")"
idem_assert_eq "red: replies in the topic after the redelivery" "$replies1" "$(idem_psql -c 'SELECT count(*) FROM red2')"
idem_assert_eq "red: messages answered twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT src FROM red2 GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "red: replies not already there before the redelivery" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM red2 r WHERE NOT EXISTS (SELECT 1 FROM red1 o WHERE o.outbox_id = r.outbox_id AND o.part = r.part AND o.off = r.off)')"
echo "ok: replies: payments=$IDEM_PRODUCED unique=$IDEM_UNIQUE re-sends=$upstream; duplicates:false $IDEM_UNIQUE replies, duplicates:true $IDEM_UNIQUE + $upstream, same result per payment; after a redelivery of all $IDEM_PRODUCED messages still $replies1 replies"
