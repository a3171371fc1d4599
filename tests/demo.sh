#!/usr/bin/env bash
# The idemd demo, end to end on embedded defaults: installs what is missing, builds, starts a
# throwaway Postgres and the embedded Kafka, produces a payments stream with upstream
# duplicates, runs idemd, kills it with SIGKILL partway, restarts it, then shows what happened
# and checks every account balance against the expected totals.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
count=${IDEM_DEMO_MESSAGES:-50000}

bash tests/install-deps.sh
echo "== building idemd"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null

export IDEM_BIN=$src/build/release IDEM_SRC=$src
. tests/integration/lib.sh
. tests/integration/common.sh
idem_tmp_init
echo "== starting a throwaway Postgres and the embedded Kafka (8 partitions)"
idem_pg_start
idem_kafka_start payments:8
idem_write_config "$IDEM_TMP/idemd.yaml" payments-demo payments
idem_setup_db "$IDEM_TMP/idemd.yaml"

echo "== producing $count payment messages, 25% of them upstream retries (duplicates)"
idem_produce --count "$count" --dup-ratio 0.25 --seed 42
echo "   produced=$IDEM_PRODUCED unique payments=$IDEM_UNIQUE duplicates=$((IDEM_PRODUCED - IDEM_UNIQUE))"

echo "== running idemd"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_until 120 "idemd applies a third of the payments" idem_claims_above $((IDEM_UNIQUE / 3))
idemd_kill9 a
n=$(idem_psql -c 'SELECT count(*) FROM idem.processed_messages')
echo "== killed idemd with SIGKILL after $n payments; restarting it"
idemd_start a "$IDEM_TMP/idemd.yaml"
idem_wait_done payments-demo 300
idemd_stop a

echo "== result"
idem_psql -F ' ' -c "SELECT 'consumed:', sum(consumed), ' applied:', sum(applied), ' duplicates skipped:', sum(duplicates), ' quarantined:', sum(quarantined) FROM idem.partition_progress" | tr -s ' '
echo "   read again after the kill: $(($(idem_psql -c 'SELECT sum(consumed) FROM idem.partition_progress') - IDEM_PRODUCED)) messages (consumed - produced): the restarted idemd resumed where the database stopped, not at Kafka's last offset commit"
idem_check_exactly_once payments
idem_psql -F ' ' -c "SELECT 'ledger rows:', count(*), ' distinct payments:', count(DISTINCT payment_id), ' total amount:', sum(amount) FROM ledger" | tr -s ' '
idem_psql -F ' ' -c "SELECT 'accounts:', count(*), ' all balances match the expected totals:', bool_and(a.balance = x.s) FROM accounts a JOIN (SELECT account, sum(amount) s FROM expected GROUP BY 1) x ON x.account = a.id" | tr -s ' '
echo "== exactly once: every payment applied once, none missing, despite duplicates and a SIGKILL"
