#!/usr/bin/env bash
# On a database created with a language's collation (ICU en-US, as most databases have one),
# the claims' consumer and business key compare bytes (schema version 10,
# sql/0010_claim_keys_bytes.sql), and nothing else changes: keys equal only when their bytes
# are (a precomposed and a decomposed é stay two keys, as they were), a database at version 9
# upgrades with its claims kept and still found, and idemd applies 3,000 payments with
# duplicates exactly once on it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_tmp_init
idem_pg_start
idem_psql -d postgres -c "DROP DATABASE idem" >/dev/null
idem_psql -d postgres -c "CREATE DATABASE idem TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'" >/dev/null
idem_assert_eq "the database's collation is ICU's" i \
	"$(idem_psql -c "SELECT datlocprovider FROM pg_database WHERE datname = current_database()")"
# Under it, 'a' sorts before 'B'; in bytes, 'B' (0x42) comes first.
idem_assert_eq "the database orders by language" "a B" \
	"$(idem_psql -c "SELECT string_agg(k, ' ' ORDER BY k) FROM (VALUES ('B'), ('a')) v(k)")"
idem_kafka_start payments:4
cfg=$IDEM_TMP/idemd.yaml
idem_write_config "$cfg" g-coll payments
idem_setup_db "$cfg"

collations() {
	idem_psql -c "SELECT string_agg(a.attname || '=' || c.collname, ' ' ORDER BY a.attname) FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation WHERE (a.attrelid = 'idem.processed_messages'::regclass AND a.attname IN ('consumer', 'business_key')) OR (a.attrelid = to_regclass('idem.claim_consumers') AND a.attname = 'name')"
}
# The consumer is a number since version 13, its name in idem.claim_consumers.
idem_assert_eq "the claims' key columns" "business_key=C name=C" "$(collations)"
idem_assert_eq "schema version" "$(find "$IDEM_SRC/sql" -name '[0-9][0-9][0-9][0-9]_*.sql' | wc -l)" \
	"$(idem_psql -c "SELECT max(version) FROM idem.schema_migrations")"

claim() { # claim KEY: 1 when KEY was claimed now, 0 when it was claimed before
	idem_psql -c "WITH c AS (INSERT INTO idem.processed_messages (consumer_id, business_key, topic_id, partition, \"offset\") VALUES (idem.claim_consumer_id('t'), convert_from('$1'::bytea, 'UTF8'), idem.claim_topic_id('t'), 0, 0) ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM c"
}
idem_assert_eq "precomposed é claimed" 1 "$(claim '\xc3a9')"
idem_assert_eq "decomposed é is another key" 1 "$(claim '\x65cc81')"
idem_assert_eq "precomposed é again is a duplicate" 0 "$(claim '\xc3a9')"
idem_assert_eq "B and a claimed" "1 1" "$(claim '\x42') $(claim '\x61')"
idem_assert_eq "claims ordered by their bytes" "B a e" \
	"$(idem_psql -c "SELECT string_agg(left(business_key, 1), ' ' ORDER BY business_key) FROM idem.claims_named WHERE consumer = 't' AND business_key <> convert_from('\xc3a9'::bytea, 'UTF8')")"

# Back to version 9 (the columns in the database's collation), claims in place, and up again
# (versions 10 to the latest).
idem_claims_before_v11
idem_psql -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
ALTER TABLE idem.processed_messages ALTER COLUMN consumer TYPE text,
	ALTER COLUMN business_key TYPE text;
DELETE FROM idem.schema_migrations WHERE version >= 10;
SQL
idem_assert_eq "version 9's key columns" "business_key=default consumer=default" "$(collations)"
before=$(idem_psql -c "SELECT count(*) FROM idem.claims_of('t', ARRAY[convert_from('\xc3a9'::bytea, 'UTF8'), 'B', 'a', 'x'])")
idem_assert_eq "claims found at version 9" 3 "$before"
"$IDEM_BIN/idemctl" -c "$cfg" migrate >/dev/null
idem_assert_eq "the key columns after the upgrade" "business_key=C name=C" "$(collations)"
idem_assert_eq "claims kept by the upgrade" 4 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 't'")"
idem_assert_eq "claims found after the upgrade" 3 \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_of('t', ARRAY[convert_from('\xc3a9'::bytea, 'UTF8'), 'B', 'a', 'x'])")"
idem_psql -c "DELETE FROM idem.processed_messages WHERE consumer_id = idem.claim_consumer_id('t')" >/dev/null

# idemd on this database: every payment exactly once, every duplicate found.
idem_produce --count 3000 --dup-ratio 0.3 --seed 7
idemd_start a "$cfg"
idem_wait_done g-coll 120
idemd_stop a
idem_check_exactly_once payments
idem_assert_eq "duplicates" "$((IDEM_PRODUCED - IDEM_UNIQUE))" \
	"$(idem_psql -c "SELECT sum(duplicates) FROM idem.partition_progress WHERE consumer = 'payments'")"
echo "ok: on an ICU-collated database the claims compare bytes; $(idem_counts payments)"
