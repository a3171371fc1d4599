-- idemd schema, version 1.
-- Applied by `idemctl migrate` inside one transaction; the statements need not be re-runnable
-- because idem.schema_migrations records that this version is applied.

CREATE SCHEMA IF NOT EXISTS idem;

-- One row per business key that has been applied, per consumer (key namespace).
-- The primary key is the claim: INSERT ... ON CONFLICT DO NOTHING is the atomic check-and-act.
-- Not partitioned by time on purpose: a unique constraint on a partitioned table must include
-- the partition column, so a key applied on Monday could be claimed again in Tuesday's partition.
CREATE TABLE idem.processed_messages (
    consumer      text        NOT NULL,
    business_key  text        NOT NULL,
    topic         text        NOT NULL,
    partition     integer     NOT NULL,
    "offset"      bigint      NOT NULL,
    payload_hash  bytea,
    result        text,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, business_key)
);
-- Retention purges by age, in small batches.
CREATE INDEX processed_messages_processed_at ON idem.processed_messages (processed_at);

-- The database's own record of how far each partition got, advanced in the batch transaction,
-- with counters that are exact because they commit with the work they count:
-- consumed = applied + duplicates + quarantined.
CREATE TABLE idem.partition_progress (
    consumer     text        NOT NULL,
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    next_offset  bigint      NOT NULL,
    consumed     bigint      NOT NULL DEFAULT 0,
    applied      bigint      NOT NULL DEFAULT 0,
    duplicates   bigint      NOT NULL DEFAULT 0,
    quarantined  bigint      NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);

-- Messages that could not be applied, with their bytes, so nothing is ever dropped.
CREATE TABLE idem.quarantine (
    id               bigserial   PRIMARY KEY,
    consumer         text        NOT NULL,
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    business_key     text,
    msg_key          bytea,
    msg_value        bytea,
    header_names     text[],
    header_values    bytea[],
    msg_timestamp    timestamptz,
    reason           text        NOT NULL,
    sqlstate         text,
    attempts         integer     NOT NULL DEFAULT 1,
    first_failed_at  timestamptz NOT NULL DEFAULT now(),
    last_failed_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (consumer, topic, partition, "offset")
);

-- What retention has deleted: claims older than purged_before no longer exist, so a replay
-- reaching back past it could apply messages again.
CREATE TABLE idem.retention_horizon (
    consumer       text        PRIMARY KEY,
    purged_before  timestamptz NOT NULL
);
