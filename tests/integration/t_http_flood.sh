#!/usr/bin/env bash
# The operator endpoints stay up under abuse. While 200 idle and 20 slow-header connections
# (one header byte every 0.3 s) are held open from the prober's own address, and 300 more idle
# ones from another address (over the per-client limit), /healthz and /readyz answer 200 within
# 1 s every time they are asked, /metrics still scrapes, and the payment stream produced during
# the flood is applied exactly once. Prints the probe latencies and the apply time of the same
# stream with and without the flood. Without the event loop and the per-client and total
# limits (README, "Running it"), the 17th connection was refused and the probes failed.
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

t0=$EPOCHREALTIME
idem_produce_bg --count 3000 --dup-ratio 0.2 --seed 12 --rate 1500
max_ms=0 probes=0
while idem_producer_running || [ "$probes" -lt 20 ]; do
	for path in healthz readyz; do
		out=$(curl -sS -o /dev/null -w '%{http_code} %{time_total}' --max-time 1 "$url/$path") ||
			idem_fail "/$path did not answer within 1 s during the flood"
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
echo "connections held open by idemd's HTTP side: $held"
[ "$held" -ge 220 ] || idem_fail "only $held connections held: the flood did not happen"
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
