#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../integration
# tests/bench/outbox_rate.sh - the outbox relay's publish rate. Not a pass/fail test.
#
#   IDEM_BIN=build/release tests/bench/outbox_rate.sh [ROWS [VALUE_BYTES [BATCH]]]
#
# Defaults: 100,000 rows of 100-byte values, outbox.batch 1000. ROWS pending rows are written
# to idem.outbox before idemd starts (keys over 1,000 accounts, one header each); the time is
# from idemd's start to the last row marked published (so it includes connecting and the
# producer's first metadata request), read from the rows' published_at. One Postgres (fsync
# on, default synchronous_commit), the embedded Kafka in its own process, topic of 8 partitions.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"
. "$here/common.sh"

rows=${1:-100000}
bytes=${2:-100}
batch=${3:-1000}
idem_tmp_init
IDEM_PG_FSYNC=1 idem_pg_start
idem_kafka_start payments:1 events:8
cfg=$IDEM_TMP/idemd.yaml
idem_write_config "$cfg" g-outbox-bench payments --outbox enabled=true --outbox batch="$batch"
idem_setup_db "$cfg"
idem_psql -c "INSERT INTO idem.outbox (topic, key, value, header_names, header_values) SELECT 'events', convert_to('acct-' || (i % 1000), 'UTF8'), convert_to(rpad(i::text, $bytes, 'x'), 'UTF8'), ARRAY['source'], ARRAY['bench'::bytea] FROM generate_series(1, $rows) AS i" >/dev/null
idem_psql -c 'VACUUM ANALYZE idem.outbox' >/dev/null
start=$(idem_psql -c 'SELECT extract(epoch FROM clock_timestamp())')
idemd_start a "$cfg"
drained() { [ "$(idem_psql -c 'SELECT count(*) FROM idem.outbox WHERE published_at IS NULL')" = 0 ]; }
idem_wait_until 600 "outbox drained" drained
idemd_stop a
idem_psql -c "SELECT format('rows=%s value_bytes=%s batch=%s seconds=%s rows_per_s=%s steady_rows_per_s=%s', count(*), $bytes, $batch, round((extract(epoch FROM max(published_at)) - $start)::numeric, 2), round(count(*) / (extract(epoch FROM max(published_at)) - $start)::numeric), round(count(*) / nullif(extract(epoch FROM max(published_at) - min(published_at)), 0)::numeric)) FROM idem.outbox"
