#!/usr/bin/env bash
# What a restart cannot fix stops idemd at start-up with exit 78 (EX_CONFIG: the unit's
# RestartPreventExitStatus=78), within 5 s, saying what is wrong and what to do: a database
# that does not exist, a role that does not exist, a wrong password (scram-sha-256), a role
# without CONNECT on the database. idemctl exits 78 on the same. A Postgres that is not up yet
# (stopped, started a few seconds later) or that turns the role away for now (too many
# connections, SQLSTATE 53300) is waited for, and idemd then comes up and applies everything.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config good.yaml g-login payments
idem_produce --count 300 --dup-ratio 0.1 --seed 44
secret=right-Secret-4711
wrong=wrong-Secret-0815
# Members of idem (the owner of everything, not a superuser: a connection limit holds), which
# find the payments tables where idem's "$user" does; nocon is nobody's member, and so has no
# CONNECT once PUBLIC loses it.
idem_psql -c "CREATE ROLE pw LOGIN PASSWORD '$secret' IN ROLE idem"
idem_psql -c "CREATE ROLE app LOGIN CONNECTION LIMIT 0 IN ROLE idem"
idem_psql -c "ALTER ROLE pw SET search_path = idem, public; ALTER ROLE app SET search_path = idem, public"
idem_psql -c "CREATE ROLE nocon LOGIN"
# The password role logs in with scram-sha-256 (PostgreSQL 15's default password_encryption);
# every other role as before (trust).
idem__pg_run sh -c 'printf "local all pw scram-sha-256\n" | cat - "$1/pg_hba.conf" >"$1/pg_hba.new" &&
	mv "$1/pg_hba.new" "$1/pg_hba.conf"' sh "$IDEM_PGDATA"
idem_psql -c 'SELECT pg_reload_conf()' >/dev/null
idem_assert_eq "scram-sha-256 for role pw" "SCRAM-SHA-256" \
	"$(idem_psql -c "SELECT left(rolpassword, 13) FROM pg_authid WHERE rolname = 'pw'")"

base="host=$PGHOST port=$PGPORT"
# config NAME CONNINFO [idem_write_config OPTION...]: $IDEM_TMP/NAME.yaml
config() {
	local name=$1 conninfo=$2
	shift 2
	idem_write_config "$IDEM_TMP/$name.yaml" g-login payments "$@"
	sed -i "s|^  conninfo: .*|  conninfo: \"$conninfo\"|" "$IDEM_TMP/$name.yaml"
	grep -q "conninfo: \"$conninfo\"" "$IDEM_TMP/$name.yaml" || idem_fail "conninfo not set in $name.yaml"
}
export IDEM_TEST_PGPASSWORD=$wrong
config nodb "$base dbname=nope user=idem"
config norole "$base dbname=idem user=nobody"
config badpw "$base dbname=idem user=pw" --postgres password_env=IDEM_TEST_PGPASSWORD
config nocon "$base dbname=idem user=nocon"

# refused NAME WHAT HINT: idemd with NAME.yaml exits 78 within 5 s, its last line an error
# naming WHAT and HINT; idemctl status and migrate exit 78 on it too.
refused() {
	local name=$1 what=$2 hint=$3 t0 ms out rc
	t0=${EPOCHREALTIME/[.,]/}
	idemd_start "$name" "$IDEM_TMP/$name.yaml"
	idem_wait_exit "$(idemd_pid "$name")" 5
	ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	idem_assert_eq "idemd exit status ($name)" 78 "$IDEM_EXIT_STATUS"
	out=$(tail -1 "$IDEM_TMP/idemd-$name.log")
	grep -q "error main: cannot start: .*$what" <<<"$out" ||
		idem_fail "$name: last line does not name '$what': $out"
	grep -q "$hint" <<<"$out" || idem_fail "$name: last line does not say '$hint': $out"
	! grep -q 'retrying in' "$IDEM_TMP/idemd-$name.log" ||
		idem_fail "$name: retried: $(grep -m1 'retrying in' "$IDEM_TMP/idemd-$name.log")"
	idem_log "$name: exit 78 after ${ms}ms: ${out#* error }"
	for cmd in status migrate; do
		rc=0
		out=$("$IDEM_BIN/idemctl" -q -c "$IDEM_TMP/$name.yaml" $cmd 2>&1) || rc=$?
		idem_assert_eq "idemctl $cmd exit status ($name)" 78 "$rc"
		grep -q "$what" <<<"$out" || idem_fail "idemctl $cmd ($name) does not name '$what': $out"
	done
}

refused nodb 'database "nope" does not exist' 'create it'
refused norole 'role "nobody" does not exist' 'create the role'
refused badpw 'password authentication failed for user "pw"' 'postgres.password_env'
if grep -rqF -e "$wrong" -e "$secret" "$IDEM_TMP"/idemd-*.log; then
	idem_fail "a password is in idemd's log"
fi
idem_psql -c 'REVOKE CONNECT ON DATABASE idem FROM PUBLIC'
refused nocon 'User does not have CONNECT privilege' 'grant'
idem_psql -c 'GRANT CONNECT ON DATABASE idem TO PUBLIC'

# The right password: pw comes up (and stops again at once: nothing is applied yet).
export IDEM_TEST_PGPASSWORD=$secret
idemd_start goodpw "$IDEM_TMP/badpw.yaml"
idem_wait_until 30 "idemd to start with the right password" \
	grep -q 'ready: consuming' "$IDEM_TMP/idemd-goodpw.log"
idemd_stop goodpw

# Too many connections for the role (53300): the server answers, and the answer is "not now".
config limited "$base dbname=idem user=app"
idemd_start limited "$IDEM_TMP/limited.yaml"
limited_twice() { [ "$(grep -c 'cannot start: .*too many connections.*retrying in' "$IDEM_TMP/idemd-limited.log")" -ge 2 ]; }
idem_wait_until 15 "two attempts refused for too many connections" limited_twice
idem__alive "$(idemd_pid limited)" || idem_fail "idemd gave up on too many connections"
idem_psql -c 'ALTER ROLE app CONNECTION LIMIT -1'
idem_wait_until 30 "idemd to start once the role may connect" \
	grep -q 'ready: consuming' "$IDEM_TMP/idemd-limited.log"
idemd_stop limited

# Postgres stopped, started a few seconds after idemd: waited for, then everything applied.
idem_pg_stop
idemd_start later "$IDEM_CFG"
refused_twice() { [ "$(grep -c 'cannot start: .*retrying in' "$IDEM_TMP/idemd-later.log")" -ge 2 ]; }
idem_wait_until 15 "two attempts while postgres is down" refused_twice
sleep 2
idem__alive "$(idemd_pid later)" || idem_fail "idemd gave up while postgres was down"
idem_pg_start_again
idem_wait_done g-login 60
idemd_stop later
idem_check_exactly_once payments
echo "ok: missing database, unknown role, wrong password, no CONNECT: exit 78 within 5 s (idemctl too); too many connections and a stopped postgres waited for, then $(idem_counts payments)"
