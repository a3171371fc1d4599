#!/usr/bin/env bash
# idemctl preflight checks against the real services what idemd needs before consuming, one line
# per check, and changes nothing. All good: exit 0, every check ok (the registry included). A
# role lacking INSERT on idem.processed_messages: exit 78 naming the table and the GRANT that
# fixes it. A topic missing: exit 78 naming it, and the embedded Kafka (which creates any topic
# a client names) still does not have it. A handler that does not prepare: exit 78 naming the
# route. A database never migrated: exit 78 "run idemctl migrate". A refused login: 78; a
# Postgres or registry that does not answer: 1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2
idem_registry_start
good=$IDEM_TMP/good.yaml
idem_write_config "$good" g-pre payments --registry "url=\"$IDEM_REGISTRY_URL\""
idem_setup_db "$good"

# preflight NAME CONFIG STATUS: run it, check its exit status, leave its output in $out.
preflight() {
	local rc=0
	out=$("$IDEM_BIN/idemctl" -q -c "$2" preflight 2>&1) || rc=$?
	idem_assert_eq "idemctl preflight exit status ($1)" "$3" "$rc"
	idem_log "$1: exit $rc"
	sed "s/^/    /" <<<"$out" >&2
}
# expect NAME REGEX: a line of $out matches REGEX.
expect() {
	grep -qE "$2" <<<"$out" || idem_fail "$1: no line matches '$2': $out"
}
# conninfo FILE CONNINFO: set postgres.conninfo in FILE.
conninfo() {
	sed -i "s|^  conninfo: .*|  conninfo: \"$2\"|" "$1"
	grep -q "conninfo: \"$2\"" "$1" || idem_fail "conninfo not set in $1"
}

# All good.
preflight good "$good" 0
for check in login schema grants handlers topics registry; do
	expect good "^ok   $check: "
done
! grep -qv '^ok   \|^all checks passed' <<<"$out" || idem_fail "good: a check did not pass: $out"
expect good "^ok   topics: topic 'payments' exists with 2 partitions$"
idem_assert_eq "preflight --json exit" 0 "$("$IDEM_BIN/idemctl" -q -c "$good" preflight --json |
	python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["exit"]) if all(c["status"] == "ok" for c in d["checks"]) else print(d)')"

# A role with every privilege on schema idem but INSERT on idem.processed_messages.
idem_psql -c "CREATE ROLE app LOGIN; ALTER ROLE app SET search_path = idem, public"
idem_psql -c "GRANT USAGE ON SCHEMA idem TO app;
	GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA idem TO app;
	GRANT USAGE ON ALL SEQUENCES IN SCHEMA idem TO app;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA idem TO app;
	REVOKE INSERT ON idem.processed_messages FROM app" >/dev/null
cp "$good" "$IDEM_TMP/app.yaml"
conninfo "$IDEM_TMP/app.yaml" "host=$PGHOST port=$PGPORT dbname=idem user=app"
preflight grants "$IDEM_TMP/app.yaml" 78
expect grants "^ok   login: connected as 'app'"
expect grants "^FAIL grants: 'app' lacks privileges on table idem.processed_messages fix: GRANT INSERT ON TABLE idem.processed_messages TO app$"
[ "$(grep -c '^FAIL' <<<"$out")" = 1 ] || idem_fail "grants: more than the one failure: $out"
# The GRANT it names is the fix.
idem_psql -c "GRANT INSERT ON idem.processed_messages TO app" >/dev/null
preflight "grants fixed" "$IDEM_TMP/app.yaml" 0

# A topic missing: named; not created by asking.
idem_write_config "$IDEM_TMP/late.yaml" g-pre payments --topic late
preflight topic "$IDEM_TMP/late.yaml" 78
expect topic "^FAIL topics: topic 'late' does not exist fix: create the topic"
status=$("$IDEM_BIN/idemctl" -q -c "$IDEM_TMP/late.yaml" status)
grep -q '^late .*TOPIC MISSING' <<<"$status" ||
	idem_fail "topic late exists after preflight (idemctl status): $status"

# A handler that does not prepare.
idem_write_config "$IDEM_TMP/typo.yaml" g-pre payments --route-name typo \
	--sql 'INSERT INTO ledgr (payment_id, account, amount) VALUES ($1, $2, $3::bigint)'
preflight handler "$IDEM_TMP/typo.yaml" 78
expect handler "^FAIL handlers: route 'typo': handler sql does not prepare.*ledgr.* fix: "

# A database never migrated.
idem_psql -c "CREATE DATABASE bare" >/dev/null
cp "$good" "$IDEM_TMP/bare.yaml"
conninfo "$IDEM_TMP/bare.yaml" "host=$PGHOST port=$PGPORT dbname=bare user=idem"
preflight schema "$IDEM_TMP/bare.yaml" 78
expect schema "^FAIL schema: .*fix: run idemctl migrate$"
expect schema "^skip grants: "

# A login refused; a Postgres that does not answer; a registry that does not answer.
cp "$good" "$IDEM_TMP/norole.yaml"
conninfo "$IDEM_TMP/norole.yaml" "host=$PGHOST port=$PGPORT dbname=idem user=nobody"
preflight login "$IDEM_TMP/norole.yaml" 78
expect login "^FAIL login: .*role \"nobody\" does not exist"
cp "$good" "$IDEM_TMP/nopg.yaml"
conninfo "$IDEM_TMP/nopg.yaml" "host=127.0.0.1 port=$(idem_free_port) dbname=idem user=idem"
preflight "no postgres" "$IDEM_TMP/nopg.yaml" 1
expect "no postgres" "^FAIL login: no answer: "
expect "no postgres" "^ok   topics: "
idem_write_config "$IDEM_TMP/noreg.yaml" g-pre payments --registry "url=\"http://127.0.0.1:$(idem_free_port)\""
preflight "no registry" "$IDEM_TMP/noreg.yaml" 1
expect "no registry" "^FAIL registry: "
echo "ok: preflight passed all checks on a good setup and failed, naming the fix, on a missing grant (78), a missing topic (78, not created), a handler that does not prepare (78), a database not migrated (78), a refused login (78), and services that do not answer (1)"
