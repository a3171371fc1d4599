#!/usr/bin/env bash
# Fail fast: the handler SQL is PREPAREd at start-up, so a typo, a missing function or a missing
# table stops idemd at once with exit status 78 (EX_CONFIG: systemd does not restart it) before
# it consumes anything, and the database is left untouched. In set mode (IDEM_HANDLER_MODE=set)
# the same holds for set handlers.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

idem_fixture --topics payments:2 --config good.yaml g-fast payments
idem_produce --count 200 --dup-ratio 0 --seed 21

n=0
for sql in 'SELEC $1, $2, $3' 'SELECT no_such_function($1, $2, $3::bigint)' \
	'INSERT INTO no_such_table (a, b, c) VALUES ($1, $2, $3)'; do
	n=$((n + 1))
	idem_write_config "$IDEM_TMP/bad$n.yaml" g-fast payments --sql "$sql" \
		--mode "$IDEM_HANDLER_MODE"
	idemd_start "bad$n" "$IDEM_TMP/bad$n.yaml"
	pid=$(idemd_pid "bad$n")
	idem_wait_exit "$pid" 60
	idem_assert_eq "exit status with handler '$sql'" 78 "$IDEM_EXIT_STATUS"
	idem_log "handler '$sql': $(tail -1 "$IDEM_TMP/idemd-bad$n.log")"
done
idem_assert_eq "claims" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')"
idem_assert_eq "progress rows" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.partition_progress')"
idem_assert_eq "quarantine rows" 0 "$(idem_psql -c 'SELECT count(*) FROM idem.quarantine')"
idem_assert_eq "ledger rows" 0 "$(idem_psql -c 'SELECT count(*) FROM ledger')"
idem_assert_eq "nothing committed in kafka" 2 \
	"$("$IDEM_BIN/idem-kafkatool" offsets --brokers "$IDEM_BROKERS" --group g-fast --topic payments | grep -c ' committed=-1 ')"

# Fixed, it consumes everything.
idemd_start good "$IDEM_TMP/good.yaml"
idem_wait_done g-fast 60
idemd_stop good
idem_check_exactly_once payments
echo "ok: 3 broken handlers refused with exit 78, nothing touched; then $(idem_counts payments)"
