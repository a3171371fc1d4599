-- idemd schema, version 6: idem.claims_of() probes the primary key once per key whatever the
-- planner estimates. Applied by `idemctl migrate` inside one transaction, after version 5.
--
-- Version 5 pinned a nested loop of index scans with planner settings, but left the planner the
-- choice of the loop's order: on a claims table that autovacuum has not analyzed yet and that is
-- still growing (a fresh install's first hours), it often took the consumer's claims as the
-- outer side, reading every claim of the consumer in each transaction that had duplicates
-- (t_key_lookups_fresh: 1.2 million primary key entries read for 30,000 messages, about 10,000
-- buffers a call). The claim of each key is now a LATERAL subquery that cannot be flattened
-- (OFFSET 0), so it is one index probe per key in every plan. Same name, arguments and result.

CREATE OR REPLACE FUNCTION idem.claims_of(consumer text, keys text[])
RETURNS TABLE (business_key text, topic text, partition integer, "offset" bigint,
               payload_hash text, result text)
LANGUAGE sql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    SELECT m.business_key, m.topic, m.partition, m."offset", encode(m.payload_hash, 'hex'),
           m.result
    FROM (SELECT DISTINCT k FROM unnest(claims_of.keys) AS k) AS u(k)
    CROSS JOIN LATERAL (
        SELECT c.business_key, c.topic, c.partition, c."offset", c.payload_hash, c.result
        FROM idem.processed_messages AS c
        WHERE c.consumer = claims_of.consumer AND c.business_key = u.k
        OFFSET 0) AS m
$$;
