#!/usr/bin/env bash
#
# t_diff_start_rule: the start rule checker's model of each writer (tests/unit/start_rule_model.h)
# against the real statements on a real Postgres. diff_start_rule (tests/integration/
# diff_start_rule.c) migrates the schema, then applies random sequences of writer events (the
# start recorded at assignment, batch transactions alone and combined, idemctl rename, replay,
# retention, restores) both to the model and to the database, and compares every progress row,
# every claim and what IDEM_SQL_RESUME_GET answers after each event. It prints its seed; on a
# difference it prints the sequence and the fields that differ, and this test fails.
#   IDEM_DIFF_SEED=N   another seed (the default is fixed, so CI runs the same sequences)
#   IDEM_DIFF_SEQUENCES=N, IDEM_DIFF_EVENTS=N   more or longer sequences (300, 12)
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

idem_tmp_init
idem_pg_start
"$IDEM_BIN/diff_start_rule" --sequences "${IDEM_DIFF_SEQUENCES:-300}" \
	--events "${IDEM_DIFF_EVENTS:-12}" "$IDEM_CONNINFO" ||
	idem_fail "the model of the writers differs from the SQL (see above)"
