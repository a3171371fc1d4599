#!/usr/bin/env bash
# Trace context through two idemd instances chained by the outbox (idemd.yaml(5) TRACE CONTEXT).
# Producer -> A (consumer a, topic orders, row mode) -> events on topic shipments -> B (consumer
# b, set mode) -> events on topic audit, replies on replies-b, dead letters on dlt-b.
#  - a message's valid W3C traceparent reaches its handler as the field traceparent: the same
#    trace, idemd's span as the parent (a new parent id), flags kept; tracestate as given;
#  - every event A's handler emits for it, and every event, reply and dead letter B makes for
#    A's event, carries a traceparent of that same trace whose parent is the span of the idemd
#    that made it (the very traceparent its handler saw), with the tracestate;
#  - a malformed traceparent, two of them, or none: the message is applied like any other
#    (nothing quarantined), its handler sees NULL, its events carry no traceparent; a handler
#    that sets a traceparent itself keeps its own.
# Checked on the outbox rows and on what the relays published to Kafka.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics "orders:2 shipments:2 audit:1 replies-b:1 dlt-b:1 own:1"
cfg_a=$IDEM_TMP/a.yaml cfg_b=$IDEM_TMP/b.yaml
# shellcheck disable=SC2016 # $n are SQL parameters
idem_write_config "$cfg_a" g-a a --route-name a --topic orders --mode row \
	--params '[business_key, traceparent, tracestate]' --sql 'SELECT a_apply($1, $2, $3)' \
	--outbox enabled=true --outbox poll_interval_ms=20
# shellcheck disable=SC2016
idem_write_config "$cfg_b" g-b b --route-name b --topic shipments --mode set \
	--key '${header:idem-outbox-id}' \
	--params '[business_key, "json:/payment_id", traceparent]' \
	--sql 'SELECT * FROM b_apply($1::text[], $2::text[], $3::text[])' \
	--route dead_letter_topic=dlt-b --route 'reply={topic: replies-b}' \
	--retry max_attempts=2 --outbox enabled=true --outbox poll_interval_ms=20
idem_setup_db "$cfg_a"
idem_psql >/dev/null <<'SQL'
CREATE TABLE a_seen (payment_id text PRIMARY KEY, traceparent text, tracestate text);
CREATE TABLE b_seen (outbox_id text PRIMARY KEY, payment_id text NOT NULL, traceparent text);
CREATE FUNCTION a_apply(p text, tp text, ts text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO a_seen VALUES (p, tp, ts);
	PERFORM idem.emit('shipments', p, jsonb_build_object('payment_id', p));
	IF p = 'own-1' THEN
		-- A handler's own traceparent is kept: idemd adds none beside it.
		PERFORM idem.emit('own', p, '{}'::jsonb, ARRAY['traceparent'],
			ARRAY['00-11111111111111111111111111111111-2222222222222222-01']);
	END IF;
	RETURN 'a:' || p;
END $$;
CREATE FUNCTION b_apply(keys text[], ids text[], tps text[])
RETURNS TABLE (business_key text, result text) LANGUAGE plpgsql AS $$
BEGIN
	IF 'bad-1' = ANY (ids) THEN
		RAISE EXCEPTION 'shipment % refused', 'bad-1';
	END IF;
	INSERT INTO b_seen SELECT * FROM unnest(keys, ids, tps);
	PERFORM idem.emit_for(k, 'audit', i, jsonb_build_object('payment_id', i))
		FROM unnest(keys, ids) AS u(k, i);
	RETURN QUERY SELECT k, 'b:' || i FROM unnest(keys, ids) AS u(k, i);
END $$;
SQL

# 30 traced payments, each its own trace (trace id t<n>, zero-padded), half with a tracestate;
# then the ones whose trace context must be ignored; then one B refuses (a dead letter).
parent=00f067aa0ba902b7
trace_of() { printf '%032x' "$((0xabc000 + $1))"; }
for i in $(seq 1 30); do
	state=()
	[ $((i % 2)) = 0 ] || state=(--header "tracestate=rojo=$i,congo=t61")
	idem_produce_one --topic orders --key "p-$i" --value "{\"payment_id\":\"p-$i\"}" \
		--header "traceparent=00-$(trace_of "$i")-$parent-01" "${state[@]}"
done
idem_produce_one --topic orders --key m-1 --value '{"payment_id":"m-1"}' \
	--header "traceparent=00-$(trace_of 99)-$parent-01x"
idem_produce_one --topic orders --key m-2 --value '{"payment_id":"m-2"}' \
	--header "traceparent=00-$(trace_of 98)-$parent-01" \
	--header "traceparent=00-$(trace_of 97)-$parent-01"
idem_produce_one --topic orders --key m-3 --value '{"payment_id":"m-3"}' \
	--header "traceparent=00-00000000000000000000000000000000-$parent-01"
idem_produce_one --topic orders --key m-4 --value '{"payment_id":"m-4"}' --header tracestate=x=1
idem_produce_one --topic orders --key m-5 --value '{"payment_id":"m-5"}'
idem_produce_one --topic orders --key own-1 --value '{"payment_id":"own-1"}' \
	--header "traceparent=00-$(trace_of 50)-$parent-01"
idem_produce_one --topic orders --key bad-1 --value '{"payment_id":"bad-1"}' \
	--header "traceparent=00-$(trace_of 40)-$parent-00" --header "tracestate=k=bad"

idemd_start a "$cfg_a"
idemd_start b "$cfg_b"
done_b() { [ "$(idem_psql -c "SELECT count(*) FROM b_seen")" = 36 ] &&
	[ "$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE consumer = 'b'")" = 1 ]; }
idem_wait_until 120 "B applied 36 shipments and quarantined one" done_b
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
idem_wait_until 60 "outboxes drained" drained
idemd_stop b
idemd_stop a

idem_assert_eq "A applied all 37, quarantined none" "37 0" \
	"$(idem_psql -c "SELECT (SELECT count(*) FROM a_seen) || ' ' || (SELECT count(*) FROM idem.quarantine WHERE consumer = 'a')")"

# What each handler saw: the producer's trace, a new parent (the span of the idemd that ran it),
# the flags as sent; A and B on one message have different spans.
idem_assert_eq "A's traceparent: the producer's trace, A's span" 0 \
	"$(idem_psql -c "SELECT count(*) FROM a_seen WHERE payment_id LIKE 'p-%' AND traceparent !~ ('^00-' || lpad(to_hex(x'abc000'::int + substr(payment_id, 3)::int), 32, '0') || '-[0-9a-f]{16}-01\$') OR split_part(traceparent, '-', 3) = '$parent'")"
idem_assert_eq "A's tracestate as sent, odd payments only" "15 15" \
	"$(idem_psql -c "SELECT count(*) FILTER (WHERE tracestate = 'rojo=' || substr(payment_id, 3) || ',congo=t61') || ' ' || count(*) FILTER (WHERE tracestate IS NULL) FROM a_seen WHERE payment_id LIKE 'p-%'")"
idem_assert_eq "ignored trace context: NULL for m-1..m-5" "5" \
	"$(idem_psql -c "SELECT count(*) FROM a_seen WHERE payment_id LIKE 'm-%' AND traceparent IS NULL AND tracestate IS NULL")"
idem_assert_eq "B's traceparent: the same trace, B's span" 0 \
	"$(idem_psql -c "SELECT count(*) FROM b_seen b JOIN a_seen a USING (payment_id) WHERE a.traceparent IS NOT NULL AND (split_part(b.traceparent, '-', 2) <> split_part(a.traceparent, '-', 2) OR split_part(b.traceparent, '-', 3) = split_part(a.traceparent, '-', 3) OR split_part(b.traceparent, '-', 4) <> split_part(a.traceparent, '-', 4))")"
idem_assert_eq "B sees NULL where A's message had none" "5" \
	"$(idem_psql -c "SELECT count(*) FROM b_seen b JOIN a_seen a USING (payment_id) WHERE a.traceparent IS NULL AND b.traceparent IS NULL")"

# The outbox: every row's traceparent is its handler's (the one its message gave it), for A's
# events, B's events, B's replies; none where the message had none.
idem_psql >/dev/null <<'SQL'
CREATE VIEW ev AS
SELECT o.topic, convert_from(o.key, 'UTF8') AS k,
	(SELECT convert_from(v, 'UTF8') FROM unnest(o.header_names, o.header_values) h(n, v) WHERE n = 'traceparent') AS tp,
	(SELECT convert_from(v, 'UTF8') FROM unnest(o.header_names, o.header_values) h(n, v) WHERE n = 'tracestate') AS ts,
	(SELECT count(*) FROM unnest(o.header_names) n WHERE n = 'traceparent') AS n_tp,
	(SELECT convert_from(v, 'UTF8') FROM unnest(o.header_names, o.header_values) h(n, v) WHERE n = 'idem-business-key') AS reply_to,
	o.header_names
FROM idem.outbox o;
SQL
idem_assert_eq "A's events: one per payment, each with A's traceparent and tracestate" "37 0" \
	"$(idem_psql -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE e.tp IS DISTINCT FROM a.traceparent OR e.ts IS DISTINCT FROM a.tracestate OR e.n_tp > 1) FROM ev e JOIN a_seen a ON a.payment_id = e.k WHERE e.topic = 'shipments'")"
idem_assert_eq "B's events: one per shipment, each with B's traceparent" "36 0" \
	"$(idem_psql -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE e.tp IS DISTINCT FROM b.traceparent OR e.n_tp > 1) FROM ev e JOIN b_seen b ON b.payment_id = e.k WHERE e.topic = 'audit'")"
idem_assert_eq "B's replies: one per shipment, each with B's traceparent" "36 0" \
	"$(idem_psql -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE e.tp IS DISTINCT FROM b.traceparent OR e.n_tp > 1) FROM ev e JOIN b_seen b ON b.outbox_id = e.reply_to WHERE e.topic = 'replies-b'")"
idem_assert_eq "a handler's own traceparent is kept, alone" \
	"00-11111111111111111111111111111111-2222222222222222-01 1" \
	"$(idem_psql -c "SELECT tp || ' ' || n_tp FROM ev WHERE topic = 'own'")"
# The dead letter: the refused shipment's trace, a parent that is neither the producer's nor
# A's (B's span), flags kept; A's traceparent on the message is replaced, not repeated.
a_bad=$(idem_psql -c "SELECT traceparent FROM a_seen WHERE payment_id = 'bad-1'")
idem_assert_eq "dead letter: one, with the trace and B's span" "1 1 true true" \
	"$(idem_psql -c "SELECT count(*) || ' ' || max(n_tp) || ' ' || bool_and(tp ~ ('^00-' || lpad(to_hex(x'abc000'::int + 40), 32, '0') || '-[0-9a-f]{16}-00\$')) || ' ' || bool_and(split_part(tp, '-', 3) NOT IN ('$parent', split_part('$a_bad', '-', 3))) FROM ev WHERE topic = 'dlt-b'")"
idem_assert_eq "dead letter: the message's tracestate" "t" \
	"$(idem_psql -c "SELECT bool_and(ts = 'k=bad') FROM ev WHERE topic = 'dlt-b'")"

# And in Kafka, as the relays published them: each traced payment's trace id on its A event,
# its B event and its B reply; the dead letter's on it.
for t in shipments audit replies-b dlt-b; do
	"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic "$t" --timeout 60 \
		>"$IDEM_TMP/$t.tsv" || idem_fail "cannot read topic $t"
done
for i in $(seq 1 30); do
	tid=$(trace_of "$i")
	for t in shipments audit replies-b; do
		n=$(grep -c "traceparent=00-$tid-" "$IDEM_TMP/$t.tsv" || true)
		idem_assert_eq "p-$i's trace on topic $t" 1 "$n"
	done
done
idem_assert_eq "bad-1's trace on the dead-letter topic" 1 \
	"$(grep -c "traceparent=00-$(trace_of 40)-" "$IDEM_TMP/dlt-b.tsv" || true)"
# 30 payments, own-1 (its A event), bad-1 (its A event only: B refused it).
for t in shipments:32 audit:31 replies-b:31 dlt-b:1; do
	idem_assert_eq "no other trace on topic ${t%:*}" "${t#*:}" \
		"$(grep -c 'traceparent=' "$IDEM_TMP/${t%:*}.tsv" || true)"
done
idem_log "trace context: 30 traces through A and B, 6 messages without, one dead letter"
