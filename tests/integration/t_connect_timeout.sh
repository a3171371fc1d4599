#!/usr/bin/env bash
# A Postgres address that accepts connections and never answers (a hung host, a proxy in front of
# a dead server): each connection attempt gives up after IDEM_PG_CONNECT_TIMEOUT_S (10 s,
# lib/idem_pg.h) and idemd retries with backoff, saying why, instead of waiting for ever in its
# first attempt. A connect_timeout in the conninfo is honoured instead (here 2 s, libpq's least).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:1 --config idemd.yaml g-ctimeout payments
port=$(idem_free_port)
# Listens, never accepts: the kernel completes the handshake, and nothing ever answers.
idem_spawn silent python3 -c "import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $port))
s.listen(64)
time.sleep(3600)"
idem_wait_until 10 "the silent listener" python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)"

timeouts() { grep -c 'cannot start: .*timeout expired' "$IDEM_TMP/idemd-$1.log" || true; }

sed "s|^  conninfo: .*|  conninfo: \"host=127.0.0.1 port=$port dbname=idem user=idem\"|" \
	"$IDEM_TMP/idemd.yaml" >"$IDEM_TMP/silent.yaml"
idemd_start a "$IDEM_TMP/silent.yaml"
timed_out_twice() { [ "$(timeouts a)" -ge 2 ]; }
idem_wait_until 40 "two connection attempts that timed out" timed_out_twice
idem__alive "$(idemd_pid a)" || idem_fail "idemd gave up instead of retrying"
idemd_stop a

sed "s|^  conninfo: .*|  conninfo: \"host=127.0.0.1 port=$port dbname=idem user=idem connect_timeout=2\"|" \
	"$IDEM_TMP/idemd.yaml" >"$IDEM_TMP/silent2.yaml"
idemd_start b "$IDEM_TMP/silent2.yaml"
# Three attempts of 2 s (libpq's least) fit in 15 s; with the default they would take 30.
timed_out_thrice() { [ "$(timeouts b)" -ge 3 ]; }
idem_wait_until 15 "three attempts timed out with connect_timeout=2" timed_out_thrice
idemd_stop b
echo "ok: a silent server: attempts time out after 10 s by default, after the conninfo's connect_timeout if it has one, and are retried"
