-- idemd schema, version 2: failure handling (DESIGN §3).
-- Applied by `idemctl migrate` inside one transaction, after version 1.

-- Duplicates by kind, counted in the batch transaction like the other counters, so that
-- duplicates = dup_redelivery + dup_replay + dup_upstream:
--   dup_redelivery  the claim was made by this very message (same topic, partition and offset):
--                   Kafka delivered it again (a crash or a rebalance before the offset commit,
--                   or a replay of the message that made the claim);
--   dup_replay      the claim was made by another message, and this message's offset is below
--                   the partition's recorded progress: it was consumed before and is read again;
--   dup_upstream    the claim was made by another message and this one is new: the producer
--                   (or another partition or topic) sent the same business key again.
-- payload_mismatches counts the duplicates (of any kind, quarantined ones included) whose value
-- differs from the claim's (payload_hash), whatever routes[].on_payload_mismatch does with them.
--
-- halted_offset and halt_reason are set while the partition is stopped at a poison message
-- (routes[].on_poison: halt) and cleared by the next batch that commits past it.
ALTER TABLE idem.partition_progress
    ADD COLUMN dup_redelivery      bigint NOT NULL DEFAULT 0,
    ADD COLUMN dup_replay          bigint NOT NULL DEFAULT 0,
    ADD COLUMN dup_upstream        bigint NOT NULL DEFAULT 0,
    ADD COLUMN payload_mismatches  bigint NOT NULL DEFAULT 0,
    ADD COLUMN halted_offset       bigint,
    ADD COLUMN halt_reason         text;

-- Existing duplicates were never classified: count them as upstream so the sum still holds.
UPDATE idem.partition_progress SET dup_upstream = duplicates;

-- A quarantined message stays in the table after `idemctl quarantine retry` or `discard`, with
-- what became of it; only unresolved rows (resolved_at IS NULL) wait for an operator.
--   resolution 'applied'    retried, claimed and applied;
--              'duplicate'  retried, but its business key had been applied meanwhile;
--              'discarded'  dropped by an operator, never applied.
-- The same offset failing again (a replay) reopens the row.
ALTER TABLE idem.quarantine
    ADD COLUMN resolved_at  timestamptz,
    ADD COLUMN resolution   text CHECK (resolution IN ('applied', 'duplicate', 'discarded')),
    ADD CONSTRAINT quarantine_resolved CHECK ((resolved_at IS NULL) = (resolution IS NULL));
CREATE INDEX quarantine_open ON idem.quarantine (consumer, id) WHERE resolved_at IS NULL;
