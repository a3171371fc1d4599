#!/usr/bin/env bash
# A database at schema version 5 upgrades to the latest with `idemctl migrate`, and the claim
# lookups keep their answers: version 6 replaces the body of idem.claims_of() (a probe per key
# in every plan). Version 7 (sql/0007_restore.sql) adds the database's identity, the re-apply
# columns of idem.partition_progress and the outbox's event ids: a row written before it keeps
# its numeric id as its event id (a relay may have sent it already under that id). A version-5
# database is made by putting version 5's functions back, undoing version 7 and forgetting both;
# existing claims are then read and results stored through the upgraded functions, the same as
# before. Version 8 (sql/0008_positions.sql) adds the log a position is in; a row of before keeps
# the reply ids of version 7. Version 11 (sql/0011_claim_layout.sql) builds the claims' table
# again with its fixed-width columns first: the claims, their results, a role's grant and a
# storage parameter survive it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_tmp_init
idem_pg_start
cfg=$IDEM_TMP/idemd.yaml
IDEM_BROKERS=127.0.0.1:9 # the configuration needs brokers; idemctl migrate never contacts them
idem_write_config "$cfg" g-upgrade payments
"$IDEM_BIN/idemctl" -c "$cfg" migrate >/dev/null
latest=$(idem_psql -c "SELECT max(version) FROM idem.schema_migrations")
[ "$latest" -ge 6 ] || idem_fail "schema version $latest after migrate: version 6 missing"

# Back to version 5: its function definitions, and no record of anything later. Version 11
# undone first (version 1's column order, topics by name), with a role's grant and a storage
# parameter of the operator's.
idem_claims_before_v11
idem_psql -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE ROLE idem_upgrade_reader;
GRANT INSERT ON idem.processed_messages TO idem_upgrade_reader;
GRANT SELECT ON idem.processed_messages TO idem_upgrade_reader;
ALTER TABLE idem.processed_messages SET (autovacuum_vacuum_scale_factor = 0.01);
SQL
sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/' "$IDEM_SRC/sql/0005_key_lookups.sql" |
	idem_psql -v ON_ERROR_STOP=1 >/dev/null
# Versions 7 and 8 undone: idem.emit() as version 3 made it, and none of 7's or 8's objects.
sed -n '/^CREATE FUNCTION idem.emit(topic text, key bytea/,/^\$\$;/p' "$IDEM_SRC/sql/0003_outbox.sql" |
	sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/' | idem_psql -v ON_ERROR_STOP=1 >/dev/null
idem_psql -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
DROP FUNCTION idem.log_of(text, text, integer);
ALTER TABLE idem.partition_progress DROP COLUMN kafka_cluster, DROP COLUMN log_epoch,
	DROP COLUMN first_offset, DROP COLUMN group_id;
DROP FUNCTION idem.emit_for(text, text, text, jsonb, text[], text[]);
DROP FUNCTION idem.emit_for(text, text, text, text, text[], text[]);
DROP FUNCTION idem.emit_for(text, text, bytea, bytea, text[], bytea[]);
DROP FUNCTION idem.emit_event(text, text, bytea, bytea, text[], bytea[]);
DROP FUNCTION idem.event_id(text[]);
ALTER TABLE idem.outbox DROP COLUMN event_id;
ALTER TABLE idem.partition_progress DROP COLUMN reapply_to, DROP COLUMN reapplied;
DROP TABLE idem.database_identity;
SQL
idem_psql -c "DELETE FROM idem.schema_migrations WHERE version > 5" >/dev/null
columns() {
	idem_psql -c "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'idem.processed_messages'::regclass AND attnum > 0 AND NOT attisdropped"
}
idem_assert_eq "version 1's column order" \
	"consumer,business_key,topic,partition,offset,payload_hash,result,processed_at" "$(columns)"
old_event=$(idem_psql -c "SELECT idem.emit('t', 'k', 'before version 7')")
idem_psql -c "INSERT INTO idem.partition_progress (consumer, topic, partition, next_offset) VALUES ('payments', 'payments', 3, 43)" >/dev/null
lateral() {
	idem_psql -c "SELECT prosrc ~ 'LATERAL' FROM pg_proc WHERE oid = 'idem.claims_of'::regproc"
}
idem_assert_eq "version 5's claims_of" f "$(lateral)"
idem_psql -c "INSERT INTO idem.processed_messages (consumer, business_key, topic, partition, \"offset\", payload_hash) VALUES ('payments', 'k-1', 'payments', 3, 41, '\\x0a0b'), ('payments', 'k-2', 'payments', 3, 42, NULL), ('other', 'k-1', 'payments', 0, 7, NULL)" >/dev/null
lookup() {
	idem_psql -F ' ' -c "SELECT business_key, topic, partition, \"offset\", coalesce(payload_hash, '-'), coalesce(result, '-') FROM idem.claims_of('payments', ARRAY['k-2', 'k-1', 'k-1', 'k-9']) ORDER BY 1" | tr '\n' ';'
}
store() {
	idem_psql -c "SELECT idem.store_results('payments', ARRAY['k-1', 'k-9'], ARRAY['$1', 'x'])"
}
idem_assert_eq "stored as version 5" 1 "$(store r5)"
before=$(lookup)
idem_assert_eq "looked up as version 5" "k-1 payments 3 41 0a0b r5;k-2 payments 3 42 - -;" "$before"

"$IDEM_BIN/idemctl" -c "$cfg" migrate >/dev/null
idem_assert_eq "schema version after the upgrade" "$latest" \
	"$(idem_psql -c "SELECT max(version) FROM idem.schema_migrations")"
idem_assert_eq "version 6's claims_of" t "$(lateral)"
# Version 11's column order, with version 13's consumer by number.
idem_assert_eq "version 13's column order" \
	"processed_at,offset,partition,topic_id,consumer_id,business_key,payload_hash,result" "$(columns)"
idem_assert_eq "the claims' consumers numbered" "other payments" \
	"$(idem_psql -c "SELECT string_agg(name, ' ' ORDER BY name) FROM idem.claim_consumers")"
idem_assert_eq "version 13's grants on the consumers and their sequence" "t t" \
	"$(idem_psql -F ' ' -c "SELECT has_table_privilege('idem_upgrade_reader', 'idem.claim_consumers', 'SELECT, INSERT'), has_sequence_privilege('idem_upgrade_reader', pg_get_serial_sequence('idem.claim_consumers', 'id'), 'USAGE')")"
idem_assert_eq "the grants kept, and given on the topics, their sequence and the view" "t t t t t" \
	"$(idem_psql -F ' ' -c "SELECT has_table_privilege('idem_upgrade_reader', 'idem.processed_messages', 'SELECT'), has_table_privilege('idem_upgrade_reader', 'idem.processed_messages', 'INSERT'), has_table_privilege('idem_upgrade_reader', 'idem.claim_topics', 'SELECT, INSERT'), has_sequence_privilege('idem_upgrade_reader', pg_get_serial_sequence('idem.claim_topics', 'id'), 'USAGE'), has_table_privilege('idem_upgrade_reader', 'idem.claims_named', 'SELECT')")"
idem_assert_eq "the claims' topics numbered" "payments" \
	"$(idem_psql -c "SELECT string_agg(name, ' ') FROM idem.claim_topics")"
idem_assert_eq "the storage parameter kept" "{autovacuum_vacuum_scale_factor=0.01}" \
	"$(idem_psql -c "SELECT reloptions FROM pg_class WHERE oid = 'idem.processed_messages'::regclass")"
# Version 12: no index on processed_at (retention sweeps the table).
idem_assert_eq "the indexes rebuilt, the one on processed_at dropped" "processed_messages_pkey" \
	"$(idem_psql -c "SELECT string_agg(indexrelid::regclass::text, ' ' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'idem.processed_messages'::regclass" | sed 's/idem\.//g')"
idem_assert_eq "looked up after the upgrade" "$before" "$(lookup)"
idem_assert_eq "stored after the upgrade" 1 "$(store r6)"
idem_assert_eq "the other consumer's claim untouched" "-" \
	"$(idem_psql -c "SELECT coalesce(result, '-') FROM idem.claims_named WHERE consumer = 'other'")"
idem_assert_eq "looked up after storing" "k-1 payments 3 41 0a0b r6;k-2 payments 3 42 - -;" "$(lookup)"
# Version 7 on existing rows.
idem_assert_eq "an event from before version 7 keeps its id" "$old_event" \
	"$(idem_psql -c "SELECT event_id FROM idem.outbox WHERE id = $old_event")"
idem_assert_eq "progress rows: nothing re-applied" "0 true" \
	"$(idem_psql -c "SELECT reapplied || ' ' || (reapply_to IS NULL) FROM idem.partition_progress WHERE partition = 3")"
idem_assert_eq "one database identity" 1 "$(idem_psql -c 'SELECT count(*) FROM idem.database_identity')"
# Version 8 on existing rows: the log of a position written before it is unknown (recorded by
# the first assignment or batch that knows it), and a reply's event id is then the one version 7
# gave it (a relay may have sent it already under that id).
idem_assert_eq "progress rows: log and group unknown" "- 0 - -" \
	"$(idem_psql -c "SELECT coalesce(kafka_cluster, '-') || ' ' || log_epoch || ' ' || coalesce(first_offset::text, '-') || ' ' || coalesce(group_id, '-') FROM idem.partition_progress WHERE partition = 3")"
idem_assert_eq "a reply's id for a row of before version 8" \
	"$(idem_psql -c "SELECT idem.event_id('reply', 'payments', 'payments', '3', '42')")" \
	"$(idem_psql -c "SELECT idem.event_id('reply', 'payments', idem.log_of('payments', 'payments', 3), 'payments', '3', '42')")"
idem_psql -c "UPDATE idem.partition_progress SET kafka_cluster = 'cluster-b', log_epoch = 1 WHERE partition = 3" >/dev/null
[ "$(idem_psql -c "SELECT idem.event_id('reply', 'payments', 'payments', '3', '42')")" != \
	"$(idem_psql -c "SELECT idem.event_id('reply', 'payments', idem.log_of('payments', 'payments', 3), 'payments', '3', '42')")" ] ||
	idem_fail "a reply's id does not name a known log"
new_event=$(idem_psql -c "SELECT idem.emit('t', 'k', 'after version 7')")
idem_psql -c "SELECT event_id FROM idem.outbox WHERE id = $new_event" | grep -Eq '^[0-9a-f]{8}-[0-9a-f]{4}-' ||
	idem_fail "an event outside idemd's transaction did not get a random UUID"
echo "ok: a version-5 database upgrades to version $latest and its claim lookups answer the same"
