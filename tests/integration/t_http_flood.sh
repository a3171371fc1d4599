#!/usr/bin/env bash
# The operator endpoints stay up under abuse. While 200 idle and 20 slow-header connections
# (one header byte every 0.3 s) are held open from the prober's own address, 300 more idle ones
# from 127.0.0.2 and 300 slow-header ones from 127.0.0.3 (both over the per-client limit of 256),
# /healthz and /readyz answer 200 every time they are asked, /metrics still scrapes, and the
# payment stream produced during the flood is applied exactly once. The per-client limit is
# exercised: of 127.0.0.3's 300 connections the server closes the 44 over 256 and holds 256, and
# a new request from 127.0.0.3 goes unanswered while one from 127.0.0.1 is served. Prints the
# probe latencies and the apply time of the same stream with and without the flood. Without the
# event loop and the per-client and total limits (idemd(8) RUNNING), the 17th connection was
# refused and the probes failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:4
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-flood payments --metrics "0.0.0.0:$port"
idem_setup_db "$cfg"
url=http://127.0.0.1:$port

# The flooder: holds IDLE connections that send nothing (reopened when the server drops them)
# and SLOW ones that send a request header one byte at a time, from source address SRC, until
# killed; says "connected=N" once it has tried them all.
cat >"$IDEM_TMP/flood.py" <<'EOF'
import socket, sys, time
host, port, src, n_idle, n_slow = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def conn():
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(2)
    try:
        s.connect((host, port))
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s
idle = [conn() for _ in range(n_idle)]
slow = [conn() for _ in range(n_slow)]
for s in slow:
    if s is not None:
        s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
print("connected=%d" % sum(s is not None for s in idle + slow), flush=True)
while True:
    time.sleep(0.3)
    for s in slow:
        try:
            if s is not None:
                s.send(b"a")
        except OSError:
            pass
    for i, s in enumerate(idle):
        try:
            if s is None or s.recv(1) == b"":
                raise OSError
        except BlockingIOError:
            pass
        except OSError:
            if s is not None:
                s.close()
            idle[i] = conn()
EOF

# The limit prober: opens N slow-header connections from SRC one after the other and keeps each
# sending a header byte every 0.3 s (so the 5 s idle timeout never closes one); prints
# "open=O closed=C" whenever a connection the server closed (EOF or reset) changes the count.
cat >"$IDEM_TMP/limit.py" <<'EOF'
import select, socket, sys
host, port, src, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
conns = []
for _ in range(n):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(2)
    s.connect((host, port))
    s.setblocking(False)
    s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    conns.append(s)
closed = set()
last = None
while True:
    for s in conns:
        if s in closed:
            continue
        try:
            if s.recv(1) == b"":
                closed.add(s)
        except BlockingIOError:
            try:
                s.send(b"a")
            except OSError:
                closed.add(s)
        except OSError:
            closed.add(s)
    now = (len(conns) - len(closed), len(closed))
    if now != last:
        print("open=%d closed=%d" % now, flush=True)
        last = now
    select.select([s for s in conns if s not in closed], [], [], 0.3)
EOF

# est_from ADDR: established connections idemd's HTTP side holds from client address ADDR, from
# /proc/net/tcp (the server's end: local port $port; addresses in little-endian hex).
est_from() {
	local a b c d hex
	IFS=. read -r a b c d <<<"$1"
	hex=$(printf '%02X%02X%02X%02X' "$d" "$c" "$b" "$a")
	awk -v p="$(printf ':%04X' "$port")" -v a="$hex:" '$2 ~ p"$" && index($3, a) == 1 && $4 == "01"' \
		/proc/net/tcp | wc -l
}

idemd_start a "$cfg"
idem_wait_until 30 "/readyz" curl -fsS "$url/readyz" -o /dev/null

# The same stream (3000 messages at 1500/s) without and with the flood: how long from its first
# message until it is all committed.
t0=$EPOCHREALTIME
idem_produce_bg --count 3000 --dup-ratio 0.2 --seed 11 --rate 1500
idem_produce_wait 60
idem_wait_done g-flood 120
base_s=$(awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $t0 }")
cp "$IDEM_TMP/manifest.csv" "$IDEM_TMP/m1.csv"
p1=$IDEM_PRODUCED u1=$IDEM_UNIQUE

idem_spawn flood-self python3 "$IDEM_TMP/flood.py" 127.0.0.1 "$port" 127.0.0.1 200 20
idem_spawn flood-other python3 "$IDEM_TMP/flood.py" 127.0.0.1 "$port" 127.0.0.2 300 0
flooded() { grep -q connected= "$IDEM_TMP/flood-self.out" && grep -q connected= "$IDEM_TMP/flood-other.out"; }
idem_wait_until 60 "the flooders to connect" flooded
echo "flood: from 127.0.0.1 $(cat "$IDEM_TMP/flood-self.out") of 220, from 127.0.0.2 $(cat "$IDEM_TMP/flood-other.out") of 300"

# The per-client limit: 300 connections from 127.0.0.3, which never reconnects. The server takes
# 256 and closes the other 44 at once (libmicrohttpd accepts, finds the address at its limit and
# closes); the 256 stay open.
idem_spawn limit python3 "$IDEM_TMP/limit.py" 127.0.0.1 "$port" 127.0.0.3 300
limit_state() { tail -n 1 "$IDEM_TMP/limit.out" 2>/dev/null; }
over_limit_closed() { [[ $(limit_state) == *" closed=44" ]]; }
idem_wait_until 30 "idemd to close the 44 connections from 127.0.0.3 over the per-client limit of 256" \
	over_limit_closed
idem_assert_eq "connections from 127.0.0.3 still open after the closes" "open=256 closed=44" "$(limit_state)"
# The server's side settles at 256 too (sockets it has still to accept and close count as
# established until it does: slow under ASan).
holds_256() { [ "$(est_from 127.0.0.3)" = 256 ]; }
idem_wait_until 30 "idemd to hold exactly 256 connections from 127.0.0.3 (it holds $(est_from 127.0.0.3) now)" holds_256
# A new request from that address is closed unanswered; from the prober's address, which holds
# 220, it is served.
if code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 --interface 127.0.0.3 "$url/healthz" 2>/dev/null); then
	idem_fail "a request from 127.0.0.3, at its limit of 256 connections, was answered $code"
fi
idem_assert_eq "/healthz from 127.0.0.1 while 127.0.0.3 is at its limit" 200 \
	"$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 --interface 127.0.0.1 "$url/healthz")"
idem_assert_eq "connections from 127.0.0.3 after its refused request" "open=256 closed=44" "$(limit_state)"

t0=$EPOCHREALTIME
idem_produce_bg --count 3000 --dup-ratio 0.2 --seed 12 --rate 1500
max_ms=0 probes=0
while idem_producer_running || [ "$probes" -lt 20 ]; do
	for path in healthz readyz; do
		# Starved, a probe waits for ever; 5 s (the server's idle timeout) tells that apart
		# from a slow machine. The latencies are printed below.
		out=$(curl -sS -o /dev/null -w '%{http_code} %{time_total}' --max-time 5 "$url/$path") ||
			idem_fail "/$path did not answer within 5 s during the flood"
		read -r code secs <<<"$out"
		idem_assert_eq "/$path during the flood" 200 "$code"
		max_ms=$(awk "BEGIN { m = $secs * 1000; print (m > $max_ms) ? m : $max_ms }")
		probes=$((probes + 1))
	done
	[ "$probes" -lt 40 ] || break
	sleep 0.2
done
# Established connections on the metrics port, from /proc (state 01; the port in hex).
held=$(awk -v p="$(printf ':%04X' "$port")" '$2 ~ p"$" && $4 == "01"' /proc/net/tcp | wc -l)
echo "connections held open by idemd's HTTP side: $held (from 127.0.0.1: $(est_from 127.0.0.1), 127.0.0.2: $(est_from 127.0.0.2), 127.0.0.3: $(est_from 127.0.0.3))"
[ "$held" -ge $((220 + 256)) ] || idem_fail "only $held connections held: the flood did not happen"
idem_assert_eq "connections from 127.0.0.3 at the end of the flood" "open=256 closed=44" "$(limit_state)"
curl -fsS --max-time 2 "$url/metrics" | grep -q '^idemd_ready 1$' || idem_fail "/metrics during the flood"
idem_produce_wait 60
idem_wait_done g-flood 120
flood_s=$(awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $t0 }")
echo "probes during the flood: $probes, all 200, slowest ${max_ms} ms"
echo "3000 messages applied in ${base_s}s without the flood, ${flood_s}s with it"

cat "$IDEM_TMP/m1.csv" >>"$IDEM_TMP/manifest.csv"
IDEM_PRODUCED=$((p1 + IDEM_PRODUCED)) IDEM_UNIQUE=$((u1 + IDEM_UNIQUE))
idem_check_exactly_once payments
idemd_stop a
echo "ok: endpoints answered under the flood; $(idem_counts payments)"
