#!/usr/bin/env bash
# A database at schema version 5 upgrades to the latest with `idemctl migrate`, and the claim
# lookups keep their answers: version 6 replaces the body of idem.claims_of() (a probe per key
# in every plan). A version-5 database is made by putting version 5's functions back and
# forgetting version 6; existing claims are then read and results stored through the upgraded
# functions, the same as before.
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

# Back to version 5: its function definitions, and no record of anything later.
sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/' "$IDEM_SRC/sql/0005_key_lookups.sql" |
	idem_psql -v ON_ERROR_STOP=1 >/dev/null
idem_psql -c "DELETE FROM idem.schema_migrations WHERE version > 5" >/dev/null
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
idem_assert_eq "looked up after the upgrade" "$before" "$(lookup)"
idem_assert_eq "stored after the upgrade" 1 "$(store r6)"
idem_assert_eq "the other consumer's claim untouched" "-" \
	"$(idem_psql -c "SELECT coalesce(result, '-') FROM idem.processed_messages WHERE consumer = 'other'")"
idem_assert_eq "looked up after storing" "k-1 payments 3 41 0a0b r6;k-2 payments 3 42 - -;" "$(lookup)"
echo "ok: a version-5 database upgrades to version $latest and its claim lookups answer the same"
