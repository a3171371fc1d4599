-- idemd schema, version 11: a claim's fixed-width columns first, so that its row carries no
-- alignment padding. Applied by `idemctl migrate` inside one transaction, after version 10.
--
-- Postgres lays a row's columns out in their declared order, each aligned to its type: in
-- version 1's order (consumer, business_key, topic: texts of any length; then partition, 4-byte
-- aligned; "offset", 8-byte aligned; payload_hash, result; processed_at, 8-byte aligned) up to 3
-- + 7 + 7 bytes of every row were padding, 8 a claim on average. Measured on 100,000 claims as
-- idemd writes them (1,000 a transaction, keys pay-1733-<n> in random order, an 8-byte hash,
-- VACUUMed): the heap 101.2 bytes a claim before, 93.1 after; with both indexes 161.9 before,
-- 153.8 after (ARCHITECTURE.md "What a claim costs"). Columns, names, types, constraints and
-- indexes are the same: every statement reads and writes them as before.
--
-- Postgres cannot reorder the columns of a table, so this builds the table again: a new table
-- filled from the old one, whose name, indexes and grants it then takes. The old table is locked
-- (ACCESS EXCLUSIVE) until the migration commits: idemd's transactions wait for it (and retry),
-- about 3 s a million claims on the 2-core test machine, with the claims' size once more on
-- disk meanwhile. The primary key and the index on processed_at are built after the copy, so
-- they start packed. A view or foreign key of the operator's on idem.processed_messages makes the
-- migration fail (DROP TABLE refuses): drop it, migrate, create it again.

LOCK TABLE idem.processed_messages IN ACCESS EXCLUSIVE MODE;

CREATE TABLE idem.processed_messages_v11 (
    processed_at  timestamptz NOT NULL DEFAULT now(),
    "offset"      bigint      NOT NULL,
    partition     integer     NOT NULL,
    consumer      text        COLLATE "C" NOT NULL,
    business_key  text        COLLATE "C" NOT NULL,
    topic         text        NOT NULL,
    payload_hash  bytea,
    result        text
);

INSERT INTO idem.processed_messages_v11
    (processed_at, "offset", partition, consumer, business_key, topic, payload_hash, result)
SELECT processed_at, "offset", partition, consumer, business_key, topic, payload_hash, result
FROM idem.processed_messages;

-- The grants of the old table, to the same roles (the README's role for idemd among them), and
-- its storage parameters (an operator's autovacuum settings).
DO $$
DECLARE
    g record;
    o text;
BEGIN
    SELECT array_to_string(reloptions, ', ') INTO o FROM pg_class
    WHERE oid = 'idem.processed_messages'::regclass;
    IF o IS NOT NULL THEN
        EXECUTE format('ALTER TABLE idem.processed_messages_v11 SET (%s)', o);
    END IF;
    FOR g IN
        SELECT a.privilege_type, a.grantee, a.is_grantable
        FROM pg_class c, aclexplode(c.relacl) AS a
        WHERE c.oid = 'idem.processed_messages'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON idem.processed_messages_v11 TO %s%s', g.privilege_type,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

DROP TABLE idem.processed_messages;
ALTER TABLE idem.processed_messages_v11 RENAME TO processed_messages;
ALTER TABLE idem.processed_messages
    ADD CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer, business_key);
CREATE INDEX processed_messages_processed_at ON idem.processed_messages (processed_at);
