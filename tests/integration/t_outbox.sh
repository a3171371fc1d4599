#!/usr/bin/env bash
# The transactional outbox: a handler emits one event per payment with idem.emit() in the
# transaction of the claim and the effect, and the relay publishes it to Kafka.
#  - a handler that emits and then fails leaves no outbox row and publishes nothing;
#  - each event reaches Kafka once, with its own headers and idem-outbox-id (the row's event id,
#    named after the payment that emitted it: consumer, business key, ordinal);
#  - per key (the account), events arrive in outbox id order;
#  - every row is marked published, and the purge removes published rows after outbox.keep.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics "payments:4 payment-applied:4"
cfg=$IDEM_TMP/idemd.yaml
write_cfg() {
	idem_write_config "$cfg" g-outbox payments --max 50 --route-name pay \
		--sql 'SELECT apply_and_emit($1, $2, $3::bigint)' --mode row \
		--outbox enabled=true --outbox poll_interval_ms=20 --outbox batch=100 "$@"
}
port=$(idem_free_port)
write_cfg --outbox keep=1h --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
idem_psql >/dev/null <<'SQL'
CREATE FUNCTION apply_and_emit(p_id text, p_account text, p_amount bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	b bigint;
BEGIN
	INSERT INTO ledger (payment_id, account, amount) VALUES (p_id, p_account, p_amount);
	INSERT INTO accounts (id, balance) VALUES (p_account, p_amount)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance
		RETURNING balance INTO b;
	PERFORM idem.emit('payment-applied', p_account,
		jsonb_build_object('payment_id', p_id, 'account', p_account, 'amount', p_amount),
		ARRAY['source', 'empty'], ARRAY[p_id, '']);
	-- Emitted, then refused: the event must go with the rest of the transaction.
	IF p_account = 'acct-blocked' THEN
		RAISE EXCEPTION 'account % is blocked', p_account;
	END IF;
	RETURN b;
END $$;
SQL

# The bytes as given, NULLs as NULLs; a header named idem-outbox-id is the relay's alone.
idem_psql -c "BEGIN; SELECT idem.emit('x', NULL::bytea, '\\x00ff'::bytea); ROLLBACK" >/dev/null
idem_assert_eq "rolled-back emit leaves no row" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.outbox')"
if idem_psql -c "SELECT idem.emit('x', 'k', 'v', ARRAY['idem-outbox-id'], ARRAY['1'])" >/dev/null 2>&1; then
	idem_fail "idem.emit accepted a header named idem-outbox-id"
fi

IDEM_ACCOUNTS=12 idem_produce --count 1500 --dup-ratio 0.2 --seed 71
idem_produce_one --key blocked-1 \
	--value '{"payment_id":"blocked-1","account":"acct-blocked","amount":5}'
idemd_start a "$cfg"
idem_wait_done g-outbox 120
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
emptied() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox')" = 0 ]; }
idem_wait_until 60 "outbox drained" drained

# The relay's metrics: everything published by this relay, nothing pending.
metric() { curl -fsS "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
published_all() { [ "$(metric idemd_outbox_published_total)" = "$IDEM_UNIQUE" ]; }
idem_wait_until 30 "idemd_outbox_published_total reaches $IDEM_UNIQUE" published_all
pending_zero() { [ "$(metric idemd_outbox_pending)" = 0 ]; }
idem_wait_until 30 "idemd_outbox_pending back to 0" pending_zero
idem_assert_eq "idemd_outbox_errors_total" 0 "$(metric idemd_outbox_errors_total)"
# promtool comes with the prometheus package (tests/install-deps.sh installs it): without it the
# exposition format would go unchecked, so its absence is a failure, not a skip.
command -v promtool >/dev/null ||
	idem_fail "promtool not found: install the prometheus package (tests/install-deps.sh)"
curl -fsS "http://127.0.0.1:$port/metrics" >"$IDEM_TMP/outbox.prom"
promtool check metrics <"$IDEM_TMP/outbox.prom" ||
	idem_fail "promtool refuses /metrics: $(promtool check metrics <"$IDEM_TMP/outbox.prom" 2>&1 | head -5)"

idem_assert_eq "ledger rows" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "blocked payment quarantined" 1 \
	"$(idem_psql -c "SELECT count(*) FROM idem.quarantine WHERE business_key = 'blocked-1'")"
idem_assert_eq "outbox rows (one per applied payment)" "$IDEM_UNIQUE" \
	"$(idem_psql -c 'SELECT count(*) FROM idem.outbox')"
idem_assert_eq "outbox rows of the failed handler" 0 \
	"$(idem_psql -c "SELECT count(*) FROM idem.outbox WHERE convert_from(value, 'UTF8')::jsonb->>'payment_id' = 'blocked-1'")"

# What reached Kafka, loaded into a table: partition, offset, key, value, headers.
"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payment-applied \
	--timeout 60 >"$IDEM_TMP/events.tsv" || idem_fail "cannot read topic payment-applied"
idem_psql >/dev/null <<SQL
CREATE TABLE ev (part int, off bigint, key text, value text, headers text);
\\copy ev FROM '$IDEM_TMP/events.tsv'
ALTER TABLE ev ADD COLUMN outbox_id text, ADD COLUMN payment_id text, ADD COLUMN source text;
UPDATE ev SET outbox_id = substring(headers from 'idem-outbox-id=([^,]+)'),
	payment_id = value::jsonb->>'payment_id',
	source = substring(headers from '(?:^|,)source=([^,]*)');
SQL
idem_assert_eq "events in Kafka" "$IDEM_UNIQUE" "$(idem_psql -c 'SELECT count(*) FROM ev')"
idem_assert_eq "events published twice" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT outbox_id FROM ev GROUP BY 1 HAVING count(*) > 1) d')"
idem_assert_eq "events whose idem-outbox-id is not their row" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ev LEFT JOIN idem.outbox o ON o.event_id = ev.outbox_id WHERE o.id IS NULL OR convert_from(o.value, 'UTF8') <> ev.value OR convert_from(o.key, 'UTF8') <> ev.key")"
# Named after the message that emitted it, so a restore that makes it apply again emits the
# same id (sql/0007_restore.sql): its first event, consumer payments, business key payment_id.
idem_assert_eq "events whose idem-outbox-id is not named after their payment" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ev WHERE outbox_id IS DISTINCT FROM idem.event_id('emit', 'payments', payment_id, '0')")"
idem_assert_eq "events without their headers" 0 \
	"$(idem_psql -c "SELECT count(*) FROM ev WHERE source IS DISTINCT FROM payment_id OR headers NOT LIKE '%,empty=,%'")"
idem_assert_eq "payments without their event" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM ledger l WHERE NOT EXISTS (SELECT 1 FROM ev WHERE ev.payment_id = l.payment_id)')"
# Per key, the order in Kafka is the outbox's: the order in which the handlers took the
# account's row lock and emitted. (Not necessarily the ledger's: a payment re-sent to another
# partition may be applied from there, concurrently with its account's next payment, and the
# ledger ids are drawn before the account's lock is taken.)
idem_assert_eq "events out of outbox order within a key" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT o.id < lag(o.id) OVER (PARTITION BY ev.key ORDER BY part, off) AS bad FROM ev JOIN idem.outbox o ON o.event_id = ev.outbox_id) x WHERE bad')"
idem_assert_eq "keys in more than one partition" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM (SELECT key FROM ev GROUP BY 1 HAVING count(DISTINCT part) > 1) x')"

# Two relays on one database (two idemd): one publishes at a time, so without a crash every
# row reaches Kafka exactly once. Then the purge: published rows older than outbox.keep go.
idemd_stop a
idem_psql -c "INSERT INTO idem.outbox (topic, key, value) SELECT 'payment-applied', convert_to('late-' || (i % 7), 'UTF8'), convert_to('v' || i, 'UTF8') FROM generate_series(1, 3000) AS i" >/dev/null
write_cfg --outbox keep=1s --outbox purge_interval=1s
idemd_start a "$cfg"
idemd_start b "$cfg"
idem_wait_until 60 "published rows purged" emptied
idemd_stop a
idemd_stop b
"$IDEM_BIN/idem-kafkatool" consume --brokers "$IDEM_BROKERS" --topic payment-applied \
	--timeout 60 | grep $'\tlate-' >"$IDEM_TMP/late.tsv" || true
idem_assert_eq "late rows in Kafka" 3000 "$(wc -l <"$IDEM_TMP/late.tsv")"
idem_assert_eq "late rows published twice" 0 "$(cut -f4 "$IDEM_TMP/late.tsv" | sort | uniq -d | wc -l)"
idem_assert_eq "late rows out of order within a key" 0 \
	"$(sort -t$'\t' -k1,1n -k2,2n "$IDEM_TMP/late.tsv" | awk -F'\t' '{ v = substr($4, 2) + 0; if ($3 in last && v < last[$3]) bad++; last[$3] = v } END { print bad + 0 }')"
echo "ok: outbox: payments=$IDEM_PRODUCED unique=$IDEM_UNIQUE events=$IDEM_UNIQUE, failed handler emitted nothing, per-key order kept, two relays published 3000 rows once each, purge done"
