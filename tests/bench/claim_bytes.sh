#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../integration
# tests/bench/claim_bytes.sh - bytes per claim of the claims table's layouts, and the purge with a
# BRIN index on processed_at against the B-tree. Not a pass/fail test; deterministic (sizes).
#
#   tests/bench/claim_bytes.sh [CLAIMS]
#
# CLAIMS (100,000) claims as idemd writes them: keys pay-1733-<n> in random order, 16
# partitions, consumer and topic "payments", an 8-byte hash, 1,000 per transaction (one now()),
# into each layout; then VACUUM, and the heap, each index and the total over the rows, and the
# WAL each claim wrote. Layouts: v10 (schema version 10: version 1's column order, topic by
# name), ordered (fixed-width columns first, topic by name), v11 (schema version 11: ordered,
# topic by number), brin (v11 with a BRIN index on processed_at), v12 (schema version 12:
# v11 without an index on processed_at), nohash (v11 without payload_hash), consumer_id (v11
# with the consumer by number too), consumer_id_brin, v13 (schema version 13: v12 with the
# consumer by number).
#
# Then retention at a steady state: 300 hours of 1,000 claims an hour, 100 hours kept,
# VACUUMed every 10 hours: with the B-tree (schema version 11) and with the BRIN index, purged
# hourly by version 11's purge statement 500 at a time (the purge's plan and min(processed_at));
# and with no index on processed_at (version 12), swept every third hour by version 12's sweep,
# 500 at a time. The time each took and the table's size at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)
. "$here/lib.sh"

claims=${1:-100000}
idem_tmp_init
idem_pg_start
idem_psql -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE SCHEMA x;
CREATE TABLE x.v10 (consumer text COLLATE "C" NOT NULL, business_key text COLLATE "C" NOT NULL,
	topic text NOT NULL, partition int NOT NULL, "offset" bigint NOT NULL, payload_hash bytea,
	result text, processed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, business_key));
CREATE INDEX ON x.v10 (processed_at);
CREATE TABLE x.ordered (processed_at timestamptz NOT NULL DEFAULT now(), "offset" bigint NOT NULL,
	partition int NOT NULL, consumer text COLLATE "C" NOT NULL,
	business_key text COLLATE "C" NOT NULL, topic text NOT NULL, payload_hash bytea, result text,
	PRIMARY KEY (consumer, business_key));
CREATE INDEX ON x.ordered (processed_at);
CREATE TABLE x.v11 (processed_at timestamptz NOT NULL DEFAULT now(), "offset" bigint NOT NULL,
	partition int NOT NULL, topic_id smallint NOT NULL, consumer text COLLATE "C" NOT NULL,
	business_key text COLLATE "C" NOT NULL, payload_hash bytea, result text,
	PRIMARY KEY (consumer, business_key));
CREATE INDEX ON x.v11 (processed_at);
CREATE TABLE x.brin (LIKE x.v11 INCLUDING DEFAULTS);
ALTER TABLE x.brin ADD PRIMARY KEY (consumer, business_key);
CREATE INDEX ON x.brin USING brin (processed_at);
CREATE TABLE x.v12 (LIKE x.v11 INCLUDING DEFAULTS);
ALTER TABLE x.v12 ADD PRIMARY KEY (consumer, business_key);
CREATE TABLE x.nohash (LIKE x.v11 INCLUDING DEFAULTS);
ALTER TABLE x.nohash DROP COLUMN payload_hash, ADD PRIMARY KEY (consumer, business_key);
CREATE INDEX ON x.nohash (processed_at);
CREATE TABLE x.consumer_id (processed_at timestamptz NOT NULL DEFAULT now(),
	"offset" bigint NOT NULL, partition int NOT NULL, consumer smallint NOT NULL,
	topic_id smallint NOT NULL, business_key text COLLATE "C" NOT NULL, payload_hash bytea,
	result text, PRIMARY KEY (consumer, business_key));
CREATE INDEX ON x.consumer_id (processed_at);
CREATE TABLE x.consumer_id_brin (LIKE x.consumer_id INCLUDING DEFAULTS);
ALTER TABLE x.consumer_id_brin ADD PRIMARY KEY (consumer, business_key);
CREATE INDEX ON x.consumer_id_brin USING brin (processed_at);
CREATE TABLE x.v13 (LIKE x.consumer_id INCLUDING DEFAULTS);
ALTER TABLE x.v13 ADD PRIMARY KEY (consumer, business_key);
CREATE TABLE x.src AS SELECT i / 1000 AS t, 'pay-1733-' || g AS k, g % 16 AS p,
	g::bigint / 16 AS o, substring(sha256(g::text::bytea) FROM 1 FOR 8) AS h
	FROM (SELECT g, row_number() OVER (ORDER BY md5(g::text)) - 1 AS i
	      FROM generate_series(0, $claims - 1) g) s;
CREATE INDEX ON x.src (t);
-- One transaction per thousand claims, keys in order within it (idemd's global key order).
CREATE PROCEDURE x.fill(tbl text) LANGUAGE plpgsql AS \$\$
DECLARE
	t int;
	cols text := CASE tbl WHEN 'v10' THEN 'consumer, business_key, topic, partition, "offset", payload_hash'
		WHEN 'ordered' THEN 'consumer, business_key, topic, partition, "offset", payload_hash'
		WHEN 'nohash' THEN 'consumer, business_key, topic_id, partition, "offset"'
		ELSE 'consumer, business_key, topic_id, partition, "offset", payload_hash' END;
	vals text := CASE tbl WHEN 'v10' THEN '''payments'', k, ''payments'', p, o, h'
		WHEN 'ordered' THEN '''payments'', k, ''payments'', p, o, h'
		WHEN 'nohash' THEN '''payments'', k, 1, p, o'
		WHEN 'consumer_id' THEN '1, k, 1, p, o, h'
		WHEN 'consumer_id_brin' THEN '1, k, 1, p, o, h'
		WHEN 'v13' THEN '1, k, 1, p, o, h'
		ELSE '''payments'', k, 1, p, o, h' END;
BEGIN
	FOR t IN 0 .. (SELECT max(s.t) FROM x.src s) LOOP
		EXECUTE format('INSERT INTO x.%I (%s) SELECT %s FROM x.src WHERE t = \$1 ORDER BY k'
			' ON CONFLICT DO NOTHING', tbl, cols, vals) USING t;
		COMMIT;
	END LOOP;
END
\$\$;
SQL
echo "layout total heap primary_key time_index wal (bytes per claim, $claims claims)"
for t in v10 ordered v11 brin v12 nohash consumer_id consumer_id_brin v13; do
	idem_psql -c "CHECKPOINT" >/dev/null
	lsn=$(idem_psql -c "SELECT pg_current_wal_insert_lsn()")
	idem_psql -c "CALL x.fill('$t')" >/dev/null
	wal=$(idem_psql -c "SELECT round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn') / $claims.0, 1)")
	idem_psql -c "VACUUM x.$t" >/dev/null
	idem_psql -F ' ' -c "SELECT '$t', round(pg_total_relation_size(c.oid)::numeric / $claims, 1), round(pg_relation_size(c.oid)::numeric / $claims, 1), (SELECT round(pg_relation_size(i.indexrelid)::numeric / $claims, 1) FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), coalesce((SELECT round(pg_relation_size(i.indexrelid)::numeric / $claims, 1) FROM pg_index i WHERE i.indrelid = c.oid AND NOT i.indisprimary), 0), $wal FROM pg_class c WHERE c.oid = 'x.$t'::regclass"
done

idem_psql -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE x.rt (LIKE x.v11); ALTER TABLE x.rt ADD PRIMARY KEY (consumer, business_key);
CREATE INDEX rt_at ON x.rt (processed_at);
CREATE TABLE x.rb (LIKE x.v11); ALTER TABLE x.rb ADD PRIMARY KEY (consumer, business_key);
CREATE INDEX rb_at ON x.rb USING brin (processed_at);
CREATE TABLE x.rs (LIKE x.v11); ALTER TABLE x.rs ADD PRIMARY KEY (consumer, business_key);
CREATE PROCEDURE x.hours(tbl text, h0 int, h1 int, keep int) LANGUAGE plpgsql AS $$
DECLARE
	h int;
	n int;
	b bigint;
	blocks bigint;
	lo tid;
	last tid;
BEGIN
	FOR h IN h0 .. h1 LOOP
		EXECUTE format('INSERT INTO x.%I (processed_at, "offset", partition, topic_id, consumer,'
			' business_key, payload_hash) SELECT timestamptz ''2026-01-01'' + make_interval(hours => $1),'
			' g, g %% 16, 1, ''payments'', ''pay-'' || $1 || ''-'' || g, ''\x0102030405060708'''
			' FROM generate_series(1, 1000) g', tbl) USING h;
		IF tbl = 'rs' AND h >= keep AND h % 3 = 0 THEN
			-- idemd's sweep (IDEM_SQL_RETENTION_PURGE, without its horizon and oldest age),
			-- every third hour, 128 blocks a step, 500 rows at most a transaction
			blocks := pg_relation_size('x.rs') / 8192;
			b := 0;
			lo := '(0,0)';
			WHILE b < blocks LOOP
				WITH d AS (DELETE FROM x.rs WHERE ctid = ANY (ARRAY(SELECT ctid FROM x.rs
					WHERE ctid >= lo AND ctid < ('(' || least(b + 128, blocks) || ',0)')::tid
					AND consumer = 'payments' AND processed_at < timestamptz '2026-01-01'
					+ make_interval(hours => h - keep) ORDER BY ctid LIMIT 500)) RETURNING ctid)
				SELECT count(*), max(ctid) INTO n, last FROM d;
				COMMIT;
				IF n >= 500 THEN
					lo := last;
				ELSE
					b := least(b + 128, blocks);
					lo := ('(' || b || ',0)')::tid;
				END IF;
			END LOOP;
		ELSIF tbl <> 'rs' AND h >= keep THEN
			LOOP
				-- idemd's purge (IDEM_SQL_RETENTION_PURGE)
				EXECUTE format('DELETE FROM x.%I WHERE ctid = ANY (ARRAY(SELECT ctid FROM x.%I'
					' WHERE consumer = ''payments'' AND processed_at < $1 LIMIT 500))', tbl, tbl)
					USING timestamptz '2026-01-01' + make_interval(hours => h - keep);
				GET DIAGNOSTICS n = ROW_COUNT;
				EXIT WHEN n = 0;
			END LOOP;
		END IF;
		COMMIT;
	END LOOP;
END
$$;
SQL
for t in rt rb rs; do
	start=$(date +%s.%N)
	for h in $(seq 0 10 290); do
		idem_psql -c "CALL x.hours('$t', $h, $((h + 9)), 100)" >/dev/null
		idem_psql -c "VACUUM x.$t" >/dev/null
	done
	case $t in rt) what="B-tree, purged hourly" ;; rb) what="BRIN, purged hourly" ;;
	*) what="no index, swept every third hour" ;; esac
	echo "$t ($what): 300 hours in $(echo "$(date +%s.%N) - $start" | bc) s," \
		"$(idem_psql -c "SELECT round(pg_total_relation_size('x.$t') / 1048576.0, 1)") MiB"
	[ $t = rs ] && continue
	# The purge's best plan with the scan of the whole table ruled out (with the B-tree, its
	# index scan; with the BRIN index, none reads less than the heap).
	off="SET enable_seqscan = off"
	[ $t = rt ] && off="SET enable_seqscan = off; SET enable_bitmapscan = off"
	idem_psql -c "$off" -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) SELECT ctid FROM x.$t WHERE consumer = 'payments' AND processed_at < timestamptz '2026-01-01' + make_interval(hours => 201) LIMIT 500" |
		grep -E "Scan|Buffers|Heap Blocks" | head -4
	idem_psql -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) SELECT min(processed_at) FROM x.$t WHERE consumer = 'payments'" |
		grep -E "Buffers" | head -1 | sed 's/^ */min(processed_at): /'
done
