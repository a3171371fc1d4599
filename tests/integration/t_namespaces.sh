#!/usr/bin/env bash
# Two handlers (two consumers with different names, in different groups) on one database and
# one topic: each applies every payment once in its own key namespace.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config ledger.yaml g-ledger ledger
idem_write_config "$IDEM_TMP/audit.yaml" g-audit audit \
	--sql 'INSERT INTO audit (payment_id, tenant) VALUES ($1, $2) RETURNING id' \
	--params '[business_key, "header:tenant"]'
idem_psql -c "CREATE TABLE audit (id bigserial PRIMARY KEY, payment_id text NOT NULL, tenant text NOT NULL)"
idem_produce --count 5000 --dup-ratio 0.3 --seed 5

idemd_start ledger "$IDEM_TMP/ledger.yaml"
idemd_start audit "$IDEM_TMP/audit.yaml"
idem_wait_done g-ledger 120
idem_wait_done g-audit 120
idemd_stop ledger
idemd_stop audit

idem_check_exactly_once ledger
idem_assert_eq "audit claims" "$IDEM_UNIQUE" \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named WHERE consumer = 'audit'")"
idem_assert_eq "audit rows" "$IDEM_UNIQUE" "$(idem_psql -c "SELECT count(DISTINCT payment_id) || '/' || count(*) FROM audit" | cut -d/ -f2)"
idem_assert_eq "audit distinct" "$IDEM_UNIQUE" "$(idem_psql -c "SELECT count(DISTINCT payment_id) FROM audit")"
idem_assert_eq "audit tenants" "t1" "$(idem_psql -c "SELECT string_agg(DISTINCT tenant, ',') FROM audit")"
# The same key claimed once in each namespace.
idem_assert_eq "keys claimed by both" "$IDEM_UNIQUE" \
	"$(idem_psql -c "SELECT count(*) FROM idem.claims_named l JOIN idem.claims_named a USING (business_key) WHERE l.consumer = 'ledger' AND a.consumer = 'audit'")"
echo "ok: ledger $(idem_counts ledger); audit $(idem_counts audit)"
