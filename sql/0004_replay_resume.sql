-- idemd schema, version 4: idemd resumes a partition from the database, and a replay is recorded there.
-- Applied by `idemctl migrate` inside one transaction, after version 3.
--
-- When a partition is assigned, idemd starts it at max(Kafka's committed offset, next_offset):
-- next_offset is where the database stopped, exactly, while Kafka's committed offset lags it by
-- up to auto.commit.interval.ms after a crash. A replay (`idemctl replay`) must therefore lower
-- next_offset too, or the range would not be read again. It does, and records in replay_to the
-- highest offset the partition had reached before (the end of the range read again), so that:
--   - duplicates below replay_to are classified as dup_replay (whoever made their claim), as
--     they were read again on purpose, and those at or above it as before;
--   - next_offset advances from the replay's start as the range is applied again, so a crash
--     during the replay resumes inside it, and nothing of the range is skipped.
-- The batch that takes next_offset to replay_to or beyond clears it (NULL: no replay pending).
ALTER TABLE idem.partition_progress
    ADD COLUMN replay_to bigint;
