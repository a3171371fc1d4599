-- idemd schema, version 7: a database that goes back in time (restored from a backup, recovered
-- to a point in time, failed over to a standby that had not received the last commits) is
-- caught up again from Kafka, exactly once (ARCHITECTURE.md "When the database goes back").
-- Applied by `idemctl migrate` inside one transaction, after version 6.

-- The database's identity: made once, here, and carried by every copy of the database (a
-- backup, a standby, a dump and restore). idemd names it, with the database's position, in the
-- metadata of every offset it commits to Kafka, so that it can tell, when a partition is
-- assigned, "this database held that position and lost it" (re-apply) from "someone moved
-- Kafka's offset" (an operator's skip). One row.
CREATE TABLE idem.database_identity (
    id          uuid        NOT NULL DEFAULT gen_random_uuid(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    one_row     boolean     PRIMARY KEY DEFAULT true CHECK (one_row)
);
INSERT INTO idem.database_identity DEFAULT VALUES;

-- The messages read again because the database was behind what idemd had committed to Kafka:
--   reapply_to  the end of the gap being read again (Kafka's committed offset when the gap was
--               found), NULL once next_offset reaches it;
--   reapplied   how many messages below reapply_to were consumed again, counted in the batch
--               transaction like the other counters (each one is also counted as applied, a
--               duplicate or quarantined).
ALTER TABLE idem.partition_progress
    ADD COLUMN reapply_to  bigint,
    ADD COLUMN reapplied   bigint NOT NULL DEFAULT 0;

-- Event ids that survive a restore. The relay sends event_id as the header idem-outbox-id, which
-- downstream consumers deduplicate on. It used to be the row's id, from a sequence that a
-- restore takes back: an event emitted after the restore could then carry the id of another
-- one published before it. Now:
--   - an event emitted while idemd applies a message is named after the message: the consumer,
--     its business key and the event's ordinal among that message's events
--     (idem.event_id()); applied again after a restore, the message emits the same ids;
--   - replies and dead letters are named after the message they answer (consumer, topic,
--     partition, offset);
--   - any other event (idem.emit() outside idemd's transaction) gets a random UUID.
-- The unique index makes the database refuse two events under one id, and gives a message's
-- events their ordinals (the first free one). Rows from before this version keep their old id.
ALTER TABLE idem.outbox ADD COLUMN event_id text;
UPDATE idem.outbox SET event_id = id::text;
ALTER TABLE idem.outbox
    ALTER COLUMN event_id SET DEFAULT gen_random_uuid()::text,
    ALTER COLUMN event_id SET NOT NULL;
CREATE UNIQUE INDEX outbox_event_id ON idem.outbox (event_id);

-- A name-based id: the first 128 bits of SHA-256 over the scope's parts, as a UUID's text.
-- The parts are joined with U+001F, which no consumer name contains.
CREATE FUNCTION idem.event_id(VARIADIC parts text[])
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(sha256(convert_to(array_to_string(parts, chr(31)), 'UTF8'))
                            FROM 1 FOR 16), 'hex')::uuid::text
$$;

-- The one place an event is queued. idemd names the message being applied in two settings of
-- the transaction: idem.consumer (always, while it runs handlers) and idem.message (its business
-- key, in row mode, before each message's handler). A set-mode handler names each event's
-- message itself (@business_key, from the business_key parameter field), as one statement
-- applies many messages.
CREATE FUNCTION idem.emit_event(business_key text, topic text, key bytea, value bytea,
                                header_names text[], header_values bytea[])
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    c text := nullif(current_setting('idem.consumer', true), '');
    k text := coalesce(business_key, nullif(current_setting('idem.message', true), ''));
    n integer := 0;
    r bigint;
BEGIN
    IF c IS NULL OR k IS NULL THEN
        INSERT INTO idem.outbox (topic, key, value, header_names, header_values)
        VALUES (emit_event.topic, emit_event.key, emit_event.value, emit_event.header_names,
                emit_event.header_values)
        RETURNING id INTO r;
        RETURN r;
    END IF;
    LOOP
        INSERT INTO idem.outbox (topic, key, value, header_names, header_values, event_id)
        VALUES (emit_event.topic, emit_event.key, emit_event.value, emit_event.header_names,
                emit_event.header_values, idem.event_id('emit', c, k, n::text))
        ON CONFLICT (event_id) DO NOTHING
        RETURNING id INTO r;
        IF r IS NOT NULL THEN
            RETURN r;
        END IF;
        n := n + 1;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION idem.emit(topic text, key bytea, value bytea,
                                     header_names text[] DEFAULT NULL,
                                     header_values bytea[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT idem.emit_event(NULL, topic, key, value, header_names, header_values)
$$;

-- idem.emit_for(business_key, topic, key, value [, header_names, header_values]): idem.emit()
-- for the message whose business key is @business_key (set-mode handlers).
CREATE FUNCTION idem.emit_for(business_key text, topic text, key bytea, value bytea,
                              header_names text[] DEFAULT NULL, header_values bytea[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT idem.emit_event(business_key, topic, key, value, header_names, header_values)
$$;

CREATE FUNCTION idem.emit_for(business_key text, topic text, key text, value text,
                              header_names text[] DEFAULT NULL, header_values text[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT idem.emit_for(business_key, topic, convert_to(key, 'UTF8'), convert_to(value, 'UTF8'),
                         header_names,
                         (SELECT array_agg(convert_to(v, 'UTF8') ORDER BY n)
                          FROM unnest(header_values) WITH ORDINALITY AS h(v, n)))
$$;

CREATE FUNCTION idem.emit_for(business_key text, topic text, key text, value jsonb,
                              header_names text[] DEFAULT NULL, header_values text[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT idem.emit_for(business_key, topic, key, value::text, header_names, header_values)
$$;
