#!/usr/bin/env bash
# A Postgres and a Kafka to try idemd on, until stopped (README.md, "Quickstart"): a throwaway
# Postgres (initdb into a temp dir, reached on a unix socket as the superuser idem, database
# idem) and the embedded Kafka (idem-mock-kafka, one broker on 127.0.0.1), with the topics
# given. It writes how to reach them to FILE (default ./sandbox.env; source it), prints it, and
# stays up until Ctrl-C or SIGTERM, which stops both and removes everything they held.
#
#   bash tests/sandbox.sh [--env FILE] [TOPIC:PARTITIONS]...      (default topic: orders:1)
#
# The programs come from IDEM_BIN (default build/), where README's quickstart builds them.
set -euo pipefail
env_file=$PWD/sandbox.env
while [ $# -gt 0 ]; do
	case $1 in
	--env)
		env_file=$(realpath -m "$2")
		shift 2
		;;
	-h | --help)
		sed -n '2,10s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	-*)
		echo "sandbox: unknown option '$1'" >&2
		exit 2
		;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- orders:1

. "$(dirname "${BASH_SOURCE[0]}")/integration/lib.sh"
[ -x "$IDEM_BIN/idem-mock-kafka" ] ||
	idem_fail "no $IDEM_BIN/idem-mock-kafka: build first (README.md, \"Quickstart\"), or set IDEM_BIN"
idem_tmp_init
idem_pg_start
idem_kafka_start --brokers 1 "$@"
idem_sandbox_env "$env_file"
IDEM_CLEANUP_HOOKS+=("rm -f '$env_file'")
cat "$env_file"
echo "# written to $env_file: '. $env_file' in the shell you try idemd from"
echo "# Ctrl-C (or kill $$) stops Postgres and Kafka and removes $IDEM_TMP"
while idem__alive "$IDEM_KAFKA_PID"; do
	sleep 1
done
idem_fail "the embedded Kafka stopped (log: $IDEM_TMP/kafka.log)"
