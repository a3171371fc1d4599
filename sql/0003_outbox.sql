-- idemd schema, version 3: the transactional outbox (ARCHITECTURE.md "The outbox").
-- Applied by `idemctl migrate` inside one transaction, after version 2.

-- Messages a handler asks to publish, written with idem.emit() in the transaction of the claim
-- and the effect: they commit or roll back with them. The relay (a thread of idemd with
-- outbox.enabled) publishes pending rows (published_at IS NULL) in id order to Kafka with an
-- idempotent producer, adding the header idem-outbox-id (the row's id in decimal), and sets
-- published_at once the broker acknowledged them. A crash between the two re-sends the row with
-- the same idem-outbox-id, which a downstream consumer deduplicates on (business key
-- 'header:idem-outbox-id' in another idemd). Published rows are purged after outbox.keep.
CREATE TABLE idem.outbox (
    id             bigserial   PRIMARY KEY,
    topic          text        NOT NULL CHECK (topic <> ''),
    key            bytea,
    value          bytea,
    header_names   text[],
    header_values  bytea[],
    created_at     timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz,
    CONSTRAINT outbox_headers CHECK (
        coalesce(cardinality(header_names), 0) = coalesce(cardinality(header_values), 0)
        AND NOT coalesce('idem-outbox-id' = ANY (header_names), false))
);
-- The relay's work list: small, whatever the size of the table.
CREATE INDEX outbox_pending ON idem.outbox (id) WHERE published_at IS NULL;
-- The purge: published rows by age.
CREATE INDEX outbox_published ON idem.outbox (published_at) WHERE published_at IS NOT NULL;

-- idem.emit(topic, key, value [, header_names, header_values]): queue one message in the
-- current transaction; returns its id. Bytes as they are; a NULL key or value is sent as a
-- NULL key or value. The text and jsonb forms store the UTF-8 bytes of the text.
CREATE FUNCTION idem.emit(topic text, key bytea, value bytea,
                          header_names text[] DEFAULT NULL, header_values bytea[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    INSERT INTO idem.outbox (topic, key, value, header_names, header_values)
    VALUES (topic, key, value, header_names, header_values) RETURNING id
$$;

CREATE FUNCTION idem.emit(topic text, key text, value text,
                          header_names text[] DEFAULT NULL, header_values text[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT idem.emit(topic, convert_to(key, 'UTF8'), convert_to(value, 'UTF8'), header_names,
                     (SELECT array_agg(convert_to(v, 'UTF8') ORDER BY n)
                      FROM unnest(header_values) WITH ORDINALITY AS h(v, n)))
$$;

CREATE FUNCTION idem.emit(topic text, key text, value jsonb,
                          header_names text[] DEFAULT NULL, header_values text[] DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT idem.emit(topic, key, value::text, header_names, header_values)
$$;
