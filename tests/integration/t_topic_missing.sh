#!/usr/bin/env bash
# A subscribed topic the brokers do not have is an error, not a healthy idle: idemd names it in
# its log at start, /readyz answers 503 "topic 'late' does not exist" (idemd_topics_missing 1)
# for as long as it lasts, and idemctl status lists it as missing. Neither idemd nor idemctl
# creates it, although the embedded Kafka creates any topic a client names in a request (they
# ask for the metadata of all topics). Once it is created, idemd subscribes to it within
# seconds and consumes it, and /readyz is ready.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2
cfg=$IDEM_TMP/idemd.yaml
port=$(idem_free_port)
idem_write_config "$cfg" g-missing payments --topic late --metrics "127.0.0.1:$port"
idem_setup_db "$cfg"
url=http://127.0.0.1:$port

readyz() { curl -s -m 2 -w ' %{http_code}' "$url/readyz" | tr -d '\n' || true; }
readyz_is() { [ "$(readyz)" = "$1" ]; }
missing_metric() { curl -s -m 2 "$url/metrics" | awk '$1 == "idemd_topics_missing" { print $2 }'; }
# status_missing: idemctl status lists topic late as missing, and no partition of it.
status_missing() {
	local out
	out=$("$IDEM_BIN/idemctl" -q -c "$cfg" status)
	grep -q '^late .*TOPIC MISSING.*route=payments' <<<"$out" ||
		idem_fail "idemctl status does not list topic late as missing: $out"
	[ "$(awk '$1 == "late" && $2 ~ /^[0-9]+$/' <<<"$out")" = "" ] ||
		idem_fail "idemctl status shows partitions of topic late: $out"
	idem_assert_eq "idemctl status --json: state of topic late" topic_missing \
		"$("$IDEM_BIN/idemctl" -q -c "$cfg" status --json |
			python3 -c 'import json, sys; print(*[o["state"] for o in json.load(sys.stdin) if o["topic"] == "late"])')"
}

status_missing
idemd_start a "$cfg"
idem_wait_until 30 "/readyz to name the missing topic" readyz_is "topic 'late' does not exist 503"
grep -q "warn kafka: topic 'late' (route 'payments') does not exist" "$IDEM_TMP/idemd-a.log" ||
	idem_fail "the missing topic is not named in the log: $(tail -5 "$IDEM_TMP/idemd-a.log")"
idem_assert_eq "idemd_topics_missing" 1 "$(missing_metric)"
# Idle for a while, checking again every 5 s: still missing, still not ready, still not created.
sleep 12
idem_assert_eq "/readyz after 12 s" "topic 'late' does not exist 503" "$(readyz)"
status_missing
! grep -q 'exists now' "$IDEM_TMP/idemd-a.log" || idem_fail "idemd saw topic late appear"
idem_log "12 s with topic late missing: /readyz 503, named in the log, idemctl status lists it"

# Created: subscribed and consumed, then ready.
idem_kafka_ctl topic_create late 3 >/dev/null
out=$("$IDEM_BIN/idem-kafkatool" produce --brokers "$IDEM_BROKERS" --topic late --count 200 \
	--dup-ratio 0.2 --seed 8 --accounts 20 --manifest "$IDEM_TMP/manifest.csv")
unique=$(sed -n 's/.*unique=\([0-9]*\).*/\1/p' <<<"$out")
idem_wait_until 30 "idemd to subscribe to topic late" \
	grep -q "info kafka: topic 'late' exists now: subscribed" "$IDEM_TMP/idemd-a.log"
"$IDEM_BIN/idem-kafkatool" wait-committed --brokers "$IDEM_BROKERS" --group g-missing \
	--topic late --timeout 60 || idem_fail "topic late was not consumed to its end"
idem_assert_eq "claims" "$unique" "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idem_wait_until 10 "/readyz ready" readyz_is "ready 200"
idem_assert_eq "idemd_topics_missing once created" 0 "$(missing_metric)"
idemd_stop a
echo "ok: a missing topic kept /readyz at 503 naming it, was logged and listed by idemctl status, and was not created; once created it was consumed ($unique claims) and /readyz ready"
