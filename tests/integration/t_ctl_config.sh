#!/usr/bin/env bash
# Which configuration idemctl reads: it names it on stderr (not with -q); without -c it reads
# DIR/idemd.yaml (DIR: IDEM_CONFIG_DIR, else the configured one, /etc/idemd for the prefix /usr),
# and refuses, naming them, when DIR holds several *.yaml (a host running idemd@NAME instances,
# each with DIR/NAME.yaml).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_tmp_init
dir=$IDEM_TMP/etc
mkdir "$dir"
write() {
	cat >"$1" <<YAML
kafka:
  brokers: "127.0.0.1:9"
  group_id: $2
postgres:
  conninfo: "host=$IDEM_TMP port=1 dbname=x"
routes:
  - name: r
    topics: [t]
    business_key: \${key}
    handler: { sql: "SELECT 1", params: [] }
YAML
}
# run ARGS...: idemctl ARGS with IDEM_CONFIG_DIR=$dir; sets rc, out and err.
run() {
	rc=0
	IDEM_CONFIG_DIR=$dir "$IDEM_BIN/idemctl" "$@" >"$IDEM_TMP/out" 2>"$IDEM_TMP/err" || rc=$?
	out=$(cat "$IDEM_TMP/out")
	err=$(cat "$IDEM_TMP/err")
}

# One configuration: the default, named on stderr. ("quarantine" without a subcommand is a
# usage error found after the configuration is read.)
write "$dir/idemd.yaml" g-one
run quarantine
idem_assert_eq "exit status" 2 "$rc"
idem_assert_eq "first line on stderr" "idemctl: configuration $dir/idemd.yaml" "$(head -n 1 <<<"$err")"
run -q quarantine
idem_assert_eq "exit status with -q" 2 "$rc"
grep -q "configuration" <<<"$err" && idem_fail "-q still names the configuration: $err"

# Two: refused without -c, both named, nothing else done.
write "$dir/payments.yaml" g-pay
run quarantine list
idem_assert_eq "exit status without -c among two configurations" 2 "$rc"
idem_assert_eq "refusal" \
	"idemctl: $dir holds 2 configurations (idemd.yaml, payments.yaml): name the one to use with -c FILE (idemd@NAME reads $dir/NAME.yaml)" \
	"$err"
idem_assert_eq "nothing on stdout" "" "$out"
run -c "$dir/payments.yaml" quarantine
idem_assert_eq "exit status with -c" 2 "$rc"
idem_assert_eq "first line on stderr with -c" "idemctl: configuration $dir/payments.yaml" "$(head -n 1 <<<"$err")"
# Help needs no configuration.
run --help
idem_assert_eq "exit status of --help" 0 "$rc"
grep -q "IDEM_CONFIG_DIR" <<<"$out" || idem_fail "--help does not mention IDEM_CONFIG_DIR"
# Other files do not count.
rm "$dir/payments.yaml"
touch "$dir/payments.yaml.dpkg-old" "$dir/.hidden.yaml"
run quarantine
idem_assert_eq "first line on stderr, other files aside" "idemctl: configuration $dir/idemd.yaml" "$(head -n 1 <<<"$err")"
echo "ok: idemctl names the configuration it reads and refuses to guess among several"
