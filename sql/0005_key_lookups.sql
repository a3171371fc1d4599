-- idemd schema, version 5: the batch transaction's two statements that look claims up by many
-- business keys at once run as one index probe per key, whatever the statistics say.
-- Applied by `idemctl migrate` inside one transaction, after version 4.
--
-- Looking up the claims of a transaction's duplicates, storing its handlers' results and reading
-- them back for replies are joins of a few hundred keys against idem.processed_messages. On a table autovacuum has not
-- analyzed yet (a fresh install, or one that grew fast since), the planner estimates the table
-- as tiny and scans every claim of the consumer instead: measured on 300,000 claims and 880
-- keys, 143 ms for the results and 64 ms for the lookup, against 13 ms and under 5 ms as index
-- probes, and each batch costs more than the one before. An index probe per key is right at any
-- table size (the keys are bounded by the batch, the table is not), so these functions pin that
-- plan with their own planner settings, which apply only while they run: the handlers' own
-- statements are planned as usual.

-- The claims of @keys (one row per distinct key that has one): where, the payload hash in hex, and the
-- stored result.
CREATE FUNCTION idem.claims_of(consumer text, keys text[])
RETURNS TABLE (business_key text, topic text, partition integer, "offset" bigint,
               payload_hash text, result text)
LANGUAGE sql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    SELECT m.business_key, m.topic, m.partition, m."offset", encode(m.payload_hash, 'hex'),
           m.result
    FROM (SELECT DISTINCT k FROM unnest(claims_of.keys) AS k) AS u(k)
    JOIN idem.processed_messages AS m
      ON m.consumer = claims_of.consumer AND m.business_key = u.k
$$;

-- Store @results[i] with the claim of @keys[i]; returns how many claims it updated.
CREATE FUNCTION idem.store_results(consumer text, keys text[], results text[])
RETURNS bigint
LANGUAGE sql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    WITH s AS (
        UPDATE idem.processed_messages AS p SET result = u.r
        FROM unnest(store_results.keys, store_results.results) AS u(k, r)
        WHERE p.consumer = store_results.consumer AND p.business_key = u.k
        RETURNING 1)
    SELECT count(*) FROM s
$$;
