# shellcheck shell=bash
#
# tests/integration/lib.sh - the generic fixture for integration tests: a throwaway Postgres
# (initdb in a temp dir), the embedded Kafka (idem-mock-kafka), processes, ports, assertions.
# Nothing here knows idemd's configuration or schema: that is common.sh, sourced after this
# (the config writer, the payments workload, idemd's own checks). Source it from a test that
# runs under "set -euo pipefail":
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   idem_tmp_init                      # $IDEM_TMP, cleanup trap
#   idem_pg_start                      # $PGHOST $PGPORT $PGUSER $PGDATABASE $IDEM_CONNINFO
#   idem_kafka_start payments:8        # $IDEM_BROKERS $IDEM_KAFKA_CTL
#
# Environment: IDEM_BIN (build dir, default <repo>/build), IDEM_SRC (repo), IDEM_KEEP_TMP=1
# (keep the temp dir), IDEM_PG_FSYNC=1 (durable Postgres), IDEM_PG_TCP=1 (Postgres also
# listens on 127.0.0.1), IDEM_PG_BINDIR (server binaries).
#
# Every function fails by exiting the test (idem_fail), so none needs "|| exit".
# Background processes are started with idem_spawn in their own process group; the EXIT trap
# kills every one of them, stops Postgres and removes $IDEM_TMP.

IDEM_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${IDEM_SRC:=$(cd "$IDEM_LIB_DIR/../.." && pwd)}"
: "${IDEM_BIN:=$IDEM_LIB_DIR/../../build}"
if [ -d "$IDEM_BIN" ]; then
	IDEM_BIN=$(cd "$IDEM_BIN" && pwd)
fi
export IDEM_SRC IDEM_BIN
IDEM_TEST_NAME=$(basename "$0" .sh)

IDEM__PIDS=() # process group leaders started by idem_spawn, stopped by the EXIT trap
IDEM__KAFKA_OTHERS=() # names of the Kafkas started by idem_kafka_start_other
IDEM_CLEANUP_HOOKS=() # commands the EXIT trap runs first (e.g. removing an installed package)

# ---- messages and assertions ------------------------------------------------------------------

# idem_log MSG... : progress message on stderr (stdout stays free for captured output).
idem_log() {
	printf '%s %s: %s\n' "$(date +%H:%M:%S.%3N)" "$IDEM_TEST_NAME" "$*" >&2
}

# idem_fail MSG... : print MSG to stderr and end the test with status 1.
idem_fail() {
	printf '%s: FAIL: %s\n' "$IDEM_TEST_NAME" "$*" >&2
	exit 1
}

# idem_assert_eq WHAT EXPECTED ACTUAL
idem_assert_eq() {
	if [ "$2" != "$3" ]; then
		idem_fail "$1: expected '$2', got '$3'"
	fi
}

# idem_free_port: a TCP port on 127.0.0.1 that nothing is bound to, picked at random below the
# kernel's ephemeral range (ip_local_port_range). A port the kernel hands out (bind to port 0)
# is free only until it hands it out again: to the embedded Kafka's brokers or to any outgoing
# connection of a test running beside, before the process meant to listen on it has started.
# Below that range only another random pick can take it, one chance in thousands.
idem_free_port() {
	python3 - <<-'EOF'
		import random, socket
		low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
		for _ in range(1000):
		    port = random.randrange(10000, max(low, 10001))
		    s = socket.socket()
		    try:
		        s.bind(("127.0.0.1", port))
		    except OSError:
		        continue
		    finally:
		        s.close()
		    print(port)
		    break
		else:
		    raise SystemExit("no free port below %d" % low)
	EOF
}

# idem_wait_until TIMEOUT_SECONDS DESCRIPTION CMD... : run CMD every 0.2 s until it succeeds;
# fail with DESCRIPTION after TIMEOUT_SECONDS (may be fractional).
idem_wait_until() {
	local timeout=$1 desc=$2 sec frac deadline
	shift 2
	sec=${timeout%%.*}
	frac=0
	if [[ $timeout == *.* ]]; then
		frac=${timeout#*.}000000
		frac=$((10#${frac:0:6}))
	fi
	deadline=$((${EPOCHREALTIME/[.,]/} + ${sec:-0} * 1000000 + frac))
	while :; do
		if "$@"; then
			return 0
		fi
		if [ "${EPOCHREALTIME/[.,]/}" -ge "$deadline" ]; then
			idem_fail "timed out after ${timeout}s waiting for $desc"
		fi
		sleep 0.2
	done
}

# ---- temp dir and cleanup ---------------------------------------------------------------------

# idem_tmp_init: create and export $IDEM_TMP (mode 755 so the postgres user can enter it) and
# install the EXIT trap that stops everything this test started.
idem_tmp_init() {
	IDEM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/idem-$IDEM_TEST_NAME.XXXXXX")
	chmod 755 "$IDEM_TMP"
	export IDEM_TMP
	trap idem__cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	idem_log "temp dir $IDEM_TMP"
}

idem__dump_logs() {
	local f
	for f in "$IDEM_TMP"/*.log "$IDEM_TMP"/pgrun/*.log; do
		[ -s "$f" ] || continue
		printf '%s\n' "---- $f (last 40 lines) ----" >&2
		tail -n 40 "$f" >&2
	done
}

# idem__dump_stacks: every thread's stack of each idemd still running, so that a test that failed
# because idemd stopped making progress shows where it waits (needs gdb and ptrace rights).
idem__dump_stacks() {
	local pid
	command -v gdb >/dev/null || return 0
	for pid in "${IDEM__PIDS[@]}"; do
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = idemd ] || continue
		printf '%s\n' "---- idemd $pid: threads ----" >&2
		timeout 60 gdb -q -batch -p "$pid" -ex 'thread apply all bt 25' 2>&1 |
			grep -E '^(Thread|#)' >&2
	done
}

idem__cleanup() {
	local rc=$? pid hook
	set +e
	trap - EXIT INT TERM
	if [ "$rc" -ne 0 ] && [ -n "${IDEM_TMP:-}" ]; then
		idem__dump_logs
		idem__dump_stacks
	fi
	for hook in "${IDEM_CLEANUP_HOOKS[@]}"; do
		eval "$hook"
	done
	for pid in "${IDEM__PIDS[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null
	done
	for pid in "${IDEM__PIDS[@]}"; do
		idem__wait_gone "$pid" 5 || kill -KILL -- "-$pid" 2>/dev/null
		{ wait "$pid"; } 2>/dev/null
	done
	if [ -n "${IDEM_PGDATA:-}" ] && [ -f "$IDEM_PGDATA/postmaster.pid" ]; then
		idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_PGDATA" -m immediate -s stop >/dev/null 2>&1
	fi
	if [ -n "${IDEM_TMP:-}" ]; then
		if [ "${IDEM_KEEP_TMP:-0}" = 1 ]; then
			idem_log "kept $IDEM_TMP"
		else
			rm -rf "$IDEM_TMP"
		fi
	fi
	exit "$rc"
}

# ---- background processes ---------------------------------------------------------------------

# idem__alive PID: true while PID runs (a zombie, exited but not yet reaped, counts as gone).
idem__alive() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[ "${st:0:1}" != Z ]
}

# idem__wait_gone PID SECONDS: wait until PID exited; false on timeout.
idem__wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		idem__alive "$1" || return 0
		sleep 0.1
	done
	! idem__alive "$1"
}

# idem_spawn NAME CMD... : start CMD in the background in its own process group, stdout
# appended to $IDEM_TMP/NAME.out and stderr to $IDEM_TMP/NAME.log. Sets IDEM_LAST_PID (which is
# also the process group id). The EXIT trap kills the group.
idem_spawn() {
	local name=$1
	shift
	# Without job control a background child is no group leader, so setsid execs in place
	# and $! is the command's own pid.
	setsid "$@" >>"$IDEM_TMP/$name.out" 2>>"$IDEM_TMP/$name.log" </dev/null &
	IDEM_LAST_PID=$!
	IDEM__PIDS+=("$IDEM_LAST_PID")
}

# idem_kill PID [SIGNAL] : send SIGNAL (default TERM) to PID's process group.
idem_kill() {
	kill -"${2:-TERM}" -- "-$1" 2>/dev/null || kill -"${2:-TERM}" "$1" 2>/dev/null || true
}

# idem_wait_exit PID TIMEOUT_SECONDS : wait until a spawned process exits; sets
# IDEM_EXIT_STATUS to its exit status (128+N if killed by signal N). Fails on timeout.
idem_wait_exit() {
	# stderr aside while waiting: bash reports a job killed by a signal ("Killed") when it
	# notices, which is here; the status is what matters, and it is kept.
	idem__wait_gone "$1" "$2" 2>/dev/null || idem_fail "process $1 did not exit within $2s"
	IDEM_EXIT_STATUS=0
	{ wait "$1"; } 2>/dev/null || IDEM_EXIT_STATUS=$?
}

# idem_stop PID [TIMEOUT_SECONDS] : SIGTERM, wait (default 10 s), then SIGKILL the group.
# Sets IDEM_EXIT_STATUS.
idem_stop() {
	local pid=$1
	idem_kill "$pid" TERM
	if ! idem__wait_gone "$pid" "${2:-10}"; then
		idem_log "process $pid ignored SIGTERM, killing it"
		idem_kill "$pid" KILL
		idem__wait_gone "$pid" 5 || idem_fail "process $pid survived SIGKILL"
	fi
	IDEM_EXIT_STATUS=0
	{ wait "$pid"; } 2>/dev/null || IDEM_EXIT_STATUS=$?
}

# ---- Postgres ---------------------------------------------------------------------------------

# Server binaries: Debian keeps them off PATH in /usr/lib/postgresql/<version>/bin, and its
# pg_config --bindir may name the client directory. Prefer the highest installed version.
idem__pg_find_bindir() {
	local d
	[ -n "${IDEM_PG_BINDIR:-}" ] && [ -x "$IDEM_PG_BINDIR/initdb" ] && return 0
	IDEM_PG_BINDIR=
	while read -r d; do
		[ -x "$d/initdb" ] && IDEM_PG_BINDIR=$d
	done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
	if [ -z "$IDEM_PG_BINDIR" ] && command -v pg_config >/dev/null; then
		d=$(pg_config --bindir)
		[ -x "$d/initdb" ] && IDEM_PG_BINDIR=$d
	fi
	if [ -z "$IDEM_PG_BINDIR" ] && command -v initdb >/dev/null; then
		IDEM_PG_BINDIR=$(dirname "$(command -v initdb)")
	fi
	[ -n "$IDEM_PG_BINDIR" ] || idem_fail "no PostgreSQL server binaries (initdb) found"
	export IDEM_PG_BINDIR
}

# Postgres refuses to run as root: then run the server tools as the postgres system user.
idem__pg_run() {
	if [ "$(id -u)" -eq 0 ]; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

idem__pg_wait_ready() {
	idem_wait_until 60 "postgres to accept connections" \
		"$IDEM_PG_BINDIR/pg_isready" -q -h "$PGHOST" -p "$PGPORT" -U idem -d postgres
}

# idem_pg_start: initdb a new cluster into $IDEM_TMP/pg (superuser idem, trust auth), start it
# on a unix socket in $IDEM_TMP/pgrun, create database idem, export PGHOST PGPORT PGUSER
# PGDATABASE IDEM_CONNINFO IDEM_PGDATA IDEM_PG_LOG.
idem_pg_start() {
	local fsync=off tcp="" try
	[ -n "${IDEM_TMP:-}" ] || idem_fail "idem_pg_start: call idem_tmp_init first"
	[ -z "${IDEM_PGDATA:-}" ] || idem_fail "idem_pg_start: postgres already started"
	idem__pg_find_bindir
	IDEM_PGDATA=$IDEM_TMP/pg
	PGHOST=$IDEM_TMP/pgrun
	IDEM_PG_LOG=$PGHOST/postgres.log
	mkdir -m 700 "$IDEM_PGDATA"
	mkdir -m 755 "$PGHOST"
	if [ "$(id -u)" -eq 0 ]; then
		if ! id -u postgres >/dev/null 2>&1; then
			useradd --system --no-create-home --shell /usr/sbin/nologin postgres ||
				idem_fail "cannot create the postgres system user"
		fi
		chown postgres: "$IDEM_PGDATA" "$PGHOST"
	fi
	if ! idem__pg_run "$IDEM_PG_BINDIR/initdb" -D "$IDEM_PGDATA" -U idem --auth=trust \
		-E UTF8 --no-locale -N >"$IDEM_TMP/initdb.log" 2>&1; then
		cat "$IDEM_TMP/initdb.log" >&2
		idem_fail "initdb failed"
	fi
	[ "${IDEM_PG_FSYNC:-0}" = 1 ] && fsync=on
	[ "${IDEM_PG_TCP:-0}" = 1 ] && tcp=127.0.0.1
	for try in 1 2 3 4 5; do
		PGPORT=$(idem_free_port)
		# With TCP the port must be free; a unix socket in our own directory never clashes.
		if [ -n "$tcp" ] && (exec 3<>"/dev/tcp/127.0.0.1/$PGPORT") 2>/dev/null; then
			continue
		fi
		cat >"$IDEM_TMP/postgresql.auto" <<-EOF
			# idem test fixture (attempt $try)
			port = $PGPORT
			listen_addresses = '$tcp'
			unix_socket_directories = '$PGHOST'
			max_connections = 100
			fsync = $fsync
			synchronous_commit = $fsync
			full_page_writes = $fsync
			lc_messages = 'C'
			log_line_prefix = '%m [%p] %q%u@%d '
			log_min_messages = warning
		EOF
		# Appended settings override initdb's; a retry appends again and wins again.
		# shellcheck disable=SC2016 # $1 is expanded by that sh
		idem__pg_run sh -c 'cat >>"$1"' sh "$IDEM_PGDATA/postgresql.conf" <"$IDEM_TMP/postgresql.auto"
		if idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_PGDATA" -l "$IDEM_PG_LOG" -w -t 60 \
			-s start >/dev/null; then
			break
		fi
		PGPORT=
	done
	[ -n "$PGPORT" ] || idem_fail "postgres did not start (log: $IDEM_PG_LOG)"
	PGUSER=idem
	PGDATABASE=idem
	export PGHOST PGPORT PGUSER PGDATABASE IDEM_PGDATA IDEM_PG_LOG
	IDEM_CONNINFO="host=$PGHOST port=$PGPORT dbname=idem user=idem"
	export IDEM_CONNINFO
	idem__pg_wait_ready
	idem_psql -d postgres -c 'CREATE DATABASE idem'
	idem_log "postgres $("$IDEM_PG_BINDIR/postgres" --version | awk '{ print $3 }') on $PGHOST port $PGPORT"
}

# idem_pg_stop [MODE] : stop Postgres (MODE fast, the default, smart or immediate).
idem_pg_stop() {
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_PGDATA" -m "${1:-fast}" -w -t 60 -s stop ||
		idem_fail "pg_ctl stop failed"
}

# idem_pg_start_again: start Postgres again after idem_pg_stop; returns once it accepts
# connections.
idem_pg_start_again() {
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_PGDATA" -l "$IDEM_PG_LOG" -w -t 60 -s \
		start >/dev/null || idem_fail "postgres did not start again (log: $IDEM_PG_LOG)"
	idem__pg_wait_ready
}

# idem_pg_restart_immediate: crash-stop Postgres (no checkpoint; clients lose their
# connections) and start it again; returns once it accepts connections after recovery.
idem_pg_restart_immediate() {
	idem_pg_stop immediate
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_PGDATA" -l "$IDEM_PG_LOG" -w -t 60 -s \
		start >/dev/null || idem_fail "postgres did not restart (log: $IDEM_PG_LOG)"
	idem__pg_wait_ready
}

# idem_sandbox_env FILE: write, as shell assignments, how to reach this test's Postgres and
# Kafka (PGHOST PGPORT PGUSER PGDATABASE IDEM_BROKERS), the file README's quickstart sources:
# tests/sandbox.sh writes it for a person, t_quickstart for the quickstart's commands.
idem_sandbox_env() {
	{
		echo "# the sandbox's Postgres (as PG* for psql and libpq) and embedded Kafka"
		printf 'export PGHOST=%q PGPORT=%q PGUSER=%q PGDATABASE=%q\n' \
			"$PGHOST" "$PGPORT" "$PGUSER" "$PGDATABASE"
		printf 'export IDEM_BROKERS=%q\n' "$IDEM_BROKERS"
	} >"$1"
}

# idem_psql ARGS... : psql on the test database, quiet, unaligned, tuples only, stop on error.
idem_psql() {
	psql -X -q -At -v ON_ERROR_STOP=1 "$@"
}

# ---- Kafka ------------------------------------------------------------------------------------

# idem__kafka_spawn NAME BOOTSTRAP_FILE CONTROL_SOCKET [--brokers N] [--no-aslr]
#                   [--env VAR=VALUE]... TOPIC:PARTITIONS... : start one embedded Kafka (output in
# $IDEM_TMP/NAME.out and NAME.log) and wait until it is ready; sets IDEM__KAFKA_SPAWNED_PID,
# IDEM__KAFKA_SPAWNED_BROKERS (its bootstrap list) and IDEM__KAFKA_SPAWNED_N (brokers).
# --no-aslr runs it with address space randomization off (setarch -R): the mock's cluster id
# ("mockCluster" + hex of the address its cluster was allocated at) is then, in practice, the
# same on every start of the same binary with the same arguments, so a new instance can stand
# for the same cluster. (Under AddressSanitizer it is the same even without: ASan's allocator
# does not randomize; see idem_kafka_start_other.) --env runs it with VAR=VALUE added.
idem__kafka_spawn() {
	local name=$1 bsfile=$2 ctl=$3 brokers=3 i
	local args=() pre=() envs=()
	shift 3
	while [ $# -gt 0 ]; do
		case $1 in
		--brokers)
			brokers=$2
			shift 2
			;;
		--no-aslr)
			command -v setarch >/dev/null || idem_fail "--no-aslr needs setarch (util-linux)"
			pre=(setarch "$(uname -m)" -R)
			shift
			;;
		--env)
			envs+=("$2")
			shift 2
			;;
		*)
			args+=(--topic "$1")
			shift
			;;
		esac
	done
	[ -x "$IDEM_BIN/idem-mock-kafka" ] || idem_fail "no $IDEM_BIN/idem-mock-kafka (set IDEM_BIN)"
	rm -f "$bsfile"
	[ ${#envs[@]} -eq 0 ] || pre=(env "${envs[@]}" "${pre[@]}")
	idem_spawn "$name" "${pre[@]}" "$IDEM_BIN/idem-mock-kafka" --brokers "$brokers" "${args[@]}" \
		--bootstrap-file "$bsfile" --control "$ctl" --exit-with-parent
	IDEM__KAFKA_SPAWNED_PID=$IDEM_LAST_PID
	IDEM__KAFKA_SPAWNED_N=$brokers
	for ((i = 0; i < 200; i++)); do
		[ -s "$bsfile" ] && break
		if ! idem__alive "$IDEM__KAFKA_SPAWNED_PID"; then
			cat "$IDEM_TMP/$name.log" >&2
			idem_fail "idem-mock-kafka ($name) exited during start-up"
		fi
		sleep 0.1
	done
	if [ ! -s "$bsfile" ]; then
		cat "$IDEM_TMP/$name.log" >&2
		idem_fail "idem-mock-kafka ($name) did not start within 20s"
	fi
	IDEM__KAFKA_SPAWNED_BROKERS=$(cat "$bsfile")
}

# idem_kafka_start [--brokers N] [--no-aslr] TOPIC:PARTITIONS... : start the embedded Kafka and
# wait until it is ready; exports IDEM_BROKERS (bootstrap list), IDEM_KAFKA_CTL (control socket)
# and IDEM_KAFKA_PID. Its output goes to $IDEM_TMP/kafka.out and kafka.log. --no-aslr: see
# idem__kafka_spawn (a later idem_kafka_stop; idem_kafka_start --no-aslr with the same
# arguments brings up a new, empty instance with the same cluster id: check it with
# idem_kafka_cluster_id).
idem_kafka_start() {
	[ -n "${IDEM_TMP:-}" ] || idem_fail "idem_kafka_start: call idem_tmp_init first"
	[ -z "${IDEM_KAFKA_PID:-}" ] || idem_fail "idem_kafka_start: kafka already started"
	IDEM_KAFKA_CTL=$IDEM_TMP/kafka.sock
	idem__kafka_spawn kafka "$IDEM_TMP/kafka.bootstrap" "$IDEM_KAFKA_CTL" "$@"
	IDEM_KAFKA_PID=$IDEM__KAFKA_SPAWNED_PID
	IDEM_BROKERS=$IDEM__KAFKA_SPAWNED_BROKERS
	export IDEM_BROKERS IDEM_KAFKA_CTL IDEM_KAFKA_PID
	idem_log "kafka mock ($IDEM__KAFKA_SPAWNED_N brokers) at $IDEM_BROKERS"
}

# idem_kafka_ctl COMMAND ARGS... : send one control command, print the reply ("ok" or
# "error: ..."); fails (status 1) unless the reply is ok. See "idem_kafka_ctl help".
idem_kafka_ctl() {
	"$IDEM_BIN/idem-mock-kafka" ctl "$IDEM_KAFKA_CTL" "$@"
}

# idem_kafka_stop: stop the embedded Kafka (all topics, messages and offsets are lost).
idem_kafka_stop() {
	[ -n "${IDEM_KAFKA_PID:-}" ] || return 0
	idem_stop "$IDEM_KAFKA_PID"
	[ "$IDEM_EXIT_STATUS" -eq 0 ] || idem_fail "idem-mock-kafka exited with status $IDEM_EXIT_STATUS"
	IDEM_KAFKA_PID=
}

# ---- a second, independent Kafka cluster ------------------------------------------------------
#
# For tests that move between clusters (a disaster recovery to a mirror): another embedded Kafka
# with its own brokers, topics, offsets and cluster id, stopped by the EXIT trap like the first.
# The helpers that take the test's Kafka from $IDEM_BROKERS (idem_produce, idem_wait_done,
# idem_write_config, idem_check_progress_at_end, ...) reach it through idem_with_kafka:
#
#   idem_kafka_start_other B payments:8        # $IDEM_BROKERS_B $IDEM_KAFKA_CTL_B
#   idem_with_kafka B idem_produce --count 100 --dup-ratio 0 --seed 3
#   idem_with_kafka B idem_write_config "$IDEM_TMP/b.yaml" g payments

# idem_kafka_start_other NAME [--brokers N] [--no-aslr] TOPIC:PARTITIONS... : start another
# embedded Kafka (NAME: letters, digits, _) and wait until it is ready; exports
# IDEM_BROKERS_<NAME>, IDEM_KAFKA_CTL_<NAME>, IDEM_KAFKA_PID_<NAME> and IDEM_KAFKA_CLUSTER_<NAME>
# (its cluster id). Output in $IDEM_TMP/kafka-NAME.out and kafka-NAME.log.
# Its cluster id differs from those of the Kafkas running (the first, and the others): a mock's
# id derives from an address, and under AddressSanitizer (whose allocator places the same
# allocation at the same address in every process) two instances started alike have the same
# one. Then it is started again with a larger ASan redzone (ASAN_OPTIONS; ignored without ASan),
# which moves the cluster's allocation elsewhere; if no try gives a new id, the test fails.
idem_kafka_start_other() {
	local name=${1:-} pidvar taken=() id extra n other var
	[[ $name =~ ^[A-Za-z0-9_]+$ ]] || idem_fail "idem_kafka_start_other: bad name '$name'"
	shift
	[ -n "${IDEM_TMP:-}" ] || idem_fail "idem_kafka_start_other: call idem_tmp_init first"
	pidvar=IDEM_KAFKA_PID_$name
	[ -z "${!pidvar:-}" ] || idem_fail "idem_kafka_start_other: kafka $name already started"
	[ -z "${IDEM_KAFKA_PID:-}" ] || taken+=("$(idem_kafka_cluster_id "$IDEM_BROKERS")")
	for other in "${IDEM__KAFKA_OTHERS[@]}"; do
		var=IDEM_KAFKA_PID_$other
		[ -z "${!var:-}" ] || { var=IDEM_KAFKA_CLUSTER_$other && taken+=("${!var}"); }
	done
	printf -v "IDEM_KAFKA_CTL_$name" %s "$IDEM_TMP/kafka-$name.sock"
	for extra in '' 256 512 1024 2048; do
		local rz=()
		[ -z "$extra" ] || rz=(--env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}redzone=$extra")
		idem__kafka_spawn "kafka-$name" "$IDEM_TMP/kafka-$name.bootstrap" \
			"$IDEM_TMP/kafka-$name.sock" "${rz[@]}" "$@"
		id=$(idem_kafka_cluster_id "$IDEM__KAFKA_SPAWNED_BROKERS")
		n=0
		for other in "${taken[@]}"; do
			[ "$other" != "$id" ] || n=$((n + 1))
		done
		[ "$n" -gt 0 ] || break
		idem_log "kafka mock $name has cluster id $id, which a running one has: starting it again${extra:+ (redzone $extra was not enough)}"
		idem_stop "$IDEM__KAFKA_SPAWNED_PID"
		id=
	done
	[ -n "$id" ] || idem_fail "idem_kafka_start_other: kafka $name always got a cluster id a running one has"
	printf -v "IDEM_KAFKA_PID_$name" %s "$IDEM__KAFKA_SPAWNED_PID"
	printf -v "IDEM_BROKERS_$name" %s "$IDEM__KAFKA_SPAWNED_BROKERS"
	printf -v "IDEM_KAFKA_CLUSTER_$name" %s "$id"
	export "IDEM_BROKERS_$name" "IDEM_KAFKA_CTL_$name" "IDEM_KAFKA_PID_$name" \
		"IDEM_KAFKA_CLUSTER_$name"
	IDEM__KAFKA_OTHERS+=("$name")
	idem_log "kafka mock $name ($IDEM__KAFKA_SPAWNED_N brokers, cluster $id) at $IDEM__KAFKA_SPAWNED_BROKERS"
}

# idem_kafka_stop_other NAME : stop the Kafka started by idem_kafka_start_other NAME (all its
# topics, messages and offsets are lost).
idem_kafka_stop_other() {
	local pidvar=IDEM_KAFKA_PID_${1:-}
	[[ ${1:-} =~ ^[A-Za-z0-9_]+$ ]] || idem_fail "idem_kafka_stop_other: bad name '${1:-}'"
	[ -n "${!pidvar:-}" ] || return 0
	idem_stop "${!pidvar}"
	[ "$IDEM_EXIT_STATUS" -eq 0 ] ||
		idem_fail "idem-mock-kafka $1 exited with status $IDEM_EXIT_STATUS"
	printf -v "$pidvar" %s ""
}

# idem_with_kafka NAME CMD... : run CMD (a function or a command) in this shell with
# IDEM_BROKERS and IDEM_KAFKA_CTL naming the Kafka started as NAME (idem_kafka_start_other), then
# restore them; what CMD sets (IDEM_PRODUCED, ...) stays set. Returns CMD's status.
idem_with_kafka() {
	local name=${1:-} bvar cvar saved_brokers=${IDEM_BROKERS:-} saved_ctl=${IDEM_KAFKA_CTL:-} rc
	[[ $name =~ ^[A-Za-z0-9_]+$ ]] || idem_fail "idem_with_kafka: bad name '$name'"
	shift
	bvar=IDEM_BROKERS_$name
	cvar=IDEM_KAFKA_CTL_$name
	[ -n "${!bvar:-}" ] || idem_fail "idem_with_kafka: no kafka started as '$name'"
	IDEM_BROKERS=${!bvar}
	IDEM_KAFKA_CTL=${!cvar}
	"$@"
	rc=$?
	IDEM_BROKERS=$saved_brokers
	IDEM_KAFKA_CTL=$saved_ctl
	return "$rc"
}

# idem_kafka_cluster_id [BROKERS] : print the cluster id of the Kafka at BROKERS (default
# $IDEM_BROKERS), as idemd reads it (rd_kafka_clusterid) and records it in
# idem.partition_progress.kafka_cluster.
idem_kafka_cluster_id() {
	"$IDEM_BIN/idem-kafkatool" cluster-id --brokers "${1:-$IDEM_BROKERS}" ||
		idem_fail "cannot read the cluster id of ${1:-$IDEM_BROKERS}"
}

# idem_kafkatool SUBCOMMAND ARGS... : run idem-kafkatool (see "idem_kafkatool --help").
idem_kafkatool() {
	"$IDEM_BIN/idem-kafkatool" "$@"
}

# ---- Schema Registry and Avro ------------------------------------------------------------------
#
# Avro messages in the Confluent wire format, written by an encoder independent of idemd's
# (tests/tools/avro_encode.py: Apache Avro's Python library), with their schemas in a small
# Confluent-compatible Schema Registry (tests/tools/registry.py). Both run under
# $IDEM_AVRO_PYTHON (default /usr/bin/python3, which Debian's python3-avro is installed for; the
# python3 first on PATH may lack it). See each tool's --help for formats and options.
#
#   idem_registry_start                                    # $IDEM_REGISTRY_URL
#   id=$(idem_registry_register payments-value "$IDEM_TMP/payment.avsc")
#   idem_avro_encode --schema-file "$IDEM_TMP/payment.avsc" --schema-id "$id" \
#   	--key-field payment_id --records "$IDEM_TMP/in.jsonl" --output "$IDEM_TMP/msgs.tsv"
#   idem_avro_produce payments "$IDEM_TMP/msgs.tsv"        # $IDEM_PRODUCED

: "${IDEM_AVRO_PYTHON:=/usr/bin/python3}"
export IDEM_AVRO_PYTHON

# idem__avro_python_check: fail unless $IDEM_AVRO_PYTHON can import avro (python3-avro).
idem__avro_python_check() {
	[ "${IDEM__AVRO_PYTHON_OK:-0}" = 1 ] && return 0
	"$IDEM_AVRO_PYTHON" -c 'import avro.io, avro.schema' 2>/dev/null ||
		idem_fail "$IDEM_AVRO_PYTHON cannot import avro: install python3-avro (tests/install-deps.sh) or set IDEM_AVRO_PYTHON"
	IDEM__AVRO_PYTHON_OK=1
}

# idem_registry_start [REGISTRY_OPTION...] : start tests/tools/registry.py on 127.0.0.1 and wait
# until it listens. The port is $IDEM_REGISTRY_PORT if set (so a registry started again after
# idem_registry_stop keeps its URL), else a free one. Its schemas persist in
# $IDEM_REGISTRY_STATE ($IDEM_TMP/registry.state.json): started again, it serves the same ids.
# REGISTRY_OPTIONs go to registry.py: --user U --password P, --hide-ids 3,5, --delay-ms N,
# --fail-5xx (not --port, --port-file, --state, --log). Exports IDEM_REGISTRY_URL
# (http://127.0.0.1:PORT), IDEM_REGISTRY_PORT, IDEM_REGISTRY_PID, IDEM_REGISTRY_STATE,
# IDEM_REGISTRY_LOG (one line per request: METHOD PATH STATUS, kept across restarts) and
# IDEM_REGISTRY_USER / IDEM_REGISTRY_PASSWORD (empty without --user; idem_registry_register
# uses them). Output in $IDEM_TMP/registry.out and registry.log; the EXIT trap stops it.
idem_registry_start() {
	local portfile=$IDEM_TMP/registry.port prev='' a i
	[ -n "${IDEM_TMP:-}" ] || idem_fail "idem_registry_start: call idem_tmp_init first"
	[ -z "${IDEM_REGISTRY_PID:-}" ] || idem_fail "idem_registry_start: the registry already runs"
	idem__avro_python_check
	IDEM_REGISTRY_USER=
	IDEM_REGISTRY_PASSWORD=
	for a in "$@"; do
		case $prev in
		--user) IDEM_REGISTRY_USER=$a ;;
		--password) IDEM_REGISTRY_PASSWORD=$a ;;
		esac
		case $a in
		--user=*) IDEM_REGISTRY_USER=${a#--user=} ;;
		--password=*) IDEM_REGISTRY_PASSWORD=${a#--password=} ;;
		esac
		prev=$a
	done
	: "${IDEM_REGISTRY_PORT:=$(idem_free_port)}"
	IDEM_REGISTRY_STATE=$IDEM_TMP/registry.state.json
	IDEM_REGISTRY_LOG=$IDEM_TMP/registry-requests.log
	rm -f "$portfile"
	idem_spawn registry "$IDEM_AVRO_PYTHON" "$IDEM_SRC/tests/tools/registry.py" \
		--port "$IDEM_REGISTRY_PORT" --port-file "$portfile" --state "$IDEM_REGISTRY_STATE" \
		--log "$IDEM_REGISTRY_LOG" "$@"
	IDEM_REGISTRY_PID=$IDEM_LAST_PID
	for ((i = 0; i < 200; i++)); do
		[ -s "$portfile" ] && break
		if ! idem__alive "$IDEM_REGISTRY_PID"; then
			cat "$IDEM_TMP/registry.log" >&2
			IDEM_REGISTRY_PID=
			idem_fail "registry.py exited during start-up (port $IDEM_REGISTRY_PORT)"
		fi
		sleep 0.1
	done
	[ -s "$portfile" ] || idem_fail "registry.py did not listen within 20s"
	IDEM_REGISTRY_URL=http://127.0.0.1:$IDEM_REGISTRY_PORT
	export IDEM_REGISTRY_URL IDEM_REGISTRY_PORT IDEM_REGISTRY_PID IDEM_REGISTRY_STATE \
		IDEM_REGISTRY_LOG IDEM_REGISTRY_USER IDEM_REGISTRY_PASSWORD
	idem_log "schema registry at $IDEM_REGISTRY_URL${*:+ ($*)}"
}

# idem_registry_stop : stop the registry (SIGTERM, wait; it exits 0). Its state file stays, and
# $IDEM_REGISTRY_PORT too: idem_registry_start afterwards serves the same ids on the same URL.
idem_registry_stop() {
	[ -n "${IDEM_REGISTRY_PID:-}" ] || return 0
	idem_stop "$IDEM_REGISTRY_PID"
	[ "$IDEM_EXIT_STATUS" -eq 0 ] || idem_fail "registry.py exited with status $IDEM_EXIT_STATUS"
	IDEM_REGISTRY_PID=
}

# idem_registry_register SUBJECT SCHEMA_FILE [--schema-type JSON|PROTOBUF] : register the schema
# in SCHEMA_FILE (its text, surrounding whitespace removed) under SUBJECT through the REST API,
# as a producer does; prints its id. The same schema under any subject has the same id.
idem_registry_register() {
	local auth=()
	[ $# -ge 2 ] || idem_fail "usage: idem_registry_register SUBJECT SCHEMA_FILE [--schema-type T]"
	[ -n "${IDEM_REGISTRY_URL:-}" ] || idem_fail "idem_registry_register: call idem_registry_start first"
	[ -z "${IDEM_REGISTRY_USER:-}" ] ||
		auth=(--user "$IDEM_REGISTRY_USER" --password "$IDEM_REGISTRY_PASSWORD")
	"$IDEM_AVRO_PYTHON" "$IDEM_SRC/tests/tools/registry.py" register --url "$IDEM_REGISTRY_URL" \
		--subject "$1" --schema-file "$2" "${auth[@]}" "${@:3}" ||
		idem_fail "registering $2 under subject '$1' failed"
}

# idem_avro_encode ARGS... : tests/tools/avro_encode.py ARGS (encode, payments, payments-schema,
# decode; see its --help), stdin and stdout passed through.
idem_avro_encode() {
	idem__avro_python_check
	"$IDEM_AVRO_PYTHON" "$IDEM_SRC/tests/tools/avro_encode.py" "$@" ||
		idem_fail "avro_encode.py $* failed"
}

# idem_proto_encode ARGS... : tests/tools/proto_encode.py ARGS (see its docstring): Protobuf
# messages written by python3-protobuf's pure-Python implementation, stdin and stdout passed
# through.
idem_proto_encode() {
	if [ "${IDEM__PROTO_PYTHON_OK:-0}" != 1 ]; then
		"$IDEM_AVRO_PYTHON" -c 'import google.protobuf.json_format' 2>/dev/null ||
			idem_fail "$IDEM_AVRO_PYTHON cannot import google.protobuf: install python3-protobuf (tests/install-deps.sh)"
		command -v protoc >/dev/null || idem_fail "no protoc: install protobuf-compiler (tests/install-deps.sh)"
		IDEM__PROTO_PYTHON_OK=1
	fi
	"$IDEM_AVRO_PYTHON" "$IDEM_SRC/tests/tools/proto_encode.py" "$@" ||
		idem_fail "proto_encode.py $* failed"
}

# idem_json_frame ARGS... : tests/tools/json_frame.py ARGS (see its docstring): JSON documents
# behind the Confluent header, stdin and stdout passed through.
idem_json_frame() {
	"$IDEM_AVRO_PYTHON" "$IDEM_SRC/tests/tools/json_frame.py" "$@" ||
		idem_fail "json_frame.py $* failed"
}

# idem_avro_produce TOPIC FILE [--rate MSGS_PER_SEC] [--partition P] [-X PROP=VALUE]... : produce
# the messages of FILE (KEYHEX<TAB>VALUEHEX[<TAB>PARTITION] lines, as avro_encode.py writes
# them) to TOPIC of the test's Kafka, in order, and wait until all are delivered (see
# "idem-kafkatool produce-file --help"). Prints nothing; sets IDEM_PRODUCED (messages written).
idem_avro_produce() {
	local topic=$1 file=$2 out
	[ $# -ge 2 ] || idem_fail "usage: idem_avro_produce TOPIC FILE [--rate R] [--partition P]"
	shift 2
	out=$("$IDEM_BIN/idem-kafkatool" produce-file --brokers "$IDEM_BROKERS" --topic "$topic" \
		--input "$file" "$@") || idem_fail "produce-file $file to topic $topic failed"
	IDEM_PRODUCED=${out#produced=}
	[[ $IDEM_PRODUCED =~ ^[0-9]+$ ]] || idem_fail "unexpected produce-file output: $out"
}

# ---- Postgres going back in time: base backups, restores, standbys, failover ---------------------
#
# For tests where the database loses its last commits while Kafka keeps the offsets committed
# after them: an operator restores a base backup, or promotes an asynchronous standby that had
# not received the last commits. Every cluster started here is stopped by the EXIT trap.
#
#   idem_pg_basebackup "$IDEM_TMP/backup"   # while clients write
#   idem_pg_restore "$IDEM_TMP/backup"      # the database is back where the backup ended
#
#   idem_pg_standby_start [--sync]          # $IDEM_STANDBY_* and $IDEM_FAILOVER_CONNINFO
#   idem_pg_standby_pause                   # the standby stops receiving: it falls behind
#   idem_pg_failover                        # primary crashes, the standby is promoted

# idem__pg_stop_dir DIR : stop the cluster of data dir DIR at once (-m immediate) if it runs;
# for the EXIT trap (IDEM_CLEANUP_HOOKS).
idem__pg_stop_dir() {
	[ -f "$1/postmaster.pid" ] || return 0
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$1" -m immediate -s stop >/dev/null 2>&1
}

# idem__pg_mkdir DIR MODE : create DIR with MODE, owned by the user the server runs as.
idem__pg_mkdir() {
	mkdir -m "$2" "$1" || idem_fail "cannot create $1"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$1" || idem_fail "cannot give $1 to the postgres user"
	fi
}

# idem__pg_basebackup DIR HOST PORT ARGS... : a physical base backup of the cluster at HOST:PORT
# into DIR (created, must not exist) with the WAL streamed alongside (-X stream), so that DIR
# starts on its own; ARGS go to pg_basebackup (e.g. -R). An immediate checkpoint starts it: the
# default (spread) one can take minutes. Its output goes to $IDEM_TMP/basebackup-NAME.log.
idem__pg_basebackup() {
	local dir=$1 host=$2 port=$3 log sync=--no-sync
	shift 3
	log=$IDEM_TMP/basebackup-$(basename "$dir").log
	[ "${IDEM_PG_FSYNC:-0}" = 1 ] && sync=
	[ ! -e "$dir" ] || idem_fail "idem_pg_basebackup: $dir already exists"
	idem__pg_mkdir "$dir" 700
	if ! idem__pg_run "$IDEM_PG_BINDIR/pg_basebackup" -h "$host" -p "$port" -U idem -D "$dir" \
		-X stream --checkpoint=fast $sync -v "$@" >"$log" 2>&1; then
		cat "$log" >&2
		idem_fail "pg_basebackup into $dir failed"
	fi
}

# idem_pg_basebackup DIR : take a base backup of the running cluster into DIR (created, mode
# 700, owned by the server's user) while clients go on writing; the backup holds what was
# committed when it ended. Exports IDEM_BACKUP_END_LSN (the WAL position it ends at).
idem_pg_basebackup() {
	[ -n "${IDEM_PGDATA:-}" ] || idem_fail "idem_pg_basebackup: postgres is not started"
	idem__pg_basebackup "$1" "$PGHOST" "$PGPORT"
	IDEM_BACKUP_END_LSN=$(sed -n 's/.*write-ahead log end point: \([0-9A-F/]*\).*/\1/p' \
		"$IDEM_TMP/basebackup-$(basename "$1").log")
	export IDEM_BACKUP_END_LSN
	idem_log "base backup in $1 (ends at ${IDEM_BACKUP_END_LSN:-?})"
}

# idem_pg_restore DIR : the operator's restore of a base backup taken by idem_pg_basebackup:
# stop the server (fast) if it runs (one already stopped by idem_pg_stop stays down until the
# restored one starts), move its data dir aside (to $IDEM_TMP/pg.before-restore, .2, ...), put
# a copy of DIR in its place (same owner and mode; DIR stays as it is and can be restored
# again) and start it; returns once it accepts connections. Port and socket dir are those of
# the backed-up cluster (its postgresql.conf). Exports IDEM_PG_BEFORE_RESTORE (the old dir).
idem_pg_restore() {
	local aside=$IDEM_TMP/pg.before-restore n=1
	[ -f "$1/backup_label" ] || idem_fail "idem_pg_restore: $1 is not a base backup (no backup_label)"
	[ -n "${IDEM_PGDATA:-}" ] || idem_fail "idem_pg_restore: postgres is not started"
	while [ -e "$aside" ]; do
		n=$((n + 1))
		aside=$IDEM_TMP/pg.before-restore.$n
	done
	if [ -f "$IDEM_PGDATA/postmaster.pid" ]; then
		idem_pg_stop fast
	fi
	mv "$IDEM_PGDATA" "$aside" || idem_fail "cannot move $IDEM_PGDATA aside"
	cp -a "$1" "$IDEM_PGDATA" || idem_fail "cannot copy the backup $1 to $IDEM_PGDATA"
	IDEM_PG_BEFORE_RESTORE=$aside
	export IDEM_PG_BEFORE_RESTORE
	idem_pg_start_again
	idem_log "restored $1 (the data dir before the restore is in $aside)"
}

# idem__pg_standby_streaming SYNC_STATE : true once the primary's pg_stat_replication shows the
# standby (application_name idem_standby) streaming, and in SYNC_STATE (async, sync) if given.
idem__pg_standby_streaming() {
	local want="state = 'streaming'"
	[ -z "${1:-}" ] || want="$want AND sync_state = '$1'"
	[ "$(idem_psql -d postgres -c "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'idem_standby' AND $want")" = 1 ]
}

# idem_pg_standby_start [--sync] : a streaming standby of the running primary (hot standby,
# readable): base backup with -R into $IDEM_TMP/pg-standby, its own port and socket dir
# ($IDEM_TMP/pgrun-standby), log $IDEM_TMP/postgres-standby.log; primary_conninfo names it
# idem_standby. With --sync the primary's synchronous_standby_names names it, so a COMMIT on the
# primary waits until the standby has its WAL (synchronous_commit on: call
# idem_pg_durable_commits first, the fixture turns it off). Returns once the primary shows it
# streaming (and sync with --sync). Exports IDEM_STANDBY_PGDATA IDEM_STANDBY_HOST
# IDEM_STANDBY_PORT IDEM_STANDBY_LOG IDEM_STANDBY_SYNC (0 or 1), and IDEM_FAILOVER_CONNINFO:
# primary then standby, the first that accepts writes (for idemd's config, before the failover).
idem_pg_standby_start() {
	local sync=0 dir=$IDEM_TMP/pg-standby run=$IDEM_TMP/pgrun-standby tcp port try
	case ${1:-} in
	--sync) sync=1 ;;
	'') ;;
	*) idem_fail "idem_pg_standby_start: unknown option '$1'" ;;
	esac
	[ -n "${IDEM_PGDATA:-}" ] || idem_fail "idem_pg_standby_start: postgres is not started"
	[ -z "${IDEM_STANDBY_PGDATA:-}" ] || idem_fail "idem_pg_standby_start: standby already started"
	IDEM_CLEANUP_HOOKS+=("idem__pg_stop_dir '$dir'" "idem__pg_stop_dir '$IDEM_PGDATA'")
	idem__pg_basebackup "$dir" "$PGHOST" "$PGPORT" -R
	idem__pg_mkdir "$run" 755
	tcp=$(idem_psql -d postgres -c 'SHOW listen_addresses')
	for try in 1 2 3 4 5; do
		port=$(idem_free_port)
		[ "$port" != "$PGPORT" ] || continue
		if [ -n "$tcp" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue
		fi
		break
	done
	# Appended settings win over the primary's, copied by the backup; the primary_conninfo
	# written by -R comes first in postgresql.auto.conf, this one after it wins.
	# shellcheck disable=SC2016 # $1 is expanded by that sh
	idem__pg_run sh -c 'cat >>"$1"' sh "$dir/postgresql.conf" <<-EOS
		# idem test fixture: the standby
		port = $port
		unix_socket_directories = '$run'
		hot_standby = on
	EOS
	# shellcheck disable=SC2016 # $1 is expanded by that sh
	idem__pg_run sh -c 'cat >>"$1"' sh "$dir/postgresql.auto.conf" <<-EOS
		primary_conninfo = 'host=$PGHOST port=$PGPORT user=idem application_name=idem_standby'
	EOS
	IDEM_STANDBY_PGDATA=$dir
	IDEM_STANDBY_HOST=$run
	IDEM_STANDBY_PORT=$port
	IDEM_STANDBY_LOG=$IDEM_TMP/postgres-standby.log
	IDEM_STANDBY_SYNC=$sync
	IDEM_STANDBY_PAUSED=0
	IDEM_FAILOVER_CONNINFO="host=$PGHOST,$run port=$PGPORT,$port dbname=idem user=idem target_session_attrs=read-write"
	export IDEM_STANDBY_PGDATA IDEM_STANDBY_HOST IDEM_STANDBY_PORT IDEM_STANDBY_LOG \
		IDEM_STANDBY_SYNC IDEM_STANDBY_PAUSED IDEM_FAILOVER_CONNINFO
	# pg_ctl, as the server's user, appends to the log; $IDEM_TMP is not that user's.
	: >"$IDEM_STANDBY_LOG"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$IDEM_STANDBY_LOG" || idem_fail "cannot give $IDEM_STANDBY_LOG to postgres"
	fi
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$dir" -l "$IDEM_STANDBY_LOG" -w -t 60 -s \
		start >/dev/null || idem_fail "the standby did not start (log: $IDEM_STANDBY_LOG)"
	if [ "$sync" = 1 ]; then
		idem_psql -d postgres -c "ALTER SYSTEM SET synchronous_standby_names = '\"idem_standby\"'" >/dev/null
		idem_psql -d postgres -c 'SELECT pg_reload_conf()' >/dev/null
		idem_wait_until 60 "the standby streaming, synchronous" idem__pg_standby_streaming sync
	else
		idem_wait_until 60 "the standby streaming" idem__pg_standby_streaming
	fi
	idem_log "standby ($([ "$sync" = 1 ] && echo sync || echo async)) on $run port $port"
}

# idem_standby_psql ARGS... : idem_psql on the standby.
idem_standby_psql() {
	idem_psql -h "$IDEM_STANDBY_HOST" -p "$IDEM_STANDBY_PORT" "$@"
}

# idem_pg_standby_pause : make the asynchronous standby fall behind for good: it is stopped
# (fast), so it receives no more WAL while the primary goes on committing. Pausing replay
# (pg_wal_replay_pause) would not do: the standby would still receive the WAL, and a promotion
# replays everything received. Exports IDEM_STANDBY_PAUSE_LSN (the WAL position the standby
# had received just before it stopped; the primary's position just after is logged with it).
idem_pg_standby_pause() {
	local primary_lsn
	[ -n "${IDEM_STANDBY_PGDATA:-}" ] || idem_fail "idem_pg_standby_pause: no standby"
	[ "$IDEM_STANDBY_SYNC" = 0 ] ||
		idem_fail "idem_pg_standby_pause: a synchronous standby would stop every commit"
	[ "$IDEM_STANDBY_PAUSED" = 0 ] || idem_fail "idem_pg_standby_pause: already paused"
	IDEM_STANDBY_PAUSE_LSN=$(idem_standby_psql -d postgres -c 'SELECT pg_last_wal_receive_lsn()')
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_STANDBY_PGDATA" -m fast -w -t 60 -s stop ||
		idem_fail "cannot stop the standby"
	primary_lsn=$(idem_psql -d postgres -c 'SELECT pg_current_wal_lsn()')
	IDEM_STANDBY_PAUSED=1
	export IDEM_STANDBY_PAUSED IDEM_STANDBY_PAUSE_LSN
	idem_log "standby stopped: it has WAL up to ~$IDEM_STANDBY_PAUSE_LSN, the primary is at $primary_lsn and goes on"
}

# idem__pg_standby_run : start the stopped standby; returns once it accepts (read-only)
# connections.
idem__pg_standby_run() {
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_STANDBY_PGDATA" -l "$IDEM_STANDBY_LOG" -w \
		-t 60 -s start >/dev/null || idem_fail "the standby did not start (log: $IDEM_STANDBY_LOG)"
	idem_wait_until 60 "the standby to accept connections" "$IDEM_PG_BINDIR/pg_isready" -q \
		-h "$IDEM_STANDBY_HOST" -p "$IDEM_STANDBY_PORT" -U idem -d postgres
	IDEM_STANDBY_PAUSED=0
}

# idem_pg_standby_resume : start the paused standby again; it catches up with the primary and
# streams; returns once the primary shows it streaming.
idem_pg_standby_resume() {
	[ "${IDEM_STANDBY_PAUSED:-0}" = 1 ] || idem_fail "idem_pg_standby_resume: the standby is not paused"
	idem__pg_standby_run
	idem_wait_until 60 "the standby streaming again" idem__pg_standby_streaming
}

# idem_pg_failover [CMD...] : the primary crashes (-m immediate) and the standby is promoted
# (started first, without the primary, if it was paused: it comes up with only the WAL it had).
# From then on this shell's Postgres is the standby: PGHOST PGPORT IDEM_CONNINFO IDEM_PGDATA
# IDEM_PG_LOG point at it (idem_psql reaches it; the EXIT trap stops it); the old primary's are
# kept in IDEM_OLD_PRIMARY_{PGDATA,HOST,PORT}. CMD, if given, runs (in this shell) once the
# primary is down and before the promotion, when the standby holds exactly what it will start
# with and nobody can write to it yet (e.g. to count rows). Clients configured with
# $IDEM_FAILOVER_CONNINFO reach the promoted standby by themselves. Exports IDEM_PROMOTED_AT
# ($EPOCHREALTIME once the promotion completed).
idem_pg_failover() {
	[ -n "${IDEM_STANDBY_PGDATA:-}" ] || idem_fail "idem_pg_failover: no standby"
	idem_pg_stop immediate
	if [ "$IDEM_STANDBY_PAUSED" = 1 ]; then
		idem__pg_standby_run
	fi
	IDEM_OLD_PRIMARY_PGDATA=$IDEM_PGDATA
	IDEM_OLD_PRIMARY_HOST=$PGHOST
	IDEM_OLD_PRIMARY_PORT=$PGPORT
	IDEM_PGDATA=$IDEM_STANDBY_PGDATA
	IDEM_PG_LOG=$IDEM_STANDBY_LOG
	PGHOST=$IDEM_STANDBY_HOST
	PGPORT=$IDEM_STANDBY_PORT
	IDEM_CONNINFO="host=$PGHOST port=$PGPORT dbname=idem user=idem"
	export IDEM_OLD_PRIMARY_PGDATA IDEM_OLD_PRIMARY_HOST IDEM_OLD_PRIMARY_PORT IDEM_PGDATA \
		IDEM_PG_LOG PGHOST PGPORT IDEM_CONNINFO
	if [ $# -gt 0 ]; then
		idem__pg_standby_replayed
		"$@"
	fi
	idem__pg_run "$IDEM_PG_BINDIR/pg_ctl" -D "$IDEM_STANDBY_PGDATA" -w -t 60 -s promote ||
		idem_fail "cannot promote the standby (log: $IDEM_STANDBY_LOG)"
	IDEM_PROMOTED_AT=$EPOCHREALTIME
	export IDEM_PROMOTED_AT
	[ "$(idem_psql -c 'SELECT pg_is_in_recovery()')" = f ] ||
		idem_fail "the promoted standby is still in recovery"
	idem_log "failover: the primary is down, the standby promoted on $PGHOST port $PGPORT"
}

# idem__pg_standby_replayed : wait until the standby (this shell's Postgres), its primary gone,
# has replayed all the WAL it has (what a promotion would replay first): its replay position
# stays the same for half a second.
idem__pg_standby_replayed() {
	local prev='' cur i
	for ((i = 0; i < 120; i++)); do
		cur=$(idem_psql -d postgres -c 'SELECT pg_last_wal_replay_lsn()')
		[ "$cur" != "$prev" ] || return 0
		prev=$cur
		sleep 0.5
	done
	idem_fail "the standby is still replaying after 60 s"
}
