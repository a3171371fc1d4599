#!/usr/bin/env bash
# idemctl quarantine list and discard act on the entries the configuration's routes serve, as
# retry does: two configurations (consumers 'ledger' and 'audit') share one database; 'list'
# shows a configuration's own entries unless --all-consumers, and a discard of the other
# configuration's entry is refused and leaves its row open.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4 --config ledger.yaml g-ledger ledger
idem_write_config "$IDEM_TMP/audit.yaml" g-audit audit
ctl() {
	local cfg=$1
	shift
	"$IDEM_BIN/idemctl" -q -c "$IDEM_TMP/$cfg.yaml" quarantine "$@"
}
# Two open entries of each consumer (as idemd records them).
for c in ledger audit; do
	for o in 1 2; do
		idem_psql -c "INSERT INTO idem.quarantine (consumer, topic, partition, \"offset\", business_key, reason) VALUES ('$c', 'payments', 0, $o, 'p-$c-$o', 'handler failed')" >/dev/null
	done
done
ids() { idem_psql -c "SELECT string_agg(id::text, ',' ORDER BY id) FROM idem.quarantine WHERE consumer = '$1'"; }
ledger_ids=$(ids ledger)
audit_ids=$(ids audit)

idem_assert_eq "ledger: list" "$ledger_ids" "$(ctl ledger list --json | jq -r '[.[].id] | map(tostring) | join(",")')"
idem_assert_eq "audit: list" "$audit_ids" "$(ctl audit list --json | jq -r '[.[].id] | map(tostring) | join(",")')"
idem_assert_eq "ledger: list --all-consumers" 4 "$(ctl ledger list --all-consumers --json | jq length)"
idem_assert_eq "ledger: list --limit 1" "${ledger_ids%%,*}" \
	"$(ctl ledger list --limit 1 --json | jq -r '.[0].id')"
idem_assert_eq "ledger: list --all-consumers --consumer audit" "$audit_ids" \
	"$(ctl ledger list --all-consumers --consumer audit --json | jq -r '[.[].id] | map(tostring) | join(",")')"

# ledger discards one of audit's entries: refused, the row stays open.
victim=${audit_ids%%,*}
rc=0
ctl ledger discard "$victim" >"$IDEM_TMP/discard.out" 2>"$IDEM_TMP/discard.err" || rc=$?
idem_assert_eq "exit status of a discard of another consumer's entry" 1 "$rc"
grep -q "quarantine entry $victim belongs to consumer 'audit' topic 'payments', which no route of '$IDEM_TMP/ledger.yaml' serves" \
	"$IDEM_TMP/discard.err" || idem_fail "discard: $(cat "$IDEM_TMP/discard.err")"
idem_assert_eq "audit's entries after ledger's discard" "2 open" \
	"$(idem_psql -c "SELECT count(*) || ' open' FROM idem.quarantine WHERE consumer = 'audit' AND resolved_at IS NULL")"

# Each configuration discards its own.
ctl audit discard "$victim" | grep -q "^$victim: discarded$" || idem_fail "audit could not discard $victim"
ctl ledger discard "${ledger_ids%%,*}" >/dev/null
idem_assert_eq "resolutions" "audit:discarded,ledger:discarded" \
	"$(idem_psql -c "SELECT string_agg(consumer || ':' || resolution, ',' ORDER BY consumer) FROM idem.quarantine WHERE resolved_at IS NOT NULL")"
idem_assert_eq "open entries" 2 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine WHERE resolved_at IS NULL')"
echo "ok: quarantine list and discard are scoped to the configuration's consumers"
