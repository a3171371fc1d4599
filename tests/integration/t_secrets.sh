#!/usr/bin/env bash
# Secrets as a daemon keeps them (idemd.yaml(5) SECRETS): --check-config warns about a Kafka secret
# written in the file (naming it, not its value). Postgres asks for a password (scram) from the
# role idemd uses, and idemd
#  - starts with postgres.password_file naming a credential of $CREDENTIALS_DIRECTORY (what
#    systemd's LoadCredential= gives a DynamicUser= service) and applies every payment;
#  - refuses, with exit 78 and the fix, a password file that group or others can read, an empty
#    one and one too long for it, never showing the password;
#  - with postgres.password_env, takes the variable out of its environment (/proc/PID/environ)
#    and still opens its later connections with it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config setup.yaml g-sec payments
pw="s3cret-$RANDOM-$RANDOM"

# A role that must give its password; the fixture's own superuser keeps trust for the checks.
idem_psql -c "CREATE ROLE app LOGIN SUPERUSER PASSWORD '$pw'"
# The example tables were made by idem, in its "$user" schema.
idem_psql -c "ALTER ROLE app SET search_path = idem, public"
idem__pg_run sh -c 'printf "local all app scram-sha-256\n" | cat - "$1" >"$1.new" && mv "$1.new" "$1"' \
	sh "$IDEM_PGDATA/pg_hba.conf"
idem_psql -c 'SELECT pg_reload_conf()' >/dev/null
export PGPASSFILE=/nonexistent
if psql -X -w -At "host=$PGHOST port=$PGPORT dbname=idem user=app" -c 'SELECT 1' >/dev/null 2>&1; then
	idem_fail "role app logs in without a password: the test proves nothing"
fi

app_sessions_at_least() {
	[ "$(idem_psql -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'")" -ge "$1" ]
}

# config NAME POSTGRES_KEY=VALUE: a configuration connecting as app, its password from there.
config() {
	idem_write_config "$IDEM_TMP/$1.yaml" g-sec payments --postgres "$2"
	sed -i 's/ user=idem"/ user=app"/' "$IDEM_TMP/$1.yaml"
	grep -q ' user=app"' "$IDEM_TMP/$1.yaml" || idem_fail "conninfo of $1.yaml not changed"
}

# refused NAME WHAT: idemd with NAME.yaml exits 78 and its log says WHAT, not the password.
refused() {
	local pid
	idemd_start "$1" "$IDEM_TMP/$1.yaml"
	pid=$(idemd_pid "$1")
	idem_wait_exit "$pid" 30
	idem_assert_eq "exit status of $1" 78 "$IDEM_EXIT_STATUS"
	grep -q -- "$2" "$IDEM_TMP/idemd-$1.log" ||
		idem_fail "$1: log does not say '$2': $(cat "$IDEM_TMP/idemd-$1.log")"
	! grep -q -- "$pw" "$IDEM_TMP/idemd-$1.log" || idem_fail "$1: the password is in the log"
	idem_log "$1 refused: $(grep -- "$2" "$IDEM_TMP/idemd-$1.log" | head -1)"
}

# 0. A Kafka secret written in the file: a warning from --check-config, naming it, not its value.
idem_write_config "$IDEM_TMP/literal.yaml" g-sec payments --kafka-prop "sasl.password=$pw"
out=$("$IDEM_BIN/idemd" --check-config "$IDEM_TMP/literal.yaml" 2>&1) ||
	idem_fail "--check-config refused a literal sasl.password: $out"
grep -q "warning: kafka property 'sasl.password' is a secret written in the configuration file; use 'sasl.password_file' or 'sasl.password_env' instead" <<<"$out" ||
	idem_fail "no warning about sasl.password: $out"
! grep -q -- "$pw" <<<"$out" || idem_fail "--check-config shows the secret: $out"

# 1. A file open to others, an empty one, an overlong one: refused at start.
printf '%s\n' "$pw" >"$IDEM_TMP/pg-password-open"
chmod 0644 "$IDEM_TMP/pg-password-open"
config open "password_file=$IDEM_TMP/pg-password-open"
refused open "open to group or others (mode 0644), refused; make it readable by its owner only (chmod 600"
: >"$IDEM_TMP/pg-password-empty"
chmod 0600 "$IDEM_TMP/pg-password-empty"
config empty "password_file=$IDEM_TMP/pg-password-empty"
refused empty "postgres.password_file: '$IDEM_TMP/pg-password-empty' is empty"
head -c 2000 /dev/zero | tr '\0' x >"$IDEM_TMP/pg-password-long"
chmod 0600 "$IDEM_TMP/pg-password-long"
config long "password_file=$IDEM_TMP/pg-password-long"
refused long "longer than 1023 bytes; refused rather than cut short"
idem_assert_eq "claims after the refusals" 0 \
	"$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"

# 2. LoadCredential=pg-password:... as systemd does it: a private directory, a 0400 file.
creds=$IDEM_TMP/credentials
mkdir -m 0700 "$creds"
printf '%s\n' "$pw" >"$creds/pg-password"
chmod 0400 "$creds/pg-password"
config cred "password_file=pg-password"
idem_produce --count 300 --dup-ratio 0.2 --seed 30
CREDENTIALS_DIRECTORY=$creds idemd_start cred "$IDEM_TMP/cred.yaml"
idem_wait_done g-sec 90
idem_assert_eq "sessions of role app" t \
	"$(idem_psql -c "SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = 'app'")"
idemd_stop cred
idem_check_exactly_once payments

# 3. password_env: the variable leaves the environment; later connections still have it.
config env "password_env=IDEMD_TEST_PGPW"
IDEMD_TEST_PGPW=$pw idemd_start env "$IDEM_TMP/env.yaml"
pid=$(idemd_pid env)
idem_wait_until 60 "idemd (password_env) to be ready" grep -q 'ready: consuming' "$IDEM_TMP/idemd-env.log"
if tr '\0' '\n' <"/proc/$pid/environ" | grep -q -e IDEMD_TEST_PGPW -e "$pw"; then
	idem_fail "the password is still in /proc/$pid/environ"
fi
# Its workers connect after the variable is gone: a session each, as app.
idem_wait_until 60 "idemd's sessions as app" app_sessions_at_least 2
idemd_stop env
! grep -q -- "$pw" "$IDEM_TMP/idemd-env.log" || idem_fail "the password is in the log"
idem_check_exactly_once payments
echo "ok: password from a credential and from a variable (gone from the environment); open, empty and overlong files refused with exit 78"
