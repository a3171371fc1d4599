-- idemd schema, version 9: events carry their message's trace context (ARCHITECTURE.md "Trace
-- context"). Applied by `idemctl migrate` inside one transaction, after version 8.
--
-- A message that comes with a W3C traceparent header continues its trace through what idemd
-- does for it: the events its handler emits, its reply and its dead letter carry a traceparent
-- of the same trace whose parent is idemd's span for that message (and its tracestate), so a
-- trace shows producer -> idemd -> downstream consumers.
--
-- Replies and dead letters are written by idemd's own statements, which add the headers. Events
-- are emitted by handlers, in one statement for many messages in set mode; idemd names each
-- applied message's trace context in a temporary table of its connection, pg_temp.idem_trace
-- (consumer, business key -> traceparent, tracestate: emptied at every commit), only for
-- messages that have one, and sets idem.traced in the transaction when it did. An event whose
-- message is named there gets the headers, unless its handler set a traceparent itself. Nothing
-- is read when the transaction has no trace context, and idem.emit() outside idemd is as before.
CREATE OR REPLACE FUNCTION idem.emit_event(business_key text, topic text, key bytea, value bytea,
                                           header_names text[], header_values bytea[])
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    c text := nullif(current_setting('idem.consumer', true), '');
    k text := coalesce(business_key, nullif(current_setting('idem.message', true), ''));
    names text[] := header_names;
    vals bytea[] := header_values;
    tp text;
    ts text;
    n integer := 0;
    r bigint;
BEGIN
    IF c IS NULL OR k IS NULL THEN
        INSERT INTO idem.outbox (topic, key, value, header_names, header_values)
        VALUES (emit_event.topic, emit_event.key, emit_event.value, names, vals)
        RETURNING id INTO r;
        RETURN r;
    END IF;
    IF current_setting('idem.traced', true) = 'on'
       AND NOT coalesce('traceparent' = ANY (names), false) THEN
        SELECT t.traceparent, t.tracestate INTO tp, ts
        FROM pg_temp.idem_trace t WHERE t.consumer = c AND t.business_key = k;
        IF tp IS NOT NULL THEN
            names := coalesce(names, '{}') || 'traceparent'::text;
            vals := coalesce(vals, '{}') || convert_to(tp, 'UTF8');
            IF ts IS NOT NULL AND NOT coalesce('tracestate' = ANY (header_names), false) THEN
                names := names || 'tracestate'::text;
                vals := vals || convert_to(ts, 'UTF8');
            END IF;
        END IF;
    END IF;
    LOOP
        INSERT INTO idem.outbox (topic, key, value, header_names, header_values, event_id)
        VALUES (emit_event.topic, emit_event.key, emit_event.value, names, vals,
                idem.event_id('emit', c, k, n::text))
        ON CONFLICT (event_id) DO NOTHING
        RETURNING id INTO r;
        IF r IS NOT NULL THEN
            RETURN r;
        END IF;
        n := n + 1;
    END LOOP;
END
$$;
